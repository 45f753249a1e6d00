//! Property tests for the QP state machine (`qp_state`) and Automatic Path Migration (`apm`):
//! no sequence of verb calls, packets or timer events panics, and the invariants hold after
//! every step.

use proptest::prelude::*;
use rvrdma_core::apm::{
    Apm, ApmModify, MigState, MigrationCause, PathInfo, PathMatch, RetryExhausted, RxVerdict,
};
use rvrdma_core::qp_state::{
    check_modify, transition_rule, AttrMask, ModifyError, ModifyParams, PostVerdict, QpState,
    QpStateMachine, QpType, StateEvent,
};

// ---- QP state machine -----------------------------------------------------------------------

fn any_state() -> impl Strategy<Value = QpState> {
    (0u32..7).prop_map(|n| QpState::from_raw(n).unwrap_or(QpState::Reset))
}

fn any_type() -> impl Strategy<Value = QpType> {
    prop_oneof![
        Just(QpType::Rc),
        Just(QpType::Uc),
        Just(QpType::Ud),
        Just(QpType::Gsi),
        Just(QpType::Smi),
        Just(QpType::RawPacket),
        Just(QpType::XrcIni),
        Just(QpType::XrcTgt),
    ]
}

/// Masks biased towards what a transition needs: a row's required + some optional bits, with a
/// few random bits flipped.
fn mask_for(from: QpState, to: QpState, ty: QpType, noise: u32, keep: u32) -> AttrMask {
    let (req, opt) = match transition_rule(from, to, ty) {
        Some(r) => (r.required, r.optional),
        None => (AttrMask::EMPTY, AttrMask::EMPTY),
    };
    let base = req | AttrMask(opt.bits() & keep) | AttrMask::STATE;
    AttrMask(base.bits() ^ noise)
}

#[derive(Clone, Debug)]
enum SmOp {
    Modify {
        next: QpState,
        noise: u32,
        keep: u32,
        cur: QpState,
        notify: bool,
    },
    EnterError,
    SendError,
    SqDrained,
    Inbound,
}

fn sm_op() -> impl Strategy<Value = SmOp> {
    let noise = prop_oneof![
        6 => Just(0u32),
        2 => (0u32..32).prop_map(|b| 1u32 << b),
        1 => any::<u32>(),
    ];
    prop_oneof![
        6 => (any_state(), noise, any::<u32>(), any_state(), any::<bool>()).prop_map(
            |(next, noise, keep, cur, notify)| SmOp::Modify { next, noise, keep, cur, notify }
        ),
        1 => Just(SmOp::EnterError),
        1 => Just(SmOp::SendError),
        2 => Just(SmOp::SqDrained),
        2 => Just(SmOp::Inbound),
    ]
}

fn check_sm_invariants(sm: &QpStateMachine) {
    let s = sm.state();
    assert!(QpState::from_raw(s.as_raw()) == Some(s));
    if sm.is_draining() {
        assert_eq!(s, QpState::Sqd);
    }
    if sm.en_sqd_async_notify() {
        assert_eq!(s, QpState::Sqd);
    }
    if s == QpState::Sqe {
        assert!(sm.qp_type().has_sqe_state());
    }
    // Predicates agree with each other.
    if sm.sq_starts_new_requests() {
        assert!(sm.sq_continues_in_flight());
        assert_eq!(sm.post_send(), PostVerdict::Process);
    }
    if sm.post_send() == PostVerdict::Process {
        assert!(sm.sq_starts_new_requests());
    }
    if sm.rq_processes_inbound() {
        assert_eq!(sm.post_recv(), PostVerdict::Process);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// `check_modify` never panics and agrees with the table: it accepts a modify exactly when
    /// the transition has a row, the mask holds the row's required attributes and nothing
    /// beyond its required, optional and STATE bits, STATE is set for a change of state, and
    /// CUR_STATE only from a state that may name itself (RTR, RTS, SQD, SQE). Masks are built
    /// from the row, so that accepted modifies are common, with bits flipped or replaced.
    #[test]
    fn check_modify_total_and_consistent(
        cur in any_state(),
        next in any_state(),
        ty in any_type(),
        noise in prop_oneof![
            3 => Just(0u32),
            3 => (0u32..32).prop_map(|b| 1u32 << b),
            1 => any::<u32>(),
        ],
        keep in any::<u32>(),
    ) {
        let mask = mask_for(cur, next, ty, noise, keep);
        let r = check_modify(cur, next, ty, mask);
        let _ = format!("{mask:?} {r:?}");
        if let Err(e) = r {
            let _ = format!("{e}");
        }
        let allowed = transition_rule(cur, next, ty).is_some_and(|row| {
            mask.contains(row.required)
                && mask
                    .difference(row.required | row.optional | AttrMask::STATE)
                    .is_empty()
        }) && (next == cur || mask.contains(AttrMask::STATE))
            && (!mask.contains(AttrMask::CUR_STATE)
                || matches!(cur, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe));
        prop_assert_eq!(r.is_ok(), allowed, "{:?} -> {:?} {:?} {:?}: {:?}", cur, next, ty, mask, r);
    }

    /// Random verb calls and engine events on one QP: no panic, invariants hold, refused calls
    /// change nothing, accepted calls land in the requested state.
    #[test]
    fn state_machine_never_panics(ty in any_type(), ops in prop::collection::vec(sm_op(), 0..64)) {
        let mut sm = QpStateMachine::new(ty);
        for op in ops {
            let before = sm;
            match op {
                SmOp::Modify { next, noise, keep, cur, notify } => {
                    let mask = mask_for(sm.state(), next, ty, noise, keep);
                    let p = ModifyParams { cur_qp_state: cur, en_sqd_async_notify: notify };
                    let next = if mask.contains(AttrMask::STATE) { next } else { sm.state() };
                    match sm.modify(next, mask, &p) {
                        Ok(t) => {
                            prop_assert_eq!(t.from, before.state());
                            prop_assert_eq!(t.to, next);
                            prop_assert_eq!(sm.state(), next);
                            // Accepted only with the table's row and its required attributes.
                            let row = transition_rule(before.state(), next, ty);
                            prop_assert!(row.is_some_and(|r| mask.contains(r.required)));
                            prop_assert_eq!(t.start_drain, before.state() == QpState::Rts
                                && next == QpState::Sqd);
                            prop_assert_eq!(t.flush_rq, next == QpState::Error
                                && before.state() != QpState::Error);
                        }
                        Err(e) => {
                            prop_assert_eq!(sm, before);
                            if let ModifyError::CurStateMismatch { actual, .. } = e {
                                prop_assert_eq!(actual, before.state());
                            }
                        }
                    }
                }
                SmOp::EnterError => {
                    let t = sm.enter_error();
                    if before.state() == QpState::Reset {
                        prop_assert_eq!(sm, before);
                    } else {
                        prop_assert_eq!(sm.state(), QpState::Error);
                        prop_assert_eq!(t.flush_sq, before.state() != QpState::Error);
                    }
                }
                SmOp::SendError => {
                    let t = sm.on_send_error();
                    if matches!(before.state(), QpState::Rts | QpState::Sqd) {
                        prop_assert!(t.flush_sq);
                        prop_assert!(matches!(sm.state(), QpState::Sqe | QpState::Error));
                    } else {
                        prop_assert_eq!(sm, before);
                    }
                }
                SmOp::SqDrained => {
                    let ev = sm.sq_drained();
                    if ev.is_some() {
                        prop_assert_eq!(ev, Some(StateEvent::SqDrained));
                        prop_assert!(before.is_draining() && before.en_sqd_async_notify());
                    }
                    prop_assert!(!sm.is_draining());
                    prop_assert_eq!(sm.state(), before.state());
                }
                SmOp::Inbound => {
                    let ev = sm.on_inbound_packet();
                    if ev.is_some() {
                        prop_assert_eq!(sm.state(), QpState::Rtr);
                    }
                    // At most once per entry into RTR.
                    prop_assert_eq!(sm.on_inbound_packet(), None);
                }
            }
            check_sm_invariants(&sm);
        }
    }
}

// ---- APM ------------------------------------------------------------------------------------

const GIDS: [[u8; 16]; 3] = [[1; 16], [2; 16], [3; 16]];

/// Paths drawn from a tiny universe (2 ports x 3 GIDs x 3 GIDs) so that packets match often.
fn small_path() -> impl Strategy<Value = PathInfo> {
    (1u8..3, 0usize..3, 0usize..3, any::<u8>()).prop_map(|(port, s, d, timeout)| PathInfo {
        port_num: port,
        sgid_index: port,
        sgid: GIDS[s],
        dgid: GIDS[d],
        timeout,
        ..PathInfo::EMPTY
    })
}

fn small_packet() -> impl Strategy<Value = PathMatch> {
    (0u8..4, 0usize..3, 0usize..3).prop_map(|(port, s, d)| PathMatch {
        port_num: port,
        sgid: GIDS[s],
        dgid: GIDS[d],
        ..Default::default()
    })
}

#[derive(Clone, Debug)]
enum ApmOp {
    Modify {
        next: QpState,
        alt: Option<PathInfo>,
        mig: Option<u32>,
    },
    SetPrimary(PathInfo),
    Packet(bool, PathMatch),
    /// A packet sent exactly over the primary or the alternate path, as the receiver sees it.
    PacketOn {
        alternate: bool,
        mig_req: bool,
    },
    RetryExhausted,
    /// The bonding policy: the primary path's port went down.
    PortDown,
    /// The bonding policy: re-arm with this alternate path.
    AutoRearm(PathInfo),
    Reset,
}

fn apm_op() -> impl Strategy<Value = ApmOp> {
    prop_oneof![
        4 => (any_state(), prop::option::of(small_path()), prop::option::of(prop_oneof![6 => 0u32..3, 1 => 3u32..8]))
            .prop_map(|(next, alt, mig)| ApmOp::Modify { next, alt, mig }),
        1 => small_path().prop_map(ApmOp::SetPrimary),
        3 => (any::<bool>(), small_packet()).prop_map(|(m, p)| ApmOp::Packet(m, p)),
        4 => (any::<bool>(), any::<bool>())
            .prop_map(|(alternate, mig_req)| ApmOp::PacketOn { alternate, mig_req }),
        2 => Just(ApmOp::RetryExhausted),
        1 => Just(ApmOp::PortDown),
        2 => small_path().prop_map(ApmOp::AutoRearm),
        1 => Just(ApmOp::Reset),
    ]
}

fn received_over(p: &PathInfo) -> PathMatch {
    PathMatch {
        port_num: p.port_num,
        sgid: p.dgid,
        dgid: p.sgid,
        ..Default::default()
    }
}

fn check_apm_invariants(a: &Apm) {
    let s = a.state();
    assert!(matches!(
        s,
        MigState::Migrated | MigState::Rearm | MigState::Armed
    ));
    assert_eq!(MigState::from_raw(s.as_raw()), Some(s));
    if matches!(s, MigState::Armed | MigState::Rearm) {
        assert!(a.alternate().is_some(), "{s:?} without an alternate path");
    }
    assert_eq!(a.mig_req_bit(), s == MigState::Migrated);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// No sequence of Modify QP calls, packets, retry exhaustions and resets panics; after
    /// every step the state is one of the three and Armed/Rearm imply an alternate path.
    #[test]
    fn apm_never_panics_and_keeps_invariants(ops in prop::collection::vec(apm_op(), 0..64)) {
        let mut a = Apm::new();
        for op in ops {
            let before = a;
            match op {
                ApmOp::Modify { next, alt, mig } => {
                    let mig = mig.and_then(MigState::from_raw);
                    match a.modify(next, alt.as_ref(), mig) {
                        Ok(ApmModify::Rearmed) => {
                            prop_assert_eq!(before.state(), MigState::Migrated);
                            prop_assert_eq!(a.state(), MigState::Rearm);
                        }
                        Ok(ApmModify::Migrated(m)) => {
                            prop_assert_eq!(before.state(), MigState::Armed);
                            prop_assert_eq!(m.cause, MigrationCause::SoftwareCommand);
                            prop_assert_eq!(a.state(), MigState::Migrated);
                            prop_assert_eq!(a.alternate(), None);
                            let new_primary = alt.or(before.alternate().copied());
                            prop_assert_eq!(Some(*a.primary()), new_primary);
                        }
                        Ok(ApmModify::Unchanged) => {
                            prop_assert_eq!(a.state(), before.state());
                        }
                        Err(_) => prop_assert_eq!(a, before),
                    }
                }
                ApmOp::SetPrimary(p) => a.set_primary(p),
                ApmOp::Packet(mig_req, pkt) => check_packet(&mut a, before, mig_req, &pkt)?,
                ApmOp::PacketOn { alternate, mig_req } => {
                    let path = if alternate { a.alternate().copied() } else { Some(*a.primary()) };
                    if let Some(path) = path {
                        check_packet(&mut a, before, mig_req, &received_over(&path))?;
                    }
                }
                ApmOp::RetryExhausted => match a.on_retry_exhausted() {
                    RetryExhausted::Migrated(m) => {
                        prop_assert_eq!(before.state(), MigState::Armed);
                        prop_assert_eq!(m.cause, MigrationCause::RetryExhausted);
                        prop_assert_eq!(Some(a.primary()), before.alternate());
                        prop_assert_eq!(a.alternate(), None);
                    }
                    RetryExhausted::NotArmed => {
                        prop_assert_ne!(before.state(), MigState::Armed);
                        prop_assert_eq!(a, before);
                    }
                },
                ApmOp::PortDown => match a.on_port_down() {
                    Some(m) => {
                        prop_assert_eq!(before.state(), MigState::Armed);
                        prop_assert_eq!(m.cause, MigrationCause::PortDown);
                        prop_assert_eq!(Some(a.primary()), before.alternate());
                        prop_assert_eq!(a.alternate(), None);
                        prop_assert!(!a.peer_follows(), "migrated on its own");
                    }
                    None => {
                        prop_assert_ne!(before.state(), MigState::Armed);
                        prop_assert_eq!(a, before);
                    }
                },
                ApmOp::AutoRearm(p) => {
                    if a.auto_rearm(&p) {
                        prop_assert_eq!(before.state(), MigState::Migrated);
                        prop_assert_eq!(before.alternate(), None);
                        prop_assert!(before.peer_follows(), "never before the peer follows");
                        prop_assert_eq!(a.state(), MigState::Rearm);
                        prop_assert_eq!(a.alternate(), Some(&p));
                    } else {
                        prop_assert_eq!(a, before);
                    }
                }
                ApmOp::Reset => {
                    a.reset();
                    prop_assert_eq!(a, Apm::new());
                }
            }
            check_apm_invariants(&a);
        }
    }
}

fn check_packet(
    a: &mut Apm,
    before: Apm,
    mig_req: bool,
    pkt: &PathMatch,
) -> Result<(), TestCaseError> {
    match a.on_packet(mig_req, pkt) {
        RxVerdict::Accept => {
            prop_assert_eq!(a.state(), before.state());
            prop_assert_eq!(a.primary(), before.primary());
            prop_assert_eq!(a.alternate(), before.alternate());
            prop_assert!(
                a.peer_follows(),
                "a packet over the primary: the peer follows it"
            );
            prop_assert!(before.primary().matches(pkt));
        }
        RxVerdict::AcceptArmed => {
            prop_assert_eq!(before.state(), MigState::Rearm);
            prop_assert!(!mig_req);
            prop_assert_eq!(a.state(), MigState::Armed);
        }
        RxVerdict::AcceptMigrated(m) => {
            prop_assert_eq!(before.state(), MigState::Armed);
            prop_assert!(mig_req);
            prop_assert_eq!(m.cause, MigrationCause::PeerRequest);
            prop_assert!(before.alternate().is_some_and(|p| p.matches(pkt)));
            prop_assert_eq!(Some(a.primary()), before.alternate());
            prop_assert_eq!(a.state(), MigState::Migrated);
        }
        RxVerdict::DropPathMigErr => {
            prop_assert_eq!(*a, before);
            prop_assert_eq!(before.state(), MigState::Armed);
            prop_assert!(mig_req);
        }
        RxVerdict::Drop => {
            prop_assert_eq!(*a, before);
            prop_assert!(!before.primary().matches(pkt));
        }
    }
    Ok(())
}
