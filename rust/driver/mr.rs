// SPDX-License-Identifier: GPL-2.0

//! The memory-region verbs: user MRs (pinned pages), DMA MRs and fast-registration MRs of
//! kernel ULPs. See [`super::mr_table`] for keys, the table and lifetimes.

use super::{
    device::RvrDevice,
    mr_table::{MrInfo, MrMem, MrState, RvrMr, ACCESS_REMOTE, ACCESS_SUPPORTED_MR},
};
use crate::ib::{
    device::Device,
    mr::{KernelMemory, MrKeys, MrVerbs, PageList},
    pd::Pd,
    udata::Udata,
    umem::{Umem, UmemPin},
};
use kernel::{prelude::*, sync::Arc};

/// rvrdma's data of an MR (owned by ib_core's `ib_mr`).
///
/// Field order matters: `mr` is dropped before `pin`, whose drop waits for the last reference
/// to the MR's pages.
pub struct RvrMrHandle {
    mr: Arc<RvrMr>,
    pin: Option<UmemPin>,
}

impl RvrMrHandle {
    /// The MR.
    pub fn mr(&self) -> &Arc<RvrMr> {
        &self.mr
    }

    /// The handle REG_MR work requests carry (`RegMrParams::mr_handle`): the table index.
    pub fn handle(&self) -> u64 {
        u64::from(self.mr.index())
    }
}

/// Adds an MR of `pd` with memory `mem` to the device's table.
fn add(
    pd: &Pd<RvrDevice>,
    mem: MrMem,
    access: u32,
    iova: u64,
    length: u64,
    state: MrState,
) -> Result<(Arc<RvrMr>, MrKeys)> {
    let pd_id = pd.data().id;
    let mr = pd.device().data().mrs.insert(|index, key| {
        RvrMr::new(
            index,
            pd_id,
            mem,
            MrInfo {
                key,
                access,
                iova,
                length,
                state,
            },
        )
    })?;
    let key = mr.info().key;
    Ok((
        mr,
        MrKeys {
            lkey: key,
            rkey: key,
        },
    ))
}

impl MrVerbs for RvrDevice {
    type Mr = RvrMrHandle;

    fn reg_user_mr(
        pd: &Pd<Self>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result<(RvrMrHandle, MrKeys)> {
        // ib_core already refused remote write or atomic without local write (EINVAL) and
        // on-demand paging (EOPNOTSUPP, not advertised); the rest as rxe.
        if access & !ACCESS_SUPPORTED_MR != 0 {
            return Err(crate::errno::eopnotsupp());
        }
        if length == 0 {
            return Err(EINVAL);
        }
        let (pin, pages) = Umem::pin(pd.device(), start, length, access)?;
        // On failure `pages` is dropped inside `add`, before `pin` here: no wait.
        let (mr, keys) = add(pd, MrMem::User(pages), access, iova, length, MrState::Valid)?;
        Ok((RvrMrHandle { mr, pin: Some(pin) }, keys))
    }

    fn get_dma_mr(pd: &Pd<Self>, access: u32, mem: KernelMemory) -> Result<(RvrMrHandle, MrKeys)> {
        let (mr, keys) = add(pd, MrMem::Dma(mem), access, 0, 0, MrState::Valid)?;
        Ok((RvrMrHandle { mr, pin: None }, keys))
    }

    fn alloc_mr(pd: &Pd<Self>, pages: PageList) -> Result<(RvrMrHandle, MrKeys)> {
        // Fast-registration MRs always allow remote access (as rxe); REG_MR sets the rights.
        let (mr, keys) = add(pd, MrMem::Fast(pages), ACCESS_REMOTE, 0, 0, MrState::Free)?;
        Ok((RvrMrHandle { mr, pin: None }, keys))
    }

    fn page_list(mr: &RvrMrHandle) -> Option<&PageList> {
        match mr.mr.mem() {
            MrMem::Fast(p) => Some(p),
            _ => None,
        }
    }

    fn mr_handle(mr: &RvrMrHandle) -> u64 {
        mr.handle()
    }

    fn begin_dereg(mr: &RvrMrHandle) -> Result {
        mr.mr.begin_dereg()
    }

    fn dereg_mr(dev: &Device<Self>, mr: RvrMrHandle) {
        // No new lookup finds it; in-flight users still hold clones.
        drop(dev.data().mrs.remove(mr.mr.index()));
        let RvrMrHandle { mr, pin } = mr;
        drop(mr);
        // Sleeps until the last clone is gone, then unpins (user MRs only).
        drop(pin);
    }
}
