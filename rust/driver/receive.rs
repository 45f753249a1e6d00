// SPDX-License-Identifier: GPL-2.0

//! The receive path. Each device's [`DevShared`] is an [`RxListener`] of the UDP tunnel: the
//! tunnel's `encap_rcv` (softirq) hands every RoCEv2 packet to the device whose port netdev it
//! arrived on, which handles it right there, as rdma_rxe does (no work-item hop per packet,
//! which costs latency): parse the IP and UDP headers, check the ICRC, decode the transport
//! headers, find the QP and run the protocol core under the QP lock. Only a stream's bulk
//! packets may go to their QP's receive queue instead, to be handled on another CPU, in order
//! (`qp/rx_queue.rs`); that is decided on a glance at the BTH, and such a packet is decoded
//! and checked where it is handled. Anything malformed is counted and dropped: a remote peer
//! can only make us drop packets.

use super::counters::Counters;
use super::dev_shared::DevShared;
use super::held_payload::Payload;
use super::mcast::MAX_QP_ATTACH;
use super::rx_hold::RxQp;
use crate::net::roce::{IcrcAt, RoceHead, UDP_HLEN};
use crate::net::skb::Skb;
use crate::net::udp_tunnel::{self, RxListener};
use crate::rvcore::apm::{NetHeader, PathMatch};
use crate::rvcore::wire::bth::{Bth, RawBth, MULTICAST_QPN};
use crate::rvcore::wire::{DecodeError, Glance, Headers};
use core::ops::Range;
use core::sync::atomic::Ordering;
use kernel::{prelude::*, sync::Arc};

/// Installs the receive dispatch; call once in module init, before any device exists.
pub fn rx_init() {
    udp_tunnel::rx_init();
}

/// Makes `dev` receive packets arriving on its ports.
pub fn rx_listen(dev: &Arc<DevShared>) -> Result {
    udp_tunnel::listen(dev.clone())
}

impl RxListener for DevShared {
    fn accepts(&self, skb: &Skb) -> bool {
        self.ports.iter().any(|p| skb.arrived_for(p))
    }

    fn receive(&self, skb: Skb) {
        packet(self, skb);
    }
}

/// A packet handled at once: its headers, parsed, with nothing borrowed from its skb (so that
/// the ICRC check, [`Inbound::icrc_ok`], may mask the packet's headers in place); the payload
/// is [`Inbound::payload`]. Offsets are into the data of the skb parsed, which stays at the IP
/// header (nothing after [`ip_udp`] pulls or pushes it). The transport headers are decoded
/// apart, where the caller keeps them ([`decode`]): a header stack moved is a `memcpy`.
struct Inbound {
    /// The port it arrived for (1-based).
    port: u8,
    /// Where the payload lies in the skb's data, or why the transport headers did not decode.
    decoded: Result<Range<usize>, DecodeError>,
    /// The BTH of an opcode the decoder does not know.
    raw: Option<RawBth>,
    dest_qp: u32,
    /// Where the ICRC lies.
    icrc: IcrcAt,
    /// Bytes of the IP header (at the start of the skb's data).
    ip_hlen: usize,
    /// The IP source, as a GID.
    src_gid: [u8; 16],
    /// The IP destination (the group, for DestQP 0xFFFFFF).
    dst_gid: [u8; 16],
    /// Bytes of the whole IP packet, as `sent_bytes` and rdma_rxe count them.
    ip_len: usize,
}

impl Inbound {
    fn icrc_ok(&self, skb: &mut Skb, c: &Counters) -> bool {
        let ok = skb.icrc_ok(&self.icrc);
        if !ok {
            Counters::inc(&c.icrc_errors);
        }
        ok
    }

    /// The path it arrived on (`data`: the data of the skb parsed).
    fn path_match(&self, data: &[u8]) -> PathMatch {
        let ip = data.get(..self.ip_hlen).unwrap_or(&[]);
        path_match(self.port, self.src_gid, self.dst_gid, ip)
    }

    /// The decoded headers `h` ([`decode`]'s) and the payload, in `skb` (the skb parsed).
    fn payload<'a, 'h>(
        &self,
        h: &'h Option<Headers>,
        skb: &'a Skb,
    ) -> Result<(&'h Headers, Payload<'a>), DecodeError> {
        match (&self.decoded, h) {
            (Ok(range), Some(h)) if range.end <= skb.len() => {
                Ok((h, Payload::of(skb, range.clone())))
            }
            (Ok(_), _) => Err(DecodeError::Truncated),
            (Err(e), _) => Err(*e),
        }
    }
}

/// The port a packet arrived for (1-based), and whether it arrived on that port's own netdev.
/// With `direct_only`, only a packet that arrived on a port's netdev is taken (the check then
/// needs no RCU read side). What is for no port is counted and `None`.
fn port_of(dev: &DevShared, skb: &Skb, direct_only: bool) -> Option<(u8, bool)> {
    let on_port = |direct: bool| {
        dev.ports.iter().position(|p| {
            if direct {
                skb.came_from(p)
            } else {
                skb.arrived_for(p)
            }
        })
    };
    let (i, direct) = match on_port(true) {
        Some(i) => (i, true),
        None if direct_only => (usize::MAX, false),
        None => (on_port(false).unwrap_or(usize::MAX), false),
    };
    match u8::try_from(i + 1) {
        Ok(port) => Some((port, direct)),
        Err(_) => {
            Counters::inc(&dev.counters.rx_malformed);
            None
        }
    }
}

/// Whether a packet [`Skb::to_network_header`] prepared is handled with its payload left in
/// its fragments, copied from there straight into memory ([`Payload::InSkb`]), not made linear
/// first: one whose payload the core takes held, for a QP (not a multicast group), whose
/// headers lie in its linear part.
fn payload_in_frags(skb: &Skb, g: Option<&Glance>) -> bool {
    g.is_some_and(|g| {
        g.dest_qp != MULTICAST_QPN
            && g.opcode.info().operation.payload_may_be_held()
            && skb.headers_linear(g)
    })
}

/// Makes a packet [`Skb::to_network_header`] prepared linear unless it is handled `in_frags`
/// ([`payload_in_frags`]); one that cannot be is counted and `false`.
fn prepare(c: &Counters, skb: &mut Skb, in_frags: bool) -> bool {
    if in_frags || skb.to_ip_packet().is_ok() {
        return true;
    }
    Counters::inc(&c.rx_malformed);
    false
}

/// A packet's IP and UDP headers, as parsed ([`Skb::roce_head`]), and where its ICRC lies; a
/// malformed packet is counted and `None`.
fn ip_udp<'a>(c: &Counters, skb: &'a Skb, in_frags: bool) -> Option<(RoceHead<'a>, IcrcAt)> {
    let parsed = if in_frags {
        skb.roce_head().map(|h| {
            let at = IcrcAt::of_head(&h);
            (h, at)
        })
    } else {
        skb.roce_headers()
            .map(|rx| (RoceHead::of(&rx), rx.icrc_at()))
    };
    match parsed {
        Ok(p) => Some(p),
        Err(_) => {
            Counters::inc(&c.rx_malformed);
            None
        }
    }
}

/// Decodes the transport headers of a packet whose IP and UDP headers are `rx` into `h`, without
/// the ICRC. What is malformed is counted and `None`.
fn decode(
    c: &Counters,
    port: u8,
    skb: &Skb,
    (rx, icrc): (&RoceHead<'_>, IcrcAt),
    h: &mut Option<Headers>,
) -> Option<Inbound> {
    // The payload's place in the skb's data, which starts at the IP header.
    let base = rx.ip_header.len() + UDP_HLEN;
    let decoded = Bth::decode(rx.udp_payload_head).and_then(|bth| {
        h.insert(Headers::new(bth))
            .decode_after_bth_of_prefix(rx.udp_payload_head, rx.udp_payload_len)
            .map(|r| r.start + base..r.end + base)
    });
    // An opcode the decoder does not know still has a BTH: the QP decides (an RC QP answers a
    // reserved RC opcode with an Invalid Request NAK, seed 001); anything else is malformed.
    let raw = match decoded {
        Err(DecodeError::UnknownOpcode(_)) => RawBth::decode(rx.udp_payload_head).ok(),
        _ => None,
    };
    let dest_qp = match (&decoded, h.as_ref(), &raw) {
        (Ok(_), Some(h), _) => h.bth.dest_qp,
        (Err(_), _, Some(b)) => b.dest_qp,
        _ => {
            count_bad(c, skb, &icrc);
            return None;
        }
    };
    Some(Inbound {
        port,
        decoded,
        raw,
        dest_qp,
        icrc,
        ip_hlen: rx.ip_header.len(),
        src_gid: rx.src_gid,
        dst_gid: rx.dst_gid,
        ip_len: base + rx.udp_payload_len,
    })
}

/// The QP a packet for `qpn` goes to, on `port`; `None` for the multicast QPN.
fn qp_for(dev: &DevShared, qpn: u32, port: u8) -> Option<RxQp<'_>> {
    match qpn {
        MULTICAST_QPN => None,
        qpn => dev.qp(qpn, port),
    }
}

/// Processes one packet that arrived on a port of `dev` (softirq context). A bulk packet of a
/// stream may go to its QP's receive queue instead, on a glance at its BTH, with its headers
/// neither parsed nor decoded and its ICRC unchecked: whoever takes it from there parses and
/// checks it before anything acts on it ([`queued`]).
pub fn packet(dev: &DevShared, mut skb: Skb) {
    let burst = skb.more_follow();
    let c = &dev.counters;
    let Some((port, direct)) = port_of(dev, &skb, false) else {
        return;
    };
    if skb.to_network_header().is_err() {
        Counters::inc(&c.rx_malformed);
        return;
    }
    // Only a packet that arrived on the port's own netdev is queued (`queued` takes no other).
    // The glance finds the BTH without parsing the IP and UDP headers in full: a queued packet
    // is parsed where it is handled, and a payload in pages (one sent by reference) is made
    // linear there too, not on this CPU.
    let glance = if direct { skb.glance() } else { None };
    let mut qp = None;
    if let Some(g) = &glance {
        qp = qp_for(dev, g.dest_qp, port);
        if let Some(q) = &qp {
            if let Some(to) = q.queues_rx(g, burst) {
                q.queue_rx(skb, to);
                return;
            }
        }
    }
    let in_frags = !skb.is_linear() && payload_in_frags(&skb, glance.as_ref());
    if !prepare(c, &mut skb, in_frags) {
        return;
    }
    let Some((rx, at)) = ip_udp(c, &skb, in_frags) else {
        return;
    };
    let mut h = None;
    let Some(p) = decode(c, port, &skb, (&rx, at), &mut h) else {
        return;
    };
    if glance.is_none() {
        qp = qp_for(dev, p.dest_qp, port);
    }
    if deliver(dev, &p, &h, &mut skb, qp) {
        skb.consume();
    }
}

/// Handles a packet at once: checks its ICRC and hands it to its QP (or multicast group).
/// Returns whether it was handed on; else it is a drop, counted.
fn deliver(
    dev: &DevShared,
    p: &Inbound,
    h: &Option<Headers>,
    skb: &mut Skb,
    qp: Option<RxQp<'_>>,
) -> bool {
    let c = &dev.counters;
    if !p.icrc_ok(skb, c) {
        return false;
    }
    let pm = p.path_match(skb.data());
    if p.dest_qp == MULTICAST_QPN {
        return multicast(dev, p.port, &p.dst_gid, p.payload(h, skb), &pm, p.ip_len);
    }
    let Some(qp) = qp else {
        Counters::inc(&c.rx_no_qp);
        return false;
    };
    count_rcvd(c, p.ip_len);
    match (p.payload(h, skb), p.raw) {
        (Ok((h, payload)), _) => qp.receive(h, payload, &pm),
        (Err(_), Some(b)) => qp.receive_unsupported(&b, &pm),
        (Err(_), None) => return false,
    }
    true
}

/// A packet taken from a QP's receive queue, parsed and its ICRC checked ([`queued`]): what
/// the QP hands to the core, with nothing borrowed from the skb (the work item checks a batch
/// outside the QP lock and hands it to the core under it).
pub(crate) struct Checked {
    /// The transport headers.
    pub(crate) h: Headers,
    /// Where the payload lies in the skb's data (in its linear part or its fragments).
    pub(crate) payload: Range<usize>,
    /// The path it arrived on.
    pub(crate) pm: PathMatch,
}

/// A packet taken from a QP's receive queue, for that QP: its headers decoded and its ICRC
/// checked (only a packet that arrived on a port's netdev is queued), into `slot`, which is
/// `None` after when it is to be dropped (counted). Any context, no lock needed. The headers are
/// decoded where they stay ([`Headers::decode_after_bth`]), without an [`Inbound`]: every packet of a
/// stream comes this way, and each move of a header stack is a `memcpy`.
pub(crate) fn queued(dev: &DevShared, skb: &mut Skb, slot: &mut Option<Checked>) {
    *slot = None;
    let c = &dev.counters;
    let Some((port, _)) = port_of(dev, skb, true) else {
        return;
    };
    let in_frags = !skb.is_linear() && skb.to_network_header().is_ok() && {
        let g = skb.glance();
        payload_in_frags(skb, g.as_ref())
    };
    if !prepare(c, skb, in_frags) {
        return;
    }
    let Some((rx, icrc)) = ip_udp(c, skb, in_frags) else {
        return;
    };
    let Ok(bth) = Bth::decode(rx.udp_payload_head) else {
        count_bad(c, skb, &icrc);
        return;
    };
    let checked = slot.insert(Checked {
        h: Headers::new(bth),
        payload: 0..0,
        pm: path_match(port, rx.src_gid, rx.dst_gid, rx.ip_header),
    });
    let Ok(range) = checked
        .h
        .decode_after_bth_of_prefix(rx.udp_payload_head, rx.udp_payload_len)
    else {
        count_bad(c, skb, &icrc);
        *slot = None;
        return;
    };
    let base = rx.ip_header.len() + UDP_HLEN;
    let ip_len = base + rx.udp_payload_len;
    let payload = range.start + base..range.end + base;
    if !skb.icrc_ok(&icrc) {
        Counters::inc(&c.icrc_errors);
        *slot = None;
        return;
    }
    if skb.len() < payload.end {
        Counters::inc(&c.rx_malformed);
        *slot = None;
        return;
    }
    checked.payload = payload;
    count_rcvd(c, ip_len);
}

/// The path a packet arrived on: its port, GIDs and IP header's fields.
fn path_match(port: u8, sgid: [u8; 16], dgid: [u8; 16], ip_header: &[u8]) -> PathMatch {
    PathMatch {
        port_num: port,
        sgid,
        dgid,
        net: NetHeader::from_ip_header(ip_header).unwrap_or_default(),
    }
}

/// Counts a packet whose transport headers do not decode as what it most likely is: a
/// corrupted packet (its ICRC is wrong) or a malformed one.
fn count_bad(c: &Counters, skb: &Skb, icrc: &IcrcAt) {
    if skb.icrc_ok_in_pieces(icrc) {
        Counters::inc(&c.rx_malformed);
    } else {
        Counters::inc(&c.icrc_errors);
    }
}

fn count_rcvd(c: &Counters, len: usize) {
    Counters::inc(&c.rcvd_pkts);
    c.rcvd_bytes.fetch_add(len as u64, Ordering::Relaxed);
}

/// A packet for DestQP 0xFFFFFF: every UD QP attached to its destination GID on this device
/// gets it (each QP's own checks then apply: state, P_Key, Q_Key, a receive WQE). A group
/// nobody joined here is counted as a packet for no QP. Returns whether any QP was handed it.
fn multicast(
    dev: &DevShared,
    port: u8,
    group: &[u8; 16],
    decoded: Result<(&Headers, Payload<'_>), DecodeError>,
    pm: &PathMatch,
    len: usize,
) -> bool {
    let c = &dev.counters;
    let mut qpns = [0; MAX_QP_ATTACH];
    let n = dev.mcast.members(group, &mut qpns);
    let Ok((h, payload)) = decoded else {
        Counters::inc(&c.rx_malformed);
        return false;
    };
    if n == 0 {
        Counters::inc(&c.rx_no_qp);
        return false;
    }
    count_rcvd(c, len);
    let mut handed = false;
    for &qpn in &qpns[..n] {
        if let Some(qp) = dev.qp(qpn, port) {
            qp.receive(h, payload, pm);
            handed = true;
        }
    }
    handed
}
