// SPDX-License-Identifier: GPL-2.0

//! A QP's receive queue: a stream's receive work shared with another CPU.
//!
//! A veth hands each packet to the backlog of the CPU that sent it, so the sender's CPU also does
//! all the receiving. While a stream arrives (the CPU's backlog holds more packets behind this one,
//! or more of its burst follow, see [`crate::net::tx::Burst`]), a QP's bulk packets go to its
//! receive queue, and a work item handles them on another CPU, ICRC check included. An RDMA Read
//! request counts as bulk by the responses it asks for: whoever handles it builds and sends them.
//! Read responses stay inline on a QP that keeps one Read in flight at a time (`max_rd_atomic` 1):
//! nothing overlaps with them, and a hand-off would only add the other CPU's wake-up to each round
//! trip. With more allowed, a stream's responses still go to the queue: handled inline, each Read
//! would complete within the `ibv_post_send` that started it, and no second Read would ever be in
//! flight. A bulk request also goes to the queue, with the work item on that CPU, when the QP's
//! last responses left from another CPU whose backlog still holds them: a response sent from here
//! would have to be handed to a worker thread there (see [`super::transmit`]), which may wait
//! behind a busy task. The order holds:
//! - a packet that arrives while the queue holds packets, or a batch is in hand (below), joins
//!   it, whatever its size;
//! - a packet handled at once finds the queue empty, or drains it first;
//! - the QP's work item drains it before it acts on an expired timer (a response waiting
//!   there is progress, not a timeout);
//! - a packet leaves the queue under the QP lock: in the critical section that handles it, or
//!   in a batch taken in hand with a ticket. A batch is parsed and its ICRCs checked without
//!   the lock, then handed to the core under the lock in ticket order, so two CPUs may check
//!   two batches at once;
//! - while a batch is in hand, whoever would handle a received packet otherwise, or drain the
//!   queue, waits for it first, and no batch is taken meanwhile ([`QpShared::lock_in_order`]).
//!
//! When the queue is full, the softirq queues its packet and handles a batch itself (the
//! oldest packets waiting), so the sender's CPU is held back by the work it takes on: that is
//! the flow control. Its batch is checked while the work item checks the one before it.
//! A lone or small packet finds the queue empty and is handled at once, so latency is
//! unchanged.
//!
//! The work item runs in softirq context on the other CPU (a bottom-half workqueue, reached by
//! IPI), as the packets would have been handled there: a worker thread at normal priority waits
//! behind a task busy-polling a CQ on that CPU (the receiver of a stream of Sends), for a tick
//! or far longer, and the stream then stalls on the sender's CPU. Continued runs stay on the
//! CPU the work went to. The softirq may still defer to `ksoftirqd`, so a second, delayed work
//! item on the module's high-priority per-CPU queue is armed with it; if packets still wait
//! `URGENT_AFTER_MS` later and the work item has not run since, it handles them all there:
//! packets waiting longer than the peer's Local ACK Timeout would make it resend its window.
//! If the work item has run, the queue is moving (a run that leaves packets queues the next),
//! and the deadline is armed again.
//!
//! A stream of RDMA Read responses is the exception: its work item runs in a worker thread of
//! an unbound, high-priority workqueue, which the scheduler starts on whichever CPU is free.
//! Responses arrive on the responder's CPU, so "the other CPU" is mostly the requester's
//! client's, busy posting and polling; there, softirq work past its budget went to `ksoftirqd`,
//! which waited behind the client while the responder's CPU idled. Streams of requests keep
//! the softirq: on worker threads their Sends and Writes ran slower (docs/experiments.md).

use super::super::{counters::Counters, dev_shared::MAX_RX_QUEUED};
use super::run_flag::RunFlag;
use super::{Entry, QpShared};
use crate::driver::receive::{self, Checked};
use crate::ib::qp::QpType as IbQpType;
use crate::net::{backlog, skb::Skb, skb::SkbQueue};
use crate::rvcore::wire::{opcode::Operation, Glance};
use crate::sync::workqueue;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use kernel::{prelude::*, sync::Arc, time::msecs_to_jiffies, workqueue::WorkItem};

/// A payload at least this long is worth handing to another CPU.
const BULK: usize = 512;
/// A stream is arriving when at least this many packets wait in the backlog behind one.
const STREAM: u32 = 4;
/// Most packets one QP's receive queue holds.
const MAX_QUEUED: usize = 64;
/// Packets a batch takes from the queue (see the module's docs).
pub(super) const BATCH: usize = 16;
/// How long the work item may go without a run while packets wait before they are handled at
/// high priority (a work item that stopped is so taken over within twice this): well below the
/// shortest Local ACK Timeout in use (perftest's and rdma_cm's default, 14, is 67 ms), long
/// enough that the work item nearly always gets there first.
const URGENT_AFTER_MS: u32 = 5;
/// Batches an urgent run handles at most (the queue holds `MAX_QUEUED` packets).
const URGENT_ROUNDS: usize = MAX_QUEUED.div_ceil(BATCH) + 1;

/// The receive queue of a QP.
#[pin_data]
pub(crate) struct RxQueue {
    /// Packets not yet handled, oldest first.
    #[pin]
    waiting: SkbQueue,
    /// Packets handled under the QP lock, freed after it (an skb is not freed with interrupts
    /// disabled) as consumed.
    #[pin]
    done: SkbQueue,
    /// Packets taken under the QP lock that failed their check, freed after it as drops.
    #[pin]
    dropped: SkbQueue,
    /// The QP's requester may keep more than one RDMA Read outstanding (`max_rd_atomic` above
    /// 1): responses of another Read may follow the ones arriving.
    reads_overlap: AtomicBool,
    /// The last packet queued, other than by a full queue's helper, was an RDMA Read response:
    /// the work item runs on any CPU (see the module's docs).
    any_cpu: AtomicBool,
    /// Packets queued or in hand, not yet handed to the core. Lowered under the QP lock only,
    /// so a receive path that reads 0 comes after every packet queued before its own.
    held: AtomicUsize,
    /// The ticket of the next batch taken in hand. Changed under the QP lock only.
    next_ticket: AtomicU32,
    /// The ticket of the next batch to hand in: batches before it have been handed to the
    /// core, and none is in hand when it equals `next_ticket`. Changed under the QP lock only.
    handed: AtomicU32,
    /// Entries waiting for the batches in hand ([`QpShared::lock_in_order`]): no batch is
    /// taken meanwhile, so that their wait ends. Changed under the QP lock only.
    waiters: AtomicU32,
    /// The QP is being destroyed: its work items do not queue each other any more. Set under
    /// the QP lock, with its `dead`.
    closed: AtomicBool,
    /// The work item is queued and its run has not begun: a packet queued meanwhile needs no
    /// call to queue it (the run takes it).
    kicked: RunFlag,
    /// The same for the urgent work item.
    armed: RunFlag,
    /// Runs of the work item begun so far.
    runs: AtomicU32,
    /// `runs` when the urgent work item was last armed: if the work item has run since, the
    /// queue is moving, and the deadline starts again instead of taking the packets over.
    runs_at_arm: AtomicU32,
}

// A batch's holder must not be preempted by what waits for it: bottom halves off keep it on
// its CPU to the end, which PREEMPT_RT does not.
#[cfg(CONFIG_PREEMPT_RT)]
compile_error!("rvrdma's receive queues need bottom halves off to disable preemption");

/// A packet taken from the queue in a batch: checked outside the QP lock, handed to the core
/// under it.
pub(super) struct Prepared {
    /// The packet.
    pub(super) skb: Skb,
    /// What the check found: `None` until it is checked, and after for a packet to drop.
    pub(super) checked: Option<Checked>,
}

/// What [`QpShared::claim_rx`] found.
enum Claim {
    /// A batch in hand, with its ticket.
    Batch(u32, KVec<Prepared>),
    /// Nothing to take: the queue is empty.
    Nothing,
    /// The QP is being destroyed: its packets are dropped there.
    Dead,
    /// No batch now (no memory for one, or an entry waits for the batches in hand): the
    /// packets are to be taken under the lock, one by one.
    UnderLock,
}

impl RxQueue {
    /// Two empty queues.
    pub(super) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            waiting <- SkbQueue::new(),
            done <- SkbQueue::new(),
            dropped <- SkbQueue::new(),
            reads_overlap: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            next_ticket: AtomicU32::new(0),
            handed: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            any_cpu: AtomicBool::new(false),
            kicked: RunFlag::new(),
            armed: RunFlag::new(),
            runs: AtomicU32::new(0),
            runs_at_arm: AtomicU32::new(0),
        })
    }
}

impl WorkItem<4> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.run_rx();
    }
}

impl WorkItem<7> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.run_rx();
    }
}

impl QpShared {
    /// A run of the receive queue's work item, in softirq context (`rx_work`) or in a worker
    /// for any CPU (`rx_any_work`): a batch.
    fn run_rx(self: &Arc<Self>) {
        self.rx.kicked.begin();
        self.rx.runs.fetch_add(1, Ordering::Relaxed);
        self.rx_work_queued
            .ran(&self.dev.counters.rx_queue_delay_max_us);
        // As the softirq would: what the batch transmits (ACKs) is received on this CPU when
        // bottom halves come back on. They stay off from a batch's claim to its hand-in, so
        // that nothing that runs on this CPU meanwhile can wait for it.
        crate::sync::bh::with_bh_disabled(|_| {
            if self.handle_rx_batch(false) && self.rx_waiting() {
                self.schedule_rx(|| None);
            }
        });
    }
}

impl WorkItem<5> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.rx.armed.begin();
        if !this.rx_waiting() {
            return;
        }
        // The work item ran since the deadline was armed: the queue is moving, and the item is
        // queued again for what waits (a run that leaves packets queues the next). Taking them
        // here would only move the work to a worker thread on this CPU, usually the busy
        // sender's. A closed queue's deadline is not armed again (QP destroy waits for this
        // item twice, not for ever).
        let runs = this.rx.runs.load(Ordering::Relaxed);
        let ran = runs != this.rx.runs_at_arm.load(Ordering::Relaxed);
        if ran && !this.rx.closed.load(Ordering::Relaxed) {
            this.arm_rx_deadline();
            return;
        }
        Counters::inc(&this.dev.counters.rx_queue_urgent_runs);
        for round in 1..=URGENT_ROUNDS {
            let done = crate::sync::bh::with_bh_disabled(|_| {
                let live = this.handle_rx_batch(false);
                let more = live && this.rx_waiting();
                if more && round == URGENT_ROUNDS {
                    this.schedule_rx(|| None);
                }
                !more
            });
            if done {
                return;
            }
        }
    }
}

/// Where a queued packet's work item runs.
#[derive(Clone, Copy)]
pub(crate) enum RxTarget {
    /// Another CPU than this one ([`backlog::other_cpu`]).
    Other,
    /// Whichever CPU the scheduler finds free (a stream of RDMA Read responses).
    AnyCpu,
    /// The CPU given.
    Cpu(u32),
    /// The queue is full: the packet joins it, and this CPU handles a batch at once.
    Help,
}

impl QpShared {
    /// Whether a received packet goes to the receive queue, and where its work item runs:
    /// always while the queue holds packets or a batch is in hand (the order), this CPU
    /// handling a batch when it is full ([`RxTarget::Help`]); else on an RC QP with the device's
    /// `rx_spread` switch on, when it is bulk ([`Glance::bulk_len`]), not a Read response of a
    /// QP with one Read in flight at a time, and either a stream is arriving (packets wait in
    /// the backlog behind it, or more of its burst follow: `burst`) or it is a request whose
    /// response this CPU could not send at once; an empty queue never past the device's limit
    /// (`None`: the caller handles it at once). A Read response's work item runs on any CPU
    /// ([`RxTarget::AnyCpu`]), another packet's on the other CPU. Decided on a glance at the
    /// packet's BTH `g`. Softirq context.
    pub(crate) fn queues_rx(&self, g: &Glance, burst: bool) -> Option<RxTarget> {
        let full = self.rx.waiting.len() >= MAX_QUEUED
            || self.dev.rx_queued.load(Ordering::Relaxed) >= MAX_RX_QUEUED;
        let response = g.opcode.info().operation == Operation::RdmaReadResponse;
        let elsewhere = if response {
            RxTarget::AnyCpu
        } else {
            RxTarget::Other
        };
        if self.rx.held.load(Ordering::Relaxed) > 0 {
            let to = if full { RxTarget::Help } else { elsewhere };
            return Some(to);
        }
        if full {
            return None;
        }
        if self.qp_type != IbQpType::Rc || !self.dev.rx_spread() || g.bulk_len < BULK {
            return None;
        }
        // The responses of a QP that has one Read in flight at a time: nothing overlaps with
        // their handling, so a hand-off would only lengthen the Read's round trip.
        if response && !self.rx.reads_overlap.load(Ordering::Relaxed) {
            return None;
        }
        // A request whose response could not leave from here until another CPU's backlog has
        // passed the last ones: handled on that CPU, where the response then leaves at once,
        // not by a worker thread there that may wait behind a busy task.
        if g.opcode.info().is_request {
            if let Some(cpu) = self.stream(false).held_elsewhere() {
                return Some(RxTarget::Cpu(cpu));
            }
        }
        (burst || backlog::waiting_here() >= STREAM).then_some(elsewhere)
    }

    /// Adds a packet to the receive queue ([`Self::queues_rx`] said so) and wakes the work item.
    pub(crate) fn queue_rx(self: &Arc<Self>, mut skb: Skb, to: RxTarget) {
        skb.detach();
        Counters::inc(&self.dev.counters.rx_queued_pkts);
        self.dev.rx_queued.fetch_add(1, Ordering::Relaxed);
        self.rx.held.fetch_add(1, Ordering::Relaxed);
        self.rx.waiting.push(skb);
        if !matches!(to, RxTarget::Help) {
            let any_cpu = matches!(to, RxTarget::AnyCpu);
            if self.rx.any_cpu.load(Ordering::Relaxed) != any_cpu {
                self.rx.any_cpu.store(any_cpu, Ordering::Relaxed);
            }
        }
        self.schedule_rx(|| match to {
            RxTarget::Cpu(cpu) => Some(cpu),
            RxTarget::Other | RxTarget::AnyCpu | RxTarget::Help => backlog::other_cpu(),
        });
        if matches!(to, RxTarget::Help) {
            let _ = self.handle_rx_batch(true);
        }
    }

    /// Queues the receive queue's work item and arms the urgent one, each unless it is queued
    /// and has not begun its run (which then takes what was queued before this call). The
    /// urgent one is armed even when the work item was queued already: an urgent run may have
    /// emptied the queue since, and what comes now needs a deadline too. The work goes to any
    /// CPU while the queue's last new run was for Read responses; otherwise `to` gives the CPU
    /// (a packet was just queued), or `None` to continue on this one (a run left packets), and
    /// it is asked only when the work item is to be queued. Softirq context, or bottom halves
    /// disabled.
    pub(super) fn schedule_rx(self: &Arc<Self>, to: impl FnOnce() -> Option<u32>) {
        self.rx_work_queued.mark();
        if self.rx.kicked.claim() {
            if backlog::other_cpu().is_none() {
                let _ = workqueue::queue().enqueue::<_, 4>(self.clone());
            } else if self.rx.any_cpu.load(Ordering::Relaxed) {
                Counters::inc(&self.dev.counters.rx_queue_any_cpu_runs);
                let _ = workqueue::any_cpu_queue().enqueue::<_, 7>(self.clone());
            } else if let Some(cpu) = to() {
                // In softirq context there, at once: a task busy on that CPU (a receiver
                // polling its CQ) does not hold it back as it would a worker thread.
                let _ = workqueue::enqueue_bh_on::<_, 4>(cpu, self.clone());
            } else {
                let _ = workqueue::bh_queue().enqueue::<_, 4>(self.clone());
            }
        }
        self.arm_rx_deadline();
    }

    /// Arms the urgent work item unless it is armed and has not begun its run.
    fn arm_rx_deadline(self: &Arc<Self>) {
        if self.rx.armed.claim() {
            let runs = self.rx.runs.load(Ordering::Relaxed);
            self.rx.runs_at_arm.store(runs, Ordering::Relaxed);
            let _ = workqueue::cpu_queue()
                .enqueue_delayed::<_, 5>(self.clone(), msecs_to_jiffies(URGENT_AFTER_MS));
        }
    }

    /// Takes the oldest waiting packet, if any, to handle it at once. Under the QP lock, no
    /// batch in hand, so that packets are handled in the order they leave the queue.
    pub(super) fn pop_rx(&self) -> Option<Skb> {
        let skb = self.take_rx()?;
        self.rx.held.fetch_sub(1, Ordering::Relaxed);
        Some(skb)
    }

    /// Takes the oldest waiting packet, if any; it stays counted in `held`.
    fn take_rx(&self) -> Option<Skb> {
        // Mostly empty: every packet handled inline asks. A packet queued after the look is
        // not lost: its work item is queued after it.
        let skb = self.rx.waiting.pop_nonempty()?;
        self.dev.rx_queued.fetch_sub(1, Ordering::Relaxed);
        Some(skb)
    }

    /// Takes a batch in hand, parses it and checks its ICRCs without the QP lock, waits for
    /// the batches taken before it, and hands it to the core under the lock. Bottom halves
    /// disabled: nothing on this CPU can wait for the batch while it is in hand. `help`: the
    /// receiving CPU's softirq takes the batch (the queue is full), not the work item.
    /// Returns `false` when the QP is being destroyed (nothing is to be scheduled again).
    fn handle_rx_batch(self: &Arc<Self>, help: bool) -> bool {
        match self.claim_rx(help) {
            Claim::Batch(ticket, mut batch) => {
                for p in batch.iter_mut() {
                    receive::queued(&self.dev, &mut p.skb, &mut p.checked);
                }
                // The batches before it are in hand on other CPUs, which cannot be held up
                // (bottom halves off there too).
                while self.rx.handed.load(Ordering::Acquire) != ticket {
                    core::hint::spin_loop();
                }
                let _ = self.drive(Entry::RxBatch(&batch));
                // The skbs are freed here, after the lock: those the core was handed as
                // consumed, the rest as drops.
                for p in batch.drain_all() {
                    if p.checked.is_some() {
                        p.skb.consume();
                    }
                }
            }
            // Each packet is checked under the lock as it is taken.
            Claim::UnderLock => {
                let _ = self.drive(Entry::RxQueue(help));
            }
            Claim::Nothing => {}
            Claim::Dead => return false,
        }
        !self.rx.closed.load(Ordering::Relaxed)
    }

    /// Takes up to a batch of waiting packets in hand, with a ticket (under the QP lock).
    fn claim_rx(&self, help: bool) -> Claim {
        let n = self.rx.waiting.len().min(BATCH);
        if n == 0 {
            return Claim::Nothing;
        }
        let Ok(mut batch) = KVec::with_capacity(n, GFP_ATOMIC) else {
            return Claim::UnderLock;
        };
        let g = self.inner.lock();
        if g.dead {
            return Claim::Dead;
        }
        if self.rx.waiters.load(Ordering::Relaxed) > 0 {
            return Claim::UnderLock;
        }
        // A packet is taken only where a slot is free, so the push cannot fail.
        while batch.len() < n.min(batch.capacity()) {
            let Some(skb) = self.take_rx() else {
                break;
            };
            let _ = batch.push_within_capacity(Prepared { skb, checked: None });
        }
        if batch.is_empty() {
            return Claim::Nothing;
        }
        let c = &self.dev.counters;
        let counter = if help {
            &c.rx_queue_help_pkts
        } else {
            &c.rx_queue_worker_pkts
        };
        Counters::add(counter, batch.len());
        let ticket = self.rx.next_ticket.load(Ordering::Relaxed);
        self.rx
            .next_ticket
            .store(ticket.wrapping_add(1), Ordering::Relaxed);
        drop(g);
        Claim::Batch(ticket, batch)
    }

    /// The batch whose turn it is, `n` packets, has been handed to the core (or dropped with
    /// the QP). Under the QP lock.
    pub(super) fn rx_handed_in(&self, n: usize) {
        self.rx.held.fetch_sub(n, Ordering::Relaxed);
        let next = self.rx.handed.load(Ordering::Relaxed).wrapping_add(1);
        self.rx.handed.store(next, Ordering::Release);
    }

    /// Counts an entry that waits for the batches in hand (`true`), or one that is done
    /// waiting. Under the QP lock.
    pub(super) fn rx_wait(&self, start: bool) {
        let w = &self.rx.waiters;
        let n = w.load(Ordering::Relaxed);
        w.store(
            if start {
                n.wrapping_add(1)
            } else {
                n.wrapping_sub(1)
            },
            Ordering::Relaxed,
        );
    }

    /// Marks the queue closed: the QP is being destroyed. Under the QP lock, with `dead`.
    pub(super) fn rx_close(&self) {
        self.rx.closed.store(true, Ordering::Relaxed);
    }

    /// Whether a batch is in hand (under the QP lock, or to wait for one without it).
    pub(super) fn rx_in_hand(&self) -> bool {
        self.rx.handed.load(Ordering::Acquire) != self.rx.next_ticket.load(Ordering::Relaxed)
    }

    /// Notes the requester's `max_rd_atomic`, for [`Self::queues_rx`]. Under the QP lock.
    pub(super) fn note_max_rd_atomic(&self, max_rd_atomic: u8) {
        self.rx
            .reads_overlap
            .store(max_rd_atomic > 1, Ordering::Relaxed);
    }

    /// Keeps a handled packet for [`Self::free_rx`].
    pub(super) fn rx_done(&self, skb: Skb, handled: bool) {
        if handled {
            self.rx.done.push(skb);
        } else {
            self.rx.dropped.push(skb);
        }
    }

    /// Whether packets wait in the receive queue.
    pub(super) fn rx_waiting(&self) -> bool {
        !self.rx.waiting.is_empty()
    }

    /// Frees the packets taken under the lock: the handled ones as consumed, the rest as
    /// drops. Not under the QP lock.
    pub(super) fn free_rx(&self) {
        if !self.rx.done.is_empty() {
            self.rx.done.consume_all();
        }
        // One by one, each a drop of rvrdma's own (`Skb`'s drop), not the queue's purge.
        while let Some(skb) = self.rx.dropped.pop_nonempty() {
            drop(skb);
        }
    }

    /// Drops every waiting packet (the QP is being destroyed), each counted as a packet for
    /// no QP, as it would be had it arrived a moment later. Process context, no lock.
    pub(super) fn purge_rx(&self) {
        while self.pop_rx().is_some() {
            Counters::inc(&self.dev.counters.rx_no_qp);
        }
        self.free_rx();
    }
}
