//! Seed 000, the retry count: repeated PSN sequence error NAKs and implied NAKs for the same
//! request use it up (or migrate an armed QP), and a peer answering faster than the local ACK
//! timeout cannot hold the QP in RTS.

use rvrdma_core::apm::MigState;
use rvrdma_core::credit::CREDIT_CODE_INVALID;
use rvrdma_core::events::{AsyncEvent, Timer, WcStatus};
use rvrdma_core::qp_state::QpState;
use rvrdma_core::requester::local_ack_timeout_ns;
use rvrdma_core::wire::{Aeth, NakCode, Opcode, Syndrome};
use rvrdma_core::wqe::SendOpcode;

use super::fixtures::*;

// ---- seed 000: repeated NAKs for the same request exhaust the retry count ------------------

/// Node 0 has one RDMA Write outstanding (lost); the peer answers with PSN sequence
/// error NAKs for it, 0.1 ms apart (well inside the 1 ms local ACK timeout), and node 0
/// retransmits after each. Returns how many NAKs were delivered when node 0 stopped retrying
/// (left RTS or migrated), or `None` if it never did within 20 NAKs.
fn nak_storm(d: &mut Duo) -> Option<usize> {
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    let sent = d.take(0);
    assert_eq!(sent.len(), 1);
    let psn = sent[0].0.bth.psn;
    let first_deadline = retransmit_deadline(d, 0).expect("timer armed");
    let nak = ack_pkt(psn.value(), Aeth::nak(0, NakCode::PsnSequenceError));
    for k in 1..=20 {
        d.now += 100_000;
        d.deliver(0, &nak, &[], 1);
        if d.state(0) != QpState::Rts || d.e[0].out.has_event(AsyncEvent::PathMig) {
            return Some(k);
        }
        d.progress(0);
        let p = d.take(0);
        assert_eq!(p.len(), 1, "retransmits the NAKed packet (NAK {k})");
        assert_eq!(p[0].0.bth.psn, psn);
        assert!(d.now < first_deadline, "the NAKs alone, not the timer");
    }
    None
}

/// Seed 000 ("Repetitive PSN Sequence Error Naks"): each PSN sequence error NAK for the same
/// request costs a retry; when the count is exhausted and the QP is not armed, the request
/// completes with RETRY_EXC_ERR ("On Exhaustion") and the QP enters Error. A peer that NAKs
/// faster than the local ACK timeout must not hold the QP in RTS forever.
#[test]
fn seed000_repeated_sequence_naks_exhaust_the_retry_count() {
    let mut d = Duo::running(0);
    let n = nak_storm(&mut d).expect("the NAKs exhausted the retry count");
    assert_eq!(
        n, 4,
        "retry count 3: three retries, the fourth NAK exhausts"
    );
    assert_eq!(d.state(0), QpState::Error);
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c[0].status, WcStatus::RetryExcErr);
    assert!(!d.e[0].out.has_event(AsyncEvent::PathMig));
}

/// Seed 000: repetitive PSN sequence error NAKs that exhaust the retry count while the QP is
/// armed trigger a migration, and the retry count is reloaded (step 5).
#[test]
fn seed000_repeated_sequence_naks_migrate_when_armed() {
    let mut d = armed_duo();
    let n = nak_storm(&mut d).expect("the NAKs exhausted the retry count");
    assert_eq!(n, 4);
    assert!(d.e[0].out.has_event(AsyncEvent::PathMig));
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(d.state(0), QpState::Rts);
    assert_eq!(d.e[0].qp.sq_logic().retry_left(), 3, "reloaded");
    assert!(d.e[0].sends_all(WcStatus::Success));
}

/// A NAK that the requester ignores (a copy of the NAK whose retransmission has not gone out
/// yet) neither costs a retry nor moves the transport timer: only a response that makes
/// progress restarts it (seed 000 counts timeouts per request).
#[test]
fn seed000_ignored_nak_does_not_push_the_transport_timer_out() {
    let mut d = Duo::running(0);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    d.take(0);
    let nak = ack_pkt(PSN_A, Aeth::nak(0, NakCode::PsnSequenceError));
    d.now += 100_000;
    d.deliver(0, &nak, &[], 1);
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
    let deadline = retransmit_deadline(&d, 0);
    for _ in 0..5 {
        d.now += 100_000;
        d.deliver(0, &nak, &[], 1);
        assert_eq!(retransmit_deadline(&d, 0), deadline, "timer not pushed out");
    }
    assert_eq!(d.e[0].qp.counters().sq.retries, 1, "copies cost nothing");
    // The timer still fires at its deadline.
    d.fire(0, Timer::Retransmit);
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 1);
}

/// Seed 000 ("Repetitive missing RDMA Read response or Atomic response"): a peer that keeps
/// answering an RDMA Read with ACKs beyond it (implied NAKs), faster than the local ACK timeout,
/// cannot hold the QP in RTS: the ignored ACKs do not restart the transport timer, every
/// timeout costs a retry, and the count runs out into RETRY_EXC_ERR within (retry count + 1)
/// timeouts.
#[test]
fn seed000_repeated_implied_naks_cannot_hold_off_the_transport_timer() {
    let mut d = Duo::running(0);
    d.post(0, read_wr(1, 100)).expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    assert_eq!(d.take(0).len(), 2);
    let start = d.now;
    let timeout = local_ack_timeout_ns(8).expect("finite");
    let ack = ack_pkt(PSN_A + 1, Aeth::ack(0, CREDIT_CODE_INVALID));
    let mut steps = 0;
    while d.state(0) == QpState::Rts {
        steps += 1;
        assert!(steps < 1000, "still in RTS after {} ns", d.now - start);
        d.now += 100_000;
        if retransmit_deadline(&d, 0).is_some_and(|t| t <= d.now) {
            d.fire(0, Timer::Retransmit);
        } else {
            d.deliver(0, &ack, &[], 1);
        }
        d.progress(0);
        d.take(0);
    }
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RetryExcErr);
    assert_eq!(d.e[0].qp.counters().sq.retries, 3);
    assert!(
        d.now - start <= 5 * (timeout + 100_000),
        "bounded: {} ns",
        d.now - start
    );
}

/// ACKs for packets sent before the peer saw the retransmitted Read (still in flight when the
/// retry began) are not repeated implied NAKs: they cost no retry, and the Read completes when
/// its response arrives.
#[test]
fn requester_acks_in_flight_before_a_read_retry_cost_no_retry() {
    let mut d = Duo::running(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[9u8; 100]);
    d.post(0, read_wr(1, 100)).expect("post");
    for k in 0..4 {
        let mut w = send_wr(2 + k, SendOpcode::RdmaWrite, 10);
        w.remote_addr = RMT_VA + 4096;
        d.post(0, w).expect("post");
    }
    d.progress(0);
    assert_eq!(d.flow(0), 5);
    d.progress(1);
    // The peer executed everything; its read response is lost. Its ACKs for the four writes
    // (one per message, as a peer without coalescing sends them) are on their way.
    d.take(1);
    let acks: Vec<_> = (1..=4)
        .map(|k| {
            (
                ack_pkt(PSN_A + k, Aeth::ack(k, CREDIT_CODE_INVALID)),
                Vec::new(),
                1u8,
            )
        })
        .collect();
    // The read response is lost; the first ACK beyond it starts a retry of the Read.
    d.deliver(0, &acks[0].0, &acks[0].1, 1);
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
    d.progress(0);
    let again = d.take(0);
    assert_eq!(again[0].0.bth.opcode, Opcode::RcRdmaReadRequest);
    // The other ACKs were already on their way.
    d.deliver_all(0, &acks[1..]);
    assert_eq!(
        d.e[0].qp.counters().sq.retries,
        1,
        "no retry for ACKs in flight"
    );
    d.deliver_all(1, &again);
    d.pump();
    assert_eq!(d.e[0].out.send_cqes.len(), 5);
    assert!(d.e[0].sends_all(WcStatus::Success));
    assert_eq!(
        d.e[0].mem.0.borrow().read(DST, DST_VA, 100).expect("r"),
        vec![9u8; 100]
    );
}

/// An RNR NAK for the first packet of a message is followed by the responder's PSN sequence
/// error NAK for the next one (seed 001: class B, one NAK per sequence error, sent again only
/// after the expected packet), both at the PSN the responder expects. That NAK asks for the
/// retransmission the RNR NAK already scheduled: it costs no retry (only repetitive sequence
/// NAKs do, seed 000) and sends nothing, whether it comes before the RNR timer's resend (even
/// rounds) or after it (odd rounds, a short RNR timer). Otherwise a Send with `rnr_retry` 7 to
/// a receiver without a receive ends in RETRY_EXC_ERR after `retry_cnt` + 1 RNR waits.
#[test]
fn requester_sequence_nak_behind_an_rnr_nak_costs_no_retry() {
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.announce(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let mut p = d.take(0);
    for round in 0..10 {
        assert_eq!(p.len(), 3, "round {round}: the whole message goes");
        assert_eq!(
            p[0].0.bth.psn.value(),
            PSN_A,
            "round {round}: from its first packet"
        );
        d.deliver_all(1, &p);
        let r = d.take(1);
        let syn: Vec<_> = r.iter().map(|(h, _, _)| aeth_of(h).syndrome).collect();
        assert_eq!(
            syn,
            [
                Syndrome::RnrNak { timer: 3 },
                Syndrome::Nak(NakCode::PsnSequenceError)
            ],
            "round {round}: an RNR NAK, then one sequence NAK"
        );
        if round % 2 == 0 {
            d.deliver_all(0, &r);
            d.progress(0);
            assert!(
                d.take(0).is_empty(),
                "round {round}: nothing before the RNR timer"
            );
            d.fire(0, Timer::Rnr);
            d.progress(0);
            p = d.take(0);
        } else {
            d.deliver_all(0, &r[..1]);
            d.fire(0, Timer::Rnr);
            d.progress(0);
            p = d.take(0);
            d.deliver_all(0, &r[1..]);
            d.progress(0);
            assert!(
                d.take(0).is_empty(),
                "round {round}: the late NAK sends nothing again"
            );
        }
        assert_eq!(d.state(0), QpState::Rts, "round {round}: no retry used up");
    }
    d.post_recv(1, 4096).expect("recv");
    d.deliver_all(1, &p);
    d.pump();
    assert_eq!(d.e[0].out.send_cqes.len(), 1);
    assert!(d.e[0].sends_all(WcStatus::Success));
    assert_eq!(d.e[1].out.recv_cqes.len(), 1);
    assert!(d.e[1].recvs_all(WcStatus::Success));
}
