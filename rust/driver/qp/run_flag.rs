// SPDX-License-Identifier: GPL-2.0

//! Whether a work item is queued and its run has not begun, so that a producer whose work that
//! run will take (a packet queued for it) makes no call into the workqueue: on a stream, nearly
//! every packet finds the item queued already, and the call (and the `Arc` clone it takes and
//! drops) is most of what queueing a packet costs.
//!
//! The producer queues its work, then [`RunFlag::claim`]s the flag and queues the item only if
//! it won the claim; a run [`RunFlag::begin`]s before it looks for work. A fence on each side
//! orders the two: a producer that finds the flag set queued its work before the run's look,
//! which then finds it.

use core::sync::atomic::{fence, AtomicBool, Ordering};

/// Set only by the [`RunFlag::claim`] whose caller then queues the item, so a run is coming
/// whenever it is set; cleared as that run begins.
pub(super) struct RunFlag(AtomicBool);

impl RunFlag {
    /// A clear flag.
    pub(super) const fn new() -> Self {
        Self(AtomicBool::new(false))
    }

    /// After the caller queued its work: true when the caller is to queue the work item
    /// (no run is coming that has not begun). Looks before it writes, so that the producers
    /// of a stream do not pass the flag's cache line around.
    pub(super) fn claim(&self) -> bool {
        fence(Ordering::SeqCst);
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::Relaxed)
    }

    /// A run begins, before it looks for work: work queued from now on queues the item again.
    pub(super) fn begin(&self) {
        self.0.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }
}
