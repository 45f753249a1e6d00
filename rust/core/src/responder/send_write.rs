//! Send and RDMA Write requests: the payload into the receive WQE or the remote buffer, and the
//! receive completion at the end of the message.

use crate::events::{Outputs, WcOpcode, WC_WITH_IMM, WC_WITH_INVALIDATE};
use crate::memory::{MemError, Memory, RxPayload, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE};
use crate::sg_pool::SgStore;
use crate::wire::Headers;
use crate::wqe::RecvSlot;

use super::faults::Fault;
use super::recv_queue::{place_recv, PlaceError};
use super::{payload_len, reth_check, InMsg, RqLogic, RqOutcome, RxCtx};

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// An expected Send packet: a new message takes a receive WQE (class B RNR NAK without
    /// one), the payload goes into its buffers and the last packet completes it.
    pub(super) fn on_send<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
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
            if crate::wqe::total_len(wr.sg).is_none() {
                return self.fatal(psn, Fault::MALFORMED_WQE, ctx, out);
            }
            match mem.check_local(wr.sg, ACCESS_LOCAL_WRITE) {
                Ok(()) => {}
                Err(MemError::NotPresent) => return self.not_present(true),
                Err(_) => return self.fatal(psn, Fault::MALFORMED_WQE, ctx, out),
            }
        }
        let Some(wr) = self.wqe(self.rq_head) else {
            return self.invalid_request(psn, ctx, out);
        };
        // Length error: the Send overruns the receive buffers (class C); or the buffers fail
        // the local protection check (class A).
        let end = match place_recv(mem, &wr, off, payload) {
            Ok(end) => end,
            Err(PlaceError::NotPresent) => return self.not_present(pos.starts_message()),
            Err(PlaceError::Fault(f)) => return self.fatal(psn, f, ctx, out),
        };
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
                self.counters.remote_invalidations =
                    self.counters.remote_invalidations.wrapping_add(1);
                imm_or_rkey = i.rkey;
                flags = WC_WITH_INVALIDATE;
            }
            self.next_msn();
            let r = self.complete_recv((WcOpcode::Recv, end), (imm_or_rkey, flags), h, ctx, out);
            if r != RqOutcome::Ok {
                return r;
            }
        }
        self.after_packet(h, ctx, out);
        RqOutcome::Ok
    }

    /// An expected RDMA Write packet: the first one's RETH range is checked, the payload is
    /// written there, and with immediate data the last packet takes and completes a receive WQE.
    pub(super) fn on_write<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
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
                match reth_check(mem, &reth, ACCESS_REMOTE_WRITE) {
                    Ok(()) => {}
                    Err(MemError::NotPresent) => return self.not_present(false),
                    Err(_) => return self.access_error(psn, ctx, out),
                }
                (reth.va, reth.rkey, reth.dma_len, 0u32)
            }
            (Some(InMsg::Write { va, rkey, len, off }), None) if !pos.starts_message() => {
                (va, rkey, len, off)
            }
            _ => return self.invalid_request(psn, ctx, out),
        };
        let plen = payload_len(payload);
        let end = off.saturating_add(plen);
        // Too much payload, or too little at the end (class C length error).
        if end > len || (pos.ends_message() && end != len) {
            return self.invalid_request(psn, ctx, out);
        }
        let imm = h.immdt;
        if imm.is_some() && !self.take_wqe() {
            return self.rnr_nak(psn, ctx, out);
        }
        if plen > 0 {
            match mem.remote_write(rkey, va.wrapping_add(u64::from(off)), payload) {
                Ok(()) => {}
                Err(MemError::NotPresent) => return self.not_present(imm.is_some()),
                Err(_) => return self.access_error(psn, ctx, out),
            }
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
                    (WcOpcode::RecvRdmaWithImm, len),
                    (i.imm, WC_WITH_IMM),
                    h,
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
}
