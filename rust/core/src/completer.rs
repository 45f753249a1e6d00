//! SQ Logic, response side (the "completer"): ACKs (coalesced and unsolicited), NAKs (PSN
//! sequence error, RNR, invalid request, remote access, remote operational error), RDMA Read
//! responses, Atomic ACKs, implied NAKs, end-to-end credit updates, retry counting, the transport
//! and RNR timers, and in-order completion of send WQEs.

use crate::events::{Completion, CqKind, Outputs, Timer, WcOpcode, WcStatus};
use crate::memory::{MemError, Memory, RxPayload};
use crate::psn::{classify_ack_psn, AckPsnClass, Psn};
use crate::requester::{
    local_ack_timeout_ns, SqLogic, SqOutcome, TxCtx, CWND_AFTER_TIMEOUT, CWND_MIN, MAX_UNACKED_PSNS,
};
use crate::sg_pool::SgStore;
use crate::wire::{aeth::rnr_timer_ns, Headers, NakCode, Operation, Syndrome, Transport};
use crate::wqe::{SendFlags, SendOpcode, SendSlot, UdDest};

impl<S, G, D> SqLogic<S, G, D>
where
    S: core::ops::DerefMut<Target = [SendSlot]>,
    G: SgStore,
    D: core::ops::DerefMut<Target = [UdDest]>,
{
    /// The oldest WQE (counter) that is not done.
    pub(crate) fn oldest_pending(&self) -> Option<u64> {
        let mut c = self.head;
        while c != self.tail {
            let s = self.slot(c)?;
            if !s.done {
                return Some(c);
            }
            c = c.wrapping_add(1);
        }
        None
    }

    fn wqe_holding(&self, p: Psn) -> Option<u64> {
        let mut c = self.head;
        while c != self.tail {
            let s = self.slot(c)?;
            if !s.started {
                return None;
            }
            if !s.done && s.npsn > 0 && p.distance_from(Psn::new(s.first_psn)) < s.npsn {
                return Some(c);
            }
            c = c.wrapping_add(1);
        }
        None
    }

    /// Marks done every Send/Write WQE whose last PSN is at or before `p`. Stops at the first
    /// RDMA Read or atomic still unanswered: returns `Some(psn)` of its first missing response
    /// if `p` reaches into or beyond it (an implied NAK).
    fn ack_through(&mut self, p: Psn) -> Option<Psn> {
        let mtu = self.cfg.mtu.max(1);
        let mut c = self.head;
        let mut new_una = None;
        while c != self.tail {
            let Some(s) = self.slot(c).copied() else {
                break;
            };
            if s.done {
                c = c.wrapping_add(1);
                continue;
            }
            if !s.started || s.npsn == 0 {
                break;
            }
            let f = Psn::new(s.first_psn);
            if p.is_before(f) {
                break;
            }
            if s.wr.opcode.is_read_or_atomic() {
                let missing = f.add(s.read_done / mtu);
                self.set_una(missing);
                return Some(missing);
            }
            let last = f.add(s.npsn.saturating_sub(1));
            if last.is_before_or_eq(p) {
                if let Some(m) = self.slot_mut(c) {
                    m.done = true;
                }
                new_una = Some(last.next());
                c = c.wrapping_add(1);
            } else {
                new_una = Some(p.next());
                break;
            }
        }
        if let Some(u) = new_una {
            self.set_una(u);
        }
        None
    }

    fn set_una(&mut self, u: Psn) {
        if u.is_after(self.una) && !u.is_after(self.high_psn) {
            let acked = u.distance_from(self.una);
            self.cwnd = self.cwnd.saturating_add(acked).min(MAX_UNACKED_PSNS);
            self.una = u;
            // A go-back-N pass held back by the window may now be behind `una`: resume at
            // `una` rather than resend what the peer has.
            if self.next_psn.is_before(u) && !self.rewind(u) {
                // Every started message is complete: go on with new ones.
                self.next_psn = self.high_psn;
            }
            self.retry_psn = None;
            self.rnr_seq_free = None;
            self.reload_retries();
        }
        if let Some(w) = self.credit_wait {
            if self.una.is_after(w) {
                self.credit_wait = None;
            }
        }
    }

    /// After a response: the transport timer stops when nothing is outstanding and restarts
    /// when the response made progress (`una` moved or a retry began). A response that changed
    /// nothing (an ignored NAK) leaves it alone: otherwise a peer answering faster than the
    /// local ACK timeout would postpone it forever.
    fn after_response<O: Outputs>(
        &mut self,
        now: u64,
        progressed: bool,
        qpn: u32,
        out: &mut O,
    ) -> SqOutcome {
        if self.una == self.high_psn {
            self.cancel_rto(out);
        } else if self.rnr_until.is_none() && (progressed || self.rto_deadline.is_none()) {
            self.arm_rto(now, out);
        }
        self.retire(qpn, out)
    }

    /// One retry (transport timer, PSN sequence NAK, implied NAK): counts against the retry
    /// count and rewinds to `p`.
    fn retry_from(&mut self, p: Psn) -> SqOutcome {
        self.retry_psn = Some(p);
        self.retry_resent = false;
        if self.retry_left == 0 {
            return SqOutcome::RetryExhausted;
        }
        self.retry_left -= 1;
        self.counters.retries = self.counters.retries.wrapping_add(1);
        self.rewind(p);
        SqOutcome::Ok
    }

    /// A NAK-style retry for `p`: a PSN sequence error NAK, or (`implied`) a response beyond the
    /// missing RDMA Read or atomic response at `p`.
    ///
    /// Seed 000: repetitive sequence NAKs for the same request each cost a retry. The responder
    /// sends one NAK per sequence error, so a NAK for `p` that arrives after `p` went out again
    /// answers the retransmission and counts; a copy arriving before that is the NAK already
    /// acted on and costs nothing.
    ///
    /// A repeated implied NAK is not counted here: every ACK that was already on its way when
    /// the retry began (one per coalesced group or message of a go-back-N pass) reaches beyond
    /// the missing response too, and nothing in it tells it from an answer to the
    /// retransmission; counting them would turn one lost response into RETRY_EXC_ERR. The
    /// ignored ones do not restart the transport timer (see `after_response`), so a peer that
    /// keeps answering this way costs a retry per local ACK timeout instead.
    fn nak_retry(&mut self, p: Psn, implied: bool) -> SqOutcome {
        if self.retry_psn == Some(p) && (implied || !self.retry_resent) {
            return SqOutcome::Ok;
        }
        self.cwnd = (self.cwnd / 2).max(CWND_MIN);
        self.retry_from(p)
    }

    /// Handles one inbound response packet (ACK/NAK, RDMA Read response, Atomic ACK) that
    /// passed the APM and header checks.
    pub fn on_response<O: Outputs, M: Memory>(
        &mut self,
        now: u64,
        h: &Headers,
        payload: RxPayload<'_>,
        ctx: &TxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> SqOutcome {
        self.counters.responses_received = self.counters.responses_received.wrapping_add(1);
        if self.frozen {
            return SqOutcome::Ok;
        }
        let psn = h.bth.psn;
        let info = h.info();
        let (una0, retries0) = (self.una, self.counters.retries);
        let mut new_report = false;
        // Seed 003: every positive ACK (also duplicates, ghosts, unsolicited ones) carries the
        // peer's MSN and credits.
        if let Some(a) = h.aeth {
            if let Syndrome::Ack { credit } = a.syndrome {
                new_report = self.last_credit_report != Some((a.msn, credit));
                self.last_credit_report = Some((a.msn, credit));
                if ctx.transport == Transport::Rc {
                    self.credit = self.credit.update(a.msn, credit);
                    self.credit_known = !self.credit.is_unlimited();
                }
                // The answer to a credit probe: the path and the peer are alive.
                if self.probe_since.is_some() && psn == self.una.prev() {
                    self.probe_since = None;
                    self.reload_retries();
                }
            }
        }
        if classify_ack_psn(psn, self.una, self.high_psn) != AckPsnClass::Valid {
            // An ACK of the last acknowledged PSN is a credit update (the initial ACK on entering
            // RTR, or an unsolicited one; seed 003), not an answer to anything sent twice, when
            // nothing is in flight or when its MSN or credits differ from the last ACK's (the
            // responder sends one when receives are posted, whatever is in flight; a repeated
            // answer reports what the last one did). Until something is sent after Reset, the
            // send PSN may not be known (the peer's initial ACK can overtake our step to RTS):
            // any ACK is one then.
            //
            // Nor is the answer to a credit probe: an ACK of the last probe's PSN that reports
            // what the last ACK did answers it while one is unanswered (an ACK that reports news
            // is the responder's own update, and leaves the probe's answer to come).
            let positive_ack = info.operation == Operation::Acknowledge
                && matches!(h.aeth, Some(a) if a.syndrome.is_ack());
            let update = positive_ack
                && ((psn == self.una.prev() && (self.una == self.high_psn || new_report))
                    || (!self.sent_any && self.una == self.high_psn));
            let probe_answer =
                positive_ack && !new_report && psn == self.probe_psn && self.probes_unanswered > 0;
            if probe_answer {
                self.probes_unanswered -= 1;
            }
            let credit_update = update || probe_answer;
            let c = &mut self.counters;
            if credit_update {
                c.credit_acks_received = c.credit_acks_received.wrapping_add(1);
            } else {
                c.duplicate_responses = c.duplicate_responses.wrapping_add(1);
            }
            return SqOutcome::Ok;
        }
        let outcome = match info.operation {
            Operation::Acknowledge => {
                let Some(a) = h.aeth else {
                    return SqOutcome::Ok;
                };
                self.on_ack(now, psn, a.syndrome, ctx, out)
            }
            Operation::RdmaReadResponse => self.on_read_response(h, payload, ctx, mem, out),
            Operation::AtomicAcknowledge => self.on_atomic_ack(h, ctx, mem, out),
            _ => return SqOutcome::Ok,
        };
        match outcome {
            SqOutcome::Ok => {
                let progressed = self.una != una0 || self.counters.retries != retries0;
                self.after_response(now, progressed, ctx.qpn, out)
            }
            o => o,
        }
    }

    fn on_ack<O: Outputs>(
        &mut self,
        now: u64,
        psn: Psn,
        syn: Syndrome,
        ctx: &TxCtx<'_>,
        out: &mut O,
    ) -> SqOutcome {
        match syn {
            Syndrome::Ack { .. } => match self.ack_through(psn) {
                Some(missing) => self.nak_retry(missing, true),
                None => SqOutcome::Ok,
            },
            Syndrome::RnrNak { timer } => {
                self.counters.rnr_naks_received = self.counters.rnr_naks_received.wrapping_add(1);
                if let Some(m) = self.ack_before_nak(psn) {
                    return self.nak_retry(m, true);
                }
                if self.cfg.rnr_retry < 7 {
                    if self.rnr_left == 0 {
                        return self.fail_wqe_at(psn, WcStatus::RnrRetryExcErr, ctx.qpn, out);
                    }
                    self.rnr_left -= 1;
                }
                self.rewind(psn);
                // The responder NAKs the packets behind the refused one as a sequence error:
                // one NAK at this PSN, which asks for the resend the RNR wait schedules, before
                // or after that resend has gone.
                self.rnr_seq_free = Some(psn);
                let until = now.saturating_add(rnr_timer_ns(timer));
                self.rnr_until = Some(until);
                self.cancel_rto(out);
                out.set_timer(Timer::Rnr, until);
                SqOutcome::Ok
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.counters.seq_naks_received = self.counters.seq_naks_received.wrapping_add(1);
                // The responder sends one sequence NAK per error and clears that only on the
                // expected packet, so a NAK at an RNR NAK's PSN is that NAK's companion: free.
                if self.rnr_seq_free == Some(psn) {
                    self.rnr_seq_free = None;
                    return SqOutcome::Ok;
                }
                if let Some(m) = self.ack_before_nak(psn) {
                    return self.nak_retry(m, true);
                }
                self.nak_retry(psn, false)
            }
            Syndrome::Nak(code) => {
                // Everything before the NAKed packet was executed.
                let _ = self.ack_before_nak(psn);
                let status = match code {
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    _ => WcStatus::RemInvReqErr,
                };
                self.fail_wqe_at(psn, status, ctx.qpn, out)
            }
            Syndrome::Reserved(_) => SqOutcome::Ok,
        }
    }

    /// A NAK at `psn` acknowledges every packet before it. Returns the implied NAK (first
    /// missing RDMA Read or atomic response) found there, as `ack_through` does.
    fn ack_before_nak(&mut self, psn: Psn) -> Option<Psn> {
        if psn == self.una {
            return None;
        }
        self.ack_through(psn.prev())
    }

    /// Completes with error `status` the WQE holding `psn`, or else the oldest one not done.
    fn fail_wqe_at<O: Outputs>(
        &mut self,
        psn: Psn,
        status: WcStatus,
        qpn: u32,
        out: &mut O,
    ) -> SqOutcome {
        match self.wqe_holding(psn).or_else(|| self.oldest_pending()) {
            Some(c) => self.complete_error(c, status, qpn, out),
            None => SqOutcome::Error,
        }
    }

    /// Implicitly acknowledges Send/Write WQEs that end before `psn` and returns the first WQE
    /// not done afterwards (its counter and a copy of its slot).
    fn implicit_ack_before(&mut self, psn: Psn) -> Option<(u64, SendSlot)> {
        let mut c = self.head;
        while c != self.tail {
            let s = self.slot(c).copied()?;
            if s.done {
                c = c.wrapping_add(1);
                continue;
            }
            if !s.started {
                return None;
            }
            if s.wr.opcode.is_read_or_atomic() {
                return Some((c, s));
            }
            let f = Psn::new(s.first_psn);
            let last = f.add(s.npsn.saturating_sub(1));
            if last.is_before(psn) {
                if let Some(m) = self.slot_mut(c) {
                    m.done = true;
                }
                self.set_una(last.next());
                c = c.wrapping_add(1);
            } else {
                return Some((c, s));
            }
        }
        None
    }

    fn on_read_response<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
        ctx: &TxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> SqOutcome {
        let psn = h.bth.psn;
        let mtu = self.cfg.mtu.max(1);
        let Some((c, s)) = self.implicit_ack_before(psn) else {
            return SqOutcome::Ok;
        };
        let f = Psn::new(s.first_psn);
        if !s.wr.opcode.is_read_or_atomic() {
            return SqOutcome::Ok;
        }
        let expected = f.add(s.read_done / mtu);
        if s.wr.opcode.is_flush_or_atomic_write() && psn == f {
            // FLUSH and ATOMIC WRITE are answered by an RDMA Read Response Only without data
            // (IBA 1.5 oA19-14, oA19-30; rdma_rxe's send_read_response_ack).
            if h.bth.opcode != crate::wire::Opcode::RcRdmaReadResponseOnly || !payload.is_empty() {
                self.counters.duplicate_responses =
                    self.counters.duplicate_responses.wrapping_add(1);
                return SqOutcome::Ok;
            }
            if let Some(m) = self.slot_mut(c) {
                m.done = true;
            }
            self.rd_atomic_out = self.rd_atomic_out.saturating_sub(1);
            self.set_una(psn.next());
            return SqOutcome::Ok;
        }
        if s.wr.opcode != crate::wqe::SendOpcode::RdmaRead {
            // An atomic is still unanswered before this read response: implied NAK.
            if psn.is_after(f) {
                return self.nak_retry(f, true);
            }
            return SqOutcome::Ok;
        }
        if psn != expected {
            if psn.is_after(expected) {
                return self.nak_retry(expected, true);
            }
            self.counters.duplicate_responses = self.counters.duplicate_responses.wrapping_add(1);
            return SqOutcome::Ok;
        }
        // The responses to the last request end where it asked (a resumed read asks for a
        // window of the rest, see `SqLogic::send_one`).
        let end = if s.read_end == 0 { s.len } else { s.read_end };
        let remaining = end.saturating_sub(s.read_done);
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let ends = h.bth.opcode.position().ends_message();
        let ok = if ends {
            len == remaining && len <= mtu
        } else {
            len == mtu && len < remaining
        };
        if !ok {
            self.counters.duplicate_responses = self.counters.duplicate_responses.wrapping_add(1);
            return SqOutcome::Ok;
        }
        if !payload.is_empty() {
            match mem.scatter(self.sges(c), s.read_done, payload) {
                Ok(()) => {}
                // Not taken: handed in again once the memory is resident.
                Err(MemError::NotPresent) => return SqOutcome::Ok,
                Err(_) => return self.complete_error(c, WcStatus::LocProtErr, ctx.qpn, out),
            }
        }
        let done = ends && end == s.len;
        if let Some(m) = self.slot_mut(c) {
            m.read_done = m.read_done.saturating_add(len);
            if ends {
                m.read_end = 0;
            }
            if done {
                m.done = true;
            }
        }
        if done {
            self.rd_atomic_out = self.rd_atomic_out.saturating_sub(1);
        }
        self.set_una(psn.next());
        SqOutcome::Ok
    }

    fn on_atomic_ack<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        ctx: &TxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> SqOutcome {
        let psn = h.bth.psn;
        let Some(orig) = h.atomic_ack_eth else {
            return SqOutcome::Ok;
        };
        let Some((c, s)) = self.implicit_ack_before(psn) else {
            return SqOutcome::Ok;
        };
        let f = Psn::new(s.first_psn);
        if !s.wr.opcode.is_atomic() {
            if s.wr.opcode.is_read_or_atomic() && psn.is_after(f) {
                let mtu = self.cfg.mtu.max(1);
                return self.nak_retry(f.add(s.read_done / mtu), true);
            }
            return SqOutcome::Ok;
        }
        if psn != f {
            return SqOutcome::Ok;
        }
        let bytes = orig.orig.to_ne_bytes();
        match mem.scatter(self.sges(c), 0, RxPayload::Bytes(&bytes)) {
            Ok(()) => {}
            Err(MemError::NotPresent) => return SqOutcome::Ok,
            Err(_) => return self.complete_error(c, WcStatus::LocProtErr, ctx.qpn, out),
        }
        if let Some(m) = self.slot_mut(c) {
            m.done = true;
            m.read_done = 8;
        }
        self.rd_atomic_out = self.rd_atomic_out.saturating_sub(1);
        self.set_una(psn.next());
        SqOutcome::Ok
    }

    /// The transport timer or the RNR timer fired.
    pub fn on_timer<O: Outputs>(&mut self, now: u64, which: Timer, out: &mut O) -> SqOutcome {
        match which {
            Timer::Rnr => {
                if let Some(u) = self.rnr_until {
                    if now < u {
                        out.set_timer(Timer::Rnr, u);
                        return SqOutcome::Ok;
                    }
                    self.rnr_until = None;
                }
                SqOutcome::Ok
            }
            Timer::Retransmit => {
                let Some(d) = self.rto_deadline else {
                    return SqOutcome::Ok;
                };
                if now < d {
                    out.set_timer(Timer::Retransmit, d);
                    return SqOutcome::Ok;
                }
                self.rto_deadline = None;
                if self.una == self.high_psn || self.frozen {
                    // Nothing in flight: if a limited message waits for credits, the timer
                    // spaced its credit probes (see `transmit`).
                    if self.credit_hold && !self.frozen {
                        self.credit_probe_due = true;
                        return self.probe_timeout(now);
                    }
                    return SqOutcome::Ok;
                }
                self.counters.timeouts = self.counters.timeouts.wrapping_add(1);
                self.cwnd = CWND_AFTER_TIMEOUT;
                let una = self.una;
                self.retry_from(una)
            }
        }
    }

    /// A credit probe unanswered for a local ACK timeout costs a retry, as a transport timeout
    /// does (seed 000: repetitive timeouts exhaust the retry count, then migrate or fail).
    fn probe_timeout(&mut self, now: u64) -> SqOutcome {
        let (Some(since), Some(t)) = (self.probe_since, local_ack_timeout_ns(self.cfg.timeout))
        else {
            return SqOutcome::Ok;
        };
        if now.saturating_sub(since) < t {
            return SqOutcome::Ok;
        }
        self.counters.timeouts = self.counters.timeouts.wrapping_add(1);
        self.probe_since = Some(now);
        if self.retry_left == 0 {
            return SqOutcome::RetryExhausted;
        }
        self.retry_left -= 1;
        self.counters.retries = self.counters.retries.wrapping_add(1);
        SqOutcome::Ok
    }

    /// After APM migrated the QP on retry exhaustion: reload the retry count and retry the
    /// oldest unacknowledged request on the new path (seed 000 step 5).
    pub fn retry_after_migration(&mut self) {
        self.reload_retries();
        let una = self.una;
        self.rewind(una);
    }

    /// Retry exhaustion without APM: the oldest pending WQE completes with
    /// `IB_WC_RETRY_EXC_ERR`.
    pub fn fail_retry_exceeded<O: Outputs>(&mut self, qpn: u32, out: &mut O) -> SqOutcome {
        match self.oldest_pending() {
            Some(c) => self.complete_error(c, WcStatus::RetryExcErr, qpn, out),
            None => SqOutcome::Error,
        }
    }

    /// Completes the WQE at counter `c` with `status` (used for errors), writing its CQE now.
    pub(crate) fn complete_error<O: Outputs>(
        &mut self,
        c: u64,
        status: WcStatus,
        qpn: u32,
        out: &mut O,
    ) -> SqOutcome {
        let Some(s) = self.slot_mut(c) else {
            return SqOutcome::Error;
        };
        s.done = true;
        s.status = status as u32;
        // Everything before `c` is done (in-order completion); retire them first.
        match self.retire(qpn, out) {
            SqOutcome::CqOverflow => SqOutcome::CqOverflow,
            _ => SqOutcome::Error,
        }
    }

    /// The completion of a send WQE with `status`.
    pub(crate) fn make_wc(slot: &SendSlot, status: WcStatus, qpn: u32) -> Completion {
        Completion {
            wr_id: slot.wr.wr_id,
            status,
            opcode: wc_opcode(slot.wr.opcode),
            byte_len: if status == WcStatus::Success {
                slot.len
            } else {
                0
            },
            imm_or_rkey: 0,
            qp_num: qpn,
            src_qp: 0,
            flags: 0,
            network_hdr_type: 0,
            solicited: false,
        }
    }

    /// The CQE due for send WQE `s` finished with `status`: always for an error, for a
    /// success only if signaled.
    fn cqe_due(s: &SendSlot, status: WcStatus, qpn: u32) -> Option<Completion> {
        (status != WcStatus::Success || s.wr.flags.has(SendFlags::SIGNALED))
            .then(|| Self::make_wc(s, status, qpn))
    }

    /// Writes `wc` to the send CQ; a full one freezes the SQ Logic (class G).
    fn write_cqe<O: Outputs>(&mut self, wc: Option<Completion>, out: &mut O) -> SqOutcome {
        if let Some(wc) = wc {
            if out.complete(CqKind::Send, &wc).is_err() {
                self.frozen = true;
                return SqOutcome::CqOverflow;
            }
        }
        SqOutcome::Ok
    }

    /// Retires done WQEs from the head in order, writing CQEs for signaled ones and errors.
    pub(crate) fn retire<O: Outputs>(&mut self, qpn: u32, out: &mut O) -> SqOutcome {
        if self.frozen {
            return SqOutcome::CqOverflow;
        }
        let mut outcome = SqOutcome::Ok;
        while self.head != self.tail {
            // Borrowed, not copied: only the CQE outlives the look.
            let Some(s) = self.slot(self.head) else {
                break;
            };
            if !s.done {
                break;
            }
            let status = status_from_u32(s.status);
            let wc = Self::cqe_due(s, status, qpn);
            if self.write_cqe(wc, out) == SqOutcome::CqOverflow {
                return SqOutcome::CqOverflow;
            }
            if status != WcStatus::Success {
                outcome = SqOutcome::Error;
            }
            self.head = self.head.wrapping_add(1);
            if self.send.wrapping_sub(self.head) > self.tail.wrapping_sub(self.head) {
                self.send = self.head;
                self.send_pkt = 0;
            }
        }
        outcome
    }

    /// Flushes every WQE not yet retired with `IB_WC_WR_FLUSH_ERR`, oldest first.
    pub fn flush<O: Outputs>(&mut self, qpn: u32, out: &mut O) -> SqOutcome {
        if self.frozen {
            return SqOutcome::CqOverflow;
        }
        while self.head != self.tail {
            let Some(s) = self.slot(self.head) else {
                break;
            };
            let status = if s.done {
                status_from_u32(s.status)
            } else {
                WcStatus::WrFlushErr
            };
            let wc = Self::cqe_due(s, status, qpn);
            if self.write_cqe(wc, out) == SqOutcome::CqOverflow {
                return SqOutcome::CqOverflow;
            }
            self.head = self.head.wrapping_add(1);
        }
        self.send = self.head;
        self.send_pkt = 0;
        self.rd_atomic_out = 0;
        self.credit_wait = None;
        SqOutcome::Ok
    }
}

fn wc_opcode(op: SendOpcode) -> WcOpcode {
    match op {
        SendOpcode::Send | SendOpcode::SendWithImm | SendOpcode::SendWithInv => WcOpcode::Send,
        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        SendOpcode::RdmaRead => WcOpcode::RdmaRead,
        SendOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        SendOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        SendOpcode::LocalInv => WcOpcode::LocalInv,
        SendOpcode::BindMw => WcOpcode::BindMw,
        SendOpcode::RegMr => WcOpcode::RegMr,
        SendOpcode::Flush => WcOpcode::Flush,
        SendOpcode::AtomicWrite => WcOpcode::AtomicWrite,
    }
}

fn status_from_u32(v: u32) -> WcStatus {
    match v {
        0 => WcStatus::Success,
        1 => WcStatus::LocLenErr,
        2 => WcStatus::LocQpOpErr,
        4 => WcStatus::LocProtErr,
        5 => WcStatus::WrFlushErr,
        6 => WcStatus::MwBindErr,
        7 => WcStatus::BadRespErr,
        8 => WcStatus::LocAccessErr,
        9 => WcStatus::RemInvReqErr,
        10 => WcStatus::RemAccessErr,
        11 => WcStatus::RemOpErr,
        12 => WcStatus::RetryExcErr,
        13 => WcStatus::RnrRetryExcErr,
        19 => WcStatus::FatalErr,
        _ => WcStatus::GeneralErr,
    }
}
