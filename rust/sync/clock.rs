// SPDX-License-Identifier: GPL-2.0

//! The protocol core's clock: monotonic nanoseconds.

use crate::bindings as b;

/// Monotonic time in nanoseconds (`ktime_get`).
pub fn now_ns() -> u64 {
    // SAFETY: `ktime_get` has no preconditions and may be called from any context.
    let t = unsafe { b::ktime_get() };
    u64::try_from(t).unwrap_or(0)
}
