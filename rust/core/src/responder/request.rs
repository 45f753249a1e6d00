//! The RC request receive path: the PSN classes (expected, duplicate, invalid), duplicates
//! answered from the responder resources, the opcode sequence and length checks, and accepting
//! new RDMA Read and atomic requests.

use crate::events::Outputs;
use crate::memory::{
    AtomicOp, MemError, Memory, RxPayload, ACCESS_FLUSH_GLOBAL, ACCESS_FLUSH_PERSISTENT,
    ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use crate::psn::{classify_request_psn, Psn, RequestPsnClass};
use crate::requester::npackets;
use crate::sg_pool::SgStore;
use crate::wire::feth::{PLACEMENT_GLOBAL, PLACEMENT_PERSISTENT, SELECT_MR, SELECT_RANGE};
use crate::wire::{Headers, Operation, Position};
use crate::wqe::RecvSlot;

use super::resources::{res_slot, ResKind, MAX_RESOURCES};
use super::{payload_len, reth_check, InMsg, RqLogic, RqOutcome, RxCtx};

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// Handles one inbound request packet (RC) that passed the state, APM and header checks.
    pub fn on_request<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        if self.frozen {
            return RqOutcome::Ok;
        }
        self.deferred = false;
        let psn = h.bth.psn;
        if self.cfg.ud {
            return self.on_ud_request(h, payload, ctx, mem, out);
        }
        if self.cfg.uc {
            return self.on_uc_request(h, payload, ctx, mem, out);
        }
        self.release_hold_past(psn);
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
                let i = res_slot(c);
                // A requester asks again from the first response it misses, which never moves
                // back: a duplicate from before where the last one asked is a stale copy (the
                // network's, or one overtaken), and answering it would send again what has
                // arrived (rdma_rxe drops these too).
                if self.res.get(i).is_some_and(|r| psn.is_before(r.psn)) {
                    self.silent_drop();
                    return;
                }
                match reth_check(mem, &reth, ACCESS_REMOTE_READ) {
                    Ok(()) => {}
                    Err(MemError::NotPresent) => {
                        self.not_present(false);
                        return;
                    }
                    Err(_) => {
                        self.silent_drop();
                        return;
                    }
                }
                let mut partial = false;
                if let Some(r) = self.res.get_mut(i) {
                    r.psn = psn;
                    r.kind = ResKind::Read {
                        va: reth.va,
                        rkey: reth.rkey,
                        len: reth.dma_len,
                        sent: 0,
                    };
                    let end = r.base_psn.add(r.base_npsn);
                    partial = psn
                        .add(npackets(reth.dma_len, self.cfg.mtu.max(1)))
                        .is_before(end);
                }
                self.reschedule(c, partial);
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // Replay the saved result; an atomic never executes twice. No saved result:
                // invalid duplicate atomic, class D (silent drop).
                let found = self
                    .find_resource(|r| matches!(r.kind, ResKind::Atomic { .. }) && r.psn == psn);
                match found {
                    Some(c) => self.reschedule(c, false),
                    None => {
                        self.silent_drop();
                    }
                }
            }
            Operation::AtomicWrite | Operation::Flush => {
                // Answered again from the saved resource, never executed twice (rdma_rxe
                // replays both alike); none kept: class D, dropped.
                let found = self.find_resource(|r| r.kind == ResKind::Placed && r.psn == psn);
                match found {
                    Some(c) => self.reschedule(c, false),
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

    pub(super) fn on_expected<O: Outputs, M: Memory>(
        &mut self,
        h: &Headers,
        payload: RxPayload<'_>,
        ctx: &RxCtx<'_>,
        mem: &mut M,
        out: &mut O,
    ) -> RqOutcome {
        let psn = h.bth.psn;
        let info = h.info();
        let mtu = self.cfg.mtu.max(1);
        let plen = payload_len(payload);
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
                match reth_check(mem, &reth, ACCESS_REMOTE_READ) {
                    Ok(()) => {}
                    Err(MemError::NotPresent) => return self.not_present(false),
                    Err(_) => return self.access_error(psn, ctx, out),
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
                    Err(MemError::NotPresent) => return self.not_present(false),
                    Err(_) => return self.access_error(psn, ctx, out),
                };
                self.accept_rd_atomic(ResKind::Atomic { orig }, psn, 1)
            }
            Operation::AtomicWrite => {
                let Some(reth) = h.reth else {
                    return self.invalid_request(psn, ctx, out);
                };
                if self.cfg.access_flags & ACCESS_REMOTE_WRITE == 0 {
                    return self.invalid_request(psn, ctx, out);
                }
                if self.rd_atomic_resources_full() {
                    return self.invalid_request(psn, ctx, out);
                }
                // R_Key, rights and range first, then length and alignment (rdma_rxe's order).
                match mem.check_remote(reth.rkey, reth.va, 8, ACCESS_REMOTE_WRITE) {
                    Ok(()) => {}
                    Err(MemError::NotPresent) => return self.not_present(false),
                    Err(_) => return self.access_error(psn, ctx, out),
                }
                // oA19-28: exactly 8 bytes; A19.4.2: 8-byte aligned (class C).
                let Some(Ok(value)) = payload.bytes().map(<[u8; 8]>::try_from) else {
                    return self.invalid_request(psn, ctx, out);
                };
                if reth.dma_len != 8 || reth.va % 8 != 0 {
                    return self.invalid_request(psn, ctx, out);
                }
                match mem.remote_atomic_write(reth.rkey, reth.va, value) {
                    Ok(()) => {}
                    Err(MemError::NotPresent) => return self.not_present(false),
                    Err(_) => return self.access_error(psn, ctx, out),
                }
                self.accept_rd_atomic(ResKind::Placed, psn, 1)
            }
            Operation::Flush => {
                let (Some(feth), Some(reth)) = (h.feth, h.reth) else {
                    return self.invalid_request(psn, ctx, out);
                };
                // The QP must enable each placement type asked for (rdma_rxe's
                // check_qp_attr_access), and so must the MR.
                let mut access = 0;
                if feth.placement & PLACEMENT_GLOBAL != 0 {
                    access |= ACCESS_FLUSH_GLOBAL;
                }
                if feth.placement & PLACEMENT_PERSISTENT != 0 {
                    access |= ACCESS_FLUSH_PERSISTENT;
                }
                if self.cfg.access_flags & access != access {
                    return self.invalid_request(psn, ctx, out);
                }
                let range = match feth.selectivity {
                    SELECT_RANGE => Some((reth.va, reth.dma_len)),
                    SELECT_MR => None,
                    _ => return self.invalid_request(psn, ctx, out),
                };
                if reth.dma_len > (1u32 << 31) {
                    return self.invalid_request(psn, ctx, out);
                }
                // rdma_rxe's requester does not count FLUSH against max_rd_atomic: refuse one
                // only when the resource ring itself is full.
                if self.pending_resources() >= MAX_RESOURCES as u64 {
                    return self.invalid_request(psn, ctx, out);
                }
                if mem.remote_flush(reth.rkey, range, access).is_err() {
                    return self.access_error(psn, ctx, out);
                }
                self.accept_rd_atomic(ResKind::Placed, psn, 1)
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
    pub(super) fn next_msn(&mut self) {
        self.msn = self.msn.wrapping_add(1) & crate::psn::PSN_MASK;
    }
}
