// SPDX-License-Identifier: GPL-2.0

//! One received RoCEv2 packet, in the device's receive work: parse the IP and UDP headers,
//! check the ICRC, decode the transport headers, find the QP and hand the packet to it.
//! Anything malformed is counted and dropped: a remote peer can only make us drop packets.

use super::counters::Counters;
use super::datapath::DevShared;
use crate::net::skb::Skb;
use crate::rvcore::apm::PathMatch;
use crate::rvcore::wire::Headers;
use core::sync::atomic::Ordering;
use kernel::sync::Arc;

/// Processes one packet queued for `dev`.
pub fn packet(dev: &Arc<DevShared>, mut skb: Skb) {
    let c = &dev.counters;
    let Some(port) = dev
        .ports
        .iter()
        .position(|p| skb.came_from(p))
        .and_then(|i| u8::try_from(i + 1).ok())
    else {
        Counters::inc(&c.rx_malformed);
        return;
    };
    let rx = match skb.parse_roce() {
        Ok(rx) => rx,
        Err(e) => {
            if e.to_errno() == -(crate::bindings::EBADMSG as i32) {
                Counters::inc(&c.icrc_errors);
            } else {
                Counters::inc(&c.rx_malformed);
            }
            return;
        }
    };
    let Ok((h, payload)) = Headers::decode_with_payload(rx.udp_payload) else {
        Counters::inc(&c.rx_malformed);
        return;
    };
    let Some(qp) = dev.qp(h.bth.dest_qp) else {
        Counters::inc(&c.rx_no_qp);
        return;
    };
    Counters::inc(&c.rcvd_pkts);
    c.rcvd_bytes
        .fetch_add(rx.udp_payload.len() as u64, Ordering::Relaxed);
    let pm = PathMatch {
        port_num: port,
        sgid: rx.src_gid,
        dgid: rx.dst_gid,
    };
    qp.receive(&h, payload, &pm);
}
