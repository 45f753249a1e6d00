// SPDX-License-Identifier: GPL-2.0

//! A signaled RDMA Read or atomic sent by a work item that waits for it on another CPU.
//!
//! A client that waits for each Read's or atomic's completion (`ib_read_lat`, a lock taken by
//! compare-and-swap) posts the next one a few microseconds after it sees the completion.
//! Sent from its doorbell, the whole round trip runs inside the call (on a veth the backlog
//! runs when bottom halves come back on), and so does its tail: the response's freeing, the
//! softirq's and the system call's return. Sent by a work item on another CPU, the call
//! returns once the request is built and the tail runs beside the client's next post. But
//! waking a worker on an idle CPU costs more than that tail (tens of microseconds under TCG),
//! so a doorbell leaves its request only to a work item that is waiting for it, spinning on
//! the request stream after each round trip for twice its length (see
//! [`Linger::round_trip_ended`]). A doorbell that finds none waiting sends from its own
//! context, as before, and queues one, which then serves the doorbells that follow; after runs
//! that waited in vain, fewer doorbells queue one (see [`Linger::back_off`]). (rdma_rxe's round
//! trip runs on its workqueue the same way: there, the doorbell mostly finds the worker still
//! busy with the last round trip.)
//!
//! While it waits, the item also watches the QP's send ring: user space posts a WQE into the
//! mapped ring and only then makes the doorbell's system call. The item takes a WQE it sees
//! there and sends it at once, so the client's system call (and the first use of the FPU in
//! it, which saves the user's FPU state) is off the round trip; the doorbell then finds the
//! WQE gone. rdma_rxe's requester reads the same ring whenever it runs.

use super::run_flag::RunFlag;
use super::{Entry, QpInner, QpShared};
use crate::driver::counters::Counters;
use crate::net::backlog;
use crate::rvcore::qp_state::QpState;
use crate::sync::{
    bh::with_bh_disabled, clock::now_ns, irq_spinlock::IrqSpinLockBackend, sched, workqueue,
};
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::{
    sync::{lock::Guard, Arc},
    workqueue::WorkItem,
};

/// How long, at least, the waiting work item waits for a doorbell's request after the last
/// round trip ended. Under TCG a client posts again 5 to 10 us after its completion; waking a
/// worker on an idle CPU takes 20 to 80.
const LINGER_NS: u64 = 50_000;

/// How long, at most: the wait is twice the last round trip (a slower kernel, a debug one,
/// also posts again later), within these bounds.
const LINGER_MAX_NS: u64 = 1_000_000;

/// How recently the waiting work item must have looked at the stream for a doorbell to leave
/// its request to it (a round trip the item runs counts as a look): one that has not looked
/// for longer was preempted (a task woke on its CPU), and the doorbell sends from its own
/// context instead.
const BEAT_NS: u64 = 10_000;

/// The most doorbells that skip queueing the work item after runs that waited in vain: their
/// client posts less often than the item waits, and the spinning would be for nothing.
const SKIP_MAX: u32 = 64;

/// The longest one run waits and serves: a later doorbell asks for another run.
const LINGER_RUN_MAX_NS: u64 = 2_000_000;

/// The work item that waits for the request stream's packets on another CPU, and what a
/// doorbell looks at to leave its request to it.
pub(super) struct Linger {
    /// Set while the work item waits; a doorbell that finds it set (and `beat` recent) leaves
    /// its request on the stream.
    waiting: AtomicBool,
    /// When the waiting work item last looked at the stream ([`now_ns`]; `u64::MAX` while it
    /// runs a round trip).
    beat: AtomicU64,
    /// The CPU a doorbell last asked the work item to run on (another than its own).
    cpu: AtomicU32,
    /// The CPU the waiting work item runs on: a doorbell leaves its request only to one on
    /// another CPU than its own.
    at: AtomicU32,
    /// Doorbells still to skip queueing the work item, and how many the next fruitless run
    /// makes skip (see [`Linger::back_off`]).
    skip: AtomicU32,
    next_skip: AtomicU32,
    /// The work item is queued and its run has not begun.
    queued: RunFlag,
    /// Until when the work item waits for the next request ([`now_ns`]): set as each round
    /// trip ends, by the doorbell that ran it or by the work item.
    until: AtomicU64,
    /// How long that wait was, the last time.
    wait: AtomicU64,
}

impl Default for Linger {
    fn default() -> Self {
        Self {
            waiting: AtomicBool::new(false),
            beat: AtomicU64::new(0),
            cpu: AtomicU32::new(0),
            at: AtomicU32::new(0),
            skip: AtomicU32::new(0),
            next_skip: AtomicU32::new(0),
            queued: RunFlag::new(),
            until: AtomicU64::new(0),
            wait: AtomicU64::new(LINGER_NS),
        }
    }
}

impl Linger {
    /// A round trip that began at `start` ended now: the next request is waited for until
    /// twice its length from now, within [`LINGER_NS`] and [`LINGER_MAX_NS`]. Returns when.
    fn round_trip_ended(&self, start: u64) -> u64 {
        let now = now_ns();
        let wait = now
            .saturating_sub(start)
            .saturating_mul(2)
            .clamp(LINGER_NS, LINGER_MAX_NS);
        let until = now.saturating_add(wait);
        self.until.store(until, Ordering::Relaxed);
        self.wait.store(wait, Ordering::Relaxed);
        until
    }

    /// A run ended having served a request (`served`), or waited its whole wait for none:
    /// after such a run the next doorbell does not queue one, after two in a row the next
    /// three, and so on to [`SKIP_MAX`]; a run that serves resets it. (The counts are hints:
    /// racing updates only move how soon a run is queued again.)
    fn back_off(&self, served: bool) {
        let (skip, next) = if served {
            (0, 0)
        } else {
            let n = self.next_skip.load(Ordering::Relaxed);
            (n.max(1), (n * 2 + 1).min(SKIP_MAX))
        };
        self.skip.store(skip, Ordering::Relaxed);
        self.next_skip.store(next, Ordering::Relaxed);
    }

    /// Whether a doorbell is to queue the work item, or skip it (see [`Linger::back_off`]).
    fn take_turn(&self) -> bool {
        let skip = self.skip.load(Ordering::Relaxed);
        if skip == 0 {
            return true;
        }
        self.skip.store(skip - 1, Ordering::Relaxed);
        false
    }
}

impl QpShared {
    /// Sends the packets of a doorbell that took one signaled RDMA Read or atomic with nothing
    /// else outstanding: the request by the waiting work item if there is one (the call then
    /// returns before the round trip), else from here; responses from here. (With others in
    /// flight, a client is not waiting on this one alone, and the stream's sending would move
    /// between CPUs.)
    pub(super) fn flush_tx_rd_atomic(self: &Arc<Self>) {
        // The request was queued before this look, under the QP lock; the work item clears
        // `waiting` before its last look at the stream (see `linger`): one of the two sees the
        // other.
        fence(Ordering::SeqCst);
        let l = &self.linger;
        let waited_for = l.waiting.load(Ordering::Relaxed)
            && now_ns().saturating_sub(l.beat.load(Ordering::Relaxed)) < BEAT_NS
            && l.at.load(Ordering::Relaxed) != sched::current_cpu();
        if !waited_for {
            // Asked first, so that the worker wakes while this round trip runs (on a veth the
            // flush returns once the response is handled).
            self.ask_linger();
            let start = now_ns();
            self.flush_stream(true);
            l.round_trip_ended(start);
        }
        self.flush_stream(false);
    }

    /// The QP lock, held, if user space posted send WQEs to this QP, in RTS, that no doorbell
    /// has taken yet (a look that gives way to any holder of the lock); the take goes on
    /// under it.
    fn sq_posted(&self) -> Option<Guard<'_, QpInner, IrqSpinLockBackend>> {
        // Most looks find nothing: no turn at the lock for those.
        if self.sq_taken_all() {
            return None;
        }
        self.inner
            .try_lock()
            .filter(|g| !g.dead && g.core.state() == QpState::Rts && g.user.sq_posted())
    }

    /// Queues the waiting work item on another CPU, unless it is queued and not yet begun or
    /// this doorbell is to skip it (see [`Linger::back_off`]).
    fn ask_linger(self: &Arc<Self>) {
        if !self.linger.take_turn() {
            return;
        }
        let Some(cpu) = with_bh_disabled(|_| backlog::other_cpu()) else {
            return;
        };
        self.linger.cpu.store(cpu, Ordering::Relaxed);
        if self.linger.queued.claim() {
            let _ = workqueue::enqueue_spin_on::<_, 6>(cpu, self.clone());
        }
    }

    /// The waiting work item: sends the request stream's packets as doorbells leave them, and
    /// takes and sends the WQEs it sees in the send ring before their doorbells,
    /// until none came in the wait after the last round trip (see
    /// [`Linger::round_trip_ended`]), another task wants the CPU, or the run has lasted
    /// [`LINGER_RUN_MAX_NS`].
    fn linger(self: &Arc<Self>) {
        let l = &self.linger;
        l.queued.begin();
        let cpu = sched::current_cpu();
        // Queued for a CPU that went offline, it runs on another one.
        if l.cpu.load(Ordering::Relaxed) != cpu {
            return;
        }
        l.at.store(cpu, Ordering::Relaxed);
        l.beat.store(now_ns(), Ordering::Relaxed);
        l.waiting.store(true, Ordering::Relaxed);
        let start = now_ns();
        // The doorbell that queued this run may still be in its round trip (it moves `until`
        // when the round trip ends): wait for as long as after the last one, meanwhile.
        let mut until = start.saturating_add(l.wait.load(Ordering::Relaxed));
        let mut served = false;
        let mut waited_out = false;
        loop {
            let now = now_ns();
            l.beat.store(now, Ordering::Relaxed);
            if sched::need_resched() || now.saturating_sub(start) >= LINGER_RUN_MAX_NS {
                break;
            }
            if !self.requests.is_empty() {
                // Alive while the round trip runs (on a veth, inside the flush).
                l.beat.store(u64::MAX, Ordering::Relaxed);
                self.flush_stream(true);
                if self.requests.is_empty() {
                    Counters::inc(&self.dev.counters.tx_linger_handoffs);
                    served = true;
                    until = l.round_trip_ended(now);
                } else {
                    // Another context sends the stream (the doorbell that queued this run, or
                    // a hand-off to the CPU of its last batch): it sends what comes meanwhile
                    // too. Wait for it rather than ask again.
                    while !self.requests.is_empty()
                        && !sched::need_resched()
                        && now_ns().saturating_sub(start) < LINGER_RUN_MAX_NS
                    {
                        core::hint::spin_loop();
                    }
                }
            } else if let Some(g) = self.sq_posted() {
                // The client posted its next WQEs and has not rung yet: take and send them
                // now, a system call before their doorbell (which then finds them gone).
                l.beat.store(u64::MAX, Ordering::Relaxed);
                if self.drive_locked(g, Entry::RingWatch) {
                    self.refresh_routes();
                    let _ = self.drive(Entry::RingWatch);
                }
                if self.requests.is_empty() {
                    Counters::inc(&self.dev.counters.tx_linger_handoffs);
                    served = true;
                    until = l.round_trip_ended(now);
                }
            } else if now >= until.max(l.until.load(Ordering::Relaxed)) {
                waited_out = true;
                break;
            } else {
                core::hint::spin_loop();
            }
        }
        // Stopped for another task or by the run's limit: no sign of a slow client.
        if served || waited_out {
            l.back_off(served);
        }
        l.waiting.store(false, Ordering::Relaxed);
        // A doorbell that found `waiting` set after the last look left its request to us.
        fence(Ordering::SeqCst);
        self.flush_stream(true);
    }
}

impl WorkItem<6> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.linger();
    }
}
