//! The unreliable transports: UC (no ACKs, a lost packet drops the message, a send error moves
//! the QP to SQE) and UD (single-packet Sends with a DETH, Q_Key checks and a GRH).

use rvrdma_core::events::{WcOpcode, WcStatus};
use rvrdma_core::qp::QpAttrs;
use rvrdma_core::qp_state::{AttrMask, QpState, QpType};
use rvrdma_core::requester::PostError;
use rvrdma_core::wire::Opcode;
use rvrdma_core::wqe::{SendOpcode, SendWr, SgList, Sge};

use rvrdma_core::apm::{NetHeader, PathMatch};

use super::fixtures::*;

// ---- UC --------------------------------------------------------------------------------------

#[test]
fn uc_send_and_write_with_imm_without_acks() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [0, 2],
        ..Opts::default()
    });
    assert!(d.take(1).is_empty(), "no initial ACK on UC");
    let data: Vec<u8> = (0..600u32).map(|x| (x * 7) as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post(0, send_wr(1, SendOpcode::Send, 600)).expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWriteWithImm, 300))
        .expect("post");
    assert_eq!(
        d.post(0, read_wr(3, 8)),
        Err(PostError::InvalidWr),
        "no RDMA Read on UC"
    );
    d.progress(0);
    assert_eq!(d.e[0].out.send_cqes.len(), 2, "complete once sent");
    let p = d.take(0);
    assert!(p.iter().all(|(h, _, _)| !h.bth.ack_req));
    d.deliver_all(1, &p);
    d.progress(1);
    assert!(d.take(1).is_empty(), "UC never acknowledges");
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!(rc.len(), 2);
    assert_eq!((rc[0].opcode, rc[0].byte_len), (WcOpcode::Recv, 600));
    assert_eq!(
        (rc[1].opcode, rc[1].byte_len),
        (WcOpcode::RecvRdmaWithImm, 300)
    );
    let m = d.e[1].mem.0.borrow();
    assert_eq!(m.read(DST, DST_VA, 600).expect("r"), data);
    assert_eq!(
        m.read(RMT, RMT_VA, 300).expect("r"),
        data[..300],
        "the Write's bytes in the remote buffer"
    );
}

#[test]
fn uc_lost_packet_drops_message_and_reuses_the_receive_wqe() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 5)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 4);
    for (k, (h, pl, port)) in p.into_iter().enumerate() {
        if k != 1 {
            d.deliver(1, &h, &pl, port);
        }
    }
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!(rc.len(), 1, "only the second message arrives");
    assert_eq!(
        (rc[0].wr_id, rc[0].byte_len),
        (1000, 5),
        "in the first receive WQE"
    );
    assert_eq!(d.state(1), QpState::Rts);
}

#[test]
fn uc_send_error_moves_to_sqe_flushes_sq_and_rq_keeps_working() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [1, 0],
        ..Opts::default()
    });
    let mut bad = send_wr(1, SendOpcode::Send, 8);
    bad.sg = SgList::from_slice(&[Sge {
        addr: SRC_VA,
        length: 8,
        lkey: 0xbad,
    }])
    .expect("sg");
    d.post(0, bad).expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 8)).expect("post");
    d.progress(0);
    assert_eq!(d.state(0), QpState::Sqe);
    let c = &d.e[0].out.send_cqes;
    assert_eq!(
        (c[0].status, c[1].status),
        (WcStatus::LocProtErr, WcStatus::WrFlushErr)
    );
    // The RQ still works in SQE.
    d.post(1, send_wr(9, SendOpcode::Send, 4)).expect("post");
    d.progress(1);
    d.flow(1);
    assert_eq!(d.e[0].out.recv_cqes[0].status, WcStatus::Success);
}

// ---- UD --------------------------------------------------------------------------------------

pub(super) fn ud_pair(qkeys: [u32; 2]) -> Duo {
    let mut d = Duo {
        e: [
            mk_end_t(0, false, QpType::Ud),
            mk_end_t(1, false, QpType::Ud),
        ],
        now: 0,
        recv_seq: [0, 0],
    };
    for (i, qkey) in qkeys.into_iter().enumerate() {
        d.e[i].qp.set_port_mtu(1024);
        let a = QpAttrs {
            qp_state: QpState::Init,
            qkey,
            ..QpAttrs::default()
        };
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY;
        d.modify(i, &a, m).expect("INIT");
        d.move_to(i, QpState::Rtr);
        let a = QpAttrs {
            qp_state: QpState::Rts,
            sq_psn: 7,
            ..QpAttrs::default()
        };
        d.modify(i, &a, AttrMask::STATE | AttrMask::SQ_PSN)
            .expect("RTS");
    }
    d
}

pub(super) fn ud_send(id: u64, len: u32, qkey: u32) -> SendWr {
    let mut w = send_wr(id, SendOpcode::SendWithImm, len);
    w.set_ud_path(path(0, 0));
    w.set_ud_dest(0x12, qkey);
    w
}

#[test]
fn ud_single_packet_send_with_deth_qkey_and_grh() {
    let mut d = ud_pair([0x1111, 0x2222]);
    let data: Vec<u8> = (0..300u32).map(|x| x as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post_recv(1, 1024).expect("recv");
    d.post(0, ud_send(1, 300, 0x2222)).expect("post");
    d.progress(0);
    assert_eq!(
        d.e[0].out.send_cqes[0].status,
        WcStatus::Success,
        "complete once sent"
    );
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let h = &p[0].0;
    assert_eq!(h.bth.opcode, Opcode::UdSendOnlyWithImmediate);
    assert_eq!(h.bth.dest_qp, 0x12);
    let deth = h.deth.expect("DETH");
    assert_eq!((deth.qkey, deth.src_qp), (0x2222, 0x11));
    d.deliver(1, &p[0].0, &p[0].1, 1);
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(c.byte_len, 340, "40-byte GRH + payload");
    assert_eq!(c.src_qp, 0x11);
    assert_eq!(
        c.flags & rvrdma_core::events::WC_GRH,
        rvrdma_core::events::WC_GRH
    );
    let got = d.e[1]
        .mem
        .0
        .borrow()
        .read(DST, DST_VA + 40, 300)
        .expect("r");
    assert_eq!(got, data);
    assert!(d.take(1).is_empty(), "UD never acknowledges");
}

/// Each queued datagram leaves for its own destination: the send queue keeps every slot's
/// destination apart from the WR, and a later post must not overwrite an earlier one's.
#[test]
fn ud_sends_queued_together_each_go_to_their_own_destination() {
    let mut d = ud_pair([0x1111, 0x2222]);
    let dests = [
        (0x12, 0x2222, 1u8, 0x111),
        (0x345, 0x7777, 2, 0x222),
        (0x12, 0x8000_0000, 1, 0x333),
    ];
    for (id, &(qpn, qkey, port, flow)) in dests.iter().enumerate() {
        let mut w = send_wr(id as u64, SendOpcode::Send, 8);
        let mut p = path(0, usize::from(port - 1));
        p.flow_label = flow;
        w.set_ud_path(p);
        w.set_ud_dest(qpn, qkey);
        d.post(0, w).expect("post");
    }
    d.progress(0);
    let sent = std::mem::take(&mut d.e[0].out.tx);
    assert_eq!(sent.len(), 3);
    for (pkt, &(qpn, qkey, port, flow)) in sent.iter().zip(dests.iter()) {
        let (h, _) = rvrdma_core::wire::Headers::decode_with_payload(&pkt.bytes).expect("decode");
        assert_eq!(h.bth.dest_qp, qpn);
        let want_qkey = if qkey & 0x8000_0000 != 0 {
            0x1111
        } else {
            qkey
        };
        assert_eq!(
            h.deth.expect("DETH").qkey,
            want_qkey,
            "the QP's own Q_Key when the top bit is set"
        );
        assert_eq!((pkt.path.port_num, pkt.path.flow_label), (port, flow));
        assert_eq!(pkt.path.dgid, path(0, usize::from(port - 1)).dgid);
    }
    assert_eq!(d.e[0].out.send_cqes.len(), 3);
}

/// A datagram QP needs room for a destination in every send slot; a connected one needs none;
/// a QP type the core does not run is refused.
#[test]
fn a_datagram_qp_without_room_for_each_destination_is_refused() {
    use rvrdma_core::qp::{Qp, QpCreate};
    use rvrdma_core::wqe::{RecvSlot, SendSlot, UdDest};
    let create = |qp_type| QpCreate {
        qp_type,
        qpn: 0x11,
        srq: false,
    };
    let sq = |dests: usize| {
        (
            vec![SendSlot::default(); 4],
            vec![Sge::default(); 4],
            vec![UdDest::EMPTY; dests],
        )
    };
    let rq = || (vec![RecvSlot::default(); 4], vec![Sge::default(); 4]);
    for t in [QpType::Ud, QpType::Gsi] {
        assert!(
            Qp::new(create(t), sq(3), rq()).is_none(),
            "{t:?} with 3 of 4"
        );
        assert!(
            Qp::new(create(t), sq(4), rq()).is_some(),
            "{t:?} with 4 of 4"
        );
    }
    for t in [QpType::Rc, QpType::Uc] {
        assert!(
            Qp::new(create(t), sq(0), rq()).is_some(),
            "{t:?} needs none"
        );
    }
    for t in [
        QpType::Smi,
        QpType::RawPacket,
        QpType::XrcIni,
        QpType::XrcTgt,
    ] {
        assert!(Qp::new(create(t), sq(4), rq()).is_none(), "{t:?}");
    }
}

#[test]
fn ud_wrong_qkey_is_dropped_and_counted() {
    let mut d = ud_pair([0x1111, 0x2222]);
    d.post_recv(1, 1024).expect("recv");
    d.post(0, ud_send(1, 10, 0x3333)).expect("post");
    d.progress(0);
    d.flow(0);
    assert!(
        d.e[1].out.recv_cqes.is_empty(),
        "Q_Key mismatch: silently dropped"
    );
    assert_eq!(d.e[1].qp.counters().qkey_violations, 1);
    assert_eq!(d.e[1].qp.state(), QpState::Rts);
    // Top bit set: the QP's own Q_Key is used.
    d.post(0, ud_send(3, 10, 0x8000_0000)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p[0].0.deth.expect("DETH").qkey, 0x1111);
    // The receive WQE is still there for a Send with the right Q_Key.
    d.post(0, ud_send(4, 10, 0x2222)).expect("post");
    d.progress(0);
    d.flow(0);
    assert_eq!(d.e[1].out.recv_cqes.len(), 1);
    assert_eq!(d.e[1].out.recv_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].qp.counters().qkey_violations, 1);
}

/// C10-93.1.1: a UD message longer than the MTU emits no packet and no error; the Sends
/// around it go out as usual, and completions keep their order.
#[test]
fn ud_send_longer_than_the_mtu_completes_without_a_packet() {
    let mut d = ud_pair([0x1111, 0x2222]);
    d.post(0, ud_send(1, 100, 0x2222)).expect("post");
    d.post(0, ud_send(2, 1025, 0x2222)).expect("post: accepted");
    d.post(0, ud_send(3, 1 << 20, 0x2222))
        .expect("post: accepted");
    d.post(0, ud_send(4, 1024, 0x2222)).expect("post");
    d.progress(0);
    let ids: Vec<_> = d.e[0].out.send_cqes.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert!(d.e[0]
        .out
        .send_cqes
        .iter()
        .all(|c| c.status == WcStatus::Success));
    let p = d.take(0);
    let lens: Vec<_> = p.iter().map(|(_, b, _)| b.len()).collect();
    assert_eq!(lens, [100, 1024], "no packet for the long ones");
    assert_eq!(d.e[0].qp.state(), QpState::Rts);
}

/// GSI (QP1) is UD on the wire: a DETH with source QP 1 and the GSI Q_Key (0x80010000, the QP's
/// own through the top bit of the WR's Q_Key, as ib_mad posts); its Reset -> Init takes no port
/// (the port is the one it was created on). A receive gets the packet's network header in its
/// GRH area: an IPv4 header in the last 20 of the 40 bytes after 20 zero bytes, and a
/// completion that says IPv4 (IB_WC_WITH_NETWORK_HDR_TYPE), which ib_core needs to build the
/// reply's address.
#[test]
fn gsi_sends_with_qp1_and_its_qkey_and_receives_the_ipv4_header() {
    const GSI_QKEY: u32 = 0x8001_0000;
    let mut d = Duo {
        e: [
            mk_end_t(0, false, QpType::Gsi),
            mk_end_t(1, false, QpType::Gsi),
        ],
        now: 0,
        recv_seq: [0, 0],
    };
    for i in 0..2 {
        d.e[i].qp = rvrdma_core::qp::Qp::new(
            rvrdma_core::qp::QpCreate {
                qp_type: QpType::Gsi,
                qpn: 1,
                srq: false,
            },
            crate::sim::node::sim_send_queue(16, true),
            crate::sim::node::sim_queue(rvrdma_core::wqe::RecvSlot::default(), 16),
        )
        .expect("GSI");
        d.e[i].qp.set_port_mtu(1024);
        let a = QpAttrs {
            qp_state: QpState::Init,
            qkey: GSI_QKEY,
            ..QpAttrs::default()
        };
        d.modify(
            i,
            &a,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::QKEY,
        )
        .expect("INIT without a port");
        d.move_to(i, QpState::Rtr);
        let a = QpAttrs {
            qp_state: QpState::Rts,
            ..QpAttrs::default()
        };
        d.modify(i, &a, AttrMask::STATE | AttrMask::SQ_PSN)
            .expect("RTS");
    }
    let mad: Vec<u8> = (0..256u32).map(|x| (x * 3) as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &mad);
    d.post_recv(1, 1024).expect("recv");
    let mut w = send_wr(1, SendOpcode::Send, 256);
    w.set_ud_path(path(0, 0));
    w.set_ud_dest(1, 0x8000_0000);
    d.post(0, w).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let h = &p[0].0;
    assert_eq!(h.bth.dest_qp, 1);
    let deth = h.deth.expect("DETH");
    assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, 1));

    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 77, 0, 2]);
    let pm = PathMatch {
        port_num: 1,
        sgid: gid(0, 0),
        dgid: gid(1, 0),
        net: NetHeader::from_ip_header(&ip).expect("IPv4 header"),
    };
    let now = d.now;
    let e = &mut d.e[1];
    e.qp.receive(now, &p[0].0, p[0].1[..].into(), &pm, &mut e.mem, &mut e.out);
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!((c.src_qp, c.byte_len), (1, 40 + 256));
    let want = rvrdma_core::events::WC_GRH | rvrdma_core::events::WC_WITH_NETWORK_HDR_TYPE;
    assert_eq!(c.flags & want, want);
    assert_eq!(c.network_hdr_type, rvrdma_core::events::NETWORK_IPV4);
    let got = d.e[1]
        .mem
        .0
        .borrow()
        .read(DST, DST_VA, 40 + 256)
        .expect("r");
    assert_eq!(got[..20], [0u8; 20], "20 zero bytes before the IPv4 header");
    assert_eq!(got[20..40], ip);
    assert_eq!(got[40..], mad[..]);
}

/// Multicast (IBA 10.8.3.2): a UD Send to DestQP 0xFFFFFF reaches a UD QP (the shell hands it
/// only to the QPs attached to the packet's group), with the sender's QPN as the source QP;
/// an RC QP and QP1 drop it.
#[test]
fn ud_multicast_reaches_ud_qps_only() {
    use rvrdma_core::wire::bth::MULTICAST_QPN;
    let mut d = ud_pair([0x1111, 0x2222]);
    let data: Vec<u8> = (0..100u32).map(|x| (x * 5) as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post_recv(1, 1024).expect("recv");
    let mut w = ud_send(1, 100, 0x2222);
    let qkey = w.ud.remote_qkey;
    w.set_ud_dest(MULTICAST_QPN, qkey);
    d.post(0, w).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.dest_qp, MULTICAST_QPN);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(
        (c.status, c.byte_len, c.src_qp),
        (WcStatus::Success, 140, 0x11)
    );
    let got = d.e[1]
        .mem
        .0
        .borrow()
        .read(DST, DST_VA + 40, 100)
        .expect("r");
    assert_eq!(got, data);

    // The same packet offered to an RC QP: not a packet for it.
    let mut rc = Duo::new(Opts {
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    rc.take(1);
    rc.deliver(1, &p[0].0, &p[0].1, 1);
    assert!(rc.e[1].out.recv_cqes.is_empty());
    assert!(rc.take(1).is_empty(), "no NAK either");
    assert_eq!(rc.state(1), QpState::Rts);
}

/// BTH:SE travels on a UD Send as on RC (IBA 9.2.1): the receive completion is solicited.
#[test]
fn ud_solicited_send_gives_a_solicited_receive() {
    let mut d = ud_pair([0x1111, 0x2222]);
    d.post_recv(1, 1024).expect("recv");
    d.post_recv(1, 1024).expect("recv");
    let mut wr = ud_send(1, 100, 0x2222);
    wr.flags.0 |= rvrdma_core::wqe::SendFlags::SOLICITED;
    d.post(0, wr).expect("post");
    d.post(0, ud_send(2, 100, 0x2222)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(
        p.iter()
            .map(|(h, _, _)| h.bth.solicited)
            .collect::<Vec<_>>(),
        [true, false]
    );
    d.deliver_all(1, &p);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 2);
    assert!(c[0].solicited && !c[1].solicited);
}

/// A UD receive that takes an unparsable SRQ WQE (`RecvWr::malformed`) completes with a Local
/// QP Operation Error, as the RC responder's class A; the next datagram finds the next WQE.
#[test]
fn ud_unparsable_srq_wqe_completes_with_a_local_qp_operation_error() {
    let mut d = ud_pair([0x1111, 0x2222]);
    let e = &mut d.e[1];
    e.qp.post_recv(&rvrdma_core::wqe::RecvWr::malformed(9), &mut e.out)
        .expect("post");
    d.post_recv(1, 1024).expect("recv");
    d.post(0, ud_send(1, 100, 0x2222)).expect("post");
    d.post(0, ud_send(2, 100, 0x2222)).expect("post");
    d.progress(0);
    let p = d.take(0);
    d.deliver_all(1, &p);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!((c[0].wr_id, c[0].status), (9, WcStatus::LocQpOpErr));
    assert_eq!((c[1].status, c[1].byte_len), (WcStatus::Success, 140));
}
