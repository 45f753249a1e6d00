//! RQ Logic responder resources (IBA 9.7.5.1.6, the "special queue" of Table 12-3): the RDMA
//! Read and atomic requests the responder keeps so that duplicates are answered again (reads
//! re-executed, atomics replayed from the saved result), and the ordered response stream: read
//! responses, atomic ACKs and ACK/NAKs leave in PSN order, an ACK queued behind pending
//! responses waits for them.

use crate::events::{Outputs, PayloadSource};
use crate::psn::Psn;
use crate::requester::{npackets, position};
use crate::sg_pool::SgStore;
use crate::wire::{Aeth, AtomicAckEth, Headers, Opcode, Syndrome};
use crate::wqe::RecvSlot;

use super::{RqLogic, RxCtx};

/// Number of responder resources (saved RDMA Read / atomic requests) a QP keeps.
pub const MAX_RESOURCES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResKind {
    Free,
    Read {
        va: u64,
        rkey: u32,
        len: u32,
        sent: u32,
    },
    Atomic {
        orig: u64,
    },
    /// An executed ATOMIC WRITE or FLUSH: answered, also when duplicated, by an RDMA Read
    /// Response Only without data and never executed again.
    Placed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AckItem {
    pub(crate) psn: Psn,
    pub(crate) syndrome: Syndrome,
    /// A credit update of the responder's own accord (no request asked for it): the peer may
    /// never see it, so it does not end the peer's credit wait as far as the responder knows.
    pub(crate) unsolicited: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    pub(crate) kind: ResKind,
    /// First PSN of the responses to send (moves when a duplicate asks for part of a read).
    pub(crate) psn: Psn,
    /// The PSN range of the original request (duplicates anywhere in it match).
    pub(crate) base_psn: Psn,
    pub(crate) base_npsn: u32,
    pub(crate) ack_before: Option<AckItem>,
}

pub(crate) const FREE_RES: Resource = Resource {
    kind: ResKind::Free,
    psn: Psn::ZERO,
    base_psn: Psn::ZERO,
    base_npsn: 0,
    ack_before: None,
};

/// Index in the responder resource ring of the resource with monotonic counter `c`.
pub(crate) fn res_slot(c: u64) -> usize {
    (c % MAX_RESOURCES as u64) as usize
}

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// Queues an ACK/NAK behind responses still to be sent, or sends it now.
    pub(crate) fn queue_ack<O: Outputs>(&mut self, a: AckItem, ctx: &RxCtx<'_>, out: &mut O) {
        if self.res_send == self.res_tail {
            self.emit(a, ctx, out);
        } else {
            self.pending_ack = Some(a);
        }
    }

    /// Sends queued RDMA Read responses, Atomic ACKs and the pending ACK, at most `budget`
    /// packets. Returns the number sent.
    pub fn transmit<O: Outputs>(&mut self, budget: usize, ctx: &RxCtx<'_>, out: &mut O) -> usize {
        let mut sent = 0;
        let mtu = self.cfg.mtu.max(1);
        let end = self.res_end();
        while sent < budget && self.res_send != end {
            let i = res_slot(self.res_send);
            let Some(r) = self.res.get(i).copied() else {
                break;
            };
            if let Some(a) = r.ack_before {
                if let Some(m) = self.res.get_mut(i) {
                    m.ack_before = None;
                }
                self.emit(a, ctx, out);
                sent += 1;
                continue;
            }
            let mut bth = ctx.response_bth(r.psn);
            let aeth = Aeth {
                syndrome: Syndrome::Ack {
                    credit: self.credit_code(),
                },
                msn: self.msn,
            };
            match r.kind {
                ResKind::Read {
                    va,
                    rkey,
                    len,
                    sent: off,
                } => {
                    let n = npackets(len, mtu);
                    let k = off / mtu;
                    let pos = position(k, n);
                    let plen = len.saturating_sub(off).min(mtu);
                    bth.opcode = Opcode::rdma_read_response(pos);
                    bth.psn = r.psn.add(k);
                    bth.pad_count = crate::wire::pad_count(plen as usize);
                    let mut h = Headers::new(bth);
                    if bth.opcode.info().has_aeth {
                        h.aeth = Some(aeth);
                    }
                    let payload = if plen > 0 {
                        PayloadSource::Remote {
                            rkey,
                            va: va.wrapping_add(u64::from(off)),
                            len: plen,
                        }
                    } else {
                        PayloadSource::None
                    };
                    out.transmit(ctx.path, &h, payload);
                    let noff = off.saturating_add(plen);
                    if let Some(m) = self.res.get_mut(i) {
                        m.kind = ResKind::Read {
                            va,
                            rkey,
                            len,
                            sent: noff,
                        };
                    }
                    if pos.ends_message() {
                        self.sent_resource();
                    }
                }
                ResKind::Atomic { orig } => {
                    bth.opcode = Opcode::RcAtomicAcknowledge;
                    let mut h = Headers::new(bth);
                    h.aeth = Some(aeth);
                    h.atomic_ack_eth = Some(AtomicAckEth { orig });
                    out.transmit(ctx.path, &h, PayloadSource::None);
                    self.sent_resource();
                }
                ResKind::Placed => {
                    bth.opcode = Opcode::RcRdmaReadResponseOnly;
                    let mut h = Headers::new(bth);
                    h.aeth = Some(aeth);
                    out.transmit(ctx.path, &h, PayloadSource::None);
                    self.sent_resource();
                }
                ResKind::Free => {
                    self.sent_resource();
                    continue;
                }
            }
            self.counters.responses_sent = self.counters.responses_sent.wrapping_add(1);
            sent += 1;
        }
        if sent < budget && self.res_send == self.res_tail {
            if let Some(a) = self.pending_ack.take() {
                self.emit(a, ctx, out);
                sent += 1;
            }
        }
        sent
    }

    /// True when responses are waiting to be sent.
    pub fn has_pending_responses(&self) -> bool {
        self.res_send != self.res_end()
            || (self.pending_ack.is_some() && self.res_send == self.res_tail)
    }

    /// Where the responses that may go now end: the held resource, or the tail.
    fn res_end(&self) -> u64 {
        match self.res_hold {
            Some(h) if h >= self.res_send && h < self.res_tail => h,
            _ => self.res_tail,
        }
    }

    /// Resources in use: those not yet answered once (responses sent again for a duplicate
    /// take no new place).
    pub(crate) fn pending_resources(&self) -> u64 {
        self.res_tail.wrapping_sub(self.res_fresh)
    }

    /// Moves `res_send` to the next resource, and `res_fresh` with it the first time.
    fn sent_resource(&mut self) {
        if self.res_send == self.res_fresh {
            self.res_fresh = self.res_fresh.wrapping_add(1);
        }
        self.res_send = self.res_send.wrapping_add(1);
    }

    pub(crate) fn alloc_resource(&mut self, kind: ResKind, psn: Psn, npsn: u32) {
        // The new resource takes the oldest one's slot. If a duplicate asked for that one's
        // responses again and they have not all left, they are given up rather than sent from
        // the new resource's slot: a well-behaved requester has completed that request already
        // (it may send a new one only then), and a later duplicate of it finds nothing kept.
        let oldest_kept = self.res_tail.saturating_sub(MAX_RESOURCES as u64 - 1);
        if self.res_send < oldest_kept {
            self.res_send = oldest_kept;
            self.res_fresh = self.res_fresh.max(oldest_kept);
            if self.res_hold.is_some_and(|h| h < oldest_kept) {
                self.res_hold = None;
            }
        }
        // A hold that begins here covers no resource sent before: it would keep this new one,
        // never answered, waiting for a duplicate its requester has no reason to send (and
        // every ACK queued behind it).
        if self.res_hold == Some(self.res_tail) {
            self.res_hold = None;
        }
        let i = res_slot(self.res_tail);
        let ack_before = self.pending_ack.take();
        if let Some(r) = self.res.get_mut(i) {
            *r = Resource {
                kind,
                psn,
                base_psn: psn,
                base_npsn: npsn,
                ack_before,
            };
        }
        self.res_tail = self.res_tail.wrapping_add(1);
    }

    /// Counter of a kept resource matching `pred`, newest first.
    pub(crate) fn find_resource(&self, mut pred: impl FnMut(&Resource) -> bool) -> Option<u64> {
        let kept = self.res_tail.min(MAX_RESOURCES as u64);
        let mut k = 0;
        while k < kept {
            let c = self.res_tail.wrapping_sub(1).wrapping_sub(k);
            let i = res_slot(c);
            if let Some(r) = self.res.get(i) {
                if pred(r) {
                    return Some(c);
                }
            }
            k += 1;
        }
        None
    }

    /// Ends a hold (see [`Self::reschedule`]) when a request at `psn`, at or past the first
    /// held resource, comes: a requester sends nothing past a read it is resuming, so it has
    /// finished that read and needs nothing the hold keeps (or asks for it again itself). A
    /// packet sent before the resumption and overtaken ends it too: the responses then sent
    /// cost that requester one retry (an implied NAK) and a repeated request, and the next
    /// partial duplicate holds them again.
    pub(crate) fn release_hold_past(&mut self, psn: Psn) {
        let Some(h) = self.res_hold else {
            return;
        };
        if h >= self.res_tail {
            return;
        }
        if self
            .res
            .get(res_slot(h))
            .is_some_and(|r| psn.is_after_or_eq(r.base_psn))
        {
            self.res_hold = None;
        }
    }

    /// Makes resource `c` be sent again, and every later one after it, at once unless
    /// `partial`: a duplicate RDMA Read that asks for part of what is left of its read. A
    /// requester that asks for part of a read comes back for the rest before it takes any later
    /// response (it drops responses out of PSN order and asks again from the first one
    /// missing), so the later responses would all be dropped, and each request for the next
    /// part would send them again. They wait for their own duplicates instead. rdma_rxe's
    /// requester always asks for the whole rest.
    pub(crate) fn reschedule(&mut self, c: u64, partial: bool) {
        self.res_hold = partial.then(|| c.wrapping_add(1));
        let pending = self.res_tail.wrapping_sub(self.res_send);
        let back = self.res_tail.wrapping_sub(c);
        if back > pending {
            self.res_send = c;
            // Every later response goes out again from its first packet (a read already sent,
            // in full or in part, would otherwise resume at its old offset).
            let mut k = c.wrapping_add(1);
            let mut n = 0;
            while k != self.res_tail && n < MAX_RESOURCES {
                let i = res_slot(k);
                if let Some(Resource {
                    kind: ResKind::Read { sent, .. },
                    ..
                }) = self.res.get_mut(i)
                {
                    *sent = 0;
                }
                k = k.wrapping_add(1);
                n += 1;
            }
        }
    }
}
