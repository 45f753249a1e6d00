// SPDX-License-Identifier: GPL-2.0

//! KUnit suite run when rvrdma.ko loads: the wire path's pure parts and socket buffers (the
//! ICRC with both CRC-32 implementations against the core, RoCEv2 parsing of real skbs, skb
//! queues).

#[kernel::prelude::kunit_tests(rvrdma_net)]
mod tests {
    use crate::bindings as b;
    use crate::kunit_support;
    use crate::net::crc32::{self, CrcImpl};
    use crate::net::fill::Fill;
    use crate::net::netdev::NetDevRef;
    use crate::net::roce::{self, RoceRxError, ICRC_LEN, IPV4_HLEN, IPV6_HLEN, UDP_HLEN};
    use crate::net::skb::{Skb, SkbBytes, SkbQueue};
    use crate::net::{tx, udp_tunnel};
    use crate::rvcore::{icrc, psn::Psn, wire};
    use core::mem::MaybeUninit;
    use core::sync::atomic::{AtomicU32, Ordering};
    use kernel::page::{Page, PAGE_SIZE};
    use kernel::prelude::*;
    use kernel::time::{delay::fsleep, Delta};

    const PAYLOAD: usize = 24;
    const TRANSPORT: usize = 12 + PAYLOAD;
    const V4_LEN: usize = IPV4_HLEN + UDP_HLEN + TRANSPORT + ICRC_LEN;
    const V6_LEN: usize = IPV6_HLEN + UDP_HLEN + TRANSPORT + ICRC_LEN;

    fn src6() -> [u8; 16] {
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    }

    fn dst6() -> [u8; 16] {
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
    }

    /// Writes BTH (RC SEND ONLY to QP 0x11) and a payload into `t` (no KUnit assertion: it
    /// also runs in the softirq receive hook).
    fn fill_transport(t: &mut [u8]) -> Result {
        let bth = wire::Bth {
            ack_req: true,
            ..wire::Bth::new(wire::Opcode::RcSendOnly, 0x11, Psn::new(0x12_3456))
        };
        bth.encode(t.get_mut(..12).ok_or(EINVAL)?)
            .map_err(|_| EINVAL)?;
        for (i, b) in t.iter_mut().skip(12).enumerate() {
            *b = (i as u8).wrapping_mul(7);
        }
        Ok(())
    }

    /// A complete IPv4 RoCEv2 packet as `build_routed` lays it out, the ICRC from the kernel
    /// path (`compute_icrc`).
    fn packet_v4() -> [u8; V4_LEN] {
        let mut p = [0u8; V4_LEN];
        let (ip, rest) = p.split_at_mut(IPV4_HLEN);
        let (udp, rest) = rest.split_at_mut(UDP_HLEN);
        let ip: &mut [u8; IPV4_HLEN] = ip.try_into().unwrap_or_else(|_| unreachable!());
        let udp: &mut [u8; UDP_HLEN] = udp.try_into().unwrap_or_else(|_| unreachable!());
        roce::write_ipv4(ip, V4_LEN as u16, 0x68, 64, [10, 77, 0, 1], [10, 77, 0, 2]);
        ip[4] = 0x12; // an identification, as __ip_select_ident would set
        ip[5] = 0x34;
        roce::write_udp(udp, 0xc123, (V4_LEN - IPV4_HLEN) as u16);
        let (t, trailer) = rest.split_at_mut(TRANSPORT);
        assert!(fill_transport(t).is_ok());
        let crc = roce::compute_icrc(icrc::IpHeader::V4(ip), udp, t);
        assert!(crc.is_some());
        trailer.copy_from_slice(&icrc::to_wire(crc.unwrap_or(0)));
        p
    }

    /// The IPv6 counterpart of [`packet_v4`].
    fn packet_v6() -> [u8; V6_LEN] {
        let mut p = [0u8; V6_LEN];
        let (ip, rest) = p.split_at_mut(IPV6_HLEN);
        let (udp, rest) = rest.split_at_mut(UDP_HLEN);
        let ip: &mut [u8; IPV6_HLEN] = ip.try_into().unwrap_or_else(|_| unreachable!());
        let udp: &mut [u8; UDP_HLEN] = udp.try_into().unwrap_or_else(|_| unreachable!());
        roce::write_ipv6(
            ip,
            (V6_LEN - IPV6_HLEN) as u16,
            0xab,
            0x12345,
            3,
            &src6(),
            &dst6(),
        );
        roce::write_udp(udp, 0xc321, (V6_LEN - IPV6_HLEN) as u16);
        let (t, trailer) = rest.split_at_mut(TRANSPORT);
        assert!(fill_transport(t).is_ok());
        let crc = roce::compute_icrc(icrc::IpHeader::V6(ip), udp, t);
        assert!(crc.is_some());
        trailer.copy_from_slice(&icrc::to_wire(crc.unwrap_or(0)));
        p
    }

    fn split4(p: &[u8]) -> ([u8; IPV4_HLEN], [u8; UDP_HLEN]) {
        let mut ip = [0u8; IPV4_HLEN];
        let mut udp = [0u8; UDP_HLEN];
        ip.copy_from_slice(&p[..IPV4_HLEN]);
        udp.copy_from_slice(&p[IPV4_HLEN..IPV4_HLEN + UDP_HLEN]);
        (ip, udp)
    }

    /// The slicing-by-16 CRC-32 gives the kernel's `crc32_le` result, whichever of the two
    /// the module chose: every length up to 300 bytes from the first nine starts (the word
    /// edges), from a running state.
    #[test]
    fn crc32_sliced_matches_kernel() {
        let mut buf = [0u8; 320];
        for (i, x) in buf.iter_mut().enumerate() {
            *x = (i.wrapping_mul(97) ^ (i >> 3)) as u8;
        }
        for start in 0..9 {
            for len in 0..=300 {
                let d = &buf[start..start + len];
                let seed = icrc::ICRC_SEED ^ (len as u32);
                assert_eq!(
                    crc32::crc32_with(CrcImpl::Sliced, seed, d),
                    crc32::crc32_with(CrcImpl::Kernel, seed, d)
                );
            }
        }
    }

    /// The ICRC computed with `crc32_le` over the core's masks equals the core's own
    /// `compute` / `check`, for IPv4 and IPv6.
    #[test]
    fn icrc_kernel_path_matches_core() {
        let p = packet_v4();
        let (ip, udp) = split4(&p);
        let payload = &p[IPV4_HLEN + UDP_HLEN..];
        assert!(icrc::check(icrc::IpHeader::V4(&ip), &udp, payload));
        let t = &payload[..TRANSPORT];
        assert_eq!(
            roce::compute_icrc(icrc::IpHeader::V4(&ip), &udp, t),
            icrc::compute(icrc::IpHeader::V4(&ip), &udp, t)
        );

        let p = packet_v6();
        let mut ip6 = [0u8; IPV6_HLEN];
        let mut udp6 = [0u8; UDP_HLEN];
        ip6.copy_from_slice(&p[..IPV6_HLEN]);
        udp6.copy_from_slice(&p[IPV6_HLEN..IPV6_HLEN + UDP_HLEN]);
        let payload = &p[IPV6_HLEN + UDP_HLEN..];
        assert!(icrc::check(icrc::IpHeader::V6(&ip6), &udp6, payload));
        let t = &payload[..TRANSPORT];
        assert_eq!(
            roce::compute_icrc(icrc::IpHeader::V6(&ip6), &udp6, t),
            icrc::compute(icrc::IpHeader::V6(&ip6), &udp6, t)
        );
        // Only a BTH, no payload.
        assert_eq!(
            roce::compute_icrc(icrc::IpHeader::V6(&ip6), &udp6, &t[..12]),
            icrc::compute(icrc::IpHeader::V6(&ip6), &udp6, &t[..12])
        );
        assert_eq!(
            roce::compute_icrc(icrc::IpHeader::V6(&ip6), &udp6, &t[..11]),
            None
        );
    }

    /// The one-call ICRC of a packet being built equals the header-by-header one, and leaves
    /// the packet as it was, for IPv4 and IPv6.
    #[test]
    fn icrc_in_place_matches_and_restores() {
        let mut p = packet_v4();
        let (ip, udp) = split4(&p);
        let t_end = IPV4_HLEN + UDP_HLEN + TRANSPORT;
        let want = roce::compute_icrc(
            icrc::IpHeader::V4(&ip),
            &udp,
            &p[IPV4_HLEN + UDP_HLEN..t_end],
        );
        let before = p;
        assert!(want.is_some());
        assert_eq!(roce::compute_icrc_in_place(&mut p[..t_end], true), want);
        assert!(p == before);

        let mut p = packet_v6();
        let mut ip6 = [0u8; IPV6_HLEN];
        let mut udp6 = [0u8; UDP_HLEN];
        ip6.copy_from_slice(&p[..IPV6_HLEN]);
        udp6.copy_from_slice(&p[IPV6_HLEN..IPV6_HLEN + UDP_HLEN]);
        let t_end = IPV6_HLEN + UDP_HLEN + TRANSPORT;
        let want = roce::compute_icrc(
            icrc::IpHeader::V6(&ip6),
            &udp6,
            &p[IPV6_HLEN + UDP_HLEN..t_end],
        );
        let before = p;
        assert!(want.is_some());
        assert_eq!(roce::compute_icrc_in_place(&mut p[..t_end], false), want);
        assert!(p == before);
        // Shorter than the IP, UDP and BT headers.
        assert_eq!(
            roce::compute_icrc_in_place(&mut p[..IPV6_HLEN + UDP_HLEN + 11], false),
            None
        );
    }

    /// An IPv4 packet in an skb with `data` at the IP header parses, fields and transport intact.
    #[test]
    fn parse_roce_ipv4_skb() {
        let p = packet_v4();
        let skb = Skb::from_ip_packet(&p);
        assert!(skb.is_ok());
        let Ok(mut skb) = skb else { return };
        let rx = skb.parse_roce();
        assert!(rx.is_ok());
        let Ok(rx) = rx else { return };
        assert!(rx.ipv4);
        assert_eq!(rx.src_gid, roce::gid_from_ipv4([10, 77, 0, 1]));
        assert_eq!(rx.dst_gid, roce::gid_from_ipv4([10, 77, 0, 2]));
        assert_eq!(rx.tclass, 0x68);
        assert_eq!(rx.ttl, 64);
        assert_eq!(rx.transport, &p[IPV4_HLEN + UDP_HLEN..V4_LEN - ICRC_LEN]);
        skb.consume();
    }

    /// In the layout `encap_rcv` hands over, the glance's UDP payload is the one the full parse
    /// finds, over IPv4 and IPv6.
    #[test]
    fn glance_finds_the_parsed_udp_payload() {
        for (p, hlen) in [(&packet_v4()[..], IPV4_HLEN), (&packet_v6()[..], IPV6_HLEN)] {
            let Ok(mut skb) = Skb::from_ip_packet(p) else {
                panic!("alloc");
            };
            assert!(skb.pull(hlen).is_ok());
            assert!(skb.to_ip_packet().is_ok());
            let glance = skb.roce_udp_payload().map(|u| u.as_ptr_range());
            assert_eq!(
                glance.clone().map(|r| r.end as usize - r.start as usize),
                Some(p.len() - hlen - UDP_HLEN)
            );
            let rx = skb.roce_headers();
            assert!(rx.is_ok());
            let Ok(rx) = rx else { return };
            assert_eq!(glance, Some(rx.udp_payload.as_ptr_range()));
            assert_eq!(rx.udp_payload, &p[hlen + UDP_HLEN..]);
        }
    }

    /// The layout `encap_rcv` hands over (`data` at the UDP header, network header before it)
    /// parses too, IPv6 here.
    #[test]
    fn parse_roce_ipv6_encap_layout() {
        let p = packet_v6();
        let Ok(mut skb) = Skb::from_ip_packet(&p) else {
            panic!("alloc");
        };
        assert!(skb.pull(IPV6_HLEN).is_ok());
        assert_eq!(skb.data().len(), V6_LEN - IPV6_HLEN);
        let rx = skb.parse_roce();
        assert!(rx.is_ok());
        let Ok(rx) = rx else { return };
        assert!(!rx.ipv4);
        assert_eq!(rx.src_gid, src6());
        assert_eq!(rx.dst_gid, dst6());
        assert_eq!(rx.tclass, 0xab);
        assert_eq!(rx.ttl, 3);
        assert_eq!(rx.transport, &p[IPV6_HLEN + UDP_HLEN..V6_LEN - ICRC_LEN]);
    }

    /// Masked fields may change in flight; anything else, bad lengths, IPv4 options and the wrong
    /// port are rejected.
    #[test]
    fn parse_rejects_bad_packets() {
        let good = packet_v4();
        let mut p = good;
        p[1] = 0x03; // TOS/ECN: masked
        p[8] = 1; // TTL: masked
        p[IPV4_HLEN + UDP_HLEN + 4] = 0xc0; // FECN/BECN: masked
        assert!(roce::parse_ip_packet(&p).is_ok());

        let mut p = good;
        p[IPV4_HLEN + UDP_HLEN + 11] ^= 1; // PSN
        assert!(roce::parse_ip_packet(&p).is_err());
        let mut p = good;
        p[4] ^= 1; // IPv4 identification is covered
        assert!(roce::parse_ip_packet(&p).is_err());
        let mut p = good;
        p[0] = 0x46; // IHL 6
        assert!(roce::parse_ip_packet(&p).is_err());
        let mut p = good;
        p[IPV4_HLEN + 5] += 4; // UDP length beyond the datagram
        assert!(roce::parse_ip_packet(&p).is_err());
        let mut p = good;
        p[IPV4_HLEN + 3] ^= 1; // destination port
        assert!(roce::parse_ip_packet(&p).is_err());
        let mut p = good;
        p[6] = 0x20; // more fragments
        assert!(roce::parse_ip_packet(&p).is_err());
        assert!(roce::parse_ip_packet(&good[..V4_LEN - 1]).is_err());
        assert!(roce::parse_ip_packet(&[]).is_err());
        // Link padding after the datagram is ignored.
        let mut padded = [0u8; V4_LEN + 6];
        padded[..V4_LEN].copy_from_slice(&good);
        assert!(roce::parse_ip_packet(&padded).is_ok());
    }

    /// A received skb's ICRC, checked where `parse_roce_headers` found it: in place (the skb's
    /// bytes as they were after) and from the bytes as they are, for IPv4 and IPv6 with link
    /// padding; masked fields may change, a covered byte may not.
    #[test]
    fn skb_icrc_in_place() {
        let mut v4 = [0u8; V4_LEN + 6];
        v4[..V4_LEN].copy_from_slice(&packet_v4());
        let v6 = packet_v6();
        let mut masked = v4;
        masked[8] = 3; // TTL
        let mut masked6 = v6;
        masked6[7] = 9; // hop limit
        masked6[3] ^= 0x5a; // flow label
        let mut covered = v4;
        covered[IPV4_HLEN + UDP_HLEN + TRANSPORT - 1] ^= 0x10; // the payload's last byte
        let mut covered6 = v6;
        covered6[IPV6_HLEN + UDP_HLEN + 11] ^= 1; // PSN
        for (pkt, want) in [
            (&v4[..], true),
            (&v6[..], true),
            (&masked[..], true),
            (&masked6[..], true),
            (&covered[..], false),
            (&covered6[..], false),
        ] {
            let Ok(mut skb) = Skb::from_ip_packet(pkt) else {
                panic!("alloc");
            };
            // Not shared: the check below runs in place.
            assert!(skb.data_mut().is_some());
            let at = match skb.parse_roce_headers() {
                Ok(rx) => rx.icrc_at(),
                Err(_) => panic!("parse"),
            };
            assert_eq!(at.check(skb.data()), want);
            assert_eq!(skb.icrc_ok(&at), want);
            assert!(skb.data() == pkt);
        }
    }

    /// IPv4-mapped GIDs round-trip; other GIDs are IPv6.
    #[test]
    fn ipv4_mapped_gids() {
        let g = roce::gid_from_ipv4([192, 168, 1, 7]);
        assert_eq!(roce::ipv4_from_gid(&g), Some([192, 168, 1, 7]));
        assert_eq!(roce::ipv4_from_gid(&src6()), None);
    }

    /// The skb queue is FIFO, counts, and frees what is left on drop.
    #[test]
    fn skb_queue_fifo() {
        let q = KBox::pin_init(SkbQueue::new(), GFP_KERNEL);
        assert!(q.is_ok());
        let Ok(q) = q else { return };
        for n in 1..=3usize {
            let Ok(skb) = Skb::from_ip_packet(&[0u8; 8][..n]) else {
                panic!("alloc");
            };
            q.push(skb);
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop().map(|s| s.len()), Some(1));
        assert_eq!(q.pop().map(|s| s.len()), Some(2));
        assert_eq!(q.len(), 1);
        // The last one is purged by the drop.
    }

    /// A fill counts only what was written, in order, and gives the bytes back only when all
    /// are; an skb's `put_with` zeroes what its writer left (or all, if the writer replaced
    /// the fill), and `push` what it prepends.
    #[test]
    fn fill_counts_what_is_written() {
        let mut raw = [MaybeUninit::new(0xaa_u8); 8];
        let mut f = Fill::new(&mut raw);
        assert!(f.zeroed(2).map(|h| h.copy_from_slice(&[1, 2])).is_ok());
        assert!(f.copy(&[3, 4, 5]).is_ok());
        assert!(f.copy(&[0; 4]).is_err());
        assert!(f.spare(4).is_err());
        assert_eq!(f.remaining(), 3);
        assert!(f.copy(&[6, 7]).is_ok());
        assert!(!f.is_full());
        assert!(f.zeroed(1).is_ok());
        assert_eq!(
            f.into_init().as_deref(),
            Some(&[1u8, 2, 3, 4, 5, 6, 7, 0][..])
        );
        let mut raw = [MaybeUninit::new(0xaa_u8); 2];
        assert!(Fill::new(&mut raw).into_init().is_none());

        let Some(lo) = NetDevRef::init_net_by_name(c"lo") else {
            panic!("no lo");
        };
        let Ok(mut skb) = Skb::alloc_tx(&lo, 8, 56) else {
            panic!("alloc");
        };
        // Bytes written in full are kept.
        assert!(skb.put_with(20, |f| f.copy(&[0x5a; 20])).is_ok());
        assert!(skb.put_with(100_000, |_| Ok(())).is_err());
        assert_eq!(skb.put_with(6, |f| f.copy(&[1, 2]).map(|()| 42)), Ok(42));
        assert!(skb
            .put_with(4, |f| f.copy(&[9]).and(Err::<(), _>(EINVAL)))
            .is_err());
        // A writer that swaps in a fill of its own leaves the skb's bytes to be zeroed.
        assert!(skb
            .put_with(3, |f| {
                *f = Fill::new(&mut []);
                Ok(())
            })
            .is_ok());
        assert!(skb.push::<8>().is_ok_and(|h| *h == [0; 8]));
        let d = skb.data();
        assert_eq!(d.len(), 8 + 20 + 6 + 4 + 3);
        assert_eq!(&d[28..], &[1, 2, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0]);
    }

    /// `zeroed` gives exactly the bytes asked for, zeroed, whichever way it clears them (a
    /// fixed-size clear where enough bytes remain, else one of the asked length), counts only
    /// those, and refuses more than remain without counting any.
    #[test]
    fn fill_zeroed_short_and_long() {
        for (size, ask) in [(80, 10), (80, 64), (20, 16), (20, 20), (10, 10), (100, 70)] {
            let mut raw = [MaybeUninit::new(0xaa_u8); 100];
            let mut f = Fill::new(&mut raw[..size]);
            assert!(f
                .zeroed(ask)
                .is_ok_and(|h| h.len() == ask && h.iter().all(|&b| b == 0)));
            assert_eq!(f.remaining(), size - ask);
            assert!(f.copy(&[7; 100][..size - ask]).is_ok());
            let Some(all) = f.into_init() else {
                panic!("not full");
            };
            assert!(all[..ask].iter().all(|&b| b == 0) && all[ask..].iter().all(|&b| b == 7));
        }
        let mut raw = [MaybeUninit::new(0xaa_u8); 20];
        let mut f = Fill::new(&mut raw);
        assert!(f.copy(&[1; 10]).is_ok());
        assert!(f.zeroed(16).is_err());
        assert!(f.zeroed(11).is_err());
        assert_eq!(f.remaining(), 10);
    }

    /// The room an skb has, read in Rust from its fields: an skb to send has the headroom asked
    /// for plus the link layer's and no more, tailroom for what `put` may take, and its linear
    /// data is what was put and pushed.
    #[test]
    fn skb_room_from_fields() {
        let Some(lo) = NetDevRef::init_net_by_name(c"lo") else {
            panic!("no lo");
        };
        let Ok(mut skb) = Skb::alloc_tx(&lo, 16, 40) else {
            panic!("alloc");
        };
        assert!(skb.put(100_000).is_err());
        assert!(skb.put(40).map(|b| b.fill(7)).is_ok());
        let mut head = 0;
        while head < 4096 && skb.push::<1>().map(|b| b.fill(9)).is_ok() {
            head += 1;
        }
        // The 16 asked for, and `lo`'s link-layer room: its 14-byte header rounded up to 16.
        assert_eq!(head, 32);
        assert_eq!(skb.len(), 40 + head);
        assert_eq!(skb.data().len(), 40 + head);
        assert!(skb.data()[..head].iter().all(|&x| x == 9));
        assert!(skb.data()[head..].iter().all(|&x| x == 7));
        assert!(skb.pull(head).is_ok());
        assert!(skb.pull(41).is_err());
        assert_eq!(skb.data().len(), 40);
        assert!(!skb.more_follow());
        skb.consume();
    }

    /// Fields read in Rust: a fresh skb has no device, owner or protocol; a network header
    /// behind `data` (as `encap_rcv` hands a packet over) is pushed back to, and one after
    /// `data` is refused. Headers pushed for sending (`push_ip_udp`) need their room (without it
    /// the skb is left as it was), come zeroed, and set the device, protocol (in host order) and
    /// network header.
    #[test]
    fn skb_headers_from_fields() {
        let p = packet_v4();
        let Ok(mut skb) = Skb::from_ip_packet(&p) else {
            panic!("alloc");
        };
        assert!(skb.dev_raw().is_null());
        assert!(skb.sk_raw().is_null());
        assert_eq!(skb.protocol(), 0);
        assert!(skb.pull(IPV4_HLEN).is_ok());
        assert!(skb.parse_roce().is_ok());
        assert_eq!(skb.len(), p.len());
        assert!(skb.pull(IPV4_HLEN).is_ok());
        skb.reset_network_header();
        assert!(skb.push::<IPV4_HLEN>().is_ok());
        assert!(matches!(skb.parse_roce(), Err(RoceRxError::Skb(e)) if e == EINVAL));
        if let Some(lo) = NetDevRef::init_net_by_name(c"lo") {
            // Pulled to its UDP payload, the packet has room for IPv4's headers, not IPv6's.
            assert!(skb.pull(IPV4_HLEN + UDP_HLEN).is_ok());
            let len = skb.len();
            assert!(tx::push_ip_udp::<{ IPV6_HLEN + UDP_HLEN }>(&mut skb, &lo, None).is_err());
            assert_eq!(skb.len(), len);
            assert!(skb.dev_raw().is_null());
            let pushed =
                tx::push_ip_udp::<{ IPV4_HLEN + UDP_HLEN }>(&mut skb, &lo, None).map(|pkt| {
                    let zeroed = pkt[..IPV4_HLEN + UDP_HLEN].iter().all(|&x| x == 0);
                    pkt.copy_from_slice(&p);
                    (pkt.len(), zeroed)
                });
            assert_eq!(pushed, Ok((p.len(), true)));
            assert!(skb.came_from(&lo));
            assert_eq!(skb.protocol(), b::ETH_P_IP as u16);
            // The network header is where the IP header was pushed.
            assert!(skb.parse_roce().is_ok());
        }
        skb.consume();
    }

    /// `pop_nonempty` finds nothing in an empty queue and takes what is queued in order.
    #[test]
    fn skb_queue_pop_nonempty() {
        let Ok(q) = KBox::pin_init(SkbQueue::new(), GFP_KERNEL) else {
            panic!("alloc");
        };
        assert!(q.pop_nonempty().is_none());
        for n in 1..=2usize {
            let Ok(skb) = Skb::from_ip_packet(&[0u8; 4][..n]) else {
                panic!("alloc");
            };
            q.push(skb);
        }
        assert_eq!(q.pop_nonempty().map(|s| s.len()), Some(1));
        assert_eq!(q.pop_nonempty().map(|s| s.len()), Some(2));
        assert!(q.pop_nonempty().is_none());
        assert!(q.is_empty());
    }

    /// What the loopback hook saw: 0 nothing yet, 4 / 6 a good IPv4 / IPv6 packet with the
    /// expected transport, 100 a wrong transport, 101 a parse error.
    static LOOP_RESULT: AtomicU32 = AtomicU32::new(0);

    /// The receive hook of [`send_and_receive_on_lo`] (softirq).
    fn capture(mut skb: Skb) {
        let mut want = [0u8; TRANSPORT];
        let r = match (skb.parse_roce(), fill_transport(&mut want)) {
            (Ok(rx), Ok(())) if rx.transport == &want[..] => {
                if rx.ipv4 {
                    4
                } else {
                    6
                }
            }
            (Ok(_), _) => 100,
            (Err(_), _) => 101,
        };
        LOOP_RESULT.store(r, Ordering::Release);
        skb.consume();
    }

    /// `lo` of the initial namespace, the number of open tunnel sockets before, and a tunnel
    /// reference on `lo`; `None` after marking the case skipped when `lo` is missing or port
    /// 4791 is taken (rdma_rxe in the initial namespace).
    fn lo_tunnel() -> Option<(NetDevRef, usize, udp_tunnel::TunnelRef)> {
        let Some(lo) = NetDevRef::init_net_by_name(c"lo") else {
            kunit_support::skip(c"no lo in the initial namespace");
            return None;
        };
        let before = udp_tunnel::open_count();
        let Ok(tun) = udp_tunnel::acquire(&lo) else {
            kunit_support::skip(c"UDP port 4791 is taken in the initial namespace");
            return None;
        };
        Some((lo, before, tun))
    }

    /// The GIDs of `lo`'s addresses: 127.0.0.1 (IPv4-mapped) and ::1.
    fn lo_gids() -> [[u8; 16]; 2] {
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        [roce::gid_from_ipv4([127, 0, 0, 1]), v6]
    }

    /// The addressing of a packet from `gid` to itself on `lo`.
    fn lo_params<'a>(lo: &'a NetDevRef, gid: &'a [u8; 16], ip_id: Option<u16>) -> tx::TxParams<'a> {
        tx::TxParams {
            ndev: lo,
            src_gid: gid,
            dst_gid: gid,
            src_port: 0xc000,
            tclass: 0,
            ttl: 64,
            flow_label: 0x1234,
            ip_id,
        }
    }

    /// End to end on `lo` of the initial namespace: acquire the netns socket, build IPv4 and
    /// IPv6 packets (route, headers, ICRC, owner), send them with `ip_local_out` /
    /// `ip6_local_out`, receive them through `encap_rcv` and the hook, parse them and check the
    /// ICRC and payload; the last `TunnelRef` releases the socket. A KUnit skip when `lo` is
    /// missing or port 4791 is taken (rdma_rxe in the initial namespace).
    #[test]
    fn send_and_receive_on_lo() {
        let Some((lo, before, tun)) = lo_tunnel() else {
            return;
        };
        assert_eq!(udp_tunnel::open_count(), before + 1);
        let tun2 = udp_tunnel::acquire(&lo);
        assert!(tun2.is_ok());
        assert_eq!(udp_tunnel::open_count(), before + 1);
        drop(tun2);
        // Restores the driver's hook however the test ends (a failed assertion returns).
        struct Restore(Option<udp_tunnel::RxHook>);
        impl Drop for Restore {
            fn drop(&mut self) {
                udp_tunnel::swap_rx_hook(self.0);
            }
        }
        let restore = Restore(udp_tunnel::swap_rx_hook(Some(capture)));
        for (gid, want) in [(lo_gids()[0], 4u32), (lo_gids()[1], 6u32)] {
            LOOP_RESULT.store(0, Ordering::Release);
            let p = lo_params(&lo, &gid, None);
            let skb = tx::build(&tun, &p, TRANSPORT, |f| {
                fill_transport(f.zeroed(TRANSPORT)?)
            });
            if let Err(e) = &skb {
                pr_info!(
                    "send_and_receive_on_lo: IPv{} build failed: {:?}\n",
                    want,
                    e
                );
            }
            assert!(skb.is_ok());
            let Ok(skb) = skb else { continue };
            assert_eq!(
                skb.len(),
                TRANSPORT + ICRC_LEN + UDP_HLEN + if want == 4 { 20 } else { 40 }
            );
            assert_eq!(skb.send().ok(), Some(tx::XmitStatus::Sent));
            for _ in 0..100 {
                if LOOP_RESULT.load(Ordering::Acquire) != 0 {
                    break;
                }
                fsleep(Delta::from_millis(10));
            }
            assert_eq!(LOOP_RESULT.load(Ordering::Acquire), want);
        }
        drop(restore);
        drop(tun);
        assert_eq!(udp_tunnel::open_count(), before);
        pr_info!("send_and_receive_on_lo: IPv4 and IPv6 packets went round\n");
    }

    /// Byte `i` of the page [`paged_build_matches_copied`] sends from.
    fn page_byte(i: usize) -> u8 {
        (i.wrapping_mul(13) + 5) as u8
    }

    /// A payload by reference builds the packet a copied payload builds: two pieces of one
    /// page and a pad of 3, over IPv4 and IPv6 on `lo`. The paged skb glances as the copied one
    /// does, is read where it lies ([`check_paged_receive`]), and once linear holds the same
    /// bytes (the ICRC included) and parses. A KUnit skip
    /// as [`send_and_receive_on_lo`].
    #[test]
    fn paged_build_matches_copied() {
        let Some((lo, _, tun)) = lo_tunnel() else {
            return;
        };
        let page = Page::alloc_page(GFP_KERNEL);
        assert!(page.is_ok());
        let Ok(page) = page else { return };
        let mut chunk = [0u8; 256];
        for at in (0..PAGE_SIZE).step_by(chunk.len()) {
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = page_byte(at + i);
            }
            // SAFETY: `chunk` is valid for its length; the page is ours.
            assert!(unsafe { page.write_raw(chunk.as_ptr(), at, chunk.len()) }.is_ok());
        }
        const PIECES: [(usize, usize); 2] = [(100, 1000), (2000, 1021)];
        const PAYLOAD_LEN: usize = 2021;
        const PAD: usize = 3;
        for gid in lo_gids() {
            let p = lo_params(&lo, &gid, Some(0x4321));
            let route = tx::Route::lookup(&tun, &p);
            assert!(route.is_ok());
            let Ok(route) = route else { return };
            let copied = tx::build_routed(&tun, &route, &p, 12 + PAYLOAD_LEN + PAD, |f| {
                fill_transport(f.zeroed(12)?)?;
                for (off, len) in PIECES {
                    for i in off..off + len {
                        f.copy(&[page_byte(i)])?;
                    }
                }
                f.zeroed(PAD).map(|_| ())
            });
            let layout = tx::PagedLayout {
                header_len: 12,
                payload_len: PAYLOAD_LEN,
                pad: PAD,
            };
            let paged = tx::build_routed_paged(
                &tun,
                &route,
                &p,
                &layout,
                |f| fill_transport(f.zeroed(12)?),
                |frags| {
                    for (off, len) in PIECES {
                        frags.add(&page, off, len)?;
                    }
                    Ok(())
                },
            );
            assert!(copied.is_ok() && paged.is_ok());
            let (Ok(copied), Ok(mut paged)) = (copied, paged) else {
                return;
            };
            assert!(paged.headlen() < paged.len());
            assert_eq!(paged.len(), copied.len());
            assert!(copied.glance().is_some());
            assert_eq!(paged.glance(), copied.glance());
            check_paged_receive(&paged, &copied, &page);
            assert!(paged.linearize().is_ok());
            assert!(paged.data() == copied.data());
            assert!(paged.parse_roce().is_ok());
        }
    }

    /// The receive side of a packet whose payload lies in fragments (`paged`, sending from
    /// `page`), without making it linear: it parses from its linear part as the copied one
    /// does, its ICRC checks over the pieces (and fails once a payload byte in the page
    /// changes), and its payload copies out of the fragments byte for byte.
    fn check_paged_receive(paged: &Skb, copied: &Skb, page: &Page) {
        let g = paged.glance();
        assert!(g.is_some_and(|g| paged.headers_linear(&g)));
        assert!(!paged.is_linear() && copied.is_linear());
        let head = paged.roce_head();
        let whole = copied.roce_headers();
        assert!(head.is_ok() && whole.is_ok());
        let (Ok(head), Ok(whole)) = (head, whole) else {
            return;
        };
        let whole = roce::RoceHead::of(&whole);
        assert_eq!(
            (head.ipv4, head.ip_header, head.src_gid, head.dst_gid),
            (whole.ipv4, whole.ip_header, whole.src_gid, whole.dst_gid)
        );
        assert_eq!(head.udp_payload_len, whole.udp_payload_len);
        let at = roce::IcrcAt::of_head(&head);
        assert!(paged.icrc_ok_in_pieces(&at));
        // The C walk over the fragments gives one CRC with either implementation.
        assert_eq!(
            paged.frags_crc32(CrcImpl::Sliced, 0x1234_5678, u32::MAX),
            paged.frags_crc32(CrcImpl::Kernel, 0x1234_5678, u32::MAX)
        );
        // The payload, after the IP, UDP and BT headers.
        let start = head.ip_header.len() + UDP_HLEN + 12;
        let range = start..start + 2021;
        let bytes = SkbBytes::new(paged, range.clone());
        assert!(bytes.is_some_and(|b| b.linear().is_none()));
        let mut out = KVec::new();
        assert!(out.extend_with(2021, 0u8, GFP_KERNEL).is_ok());
        assert!(bytes.is_some_and(|b| b.copy_out(&mut out).is_ok()));
        assert!(copied.data().get(range) == Some(&out[..]));
        // A payload byte changed in the page: the ICRC no longer matches.
        let flip = [page_byte(150) ^ 0x40];
        // SAFETY: `flip` is valid for its length; the page is ours.
        assert!(unsafe { page.write_raw(flip.as_ptr(), 150, 1) }.is_ok());
        assert!(!paged.icrc_ok_in_pieces(&at));
        let back = [page_byte(150)];
        // SAFETY: as above.
        assert!(unsafe { page.write_raw(back.as_ptr(), 150, 1) }.is_ok());
        assert!(paged.icrc_ok_in_pieces(&at));
    }

    /// The namespace's exit releases its sockets while a `TunnelRef` still exists: the ref then
    /// reports dead, building fails with ENETDOWN, and dropping it does nothing more. A KUnit
    /// skip as [`send_and_receive_on_lo`].
    #[test]
    fn netns_exit_with_live_ref() {
        let Some((lo, before, tun)) = lo_tunnel() else {
            return;
        };
        assert!(tun.is_live());
        udp_tunnel::release_netns_of(&lo);
        assert!(!tun.is_live());
        assert_eq!(udp_tunnel::open_count(), before);
        let p = tx::TxParams {
            ndev: &lo,
            src_gid: &roce::gid_from_ipv4([127, 0, 0, 1]),
            dst_gid: &roce::gid_from_ipv4([127, 0, 0, 1]),
            src_port: 0xc000,
            tclass: 0,
            ttl: 64,
            flow_label: 0,
            ip_id: None,
        };
        assert!(tx::build(&tun, &p, TRANSPORT, |f| fill_transport(
            f.zeroed(TRANSPORT)?
        ))
        .is_err());
        drop(tun);
        assert_eq!(udp_tunnel::open_count(), before);
        // The port is free again: a new acquire opens a new socket.
        let again = udp_tunnel::acquire(&lo);
        assert!(again.is_ok());
        drop(again);
        assert_eq!(udp_tunnel::open_count(), before);
    }
}
