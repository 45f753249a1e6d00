// SPDX-License-Identifier: GPL-2.0

//! Bottom halves off for process-context code that runs the softirq receive path: the locks it
//! shares with softirq must then be taken as the softirq takes them, and what it transmits
//! into the CPU's backlog is worked through when they come back on.

use crate::bindings as b;

/// Bottom halves are off on this CPU for as long as a borrow of it lives: the task stays on
/// this CPU, and what it transmits into the CPU's backlog waits until they come back on. Only
/// [`with_bh_disabled`] makes one, and only lends it out.
pub struct BhOff(core::marker::PhantomData<*mut ()>);

/// Runs `f` with bottom halves disabled on this CPU, and an RCU read-side section around it
/// (what the UDP layer's receive path provides). When bottom halves are enabled again, the
/// softirqs `f` raised run.
///
/// Process context, or softirq context (where it nests), interrupts enabled.
pub fn with_bh_disabled<R>(f: impl FnOnce(&BhOff) -> R) -> R {
    // SAFETY: the caller is in process or softirq context with interrupts enabled, where
    // bottom halves may be disabled (in softirq the count nests); the matching enable is below.
    unsafe { b::rvr_local_bh_disable() };
    let rcu = kernel::sync::rcu::read_lock();
    // INVARIANT: bottom halves are off until the enable below, after `f` (and so every borrow
    // of `off`) has ended; the marker keeps `off` on this task.
    let off = BhOff(core::marker::PhantomData);
    let r = f(&off);
    drop(rcu);
    // SAFETY: pairs with the disable above, in the same context.
    unsafe { b::rvr_local_bh_enable() };
    r
}
