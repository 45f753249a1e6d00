// SPDX-License-Identifier: GPL-2.0

//! Address handles: the resolved address vector of a datagram destination. Kernel callers
//! name the AH in their UD work requests; user space names it by the number `create_ah`
//! returned (rdma-core's rxe provider writes `ah_num` into the WQE, and treats 0 as an old
//! kernel), which the device's user AH table resolves.

use super::dev_shared::{DevShared, UserAh};
use super::device::RvrDevice;
use super::limits::{Quota, Res};
use crate::ib::{ah::AhVerbs, pd::Pd, qp::PathAttr, uabi::CreateAhResp, udata::Udata};
use kernel::{prelude::*, sync::Arc};

/// rvrdma's data of an AH.
pub struct RvrAh {
    /// The address vector.
    pub path: PathAttr,
    /// The AH number reported to user space (0: a kernel AH, not in the table).
    pub ah_num: u32,
    /// PD identity.
    pub pd_id: u32,
    /// The device whose user AH table holds a user AH.
    table: Option<Arc<DevShared>>,
    /// Counts against the device's AH limit while the AH lives.
    _quota: Quota,
}

impl AhVerbs for RvrDevice {
    type Ah = RvrAh;

    fn create_ah(pd: &Pd<Self>, path: PathAttr, udata: Option<&mut Udata<'_>>) -> Result<RvrAh> {
        if path.port_num == 0 || path.port_num > pd.device().data().nports() {
            return Err(EINVAL);
        }
        let pd_id = pd.data().id;
        let quota = Quota::take(&pd.device().data().shared, Res::Ah)?;
        let Some(u) = udata else {
            // A kernel AH (maybe atomic context): nothing to allocate or register.
            return Ok(RvrAh {
                path,
                ah_num: 0,
                pd_id,
                table: None,
                _quota: quota,
            });
        };
        let shared = pd.device().data().shared.clone();
        let ah_num = shared.insert_ah(UserAh {
            pd_id,
            path: path.to_info(0, 0),
        })?;
        if let Err(e) = u.respond(&CreateAhResp {
            ah_num,
            reserved: 0,
        }) {
            shared.remove_ah(ah_num);
            return Err(e);
        }
        Ok(RvrAh {
            path,
            ah_num,
            pd_id,
            table: Some(shared),
            _quota: quota,
        })
    }

    fn ah_path(ah: &RvrAh) -> PathAttr {
        ah.path
    }

    fn destroy_ah(ah: RvrAh) {
        if let Some(t) = ah.table {
            t.remove_ah(ah.ah_num);
        }
    }
}
