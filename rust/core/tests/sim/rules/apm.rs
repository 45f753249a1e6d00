//! Seeds 000 and 002, Automatic Path Migration: Rearm to Armed, migration on retry exhaustion or
//! on the peer's MigReq, and migration requests that do not match the alternate path.

use rvrdma_core::apm::MigState;
use rvrdma_core::events::{AsyncEvent, Timer, WcStatus};
use rvrdma_core::qp::QpAttrs;
use rvrdma_core::qp_state::{AttrMask, QpState};
use rvrdma_core::wire::{Headers, Opcode};
use rvrdma_core::wqe::SendOpcode;

use super::fixtures::*;

// ---- seeds 000 / 002: APM ------------------------------------------------------------------

#[test]
fn seed002_rearm_becomes_armed_on_migreq_0() {
    let d = armed_duo();
    assert!(!d.e[0].out.has_event(AsyncEvent::PathMig));
}

#[test]
fn seed000_retry_exhaustion_while_armed_migrates() {
    let mut d = armed_duo();
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.take(0); // lost on the dying primary
               // The retries are lost too; the timer that finds none left migrates, and the Send goes
               // again over the new path at once, in the same pass.
    let mut p = Vec::new();
    for _ in 0..4 {
        d.fire(0, Timer::Retransmit);
        d.progress(0);
        p = d.take(0);
        if d.e[0].out.has_event(AsyncEvent::PathMig) {
            break;
        }
    }
    assert!(
        d.e[0].out.has_event(AsyncEvent::PathMig),
        "migrated on exhaustion"
    );
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(d.e[0].qp.sq_logic().retry_left(), 3, "retry count reloaded");
    assert_eq!(p.len(), 1, "the Send, sent again without another timer");
    let (h, pl, port) = &p[0];
    assert!(h.bth.mig_req, "MigReq=1 after migration");
    assert_eq!(*port, 2, "sent over the alternate path");
    // The peer accepts it over its alternate path and migrates too.
    d.deliver(1, h, pl, *port);
    assert!(d.e[1].out.has_event(AsyncEvent::PathMig));
    assert_eq!(d.e[1].qp.primary_path().port_num, 2);
    d.pump();
    assert!(d.e[0].sends_all(WcStatus::Success));
}

/// Seed 000, step 5: after a migration the requester times its ACKs by the new path's local
/// ACK timeout (4.096 usec x 2^timeout), not the old one's.
#[test]
fn seed000_the_new_paths_ack_timeout_applies_after_migration() {
    let mut d = armed_duo_with(Opts {
        alt_timeout: 14,
        ..Opts::default()
    });
    let ack_wait = |d: &Duo| retransmit_deadline(d, 0).expect("timer armed") - d.now;
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.take(0);
    assert_eq!(ack_wait(&d), 4096 << 8, "the primary path's timeout");
    while !d.e[0].out.has_event(AsyncEvent::PathMig) {
        d.fire(0, Timer::Retransmit);
        d.progress(0);
        d.take(0);
    }
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(ack_wait(&d), 4096 << 14, "the new path's timeout");
}

#[test]
fn seed000_retry_exhaustion_unarmed_retry_exc_err_and_flush() {
    let mut d = Duo::running(4);
    for k in 0..3 {
        d.post(0, send_wr(k, SendOpcode::Send, 10)).expect("post");
    }
    d.progress(0);
    d.take(0);
    for _ in 0..4 {
        d.fire(0, Timer::Retransmit);
        d.progress(0);
        d.take(0);
    }
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c.len(), 3);
    assert_eq!(c[0].status, WcStatus::RetryExcErr);
    assert!(c[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(d.state(0), QpState::Error);
    assert!(!d.e[0].out.has_event(AsyncEvent::PathMig));
}

/// A one-byte RDMA Write from A to B with BTH:MigReq=1 (a migration request).
fn migreq_write() -> Headers {
    let mut h = req_reth(Opcode::RcRdmaWriteOnly, PSN_A + 1, RMT, RMT_VA, 1);
    h.bth.mig_req = true;
    h
}

#[test]
fn seed000_migreq_mismatch_dropped_with_path_mig_err() {
    let mut d = armed_duo();
    let h = migreq_write();
    // Arrives over the primary (port 1), which is not the alternate path.
    d.deliver(1, &h, &[1], 1);
    assert!(d.e[1].out.has_event(AsyncEvent::PathMigErr));
    assert_eq!(d.e[1].qp.mig_state(), MigState::Armed, "state unchanged");
    assert!(d.take(1).is_empty(), "silently dropped");
}

#[test]
fn seed000_repeated_migreq_mismatch_reports_once_per_arming() {
    let mut d = armed_duo();
    let h = migreq_write();
    let count = |d: &Duo| d.e[1].out.event_count(AsyncEvent::PathMigErr);
    // A retransmitted bad request: every copy is dropped and counted, one event is raised (a
    // peer must not be able to queue events without bound).
    for _ in 0..5 {
        d.deliver(1, &h, &[1], 1);
    }
    assert_eq!(count(&d), 1);
    assert_eq!(d.e[1].qp.counters().mig_errors, 5);
    assert!(d.take(1).is_empty(), "all silently dropped");
    // Loading an alternate path again (allowed while Armed: it replaces the old one) re-enables
    // the report.
    let a = QpAttrs {
        alt_path: d.e[1].paths[1],
        ..QpAttrs::default()
    };
    d.modify(1, &a, AttrMask::ALT_PATH)
        .expect("load alternate path");
    assert_eq!(d.e[1].qp.mig_state(), MigState::Armed);
    d.deliver(1, &h, &[1], 1);
    assert_eq!(count(&d), 2);
}

#[test]
fn seed000_migreq_match_migrates_the_responder() {
    let mut d = armed_duo();
    d.take(1);
    let mut h = migreq_write();
    h.bth.ack_req = true;
    d.deliver(1, &h, &[1], 2);
    assert!(d.e[1].out.has_event(AsyncEvent::PathMig));
    let p = d.take(1);
    assert_eq!(p[0].2, 2, "the ACK leaves over the new path");
    assert!(p[0].0.bth.mig_req);
}

// ---- declared behaviours -----------------------------------------------------------------------

/// Seed 000: after a migration the retry count is reloaded on both sides. Step 5 says so for
/// the QP that migrates on its own (retry exhaustion or a command); the QP that migrates on the
/// peer's MigReq=1 (steps 6-10) moves its own SQ to the new path too, and retries spent on the
/// old path say nothing about the new one: it reloads the count the same way.
#[test]
fn seed000_peer_requested_migration_reloads_the_retry_count() {
    let mut d = armed_duo();
    // Node 0 spends a retry on a Write lost on the old path.
    d.post(0, send_wr(5, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.progress(0);
    d.take(0);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    assert_eq!(d.take(0).len(), 1, "the retry, lost too");
    assert_eq!(d.e[0].qp.sq_logic().retry_left(), 2);
    // Node 1 migrates by command and its next packet, MigReq=1 over the alternate path, is
    // the migration request node 0 accepts.
    let a = QpAttrs {
        path_mig_state: MigState::Migrated,
        ..QpAttrs::default()
    };
    d.modify(1, &a, AttrMask::PATH_MIG_STATE).expect("migrate");
    d.post(1, send_wr(6, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.progress(1);
    let p = d.take(1);
    assert!(p[0].0.bth.mig_req);
    assert_eq!(p[0].2, 2);
    d.deliver(0, &p[0].0, &p[0].1, p[0].2);
    assert!(d.e[0].out.has_event(AsyncEvent::PathMig));
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(
        d.e[0].qp.sq_logic().retry_left(),
        3,
        "reloaded on the peer's request"
    );
    // And node 0 retransmits its outstanding Write over the new path at once.
    d.progress(0);
    let r = d.take(0);
    assert!(r
        .iter()
        .any(|(h, _, port)| h.bth.opcode == Opcode::RcRdmaWriteOnly
            && *port == 2
            && h.bth.mig_req));
}
