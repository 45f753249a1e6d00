// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 framing without pointers: the ICRC (CRC-32 from `crc32.rs`), and the check of a
//! received IP packet. The pure IP/UDP header code (layout, parsing, GID <-> IP conversion) is
//! the core's [`crate::rvcore::wire::ip_udp`], re-exported here. Safe code only; `skb.rs` and
//! `tx.rs` apply it to socket buffers.

use super::crc32::{chosen, crc32_le, CrcImpl};
use crate::rvcore::icrc::{self, IpHeader};
use crate::rvcore::wire::ip_udp::{self, IpUdpError};
use kernel::prelude::*;

pub use crate::rvcore::wire::ip_udp::{
    gid_from_ipv4, ipv4_from_gid, write_ipv4, write_ipv6, write_udp, IPPROTO_UDP,
};

/// The RoCEv2 UDP destination port (IANA).
pub const ROCE_V2_UDP_DPORT: u16 = crate::rvcore::wire::ROCE_V2_UDP_PORT;
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
    /// The IP header (20 bytes for IPv4, 40 for IPv6).
    pub ip_header: &'a [u8],
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
    /// The whole UDP payload: `transport` followed by the ICRC.
    pub udp_payload: &'a [u8],
    /// The IP header, for the ICRC.
    ip: IpHeader<'a>,
    /// The UDP header, for the ICRC.
    udp: &'a [u8; UDP_HLEN],
    /// The ICRC the packet carries.
    icrc: u32,
}

impl RoceRx<'_> {
    /// Whether the packet's ICRC is the one computed over it.
    pub fn icrc_ok(&self) -> bool {
        compute_icrc(self.ip, self.udp, self.transport) == Some(self.icrc)
    }

    /// Where the packet's ICRC lies, and what it says: to check it once the packet is no
    /// longer borrowed ([`IcrcAt::check_in_place`]).
    pub fn icrc_at(&self) -> IcrcAt {
        IcrcAt {
            ipv4: self.ipv4,
            at: self.ip_header.len() + UDP_HLEN + self.transport.len(),
            icrc: Some(self.icrc),
        }
    }
}

/// The place and value of a parsed packet's ICRC ([`RoceRx::icrc_at`]), in the buffer that
/// starts at its IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcAt {
    ipv4: bool,
    /// Offset of the ICRC from the IP header: the IP, UDP and transport headers and payload
    /// come before it.
    at: usize,
    icrc: Option<u32>,
}

impl IcrcAt {
    /// Where the ICRC of a packet [`parse_ip_head`] parsed lies; its value is read from the
    /// packet when checked ([`IcrcAt::value`] is `None`).
    pub fn of_head(h: &RoceHead<'_>) -> Self {
        IcrcAt {
            ipv4: h.ipv4,
            at: h.ip_header.len() + UDP_HLEN + h.udp_payload_len - ICRC_LEN,
            icrc: None,
        }
    }

    /// Whether the packet came over IPv4.
    pub fn ipv4(&self) -> bool {
        self.ipv4
    }

    /// Offset of the ICRC from the IP header.
    pub fn at(&self) -> usize {
        self.at
    }

    /// The ICRC the packet carries, when it was read at parsing.
    pub fn value(&self) -> Option<u32> {
        self.icrc
    }

    /// The running `crc32_le` of the ICRC over the packet's first bytes, those in `head` (from
    /// the IP header; at least the IP, UDP and BT headers), up to the ICRC at most, and how many
    /// bytes that covers: the rest, before the ICRC, lies elsewhere ([`icrc_state`]).
    pub fn state_of_head(&self, head: &[u8]) -> Option<(u32, usize)> {
        let ip_hlen = if self.ipv4 { IPV4_HLEN } else { IPV6_HLEN };
        let ip = if self.ipv4 {
            IpHeader::V4(head.get(..IPV4_HLEN)?.try_into().ok()?)
        } else {
            IpHeader::V6(head.get(..IPV6_HLEN)?.try_into().ok()?)
        };
        let udp = head.get(ip_hlen..ip_hlen + UDP_HLEN)?.try_into().ok()?;
        let end = head.len().min(self.at);
        let state = icrc_state(ip, udp, head.get(ip_hlen + UDP_HLEN..end)?)?;
        Some((state, end))
    }

    /// Whether the ICRC of the packet in `pkt` is right (the headers masked in copies, or, with
    /// the table CRC, as they are read).
    pub fn check(&self, pkt: &[u8]) -> bool {
        if chosen() == CrcImpl::Sliced {
            return self.icrc.is_some()
                && pkt
                    .get(..self.at)
                    .and_then(|p| icrc::icrc_state_sliced(p, self.ipv4))
                    .map(|s| !s)
                    == self.icrc;
        }
        let ip_hlen = if self.ipv4 { IPV4_HLEN } else { IPV6_HLEN };
        let ip = if self.ipv4 {
            pkt.get(..IPV4_HLEN)
                .and_then(|h| h.try_into().ok())
                .map(IpHeader::V4)
        } else {
            pkt.get(..IPV6_HLEN)
                .and_then(|h| h.try_into().ok())
                .map(IpHeader::V6)
        };
        let udp = pkt
            .get(ip_hlen..ip_hlen + UDP_HLEN)
            .and_then(|u| u.try_into().ok());
        match (ip, udp, pkt.get(ip_hlen + UDP_HLEN..self.at)) {
            (Some(ip), Some(udp), Some(t)) => {
                self.icrc.is_some() && compute_icrc(ip, udp, t) == self.icrc
            }
            _ => false,
        }
    }

    /// [`IcrcAt::check`] in one `crc32_le` call ([`compute_icrc_in_place`]); `pkt` is as it
    /// was after.
    pub fn check_in_place(&self, pkt: &mut [u8]) -> bool {
        pkt.get_mut(..self.at)
            .and_then(|p| compute_icrc_in_place(p, self.ipv4))
            .is_some_and(|c| Some(c) == self.icrc)
    }
}

/// Why a received packet was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoceRxError {
    /// The IP or UDP headers are not those of a RoCEv2 packet.
    Malformed(IpUdpError),
    /// The headers are fine but the ICRC does not match.
    BadIcrc,
    /// The socket buffer could not be made linear, or lacks its network header.
    Skb(Error),
}

/// The ICRC of a RoCEv2 packet (IBA A17.3.3), with [`crc32_le`] (the faster CRC-32, see
/// [`super::crc32`]): the masked
/// IP, UDP and BTH headers in one buffer (one call: on x86 a call of 16 bytes or more runs in
/// an FPU section of its own), then the rest of `transport` (BTH up to, excluding, the ICRC).
/// `None` when `transport` is shorter than a BTH.
pub fn compute_icrc(ip: icrc::IpHeader<'_>, udp: &[u8; UDP_HLEN], transport: &[u8]) -> Option<u32> {
    icrc_state(ip, udp, transport).map(|s| !s)
}

/// The running `crc32_le` of [`compute_icrc`] over `transport`, the first bytes of a packet's
/// transport (at least its BTH): to continue over the bytes that follow elsewhere (a payload
/// in pages), the ICRC then being its complement.
pub fn icrc_state(ip: icrc::IpHeader<'_>, udp: &[u8; UDP_HLEN], transport: &[u8]) -> Option<u32> {
    let bth: &[u8; icrc::BTH_LEN] = transport.get(..icrc::BTH_LEN)?.try_into().ok()?;
    let prefix = icrc::MaskedPrefix::new(ip, udp, bth);
    let s = crc32_le(icrc::ICRC_SEED, prefix.as_bytes());
    Some(crc32_le(s, transport.get(icrc::BTH_LEN..)?))
}

/// [`compute_icrc`] of a packet laid out in one writable buffer from its IP header up to
/// (excluding) the ICRC: one `crc32_le` call over the whole of it, with the bits the ICRC
/// masks set to ones for the call and put back after. `None` (`pkt` untouched) when `pkt` is
/// shorter than the IP, UDP and BT headers.
pub fn compute_icrc_in_place(pkt: &mut [u8], ipv4: bool) -> Option<u32> {
    icrc_state_in_place(pkt, ipv4).map(|s| !s)
}

/// The running `crc32_le` of the ICRC over `pkt`, the start of a packet laid out as for
/// [`compute_icrc_in_place`]: to continue over the bytes that follow elsewhere (a payload in
/// pages), the ICRC then being its complement.
pub fn icrc_state_in_place(pkt: &mut [u8], ipv4: bool) -> Option<u32> {
    // The table CRC masks the words as it loads them: nothing written.
    if chosen() == CrcImpl::Sliced {
        return icrc::icrc_state_sliced(pkt, ipv4);
    }
    let unmask = icrc::mask_in_place(pkt, ipv4)?;
    let crc = crc32_le(icrc::ICRC_SEED, pkt);
    unmask.restore(pkt);
    Some(crc)
}

/// The headers of a received RoCEv2 packet whose payload may lie elsewhere (in an skb's
/// fragments), as [`parse_ip_head`] parses them from the first bytes of the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceHead<'a> {
    /// The packet came over IPv4 (else IPv6).
    pub ipv4: bool,
    /// The IP header (20 bytes for IPv4, 40 for IPv6).
    pub ip_header: &'a [u8],
    /// The IP source address as a GID (IPv4 as `::ffff:a.b.c.d`).
    pub src_gid: [u8; 16],
    /// The IP destination address as a GID (IPv4 as `::ffff:a.b.c.d`).
    pub dst_gid: [u8; 16],
    /// The first bytes of the UDP payload (from the BTH), as many as the head holds of it.
    pub udp_payload_head: &'a [u8],
    /// The length of the whole UDP payload (BTH to ICRC).
    pub udp_payload_len: usize,
}

impl<'a> RoceHead<'a> {
    /// The head of a packet parsed whole.
    pub fn of(rx: &RoceRx<'a>) -> Self {
        RoceHead {
            ipv4: rx.ipv4,
            ip_header: rx.ip_header,
            src_gid: rx.src_gid,
            dst_gid: rx.dst_gid,
            udp_payload_head: rx.udp_payload,
            udp_payload_len: rx.udp_payload.len(),
        }
    }
}

/// Parses the IP and UDP headers of a RoCEv2 packet of `pkt_len` bytes of which `head` holds
/// the first, from its IP header: [`parse_ip_headers`] for a packet whose payload lies
/// elsewhere. The ICRC is not read ([`IcrcAt::of_head`]).
pub fn parse_ip_head(head: &[u8], pkt_len: usize) -> Result<RoceHead<'_>, RoceRxError> {
    let h = ip_udp::parse_head(head, pkt_len).map_err(RoceRxError::Malformed)?;
    let udp_payload_len = h.udp_payload.len();
    let udp_payload_head = head
        .get(h.udp_payload.start..h.udp_payload.end.min(head.len()))
        .unwrap_or(&[]);
    Ok(RoceHead {
        ipv4: h.is_ipv4(),
        ip_header: match h.ip {
            IpHeader::V4(h) => &h[..],
            IpHeader::V6(h) => &h[..],
        },
        src_gid: h.src_gid,
        dst_gid: h.dst_gid,
        udp_payload_head,
        udp_payload_len,
    })
}

/// Parses a RoCEv2 packet that starts at its IP header (the shapes
/// [`ip_udp::parse`](crate::rvcore::wire::ip_udp::parse) accepts) and checks its ICRC with the
/// kernel's `crc32_le`. Bytes after the IP datagram (link padding) are ignored.
pub fn parse_ip_packet(pkt: &[u8]) -> Result<RoceRx<'_>, RoceRxError> {
    let rx = parse_ip_headers(pkt)?;
    if !rx.icrc_ok() {
        return Err(RoceRxError::BadIcrc);
    }
    Ok(rx)
}

/// [`parse_ip_packet`] without the ICRC check, for a packet whose check happens later (on
/// another CPU, before anything acts on it): [`RoceRx::icrc_at`] says where the ICRC is.
pub fn parse_ip_headers(pkt: &[u8]) -> Result<RoceRx<'_>, RoceRxError> {
    let p = ip_udp::parse(pkt).map_err(RoceRxError::Malformed)?;
    Ok(RoceRx {
        ipv4: p.is_ipv4(),
        ip_header: match p.head.ip {
            IpHeader::V4(h) => &h[..],
            IpHeader::V6(h) => &h[..],
        },
        src_gid: p.head.src_gid,
        dst_gid: p.head.dst_gid,
        tclass: p.head.tclass,
        ttl: p.head.ttl,
        transport: p.transport,
        udp_payload: p.udp_payload,
        ip: p.head.ip,
        udp: p.head.udp,
        icrc: p.icrc,
    })
}
