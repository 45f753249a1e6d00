// SPDX-License-Identifier: GPL-2.0

//! A copy of an MR's mutable part that readers take without a lock: every access to an MR checks
//! its key, state and rights, so for the datapath the MR's IRQ-safe lock would be a round trip
//! per packet, for data that changes only on a REG_MR, an invalidation or a deregistration.
//!
//! A sequence count guards the copy: a writer (one at a time: it holds the MR's lock) makes it
//! odd, stores the fields and makes it even again; a reader retries until it saw the same even
//! count before and after its loads. A writer cannot be preempted or interrupted mid-update (it
//! holds an IRQ-safe lock), so a reader spins for a few stores at most.

use super::mr_table::{MrInfo, MrState};
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The copy of an [`MrInfo`], and whether the MR's deregistration has begun.
pub(super) struct InfoCopy {
    seq: AtomicU32,
    key: AtomicU32,
    access: AtomicU32,
    iova: AtomicU64,
    length: AtomicU64,
    valid: AtomicBool,
    closing: AtomicBool,
}

impl InfoCopy {
    /// A copy of `i`, of an MR not being deregistered.
    pub(super) fn new(i: &MrInfo) -> Self {
        Self {
            seq: AtomicU32::new(0),
            key: AtomicU32::new(i.key),
            access: AtomicU32::new(i.access),
            iova: AtomicU64::new(i.iova),
            length: AtomicU64::new(i.length),
            valid: AtomicBool::new(i.state == MrState::Valid),
            closing: AtomicBool::new(false),
        }
    }

    /// Replaces the copy. Only with the MR's lock held, so that writers take turns.
    pub(super) fn store(&self, i: &MrInfo, closing: bool) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        // The odd count is seen before any field changes.
        fence(Ordering::Release);
        self.key.store(i.key, Ordering::Relaxed);
        self.access.store(i.access, Ordering::Relaxed);
        self.iova.store(i.iova, Ordering::Relaxed);
        self.length.store(i.length, Ordering::Relaxed);
        self.valid
            .store(i.state == MrState::Valid, Ordering::Relaxed);
        self.closing.store(closing, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The copy, as the last writer left it: the MR's info and whether its deregistration has
    /// begun. Any context.
    pub(super) fn load(&self) -> (MrInfo, bool) {
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                let i = MrInfo {
                    key: self.key.load(Ordering::Relaxed),
                    access: self.access.load(Ordering::Relaxed),
                    iova: self.iova.load(Ordering::Relaxed),
                    length: self.length.load(Ordering::Relaxed),
                    state: if self.valid.load(Ordering::Relaxed) {
                        MrState::Valid
                    } else {
                        MrState::Free
                    },
                };
                let closing = self.closing.load(Ordering::Relaxed);
                // The loads above are done before the count is read again.
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s {
                    return (i, closing);
                }
            }
            core::hint::spin_loop();
        }
    }
}
