// SPDX-License-Identifier: GPL-2.0

//! How long a QP's work items wait between being queued and running: the device keeps the
//! longest wait seen (`work_delay_max_us`, `rx_queue_delay_max_us`, `tx_handoff_delay_max_us`,
//! `timer_delay_max_us`). A wait near the Local ACK Timeout is how a busy host turns a clean
//! link into retransmissions.

use crate::sync::clock::now_ns;
use core::sync::atomic::{AtomicU64, Ordering};

/// When a work item was queued and has not run since (0: not measured).
#[derive(Default)]
pub(crate) struct QueuedAt(AtomicU64);

impl QueuedAt {
    /// Notes that the work item is being queued, unless a queuing not yet run is noted: the
    /// wait is measured from the first. Any context.
    pub(super) fn mark(&self) {
        if self.0.load(Ordering::Relaxed) == 0 {
            let _ =
                self.0
                    .compare_exchange(0, now_ns().max(1), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The work item runs (or, for a hand-off, the stream is sent): raises `max`
    /// (microseconds) to its wait. A queuing that happens after the workqueue took the item
    /// and before this call is not measured, so `max` is a lower bound. Looks before it
    /// writes: most calls find nothing noted.
    pub(super) fn ran(&self, max: &AtomicU64) {
        if self.0.load(Ordering::Relaxed) == 0 {
            return;
        }
        let t = self.0.swap(0, Ordering::Relaxed);
        if t != 0 {
            max.fetch_max(now_ns().saturating_sub(t) / 1000, Ordering::Relaxed);
        }
    }
}
