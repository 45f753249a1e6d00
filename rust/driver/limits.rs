// SPDX-License-Identifier: GPL-2.0

//! The per-device limits of the objects no table of ours bounds: PDs, CQs, AHs and SRQs. What
//! `query_device` advertises for them is enforced here (QPs and MRs are bounded by their
//! tables), so a verb past the limit fails with ENOMEM, the errno the verbs man pages give for
//! a device out of resources.

use super::dev_shared::{DevShared, MAX_USER_AHS};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

/// A kind of counted object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Res {
    /// Protection domains.
    Pd = 0,
    /// Completion queues.
    Cq = 1,
    /// Address handles, kernel and user (a user AH also needs a slot in the AH table).
    Ah = 2,
    /// Shared receive queues.
    Srq = 3,
}

impl Res {
    /// The most objects of this kind one device holds at once (what `query_device` says).
    pub const fn max(self) -> u32 {
        match self {
            Res::Pd => 0x7ff0,
            Res::Cq => 0x4000,
            Res::Ah => MAX_USER_AHS as u32,
            Res::Srq => 0x400,
        }
    }
}

/// How many objects of each kind a device holds now.
#[derive(Default)]
pub struct Limits {
    used: [AtomicU32; 4],
}

impl Limits {
    fn take(&self, r: Res) -> Result {
        self.used[r as usize]
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < r.max()).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| ENOMEM)
    }

    fn give(&self, r: Res) {
        self.used[r as usize].fetch_sub(1, Ordering::Relaxed);
    }

    /// How many objects of kind `r` the device holds.
    pub fn used(&self, r: Res) -> u32 {
        self.used[r as usize].load(Ordering::Relaxed)
    }
}

/// One object counted against its device's limit, given back when the object (which holds the
/// quota) is dropped. Any context.
pub struct Quota {
    dev: Arc<DevShared>,
    res: Res,
}

impl Quota {
    /// Counts one more object of kind `res` on `dev`; ENOMEM if the device holds its maximum.
    pub fn take(dev: &Arc<DevShared>, res: Res) -> Result<Quota> {
        dev.limits.take(res)?;
        Ok(Quota {
            dev: dev.clone(),
            res,
        })
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        self.dev.limits.give(self.res);
    }
}
