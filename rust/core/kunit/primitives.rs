// SPDX-License-Identifier: GPL-2.0

//! KUnit suite run when rvrdma.ko loads: the protocol core, built into the kernel, checked
//! against the kernel's own primitives (the suite prints KTAP to the kernel log).

#[kernel::prelude::kunit_tests(rvrdma_core)]
mod tests {
    use crate::net::crc32::crc32_le;
    use crate::rvcore::{credit, icrc, psn::Psn, wire};

    /// The core's table-driven CRC-32 equals the kernel's `crc32_le` (what rxe uses).
    #[test]
    fn core_crc32_matches_kernel_crc32_le() {
        let mut data = [0u8; 301];
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(11);
        }
        for len in [0usize, 1, 7, 64, 301] {
            let slice = &data[..len];
            assert_eq!(
                icrc::crc32_update(0xdebb_20e3, slice),
                crc32_le(0xdebb_20e3, slice)
            );
            assert_eq!(icrc::crc32_update(!0, slice), crc32_le(!0, slice));
        }
    }

    /// The core's ICRC of a RoCEv2 IPv4 packet equals rdma_rxe's computation with crc32_le:
    /// masked IPv4 (TOS, TTL, checksum), masked UDP checksum, BTH with resv8a masked, the
    /// rest, seed 0xdebb20e3, inverted at the end.
    #[test]
    fn core_icrc_matches_rxe_algorithm() {
        let ip: [u8; 20] = [
            0x45, 0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0xab, 0xcd, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        let udp: [u8; 8] = [0xc0, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x55, 0xaa];
        // SEND ONLY to QP 0x11, PSN 0x123456, AckReq, 12 bytes of payload, room for the ICRC.
        let mut transport = [0u8; 12 + 12 + 4];
        let bth = wire::Bth {
            ack_req: true,
            ..wire::Bth::new(wire::Opcode::RcSendOnly, 0x11, Psn::new(0x12_3456))
        };
        assert!(bth.encode(&mut transport[..12]).is_ok());
        for (i, b) in transport[12..24].iter_mut().enumerate() {
            *b = i as u8;
        }
        let ours = icrc::fill(icrc::IpHeader::V4(&ip), &udp, &mut transport);
        assert!(ours.is_some());

        // rxe's steps, literally, with the kernel's crc32_le.
        let mut pshdr = [0u8; 20 + 8 + 12];
        pshdr[..20].copy_from_slice(&ip);
        pshdr[20..28].copy_from_slice(&udp);
        pshdr[28..40].copy_from_slice(&transport[..12]);
        pshdr[1] = 0xff; // tos
        pshdr[8] = 0xff; // ttl
        pshdr[10] = 0xff; // checksum
        pshdr[11] = 0xff;
        pshdr[26] = 0xff; // udp checksum
        pshdr[27] = 0xff;
        pshdr[28 + 4] = 0xff; // bth resv8a
        let crc = crc32_le(0xdebb_20e3, &pshdr);
        let crc = !crc32_le(crc, &transport[12..24]);
        assert_eq!(ours, Some(crc));
        assert_eq!(transport[24..28], crc.to_le_bytes());
    }

    /// Table 17-8 round-trips in the kernel build too (seed 003).
    #[test]
    fn seed003_credit_table_round_trip() {
        for code in 0u8..0x1f {
            let n = credit::decode_credit(code);
            assert!(n.is_some());
            assert_eq!(n.map(credit::encode_credit), Some(code));
        }
        assert_eq!(credit::decode_credit(0x1f), None);
    }

    /// 24-bit PSN arithmetic wraps (the kernel builds with overflow checks).
    #[test]
    fn psn_wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).next(), Psn::new(0));
        assert_eq!(Psn::new(0).diff(Psn::new(0xff_ffff)), 1);
    }
}
