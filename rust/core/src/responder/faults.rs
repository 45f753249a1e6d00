//! The error classes of Table 17-7 (seed 001) as the RQ Logic handles them: B (PSN sequence
//! error NAK once, RNR NAK), C (invalid request / remote access NAK, QP to Error), A (malformed
//! RQ WQE: remote operational error NAK) and D (silent drop); UC drops the message instead.

use crate::events::{AsyncEvent, Completion, Outputs, WcOpcode, WcStatus};
use crate::psn::Psn;
use crate::sg_pool::SgStore;
use crate::wire::{NakCode, Syndrome};
use crate::wqe::RecvSlot;

use super::resources::AckItem;
use super::{RqLogic, RqOutcome, RxCtx};

/// A class A or C error: the NAK to send and how to report it locally (the status of the RQ
/// WQE in use, or the affiliated event when no WQE is in use).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fault {
    code: NakCode,
    status: WcStatus,
    event: AsyncEvent,
}

impl Fault {
    /// Class C: invalid request (opcode sequence, length, unsupported or disabled operation).
    pub(super) const INVALID_REQUEST: Fault = Fault {
        code: NakCode::InvalidRequest,
        status: WcStatus::RemInvReqErr,
        event: AsyncEvent::QpReqErr,
    };
    /// Class C: remote access error (R_Key, bounds or access rights).
    pub(super) const REMOTE_ACCESS: Fault = Fault {
        code: NakCode::RemoteAccessError,
        status: WcStatus::RemAccessErr,
        event: AsyncEvent::QpAccessErr,
    };
    /// Class C: a Send overruns the receive buffers (length error).
    pub(super) const LENGTH: Fault = Fault {
        code: NakCode::InvalidRequest,
        status: WcStatus::LocLenErr,
        event: AsyncEvent::QpReqErr,
    };
    /// Class A: a malformed receive WQE (remote operational error).
    pub(super) const MALFORMED_WQE: Fault = Fault {
        code: NakCode::RemoteOperationalError,
        status: WcStatus::LocQpOpErr,
        event: AsyncEvent::QpFatal,
    };
    /// Class A: writing the receive buffers failed the local protection check.
    pub(super) const LOCAL_PROTECTION: Fault = Fault {
        code: NakCode::RemoteOperationalError,
        status: WcStatus::LocProtErr,
        event: AsyncEvent::QpFatal,
    };

    /// The completion status that reports this fault locally.
    pub(super) fn status(self) -> WcStatus {
        self.status
    }
}

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// A class A or C error: NAK now, complete the RQ WQE in use with `status` or raise
    /// `event`, and tell the Qp to go to Error.
    pub(super) fn fatal<O: Outputs>(
        &mut self,
        psn: Psn,
        f: Fault,
        ctx: &RxCtx<'_>,
        out: &mut O,
    ) -> RqOutcome {
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
                    network_hdr_type: 0,
                    solicited: false,
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

    pub(super) fn invalid_request<O: Outputs>(
        &mut self,
        psn: Psn,
        ctx: &RxCtx<'_>,
        out: &mut O,
    ) -> RqOutcome {
        self.fatal(psn, Fault::INVALID_REQUEST, ctx, out)
    }

    pub(super) fn access_error<O: Outputs>(
        &mut self,
        psn: Psn,
        ctx: &RxCtx<'_>,
        out: &mut O,
    ) -> RqOutcome {
        self.fatal(psn, Fault::REMOTE_ACCESS, ctx, out)
    }

    pub(super) fn rnr_nak<O: Outputs>(
        &mut self,
        psn: Psn,
        ctx: &RxCtx<'_>,
        out: &mut O,
    ) -> RqOutcome {
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

    /// Class B: one PSN sequence error NAK per sequence error.
    pub(super) fn sequence_error<O: Outputs>(&mut self, ctx: &RxCtx<'_>, out: &mut O) {
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

    /// Class D: the packet is silently dropped (and counted).
    pub(super) fn silent_drop(&mut self) -> RqOutcome {
        self.counters.silent_drops = self.counters.silent_drops.wrapping_add(1);
        RqOutcome::Ok
    }

    /// UC: drop the message in progress; its receive WQE (if taken) serves the next message.
    pub(super) fn uc_abandon(&mut self) {
        if self.rq_next != self.rq_head {
            self.rq_next = self.rq_head;
        }
        self.cur = None;
        self.uc_skip = true;
        self.silent_drop();
    }
}
