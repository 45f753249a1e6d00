// SPDX-License-Identifier: GPL-2.0

//! Building and sending RoCEv2 packets: route lookup, the IP/UDP encapsulation (rxe's
//! `prepare_udp_hdr` / `prepare_ipv4_hdr` / `prepare_ipv6_hdr` sequence), the ICRC, and
//! `ip_local_out` / `ip6_local_out`.
//!
//! Contexts: [`build`] and [`build_routed`] only allocate with `GFP_ATOMIC` and never sleep, so
//! they may run under an irqsave spinlock; but route lookups of both families may enable BH
//! (`ip6_pol_route`, and IPv4's `rt_cache_route` when it caches a next hop, both end in
//! `local_bh_enable`), so [`Route::lookup`] must run with IRQs enabled (do it before taking
//! the lock and keep the [`Route`]). [`Skb::send`] must run with IRQs and BH enabled.

use super::crc32::crc32_le;
use super::fill::Fill;
use super::netdev::NetDev;
use super::paged::Frags;
use super::roce::{self, ICRC_LEN, IPV4_HLEN, IPV6_HLEN, UDP_HLEN};
use super::skb::Skb;
use super::udp_tunnel::TunnelRef;
use crate::bindings as b;
use crate::rvcore::icrc;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU16, Ordering};
use kernel::prelude::*;

/// The addressing of one RoCEv2 packet.
pub struct TxParams<'a> {
    /// The egress net device (the port's netdev).
    pub ndev: &'a NetDev,
    /// Source GID (an IPv4-mapped GID `::ffff:a.b.c.d` for IPv4). Borrowed: a copy per packet
    /// costs more than the field reads it saves.
    pub src_gid: &'a [u8; 16],
    /// Destination GID (IPv4-mapped for IPv4).
    pub dst_gid: &'a [u8; 16],
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 TOS / IPv6 traffic class.
    pub tclass: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// IPv6 flow label (20 bits; ignored for IPv4).
    pub flow_label: u32,
    /// IPv4 identification, from the sender's [`IpIds`]; `None`: the IP layer picks one
    /// (`__ip_select_ident`). Ignored for IPv6.
    pub ip_id: Option<u16>,
}

impl TxParams<'_> {
    /// The IPv4 source and destination when both GIDs are IPv4-mapped (else the path is IPv6).
    pub fn ipv4(&self) -> Option<([u8; 4], [u8; 4])> {
        Some((
            roce::ipv4_from_gid(self.src_gid)?,
            roce::ipv4_from_gid(self.dst_gid)?,
        ))
    }

    fn net(&self) -> *mut b::net {
        // SAFETY: the device is live (`&NetDev`), and so is its namespace.
        unsafe { b::rvr_dev_net(self.ndev.as_raw()) }
    }

    fn ifindex(&self) -> c_int {
        // SAFETY: the device is live.
        unsafe { b::rvr_netdev_ifindex(self.ndev.as_raw()) }
    }
}

/// A route (a counted `struct dst_entry`) for one source/destination pair, cacheable per path:
/// check it with [`Route::is_valid`] before reuse.
///
/// # Invariants
///
/// `dst` carries one reference, dropped on drop.
pub struct Route {
    dst: NonNull<b::dst_entry>,
    ipv4: bool,
    cookie: u32,
}

// SAFETY: dst references may be used and released on any CPU.
unsafe impl Send for Route {}
// SAFETY: `&Route` methods only read the dst (`dst_check`, `dst_clone`), which is thread-safe.
unsafe impl Sync for Route {}

impl Route {
    /// Looks up the route for `p` (egress restricted to `p.ndev`, protocol UDP). Must run with
    /// IRQs enabled (see the module doc); it does not sleep.
    /// `EHOSTUNREACH` when there is no route (or the source address is not local).
    pub fn lookup(tun: &TunnelRef, p: &TxParams<'_>) -> Result<Route> {
        let net = p.net();
        if let Some((src, dst)) = p.ipv4() {
            let mut fl = b::flowi4::default();
            fl.__fl_common.flowic_oif = p.ifindex();
            fl.__fl_common.flowic_proto = roce::IPPROTO_UDP;
            // `__be32` holds the address bytes in memory order.
            fl.saddr = u32::from_ne_bytes(src);
            fl.daddr = u32::from_ne_bytes(dst);
            // SAFETY: `net` is live and `fl` valid for the call; the lookup does not sleep.
            let rt = unsafe { b::rvr_ip_route_output_key(net, &mut fl) };
            let rt = kernel::error::from_err_ptr(rt).map_err(|_| super::errno(b::EHOSTUNREACH))?;
            // SAFETY: `rt` is a valid route with one reference; `&rt->dst` is its dst_entry.
            let dst = unsafe { b::rvr_rtable_dst(rt) };
            // INVARIANT: the lookup returned one reference.
            let dst = NonNull::new(dst).ok_or(EINVAL)?;
            Ok(Route {
                dst,
                ipv4: true,
                cookie: 0,
            })
        } else {
            let mut fl6 = b::flowi6::default();
            fl6.__fl_common.flowic_oif = p.ifindex();
            fl6.__fl_common.flowic_proto = roce::IPPROTO_UDP;
            fl6.saddr.in6_u.u6_addr8 = *p.src_gid;
            fl6.daddr.in6_u.u6_addr8 = *p.dst_gid;
            fl6.flowlabel = ((u32::from(p.tclass) << 20) | (p.flow_label & 0xf_ffff)).to_be();
            let sk6 = tun.sk6();
            // SAFETY: `net` is live, `fl6` valid for the call, `sk6` is null or the live IPv6
            // socket of the namespace (kept by `tun`); the caller has IRQs enabled (documented).
            let dst = unsafe { b::ip6_dst_lookup_flow(net, sk6, &mut fl6, core::ptr::null()) };
            let dst =
                kernel::error::from_err_ptr(dst).map_err(|_| super::errno(b::EHOSTUNREACH))?;
            // INVARIANT: the lookup returned one reference.
            let mut route = Route {
                dst: NonNull::new(dst).ok_or(EINVAL)?,
                ipv4: false,
                cookie: 0,
            };
            // SAFETY: `dst` is a live IPv6 route (an `rt6_info`).
            if unsafe { b::rvr_dst_error(dst) } != 0 {
                return Err(super::errno(b::EHOSTUNREACH));
            }
            // SAFETY: as above.
            route.cookie = unsafe { b::rvr_rt6_get_cookie(dst) };
            Ok(route)
        }
    }

    /// Whether the route may still be used (`dst_check`); else look it up again.
    pub fn is_valid(&self) -> bool {
        // SAFETY: we hold a reference on the dst (type invariant); `dst_check` does not take or
        // drop references.
        !unsafe { b::rvr_dst_check(self.dst.as_ptr(), self.cookie) }.is_null()
    }

    /// Whether the route went with its device (taken down, or gone: released, or moved to the
    /// blackhole device): it discards every packet, and only a new lookup finds a way out.
    pub fn is_dead(&self) -> bool {
        // SAFETY: we hold a reference on the dst (type invariant); the helper only reads it.
        unsafe { b::rvr_dst_dead(self.dst.as_ptr()) }
    }

    /// Whether packets on this route leave through `dev` (a route to a local address leaves
    /// through `lo` instead).
    pub fn leaves_by(&self, dev: &NetDev) -> bool {
        // SAFETY: we hold a reference on the dst (type invariant) and `dev` is live; the helper
        // only compares the dst's device pointer.
        unsafe { b::rvr_dst_leaves_by(self.dst.as_ptr(), dev.as_raw()) }
    }

    /// Whether this is an IPv4 route.
    pub fn is_ipv4(&self) -> bool {
        self.ipv4
    }

    /// A new reference to the dst, for `skb_dst_set`.
    fn clone_dst(&self) -> *mut b::dst_entry {
        // SAFETY: we hold a reference, so taking another is allowed.
        unsafe { b::rvr_dst_clone(self.dst.as_ptr()) }
    }
}

impl Clone for Route {
    fn clone(&self) -> Route {
        // INVARIANT: `clone_dst` took a new reference for the copy.
        Route {
            dst: NonNull::new(self.clone_dst()).unwrap_or(self.dst),
            ipv4: self.ipv4,
            cookie: self.cookie,
        }
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold one reference, dropped once here.
        unsafe { b::dst_release(self.dst.as_ptr()) };
    }
}

/// Builds a RoCEv2 packet with a fresh route lookup: [`Route::lookup`] then [`build_routed`].
/// Never sleeps; IPv4 may run with IRQs disabled. For IPv6 with IRQs disabled it fails with
/// `EAGAIN` (look the route up beforehand and use [`build_routed`]).
pub fn build(
    tun: &TunnelRef,
    p: &TxParams<'_>,
    transport_len: usize,
    fill: impl FnOnce(&mut Fill<'_>) -> Result,
) -> Result<Skb> {
    // SAFETY: reading the IRQ state has no preconditions.
    if p.ipv4().is_none() && unsafe { b::rvr_irqs_disabled() } {
        return Err(EAGAIN);
    }
    let route = Route::lookup(tun, p)?;
    build_routed(tun, &route, p, transport_len, fill)
}

/// Builds a RoCEv2 packet along `route`: exactly `transport_len` bytes written by `fill` (BTH,
/// extension headers, payload and pad; `EINVAL` for any other count), then the ICRC, UDP (port
/// 4791 from `p.src_port`, checksum 0) and IP headers, `skb->dev`/`protocol`, the dst and the
/// owner socket. `GFP_ATOMIC` only, never sleeps: callable with IRQs disabled and spinlocks
/// held. Send the result with [`Skb::send`] after dropping the locks. `ENETDOWN` when the namespace's sockets are gone, `EINVAL` when the
/// route's family does not match the GIDs, `EMSGSIZE` for more than an IP datagram holds.
pub fn build_routed(
    tun: &TunnelRef,
    route: &Route,
    p: &TxParams<'_>,
    transport_len: usize,
    fill: impl FnOnce(&mut Fill<'_>) -> Result,
) -> Result<Skb> {
    let lens = Lens::of(tun, route, p, transport_len)?;
    let mut skb = Skb::alloc_tx(p.ndev, lens.ip_hlen + UDP_HLEN, transport_len + ICRC_LEN)?;
    skb.put_with(transport_len + ICRC_LEN, |f| {
        fill(f)?;
        // Exactly the transport: the ICRC follows (zeroed until computed).
        if f.remaining() != ICRC_LEN {
            return Err(EINVAL);
        }
        f.copy(&[0; ICRC_LEN])
    })?;
    let pkt = ip_udp_headers(&mut skb, route, p, &lens)?;
    // ICRC over the finished headers (the IPv4 identification is covered).
    let split = pkt.len().checked_sub(ICRC_LEN).ok_or(EINVAL)?;
    let (covered, trailer) = pkt.split_at_mut(split);
    let crc = roce::compute_icrc_in_place(covered, route.ipv4);
    trailer.copy_from_slice(&icrc::to_wire(crc.ok_or(EINVAL)?));
    Ok(owned_by(skb, tun, route))
}

/// [`build_routed`] of a packet whose payload goes by reference: `headers` writes exactly the
/// `header_len` bytes of the transport headers, `payload` appends exactly `payload_len` bytes
/// of pages to the [`Frags`] it is given, then `pad` zero bytes and the ICRC follow in a
/// fragment of their own. The ICRC reads the payload where it lies, so no byte of it is copied.
/// Any error leaves no packet (`EMSGSIZE`: more pieces than an skb holds).
pub fn build_routed_paged(
    tun: &TunnelRef,
    route: &Route,
    p: &TxParams<'_>,
    layout: &PagedLayout,
    headers: impl FnOnce(&mut Fill<'_>) -> Result,
    payload: impl FnOnce(&mut Frags<'_>) -> Result,
) -> Result<Skb> {
    let PagedLayout {
        header_len,
        payload_len,
        pad,
    } = *layout;
    let transport_len = header_len + payload_len + pad;
    let lens = Lens::of(tun, route, p, transport_len)?;
    let mut skb = Skb::alloc_tx(p.ndev, lens.ip_hlen + UDP_HLEN, header_len)?;
    skb.put_with(header_len, |f| {
        headers(f)?;
        if !f.is_full() {
            return Err(EINVAL);
        }
        Ok(())
    })?;
    let mut frags = Frags::new(&mut skb);
    payload(&mut frags)?;
    if frags.len() != payload_len {
        return Err(EINVAL);
    }
    let pkt = ip_udp_headers(&mut skb, route, p, &lens)?;
    let crc = roce::icrc_state_in_place(pkt, route.ipv4).ok_or(EINVAL)?;
    let crc = skb.frags_crc32_le(crc);
    let crc = match pad {
        0 => crc,
        _ => crc32_le(crc, [0u8; 3].get(..pad).ok_or(EINVAL)?),
    };
    let mut trailer = [0u8; 3 + ICRC_LEN];
    trailer[pad..pad + ICRC_LEN].copy_from_slice(&icrc::to_wire(!crc));
    skb.append_frag_bytes(&trailer[..pad + ICRC_LEN])?;
    Ok(owned_by(skb, tun, route))
}

/// The transport of a packet [`build_routed_paged`] builds: BTH and extension headers, payload
/// (by reference) and pad, in bytes.
#[derive(Clone, Copy)]
pub struct PagedLayout {
    /// The transport headers' bytes.
    pub header_len: usize,
    /// The payload's bytes.
    pub payload_len: usize,
    /// The pad's bytes (0 to 3).
    pub pad: usize,
}

/// The lengths of a packet's IP and UDP headers and fields, checked against what an IP
/// datagram holds, for a packet along `route` that may be built (its namespace's sockets live,
/// the route's family the GIDs').
struct Lens {
    ip_hlen: usize,
    udp_len: u16,
    /// IPv4's total length, IPv6's payload length.
    ip_len: u16,
}

impl Lens {
    fn of(tun: &TunnelRef, route: &Route, p: &TxParams<'_>, transport_len: usize) -> Result<Lens> {
        if !tun.is_live() {
            return Err(super::errno(b::ENETDOWN));
        }
        if p.ipv4().is_some() != route.ipv4 {
            return Err(EINVAL);
        }
        let ip_hlen = if route.ipv4 { IPV4_HLEN } else { IPV6_HLEN };
        let udp_len = UDP_HLEN + transport_len + ICRC_LEN;
        let udp_len16 = u16::try_from(udp_len).map_err(|_| EMSGSIZE)?;
        let ip_len = if route.ipv4 {
            u16::try_from(IPV4_HLEN + udp_len).map_err(|_| EMSGSIZE)?
        } else {
            udp_len16
        };
        Ok(Lens {
            ip_hlen,
            udp_len: udp_len16,
            ip_len,
        })
    }
}

/// IP and UDP (rxe prepare_ipv4_hdr / prepare_ipv6_hdr, prepare_udp_hdr): the headers' room,
/// device, protocol, a scrubbed skb, the route and a clear IP control block, in one call; then
/// their bytes. Returns the linear part, from the IP header.
fn ip_udp_headers<'s>(
    skb: &'s mut Skb,
    route: &Route,
    p: &TxParams<'_>,
    lens: &Lens,
) -> Result<&'s mut [u8]> {
    match p.ipv4() {
        Some((src, dst)) => {
            let pkt = push_ip_udp::<{ IPV4_HLEN + UDP_HLEN }>(skb, p.ndev, Some(route))?;
            let (ip, udp) = split_headers::<IPV4_HLEN>(&mut *pkt)?;
            roce::write_udp(udp, p.src_port, lens.udp_len);
            roce::write_ipv4(ip, lens.ip_len, p.tclass, p.ttl, src, dst);
            match p.ip_id {
                Some(id) => ip[4..6].copy_from_slice(&id.to_be_bytes()),
                // SAFETY: `ip` is the IPv4 header of the skb; the namespace is live (device).
                None => unsafe { b::__ip_select_ident(p.net(), ip.as_mut_ptr().cast(), 1) },
            }
            Ok(pkt)
        }
        None => {
            let pkt = push_ip_udp::<{ IPV6_HLEN + UDP_HLEN }>(skb, p.ndev, Some(route))?;
            let (ip, udp) = split_headers::<IPV6_HLEN>(&mut *pkt)?;
            roce::write_udp(udp, p.src_port, lens.udp_len);
            roce::write_ipv6(
                ip,
                lens.ip_len,
                p.tclass,
                p.flow_label,
                p.ttl,
                p.src_gid,
                p.dst_gid,
            );
            Ok(pkt)
        }
    }
}

/// `skb`, charged to the namespace's socket of the route's family.
fn owned_by(skb: Skb, tun: &TunnelRef, route: &Route) -> Skb {
    // SAFETY: the skb is ours with no owner yet; the socket is live while `tun` is (it holds a
    // reference), and `skb_set_owner_w` takes its own (write memory) reference.
    unsafe { b::skb_set_owner_w(skb.as_raw(), tun.owner_sk(route.ipv4)) };
    skb
}

/// Prepends the UDP header and the IP header to `skb`, whose data is the UDP payload, and sets
/// it up for sending along `route` (device, protocol, a scrubbed skb, the dst, a clear IP
/// control block): `H` is both headers' length, which also tells the family (IPv4 for
/// `IPV4_HLEN + UDP_HLEN`, else IPv6). Returns the whole packet, the headers zeroed; `EMSGSIZE`
/// (the skb unchanged) if its headroom is short or a clone shares its data.
pub(super) fn push_ip_udp<'s, const H: usize>(
    skb: &'s mut Skb,
    ndev: &NetDev,
    route: Option<&Route>,
) -> Result<&'s mut [u8]> {
    let (ip_hlen, proto) = if H == IPV4_HLEN + UDP_HLEN {
        (IPV4_HLEN, b::ETH_P_IP)
    } else if H == IPV6_HLEN + UDP_HLEN {
        (IPV6_HLEN, b::ETH_P_IPV6)
    } else {
        return Err(EINVAL);
    };
    let dst = route.map_or(core::ptr::null_mut(), |r| r.dst.as_ptr());
    // SAFETY: the skb is live and exclusively ours (`&mut`); `ndev` is live; `dst` is null or
    // a dst we hold a reference on while `route` is borrowed (the helper takes the skb's own).
    let p = unsafe {
        b::rvr_skb_tx_headers(
            skb.as_raw(),
            ndev.as_raw(),
            (proto as u16).to_be(),
            dst,
            ip_hlen as u32,
        )
    };
    if p.is_null() {
        return Err(EMSGSIZE);
    }
    // SAFETY: the helper returned `skb->data` after pushing `H` bytes of headroom, which are
    // ours to write; a byte array has alignment 1.
    unsafe { p.cast::<[u8; H]>().write([0; H]) };
    let len = skb.headlen();
    // SAFETY: `p .. p + len` is the skb's linear data, which no clone shares (the helper
    // checked) and which `skb`'s exclusive borrow keeps ours for `'s`. Its first `H` bytes were
    // just written and the rest was put, so all of it is initialised.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, len) })
}

/// The IP header (`IP` bytes) and the UDP header at the start of a packet.
fn split_headers<const IP: usize>(pkt: &mut [u8]) -> Result<(&mut [u8; IP], &mut [u8; UDP_HLEN])> {
    let (ip, rest) = pkt.split_first_chunk_mut::<IP>().ok_or(EINVAL)?;
    let (udp, _) = rest.split_first_chunk_mut::<UDP_HLEN>().ok_or(EINVAL)?;
    Ok((ip, udp))
}

/// The IPv4 identifications of one stream of packets: consecutive from a random start, as
/// TCP numbers a connected socket's. A [`Burst`] takes only packets numbered in sequence,
/// because its segmentation numbers them so. The packets carry DF and are never reassembled,
/// so the numbers need not be unique across streams.
pub struct IpIds(AtomicU16);

impl IpIds {
    /// A random start.
    pub fn new() -> Self {
        // SAFETY: `get_random_u16` may be called in any context.
        Self(AtomicU16::new(unsafe { b::get_random_u16() }))
    }

    /// The next identification.
    pub fn next(&self) -> u16 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for IpIds {
    fn default() -> Self {
        Self::new()
    }
}

/// Most bytes one [`Burst`] holds: the IPv4 total length and the IPv6 payload length are
/// 16-bit, and a veth takes GSO packets up to 64 KiB by default.
const BURST_MAX_LEN: usize = 64_000;
/// Most packets one [`Burst`] holds.
const BURST_MAX_PACKETS: u32 = 64;

/// Consecutive packets of one flow sent as one: a UDP GSO skb that holds the later packets,
/// whole, in its fragment list (`SKB_GSO_FRAGLIST`, as GRO builds for forwarding). The IP
/// layer and a veth carry it as one packet. The stack splits it where it would segment it (at
/// the receiving UDP socket, or for a device that cannot carry it), back into the packets as
/// built: each keeps its UDP header and payload, and its IP header gets the length and checksum
/// for its size and the first packet's identification plus its place. So a packet follows only
/// with the next identification, and the ICRC computed when it was built holds on the wire.
///
/// The burst also keeps GSO's plain layout: every packet but the last is as long as the first,
/// and all share the first's IP header but for length, identification and checksum. A burst
/// whose geometry something on the way changed (a BPF program that pulls bytes out of the
/// fragment list) is then cut at the first's size with the first's headers copied
/// (`__udp_gso_segment`), which gives the same packets again (UDP checksums aside, which the
/// ICRC leaves out). A veth with an XDP program takes GSO off its peer, which then splits the
/// burst before sending. A burst forms only where the route's device has no queueing
/// discipline: a qdisc would lose or delay it as one packet.
///
/// # Invariants
///
/// `tail` is null or the last skb of `head`'s fragment list, which `head` owns. `ip_hlen` is
/// the IP header length of every packet in the burst.
pub struct Burst {
    head: Skb,
    tail: *mut b::sk_buff,
    /// The first packet's length (its IP packet).
    first_len: usize,
    packets: u32,
    bytes: usize,
    ip_hlen: usize,
    next_id: u16,
    /// The last packet was shorter than the first: nothing may follow it.
    closed: bool,
    /// Whether the route's device queues nothing; found out when a second packet comes.
    unqueued: Option<bool>,
}

impl Burst {
    /// A burst of one packet made by [`build_routed`].
    pub fn new(head: Skb) -> Self {
        let d = head.data();
        let (ip_hlen, id) = match d.first().map(|v| v >> 4) {
            Some(4) => (
                IPV4_HLEN,
                d.get(4..6).map_or(0, |b| u16::from_be_bytes([b[0], b[1]])),
            ),
            _ => (IPV6_HLEN, 0),
        };
        let bytes = head.len();
        // INVARIANT: no fragment list yet; `ip_hlen` is the header length of the only packet.
        Burst {
            bytes,
            first_len: bytes,
            head,
            tail: core::ptr::null_mut(),
            packets: 1,
            ip_hlen,
            next_id: id.wrapping_add(1),
            closed: false,
            unqueued: None,
        }
    }

    /// How many packets the burst holds.
    pub fn packets(&self) -> u32 {
        self.packets
    }

    /// The IP bytes of its packets, as they will be on the wire.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `skb` (made by [`build_routed`]) may follow: the same IP header but for length,
    /// identification and checksum, the next IPv4 identification, the same ports, route and
    /// owner, no longer than the first packet and not after a shorter one, and room left.
    fn may_follow(&self, skb: &Skb) -> bool {
        let (h, n) = (self.head.data(), skb.data());
        let l = self.ip_hlen;
        let same = |r: core::ops::Range<usize>| {
            let (a, b) = (h.get(r.clone()), n.get(r));
            a.is_some() && a == b
        };
        let header_ok = if l == IPV4_HLEN {
            // Version 4 with no options, TOS, TTL, UDP, the addresses and the ports.
            n.first() == Some(&0x45)
                && same(0..2)
                && same(8..10)
                && same(12..24)
                && n.get(4..6) == Some(&self.next_id.to_be_bytes()[..])
        } else {
            // Version 6, traffic class and flow label, UDP as the next header (no extension
            // headers), hop limit, addresses and ports.
            n.first().map(|v| v >> 4) == Some(6)
                && same(0..4)
                && n.get(6) == Some(&17)
                && same(6..44)
        };
        let s = self.head.as_raw();
        let t = skb.as_raw();
        // SAFETY: both skbs are live; the helper only reads their fields.
        let same_dst = unsafe { b::rvr_skb_dst(s) == b::rvr_skb_dst(t) };
        let owner = self.head.sk_raw();
        let same_owner = !owner.is_null() && owner == skb.sk_raw();
        // Its IP and UDP headers in the linear part, to be pulled (a payload in pages stays).
        let headers_linear = skb.headlen() >= l + UDP_HLEN;
        header_ok
            && same_dst
            && same_owner
            && headers_linear
            && !self.closed
            && skb.len() <= self.first_len
            && self.packets < BURST_MAX_PACKETS
            && self.head.len() + skb.len() - (l + UDP_HLEN) <= BURST_MAX_LEN
    }

    /// Whether the packets leave by a device with no queueing discipline. A qdisc that queues
    /// would lose, duplicate or delay the burst as one packet: through one (`tc netem`
    /// emulating a lossy link), each packet goes alone, as it would from rdma_rxe.
    fn unqueued(&mut self) -> bool {
        let head = self.head.as_raw();
        // SAFETY: the head is live; the helper reads its route's device under RCU.
        *self
            .unqueued
            .get_or_insert_with(|| unsafe { b::rvr_skb_out_unqueued(head) })
    }

    /// Appends `skb` (made by [`build_routed`]) if it may follow; otherwise gives it back.
    pub fn push(&mut self, mut skb: Skb) -> core::result::Result<(), Skb> {
        let len = skb.len();
        let fits = self.may_follow(&skb) && self.unqueued();
        if !fits || skb.pull(self.ip_hlen + UDP_HLEN).is_err() {
            return Err(skb);
        }
        self.bytes += len;
        self.closed = len < self.first_len;
        let head = self.head.as_raw();
        // SAFETY: both skbs are live and have the same owner socket (`may_follow`). The skb's
        // charge on it passes to the head, whose truesize takes the skb's in the append right
        // after, so the socket is uncharged exactly once, when the head is freed. `tail` is
        // null or the last skb of the head's list (type invariant), and the list takes
        // ownership of `skb`.
        unsafe {
            b::rvr_skb_pass_owner(head, skb.as_raw());
            let raw = skb.into_raw();
            b::rvr_skb_frag_list_append(head, self.tail, raw);
            // INVARIANT: `raw` is now the last skb of the list.
            self.tail = raw;
        }
        self.packets += 1;
        self.next_id = self.next_id.wrapping_add(1);
        Ok(())
    }

    /// The skb to send with [`Skb::send`]: the packet itself, or the GSO packet of them all.
    pub fn finish(mut self) -> Skb {
        if self.packets > 1 {
            let l = self.ip_hlen;
            let first = self.first_len.saturating_sub(l + UDP_HLEN);
            // The UDP length covers every packet until the split gives each its own (the first
            // gets 8 + `first`).
            let total = u16::try_from(self.head.len() - l).unwrap_or(u16::MAX);
            // Never `None`: the head was built here and no clone of it exists yet.
            if let Some(len) = self.head.data_mut().and_then(|d| d.get_mut(l + 4..l + 6)) {
                len.copy_from_slice(&total.to_be_bytes());
            }
            // SAFETY: the skb is ours, its fragment list holds `packets - 1` packets, and the
            // first one's UDP payload is `first` bytes long.
            unsafe { b::rvr_skb_set_udp_gso_list(self.head.as_raw(), first as u32, self.packets) };
        }
        self.head
    }
}

/// What the IP layer did with a sent packet (`NET_XMIT_*`); loss is for the transport to recover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XmitStatus {
    /// Queued for transmission (`NET_XMIT_SUCCESS`).
    Sent,
    /// Dropped (`NET_XMIT_DROP`).
    Dropped,
    /// Queued, but congestion was signalled (`NET_XMIT_CN`).
    Congested,
}

impl Skb {
    /// Sends a packet made by [`build`] / [`build_routed`] (`ip_local_out` / `ip6_local_out`).
    /// Must be called with IRQs and BH enabled (never under an irqsave lock). Consumes the skb in
    /// every case; a negative errno from the IP layer is `Err`.
    pub fn send(self) -> Result<XmitStatus> {
        let (dev, sk, proto) = (self.dev_raw(), self.sk_raw(), self.protocol());
        if dev.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the skb's device is live while its dst (set by `build_routed`) holds it.
        let net = unsafe { b::rvr_dev_net(dev) };
        let ret = if u32::from(proto) == b::ETH_P_IP {
            // SAFETY: `self` is a built IPv4 packet; ownership passes to the IP layer.
            unsafe { b::ip_local_out(net, sk, self.into_raw()) }
        } else if u32::from(proto) == b::ETH_P_IPV6 {
            // SAFETY: `self` is a built IPv6 packet; ownership passes to the IP layer.
            unsafe { b::ip6_local_out(net, sk, self.into_raw()) }
        } else {
            return Err(EINVAL);
        };
        match ret {
            0 => Ok(XmitStatus::Sent),
            1 => Ok(XmitStatus::Dropped),
            2 => Ok(XmitStatus::Congested),
            e if e < 0 => Err(Error::from_errno(e)),
            _ => Ok(XmitStatus::Dropped),
        }
    }
}
