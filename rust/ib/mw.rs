// SPDX-License-Identifier: GPL-2.0

//! Memory windows (`struct ib_mw`): `alloc_mw` and `dealloc_mw`.
//!
//! ib_core allocates the `ib_mw` (with the driver's data behind it, `size_ib_mw`) and sets
//! `device`, `pd`, `uobject` and `type` before `alloc_mw`; the driver answers the window's
//! R_Key, which uverbs returns to user space. Binding happens in the driver's send queue
//! (BIND_MW work requests), not here.

use super::{
    device::{Device, IbDriver},
    object::Obj,
    pd::{Pd, PdVerbs},
    udata::Udata,
};
use crate::bindings as b;
use kernel::{error::from_result, prelude::*};

/// The type of a memory window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwKind {
    /// `IB_MW_TYPE_1`.
    Type1,
    /// `IB_MW_TYPE_2`.
    Type2,
}

/// The memory-window verbs of a driver.
pub trait MwVerbs: IbDriver + PdVerbs {
    /// The driver's data of a memory window.
    type Mw: Send + Sync;
    /// Creates a window of `kind` in `pd`; returns its data and its R_Key. `udata` is `None`
    /// for kernel callers.
    fn alloc_mw(
        pd: &Pd<Self>,
        kind: MwKind,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Mw, u32)>;
    /// Destroys a window (a bound one is unbound first).
    fn dealloc_mw(dev: &Device<Self>, mw: Self::Mw);
}

/// Fills the memory-window entries of an ops table.
pub(crate) fn install<T: MwVerbs>(ops: &mut b::ib_device_ops) {
    ops.alloc_mw = Some(alloc_mw::<T>);
    ops.dealloc_mw = Some(dealloc_mw::<T>);
    ops.size_ib_mw = Obj::<b::ib_mw, T::Mw>::SIZE;
}

/// # Safety
///
/// ib_core callback: `ibmw` is a fresh, zeroed window of `size_ib_mw` bytes on one of our
/// devices, with `device`, `pd` and `type` set.
unsafe extern "C" fn alloc_mw<T: MwVerbs>(ibmw: *mut b::ib_mw, udata: *mut b::ib_udata) -> c_int {
    from_result(|| {
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        if let Some(u) = udata.as_mut() {
            // The rxe ABI has no request or response data for a window.
            u.check_in_empty()?;
        }
        // SAFETY: ib_core set the fields before the call; the window is ours alone.
        let (kind, pd) = unsafe { ((*ibmw).type_, (*ibmw).pd) };
        let kind = match kind {
            b::ib_mw_type_IB_MW_TYPE_1 => MwKind::Type1,
            b::ib_mw_type_IB_MW_TYPE_2 => MwKind::Type2,
            _ => return Err(EINVAL),
        };
        // SAFETY: `pd` is a live PD of this device (ib_core holds a reference for the call),
        // created by `alloc_pd::<T>`.
        let pd = unsafe { Pd::<T>::from_raw(pd) };
        let (data, rkey) = T::alloc_mw(pd, kind, udata.as_mut())?;
        // SAFETY: the object is fresh and ours; `rkey` is a plain field.
        unsafe {
            Obj::<b::ib_mw, T::Mw>::init(ibmw, data);
            (*ibmw).rkey = rkey;
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: `ibmw` is a window `alloc_mw` initialised, never used again afterwards.
unsafe extern "C" fn dealloc_mw<T: MwVerbs>(ibmw: *mut b::ib_mw) -> c_int {
    // SAFETY: ib_core set `device` to one of ours.
    let dev = unsafe { Device::<T>::from_raw((*ibmw).device) };
    // SAFETY: the data was initialised by `alloc_mw`; ib_core never uses the window again.
    let data = unsafe { Obj::<b::ib_mw, T::Mw>::take(ibmw) };
    T::dealloc_mw(dev, data);
    0
}
