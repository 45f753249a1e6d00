//! Seed 001, the responder's error classes of Table 17-7: B (PSN sequence error NAK, RNR NAK),
//! C (invalid request, remote access error), A (malformed receive WQE), D (silent drop of
//! invalid duplicates) and G (CQ overflow), duplicates answered again, and reserved or
//! unsupported opcodes. Every kind of R_Key violation is in `remote_access.rs`.

use rvrdma_core::apm::PathMatch;
use rvrdma_core::events::{AsyncEvent, WcStatus};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp_state::QpState;
use rvrdma_core::wire::{Bth, Headers, NakCode, Opcode, Syndrome};
use rvrdma_core::wqe::{RecvWr, SendOpcode, SgList, Sge};

use super::fixtures::*;

// ---- seed 001: Table 17-7 ------------------------------------------------------------------

#[test]
fn seed001_class_b_psn_sequence_error_nak_sent_once() {
    let mut d = Duo::responder(4);
    let h = req(Opcode::RcSendOnly, PSN_A + 2);
    d.deliver(1, &h, &[1], 1);
    d.deliver(1, &h, &[1], 1);
    let h3 = req(Opcode::RcSendOnly, PSN_A + 3);
    d.deliver(1, &h3, &[1], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1, "one NAK per sequence error");
    assert!(is_nak(&p[0].0, NakCode::PsnSequenceError));
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A), "NAK carries the ePSN");
    assert_eq!(d.state(1), QpState::Rts);
}

#[test]
fn seed001_class_b_rnr_nak_with_min_rnr_timer() {
    let mut d = Duo::responder(0);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1, 2, 3], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1);
    assert_eq!(aeth_of(&p[0].0).syndrome, Syndrome::RnrNak { timer: 3 });
    assert_eq!(d.state(1), QpState::Rts, "no other action");
    assert_eq!(d.e[1].qp.rq_logic().epsn(), PSN_A);
}

fn class_c_with_wqe_in_use(second: Opcode) {
    let mut d = Duo::responder(3);
    d.deliver(1, &req(Opcode::RcSendFirst, PSN_A), &[0u8; MTU as usize], 1);
    d.take(1);
    d.deliver(1, &req(second, PSN_A + 1), &[0u8; MTU as usize], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
    assert_eq!(d.state(1), QpState::Error);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 3);
    assert_eq!(
        c[0].status,
        WcStatus::RemInvReqErr,
        "current WQE retired with the error"
    );
    assert!(
        c[1..].iter().all(|w| w.status == WcStatus::WrFlushErr),
        "rest flushed"
    );
}

#[test]
fn seed001_class_c_first_where_middle_or_last_expected() {
    class_c_with_wqe_in_use(Opcode::RcSendFirst);
    class_c_with_wqe_in_use(Opcode::RcSendOnly);
}

#[test]
fn seed001_class_c_middle_or_last_where_first_expected() {
    for op in [Opcode::RcSendMiddle, Opcode::RcSendLast] {
        let mut d = Duo::responder(2);
        d.deliver(1, &req(op, PSN_A), &[0u8; MTU as usize], 1);
        let p = d.take(1);
        assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
        assert_eq!(d.state(1), QpState::Error);
        // No RQ WQE was in use: affiliated async event, then the RQ is flushed: both receives.
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr));
        assert_eq!(d.e[1].out.recv_cqes.len(), 2);
        assert!(d.e[1].recvs_all(WcStatus::WrFlushErr));
    }
}

#[test]
fn seed001_class_c_r_key_violation_nak_and_access_error_event() {
    let mut d = Duo::responder(0);
    let h = req_reth(Opcode::RcRdmaWriteOnly, PSN_A, 0xdead, RMT_VA, 4);
    d.deliver(1, &h, &[1, 2, 3, 4], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::RemoteAccessError));
    assert!(d.e[1].out.has_event(AsyncEvent::QpAccessErr));
    assert_eq!(d.state(1), QpState::Error);
    // Out of bounds of a valid MR: same, and memory untouched.
    let mut d = Duo::responder(0);
    let h = req_reth(
        Opcode::RcRdmaWriteOnly,
        PSN_A,
        RMT,
        RMT_VA + (1 << 16) - 2,
        4,
    );
    d.deliver(1, &h, &[9, 9, 9, 9], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::RemoteAccessError));
    let m = d.e[1].mem.0.borrow();
    assert_eq!(
        m.read(RMT, RMT_VA + (1 << 16) - 2, 2).expect("read"),
        vec![0, 0]
    );
}

#[test]
fn seed001_class_c_misaligned_atomic_va() {
    let mut d = Duo::responder(0);
    let h = req_atomic(Opcode::RcFetchAdd, PSN_A, ATM, ATM_VA + 4);
    d.deliver(1, &h, &[], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr));
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
}

#[test]
fn seed001_class_c_too_many_rdma_read_or_atomic_requests() {
    let mut d = Duo::responder_with(Opts {
        max_dest_rd_atomic: 1,
        ..Opts::default()
    });
    let h = req_reth(Opcode::RcRdmaReadRequest, PSN_A, RMT, RMT_VA, 8);
    d.deliver(1, &h, &[], 1);
    let mut h2 = h;
    h2.bth.psn = Psn::new(PSN_A + 1);
    d.deliver(1, &h2, &[], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
    assert_eq!(d.state(1), QpState::Error);
}

/// The responder keeps as many Reads in flight as the device offers (`max_qp_rd_atom`, its
/// responder resources) and answers each in order; one more before any answer has left is one
/// too many (class C).
#[test]
fn seed001_class_c_reads_beyond_every_responder_resource() {
    let n = rvrdma_core::responder::MAX_RESOURCES as u32;
    let read = |k: u32| {
        req_reth(
            Opcode::RcRdmaReadRequest,
            PSN_A + k,
            RMT,
            RMT_VA + u64::from(k),
            1,
        )
    };
    let data: Vec<u8> = (0..n).map(|k| k as u8 ^ 0x5A).collect();
    let mut d = Duo::responder_with(Opts {
        max_dest_rd_atomic: n as u8,
        ..Opts::default()
    });
    fill(&d.e[1].mem, RMT, RMT_VA, &data);
    for k in 0..n {
        d.deliver(1, &read(k), &[], 1);
    }
    while d.progress(1) > 0 {}
    let p = d.take(1);
    assert_eq!(p.len(), n as usize, "one response per Read");
    for (k, (h, payload, _)) in p.iter().enumerate() {
        assert_eq!(h.bth.opcode, Opcode::RcRdmaReadResponseOnly, "response {k}");
        assert_eq!(h.bth.psn, Psn::new(PSN_A + k as u32), "response {k}");
        assert_eq!(payload.as_slice(), &data[k..k + 1], "response {k}");
    }
    assert_eq!(d.state(1), QpState::Rts);

    let mut d = Duo::responder_with(Opts {
        max_dest_rd_atomic: n as u8,
        ..Opts::default()
    });
    for k in 0..=n {
        d.deliver(1, &read(k), &[], 1);
    }
    d.progress(1);
    let p = d.take(1);
    assert!(
        p.iter().any(|(h, _, _)| is_nak(h, NakCode::InvalidRequest)),
        "Read {} refused",
        n + 1
    );
    assert_eq!(d.state(1), QpState::Error);
}

#[test]
fn seed001_class_c_length_error_send_exceeds_receive_buffers() {
    let mut d = Duo::new(Opts::default());
    d.post_recv(1, 10).expect("recv");
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[7u8; 100], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    assert_eq!(d.e[1].out.recv_cqes[0].status, WcStatus::LocLenErr);
    assert_eq!(d.state(1), QpState::Error);
}

#[test]
fn seed001_class_c_payload_length_inconsistent_with_opcode() {
    // First must carry exactly PMTU; Only at most PMTU; Last 1..=PMTU.
    for (op, len) in [
        (Opcode::RcSendFirst, MTU as usize - 1),
        (Opcode::RcSendOnly, MTU as usize + 4),
    ] {
        let mut d = Duo::responder(1);
        d.deliver(1, &req(op, PSN_A), &vec![0u8; len], 1);
        assert!(
            is_nak(&d.take(1)[0].0, NakCode::InvalidRequest),
            "{op:?} {len}"
        );
    }
    let mut d = Duo::responder(1);
    d.deliver(1, &req(Opcode::RcSendFirst, PSN_A), &[0u8; MTU as usize], 1);
    d.deliver(1, &req(Opcode::RcSendLast, PSN_A + 1), &[], 1);
    let p = d.take(1);
    assert!(
        is_nak(&p.last().expect("nak").0, NakCode::InvalidRequest),
        "empty Last"
    );
}

#[test]
fn seed001_class_c_rdma_write_payload_differs_from_dma_length() {
    let mut d = Duo::responder(0);
    let h = req_reth(Opcode::RcRdmaWriteOnly, PSN_A, RMT, RMT_VA, 8);
    d.deliver(1, &h, &[1, 2, 3, 4], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
}

#[test]
fn seed001_class_a_malformed_rq_wqe_flushes_rq_and_sq() {
    let mut d = Duo::responder(0);
    let e = &mut d.e[1];
    let bad = RecvWr {
        wr_id: 77,
        sg: SgList::from_slice(&[Sge {
            addr: DST_VA,
            length: 64,
            lkey: 0xbad,
        }])
        .expect("sg"),
    };
    e.qp.post_recv(&bad, &mut e.out).expect("post");
    d.post_recv(1, 64).expect("recv");
    d.post(1, send_wr(5, SendOpcode::RdmaWrite, 4))
        .expect("send");
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1, 2], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::RemoteOperationalError));
    assert_eq!(d.state(1), QpState::Error);
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!(rc[0].wr_id, 77);
    assert_eq!(rc[0].status, WcStatus::LocQpOpErr);
    assert_eq!(rc[1].status, WcStatus::WrFlushErr);
    assert_eq!(d.e[1].out.send_cqes[0].status, WcStatus::WrFlushErr);
}

/// A user SRQ WQE the driver cannot parse reaches the core as `RecvWr::malformed`: the
/// message that takes it fails as class A, like any malformed receive WQE.
#[test]
fn seed001_class_a_unparsable_srq_wqe_is_a_malformed_wqe() {
    let mut d = Duo::responder(0);
    let e = &mut d.e[1];
    e.qp.post_recv(&RecvWr::malformed(78), &mut e.out)
        .expect("post");
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1, 2], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::RemoteOperationalError));
    assert_eq!(d.state(1), QpState::Error);
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!((rc[0].wr_id, rc[0].status), (78, WcStatus::LocQpOpErr));
}

#[test]
fn seed001_class_d_invalid_duplicate_atomic_silently_dropped() {
    let mut d = Duo::responder(0);
    // ePSN moves past PSN_A + 1 with two writes; then an "atomic" at PSN_A (a duplicate PSN
    // with no saved atomic result).
    for k in 0..2 {
        let h = req_reth(Opcode::RcRdmaWriteOnly, PSN_A + k, RMT, RMT_VA, 1);
        d.deliver(1, &h, &[1], 1);
    }
    d.take(1);
    d.deliver(1, &req(Opcode::RcFetchAdd, PSN_A), &[], 1);
    d.progress(1);
    assert!(d.take(1).is_empty(), "no ACK, no NAK");
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
    assert_eq!(d.state(1), QpState::Rts);
}

#[test]
fn seed001_duplicate_atomic_replays_saved_result_executes_once() {
    let mut d = Duo::responder(0);
    let h = req(Opcode::RcFetchAdd, PSN_A);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    let r1 = d.take(1);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    let r2 = d.take(1);
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 1);
    assert_eq!(r1[0].0.atomic_ack_eth, r2[0].0.atomic_ack_eth);
    assert_eq!(r2[0].0.bth.psn, Psn::new(PSN_A));
}

#[test]
fn seed001_duplicate_read_is_executed_again() {
    let mut d = Duo::responder(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 300]);
    let h = req_reth(Opcode::RcRdmaReadRequest, PSN_A, RMT, RMT_VA, 300);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 2);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    let p = d.take(1);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcRdmaReadResponseFirst);
}

#[test]
fn seed001_duplicate_send_acked_not_executed_again() {
    let mut d = Duo::responder(2);
    let mut h = req(Opcode::RcSendOnly, PSN_A);
    h.bth.ack_req = true;
    d.deliver(1, &h, &[1, 2, 3], 1);
    d.deliver(1, &h, &[1, 2, 3], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 2, "ACK and re-ACK");
    assert!(p.iter().all(|(h, _, _)| aeth_of(h).syndrome.is_ack()));
    assert_eq!(d.e[1].out.recv_cqes.len(), 1, "executed once");
}

#[test]
fn seed001_class_g_cq_overflow_qp_to_error_no_cqes() {
    let mut d = Duo::responder(3);
    d.e[1].out.cq_cap = 0;
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    assert_eq!(d.state(1), QpState::Error);
    assert!(d.e[1].out.recv_cqes.is_empty(), "no CQEs");
    assert!(d.e[1].out.has_event(AsyncEvent::CqErr));
    assert!(d.e[1].out.has_event(AsyncEvent::QpFatal));
    assert_eq!(d.e[1].qp.rq_logic().outstanding(), 3, "no WQE retired");
}

// ---- declared behaviours -----------------------------------------------------------------------

/// Seed 001, Table 17-7 "CQ overflow" (class G): the message whose receive CQE could not be
/// written is not acknowledged (no ACK leaves for it, nor anything after it), so the requester
/// never completes a message the responder's owner never saw.
#[test]
fn seed001_class_g_leaves_no_ack_for_the_lost_message() {
    let mut d = Duo::running(3);
    d.e[1].out.cq_cap = 0;
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert!(p[0].0.bth.ack_req);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    d.progress(1);
    assert!(d.take(1).is_empty(), "no ACK for the lost message");
    assert_eq!(d.state(1), QpState::Error);
    // The requester gets nothing: its Send is not completed successfully.
    assert!(d.e[0].out.send_cqes.is_empty());
}

// ---- seed 001: reserved and unsupported opcodes (Table 17-7, class C) -------------------------

/// Node 0's packet to node 1 with BTH:OpCode `opcode` (which the wire decoder does not know),
/// as the receive path sees it: the fields every BTH carries.
fn raw_request(opcode: u8, psn: u32) -> rvrdma_core::wire::bth::RawBth {
    let mut b = Bth::new(Opcode::RcSendOnly, 0x12, Psn::new(psn));
    b.ack_req = true;
    let mut bytes = b.to_bytes().to_vec();
    bytes[0] = opcode;
    bytes.extend_from_slice(&[0u8; 20]);
    assert!(
        Headers::decode_with_payload(&bytes).is_err(),
        "{opcode:#x} is not decodable"
    );
    rvrdma_core::wire::bth::RawBth::decode(&bytes).expect("BTH")
}

fn deliver_raw(d: &mut Duo, to: usize, b: &rvrdma_core::wire::bth::RawBth) {
    let pm = PathMatch {
        port_num: 1,
        sgid: gid(1 - to, 0),
        dgid: gid(to, 0),
        ..Default::default()
    };
    let now = d.now;
    let e = &mut d.e[to];
    e.qp.receive_unsupported(now, b, &pm, &mut e.out);
}

/// Seed 001, Table 17-7 "Unsupported or Reserved Opcode": an RC request packet whose opcode is
/// reserved (or names a function this QP does not support) gets an Invalid Request NAK and the
/// QP enters Error (class C). No RQ WQE was in use: the affiliated asynchronous error
/// (QP_REQ_ERR) is raised, and the receive WQEs are flushed.
#[test]
fn seed001_class_c_reserved_opcode_invalid_request_nak_qp_to_error() {
    for op in [0x15u8, 0x18, 0x1A, 0x1B, 0x1E, 0x1F] {
        let mut d = Duo::responder(2);
        deliver_raw(&mut d, 1, &raw_request(op, PSN_A));
        let p = d.take(1);
        assert_eq!(p.len(), 1, "{op:#x}");
        assert!(is_nak(&p[0].0, NakCode::InvalidRequest), "{op:#x}");
        assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
        assert_eq!(d.state(1), QpState::Error, "{op:#x}");
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr), "{op:#x}");
        assert_eq!(d.e[1].out.recv_cqes.len(), 2);
        assert!(d.e[1].recvs_all(WcStatus::WrFlushErr));
        // The requester sees the NAK as an invalid request.
        d.post(0, send_wr(1, SendOpcode::RdmaWrite, 4))
            .expect("post");
        d.progress(0);
        d.take(0);
        d.deliver(0, &p[0].0, &[], 1);
        assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RemInvReqErr);
    }
}

/// Class C while a Send is in progress: the RQ WQE in use is retired with "Remote Invalid
/// Request" and the remaining ones are flushed (no affiliated event then).
#[test]
fn seed001_class_c_reserved_opcode_with_a_wqe_in_use() {
    let mut d = Duo::responder(3);
    d.deliver(1, &req(Opcode::RcSendFirst, PSN_A), &[0u8; MTU as usize], 1);
    d.take(1);
    deliver_raw(&mut d, 1, &raw_request(0x1B, PSN_A + 1));
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    assert_eq!(d.state(1), QpState::Error);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c[0].status, WcStatus::RemInvReqErr);
    assert!(c[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert!(!d.e[1].out.has_event(AsyncEvent::QpReqErr));
}

/// The PSN check comes first: a reserved opcode at a duplicate PSN is silently dropped, one
/// beyond the ePSN draws the (single) PSN sequence error NAK of class B; neither changes the
/// state. An opcode of another transport (UC, UD, RD, CNP, manufacturer-specific) fails the
/// header checks and is dropped silently (class D), as is a reserved opcode sent to a UC QP.
#[test]
fn reserved_opcode_psn_checks_and_other_transports() {
    let mut d = Duo::running(0);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.pump(); // the responder's ePSN is PSN_A + 1
    deliver_raw(&mut d, 1, &raw_request(0x1A, PSN_A));
    assert!(d.take(1).is_empty(), "duplicate: dropped");
    deliver_raw(&mut d, 1, &raw_request(0x1A, PSN_A + 5));
    let p = d.take(1);
    assert_eq!(p.len(), 1);
    assert!(is_nak(&p[0].0, NakCode::PsnSequenceError));
    let dropped = d.e[1].qp.counters().dropped;
    for op in [0x2Cu8, 0x3F, 0x40, 0x66, 0x80, 0xC0, 0xFF] {
        deliver_raw(&mut d, 1, &raw_request(op, PSN_A + 1));
    }
    assert!(d.take(1).is_empty());
    assert_eq!(d.e[1].qp.counters().dropped, dropped + 7);
    assert_eq!(d.state(1), QpState::Rts);
    let mut d = Duo::new(Opts {
        uc: true,
        ..Opts::default()
    });
    deliver_raw(&mut d, 1, &raw_request(0x2C, PSN_A));
    deliver_raw(&mut d, 1, &raw_request(0x1A, PSN_A));
    assert!(d.take(1).is_empty());
    assert_eq!(d.state(1), QpState::Rts);
}

/// A stale duplicate Read (the requester has its responses already) makes the responder send
/// the responses from that Read on again, yet frees no place for new requests and takes none:
/// a new request within the requester's `max_rd_atomic` is executed, not refused as one too
/// many (class C), also before the responses sent again have left.
#[test]
fn seed001_resent_responses_hold_no_responder_resource() {
    let mut d = Duo::responder_with(Opts {
        max_dest_rd_atomic: 2,
        ..Opts::default()
    });
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 16]);
    let r1 = req_reth(Opcode::RcRdmaReadRequest, PSN_A, RMT, RMT_VA, 8);
    let mut r2 = r1;
    r2.bth.psn = Psn::new(PSN_A + 1);
    d.deliver(1, &r1, &[], 1);
    d.deliver(1, &r2, &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 2, "both Reads answered");
    // The requester completed the first Read and may have one more in flight; the first
    // Read's retransmission arrives late, then the new atomic.
    d.deliver(1, &r1, &[], 1);
    d.deliver(1, &req(Opcode::RcFetchAdd, PSN_A + 2), &[], 1);
    d.progress(1);
    let p = d.take(1);
    assert!(
        p.iter()
            .all(|(h, _, _)| h.aeth.is_none_or(|a| a.syndrome.is_ack())),
        "no NAK: {p:?}"
    );
    assert!(p
        .iter()
        .any(|(h, _, _)| h.bth.opcode == Opcode::RcAtomicAcknowledge));
    assert_eq!(d.state(1), QpState::Rts);
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 1);
}

/// An RDMA Read request at `psn` for `len` bytes at offset `off` of the remote MR.
fn read_at(psn: u32, off: u64, len: u32) -> Headers {
    req_reth(Opcode::RcRdmaReadRequest, psn, RMT, RMT_VA + off, len)
}

/// The responses a responder sent, as (opcode, PSN, payload length).
fn responses(p: &[(Headers, Vec<u8>, u8)]) -> Vec<(Opcode, u32, usize)> {
    p.iter()
        .map(|(h, pl, _)| (h.bth.opcode, h.bth.psn.value(), pl.len()))
        .collect()
}

/// Seed 001 (duplicates answered again), IBA 9.7.5.1.5: a duplicate RDMA Read that asks for
/// part of what is left of its read (a requester resuming it a window at a time) is answered
/// for that part only. The reads after it, answered already, go again when their own
/// duplicates come: a requester takes no later response before the rest of this read. A
/// duplicate that asks for the whole rest sends everything after it again at once.
#[test]
fn seed001_partial_duplicate_read_holds_the_reads_after_it() {
    let mut d = Duo::responder(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 1400]);
    // Four packets, then two.
    d.deliver(1, &read_at(PSN_A, 0, 1024), &[], 1);
    d.deliver(1, &read_at(PSN_A + 4, 1024, 300), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 6);
    // The second response of the first read was lost; the requester asks for it alone.
    d.deliver(1, &read_at(PSN_A + 1, 256, 256), &[], 1);
    d.progress(1);
    let only = (Opcode::RcRdmaReadResponseOnly, PSN_A + 1, 256);
    assert_eq!(responses(&d.take(1)), vec![only]);
    assert!(
        !d.e[1].qp.transmit_pending(),
        "the second read waits for its duplicate"
    );
    // Then for the whole rest: the rest and the second read go at once.
    d.deliver(1, &read_at(PSN_A + 2, 512, 512), &[], 1);
    d.progress(1);
    let expect = vec![
        (Opcode::RcRdmaReadResponseFirst, PSN_A + 2, 256),
        (Opcode::RcRdmaReadResponseLast, PSN_A + 3, 256),
        (Opcode::RcRdmaReadResponseFirst, PSN_A + 4, 256),
        (Opcode::RcRdmaReadResponseLast, PSN_A + 5, 44),
    ];
    assert_eq!(responses(&d.take(1)), expect);
    // Another part of the first read holds the second again; the second's duplicate releases it.
    d.deliver(1, &read_at(PSN_A + 2, 512, 256), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 1);
    d.deliver(1, &read_at(PSN_A + 4, 1024, 300), &[], 1);
    d.progress(1);
    assert_eq!(responses(&d.take(1)), expect[2..].to_vec());
    assert_eq!(d.state(1), QpState::Rts);
}

/// A hold set by a partial duplicate Read ends when a request from past the held resources
/// comes: the requester, which sends nothing past a read it is resuming, has all it wanted of
/// the read and of what the hold kept (it had them before it asked for the part). Kept, the
/// hold would silence every ACK behind it for good: a Write after the held atomic went
/// unacknowledged until the requester's retries ran out.
#[test]
fn seed001_request_past_a_hold_releases_it() {
    let mut d = Duo::responder(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 1024]);
    // A read of four packets, an atomic, a one-packet Write: all answered.
    d.deliver(1, &read_at(PSN_A, 0, 1024), &[], 1);
    d.deliver(
        1,
        &req_atomic(Opcode::RcFetchAdd, PSN_A + 4, ATM, ATM_VA),
        &[],
        1,
    );
    let mut w = req_reth(Opcode::RcRdmaWriteOnly, PSN_A + 5, RMT, RMT_VA + 2048, 8);
    w.bth.ack_req = true;
    d.deliver(1, &w, &[1u8; 8], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 6);
    // A late partial duplicate of the read: its part goes, the atomic's answer is held.
    d.deliver(1, &read_at(PSN_A + 1, 256, 256), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 1);
    // The Write again (its ACK was lost): answered, after the atomic's response once more.
    d.deliver(1, &w, &[1u8; 8], 1);
    d.progress(1);
    let p = d.take(1);
    let ops: Vec<(Opcode, u32)> = p
        .iter()
        .map(|(h, _, _)| (h.bth.opcode, h.bth.psn.value()))
        .collect();
    assert_eq!(
        ops,
        vec![
            (Opcode::RcAtomicAcknowledge, PSN_A + 4),
            (Opcode::RcAcknowledge, PSN_A + 5)
        ]
    );
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 1);
    // A new request past the hold is answered at once too.
    d.deliver(1, &read_at(PSN_A + 1, 256, 256), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 1);
    let mut w2 = req_reth(Opcode::RcRdmaWriteOnly, PSN_A + 6, RMT, RMT_VA + 2048, 8);
    w2.bth.ack_req = true;
    d.deliver(1, &w2, &[2u8; 8], 1);
    d.progress(1);
    let last = d
        .take(1)
        .last()
        .map(|(h, _, _)| (h.bth.opcode, h.bth.psn.value()));
    assert_eq!(last, Some((Opcode::RcAcknowledge, PSN_A + 6)));
    assert_eq!(d.state(1), QpState::Rts);
}

/// Seed 001, class D: a duplicate RDMA Read from before where the last duplicate of that read
/// asked is a stale copy (a requester asks again from the first response it misses, which
/// never moves back): silently dropped, not answered (rdma_rxe drops these too).
#[test]
fn seed001_stale_duplicate_read_is_dropped() {
    let mut d = Duo::responder(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 1024]);
    d.deliver(1, &read_at(PSN_A, 0, 1024), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 4);
    d.deliver(1, &read_at(PSN_A + 2, 512, 512), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 2);
    let drops = d.e[1].qp.counters().rq.silent_drops;
    // A late copy of the whole read, and one of an earlier part: nothing goes.
    d.deliver(1, &read_at(PSN_A, 0, 1024), &[], 1);
    d.deliver(1, &read_at(PSN_A + 1, 256, 768), &[], 1);
    d.progress(1);
    assert!(d.take(1).is_empty());
    assert_eq!(d.e[1].qp.counters().rq.silent_drops, drops + 2);
    // The same part again (the requester's retry after a timeout) is answered.
    d.deliver(1, &read_at(PSN_A + 2, 512, 512), &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 2);
    assert_eq!(d.state(1), QpState::Rts);
}
