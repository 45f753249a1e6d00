//! Solicited events (IBA 9.2.1 BTH:SE, 11.4.2.2 Request Completion Notification): the
//! requester sets SE on the last packet of a Send or an RDMA Write with Immediate whose WR asks
//! for it, never elsewhere; the responder's receive completion of such a message is solicited;
//! a CQ armed for solicited completions also wakes for every unsuccessful one.

use rvrdma_core::events::{WcOpcode, WcStatus};
use rvrdma_core::qp_state::QpState;
use rvrdma_core::wqe::{SendFlags, SendOpcode, SendWr};

use super::fixtures::*;

fn solicited(mut wr: SendWr) -> SendWr {
    wr.flags.0 |= SendFlags::SOLICITED;
    wr
}

/// Sends `wr` from node 0 and returns the SE bits of its packets, in order, then delivers them.
fn se_bits(d: &mut Duo, wr: SendWr) -> Vec<bool> {
    d.post(0, wr).expect("post");
    d.progress(0);
    let p = d.take(0);
    let se = p.iter().map(|(h, _, _)| h.bth.solicited).collect();
    d.deliver_all(1, &p);
    d.pump();
    se
}

#[test]
fn se_only_on_the_last_packet_of_a_solicited_send() {
    let mut d = Duo::running(4);
    let se = se_bits(&mut d, solicited(send_wr(1, SendOpcode::Send, 3 * MTU)));
    assert_eq!(se, [false, false, true]);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(
        (c.len(), c[0].status, c[0].opcode),
        (1, WcStatus::Success, WcOpcode::Recv)
    );
    assert!(c[0].solicited && c[0].wakes_solicited());
}

#[test]
fn a_send_without_the_flag_is_not_solicited() {
    let mut d = Duo::running(4);
    let se = se_bits(&mut d, send_wr(1, SendOpcode::SendWithImm, 2 * MTU));
    assert_eq!(se, [false, false]);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!((c.len(), c[0].status), (1, WcStatus::Success));
    assert!(!c[0].solicited && !c[0].wakes_solicited());
}

#[test]
fn write_with_immediate_carries_se_a_plain_write_never() {
    let mut d = Duo::running(4);
    // No receive completion at the responder, so SE would mean nothing: not set.
    let se = se_bits(
        &mut d,
        solicited(send_wr(1, SendOpcode::RdmaWrite, 2 * MTU)),
    );
    assert_eq!(se, [false, false]);
    assert!(d.e[1].out.recv_cqes.is_empty());
    let se = se_bits(
        &mut d,
        solicited(send_wr(2, SendOpcode::RdmaWriteWithImm, 2 * MTU)),
    );
    assert_eq!(se, [false, true]);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!((c.len(), c[0].opcode), (1, WcOpcode::RecvRdmaWithImm));
    assert!(c[0].solicited);
    // The requester's own completions are never solicited.
    assert!(d.e[0].out.send_cqes.iter().all(|c| !c.solicited));
}

#[test]
fn flushed_receives_wake_a_solicited_arm() {
    let mut d = Duo::running(2);
    d.move_to(1, QpState::Error);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| c.status == WcStatus::WrFlushErr));
    assert!(c.iter().all(|c| !c.solicited && c.wakes_solicited()));
}
