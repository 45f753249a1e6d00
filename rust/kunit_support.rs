// SPDX-License-Identifier: GPL-2.0

//! What rvrdma's KUnit suites need beyond the kernel crate's `kunit` module: skipping a case.

use crate::bindings as b;
use kernel::prelude::*;

/// Marks the running KUnit case as skipped, with `reason` as its KTAP comment
/// (`ok N case # SKIP reason`), so that a case that could not run does not report a pass. The
/// case should return right after. Outside a KUnit case it does nothing.
pub(crate) fn skip(reason: &CStr) {
    // SAFETY: `reason` is NUL-terminated and outlives the call; the helper copies it and checks
    // that a KUnit test is running in this task before touching it.
    unsafe { b::rvr_kunit_skip_current(reason.as_char_ptr()) };
}
