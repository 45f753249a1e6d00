//! RQ Logic (the "responder"): ePSN and duplicate detection, MSN, the end-to-end credit count
//! (seed 003), receive WQEs, RDMA Write/Read and atomic execution through [`Memory`], the
//! responder resources that replay duplicate RDMA Reads and atomics, ACK coalescing, and the
//! error classes of Table 17-7 (seed 001): B (PSN sequence error NAK once, RNR NAK), C (invalid
//! request / remote access NAK, QP to Error), A (malformed RQ WQE: remote operational error NAK),
//! D (silent drop) and G (CQ overflow).

use crate::apm::PathInfo;
use crate::credit::{encode_credit, CREDIT_CODE_INVALID};
use crate::events::{
    AsyncEvent, Completion, CqKind, Outputs, PayloadSource, WcOpcode, WcStatus, WC_WITH_IMM,
    WC_WITH_INVALIDATE,
};
use crate::memory::{
    AtomicOp, Memory, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use crate::psn::{classify_request_psn, Psn, RequestPsnClass};
use crate::requester::npackets;
use crate::wire::{Aeth, Bth, Headers, NakCode, Opcode, Operation, Position, Syndrome};
use crate::wqe::{RecvSlot, RecvWr};

/// Bytes reserved for the GRH at the start of a UD receive buffer.
pub const GRH_LEN: u32 = 40;

pub use crate::resources::MAX_RESOURCES;
use crate::resources::{res_slot, AckItem, ResKind, Resource, FREE_RES};

/// The responder acknowledges at least every this many request packets (besides AckReq and
/// message ends).
pub const ACK_COALESCE: u32 = 8;

/// Static parameters of the RQ Logic (from Create/Modify QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqConfig {
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Minimum RNR NAK timer code sent in RNR NAKs.
    pub min_rnr_timer: u8,
    /// Max outstanding inbound RDMA Reads/atomics (1..=16).
    pub max_dest_rd_atomic: u8,
    /// `ib_access_flags` of the QP (remote write/read/atomic enables).
    pub access_flags: u32,
    /// The QP takes receive WQEs from an SRQ: ACKs carry credit code 0x1F.
    pub srq: bool,
    /// Unreliable Connected: no ACK/NAK ever; a lost packet or any error silently drops the
    /// message in progress and its receive WQE is reused for the next message.
    pub uc: bool,
    /// Unreliable Datagram: single-packet Sends checked against [`RqConfig::qkey`], a GRH
    /// area in front of the payload, no ACKs.
    pub ud: bool,
    /// The QP's Q_Key (UD).
    pub qkey: u32,
}

impl Default for RqConfig {
    fn default() -> RqConfig {
        RqConfig {
            mtu: 1024,
            min_rnr_timer: 1,
            max_dest_rd_atomic: 1,
            access_flags: 0,
            srq: false,
            uc: false,
            ud: false,
            qkey: 0,
        }
    }
}

/// Counters kept by the RQ Logic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RqCounters {
    /// Request packets received and accepted as new.
    pub packets_received: u64,
    /// Response packets sent (ACK, NAK, read responses, atomic ACKs).
    pub responses_sent: u64,
    /// Duplicate request packets.
    pub duplicates: u64,
    /// PSN sequence errors detected.
    pub sequence_errors: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks_sent: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Packets silently dropped (class D and invalid duplicates).
    pub silent_drops: u64,
    /// Unsolicited ACKs sent (credit updates).
    pub unsolicited_acks: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InMsg {
    Send {
        off: u32,
    },
    Write {
        va: u64,
        rkey: u32,
        len: u32,
        off: u32,
    },
}

/// A class A or C error: the NAK to send and how to report it locally (the status of the RQ
/// WQE in use, or the affiliated event when no WQE is in use).
#[derive(Clone, Copy, Debug)]
struct Fault {
    code: NakCode,
    status: WcStatus,
    event: AsyncEvent,
}

impl Fault {
    /// Class C: invalid request (opcode sequence, length, unsupported or disabled operation).
    const INVALID_REQUEST: Fault = Fault {
        code: NakCode::InvalidRequest,
        status: WcStatus::RemInvReqErr,
        event: AsyncEvent::QpReqErr,
    };
    /// Class C: remote access error (R_Key, bounds or access rights).
    const REMOTE_ACCESS: Fault = Fault {
        code: NakCode::RemoteAccessError,
        status: WcStatus::RemAccessErr,
        event: AsyncEvent::QpAccessErr,
    };
    /// Class C: a Send overruns the receive buffers (length error).
    const LENGTH: Fault = Fault {
        code: NakCode::InvalidRequest,
        status: WcStatus::LocLenErr,
        event: AsyncEvent::QpReqErr,
    };
    /// Class A: a malformed receive WQE (remote operational error).
    const MALFORMED_WQE: Fault = Fault {
        code: NakCode::RemoteOperationalError,
        status: WcStatus::LocQpOpErr,
        event: AsyncEvent::QpFatal,
    };
    /// Class A: writing the receive buffers failed the local protection check.
    const LOCAL_PROTECTION: Fault = Fault {
        code: NakCode::RemoteOperationalError,
        status: WcStatus::LocProtErr,
        event: AsyncEvent::QpFatal,
    };
}

/// What the Qp must do after an RQ Logic step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RqOutcome {
    /// Nothing special.
    Ok,
    /// A class A or C error: the NAK is sent and the RQ WQE in use completed with its error (or
    /// the affiliated event raised); move the QP to Error and flush.
    Error,
    /// The receive CQ overflowed (class G).
    CqOverflow,
}

/// The RQ Logic of one QP.
#[derive(Debug)]
pub struct RqLogic<R> {
    pub(crate) rq: R,
    /// Oldest receive WQE not completed.
    pub(crate) rq_head: u64,
    /// Next receive WQE to take for a new message (`rq_head` or `rq_head + 1`).
    pub(crate) rq_next: u64,
    /// Next free slot.
    pub(crate) rq_tail: u64,
    pub(crate) epsn: Psn,
    pub(crate) msn: u32,
    cur: Option<InMsg>,
    nak_seq_sent: bool,
    pub(crate) res: [Resource; MAX_RESOURCES],
    pub(crate) res_tail: u64,
    pub(crate) res_send: u64,
    pub(crate) pending_ack: Option<AckItem>,
    pkts_since_ack: u32,
    peer_may_stall: bool,
    /// Credit code of the last ACK sent.
    announced: Option<u8>,
    /// UC: drop Middle/Last packets until the next First/Only.
    uc_skip: bool,
    pub(crate) cfg: RqConfig,
    pub(crate) counters: RqCounters,
    pub(crate) frozen: bool,
}

/// Per-connection values the RQ Logic uses when transmitting responses.
#[derive(Clone, Copy, Debug)]
pub struct RxCtx<'a> {
    /// Path to send on.
    pub path: &'a PathInfo,
    /// BTH:MigReq for every packet.
    pub mig_req: bool,
    /// Destination QP number.
    pub dest_qp: u32,
    /// BTH:P_Key.
    pub pkey: u16,
    /// Our QP number.
    pub qpn: u32,
    /// Source GID of the packet being processed (UD: goes into the GRH area).
    pub src_gid: [u8; 16],
    /// Destination GID of the packet being processed (UD).
    pub dst_gid: [u8; 16],
}

impl RxCtx<'_> {
    /// The BTH of a response at `psn` to this connection (RC Acknowledge; the caller changes
    /// the opcode of read responses and atomic ACKs).
    pub(crate) fn response_bth(&self, psn: Psn) -> Bth {
        let mut bth = Bth::new(Opcode::RcAcknowledge, self.dest_qp, psn);
        bth.mig_req = self.mig_req;
        bth.pkey = self.pkey;
        bth
    }
}

impl<R: core::ops::DerefMut<Target = [RecvSlot]>> RqLogic<R> {
    /// A new RQ Logic over caller-provided storage (its length is the RQ depth).
    pub fn new(rq: R) -> RqLogic<R> {
        RqLogic {
            rq,
            rq_head: 0,
            rq_next: 0,
            rq_tail: 0,
            epsn: Psn::ZERO,
            msn: 0,
            cur: None,
            nak_seq_sent: false,
            res: [FREE_RES; MAX_RESOURCES],
            res_tail: 0,
            res_send: 0,
            pending_ack: None,
            pkts_since_ack: 0,
            peer_may_stall: false,
            announced: None,
            uc_skip: false,
            cfg: RqConfig::default(),
            counters: RqCounters::default(),
            frozen: false,
        }
    }

    /// Back to the state after creation (Modify QP to Reset): WQEs discarded, credits zero.
    pub fn reset(&mut self) {
        self.rq_head = 0;
        self.rq_next = 0;
        self.rq_tail = 0;
        self.epsn = Psn::ZERO;
        self.msn = 0;
        self.cur = None;
        self.nak_seq_sent = false;
        self.res = [FREE_RES; MAX_RESOURCES];
        self.res_tail = 0;
        self.res_send = 0;
        self.pending_ack = None;
        self.pkts_since_ack = 0;
        self.peer_may_stall = false;
        self.announced = None;
        self.uc_skip = false;
        self.frozen = false;
    }

    /// Sets the expected PSN (Modify QP `rq_psn`).
    pub fn set_epsn(&mut self, psn: u32) {
        self.epsn = Psn::new(psn);
    }

    /// The expected PSN.
    pub fn epsn(&self) -> u32 {
        self.epsn.value()
    }

    /// The message sequence number.
    pub fn msn(&self) -> u32 {
        self.msn
    }

    /// The credit count: receive WQEs posted and not yet taken by a message (seed 003).
    pub fn credits(&self) -> u64 {
        self.rq_tail.wrapping_sub(self.rq_next)
    }

    /// The configuration (read).
    pub fn config(&self) -> &RqConfig {
        &self.cfg
    }

    /// The configuration (write).
    pub fn config_mut(&mut self) -> &mut RqConfig {
        &mut self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &RqCounters {
        &self.counters
    }

    /// The credit code every positive ACK carries (Table 17-8; 0x1F with an SRQ).
    pub fn credit_code(&self) -> u8 {
        if self.cfg.srq {
            CREDIT_CODE_INVALID
        } else {
            encode_credit(u32::try_from(self.credits()).unwrap_or(u32::MAX))
        }
    }

    pub(crate) fn idx(&self, c: u64) -> Option<usize> {
        crate::wqe::ring_slot(c, self.rq.len())
    }

    fn wqe(&self, c: u64) -> Option<RecvWr> {
        let i = self.idx(c)?;
        self.rq.get(i).map(|s| s.wr)
    }

    /// Number of receive WQEs posted and not completed.
    pub fn outstanding(&self) -> u64 {
        self.rq_tail.wrapping_sub(self.rq_head)
    }

    /// Queues a receive WR (the Qp checked the state).
    pub fn post(&mut self, wr: &RecvWr) -> Result<(), crate::requester::PostError> {
        if self.outstanding() >= self.rq.len() as u64 {
            return Err(crate::requester::PostError::QueueFull);
        }
        let t = self.rq_tail;
        let i = self.idx(t).ok_or(crate::requester::PostError::QueueFull)?;
        if let Some(s) = self.rq.get_mut(i) {
            s.wr = *wr;
        }
        self.rq_tail = t.wrapping_add(1);
        Ok(())
    }

    pub(crate) fn emit<O: Outputs>(&mut self, a: AckItem, ctx: &RxCtx<'_>, out: &mut O) {
        let mut h = Headers::new(ctx.response_bth(a.psn));
        let syndrome = match a.syndrome {
            // Credits are current at the time the ACK leaves.
            Syndrome::Ack { .. } => Syndrome::Ack {
                credit: self.credit_code(),
            },
            s => s,
        };
        // The peer may wait for credits once told "0" (or RNR NAKed). An answer to one of its
        // requests that reports credits ends that; an unsolicited update may be lost on the
        // way, so the responder keeps announcing (see `maybe_unsolicited_ack`).
        match syndrome {
            Syndrome::Ack { credit } => {
                if credit == 0 {
                    self.peer_may_stall = true;
                } else if !a.unsolicited {
                    self.peer_may_stall = false;
                }
                self.announced = Some(credit);
            }
            Syndrome::RnrNak { .. } => self.peer_may_stall = true,
            _ => {}
        }
        h.aeth = Some(Aeth {
            syndrome,
            msn: self.msn,
        });
        out.transmit(ctx.path, &h, PayloadSource::None);
        self.counters.responses_sent = self.counters.responses_sent.wrapping_add(1);
        self.pkts_since_ack = 0;
    }

    fn ack(&self, psn: Psn) -> AckItem {
        AckItem {
            psn,
            syndrome: Syndrome::Ack { credit: 0 },
            unsolicited: false,
        }
    }

    /// The unsolicited ACK sent on entering RTR (seed 003 "Providing Initial Credits"): PSN
    /// ePSN-1, MSN 0 and the credit count.
    pub fn initial_ack<O: Outputs>(&mut self, ctx: &RxCtx<'_>, out: &mut O) {
        let a = self.ack(self.epsn.prev());
        self.emit(a, ctx, out);
        self.counters.unsolicited_acks = self.counters.unsolicited_acks.wrapping_add(1);
    }

    /// After receives were posted: if the peer may be stalled for credits (an ACK said 0 or an
    /// RNR NAK went out, and no answer to a request has reported credits since), send an
    /// unsolicited ACK with the new credits (seed 003). Again for each receive that changes the
    /// credit code last announced, since an earlier update may have been lost: the peer's
    /// credit probes repair that too, but a new receive repairs it at once. At most one ACK per
    /// code of Table 17-8 (about 30) until the peer moves.
    pub fn maybe_unsolicited_ack<O: Outputs>(&mut self, ctx: &RxCtx<'_>, out: &mut O) {
        // Never let an unsolicited ACK replace a NAK still queued behind read responses.
        let nak_queued = matches!(self.pending_ack, Some(a) if !a.syndrome.is_ack());
        if self.peer_may_stall
            && !self.cfg.uc
            && !self.cfg.ud
            && !self.cfg.srq
            && self.credits() > 0
            && self.announced != Some(self.credit_code())
            && !self.frozen
            && !nak_queued
        {
            let mut a = self.ack(self.epsn.prev());
            a.unsolicited = true;
            self.queue_ack(a, ctx, out);
            self.counters.unsolicited_acks = self.counters.unsolicited_acks.wrapping_add(1);
        }
    }

    /// A class A or C error: NAK now, complete the RQ WQE in use with `status` or raise
    /// `event`, and tell the Qp to go to Error.
    fn fatal<O: Outputs>(&mut self, psn: Psn, f: Fault, ctx: &RxCtx<'_>, out: &mut O) -> RqOutcome {
        if self.cfg.uc {
            self.uc_abandon();
            return RqOutcome::Ok;
        }
        let Fault {
            code,
            status,
            event,
        } = f;
        let a = AckItem {
            psn,
            syndrome: Syndrome::Nak(code),
            unsolicited: false,
        };
        self.emit(a, ctx, out);
        self.cur = None;
        if self.rq_next != self.rq_head {
            if let Some(wr) = self.wqe(self.rq_head) {
                let wc = Completion {
                    wr_id: wr.wr_id,
                    status,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm_or_rkey: 0,
                    qp_num: ctx.qpn,
                    src_qp: ctx.dest_qp,
                    flags: 0,
                };
                if self.retire_rq_head(&wc, out) == RqOutcome::CqOverflow {
                    return RqOutcome::CqOverflow;
                }
            }
        } else {
            out.async_event(event, None);
        }
        RqOutcome::Error
    }

    fn invalid_request<O: Outputs>(&mut self, psn: Psn, ctx: &RxCtx<'_>, out: &mut O) -> RqOutcome {
        self.fatal(psn, Fault::INVALID_REQUEST, ctx, out)
    }

    fn access_error<O: Outputs>(&mut self, psn: Psn, ctx: &RxCtx<'_>, out: &mut O) -> RqOutcome {
        self.fatal(psn, Fault::REMOTE_ACCESS, ctx, out)
    }

    /// Completes the RQ WQE in use (the message ended).
    fn complete_recv<O: Outputs>(
        &mut self,
        opcode: WcOpcode,
        byte_len: u32,
        imm_or_rkey: u32,
        flags: u32,
        ctx: &RxCtx<'_>,
        out: &mut O,
    ) -> RqOutcome {
        let Some(wr) = self.wqe(self.rq_head) else {
            return RqOutcome::Ok;
        };
        let wc = Completion {
            wr_id: wr.wr_id,
            status: WcStatus::Success,
            opcode,
            byte_len,
            imm_or_rkey,
            qp_num: ctx.qpn,
            src_qp: ctx.dest_qp,
            flags,
        };
        self.retire_rq_head(&wc, out)
    }

    /// Writes `wc`, the CQE of the RQ WQE at `rq_head`, to the receive CQ and retires that WQE;
    /// a full CQ freezes the RQ Logic (class G).
    fn retire_rq_head<O: Outputs>(&mut self, wc: &Completion, out: &mut O) -> RqOutcome {
        if out.complete(CqKind::Recv, wc).is_err() {
            self.frozen = true;
            return RqOutcome::CqOverflow;
        }
        self.rq_head = self.rq_head.wrapping_add(1);
        RqOutcome::Ok
    }

    /// Takes the next receive WQE for a new message; `false` if there is none (RNR).
    fn take_wqe(&mut self) -> bool {
        if self.rq_next == self.rq_tail {
            return false;
        }
        self.rq_next = self.rq_next.wrapping_add(1);
        true
    }

    /// UC: drop the message in progress; its receive WQE (if taken) serves the next message.
    fn uc_abandon(&mut self) {
        if self.rq_next != self.rq_head {
            self.rq_next = self.rq_head;
        }
        self.cur = None;
        self.uc_skip = true;
        self.silent_drop();
    }

    /// Class D: the packet is silently dropped (and counted).
    fn silent_drop(&mut self) -> RqOutcome {
        self.counters.silent_drops = self.counters.silent_drops.wrapping_add(1);
        RqOutcome::Ok
    }

    fn rnr_nak<O: Outputs>(&mut self, psn: Psn, ctx: &RxCtx<'_>, out: &mut O) -> RqOutcome {
        if self.cfg.uc {
            // UC has no RNR NAK: the message is dropped.
            self.uc_abandon();
            return RqOutcome::Ok;
        }
        self.counters.rnr_naks_sent = self.counters.rnr_naks_sent.wrapping_add(1);
        let a = AckItem {
            psn,
            syndrome: Syndrome::RnrNak {
                timer: self.cfg.min_rnr_timer & 0x1F,
            },
            unsolicited: false,
        };
        self.queue_ack(a, ctx, out);
        RqOutcome::Ok
    }

    /// Handles one inbound request packet (RC) that passed the state, APM and header checks.
    pub fn on_request<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: &[u8],
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        if self.frozen {
            return RqOutcome::Ok;
        }
        let psn = h.bth.psn;
        if self.cfg.ud {
            return self.on_ud_request(h, payload, ctx, mem, out);
        }
        if self.cfg.uc {
            return self.on_uc_request(h, payload, ctx, mem, out);
        }
        match classify_request_psn(psn, self.epsn) {
            RequestPsnClass::Invalid => {
                self.sequence_error(ctx, out);
                RqOutcome::Ok
            }
            RequestPsnClass::Duplicate => {
                self.on_duplicate(h, ctx, mem, out);
                RqOutcome::Ok
            }
            RequestPsnClass::Expected => {
                self.nak_seq_sent = false;
                self.on_expected(h, payload, ctx, mem, out)
            }
        }
    }

    /// An RC request packet with a reserved or unsupported opcode (its headers beyond the BTH
    /// cannot be parsed). After the PSN checks every request gets, seed 001 (Table 17-7,
    /// "Unsupported or Reserved Opcode") makes it class C: Invalid Request NAK, the QP to
    /// Error, the RQ WQE in use retired with "Remote Invalid Request", else the affiliated
    /// QP_REQ_ERR. A duplicate cannot be answered (its operation is unknown) and is dropped.
    pub fn on_unsupported_request<O: Outputs>(
        &mut self,
        psn: Psn,
        ctx: &RxCtx<'_>,
        out: &mut O,
    ) -> RqOutcome {
        if self.frozen || self.cfg.uc || self.cfg.ud {
            return self.silent_drop();
        }
        match classify_request_psn(psn, self.epsn) {
            RequestPsnClass::Invalid => {
                self.sequence_error(ctx, out);
                RqOutcome::Ok
            }
            RequestPsnClass::Duplicate => {
                self.counters.duplicates = self.counters.duplicates.wrapping_add(1);
                self.silent_drop()
            }
            RequestPsnClass::Expected => {
                self.nak_seq_sent = false;
                self.invalid_request(psn, ctx, out)
            }
        }
    }

    /// Class B: one PSN sequence error NAK per sequence error.
    fn sequence_error<O: Outputs>(&mut self, ctx: &RxCtx<'_>, out: &mut O) {
        self.counters.sequence_errors = self.counters.sequence_errors.wrapping_add(1);
        if !self.nak_seq_sent {
            self.nak_seq_sent = true;
            self.counters.seq_naks_sent = self.counters.seq_naks_sent.wrapping_add(1);
            let a = AckItem {
                psn: self.epsn,
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                unsolicited: false,
            };
            self.queue_ack(a, ctx, out);
        }
    }

    /// UC (IBA 9.7.5.1.3 style): any PSN other than ePSN means packets were lost: the message
    /// in progress is dropped and reception resumes at the next First/Only packet.
    fn on_uc_request<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: &[u8],
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        let psn = h.bth.psn;
        let pos = h.info().position;
        if psn != self.epsn {
            self.counters.sequence_errors = self.counters.sequence_errors.wrapping_add(1);
            if self.cur.is_some() {
                self.uc_abandon();
            }
            self.uc_skip = true;
        }
        self.epsn = psn.next();
        if self.uc_skip {
            if !pos.starts_message() {
                return self.silent_drop();
            }
            self.uc_skip = false;
        }
        let r = self.on_expected(h, payload, ctx, mem, out);
        self.epsn = psn.next();
        r
    }

    /// UD: one Send Only (with or without immediate) per message; a wrong Q_Key, a missing
    /// receive WQE or any other problem silently drops the datagram. The first 40 bytes of the
    /// receive buffer get a GRH (an IPv6 header built from the packet's GIDs).
    fn on_ud_request<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: &[u8],
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        let info = h.info();
        let Some(deth) = h.deth else {
            return self.silent_drop();
        };
        if info.operation != Operation::Send || info.position != Position::Only {
            return self.silent_drop();
        }
        if deth.qkey != self.cfg.qkey {
            return self.silent_drop();
        }
        if !self.take_wqe() {
            return self.silent_drop();
        }
        let Some(wr) = self.wqe(self.rq_head) else {
            return self.silent_drop();
        };
        let plen = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let total = wr.sg.total_len().unwrap_or(0);
        let need = plen.saturating_add(GRH_LEN);
        let mut status = WcStatus::Success;
        if need > total {
            status = WcStatus::LocLenErr;
        } else {
            let mut grh = [0u8; GRH_LEN as usize];
            grh[0] = 0x60;
            let pl = u16::try_from(plen).unwrap_or(u16::MAX).to_be_bytes();
            grh[4] = pl[0];
            grh[5] = pl[1];
            grh[6] = 0x11;
            grh[7] = 64;
            for (d, s) in grh[8..24].iter_mut().zip(ctx.src_gid.iter()) {
                *d = *s;
            }
            for (d, s) in grh[24..40].iter_mut().zip(ctx.dst_gid.iter()) {
                *d = *s;
            }
            if mem.scatter(wr.sg.as_slice(), 0, &grh).is_err()
                || (plen > 0 && mem.scatter(wr.sg.as_slice(), GRH_LEN, payload).is_err())
            {
                status = WcStatus::LocProtErr;
            }
        }
        let (imm, mut flags) = match h.immdt {
            Some(i) => (i.imm, WC_WITH_IMM),
            None => (0, 0),
        };
        flags |= crate::events::WC_GRH;
        let wc = Completion {
            wr_id: wr.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: if status == WcStatus::Success { need } else { 0 },
            imm_or_rkey: imm,
            qp_num: ctx.qpn,
            src_qp: deth.src_qp,
            flags,
        };
        let r = self.retire_rq_head(&wc, out);
        if r == RqOutcome::Ok {
            self.counters.packets_received = self.counters.packets_received.wrapping_add(1);
        }
        r
    }

    fn on_duplicate<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) {
        self.counters.duplicates = self.counters.duplicates.wrapping_add(1);
        let psn = h.bth.psn;
        let info = h.info();
        match info.operation {
            Operation::RdmaReadRequest => {
                let Some(reth) = h.reth else {
                    return;
                };
                // A duplicate read is executed again (from the PSN it asks for).
                let found = self.find_resource(|r| {
                    matches!(r.kind, ResKind::Read { .. })
                        && psn.distance_from(r.base_psn) < r.base_npsn
                });
                let Some(c) = found else {
                    self.silent_drop();
                    return;
                };
                if reth.dma_len > 0
                    && mem
                        .check_remote(reth.rkey, reth.va, reth.dma_len, ACCESS_REMOTE_READ)
                        .is_err()
                {
                    self.silent_drop();
                    return;
                }
                let i = res_slot(c);
                if let Some(r) = self.res.get_mut(i) {
                    r.psn = psn;
                    r.kind = ResKind::Read {
                        va: reth.va,
                        rkey: reth.rkey,
                        len: reth.dma_len,
                        sent: 0,
                    };
                }
                self.reschedule(c);
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // Replay the saved result; an atomic never executes twice. No saved result:
                // invalid duplicate atomic, class D (silent drop).
                let found = self
                    .find_resource(|r| matches!(r.kind, ResKind::Atomic { .. }) && r.psn == psn);
                match found {
                    Some(c) => self.reschedule(c),
                    None => {
                        self.silent_drop();
                    }
                }
            }
            _ => {
                // Duplicate Send/Write: not executed again, re-acknowledged.
                if h.bth.ack_req || info.position.ends_message() {
                    let a = self.ack(self.epsn.prev());
                    self.queue_ack(a, ctx, out);
                }
            }
        }
    }

    fn on_expected<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: &[u8],
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        let psn = h.bth.psn;
        let info = h.info();
        let mtu = self.cfg.mtu.max(1);
        let plen = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let pos = info.position;
        // Opcode sequence: First/Only only when no message is in progress, Middle/Last only
        // continuing a message of the same operation (class C otherwise).
        let continuing = match (self.cur, info.operation) {
            (None, _) => false,
            (Some(InMsg::Send { .. }), Operation::Send) => true,
            (Some(InMsg::Write { .. }), Operation::RdmaWrite) => true,
            _ => return self.invalid_request(psn, ctx, out),
        };
        if continuing == pos.starts_message() {
            return self.invalid_request(psn, ctx, out);
        }
        // Payload length consistent with the opcode (class C).
        let len_ok = match pos {
            Position::Only => plen <= mtu,
            Position::First | Position::Middle => plen == mtu,
            Position::Last => plen >= 1 && plen <= mtu,
        };
        let has_payload_op = matches!(info.operation, Operation::Send | Operation::RdmaWrite);
        if has_payload_op && !len_ok {
            return self.invalid_request(psn, ctx, out);
        }
        match info.operation {
            Operation::Send => self.on_send(h, payload, ctx, mem, out),
            Operation::RdmaWrite => self.on_write(h, payload, ctx, mem, out),
            Operation::RdmaReadRequest => {
                let Some(reth) = h.reth else {
                    return self.invalid_request(psn, ctx, out);
                };
                if self.cfg.access_flags & ACCESS_REMOTE_READ == 0 {
                    return self.invalid_request(psn, ctx, out);
                }
                if self.rd_atomic_resources_full() {
                    return self.invalid_request(psn, ctx, out);
                }
                if reth.dma_len > (1u32 << 31) {
                    return self.invalid_request(psn, ctx, out);
                }
                if reth.dma_len > 0
                    && mem
                        .check_remote(reth.rkey, reth.va, reth.dma_len, ACCESS_REMOTE_READ)
                        .is_err()
                {
                    return self.access_error(psn, ctx, out);
                }
                let kind = ResKind::Read {
                    va: reth.va,
                    rkey: reth.rkey,
                    len: reth.dma_len,
                    sent: 0,
                };
                self.accept_rd_atomic(kind, psn, npackets(reth.dma_len, mtu))
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let Some(ae) = h.atomic_eth else {
                    return self.invalid_request(psn, ctx, out);
                };
                if self.cfg.access_flags & ACCESS_REMOTE_ATOMIC == 0 {
                    return self.invalid_request(psn, ctx, out);
                }
                if ae.va % 8 != 0 {
                    return self.invalid_request(psn, ctx, out);
                }
                if self.rd_atomic_resources_full() {
                    return self.invalid_request(psn, ctx, out);
                }
                let op = if info.operation == Operation::CompareSwap {
                    AtomicOp::CmpSwap {
                        compare: ae.compare,
                        swap: ae.swap_add,
                    }
                } else {
                    AtomicOp::FetchAdd { add: ae.swap_add }
                };
                let orig = match mem.remote_atomic(ae.rkey, ae.va, op) {
                    Ok(v) => v,
                    Err(_) => return self.access_error(psn, ctx, out),
                };
                self.accept_rd_atomic(ResKind::Atomic { orig }, psn, 1)
            }
            _ => self.invalid_request(psn, ctx, out),
        }
    }

    /// True when `max_dest_rd_atomic` responder resources are in use: a new RDMA Read or
    /// atomic request is then an invalid request (class C).
    fn rd_atomic_resources_full(&self) -> bool {
        self.pending_resources() >= u64::from(self.cfg.max_dest_rd_atomic.clamp(1, 16))
    }

    /// Accepts a new RDMA Read or atomic request of `npsn` PSNs at `psn`: saves it as a
    /// responder resource, moves ePSN past it and counts the message (MSN).
    fn accept_rd_atomic(&mut self, kind: ResKind, psn: Psn, npsn: u32) -> RqOutcome {
        self.counters.packets_received = self.counters.packets_received.wrapping_add(1);
        self.alloc_resource(kind, psn, npsn);
        self.epsn = psn.add(npsn);
        self.next_msn();
        self.pkts_since_ack = 0;
        RqOutcome::Ok
    }

    /// A message ended: MSN + 1 (modulo 2^24).
    fn next_msn(&mut self) {
        self.msn = self.msn.wrapping_add(1) & crate::psn::PSN_MASK;
    }

    fn after_packet<O: Outputs>(&mut self, h: &Headers, ctx: &RxCtx<'_>, out: &mut O) {
        let psn = h.bth.psn;
        self.counters.packets_received = self.counters.packets_received.wrapping_add(1);
        self.epsn = psn.next();
        self.pkts_since_ack = self.pkts_since_ack.saturating_add(1);
        if self.cfg.uc {
            return;
        }
        if h.bth.ack_req || h.info().position.ends_message() || self.pkts_since_ack >= ACK_COALESCE
        {
            let a = self.ack(psn);
            self.queue_ack(a, ctx, out);
        }
    }

    fn on_send<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: &[u8],
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        let psn = h.bth.psn;
        let pos = h.info().position;
        let mut off = match self.cur {
            Some(InMsg::Send { off }) => off,
            _ => 0,
        };
        if pos.starts_message() {
            if !self.take_wqe() {
                // Class B: no receive WQE.
                return self.rnr_nak(psn, ctx, out);
            }
            off = 0;
            let Some(wr) = self.wqe(self.rq_head) else {
                return self.invalid_request(psn, ctx, out);
            };
            // Class A: a malformed receive WQE.
            if wr.sg.total_len().is_none()
                || mem
                    .check_local(wr.sg.as_slice(), ACCESS_LOCAL_WRITE)
                    .is_err()
            {
                return self.fatal(psn, Fault::MALFORMED_WQE, ctx, out);
            }
        }
        let Some(wr) = self.wqe(self.rq_head) else {
            return self.invalid_request(psn, ctx, out);
        };
        let total = wr.sg.total_len().unwrap_or(0);
        let plen = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let end = off.saturating_add(plen);
        if end > total {
            // Length error: the Send overruns the receive buffers (class C).
            return self.fatal(psn, Fault::LENGTH, ctx, out);
        }
        if plen > 0 && mem.scatter(wr.sg.as_slice(), off, payload).is_err() {
            return self.fatal(psn, Fault::LOCAL_PROTECTION, ctx, out);
        }
        self.cur = Some(InMsg::Send { off: end });
        if pos.ends_message() {
            self.cur = None;
            let (mut imm_or_rkey, mut flags) = (0, 0);
            if let Some(i) = h.immdt {
                imm_or_rkey = i.imm;
                flags = WC_WITH_IMM;
            }
            if let Some(i) = h.ieth {
                if mem.invalidate_remote(i.rkey).is_err() {
                    return self.invalid_request(psn, ctx, out);
                }
                imm_or_rkey = i.rkey;
                flags = WC_WITH_INVALIDATE;
            }
            self.next_msn();
            let r = self.complete_recv(WcOpcode::Recv, end, imm_or_rkey, flags, ctx, out);
            if r != RqOutcome::Ok {
                return r;
            }
        }
        self.after_packet(h, ctx, out);
        RqOutcome::Ok
    }

    fn on_write<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: &[u8],
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        let psn = h.bth.psn;
        let pos = h.info().position;
        if self.cfg.access_flags & ACCESS_REMOTE_WRITE == 0 {
            return self.invalid_request(psn, ctx, out);
        }
        let (va, rkey, len, off) = match (self.cur, h.reth) {
            (_, Some(reth)) if pos.starts_message() => {
                if reth.dma_len > 0
                    && mem
                        .check_remote(reth.rkey, reth.va, reth.dma_len, ACCESS_REMOTE_WRITE)
                        .is_err()
                {
                    return self.access_error(psn, ctx, out);
                }
                (reth.va, reth.rkey, reth.dma_len, 0u32)
            }
            (Some(InMsg::Write { va, rkey, len, off }), None) if !pos.starts_message() => {
                (va, rkey, len, off)
            }
            _ => return self.invalid_request(psn, ctx, out),
        };
        let plen = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let end = off.saturating_add(plen);
        // Too much payload, or too little at the end (class C length error).
        if end > len || (pos.ends_message() && end != len) {
            return self.invalid_request(psn, ctx, out);
        }
        let imm = h.immdt;
        if imm.is_some() && !self.take_wqe() {
            return self.rnr_nak(psn, ctx, out);
        }
        if plen > 0
            && mem
                .remote_write(rkey, va.wrapping_add(u64::from(off)), payload)
                .is_err()
        {
            return self.access_error(psn, ctx, out);
        }
        self.cur = Some(InMsg::Write {
            va,
            rkey,
            len,
            off: end,
        });
        if pos.ends_message() {
            self.cur = None;
            self.next_msn();
            if let Some(i) = imm {
                let r = self.complete_recv(
                    WcOpcode::RecvRdmaWithImm,
                    len,
                    i.imm,
                    WC_WITH_IMM,
                    ctx,
                    out,
                );
                if r != RqOutcome::Ok {
                    return r;
                }
            }
        }
        self.after_packet(h, ctx, out);
        RqOutcome::Ok
    }

    /// Flushes every receive WQE not completed with `IB_WC_WR_FLUSH_ERR`, oldest first.
    pub fn flush<O: Outputs>(&mut self, qpn: u32, out: &mut O) -> RqOutcome {
        if self.frozen {
            return RqOutcome::CqOverflow;
        }
        while self.rq_head != self.rq_tail {
            let Some(wr) = self.wqe(self.rq_head) else {
                break;
            };
            let wc = Completion {
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm_or_rkey: 0,
                qp_num: qpn,
                src_qp: 0,
                flags: 0,
            };
            if self.retire_rq_head(&wc, out) == RqOutcome::CqOverflow {
                return RqOutcome::CqOverflow;
            }
        }
        self.rq_next = self.rq_head;
        self.cur = None;
        self.res_send = self.res_tail;
        self.pending_ack = None;
        RqOutcome::Ok
    }
}
