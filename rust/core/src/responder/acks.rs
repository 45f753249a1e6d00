//! ACKs and credits (seed 003): the ACK/NAK a response carries, ACK coalescing, the initial
//! and unsolicited credit updates.

use crate::credit::{encode_credit, CREDIT_CODE_INVALID};
use crate::events::{Outputs, PayloadSource};
use crate::psn::Psn;
use crate::sg_pool::SgStore;
use crate::wire::{Aeth, Headers, Syndrome};
use crate::wqe::RecvSlot;

use super::resources::AckItem;
use super::{RqLogic, RxCtx, ACK_COALESCE};

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// The credit code every positive ACK carries (Table 17-8; 0x1F with an SRQ).
    pub fn credit_code(&self) -> u8 {
        if self.cfg.srq {
            CREDIT_CODE_INVALID
        } else {
            encode_credit(u32::try_from(self.credits()).unwrap_or(u32::MAX))
        }
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

    pub(super) fn ack(&self, psn: Psn) -> AckItem {
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

    /// After this end migrated on its own: an ACK of the last request received, queued behind
    /// any responses (never replacing a queued NAK), so that the peer sees a packet with
    /// MigReq=1 over the new path and migrates too (seed 000 steps 6-10). A duplicate ACK
    /// changes nothing at the peer's requester.
    pub fn announce<O: Outputs>(&mut self, ctx: &RxCtx<'_>, out: &mut O) {
        if self.frozen || self.cfg.uc || self.cfg.ud || self.pending_ack.is_some() {
            return;
        }
        let mut a = self.ack(self.epsn.prev());
        a.unsolicited = true;
        self.queue_ack(a, ctx, out);
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

    pub(super) fn after_packet<O: Outputs>(&mut self, h: &Headers, ctx: &RxCtx<'_>, out: &mut O) {
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
}
