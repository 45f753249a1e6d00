//! Unit tests of the seed rules, each named after its seed, on a pair of QPs wired back to back
//! where the test decides which packet goes where.
//!
//! `fixtures.rs` has the pair and the helpers every file shares; the tests are by topic:
//! `credits.rs` (seed 003), `nak_classes.rs` and `remote_access.rs` (seed 001, the responder's
//! error classes), `requester.rs` (the SQ logic, completer and send window), `retries.rs`
//! (seed 000, the retry count), `apm.rs` (seeds 000 and 002), `bonding.rs` (seed 002's
//! automatic alternate paths, failover and re-arm), `state.rs` (seed 004 and the
//! state machine), `memory_windows.rs` (binding, using and invalidating memory windows),
//! `uc_ud.rs` (the unreliable transports), `hostile.rs` (a hostile peer) and
//! `regressions.rs` (bugs found by the simulation and fuzzing).

mod apm;
mod atomic_write_flush;
mod bonding;
mod credits;
mod fixtures;
mod hostile;
mod memory_windows;
mod nak_classes;
mod odp;
mod regressions;
mod remote_access;
mod requester;
mod retries;
mod solicited;
mod state;
mod uc_ud;
