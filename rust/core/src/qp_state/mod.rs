//! The IBA QP state machine (IBA Ch. 10.3, 11.2.5) and the `modify_qp` attribute rules.
//!
//! Two layers:
//! - [`check_modify`]: the pure transition table. Which `cur -> next` transitions exist and,
//!   per QP type, which attributes each one requires and which it allows. It encodes the same
//!   rules as the kernel's `ib_modify_qp_is_ok()` (`drivers/infiniband/core/verbs.c`), written
//!   out as one readable table of rows, see [`transition_rule`].
//! - [`QpStateMachine`]: the current state plus the operational rules of each state (may a WR
//!   be posted, does the RQ logic process inbound packets, may the SQ logic start a new request)
//!   and [`QpStateMachine::modify`], which validates a verb call and returns the side effects the
//!   engines must perform as a [`Transition`] value. Nothing is called back.
//!
//! Numbers mirror the kernel: [`QpState`] is `enum ib_qp_state`, [`QpType`] is
//! `enum ib_qp_type`, [`AttrMask`] bits are `enum ib_qp_attr_mask`.
//!
//! Where the spec text and Linux differ, Linux wins for the attribute table (every verbs
//! consumer, rdma-core and rxe included, is written against it):
//! - Reset -> Error does not exist (the spec's "any state -> Error" starts at Init).
//! - Init -> RTR (seed 004, Table 12-3) lists Local ACK Timeout, Retry Count and RNR Retry in
//!   the address vector; Linux takes them in RTR -> RTS (required there for RC, refused in
//!   Init -> RTR). Linux also requires Min RNR NAK Timer for RC in Init -> RTR (the table says
//!   optional) and never accepts `IB_QP_CAP` (the table allows a resize everywhere).
//!
//! Rules added on top of the table ([`QpStateMachine::plan`]): `IB_QP_CUR_STATE` must name the
//! actual state (IBA "invalid current QP state"); SQD -> SQD may change attributes only after
//! the drain has finished (IBA 10.3.1: the SQD state exists so attributes change with nothing in
//! flight). SQD -> RTS while still draining is allowed and ends the drain without SQ_DRAINED.
//!
//! Files: `state.rs` (the states and QP types with the per-state operational rules),
//! `attr_mask.rs` (the `modify_qp` attribute bits), `table.rs` (the transition table and
//! [`check_modify`]), `machine.rs` ([`QpStateMachine`] and the [`Transition`] side effects);
//! the unit tests are in `tests/`.

mod attr_mask;
mod machine;
mod state;
mod table;
#[cfg(test)]
mod tests;

pub use attr_mask::AttrMask;
pub use machine::{ModifyParams, QpStateMachine, StateEvent, Transition};
pub use state::{PostVerdict, QpState, QpType};
pub use table::{check_modify, transition_rule, ModifyError, TransitionRule};
