// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`struct ib_pd`): `alloc_pd` and `dealloc_pd`.

use super::{
    device::{Device, IbDriver},
    object::Obj,
    udata::Udata,
};
use crate::bindings as b;
use core::marker::PhantomData;
use kernel::{error::from_result, prelude::*, types::Opaque};

/// The protection-domain verbs of a driver.
pub trait PdVerbs: IbDriver {
    /// The driver's data of a PD.
    type Pd: Send + Sync;
    /// Creates a PD (`udata` is `None` for kernel callers).
    fn alloc_pd(dev: &Device<Self>, udata: Option<&mut Udata<'_>>) -> Result<Self::Pd>;
    /// Destroys a PD; ib_core has checked that nothing uses it.
    fn dealloc_pd(dev: &Device<Self>, pd: Self::Pd);
}

/// A protection domain of driver `T`, borrowed for a callback.
///
/// # Invariants
///
/// The `ib_pd` is the first field of a live `Obj<ib_pd, T::Pd>` with initialised data, on a
/// device of driver `T`.
#[repr(transparent)]
pub struct Pd<T: PdVerbs>(Opaque<b::ib_pd>, PhantomData<T>);

impl<T: PdVerbs> Pd<T> {
    /// # Safety
    ///
    /// `p` must be a PD of driver `T` with initialised data, live for `'a`.
    pub unsafe fn from_raw<'a>(p: *mut b::ib_pd) -> &'a Self {
        // SAFETY: `Pd<T>` is `repr(transparent)` over the `ib_pd`; liveness per the caller.
        unsafe { &*p.cast::<Self>() }
    }

    /// The raw pointer.
    pub fn as_raw(&self) -> *mut b::ib_pd {
        self.0.get()
    }

    /// The driver's data.
    pub fn data(&self) -> &T::Pd {
        // SAFETY: initialised and live by the type invariant.
        unsafe { Obj::<b::ib_pd, T::Pd>::data(self.as_raw()) }
    }

    /// The device the PD belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: ib_core sets `device` before calling the driver; it is one of ours.
        unsafe { Device::from_raw((*self.as_raw()).device) }
    }
}

/// Fills the PD entries of an ops table.
pub(crate) fn install<T: PdVerbs>(ops: &mut b::ib_device_ops) {
    ops.alloc_pd = Some(alloc_pd::<T>);
    ops.dealloc_pd = Some(dealloc_pd::<T>);
    ops.size_ib_pd = Obj::<b::ib_pd, T::Pd>::SIZE;
}

/// # Safety
///
/// ib_core callback: `ibpd` is a fresh, zeroed PD of `size_ib_pd` bytes on one of our devices.
unsafe extern "C" fn alloc_pd<T: PdVerbs>(ibpd: *mut b::ib_pd, udata: *mut b::ib_udata) -> c_int {
    from_result(|| {
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        if let Some(u) = udata.as_mut() {
            // The rxe ABI has no request or response data for a PD.
            u.check_in_empty()?;
        }
        // SAFETY: ib_core set `device` to one of ours.
        let dev = unsafe { Device::<T>::from_raw((*ibpd).device) };
        let data = T::alloc_pd(dev, udata.as_mut())?;
        // SAFETY: the object is fresh and ours.
        unsafe { Obj::<b::ib_pd, T::Pd>::init(ibpd, data) };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: `ibpd` is a PD `alloc_pd` initialised, no longer in use.
unsafe extern "C" fn dealloc_pd<T: PdVerbs>(
    ibpd: *mut b::ib_pd,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core set `device` to one of ours.
    let dev = unsafe { Device::<T>::from_raw((*ibpd).device) };
    // SAFETY: the data was initialised by `alloc_pd`; ib_core never uses the PD again.
    let data = unsafe { Obj::<b::ib_pd, T::Pd>::take(ibpd) };
    T::dealloc_pd(dev, data);
    0
}
