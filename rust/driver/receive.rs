// SPDX-License-Identifier: GPL-2.0

//! The receive path. Each device's [`DevShared`] is an [`RxListener`] of the UDP tunnel: the
//! tunnel's `encap_rcv` (softirq) hands every RoCEv2 packet to the device whose port netdev it
//! arrived on, which handles it right there, as rdma_rxe does (no work-item hop per packet,
//! which costs latency): parse the IP and UDP headers, check the ICRC, decode the transport
//! headers, find the QP and run the protocol core under the QP lock. Anything malformed is
//! counted and dropped: a remote peer can only make us drop packets.

use super::counters::Counters;
use super::dev_shared::DevShared;
use super::mcast::MAX_QP_ATTACH;
use crate::net::roce::{RoceRxError, UDP_HLEN};
use crate::net::skb::Skb;
use crate::net::udp_tunnel::{self, RxListener};
use crate::rvcore::apm::{NetHeader, PathMatch};
use crate::rvcore::wire::bth::{RawBth, MULTICAST_QPN};
use crate::rvcore::wire::{DecodeError, Headers};
use core::sync::atomic::Ordering;
use kernel::{prelude::*, sync::Arc};

/// Installs the receive dispatch; call once in module init, before any device exists.
pub fn rx_init() {
    udp_tunnel::rx_init();
}

/// Makes `dev` receive packets arriving on its ports.
pub fn rx_listen(dev: &Arc<DevShared>) -> Result {
    udp_tunnel::listen(dev.clone())
}

impl RxListener for DevShared {
    fn accepts(&self, skb: &Skb) -> bool {
        self.ports.iter().any(|p| skb.arrived_for(p))
    }

    fn receive(&self, skb: Skb) {
        packet(self, skb);
    }
}

/// Processes one packet that arrived on a port of `dev` (softirq context).
pub fn packet(dev: &DevShared, mut skb: Skb) {
    let c = &dev.counters;
    let Some(port) = dev
        .ports
        .iter()
        .position(|p| skb.arrived_for(p))
        .and_then(|i| u8::try_from(i + 1).ok())
    else {
        Counters::inc(&c.rx_malformed);
        return;
    };
    let rx = match skb.parse_roce() {
        Ok(rx) => rx,
        Err(RoceRxError::BadIcrc) => {
            Counters::inc(&c.icrc_errors);
            return;
        }
        Err(RoceRxError::Malformed(_) | RoceRxError::Skb(_)) => {
            Counters::inc(&c.rx_malformed);
            return;
        }
    };
    let pm = PathMatch {
        port_num: port,
        sgid: rx.src_gid,
        dgid: rx.dst_gid,
        net: NetHeader::from_ip_header(rx.ip_header).unwrap_or_default(),
    };
    let decoded = Headers::decode_with_payload(rx.udp_payload);
    // An opcode the decoder does not know still has a BTH: the QP decides (an RC QP answers a
    // reserved RC opcode with an Invalid Request NAK, seed 001); anything else is malformed.
    let raw = match decoded {
        Err(DecodeError::UnknownOpcode(_)) => RawBth::decode(rx.udp_payload).ok(),
        _ => None,
    };
    let dest_qp = match (&decoded, &raw) {
        (Ok((h, _)), _) => h.bth.dest_qp,
        (Err(_), Some(b)) => b.dest_qp,
        (Err(_), None) => {
            Counters::inc(&c.rx_malformed);
            return;
        }
    };
    // Bytes count whole IP packets, as `sent_bytes` and rdma_rxe count them.
    let ip_len = rx.ip_header.len() + UDP_HLEN + rx.udp_payload.len();
    if dest_qp == MULTICAST_QPN {
        multicast(dev, port, &rx.dst_gid, decoded, &pm, ip_len);
        return;
    }
    let Some(qp) = dev.qp(dest_qp, port) else {
        Counters::inc(&c.rx_no_qp);
        return;
    };
    count_rcvd(c, ip_len);
    match (decoded, raw) {
        (Ok((h, payload)), _) => qp.receive(&h, payload, &pm),
        (Err(_), Some(b)) => qp.receive_unsupported(&b, &pm),
        (Err(_), None) => {}
    }
}

fn count_rcvd(c: &Counters, len: usize) {
    Counters::inc(&c.rcvd_pkts);
    c.rcvd_bytes.fetch_add(len as u64, Ordering::Relaxed);
}

/// A packet for DestQP 0xFFFFFF: every UD QP attached to its destination GID on this device
/// gets it (each QP's own checks then apply: state, P_Key, Q_Key, a receive WQE). A group
/// nobody joined here is counted as a packet for no QP.
fn multicast(
    dev: &DevShared,
    port: u8,
    group: &[u8; 16],
    decoded: Result<(Headers, &[u8]), DecodeError>,
    pm: &PathMatch,
    len: usize,
) {
    let c = &dev.counters;
    let mut qpns = [0; MAX_QP_ATTACH];
    let n = dev.mcast.members(group, &mut qpns);
    let Ok((h, payload)) = decoded else {
        Counters::inc(&c.rx_malformed);
        return;
    };
    if n == 0 {
        Counters::inc(&c.rx_no_qp);
        return;
    }
    count_rcvd(c, len);
    for &qpn in &qpns[..n] {
        if let Some(qp) = dev.qp(qpn, port) {
            qp.receive(&h, payload, pm);
        }
    }
}
