// SPDX-License-Identifier: GPL-2.0

//! Completion queues: a ring in the rxe layout for user CQs (polled by rdma-core in user space),
//! a typed ring for kernel CQs (polled through `poll_cq`), the notification flags, and deferred
//! calls of ib_core's completion and event handlers.
//!
//! The QP code posts completions with [`CqShared::push`] under its own lock (order QP -> CQ),
//! and after dropping it calls [`CqShared::notify`] when `push` said so, and
//! [`CqShared::error_event`] on overflow. Handlers run on the CQ's own work items, so they never
//! run concurrently and never in the caller's call chain.

use super::device::RvrDevice;
use super::limits::{Quota, Res};
use crate::events::{Completion, CqFull};
use crate::ib::{
    cq::{
        Cq, CqAttr, CqHandlers, CqVerbs, NewCq, WcOut, WcQp, CQ_NEXT_COMP, CQ_REPORT_MISSED_EVENTS,
        CQ_SOLICITED, CQ_SOLICITED_MASK,
    },
    device::Device,
    queue::{KernelRing, Ring, RingDir},
    uabi::{CreateCqResp, UverbsWc, RXE_CQE_SIZE},
    udata::Udata,
};
use crate::new_irq_spinlock;
use crate::sync::{
    irq_spinlock::IrqSpinLock,
    workqueue::{self, flush_work},
};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    prelude::*,
    sync::Arc,
    transmute::AsBytes,
    workqueue::{impl_has_work, new_work, Work, WorkItem},
};

/// Largest number of CQ entries (`ib_device_attr.max_cqe`, as rxe).
pub const MAX_CQE: u32 = 0x7fff;

/// One completion of a kernel CQ, kept until `poll_cq`.
struct KernelCqe {
    wc: Completion,
    qp: WcQp,
}

/// Where a CQ's entries live.
enum CqStore {
    /// Mapped by the process that created the CQ; the kernel produces.
    User(Ring),
    /// A kernel ULP's CQ.
    Kernel(KernelRing<KernelCqe>),
}

impl CqStore {
    fn is_empty(&self) -> bool {
        match self {
            CqStore::User(r) => r.is_empty(),
            CqStore::Kernel(k) => k.is_empty(),
        }
    }
}

/// The lock-protected state of a CQ.
struct CqInner {
    store: CqStore,
    /// Armed `CQ_SOLICITED` / `CQ_NEXT_COMP` bits (cleared when a notification is due).
    notify: u32,
    /// Set by `destroy_cq`: no more notifications are queued.
    dead: bool,
}

/// rvrdma's CQ, shared (in an `Arc`) between the `ib_cq` and the QPs that complete to it.
///
/// Drop the last reference only in process context, outside spinlocks (a user CQ's ring removes
/// its mmap entry on drop).
#[pin_data]
pub struct CqShared {
    #[pin]
    inner: IrqSpinLock<CqInner>,
    #[pin]
    handlers: CqHandlers,
    #[pin]
    comp_work: Work<CqShared, 0>,
    #[pin]
    err_work: Work<CqShared, 1>,
    /// Number of work queues (QP send/receive queues, SRQs) that complete to this CQ.
    users: AtomicU32,
    /// Whether user space polls this CQ.
    is_user: bool,
    /// Counts against the device's CQ limit while the CQ lives.
    _quota: Quota,
}

impl_has_work! {
    impl HasWork<Self, 0> for CqShared { self.comp_work }
    impl HasWork<Self, 1> for CqShared { self.err_work }
}

impl WorkItem<0> for CqShared {
    type Pointer = Arc<CqShared>;

    fn run(this: Arc<CqShared>) {
        this.handlers.completion();
    }
}

impl WorkItem<1> for CqShared {
    type Pointer = Arc<CqShared>;

    fn run(this: Arc<CqShared>) {
        this.handlers.error_event();
    }
}

impl CqShared {
    /// Writes one completion of `qp` (`solicited`: the completed receive carried the SE bit).
    ///
    /// Returns `Ok(true)` when the CQ was armed for it (`CQ_NEXT_COMP`, or `CQ_SOLICITED` and
    /// `solicited`): the arm is consumed and the caller must call [`CqShared::notify`] once it
    /// has dropped its own locks. `Err(CqFull)` when the CQ overflows (the caller raises
    /// [`CqShared::error_event`] and moves the QP to Error as the spec says). Any context;
    /// never calls a handler.
    pub fn push(&self, wc: &Completion, qp: WcQp, solicited: bool) -> Result<bool, CqFull> {
        let mut g = self.inner.lock();
        if g.dead {
            return Ok(false);
        }
        match &mut g.store {
            CqStore::User(r) => {
                let cqe = UverbsWc::from_completion(wc, qp.port_num());
                r.produce(cqe.as_bytes()).map_err(|_| CqFull)?;
            }
            CqStore::Kernel(k) => k.push(KernelCqe { wc: *wc, qp }).map_err(|_| CqFull)?,
        }
        let due = g.notify & CQ_NEXT_COMP != 0 || (g.notify & CQ_SOLICITED != 0 && solicited);
        if due {
            g.notify = 0;
        }
        Ok(due)
    }

    /// Queues a call of the CQ's completion handler (`comp_handler(ibcq, cq_context)`) on its
    /// work item; does nothing once the CQ is being destroyed. Any context.
    pub fn notify(self: &Arc<Self>) {
        let g = self.inner.lock();
        if !g.dead {
            // Already queued: one call covers both notifications.
            let _ = workqueue::queue().enqueue::<Arc<CqShared>, 0>(self.clone());
        }
        drop(g);
    }

    /// Queues an `IB_EVENT_CQ_ERR` for the CQ's event handler (after an overflow). Any context.
    pub fn error_event(self: &Arc<Self>) {
        let g = self.inner.lock();
        if !g.dead {
            let _ = workqueue::queue().enqueue::<Arc<CqShared>, 1>(self.clone());
        }
        drop(g);
    }

    /// Counts one more work queue completing to this CQ (QP or SRQ creation).
    pub fn attach(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// Undoes one [`CqShared::attach`] (QP or SRQ destruction).
    pub fn detach(&self) {
        let _ = self
            .users
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Number of work queues attached.
    pub fn users(&self) -> u32 {
        self.users.load(Ordering::Relaxed)
    }

    /// Whether user space polls this CQ (its completions go to a mapped ring).
    pub fn is_user(&self) -> bool {
        self.is_user
    }
}

impl CqVerbs for RvrDevice {
    type Cq = Arc<CqShared>;

    fn create_cq(
        dev: &Device<Self>,
        new: NewCq,
        attr: &CqAttr,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Arc<CqShared>, u32)> {
        if attr.flags != 0 {
            return Err(crate::errno::eopnotsupp());
        }
        if attr.cqe > MAX_CQE {
            return Err(EINVAL);
        }
        let quota = Quota::take(&dev.data().shared, Res::Cq)?;
        let store = match udata {
            Some(u) => {
                if u.outlen() < size_of::<CreateCqResp>() {
                    return Err(EINVAL);
                }
                let (ring, mi) = Ring::new_user(u, RingDir::ToUser, attr.cqe, RXE_CQE_SIZE)?;
                u.respond(&CreateCqResp { mi })?;
                CqStore::User(ring)
            }
            None => CqStore::Kernel(KernelRing::new(attr.cqe)?),
        };
        let (cap, is_user) = match &store {
            CqStore::User(r) => (r.capacity(), true),
            CqStore::Kernel(k) => (k.capacity(), false),
        };
        let cq = Arc::pin_init(
            pin_init!(CqShared {
                inner <- new_irq_spinlock!(
                    CqInner {
                        store,
                        notify: 0,
                        dead: false,
                    },
                    "CqShared::inner"
                ),
                handlers <- CqHandlers::new(new),
                comp_work <- new_work!("CqShared::comp_work"),
                err_work <- new_work!("CqShared::err_work"),
                users: AtomicU32::new(0),
                is_user,
                _quota: quota,
            }),
            GFP_KERNEL,
        )?;
        Ok((cq, cap))
    }

    fn handlers(cq: &Arc<CqShared>) -> &CqHandlers {
        &cq.handlers
    }

    fn destroy_cq(cq: &Cq<Self>) -> Result {
        let s = cq.data();
        // IBA C11-17: refuse while a work queue is still associated (as rxe).
        if s.users() != 0 {
            return Err(EINVAL);
        }
        s.inner.lock().dead = true;
        // No new work can be queued now; let queued handler calls run out (as no-ops).
        s.handlers.revoke();
        flush_work::<CqShared, 0>(s);
        flush_work::<CqShared, 1>(s);
        Ok(())
    }

    fn resize_cq(cq: &Cq<Self>, cqe: u32, udata: &mut Udata<'_>) -> Result<u32> {
        let s = cq.data();
        if !s.is_user || udata.outlen() < size_of::<CreateCqResp>() || cqe > MAX_CQE {
            return Err(EINVAL);
        }
        let (mut ring, mi) = Ring::new_user(udata, RingDir::ToUser, cqe, RXE_CQE_SIZE)?;
        // Like rxe, the new ring's info is answered before the swap; user space ignores it
        // when the verb fails.
        udata.respond(&CreateCqResp { mi })?;
        let cap = ring.capacity();
        {
            let mut g = s.inner.lock();
            if g.dead {
                return Err(EINVAL);
            }
            let CqStore::User(old) = &mut g.store else {
                return Err(EINVAL);
            };
            // Fewer entries than are pending: EINVAL, as rxe.
            ring.take_pending(old).map_err(|_| EINVAL)?;
            core::mem::swap(old, &mut ring);
        }
        // `ring` is the old ring now: dropped here, outside the lock.
        drop(ring);
        Ok(cap)
    }

    fn poll_cq(cq: &Cq<Self>, out: &mut WcOut<'_>) {
        let mut g = cq.data().inner.lock();
        // User CQs are polled in user space.
        let CqStore::Kernel(k) = &mut g.store else {
            return;
        };
        while !out.is_full() {
            let Some(e) = k.pop() else {
                break;
            };
            out.push(&e.wc, &e.qp);
        }
    }

    fn req_notify_cq(cq: &Cq<Self>, flags: u32) -> bool {
        let mut g = cq.data().inner.lock();
        g.notify |= flags & CQ_SOLICITED_MASK;
        flags & CQ_REPORT_MISSED_EVENTS != 0 && !g.store.is_empty()
    }
}
