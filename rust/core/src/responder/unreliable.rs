//! The unreliable transports: UC (a lost packet drops the message) and UD (single-packet Sends
//! with a Q_Key check and a GRH area).

use crate::events::{Completion, Outputs, WcOpcode, WcStatus, WC_WITH_IMM};
use crate::memory::{Memory, RxPayload};
use crate::sg_pool::SgStore;
use crate::wire::{Headers, Operation, Position};
use crate::wqe::RecvSlot;

use super::faults::Fault;
use super::recv_queue::{place_recv, PlaceError};
use super::{payload_len, RqLogic, RqOutcome, RxCtx, GRH_LEN};

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// UC (IBA 9.7.5.1.3 style): any PSN other than ePSN means packets were lost: the message
    /// in progress is dropped and reception resumes at the next First/Only packet.
    pub(super) fn on_uc_request<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
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
        // A packet not taken (memory not resident) is handed in again: expect it once more.
        self.epsn = if self.deferred { psn } else { psn.next() };
        r
    }

    /// UD: one Send Only (with or without immediate) per message; a wrong Q_Key, a missing
    /// receive WQE or any other problem silently drops the datagram. The first 40 bytes of the
    /// receive buffer get the packet's network header (RoCEv2's GRH area, see
    /// [`crate::apm::NetHeader`]).
    pub(super) fn on_ud_request<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
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
        let plen = payload_len(payload);
        let need = plen.saturating_add(GRH_LEN);
        // The GRH and the payload behind it either both fit or nothing is written.
        let placed = match crate::wqe::total_len(wr.sg) {
            None => Err(PlaceError::Fault(Fault::MALFORMED_WQE)),
            Some(room) if need > room => Err(PlaceError::Fault(Fault::LENGTH)),
            Some(_) => place_recv(mem, &wr, 0, RxPayload::Bytes(&ctx.net.grh))
                .and_then(|_| place_recv(mem, &wr, GRH_LEN, payload)),
        };
        let status = match placed {
            Ok(_) => WcStatus::Success,
            Err(PlaceError::NotPresent) => return self.not_present(true),
            Err(PlaceError::Fault(f)) => f.status(),
        };
        let (imm, mut flags) = match h.immdt {
            Some(i) => (i.imm, WC_WITH_IMM),
            None => (0, 0),
        };
        flags |= crate::events::WC_GRH | crate::events::WC_WITH_NETWORK_HDR_TYPE;
        let wc = Completion {
            wr_id: wr.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: if status == WcStatus::Success { need } else { 0 },
            imm_or_rkey: imm,
            qp_num: ctx.qpn,
            src_qp: deth.src_qp,
            flags,
            network_hdr_type: if ctx.net.ipv4 {
                crate::events::NETWORK_IPV4
            } else {
                crate::events::NETWORK_IPV6
            },
            solicited: h.bth.solicited,
        };
        let r = self.retire_rq_head(&wc, out);
        if r == RqOutcome::Ok {
            self.counters.packets_received = self.counters.packets_received.wrapping_add(1);
        }
        r
    }
}
