// SPDX-License-Identifier: GPL-2.0

//! Address handles: the resolved address vector and the number user space names it by.
//! UD QPs, which use them, come later; the verbs are complete so that applications creating
//! AHs (and rdma-core's provider, which needs a non-zero `ah_num`) work today.

use super::device::RvrDevice;
use crate::ib::{ah::AhVerbs, pd::Pd, qp::PathAttr, uabi::CreateAhResp, udata::Udata};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;

/// AH numbers (never 0: rdma-core treats 0 as "old kernel").
static NEXT_AH_NUM: AtomicU32 = AtomicU32::new(1);

/// rvrdma's data of an AH.
pub struct RvrAh {
    /// The address vector.
    pub path: PathAttr,
    /// The AH number reported to user space.
    pub ah_num: u32,
    /// PD identity.
    pub pd_id: u32,
}

impl AhVerbs for RvrDevice {
    type Ah = RvrAh;

    fn create_ah(pd: &Pd<Self>, path: PathAttr, udata: Option<&mut Udata<'_>>) -> Result<RvrAh> {
        if path.port_num == 0 || path.port_num > pd.device().data().nports() {
            return Err(EINVAL);
        }
        let mut ah_num = NEXT_AH_NUM.fetch_add(1, Ordering::Relaxed);
        if ah_num == 0 {
            ah_num = NEXT_AH_NUM.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(u) = udata {
            u.respond(&CreateAhResp {
                ah_num,
                reserved: 0,
            })?;
        }
        Ok(RvrAh {
            path,
            ah_num,
            pd_id: pd.data().id,
        })
    }

    fn ah_path(ah: &RvrAh) -> PathAttr {
        ah.path
    }

    fn destroy_ah(_ah: RvrAh) {}
}
