// SPDX-License-Identifier: GPL-2.0

//! Queue pairs: the protocol core's [`Qp`] behind an IRQ-safe lock, driven by verbs, received
//! packets, timers and its own work item.
//!
//! Every entry point follows the same pattern ([`QpShared::drive`]): take the QP lock, feed the
//! core (pull user WQEs from the mmapped rings, hand it a packet, a timer expiry or a verb),
//! let it transmit up to a budget, then drop the lock and only then send the packets it built,
//! report async events and wake completion handlers (none of which may run under the lock).
//! Kernel callers of `post_send`/`post_recv` may be in any context: they only queue the work.

mod kernel_inline;
mod linger;
mod modify_attr;
mod outputs;
mod paged_hint;
mod routes;
mod run_flag;
mod rx_queue;
mod slots;
mod timers;
mod transmit;
mod user_rings;
pub(crate) mod user_wqe;
mod verbs;
mod work_delay;

use super::counters::{folded_total, Counters};
use super::cq::CqShared;
use super::dev_shared::DevShared;
use super::held_payload::{HeldPayload, Payload};
use super::mr_table::{self, OdpFault, QpMemory};
use super::srq::SrqShared;
use crate::ib::copy_src::CopySrc;
use crate::ib::{
    cq::WcQp,
    qp::{QpHandle, QpType as IbQpType},
    queue::ProducerWatch,
};
use crate::net::udp_tunnel::TunnelRef;
use crate::rvcore::apm::PathMatch;
use crate::rvcore::events::{CqKind, Timer};
use crate::rvcore::memory::RxPayload;
use crate::rvcore::qp::{Qp, QpAttrs, QpCounters, QpParts};
use crate::rvcore::qp_state::{AttrMask, QpState};
use crate::rvcore::wire::{bth::RawBth, Headers};
use crate::rvcore::wqe::{RecvSlot, SendSlot, Sge, UdDest};
use crate::sync::{
    clock::now_ns,
    irq_spinlock::{IrqSpinLock, IrqSpinLockBackend},
    workqueue,
};
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use kernel::{
    prelude::*,
    sync::{lock::Guard, Arc},
    time::hrtimer::HrTimer,
    workqueue::{DelayedWork, Work, WorkItem},
};
use outputs::QpOut;
use routes::QpPaths;
use timers::{QpTimer, QpTimers};
use transmit::TxStream;
use user_rings::{Taken, UserRings};

/// The core QP with kernel-allocated queue storage (see [`slots`]).
pub(crate) type CoreQp =
    Qp<slots::Slots<SendSlot>, slots::Slots<RecvSlot>, slots::Slots<Sge>, slots::Slots<UdDest>>;

/// [`CoreQp`]'s checked creation parameters and storage.
type CoreParts = QpParts<
    slots::Slots<SendSlot>,
    slots::Slots<RecvSlot>,
    slots::Slots<Sge>,
    slots::Slots<UdDest>,
>;

/// Packets a work run transmits before it yields (it requeues itself).
const WORK_BUDGET: usize = 64;
/// Largest SQ/RQ depth.
pub const MAX_QP_WR: u32 = 0x4000;
/// Largest number of SGEs per WR (the core's limit).
pub const MAX_SGE: u32 = crate::rvcore::wqe::MAX_SGE as u32;
/// Largest inline data per send WR.
pub const MAX_INLINE: u32 = 256;
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
    /// What is pending, if anything, leaving nothing (most sections leave nothing: no move of
    /// the whole for those).
    fn take(&mut self) -> Option<Pending> {
        (!self.is_empty()).then(|| core::mem::take(self))
    }

    fn is_empty(&self) -> bool {
        self.nevents == 0
            && !self.srq_limit
            && !self.notify.iter().any(|n| *n)
            && !self.cq_err.iter().any(|n| *n)
    }
}

/// Most received packets a QP keeps while it waits for on-demand-paging memory; more are
/// dropped (the peer retransmits them, as after a loss).
const MAX_DEFERRED: usize = 64;

/// A received packet kept until its memory is resident.
struct DeferredPacket {
    h: Headers,
    payload: KVec<u8>,
    pm: PathMatch,
}

/// On-demand paging: what waits for memory to be faulted in (docs/odp.md).
#[derive(Default)]
pub(crate) struct OdpWait {
    /// Received packets not yet taken, oldest first: the first found its memory not resident,
    /// the others arrived behind it and keep their order.
    packets: KVec<DeferredPacket>,
    /// The range to fault in before anything waiting is tried again.
    fault: Option<OdpFault>,
    /// A range whose fault-in failed: the next try fails for real.
    failed: Option<OdpFault>,
}

impl OdpWait {
    /// Keeps a copy of a packet (any context: atomic allocation); `false` if it is dropped.
    fn keep(&mut self, h: &Headers, payload: Payload<'_>, pm: &PathMatch) -> bool {
        if self.packets.len() >= MAX_DEFERRED {
            return false;
        }
        let mut copy = KVec::new();
        let copied = match payload {
            Payload::Bytes(b) => copy.extend_from_slice(b, GFP_ATOMIC).is_ok(),
            Payload::InSkb(b) => {
                let n = CopySrc::len(&b);
                copy.extend_with(n, 0u8, GFP_ATOMIC).is_ok() && b.copy_out(&mut copy).is_ok()
            }
        };
        if !copied {
            return false;
        }
        let p = DeferredPacket {
            h: *h,
            payload: copy,
            pm: *pm,
        };
        self.packets.push(p, GFP_ATOMIC).is_ok()
    }
}

/// The QP state under the lock.
pub(crate) struct QpInner {
    /// The protocol core.
    pub(crate) core: CoreQp,
    /// User rings (none for kernel QPs).
    user: UserRings,
    /// Retransmit, RNR and ring-poll deadlines, and the hrtimer.
    timers: QpTimers,
    /// Work for after the lock.
    pending: Pending,
    /// Destination MACs and routes of the paths.
    paths: QpPaths,
    /// Send and receive queue depths granted.
    depths: (u32, u32),
    /// Core counters already folded into the device's. Kept apart: a fold is rare (the
    /// counters it mirrors move on errors, credits and migrations), and without them the QP's
    /// own allocation fits in 4 KiB rather than kmalloc's next size, 8 KiB.
    last_counters: KBox<QpCounters>,
    /// Their [`folded_total`].
    last_total: u64,
    /// On-demand paging: packets and WQEs waiting for memory.
    odp: OdpWait,
    /// Set by destroy: nothing runs any more.
    dead: bool,
}

impl QpInner {
    /// The inner state of a new QP, built in place: the whole is a few KiB, and each copy of it
    /// a value would make lands on the stack of a process-context verb.
    fn new(
        parts: CoreParts,
        user: UserRings,
        depths: (u32, u32),
        last_counters: KBox<QpCounters>,
    ) -> impl Init<Self> {
        init!(Self {
            core: CoreQp::from_parts(parts),
            user,
            timers: QpTimers::default(),
            pending: Pending::default(),
            paths: QpPaths::default(),
            depths,
            last_counters,
            last_total: 0,
            odp: OdpWait::default(),
            dead: false,
        })
    }
}

/// A queue pair, shared by its verbs, work item, timer and the receive path.
#[pin_data]
pub struct QpShared {
    /// QP number (1 for a GSI QP, whichever its port).
    pub qpn: u32,
    /// The port of a GSI QP; 0 for the others.
    pub port: u8,
    /// The port completions report (`ib_wc.port_num`): the QP's port once modify set one.
    pub wc_port: AtomicU8,
    /// The QP's type.
    pub qp_type: IbQpType,
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
    /// Packets built under `inner`, waiting to be sent without the lock: the requests and the
    /// responses, each in build order.
    /// Whether its payloads go by reference to the user's pages (see [`paged_hint::PagedHint`]).
    tx_paged: paged_hint::PagedHint,
    #[pin]
    requests: TxStream,
    #[pin]
    responses: TxStream,
    /// What a doorbell looks at to leave a signaled Read or atomic to `linger_work`.
    linger: linger::Linger,
    /// The QP's state refuses sends (Reset, Init, RTR: seed 004), for the user doorbell to
    /// check without the QP lock. Written under the lock by modify, the only way into or out
    /// of those states.
    sends_refused: AtomicBool,
    /// Whether the user send ring holds WQEs not yet taken, for the user doorbell and the
    /// waiting work item to look without the QP lock (`None`: a kernel QP's, or no SQ).
    sq_watch: Option<Arc<ProducerWatch>>,
    #[pin]
    inner: IrqSpinLock<QpInner>,
    #[pin]
    work: Work<QpShared>,
    /// Send `requests` / `responses` on the CPU of their last batch, when another CPU could
    /// not (see [`transmit`]).
    #[pin]
    requests_work: Work<QpShared, 1>,
    #[pin]
    responses_work: Work<QpShared, 2>,
    /// Faults on-demand-paging memory in, then drives the QP (on a workqueue without
    /// `WQ_MEM_RECLAIM`: a page fault may wait for reclaim, which the QP work item must not).
    #[pin]
    odp_work: Work<QpShared, 3>,
    /// A stream's received packets waiting for [`Self::rx_work`], which handles them on another
    /// CPU (see [`rx_queue`]).
    #[pin]
    rx: rx_queue::RxQueue,
    #[pin]
    rx_work: Work<QpShared, 4>,
    /// The same work as `rx_work`, queued for any CPU (a stream of Read responses; see
    /// [`rx_queue`]). An item of its own: lockdep tells a work item's runs apart by the item,
    /// and `rx_work` runs in softirq context.
    #[pin]
    rx_any_work: Work<QpShared, 7>,
    /// Handles the receive queue at high priority when `rx_work` waits too long.
    #[pin]
    rx_urgent: DelayedWork<QpShared, 5>,
    /// Waits on another CPU for a doorbell's signaled Read or atomic (see [`linger`]).
    #[pin]
    linger_work: Work<QpShared, 6>,
    /// Runs expired timers, at high priority (see [`timers`]): under load a lost packet's
    /// recovery must not wait behind the ordinary work of every QP.
    #[pin]
    timer_work: Work<QpShared, 8>,
    /// When `work`, `rx_work` and `timer_work` were queued (for the device's delay counters).
    work_queued: work_delay::QueuedAt,
    rx_work_queued: work_delay::QueuedAt,
    timer_work_queued: work_delay::QueuedAt,
    #[pin]
    timer: HrTimer<QpShared>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for QpShared { self.work }
    impl HasWork<Self, 1> for QpShared { self.requests_work }
    impl HasWork<Self, 2> for QpShared { self.responses_work }
    impl HasWork<Self, 3> for QpShared { self.odp_work }
    impl HasWork<Self, 4> for QpShared { self.rx_work }
    impl HasWork<Self, 6> for QpShared { self.linger_work }
    impl HasWork<Self, 7> for QpShared { self.rx_any_work }
    impl HasWork<Self, 8> for QpShared { self.timer_work }
}

kernel::impl_has_delayed_work! {
    impl HasDelayedWork<Self, 5> for QpShared { self.rx_urgent }
}

impl WorkItem for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.work_queued.ran(&this.dev.counters.work_delay_max_us);
        this.run_work();
    }
}

impl WorkItem<8> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.timer_work_queued
            .ran(&this.dev.counters.timer_delay_max_us);
        this.run_work();
    }
}

impl WorkItem<3> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        let fault = this.inner.lock().odp.fault.take();
        if let Some(f) = fault {
            Counters::inc(&this.dev.counters.odp_faults);
            // Process context, no lock: the fault may sleep. What waited is tried again below.
            if mr_table::fault_in(&this.dev.mrs, this.pd_id, &f).is_err() {
                this.inner.lock().odp.failed = Some(f);
            }
        }
        this.drive(Entry::Work);
    }
}

/// What woke the QP up.
enum Entry<'a> {
    /// Its work item (timers, budget continuation, deferred deliveries).
    Work,
    /// The user rang the send doorbell.
    Doorbell,
    /// The request stream's waiting work item saw send WQEs in the user's ring before their
    /// doorbell (see [`linger`]).
    RingWatch,
    /// A packet arrived.
    Packet(&'a Headers, Payload<'a>, &'a PathMatch),
    /// Packets wait in the receive queue, and there was no memory for a batch: its work item,
    /// or with `true` the receiving CPU (the queue is full).
    RxQueue(bool),
    /// A batch from the receive queue, checked, whose turn it is (see [`rx_queue`]).
    RxBatch(&'a [rx_queue::Prepared]),
    /// A packet with an opcode the wire decoder does not know arrived (its BTH).
    Unsupported(&'a RawBth, &'a PathMatch),
    /// Modify QP.
    Modify(&'a QpAttrs, AttrMask, &'a mut Result),
    /// A port went up or down, or the `apm_bonding` switch changed.
    Ports,
}

/// Where a drive's packets are sent from (see [`QpShared::drive`]).
enum DoorbellSend {
    /// From this context ([`QpShared::flush_tx`]).
    Here,
    /// A user doorbell that took only unsignaled RDMA Reads and atomics, on a QP that keeps
    /// more than one outstanding: from another CPU ([`QpShared::flush_tx_elsewhere`]).
    Elsewhere,
    /// A user doorbell that took one signaled RDMA Read or atomic, with nothing else
    /// outstanding (a client that waits for each completion): by the request stream's work
    /// item if it waits for it, else from here ([`QpShared::flush_tx_rd_atomic`]).
    RdAtomic,
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
        let port = match self.port {
            0 => self.wc_port.load(Ordering::Relaxed),
            gsi => gsi,
        };
        self.handle.wc_qp(port)
    }

    /// Handles one received packet.
    pub(crate) fn receive(self: &Arc<Self>, h: &Headers, payload: Payload<'_>, pm: &PathMatch) {
        let _ = self.drive(Entry::Packet(h, payload, pm));
    }

    /// Handles one received packet whose opcode is reserved or not spoken (seed 001: an RC
    /// request gets an Invalid Request NAK and the QP enters Error; the rest is dropped).
    pub fn receive_unsupported(self: &Arc<Self>, bth: &RawBth, pm: &PathMatch) {
        let _ = self.drive(Entry::Unsupported(bth, pm));
    }

    /// A port went up or down, or the `apm_bonding` switch changed (process context). The
    /// routes of both paths are looked up first: the port event flushed the cached ones, and a
    /// migration must find the new primary's route at once, not drop what it resends until the
    /// retransmit timer.
    pub(crate) fn ports_changed(self: &Arc<Self>) {
        self.refresh_routes();
        let _ = self.drive(Entry::Ports);
        // A re-arm may have loaded a new alternate path: its route, for the next failover.
        self.refresh_routes();
    }

    /// Port `port` came up (see `DevShared::port_up`): if the primary or alternate path leaves
    /// through it without a valid route, the work item looks the routes up. Queued under the
    /// lock, so that a destroy, which sets `dead` under it and then waits for the work item,
    /// finds the item queued or none at all. Any context.
    pub(crate) fn port_came_up(self: &Arc<Self>, port: u8) {
        let mut g = self.inner.lock();
        if g.dead {
            return;
        }
        let core = &g.core;
        let stale = [Some(core.primary_path()), core.alt_path()]
            .into_iter()
            .flatten()
            .any(|p| p.port_num == port && !g.paths.has_route(p));
        if stale {
            g.paths.need_route = true;
            self.schedule();
        }
    }

    /// Queues the QP's work item (a no-op if it is queued already). Any context.
    pub(super) fn schedule(self: &Arc<Self>) {
        self.work_queued.mark();
        let _ = workqueue::queue().enqueue::<_, 0>(self.clone());
    }

    /// Queues the work item that runs expired timers, at high priority (a no-op if it is
    /// queued already). Any context.
    pub(super) fn schedule_timers(self: &Arc<Self>) {
        self.timer_work_queued.mark();
        let _ = workqueue::any_cpu_queue().enqueue::<_, 8>(self.clone());
    }

    /// What the QP's work items do: the route lookups that are due, then a drive that runs
    /// the expired timers and whatever else waits (process context).
    fn run_work(self: &Arc<Self>) {
        let route = self.inner.lock().paths.lookup_due();
        if route {
            self.refresh_routes();
        }
        let _ = self.drive(Entry::Work);
    }

    /// The common driving loop: process context or softirq (received packets are handled
    /// inline, as the UDP layer hands them over). Never sleeps; may spin while batches of
    /// received packets are in hand on other CPUs ([`Self::lock_in_order`]). Returns whether a
    /// route lookup is due (the work item it schedules does it; a process-context caller may do
    /// it first).
    fn drive(self: &Arc<Self>, entry: Entry<'_>) -> bool {
        let g = self.lock_in_order(&entry);
        self.drive_locked(g, entry)
    }

    /// [`Self::drive`] with the QP lock already held, as [`Self::lock_in_order`] would have
    /// taken it for `entry`.
    fn drive_locked(
        self: &Arc<Self>,
        g: Guard<'_, QpInner, IrqSpinLockBackend>,
        entry: Entry<'_>,
    ) -> bool {
        let doorbell = matches!(entry, Entry::Doorbell);
        let watch = matches!(entry, Entry::RingWatch);
        let (pending, more, route, fault, send) = {
            // Moved in here, so that the lock is released at the block's end, before sending.
            let mut g = g;
            if g.dead {
                if let Entry::RxBatch(batch) = entry {
                    // Those that failed the check are counted already.
                    let gone = batch.iter().filter(|p| p.checked.is_some()).count();
                    Counters::add(&self.dev.counters.rx_no_qp, gone);
                    self.rx_handed_in(batch.len());
                }
                return false;
            }
            let now = now_ns();
            let inner = &mut *g;
            let (more, need_route) = self.locked(inner, now, entry);
            inner.paths.need_route |= need_route;
            let route = inner.paths.lookup_due();
            if watch && !matches!(inner.user.took(), Taken::Nothing) {
                Counters::inc(&self.dev.counters.tx_linger_ring_takes);
            }
            let send = match (doorbell, inner.user.took()) {
                (true, Taken::RdAtomic { signaled: false })
                    if inner.core.sq_logic().config().max_rd_atomic > 1 =>
                {
                    DoorbellSend::Elsewhere
                }
                (true, Taken::RdAtomic { signaled: true })
                    if inner.core.sq_logic().outstanding() == 1 =>
                {
                    DoorbellSend::RdAtomic
                }
                _ => DoorbellSend::Here,
            };
            (
                inner.pending.take(),
                more || route,
                route,
                inner.odp.fault.is_some(),
                send,
            )
        };
        match send {
            DoorbellSend::Elsewhere => self.flush_tx_elsewhere(),
            DoorbellSend::RdAtomic => self.flush_tx_rd_atomic(),
            DoorbellSend::Here => self.flush_tx(),
        }
        self.free_rx();
        self.deliver(pending);
        if more {
            self.schedule();
        }
        if fault {
            let _ = workqueue::system_dfl().enqueue::<_, 3>(self.clone());
        }
        route
    }

    /// Whether every WQE user space posted to the send ring so far has been taken into the
    /// core, looked at without the QP lock (`false` without a user send ring).
    fn sq_taken_all(&self) -> bool {
        self.sq_watch.as_ref().and_then(|w| w.is_empty()) == Some(true)
    }

    /// A user doorbell in a state that takes no sends (Reset, Init, RTR). Seed 004: Post Send
    /// fails at once, so the WRs it carried are not posted. User space wrote them into the send
    /// ring before the call (the rxe ABI): they are dropped from the ring here, unseen, so that
    /// none runs or completes later (rdma_rxe leaves them in its ring). `false` if the QP takes
    /// sends again by now (a modify to RTS came first): the doorbell then goes on as any other.
    fn refuse_sends(&self) -> bool {
        let mut g = self.inner.lock();
        if !refuses_sends(g.core.state()) {
            return false;
        }
        if let Some(sq) = g.user.sq.as_mut() {
            // Bounded by the ring, however fast user space writes more.
            for _ in 0..sq.capacity() {
                if sq.is_empty() {
                    break;
                }
                sq.advance_consumer();
            }
        }
        true
    }

    /// Whether a user doorbell has nothing to do: the WQEs posted before it were taken into the
    /// core, or a take under way (under the QP lock) takes them. Looked at without the lock.
    fn doorbell_needless(&self) -> bool {
        self.sq_watch.as_ref().and_then(|w| w.taken_or_taking()) == Some(true)
    }

    /// Takes the QP lock for `entry`. What may handle a received packet or take one from the
    /// receive queue first waits, without the lock, for the batches in hand to be handed in
    /// (they came before); a batch whose turn it is, a doorbell (or the ring watch that takes
    /// its WQEs first) or a port change does not.
    fn lock_in_order(&self, entry: &Entry<'_>) -> Guard<'_, QpInner, IrqSpinLockBackend> {
        let waits = !matches!(
            entry,
            Entry::RxBatch(_) | Entry::Doorbell | Entry::RingWatch | Entry::Ports
        );
        let g = self.inner.lock();
        if !waits || g.dead || !self.rx_in_hand() {
            return g;
        }
        // No batch is taken while this waits ([`Self::rx_wait`]), so the wait ends once the
        // batches in hand are in: each holder runs with bottom halves off, on another CPU.
        self.rx_wait(true);
        drop(g);
        loop {
            while self.rx_in_hand() {
                core::hint::spin_loop();
            }
            let g = self.inner.lock();
            if g.dead || !self.rx_in_hand() {
                self.rx_wait(false);
                return g;
            }
        }
    }

    /// The memory this QP may reach, with `inline` as its inline area, for one locked section.
    pub(super) fn memory<'a>(&'a self, inline: &'a [u8]) -> QpMemory<'a> {
        QpMemory::new(&self.dev.mrs, self.pd_id, self.qpn, inline)
    }

    /// The part of [`Self::drive`] under the QP lock. Returns whether more work remains and
    /// whether a route must be looked up outside the lock.
    fn locked(self: &Arc<Self>, inner: &mut QpInner, now: u64, entry: Entry<'_>) -> (bool, bool) {
        let QpInner {
            core,
            user,
            timers,
            pending,
            paths,
            odp,
            ..
        } = inner;
        // Timers that expired (the work item runs them; the ring poll needs nothing more than
        // the pull below).
        let (mut retransmit, mut rnr) = (false, false);
        if matches!(entry, Entry::Work) {
            retransmit = timers.expire(QpTimer::Retransmit, now);
            rnr = timers.expire(QpTimer::Rnr, now);
            timers.expire(QpTimer::RingPoll, now);
        }
        user.pull(core, self, paths, timers, pending);
        let failed = if matches!(entry, Entry::Work) {
            odp.failed.take()
        } else {
            None
        };
        let mem = self.memory(&user.inline[..]).with_failed(failed);
        let mut out = QpOut::new(self, true, timers, pending, &mem, Some(&paths.routes))
            .with_rq(user.rq.as_ref());
        // Packets that waited for on-demand-paging memory go first, in order (the work item
        // faulted the memory in just before).
        if matches!(entry, Entry::Work) && odp.fault.is_none() {
            while !odp.packets.is_empty() {
                let Ok(p) = odp.packets.remove(0) else {
                    break;
                };
                let payload = Payload::Bytes(&p.payload);
                self.take_packet(core, &p.h, payload, &p.pm, &mem, &mut out, now);
                if let Some(f) = mem.take_fault() {
                    odp.fault = Some(f);
                    // Back to the front: it keeps its place. The slot it left is free.
                    let _ = odp.packets.insert_within_capacity(0, p);
                    break;
                }
            }
        }
        // A batch from the receive queue whose turn it is: before anything still queued.
        if let Entry::RxBatch(batch) = entry {
            for p in batch {
                if let Some(c) = &p.checked {
                    let payload = Payload::of(&p.skb, c.payload.clone());
                    self.inbound(core, odp, &c.h, payload, &c.pm, &mem, &mut out, now);
                }
            }
            self.rx_handed_in(batch.len());
        }
        // Packets in the receive queue arrived before this packet, verb or timer expiry: they
        // go first (all of them), or a batch of them when none could be taken in hand. A
        // response waiting there when the transport timer fires is progress, not a timeout.
        let drain = match entry {
            Entry::Packet(..) | Entry::Unsupported(..) | Entry::Modify(..) | Entry::Work => {
                usize::MAX
            }
            Entry::RxQueue(_) => rx_queue::BATCH,
            Entry::RxBatch(_) | Entry::Doorbell | Entry::RingWatch | Entry::Ports => 0,
        };
        let mut checked = None;
        for _ in 0..drain {
            let Some(mut skb) = self.pop_rx() else {
                break;
            };
            match entry {
                Entry::RxQueue(false) => Counters::inc(&self.dev.counters.rx_queue_worker_pkts),
                Entry::RxQueue(true) => Counters::inc(&self.dev.counters.rx_queue_help_pkts),
                _ => {}
            }
            super::receive::queued(&self.dev, &mut skb, &mut checked);
            if let Some(c) = &checked {
                let payload = Payload::of(&skb, c.payload.clone());
                self.inbound(core, odp, &c.h, payload, &c.pm, &mem, &mut out, now);
            }
            self.rx_done(skb, checked.is_some());
        }
        if retransmit {
            core.timer_expired(now, Timer::Retransmit, &mut out);
        }
        if rnr {
            core.timer_expired(now, Timer::Rnr, &mut out);
        }
        match entry {
            Entry::Packet(h, payload, pm) => {
                self.inbound(core, odp, h, payload, pm, &mem, &mut out, now)
            }
            Entry::Ports => core.set_bonding(self.dev.bonding_ports(), &mut out),
            Entry::Modify(a, m, res) => {
                // The policy as it stands, for the step into RTS to act on.
                core.set_bonding(self.dev.bonding_ports(), &mut out);
                *res = core.modify(now, a, m, &mut out).map_err(|_| EINVAL);
                self.sends_refused
                    .store(refuses_sends(core.state()), Ordering::Relaxed);
                self.note_max_rd_atomic(core.sq_logic().config().max_rd_atomic);
                if core.state() == QpState::Reset {
                    // Kept packets belong to the connection that is gone.
                    *odp = OdpWait::default();
                }
            }
            Entry::Unsupported(bth, pm) => core.receive_unsupported(now, bth, pm, &mut out),
            Entry::Work
            | Entry::Doorbell
            | Entry::RingWatch
            | Entry::RxQueue(_)
            | Entry::RxBatch(_) => {}
        }
        let sent = core.progress(now, WORK_BUDGET, &mut &mem, &mut out);
        // A WQE whose memory is not resident was not started; a payload that vanished since
        // left its packet unbuilt (resent on the timer): fault either in from the work item.
        if let Some(f) = mem.take_fault().or(out.odp_fault) {
            odp.fault.get_or_insert(f);
        }
        let (need_route, missing) = (out.need_route, out.missing_route);
        // `out` and `mem` borrow `inner`: their last use is above.
        if let Some(p) = missing {
            inner.paths.want(&p);
        }
        inner.user.publish_rq(&inner.core);
        inner
            .user
            .schedule_poll(&inner.core, &mut inner.timers, now);
        // Summed where they are kept; copied only when they moved.
        let total = folded_total(&inner.core.counters_view());
        if total != inner.last_total {
            inner.last_total = total;
            let now_c = inner.core.counters();
            self.dev.counters.fold(&now_c, &mut inner.last_counters);
        }
        inner.timers.rearm(self, now);
        // A pass that used its whole budget goes on in the work item only if more may go now
        // (what waits for an ACK or a timer goes when that comes). WQEs left in the ring for
        // want of send slots that the entry (an ACK) has since freed are taken by the work
        // item: the pull above came before it.
        let more = (sent >= WORK_BUDGET && inner.core.transmit_pending())
            || inner.user.sq_waits(&inner.core);
        (more, need_route)
    }

    /// Handles one received packet in order: kept while earlier ones wait for on-demand-paging
    /// memory, else handed to the core.
    #[allow(clippy::too_many_arguments)]
    fn inbound(
        &self,
        core: &mut CoreQp,
        odp: &mut OdpWait,
        h: &Headers,
        payload: Payload<'_>,
        pm: &PathMatch,
        mem: &QpMemory<'_>,
        out: &mut QpOut<'_>,
        now: u64,
    ) {
        if !odp.packets.is_empty() {
            // Behind a packet that waits for memory: keep the order.
            if !odp.keep(h, payload, pm) {
                Counters::inc(&self.dev.counters.odp_drops);
            }
            return;
        }
        self.take_packet(core, h, payload, pm, mem, out, now);
        if let Some(f) = mem.take_fault() {
            // Not taken: kept (or dropped, the peer retransmits) until the work item has
            // faulted the memory in.
            odp.fault = Some(f);
            if !odp.keep(h, payload, pm) {
                Counters::inc(&self.dev.counters.odp_drops);
            }
        }
    }

    /// Hands one received packet to the core (with an SRQ, first taking a receive WQE when the
    /// message needs one).
    #[allow(clippy::too_many_arguments)]
    fn take_packet(
        &self,
        core: &mut CoreQp,
        h: &Headers,
        payload: Payload<'_>,
        pm: &PathMatch,
        mem: &QpMemory<'_>,
        out: &mut QpOut<'_>,
        now: u64,
    ) {
        // With an SRQ the QP takes a WQE only when a message it will process needs one.
        if let Some(srq) = self.srq.as_ref() {
            if core.wants_srq_wqe(h) {
                let (wr, fire) = srq.take();
                if let Some(wr) = wr {
                    let _ = core.post_recv(&wr, out);
                }
                if fire {
                    out.srq_limit();
                }
            }
        }
        match payload {
            Payload::Bytes(b) => core.receive(now, h, RxPayload::Bytes(b), pm, &mut &*mem, out),
            Payload::InSkb(held) => {
                Counters::inc(&self.dev.counters.rx_paged_pkts);
                let n = CopySrc::len(&held);
                let mut mem = HeldPayload { mem, held };
                core.receive(now, h, RxPayload::Held(n), pm, &mut mem, out)
            }
        }
    }

    /// Reports what the core asked for (no lock held).
    fn deliver(&self, p: Option<Pending>) {
        let Some(p) = p else {
            return;
        };
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
}

/// rvrdma's data of a QP.
pub struct RvrQp(Arc<QpShared>);

/// Tears a QP down: no more work, timers or packets, then the last references go.
fn destroy(qp: Arc<QpShared>) {
    let removed = qp.dev.remove_qp(qp.qpn, qp.port);
    let (timer, sq, rq) = {
        let mut g = qp.inner.lock();
        g.dead = true;
        qp.rx_close();
        (g.timers.shut_down(), g.user.sq.take(), g.user.rq.take())
    };
    // Cancels the timer (and drops its reference) outside the lock.
    drop(timer);
    // The user rings go now, in process context: their mmap entries must be gone before
    // ib_core destroys the user context.
    drop(sq);
    drop(rq);
    // The timer item first: a run that began before `dead` may queue the QP's work item as it
    // ends, and only the cancelled timer queues the timer item.
    workqueue::flush_work::<_, 8>(&*qp);
    workqueue::flush_work::<_, 0>(&*qp);
    // After this no receive path holds the QP (each found it in the table before it left), and
    // none queues a packet or the receive queue's work any more.
    qp.dev.free_qpn(qp.qpn, qp.port);
    // The receive queue's three work items queue each other, but only from a run that looked
    // before `dead` was set (and the queue closed with it): what such a run queues finds the
    // QP dead and queues nothing. So after the items were waited for twice, in any order,
    // none is left.
    for _ in 0..2 {
        workqueue::flush_delayed_work::<_, 5>(&*qp);
        workqueue::flush_work::<_, 4>(&*qp);
        workqueue::flush_work::<_, 7>(&*qp);
    }
    qp.purge_rx();
    // Every context that could hand the sending (or a fault) over has finished by now. The
    // fault work runs on a system workqueue: it must be done before the module may go.
    workqueue::flush_work::<_, 3>(&*qp);
    workqueue::flush_work::<_, 6>(&*qp);
    workqueue::flush_work::<_, 1>(&*qp);
    workqueue::flush_work::<_, 2>(&*qp);
    // Type 2 windows are bound to this QP, not to its number, which a new QP may get.
    qp.dev.mrs.unbind_qp(qp.qpn);
    qp.send_cq.detach();
    qp.recv_cq.detach();
    drop(removed);
    // The last reference: the CQ references and the tunnel references go here.
    drop(qp);
}

/// Whether a QP in state `s` refuses Post Send at once (seed 004: Reset, Init and RTR).
fn refuses_sends(s: QpState) -> bool {
    matches!(s, QpState::Reset | QpState::Init | QpState::Rtr)
}
