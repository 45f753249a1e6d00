//! The SQ logic and the completer: segmentation, NAK and RNR NAK handling, timeouts, RDMA Read
//! and atomic responses, retrying reads, local operations, and the send window (at most
//! `MAX_UNACKED_PSNS` in flight, closed by a timeout and reopened by ACKs).

use rvrdma_core::credit::CREDIT_CODE_INVALID;
use rvrdma_core::events::{Timer, WcOpcode, WcStatus};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp_state::QpState;
use rvrdma_core::requester::local_ack_timeout_ns;
use rvrdma_core::requester::PostError;
use rvrdma_core::responder::ACK_COALESCE;
use rvrdma_core::wire::{Aeth, Headers, NakCode, Opcode};
use rvrdma_core::wqe::{RecvWr, SendOpcode, SendWr, SgList, Sge};

use crate::sim::node::timer_index;

use super::fixtures::*;

// ---- requester / completer -----------------------------------------------------------------

#[test]
fn requester_segmentation_and_end_to_end_transfer() {
    let mut d = Duo::running(2);
    let data: Vec<u8> = (0..700u32).map(|x| x as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post(0, send_wr(1, SendOpcode::SendWithImm, 700))
        .expect("post");
    d.pump();
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(
        (c.opcode, c.byte_len, c.status),
        (WcOpcode::Recv, 700, WcStatus::Success)
    );
    let got = d.e[1].mem.0.borrow().read(DST, DST_VA, 700).expect("read");
    assert_eq!(got, data);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
}

/// A QP's queue slots hold the scatter/gather elements it was created for (its `max_send_sge`
/// and `max_recv_sge`): a WR with more is refused with nothing queued, and WRs that use all the
/// room move their data.
#[test]
fn a_wr_with_more_elements_than_its_queue_holds_is_refused() {
    let mut d = Duo::running_with(Opts {
        sge_room: 2,
        ..Opts::default()
    });
    let piece = |key, va, i: u64| Sge {
        addr: va + i * 100,
        length: 100,
        lkey: key,
    };
    let list = |key, va, n| (0..n).map(|i| piece(key, va, i)).collect::<Vec<_>>();
    let recv = |n| RecvWr {
        wr_id: 7,
        sg: SgList::from_slice(&list(DST, DST_VA, n)).expect("sg"),
    };
    let send = |n| {
        let mut wr = SendWr::new(9, SendOpcode::Send);
        wr.sg = SgList::from_slice(&list(SRC, SRC_VA, n)).expect("sg");
        wr
    };
    let e = &mut d.e[1];
    assert_eq!(
        e.qp.post_recv(&recv(3), &mut e.out),
        Err(PostError::InvalidWr)
    );
    assert_eq!(e.qp.rq_logic().outstanding(), 0, "nothing queued");
    e.qp.post_recv(&recv(2), &mut e.out).expect("two fit");
    assert_eq!(d.post(0, send(3)), Err(PostError::InvalidWr));
    assert_eq!(d.e[0].qp.sq_logic().outstanding(), 0, "nothing queued");
    let data: Vec<u8> = (0..200u32).map(|x| (x * 7) as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post(0, send(2)).expect("two fit");
    d.pump();
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!((c.wr_id, c.byte_len, c.status), (7, 200, WcStatus::Success));
    let got = d.e[1].mem.0.borrow().read(DST, DST_VA, 200).expect("read");
    assert_eq!(got, data);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
}

/// A shell that keeps something per send slot (a copy of a kernel caller's inline data) learns
/// from `next_slot` which slot the next post takes: the slots in ring order, none while the
/// queue is full, and the oldest again once it retired.
#[test]
fn the_next_slot_is_the_one_the_next_post_takes() {
    let mut d = Duo::running(4);
    for i in 0..16 {
        assert_eq!(d.e[0].qp.sq_logic().next_slot(), Some(i));
        d.post(0, send_wr(i as u64, SendOpcode::Send, 8))
            .expect("post");
    }
    assert_eq!(d.e[0].qp.sq_logic().next_slot(), None, "full");
    assert_eq!(
        d.post(0, send_wr(16, SendOpcode::Send, 8)),
        Err(PostError::QueueFull)
    );
    d.pump();
    assert_eq!(d.e[0].out.send_cqes.len(), 4, "four had a receive");
    assert_eq!(d.e[0].qp.sq_logic().outstanding(), 12);
    assert_eq!(
        d.e[0].qp.sq_logic().next_slot(),
        Some(0),
        "the oldest slot again"
    );
    d.post(0, send_wr(16, SendOpcode::Send, 8)).expect("post");
    assert_eq!(d.e[0].qp.sq_logic().next_slot(), Some(1));
}

#[test]
fn requester_psn_sequence_nak_retransmits_from_nak_psn() {
    let mut d = Duo::running(4);
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    d.deliver(1, &p[2].0, &p[2].1, 1); // p[1] lost
    d.flow(1);
    d.progress(0);
    let r = d.take(0);
    assert_eq!(r[0].0.bth.psn, p[1].0.bth.psn, "go back to the NAKed PSN");
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
}

#[test]
fn requester_rnr_nak_waits_then_retries_rnr_retry_7_infinite() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 0],
        rnr_retry: 7,
        ..Opts::default()
    });
    d.announce(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    for _ in 0..20 {
        d.progress(0);
        d.flow(0);
        d.flow(1); // RNR NAK
        assert!(d.e[0].out.timers[timer_index(Timer::Rnr)].is_some());
        d.progress(0);
        assert!(d.take(0).is_empty(), "waits for the RNR timer");
        d.fire(0, Timer::Rnr);
    }
    assert_eq!(d.state(0), QpState::Rts);
    assert!(d.e[0].out.send_cqes.is_empty());
}

#[test]
fn requester_rnr_retry_exhausted_completes_with_rnr_retry_exc_err() {
    let mut d = Duo::new(Opts {
        rnr_retry: 1,
        ..Opts::default()
    });
    d.announce(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    for _ in 0..2 {
        d.progress(0);
        d.flow(0);
        d.flow(1);
        if d.state(0) == QpState::Error {
            break;
        }
        d.fire(0, Timer::Rnr);
    }
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(c[1].status, WcStatus::WrFlushErr);
}

#[test]
fn requester_remote_access_nak_error_completion_and_flush() {
    let mut d = Duo::running(0);
    let mut w = send_wr(1, SendOpcode::RdmaWrite, 8);
    w.rkey = 0xbad;
    d.post(0, w).expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c[0].status, WcStatus::RemAccessErr);
    assert_eq!(c[1].status, WcStatus::WrFlushErr);
    assert_eq!(d.state(0), QpState::Error);
}

#[test]
fn requester_local_ack_timeout_formula_and_infinite() {
    assert_eq!(local_ack_timeout_ns(0), None);
    assert_eq!(local_ack_timeout_ns(1), Some(8192));
    assert_eq!(local_ack_timeout_ns(14), Some(4096 << 14));
}

#[test]
fn requester_read_and_atomic_responses_fill_local_memory() {
    let mut d = Duo::running(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[0xAB; 600]);
    d.post(0, read_wr(1, 600)).expect("post");
    let fa = fetch_add_wr(2, 5, DST_VA + 1024);
    d.post(0, fa).expect("post");
    d.post(0, fa).expect("post");
    d.pump();
    let m = d.e[0].mem.0.borrow();
    assert_eq!(m.read(DST, DST_VA, 600).expect("r"), vec![0xAB; 600]);
    assert_eq!(
        m.read(DST, DST_VA + 1024, 8).expect("r"),
        5u64.to_ne_bytes().to_vec()
    );
    assert!(d.e[0].sends_all(WcStatus::Success));
}

#[test]
fn requester_psn_24_bit_wrap() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        psns: (0xFF_FFFE, 0xFF_FFFF),
        ..Opts::default()
    });
    d.pump();
    d.post(0, send_wr(1, SendOpcode::Send, 4 * MTU))
        .expect("post");
    d.post(1, read_wr(2, 3 * MTU)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[0].qp.sq_logic().una(), 2, "0xFFFFFE + 4 wraps to 2");
    assert_eq!(d.e[1].qp.sq_logic().una(), 2);
}

#[test]
fn responder_acks_at_message_end_and_every_n_packets() {
    let mut d = Duo::responder(0);
    // An RDMA Write of two coalescing counts and four packets, without AckReq except on the
    // last: an ACK after each count, and one at the end.
    let every = ACK_COALESCE;
    let n = 2 * every + 4;
    for k in 0..n {
        let op = match k {
            0 => Opcode::RcRdmaWriteFirst,
            x if x == n - 1 => Opcode::RcRdmaWriteLast,
            _ => Opcode::RcRdmaWriteMiddle,
        };
        let h = if k == 0 {
            req_reth(op, PSN_A + k, RMT, RMT_VA, n * MTU)
        } else {
            req(op, PSN_A + k)
        };
        d.deliver(1, &h, &[0u8; MTU as usize], 1);
    }
    let acks = d.take(1);
    let psns: Vec<Psn> = acks.iter().map(|a| a.0.bth.psn).collect();
    assert_eq!(
        psns,
        [PSN_A + every - 1, PSN_A + 2 * every - 1, PSN_A + n - 1].map(Psn::new)
    );
}

// ---- RDMA Read retries --------------------------------------------------------------------------

#[test]
fn requester_implied_nak_retries_the_unanswered_read() {
    let mut d = Duo::running(4);
    d.post(0, read_wr(1, 100)).expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.flow(0);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 2, "read response, then the ACK of the send");
    let (h, p, port) = &r[1];
    d.deliver(0, h, p, *port); // the read response (r[0]) was lost
    d.progress(0);
    let again = d.take(0);
    assert_eq!(again[0].0.bth.opcode, Opcode::RcRdmaReadRequest);
    assert_eq!(again[0].0.bth.psn, Psn::new(PSN_A));
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
    d.deliver_all(1, &again);
    d.pump();
    assert_eq!(d.e[0].out.send_cqes.len(), 2);
    assert!(d.e[0].sends_all(WcStatus::Success));
}

#[test]
fn requester_resumes_a_partially_answered_read_from_the_first_missing_response() {
    let mut d = Duo::running(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[3u8; 600]);
    d.post(0, read_wr(1, 600)).expect("post");
    d.progress(0);
    d.flow(0);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 3);
    d.deliver(0, &r[0].0, &r[0].1, 1); // First arrives, Middle and Last lost
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    let reth = p[0].0.reth.expect("RETH");
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A + 1));
    // After a timeout the window is one packet: the resumed read asks for one response's
    // worth, the rest once that arrived.
    assert_eq!((reth.va, reth.dma_len), (RMT_VA + MTU as u64, MTU));
    d.deliver_all(1, &p);
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(
        d.e[0].mem.0.borrow().read(DST, DST_VA, 600).expect("r"),
        vec![3u8; 600]
    );
    assert_eq!(
        d.e[0].qp.counters().sq.retries,
        1,
        "the second window is no retry"
    );
}

/// A read the responder has begun to answer resumes a window at a time, each window a
/// duplicate request naming just its part (the responder answers with First..Last for it), the
/// next only once the previous one has arrived; the data lands in place.
#[test]
fn requester_resumes_a_read_one_window_at_a_time() {
    let mut d = Duo::running(0);
    let data: Vec<u8> = (0..20 * MTU).map(|i| (i * 7 % 251) as u8).collect();
    fill(&d.e[1].mem, RMT, RMT_VA, &data);
    d.post(0, read_wr(1, 20 * MTU)).expect("post");
    d.progress(0);
    d.flow(0);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 20);
    d.deliver(0, &r[0].0, &r[0].1, 1); // the first response arrives, the rest are lost
    d.fire(0, Timer::Retransmit);
    let mut asked = Vec::new();
    for _ in 0..20 {
        d.progress(0);
        let p = d.take(0);
        if p.is_empty() {
            break;
        }
        assert_eq!(p.len(), 1, "one request at a time");
        let reth = p[0].0.reth.expect("RETH");
        asked.push((p[0].0.bth.psn.value() - PSN_A, reth.dma_len / MTU));
        d.deliver_all(1, &p);
        d.progress(1);
        d.flow(1);
    }
    // Windows of 1, 2, 4 and 8 responses (each answered window widens it), then the rest.
    assert_eq!(asked, [(1, 1), (2, 2), (4, 4), (8, 8), (16, 4)]);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(
        d.e[0]
            .mem
            .0
            .borrow()
            .read(DST, DST_VA, data.len() as u64)
            .expect("r"),
        data
    );
}

// ---- invalidation and local operations ----------------------------------------------------------

#[test]
fn responder_send_with_invalidate_invalidates_rkey_and_reports_it() {
    let mut d = Duo::running(2);
    let mut w = send_wr(1, SendOpcode::SendWithInv, 16);
    w.invalidate_rkey = RMT;
    d.post(0, w).expect("post");
    d.pump();
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(
        c.flags & rvrdma_core::events::WC_WITH_INVALIDATE,
        rvrdma_core::events::WC_WITH_INVALIDATE
    );
    assert_eq!(c.imm_or_rkey, RMT);
    assert_eq!(d.e[1].qp.counters().rq.remote_invalidations, 1);
    // The R_Key is gone: a later RDMA Write to it fails with a remote access error.
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[1].status, WcStatus::RemAccessErr);
}

#[test]
fn local_inv_and_reg_mr_complete_in_order() {
    let mut d = Duo::running(0);
    d.post_local_ops();
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(
        (c[0].opcode, c[0].status),
        (WcOpcode::LocalInv, WcStatus::Success)
    );
    assert_eq!(
        (c[1].opcode, c[1].status),
        (WcOpcode::RegMr, WcStatus::Success)
    );
}

// ---- the send window -----------------------------------------------------------------------

#[test]
fn requester_keeps_at_most_max_unacked_psns_outstanding() {
    use rvrdma_core::requester::MAX_UNACKED_PSNS;
    let mut d = Duo::new(Opts::default());
    // The initial unsolicited ACKs of connection setup are not requests.
    d.take(0);
    d.take(1);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 100 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 100 * MTU))
        .expect("post");
    while d.progress(0) > 0 {}
    let first = d.take(0);
    assert_eq!(
        first.len() as u32,
        MAX_UNACKED_PSNS,
        "no more than the window before an ACK"
    );
    d.deliver_all(1, &first);
    d.flow(1);
    while d.progress(0) > 0 {}
    assert_eq!(
        d.take(0).len(),
        200 - MAX_UNACKED_PSNS as usize,
        "the rest after the ACKs"
    );
}

/// The PSNs of a batch of packets.
fn psns(p: &[(Headers, Vec<u8>, u8)]) -> Vec<u32> {
    p.iter().map(|(h, _, _)| h.bth.psn.value()).collect()
}

/// After a transport timeout the requester resends one packet, which asks for an ACK, and
/// each acknowledged PSN widens the window by one; the packet that fills the window always
/// asks for an ACK (the responder coalesces them). A sequence NAK halves the window.
#[test]
fn requester_window_closes_on_timeout_and_reopens_with_acks() {
    let mut d = Duo::running(0);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 60 * MTU))
        .expect("post");
    d.progress(0);
    assert_eq!(
        d.take(0).len(),
        60,
        "a fresh window sends the whole message"
    );
    // Everything was lost.
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(psns(&p), [PSN_A], "one packet after a timeout");
    assert!(p[0].0.bth.ack_req);
    let mut acked = PSN_A;
    for want in [2u32, 4, 8, 16] {
        d.deliver(
            0,
            &ack_pkt(acked, Aeth::ack(0, CREDIT_CODE_INVALID)),
            &[],
            1,
        );
        d.progress(0);
        let p = d.take(0);
        let expect: Vec<u32> = (acked + 1..=acked + want).collect();
        assert_eq!(psns(&p), expect, "the window doubles per round");
        assert!(
            p.last().is_some_and(|(h, _, _)| h.bth.ack_req),
            "the last asks for an ACK"
        );
        acked += want;
    }
    // The peer NAKs the last packet (it acknowledges the ones before it): the window was
    // 1 + 30 acknowledged PSNs = 31 and halves to 15; the pass restarts at the NAK's PSN.
    let nak = ack_pkt(acked, Aeth::nak(0, NakCode::PsnSequenceError));
    d.deliver(0, &nak, &[], 1);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(psns(&p), (acked..acked + 15).collect::<Vec<_>>());
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 1);
}

/// An ACK that overtakes a window-limited go-back-N pass moves the pass to the first PSN the
/// peer lacks: what it already has is not sent again.
#[test]
fn requester_window_pass_resumes_at_the_acknowledged_psn() {
    let mut d = Duo::running(0);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 40 * MTU))
        .expect("post");
    d.progress(0);
    d.take(0);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    assert_eq!(psns(&d.take(0)), [PSN_A]);
    // The originals were only late: the peer acknowledges 30 of them at once.
    d.deliver(
        0,
        &ack_pkt(PSN_A + 29, Aeth::ack(0, CREDIT_CODE_INVALID)),
        &[],
        1,
    );
    d.progress(0);
    let p = d.take(0);
    assert_eq!(psns(&p), (PSN_A + 30..PSN_A + 40).collect::<Vec<_>>());
}
