//! rvrdma's protocol core: the InfiniBand RC transport over RoCEv2 as a pure, sans-IO engine.
//!
//! Nothing here touches memory it does not own, reads a clock, allocates or does I/O: verbs,
//! received packets, timer expiries and the current time come in; packets to send, completions,
//! async events and timers to arm come out. The same files build into the kernel module (through
//! `#[path]`, where this file is a module rather than a crate root) and into this host crate,
//! which is tested with `cargo test`, property tests and a deterministic two-peer simulation.
//!
//! Map of the files (spec names in brackets):
//! - [`psn`]: 24-bit packet sequence number arithmetic and windows.
//! - [`credit`]: end-to-end credit encoding (Table 17-8), MSN/LSN.
//! - [`wire`]: header codecs (BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH) and
//!   the opcode table.
//! - [`icrc`]: the RoCEv2 invariant CRC.
//! - [`qp_state`]: the QP state machine and `modify_qp` attribute rules.
//! - [`apm`]: Automatic Path Migration state (Migrated, Rearm, Armed).
//! - [`wqe`], [`sg_pool`], [`events`]: work requests and their scatter/gather storage,
//!   completions, async events and the actions the engine emits.
//! - [`requester`], [`completer`], [`responder`]: SQ logic (send and ACK handling) and RQ logic.
//! - [`qp`]: one RC/UC/UD queue pair tying the above together.
#![cfg_attr(not(CONFIG_RUST), no_std)]
#![forbid(unsafe_code)]

pub mod apm;
pub mod completer;
pub mod credit;
pub mod events;
pub mod icrc;
pub mod memory;
pub mod mw;
pub mod psn;
pub mod qp;
pub mod qp_state;
pub mod requester;
pub mod responder;
pub mod sg_pool;
pub mod wire;
pub mod wqe;
