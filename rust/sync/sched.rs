// SPDX-License-Identifier: GPL-2.0

//! What a task that waits by spinning asks the scheduler.

use crate::bindings as b;

/// Whether another task wants this CPU now (`need_resched`): a task spinning in process context
/// stops and returns. (A lazy request, a fair task's, is not seen here: the tick preempts the
/// spinner for it.)
pub fn need_resched() -> bool {
    // SAFETY: the helper only reads this task's flags; any context.
    unsafe { b::rvr_need_resched() }
}

/// The CPU this task runs on (`raw_smp_processor_id`). Stable only where the task cannot
/// migrate (a per-CPU work item, or with preemption or bottom halves off); elsewhere a hint.
pub fn current_cpu() -> u32 {
    // SAFETY: the helper only reads this CPU's number; any context.
    unsafe { b::rvr_raw_this_cpu() }
}
