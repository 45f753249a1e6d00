//! Feeds arbitrary bytes to the ICRC helpers: an IPv4 or IPv6 header, a UDP header and a UDP
//! payload. Nothing may panic, `fill` followed by `check` must succeed, and the incremental API
//! fed in two pieces must agree with the one-shot computation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvrdma_core::icrc::{self, Icrc, IpHeader};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let ip_len = if sel & 1 == 0 { 20 } else { 40 };
    if rest.len() < ip_len + 8 {
        return;
    }
    let (ip, rest) = rest.split_at(ip_len);
    let (udp, payload) = rest.split_at(8);
    let udp: [u8; 8] = udp.try_into().unwrap();
    let v4: [u8; 20];
    let v6: [u8; 40];
    let hdr = if ip_len == 20 {
        v4 = ip.try_into().unwrap();
        IpHeader::V4(&v4)
    } else {
        v6 = ip.try_into().unwrap();
        IpHeader::V6(&v6)
    };

    let _ = icrc::check(hdr, &udp, payload);
    let mut buf = payload.to_vec();
    match icrc::fill(hdr, &udp, &mut buf) {
        Some(c) => {
            assert!(icrc::check(hdr, &udp, &buf));
            let transport = &buf[..buf.len() - 4];
            let bth: [u8; 12] = transport[..12].try_into().unwrap();
            let mut inc = Icrc::new();
            match hdr {
                IpHeader::V4(h) => inc.update_ipv4_prefix(h, &udp, &bth),
                IpHeader::V6(h) => inc.update_ipv6_prefix(h, &udp, &bth),
            }
            let body = &transport[12..];
            let cut = usize::from(sel >> 1).min(body.len());
            inc.update(&body[..cut]);
            inc.update(&body[cut..]);
            assert_eq!(inc.finish(), c);
        }
        None => assert!(payload.len() < 16),
    }
});
