//! Regressions found by the simulation and by the `responder_packets` fuzz target, each kept as
//! the smallest exchange that showed it.

use rvrdma_core::credit::CREDIT_CODE_INVALID;
use rvrdma_core::events::Timer;
use rvrdma_core::psn::Psn;
use rvrdma_core::wire::{Aeth, Opcode, Syndrome};
use rvrdma_core::wqe::SendOpcode;

use super::fixtures::*;

// ---- found by the simulation --------------------------------------------------------------------

#[test]
fn requester_new_message_takes_a_fresh_psn_after_rnr_and_late_ack() {
    // Found by the simulation (seed 72171): an RNR NAK rewinds to a Send that a duplicate's ACK
    // then completes; the next WQE must not reuse the Send's PSN.
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.announce(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    let p = d.take(0);
    d.deliver(1, &p[0].0, &p[0].1, 1); // no receive posted: RNR NAK
    d.post_recv(1, 64).expect("recv");
    let mut dup = p[0].0;
    dup.bth.ack_req = true;
    d.deliver(1, &dup, &p[0].1, 1); // a duplicate of the Send arrives: executed, ACKed
    let r = d.take(1);
    assert!(r
        .iter()
        .any(|(h, _, _)| aeth_of(h).syndrome == Syndrome::RnrNak { timer: 3 }));
    d.deliver_all(0, &r);
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.fire(0, Timer::Rnr);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcRdmaWriteOnly);
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A + 1), "fresh PSN");
}

// ---- regressions found by the `responder_packets` fuzz target -----------------------------

/// A duplicate RDMA Read moved the response cursor back and every later read was sent again
/// from its stale `sent` offset: a read already answered in full went out as a zero-length
/// RDMA Read Response Last with a PSN past its range.
#[test]
fn fuzz_duplicate_read_resent_later_read_from_stale_offset() {
    let mut d = Duo::responder(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 600]);
    let first = req_reth(Opcode::RcRdmaReadRequest, PSN_A, RMT, RMT_VA, 300);
    let second = req_reth(Opcode::RcRdmaReadRequest, PSN_A + 2, RMT, RMT_VA + 300, 300);
    d.deliver(1, &first, &[], 1);
    d.deliver(1, &second, &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 4);
    // The first read again: it is answered again, and so is the second, each in full.
    d.deliver(1, &first, &[], 1);
    d.progress(1);
    let p = d.take(1);
    let seen: Vec<(Opcode, u32, usize)> = p
        .iter()
        .map(|(h, pl, _)| (h.bth.opcode, h.bth.psn.value(), pl.len()))
        .collect();
    let want = |psn: u32| {
        [
            (Opcode::RcRdmaReadResponseFirst, psn, 256),
            (Opcode::RcRdmaReadResponseLast, psn + 1, 44),
        ]
    };
    let mut expect = want(PSN_A).to_vec();
    expect.extend(want(PSN_A + 2));
    assert_eq!(seen, expect);
}

/// A duplicate of the oldest of the 16 reads the responder keeps moved the response cursor back
/// 16 resources; a new read arriving before those responses left took the oldest's slot, and the
/// responses then sent from that slot were the new read's, twice, the second time as a
/// zero-length RDMA Read Response Last. Now the oldest read's answer is given up: every later
/// read is answered again once, then the new one.
#[test]
fn fuzz_new_read_took_the_slot_of_a_read_still_to_be_answered_again() {
    let mut d = Duo::responder(0);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 600]);
    let read = |k: u32| req_reth(Opcode::RcRdmaReadRequest, PSN_A + 2 * k, RMT, RMT_VA, 300);
    for k in 0..16 {
        d.deliver(1, &read(k), &[], 1);
        d.progress(1);
    }
    assert_eq!(d.take(1).len(), 32);
    d.deliver(1, &read(0), &[], 1);
    d.deliver(1, &read(16), &[], 1);
    d.progress(1);
    let seen: Vec<(Opcode, u32, usize)> = d
        .take(1)
        .iter()
        .map(|(h, pl, _)| (h.bth.opcode, h.bth.psn.value(), pl.len()))
        .collect();
    let expect: Vec<(Opcode, u32, usize)> = (1..=16)
        .flat_map(|k| {
            [
                (Opcode::RcRdmaReadResponseFirst, PSN_A + 2 * k, 256),
                (Opcode::RcRdmaReadResponseLast, PSN_A + 2 * k + 1, 44),
            ]
        })
        .collect();
    assert_eq!(seen, expect);
}
