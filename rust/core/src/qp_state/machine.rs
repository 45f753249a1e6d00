//! [`QpStateMachine`]: the current state, the Modify QP verb on top of the transition table,
//! the transitions the QP makes by itself, and the [`Transition`] side effects for the engines.

use super::table::{CUR, SQD_NOTIFY, STATE};
use super::{check_modify, AttrMask, ModifyError, PostVerdict, QpState, QpType};

/// An async event the state machine itself decides on; the values are the kernel's
/// `enum ib_event_type`, so the engine maps it to its own event type with a cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StateEvent {
    /// `IB_EVENT_COMM_EST`: the first packet arrived while the QP is in RTR.
    CommEst = 4,
    /// `IB_EVENT_SQ_DRAINED`: the SQ drain in SQD finished and the consumer asked to be told.
    SqDrained = 5,
}

/// The values a `modify_qp` call carries besides the mask, as far as the state machine needs
/// them. Each field is read only when its mask bit is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyParams {
    /// `cur_qp_state` (read with `IB_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// `en_sqd_async_notify` (read with `IB_QP_EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
}

impl ModifyParams {
    /// No extra values (for masks without `IB_QP_CUR_STATE` and `IB_QP_EN_SQD_ASYNC_NOTIFY`).
    pub const NONE: ModifyParams = ModifyParams {
        cur_qp_state: QpState::Reset,
        en_sqd_async_notify: false,
    };
}

impl Default for ModifyParams {
    fn default() -> Self {
        ModifyParams::NONE
    }
}

/// The side effects of a state change that the engines (SQ logic, RQ logic, timers) must carry
/// out. Every flag is independent; the order to apply them is the field order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: QpState,
    /// The state after.
    pub to: QpState,
    /// Entering Reset from another state: discard every WQE of both queues without completions,
    /// forget PSNs, MSN, the responder's read/atomic queue and any partial message, and reset
    /// the APM state (`Apm::reset`). The QP is as after Create QP.
    pub reset_queues: bool,
    /// Stop the retransmit (local ACK timeout) and RNR timers.
    pub stop_timers: bool,
    /// Complete every outstanding SQ WQE, oldest first, with `IB_WC_WR_FLUSH_ERR` (Error; SQE:
    /// after the WQE that failed has completed with its own error status).
    pub flush_sq: bool,
    /// Complete every outstanding RQ WQE, oldest first, with `IB_WC_WR_FLUSH_ERR` (Error).
    /// A QP attached to an SRQ flushes nothing of the SRQ and raises
    /// `IB_EVENT_QP_LAST_WQE_REACHED` instead (see `last_wqe_reached`).
    pub flush_rq: bool,
    /// Entering Error from a live state: a QP attached to an SRQ must raise
    /// `IB_EVENT_QP_LAST_WQE_REACHED` (IBA 11.6.3.1) once its last WQE is done.
    pub last_wqe_reached: bool,
    /// RTS -> SQD: the SQ logic starts no new message, finishes the ones in flight (including
    /// their ACKs and read responses) and then calls [`QpStateMachine::sq_drained`].
    pub start_drain: bool,
    /// Entering RTS: schedule the SQ logic, WQEs posted earlier (held in SQD) may be waiting.
    pub kick_sq: bool,
}

impl Transition {
    /// A transition that changes nothing (`from == to`, no side effect).
    pub const fn none(state: QpState) -> Transition {
        Transition {
            from: state,
            to: state,
            reset_queues: false,
            stop_timers: false,
            flush_sq: false,
            flush_rq: false,
            last_wqe_reached: false,
            start_drain: false,
            kick_sq: false,
        }
    }

    /// Whether the state changes.
    pub const fn changes_state(&self) -> bool {
        self.from as u8 != self.to as u8
    }
}

/// The state of one QP and the rules that go with it.
///
/// Use [`QpStateMachine::modify`] for the Modify QP verb, [`QpStateMachine::enter_error`] and
/// [`QpStateMachine::on_send_error`] for transitions the QP makes by itself, and the `post_*`,
/// `rq_processes_inbound`, `sq_*` predicates in the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpStateMachine {
    state: QpState,
    qp_type: QpType,
    en_sqd_async_notify: bool,
    draining: bool,
    comm_est_pending: bool,
}

impl QpStateMachine {
    /// A new QP in Reset (the state after Create QP).
    pub const fn new(qp_type: QpType) -> QpStateMachine {
        QpStateMachine {
            state: QpState::Reset,
            qp_type,
            en_sqd_async_notify: false,
            draining: false,
            comm_est_pending: false,
        }
    }

    /// The current state.
    pub const fn state(&self) -> QpState {
        self.state
    }

    /// The QP type.
    pub const fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Whether the last RTS -> SQD asked for `IB_EVENT_SQ_DRAINED` (query_qp reports it).
    pub const fn en_sqd_async_notify(&self) -> bool {
        self.en_sqd_async_notify
    }

    /// In SQD with messages still in flight (query_qp's `sq_draining`).
    pub const fn is_draining(&self) -> bool {
        self.draining
    }

    /// See [`QpState::post_send`].
    pub const fn post_send(&self) -> PostVerdict {
        self.state.post_send()
    }

    /// See [`QpState::post_recv`].
    pub const fn post_recv(&self) -> PostVerdict {
        self.state.post_recv()
    }

    /// See [`QpState::rq_processes_inbound`].
    pub const fn rq_processes_inbound(&self) -> bool {
        self.state.rq_processes_inbound()
    }

    /// See [`QpState::sq_starts_new_requests`].
    pub const fn sq_starts_new_requests(&self) -> bool {
        self.state.sq_starts_new_requests()
    }

    /// See [`QpState::sq_continues_in_flight`].
    pub const fn sq_continues_in_flight(&self) -> bool {
        self.state.sq_continues_in_flight()
    }

    /// Validate a Modify QP without changing anything and return the transition it would make.
    ///
    /// `next` is the requested state (`attr->qp_state`), or the current state when the mask has
    /// no `IB_QP_STATE`. On top of [`check_modify`]:
    /// - with `IB_QP_CUR_STATE`, `params.cur_qp_state` must equal the actual state
    ///   ([`ModifyError::CurStateMismatch`]);
    /// - SQD -> SQD with attributes is refused while the SQ is still draining
    ///   ([`ModifyError::SqStillDraining`]).
    ///
    /// APM attributes (`IB_QP_ALT_PATH`, `IB_QP_PATH_MIG_STATE`) need `Apm::check_modify` too:
    /// call both `plan`s first, then both commits, so a refused call changes nothing.
    pub fn plan(
        &self,
        next: QpState,
        mask: AttrMask,
        params: &ModifyParams,
    ) -> Result<Transition, ModifyError> {
        let cur = self.state;
        check_modify(cur, next, self.qp_type, mask)?;
        if mask.contains(CUR) && params.cur_qp_state != cur {
            return Err(ModifyError::CurStateMismatch {
                given: params.cur_qp_state,
                actual: cur,
            });
        }
        if cur == QpState::Sqd
            && next == QpState::Sqd
            && self.draining
            && !mask.difference(STATE.union(CUR)).is_empty()
        {
            return Err(ModifyError::SqStillDraining);
        }
        Ok(self.transition_to(next))
    }

    /// Apply a transition returned by [`QpStateMachine::plan`] (or by `modify`, which already
    /// applied it). `mask`/`params` are those given to `plan`; they carry the SQD notify flag.
    pub fn commit(&mut self, t: &Transition, mask: AttrMask, params: &ModifyParams) {
        self.apply(t);
        if t.start_drain {
            self.en_sqd_async_notify = mask.contains(SQD_NOTIFY) && params.en_sqd_async_notify;
        }
    }

    /// The Modify QP verb: [`QpStateMachine::plan`] then [`QpStateMachine::commit`].
    pub fn modify(
        &mut self,
        next: QpState,
        mask: AttrMask,
        params: &ModifyParams,
    ) -> Result<Transition, ModifyError> {
        let t = self.plan(next, mask, params)?;
        self.commit(&t, mask, params);
        Ok(t)
    }

    /// The QP moves itself to Error (fatal error, RC retry/RNR exhaustion, remote access or
    /// operation error, CQ overrun, ...). From Reset or Error nothing happens.
    pub fn enter_error(&mut self) -> Transition {
        if matches!(self.state, QpState::Reset | QpState::Error) {
            return Transition::none(self.state);
        }
        let t = self.transition_to(QpState::Error);
        self.apply(&t);
        t
    }

    /// A send WQE completed in error. UD and UC QPs (and QP1) move from RTS or SQD to SQE: the
    /// SQ is flushed, the RQ keeps working. An RC or XRC QP moves to Error (IBA 10.3.1: an RC
    /// QP has no SQE state). In other states nothing happens.
    pub fn on_send_error(&mut self) -> Transition {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Transition::none(self.state);
        }
        if !self.qp_type.has_sqe_state() {
            return self.enter_error();
        }
        let t = self.transition_to(QpState::Sqe);
        self.apply(&t);
        t
    }

    /// The SQ logic reports that the drain is over: in SQD, every message begun before the
    /// RTS -> SQD has completed (ACKed and its CQE written). Returns
    /// `Some(StateEvent::SqDrained)` if the consumer asked for the event
    /// (`en_sqd_async_notify`), `None` otherwise or when not draining (so a second call raises
    /// nothing).
    pub fn sq_drained(&mut self) -> Option<StateEvent> {
        if self.state != QpState::Sqd || !self.draining {
            return None;
        }
        self.draining = false;
        if self.en_sqd_async_notify {
            Some(StateEvent::SqDrained)
        } else {
            None
        }
    }

    /// Called for every inbound packet the QP accepts (after header and path checks). Returns
    /// `Some(StateEvent::CommEst)` for the first one received in RTR since the QP entered RTR
    /// (IBA 11.6.3.1 "Communication Established"); `None` otherwise.
    pub fn on_inbound_packet(&mut self) -> Option<StateEvent> {
        if self.state == QpState::Rtr && self.comm_est_pending {
            self.comm_est_pending = false;
            Some(StateEvent::CommEst)
        } else {
            None
        }
    }

    /// The side effects of moving from the current state to `to` (no checks).
    const fn transition_to(&self, to: QpState) -> Transition {
        let from = self.state;
        let mut t = Transition::none(from);
        t.to = to;
        let changes = from as u8 != to as u8;
        match to {
            QpState::Reset => {
                t.reset_queues = changes;
                t.stop_timers = changes;
            }
            QpState::Error => {
                t.stop_timers = changes;
                t.flush_sq = changes;
                t.flush_rq = changes;
                t.last_wqe_reached = changes;
            }
            QpState::Sqe => {
                t.flush_sq = changes;
            }
            QpState::Sqd => {
                t.start_drain = matches!(from, QpState::Rts);
            }
            QpState::Rts => {
                t.kick_sq = true;
            }
            QpState::Init | QpState::Rtr => {}
        }
        t
    }

    fn apply(&mut self, t: &Transition) {
        self.state = t.to;
        if t.start_drain {
            self.draining = true;
        } else if t.to != QpState::Sqd {
            self.draining = false;
        }
        if t.to != QpState::Sqd {
            self.en_sqd_async_notify = false;
        }
        if t.from != QpState::Rtr && t.to == QpState::Rtr {
            self.comm_est_pending = true;
        } else if t.to != QpState::Rtr {
            self.comm_est_pending = false;
        }
    }
}
