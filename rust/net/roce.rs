// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 framing without pointers: IP/UDP header layout, GID <-> IP conversion, the ICRC with the
//! kernel's `crc32_le`, and the parser of a received IP packet. Safe code only; `skb.rs` and
//! `tx.rs` apply it to socket buffers.

use crate::crc32::crc32_le;
use crate::rvcore::icrc;
use kernel::prelude::*;

/// The RoCEv2 UDP destination port (IANA).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IPv4 header length (no options).
pub const IPV4_HLEN: usize = icrc::IPV4_HEADER_LEN;
/// IPv6 header length (no extension headers).
pub const IPV6_HLEN: usize = icrc::IPV6_HEADER_LEN;
/// UDP header length.
pub const UDP_HLEN: usize = icrc::UDP_HEADER_LEN;
/// ICRC trailer length.
pub const ICRC_LEN: usize = icrc::ICRC_LEN;

/// A received RoCEv2 packet, as parsed by [`parse_ip_packet`] / `Skb::parse_roce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceRx<'a> {
    /// The packet came over IPv4 (else IPv6).
    pub ipv4: bool,
    /// The IP source address as a GID (IPv4 as `::ffff:a.b.c.d`).
    pub src_gid: [u8; 16],
    /// The IP destination address as a GID (IPv4 as `::ffff:a.b.c.d`).
    pub dst_gid: [u8; 16],
    /// IPv4 TOS or IPv6 traffic class (DSCP and ECN).
    pub tclass: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The UDP payload from the first byte of the BTH up to, not including, the ICRC.
    pub transport: &'a [u8],
    /// The whole UDP payload: `transport` followed by the (checked) ICRC.
    pub udp_payload: &'a [u8],
}

/// The IPv4-mapped GID `::ffff:a.b.c.d` of an IPv4 address.
pub fn gid_from_ipv4(addr: [u8; 4]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&addr);
    gid
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), `None` for any other GID.
pub fn ipv4_from_gid(gid: &[u8; 16]) -> Option<[u8; 4]> {
    if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        Some([gid[12], gid[13], gid[14], gid[15]])
    } else {
        None
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The ICRC of a RoCEv2 packet (IBA A17.3.3), with the arch-accelerated `crc32_le`: the masked
/// IP, UDP and BTH headers from the core's mask helpers, then the rest of `transport` (BTH up to,
/// excluding, the ICRC). `None` when `transport` is shorter than a BTH.
pub fn compute_icrc(ip: icrc::IpHeader<'_>, udp: &[u8; UDP_HLEN], transport: &[u8]) -> Option<u32> {
    let bth: &[u8; icrc::BTH_LEN] = transport.get(..icrc::BTH_LEN)?.try_into().ok()?;
    let mut s = match ip {
        icrc::IpHeader::V4(h) => crc32_le(icrc::ICRC_SEED, &icrc::mask_ipv4(h)),
        icrc::IpHeader::V6(h) => crc32_le(icrc::ICRC_SEED, &icrc::mask_ipv6(h)),
    };
    s = crc32_le(s, &icrc::mask_udp(udp));
    s = crc32_le(s, &icrc::mask_bth(bth));
    s = crc32_le(s, transport.get(icrc::BTH_LEN..)?);
    Some(!s)
}

/// Writes a UDP header: source `sport`, destination 4791, length `udp_len`, checksum 0.
pub fn write_udp(buf: &mut [u8; UDP_HLEN], sport: u16, udp_len: u16) {
    buf[0..2].copy_from_slice(&sport.to_be_bytes());
    buf[2..4].copy_from_slice(&ROCE_V2_UDP_DPORT.to_be_bytes());
    buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
    buf[6..8].copy_from_slice(&[0, 0]);
}

/// Writes an IPv4 header (version 4, IHL 5, DF, protocol UDP); the identification and the
/// checksum are left 0 (`__ip_select_ident` and `ip_local_out` fill them).
pub fn write_ipv4(
    buf: &mut [u8; IPV4_HLEN],
    tot_len: u16,
    tos: u8,
    ttl: u8,
    src: [u8; 4],
    dst: [u8; 4],
) {
    buf[0] = 0x45;
    buf[1] = tos;
    buf[2..4].copy_from_slice(&tot_len.to_be_bytes());
    buf[4..6].copy_from_slice(&[0, 0]);
    buf[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    buf[8] = ttl;
    buf[9] = IPPROTO_UDP;
    buf[10..12].copy_from_slice(&[0, 0]);
    buf[12..16].copy_from_slice(&src);
    buf[16..20].copy_from_slice(&dst);
}

/// Writes an IPv6 header (next header UDP) as `ip6_flow_hdr` does: version 6, traffic class,
/// 20-bit flow label.
pub fn write_ipv6(
    buf: &mut [u8; IPV6_HLEN],
    payload_len: u16,
    tclass: u8,
    flow_label: u32,
    hop_limit: u8,
    src: &[u8; 16],
    dst: &[u8; 16],
) {
    let word = (6u32 << 28) | (u32::from(tclass) << 20) | (flow_label & 0xf_ffff);
    buf[0..4].copy_from_slice(&word.to_be_bytes());
    buf[4..6].copy_from_slice(&payload_len.to_be_bytes());
    buf[6] = IPPROTO_UDP;
    buf[7] = hop_limit;
    buf[8..24].copy_from_slice(src);
    buf[24..40].copy_from_slice(dst);
}

/// Parses a RoCEv2 packet that starts at its IP header: IPv4 without options and not a fragment,
/// or IPv6 with UDP as the next header; UDP to port 4791 whose length fits the IP payload and
/// holds a BTH and an ICRC; a correct ICRC. Bytes after the IP datagram (link padding) are
/// ignored. Any violation is `EINVAL` (the ICRC mismatch `EBADMSG`).
pub fn parse_ip_packet(pkt: &[u8]) -> Result<RoceRx<'_>> {
    let version = pkt.first().ok_or(EINVAL)? >> 4;
    let (ipv4, ip_hlen, ip_end) = match version {
        4 => {
            let tot = usize::from(be16(pkt, 2).ok_or(EINVAL)?);
            // IHL 5 only (the ICRC covers a 20-byte header); no fragments.
            if pkt[0] & 0x0f != 5 || be16(pkt, 6).ok_or(EINVAL)? & 0x3fff != 0 {
                return Err(EINVAL);
            }
            (true, IPV4_HLEN, tot)
        }
        6 => (
            false,
            IPV6_HLEN,
            IPV6_HLEN + usize::from(be16(pkt, 4).ok_or(EINVAL)?),
        ),
        _ => return Err(EINVAL),
    };
    if ip_end < ip_hlen + UDP_HLEN || ip_end > pkt.len() {
        return Err(EINVAL);
    }
    let (ip, rest) = pkt[..ip_end].split_at(ip_hlen);
    let (udp, ip_payload) = rest.split_at(UDP_HLEN);
    let udp: &[u8; UDP_HLEN] = udp.try_into().map_err(|_| EINVAL)?;
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if u16::from_be_bytes([udp[2], udp[3]]) != ROCE_V2_UDP_DPORT
        || udp_len < UDP_HLEN + icrc::BTH_LEN + ICRC_LEN
        || udp_len - UDP_HLEN > ip_payload.len()
    {
        return Err(EINVAL);
    }
    let udp_payload = &ip_payload[..udp_len - UDP_HLEN];
    let (transport, trailer) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
    let trailer: [u8; ICRC_LEN] = trailer.try_into().map_err(|_| EINVAL)?;

    let (src_gid, dst_gid, tclass, ttl, icrc_val) = if ipv4 {
        let h: &[u8; IPV4_HLEN] = ip.try_into().map_err(|_| EINVAL)?;
        if h[9] != IPPROTO_UDP {
            return Err(EINVAL);
        }
        let src = gid_from_ipv4([h[12], h[13], h[14], h[15]]);
        let dst = gid_from_ipv4([h[16], h[17], h[18], h[19]]);
        let c = compute_icrc(icrc::IpHeader::V4(h), udp, transport);
        (src, dst, h[1], h[8], c)
    } else {
        let h: &[u8; IPV6_HLEN] = ip.try_into().map_err(|_| EINVAL)?;
        if h[6] != IPPROTO_UDP {
            return Err(EINVAL);
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&h[8..24]);
        dst.copy_from_slice(&h[24..40]);
        let tclass = (h[0] << 4) | (h[1] >> 4);
        let c = compute_icrc(icrc::IpHeader::V6(h), udp, transport);
        (src, dst, tclass, h[7], c)
    };
    if icrc_val != Some(icrc::from_wire(trailer)) {
        return Err(super::errno(crate::bindings::EBADMSG));
    }
    Ok(RoceRx {
        ipv4,
        src_gid,
        dst_gid,
        tclass,
        ttl,
        transport,
        udp_payload,
    })
}
