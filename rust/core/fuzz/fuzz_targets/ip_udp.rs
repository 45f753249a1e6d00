//! Feeds arbitrary bytes, as an IP packet, to the IP/UDP parser and to the glance that finds
//! the UDP payload without it. Neither may panic, and where the parser accepts a packet the
//! glance finds the same UDP payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvrdma_core::wire::ip_udp;

fuzz_target!(|data: &[u8]| {
    let glance = ip_udp::udp_payload(data);
    if let Ok(p) = ip_udp::parse(data) {
        assert_eq!(glance, Some(p.udp_payload));
    }
});
