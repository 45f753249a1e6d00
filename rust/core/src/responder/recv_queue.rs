//! The receive queue: posting receive WQEs, the credit count, taking a WQE for a new message,
//! completing it and flushing the rest.

use crate::events::{Completion, CqKind, Outputs, WcOpcode, WcStatus};
use crate::memory::{MemError, Memory, RxPayload};
use crate::psn::{classify_request_psn, RequestPsnClass};
use crate::sg_pool::SgStore;
use crate::wire::{Headers, Operation};
use crate::wqe::{total_len, RecvSlot, RecvWr, Sge};

use super::faults::Fault;
use super::{payload_len, RqLogic, RqOutcome, RxCtx};

/// Why a payload was not placed in a receive WQE.
#[derive(Clone, Copy, Debug)]
pub(super) enum PlaceError {
    /// A class A or C error.
    Fault(Fault),
    /// The buffers are not resident ([`MemError::NotPresent`]).
    NotPresent,
}

/// A posted receive WR as its queue keeps it.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecvRef<'a> {
    /// Caller's identifier, returned in the completion.
    pub(super) wr_id: u64,
    /// Scatter list for the inbound message.
    pub(super) sg: &'a [Sge],
}

/// Writes `data` at byte `off` of the buffers of the receive WQE `wr`; returns the offset just
/// past it. Data overrunning the buffers is [`Fault::LENGTH`] and touches nothing, buffers
/// failing the local protection check are [`Fault::LOCAL_PROTECTION`]: what an RC Send NAKs,
/// and the completion status of a UD one.
pub(super) fn place_recv<M: Memory>(
    mem: &mut M,
    wr: &RecvRef<'_>,
    off: u32,
    data: RxPayload<'_>,
) -> Result<u32, PlaceError> {
    let end = off.saturating_add(payload_len(data));
    if end > total_len(wr.sg).unwrap_or(0) {
        return Err(PlaceError::Fault(Fault::LENGTH));
    }
    if !data.is_empty() {
        match mem.scatter(wr.sg, off, data) {
            Ok(()) => {}
            Err(MemError::NotPresent) => return Err(PlaceError::NotPresent),
            Err(_) => return Err(PlaceError::Fault(Fault::LOCAL_PROTECTION)),
        }
    }
    Ok(end)
}

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// The credit count: receive WQEs posted and not yet taken by a message (seed 003).
    pub fn credits(&self) -> u64 {
        self.rq_tail.wrapping_sub(self.rq_next)
    }

    pub(crate) fn idx(&self, c: u64) -> Option<usize> {
        crate::wqe::ring_slot(c, self.rq.len())
    }

    /// The receive WR at counter `c`.
    pub(super) fn wqe(&self, c: u64) -> Option<RecvRef<'_>> {
        let i = self.idx(c)?;
        let s = self.rq.get(i)?;
        Some(RecvRef {
            wr_id: s.wr_id,
            sg: self.sges.get(i, s.num_sge),
        })
    }

    /// Number of receive WQEs posted and not completed.
    pub fn outstanding(&self) -> u64 {
        self.rq_tail.wrapping_sub(self.rq_head)
    }

    /// Whether the request `h` starts a message that takes a receive WQE while none is held:
    /// the moment a QP fed from an SRQ takes one. A Send's WQE is taken by its first packet (a
    /// Middle or Last with none held is an opcode sequence error, which retires no WQE); an RC
    /// packet out of sequence or already seen starts no message; a frozen RQ takes nothing.
    /// None of these may take a WQE away from the SRQ's other QPs.
    pub fn wants_wqe(&self, h: &Headers) -> bool {
        let info = h.info();
        let starts = info.operation != Operation::Send || info.position.starts_message();
        if !info.needs_rq_wqe || !starts || self.frozen || self.outstanding() != 0 {
            return false;
        }
        self.cfg.ud
            || self.cfg.uc
            || classify_request_psn(h.bth.psn, self.epsn) == RequestPsnClass::Expected
    }

    /// Queues a receive WR (the Qp checked the state). Fails when the RQ is full or the WR
    /// has more elements than a slot holds.
    pub fn post(&mut self, wr: &RecvWr) -> Result<(), crate::requester::PostError> {
        use crate::requester::PostError;
        if self.outstanding() >= self.rq.len() as u64 {
            return Err(PostError::QueueFull);
        }
        let t = self.rq_tail;
        let i = self.idx(t).ok_or(PostError::QueueFull)?;
        let num_sge = self
            .sges
            .put(i, wr.sg.as_slice())
            .ok_or(PostError::InvalidWr)?;
        let s = self.rq.get_mut(i).ok_or(PostError::QueueFull)?;
        *s = RecvSlot {
            wr_id: wr.wr_id,
            num_sge,
        };
        self.rq_tail = t.wrapping_add(1);
        Ok(())
    }

    /// Takes the next receive WQE for a new message; `false` if there is none (RNR).
    pub(super) fn take_wqe(&mut self) -> bool {
        if self.rq_next == self.rq_tail {
            return false;
        }
        self.rq_next = self.rq_next.wrapping_add(1);
        true
    }

    /// Completes the RQ WQE in use (the message ended with `last`, whose BTH:SE makes the
    /// completion solicited).
    pub(super) fn complete_recv<O: Outputs>(
        &mut self,
        (opcode, byte_len): (WcOpcode, u32),
        (imm_or_rkey, flags): (u32, u32),
        last: &Headers,
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
            network_hdr_type: 0,
            solicited: last.bth.solicited,
        };
        self.retire_rq_head(&wc, out)
    }

    /// Writes `wc`, the CQE of the RQ WQE at `rq_head`, to the receive CQ and retires that WQE;
    /// a full CQ freezes the RQ Logic (class G).
    pub(super) fn retire_rq_head<O: Outputs>(&mut self, wc: &Completion, out: &mut O) -> RqOutcome {
        if out.complete(CqKind::Recv, wc).is_err() {
            self.frozen = true;
            return RqOutcome::CqOverflow;
        }
        self.rq_head = self.rq_head.wrapping_add(1);
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
                network_hdr_type: 0,
                solicited: false,
            };
            if self.retire_rq_head(&wc, out) == RqOutcome::CqOverflow {
                return RqOutcome::CqOverflow;
            }
        }
        self.rq_next = self.rq_head;
        self.cur = None;
        self.res_send = self.res_tail;
        self.res_fresh = self.res_tail;
        self.res_hold = None;
        self.pending_ack = None;
        RqOutcome::Ok
    }
}
