// SPDX-License-Identifier: GPL-2.0

//! The memory-region verbs: user MRs (pinned pages), DMA MRs and fast-registration MRs of
//! kernel ULPs. See [`super::mr_table`] for keys, the table and lifetimes.

use super::{
    device::RvrDevice,
    mr_table::{in_range, MrInfo, MrMem, MrState, RvrMr, ACCESS_REMOTE, ACCESS_SUPPORTED_MR},
};
use crate::ib::{
    device::Device,
    mr::{Advice, AdviseSge, KernelMemory, MrKeys, MrVerbs, PageList, ACCESS_ON_DEMAND},
    odp::{Odp, OdpPin},
    pd::Pd,
    udata::Udata,
    umem::{Umem, UmemPin},
};
use crate::rvcore::memory::ACCESS_LOCAL_WRITE;
use kernel::{prelude::*, sync::Arc};

/// rvrdma's data of an MR (owned by ib_core's `ib_mr`).
///
/// Field order matters: `mr` is dropped before `pin`, whose drop waits for the last reference
/// to the MR's pages.
pub struct RvrMrHandle {
    mr: Arc<RvrMr>,
    pin: Pin,
}

/// What keeps a user MR's memory registered.
enum Pin {
    /// Kernel MRs.
    None,
    /// Pinned pages.
    Umem(#[allow(dead_code)] UmemPin),
    /// On-demand paging.
    Odp(#[allow(dead_code)] OdpPin),
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
        if access & ACCESS_ON_DEMAND != 0 {
            // No implicit ODP (the whole address space), as rdma_rxe.
            if start == 0 && length == u64::MAX {
                return Err(EINVAL);
            }
            let (pin, pages) = Odp::register(pd.device(), start, length, access)?;
            // On failure `pages` is dropped inside `add`, before `pin` here: no wait.
            let (mr, keys) = add(pd, MrMem::Odp(pages), access, iova, length, MrState::Valid)?;
            return Ok((
                RvrMrHandle {
                    mr,
                    pin: Pin::Odp(pin),
                },
                keys,
            ));
        }
        let (pin, pages) = Umem::pin(pd.device(), start, length, access)?;
        // On failure `pages` is dropped inside `add`, before `pin` here: no wait.
        let (mr, keys) = add(pd, MrMem::User(pages), access, iova, length, MrState::Valid)?;
        Ok((
            RvrMrHandle {
                mr,
                pin: Pin::Umem(pin),
            },
            keys,
        ))
    }

    fn get_dma_mr(pd: &Pd<Self>, access: u32, mem: KernelMemory) -> Result<(RvrMrHandle, MrKeys)> {
        let (mr, keys) = add(pd, MrMem::Dma(mem), access, 0, 0, MrState::Valid)?;
        Ok((RvrMrHandle { mr, pin: Pin::None }, keys))
    }

    fn alloc_mr(pd: &Pd<Self>, pages: PageList) -> Result<(RvrMrHandle, MrKeys)> {
        // Fast-registration MRs always allow remote access (as rxe); REG_MR sets the rights.
        let (mr, keys) = add(pd, MrMem::Fast(pages), ACCESS_REMOTE, 0, 0, MrState::Free)?;
        Ok((RvrMrHandle { mr, pin: Pin::None }, keys))
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

    fn advise_mr(pd: &Pd<Self>, advice: Advice, _flush: bool, sges: &[AdviseSge]) -> Result {
        // Every prefetch is done before the call returns, with or without
        // IB_UVERBS_ADVISE_MR_FLAG_FLUSH (without it, the verb only promises a best effort).
        let pd_id = pd.data().id;
        let (write, fault) = match advice {
            Advice::Prefetch => (false, true),
            Advice::PrefetchWrite => (true, true),
            Advice::PrefetchNoFault => (false, false),
        };
        for sge in sges {
            let mr = pd
                .device()
                .data()
                .mrs
                .lookup(sge.lkey)
                .filter(|m| m.pd_id() == pd_id)
                .ok_or(EINVAL)?;
            let i = mr.info();
            let len = u64::from(sge.length);
            if !in_range(i.iova, i.length, sge.addr, len) {
                return Err(EINVAL);
            }
            if write && i.access & ACCESS_LOCAL_WRITE == 0 {
                return Err(EPERM);
            }
            mr.fault_in(sge.addr - i.iova, len, write, fault)?;
        }
        Ok(())
    }
}
