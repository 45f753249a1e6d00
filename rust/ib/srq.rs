// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (`struct ib_srq`): create, modify, query, destroy, post receive.

use super::{
    device::IbDriver,
    object::Obj,
    pd::{Pd, PdVerbs},
    qp::RecvWrList,
    udata::Udata,
};
use crate::bindings as b;
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::from_result, prelude::*, types::Opaque};

/// The shared-receive-queue verbs of a driver.
pub trait SrqVerbs: PdVerbs + IbDriver {
    /// The driver's data of an SRQ.
    type Srq: Send + Sync;
    /// Creates an SRQ with the requested `attr` (the driver writes back what it grants).
    fn create_srq(
        pd: &Pd<Self>,
        attr: &mut SrqAttr,
        handle: SrqHandle,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<Self::Srq>;
    /// Modify SRQ: the attributes `mask` names (`udata`: the request of a user caller).
    fn modify_srq(
        srq: &Self::Srq,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        udata: Option<&mut Udata<'_>>,
    ) -> Result;
    /// Query SRQ.
    fn query_srq(srq: &Self::Srq) -> Result<SrqAttr>;
    /// Destroys an SRQ (ib_core has checked that no QP uses it).
    fn destroy_srq(srq: Self::Srq);
    /// Posts kernel receive WRs.
    fn post_srq_recv(srq: &Self::Srq, wrs: &mut RecvWrList<'_>) -> Result;
}

/// The attributes of an SRQ (`struct ib_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Queue depth.
    pub max_wr: u32,
    /// Scatter/gather elements per receive WR.
    pub max_sge: u32,
    /// The limit: fewer WRs than this raises `IB_EVENT_SRQ_LIMIT_REACHED` (0: disarmed).
    pub srq_limit: u32,
}

impl SrqAttr {
    fn from_raw(a: &b::ib_srq_attr) -> Self {
        Self {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        }
    }

    fn write_to(&self, a: &mut b::ib_srq_attr) {
        a.max_wr = self.max_wr;
        a.max_sge = self.max_sge;
        a.srq_limit = self.srq_limit;
    }
}

/// Which attributes Modify SRQ changes (`enum ib_srq_attr_mask`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqAttrMask(u32);

impl SrqAttrMask {
    /// `IB_SRQ_MAX_WR`: resize the queue.
    pub const MAX_WR: Self = Self(b::ib_srq_attr_mask_IB_SRQ_MAX_WR);
    /// `IB_SRQ_LIMIT`: arm the limit event.
    pub const LIMIT: Self = Self(b::ib_srq_attr_mask_IB_SRQ_LIMIT);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The `struct ib_srq` behind an SRQ, for its async events.
///
/// # Invariants
///
/// The pointer is a live `ib_srq` from `create_srq` until `destroy_srq` returns; the driver
/// stops using handles before its `destroy_srq` returns.
#[derive(Clone, Copy)]
pub struct SrqHandle(NonNull<b::ib_srq>);

// SAFETY: only used to dispatch events, which ib_core allows from any thread.
unsafe impl Send for SrqHandle {}
// SAFETY: as above.
unsafe impl Sync for SrqHandle {}

impl SrqHandle {
    /// Reports an async event (`enum ib_event_type`) on this SRQ to its owner. Call it without
    /// driver locks held.
    pub fn dispatch_event(&self, event: u32) {
        let srq = self.0.as_ptr();
        // SAFETY: the SRQ is live (type invariant); `event_handler` is the owner's callback,
        // callable from any context.
        unsafe {
            let mut ev: b::ib_event = core::mem::zeroed();
            ev.device = (*srq).device;
            *ev.element.srq.as_mut() = srq;
            ev.event = event;
            if let Some(h) = (*srq).event_handler {
                h(&mut ev, (*srq).srq_context);
            }
        }
    }
}

/// An SRQ of driver `T`, borrowed for a callback.
///
/// # Invariants
///
/// The `ib_srq` is the first field of a live `Obj<ib_srq, T::Srq>` with initialised data.
#[repr(transparent)]
pub struct Srq<T: SrqVerbs>(Opaque<b::ib_srq>, PhantomData<T>);

impl<T: SrqVerbs> Srq<T> {
    /// # Safety
    ///
    /// `p` must be an SRQ of driver `T` with initialised data, live for `'a`.
    pub unsafe fn from_raw<'a>(p: *mut b::ib_srq) -> &'a Self {
        // SAFETY: `Srq<T>` is transparent over the `ib_srq`; liveness per the caller.
        unsafe { &*p.cast::<Self>() }
    }

    /// The driver's data.
    pub fn data(&self) -> &T::Srq {
        // SAFETY: initialised and live by the type invariant.
        unsafe { Obj::<b::ib_srq, T::Srq>::data(self.0.get()) }
    }
}

/// Fills the SRQ entries of an ops table.
pub(crate) fn install<T: SrqVerbs>(ops: &mut b::ib_device_ops) {
    ops.create_srq = Some(create_srq::<T>);
    ops.modify_srq = Some(modify_srq::<T>);
    ops.query_srq = Some(query_srq::<T>);
    ops.destroy_srq = Some(destroy_srq::<T>);
    ops.post_srq_recv = Some(post_srq_recv::<T>);
    ops.size_ib_srq = Obj::<b::ib_srq, T::Srq>::SIZE;
}

/// # Safety
///
/// ib_core callback: `ibsrq` is a fresh SRQ of `size_ib_srq` bytes with `device` and `pd` set;
/// `init` is valid.
unsafe extern "C" fn create_srq<T: SrqVerbs>(
    ibsrq: *mut b::ib_srq,
    init: *mut b::ib_srq_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        // SAFETY: valid per the callback contract.
        let init = unsafe { &mut *init };
        if init.srq_type != b::ib_srq_type_IB_SRQT_BASIC {
            return Err(crate::errno::eopnotsupp());
        }
        // SAFETY: ib_core set `pd` to one of ours and holds it for the call.
        let pd = unsafe { Pd::<T>::from_raw((*ibsrq).pd) };
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        // INVARIANT: `ibsrq` lives until `destroy_srq` returns.
        let handle = SrqHandle(NonNull::new(ibsrq).ok_or(EINVAL)?);
        let mut attr = SrqAttr::from_raw(&init.attr);
        let data = T::create_srq(pd, &mut attr, handle, udata.as_mut())?;
        attr.write_to(&mut init.attr);
        // SAFETY: the object is fresh and ours.
        unsafe { Obj::<b::ib_srq, T::Srq>::init(ibsrq, data) };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live SRQ of ours; `attr` is valid, `udata` NULL or valid.
unsafe extern "C" fn modify_srq<T: SrqVerbs>(
    ibsrq: *mut b::ib_srq,
    attr: *mut b::ib_srq_attr,
    mask: b::ib_srq_attr_mask,
    udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        // SAFETY: `attr` is valid for reads per the callback contract.
        let attr = SrqAttr::from_raw(unsafe { &*attr });
        // SAFETY: the SRQ is live and initialised.
        let srq = unsafe { Obj::<b::ib_srq, T::Srq>::data(ibsrq) };
        // SAFETY: `udata` is NULL (kernel caller) or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        T::modify_srq(srq, &attr, SrqAttrMask(mask), udata.as_mut())?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live SRQ of ours; `attr` is valid.
unsafe extern "C" fn query_srq<T: SrqVerbs>(
    ibsrq: *mut b::ib_srq,
    attr: *mut b::ib_srq_attr,
) -> c_int {
    from_result(|| {
        // SAFETY: the SRQ is live and initialised.
        let a = T::query_srq(unsafe { Obj::<b::ib_srq, T::Srq>::data(ibsrq) })?;
        // SAFETY: `attr` is valid for writes per the callback contract.
        a.write_to(unsafe { &mut *attr });
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: the SRQ is live and never used again after this.
unsafe extern "C" fn destroy_srq<T: SrqVerbs>(
    ibsrq: *mut b::ib_srq,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: initialised by `create_srq`; moved out exactly once.
    let data = unsafe { Obj::<b::ib_srq, T::Srq>::take(ibsrq) };
    T::destroy_srq(data);
    0
}

/// # Safety
///
/// ib_core callback on a live SRQ of ours (any context); `wr` is a valid list, `bad` valid.
unsafe extern "C" fn post_srq_recv<T: SrqVerbs>(
    ibsrq: *mut b::ib_srq,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    from_result(|| {
        // SAFETY: the SRQ is live; `bad` is valid for writes.
        let (data, bad) = unsafe { (Obj::<b::ib_srq, T::Srq>::data(ibsrq), &mut *bad) };
        let mut list = RecvWrList::new(wr, bad);
        T::post_srq_recv(data, &mut list)?;
        Ok(0)
    })
}
