//! Property tests for the wire codecs, PSN arithmetic and credit encoding.

use proptest::prelude::*;
use rvrdma_core::credit::{
    decode_credit, encode_credit, lsn_from_ack, ssn_within_lsn, CreditLimit, CREDIT_CODE_INVALID,
};
use rvrdma_core::icrc;
use rvrdma_core::psn::{
    classify_ack_psn, classify_request_psn, AckPsnClass, Psn, RequestPsnClass, PSN_HALF_WINDOW,
    PSN_MASK,
};
use rvrdma_core::wire::ip_udp;
use rvrdma_core::wire::{
    pad_count, Aeth, AtomicAckEth, AtomicEth, Bth, DecodeError, Deth, Feth, Glance, Headers, Ieth,
    ImmDt, Opcode, Operation, Reth, Syndrome, ICRC_LEN,
};

fn arb_opcode() -> impl Strategy<Value = Opcode> {
    proptest::sample::select(Opcode::ALL.to_vec())
}

prop_compose! {
    fn arb_bth(op: Opcode)(
        solicited: bool, mig_req: bool, pad in 0u8..4, tver in 0u8..16, pkey: u16,
        fecn: bool, becn: bool, dest_qp in 0u32..=0xFF_FFFF, ack_req: bool, psn in 0u32..=PSN_MASK,
    ) -> Bth {
        Bth {
            opcode: op, solicited, mig_req, pad_count: pad, tver, pkey, fecn, becn, dest_qp,
            ack_req, psn: Psn::new(psn),
        }
    }
}

fn arb_deth() -> impl Strategy<Value = Deth> {
    (any::<u32>(), 0u32..=0xFF_FFFF).prop_map(|(qkey, src_qp)| Deth { qkey, src_qp })
}

fn arb_reth() -> impl Strategy<Value = Reth> {
    any::<(u64, u32, u32)>().prop_map(|(va, rkey, dma_len)| Reth { va, rkey, dma_len })
}

fn arb_atomic_eth() -> impl Strategy<Value = AtomicEth> {
    any::<(u64, u32, u64, u64)>().prop_map(|(va, rkey, swap_add, compare)| AtomicEth {
        va,
        rkey,
        swap_add,
        compare,
    })
}

fn arb_aeth() -> impl Strategy<Value = Aeth> {
    (any::<u8>(), 0u32..=0xFF_FFFF).prop_map(|(s, msn)| Aeth {
        syndrome: Syndrome::from_u8(s),
        msn,
    })
}

/// Header stacks for every opcode, each with exactly the extension headers it dictates.
fn arb_headers() -> impl Strategy<Value = Headers> {
    arb_opcode().prop_flat_map(|op| {
        (
            arb_bth(op),
            arb_deth(),
            arb_reth(),
            arb_atomic_eth(),
            arb_aeth(),
            any::<(u64, u32, u32)>(),
            (0u8..16, 0u8..4),
        )
            .prop_map(
                move |(bth, deth, reth, atomic, aeth, (orig, imm, inv), (plt, sel))| {
                    let i = op.info();
                    Headers {
                        bth,
                        deth: i.has_deth.then_some(deth),
                        feth: i.has_feth.then_some(Feth {
                            placement: plt,
                            selectivity: sel,
                        }),
                        reth: i.has_reth.then_some(reth),
                        atomic_eth: i.has_atomic_eth.then_some(atomic),
                        aeth: i.has_aeth.then_some(aeth),
                        atomic_ack_eth: i.has_atomic_ack_eth.then_some(AtomicAckEth { orig }),
                        immdt: i.has_immdt.then_some(ImmDt { imm }),
                        ieth: i.has_ieth.then_some(Ieth { rkey: inv }),
                    }
                },
            )
    })
}

/// Headers + payload + pad + ICRC placeholder, with PadCnt matching the payload.
fn build(mut h: Headers, payload: &[u8], icrc: [u8; 4]) -> (Headers, Vec<u8>) {
    let payload = if h.info().has_payload { payload } else { &[] };
    h.bth.pad_count = pad_count(payload.len());
    let mut v = vec![0u8; h.encoded_len()];
    assert_eq!(h.encode(&mut v), Ok(h.encoded_len()));
    v.extend_from_slice(payload);
    v.extend(std::iter::repeat_n(0u8, usize::from(h.bth.pad_count)));
    v.extend_from_slice(&icrc);
    (h, v)
}

/// A RoCEv2 IP packet with a `transport`-byte UDP payload (ICRC included), `pad` bytes of
/// link padding after it, its last `cut` bytes cut off and the bytes `flips` names replaced
/// (positions taken modulo its length).
fn roce_ip_packet(
    v6: bool,
    transport: usize,
    pad: usize,
    cut: usize,
    flips: &[(usize, u8)],
) -> Vec<u8> {
    let udp_len = (icrc::UDP_HEADER_LEN + transport) as u16;
    let mut p = if v6 {
        let mut h = [0u8; 40];
        ip_udp::write_ipv6(&mut h, udp_len, 0, 0, 64, &[1; 16], &[2; 16]);
        h.to_vec()
    } else {
        let mut h = [0u8; 20];
        ip_udp::write_ipv4(&mut h, 20 + udp_len, 0, 64, [10, 0, 0, 1], [10, 0, 0, 2]);
        h.to_vec()
    };
    let mut udp = [0u8; 8];
    ip_udp::write_udp(&mut udp, 0xc000, udp_len);
    p.extend_from_slice(&udp);
    p.extend((0..transport + pad).map(|i| i as u8));
    p.truncate(p.len().saturating_sub(cut));
    let n = p.len();
    for &(at, b) in flips {
        if n > 0 {
            p[at % n] = b;
        }
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn wire_decode_of_encode_is_identity(
        h in arb_headers(),
        payload in proptest::collection::vec(any::<u8>(), 0..80),
        icrc: [u8; 4],
    ) {
        let (h, pkt) = build(h, &payload, icrc);
        let (d, range) = Headers::decode(&pkt).unwrap();
        prop_assert_eq!(d, h);
        let expect: &[u8] = if h.info().has_payload { &payload } else { &[] };
        prop_assert_eq!(&pkt[range.clone()], expect);
        prop_assert_eq!(range.start, h.encoded_len());
        prop_assert_eq!(Some(pkt.len()), h.packet_len(expect.len()));
        prop_assert_eq!(pkt.len() % 4, 0);
    }

    #[test]
    fn wire_decode_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        if let Ok((h, range)) = Headers::decode(&bytes) {
            prop_assert!(range.end + ICRC_LEN <= bytes.len());
            prop_assert!(range.start <= range.end);
            // Whatever decodes re-encodes to the same headers (modulo reserved bits).
            let mut out = vec![0u8; h.encoded_len()];
            prop_assert_eq!(h.encode(&mut out), Ok(h.encoded_len()));
            let mut again = out.clone();
            again.extend_from_slice(&bytes[h.encoded_len()..]);
            prop_assert_eq!(Headers::decode(&again), Ok((h, range)));
        }
    }

    /// Only packets that parse are compared, so most are left whole and unflipped.
    #[test]
    fn ip_udp_glance_agrees_with_parse(
        v6: bool,
        transport in 12usize..64,
        pad in 0usize..8,
        cut in prop_oneof![2 => Just(0usize), 1 => 1usize..8],
        flips in prop_oneof![
            2 => Just(Vec::new()),
            1 => proptest::collection::vec((any::<usize>(), any::<u8>()), 1..3),
        ],
    ) {
        let bytes = roce_ip_packet(v6, transport, pad, cut, &flips);
        let glance = ip_udp::udp_payload(&bytes);
        if let Ok(p) = ip_udp::parse(&bytes) {
            prop_assert_eq!(glance, Some(p.udp_payload));
        }
    }

    #[test]
    fn ip_udp_parse_of_a_head_agrees_with_parse(
        v6: bool,
        transport in 12usize..64,
        pad in 0usize..8,
        cut in 0usize..8,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        keep in any::<prop::sample::Index>(),
    ) {
        let bytes = roce_ip_packet(v6, transport, pad, cut, &flips);
        let hl = if v6 { 48 } else { 28 };
        let k = hl + keep.index(bytes.len().saturating_sub(hl) + 1);
        let head = ip_udp::parse_head(bytes.get(..k).unwrap_or(&bytes), bytes.len());
        match ip_udp::parse(&bytes) {
            Ok(p) => {
                let h = head.unwrap();
                prop_assert_eq!(bytes.get(h.udp_payload.clone()), Some(p.udp_payload));
                prop_assert_eq!(h, p.head);
            }
            Err(e) => prop_assert_eq!(head.map(|_| ()), Err(e)),
        }
    }

    #[test]
    fn decode_of_a_head_agrees_with_decode(
        h in arb_headers(),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        keep in any::<prop::sample::Index>(),
    ) {
        let (_, mut pkt) = build(h, &payload, [0; 4]);
        for (i, x) in flips {
            let n = pkt.len();
            pkt[i.index(n)] ^= x;
        }
        let Ok(bth) = Bth::decode(&pkt) else {
            return Ok(());
        };
        let hl = bth.opcode.info().header_len.min(pkt.len());
        let k = hl + keep.index(pkt.len() - hl + 1);
        let mut whole = Headers::new(bth);
        let mut part = Headers::new(bth);
        let a = whole.decode_after_bth(&pkt);
        let b = part.decode_after_bth_of_prefix(&pkt[..k], pkt.len());
        prop_assert_eq!(&a, &b);
        if a.is_ok() {
            prop_assert_eq!(whole, part);
        }
    }

    #[test]
    fn wire_decode_never_panics_on_mutated_packets(
        h in arb_headers(),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        do_cut: bool,
    ) {
        let (_, mut pkt) = build(h, &payload, [0; 4]);
        for (i, x) in flips {
            let n = pkt.len();
            pkt[i.index(n)] ^= x;
        }
        if do_cut {
            let n = pkt.len();
            pkt.truncate(cut.index(n + 1));
        }
        let glance = Glance::of(&pkt);
        match Headers::decode(&pkt) {
            Ok((d, range)) => {
                prop_assert!(d.is_consistent());
                prop_assert!(range.end + ICRC_LEN <= pkt.len());
                // Wherever the decoder succeeds, the receive path's glance agrees with it.
                let g = glance.unwrap();
                prop_assert_eq!(g.opcode, d.bth.opcode);
                prop_assert_eq!(g.dest_qp, d.bth.dest_qp);
                let bulk = match (d.info().operation, d.reth) {
                    (Operation::RdmaReadRequest, Some(r)) => r.dma_len as usize,
                    _ => range.len(),
                };
                prop_assert_eq!(g.bulk_len, bulk);
            }
            Err(DecodeError::UnknownOpcode(op)) => {
                prop_assert_eq!(Some(op), pkt.first().copied());
                prop_assert!(glance.is_none());
            }
            Err(_) => {}
        }
    }

    #[test]
    fn icrc_check_of_fill_is_true(
        h in arb_headers(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        ip: [u8; 20],
        udp: [u8; 8],
    ) {
        let (_, mut pkt) = build(h, &payload, [0; 4]);
        let v4 = icrc::IpHeader::V4(&ip);
        let c = icrc::fill(v4, &udp, &mut pkt);
        prop_assert!(c.is_some());
        prop_assert!(icrc::check(v4, &udp, &pkt));
        let n = pkt.len();
        pkt[n - 5] ^= 0x01;
        prop_assert!(!icrc::check(v4, &udp, &pkt));
    }

    #[test]
    fn sliced_crc_equals_table_crc(
        state: u32,
        data in proptest::collection::vec(any::<u8>(), 0..2100),
        split in 0usize..2100,
    ) {
        prop_assert_eq!(
            icrc::crc32_update_sliced(state, &data),
            icrc::crc32_update(state, &data)
        );
        // Continued over two pieces (a packet's headers, then its fragments).
        let (a, b) = data.split_at(split.min(data.len()));
        let two = icrc::crc32_update_sliced(icrc::crc32_update_sliced(state, a), b);
        prop_assert_eq!(two, icrc::crc32_update(state, &data));
    }

    #[test]
    fn psn_add_then_sub_is_identity(a in 0u32..=PSN_MASK, n: u32) {
        let p = Psn::new(a);
        prop_assert_eq!(p.add(n).sub(n), p);
        prop_assert_eq!(p.sub(n).add(n), p);
        prop_assert!(p.add(n).value() <= PSN_MASK);
    }

    #[test]
    fn psn_diff_of_add_is_n_within_half_window(a in 0u32..=PSN_MASK, n in 0u32..PSN_HALF_WINDOW) {
        let p = Psn::new(a);
        prop_assert_eq!(p.add(n).diff(p), n as i32);
        prop_assert_eq!(p.sub(n).diff(p), -(n as i32));
        prop_assert_eq!(p.add(n).distance_from(p), n);
    }

    #[test]
    fn psn_diff_range_and_antisymmetry(a in 0u32..=PSN_MASK, b in 0u32..=PSN_MASK) {
        let (x, y) = (Psn::new(a), Psn::new(b));
        let d = x.diff(y);
        prop_assert!((-(1i32 << 23)..(1i32 << 23)).contains(&d));
        prop_assert_eq!(y.add(d as u32), x);
        if d != -(1i32 << 23) {
            prop_assert_eq!(y.diff(x), -d);
        }
        prop_assert_eq!(x.is_before(y), d < 0);
        prop_assert_eq!(x.is_after(y), d > 0);
        prop_assert_eq!(x == y, d == 0);
    }

    #[test]
    fn psn_responder_classes_partition_the_space(psn in 0u32..=PSN_MASK, epsn in 0u32..=PSN_MASK) {
        let (p, e) = (Psn::new(psn), Psn::new(epsn));
        let back = e.distance_from(p); // how far p lies behind e
        let expected = if back == 0 {
            RequestPsnClass::Expected
        } else if back <= PSN_HALF_WINDOW {
            RequestPsnClass::Duplicate
        } else {
            RequestPsnClass::Invalid
        };
        prop_assert_eq!(classify_request_psn(p, e), expected);
    }

    #[test]
    fn psn_requester_classes_partition_the_space(
        oldest in 0u32..=PSN_MASK,
        outstanding in 0u32..=PSN_HALF_WINDOW,
        ack in 0u32..=PSN_MASK,
    ) {
        let o = Psn::new(oldest);
        let next = o.add(outstanding);
        let a = Psn::new(ack);
        let ahead = a.distance_from(o);
        let expected = if ahead < outstanding {
            AckPsnClass::Valid
        } else if o.distance_from(a) <= PSN_HALF_WINDOW && a != o {
            AckPsnClass::Duplicate
        } else {
            AckPsnClass::Ghost
        };
        prop_assert_eq!(classify_ack_psn(a, o, next), expected);
    }

    #[test]
    fn credit_encode_is_monotonic_and_never_overstates(a: u32, b: u32) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(encode_credit(lo) <= encode_credit(hi));
        let c = encode_credit(a);
        prop_assert!(c < CREDIT_CODE_INVALID);
        prop_assert!(decode_credit(c).unwrap() <= a);
        // The next table entry (if any) would overstate.
        if let Some(next) = decode_credit(c + 1) {
            prop_assert!(next > a);
        }
    }

    #[test]
    fn credit_encode_of_decode_is_identity(code in 0u8..0x1F) {
        let n = decode_credit(code).unwrap();
        prop_assert_eq!(encode_credit(n), code);
        if code > 0 {
            prop_assert!(decode_credit(code - 1).unwrap() < n);
        }
    }

    #[test]
    fn credit_lsn_wraps_and_orders(msn in 0u32..=PSN_MASK, code in 0u8..0x1F, k in 0u32..PSN_HALF_WINDOW) {
        let lsn = lsn_from_ack(msn, code).unwrap();
        prop_assert!(lsn <= PSN_MASK);
        prop_assert_eq!(lsn, (msn + decode_credit(code).unwrap()) & PSN_MASK);
        prop_assert!(ssn_within_lsn(lsn.wrapping_sub(k) & PSN_MASK, lsn));
        prop_assert!(!ssn_within_lsn(lsn.wrapping_add(k + 1) & PSN_MASK, lsn) || k + 1 >= PSN_HALF_WINDOW);
        let limit = CreditLimit::from_ack(msn, code);
        prop_assert!(limit.allows(msn));
        prop_assert!(CreditLimit::Lsn(lsn).update(msn, CREDIT_CODE_INVALID).is_unlimited());
    }
}
