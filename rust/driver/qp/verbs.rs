// SPDX-License-Identifier: GPL-2.0

//! The QP verbs: create (queue geometry in the rxe ABI, user rings), modify, query, destroy,
//! and posting (user doorbells run the QP inline; kernel callers' WRs are queued for the work
//! item, since they may post from any context).

use super::kernel_inline;
use super::modify_attr;
use super::outputs::QpOut;
use super::routes::Wanted;
use super::rx_queue::RxQueue;
use super::slots::Slots;
use super::transmit::{self, TxStream};
use super::user_rings::UserRings;
use super::user_wqe;
use super::{destroy, CoreQp, Entry, QpInner, QpShared, RvrQp};
use super::{MAX_INLINE, MAX_QP_WR, MAX_SGE};
use crate::driver::counters::Counters;
use crate::driver::device::RvrDevice;
use crate::driver::mcast::GroupChange;
use crate::ib::{
    device::Device,
    pd::Pd,
    qp::{
        ModifyAttr, QpCap, QpHandle, QpInitAttr, QpQuery, QpType as IbQpType, QpVerbs, RecvWrList,
        SendWrList,
    },
    queue::{Ring, RingDir},
    uabi::CreateQpResp,
    udata::Udata,
};
use crate::net::udp_tunnel;
use crate::rvcore::qp::{QpCounters, QpCreate, QpParts};
use crate::rvcore::qp_state::{AttrMask, QpType};
use crate::rvcore::requester::{PostError, MAX_UNACKED_PSNS};
use crate::rvcore::wqe::{RecvSlot, SendFlags, SendOpcode, SendSlot, SgList, Sge, UdDest, WrExtra};
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use kernel::{prelude::*, sync::Arc, time::hrtimer::HrTimer};

/// Send WQEs a user QP's core holds at most. The requester keeps at most [`MAX_UNACKED_PSNS`]
/// packets unacknowledged and each WQE that goes on the wire takes at least one, so WQEs beyond
/// these would only wait in the core instead of the ring.
const USER_SQ_WINDOW: u32 = MAX_UNACKED_PSNS;

impl QpShared {
    /// Posts kernel work requests with `post` under the QP lock (any context), then schedules
    /// the work item, also after an error. Packets the posting builds (a credit update on a
    /// receive) wait in the QP's streams for the work item to send them: the caller may not
    /// be able to transmit. `post` gets the QP's inline area, and lists datagram destinations
    /// to look routes up for.
    fn post_kernel(
        self: &Arc<Self>,
        post: impl FnOnce(&mut CoreQp, &mut [u8], &mut QpOut<'_>, &mut Wanted) -> Result,
    ) -> Result {
        let mut wanted = Wanted::default();
        let res = {
            let mut g = self.inner.lock();
            let inner = &mut *g;
            let mem = self.memory(&[]);
            let mut out = QpOut::new(
                self,
                true,
                &mut inner.timers,
                &mut inner.pending,
                &mem,
                Some(&inner.paths.routes),
            );
            let res = post(
                &mut inner.core,
                &mut inner.user.inline[..],
                &mut out,
                &mut wanted,
            );
            // A credit update built for a path without a route yet: the work item looks it up.
            let need_route = out.need_route;
            inner.paths.need_route |= need_route;
            for p in wanted.0.iter().flatten() {
                inner.paths.want(p);
            }
            res
        };
        self.schedule();
        res
    }

    /// Posts kernel send WRs (any context).
    fn post_kernel_send(self: &Arc<Self>, wrs: &mut SendWrList<'_>) -> Result {
        let sig_all = self.sig_all;
        let datagram = matches!(self.qp_type, IbQpType::Ud | IbQpType::Gsi);
        let (max_inline, max_send_sge) = (self.max_inline, self.max_send_sge);
        self.post_kernel(|core, inline, out, wanted| {
            while let Some(mut wr) = wrs.next_wr()? {
                if wr.opcode == SendOpcode::RegMr {
                    // Fast registration (kernel callers only): the MR, its new key and
                    // rights, and the pages `map_mr_sg` gave it.
                    wr.extra = WrExtra::Reg(wrs.reg_mr::<RvrDevice>().ok_or(EINVAL)?);
                }
                if sig_all {
                    wr.flags.0 |= SendFlags::SIGNALED;
                }
                if datagram && !wr.opcode.is_local() {
                    // The destination is the WR's AH, of the QP's PD. Its route is looked up
                    // by the work item (this may be atomic context) before it transmits.
                    let ah = wrs.ah::<RvrDevice>().ok_or(EINVAL)?;
                    if ah.pd_id != self.pd_id {
                        return Err(EINVAL);
                    }
                    let path = ah.path.to_info(0, 0);
                    wanted.add(&path);
                    wr.set_ud_path(path);
                }
                if wr.flags.has(SendFlags::INLINE) {
                    // The list is replaced by one naming the copy: check its length first.
                    if wr.sg.as_slice().len() > max_send_sge {
                        return Err(EINVAL);
                    }
                    let slot = core.sq_logic().next_slot();
                    let copy = |dst: &mut [u8]| wrs.copy_inline(dst);
                    if let Some(sge) = kernel_inline::stage(slot, inline, max_inline, copy)? {
                        wr.sg = SgList::from_slice(&[sge]).ok_or(EINVAL)?;
                    }
                }
                core.post_send(&wr, out).map_err(post_errno)?;
            }
            Ok(())
        })
    }

    /// Posts kernel receive WRs (any context).
    fn post_kernel_recv(self: &Arc<Self>, wrs: &mut RecvWrList<'_>) -> Result {
        self.post_kernel(|core, _, out, _| {
            while let Some(wr) = wrs.next_wr()? {
                core.post_recv(&wr, out).map_err(post_errno)?;
            }
            Ok(())
        })
    }
}

fn post_errno(e: PostError) -> Error {
    match e {
        PostError::QueueFull => ENOMEM,
        PostError::InvalidState | PostError::InvalidWr => EINVAL,
    }
}

fn round_up_pow2(v: u32) -> u32 {
    v.max(1).checked_next_power_of_two().unwrap_or(v)
}

impl QpVerbs for RvrDevice {
    type Qp = RvrQp;

    fn create_qp(
        pd: &Pd<Self>,
        init: &mut QpInitAttr<'_, Self>,
        handle: QpHandle,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(RvrQp, u32)> {
        if init.create_flags() != 0 {
            return Err(crate::errno::eopnotsupp());
        }
        let ib_type = init.qp_type().ok_or_else(crate::errno::eopnotsupp)?;
        let (qp_type, gsi_port) = match ib_type {
            IbQpType::Rc => (QpType::Rc, 0),
            IbQpType::Uc => (QpType::Uc, 0),
            IbQpType::Ud => (QpType::Ud, 0),
            // The GSI QP of a port: QP1 on the wire, one per port.
            IbQpType::Gsi => {
                let port = u8::try_from(init.port_num()).map_err(|_| EINVAL)?;
                if port == 0 || u32::from(port) > pd.device().data().nports() {
                    return Err(EINVAL);
                }
                (QpType::Gsi, port)
            }
        };
        let srq = init.srq().map(|s| s.data().0.clone());
        if srq.as_ref().is_some_and(|s| s.pd_id != pd.data().id) {
            return Err(EINVAL);
        }
        let dev = pd.device();
        let shared = dev.data().shared.clone();
        let cap = init.cap();
        if cap.max_send_wr == 0
            || cap.max_send_wr > MAX_QP_WR
            || cap.max_recv_wr > MAX_QP_WR
            || cap.max_send_sge > MAX_SGE
            || cap.max_recv_sge > MAX_SGE
            || cap.max_inline_data > MAX_INLINE
        {
            return Err(EINVAL);
        }
        // The rxe ring geometry: capacity is a power of two minus one, at least what was asked.
        let sq_depth = round_up_pow2(cap.max_send_wr + 1) - 1;
        let rq_depth = round_up_pow2(cap.max_recv_wr.max(1) + 1) - 1;
        let send_sge = cap.max_send_sge.max(1);
        // rxe: SQ elements hold the SGEs or the inline data, whichever is larger.
        let sq_payload = (send_sge as usize * user_wqe::SGE_SIZE).max(cap.max_inline_data as usize);
        let max_inline = sq_payload.min(MAX_INLINE as usize);
        let max_send_sge = (sq_payload / user_wqe::SGE_SIZE).min(MAX_SGE as usize);
        let max_recv_sge = cap.max_recv_sge.max(1) as usize;
        let sq_elem = user_wqe::SEND_WQE_HEADER + sq_payload;
        let rq_elem = user_wqe::RECV_WQE_HEADER + max_recv_sge * user_wqe::SGE_SIZE;

        let (mut sq_ring, rq_ring, resp) = match udata {
            Some(u) => {
                if u.inlen() != 0 || u.outlen() < size_of::<CreateQpResp>() {
                    return Err(EINVAL);
                }
                let (sq, sq_mi) = Ring::new_user(u, RingDir::FromUser, sq_depth, sq_elem)?;
                if srq.is_some() {
                    // Receives come from the SRQ: no receive ring to map.
                    let resp = CreateQpResp {
                        rq_mi: Default::default(),
                        sq_mi,
                    };
                    (Some(sq), None, Some((u, resp)))
                } else {
                    let (rq, rq_mi) = Ring::new_user(u, RingDir::FromUser, rq_depth, rq_elem)?;
                    let resp = CreateQpResp { rq_mi, sq_mi };
                    (Some(sq), Some(rq), Some((u, resp)))
                }
            }
            None => (None, None, None),
        };
        let sq_watch = match sq_ring.as_mut() {
            Some(r) => r.watch_producer()?,
            None => None,
        };
        let sq_slots = sq_ring.as_ref().map_or(sq_depth, |r| r.capacity());
        // The send WQEs the core holds. A kernel caller posts into the core itself, so it
        // holds them all; a user QP's beyond `USER_SQ_WINDOW` wait in the ring, which saves
        // their slots, SGEs and inline data.
        let core_sq = if sq_ring.is_some() {
            sq_slots.min(USER_SQ_WINDOW)
        } else {
            sq_slots
        };
        // An SRQ QP holds at most the WQE of the message in progress, of any length the SRQ
        // takes.
        let (rq_slots, rq_sge_room) = match (&srq, rq_ring.as_ref()) {
            (Some(_), _) => (4, MAX_SGE as usize),
            (None, Some(r)) => (r.capacity(), max_recv_sge),
            (None, None) => (rq_depth, max_recv_sge),
        };
        // Only a datagram's WR names its destination.
        let sq_dests = if qp_type.is_datagram() {
            core_sq as usize
        } else {
            0
        };
        let mut tunnels = KVec::with_capacity(shared.ports.len(), GFP_KERNEL)?;
        for nd in shared.ports.iter() {
            tunnels.push(udp_tunnel::acquire(nd)?, GFP_KERNEL)?;
        }
        let send_cq = init.send_cq().data().clone();
        let recv_cq = init.recv_cq().data().clone();
        let sig_all = init.signal_all();
        let pd_id = pd.data().id;
        let for_qp = shared.clone();
        let make = |qpn| {
            let parts = QpParts::new(
                QpCreate {
                    qp_type,
                    qpn,
                    srq: srq.is_some(),
                },
                (
                    Slots::new(SendSlot::default(), core_sq as usize)?,
                    Slots::new(Sge::default(), core_sq as usize * max_send_sge)?,
                    Slots::new(UdDest::EMPTY, sq_dests)?,
                ),
                (
                    Slots::new(RecvSlot::default(), rq_slots as usize)?,
                    Slots::new(Sge::default(), rq_slots as usize * rq_sge_room)?,
                ),
            )
            .ok_or(EINVAL)?;
            let user = UserRings::new(sq_ring, rq_ring, core_sq, max_inline)?;
            let last_counters = KBox::new(QpCounters::default(), GFP_KERNEL)?;
            let inner = QpInner::new(parts, user, (sq_slots, rq_slots), last_counters);
            Arc::pin_init(
                try_pin_init!(QpShared {
                    qpn,
                    port: gsi_port,
                    wc_port: AtomicU8::new(gsi_port.max(1)),
                    qp_type: ib_type,
                    dev: for_qp,
                    handle,
                    pd_id,
                    send_cq: send_cq.clone(),
                    recv_cq: recv_cq.clone(),
                    srq: srq.clone(),
                    sig_all,
                    max_send_sge,
                    max_recv_sge,
                    max_inline,
                    tunnels,
                    tx_paged: super::paged_hint::PagedHint::new(ib_type),
                    requests <- TxStream::new(),
                    responses <- TxStream::new(),
                    linger: Default::default(),
                    sends_refused: AtomicBool::new(true),
                    sq_watch: sq_watch.clone(),
                    inner <- crate::new_irq_spinlock!(inner, "rvrdma_qp"),
                    work <- kernel::new_work!("rvrdma_qp"),
                    requests_work <- kernel::new_work!("rvrdma_qp_requests"),
                    responses_work <- kernel::new_work!("rvrdma_qp_responses"),
                    odp_work <- kernel::new_work!("rvrdma_qp_odp"),
                    rx <- RxQueue::new(),
                    rx_work <- kernel::new_work!("rvrdma_qp_rx"),
                    rx_any_work <- kernel::new_work!("rvrdma_qp_rx_any"),
                    rx_urgent <- kernel::new_delayed_work!("rvrdma_qp_rx_urgent"),
                    linger_work <- kernel::new_work!("rvrdma_qp_linger"),
                    timer_work <- kernel::new_work!("rvrdma_qp_timer"),
                    work_queued: Default::default(),
                    rx_work_queued: Default::default(),
                    timer_work_queued: Default::default(),
                    timer <- HrTimer::new(),
                }),
                GFP_KERNEL,
            )
        };
        let qp = if gsi_port != 0 {
            shared.insert_gsi(gsi_port, make)?
        } else {
            shared.insert_qp(make)?
        };
        init.set_cap(QpCap {
            max_send_wr: sq_slots,
            max_recv_wr: rq_slots,
            max_send_sge: max_send_sge as u32,
            max_recv_sge: max_recv_sge as u32,
            max_inline_data: max_inline as u32,
            max_rdma_ctxs: cap.max_rdma_ctxs,
        });
        if let Some((u, resp)) = resp {
            if let Err(e) = u.respond(&resp) {
                destroy(qp);
                return Err(e);
            }
        }
        qp.send_cq.attach();
        qp.recv_cq.attach();
        let qpn = qp.qpn;
        {
            let mut g = qp.inner.lock();
            g.core.set_port_mtu(transmit::port_mtu(&qp.dev, 1));
        }
        Ok((RvrQp(qp), qpn))
    }

    fn modify_qp(
        _dev: &Device<Self>,
        qp: &RvrQp,
        m: &ModifyAttr<'_>,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result {
        let qp = &qp.0;
        let current = qp.inner.lock().core.query();
        let (a, mask) = modify_attr::to_core(m, &current)?;
        // The path's port (an RC/UC address vector's, or a UD QP's port alone) sets the MTU.
        let new_port = mask.intersects(AttrMask::AV.union(AttrMask::PORT));
        if new_port {
            let mtu = transmit::port_mtu(&qp.dev, a.path.port_num);
            let mut g = qp.inner.lock();
            if let Some(p) = m.path().filter(|_| mask.contains(AttrMask::AV)) {
                g.paths.set_dmac(p.port_num, p.dmac);
            }
            g.core.set_port_mtu(mtu);
        }
        if let Some(p) = m.alt_path() {
            qp.inner.lock().paths.set_dmac(p.port_num, p.dmac);
        }
        // Routes first: the transition may send at once (the unsolicited ACK that announces
        // the initial credits on entering RTR), and nothing under the QP lock may look one up.
        if mask.intersects(AttrMask::AV.union(AttrMask::ALT_PATH)) {
            qp.look_up_routes(&[a.path, a.alt_path]);
        }
        let mut res = Ok(());
        let _ = qp.drive(Entry::Modify(&a, mask, &mut res));
        if res.is_ok() && new_port {
            qp.wc_port.store(a.path.port_num, Ordering::Relaxed);
        }
        if res.is_ok() && qp.dev.apm_bonding() {
            // The bonding policy may have loaded an alternate path: its route, for a failover.
            qp.refresh_routes();
        }
        res
    }

    fn query_qp(qp: &RvrQp) -> Result<QpQuery> {
        let qp = &qp.0;
        let g = qp.inner.lock();
        let a = g.core.query();
        let (pri, alt) = (a.path.port_num.into(), a.alt_path.port_num.into());
        Ok(QpQuery {
            attrs: a,
            dmac: g.paths.dmac(pri),
            alt_dmac: g.paths.dmac(alt),
            cap: QpCap {
                max_send_wr: g.depths.0,
                max_recv_wr: g.depths.1,
                max_send_sge: qp.max_send_sge as u32,
                max_recv_sge: qp.max_recv_sge as u32,
                max_inline_data: qp.max_inline as u32,
                max_rdma_ctxs: 0,
            },
            sig_all: qp.sig_all,
            qp_type: qp.qp_type,
        })
    }

    fn destroy_qp(qp: RvrQp) {
        destroy(qp.0);
    }

    fn post_send(qp: &RvrQp, wrs: Option<&mut SendWrList<'_>>) -> Result {
        match wrs {
            Some(l) => qp.0.post_kernel_send(l),
            None => {
                // The user doorbell (process context): refuse at once in states that take no
                // sends (seed 004), else run inline for latency.
                if qp.0.sends_refused.load(Ordering::Relaxed) && qp.0.refuse_sends() {
                    return Err(EINVAL);
                }
                // Another context (the waiting work item, a packet's turn at the QP) took this
                // doorbell's WQEs under the QP lock, or is taking them, and sends them: nothing
                // to do, and no wait for a lock held while they are built.
                if qp.0.doorbell_needless() {
                    Counters::inc(&qp.0.dev.counters.tx_doorbells_empty);
                    return Ok(());
                }
                // A datagram to a destination without a route yet waits in the ring: look the
                // route up here rather than in the work item, so that the WQEs leave before the
                // call returns (a program may post unsignaled datagrams and destroy the QP at
                // once, as mckey's sender does).
                if qp.0.drive(Entry::Doorbell) {
                    qp.0.refresh_routes();
                    let _ = qp.0.drive(Entry::Doorbell);
                }
                Ok(())
            }
        }
    }

    fn post_recv(qp: &RvrQp, wrs: &mut RecvWrList<'_>) -> Result {
        qp.0.post_kernel_recv(wrs)
    }

    fn attach_mcast(qp: &RvrQp, gid: &[u8; 16]) -> Result {
        let q = &qp.0;
        if q.qp_type != IbQpType::Ud {
            return Err(EINVAL);
        }
        if q.dev.mcast.attach(gid, q.qpn)? == GroupChange::Changed {
            if let Err(e) = q.dev.mc_filter(gid, true) {
                let _ = q.dev.mcast.detach(gid, q.qpn);
                return Err(e);
            }
        }
        Ok(())
    }

    fn detach_mcast(qp: &RvrQp, gid: &[u8; 16]) -> Result {
        let q = &qp.0;
        if q.dev.mcast.detach(gid, q.qpn)? == GroupChange::Changed {
            // The group is gone whatever the filter says; a filter entry too many only costs
            // the NIC some frames the stack drops.
            let _ = q.dev.mc_filter(gid, false);
        }
        Ok(())
    }
}
