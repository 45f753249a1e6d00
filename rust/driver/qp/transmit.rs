// SPDX-License-Identifier: GPL-2.0

//! The transmit path of a QP. Under the QP lock the core's packets are built as RoCEv2 skbs
//! ([`build`], called by [`QpOut`](super::outputs::QpOut)) and queued on one of the QP's two
//! streams ([`TxStream`]: requests, responses); after the lock, [`QpShared::flush_tx`] sends
//! each stream through the UDP tunnel in the order it was built, whichever context built it,
//! and without letting a later packet overtake an earlier one on the way (see
//! [`crate::net::backlog`]).

use super::paged_hint::PAGED_MIN;
use super::run_flag::RunFlag;
use super::work_delay::QueuedAt;
use super::{routes, QpShared};
use crate::driver::counters::Counters;
use crate::driver::dev_shared::DevShared;
use crate::driver::mr_table::{OdpFault, QpMemory};
use crate::ib::attrs::PortState;
use crate::ib::qp::QpType as IbQpType;
use crate::net::backlog;
use crate::net::backlog::LastBatch;
use crate::net::fill::Fill;
use crate::net::skb::{Skb, SkbQueue};
use crate::net::tx::{self, Burst, IpIds, PagedLayout, TxParams};
use crate::net::udp_tunnel::TunnelRef;
use crate::rvcore::apm::PathInfo;
use crate::rvcore::events::PayloadSource;
use crate::rvcore::memory::MemError;
use crate::rvcore::wire::{pad_count, Headers};
use crate::sync::workqueue;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{prelude::*, sync::Arc, workqueue::WorkItem};

/// RoCEv2 overhead in front of the IB payload inside the netdev MTU (worst case: IPv6, UDP,
/// BTH, RETH or AtomicETH, ICRC).
const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 28 + 4;

/// The largest IB MTU (bytes) the netdev of `port` carries.
pub(super) fn port_mtu(dev: &DevShared, port: u8) -> u32 {
    let mtu = dev.port_netdev(port).map_or(1500, |n| n.mtu());
    let payload = mtu.saturating_sub(ROCE_OVERHEAD);
    [4096u32, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= payload)
        .unwrap_or(256)
}

/// The RoCEv2 UDP source port of a connection (`rdma_get_udp_sport()`): the flow label, or
/// one computed from both QP numbers, folded into 0xC000..=0xFFFF.
fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
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

/// The transmit parameters of a path (`ip_id`: see [`TxParams::ip_id`]).
pub(super) fn tx_params<'a>(
    qp: &'a QpShared,
    path: &'a PathInfo,
    dest_qp: u32,
    ip_id: Option<u16>,
) -> Option<TxParams<'a>> {
    Some(TxParams {
        ndev: qp.dev.port_netdev(path.port_num)?,
        src_gid: &path.sgid,
        dst_gid: &path.dgid,
        src_port: udp_sport(path.flow_label, qp.qpn, dest_qp),
        tclass: path.traffic_class,
        ttl: if path.hop_limit == 0 {
            64
        } else {
            path.hop_limit
        },
        flow_label: path.flow_label,
        ip_id,
    })
}

/// The UDP tunnel of the namespace of `port`'s netdev.
pub(super) fn tunnel<'a>(qp: &'a QpShared, port: u8) -> Option<&'a TunnelRef> {
    usize::from(port)
        .checked_sub(1)
        .and_then(|i| qp.tunnels.get(i))
}

/// Whether `path` leaves through a port that is not ACTIVE (its stored route, if any, goes out
/// through that port's netdev, or went with it, not through `lo` to a local address): its
/// packets are not built (lost, as on the wire). Handing one to IP anyway would make a fresh
/// neighbour entry on a netdev that cannot answer ARP; when it fails, rdma_cm reports its
/// `NETEVENT_NEIGH_UPDATE` as `RDMA_CM_EVENT_UNREACHABLE` to every connected cm_id on that
/// netdev and destination (`cma_netevent_callback`), breaking connections a failover saved.
pub(super) fn port_down(qp: &QpShared, routes: &routes::RouteCache, path: &PathInfo) -> bool {
    let Some(ndev) = qp.dev.port_netdev(path.port_num) else {
        return false;
    };
    ndev.ib_port_state() != PortState::Active
        && routes::stored(routes, path).is_none_or(|r| r.leaves_by(ndev) || r.is_dead())
}

/// Builds the RoCEv2 packet of `headers` and `payload` (gathered from `mem`: the QP's MRs, or its
/// inline area for inline sends) on `path`, with the route stored in `routes`: `None` if it cannot
/// be built. Also returns whether a route lookup is due (none is stored for the path, or the
/// stored one is stale: it still carries the packet). A payload in on-demand-paging memory that
/// is no longer resident (invalidated since the WQE or request was checked) leaves the packet
/// unbuilt, as if lost, and the range in `fault`.
pub(super) fn build(
    qp: &QpShared,
    routes: &routes::RouteCache,
    mem: &QpMemory<'_>,
    path: &PathInfo,
    headers: &Headers,
    payload: PayloadSource<'_>,
    fault: &mut Option<OdpFault>,
) -> (Option<Skb>, bool) {
    let plen = match payload {
        PayloadSource::None => 0,
        PayloadSource::Gather { len, .. } | PayloadSource::Remote { len, .. } => len as usize,
        PayloadSource::Bytes8(_) => 8,
    };
    let h = headers;
    let pad = usize::from(pad_count(plen));
    let len = h.encoded_len() + plen + pad;
    // Numbered in its stream's sequence, so that a run of them may leave as one burst.
    let ip_id = qp.stream(h.info().is_request).ip_ids.next();
    let (Some(params), Some(tun)) = (
        tx_params(qp, path, h.bth.dest_qp, Some(ip_id)),
        tunnel(qp, path.port_num),
    ) else {
        return (None, false);
    };
    // No lookup runs here, with IRQs off (it may enable BH, see `net::tx`). A stale route
    // still carries the packet (we hold its dst), so a route change costs no retransmission.
    // A dead one (its netdev was taken down or is gone) would discard it: as good as none, and
    // with none the transport timer resends it.
    let Some(route) = routes::stored(routes, path).filter(|r| !r.is_dead()) else {
        return (None, true);
    };
    let stale = !route.is_valid();
    let encode = |f: &mut Fill<'_>| {
        let hdr = f.zeroed(h.encoded_len())?;
        match h.encode_for_payload(plen, hdr) {
            Ok(n) if n == hdr.len() => Ok(()),
            _ => Err(EINVAL),
        }
    };
    let paged = match payload {
        PayloadSource::Gather { sges, offset, .. }
            if plen >= PAGED_MIN && qp.tx_paged.worth_trying(qp.dev.tx_paged()) =>
        {
            let layout = PagedLayout {
                header_len: h.encoded_len(),
                payload_len: plen,
                pad,
            };
            let r = tx::build_routed_paged(tun, route, &params, &layout, encode, |frags| {
                mem.gather_pages(sges, offset, plen, frags)
                    .map_err(|_| EFAULT)
            });
            qp.tx_paged.tried(r.is_ok());
            r.ok()
        }
        _ => None,
    };
    if let Some(skb) = paged {
        Counters::inc(&qp.dev.counters.tx_paged_pkts);
        return (Some(skb), stale);
    }
    let built = tx::build_routed(tun, route, &params, len, |f| {
        encode(f)?;
        gather(mem, payload, plen, f).map_err(|_| EFAULT)?;
        // Most payloads need no pad: no call for nothing.
        if pad != 0 {
            f.zeroed(pad)?;
        }
        Ok(())
    });
    if let Some(f) = mem.take_fault() {
        *fault = Some(f);
    }
    (built.ok(), stale)
}

/// Appends a packet's `len`-byte payload from memory to `out`.
fn gather(
    mem: &QpMemory<'_>,
    payload: PayloadSource<'_>,
    len: usize,
    out: &mut Fill<'_>,
) -> Result<(), MemError> {
    match payload {
        PayloadSource::None => Ok(()),
        PayloadSource::Gather { sges, offset, .. } => mem.gather(sges, offset, len, out),
        PayloadSource::Remote { rkey, va, .. } => mem.read_remote(rkey, va, len, out),
        PayloadSource::Bytes8(b) => out.copy(&b).map_err(|_| MemError::OutOfBounds),
    }
}

/// One of a QP's two packet streams, in build order: its requests (SQ Logic) or its responses
/// (RQ Logic: ACKs, RDMA Read responses, Atomic ACKs). The peer orders each stream by its own
/// PSNs, so only the order within a stream matters: a response may leave from the CPU that
/// received the request while the user's next request leaves from the user's CPU.
#[pin_data]
pub(super) struct TxStream {
    #[pin]
    queue: SkbQueue,
    /// Set while one context sends `queue` (the others leave their packets to it).
    busy: AtomicBool,
    /// Where the last batch went (see [`crate::net::backlog`]).
    last_batch: LastBatch,
    /// The stream's hand-off work item is queued and its run has not begun: a flush that
    /// would hand off needs no call to queue it (the run sends what was queued before).
    handed_off: RunFlag,
    /// When a hand-off was queued that the stream has not sent since (for
    /// `tx_handoff_delay_max_us`).
    handoff_queued: QueuedAt,
    /// The IPv4 identifications of the stream's packets.
    ip_ids: IpIds,
}

impl TxStream {
    /// An empty stream.
    pub(super) fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(TxStream {
            queue <- SkbQueue::new(),
            busy: AtomicBool::new(false),
            last_batch: LastBatch::new(),
            handed_off: RunFlag::new(),
            handoff_queued: QueuedAt::default(),
            ip_ids: IpIds::new(),
        })
    }

    /// See [`LastBatch::held_elsewhere`].
    pub(super) fn held_elsewhere(&self) -> Option<u32> {
        self.last_batch.held_elsewhere()
    }

    /// Queues `skb` behind the stream's other packets.
    pub(super) fn push(&self, skb: Skb) {
        self.queue.push(skb);
    }

    /// Whether no packet waits (a snapshot).
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

impl QpShared {
    /// The stream of requests (`true`) or of responses.
    pub(super) fn stream(&self, requests: bool) -> &TxStream {
        if requests {
            &self.requests
        } else {
            &self.responses
        }
    }

    /// Sends the queued packets of both streams.
    pub(super) fn flush_tx(self: &Arc<Self>) {
        self.flush_stream(true);
        self.flush_stream(false);
    }

    /// Sends the queued requests from another CPU, the responses from here: for a doorbell
    /// whose WQEs are all unsignaled RDMA Reads or atomics, on a QP that keeps more than one
    /// outstanding. Nothing the application sees waits for their responses (a later signaled
    /// WR reports them), but sent from here the whole round trip would run inside the doorbell
    /// call (the veth's backlog runs when bottom halves come back on), so back-to-back Reads or
    /// atomics would go one round trip at a time. Sent from another CPU, the call returns once
    /// the requests are built and they overlap: their responses are received there, and the
    /// requests those free are built and sent there too.
    pub(super) fn flush_tx_elsewhere(self: &Arc<Self>) {
        let other = if self.requests.queue.is_empty() {
            None
        } else {
            crate::sync::bh::with_bh_disabled(|_| backlog::other_cpu())
        };
        match other {
            Some(cpu) => {
                Counters::inc(&self.dev.counters.tx_doorbell_handoffs);
                // Already queued: that run sends these too.
                let _ = workqueue::enqueue_on::<_, 1>(cpu, self.clone());
            }
            None => self.flush_stream(true),
        }
        self.flush_stream(false);
    }

    /// Sends the packets of one stream in the order they were built, unless another context is
    /// at it (it then sends ours too): from the CPU that sent the stream's last batch, or from
    /// this one once nothing sent before can be overtaken (see [`crate::net::backlog`]);
    /// otherwise the sending moves to that CPU.
    #[inline]
    pub(super) fn flush_stream(self: &Arc<Self>, requests: bool) {
        // Most flushes find nothing queued: no call for those.
        if !self.stream(requests).queue.is_empty() {
            self.flush_stream_queued(requests);
        }
    }

    /// [`Self::flush_stream`] of a stream that had packets queued at the caller's look.
    fn flush_stream_queued(self: &Arc<Self>, requests: bool) {
        let s = self.stream(requests);
        loop {
            // Nothing to send: no hand-off either. A context that queues a packet flushes after.
            if s.queue.is_empty() {
                return;
            }
            // The stream is taken, sent and freed, and a hand-off claimed and queued, with
            // bottom halves off: a task preempted in between would hold every other sender
            // off (or leave a claimed hand-off unqueued) until it ran again.
            let sent = crate::sync::bh::with_bh_disabled(|bh| {
                if s.busy.swap(true, Ordering::SeqCst) {
                    return false;
                }
                let prev = s.last_batch.get();
                let res = backlog::send_in_order(bh, prev, || self.send_queued(&s.queue));
                if let Ok(mark) = res {
                    s.last_batch.set(mark);
                    // A hand-off's wait ends with its run or with the stream's next send,
                    // from whichever context: one queued while its item still runs waits for
                    // that run, which sends the stream.
                    if mark != prev {
                        s.handoff_queued
                            .ran(&self.dev.counters.tx_handoff_delay_max_us);
                    }
                }
                // Free before bottom halves come back on: the softirq that then receives what
                // was sent (on a veth, on this CPU) sends what it builds itself. Held, it
                // would leave that to this context, which then loops for as long as the
                // stream flows, and stalls the stream whenever it is preempted. Freed before
                // the hand-off is queued, which could otherwise find the stream busy and
                // leave.
                s.busy.store(false, Ordering::SeqCst);
                match res {
                    Ok(_) => true,
                    Err(cpu) => {
                        self.hand_off(requests, cpu);
                        false
                    }
                }
            });
            if !sent {
                return;
            }
            // A packet queued after our last pop but before the store above found us busy. The
            // fence orders the store before the look (a store-load order), as the producer's
            // queueing is ordered before its test of `busy`: one of the two sees the other.
            core::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// Leaves a stream's sending to its hand-off work item on `cpu`: the CPU of the last batch,
    /// whose backlog still holds it.
    fn hand_off(self: &Arc<Self>, requests: bool, cpu: u32) {
        let s = self.stream(requests);
        Counters::inc(&self.dev.counters.tx_cpu_handoffs);
        // Queued and not yet begun (or already queued): that run sends these too.
        if s.handed_off.claim() {
            s.handoff_queued.mark();
            let _ = if requests {
                workqueue::enqueue_on::<_, 1>(cpu, self.clone())
            } else {
                workqueue::enqueue_on::<_, 2>(cpu, self.clone())
            };
        }
    }

    /// Sends what `queue` holds; returns how many packets left. With the `tx_burst` switch
    /// on, consecutive packets of an RC or UC QP leave as bursts ([`Burst`]); a datagram QP's
    /// packets each go to their own destination.
    fn send_queued(&self, queue: &SkbQueue) -> usize {
        let bursts = matches!(self.qp_type, IbQpType::Rc | IbQpType::Uc) && self.dev.tx_burst();
        let c = &self.dev.counters;
        let mut n = 0;
        let mut next = queue.pop_nonempty();
        while let Some(skb) = next.take() {
            let mut burst = Burst::new(skb);
            if bursts {
                while let Some(s) = queue.pop_nonempty() {
                    if let Err(s) = burst.push(s) {
                        next = Some(s);
                        break;
                    }
                }
            }
            let (packets, len) = (burst.packets() as usize, burst.bytes());
            match burst.finish().send() {
                Ok(_) => {
                    n += packets;
                    c.sent_pkts.fetch_add(packets as u64, Ordering::Relaxed);
                    c.sent_bytes.fetch_add(len as u64, Ordering::Relaxed);
                    if packets > 1 {
                        c.tx_burst_pkts.fetch_add(packets as u64, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    c.send_err.fetch_add(packets as u64, Ordering::Relaxed);
                }
            }
            if next.is_none() {
                next = queue.pop_nonempty();
            }
        }
        n
    }
}

impl QpShared {
    /// A hand-off run of a stream: from its start, a flush that would hand off queues the run
    /// again; then it sends.
    fn run_handoff(self: &Arc<Self>, requests: bool) {
        let s = self.stream(requests);
        s.handed_off.begin();
        s.handoff_queued
            .ran(&self.dev.counters.tx_handoff_delay_max_us);
        self.flush_stream(requests);
    }
}

impl WorkItem<1> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.run_handoff(true);
    }
}

impl WorkItem<2> for QpShared {
    type Pointer = Arc<QpShared>;

    fn run(this: Arc<QpShared>) {
        this.run_handoff(false);
    }
}
