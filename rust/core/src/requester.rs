//! SQ Logic, transmit side (the "requester"): posting send WQEs, SSN assignment, segmentation by
//! path MTU, PSN assignment, end-to-end credit checks (seed 003), fences, the limit on
//! outstanding RDMA Reads/atomics, AckReq, go-back-N rewinds and the transport timer.
//!
//! The response side of the same SQ Logic (ACK/NAK/read and atomic responses, retries,
//! completions) is in [`crate::completer`]; both work on [`SqLogic`].

use crate::apm::PathInfo;
use crate::credit::CreditLimit;
use crate::events::{Outputs, PayloadSource, Timer, WcStatus};
use crate::memory::{MemError, Memory, ACCESS_LOCAL_WRITE};
use crate::psn::{Psn, PSN_HALF_WINDOW, PSN_MASK};
use crate::sg_pool::{SgPool, SgStore};
use crate::wire::{AtomicEth, Bth, Feth, Headers, Ieth, ImmDt, Opcode, Position, Reth, Transport};
use crate::wqe::{SendFlags, SendOpcode, SendSlot, SendWr, Sge, UdDest};

/// The most RDMA Reads and atomics a requester keeps outstanding (`max_qp_init_rd_atom`):
/// Modify QP refuses a larger `max_rd_atomic`. rdma_rxe's value: perftest gives the initiator
/// the responder's depth, so a smaller one would refuse perftest's Reads from rdma_rxe.
pub const MAX_RD_ATOMIC: u8 = 128;

/// The requester sets BTH:AckReq at least every this many packets of a long message (besides
/// the last packet of every message).
pub const ACK_REQ_EVERY: u32 = 16;

/// Why a post was refused (the kernel shell returns `-EINVAL` / `-ENOMEM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The QP's state does not accept posts to this queue (e.g. SQ in Init, seed 004).
    InvalidState,
    /// The queue is full.
    QueueFull,
    /// The work request is malformed (length overflow, unsupported opcode for the QP type).
    InvalidWr,
}

/// Most PSNs the requester leaves unacknowledged before it waits for ACKs (Linux rdma_rxe
/// uses the same bound, `RXE_MAX_UNACKED_PSNS`). A message longer than this still starts when
/// nothing is outstanding.
pub const MAX_UNACKED_PSNS: u32 = 128;

/// The send window after a transport timeout, in PSNs: the retry probes the path with one
/// packet and the window grows again with each acknowledged PSN (see `SqLogic::cwnd`).
pub const CWND_AFTER_TIMEOUT: u32 = 1;

/// The smallest send window a sequence NAK halves it to.
pub const CWND_MIN: u32 = 4;

/// Per-connection values the SQ Logic uses when transmitting.
#[derive(Clone, Copy, Debug)]
pub struct TxCtx<'a> {
    /// Path to send on.
    pub path: &'a PathInfo,
    /// BTH:MigReq for every packet.
    pub mig_req: bool,
    /// Destination QP number.
    pub dest_qp: u32,
    /// BTH:P_Key.
    pub pkey: u16,
    /// Our QP number (for completions).
    pub qpn: u32,
    /// Transport of this QP (RC, UC or UD).
    pub transport: Transport,
    /// The QP's own Q_Key (UD).
    pub qkey: u32,
}

/// Static parameters of the SQ Logic (from Modify QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqConfig {
    /// Path MTU in bytes (256..=4096).
    pub mtu: u32,
    /// Retry count (0..=7).
    pub retry_cnt: u8,
    /// RNR retry count (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Local ACK timeout exponent (0 = infinite).
    pub timeout: u8,
    /// Max outstanding RDMA Reads/atomics as initiator (0 treated as 1).
    pub max_rd_atomic: u8,
}

impl Default for SqConfig {
    fn default() -> SqConfig {
        SqConfig {
            mtu: 1024,
            retry_cnt: 7,
            rnr_retry: 7,
            timeout: 14,
            max_rd_atomic: 1,
        }
    }
}

/// The local ACK timeout in nanoseconds: 4.096 us * 2^timeout (`None` for 0 = infinite).
pub fn local_ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        return None;
    }
    let shift = u32::from(timeout.min(31));
    Some(4096u64 << shift)
}

/// First spacing of the credit probes of a hold (about 1 ms); each further probe waits twice
/// as long, up to [`CREDIT_PROBE_MAX_NS`]. Independent of the local ACK timeout, which may be
/// infinite or seconds long: a lost unsolicited ACK costs at most one spacing.
pub const CREDIT_PROBE_MIN_NS: u64 = 1 << 20;

/// Longest spacing of the credit probes (about 134 ms).
pub const CREDIT_PROBE_MAX_NS: u64 = 1 << 27;

/// The wait before credit probe number `n` (0-based) of a hold.
pub fn credit_probe_delay_ns(n: u32) -> u64 {
    let doublings = CREDIT_PROBE_MAX_NS.trailing_zeros() - CREDIT_PROBE_MIN_NS.trailing_zeros();
    (CREDIT_PROBE_MIN_NS << n.min(doublings)).min(CREDIT_PROBE_MAX_NS)
}

/// Counters kept by the SQ Logic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqCounters {
    /// Request packets sent (including retransmissions).
    pub packets_sent: u64,
    /// Request packets retransmitted.
    pub retransmitted: u64,
    /// Retries (timeouts, sequence NAKs, implied NAKs).
    pub retries: u64,
    /// Transport timer expiries.
    pub timeouts: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Sequence error NAKs received.
    pub seq_naks_received: u64,
    /// Times a new Send/WriteImm found no credit.
    pub credit_stalls: u64,
    /// Credit probes sent while holding a message for credits.
    pub credit_probes: u64,
    /// Response packets received.
    pub responses_received: u64,
    /// Duplicate or ghost responses dropped.
    pub duplicate_responses: u64,
    /// ACKs of nothing new that are the peer's credit reports, counted apart from duplicates:
    /// its initial ACK, its unsolicited updates (new MSN or credits, or nothing in flight) and
    /// its answers to credit probes.
    pub credit_acks_received: u64,
}

/// The SQ Logic of one QP: the send queue and the requester/completer state.
#[derive(Debug)]
pub struct SqLogic<S, G, D> {
    pub(crate) sq: S,
    /// The slots' gather/scatter lists.
    sges: SgPool<G>,
    /// The slots' datagram destinations: one a slot on a datagram QP, none on a connected one.
    dests: D,
    /// Oldest WQE not yet retired (monotonic counter; slot = counter % len).
    pub(crate) head: u64,
    /// WQE the next packet to transmit belongs to.
    pub(crate) send: u64,
    /// Next free slot.
    pub(crate) tail: u64,
    /// PSN offset of the next packet within the `send` WQE.
    pub(crate) send_pkt: u32,
    /// PSN of the next packet to transmit.
    pub(crate) next_psn: Psn,
    /// One after the highest PSN ever transmitted.
    pub(crate) high_psn: Psn,
    /// Oldest unacknowledged PSN.
    pub(crate) una: Psn,
    /// SSN of the last posted WQE.
    pub(crate) last_ssn: u32,
    /// End-to-end credit limit (LSN) from the peer's ACKs.
    pub(crate) credit: CreditLimit,
    /// A message was started without credit: no new packet until this PSN is acknowledged.
    pub(crate) credit_wait: Option<Psn>,
    /// The WQE (counter) that started without credit and has not reached its wait point.
    pub(crate) uncredited: Option<u64>,
    /// The peer has reported its credits in an ACK (a value other than `0x1F`).
    pub(crate) credit_known: bool,
    /// The MSN and credit code of the last positive ACK: an ACK of nothing new that reports
    /// others is a credit update, not a duplicate response.
    pub(crate) last_credit_report: Option<(u32, u8)>,
    /// A limited message waits for the peer's credits (see `transmit`).
    pub(crate) credit_hold: bool,
    /// The credit probe timer expired during a credit hold: one credit probe may go.
    pub(crate) credit_probe_due: bool,
    /// Credit probes sent during the current hold (spaces the next one, see
    /// [`credit_probe_delay_ns`]).
    pub(crate) credit_probes: u32,
    /// When the oldest credit probe still unanswered went out.
    pub(crate) probe_since: Option<u64>,
    /// Credit probes at `probe_psn` whose answer has not come yet: an ACK of that PSN that
    /// reports what the last one did is one of them, not a duplicate response, even when it
    /// comes after the credits it was to draw.
    pub(crate) probes_unanswered: u32,
    /// The PSN of the last credit probe.
    pub(crate) probe_psn: Psn,
    pub(crate) retry_left: u8,
    /// PSN the last retry rewound to, until the oldest unacknowledged PSN moves.
    pub(crate) retry_psn: Option<Psn>,
    /// The packet at `retry_psn` went out again since that retry: a sequence NAK for it now
    /// answers the retransmission (a repetition, seed 000), not the packet behind the retry.
    pub(crate) retry_resent: bool,
    pub(crate) rnr_left: u8,
    /// Transmission paused until this time after an RNR NAK.
    pub(crate) rnr_until: Option<u64>,
    /// The PSN of the last RNR NAK, until the PSN sequence NAK that may follow it (see the
    /// completer) or progress.
    pub(crate) rnr_seq_free: Option<Psn>,
    /// Deadline of the transport timer when armed.
    pub(crate) rto_deadline: Option<u64>,
    /// Started and not yet completed RDMA Reads/atomics.
    pub(crate) rd_atomic_out: u32,
    /// The send window: PSNs at or after `una` that may be in flight, new or retransmitted
    /// (at most [`MAX_UNACKED_PSNS`]). A timeout shrinks it to [`CWND_AFTER_TIMEOUT`] and a
    /// sequence NAK halves it; every acknowledged PSN widens it by one. Go-back-N resends the
    /// whole window after a loss: on a path that is slow rather than lossy (a busy host, a
    /// deep queue) a full-window burst per timeout only adds to the queue the ACKs wait in,
    /// and every burst costs another timeout.
    pub(crate) cwnd: u32,
    /// Configuration.
    pub(crate) cfg: SqConfig,
    /// Counters.
    pub(crate) counters: SqCounters,
    /// Set when a CQ overflow stopped retirement (class G): nothing more is retired.
    pub(crate) frozen: bool,
    /// A packet went out since the QP left Reset. Until one has, the send PSN may not be
    /// given yet, so `una` says nothing about what an ACK acknowledges.
    pub(crate) sent_any: bool,
}

/// What the Qp must do after an SQ Logic step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqOutcome {
    /// Nothing special.
    Ok,
    /// A WQE completed in error (its CQE is written): move the QP to Error and flush.
    Error,
    /// The send CQ overflowed (Table 17-7 class G).
    CqOverflow,
    /// The retry count ran out (ask APM; if not armed, call `fail_retry_exceeded`).
    RetryExhausted,
}

/// Number of PSNs a message of `len` bytes uses at `mtu` (at least one).
pub(crate) fn npackets(len: u32, mtu: u32) -> u32 {
    let mtu = mtu.max(1);
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu)
    }
}

/// Position (First/Middle/Last/Only) of packet `k` (0-based) of a message of `n` packets.
pub(crate) fn position(k: u32, n: u32) -> Position {
    if n <= 1 {
        Position::Only
    } else if k == 0 {
        Position::First
    } else if k.saturating_add(1) >= n {
        Position::Last
    } else {
        Position::Middle
    }
}

impl<S, G, D> SqLogic<S, G, D>
where
    S: core::ops::DerefMut<Target = [SendSlot]>,
    G: SgStore,
    D: core::ops::DerefMut<Target = [UdDest]>,
{
    /// A new SQ Logic over caller-provided storage: `sq`'s length is the SQ depth, `sges`
    /// holds the same number of elements for each slot, the most a WR may carry, and `dests`
    /// one datagram destination for each slot (empty for a connected QP, whose WRs have none).
    pub fn new(sq: S, sges: G, dests: D) -> SqLogic<S, G, D> {
        let sges = SgPool::new(sges, sq.len());
        SqLogic {
            sq,
            sges,
            dests,
            head: 0,
            send: 0,
            tail: 0,
            send_pkt: 0,
            next_psn: Psn::ZERO,
            high_psn: Psn::ZERO,
            una: Psn::ZERO,
            last_ssn: 0,
            credit: CreditLimit::INITIAL,
            credit_wait: None,
            uncredited: None,
            credit_known: false,
            last_credit_report: None,
            credit_hold: false,
            credit_probe_due: false,
            credit_probes: 0,
            probe_since: None,
            probes_unanswered: 0,
            probe_psn: Psn::ZERO,
            retry_left: 7,
            retry_psn: None,
            retry_resent: false,
            rnr_left: 7,
            rnr_until: None,
            rnr_seq_free: None,
            rto_deadline: None,
            rd_atomic_out: 0,
            cwnd: MAX_UNACKED_PSNS,
            cfg: SqConfig::default(),
            counters: SqCounters::default(),
            frozen: false,
            sent_any: false,
        }
    }

    /// Back to the state after creation (Modify QP to Reset): WQEs are discarded.
    pub fn reset(&mut self) {
        self.head = 0;
        self.send = 0;
        self.tail = 0;
        self.send_pkt = 0;
        self.next_psn = Psn::ZERO;
        self.high_psn = Psn::ZERO;
        self.una = Psn::ZERO;
        self.last_ssn = 0;
        self.credit = CreditLimit::INITIAL;
        self.credit_wait = None;
        self.uncredited = None;
        self.credit_known = false;
        self.last_credit_report = None;
        self.credit_hold = false;
        self.credit_probe_due = false;
        self.credit_probes = 0;
        self.probe_since = None;
        self.probes_unanswered = 0;
        self.probe_psn = Psn::ZERO;
        self.rnr_until = None;
        self.rnr_seq_free = None;
        self.rto_deadline = None;
        self.rd_atomic_out = 0;
        self.cwnd = MAX_UNACKED_PSNS;
        self.retry_psn = None;
        self.retry_resent = false;
        self.frozen = false;
        self.sent_any = false;
        self.reload_retries();
    }

    /// Sets the first PSN (Modify QP `sq_psn`).
    pub fn set_sq_psn(&mut self, psn: u32) {
        let p = Psn::new(psn);
        self.next_psn = p;
        self.high_psn = p;
        self.una = p;
    }

    /// The next PSN the requester will use (query_qp's `sq_psn`).
    pub fn sq_psn(&self) -> u32 {
        self.next_psn.value()
    }

    /// The configuration (read).
    pub fn config(&self) -> &SqConfig {
        &self.cfg
    }

    /// The configuration (write; takes effect for the next packet and the next retry).
    pub fn config_mut(&mut self) -> &mut SqConfig {
        &mut self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &SqCounters {
        &self.counters
    }

    /// The oldest unacknowledged PSN.
    pub fn una(&self) -> u32 {
        self.una.value()
    }

    /// Retries left before the retry count is exhausted.
    pub fn retry_left(&self) -> u8 {
        self.retry_left
    }

    /// The current end-to-end credit limit.
    pub fn credit_limit(&self) -> CreditLimit {
        self.credit
    }

    /// Reloads the retry and RNR retry counters with their configured values.
    pub fn reload_retries(&mut self) {
        self.retry_left = self.cfg.retry_cnt.min(7);
        self.rnr_left = self.cfg.rnr_retry.min(7);
    }

    /// Whether [`SqLogic::transmit`] may send a packet now: WQEs have packets not yet sent (new
    /// or, after a rewind, again), and neither a CQ overflow, an RNR wait nor a full window
    /// holds them. What a full window holds goes when an ACK reopens it, or on the transport
    /// timer; an RNR wait ends on its timer. Other limits (credits, outstanding Reads and
    /// atomics, a fence) are not looked at: `true` only means that a pass may send.
    pub fn may_send(&self) -> bool {
        let window_full =
            self.next_psn != self.una && self.next_psn.distance_from(self.una) >= self.cwnd;
        self.send != self.tail && !self.frozen && self.rnr_until.is_none() && !window_full
    }

    /// Number of WQEs posted and not yet retired.
    pub fn outstanding(&self) -> u64 {
        self.tail.wrapping_sub(self.head)
    }

    /// The slot the next posted WR will take, or `None` while the queue is full: a shell that
    /// keeps something per slot (a copy of inline data) fills that slot's before it posts.
    pub fn next_slot(&self) -> Option<usize> {
        if self.outstanding() >= self.sq.len() as u64 {
            return None;
        }
        self.idx(self.tail)
    }

    /// True when no message is in flight: nothing started is unacknowledged.
    pub fn idle_in_flight(&self) -> bool {
        self.una == self.high_psn && self.rd_atomic_out == 0 && self.no_started_pending()
    }

    fn no_started_pending(&self) -> bool {
        let mut c = self.head;
        while c != self.send {
            if let Some(s) = self.slot(c) {
                if s.started && !s.done {
                    return false;
                }
            }
            c = c.wrapping_add(1);
        }
        // The WQE at `send` may be partially transmitted.
        !(self.send != self.tail && self.send_pkt > 0)
    }

    pub(crate) fn idx(&self, c: u64) -> Option<usize> {
        crate::wqe::ring_slot(c, self.sq.len())
    }

    pub(crate) fn slot(&self, c: u64) -> Option<&SendSlot> {
        let i = self.idx(c)?;
        self.sq.get(i)
    }

    pub(crate) fn slot_mut(&mut self, c: u64) -> Option<&mut SendSlot> {
        let i = self.idx(c)?;
        self.sq.get_mut(i)
    }

    /// The gather/scatter list of the WQE at counter `c`.
    pub(crate) fn sges(&self, c: u64) -> &[Sge] {
        slot_sges(&self.sq, &self.sges, self.idx(c))
    }

    /// The datagram destination of the WQE at counter `c` (an empty one on a connected QP).
    fn ud_dest(&self, c: u64) -> &UdDest {
        self.idx(c)
            .and_then(|i| self.dests.get(i))
            .unwrap_or(&UdDest::EMPTY)
    }

    /// Queues a send WR and gives it its SSN (the Qp already checked the state). Fails when the
    /// SQ is full or the WR is malformed (gather list longer than 2^31 bytes, atomic result
    /// buffer shorter than 8 bytes).
    pub fn post(&mut self, wr: &SendWr) -> Result<(), PostError> {
        let cap = self.sq.len() as u64;
        if self.outstanding() >= cap {
            return Err(PostError::QueueFull);
        }
        let len = wr.sg.total_len().ok_or(PostError::InvalidWr)?;
        if len > (1u32 << 31) {
            return Err(PostError::InvalidWr);
        }
        if wr.opcode.is_atomic() && len < 8 {
            return Err(PostError::InvalidWr);
        }
        // Local operations never reach the responder, so they take no SSN: the peer's MSN
        // counts only messages on the wire (seed 003).
        let ssn = if wr.opcode.is_local() {
            self.last_ssn
        } else {
            self.last_ssn.wrapping_add(1) & PSN_MASK
        };
        let npsn = match wr.opcode {
            op if op.is_local() => 0,
            op if op.is_atomic() || op.is_flush_or_atomic_write() => 1,
            _ => npackets(len, self.cfg.mtu),
        };
        // ATOMIC WRITE carries its 8 bytes in the WQE; FLUSH names a remote range only.
        let len = match wr.opcode {
            op if op.is_atomic() || op == SendOpcode::AtomicWrite => 8,
            SendOpcode::Flush => wr.flush().length,
            _ => len,
        };
        let tail = self.tail;
        let i = self.idx(tail).ok_or(PostError::QueueFull)?;
        let ud = wr.ud;
        let (wr, sg) = wr.split();
        self.sges.put(i, sg).ok_or(PostError::InvalidWr)?;
        if let Some(d) = self.dests.get_mut(i) {
            *d = ud;
        }
        let slot = self.sq.get_mut(i).ok_or(PostError::QueueFull)?;
        *slot = SendSlot {
            wr,
            ssn,
            first_psn: 0,
            npsn,
            len,
            started: false,
            done: false,
            read_done: 0,
            read_end: 0,
            status: WcStatus::Success as u32,
        };
        self.last_ssn = ssn;
        self.tail = tail.wrapping_add(1);
        Ok(())
    }

    pub(crate) fn arm_rto<O: Outputs>(&mut self, now: u64, out: &mut O) {
        match local_ack_timeout_ns(self.cfg.timeout) {
            Some(t) => {
                let d = now.saturating_add(t);
                self.rto_deadline = Some(d);
                out.set_timer(Timer::Retransmit, d);
            }
            None => self.cancel_rto(out),
        }
    }

    /// Arms the transport timer's slot for the next credit probe of a hold (nothing is in
    /// flight then, so the slot is free; see `on_timer`).
    fn arm_credit_probe<O: Outputs>(&mut self, now: u64, out: &mut O) {
        let d = now.saturating_add(credit_probe_delay_ns(self.credit_probes));
        self.credit_probes = self.credit_probes.saturating_add(1);
        self.rto_deadline = Some(d);
        out.set_timer(Timer::Retransmit, d);
    }

    /// Asks the responder for its current credits without spending anything: a zero-length
    /// Send Only, AckReq set, at the PSN before the oldest unacknowledged one. Nothing is in
    /// flight, so the responder has executed that PSN and takes this packet as a duplicate: it
    /// acknowledges it again with its current credit count and MSN and executes nothing (no
    /// receive WQE, no RNR NAK). Its ACK, a duplicate to us, carries the credits (seed 003:
    /// every ACK, duplicates included, updates the LSN). A probe left unanswered for a local
    /// ACK timeout counts as a transport timeout (see `on_timer`): a dead path or peer ends a
    /// hold the way it ends any wait for a response.
    fn send_credit_probe<O: Outputs>(&mut self, now: u64, ctx: &TxCtx<'_>, out: &mut O) {
        if self.probe_since.is_none() {
            self.probe_since = Some(now);
        }
        // Answers to probes of an earlier PSN can no longer be told from duplicates.
        if self.probe_psn != self.una.prev() {
            self.probe_psn = self.una.prev();
            self.probes_unanswered = 0;
        }
        let mut bth = Bth::new(Opcode::RcSendOnly, ctx.dest_qp, self.una.prev());
        bth.mig_req = ctx.mig_req;
        bth.pkey = ctx.pkey;
        bth.ack_req = true;
        out.transmit(ctx.path, &Headers::new(bth), PayloadSource::None);
        self.counters.packets_sent = self.counters.packets_sent.wrapping_add(1);
        self.sent_any = true;
        self.counters.credit_probes = self.counters.credit_probes.wrapping_add(1);
        self.probes_unanswered = self.probes_unanswered.saturating_add(1);
    }

    /// Stops the transport timer (Local ACK Timeout) if it runs.
    pub(crate) fn cancel_rto<O: Outputs>(&mut self, out: &mut O) {
        if self.rto_deadline.take().is_some() {
            out.cancel_timer(Timer::Retransmit);
        }
    }

    pub(crate) fn stop_timers<O: Outputs>(&mut self, out: &mut O) {
        self.cancel_rto(out);
        if self.rnr_until.take().is_some() {
            out.cancel_timer(Timer::Rnr);
        }
    }

    /// Transmits what may go now: new packets within credits, fences and the
    /// outstanding-read limit, and retransmissions after a rewind. At most `budget` packets.
    /// Returns the number sent and what the Qp must do.
    pub fn transmit<O: Outputs, M: Memory>(
        &mut self,
        now: u64,
        budget: usize,
        start_new: bool,
        ctx: &TxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> (usize, SqOutcome) {
        let mut sent = 0usize;
        if self.frozen || self.rnr_until.is_some() {
            return (0, SqOutcome::Ok);
        }
        while sent < budget {
            if self.send == self.tail {
                break;
            }
            let Some(slot) = self.slot(self.send).copied() else {
                break;
            };
            if slot.done {
                // Completed meanwhile (e.g. ACKed while a rewind pointed at it): skip its PSNs.
                if slot.started && slot.npsn > 0 {
                    let end = Psn::new(slot.first_psn).add(slot.npsn);
                    if end.is_after(self.next_psn) {
                        self.next_psn = end;
                    }
                }
                self.send = self.send.wrapping_add(1);
                self.send_pkt = 0;
                continue;
            }
            let is_new_psn = self.next_psn == self.high_psn;
            // Keep at most `cwnd` PSNs in flight, new or resent: a lost packet then costs a
            // bounded go-back-N retransmission, and the peer's ACKs keep pace with the timer.
            // The packet at `una` may always go.
            if self.next_psn != self.una && self.next_psn.distance_from(self.una) >= self.cwnd {
                break;
            }
            // A resumed RDMA Read asks for one window of responses at a time, the next only
            // once the last has arrived (see `send_one`).
            if slot.started && slot.read_done > 0 && !slot.done && self.next_psn != self.una {
                break;
            }
            let mut no_credit = false;
            if !slot.started {
                if !start_new {
                    break;
                }
                let op = slot.wr.opcode;
                if ctx.transport == Transport::Ud && !op.is_local() && slot.len > self.cfg.mtu {
                    // C10-93.1.1: a UD message longer than the port's MTU emits no packet and
                    // generates no error (rdma_rxe does the same): it completes successfully.
                    let c = self.send;
                    self.send = c.wrapping_add(1);
                    self.send_pkt = 0;
                    if let Some(s) = self.slot_mut(c) {
                        s.started = true;
                        s.done = true;
                        s.npsn = 0;
                    }
                    if self.retire(ctx.qpn, out) == SqOutcome::CqOverflow {
                        return (sent, SqOutcome::CqOverflow);
                    }
                    continue;
                }
                if slot.wr.flags.has(SendFlags::FENCE) && self.rd_atomic_out > 0 {
                    break;
                }
                if op.is_read_or_atomic()
                    && self.rd_atomic_out >= u32::from(self.cfg.max_rd_atomic.max(1))
                {
                    break;
                }
                if self.credit_wait.is_some() && !op.is_local() {
                    break;
                }
                // Keep the outstanding PSN range below half the PSN space.
                if self
                    .high_psn
                    .distance_from(self.una)
                    .saturating_add(slot.npsn)
                    >= PSN_HALF_WINDOW
                {
                    break;
                }
                if op.is_local() {
                    // A failed local operation completes in error and moves the QP to Error
                    // (as rdma_rxe): a bad bind with IB_WC_MW_BIND_ERR, the others with
                    // IB_WC_LOC_QP_OP_ERR.
                    let (r, err) = match op {
                        SendOpcode::LocalInv => (
                            mem.local_invalidate(slot.wr.invalidate_rkey),
                            WcStatus::LocQpOpErr,
                        ),
                        SendOpcode::BindMw => (mem.bind_mw(&slot.wr.bind()), WcStatus::MwBindErr),
                        _ => (mem.fast_register(&slot.wr.reg()), WcStatus::LocQpOpErr),
                    };
                    let c = self.send;
                    self.send = c.wrapping_add(1);
                    self.send_pkt = 0;
                    if let Some(s) = self.slot_mut(c) {
                        s.started = true;
                    }
                    if r.is_err() {
                        return (sent, self.complete_error(c, err, ctx.qpn, out));
                    }
                    if let Some(s) = self.slot_mut(c) {
                        s.done = true;
                    }
                    if self.retire(ctx.qpn, out) == SqOutcome::CqOverflow {
                        return (sent, SqOutcome::CqOverflow);
                    }
                    continue;
                }
                // Local protection check of the gather (or scatter, for Read/atomic) list.
                let access = if op.is_read_or_atomic() {
                    ACCESS_LOCAL_WRITE
                } else {
                    0
                };
                match mem.check_local(self.sges(self.send), access) {
                    Ok(()) => {}
                    // Not started: the caller makes the memory resident and drives us again.
                    Err(MemError::NotPresent) => break,
                    Err(_) => {
                        let c = self.send;
                        return (
                            sent,
                            self.complete_error(c, WcStatus::LocProtErr, ctx.qpn, out),
                        );
                    }
                }
                if ctx.transport == Transport::Rc {
                    if op.needs_rq_wqe() {
                        if !self.credit.allows(slot.ssn) {
                            if !self.credit_hold {
                                self.credit_hold = true;
                                self.counters.credit_stalls =
                                    self.counters.credit_stalls.wrapping_add(1);
                            }
                            // Seed 003 lets the SQ send the first packet of a limited message
                            // as a probe, which draws an RNR NAK when the RQ is really empty.
                            // Once the peer has reported its credits, its RQ Logic sends an
                            // unsolicited ACK as soon as a WQE is posted: wait for it, and ask
                            // for the credits now and then in case it was lost.
                            if self.credit_known {
                                if self.una == self.high_psn {
                                    if self.credit_probe_due {
                                        self.credit_probe_due = false;
                                        self.send_credit_probe(now, ctx, out);
                                        sent += 1;
                                    }
                                    if self.rto_deadline.is_none() {
                                        self.arm_credit_probe(now, out);
                                    }
                                }
                                break;
                            }
                            no_credit = true;
                        } else {
                            if self.credit_hold && self.una == self.high_psn {
                                // The timer's slot holds the next credit probe: this message
                                // is timed by the Local ACK Timeout from its first packet.
                                self.cancel_rto(out);
                            }
                            self.credit_hold = false;
                            self.credit_probe_due = false;
                            self.credit_probes = 0;
                            self.probe_since = None;
                        }
                    } else {
                        self.credit = self.credit.bump();
                    }
                }
                // A new message always takes the next unused PSN, whatever a retransmission
                // pass left in `next_psn`.
                self.next_psn = self.high_psn;
                let first = self.next_psn;
                let c = self.send;
                if let Some(s) = self.slot_mut(c) {
                    s.started = true;
                    s.first_psn = first.value();
                }
                if op.is_read_or_atomic() {
                    self.rd_atomic_out = self.rd_atomic_out.saturating_add(1);
                }
                self.send_pkt = 0;
            } else if is_new_psn && self.credit_wait.is_some() {
                // A started WQE is continued or retransmitted, but takes no new PSN while
                // waiting for credits.
                break;
            }
            let lim = self.send_one(now, ctx, out, no_credit);
            sent += 1;
            if ctx.transport != Transport::Rc && self.retire(ctx.qpn, out) == SqOutcome::CqOverflow
            {
                return (sent, SqOutcome::CqOverflow);
            }
            if lim {
                break;
            }
        }
        (sent, SqOutcome::Ok)
    }

    /// Sends the packet `send_pkt` of the WQE at `send` and advances. Returns true when the
    /// SQ must stop (credit wait began).
    fn send_one<O: Outputs>(
        &mut self,
        now: u64,
        ctx: &TxCtx<'_>,
        out: &mut O,
        no_credit: bool,
    ) -> bool {
        let wqe = self.send;
        let Some(slot) = self.slot(wqe).copied() else {
            return true;
        };
        let wr = &slot.wr;
        let mtu = self.cfg.mtu.max(1);
        let k = self.send_pkt;
        let n = slot.npsn.max(1);
        // The PSN follows from the WQE's first PSN and the packet index, so a retransmission
        // pass can never give a packet another message's PSN.
        let psn = Psn::new(slot.first_psn).add(k);
        let retrans = psn.is_before(self.high_psn);
        let mut bth = Bth::new(Opcode::RcAcknowledge, ctx.dest_qp, psn);
        bth.mig_req = ctx.mig_req;
        bth.pkey = ctx.pkey;
        let mut h = Headers::new(bth);
        let mut payload = PayloadSource::None;
        let mut advance_psn = 1u32;
        let mut wqe_done_sending = false;
        let mut stop = false;
        match wr.opcode {
            SendOpcode::RdmaRead => {
                // Never ask again for responses already received (a rewind to an earlier PSN
                // restarts later WQEs from their first packet).
                let k = k.max(slot.read_done / mtu).min(n.saturating_sub(1));
                h.bth.psn = Psn::new(slot.first_psn).add(k);
                let off = k.saturating_mul(mtu).min(slot.len);
                // A read the responder has begun to answer (responses arrived) is resumed a
                // window at a time: the responder answers a duplicate request with the length it
                // names (IBA 9.7.5.1.5; rdma_rxe does too), and a full-length request per retry
                // would queue another whole read behind the responses still on their way, which
                // on a slow or reordering path only begets more retries. A read with no response
                // yet is asked for whole: the responder may never have seen it, and a shorter new
                // request would be a different message to it.
                let mut want = slot.len.saturating_sub(off);
                if slot.read_done > 0 {
                    want = want.min(self.cwnd.max(1).saturating_mul(mtu));
                }
                h.bth.opcode = Opcode::RcRdmaReadRequest;
                h.reth = Some(Reth {
                    va: wr.remote_addr.wrapping_add(u64::from(off)),
                    rkey: wr.rkey,
                    dma_len: want,
                });
                h.bth.ack_req = true;
                let end = off.saturating_add(want);
                advance_psn = if end >= slot.len {
                    n.saturating_sub(k).max(1)
                } else {
                    want.div_ceil(mtu).max(1)
                };
                wqe_done_sending = end >= slot.len;
                let c = self.send;
                if let Some(s) = self.slot_mut(c) {
                    s.read_end = if end >= s.len { 0 } else { end };
                }
            }
            SendOpcode::AtomicCmpAndSwp | SendOpcode::AtomicFetchAndAdd => {
                let (opcode, swap_add, compare) = if wr.opcode == SendOpcode::AtomicCmpAndSwp {
                    (Opcode::RcCompareSwap, wr.swap(), wr.compare_add())
                } else {
                    (Opcode::RcFetchAdd, wr.compare_add(), 0)
                };
                h.bth.opcode = opcode;
                h.atomic_eth = Some(AtomicEth {
                    va: wr.remote_addr,
                    rkey: wr.rkey,
                    swap_add,
                    compare,
                });
                h.bth.ack_req = true;
                wqe_done_sending = true;
            }
            SendOpcode::AtomicWrite => {
                // One packet: RETH (DMA length 8) and the 8 bytes (IBA 1.5 oA19-28).
                h.bth.opcode = Opcode::RcAtomicWrite;
                h.reth = Some(Reth {
                    va: wr.remote_addr,
                    rkey: wr.rkey,
                    dma_len: 8,
                });
                h.bth.ack_req = true;
                payload = PayloadSource::Bytes8(wr.atomic_write());
                wqe_done_sending = true;
            }
            SendOpcode::Flush => {
                // One packet, no payload (oA19-2): FETH then RETH.
                h.bth.opcode = Opcode::RcFlush;
                let f = wr.flush();
                h.feth = Some(Feth {
                    placement: f.placement,
                    selectivity: f.selectivity,
                });
                h.reth = Some(Reth {
                    va: wr.remote_addr,
                    rkey: wr.rkey,
                    dma_len: slot.len,
                });
                h.bth.ack_req = true;
                wqe_done_sending = true;
            }
            op => {
                let pos = position(k, n);
                let off = k.saturating_mul(mtu);
                let plen = slot.len.saturating_sub(off).min(mtu);
                let last = pos.ends_message();
                let opcode = if op.is_send() {
                    Opcode::send(
                        ctx.transport,
                        pos,
                        last && op == SendOpcode::SendWithImm,
                        last && op == SendOpcode::SendWithInv,
                    )
                } else {
                    Opcode::rdma_write(
                        ctx.transport,
                        pos,
                        last && op == SendOpcode::RdmaWriteWithImm,
                    )
                };
                let Some(opcode) = opcode else {
                    return true;
                };
                h.bth.opcode = opcode;
                let info = opcode.info();
                if info.has_deth {
                    // UD: the WR's address handle names the destination.
                    let ud = self.ud_dest(wqe);
                    h.bth.dest_qp = ud.remote_qpn & crate::wire::bth::QPN_MASK;
                    h.bth.mig_req = false;
                    let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                        ctx.qkey
                    } else {
                        ud.remote_qkey
                    };
                    h.deth = Some(crate::wire::Deth {
                        qkey,
                        src_qp: ctx.qpn,
                    });
                }
                if info.has_reth {
                    h.reth = Some(Reth {
                        va: wr.remote_addr,
                        rkey: wr.rkey,
                        dma_len: slot.len,
                    });
                }
                if info.has_immdt {
                    h.immdt = Some(ImmDt { imm: wr.imm });
                }
                if info.has_ieth {
                    h.ieth = Some(Ieth {
                        rkey: wr.invalidate_rkey,
                    });
                }
                if last {
                    // BTH:SE means something only where the responder completes a receive.
                    h.bth.solicited = info.needs_rq_wqe && wr.flags.has(SendFlags::SOLICITED);
                    h.bth.ack_req = true;
                    wqe_done_sending = true;
                }
                // Ask for an ACK every ACK_REQ_EVERY packets, and on the packet that fills the
                // window: the responder coalesces ACKs, and a window that waits for one it
                // never asked for would wait for the transport timer.
                if k % ACK_REQ_EVERY == ACK_REQ_EVERY - 1
                    || psn.next().distance_from(self.una) >= self.cwnd
                {
                    h.bth.ack_req = true;
                }
                // Seed 003: without credit only the first packet of a Send goes (AckReq set)
                // and the SQ waits for an ACK; a WriteImm sends all its packets, sets AckReq on
                // the last one and then waits.
                if no_credit {
                    self.uncredited = Some(self.send);
                }
                if self.uncredited == Some(self.send) && !retrans && (op.is_send() || last) {
                    h.bth.ack_req = true;
                    self.credit_wait = Some(psn);
                    self.uncredited = None;
                    stop = true;
                }
                if plen > 0 {
                    payload = PayloadSource::Gather {
                        sges: slot_sges(&self.sq, &self.sges, self.idx(self.send)),
                        offset: off,
                        len: plen,
                    };
                }
                h.bth.pad_count = crate::wire::pad_count(plen as usize);
            }
        }
        // A resumed RDMA Read may start later than `next_psn` (see above).
        let psn = h.bth.psn;
        if self.retry_psn == Some(psn) {
            self.retry_resent = true;
        }
        let uc = ctx.transport != Transport::Rc;
        if uc {
            // UC: no acknowledgements at all.
            h.bth.ack_req = false;
        }
        if retrans && !uc {
            // A retransmitted packet always asks for an ACK: the responder answers duplicates
            // only when asked, and the requester may be waiting on exactly this packet.
            h.bth.ack_req = true;
        }
        let path = if ctx.transport == Transport::Ud {
            &self.ud_dest(wqe).path
        } else {
            ctx.path
        };
        out.transmit(path, &h, payload);
        self.counters.packets_sent = self.counters.packets_sent.wrapping_add(1);
        self.sent_any = true;
        if retrans {
            self.counters.retransmitted = self.counters.retransmitted.wrapping_add(1);
        }
        self.next_psn = psn.add(advance_psn);
        if self.next_psn.is_after(self.high_psn) {
            self.high_psn = self.next_psn;
        }
        if uc {
            // UC: a message is complete once its last packet is sent.
            self.una = self.next_psn;
            if wqe_done_sending {
                let c = self.send;
                if let Some(s) = self.slot_mut(c) {
                    s.done = true;
                }
            }
        } else if self.rto_deadline.is_none() {
            self.arm_rto(now, out);
        }
        if wqe_done_sending {
            self.send = self.send.wrapping_add(1);
            self.send_pkt = 0;
        } else {
            self.send_pkt = k.saturating_add(advance_psn);
        }
        stop
    }

    /// Go-back-N: the next packet to transmit is the one with PSN `p` (which must be
    /// outstanding). Returns false if no started WQE holds `p`.
    pub(crate) fn rewind(&mut self, p: Psn) -> bool {
        let mut c = self.head;
        while c != self.tail {
            let Some(s) = self.slot(c).copied() else {
                return false;
            };
            if !s.started {
                break;
            }
            if !s.done && s.npsn > 0 {
                let f = Psn::new(s.first_psn);
                let d = p.distance_from(f);
                if d < s.npsn {
                    self.send = c;
                    self.send_pkt = d;
                    self.next_psn = p;
                    return true;
                }
            }
            c = c.wrapping_add(1);
        }
        false
    }
}

/// The gather/scatter list of slot `i` (borrowing only the queue's storage, so that packet
/// building can update the rest of the SQ Logic while the payload source refers to it).
fn slot_sges<'a, G: SgStore>(sq: &[SendSlot], pool: &'a SgPool<G>, i: Option<usize>) -> &'a [Sge] {
    match i.and_then(|i| Some((i, sq.get(i)?.wr.sg))) {
        Some((i, n)) => pool.get(i, n),
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_probe_spacing_doubles_up_to_the_cap() {
        assert_eq!(credit_probe_delay_ns(0), CREDIT_PROBE_MIN_NS);
        assert_eq!(credit_probe_delay_ns(1), 2 * CREDIT_PROBE_MIN_NS);
        assert_eq!(credit_probe_delay_ns(7), CREDIT_PROBE_MAX_NS);
        assert_eq!(credit_probe_delay_ns(8), CREDIT_PROBE_MAX_NS);
        assert_eq!(credit_probe_delay_ns(44), CREDIT_PROBE_MAX_NS);
        assert_eq!(credit_probe_delay_ns(u32::MAX), CREDIT_PROBE_MAX_NS);
    }
}
