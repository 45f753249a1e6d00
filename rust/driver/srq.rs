// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues. User SRQs are an mmapped ring in the rxe layout that user space fills
//! without a system call; kernel SRQs a ring of converted WRs. QPs attached to an SRQ take one
//! WQE at a time, when an inbound message needs one and the QP holds none, so WQEs stay in the
//! SRQ for whichever QP needs them first. The limit event (IB_EVENT_SRQ_LIMIT_REACHED) fires
//! once when a take leaves fewer WQEs than the armed limit, as rdma_rxe does.

use super::device::RvrDevice;
use super::qp::user_wqe;
use crate::ib::{
    pd::Pd,
    qp::RecvWrList,
    queue::{KernelRing, Ring, RingDir},
    srq::{SrqAttr, SrqAttrMask, SrqHandle, SrqVerbs},
    uabi::CreateSrqResp,
    udata::Udata,
};
use crate::rvcore::wqe::RecvWr;
use crate::sync::irq_spinlock::IrqSpinLock;
use kernel::{prelude::*, sync::Arc};

/// Largest SRQ depth.
const MAX_SRQ_WR: u32 = 0x4000;
/// SRQ numbers (reported to user space; used by XRC only).
static NEXT_SRQN: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1);
/// `IB_EVENT_SRQ_LIMIT_REACHED`.
const EVENT_SRQ_LIMIT_REACHED: u32 = 15;

/// Where an SRQ's WQEs are.
enum Queue {
    /// The user's mmapped ring.
    User(Ring),
    /// Kernel WRs.
    Kernel(KernelRing<RecvWr>),
}

struct SrqInner {
    queue: Option<Queue>,
    /// Scratch for one ring element.
    elem: KVec<u8>,
    /// Armed limit (0: disarmed).
    limit: u32,
}

/// An SRQ, shared by its verbs and the QPs that take from it.
#[pin_data]
pub struct SrqShared {
    /// PD identity.
    pub pd_id: u32,
    handle: SrqHandle,
    max_sge: usize,
    capacity: u32,
    #[pin]
    inner: IrqSpinLock<SrqInner>,
}

impl SrqShared {
    /// Takes the oldest WQE for a QP. Returns it and whether the limit event must be raised
    /// (call [`SrqShared::limit_reached`] once no lock is held). A malformed user WQE is
    /// skipped.
    pub fn take(&self) -> (Option<RecvWr>, bool) {
        let mut g = self.inner.lock();
        let SrqInner { queue, elem, limit } = &mut *g;
        let wr = match queue.as_mut() {
            None => None,
            Some(Queue::Kernel(k)) => k.pop(),
            Some(Queue::User(r)) => {
                let mut got = None;
                while let Some(e) = elem.get_mut(..r.elem_size()) {
                    if !r.peek_copy(e) {
                        break;
                    }
                    let parsed = user_wqe::parse_recv(e, self.max_sge);
                    r.advance_consumer();
                    if let Ok(wr) = parsed {
                        got = Some(wr);
                        break;
                    }
                }
                got
            }
        };
        let count = match queue.as_ref() {
            Some(Queue::Kernel(k)) => k.count(),
            Some(Queue::User(r)) => r.count(),
            None => 0,
        };
        let fire = wr.is_some() && *limit != 0 && count < *limit;
        if fire {
            *limit = 0;
        }
        (wr, fire)
    }

    /// Raises IB_EVENT_SRQ_LIMIT_REACHED (no driver lock held).
    pub fn limit_reached(&self) {
        self.handle.dispatch_event(EVENT_SRQ_LIMIT_REACHED);
    }
}

/// rvrdma's data of an SRQ.
pub struct RvrSrq(pub Arc<SrqShared>);

impl SrqVerbs for RvrDevice {
    type Srq = RvrSrq;

    fn create_srq(
        pd: &Pd<Self>,
        attr: &mut SrqAttr,
        handle: SrqHandle,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<RvrSrq> {
        let max_sge = attr.max_sge.max(1);
        if attr.max_wr == 0
            || attr.max_wr > MAX_SRQ_WR
            || max_sge > super::qp::MAX_SGE
            || attr.srq_limit > attr.max_wr
        {
            return Err(EINVAL);
        }
        let elem = user_wqe::RECV_WQE_HEADER + max_sge as usize * user_wqe::SGE_SIZE;
        let (queue, resp) = match udata {
            Some(u) => {
                if u.outlen() < size_of::<CreateSrqResp>() {
                    return Err(EINVAL);
                }
                let (r, mi) = Ring::new_user(u, RingDir::FromUser, attr.max_wr, elem)?;
                (Queue::User(r), Some((u, mi)))
            }
            None => (Queue::Kernel(KernelRing::new(attr.max_wr)?), None),
        };
        let (capacity, elem_len) = match &queue {
            Queue::User(r) => (r.capacity(), r.elem_size()),
            Queue::Kernel(k) => (k.capacity(), 0),
        };
        let limit = attr.srq_limit;
        let pd_id = pd.data().id;
        let scratch = KVec::from_elem(0u8, elem_len, GFP_KERNEL)?;
        let shared = Arc::pin_init(
            try_pin_init!(SrqShared {
                pd_id,
                handle,
                max_sge: max_sge as usize,
                capacity,
                inner <- crate::new_irq_spinlock!(
                    SrqInner {
                        queue: Some(queue),
                        elem: scratch,
                        limit,
                    },
                    "rvrdma_srq"
                ),
            }),
            GFP_KERNEL,
        )?;
        if let Some((u, mi)) = resp {
            u.respond(&CreateSrqResp {
                mi,
                srq_num: NEXT_SRQN.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
                reserved: 0,
            })?;
        }
        attr.max_wr = capacity;
        attr.max_sge = max_sge;
        Ok(RvrSrq(shared))
    }

    fn modify_srq(srq: &RvrSrq, attr: &SrqAttr, mask: SrqAttrMask) -> Result {
        if mask.contains(SrqAttrMask::MAX_WR) {
            // Resizing needs the rxe ABI's out-of-band mmap info exchange: not offered.
            return Err(crate::errno::eopnotsupp());
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            if attr.srq_limit > srq.0.capacity {
                return Err(EINVAL);
            }
            srq.0.inner.lock().limit = attr.srq_limit;
        }
        Ok(())
    }

    fn query_srq(srq: &RvrSrq) -> Result<SrqAttr> {
        Ok(SrqAttr {
            max_wr: srq.0.capacity,
            max_sge: srq.0.max_sge as u32,
            srq_limit: srq.0.inner.lock().limit,
        })
    }

    fn destroy_srq(srq: RvrSrq) {
        // The ring (and its mmap entry) goes now, in process context.
        let q = srq.0.inner.lock().queue.take();
        drop(q);
    }

    fn post_srq_recv(srq: &RvrSrq, wrs: &mut RecvWrList<'_>) -> Result {
        let mut g = srq.0.inner.lock();
        while let Some(wr) = wrs.next_wr()? {
            if wr.sg.as_slice().len() > srq.0.max_sge {
                return Err(EINVAL);
            }
            match g.queue.as_mut() {
                Some(Queue::Kernel(k)) => k.push(wr).map_err(|_| ENOMEM)?,
                _ => return Err(EINVAL),
            }
        }
        Ok(())
    }
}
