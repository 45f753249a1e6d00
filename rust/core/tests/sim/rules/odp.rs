//! On-demand paging ([`MemError::NotPresent`]): a packet or WQE whose memory is not resident is
//! not taken, leaves no trace (no answer, no completion, no state change), and taken again once
//! the memory is resident it does exactly what it would have done the first time. The driver
//! keeps such a packet, and the packets behind it, until it has faulted the memory in.

use rvrdma_core::events::{WcOpcode, WcStatus};
use rvrdma_core::memory::MemError;
use rvrdma_core::qp_state::QpState;
use rvrdma_core::wire::Opcode;
use rvrdma_core::wqe::SendOpcode;

use super::fixtures::*;
use crate::sim::mem::SimMem;

fn set_absent(mem: &SimMem, key: u32, absent: bool) {
    let mut m = mem.0.borrow_mut();
    m.absent.retain(|k| *k != key);
    if absent {
        m.absent.push(key);
    }
}

fn hits(mem: &SimMem) -> u64 {
    mem.0.borrow().not_present_hits.get()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// Checks that node 1 answered nothing, completed nothing and stays in RTS.
fn untouched(d: &mut Duo, what: &str) {
    assert!(d.take(1).is_empty(), "{what}: the responder answered");
    assert!(
        d.e[1].out.recv_cqes.is_empty(),
        "{what}: a receive completed"
    );
    assert_eq!(d.state(1), QpState::Rts, "{what}");
}

/// A Send whose receive buffer is not resident: the first packet is not taken (not even its
/// receive WQE); once resident, the whole message lands and completes once. The same for a
/// middle packet that finds the buffer gone.
#[test]
fn odp_send_not_resident_is_taken_again_whole() {
    for gone_at in [0usize, 1] {
        let mut d = Duo::running(2);
        let data = pattern(3 * MTU as usize);
        fill(&d.e[0].mem, SRC, SRC_VA, &data);
        d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
            .expect("post");
        d.progress(0);
        let pk = d.take(0);
        assert_eq!(pk.len(), 3);
        d.deliver_all(1, &pk[..gone_at]);
        d.take(1);
        set_absent(&d.e[1].mem, DST, true);
        let before = hits(&d.e[1].mem);
        let (h, p, port) = &pk[gone_at];
        d.deliver(1, h, p, *port);
        assert!(hits(&d.e[1].mem) > before, "the buffer was looked at");
        untouched(&mut d, "not resident");
        assert_eq!(d.e[1].qp.rq_logic().credits(), 2 - gone_at.min(1) as u64);
        set_absent(&d.e[1].mem, DST, false);
        d.deliver_all(1, &pk[gone_at..]);
        d.flow(1);
        let c = &d.e[1].out.recv_cqes;
        assert_eq!(c.len(), 1, "gone at packet {gone_at}");
        assert_eq!((c[0].status, c[0].byte_len), (WcStatus::Success, 3 * MTU));
        let got = d.e[1]
            .mem
            .0
            .borrow()
            .read(DST, DST_VA, 3 * MTU as u64)
            .expect("read");
        assert_eq!(got, data);
        assert_eq!(d.e[0].out.send_cqes.len(), 1);
        assert!(d.e[0].sends_all(WcStatus::Success));
        assert_eq!(d.e[1].out.recv_cqes.len(), 1);
    }
}

/// An RDMA Write with Immediate into memory that is not resident: no NAK, the receive WQE is
/// not used up; taken again it writes the data and completes with the immediate.
#[test]
fn odp_write_with_imm_not_resident_leaves_no_trace() {
    let mut d = Duo::running(1);
    let data = pattern(2 * MTU as usize);
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    let mut wr = send_wr(1, SendOpcode::RdmaWriteWithImm, 2 * MTU);
    wr.imm = 0x55;
    d.post(0, wr).expect("post");
    d.progress(0);
    let pk = d.take(0);
    // First packet (RETH checked), then the last one (the write itself, and the WQE).
    for gone_at in [0usize, 1] {
        set_absent(&d.e[1].mem, RMT, true);
        let (h, p, port) = &pk[gone_at];
        d.deliver(1, h, p, *port);
        untouched(&mut d, "write not resident");
        assert_eq!(d.e[1].qp.rq_logic().credits(), 1, "the WQE is still there");
        set_absent(&d.e[1].mem, RMT, false);
        d.deliver(1, h, p, *port);
    }
    d.flow(1);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].status, c[0].opcode, c[0].imm_or_rkey),
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0x55)
    );
    let got = d.e[1]
        .mem
        .0
        .borrow()
        .read(RMT, RMT_VA, 2 * MTU as u64)
        .expect("read");
    assert_eq!(got, data);
    assert!(d.e[0].sends_all(WcStatus::Success));
}

/// An RDMA Read of memory that is not resident is not answered; taken again it is.
#[test]
fn odp_read_request_not_resident_is_answered_when_taken_again() {
    let mut d = Duo::running(0);
    let data = pattern(600);
    fill(&d.e[1].mem, RMT, RMT_VA, &data);
    d.post(0, read_wr(1, 600)).expect("post");
    d.progress(0);
    let pk = d.take(0);
    set_absent(&d.e[1].mem, RMT, true);
    d.deliver_all(1, &pk);
    untouched(&mut d, "read not resident");
    set_absent(&d.e[1].mem, RMT, false);
    d.deliver_all(1, &pk);
    d.pump();
    assert_eq!(d.e[0].out.send_cqes.len(), 1);
    assert!(d.e[0].sends_all(WcStatus::Success));
    let got = d.e[0].mem.0.borrow().read(DST, DST_VA, 600).expect("read");
    assert_eq!(got, data);
}

/// An atomic on memory that is not resident does not execute; taken again it executes once.
#[test]
fn odp_atomic_not_resident_executes_once_when_taken_again() {
    let mut d = Duo::running(0);
    fill(&d.e[1].mem, ATM, ATM_VA, &40u64.to_ne_bytes());
    let fa = fetch_add_wr(1, 2, DST_VA);
    d.post(0, fa).expect("post");
    d.progress(0);
    let pk = d.take(0);
    set_absent(&d.e[1].mem, ATM, true);
    d.deliver_all(1, &pk);
    untouched(&mut d, "atomic not resident");
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
    set_absent(&d.e[1].mem, ATM, false);
    d.deliver_all(1, &pk);
    d.pump();
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 1);
    assert_eq!(
        d.e[1].mem.peek(ATM, ATM_VA, 8),
        42u64.to_ne_bytes().to_vec()
    );
    assert_eq!(
        d.e[0].mem.peek(DST, DST_VA, 8),
        40u64.to_ne_bytes().to_vec()
    );
    assert!(d.e[0].sends_all(WcStatus::Success));
}

/// A send WQE whose gather list is not resident does not start (no packet, no completion, no
/// error); once resident the next progress sends it.
#[test]
fn odp_requester_waits_for_its_gather_list() {
    let mut d = Duo::running(1);
    let data = pattern(500);
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    set_absent(&d.e[0].mem, SRC, true);
    d.post(0, send_wr(1, SendOpcode::Send, 500)).expect("post");
    assert_eq!(d.progress(0), 0);
    assert!(d.take(0).is_empty());
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.state(0), QpState::Rts);
    set_absent(&d.e[0].mem, SRC, false);
    d.pump();
    assert!(d.e[0].sends_all(WcStatus::Success));
    assert_eq!(d.e[0].out.send_cqes.len(), 1);
    let got = d.e[1].mem.0.borrow().read(DST, DST_VA, 500).expect("read");
    assert_eq!(got, data);
}

/// A Read response whose local buffer went away after the Read started is not taken; once the
/// buffer is resident again the same responses complete the Read.
#[test]
fn odp_read_response_not_resident_is_taken_again() {
    let mut d = Duo::running(0);
    let data = pattern(600);
    fill(&d.e[1].mem, RMT, RMT_VA, &data);
    d.post(0, read_wr(1, 600)).expect("post");
    d.flow_after_progress();
    d.progress(1);
    let responses = d.take(1);
    assert!(responses.len() > 1);
    assert!(responses
        .iter()
        .all(|r| r.0.bth.opcode != Opcode::RcAcknowledge));
    set_absent(&d.e[0].mem, DST, true);
    let (h, p, port) = &responses[0];
    d.deliver(0, h, p, *port);
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.state(0), QpState::Rts);
    set_absent(&d.e[0].mem, DST, false);
    d.deliver_all(0, &responses);
    assert_eq!(d.e[0].out.send_cqes.len(), 1);
    assert!(d.e[0].sends_all(WcStatus::Success));
    let got = d.e[0].mem.0.borrow().read(DST, DST_VA, 600).expect("read");
    assert_eq!(got, data);
}

/// An atomic's ACK whose local buffer (for the original value) went away is not taken: no
/// completion, nothing written; once resident, the same ACK writes the value and completes.
#[test]
fn odp_atomic_ack_not_resident_is_taken_again() {
    let mut d = Duo::running(0);
    fill(&d.e[1].mem, ATM, ATM_VA, &40u64.to_ne_bytes());
    fill(&d.e[0].mem, DST, DST_VA, &[0xEE; 8]);
    let fa = fetch_add_wr(1, 2, DST_VA);
    d.post(0, fa).expect("post");
    d.flow_after_progress();
    d.progress(1);
    let acks = d.take(1);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0.bth.opcode, Opcode::RcAtomicAcknowledge);
    set_absent(&d.e[0].mem, DST, true);
    let before = hits(&d.e[0].mem);
    d.deliver_all(0, &acks);
    assert!(
        hits(&d.e[0].mem) > before,
        "the access found the buffer absent"
    );
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.state(0), QpState::Rts);
    set_absent(&d.e[0].mem, DST, false);
    assert_eq!(
        d.e[0].mem.peek(DST, DST_VA, 8),
        vec![0xEE; 8],
        "nothing written"
    );
    d.deliver_all(0, &acks);
    assert_eq!(d.e[0].out.send_cqes.len(), 1);
    assert!(d.e[0].sends_all(WcStatus::Success));
    assert_eq!(
        d.e[0].mem.peek(DST, DST_VA, 8),
        40u64.to_ne_bytes().to_vec()
    );
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 1);
}

/// The error itself: what `check_remote` of an absent MR returns.
#[test]
fn odp_sim_memory_reports_not_present() {
    use rvrdma_core::memory::Memory;
    let d = Duo::running(0);
    let mut m = d.e[1].mem.clone();
    set_absent(&m, RMT, true);
    assert_eq!(m.check_remote(RMT, RMT_VA, 8, 0), Err(MemError::NotPresent));
    set_absent(&m, RMT, false);
    assert_eq!(m.check_remote(RMT, RMT_VA, 8, 0), Ok(()));
}

/// UC: a packet not taken leaves the ePSN where it was, so taken again it is the expected one
/// (no sequence error, no message dropped).
#[test]
fn odp_uc_send_not_resident_is_taken_again() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    let data = pattern(600);
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post(0, send_wr(1, SendOpcode::Send, 600)).expect("post");
    d.progress(0);
    let pk = d.take(0);
    assert_eq!(pk.len(), 3);
    d.deliver(1, &pk[0].0, &pk[0].1, pk[0].2);
    set_absent(&d.e[1].mem, DST, true);
    d.deliver(1, &pk[1].0, &pk[1].1, pk[1].2);
    assert!(d.e[1].out.recv_cqes.is_empty());
    set_absent(&d.e[1].mem, DST, false);
    d.deliver_all(1, &pk[1..]);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].status, c[0].byte_len), (WcStatus::Success, 600));
    assert_eq!(d.e[1].qp.counters().rq.sequence_errors, 0);
    let got = d.e[1].mem.0.borrow().read(DST, DST_VA, 600).expect("read");
    assert_eq!(got, data);
}

/// UD: a datagram whose receive buffer is not resident keeps its receive WQE; taken again it
/// lands whole.
#[test]
fn odp_ud_receive_not_resident_is_taken_again() {
    use super::uc_ud::{ud_pair, ud_send};
    let mut d = ud_pair([0x1111, 0x2222]);
    let data = pattern(300);
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post_recv(1, 1024).expect("recv");
    d.post(0, ud_send(1, 300, 0x2222)).expect("post");
    d.progress(0);
    let p = d.take(0);
    set_absent(&d.e[1].mem, DST, true);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    assert!(d.e[1].out.recv_cqes.is_empty());
    assert_eq!(d.e[1].qp.rq_logic().credits(), 1);
    set_absent(&d.e[1].mem, DST, false);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].status, c[0].byte_len), (WcStatus::Success, 340));
    let got = d.e[1]
        .mem
        .0
        .borrow()
        .read(DST, DST_VA + 40, 300)
        .expect("read");
    assert_eq!(got, data);
}
