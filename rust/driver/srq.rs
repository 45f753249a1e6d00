// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues. User SRQs are an mmapped ring in the rxe layout that user space fills
//! without a system call; kernel SRQs a ring of converted WRs. QPs attached to an SRQ take one
//! WQE at a time, when an inbound message needs one and the QP holds none, so WQEs stay in the
//! SRQ for whichever QP needs them first. The limit event (IB_EVENT_SRQ_LIMIT_REACHED) fires
//! once when a take leaves fewer WQEs than the armed limit, as rdma_rxe does.
//!
//! Modify SRQ resizes (`IB_SRQ_MAX_WR`) as rxe does: a new queue is allocated outside the lock,
//! the pending WQEs move into it in order under the lock the receive path takes them under, and
//! the caller of a user SRQ gets the new ring's mmap info through the pointer in its request
//! (`rxe_modify_srq_cmd`) and maps the ring again.

use super::device::RvrDevice;
use super::limits::{Quota, Res};
use super::qp::user_wqe;
use crate::ib::{
    pd::Pd,
    qp::RecvWrList,
    queue::{KernelRing, Ring, RingDir},
    srq::{SrqAttr, SrqAttrMask, SrqHandle, SrqVerbs},
    uabi::{CreateSrqResp, MmapInfo, ModifySrqCmd},
    udata::Udata,
};
use crate::rvcore::wqe::RecvWr;
use crate::sync::irq_spinlock::IrqSpinLock;
use kernel::{prelude::*, sync::Arc};

/// Largest SRQ depth (`max_srq_wr`).
pub const MAX_SRQ_WR: u32 = 0x4000;
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

impl Queue {
    /// A queue of at least `max_wr` WQEs of up to `max_sge` SGEs: a ring that the caller of
    /// `udata` maps with the returned info, or (kernel caller) a ring of WRs. May sleep.
    fn new(max_wr: u32, max_sge: usize, udata: Option<&Udata<'_>>) -> Result<(Self, MmapInfo)> {
        match udata {
            Some(u) => {
                let elem = user_wqe::RECV_WQE_HEADER + max_sge * user_wqe::SGE_SIZE;
                let (r, mi) = Ring::new_user(u, RingDir::FromUser, max_wr, elem)?;
                Ok((Queue::User(r), mi))
            }
            None => Ok((Queue::Kernel(KernelRing::new(max_wr)?), MmapInfo::default())),
        }
    }

    /// Usable depth (what the verbs report as `max_wr`).
    fn capacity(&self) -> u32 {
        match self {
            Queue::User(r) => r.capacity(),
            Queue::Kernel(k) => k.capacity(),
        }
    }

    /// WQEs posted and not yet taken.
    fn count(&self) -> u32 {
        match self {
            Queue::User(r) => r.count(),
            Queue::Kernel(k) => k.count(),
        }
    }

    /// Moves the pending WQEs of `old` into this fresh queue, oldest first. `EINVAL`, and
    /// nothing moves, if they do not fit or the queues are of different kinds.
    fn take_pending(&mut self, old: &mut Queue) -> Result {
        match (self, old) {
            (Queue::User(new), Queue::User(old)) => new.take_pending(old),
            (Queue::Kernel(new), Queue::Kernel(old)) => new.take_pending(old),
            _ => return Err(EINVAL),
        }
        .map_err(|_| EINVAL)
    }
}

struct SrqInner {
    queue: Option<Queue>,
    /// Scratch for one ring element.
    elem: KVec<u8>,
    /// Armed limit (0: disarmed).
    limit: u32,
}

/// A resize under way: the new queue and the `max_wr` asked for (the queue may hold more).
struct Resize {
    queue: Queue,
    max_wr: u32,
}

impl SrqInner {
    /// Modify SRQ under the lock: `resize` replaces the queue and `limit` becomes the armed
    /// limit. Everything is checked before anything changes, so a refused call leaves the SRQ as
    /// it was (ibv_modify_srq(3)). `EINVAL`, as rxe, when the pending WQEs do not fit the new
    /// queue, or the armed limit (the new one if given) exceeds the `max_wr` asked for (the
    /// depth without a resize).
    ///
    /// Returns the queue no longer used (the old one, or the new one when refused): drop it
    /// after releasing the lock (dropping a user ring may sleep).
    fn modify(&mut self, resize: Option<Resize>, limit: Option<u32>) -> (Result, Option<Queue>) {
        let (mut fresh, max_wr) = match resize {
            Some(r) => (Some(r.queue), Some(r.max_wr)),
            None => (None, None),
        };
        let Some(cur) = self.queue.as_mut() else {
            return (Err(EINVAL), fresh);
        };
        if limit.unwrap_or(self.limit) > max_wr.unwrap_or(cur.capacity()) {
            return (Err(EINVAL), fresh);
        }
        if let Some(new) = fresh.as_mut() {
            if let Err(e) = new.take_pending(cur) {
                return (Err(e), fresh);
            }
            core::mem::swap(cur, new);
        }
        if let Some(l) = limit {
            self.limit = l;
        }
        (Ok(()), fresh)
    }
}

/// An SRQ, shared by its verbs and the QPs that take from it.
#[pin_data]
pub struct SrqShared {
    /// PD identity.
    pub pd_id: u32,
    handle: SrqHandle,
    max_sge: usize,
    /// Counts against the device's SRQ limit while the SRQ lives.
    _quota: Quota,
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
            Some(Queue::User(r)) => take_user(r, elem, self.max_sge),
        };
        let count = queue.as_ref().map_or(0, Queue::count);
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

/// Takes the next WQE of a user SRQ ring. One that does not parse is still taken, as a
/// [`RecvWr::malformed`]: the message that needed it fails with a Local QP Operation Error
/// instead of the WQE vanishing without a completion.
fn take_user(r: &mut Ring, elem: &mut KVec<u8>, max_sge: usize) -> Option<RecvWr> {
    let e = elem.get_mut(..r.elem_size())?;
    if !r.peek_copy(e) {
        return None;
    }
    let wr = user_wqe::parse_recv(e, max_sge).unwrap_or_else(|(id, _)| RecvWr::malformed(id));
    r.advance_consumer();
    Some(wr)
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
        if udata
            .as_ref()
            .is_some_and(|u| u.outlen() < size_of::<CreateSrqResp>())
        {
            return Err(EINVAL);
        }
        let quota = Quota::take(&pd.device().data().shared, Res::Srq)?;
        let (queue, mi) = Queue::new(attr.max_wr, max_sge as usize, udata.as_deref())?;
        let capacity = queue.capacity();
        let elem_len = match &queue {
            Queue::User(r) => r.elem_size(),
            Queue::Kernel(_) => 0,
        };
        let limit = attr.srq_limit;
        let pd_id = pd.data().id;
        let scratch = KVec::from_elem(0u8, elem_len, GFP_KERNEL)?;
        let shared = Arc::pin_init(
            try_pin_init!(SrqShared {
                pd_id,
                handle,
                max_sge: max_sge as usize,
                _quota: quota,
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
        if let Some(u) = udata {
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

    fn modify_srq(
        srq: &RvrSrq,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        udata: Option<&mut Udata<'_>>,
    ) -> Result {
        let s = &srq.0;
        let resize = if mask.contains(SrqAttrMask::MAX_WR) {
            if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR {
                return Err(EINVAL);
            }
            let udata = udata.as_deref();
            // rxe's request names where the new ring's mmap info goes.
            let cmd = udata.map(Udata::read::<ModifySrqCmd>).transpose()?;
            let (queue, mi) = Queue::new(attr.max_wr, s.max_sge, udata)?;
            if let (Some(u), Some(cmd)) = (udata, cmd) {
                // Answered before the swap, as rxe: user space ignores it if the verb fails.
                u.respond_at(cmd.mmap_info_addr, &mi)?;
            }
            Some(Resize {
                queue,
                max_wr: attr.max_wr,
            })
        } else {
            None
        };
        let limit = mask.contains(SrqAttrMask::LIMIT).then_some(attr.srq_limit);
        let (res, unused) = s.inner.lock().modify(resize, limit);
        // Outside the lock: dropping a user ring removes its mmap entry, which may sleep.
        drop(unused);
        res
    }

    fn query_srq(srq: &RvrSrq) -> Result<SrqAttr> {
        let g = srq.0.inner.lock();
        Ok(SrqAttr {
            max_wr: g.queue.as_ref().map_or(0, Queue::capacity),
            max_sge: srq.0.max_sge as u32,
            srq_limit: g.limit,
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

#[kernel::prelude::kunit_tests(rvrdma_srq)]
mod tests {
    use super::*;

    fn wr(id: u64) -> RecvWr {
        RecvWr {
            wr_id: id,
            ..Default::default()
        }
    }

    /// A kernel SRQ of `max_wr` WQEs holding WRs `ids`, limit `limit`.
    fn kernel_srq(max_wr: u32, ids: core::ops::Range<u64>, limit: u32) -> SrqInner {
        let mut k = KernelRing::new(max_wr).unwrap();
        for i in ids {
            assert!(k.push(wr(i)).is_ok());
        }
        SrqInner {
            queue: Some(Queue::Kernel(k)),
            elem: KVec::new(),
            limit,
        }
    }

    fn fresh(max_wr: u32) -> Option<Resize> {
        Some(Resize {
            queue: Queue::new(max_wr, 1, None).unwrap().0,
            max_wr,
        })
    }

    fn depth(s: &SrqInner) -> u32 {
        s.queue.as_ref().map_or(0, Queue::capacity)
    }

    /// Pops every WR of a kernel SRQ; returns their ids in order.
    fn drain(s: &mut SrqInner) -> KVec<u64> {
        let mut ids = KVec::new();
        if let Some(Queue::Kernel(k)) = s.queue.as_mut() {
            while let Some(w) = k.pop() {
                ids.push(w.wr_id, GFP_KERNEL).unwrap();
            }
        }
        ids
    }

    /// A kernel SRQ grows with WQEs pending (the consumer index wrapped): they keep their
    /// order and the new depth takes more; it shrinks again to what still fits.
    #[test]
    fn kernel_resize_keeps_order() {
        let mut s = kernel_srq(7, 0..7, 0);
        if let Some(Queue::Kernel(k)) = s.queue.as_mut() {
            for want in 0..4 {
                assert_eq!(k.pop().map(|w| w.wr_id), Some(want));
            }
            for i in 7..11 {
                assert!(k.push(wr(i)).is_ok());
            }
        }
        let (r, old) = s.modify(fresh(20), None);
        assert_eq!(r, Ok(()));
        assert_eq!(old.as_ref().map(Queue::capacity), Some(7));
        assert_eq!(depth(&s), 31);
        if let Some(Queue::Kernel(k)) = s.queue.as_mut() {
            for i in 11..35 {
                assert!(k.push(wr(i)).is_ok());
            }
            assert!(k.is_full());
        }
        if let Some(Queue::Kernel(k)) = s.queue.as_mut() {
            for want in 4..24 {
                assert_eq!(k.pop().map(|w| w.wr_id), Some(want));
            }
        }
        let (r, _) = s.modify(fresh(12), None);
        assert_eq!(r, Ok(()));
        assert_eq!(depth(&s), 15);
        let ids = drain(&mut s);
        assert!(ids.iter().copied().eq(24..35));
    }

    /// A user SRQ WQE that does not parse (more SGEs than the SRQ allows) is taken as a
    /// malformed WR with its wr_id, not skipped; the WQE behind it comes next, intact.
    #[test]
    fn unparsable_user_wqe_is_taken_as_malformed() {
        let esz = user_wqe::RECV_WQE_HEADER + 2 * user_wqe::SGE_SIZE;
        let mut r = Ring::new_kernel(RingDir::FromUser, 4, esz).unwrap();
        let mut wqe = KVec::from_elem(0u8, r.elem_size(), GFP_KERNEL).unwrap();
        for (id, nsge) in [(41u64, 5u32), (42, 1)] {
            wqe[..8].copy_from_slice(&id.to_ne_bytes());
            let at = crate::ib::uabi::recv_wqe::DMA_NUM_SGE;
            wqe[at..at + 4].copy_from_slice(&nsge.to_ne_bytes());
            assert!(r.produce(&wqe).is_ok());
        }
        let mut elem = KVec::from_elem(0u8, r.elem_size(), GFP_KERNEL).unwrap();
        let bad = take_user(&mut r, &mut elem, 1).unwrap();
        assert_eq!(bad.wr_id, 41);
        assert!(bad.sg.total_len().is_none());
        let good = take_user(&mut r, &mut elem, 1).unwrap();
        assert_eq!(good.wr_id, 42);
        assert!(good.sg.total_len().is_some());
        assert!(take_user(&mut r, &mut elem, 1).is_none());
    }

    /// Every refusal is EINVAL and leaves the queue, its WQEs and the limit as they were:
    /// fewer slots than pending WQEs, a new limit above the new `max_wr`, the armed limit above
    /// it (even when the rounded-up depth would hold it, as rxe), a destroyed SRQ.
    #[test]
    fn refusals_change_nothing() {
        let mut s = kernel_srq(15, 0..10, 4);
        for (max_wr, limit) in [(2, None), (2, Some(1)), (7, Some(1)), (20, Some(32))] {
            let (r, unused) = s.modify(fresh(max_wr), limit);
            assert_eq!(r, Err(EINVAL));
            assert!(unused.is_some());
            assert_eq!((depth(&s), s.limit), (15, 4));
        }
        assert_eq!(s.modify(None, Some(16)).0, Err(EINVAL));
        // 7 pending fit max_wr 7 (depth 7) and 10 (depth 15); an armed limit of 12 exceeds
        // both; a new limit of 10 in the same call fits.
        if let Some(Queue::Kernel(k)) = s.queue.as_mut() {
            for want in 0..3 {
                assert_eq!(k.pop().map(|w| w.wr_id), Some(want));
            }
        }
        s.limit = 12;
        for max_wr in [7, 10] {
            assert_eq!(s.modify(fresh(max_wr), None).0, Err(EINVAL));
            assert_eq!((depth(&s), s.limit), (15, 12));
        }
        assert_eq!(s.modify(fresh(10), Some(10)).0, Ok(()));
        assert_eq!((depth(&s), s.limit), (15, 10));
        let ids = drain(&mut s);
        assert!(ids.iter().copied().eq(3..10));
        s.queue = None;
        assert_eq!(s.modify(fresh(4), None).0, Err(EINVAL));
        assert_eq!(s.modify(None, Some(0)).0, Err(EINVAL));
    }

    /// Resize and limit in one call: both apply, the new limit checked against the new
    /// `max_wr`.
    #[test]
    fn resize_with_limit() {
        let mut s = kernel_srq(3, 0..3, 2);
        let (r, _) = s.modify(fresh(40), Some(30));
        assert_eq!(r, Ok(()));
        assert_eq!((depth(&s), s.limit), (63, 30));
        let (r, _) = s.modify(fresh(3), Some(3));
        assert_eq!(r, Ok(()));
        assert_eq!((depth(&s), s.limit), (3, 3));
        let (r, unused) = s.modify(None, Some(0));
        assert_eq!(r, Ok(()));
        assert!(unused.is_none());
        assert_eq!((depth(&s), s.limit), (3, 0));
        assert!(drain(&mut s).iter().copied().eq(0..3));
    }

    /// A ring in the rxe layout (a user SRQ's) moves its pending slots, wrapped, in order; a
    /// queue of the other kind is refused.
    #[test]
    fn ring_resize_keeps_order() {
        let mut r = Ring::new_kernel(RingDir::FromUser, 3, 64).unwrap();
        for i in 0..3u8 {
            assert!(r.produce(&[i; 64]).is_ok());
        }
        r.advance_consumer();
        r.advance_consumer();
        for i in 3..5u8 {
            assert!(r.produce(&[i; 64]).is_ok());
        }
        let mut s = SrqInner {
            queue: Some(Queue::User(r)),
            elem: KVec::new(),
            limit: 0,
        };
        assert_eq!(s.modify(fresh(8), None).0, Err(EINVAL));
        let bigger = Resize {
            queue: Queue::User(Ring::new_kernel(RingDir::FromUser, 7, 64).unwrap()),
            max_wr: 7,
        };
        let (res, _) = s.modify(Some(bigger), None);
        assert_eq!(res, Ok(()));
        assert_eq!(depth(&s), 7);
        let Some(Queue::User(r)) = s.queue.as_mut() else {
            panic!("not a ring");
        };
        assert_eq!(r.count(), 3);
        let mut out = [0u8; 64];
        for want in 2..5u8 {
            assert!(r.peek_copy(&mut out));
            assert!(out.iter().all(|b| *b == want));
            r.advance_consumer();
        }
        assert!(r.is_empty());
    }
}
