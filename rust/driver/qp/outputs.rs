// SPDX-License-Identifier: GPL-2.0

//! What the protocol core asks of a QP ([`Outputs`]), done for real under the QP lock: packets
//! built and queued for sending after the lock ([`super::transmit`]), completions written to
//! the CQs, async events and completion wake-ups collected for delivery after the lock, timers
//! recorded in the QP's table ([`super::timers`]).

use super::routes::RouteCache;
use super::timers::QpTimers;
use super::transmit;
use super::{Pending, QpShared};
use crate::driver::counters::Counters;
use crate::driver::mr_table::{OdpFault, QpMemory};
use crate::ib::queue::Ring;
use crate::rvcore::apm::PathInfo;
use crate::rvcore::events::{
    AsyncEvent, Completion, CqFull, CqKind, Outputs, PayloadSource, Timer, WcStatus,
};
use crate::rvcore::wire::Headers;

/// The [`Outputs`] of one locked section of a QP.
pub(crate) struct QpOut<'a> {
    qp: &'a QpShared,
    /// Whether built packets may be queued for sending once the QP lock is dropped; not where
    /// the caller cannot transmit (kernel posts): the core then retransmits on its timer.
    can_send: bool,
    timers: &'a mut QpTimers,
    pending: &'a mut Pending,
    /// The memory packets' payloads are gathered from (the QP's MRs and its inline area): the
    /// one the core's accesses of the same section go through, so that a response reads the MR
    /// its request resolved without looking it up again.
    mem: &'a QpMemory<'a>,
    /// Routes by path; `None` where the caller cannot transmit.
    routes: Option<&'a RouteCache>,
    /// Set when a packet was dropped for want of a route, which only a lookup outside the lock
    /// can provide.
    pub(crate) need_route: bool,
    /// A datagram destination that had no route (the packet was dropped): to look up.
    pub(crate) missing_route: Option<PathInfo>,
    /// A user QP's receive ring, whose WQEs each receive completion retires.
    rq: Option<&'a Ring>,
    /// On-demand-paging memory a packet's payload was not found in (the packet was not built).
    pub(crate) odp_fault: Option<OdpFault>,
}

impl<'a> QpOut<'a> {
    /// Outputs for `qp`, with its lock held by the caller.
    pub(crate) fn new(
        qp: &'a QpShared,
        can_send: bool,
        timers: &'a mut QpTimers,
        pending: &'a mut Pending,
        mem: &'a QpMemory<'a>,
        routes: Option<&'a RouteCache>,
    ) -> Self {
        Self {
            qp,
            can_send,
            timers,
            pending,
            mem,
            routes,
            need_route: false,
            missing_route: None,
            rq: None,
            odp_fault: None,
        }
    }

    /// The same, for a QP whose receive WQEs come from the user ring `rq`.
    pub(crate) fn with_rq(mut self, rq: Option<&'a Ring>) -> Self {
        self.rq = rq;
        self
    }

    /// The QP's number.
    pub(crate) fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// The SRQ's limit event is due (delivered after the lock).
    pub(crate) fn srq_limit(&mut self) {
        self.pending.srq_limit = true;
    }

    fn push_event(&mut self, ev: u32) {
        let p = &mut *self.pending;
        if let Some(slot) = p.events.get_mut(p.nevents) {
            *slot = ev;
            p.nevents += 1;
        }
    }
}

impl Outputs for QpOut<'_> {
    fn transmit(&mut self, path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>) {
        let counters = &self.qp.dev.counters;
        let (true, Some(routes)) = (self.can_send, self.routes) else {
            Counters::inc(&counters.send_err);
            return;
        };
        if transmit::port_down(self.qp, routes, path) {
            Counters::inc(&counters.tx_port_down);
            return;
        }
        // `mem` is the section's: a fault the core's access recorded stays there, apart from
        // this packet's (`odp_fault`).
        let earlier = self.mem.take_fault();
        let (built, need_route) = transmit::build(
            self.qp,
            routes,
            self.mem,
            path,
            headers,
            payload,
            &mut self.odp_fault,
        );
        self.mem.put_fault(earlier);
        if need_route {
            // A datagram's destination is its own; a connected QP's is one of its paths.
            if headers.deth.is_some() {
                self.missing_route = Some(*path);
            } else {
                self.need_route = true;
            }
        }
        match built {
            Some(skb) => self.qp.stream(headers.info().is_request).push(skb),
            None if need_route => Counters::inc(&counters.tx_no_route),
            None => Counters::inc(&counters.send_err),
        }
    }

    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull> {
        if let (CqKind::Recv, Some(rq)) = (cq, self.rq) {
            // rdma-core may post into the slot as soon as it sees the completion (as with
            // rdma_rxe, whose responder retires the WQE before writing the CQE).
            rq.retire_one();
        }
        let notify = self
            .qp
            .cq(cq)
            .push(wc, self.qp.wc_qp(), wc.wakes_solicited())?;
        let i = match cq {
            CqKind::Send => 0,
            CqKind::Recv => 1,
        };
        if notify {
            self.pending.notify[i] = true;
        }
        let c = &self.qp.dev.counters;
        match wc.status {
            WcStatus::RetryExcErr => Counters::inc(&c.retry_exceeded_err),
            WcStatus::RnrRetryExcErr => Counters::inc(&c.retry_rnr_exceeded_err),
            _ => {}
        }
        Ok(())
    }

    fn async_event(&mut self, ev: AsyncEvent, cq: Option<CqKind>) {
        match (ev, cq) {
            (AsyncEvent::CqErr, Some(k)) => {
                let i = match k {
                    CqKind::Send => 0,
                    CqKind::Recv => 1,
                };
                self.pending.cq_err[i] = true;
            }
            (AsyncEvent::CqErr, None) => {}
            (ev, _) => self.push_event(ev as u32),
        }
    }

    fn set_timer(&mut self, which: Timer, deadline_ns: u64) {
        self.timers.set(which.into(), deadline_ns);
    }

    fn cancel_timer(&mut self, which: Timer) {
        self.timers.stop(which.into());
    }
}
