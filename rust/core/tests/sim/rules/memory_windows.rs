//! Memory windows end to end: node 1 binds a window over part of an MR with a BIND_MW work
//! request, node 0 reaches the MR's memory through the window's R_Key only inside the window
//! and with the window's rights, and invalidation (LOCAL_INV, or node 0's Send with Invalidate)
//! closes it. A refused bind completes with IB_WC_MW_BIND_ERR and moves the QP to Error.

use rvrdma_core::events::{AsyncEvent, WcOpcode, WcStatus};
use rvrdma_core::memory::{ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE};
use rvrdma_core::mw::{BindMwParams, MwType, ACCESS_MW_BIND};
use rvrdma_core::qp_state::QpState;
use rvrdma_core::wqe::{SendOpcode, SendWr, SgList, Sge, WrExtra};

use super::fixtures::*;

/// Node 1's MR the windows are bound to: local write and MW bind, no remote rights itself.
const WMR: u32 = 0x20 << 8 | 0x33;
const WMR_VA: u64 = 0x60000;
const WMR_LEN: usize = 4096;
/// Node 1's window and where it is bound: 512 bytes from 1 KiB into the MR.
const WIN: u32 = 0x21 << 8 | 0x05;
/// An MR over the same bytes as `WMR` that does not allow binding windows (C10-73).
const NOBIND: u32 = 0x22 << 8 | 0x44;
const WIN_VA: u64 = WMR_VA + 1024;
const WIN_LEN: u64 = 512;
const OLD: u8 = 0x5A;

fn bind_wr(id: u64, mw_rkey: u32, access: u32) -> SendWr {
    let mut wr = SendWr::new(id, SendOpcode::BindMw);
    wr.extra = WrExtra::Bind(BindMwParams {
        mw_rkey,
        rkey: (mw_rkey & !0xff) | ((mw_rkey + 1) & 0xff),
        mr_lkey: WMR,
        addr: WIN_VA,
        length: WIN_LEN,
        access,
    });
    wr
}

/// A running pair where node 1 has the MR and an unbound window of `kind`.
fn duo(kind: MwType) -> Duo {
    let d = Duo::running(2);
    let m = &d.e[1].mem;
    m.add_mr(WMR, WMR_VA, WMR_LEN, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND);
    m.add_mr(NOBIND, WMR_VA, WMR_LEN, ACCESS_LOCAL_WRITE);
    fill(m, WMR, WMR_VA, &[OLD; WMR_LEN]);
    m.add_mw(kind, WIN);
    fill(&d.e[0].mem, SRC, SRC_VA, &[0xC3; 256]);
    d
}

/// [`duo`] with the window bound (read and write) by node 1; returns the window's new key.
fn bound(kind: MwType) -> (Duo, u32) {
    let mut d = duo(kind);
    d.post(1, bind_wr(7, WIN, ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE))
        .expect("post bind");
    d.pump();
    let c = &d.e[1].out.send_cqes;
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status),
        (7, WcOpcode::BindMw, WcStatus::Success)
    );
    let key = d.e[1].mem.mw_key(WIN);
    assert_eq!(key, (WIN & !0xff) | ((WIN + 1) & 0xff));
    (d, key)
}

fn write_wr(id: u64, rkey: u32, va: u64, len: u32) -> SendWr {
    let mut wr = send_wr(id, SendOpcode::RdmaWrite, len);
    wr.rkey = rkey;
    wr.remote_addr = va;
    wr
}

fn mr_bytes(d: &Duo) -> Vec<u8> {
    d.e[1].mem.peek(WMR, WMR_VA, WMR_LEN)
}

#[test]
fn bound_window_carries_writes_and_reads_inside_it() {
    for kind in [MwType::Type1, MwType::Type2] {
        let (mut d, key) = bound(kind);
        d.post(0, write_wr(1, key, WIN_VA + 8, 256)).expect("post");
        d.pump();
        assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
        let mut want = vec![OLD; WMR_LEN];
        want[1024 + 8..1024 + 8 + 256].fill(0xC3);
        assert_eq!(mr_bytes(&d), want, "{kind:?}");
        // Read back the window's last 64 bytes.
        fill(&d.e[1].mem, WMR, WIN_VA + WIN_LEN - 64, &[0x77; 64]);
        let mut rd = read_wr(2, 64);
        rd.rkey = key;
        rd.remote_addr = WIN_VA + WIN_LEN - 64;
        d.post(0, rd).expect("post");
        d.pump();
        assert_eq!(d.e[0].out.send_cqes[1].status, WcStatus::Success);
        assert_eq!(d.e[0].mem.peek(DST, DST_VA, 64), vec![0x77; 64]);
    }
}

/// Seed 001 class C through a window: a range inside the MR but outside the window, or an
/// access the window does not grant, is an R_Key violation (Remote Access Error NAK, the
/// responder in Error, nothing written).
#[test]
fn access_outside_the_window_is_a_remote_access_error() {
    for (case, off, len) in [
        ("before the window", -8i64, 16u32),
        ("past the window's end", WIN_LEN as i64 - 8, 16),
    ] {
        let (mut d, key) = bound(MwType::Type2);
        let before = mr_bytes(&d);
        let va = (WIN_VA as i64 + off) as u64;
        d.post(0, write_wr(1, key, va, len)).expect("post");
        d.pump();
        assert_eq!(
            d.e[0].out.send_cqes[0].status,
            WcStatus::RemAccessErr,
            "{case}"
        );
        assert!(d.e[1].out.has_event(AsyncEvent::QpAccessErr), "{case}");
        assert_eq!(d.state(1), QpState::Error, "{case}");
        assert_eq!(mr_bytes(&d), before, "{case}");
    }
}

#[test]
fn window_rights_not_the_mrs_decide() {
    // A read-only window over an MR with local write: writes through it fail.
    let mut d = duo(MwType::Type2);
    d.post(1, bind_wr(7, WIN, ACCESS_REMOTE_READ))
        .expect("post");
    d.pump();
    assert_eq!(d.e[1].out.send_cqes[0].status, WcStatus::Success);
    let key = d.e[1].mem.mw_key(WIN);
    let before = mr_bytes(&d);
    d.post(0, write_wr(1, key, WIN_VA, 8)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RemAccessErr);
    assert_eq!(mr_bytes(&d), before);
}

#[test]
fn window_key_is_no_local_key() {
    let (mut d, key) = bound(MwType::Type1);
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg = SgList::from_slice(&[Sge {
        addr: WIN_VA,
        length: 8,
        lkey: key,
    }])
    .expect("sg");
    d.post(1, wr).expect("post");
    d.pump();
    assert_eq!(d.e[1].out.send_cqes[1].status, WcStatus::LocProtErr);
}

#[test]
fn send_with_invalidate_closes_a_type2_window() {
    let (mut d, key) = bound(MwType::Type2);
    let mut inv = send_wr(1, SendOpcode::SendWithInv, 16);
    inv.invalidate_rkey = key;
    d.post(0, inv).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    let r = d.e[1].out.recv_cqes[0];
    assert_eq!((r.status, r.imm_or_rkey), (WcStatus::Success, key));
    let before = mr_bytes(&d);
    d.post(0, write_wr(2, key, WIN_VA, 8)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[1].status, WcStatus::RemAccessErr);
    assert_eq!(mr_bytes(&d), before);
}

#[test]
fn local_inv_closes_a_type2_window_and_it_binds_again() {
    let (mut d, key) = bound(MwType::Type2);
    let mut inv = SendWr::new(8, SendOpcode::LocalInv);
    inv.invalidate_rkey = key;
    d.post(1, inv).expect("post");
    d.pump();
    let c = d.e[1].out.send_cqes[1];
    assert_eq!(
        (c.opcode, c.status),
        (WcOpcode::LocalInv, WcStatus::Success)
    );
    // Free again: a new bind (with the key it has now) takes a new key byte and works.
    d.post(1, bind_wr(9, key, ACCESS_REMOTE_WRITE))
        .expect("post");
    d.pump();
    assert_eq!(d.e[1].out.send_cqes[2].status, WcStatus::Success);
    let new_key = d.e[1].mem.mw_key(WIN);
    assert_ne!(new_key, key);
    d.post(0, write_wr(1, new_key, WIN_VA, 8)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].mem.peek(WMR, WIN_VA, 8), vec![0xC3; 8]);
    // The old key names nothing.
    d.post(0, write_wr(2, key, WIN_VA, 8)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[1].status, WcStatus::RemAccessErr);
}

#[test]
fn o10_37_2_26_local_inv_of_a_type1_window_fails_the_qp() {
    let (mut d, key) = bound(MwType::Type1);
    let mut inv = SendWr::new(8, SendOpcode::LocalInv);
    inv.invalidate_rkey = key;
    d.post(1, inv).expect("post");
    d.pump();
    let c = d.e[1].out.send_cqes[1];
    assert_eq!(
        (c.opcode, c.status),
        (WcOpcode::LocalInv, WcStatus::LocQpOpErr)
    );
    assert_eq!(d.state(1), QpState::Error);
}

/// The bind parameters of a BIND_MW request.
fn bind_of(w: &mut SendWr) -> &mut BindMwParams {
    match &mut w.extra {
        WrExtra::Bind(b) => b,
        other => panic!("not a bind: {other:?}"),
    }
}

/// rdma_rxe: a refused bind completes with IB_WC_MW_BIND_ERR and the QP enters Error (later
/// work requests flush).
#[test]
fn refused_bind_is_an_mw_bind_error_and_the_qp_fails() {
    type Spoil = fn(&mut SendWr);
    let cases: [(&str, Spoil); 4] = [
        ("unknown window", |w| bind_of(w).mw_rkey = 0x55 << 8),
        ("stale window key", |w| bind_of(w).mw_rkey ^= 1),
        ("MR without MW bind", |w| bind_of(w).mr_lkey = NOBIND),
        ("window past the MR", |w| bind_of(w).length = WMR_LEN as u64),
    ];
    for (case, spoil) in cases {
        let mut d = duo(MwType::Type2);
        let mut wr = bind_wr(7, WIN, ACCESS_REMOTE_READ);
        spoil(&mut wr);
        d.post(1, wr).expect("post");
        d.post(1, bind_wr(9, WIN, ACCESS_REMOTE_READ))
            .expect("post");
        d.pump();
        let c = &d.e[1].out.send_cqes;
        assert_eq!(c.len(), 2, "{case}");
        assert_eq!(
            (c[0].wr_id, c[0].opcode, c[0].status),
            (7, WcOpcode::BindMw, WcStatus::MwBindErr),
            "{case}"
        );
        assert_eq!(
            (c[1].wr_id, c[1].status),
            (9, WcStatus::WrFlushErr),
            "{case}"
        );
        assert_eq!(d.state(1), QpState::Error, "{case}");
    }
}

#[test]
fn type2_window_rebinds_only_after_invalidation() {
    let (mut d, key) = bound(MwType::Type2);
    d.post(1, bind_wr(9, key, ACCESS_REMOTE_READ))
        .expect("post");
    d.pump();
    assert_eq!(d.e[1].out.send_cqes[1].status, WcStatus::MwBindErr);
}

#[test]
fn zero_based_window_is_addressed_from_zero_on_the_wire() {
    use rvrdma_core::mw::ACCESS_ZERO_BASED;
    let mut d = duo(MwType::Type2);
    d.post(1, bind_wr(7, WIN, ACCESS_REMOTE_WRITE | ACCESS_ZERO_BASED))
        .expect("post");
    d.pump();
    assert_eq!(d.e[1].out.send_cqes[0].status, WcStatus::Success);
    let key = d.e[1].mem.mw_key(WIN);
    d.post(0, write_wr(1, key, 16, 32)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    let mut want = vec![OLD; WMR_LEN];
    want[1024 + 16..1024 + 48].fill(0xC3);
    assert_eq!(mr_bytes(&d), want);
    // The window's own virtual address is past its zero-based end.
    d.post(0, write_wr(2, key, WIN_VA, 8)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[1].status, WcStatus::RemAccessErr);
    assert_eq!(mr_bytes(&d), want);
}

/// Type 2B: the window is tied to the QP that bound it; a request arriving on another QP of
/// the same PD (modelled by node 1's memory serving another QP number) is an R_Key violation.
#[test]
fn type2b_window_refuses_requests_on_another_qp() {
    let (mut d, key) = bound(MwType::Type2);
    d.e[1].mem.0.borrow_mut().qpn = 0x99;
    let before = mr_bytes(&d);
    d.post(0, write_wr(1, key, WIN_VA, 8)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RemAccessErr);
    assert_eq!(mr_bytes(&d), before);
}
