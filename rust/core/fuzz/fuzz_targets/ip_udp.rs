//! Feeds arbitrary bytes, as an IP packet, to the IP/UDP parser, to the glance that finds the
//! UDP payload without it, and to the parser of a packet's head (its first 48 bytes, the rest
//! elsewhere). None may panic, and where the parser accepts a packet the glance finds the same
//! UDP payload and the head parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvrdma_core::wire::ip_udp;

fuzz_target!(|data: &[u8]| {
    let glance = ip_udp::udp_payload(data);
    let head = ip_udp::parse_head(data.get(..48).unwrap_or(data), data.len());
    match ip_udp::parse(data) {
        Ok(p) => {
            assert_eq!(glance, Some(p.udp_payload));
            assert_eq!(head, Ok(p.head));
        }
        Err(e) => assert_eq!(head.map(|_| ()), Err(e)),
    }
});
