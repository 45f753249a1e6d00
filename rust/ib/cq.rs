// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`struct ib_cq`): `create_cq`, `destroy_cq`, `resize_user_cq`, `poll_cq`,
//! `req_notify_cq`, and the calls back into ib_core's completion and event handlers.
//!
//! User CQs are rings mapped into the process (polled there, never through `poll_cq`); kernel
//! CQs are polled through `poll_cq`, which fills `struct ib_wc`. The handlers ib_core installs
//! (`comp_handler`, `event_handler`) are reached through [`CqHandlers`], which the destroy path
//! revokes before ib_core frees the `ib_cq`, so that a late work item can never call them.

use super::{
    device::{Device, IbDriver},
    object::Obj,
    udata::Udata,
};
use crate::bindings as b;
use crate::events::{Completion, WC_WITH_IMM, WC_WITH_INVALIDATE};
use core::marker::PhantomData;
use kernel::{error::from_result, new_mutex, prelude::*, sync::Mutex, types::Opaque};

/// `IB_CQ_SOLICITED`: notify on the next solicited completion.
pub const CQ_SOLICITED: u32 = b::ib_cq_notify_flags_IB_CQ_SOLICITED;
/// `IB_CQ_NEXT_COMP`: notify on the next completion.
pub const CQ_NEXT_COMP: u32 = b::ib_cq_notify_flags_IB_CQ_NEXT_COMP;
/// `IB_CQ_SOLICITED_MASK`: the two arming flags.
pub const CQ_SOLICITED_MASK: u32 = b::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK;
/// `IB_CQ_REPORT_MISSED_EVENTS`: report whether completions are already pending.
pub const CQ_REPORT_MISSED_EVENTS: u32 = b::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS;

/// The attributes of a new CQ (`struct ib_cq_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct CqAttr {
    /// Minimum number of entries asked for.
    pub cqe: u32,
    /// Completion vector (checked against the device's count before the driver is called).
    pub comp_vector: u32,
    /// `enum ib_uverbs_ex_create_cq_flags`.
    pub flags: u32,
}

/// The completion queue verbs of a driver.
pub trait CqVerbs: IbDriver {
    /// The driver's data of a CQ.
    type Cq: Send + Sync;

    /// Creates a CQ (`udata` is `None` for kernel callers). `new` identifies the `ib_cq` for
    /// [`CqHandlers::new`]. Returns the data and the usable number of entries (`ib_cq.cqe`).
    fn create_cq(
        dev: &Device<Self>,
        new: NewCq,
        attr: &CqAttr,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Cq, u32)>;

    /// The handlers of a CQ's data (revoked by the destroy paths).
    fn handlers(cq: &Self::Cq) -> &CqHandlers;

    /// Prepares destruction: fails (e.g. `EINVAL` while a QP still uses the CQ) to keep the CQ.
    /// On success the handlers are revoked and the data dropped. Process context.
    fn destroy_cq(cq: &Cq<Self>) -> Result;

    /// Resizes a user CQ to at least `cqe` entries; returns the new usable number of entries.
    fn resize_cq(cq: &Cq<Self>, cqe: u32, udata: &mut Udata<'_>) -> Result<u32>;

    /// Moves completions of a kernel CQ into `out` until it is full or the CQ is empty. Any
    /// context.
    fn poll_cq(cq: &Cq<Self>, out: &mut WcOut<'_>);

    /// Arms the CQ with `flags` (`CQ_*`); returns `true` to report missed events (completions
    /// are pending and `CQ_REPORT_MISSED_EVENTS` was asked). Any context.
    fn req_notify_cq(cq: &Cq<Self>, flags: u32) -> bool;
}

/// A completion queue of driver `T`, borrowed for a callback (or by a QP that uses it).
///
/// # Invariants
///
/// The `ib_cq` is the first field of a live `Obj<ib_cq, T::Cq>` with initialised data, on a
/// device of driver `T`.
#[repr(transparent)]
pub struct Cq<T: CqVerbs>(Opaque<b::ib_cq>, PhantomData<T>);

impl<T: CqVerbs> Cq<T> {
    /// # Safety
    ///
    /// `p` must be a CQ of driver `T` with initialised data, live for `'a` (e.g. the send or
    /// receive CQ of a QP being created: ib_core holds a use count on it).
    pub unsafe fn from_raw<'a>(p: *mut b::ib_cq) -> &'a Self {
        // SAFETY: `Cq<T>` is `repr(transparent)` over the `ib_cq`; liveness per the caller.
        unsafe { &*p.cast::<Self>() }
    }

    /// The raw pointer.
    pub fn as_raw(&self) -> *mut b::ib_cq {
        self.0.get()
    }

    /// The driver's data.
    pub fn data(&self) -> &T::Cq {
        // SAFETY: initialised and live by the type invariant.
        unsafe { Obj::<b::ib_cq, T::Cq>::data(self.as_raw()) }
    }

    /// The device the CQ belongs to.
    pub fn device(&self) -> &Device<T> {
        // SAFETY: ib_core sets `device` before calling the driver; it is one of ours.
        unsafe { Device::from_raw((*self.as_raw()).device) }
    }
}

/// The `ib_cq` a CQ is being created for; consumed by [`CqHandlers::new`].
pub struct NewCq(*mut b::ib_cq);

/// A CQ's `ib_cq`, kept to call ib_core's completion and event handlers; revoked (set to NULL)
/// when the CQ is destroyed, after which calls are no-ops.
///
/// The handlers run under a mutex (one at a time, as ib_core requires): call them only from
/// process context, e.g. from a work item.
///
/// # Invariants
///
/// The pointer is NULL or the live `ib_cq` of the CQ this value belongs to: the destroy paths
/// revoke it before ib_core frees the CQ.
#[pin_data]
pub struct CqHandlers {
    #[pin]
    cq: Mutex<CqPtr>,
}

/// A nullable `ib_cq` pointer that may move between threads.
struct CqPtr(*mut b::ib_cq);

// SAFETY: the pointer is only dereferenced under `CqHandlers`'s mutex, while the CQ is live.
unsafe impl Send for CqPtr {}

impl CqHandlers {
    /// Handlers of the CQ being created.
    pub fn new(new: NewCq) -> impl PinInit<Self> {
        // INVARIANT: `new` carries the live `ib_cq` being created.
        pin_init!(Self {
            cq <- new_mutex!(CqPtr(new.0), "CqHandlers::cq"),
        })
    }

    /// Calls `ibcq->comp_handler(ibcq, ibcq->cq_context)` unless revoked. Process context.
    pub fn completion(&self) {
        let g = self.cq.lock();
        let cq = g.0;
        if cq.is_null() {
            return;
        }
        // SAFETY: not revoked, so the CQ is live (type invariant); ib_core sets the handler
        // and context before completions can be generated.
        unsafe {
            if let Some(h) = (*cq).comp_handler {
                h(cq, (*cq).cq_context);
            }
        }
    }

    /// Dispatches `IB_EVENT_CQ_ERR` to `ibcq->event_handler` unless revoked. Process context.
    pub fn error_event(&self) {
        let g = self.cq.lock();
        let cq = g.0;
        if cq.is_null() {
            return;
        }
        // SAFETY: not revoked, so the CQ is live (type invariant).
        unsafe {
            if let Some(h) = (*cq).event_handler {
                let mut ev = b::ib_event {
                    device: (*cq).device,
                    element: Default::default(),
                    event: b::ib_event_type_IB_EVENT_CQ_ERR,
                };
                *ev.element.cq.as_mut() = cq;
                h(&mut ev, (*cq).cq_context);
            }
        }
    }

    /// Revokes the handlers: later calls do nothing. Waits for a running handler. Process
    /// context; idempotent.
    pub fn revoke(&self) {
        self.cq.lock().0 = core::ptr::null_mut();
    }
}

/// The QP a kernel completion belongs to (`ib_wc.qp`), and its port number: an opaque handle,
/// never dereferenced by rvrdma.
#[derive(Clone, Copy, Debug)]
pub struct WcQp {
    qp: *mut b::ib_qp,
    port_num: u8,
}

// SAFETY: the pointer is only copied into `ib_wc.qp`, never dereferenced.
unsafe impl Send for WcQp {}
// SAFETY: as above.
unsafe impl Sync for WcQp {}

impl WcQp {
    /// The handle of `qp` on port `port_num`.
    ///
    /// # Safety
    ///
    /// `qp` must be the `ib_qp` whose completions this handle will tag (ULPs dereference
    /// `ib_wc.qp`; ib_core guarantees a QP outlives completions polled for it only if it is
    /// the right QP).
    pub unsafe fn from_raw(qp: *mut b::ib_qp, port_num: u8) -> Self {
        Self { qp, port_num }
    }

    /// The port number reported in completions.
    pub fn port_num(&self) -> u8 {
        self.port_num
    }
}

/// The `ib_wc` array of a `poll_cq` call.
///
/// # Invariants
///
/// `wc` is valid for writes of `cap` entries for `'a`; `len <= cap`.
pub struct WcOut<'a> {
    wc: *mut b::ib_wc,
    cap: usize,
    len: usize,
    _p: PhantomData<&'a mut b::ib_wc>,
}

impl WcOut<'_> {
    /// Whether no entry is left.
    pub fn is_full(&self) -> bool {
        self.len >= self.cap
    }

    /// Number of entries written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one completion of `qp`; returns `false` (nothing written) when full.
    pub fn push(&mut self, wc: &Completion, qp: &WcQp) -> bool {
        if self.is_full() {
            return false;
        }
        // SAFETY: all-zero is a valid `ib_wc`.
        let mut w: b::ib_wc = unsafe { core::mem::zeroed() };
        // SAFETY: writing a union field of its own type.
        unsafe { *w.__bindgen_anon_1.wr_id.as_mut() = wc.wr_id };
        w.status = wc.status as u32;
        w.opcode = wc.opcode as u32;
        w.byte_len = wc.byte_len;
        w.qp = qp.qp;
        if wc.flags & WC_WITH_IMM != 0 {
            // SAFETY: as above; immediate data is big-endian in `ib_wc`.
            unsafe { *w.ex.imm_data.as_mut() = wc.imm_or_rkey.to_be() };
        } else if wc.flags & WC_WITH_INVALIDATE != 0 {
            // SAFETY: as above.
            unsafe { *w.ex.invalidate_rkey.as_mut() = wc.imm_or_rkey };
        }
        w.src_qp = wc.src_qp;
        w.wc_flags = wc.flags as c_int;
        w.network_hdr_type = wc.network_hdr_type;
        w.port_num = qp.port_num.into();
        // SAFETY: `len < cap`, so the slot is valid for writes (type invariant).
        unsafe { self.wc.add(self.len).write(w) };
        self.len += 1;
        true
    }
}

/// Fills the CQ entries of an ops table.
pub(crate) fn install<T: CqVerbs>(ops: &mut b::ib_device_ops) {
    ops.create_cq = Some(create_cq::<T>);
    ops.destroy_cq = Some(destroy_cq::<T>);
    ops.pre_destroy_cq = Some(pre_destroy_cq::<T>);
    ops.resize_user_cq = Some(resize_user_cq::<T>);
    ops.poll_cq = Some(poll_cq::<T>);
    ops.req_notify_cq = Some(req_notify_cq::<T>);
    ops.size_ib_cq = Obj::<b::ib_cq, T::Cq>::SIZE;
}

/// # Safety
///
/// ib_core callback: `ibcq` is a fresh, zeroed CQ of `size_ib_cq` bytes on one of our devices
/// (with `device`, handlers and context set), `attr` valid, `attrs` NULL (kernel caller) or the
/// uverbs bundle of the call.
unsafe extern "C" fn create_cq<T: CqVerbs>(
    ibcq: *mut b::ib_cq,
    attr: *const b::ib_cq_init_attr,
    attrs: *mut b::uverbs_attr_bundle,
) -> c_int {
    from_result(|| {
        // The udata is the bundle's first member (`&attrs->driver_udata`, NULL for kernel
        // callers).
        let udata = if attrs.is_null() {
            core::ptr::null_mut()
        } else {
            // SAFETY: `attrs` is a valid bundle.
            unsafe {
                core::ptr::addr_of_mut!((*attrs).__bindgen_anon_1.__bindgen_anon_1.driver_udata)
            }
        };
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        if let Some(u) = udata.as_ref() {
            // The rxe ABI sends no request data with create_cq.
            u.check_in_empty()?;
        }
        // SAFETY: `attr` is valid for this call.
        let a = unsafe { &*attr };
        let attr = CqAttr {
            cqe: a.cqe,
            comp_vector: a.comp_vector,
            flags: a.flags,
        };
        // SAFETY: ib_core set `device` to one of ours.
        let ibdev = unsafe { (*ibcq).device };
        // SAFETY: as above; the device is live.
        let nvec = unsafe { (*ibdev).num_comp_vectors };
        if i64::from(attr.comp_vector) >= i64::from(nvec) {
            return Err(EINVAL);
        }
        // SAFETY: as above.
        let dev = unsafe { Device::<T>::from_raw(ibdev) };
        let (data, cqe) = T::create_cq(dev, NewCq(ibcq), &attr, udata.as_mut())?;
        let cqe = c_int::try_from(cqe).map_err(|_| EINVAL)?;
        // SAFETY: the object is fresh and ours.
        unsafe {
            (*ibcq).cqe = cqe;
            Obj::<b::ib_cq, T::Cq>::init(ibcq, data);
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: `ibcq` is a CQ `create_cq` initialised, about to be destroyed (kernel CQ,
/// `ib_free_cq`).
unsafe extern "C" fn pre_destroy_cq<T: CqVerbs>(ibcq: *mut b::ib_cq) -> c_int {
    // SAFETY: initialised by `create_cq`, live until `destroy_cq` returns.
    let cq = unsafe { Cq::<T>::from_raw(ibcq) };
    // ib_free_cq cancels its own completion work next: no handler of ours may requeue it.
    T::handlers(cq.data()).revoke();
    0
}

/// # Safety
///
/// ib_core callback: `ibcq` is a CQ `create_cq` initialised.
unsafe extern "C" fn destroy_cq<T: CqVerbs>(
    ibcq: *mut b::ib_cq,
    _udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        // SAFETY: initialised by `create_cq`, live for this call.
        let cq = unsafe { Cq::<T>::from_raw(ibcq) };
        T::destroy_cq(cq)?;
        T::handlers(cq.data()).revoke();
        // SAFETY: the data was initialised by `create_cq`; on success ib_core frees the CQ and
        // never uses it again, and the handlers no longer reach it.
        drop(unsafe { Obj::<b::ib_cq, T::Cq>::take(ibcq) });
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: `ibcq` is a live user CQ of ours, `udata` valid.
unsafe extern "C" fn resize_user_cq<T: CqVerbs>(
    ibcq: *mut b::ib_cq,
    cqe: c_uint,
    udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        // SAFETY: initialised by `create_cq`, live for this call.
        let cq = unsafe { Cq::<T>::from_raw(ibcq) };
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) }.ok_or(EINVAL)?;
        udata.check_in_empty()?;
        let n = T::resize_cq(cq, cqe, &mut udata)?;
        let n = c_int::try_from(n).map_err(|_| EINVAL)?;
        // SAFETY: ib_core holds the CQ for this call; it reads `cqe` after we return.
        unsafe { (*ibcq).cqe = n };
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: `ibcq` is a live kernel CQ of ours, `wc` valid for `num` entries. Any
/// context.
unsafe extern "C" fn poll_cq<T: CqVerbs>(
    ibcq: *mut b::ib_cq,
    num: c_int,
    wc: *mut b::ib_wc,
) -> c_int {
    // SAFETY: initialised by `create_cq`, live for this call.
    let cq = unsafe { Cq::<T>::from_raw(ibcq) };
    let cap = usize::try_from(num).unwrap_or(0);
    // INVARIANT: ib_core passes an array of `num` entries.
    let mut out = WcOut {
        wc,
        cap: if wc.is_null() { 0 } else { cap },
        len: 0,
        _p: PhantomData,
    };
    T::poll_cq(cq, &mut out);
    // At most `num`, which is a `c_int`.
    out.len as c_int
}

/// # Safety
///
/// ib_core callback: `ibcq` is a live CQ of ours. Any context.
unsafe extern "C" fn req_notify_cq<T: CqVerbs>(
    ibcq: *mut b::ib_cq,
    flags: b::ib_cq_notify_flags,
) -> c_int {
    // SAFETY: initialised by `create_cq`, live for this call.
    let cq = unsafe { Cq::<T>::from_raw(ibcq) };
    c_int::from(T::req_notify_cq(cq, flags))
}
