// SPDX-License-Identifier: GPL-2.0

//! Memory windows: `alloc_mw`/`dealloc_mw` and a window's state in the device's key table.
//!
//! A window takes its index from the MR table ([`super::mr_table`]), so its R_Key names it and
//! nothing else. Its state and rules are the protocol core's [`Window`]; next to it, under the
//! same lock, the window holds a reference to the MR it is bound to, and the MR counts the
//! windows bound to it (deregistration fails with `EBUSY` while there are any).
//!
//! Binding is a work request (BIND_MW, from `ibv_bind_mw` or `IBV_WR_BIND_MW`): the QP's
//! memory calls [`RvrMw::bind`]. Deallocation unbinds; destroying a QP unbinds the type 2
//! windows bound to it ([`super::mr_table::MrTable::unbind_qp`]).

use super::{device::RvrDevice, mr_table::RvrMr};
use crate::ib::{
    device::Device,
    mw::{MwKind, MwVerbs},
    pd::Pd,
    udata::Udata,
};
use crate::new_irq_spinlock;
use crate::rvcore::memory::MemError;
use crate::rvcore::mw::{BindMwParams, MwType, QpRef, Window};
use crate::sync::irq_spinlock::IrqSpinLock;
use kernel::{prelude::*, sync::Arc};

/// What a window's lock protects.
struct MwLocked {
    /// State and rules.
    w: Window,
    /// The MR a window with a nonzero length is bound to.
    mr: Option<Arc<RvrMr>>,
}

impl MwLocked {
    /// Drops the binding to the MR; returns the reference for the caller to drop outside the
    /// lock.
    fn release_mr(&mut self) -> Option<Arc<RvrMr>> {
        let mr = self.mr.take();
        if let Some(m) = &mr {
            m.window_gone();
        }
        mr
    }
}

/// A memory window.
#[pin_data]
pub struct RvrMw {
    index: u32,
    #[pin]
    inner: IrqSpinLock<MwLocked>,
}

impl RvrMw {
    /// A new window of `kind` in PD `pd_id` with table index `index` and R_Key `key`.
    pub fn new(index: u32, kind: MwType, pd_id: u32, key: u32) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                index,
                inner <- new_irq_spinlock!(
                    MwLocked { w: Window::new(kind, pd_id, key), mr: None },
                    "rvrdma_mw"
                ),
            }),
            GFP_KERNEL,
        )
    }

    /// The table index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// A snapshot of the window's state.
    pub fn window(&self) -> Window {
        self.inner.lock().w
    }

    /// BIND_MW on QP `qp`: `mr` is the MR the work request's L_Key names (`None` if none or
    /// for a zero-length bind). The core's rules decide under both locks; on success the
    /// window holds `mr` and the MR it was bound to before lets go.
    pub fn bind(
        &self,
        p: &BindMwParams,
        qp: QpRef,
        mr: Option<Arc<RvrMr>>,
    ) -> Result<(), MemError> {
        let old = {
            let mut g = self.inner.lock();
            let l = &mut *g;
            let r = match &mr {
                Some(m) if p.length > 0 => m.bind_window(|facts| l.w.bind(p, qp, Some(facts))),
                _ => l.w.bind(p, qp, None),
            };
            r.map_err(|_| MemError::OpFailed)?;
            let old = l.release_mr();
            l.mr = if p.length > 0 { mr } else { None };
            old
        };
        drop(old);
        Ok(())
    }

    /// Invalidates the (type 2) window by R_Key `key` on QP `qp` (LOCAL_INV, Send with
    /// Invalidate).
    pub fn invalidate(&self, key: u32, qp: QpRef) -> Result<(), MemError> {
        let old = {
            let mut g = self.inner.lock();
            g.w.invalidate(key, qp)?;
            g.release_mr()
        };
        drop(old);
        Ok(())
    }

    /// Forgets the binding.
    pub fn unbind(&self) {
        let old = {
            let mut g = self.inner.lock();
            g.w.unbind();
            g.release_mr()
        };
        drop(old);
    }

    /// Unbinds the window if it is a type 2 window bound to QP `qpn`.
    pub fn unbind_if_qp(&self, qpn: u32) {
        let old = {
            let mut g = self.inner.lock();
            if g.w.bound_qpn() != Some(qpn) {
                return;
            }
            g.w.unbind();
            g.release_mr()
        };
        drop(old);
    }

    /// Checks a remote access through the window (see [`Window::resolve`]); returns the MR
    /// and the address in it, which the caller checks against the MR.
    pub fn resolve(
        &self,
        key: u32,
        qp: QpRef,
        va: u64,
        len: u64,
        access: u32,
    ) -> Result<(Arc<RvrMr>, u64), MemError> {
        let g = self.inner.lock();
        let mva = g.w.resolve(key, qp, va, len, access)?;
        let mr = g.mr.clone().ok_or(MemError::BadKey)?;
        Ok((mr, mva))
    }
}

impl MwVerbs for RvrDevice {
    type Mw = Arc<RvrMw>;

    fn alloc_mw(
        pd: &Pd<Self>,
        kind: MwKind,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result<(Arc<RvrMw>, u32)> {
        let kind = match kind {
            MwKind::Type1 => MwType::Type1,
            MwKind::Type2 => MwType::Type2,
        };
        let pd_id = pd.data().id;
        let mw = pd
            .device()
            .data()
            .mrs
            .insert_mw(|index, key| RvrMw::new(index, kind, pd_id, key))?;
        let key = mw.window().key();
        Ok((mw, key))
    }

    fn dealloc_mw(dev: &Device<Self>, mw: Arc<RvrMw>) {
        // No new lookup finds it; then its MR is free of it.
        drop(dev.data().mrs.remove(mw.index()));
        mw.unbind();
    }
}
