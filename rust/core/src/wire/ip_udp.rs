//! The IP and UDP headers in front of a RoCEv2 BTH (IBA annex A17): parsing a received IP
//! packet down to its UDP payload, writing the headers of one to send, and the GID <-> IPv4
//! address mapping.
//!
//! Only the shapes RoCEv2 uses are accepted: IPv4 with a 20-byte header (the ICRC covers exactly
//! that) and not a fragment, or IPv6 with UDP as the next header; UDP to port 4791 with a
//! length that fits the IP payload and holds a BTH and an ICRC. The ICRC itself is not checked
//! here: [`IpUdp`] carries the pieces it covers (see [`crate::icrc`]).

use super::ROCE_V2_UDP_PORT;
use crate::icrc::UDP_HEADER_LEN;
use crate::icrc::{self, IpHeader, BTH_LEN, ICRC_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN};

/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// Why a buffer is not a RoCEv2 IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpUdpError {
    /// The buffer ends before the headers, or before the length the IP header gives.
    Truncated,
    /// Not IPv4 or IPv6, IPv4 with options or fragmented, or not UDP.
    UnsupportedIp,
    /// UDP not to port 4791, or a UDP length too short for a BTH and an ICRC or longer than the
    /// IP payload.
    BadUdp,
}

/// A received RoCEv2 IP packet, split into the pieces the transport and the ICRC need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpUdp<'a> {
    /// The IP and UDP headers, and where the UDP payload lies.
    pub head: IpUdpHead<'a>,
    /// The UDP payload from the first byte of the BTH up to, not including, the ICRC (at least
    /// a BTH long).
    pub transport: &'a [u8],
    /// The whole UDP payload: `transport` followed by the ICRC.
    pub udp_payload: &'a [u8],
    /// The ICRC the packet carries.
    pub icrc: u32,
}

impl IpUdp<'_> {
    /// Whether the packet came over IPv4 (else IPv6).
    pub fn is_ipv4(&self) -> bool {
        self.head.is_ipv4()
    }
}

impl IpUdpHead<'_> {
    /// Whether the packet came over IPv4 (else IPv6).
    pub fn is_ipv4(&self) -> bool {
        matches!(self.ip, IpHeader::V4(_))
    }
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
    // One compare of the whole prefix, not a loop over its bytes: this runs for every packet.
    if u128::from_be_bytes(*gid) >> 32 == 0xffff {
        Some([gid[12], gid[13], gid[14], gid[15]])
    } else {
        None
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The IP and UDP headers of a received RoCEv2 packet ([`parse_head`]), and where its UDP
/// payload lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpUdpHead<'a> {
    /// The IP header (IPv4 or IPv6).
    pub ip: IpHeader<'a>,
    /// The UDP header.
    pub udp: &'a [u8; UDP_HEADER_LEN],
    /// The IP source address as a GID (IPv4 as `::ffff:a.b.c.d`).
    pub src_gid: [u8; 16],
    /// The IP destination address as a GID (IPv4 as `::ffff:a.b.c.d`).
    pub dst_gid: [u8; 16],
    /// IPv4 TOS or IPv6 traffic class (DSCP and ECN).
    pub tclass: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// Where the UDP payload (BTH to ICRC, at least a BTH and an ICRC long) lies in the packet.
    pub udp_payload: core::ops::Range<usize>,
}

/// Parses a RoCEv2 packet that starts at its IP header (see the module documentation for what
/// is accepted). Bytes after the IP datagram (link padding) are ignored.
pub fn parse(pkt: &[u8]) -> Result<IpUdp<'_>, IpUdpError> {
    let head = parse_head(pkt, pkt.len())?;
    let udp_payload = pkt
        .get(head.udp_payload.clone())
        .ok_or(IpUdpError::Truncated)?;
    let (transport, trailer) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
    let trailer: [u8; ICRC_LEN] = trailer.try_into().map_err(|_| IpUdpError::Truncated)?;
    Ok(IpUdp {
        head,
        transport,
        udp_payload,
        icrc: icrc::from_wire(trailer),
    })
}

/// [`parse`] of a packet of `pkt_len` bytes of which `head` holds the first (the rest lies
/// elsewhere, in pages): `head` must hold the IP and UDP headers; the lengths they give are
/// checked against `pkt_len`.
pub fn parse_head(head: &[u8], pkt_len: usize) -> Result<IpUdpHead<'_>, IpUdpError> {
    use IpUdpError::*;
    let version = head.first().ok_or(Truncated)? >> 4;
    let (ip_hlen, ip_end) = match version {
        4 => {
            let tot = usize::from(be16(head, 2).ok_or(Truncated)?);
            // IHL 5 only (the ICRC covers a 20-byte header); no fragments.
            if head[0] & 0x0f != 5 || be16(head, 6).ok_or(Truncated)? & 0x3fff != 0 {
                return Err(UnsupportedIp);
            }
            (IPV4_HEADER_LEN, tot)
        }
        6 => (
            IPV6_HEADER_LEN,
            IPV6_HEADER_LEN + usize::from(be16(head, 4).ok_or(Truncated)?),
        ),
        _ => return Err(UnsupportedIp),
    };
    if ip_end < ip_hlen + UDP_HEADER_LEN || ip_end > pkt_len {
        return Err(Truncated);
    }
    let headers = head.get(..ip_hlen + UDP_HEADER_LEN).ok_or(Truncated)?;
    let (ip, udp) = headers.split_at(ip_hlen);
    let udp: &[u8; UDP_HEADER_LEN] = udp.try_into().map_err(|_| Truncated)?;
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if u16::from_be_bytes([udp[2], udp[3]]) != ROCE_V2_UDP_PORT
        || udp_len < UDP_HEADER_LEN + BTH_LEN + ICRC_LEN
        || udp_len > ip_end - ip_hlen
    {
        return Err(BadUdp);
    }
    let (ip, src_gid, dst_gid, tclass, ttl) = if version == 4 {
        let h: &[u8; IPV4_HEADER_LEN] = ip.try_into().map_err(|_| Truncated)?;
        if h[9] != IPPROTO_UDP {
            return Err(UnsupportedIp);
        }
        let src = gid_from_ipv4([h[12], h[13], h[14], h[15]]);
        let dst = gid_from_ipv4([h[16], h[17], h[18], h[19]]);
        (IpHeader::V4(h), src, dst, h[1], h[8])
    } else {
        let h: &[u8; IPV6_HEADER_LEN] = ip.try_into().map_err(|_| Truncated)?;
        if h[6] != IPPROTO_UDP {
            return Err(UnsupportedIp);
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&h[8..24]);
        dst.copy_from_slice(&h[24..40]);
        let tclass = (h[0] << 4) | (h[1] >> 4);
        (IpHeader::V6(h), src, dst, tclass, h[7])
    };
    let start = ip_hlen + UDP_HEADER_LEN;
    Ok(IpUdpHead {
        ip,
        udp,
        src_gid,
        dst_gid,
        tclass,
        ttl,
        udp_payload: start..ip_hlen + udp_len,
    })
}

/// The UDP payload of a packet that starts at its IP header, found from the IP version and the
/// UDP length alone: enough to glance at the BTH ([`super::Glance`]) before deciding where the
/// packet is handled, where [`parse`] checks it in full. `None` only where `parse` fails
/// too; where both succeed, they find the same slice.
pub fn udp_payload(pkt: &[u8]) -> Option<&[u8]> {
    pkt.get(udp_payload_span(pkt)?)
}

/// Where [`udp_payload`] finds the UDP payload, read from the IP and UDP headers alone: `pkt`
/// need hold no more than them (a packet whose payload lies elsewhere, in pages). The caller
/// checks that the packet is as long as the range says.
pub fn udp_payload_span(pkt: &[u8]) -> Option<core::ops::Range<usize>> {
    let ip_hlen = match *pkt.first()? {
        0x45 => IPV4_HEADER_LEN,
        v if v >> 4 == 6 => IPV6_HEADER_LEN,
        _ => return None,
    };
    let udp_len = usize::from(be16(pkt, ip_hlen + 4)?);
    if udp_len < UDP_HEADER_LEN + BTH_LEN + ICRC_LEN {
        return None;
    }
    Some(ip_hlen + UDP_HEADER_LEN..ip_hlen + udp_len)
}

/// Writes a UDP header: source `sport`, destination 4791, length `udp_len`, checksum 0.
pub fn write_udp(buf: &mut [u8; UDP_HEADER_LEN], sport: u16, udp_len: u16) {
    buf[0..2].copy_from_slice(&sport.to_be_bytes());
    buf[2..4].copy_from_slice(&ROCE_V2_UDP_PORT.to_be_bytes());
    buf[4..6].copy_from_slice(&udp_len.to_be_bytes());
    buf[6..8].copy_from_slice(&[0, 0]);
}

/// Writes an IPv4 header (version 4, IHL 5, DF, protocol UDP); the identification and the
/// checksum are left 0 (the IP layer fills them).
pub fn write_ipv4(
    buf: &mut [u8; IPV4_HEADER_LEN],
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

/// Writes an IPv6 header (next header UDP) as the kernel's `ip6_flow_hdr` does: version 6,
/// traffic class, 20-bit flow label.
pub fn write_ipv6(
    buf: &mut [u8; IPV6_HEADER_LEN],
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

#[cfg(test)]
mod tests {
    use super::*;

    const TRANSPORT: usize = 20;

    /// An IPv4 RoCEv2 packet with a 20-byte transport and a correct ICRC.
    fn packet_v4() -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN + TRANSPORT + ICRC_LEN] {
        let mut p = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN + TRANSPORT + ICRC_LEN];
        let tot = p.len() as u16;
        let (ip, rest) = p.split_at_mut(IPV4_HEADER_LEN);
        write_ipv4(
            ip.try_into().unwrap(),
            tot,
            0x68,
            64,
            [10, 77, 0, 1],
            [10, 77, 0, 2],
        );
        let (udp, payload) = rest.split_at_mut(UDP_HEADER_LEN);
        write_udp(
            udp.try_into().unwrap(),
            0xc000,
            (UDP_HEADER_LEN + TRANSPORT + ICRC_LEN) as u16,
        );
        for (i, b) in payload[..TRANSPORT].iter_mut().enumerate() {
            *b = i as u8;
        }
        let ip: [u8; IPV4_HEADER_LEN] = p[..IPV4_HEADER_LEN].try_into().unwrap();
        let udp: [u8; UDP_HEADER_LEN] = p[IPV4_HEADER_LEN..][..UDP_HEADER_LEN].try_into().unwrap();
        let c = icrc::compute(
            IpHeader::V4(&ip),
            &udp,
            &p[IPV4_HEADER_LEN + UDP_HEADER_LEN..][..TRANSPORT],
        )
        .unwrap();
        let n = p.len();
        p[n - ICRC_LEN..].copy_from_slice(&icrc::to_wire(c));
        p
    }

    /// An IPv6 RoCEv2 packet with a 20-byte transport (ICRC not computed).
    fn packet_v6() -> [u8; IPV6_HEADER_LEN + UDP_HEADER_LEN + TRANSPORT + ICRC_LEN] {
        let mut p = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN + TRANSPORT + ICRC_LEN];
        let src = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let udp_len = (UDP_HEADER_LEN + TRANSPORT + ICRC_LEN) as u16;
        let (ip, rest) = p.split_at_mut(IPV6_HEADER_LEN);
        write_ipv6(
            ip.try_into().unwrap(),
            udp_len,
            0xab,
            0x12345,
            3,
            &src,
            &dst,
        );
        write_udp(
            (&mut rest[..UDP_HEADER_LEN]).try_into().unwrap(),
            0xc001,
            udp_len,
        );
        p
    }

    #[test]
    fn parses_ipv4() {
        let p = packet_v4();
        let r = parse(&p).unwrap();
        assert!(r.is_ipv4());
        assert_eq!(r.head.src_gid, gid_from_ipv4([10, 77, 0, 1]));
        assert_eq!(r.head.dst_gid, gid_from_ipv4([10, 77, 0, 2]));
        assert_eq!(r.head.tclass, 0x68);
        assert_eq!(r.head.ttl, 64);
        let t0 = IPV4_HEADER_LEN + UDP_HEADER_LEN;
        assert_eq!(r.transport, &p[t0..t0 + TRANSPORT]);
        assert_eq!(r.udp_payload, &p[t0..]);
        assert_eq!(
            Some(r.icrc),
            icrc::compute(r.head.ip, r.head.udp, r.transport),
            "the carried ICRC is the computed one"
        );
    }

    #[test]
    fn parses_ipv6() {
        let p = packet_v6();
        let r = parse(&p).unwrap();
        assert!(!r.is_ipv4());
        assert_eq!(r.head.src_gid[..2], [0xfe, 0x80]);
        assert_eq!(r.head.src_gid[15], 1);
        assert_eq!(r.head.dst_gid[15], 2);
        assert_eq!(r.head.tclass, 0xab);
        assert_eq!(r.head.ttl, 3);
        assert_eq!(r.transport.len(), TRANSPORT);
        assert_eq!(r.udp_payload.len(), TRANSPORT + ICRC_LEN);
    }

    #[test]
    fn link_padding_is_ignored() {
        let p = packet_v4();
        let mut padded = [0u8; 128];
        padded[..p.len()].copy_from_slice(&p);
        let r = parse(&padded).unwrap();
        assert_eq!(r.udp_payload.len(), TRANSPORT + ICRC_LEN);
    }

    #[test]
    fn rejects_what_rocev2_does_not_use() {
        let good = packet_v4();
        let bad = |f: &dyn Fn(&mut [u8])| {
            let mut p = good;
            f(&mut p);
            parse(&p).map(|_| ())
        };
        assert_eq!(bad(&|p| p[0] = 0x46), Err(IpUdpError::UnsupportedIp)); // IPv4 options
        assert_eq!(bad(&|p| p[6] = 0x20), Err(IpUdpError::UnsupportedIp)); // more fragments
        assert_eq!(bad(&|p| p[9] = 6), Err(IpUdpError::UnsupportedIp)); // TCP
        assert_eq!(bad(&|p| p[0] = 0x55), Err(IpUdpError::UnsupportedIp)); // version 5
        assert_eq!(bad(&|p| p[23] = 0x00), Err(IpUdpError::BadUdp)); // another port
        assert_eq!(bad(&|p| p[25] = 8), Err(IpUdpError::BadUdp)); // UDP length too short
        assert_eq!(bad(&|p| p[25] = 0xff), Err(IpUdpError::BadUdp)); // beyond the IP payload
        assert_eq!(bad(&|p| p[3] = 0xff), Err(IpUdpError::Truncated)); // beyond the buffer
        assert_eq!(
            parse(&good[..good.len() - 1]).map(|_| ()),
            Err(IpUdpError::Truncated)
        );
        assert_eq!(parse(&[]).map(|_| ()), Err(IpUdpError::Truncated));
        assert_eq!(parse(&[0x45]).map(|_| ()), Err(IpUdpError::Truncated));
    }

    #[test]
    fn udp_payload_is_what_parse_finds() {
        let v4 = packet_v4();
        let v6 = packet_v6();
        let mut padded = [0u8; 128];
        padded[..v4.len()].copy_from_slice(&v4);
        for p in [&v4[..], &v6[..], &padded[..]] {
            assert_eq!(udp_payload(p), Some(parse(p).unwrap().udp_payload));
        }
        for n in 0..v6.len() {
            let short = &v6[..n];
            assert!(udp_payload(short).is_none() && parse(short).is_err());
        }
        let mut p = v4;
        p[0] = 0x46; // IPv4 options: neither takes it
        assert!(udp_payload(&p).is_none() && parse(&p).is_err());
        let mut p = v4;
        p[25] = 8; // UDP length too short
        assert!(udp_payload(&p).is_none() && parse(&p).is_err());
    }

    #[test]
    fn parse_never_panics_on_short_buffers() {
        let p = packet_v6();
        for n in 0..p.len() {
            assert!(parse(&p[..n]).is_err());
        }
    }

    #[test]
    fn ipv4_gids() {
        let g = gid_from_ipv4([192, 168, 1, 7]);
        assert_eq!(ipv4_from_gid(&g), Some([192, 168, 1, 7]));
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(ipv4_from_gid(&v6), None);
        // Every byte of the `::ffff:` prefix counts; the address bytes may be anything.
        for i in 0..16 {
            let mut x = g;
            x[i] ^= 0x01;
            let want = (i >= 12).then(|| [x[12], x[13], x[14], x[15]]);
            assert_eq!(ipv4_from_gid(&x), want, "byte {i}");
        }
    }

    #[test]
    fn ipv6_header_fields() {
        let p = packet_v6();
        assert_eq!(p[0] >> 4, 6);
        let word = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        assert_eq!((word >> 20) & 0xff, 0xab);
        assert_eq!(word & 0xf_ffff, 0x12345);
        assert_eq!(p[6], IPPROTO_UDP);
    }
}
