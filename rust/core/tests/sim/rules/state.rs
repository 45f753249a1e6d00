//! Seed 004 and the QP state machine as the data path sees it: Init, Communication Established
//! in RTR, the SQD drain, Error flushing both queues, and an SRQ QP's last WQE.

use rvrdma_core::events::{AsyncEvent, WcStatus};
use rvrdma_core::qp::QpAttrs;
use rvrdma_core::qp_state::{AttrMask, QpState};
use rvrdma_core::requester::PostError;
use rvrdma_core::wire::Opcode;
use rvrdma_core::wqe::SendOpcode;

use super::fixtures::*;

// ---- seed 004 and the state machine --------------------------------------------------------

#[test]
fn seed004_init_refuses_post_send_at_once() {
    let mut d = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    assert_eq!(
        d.post(0, send_wr(1, SendOpcode::Send, 1)),
        Err(PostError::InvalidState)
    );
    assert!(d.e[0].out.send_cqes.is_empty());
}

#[test]
fn seed004_init_accepts_receives_and_drops_inbound_packets() {
    let mut d = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    d.post_recv(1, 64)
        .expect("receive WRs can be posted in Init");
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    assert!(d.take(1).is_empty());
    assert!(d.e[1].out.recv_cqes.is_empty());
    assert_eq!(d.e[1].qp.counters().dropped, 1);
}

#[test]
fn comm_est_raised_for_first_packet_in_rtr() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        to: QpState::Rtr,
        ..Opts::default()
    });
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A + 1), &[1], 1);
    assert_eq!(d.e[1].out.event_count(AsyncEvent::CommEst), 1);
}

#[test]
fn sqd_drains_and_raises_sq_drained_only_if_requested() {
    for notify in [false, true] {
        let mut d = Duo::running(4);
        d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
        d.progress(0);
        let a = QpAttrs {
            qp_state: QpState::Sqd,
            en_sqd_async_notify: notify,
            ..QpAttrs::default()
        };
        let mut m = AttrMask::STATE;
        if notify {
            m |= AttrMask::EN_SQD_ASYNC_NOTIFY;
        }
        d.modify(0, &a, m).expect("SQD");
        d.post(0, send_wr(2, SendOpcode::Send, 10))
            .expect("held in SQD");
        assert!(!d.e[0].out.has_event(AsyncEvent::SqDrained), "in flight");
        d.pump();
        assert_eq!(d.e[0].out.has_event(AsyncEvent::SqDrained), notify);
        assert_eq!(d.e[0].out.send_cqes.len(), 1, "the held WR did not start");
    }
}

#[test]
fn error_flushes_both_queues_in_order() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [3, 0],
        ..Opts::default()
    });
    for k in 0..3 {
        d.post(0, send_wr(k, SendOpcode::Send, 10)).expect("post");
    }
    d.move_to(0, QpState::Error);
    let s: Vec<u64> = d.e[0].out.send_cqes.iter().map(|c| c.wr_id).collect();
    assert_eq!(s, vec![0, 1, 2]);
    assert!(d.e[0].sends_all(WcStatus::WrFlushErr));
    assert_eq!(d.e[0].out.recv_cqes.len(), 3);
    d.post(0, send_wr(9, SendOpcode::Send, 1))
        .expect("accepted in Error");
    assert_eq!(
        d.e[0].out.send_cqes.last().map(|c| c.status),
        Some(WcStatus::WrFlushErr)
    );
}

#[test]
fn srq_qp_entering_error_raises_last_wqe_reached() {
    let mut d = Duo::new(Opts {
        srq: [true, false],
        ..Opts::default()
    });
    d.move_to(0, QpState::Error);
    assert!(d.e[0].out.has_event(AsyncEvent::QpLastWqeReached));
}

#[test]
fn srq_qp_flushes_the_wqe_it_holds_on_error() {
    let mut d = Duo::new(Opts {
        srq: [true, false],
        ..Opts::default()
    });
    // The shell hands the SRQ QP one WQE from the SRQ; the QP then enters Error.
    d.post_recv(0, 4096).expect("recv");
    d.move_to(0, QpState::Error);
    let c = &d.e[0].out.recv_cqes;
    assert_eq!(c.len(), 1, "the held WQE completes");
    assert_eq!(c[0].status, WcStatus::WrFlushErr);
    assert!(d.e[0].out.has_event(AsyncEvent::QpLastWqeReached));
}

/// The limits `query_device` advertises for Reads and atomics in flight hold: `max_rd_atomic`
/// above `max_qp_init_rd_atom` and `max_dest_rd_atomic` above `max_qp_rd_atom` are refused.
#[test]
fn rd_atomic_depths_above_the_device_limits_are_refused() {
    use rvrdma_core::qp::QpModifyError;
    let mut d = Duo::new(Opts {
        to: QpState::Rtr,
        ..Opts::default()
    });
    let over = rvrdma_core::requester::MAX_RD_ATOMIC + 1;
    let a = QpAttrs {
        qp_state: QpState::Rts,
        max_rd_atomic: over,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttrs::default()
    };
    let m = AttrMask::STATE
        | AttrMask::SQ_PSN
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::MAX_QP_RD_ATOMIC;
    assert_eq!(
        d.modify(0, &a, m),
        Err(QpModifyError::BadValue(AttrMask::MAX_QP_RD_ATOMIC))
    );
    assert_eq!(d.state(0), QpState::Rtr);
    let a = QpAttrs {
        max_rd_atomic: over - 1,
        ..a
    };
    assert_eq!(d.modify(0, &a, m), Ok(()));
    let mut e = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    let a = QpAttrs {
        qp_state: QpState::Rtr,
        path: e.e[0].paths[0],
        path_mtu: 1,
        dest_qp_num: 0x12,
        max_dest_rd_atomic: rvrdma_core::responder::MAX_RESOURCES as u8 + 1,
        min_rnr_timer: 3,
        ..QpAttrs::default()
    };
    let m = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MIN_RNR_TIMER
        | AttrMask::MAX_DEST_RD_ATOMIC;
    assert_eq!(
        e.modify(0, &a, m),
        Err(QpModifyError::BadValue(AttrMask::MAX_DEST_RD_ATOMIC))
    );
}
