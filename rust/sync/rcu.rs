// SPDX-License-Identifier: GPL-2.0

//! RCU grace periods.

use crate::bindings as b;

/// Waits until every RCU read-side critical section running now has ended
/// (`synchronize_rcu`). Sleeps: process context only.
pub fn synchronize() {
    // SAFETY: no preconditions beyond process context, which the caller guarantees.
    unsafe { b::synchronize_rcu() };
}
