// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: the protocol core's [`Qp`] behind an IRQ-safe lock, driven by verbs, received
//! packets, timers and its own work item.
//!
//! Every entry point follows the same pattern ([`QpShared::drive`]): take the QP lock, feed the
//! core (pull user WQEs from the mmapped rings, hand it a packet, a timer expiry or a verb),
//! let it transmit up to a budget, then drop the lock and only then send the packets it built,
//! report async events and wake completion handlers (none of which may run under the lock).
//! Kernel callers of `post_send`/`post_recv` may be in any context: they only queue the work.

use super::counters::Counters;
use super::cq::CqShared;
use super::datapath::DevShared;
use super::device::RvrDevice;
use super::memory::QpMemory;
use super::srq::SrqShared;
use super::transport::{self, QpOut, RouteCache};
use super::user_wqe::{self, WqeError};
use crate::ib::{
    cq::WcQp,
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
use crate::net::skb::SkbQueue;
use crate::net::udp_tunnel::{self, TunnelRef};
use crate::rvcore::apm::{PathInfo, PathMatch};
use crate::rvcore::events::{Completion, CqKind, Timer, WcOpcode, WcStatus};
use crate::rvcore::qp::{Qp, QpAttrs, QpCounters, QpCreate};
use crate::rvcore::qp_state::{AttrMask, QpState, QpType};
use crate::rvcore::requester::PostError;
use crate::rvcore::wire::{bth::RawBth, Headers};
use crate::rvcore::wqe::{RecvSlot, SendFlags, SendOpcode, SendSlot, SgList, Sge};
use crate::sync::{clock::now_ns, irq_spinlock::IrqSpinLock, workqueue};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{
    prelude::*,
    sync::{Arc, ArcBorrow},
    time::{
        hrtimer::{
            ArcHrTimerHandle, HrTimer, HrTimerCallback, HrTimerCallbackContext, HrTimerPointer,
            HrTimerRestart, RelativeSoftMode,
        },
        Delta, Monotonic,
    },
    workqueue::{Work, WorkItem},
};

/// The core QP with kernel-allocated queue storage.
pub type CoreQp = Qp<KVec<SendSlot>, KVec<RecvSlot>>;

/// Packets a work run transmits before it yields (it requeues itself).
const WORK_BUDGET: usize = 64;
/// Largest SQ/RQ depth.
pub const MAX_QP_WR: u32 = 0x4000;
/// Largest number of SGEs per WR (the core's limit).
pub const MAX_SGE: u32 = crate::rvcore::wqe::MAX_SGE as u32;
/// Largest inline data per send WR.
pub const MAX_INLINE: u32 = 256;
/// First period of the poll that looks for user receive WQEs while the peer may wait for
/// credits, and for WQEs posted to a QP in Error (to flush them). User space posts receives
/// without a system call, so the kernel must look; the period doubles while nothing comes, up
/// to [`RING_POLL_MAX_NS`], and starts again from here once receives appear.
const RING_POLL_NS: u64 = 20_000;
/// Longest ring poll period.
const RING_POLL_MAX_NS: u64 = 16_000_000;

/// Async events and completion wake-ups collected under the lock, delivered after it.
#[derive(Default)]
pub struct Pending {
    /// QP events (`enum ib_event_type`), in order.
    pub events: [u32; 8],
    /// Number of valid entries in `events`.
    pub nevents: usize,
    /// Completion handlers to run: send CQ, receive CQ.
    pub notify: [bool; 2],
    /// CQs that overflowed: send CQ, receive CQ.
    pub cq_err: [bool; 2],
    /// The SRQ's limit event is due.
    pub srq_limit: bool,
}

impl Pending {
    fn take(&mut self) -> Pending {
        core::mem::take(self)
    }

    fn is_empty(&self) -> bool {
        self.nevents == 0
            && !self.srq_limit
            && !self.notify.iter().any(|n| *n)
            && !self.cq_err.iter().any(|n| *n)
    }
}

/// The QP state under the lock.
pub(crate) struct QpInner {
    pub core: CoreQp,
    /// User rings (user QPs only).
    sq: Option<Ring>,
    rq: Option<Ring>,
    /// Scratch for one ring element.
    elem: KVec<u8>,
    /// Inline data of outstanding user sends: `sq depth` slots of `max_inline` bytes.
    pub inline: KVec<u8>,
    /// Send WQEs taken from the user ring so far.
    sq_pulled: u64,
    /// Timer deadlines (ns, 0 = unset): retransmit, RNR, ring poll.
    pub deadlines: [u64; 3],
    /// When the hrtimer is armed to fire (0 = not armed), and its handle.
    armed_at: u64,
    timer: Option<ArcHrTimerHandle<QpShared>>,
    /// Work for after the lock.
    pub pending: Pending,
    /// Core counters already folded into the device's.
    last_counters: QpCounters,
    /// Destination MACs by port (Modify QP's, for Query QP): a migration swaps the paths, and
    /// each path is on its own port.
    dmac: [[u8; 6]; 2],
    /// Routes of the paths in use.
    routes: RouteCache,
    /// Current ring poll period (0: not polling).
    poll_period: u64,
    /// Send and receive queue depths granted.
    sq_depth: u32,
    rq_depth: u32,
    /// A route lookup is due (done by the work item, in process context).
    need_route: bool,
    /// Set by destroy: nothing runs any more.
    dead: bool,
}

/// A queue pair, shared by its verbs, work item, timer and the receive path.
#[pin_data]
pub struct QpShared {
    /// QP number.
    pub qpn: u32,
    /// The device's datapath state.
    pub dev: Arc<DevShared>,
    handle: QpHandle,
    /// PD identity for memory checks.
    pub pd_id: u32,
    send_cq: Arc<CqShared>,
    recv_cq: Arc<CqShared>,
    /// The SRQ receive WQEs come from, if any.
    srq: Option<Arc<SrqShared>>,
    /// Whether every send WR is signaled.
    sig_all: bool,
    max_send_sge: usize,
    max_recv_sge: usize,
    /// Inline bytes per send WR.
    pub max_inline: usize,
    /// The UDP tunnel of each port's network namespace.
    pub tunnels: KVec<TunnelRef>,
    /// Packets built under `inner`, in build order, waiting to be sent without the lock.
    #[pin]
    txq: SkbQueue,
    /// Set while one context drains `txq` (the others leave their packets to it), so packets
    /// leave in the order the core built them whichever context built them.
    tx_busy: AtomicBool,
    #[pin]
    inner: IrqSpinLock<QpInner>,
    #[pin]
    work: Work<QpShared>,
    #[pin]
    timer: HrTimer<QpShared>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for QpShared { self.work }
}

kernel::impl_has_hr_timer! {
    impl HasHrTimer<Self> for QpShared {
        mode: RelativeSoftMode<Monotonic>,
        field: self.timer
    }
}

impl WorkItem for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        let route = core::mem::take(&mut this.inner.lock().need_route);
        if route {
            this.refresh_routes();
        }
        this.drive(Entry::Work);
    }
}

impl HrTimerCallback for QpShared {
    type Pointer<'a> = Arc<QpShared>;

    fn run(this: ArcBorrow<'_, Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        // Softirq: only schedule the work item, which does the protocol work.
        let _ = workqueue::queue().enqueue(Arc::from(this));
        HrTimerRestart::NoRestart
    }
}

/// What woke the QP up.
enum Entry<'a> {
    /// Its work item (timers, budget continuation, deferred deliveries).
    Work,
    /// The user rang the send doorbell.
    Doorbell,
    /// A packet arrived.
    Packet(&'a Headers, &'a [u8], &'a PathMatch),
    /// A packet with an opcode the wire decoder does not know arrived (its BTH).
    Unsupported(&'a RawBth, &'a PathMatch),
    /// Modify QP.
    Modify(&'a QpAttrs, AttrMask, &'a mut Result),
}

impl QpShared {
    /// The CQ of `kind`.
    pub(crate) fn cq(&self, kind: CqKind) -> &Arc<CqShared> {
        match kind {
            CqKind::Send => &self.send_cq,
            CqKind::Recv => &self.recv_cq,
        }
    }

    /// The completion-queue handle of this QP (`ib_wc.qp`).
    pub(crate) fn wc_qp(&self) -> WcQp {
        self.handle.wc_qp(1)
    }

    /// Handles one received packet.
    pub fn receive(self: &Arc<Self>, h: &Headers, payload: &[u8], pm: &PathMatch) {
        self.drive(Entry::Packet(h, payload, pm));
    }

    /// Handles one received packet whose opcode is reserved or not spoken (seed 001: an RC
    /// request gets an Invalid Request NAK and the QP enters Error; the rest is dropped).
    pub fn receive_unsupported(self: &Arc<Self>, bth: &RawBth, pm: &PathMatch) {
        self.drive(Entry::Unsupported(bth, pm));
    }

    /// The common driving loop: process context or softirq (received packets are handled
    /// inline, as the UDP layer hands them over). Never sleeps.
    fn drive(self: &Arc<Self>, entry: Entry<'_>) {
        let (pending, more) = {
            let mut g = self.inner.lock();
            if g.dead {
                return;
            }
            let now = now_ns();
            let inner = &mut *g;
            let (more, need_route) = self.locked(inner, now, entry);
            inner.need_route |= need_route;
            (inner.pending.take(), more || inner.need_route)
        };
        self.flush_tx();
        self.deliver(pending);
        if more {
            let _ = workqueue::queue().enqueue(self.clone());
        }
    }

    /// Sends the packets in `txq`, unless another context is at it (it then sends ours too).
    fn flush_tx(&self) {
        loop {
            if self.tx_busy.swap(true, Ordering::SeqCst) {
                return;
            }
            while let Some(skb) = self.txq.pop() {
                let len = skb.len();
                match skb.send() {
                    Ok(_) => {
                        Counters::inc(&self.dev.counters.sent_pkts);
                        self.dev
                            .counters
                            .sent_bytes
                            .fetch_add(len as u64, Ordering::Relaxed);
                    }
                    Err(_) => Counters::inc(&self.dev.counters.send_err),
                }
            }
            self.tx_busy.store(false, Ordering::SeqCst);
            // A packet queued after our last pop but before the store above found us busy.
            if self.txq.is_empty() {
                return;
            }
        }
    }

    /// Looks up the routes of the primary and alternate paths that have none (process context,
    /// no lock held).
    fn refresh_routes(&self) {
        let a = self.inner.lock().core.query();
        self.look_up_routes([a.path, a.alt_path]);
    }

    /// Looks up the routes of `paths` that have none (process context, no lock held).
    fn look_up_routes(&self, paths: [PathInfo; 2]) {
        let missing = {
            let g = self.inner.lock();
            paths.map(|p| !transport::has_route(&g.routes, &p))
        };
        let found = transport::lookup_routes(
            self,
            |p| paths.iter().zip(missing.iter()).any(|(q, m)| q == p && !*m),
            &paths,
        );
        if !found.is_empty() {
            transport::install_routes(&mut self.inner.lock().routes, found);
        }
    }

    /// The part of [`Self::drive`] under the QP lock. Returns whether more work remains and
    /// whether a route must be looked up outside the lock.
    fn locked(self: &Arc<Self>, inner: &mut QpInner, now: u64, entry: Entry<'_>) -> (bool, bool) {
        let QpInner {
            core,
            sq,
            rq,
            elem,
            inline,
            sq_pulled,
            deadlines,
            pending,
            routes,
            ..
        } = inner;
        // Timers that expired (the work item runs them).
        let mut expired = [false; 2];
        if matches!(entry, Entry::Work) {
            for (i, e) in expired.iter_mut().enumerate() {
                if deadlines[i] != 0 && deadlines[i] <= now {
                    deadlines[i] = 0;
                    *e = true;
                }
            }
            if deadlines[2] != 0 && deadlines[2] <= now {
                deadlines[2] = 0;
            }
        }
        // WQEs user space posted since the last look: receives first (a packet may need one).
        {
            let mut out = QpOut::new(
                self,
                Some(&self.txq),
                &mut *deadlines,
                &mut *pending,
                &[],
                Some(&mut *routes),
            );
            if let Some(rq) = rq.as_mut() {
                pull_recv(core, rq, elem, self.max_recv_sge, &mut out);
            }
            if let Some(sq) = sq.as_mut() {
                let _ = pull_send(core, sq, elem, &mut inline[..], sq_pulled, self, &mut out);
            }
        }
        let mut mem = QpMemory::new(&self.dev.mrs, self.pd_id, &inline[..]);
        let mut out = QpOut::new(
            self,
            Some(&self.txq),
            &mut *deadlines,
            &mut *pending,
            &inline[..],
            Some(&mut *routes),
        );
        if expired[0] {
            core.timer_expired(now, Timer::Retransmit, &mut out);
        }
        if expired[1] {
            core.timer_expired(now, Timer::Rnr, &mut out);
        }
        match entry {
            Entry::Packet(h, payload, pm) => {
                // With an SRQ the QP takes a WQE only when a message needs one.
                if let Some(srq) = self.srq.as_ref() {
                    if h.info().needs_rq_wqe && core.rq_logic().outstanding() == 0 {
                        let (wr, fire) = srq.take();
                        if let Some(wr) = wr {
                            let _ = core.post_recv(&wr, &mut out);
                        }
                        if fire {
                            out.srq_limit();
                        }
                    }
                }
                core.receive(now, h, payload, pm, &mut mem, &mut out)
            }
            Entry::Modify(a, m, res) => {
                *res = core.modify(now, a, m, &mut out).map_err(|_| EINVAL);
            }
            Entry::Unsupported(bth, pm) => core.receive_unsupported(now, bth, pm, &mut out),
            Entry::Work | Entry::Doorbell => {}
        }
        let sent = core.progress(now, WORK_BUDGET, &mut mem, &mut out);
        let need_route = out.need_route;
        // `out` and `mem` borrow `inner`: their last use is above.
        // Poll the user rings while the peer may be stalled for credits or the QP must
        // flush what user space posts in Error.
        if self.needs_ring_poll(inner) {
            if inner.deadlines[2] == 0 {
                inner.poll_period = (inner.poll_period * 2).clamp(RING_POLL_NS, RING_POLL_MAX_NS);
                inner.deadlines[2] = now + inner.poll_period;
            }
        } else {
            inner.poll_period = 0;
            inner.deadlines[2] = 0;
        }
        let now_c = inner.core.counters();
        self.dev.counters.fold(&now_c, &mut inner.last_counters);
        self.rearm(inner, now);
        (sent >= WORK_BUDGET, need_route)
    }

    /// Whether the user rings need polling (see [`RING_POLL_NS`]).
    fn needs_ring_poll(&self, inner: &QpInner) -> bool {
        let Some(rq) = inner.rq.as_ref() else {
            return false;
        };
        match inner.core.state() {
            QpState::Rtr | QpState::Rts | QpState::Sqd => inner.core.rq_logic().credits() == 0,
            QpState::Error => rq.count() > 0 || inner.sq.as_ref().is_some_and(|s| s.count() > 0),
            _ => false,
        }
    }

    /// Arms the hrtimer for the earliest deadline if it is earlier than the armed one.
    fn rearm(self: &Arc<Self>, inner: &mut QpInner, now: u64) {
        let earliest = inner.deadlines.iter().copied().filter(|d| *d != 0).min();
        let Some(at) = earliest else {
            return;
        };
        if inner.armed_at != 0 && inner.armed_at <= at && inner.armed_at > now {
            return;
        }
        // Dropping the old handle cancels it (its callback never takes this lock).
        inner.timer = None;
        let delta = i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX);
        inner.timer = Some(self.clone().start(Delta::from_nanos(delta)));
        inner.armed_at = at;
    }

    /// Reports what the core asked for (no lock held).
    fn deliver(&self, p: Pending) {
        if p.is_empty() {
            return;
        }
        for (i, kind) in [CqKind::Send, CqKind::Recv].into_iter().enumerate() {
            if p.cq_err[i] {
                self.cq(kind).error_event();
            }
            if p.notify[i] {
                self.cq(kind).notify();
            }
        }
        for ev in p.events.iter().take(p.nevents) {
            self.handle.dispatch_event(*ev);
        }
        if p.srq_limit {
            if let Some(srq) = self.srq.as_ref() {
                srq.limit_reached();
            }
        }
    }

    /// Posts kernel work requests with `post` under the QP lock (any context: the work item
    /// transmits them later), then schedules the work item, also after an error.
    fn post_kernel(
        self: &Arc<Self>,
        post: impl FnOnce(&mut CoreQp, &mut QpOut<'_>) -> Result,
    ) -> Result {
        let res = {
            let mut g = self.inner.lock();
            let inner = &mut *g;
            let mut out = QpOut::new(
                self,
                None,
                &mut inner.deadlines,
                &mut inner.pending,
                &[],
                None,
            );
            post(&mut inner.core, &mut out)
        };
        let _ = workqueue::queue().enqueue(self.clone());
        res
    }

    /// Posts kernel send WRs (any context).
    fn post_kernel_send(self: &Arc<Self>, wrs: &mut SendWrList<'_>) -> Result {
        let sig_all = self.sig_all;
        self.post_kernel(|core, out| {
            while let Some(mut wr) = wrs.next_wr()? {
                if wr.opcode == SendOpcode::RegMr {
                    // Fast registration needs the MR's handle, which the converted WR does
                    // not carry: not offered to kernel callers yet.
                    return Err(EINVAL);
                }
                if sig_all {
                    wr.flags.0 |= SendFlags::SIGNALED;
                }
                core.post_send(&wr, out).map_err(post_errno)?;
            }
            Ok(())
        })
    }

    /// Posts kernel receive WRs (any context).
    fn post_kernel_recv(self: &Arc<Self>, wrs: &mut RecvWrList<'_>) -> Result {
        self.post_kernel(|core, out| {
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

/// Takes user receive WQEs into the core while it has room.
fn pull_recv(
    core: &mut CoreQp,
    rq: &mut Ring,
    elem: &mut KVec<u8>,
    max_sge: usize,
    out: &mut QpOut<'_>,
) {
    let cap = u64::from(rq.capacity());
    while core.rq_logic().outstanding() < cap {
        let Some(e) = elem.get_mut(..rq.elem_size()) else {
            break;
        };
        if !rq.peek_copy(e) {
            break;
        }
        match user_wqe::parse_recv(e, max_sge) {
            Ok(wr) => {
                if core.post_recv(&wr, out).is_err() {
                    // Reset/Init-before-ready: leave it in the ring for later.
                    break;
                }
            }
            Err((wr_id, _)) => bad_wqe(core, wr_id, CqKind::Recv, WcOpcode::Recv, out),
        }
        rq.advance_consumer();
    }
}

/// Takes user send WQEs into the core while it has room. `Err` if the QP's state refuses
/// sends (seed 004: the doorbell then fails and the WQEs stay in the ring).
fn pull_send(
    core: &mut CoreQp,
    sq: &mut Ring,
    elem: &mut KVec<u8>,
    inline_area: &mut [u8],
    pulled: &mut u64,
    qp: &QpShared,
    out: &mut QpOut<'_>,
) -> Result {
    let cap = u64::from(sq.capacity());
    while core.sq_logic().outstanding() < cap {
        let Some(e) = elem.get_mut(..sq.elem_size()) else {
            break;
        };
        if !sq.peek_copy(e) {
            break;
        }
        match user_wqe::parse_send(e, qp.max_send_sge, qp.max_inline) {
            Ok(mut us) => {
                if qp.sig_all {
                    us.wr.flags.0 |= SendFlags::SIGNALED;
                }
                if let Some(len) = us.inline_len {
                    let slot = (*pulled % cap) as usize * qp.max_inline;
                    let src = e.get(user_wqe::SEND_WQE_HEADER..user_wqe::SEND_WQE_HEADER + len);
                    if let (Some(dst), Some(src)) = (inline_area.get_mut(slot..slot + len), src) {
                        dst.copy_from_slice(src);
                    }
                    let sge = Sge {
                        addr: slot as u64,
                        length: len as u32,
                        lkey: super::memory::INLINE_LKEY,
                    };
                    us.wr.sg = SgList::from_slice(&[sge]).unwrap_or(SgList::EMPTY);
                }
                match core.post_send(&us.wr, out) {
                    Ok(()) => {}
                    Err(PostError::InvalidState) => return Err(EINVAL),
                    Err(PostError::QueueFull) => break,
                    Err(PostError::InvalidWr) => {
                        bad_wqe(core, us.wr.wr_id, CqKind::Send, WcOpcode::Send, out)
                    }
                }
            }
            Err((wr_id, _e @ (WqeError::Opcode | WqeError::Length))) => {
                bad_wqe(core, wr_id, CqKind::Send, WcOpcode::Send, out)
            }
        }
        *pulled = pulled.wrapping_add(1);
        sq.advance_consumer();
    }
    Ok(())
}

/// A malformed user WQE: it completes with `IB_WC_LOC_QP_OP_ERR` and the QP enters Error
/// (its later WQEs are flushed), as for any local QP operation error.
fn bad_wqe(core: &mut CoreQp, wr_id: u64, kind: CqKind, opcode: WcOpcode, out: &mut QpOut<'_>) {
    let wc = Completion {
        wr_id,
        status: WcStatus::LocQpOpErr,
        opcode,
        byte_len: 0,
        imm_or_rkey: 0,
        qp_num: out.qpn(),
        src_qp: 0,
        flags: 0,
    };
    let _ = crate::rvcore::events::Outputs::complete(out, kind, &wc);
    let a = QpAttrs {
        qp_state: QpState::Error,
        ..QpAttrs::default()
    };
    let _ = core.modify(now_ns(), &a, AttrMask::STATE, out);
}

/// rvrdma's data of a QP.
pub struct RvrQp(Arc<QpShared>);

/// The `dmac` slot of a port number (1-based; anything else shares slot 0).
fn dmac_slot(port: u32) -> usize {
    if port == 2 {
        1
    } else {
        0
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
        if init.qp_type() != Some(IbQpType::Rc) {
            // UC, UD and the GSI QP come later.
            return Err(crate::errno::eopnotsupp());
        }
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
        let user = udata.is_some();
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

        let (sq_ring, rq_ring, resp) = match udata {
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
        let sq_slots = sq_ring.as_ref().map_or(sq_depth, |r| r.capacity());
        // An SRQ QP holds at most the WQE of the message in progress.
        let rq_slots = match (&srq, rq_ring.as_ref()) {
            (Some(_), _) => 4,
            (None, Some(r)) => r.capacity(),
            (None, None) => rq_depth,
        };
        let elem_len = [sq_ring.as_ref(), rq_ring.as_ref()]
            .iter()
            .flatten()
            .map(|r| r.elem_size())
            .max()
            .unwrap_or(0);

        let mut tunnels = KVec::with_capacity(shared.ports.len(), GFP_KERNEL)?;
        for nd in shared.ports.iter() {
            tunnels.push(udp_tunnel::acquire(nd)?, GFP_KERNEL)?;
        }
        let send_cq = init.send_cq().data().clone();
        let recv_cq = init.recv_cq().data().clone();
        let sig_all = init.signal_all();
        let pd_id = pd.data().id;
        let for_qp = shared.clone();
        let qp = shared.insert_qp(|qpn| {
            let core = Qp::new(
                QpCreate {
                    qp_type: QpType::Rc,
                    qpn,
                    srq: srq.is_some(),
                },
                KVec::from_elem(SendSlot::default(), sq_slots as usize, GFP_KERNEL)?,
                KVec::from_elem(RecvSlot::default(), rq_slots as usize, GFP_KERNEL)?,
            )
            .ok_or(EINVAL)?;
            let inner = QpInner {
                core,
                sq: sq_ring,
                rq: rq_ring,
                elem: KVec::from_elem(0u8, elem_len, GFP_KERNEL)?,
                inline: KVec::from_elem(0u8, sq_slots as usize * max_inline, GFP_KERNEL)?,
                sq_pulled: 0,
                deadlines: [0; 3],
                armed_at: 0,
                timer: None,
                pending: Pending::default(),
                last_counters: QpCounters::default(),
                dmac: [[0; 6]; 2],
                routes: [None, None],
                poll_period: 0,
                sq_depth: sq_slots,
                rq_depth: rq_slots,
                need_route: false,
                dead: false,
            };
            Arc::pin_init(
                try_pin_init!(QpShared {
                    qpn,
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
                    txq <- SkbQueue::new(),
                    tx_busy: AtomicBool::new(false),
                    inner <- crate::new_irq_spinlock!(inner, "rvrdma_qp"),
                    work <- kernel::new_work!("rvrdma_qp"),
                    timer <- HrTimer::new(),
                }),
                GFP_KERNEL,
            )
        })?;
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
            g.core.set_port_mtu(transport::port_mtu(&qp.dev, 1));
        }
        let _ = user;
        Ok((RvrQp(qp), qpn))
    }

    fn modify_qp(
        dev: &Device<Self>,
        qp: &RvrQp,
        m: &ModifyAttr<'_>,
        _udata: Option<&mut Udata<'_>>,
    ) -> Result {
        let qp = &qp.0;
        let current = qp.inner.lock().core.query();
        let (a, mask) = super::qp_attr::to_core(m, &current)?;
        if mask.contains(AttrMask::AV) {
            if let Some(p) = m.path() {
                let mtu = transport::port_mtu(&qp.dev, u8::try_from(p.port_num).unwrap_or(1));
                let mut g = qp.inner.lock();
                g.dmac[dmac_slot(p.port_num)] = p.dmac;
                g.core.set_port_mtu(mtu);
            }
        }
        if let Some(p) = m.alt_path() {
            qp.inner.lock().dmac[dmac_slot(p.port_num)] = p.dmac;
        }
        let _ = dev;
        // Routes first: the transition may send at once (the unsolicited ACK that announces
        // the initial credits on entering RTR), and nothing under the QP lock may look one up.
        if mask.intersects(AttrMask::AV.union(AttrMask::ALT_PATH)) {
            qp.look_up_routes([a.path, a.alt_path]);
        }
        let mut res = Ok(());
        qp.drive(Entry::Modify(&a, mask, &mut res));
        res
    }

    fn query_qp(qp: &RvrQp) -> Result<QpQuery> {
        let qp = &qp.0;
        let g = qp.inner.lock();
        let a = g.core.query();
        let (pri, alt) = (a.path.port_num.into(), a.alt_path.port_num.into());
        Ok(QpQuery {
            attrs: a,
            dmac: g.dmac[dmac_slot(pri)],
            alt_dmac: g.dmac[dmac_slot(alt)],
            cap: QpCap {
                max_send_wr: g.sq_depth,
                max_recv_wr: g.rq_depth,
                max_send_sge: qp.max_send_sge as u32,
                max_recv_sge: qp.max_recv_sge as u32,
                max_inline_data: qp.max_inline as u32,
                max_rdma_ctxs: 0,
            },
            sig_all: qp.sig_all,
            qp_type: IbQpType::Rc,
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
                let state = qp.0.inner.lock().core.state();
                if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
                    return Err(EINVAL);
                }
                qp.0.drive(Entry::Doorbell);
                Ok(())
            }
        }
    }

    fn post_recv(qp: &RvrQp, wrs: &mut RecvWrList<'_>) -> Result {
        qp.0.post_kernel_recv(wrs)
    }
}

/// Tears a QP down: no more work, timers or packets, then the last references go.
fn destroy(qp: Arc<QpShared>) {
    let removed = qp.dev.remove_qp(qp.qpn);
    let (timer, sq, rq) = {
        let mut g = qp.inner.lock();
        g.dead = true;
        (g.timer.take(), g.sq.take(), g.rq.take())
    };
    // Cancels the timer (and drops its reference) outside the lock.
    drop(timer);
    // The user rings go now, in process context: their mmap entries must be gone before
    // ib_core destroys the user context.
    drop(sq);
    drop(rq);
    workqueue::flush_work(&*qp);
    // Received packets are handled in the UDP layer's RCU read-side section: after a grace
    // period no receive path holds a reference taken before the QP left the table.
    crate::sync::rcu::synchronize();
    qp.send_cq.detach();
    qp.recv_cq.detach();
    drop(removed);
    // The last reference: the CQ references and the tunnel references go here.
    drop(qp);
}
