// SPDX-License-Identifier: GPL-2.0

//! Address handles (`struct ib_ah`): create (kernel and user), query, destroy.
//!
//! Kernel callers may create and destroy AHs in atomic context (without
//! `RDMA_CREATE_AH_SLEEPABLE`): the driver's part must neither sleep nor allocate.

use super::{
    device::IbDriver,
    object::Obj,
    pd::{Pd, PdVerbs},
    qp::{fill_ah_attr, path_attr, PathAttr},
    udata::Udata,
};
use crate::bindings as b;
use kernel::{error::from_result, prelude::*};

/// The address-handle verbs of a driver.
pub trait AhVerbs: PdVerbs + IbDriver {
    /// The driver's data of an AH (no allocation: see the module doc).
    type Ah: Send + Sync;
    /// Creates an AH for the resolved address vector `path`.
    fn create_ah(pd: &Pd<Self>, path: PathAttr, udata: Option<&mut Udata<'_>>) -> Result<Self::Ah>;
    /// The AH's address vector.
    fn ah_path(ah: &Self::Ah) -> PathAttr;
    /// Destroys an AH.
    fn destroy_ah(ah: Self::Ah);
}

/// Fills the AH entries of an ops table.
pub(crate) fn install<T: AhVerbs>(ops: &mut b::ib_device_ops) {
    ops.create_ah = Some(create_ah::<T>);
    ops.create_user_ah = Some(create_ah::<T>);
    ops.query_ah = Some(query_ah::<T>);
    ops.destroy_ah = Some(destroy_ah::<T>);
    ops.size_ib_ah = Obj::<b::ib_ah, T::Ah>::SIZE;
}

/// # Safety
///
/// ib_core callback: `ibah` is a fresh AH of `size_ib_ah` bytes with `device` and `pd` set;
/// `init` and its `ah_attr` are valid.
unsafe extern "C" fn create_ah<T: AhVerbs>(
    ibah: *mut b::ib_ah,
    init: *mut b::rdma_ah_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        // SAFETY: valid per the callback contract.
        let attr = unsafe { &*(*init).ah_attr };
        // RoCE address vectors are IP addresses: a GRH is required.
        let path = path_attr(attr).ok_or(EINVAL)?;
        // SAFETY: ib_core set `pd` to one of ours and holds it for the call.
        let pd = unsafe { Pd::<T>::from_raw((*ibah).pd) };
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        let data = T::create_ah(pd, path, udata.as_mut())?;
        // SAFETY: the object is fresh and ours.
        unsafe { Obj::<b::ib_ah, T::Ah>::init(ibah, data) };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live AH of ours; `attr` is valid for writes.
unsafe extern "C" fn query_ah<T: AhVerbs>(
    ibah: *mut b::ib_ah,
    attr: *mut b::rdma_ah_attr,
) -> c_int {
    // SAFETY: the AH is live and initialised; `attr` is valid and exclusively ours.
    unsafe {
        let path = T::ah_path(Obj::<b::ib_ah, T::Ah>::data(ibah));
        *attr = core::mem::zeroed();
        fill_ah_attr(&mut *attr, &path);
    }
    0
}

/// # Safety
///
/// ib_core callback: the AH is live and never used again after this.
unsafe extern "C" fn destroy_ah<T: AhVerbs>(ibah: *mut b::ib_ah, _flags: u32) -> c_int {
    // SAFETY: initialised by `create_ah`; moved out exactly once.
    let data = unsafe { Obj::<b::ib_ah, T::Ah>::take(ibah) };
    T::destroy_ah(data);
    0
}
