//! The state machine: what each state allows, the transitions the QP makes by itself and the
//! side effects of each transition.

use super::*;

fn sm_in(ty: QpType, path: &[(QpState, AttrMask)]) -> QpStateMachine {
    let mut sm = QpStateMachine::new(ty);
    for &(next, mask) in path {
        sm.modify(next, mask | STATE, &ModifyParams::NONE)
            .unwrap_or_else(|e| panic!("{next}: {e}"));
    }
    sm
}

fn rts(ty: QpType) -> QpStateMachine {
    sm_in(
        ty,
        &[
            (QpState::Init, to_init(ty)),
            (QpState::Rtr, to_rtr(ty)),
            (QpState::Rts, to_rts(ty)),
        ],
    )
}

// ---- seed 004: the Initialized state ------------------------------------------------------------

fn init(ty: QpType) -> QpStateMachine {
    sm_in(ty, &[(QpState::Init, to_init(ty))])
}

#[test]
fn seed004_init_entered_from_reset_by_modify() {
    let mut sm = QpStateMachine::new(RC);
    let t = sm
        .modify(QpState::Init, to_init(RC) | STATE, &ModifyParams::NONE)
        .unwrap();
    assert_eq!((t.from, t.to), (QpState::Reset, QpState::Init));
    assert_eq!(sm.state(), QpState::Init);
    // Only from Reset (and Init itself): no other state leads to Init.
    for from in QpState::ALL {
        let ok = transition_rule(from, QpState::Init, RC).is_some();
        assert_eq!(ok, matches!(from, QpState::Reset | QpState::Init), "{from}");
    }
}

#[test]
fn seed004_post_recv_in_init_is_queued_not_processed() {
    for ty in [RC, UC, UD, GSI] {
        assert_eq!(init(ty).post_recv(), PostVerdict::Hold);
    }
}

#[test]
fn seed004_inbound_packets_in_init_silently_dropped() {
    let mut sm = init(RC);
    assert!(!sm.rq_processes_inbound());
    assert_eq!(sm.on_inbound_packet(), None);
}

#[test]
fn seed004_post_send_in_init_fails_at_once() {
    for ty in [RC, UC, UD, GSI] {
        assert_eq!(init(ty).post_send(), PostVerdict::Refused);
    }
}

#[test]
fn seed004_sq_wrs_in_init_not_processed() {
    let sm = init(RC);
    assert!(!sm.sq_starts_new_requests());
    assert!(!sm.sq_continues_in_flight());
}

#[test]
fn seed004_init_next_state_only_rtr_reset_error() {
    for ty in [RC, UC, UD, GSI] {
        let sm = init(ty);
        for next in QpState::ALL {
            let mask = if next == QpState::Rtr {
                to_rtr(ty)
            } else {
                AttrMask::EMPTY
            };
            let r = sm.plan(next, mask | STATE, &ModifyParams::NONE);
            let expect_ok = matches!(
                next,
                QpState::Rtr | QpState::Reset | QpState::Error | QpState::Init
            );
            assert_eq!(r.is_ok(), expect_ok, "{ty:?} Init -> {next}");
        }
    }
}

#[test]
fn seed004_table_12_3_rc_required_inputs() {
    // RQ start ePSN, inbound RDMA Read/Atomic depth, remote address vector, destination QPN
    // (+ path MTU and min RNR timer, which Linux also requires; see the module docs).
    let sm = init(RC);
    let full = to_rtr(RC) | STATE;
    for bit in [RQ_PSN, DEST_RD_ATOMIC, AV, DEST_QPN, MTU, RNR_TIMER] {
        assert_eq!(
            sm.plan(QpState::Rtr, full.difference(bit), &ModifyParams::NONE),
            Err(ModifyError::MissingAttr(bit)),
            "{bit}"
        );
    }
}

#[test]
fn seed004_table_12_3_uc_required_inputs_no_rd_atomic_depth() {
    let full = to_rtr(UC) | STATE;
    for bit in [RQ_PSN, AV, DEST_QPN, MTU] {
        assert_eq!(
            check_modify(QpState::Init, QpState::Rtr, UC, full.difference(bit)),
            Err(ModifyError::MissingAttr(bit))
        );
    }
    // The RDMA Read/Atomic queue depth is RC and RD only.
    assert_eq!(
        check_modify(QpState::Init, QpState::Rtr, UC, full | DEST_RD_ATOMIC),
        Err(ModifyError::AttrNotAllowed(DEST_RD_ATOMIC))
    );
}

#[test]
fn seed004_table_12_3_roce_av_required_for_rc_uc() {
    for ty in [RC, UC] {
        let without_av = to_rtr(ty).difference(AV) | STATE;
        assert_eq!(
            check_modify(QpState::Init, QpState::Rtr, ty, without_av),
            Err(ModifyError::MissingAttr(AV))
        );
    }
    // UD has no AV in the QP: it comes with each WR.
    assert_eq!(
        check_modify(QpState::Init, QpState::Rtr, UD, STATE | AV),
        Err(ModifyError::AttrNotAllowed(AV))
    );
}

#[test]
fn seed004_table_12_3_optional_inputs_by_qp_type() {
    let (i, r) = (QpState::Init, QpState::Rtr);
    // Alternate path: RC and UC, optional.
    for ty in [RC, UC] {
        let base = to_rtr(ty) | STATE;
        for bit in [ALT, ACCESS, PKEY] {
            assert_eq!(check_modify(i, r, ty, base | bit), Ok(()), "{ty:?} {bit}");
        }
        // Q_Key is UD and RD only.
        assert_eq!(
            check_modify(i, r, ty, base | QKEY),
            Err(ModifyError::AttrNotAllowed(QKEY))
        );
    }
    // UD: P_Key index and Q_Key, no access flags, no alternate path.
    assert_eq!(check_modify(i, r, UD, STATE | PKEY | QKEY), Ok(()));
    for bit in [ACCESS, ALT] {
        assert_eq!(
            check_modify(i, r, UD, STATE | bit),
            Err(ModifyError::AttrNotAllowed(bit))
        );
    }
}

// ---- RTR, RTS -----------------------------------------------------------------------------------

#[test]
fn rtr_receives_but_does_not_send() {
    let sm = sm_in(
        RC,
        &[(QpState::Init, to_init(RC)), (QpState::Rtr, to_rtr(RC))],
    );
    assert!(sm.rq_processes_inbound());
    assert_eq!(sm.post_send(), PostVerdict::Refused);
    assert_eq!(sm.post_recv(), PostVerdict::Process);
    assert!(!sm.sq_starts_new_requests());
}

#[test]
fn comm_est_raised_once_for_first_packet_in_rtr() {
    let mut sm = sm_in(
        RC,
        &[(QpState::Init, to_init(RC)), (QpState::Rtr, to_rtr(RC))],
    );
    assert_eq!(sm.on_inbound_packet(), Some(StateEvent::CommEst));
    assert_eq!(sm.on_inbound_packet(), None);
    let mut sm = rts(RC);
    assert_eq!(sm.on_inbound_packet(), None);
}

#[test]
fn rts_is_fully_operational() {
    let mut sm = rts(RC);
    assert_eq!(sm.post_send(), PostVerdict::Process);
    assert_eq!(sm.post_recv(), PostVerdict::Process);
    assert!(sm.rq_processes_inbound());
    assert!(sm.sq_starts_new_requests());
    assert!(sm.sq_continues_in_flight());
    let t = sm.modify(QpState::Rts, ALT, &ModifyParams::NONE).unwrap();
    assert_eq!(t, {
        let mut n = Transition::none(QpState::Rts);
        n.kick_sq = true;
        n
    });
}

#[test]
fn cur_state_must_match_actual_state() {
    let sm = rts(UD);
    let p = ModifyParams {
        cur_qp_state: QpState::Sqe,
        en_sqd_async_notify: false,
    };
    assert_eq!(
        sm.plan(QpState::Rts, STATE | CUR, &p),
        Err(ModifyError::CurStateMismatch {
            given: QpState::Sqe,
            actual: QpState::Rts
        })
    );
    let p = ModifyParams {
        cur_qp_state: QpState::Rts,
        en_sqd_async_notify: false,
    };
    assert!(sm.plan(QpState::Rts, STATE | CUR, &p).is_ok());
}

#[test]
fn refused_modify_changes_nothing() {
    let mut sm = rts(RC);
    let before = sm;
    assert!(sm
        .modify(QpState::Init, STATE, &ModifyParams::NONE)
        .is_err());
    assert!(sm
        .modify(QpState::Rts, STATE | QKEY, &ModifyParams::NONE)
        .is_err());
    assert_eq!(sm, before);
}

// ---- SQD ----------------------------------------------------------------------------------------

fn sqd(ty: QpType, notify: Option<bool>) -> (QpStateMachine, Transition) {
    let mut sm = rts(ty);
    let (mask, p) = match notify {
        Some(n) => (
            STATE | SQD_NOTIFY,
            ModifyParams {
                cur_qp_state: QpState::Reset,
                en_sqd_async_notify: n,
            },
        ),
        None => (STATE, ModifyParams::NONE),
    };
    let t = sm.modify(QpState::Sqd, mask, &p).unwrap();
    (sm, t)
}

#[test]
fn sqd_entry_starts_drain_new_requests_held_in_flight_continue() {
    let (sm, t) = sqd(RC, None);
    assert!(t.start_drain);
    assert!(!t.flush_sq && !t.flush_rq && !t.reset_queues);
    assert!(sm.is_draining());
    assert_eq!(sm.post_send(), PostVerdict::Hold);
    assert_eq!(sm.post_recv(), PostVerdict::Process);
    assert!(!sm.sq_starts_new_requests());
    assert!(sm.sq_continues_in_flight());
    assert!(sm.rq_processes_inbound());
}

#[test]
fn sqd_sq_drained_event_only_with_en_sqd_async_notify() {
    let (mut sm, _) = sqd(RC, Some(true));
    assert!(sm.en_sqd_async_notify());
    assert_eq!(sm.sq_drained(), Some(StateEvent::SqDrained));
    assert!(!sm.is_draining());
    // A second report raises nothing.
    assert_eq!(sm.sq_drained(), None);

    let (mut sm, _) = sqd(RC, Some(false));
    assert_eq!(sm.sq_drained(), None);
    assert!(!sm.is_draining());

    let (mut sm, _) = sqd(UD, None);
    assert!(!sm.en_sqd_async_notify());
    assert_eq!(sm.sq_drained(), None);
}

#[test]
fn sqd_drained_outside_sqd_raises_nothing() {
    let mut sm = rts(RC);
    assert_eq!(sm.sq_drained(), None);
}

#[test]
fn sqd_attribute_change_refused_while_draining() {
    let (mut sm, _) = sqd(RC, None);
    assert_eq!(
        sm.modify(QpState::Sqd, STATE | AV, &ModifyParams::NONE),
        Err(ModifyError::SqStillDraining)
    );
    // A bare SQD -> SQD is fine, and once drained attributes may change.
    assert!(sm.modify(QpState::Sqd, STATE, &ModifyParams::NONE).is_ok());
    assert!(sm.is_draining());
    sm.sq_drained();
    let t = sm
        .modify(QpState::Sqd, STATE | AV | TIMEOUT, &ModifyParams::NONE)
        .unwrap();
    assert!(!t.start_drain);
}

#[test]
fn sqd_back_to_rts_kicks_sq_and_ends_drain() {
    let (mut sm, _) = sqd(RC, Some(true));
    let t = sm.modify(QpState::Rts, STATE, &ModifyParams::NONE).unwrap();
    assert!(t.kick_sq);
    assert!(!sm.is_draining());
    assert!(!sm.en_sqd_async_notify());
    assert_eq!(sm.sq_drained(), None);
}

// ---- SQE ----------------------------------------------------------------------------------------

#[test]
fn sqe_send_error_on_ud_uc_flushes_sq_keeps_rq() {
    for ty in [UD, UC, GSI] {
        let mut sm = rts(ty);
        let t = sm.on_send_error();
        assert_eq!((t.from, t.to), (QpState::Rts, QpState::Sqe), "{ty:?}");
        assert!(t.flush_sq && !t.flush_rq && !t.reset_queues);
        assert_eq!(sm.post_send(), PostVerdict::Flush);
        assert_eq!(sm.post_recv(), PostVerdict::Process);
        assert!(sm.rq_processes_inbound());
        assert!(!sm.sq_starts_new_requests());
        assert!(!sm.sq_continues_in_flight());
    }
    // From SQD too.
    let (mut sm, _) = sqd(UD, None);
    assert_eq!(sm.on_send_error().to, QpState::Sqe);
}

#[test]
fn sqe_rc_send_error_goes_to_error() {
    let mut sm = rts(RC);
    let t = sm.on_send_error();
    assert_eq!(t.to, QpState::Error);
    assert!(t.flush_sq && t.flush_rq);
}

#[test]
fn sqe_leaves_only_to_rts_reset_error() {
    for next in QpState::ALL {
        let mut sm = rts(UD);
        sm.on_send_error();
        let ok = sm.plan(next, STATE, &ModifyParams::NONE).is_ok();
        assert_eq!(
            ok,
            matches!(next, QpState::Rts | QpState::Reset | QpState::Error),
            "SQE -> {next}"
        );
    }
    let mut sm = rts(UD);
    sm.on_send_error();
    let t = sm.modify(QpState::Rts, STATE, &ModifyParams::NONE).unwrap();
    assert!(t.kick_sq);
    assert_eq!(sm.post_send(), PostVerdict::Process);
}

#[test]
fn send_error_outside_rts_sqd_does_nothing() {
    let mut sm = init(UD);
    assert_eq!(sm.on_send_error(), Transition::none(QpState::Init));
    assert_eq!(sm.state(), QpState::Init);
}

// ---- Error and Reset ----------------------------------------------------------------------------

#[test]
fn error_flushes_everything_outstanding() {
    for ty in [RC, UC, UD] {
        let mut sm = rts(ty);
        let t = sm
            .modify(QpState::Error, STATE, &ModifyParams::NONE)
            .unwrap();
        assert!(t.flush_sq && t.flush_rq && t.stop_timers && t.last_wqe_reached);
        assert!(!t.reset_queues);
        assert_eq!(sm.post_send(), PostVerdict::Flush);
        assert_eq!(sm.post_recv(), PostVerdict::Flush);
        assert!(!sm.rq_processes_inbound());
        assert!(!sm.sq_continues_in_flight());
        // Error -> Error again flushes nothing new.
        let t = sm
            .modify(QpState::Error, STATE, &ModifyParams::NONE)
            .unwrap();
        assert_eq!(t, Transition::none(QpState::Error));
    }
}

#[test]
fn enter_error_by_itself_from_any_live_state() {
    for path_len in 1..=3 {
        let steps = [
            (QpState::Init, to_init(RC)),
            (QpState::Rtr, to_rtr(RC)),
            (QpState::Rts, to_rts(RC)),
        ];
        let mut sm = sm_in(RC, &steps[..path_len]);
        let t = sm.enter_error();
        assert_eq!(t.to, QpState::Error);
        assert!(t.flush_sq && t.flush_rq);
    }
    let mut sm = QpStateMachine::new(RC);
    assert_eq!(sm.enter_error(), Transition::none(QpState::Reset));
    assert_eq!(sm.state(), QpState::Reset);
}

#[test]
fn reset_discards_queues_and_refuses_posts() {
    let mut sm = rts(RC);
    let t = sm
        .modify(QpState::Reset, STATE, &ModifyParams::NONE)
        .unwrap();
    assert!(t.reset_queues && t.stop_timers);
    assert!(!t.flush_sq && !t.flush_rq);
    assert_eq!(sm.post_send(), PostVerdict::Refused);
    assert_eq!(sm.post_recv(), PostVerdict::Refused);
    assert!(!sm.rq_processes_inbound());
    let t = sm
        .modify(QpState::Reset, STATE, &ModifyParams::NONE)
        .unwrap();
    assert!(!t.reset_queues);
    // The QP can be brought up again.
    assert!(sm
        .modify(QpState::Init, to_init(RC) | STATE, &ModifyParams::NONE)
        .is_ok());
}
