//! Seed 001: every R_Key violation (unknown, invalidated or foreign key, missing right, range
//! outside the MR, wrapping range) is a remote access error that touches no memory, and a
//! good key works.

use rvrdma_core::events::{AsyncEvent, WcStatus};
use rvrdma_core::memory::{ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE};
use rvrdma_core::qp::QpAttrs;
use rvrdma_core::qp_state::{AttrMask, QpState};
use rvrdma_core::wqe::{SendOpcode, SendWr};

use super::fixtures::*;

const TGT_VA: u64 = 0x50000;

const TGT_LEN: usize = 4096;

const TGT: u32 = 0x10 << 8 | 0x42;

const PATTERN: u8 = 0xA5;

/// The R_Key violations a responder must catch, as (what, R_Key, VA) of an RDMA request of
/// 64 bytes from node 0, with node 1's memory set up for each.
fn r_key_violations(op: SendOpcode) -> Vec<(&'static str, u32, u64)> {
    let mut v = vec![
        ("unused MR index", 0x11 << 8 | 0x42, TGT_VA),
        ("wrong key byte", TGT ^ 0x01, TGT_VA),
        ("invalidated MR", TGT, TGT_VA),
        ("MR of another PD", 0x12 << 8 | 0x42, TGT_VA + 0x10000),
        ("range past the MR's end", TGT, TGT_VA + TGT_LEN as u64 - 32),
        ("range before the MR", TGT, TGT_VA - 8),
    ];
    if op == SendOpcode::RdmaRead {
        v.push(("MR without remote read", 0x13 << 8 | 0x42, TGT_VA + 0x20000));
    } else {
        v.push((
            "MR without remote write",
            0x14 << 8 | 0x42,
            TGT_VA + 0x30000,
        ));
    }
    v
}

/// Node 0's 64-byte RDMA Write or Read (`op`) at `va` under `rkey`.
fn rdma_wr(op: SendOpcode, id: u64, rkey: u32, va: u64) -> SendWr {
    let mut wr = if op == SendOpcode::RdmaRead {
        read_wr(id, 64)
    } else {
        send_wr(id, SendOpcode::RdmaWrite, 64)
    };
    wr.rkey = rkey;
    wr.remote_addr = va;
    wr
}

fn r_key_duo(case: &str) -> Duo {
    use rvrdma_core::memory::Memory;
    let mut d = Duo::new(Opts::default());
    let m = &d.e[1].mem;
    let all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;
    m.add_mr(TGT, TGT_VA, TGT_LEN, all);
    m.add_mr_pd(0x12 << 8 | 0x42, TGT_VA + 0x10000, TGT_LEN, all, 7);
    m.add_mr(
        0x13 << 8 | 0x42,
        TGT_VA + 0x20000,
        TGT_LEN,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
    );
    m.add_mr(
        0x14 << 8 | 0x42,
        TGT_VA + 0x30000,
        TGT_LEN,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
    );
    for (k, va) in [
        (TGT, TGT_VA),
        (0x13 << 8 | 0x42, TGT_VA + 0x20000),
        (0x14 << 8 | 0x42, TGT_VA + 0x30000),
    ] {
        fill(m, k, va, &[PATTERN; TGT_LEN]);
    }
    {
        let mut inner = m.0.borrow_mut();
        let saved = inner.pd;
        inner.pd = 7;
        inner
            .write(0x12 << 8 | 0x42, TGT_VA + 0x10000, &[PATTERN; TGT_LEN])
            .expect("fill");
        inner.pd = saved;
    }
    if case == "invalidated MR" {
        let mut m = d.e[1].mem.clone();
        m.local_invalidate(TGT).expect("invalidate");
    }
    fill(&d.e[0].mem, SRC, SRC_VA, &[0x3C; 64]);
    d.pump();
    d
}

/// Seed 001, Table 17-7 "R_Key Violation" (class C): whatever is wrong with the R_Key of an
/// RDMA Read or Write (no MR at its index, a wrong key byte, an invalidated MR, an MR of
/// another PD, a range outside the MR, an MR without the access), the responder answers with
/// the Remote Access Error NAK, enters Error and raises QP_ACCESS_ERR (no RQ WQE in use); the
/// requester completes with REM_ACCESS_ERR; no byte of either side's memory changes.
#[test]
fn seed001_class_c_every_r_key_violation_is_a_remote_access_error() {
    for op in [SendOpcode::RdmaWrite, SendOpcode::RdmaRead] {
        for (case, rkey, va) in r_key_violations(op) {
            let mut d = r_key_duo(case);
            d.post(0, rdma_wr(op, 1, rkey, va)).expect("post");
            d.pump();
            let what = format!("{op:?}, {case}");
            let c = &d.e[0].out.send_cqes;
            assert_eq!(c.len(), 1, "{what}");
            assert_eq!(c[0].status, WcStatus::RemAccessErr, "{what}");
            assert!(d.e[1].out.has_event(AsyncEvent::QpAccessErr), "{what}");
            assert!(!d.e[1].out.has_event(AsyncEvent::QpReqErr), "{what}");
            assert_eq!(d.state(1), QpState::Error, "{what}");
            for (k, base) in [
                (TGT, TGT_VA),
                (0x12 << 8 | 0x42, TGT_VA + 0x10000),
                (0x13 << 8 | 0x42, TGT_VA + 0x20000),
                (0x14 << 8 | 0x42, TGT_VA + 0x30000),
            ] {
                assert!(
                    d.e[1]
                        .mem
                        .peek(k, base, TGT_LEN)
                        .iter()
                        .all(|b| *b == PATTERN),
                    "{what}: target memory changed"
                );
            }
            assert!(
                d.e[0].mem.peek(DST, DST_VA, 64).iter().all(|b| *b == 0),
                "{what}: the reader's memory changed"
            );
        }
    }
}

/// The same checks pass with a good R_Key (the test setup itself is sound), and a QP without
/// remote access enabled answers an RDMA request with an Invalid Request NAK instead (Table
/// 17-7 "Unsupported or Reserved Opcode": a function the QP does not support): REM_INV_REQ_ERR
/// at the requester, QP_REQ_ERR at the target.
#[test]
fn seed001_r_key_good_key_works_and_disabled_qp_access_is_an_invalid_request() {
    let mut d = r_key_duo("");
    d.post(0, rdma_wr(SendOpcode::RdmaWrite, 1, TGT, TGT_VA))
        .expect("post");
    d.post(0, rdma_wr(SendOpcode::RdmaRead, 2, TGT, TGT_VA + 64))
        .expect("post");
    d.pump();
    assert!(d.e[0].sends_all(WcStatus::Success));
    assert_eq!(d.e[1].mem.peek(TGT, TGT_VA, 64), vec![0x3C; 64]);
    assert_eq!(d.e[0].mem.peek(DST, DST_VA, 64), vec![PATTERN; 64]);
    for (op, access) in [
        (SendOpcode::RdmaWrite, ACCESS_REMOTE_READ),
        (SendOpcode::RdmaRead, ACCESS_REMOTE_WRITE),
    ] {
        let mut d = r_key_duo("");
        let a = QpAttrs {
            qp_access_flags: access,
            ..QpAttrs::default()
        };
        d.modify(1, &a, AttrMask::ACCESS_FLAGS)
            .expect("access flags");
        d.post(0, rdma_wr(op, 1, TGT, TGT_VA)).expect("post");
        d.pump();
        assert_eq!(
            d.e[0].out.send_cqes[0].status,
            WcStatus::RemInvReqErr,
            "{op:?}"
        );
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr), "{op:?}");
        assert!(d.e[1]
            .mem
            .peek(TGT, TGT_VA, TGT_LEN)
            .iter()
            .all(|b| *b == PATTERN));
    }
}
