// SPDX-License-Identifier: GPL-2.0

//! What the protocol core asks of a QP, done for real: packets built as RoCEv2 skbs (sent by
//! the caller once the QP lock is dropped), completions written to the CQs, async events and
//! completion wake-ups collected for delivery after the lock, timers recorded for the hrtimer.

use super::counters::Counters;
use super::datapath::DevShared;
use super::memory::QpMemory;
use super::qp::{Pending, QpShared};
use crate::net::skb::SkbQueue;
use crate::net::tx::{self, Route, TxParams};
use crate::net::udp_tunnel::TunnelRef;
use crate::rvcore::apm::PathInfo;
use crate::rvcore::events::{
    AsyncEvent, Completion, CqFull, CqKind, Outputs, PayloadSource, Timer, WcStatus,
};
use crate::rvcore::memory::MemError;
use crate::rvcore::wire::{pad_count, Headers};
use kernel::prelude::*;

/// RoCEv2 overhead in front of the IB payload inside the netdev MTU (worst case: IPv6, UDP,
/// BTH, RETH or AtomicETH, ICRC).
const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 28 + 4;

/// The largest IB MTU (bytes) the netdev of `port` carries.
pub fn port_mtu(dev: &DevShared, port: u8) -> u32 {
    let mtu = dev.port_netdev(port).map_or(1500, |n| n.mtu());
    let payload = mtu.saturating_sub(ROCE_OVERHEAD);
    [4096u32, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= payload)
        .unwrap_or(256)
}

/// The RoCEv2 UDP source port of a connection (`rdma_get_udp_sport()`): the flow label, or
/// one computed from both QP numbers, folded into 0xC000..=0xFFFF.
pub fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label & 0xF_FFFF != 0 {
        flow_label & 0xF_FFFF
    } else {
        let mut v = u64::from(lqpn).wrapping_mul(u64::from(rqpn));
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xF_FFFF) as u32
    };
    let low = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    (low | 0xC000) as u16
}

/// A route kept for one path (source, destination, port).
pub struct CachedRoute {
    port: u8,
    sgid: [u8; 16],
    dgid: [u8; 16],
    route: Route,
}

/// The routes of a QP's primary and alternate paths.
pub type RouteCache = [Option<CachedRoute>; 2];

/// The transmit parameters of a path.
fn tx_params<'a>(qp: &'a QpShared, path: &PathInfo, dest_qp: u32) -> Option<TxParams<'a>> {
    Some(TxParams {
        ndev: qp.dev.port_netdev(path.port_num)?,
        src_gid: path.sgid,
        dst_gid: path.dgid,
        src_port: udp_sport(path.flow_label, qp.qpn, dest_qp),
        tclass: path.traffic_class,
        ttl: if path.hop_limit == 0 {
            64
        } else {
            path.hop_limit
        },
        flow_label: path.flow_label,
    })
}

fn tunnel<'a>(qp: &'a QpShared, port: u8) -> Option<&'a TunnelRef> {
    usize::from(port)
        .checked_sub(1)
        .and_then(|i| qp.tunnels.get(i))
}

/// The cached route of `path`, if valid.
/// The route stored for `path`, valid or not.
fn stored<'c>(cache: &'c RouteCache, path: &PathInfo) -> Option<&'c Route> {
    cache
        .iter()
        .flatten()
        .find(|c| c.port == path.port_num && c.sgid == path.sgid && c.dgid == path.dgid)
        .map(|c| &c.route)
}

fn cached<'c>(cache: &'c RouteCache, path: &PathInfo) -> Option<&'c Route> {
    stored(cache, path).filter(|r| r.is_valid())
}

fn store(cache: &mut RouteCache, path: &PathInfo, route: Route) {
    let i = cache
        .iter()
        .position(|c| c.as_ref().is_some_and(|c| c.port == path.port_num))
        .or_else(|| cache.iter().position(|c| c.is_none()))
        .unwrap_or(0);
    cache[i] = Some(CachedRoute {
        port: path.port_num,
        sgid: path.sgid,
        dgid: path.dgid,
        route,
    });
}

/// Looks up the routes of `paths` that have none cached (process context, no lock held:
/// lookups need IRQs enabled). Returns them for [`install_routes`].
pub fn lookup_routes(
    qp: &QpShared,
    cache_has: impl Fn(&PathInfo) -> bool,
    paths: &[PathInfo],
) -> KVec<(PathInfo, Route)> {
    let mut found = KVec::new();
    for p in paths.iter().filter(|p| p.port_num != 0 && !cache_has(p)) {
        let (Some(params), Some(tun)) = (tx_params(qp, p, 0), tunnel(qp, p.port_num)) else {
            continue;
        };
        if let Ok(r) = Route::lookup(tun, &params) {
            let _ = found.push((*p, r), GFP_KERNEL);
        }
    }
    found
}

/// Whether `cache` holds a valid route for `path`.
pub fn has_route(cache: &RouteCache, path: &PathInfo) -> bool {
    cached(cache, path).is_some()
}

/// Stores routes found by [`lookup_routes`].
pub fn install_routes(cache: &mut RouteCache, found: KVec<(PathInfo, Route)>) {
    for (p, r) in found {
        store(cache, &p, r);
    }
}

/// The [`Outputs`] of one locked section of a QP.
pub struct QpOut<'a> {
    qp: &'a QpShared,
    /// Where built packets go (sent in order once the QP lock is dropped); `None` where the
    /// caller cannot transmit (kernel posts): the core then retransmits on its timer.
    tx: Option<&'a SkbQueue>,
    /// Timer deadlines (retransmit, RNR, ring poll).
    pub deadlines: &'a mut [u64; 3],
    pending: &'a mut Pending,
    inline: &'a [u8],
    /// Routes by path; `None` where the caller cannot transmit.
    routes: Option<&'a mut RouteCache>,
    /// Set when a packet was dropped for want of a route, which only a lookup outside the lock
    /// can provide.
    pub need_route: bool,
}

impl<'a> QpOut<'a> {
    /// Outputs for `qp`, with its lock held by the caller.
    pub fn new(
        qp: &'a QpShared,
        tx: Option<&'a SkbQueue>,
        deadlines: &'a mut [u64; 3],
        pending: &'a mut Pending,
        inline: &'a [u8],
        routes: Option<&'a mut RouteCache>,
    ) -> Self {
        Self {
            qp,
            tx,
            deadlines,
            pending,
            inline,
            routes,
            need_route: false,
        }
    }

    /// The QP's number.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// The SRQ's limit event is due (delivered after the lock).
    pub fn srq_limit(&mut self) {
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

/// Copies a packet's payload from memory into `buf`.
fn gather(mem: &QpMemory<'_>, payload: PayloadSource<'_>, buf: &mut [u8]) -> Result<(), MemError> {
    match payload {
        PayloadSource::None => Ok(()),
        PayloadSource::Gather { sges, offset, .. } => mem.gather(sges, offset, buf),
        PayloadSource::Remote { rkey, va, .. } => mem.read_remote(rkey, va, buf),
    }
}

impl Outputs for QpOut<'_> {
    fn transmit(&mut self, path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>) {
        let qp = self.qp;
        let counters = &qp.dev.counters;
        let room = self.tx.is_some();
        let plen = match payload {
            PayloadSource::None => 0,
            PayloadSource::Gather { len, .. } | PayloadSource::Remote { len, .. } => len as usize,
        };
        let mut h = *headers;
        h.bth.pad_count = pad_count(plen);
        let len = h.encoded_len() + plen + usize::from(h.bth.pad_count);
        let (true, Some(params), Some(tun), Some(routes)) = (
            room,
            tx_params(qp, path, h.bth.dest_qp),
            tunnel(qp, path.port_num),
            self.routes.as_deref_mut(),
        ) else {
            Counters::inc(&counters.send_err);
            return;
        };
        // No lookup runs here, with IRQs off (it may enable BH, see `net::tx`): the work item
        // looks routes up after the lock. Meanwhile a stale route still carries the packet
        // (we hold its dst; one whose device is gone drops it, as a lost packet), so a route
        // change costs no retransmission; with none at all the transport timer resends it.
        let Some(route) = stored(routes, path) else {
            self.need_route = true;
            Counters::inc(&counters.send_err);
            return;
        };
        if !route.is_valid() {
            self.need_route = true;
        }
        let mem = QpMemory::new(&qp.dev.mrs, qp.pd_id, self.inline);
        let built = tx::build_routed(tun, route, &params, len, |buf| {
            let n = h.encode(buf).map_err(|_| EINVAL)?;
            let rest = buf.get_mut(n..).ok_or(EINVAL)?;
            let (body, pad) = rest.split_at_mut(plen.min(rest.len()));
            gather(&mem, payload, body).map_err(|_| EFAULT)?;
            pad.fill(0);
            Ok(())
        });
        match (built, self.tx) {
            (Ok(skb), Some(tx)) => tx.push(skb),
            _ => Counters::inc(&counters.send_err),
        }
    }

    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull> {
        let notify = self.qp.cq(cq).push(wc, self.qp.wc_qp(), false)?;
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
        let i = match which {
            Timer::Retransmit => 0,
            Timer::Rnr => 1,
        };
        // 0 means "unset": a deadline at time 0 fires at 1 ns.
        self.deadlines[i] = deadline_ns.max(1);
    }

    fn cancel_timer(&mut self, which: Timer) {
        let i = match which {
            Timer::Retransmit => 0,
            Timer::Rnr => 1,
        };
        self.deadlines[i] = 0;
    }
}
