// SPDX-License-Identifier: GPL-2.0

//! RCU grace periods and bottom-half-disabled (RCU read-side) sections.

use crate::bindings as b;

/// Waits until every RCU read-side critical section running now has ended
/// (`synchronize_rcu`). Sleeps: process context only.
pub fn synchronize() {
    // SAFETY: no preconditions beyond process context, which the caller guarantees.
    unsafe { b::synchronize_rcu() };
}

/// Runs `f` with bottom halves disabled, as a softirq handler runs: locks that the receive path
/// takes in softirq context may then be taken in process context too, and `f` is an RCU
/// read-side critical section (`synchronize_rcu` waits for bottom-half-disabled regions).
/// Bottom halves are enabled again before returning, which runs the softirqs raised meanwhile.
///
/// Process or softirq context, interrupts enabled.
pub fn with_bh_disabled<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the caller runs where bottom halves may be disabled (see above); the matching
    // enable follows on the only path out.
    unsafe { b::rvr_local_bh_disable() };
    let r = f();
    // SAFETY: pairs with the disable above, in the same context.
    unsafe { b::rvr_local_bh_enable() };
    r
}
