// SPDX-License-Identifier: GPL-2.0

//! Protection domains: an identity that MRs, QPs, SRQs and AHs are checked against.

use super::device::RvrDevice;
use super::limits::{Quota, Res};
use crate::ib::{device::Device, pd::PdVerbs, udata::Udata};
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// rvrdma's data of a PD.
pub struct RvrPd {
    /// Device-unique, never reused while the module is loaded (wraps only after 2^32 PDs).
    pub id: u32,
    /// Allocated by a user process (else by a kernel caller).
    user: bool,
    /// Counts against the device's PD limit while the PD lives.
    _quota: Quota,
}

impl PdVerbs for RvrDevice {
    type Pd = RvrPd;

    fn alloc_pd(dev: &Device<Self>, udata: Option<&mut Udata<'_>>) -> Result<RvrPd> {
        let quota = Quota::take(&dev.data().shared, Res::Pd)?;
        let id = dev.data().next_pd_id.fetch_add(1, Ordering::Relaxed);
        let user = udata.is_some();
        if user {
            dev.data().user_pds.fetch_add(1, Ordering::Relaxed);
        }
        Ok(RvrPd {
            id,
            user,
            _quota: quota,
        })
    }

    fn dealloc_pd(dev: &Device<Self>, pd: RvrPd) {
        if pd.user {
            dev.data().user_pds.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
