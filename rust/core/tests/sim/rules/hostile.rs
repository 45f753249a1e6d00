//! A hostile peer: random and inconsistent packets never panic, huge lengths, unknown R_Keys
//! and bogus PSNs are refused, and packets with a foreign P_Key are dropped.

use rvrdma_core::events::Timer;
use rvrdma_core::psn::Psn;
use rvrdma_core::qp_state::QpState;
use rvrdma_core::wire::{Aeth, Bth, Headers, NakCode, Opcode, Operation, Reth};
use rvrdma_core::wqe::SendOpcode;

use crate::sim::rng::Rng;

use super::fixtures::*;

// ---- malicious peer: nothing panics ----------------------------------------------------------

#[test]
fn garbage_packets_never_panic() {
    let mut rng = Rng::new(42);
    for round in 0..40 {
        let mut d = Duo::new(Opts {
            pre_rtr_recvs: [2, 2],
            armed: round % 2 == 0,
            ..Opts::default()
        });
        for _ in 0..500 {
            let mut bytes: Vec<u8> = (0..rng.below(200) + 12)
                .map(|_| rng.next_u64() as u8)
                .collect();
            // Make some of them plausible: our QPN, RC opcodes, PSNs near the window.
            if rng.chance(700) {
                bytes[0] = (rng.below(0x18)) as u8;
                bytes[1] &= 0xCF;
                bytes[5] = 0;
                bytes[6] = 0;
                bytes[7] = 0x11 + rng.below(2) as u8;
                if rng.chance(500) {
                    let psn = PSN_A.wrapping_add(rng.below(8) as u32).wrapping_sub(3);
                    bytes[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
                }
            }
            let to = rng.below(2) as usize;
            if let Ok((mut h, p)) = Headers::decode_with_payload(&bytes) {
                h.bth.dest_qp = 0x11 + to as u32;
                if let Some(r) = h.reth.as_mut() {
                    if rng.chance(500) {
                        r.rkey = RMT;
                        r.dma_len = rng.below(1 << 20) as u32;
                    }
                }
                let port = 1 + rng.below(2) as u8;
                d.deliver(to, &h, p, port);
            }
            // Also arbitrary, inconsistent header structs.
            let mut h = Headers::new(Bth::new(
                Opcode::RcRdmaWriteOnly,
                0x12,
                Psn::new(rng.next_u64() as u32),
            ));
            h.reth = Some(Reth {
                va: rng.next_u64(),
                rkey: rng.below(6) as u32,
                dma_len: rng.next_u64() as u32,
            });
            if rng.chance(300) {
                h.aeth = Some(Aeth::nak(1, NakCode::InvalidRequest));
            }
            d.deliver(1, &h, &[0u8; 3], 1);
            d.progress(0);
            d.progress(1);
            d.take(0);
            d.take(1);
            if rng.chance(50) {
                if let Some(t) = d.e[0].out.timers[0] {
                    d.now = d.now.max(t);
                    let now = d.now;
                    let e = &mut d.e[0];
                    e.qp.timer_expired(now, Timer::Retransmit, &mut e.out);
                }
            }
        }
    }
    let _ = Operation::Send;
}

#[test]
fn malicious_peer_huge_lengths_unknown_rkeys_bogus_psns() {
    // Every MR's bytes at the responder, to tell that a refused request wrote nothing.
    let bytes = |d: &Duo| -> Vec<Vec<u8>> {
        let m = d.e[1].mem.0.borrow();
        m.mrs.iter().map(|mr| mr.bytes.clone()).collect()
    };
    // Huge RDMA Read length: invalid request, nothing read.
    let mut d = Duo::responder(0);
    let h = req_reth(
        Opcode::RcRdmaReadRequest,
        PSN_A,
        RMT,
        u64::MAX - 3,
        u32::MAX,
    );
    d.deliver(1, &h, &[], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1, "one NAK, no Read response");
    assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
    // Write whose VA + length wraps around: remote access error, memory untouched.
    let mut d = Duo::responder(0);
    let before = bytes(&d);
    let h = req_reth(Opcode::RcRdmaWriteFirst, PSN_A, RMT, u64::MAX - 10, 1 << 30);
    d.deliver(1, &h, &[0xA5u8; MTU as usize], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::RemoteAccessError));
    assert!(bytes(&d) == before, "the refused Write changed memory");
    // Unknown R_Key on an atomic: remote access error, not executed.
    let mut d = Duo::responder(0);
    let h = req_atomic(Opcode::RcCompareSwap, PSN_A, 0x7777, 0x1000);
    d.deliver(1, &h, &[], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::RemoteAccessError));
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
    // Bogus response PSNs at the requester: ignored as ghosts, nothing completes.
    let mut d = Duo::running(0);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.progress(0);
    d.take(0);
    for psn in [0u32, 0x7F_FFFF, 0xFF_FFFF, PSN_A + 5000] {
        let h = ack_pkt(psn, Aeth::nak(0, NakCode::RemoteAccessError));
        d.deliver(0, &h, &[], 1);
        let mut h = Headers::new(Bth::new(
            Opcode::RcRdmaReadResponseOnly,
            0x11,
            Psn::new(psn),
        ));
        h.aeth = Some(Aeth::ack(0, 0));
        d.deliver(0, &h, &[1, 2, 3], 1);
    }
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.state(0), QpState::Rts);
}

// ---- inbound P_Key check ---------------------------------------------------------------------

/// The inbound P_Key check (IBA partition rules): a packet is accepted only when its BTH:P_Key
/// and the QP's P_Key (from its pkey_index; RoCE's default table holds 0xFFFF at index 0) have
/// equal low 15 bits, not zero, and at least one of them is a full member (top bit). A
/// mismatch is dropped silently: no ACK or NAK, no state change, counted.
#[test]
fn inbound_pkey_mismatch_is_dropped_silently_and_counted() {
    let mut d = Duo::responder(4);
    let mut psn = PSN_A;
    // Node 0's next Send to node 1 with BTH:P_Key `pkey`; the number of responses.
    fn send(d: &mut Duo, psn: &mut u32, pkey: u16) -> usize {
        let mut h = req(Opcode::RcSendOnly, *psn);
        h.bth.ack_req = true;
        h.bth.pkey = pkey;
        d.deliver(1, &h, &[5], 1);
        let n = d.take(1).len();
        if n > 0 {
            *psn += 1;
        }
        n
    }
    for bad in [0x1234u16, 0x9234, 0x0000, 0x8000, 0x7FFE] {
        assert_eq!(send(&mut d, &mut psn, bad), 0, "{bad:#x}: no ACK, no NAK");
    }
    assert_eq!(d.e[1].qp.counters().pkey_violations, 5);
    assert_eq!(d.e[1].qp.rq_logic().epsn(), PSN_A, "nothing else changed");
    assert_eq!(d.state(1), QpState::Rts);
    assert!(d.e[1].out.recv_cqes.is_empty());
    // The default partition, full or limited member, matches the QP's full 0xFFFF.
    assert_eq!(send(&mut d, &mut psn, 0xFFFF), 1);
    assert_eq!(send(&mut d, &mut psn, 0x7FFF), 1);
    assert_eq!(d.e[1].out.recv_cqes.len(), 2);
    // A limited-member QP (0x7FFF) accepts full members only.
    let mut lim = Duo::responder_with(Opts {
        pre_rtr_recvs: [0, 4],
        pkeys: [0xFFFF, 0x7FFF],
        ..Opts::default()
    });
    psn = PSN_A;
    assert_eq!(
        send(&mut lim, &mut psn, 0x7FFF),
        0,
        "two limited members never match"
    );
    assert_eq!(send(&mut lim, &mut psn, 0xFFFF), 1);
    assert_eq!(lim.e[1].qp.counters().pkey_violations, 1);
    // Responses are checked the same way: a NAK with a foreign P_Key is ignored.
    d.post(0, send_wr(9, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.progress(0);
    let sent = d.take(0);
    let mut nak = ack_pkt(
        sent[0].0.bth.psn.value(),
        Aeth::nak(0, NakCode::RemoteAccessError),
    );
    nak.bth.pkey = 0x4321;
    d.deliver(0, &nak, &[], 1);
    assert_eq!(d.state(0), QpState::Rts);
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.e[0].qp.counters().pkey_violations, 1);
}
