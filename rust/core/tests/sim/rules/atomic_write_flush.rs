//! IBA 1.5 ATOMIC WRITE and FLUSH (annex A19, as rdma_rxe speaks them): one request packet
//! each, answered by an RDMA Read Response Only without data; the responder's checks (QP and
//! MR rights, range, length, alignment) and their NAK classes; duplicates answered again from
//! the responder resources, never executed twice.

use rvrdma_core::events::{AsyncEvent, Timer, WcOpcode, WcStatus};
use rvrdma_core::memory::{
    ACCESS_FLUSH_GLOBAL, ACCESS_FLUSH_PERSISTENT, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp::QpAttrs;
use rvrdma_core::qp_state::{AttrMask, QpState};
use rvrdma_core::requester::PostError;
use rvrdma_core::wire::feth::{PLACEMENT_GLOBAL, PLACEMENT_PERSISTENT, SELECT_MR, SELECT_RANGE};
use rvrdma_core::wire::{Feth, NakCode, Opcode};
use rvrdma_core::wqe::{FlushParams, SendOpcode, SendWr, WrExtra};

use super::fixtures::*;

/// An MR of node 1 with remote write and both flush rights.
const FL: u32 = 0x20 << 8 | 0x77;
const FL_VA: u64 = 0x80000;
/// An MR of node 1 with remote write only (no flush right).
const NOFL: u32 = 0x21 << 8 | 0x78;
const NOFL_VA: u64 = 0x90000;
const VALUE: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn atomic_write_wr(id: u64, rkey: u32, va: u64, value: [u8; 8]) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::AtomicWrite);
    wr.rkey = rkey;
    wr.remote_addr = va;
    wr.extra = WrExtra::AtomicWrite(value);
    wr
}

fn flush_wr(id: u64, rkey: u32, va: u64, length: u32, placement: u8, sel: u8) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::Flush);
    wr.rkey = rkey;
    wr.remote_addr = va;
    wr.extra = WrExtra::Flush(FlushParams {
        length,
        placement,
        selectivity: sel,
    });
    wr
}

/// A running pair whose node 1 has the flush MRs and a QP that enables both flush types.
fn duo() -> Duo {
    let mut d = Duo::running(0);
    let m = &d.e[1].mem;
    let w = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
    m.add_mr(
        FL,
        FL_VA,
        4096,
        w | ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT,
    );
    m.add_mr(NOFL, NOFL_VA, 4096, w);
    qp_access(&mut d, ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT);
    d
}

fn qp_access(d: &mut Duo, extra: u32) {
    let a = QpAttrs {
        qp_access_flags: ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC | extra,
        ..QpAttrs::default()
    };
    d.modify(1, &a, AttrMask::ACCESS_FLAGS).expect("access");
}

fn executed(d: &Duo) -> (u64, u64) {
    let m = d.e[1].mem.0.borrow();
    (m.atomic_writes_executed, m.flushes_executed)
}

/// oA19-28 and rdma_rxe: ATOMIC WRITE is one RC ATOMIC WRITE packet (0x1D) with a RETH of DMA
/// length 8 and the 8 bytes as payload; the answer is an RDMA Read Response Only with no data;
/// the bytes land at the address, the completion is IB_WC_ATOMIC_WRITE with byte_len 8.
#[test]
fn a19_atomic_write_is_one_packet_and_lands_eight_bytes() {
    let mut d = duo();
    fill(&d.e[1].mem, RMT, RMT_VA, &[0xEE; 24]);
    d.post(0, atomic_write_wr(1, RMT, RMT_VA + 8, VALUE))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let (h, payload, _) = &p[0];
    assert_eq!(h.bth.opcode, Opcode::RcAtomicWrite);
    assert_eq!(h.bth.opcode.as_u8(), 0x1D);
    let reth = h.reth.expect("RETH");
    assert_eq!((reth.va, reth.rkey, reth.dma_len), (RMT_VA + 8, RMT, 8));
    assert!(h.bth.ack_req);
    assert_eq!(payload, &VALUE.to_vec());
    d.deliver_all(1, &p);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0.bth.opcode, Opcode::RcRdmaReadResponseOnly);
    assert_eq!(r[0].0.bth.psn, h.bth.psn);
    assert!(r[0].1.is_empty());
    assert!(aeth_of(&r[0].0).syndrome.is_ack());
    d.deliver_all(0, &r);
    d.pump();
    let mut expect = vec![0xEE; 24];
    expect[8..16].copy_from_slice(&VALUE);
    assert_eq!(d.e[1].mem.peek(RMT, RMT_VA, 24), expect);
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode, c[0].byte_len),
        (1, WcStatus::Success, WcOpcode::AtomicWrite, 8)
    );
    assert_eq!(executed(&d), (1, 0));
    assert_eq!(d.e[0].qp.sq_logic().una(), PSN_A + 1);
}

/// oA19-2 and rdma_rxe: FLUSH is one RC FLUSH packet (0x1C) with FETH (placement type,
/// selectivity) then RETH and no payload; answered by an empty RDMA Read Response Only;
/// IB_WC_FLUSH with the length asked for.
#[test]
fn a19_flush_is_one_packet_with_feth_and_completes() {
    let mut d = duo();
    d.post(
        0,
        flush_wr(7, FL, FL_VA + 64, 512, PLACEMENT_GLOBAL, SELECT_RANGE),
    )
    .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let (h, payload, _) = &p[0];
    assert_eq!(h.bth.opcode, Opcode::RcFlush);
    assert_eq!(h.bth.opcode.as_u8(), 0x1C);
    assert_eq!(
        h.feth,
        Some(Feth {
            placement: PLACEMENT_GLOBAL,
            selectivity: SELECT_RANGE
        })
    );
    let reth = h.reth.expect("RETH");
    assert_eq!((reth.va, reth.rkey, reth.dma_len), (FL_VA + 64, FL, 512));
    assert!(payload.is_empty());
    d.deliver_all(1, &p);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0.bth.opcode, Opcode::RcRdmaReadResponseOnly);
    assert!(r[0].1.is_empty());
    d.deliver_all(0, &r);
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode, c[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Flush, 512)
    );
    assert_eq!(executed(&d), (0, 1));
}

/// Selectivity "whole MR" needs no valid range: the RETH address and length are not checked.
#[test]
fn a19_flush_of_a_whole_mr_ignores_the_range() {
    let mut d = duo();
    d.post(
        0,
        flush_wr(
            1,
            FL,
            0xdead_0000,
            u32::MAX >> 1,
            PLACEMENT_PERSISTENT,
            SELECT_MR,
        ),
    )
    .expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(executed(&d), (0, 1));
}

/// A FLUSH to an MR without the flush right, or outside the MR, or with an unknown R_Key is
/// an R_Key violation (class C): Remote Access Error NAK, REM_ACCESS_ERR, QP_ACCESS_ERR at
/// the responder, nothing flushed.
#[test]
fn a19_flush_r_key_violations_are_remote_access_errors() {
    for (what, rkey, va, placement) in [
        ("MR without flush rights", NOFL, NOFL_VA, PLACEMENT_GLOBAL),
        (
            "MR without the persistent right",
            NOFL,
            NOFL_VA,
            PLACEMENT_PERSISTENT,
        ),
        ("range past the MR", FL, FL_VA + 4000, PLACEMENT_GLOBAL),
        ("unknown R_Key", 0x30 << 8 | 1, FL_VA, PLACEMENT_GLOBAL),
    ] {
        let mut d = duo();
        d.post(0, flush_wr(1, rkey, va, 512, placement, SELECT_RANGE))
            .expect("post");
        d.progress(0);
        d.flow(0);
        d.progress(1);
        let r = d.take(1);
        assert!(is_nak(&r[0].0, NakCode::RemoteAccessError), "{what}");
        d.deliver_all(0, &r);
        d.pump();
        assert_eq!(
            d.e[0].out.send_cqes[0].status,
            WcStatus::RemAccessErr,
            "{what}"
        );
        assert!(d.e[1].out.has_event(AsyncEvent::QpAccessErr), "{what}");
        assert_eq!(d.state(1), QpState::Error, "{what}");
        assert_eq!(executed(&d), (0, 0), "{what}");
    }
}

/// rdma_rxe's check_qp_attr_access: a FLUSH whose placement type the QP does not enable, or
/// with a reserved selectivity level, is an invalid request (class C): REM_INV_REQ_ERR and
/// QP_REQ_ERR.
#[test]
fn a19_flush_not_enabled_on_the_qp_is_an_invalid_request() {
    for (what, qp_extra, placement, sel) in [
        (
            "no flush right on the QP",
            0,
            PLACEMENT_GLOBAL,
            SELECT_RANGE,
        ),
        (
            "global only, persistent asked",
            ACCESS_FLUSH_GLOBAL,
            PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT,
            SELECT_RANGE,
        ),
        (
            "reserved selectivity",
            ACCESS_FLUSH_GLOBAL,
            PLACEMENT_GLOBAL,
            2,
        ),
    ] {
        let mut d = duo();
        qp_access(&mut d, qp_extra);
        d.post(0, flush_wr(1, FL, FL_VA, 8, placement, sel))
            .expect("post");
        d.pump();
        assert_eq!(
            d.e[0].out.send_cqes[0].status,
            WcStatus::RemInvReqErr,
            "{what}"
        );
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr), "{what}");
        assert_eq!(executed(&d), (0, 0), "{what}");
    }
}

/// ATOMIC WRITE needs remote write on the QP (else invalid request) and on the MR, in range
/// (else remote access error); a misaligned address is an invalid request (A19.4.2, rdma_rxe
/// RESPST_ERR_MISALIGNED_ATOMIC). No byte changes in any case.
#[test]
fn a19_atomic_write_checks_rights_range_and_alignment() {
    let cases: [(&str, u32, u64, bool, WcStatus, AsyncEvent); 5] = [
        (
            "misaligned",
            RMT,
            RMT_VA + 4,
            true,
            WcStatus::RemInvReqErr,
            AsyncEvent::QpReqErr,
        ),
        (
            "MR without remote write",
            ATM,
            ATM_VA,
            true,
            WcStatus::RemAccessErr,
            AsyncEvent::QpAccessErr,
        ),
        (
            "past the MR's end",
            RMT,
            RMT_VA + (1 << 16) - 4,
            true,
            WcStatus::RemAccessErr,
            AsyncEvent::QpAccessErr,
        ),
        (
            "unknown R_Key",
            0x30 << 8 | 1,
            RMT_VA,
            true,
            WcStatus::RemAccessErr,
            AsyncEvent::QpAccessErr,
        ),
        (
            "QP without remote write",
            RMT,
            RMT_VA,
            false,
            WcStatus::RemInvReqErr,
            AsyncEvent::QpReqErr,
        ),
    ];
    for (what, rkey, va, qp_write, status, ev) in cases {
        let mut d = duo();
        if !qp_write {
            let a = QpAttrs {
                qp_access_flags: ACCESS_REMOTE_READ,
                ..QpAttrs::default()
            };
            d.modify(1, &a, AttrMask::ACCESS_FLAGS).expect("access");
        }
        fill(&d.e[1].mem, RMT, RMT_VA, &[0x55; 64]);
        d.post(0, atomic_write_wr(1, rkey, va, VALUE))
            .expect("post");
        d.pump();
        assert_eq!(d.e[0].out.send_cqes[0].status, status, "{what}");
        assert!(d.e[1].out.has_event(ev), "{what}");
        assert_eq!(executed(&d), (0, 0), "{what}");
        assert_eq!(d.e[1].mem.peek(RMT, RMT_VA, 64), vec![0x55; 64], "{what}");
    }
}

/// oA19-28: the payload of an ATOMIC WRITE is exactly 8 bytes and its RETH DMA length 8;
/// anything else is an invalid request (rdma_rxe: RESPST_ERR_LENGTH), nothing written.
#[test]
fn a19_atomic_write_length_must_be_eight() {
    for (what, payload, dma_len) in [
        ("4-byte payload", vec![9u8; 4], 8u32),
        ("12-byte payload", vec![9u8; 12], 8),
        ("DMA length 16", vec![9u8; 8], 16),
    ] {
        let mut d = duo();
        let h = req_reth(Opcode::RcAtomicWrite, PSN_A, RMT, RMT_VA, dma_len);
        d.deliver(1, &h, &payload, 1);
        d.progress(1);
        assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest), "{what}");
        assert_eq!(executed(&d), (0, 0), "{what}");
        assert_eq!(d.e[1].mem.peek(RMT, RMT_VA, 16), vec![0; 16], "{what}");
    }
}

/// A duplicate ATOMIC WRITE or FLUSH is answered again from the responder resources and never
/// executed again (rdma_rxe replays both): bytes written meanwhile stay.
#[test]
fn a19_duplicates_are_answered_again_not_executed_again() {
    let mut d = duo();
    let aw = {
        let mut h = req_reth(Opcode::RcAtomicWrite, PSN_A, RMT, RMT_VA, 8);
        h.bth.ack_req = true;
        h
    };
    let mut fl = req_reth(Opcode::RcFlush, PSN_A + 1, FL, FL_VA, 64);
    fl.feth = Some(Feth {
        placement: PLACEMENT_GLOBAL,
        selectivity: SELECT_RANGE,
    });
    d.deliver(1, &aw, &VALUE, 1);
    d.deliver(1, &fl, &[], 1);
    d.progress(1);
    let r1 = d.take(1);
    assert_eq!(r1.len(), 2);
    assert_eq!(executed(&d), (1, 1));
    // Node 1's application overwrites the word; the duplicate must not write it back.
    fill(&d.e[1].mem, RMT, RMT_VA, &[0; 8]);
    d.deliver(1, &aw, &VALUE, 1);
    d.progress(1);
    let r2 = d.take(1);
    assert_eq!(r2.len(), 2, "the answers from the duplicate's PSN on");
    for (a, psn) in r2.iter().zip([PSN_A, PSN_A + 1]) {
        assert_eq!(a.0.bth.opcode, Opcode::RcRdmaReadResponseOnly);
        assert_eq!(a.0.bth.psn, Psn::new(psn));
    }
    d.deliver(1, &fl, &[], 1);
    d.progress(1);
    let r3 = d.take(1);
    assert_eq!(r3.len(), 1);
    assert_eq!(r3[0].0.bth.psn, Psn::new(PSN_A + 1));
    assert_eq!(executed(&d), (1, 1));
    assert_eq!(d.e[1].mem.peek(RMT, RMT_VA, 8), vec![0; 8]);
    assert_eq!(d.state(1), QpState::Rts);
}

/// A lost response: the requester's transport timer resends the ATOMIC WRITE, the responder
/// answers the duplicate, the WQE completes once, the word is written once.
#[test]
fn a19_lost_response_is_retried_and_completes_once() {
    let mut d = duo();
    d.post(0, atomic_write_wr(1, RMT, RMT_VA, VALUE))
        .expect("post");
    d.progress(0);
    d.flow(0);
    d.progress(1);
    assert_eq!(d.take(1).len(), 1, "response lost");
    fill(&d.e[1].mem, RMT, RMT_VA, &[0x11; 8]);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcAtomicWrite);
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
    d.deliver_all(1, &p);
    d.pump();
    assert_eq!(d.e[0].out.send_cqes.len(), 1);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(executed(&d), (1, 0));
    assert_eq!(d.e[1].mem.peek(RMT, RMT_VA, 8), vec![0x11; 8]);
}

/// Both take an outstanding RDMA Read/atomic slot at the requester (the responder keeps a
/// resource for each): with max_rd_atomic 1 the second waits for the first answer.
#[test]
fn a19_atomic_write_and_flush_count_against_max_rd_atomic() {
    let mut d = Duo::new(Opts {
        max_rd_atomic: 1,
        ..Opts::default()
    });
    d.pump();
    d.e[1]
        .mem
        .add_mr(FL, FL_VA, 4096, ACCESS_REMOTE_WRITE | ACCESS_FLUSH_GLOBAL);
    qp_access(&mut d, ACCESS_FLUSH_GLOBAL);
    d.post(0, atomic_write_wr(1, RMT, RMT_VA, VALUE))
        .expect("post");
    d.post(0, flush_wr(2, FL, FL_VA, 8, PLACEMENT_GLOBAL, SELECT_RANGE))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "the FLUSH waits");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcAtomicWrite);
    d.deliver_all(1, &p);
    d.progress(1);
    d.progress(0);
    assert!(d.take(0).is_empty(), "still waiting for the answer");
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c.len(), 2);
    assert!(d.e[0].sends_all(WcStatus::Success));
    assert_eq!(
        (c[0].opcode, c[1].opcode),
        (WcOpcode::AtomicWrite, WcOpcode::Flush)
    );
}

/// Both are RC operations: a UC QP refuses them at post time.
#[test]
fn a19_uc_refuses_atomic_write_and_flush() {
    let mut d = Duo::new(Opts {
        uc: true,
        ..Opts::default()
    });
    assert_eq!(
        d.post(0, atomic_write_wr(1, RMT, RMT_VA, VALUE)),
        Err(PostError::InvalidWr)
    );
    assert_eq!(
        d.post(
            0,
            flush_wr(2, RMT, RMT_VA, 8, PLACEMENT_GLOBAL, SELECT_RANGE)
        ),
        Err(PostError::InvalidWr)
    );
}

/// rdma_rxe's requester does not count FLUSH against max_rd_atomic, so the responder takes
/// FLUSHes beyond max_dest_rd_atomic as long as it can keep their answers; an ATOMIC WRITE
/// beyond it is an invalid request (as an RDMA Read or atomic).
#[test]
fn a19_flush_beyond_max_dest_rd_atomic_is_accepted() {
    let mut d = Duo::responder_with(Opts {
        max_dest_rd_atomic: 1,
        ..Opts::default()
    });
    d.e[1]
        .mem
        .add_mr(FL, FL_VA, 4096, ACCESS_REMOTE_WRITE | ACCESS_FLUSH_GLOBAL);
    qp_access(&mut d, ACCESS_FLUSH_GLOBAL);
    for k in 0..3 {
        let mut fl = req_reth(Opcode::RcFlush, PSN_A + k, FL, FL_VA, 64);
        fl.feth = Some(Feth {
            placement: PLACEMENT_GLOBAL,
            selectivity: SELECT_RANGE,
        });
        d.deliver(1, &fl, &[], 1);
    }
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 3);
    assert!(r
        .iter()
        .all(|p| p.0.bth.opcode == Opcode::RcRdmaReadResponseOnly));
    assert_eq!(executed(&d), (0, 3));
    let mut d = Duo::responder_with(Opts {
        max_dest_rd_atomic: 1,
        ..Opts::default()
    });
    for k in 0..2 {
        let h = req_reth(
            Opcode::RcAtomicWrite,
            PSN_A + k,
            RMT,
            RMT_VA + 8 * u64::from(k),
            8,
        );
        d.deliver(1, &h, &VALUE, 1);
    }
    let r = d.take(1);
    assert!(is_nak(&r[0].0, NakCode::InvalidRequest));
    assert_eq!(r[0].0.bth.psn, Psn::new(PSN_A + 1));
    assert_eq!(d.state(1), QpState::Error);
    assert_eq!(executed(&d), (1, 0));
}
