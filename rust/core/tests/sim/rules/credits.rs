//! Seed 003, end-to-end credits: the RQ's credit count and how ACKs carry it, the requester
//! limited by the LSN, credit probes, unsolicited credit updates and what happens when one is
//! lost.

use rvrdma_core::credit::{encode_credit, CreditLimit, CREDIT_CODE_INVALID};
use rvrdma_core::events::{Timer, WcOpcode, WcStatus};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp_state::QpState;
use rvrdma_core::requester::local_ack_timeout_ns;
use rvrdma_core::wire::{Aeth, Headers, Opcode, Syndrome};
use rvrdma_core::wqe::{SendFlags, SendOpcode};

use crate::sim::node::timer_index;

use super::fixtures::*;

// ---- seed 003: end-to-end credits ---------------------------------------------------------

#[test]
fn seed003_rq_credit_count_zero_at_reset_one_per_posted_receive() {
    let mut d = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    assert_eq!(d.e[1].qp.rq_logic().credits(), 0);
    d.post_recv(1, 64).expect("post in Init");
    d.post_recv(1, 64).expect("post in Init");
    assert_eq!(d.e[1].qp.rq_logic().credits(), 2);
    d.move_to(1, QpState::Reset);
    assert_eq!(d.e[1].qp.rq_logic().credits(), 0);
}

/// Both QPs in RTR, node 1 with 3 receives posted: the packets node 1 sent on entering RTR.
fn rtr_pair_and_initial_ack() -> (Duo, Vec<(Headers, Vec<u8>, u8)>) {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        to: QpState::Rtr,
        ..Opts::default()
    });
    let p = d.take(1);
    (d, p)
}

#[test]
fn seed003_initial_unsolicited_ack_on_entering_rtr() {
    let (_, p) = rtr_pair_and_initial_ack();
    assert_eq!(p.len(), 1, "exactly one unsolicited ACK");
    let h = &p[0].0;
    assert_eq!(h.bth.opcode, Opcode::RcAcknowledge);
    assert_eq!(h.bth.psn, Psn::new(PSN_A).prev(), "PSN = ePSN - 1");
    let a = aeth_of(h);
    assert_eq!(a.msn, 0);
    assert_eq!(
        a.syndrome,
        Syndrome::Ack {
            credit: encode_credit(3)
        }
    );
}

/// The requester takes the initial ACK as the credit update it is, not as a duplicate
/// response: on a clean link `duplicate_responses` stays 0. A second ACK of the same PSN once a
/// request is in flight is a duplicate.
#[test]
fn seed003_initial_ack_is_a_credit_update_not_a_duplicate() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        ..Opts::default()
    });
    let p = d.take(1);
    assert_eq!(p.len(), 1, "the initial ACK");
    d.deliver_all(0, &p);
    let c = d.e[0].qp.counters().sq;
    assert_eq!((c.credit_acks_received, c.duplicate_responses), (1, 0));
    d.post(0, send_wr(1, SendOpcode::Send, 8)).expect("post");
    d.progress(0);
    assert!(!d.take(0).is_empty(), "the Send left");
    d.deliver_all(0, &p);
    let c = d.e[0].qp.counters().sq;
    assert_eq!((c.credit_acks_received, c.duplicate_responses), (1, 1));
}

/// The peer's initial ACK may reach a QP that is still in RTR (its send PSN not yet given): it
/// is a credit update there too, not a duplicate response.
#[test]
fn seed003_initial_ack_before_rts_is_a_credit_update() {
    let (mut d, p) = rtr_pair_and_initial_ack();
    assert_eq!(p.len(), 1, "the initial ACK");
    d.deliver_all(0, &p);
    let c = d.e[0].qp.counters().sq;
    assert_eq!((c.credit_acks_received, c.duplicate_responses), (1, 0));
}

/// The same on a QP used before: Reset forgets what it sent, so the new peer's initial ACK,
/// arriving while the QP is back in RTR, is again a credit update.
#[test]
fn seed003_initial_ack_before_rts_after_reset_is_a_credit_update() {
    let mut d = Duo::running(3);
    d.post(0, send_wr(1, SendOpcode::Send, 8)).expect("post");
    d.pump();
    let before = d.e[0].qp.counters().sq;
    assert!(before.packets_sent > 0, "the first connection sent");
    let o = Opts {
        pre_rtr_recvs: [0, 3],
        ..Opts::default()
    };
    for i in 0..2 {
        d.move_to(i, QpState::Reset);
        d.go_init(i, o.pkeys[i]);
    }
    for _ in 0..3 {
        d.post_recv(1, 4096).expect("recv");
    }
    for i in 0..2 {
        d.go_rtr(i, &o);
    }
    d.take(0);
    let p = d.take(1);
    assert_eq!(p.len(), 1, "node 1's initial ACK");
    d.deliver_all(0, &p);
    let c = d.e[0].qp.counters().sq;
    assert_eq!(
        (c.credit_acks_received, c.duplicate_responses),
        (before.credit_acks_received + 1, before.duplicate_responses)
    );
}

#[test]
fn seed003_srq_reports_invalid_credit_code() {
    let mut d = Duo::new(Opts {
        srq: [false, true],
        to: QpState::Rtr,
        ..Opts::default()
    });
    let p = d.take(1);
    assert_eq!(
        aeth_of(&p[0].0).syndrome,
        Syndrome::Ack {
            credit: CREDIT_CODE_INVALID
        }
    );
}

#[test]
fn seed003_msn_plus_credits_gives_lsn() {
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.announce(Aeth::ack(5, 3));
    assert_eq!(d.e[0].qp.sq_logic().credit_limit(), CreditLimit::Lsn(8));
}

/// A pair whose node 1's initial unsolicited ACK is lost: the requester has heard no credit
/// count from the responder, so it behaves as seed 003 "SQ Logic's Behavior When No Credits
/// Are Available" says (only the first packet of a Send, with AckReq, then wait). Once the
/// peer has reported a count, the requester holds instead (see the credit probe tests).
fn credits_not_reported() -> Duo {
    let mut d = Duo::new(Opts::default());
    assert_eq!(d.take(1).len(), 1, "initial ACK (lost)");
    d.take(0);
    d
}

#[test]
fn seed003_limited_send_waits_for_the_unsolicited_ack_without_rnr_nak() {
    let mut d = Duo::credits_known(Opts::default()); // initial ACK: 0 credits
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert!(
        d.take(0).is_empty(),
        "nothing goes while the peer has no WQE"
    );
    // The responder posts a receive: its RQ Logic sends an unsolicited ACK with the credit.
    d.post_recv(1, 4096).expect("recv");
    assert_eq!(d.flow(1), 1, "one unsolicited ACK");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 3, "the whole message goes at once");
    d.deliver_all(1, &p);
    let acks = d.take(1);
    assert!(
        acks.iter().all(|(h, _, _)| h
            .aeth
            .is_some_and(|a| matches!(a.syndrome, Syndrome::Ack { .. }))),
        "no RNR NAK"
    );
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
}

#[test]
fn seed003_no_credit_only_first_packet_with_ackreq() {
    let mut d = credits_not_reported();
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "only the first packet without credit");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendFirst);
    assert!(p[0].0.bth.ack_req, "AckReq on the uncredited first packet");
    // The responder has a WQE now: the first packet is accepted and ACKed, then the rest go.
    d.post_recv(1, 4096).expect("recv");
    d.take(1);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    d.flow(1);
    d.progress(0);
    let rest = d.take(0);
    assert_eq!(rest.len(), 2, "remaining packets after the ACK");
    assert_eq!(rest[1].0.bth.opcode, Opcode::RcSendLast);
}

#[test]
fn seed003_write_imm_without_credit_sends_all_packets_ackreq_on_last() {
    let mut d = credits_not_reported();
    d.post(0, send_wr(1, SendOpcode::RdmaWriteWithImm, 3 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 3, "all WriteImm packets, then wait");
    assert!(p[2].0.bth.ack_req);
    assert_eq!(p[2].0.bth.opcode, Opcode::RcRdmaWriteLastWithImmediate);
}

#[test]
fn seed003_wqes_needing_no_rq_wqe_add_one_to_lsn() {
    // One credit (LSN = 1). WQE 1 is an RDMA Write (LSN + 1 = 2), so WQE 2, a Send, is
    // within the LSN and goes out whole.
    let mut d = Duo::credits_known(Opts {
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert_eq!(d.take(0).len(), 4);
}

#[test]
fn seed003_unlimited_peer_reporting_0x1f_is_never_throttled() {
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.announce(Aeth::ack(0, CREDIT_CODE_INVALID));
    for k in 0..4 {
        d.post(0, send_wr(k, SendOpcode::Send, 2 * MTU))
            .expect("post");
    }
    d.progress(0);
    assert_eq!(d.take(0).len(), 8);
}

#[test]
fn seed003_no_credit_check_on_retransmission() {
    let mut d = credits_not_reported();
    d.post(0, send_wr(1, SendOpcode::Send, 2 * MTU))
        .expect("post");
    d.progress(0);
    assert_eq!(d.take(0).len(), 1); // lost
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(
        p.len(),
        1,
        "the first packet is retransmitted without credit"
    );
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
}

#[test]
fn seed003_no_reordering_of_the_sq() {
    // Credits known to be 0: the Send holds, and the Write behind it waits too.
    let mut d = Duo::credits_known(Opts::default());
    d.post(0, send_wr(1, SendOpcode::Send, 2 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    assert!(
        d.take(0).is_empty(),
        "the Write must not overtake the stalled Send"
    );
    // Credits not reported: the Send's first packet goes, the Write waits behind the rest.
    let mut d = credits_not_reported();
    d.post(0, send_wr(1, SendOpcode::Send, 2 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "the Write must not overtake the stalled Send");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendFirst);
}

/// While the requester holds a limited message (the peer reported 0 credits), it asks for the
/// credits on a schedule of its own: a zero-length Send Only at the last acknowledged PSN, with
/// AckReq. The responder takes it as a duplicate: it re-acknowledges it with its current
/// credit count, consumes no receive WQE and sends no RNR NAK (seed 003: credits ride on every
/// ACK, duplicates included).
#[test]
fn seed003_credit_probe_is_a_duplicate_that_draws_the_current_credits() {
    let mut d = Duo::credits_known(Opts::default()); // 0 credits
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    assert!(d.take(0).is_empty());
    let first = retransmit_deadline(&d, 0).expect("probe timer");
    assert_eq!(first, d.now + rvrdma_core::requester::CREDIT_PROBE_MIN_NS);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let h = &p[0].0;
    assert_eq!(h.bth.opcode, Opcode::RcSendOnly);
    assert!(h.bth.ack_req);
    assert_eq!(h.bth.psn, Psn::new(PSN_A).prev());
    assert!(p[0].1.is_empty());
    assert_eq!(
        retransmit_deadline(&d, 0),
        Some(d.now + 2 * rvrdma_core::requester::CREDIT_PROBE_MIN_NS),
        "the next probe waits twice as long"
    );
    // No receive yet: re-ACKed with 0 credits; nothing executed.
    d.deliver(1, h, &p[0].1, 1);
    let r = d.take(1);
    assert_eq!(aeth_of(&r[0].0).syndrome, Syndrome::Ack { credit: 0 });
    assert_eq!(r[0].0.bth.psn, Psn::new(PSN_A).prev());
    assert!(d.e[1].out.recv_cqes.is_empty());
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    // With a receive posted (its unsolicited ACK lost), the next probe brings the credit and
    // the Send goes.
    d.post_recv(1, 64).expect("recv");
    d.take(1);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    d.flow(0);
    d.flow(1);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendOnly);
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
    assert_eq!(d.e[1].qp.rq_logic().credits(), 1, "the probe took no WQE");
}

/// A hold arms its credit probe in the transport timer's slot (nothing is in flight then).
/// When the credits come, the message that goes is timed by the Local ACK Timeout from its
/// first packet: the probe's deadline, a millisecond after the hold began, would resend a
/// message the responder is still receiving.
#[test]
fn seed003_message_after_a_credit_hold_is_timed_by_the_local_ack_timeout() {
    let mut d = Duo::credits_known(Opts {
        timeout: 14,
        ..Opts::default()
    }); // 0 credits
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert!(d.take(0).is_empty(), "held for credits");
    let probe_at = retransmit_deadline(&d, 0).expect("probe timer");
    d.post_recv(1, 4096).expect("recv");
    assert_eq!(d.flow(1), 1, "the unsolicited ACK");
    d.progress(0);
    assert_eq!(
        d.take(0).len(),
        3,
        "the message left (its ACK is still to come)"
    );
    let rto = local_ack_timeout_ns(14).expect("finite");
    assert_eq!(retransmit_deadline(&d, 0), Some(d.now + rto));
    // The timer as the hold had armed it fires: too early for the message.
    d.now = d.now.max(probe_at);
    let now = d.now;
    let e = &mut d.e[0];
    e.qp.timer_expired(now, Timer::Retransmit, &mut e.out);
    d.progress(0);
    assert!(d.take(0).is_empty(), "nothing resent");
    let c = d.e[0].qp.counters().sq;
    assert_eq!((c.timeouts, c.retransmitted), (0, 0));
}

/// A credit probe's answer that comes after the unsolicited ACK it was to stand in for (the
/// Send already in flight) answers the probe: it is no duplicate response.
#[test]
fn seed003_late_probe_answer_is_not_a_duplicate_response() {
    let mut d = Duo::credits_known(Opts::default()); // 0 credits
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    assert!(d.take(0).is_empty(), "held for credits");
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let probe = d.take(0);
    assert_eq!(probe.len(), 1, "the probe");
    d.post_recv(1, 64).expect("recv");
    d.flow(1); // the unsolicited ACK
    d.progress(0);
    assert_eq!(d.take(0).len(), 1, "the Send left");
    let before = d.e[0].qp.counters().sq;
    d.deliver_all(1, &probe);
    d.flow(1); // the probe's answer
    let c = d.e[0].qp.counters().sq;
    assert_eq!(
        (c.credit_acks_received, c.duplicate_responses),
        (before.credit_acks_received + 1, before.duplicate_responses)
    );
}

#[test]
fn seed003_fence_waits_for_earlier_reads() {
    let mut d = Duo::credits_known(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.post(0, read_wr(1, 100)).expect("post");
    let mut s = send_wr(2, SendOpcode::Send, 10);
    s.flags = SendFlags(SendFlags::SIGNALED | SendFlags::FENCE);
    d.post(0, s).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "only the read; the fenced send waits");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcRdmaReadRequest);
    d.deliver_all(1, &p);
    d.progress(1);
    d.flow(1);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendOnly);
}

#[test]
fn seed003_unsolicited_ack_when_receives_posted_to_stalled_peer() {
    let mut d = Duo::new(Opts::default());
    d.take(1); // initial ACK said 0 credits
    d.post_recv(1, 64).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "unsolicited ACK with the new credit");
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A).prev());
    assert_eq!(
        aeth_of(&p[0].0).syndrome,
        Syndrome::Ack {
            credit: encode_credit(1)
        }
    );
}

/// The responder announces new credits as soon as receives are posted, whatever the requester
/// has in flight: that ACK repeats the last acknowledged PSN but grants credits, so it is a
/// credit update, not a duplicate response. Its replay, granting nothing new, is a duplicate.
#[test]
fn seed003_unsolicited_ack_while_a_request_is_in_flight_is_a_credit_update() {
    let mut d = Duo::credits_known(Opts::default());
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.progress(0);
    assert!(!d.take(0).is_empty(), "the Write is in flight");
    d.post_recv(1, 64).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "the unsolicited ACK with the new credit");
    let before = d.e[0].qp.counters().sq;
    d.deliver_all(0, &p);
    let c = d.e[0].qp.counters().sq;
    assert_eq!(
        (c.credit_acks_received, c.duplicate_responses),
        (before.credit_acks_received + 1, before.duplicate_responses)
    );
    d.deliver_all(0, &p);
    let c = d.e[0].qp.counters().sq;
    assert_eq!(
        (c.credit_acks_received, c.duplicate_responses),
        (
            before.credit_acks_received + 1,
            before.duplicate_responses + 1
        )
    );
}

#[test]
fn seed003_ack_carries_current_credit_count() {
    let mut d = Duo::credits_known(Opts {
        pre_rtr_recvs: [0, 5],
        ..Opts::default()
    });
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.flow(0);
    let p = d.take(1);
    let a = aeth_of(&p[0].0);
    assert_eq!(
        a.syndrome,
        Syndrome::Ack {
            credit: encode_credit(4)
        }
    );
    assert_eq!(a.msn, 1);
}

// ---- seed 003: a lost credit update must not stall a limited message -----------------------

/// Runs both nodes on the simulated clock until `done` holds or `limit` ns have passed: moves
/// every packet, and when nothing moves, jumps to the earliest armed timer and fires it.
/// Packets for which `drop` says true are lost. Returns whether `done` became true.
fn run_until(
    d: &mut Duo,
    limit: u64,
    mut drop: impl FnMut(usize, &Headers) -> bool,
    mut done: impl FnMut(&Duo) -> bool,
) -> bool {
    let end = d.now + limit;
    for _ in 0..100_000 {
        if done(d) {
            return true;
        }
        let mut moved = 0;
        for i in 0..2 {
            d.progress(i);
            for (h, p, port) in d.take(i) {
                moved += 1;
                if !drop(i, &h) {
                    d.deliver(1 - i, &h, &p, port);
                }
            }
        }
        if moved > 0 {
            continue;
        }
        let next = (0..2)
            .flat_map(|i| [(i, Timer::Retransmit), (i, Timer::Rnr)])
            .filter_map(|(i, t)| d.e[i].out.timers[timer_index(t)].map(|at| (at, i, t)))
            .min_by_key(|(at, i, t)| (*at, *i, timer_index(*t)));
        match next {
            Some((at, i, t)) if at <= end => d.fire(i, t),
            _ => return done(d),
        }
    }
    panic!("run_until did not settle");
}

/// [`run_until`] node 0 has a send completion, nothing lost.
fn run_until_sent(d: &mut Duo, limit: u64) -> bool {
    run_until(d, limit, |_, _| false, |d| !d.e[0].out.send_cqes.is_empty())
}

/// Node 0 (credits known to be 0: the peer's initial ACK said so) posts a three-packet Send;
/// node 1 posts a receive and the unsolicited ACK announcing it is lost. Returns whether the
/// Send completed within `limit` ns.
fn lost_credit_update(timeout: u8, limit: u64) -> Duo {
    // The initial ACK: 0 credits.
    let mut d = Duo::credits_known(Opts {
        timeout,
        rnr_retry: 1,
        ..Opts::default()
    });
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert!(d.take(0).is_empty(), "holds: the peer has no receive WQE");
    d.now += 1_000_000;
    d.post_recv(1, 4096).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "the unsolicited ACK (lost)");
    assert!(
        run_until_sent(&mut d, limit),
        "the Send completed within {limit} ns"
    );
    d
}

/// Seed 003 lets the requester probe while it knows the responder has no credit; with an
/// infinite local ACK timeout (0) a lost unsolicited ACK must still not hold a Send forever.
/// The probes draw no RNR NAK, so no RNR retry is spent.
#[test]
fn seed003_lost_credit_update_infinite_timeout_send_still_completes() {
    let d = lost_credit_update(0, 1_000_000_000);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].out.recv_cqes[0].byte_len, 3 * MTU);
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    assert_eq!(d.e[0].qp.counters().sq.rnr_naks_received, 0);
}

/// The same with a finite local ACK timeout of 4.3 s (exponent 20): the probe schedule does not
/// wait for the timeout, so the Send completes well before it.
#[test]
fn seed003_lost_credit_update_finite_timeout_send_completes_before_the_timeout() {
    let d = lost_credit_update(20, 500_000_000);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 0);
}

/// While a requester may be waiting for credits, every receive posted that changes the credit
/// count the responder last announced sends a new unsolicited ACK (seed 003: an unsolicited
/// ACK may be sent at any time), so one lost update is repaired by the next receive.
#[test]
fn seed003_responder_reannounces_credits_while_the_requester_may_wait() {
    let mut d = Duo::new(Opts::default());
    d.take(1); // initial ACK said 0 credits
    d.post_recv(1, 64).expect("recv");
    assert_eq!(d.take(1).len(), 1, "first update (lost)");
    d.post_recv(1, 64).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "the next receive announces again");
    assert_eq!(
        aeth_of(&p[0].0).syndrome,
        Syndrome::Ack {
            credit: encode_credit(2)
        }
    );
    // Once a request consumed a credit (the requester is moving), receives are quiet again
    // unless an ACK said 0 credits.
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    assert_eq!(d.take(1).len(), 1, "the ACK of the Send");
    d.post_recv(1, 64).expect("recv");
    assert!(d.take(1).is_empty());
}

/// A requester holding a limited message for credits sends no request packet of it (no RNR
/// NAK, no RNR retry spent) however long the responder takes to post a receive, and it
/// completes once the receive is posted.
#[test]
fn seed003_credit_hold_spends_no_rnr_retry_while_the_rq_stays_empty() {
    let mut d = Duo::credits_known(Opts {
        timeout: 0,
        rnr_retry: 0,
        ..Opts::default()
    });
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    assert!(
        !run_until_sent(&mut d, 3_000_000_000),
        "nothing completes while the RQ is empty"
    );
    assert_eq!(d.state(0), QpState::Rts);
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    assert_eq!(d.e[1].out.recv_cqes.len(), 0);
    d.post_recv(1, 64).expect("recv");
    assert!(run_until_sent(&mut d, 1_000_000_000));
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
}

/// A credit hold on a dead path ends like any wait for a response (seed 000): each credit probe
/// left unanswered for a local ACK timeout costs a retry, and exhaustion completes the held Send
/// with RETRY_EXC_ERR (the QP is not armed).
#[test]
fn seed003_credit_hold_on_a_dead_path_exhausts_the_retry_count() {
    let mut d = Duo::credits_known(Opts::default()); // 0 credits
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    let timeout = local_ack_timeout_ns(8).expect("finite");
    let start = d.now;
    let failed = run_until(
        &mut d,
        1_000_000_000,
        |from, _| from == 0,
        |d| d.state(0) == QpState::Error,
    );
    assert!(failed, "still holding after 1 s on a dead path");
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RetryExcErr);
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 4);
    let bound = 4 * (timeout + rvrdma_core::requester::CREDIT_PROBE_MAX_NS);
    assert!(d.now - start <= bound, "{} ns", d.now - start);
}

// ---- declared behaviours -----------------------------------------------------------------------

/// Seed 003 ("SQ Logic's Behavior When No Credits Are Available"): an RDMA Write with Immediate
/// takes its RQ WQE (its credit) at the packet carrying the immediate data, the Last (or
/// Only): the First and Middle packets need none, and without a WQE the Last draws the RNR NAK.
#[test]
fn seed003_write_with_immediate_takes_its_credit_at_the_last_packet() {
    let mut d = Duo::responder(0);
    let first = req_reth(Opcode::RcRdmaWriteFirst, PSN_A, RMT, RMT_VA, 2 * MTU + 10);
    d.deliver(1, &first, &[1u8; MTU as usize], 1);
    let mut middle = req(Opcode::RcRdmaWriteMiddle, PSN_A + 1);
    middle.bth.ack_req = true;
    d.deliver(1, &middle, &[2u8; MTU as usize], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1);
    assert!(
        aeth_of(&p[0].0).syndrome.is_ack(),
        "First and Middle need no WQE"
    );
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    let last = req(Opcode::RcRdmaWriteLastWithImmediate, PSN_A + 2);
    d.deliver(1, &last, &[3u8; 10], 1);
    let p = d.take(1);
    assert_eq!(aeth_of(&p[0].0).syndrome, Syndrome::RnrNak { timer: 3 });
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A + 2), "RNR NAK at the Last");
    assert_eq!(d.e[1].qp.rq_logic().epsn(), PSN_A + 2);
    // With a receive posted, the retransmitted Last takes it: one credit less.
    d.post_recv(1, 64).expect("recv");
    d.take(1);
    assert_eq!(d.e[1].qp.rq_logic().credits(), 1);
    d.deliver(1, &last, &[3u8; 10], 1);
    assert_eq!(d.e[1].qp.rq_logic().credits(), 0);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(
        (c[0].opcode, c[0].byte_len, c[0].imm_or_rkey),
        (WcOpcode::RecvRdmaWithImm, 2 * MTU + 10, 7)
    );
}

/// Seed 003 ("SQ WQEs Are Internally Numbered"; the MSN counts messages the RQ Logic
/// completed): local operations (LOCAL_INV, fast registration) never reach the responder and
/// take no SSN, so a Send behind them keeps the SSN the peer's credits were counted for.
#[test]
fn seed003_local_operations_take_no_ssn() {
    // One credit: LSN = 1.
    let mut d = Duo::credits_known(Opts {
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.post_local_ops();
    d.post(0, send_wr(3, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(
        p.len(),
        3,
        "the Send is SSN 1, within the LSN: all its packets go"
    );
    d.deliver_all(1, &p);
    let acks = d.take(1);
    assert_eq!(aeth_of(&acks.last().expect("ACK").0).msn, 1);
    assert_eq!(d.e[0].qp.counters().sq.credit_stalls, 0);
}

/// A QP fed from an SRQ takes a receive WQE only for a packet that starts a message it will
/// process: the next Send or Write with Immediate in sequence. A duplicate, a packet out of
/// sequence, a Send Middle with no message begun, one for another partition, a Write without
/// Immediate or anything in Error would hold a WQE back from the SRQ's other QPs (or flush it).
#[test]
fn srq_wqe_taken_only_for_a_message_that_uses_it() {
    let mut d = Duo::responder_with(Opts {
        srq: [false, true],
        ..Opts::default()
    });
    let send = req(Opcode::RcSendOnly, PSN_A);
    assert!(d.e[1].qp.wants_srq_wqe(&send), "the next Send takes one");
    let imm = req_reth(Opcode::RcRdmaWriteOnlyWithImmediate, PSN_A, RMT, RMT_VA, 0);
    assert!(
        d.e[1].qp.wants_srq_wqe(&imm),
        "so does a Write with Immediate"
    );
    let write = req_reth(Opcode::RcRdmaWriteOnly, PSN_A, RMT, RMT_VA, 0);
    assert!(
        !d.e[1].qp.wants_srq_wqe(&write),
        "a Write without Immediate needs none"
    );
    let dup = req(Opcode::RcSendOnly, PSN_A.wrapping_sub(1));
    assert!(
        !d.e[1].qp.wants_srq_wqe(&dup),
        "a duplicate starts no message"
    );
    let ahead = req(Opcode::RcSendOnly, PSN_A + 3);
    assert!(
        !d.e[1].qp.wants_srq_wqe(&ahead),
        "out of sequence: NAKed, not executed"
    );
    let middle = req(Opcode::RcSendMiddle, PSN_A);
    assert!(
        !d.e[1].qp.wants_srq_wqe(&middle),
        "a Send Middle with no message begun is a sequence error, not a message"
    );
    let mut foreign = send;
    foreign.bth.pkey = 0x7001;
    assert!(
        !d.e[1].qp.wants_srq_wqe(&foreign),
        "another partition is dropped"
    );

    // The Send itself, with the WQE the shell handed over: done; repeated, it is a duplicate.
    d.post_recv(1, 64).expect("SRQ WQE handed to the QP");
    d.deliver(1, &send, &[], 1);
    assert_eq!(
        d.e[1].qp.rq_logic().outstanding(),
        0,
        "the Send completed its WQE"
    );
    assert!(
        !d.e[1].qp.wants_srq_wqe(&send),
        "the same Send again is a duplicate"
    );
    let next = req(Opcode::RcSendOnly, PSN_A + 1);
    assert!(d.e[1].qp.wants_srq_wqe(&next));

    d.move_to(1, QpState::Error);
    assert!(
        !d.e[1].qp.wants_srq_wqe(&next),
        "a QP in Error processes nothing"
    );
}
