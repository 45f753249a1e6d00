//! The transition table: which transitions exist and the attribute rows of each.

use super::*;

fn m(bits: &[AttrMask]) -> AttrMask {
    all(bits)
}

fn single_bits(mask: AttrMask) -> impl Iterator<Item = AttrMask> {
    (0..32u32)
        .map(|i| AttrMask(1 << i))
        .filter(move |b| mask.contains(*b))
}

/// Checks one row against literal masks: required+STATE passes, required+optional+STATE
/// passes, every optional bit alone passes, each missing required bit is named, and every
/// other bit (all 32) is refused by name.
fn assert_row(from: QpState, to: QpState, ty: QpType, req: AttrMask, opt: AttrMask) {
    let base = req | STATE;
    assert_eq!(
        check_modify(from, to, ty, base),
        Ok(()),
        "{from}->{to} {ty:?} base"
    );
    assert_eq!(
        check_modify(from, to, ty, base | opt),
        Ok(()),
        "{from}->{to} {ty:?} all optional"
    );
    assert_eq!(
        transition_rule(from, to, ty),
        Some(TransitionRule {
            required: req,
            optional: opt
        })
    );
    for bit in single_bits(opt) {
        assert_eq!(
            check_modify(from, to, ty, base | bit),
            Ok(()),
            "{bit} optional"
        );
    }
    for bit in single_bits(req) {
        assert_eq!(
            check_modify(from, to, ty, base.difference(bit)),
            Err(ModifyError::MissingAttr(bit)),
            "{from}->{to} {ty:?} without {bit}"
        );
    }
    for bit in single_bits(!(req | opt | STATE)) {
        assert_eq!(
            check_modify(from, to, ty, base | bit),
            Err(ModifyError::AttrNotAllowed(bit)),
            "{from}->{to} {ty:?} with {bit}"
        );
    }
}

// ---- which transitions exist --------------------------------------------------------------------

#[test]
fn transitions_exist_exactly_as_in_the_state_diagram() {
    use QpState::*;
    let valid = [
        (Reset, Reset),
        (Reset, Init),
        (Init, Reset),
        (Init, Error),
        (Init, Init),
        (Init, Rtr),
        (Rtr, Reset),
        (Rtr, Error),
        (Rtr, Rts),
        (Rts, Reset),
        (Rts, Error),
        (Rts, Rts),
        (Rts, Sqd),
        (Sqd, Reset),
        (Sqd, Error),
        (Sqd, Rts),
        (Sqd, Sqd),
        (Sqe, Reset),
        (Sqe, Error),
        (Sqe, Rts),
        (Error, Reset),
        (Error, Error),
    ];
    for ty in [RC, UC, UD, GSI, QpType::Smi, QpType::XrcIni, QpType::XrcTgt] {
        for from in QpState::ALL {
            for to in QpState::ALL {
                let expect = valid.contains(&(from, to));
                assert_eq!(
                    transition_rule(from, to, ty).is_some(),
                    expect,
                    "{from}->{to} {ty:?}"
                );
                if !expect {
                    assert_eq!(
                        check_modify(from, to, ty, STATE),
                        Err(ModifyError::InvalidTransition { from, to })
                    );
                }
            }
        }
    }
}

#[test]
fn any_state_to_reset_or_error_takes_no_attribute() {
    for from in [
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Error,
    ] {
        for to in [QpState::Reset, QpState::Error] {
            for ty in [RC, UC, UD, GSI] {
                assert_row(from, to, ty, AttrMask::EMPTY, AttrMask::EMPTY);
            }
        }
    }
    assert_row(
        QpState::Reset,
        QpState::Reset,
        RC,
        AttrMask::EMPTY,
        AttrMask::EMPTY,
    );
}

#[test]
fn reset_to_error_is_invalid_as_in_linux() {
    assert_eq!(
        check_modify(QpState::Reset, QpState::Error, RC, STATE),
        Err(ModifyError::InvalidTransition {
            from: QpState::Reset,
            to: QpState::Error
        })
    );
}

#[test]
fn changing_state_needs_the_state_bit() {
    assert_eq!(
        check_modify(QpState::Reset, QpState::Init, UD, m(&[PKEY, PORT, QKEY])),
        Err(ModifyError::MissingAttr(STATE))
    );
    // Without IB_QP_STATE the transition is cur -> cur.
    assert_eq!(check_modify(QpState::Rts, QpState::Rts, RC, ALT), Ok(()));
}

#[test]
fn cur_state_only_from_rtr_rts_sqd_sqe() {
    for from in [QpState::Reset, QpState::Init, QpState::Error] {
        for to in QpState::ALL {
            assert_eq!(
                check_modify(from, to, UD, STATE | CUR),
                Err(ModifyError::AttrNotAllowed(CUR)),
                "{from}->{to}"
            );
        }
    }
    assert_eq!(
        check_modify(QpState::Sqe, QpState::Rts, UD, STATE | CUR),
        Ok(())
    );
    // Allowed from RTS, but not in RTS -> SQD (not in that row).
    assert_eq!(
        check_modify(QpState::Rts, QpState::Sqd, RC, STATE | CUR),
        Err(ModifyError::AttrNotAllowed(CUR))
    );
}

#[test]
fn cap_and_reserved_bits_are_never_allowed() {
    for from in QpState::ALL {
        for to in QpState::ALL {
            for bits in [AttrMask::CAP.0, 1 << 21, 1 << 24, 1 << 31] {
                let r = check_modify(from, to, RC, STATE | AttrMask(bits));
                assert!(r.is_err(), "{from}->{to} {bits:#x}");
            }
        }
    }
}

// ---- one test per attribute row -----------------------------------------------------------------

#[test]
fn row_reset_to_init() {
    let (r, i) = (QpState::Reset, QpState::Init);
    for ty in [RC, UC, QpType::XrcIni, QpType::XrcTgt] {
        assert_row(r, i, ty, m(&[PKEY, PORT, ACCESS]), AttrMask::EMPTY);
    }
    assert_row(r, i, UD, m(&[PKEY, PORT, QKEY]), AttrMask::EMPTY);
    assert_row(r, i, GSI, m(&[PKEY, QKEY]), AttrMask::EMPTY);
    assert_row(r, i, QpType::Smi, m(&[PKEY, QKEY]), AttrMask::EMPTY);
    assert_row(r, i, QpType::RawPacket, PORT, AttrMask::EMPTY);
}

#[test]
fn row_init_to_init() {
    let i = QpState::Init;
    for ty in [RC, UC] {
        assert_row(i, i, ty, AttrMask::EMPTY, m(&[PKEY, PORT, ACCESS]));
    }
    assert_row(i, i, UD, AttrMask::EMPTY, m(&[PKEY, PORT, QKEY]));
    assert_row(i, i, GSI, AttrMask::EMPTY, m(&[PKEY, QKEY]));
}

#[test]
fn row_init_to_rtr() {
    let (i, r) = (QpState::Init, QpState::Rtr);
    assert_row(
        i,
        r,
        RC,
        m(&[AV, MTU, DEST_QPN, RQ_PSN, DEST_RD_ATOMIC, RNR_TIMER]),
        m(&[ALT, ACCESS, PKEY]),
    );
    assert_row(
        i,
        r,
        UC,
        m(&[AV, MTU, DEST_QPN, RQ_PSN]),
        m(&[ALT, ACCESS, PKEY]),
    );
    assert_row(i, r, UD, AttrMask::EMPTY, m(&[PKEY, QKEY]));
    assert_row(i, r, GSI, AttrMask::EMPTY, m(&[PKEY, QKEY]));
}

#[test]
fn row_rtr_to_rts() {
    let (r, s) = (QpState::Rtr, QpState::Rts);
    assert_row(
        r,
        s,
        RC,
        m(&[TIMEOUT, RETRY, RNR_RETRY, SQ_PSN, RD_ATOMIC]),
        m(&[CUR, ALT, ACCESS, RNR_TIMER, MIG]),
    );
    assert_row(r, s, UC, SQ_PSN, m(&[CUR, ALT, ACCESS, MIG]));
    assert_row(r, s, UD, SQ_PSN, m(&[CUR, QKEY]));
    assert_row(r, s, GSI, SQ_PSN, m(&[CUR, QKEY]));
    assert_row(r, s, QpType::RawPacket, AttrMask::EMPTY, RATE);
}

#[test]
fn row_rts_to_rts() {
    let s = QpState::Rts;
    assert_row(
        s,
        s,
        RC,
        AttrMask::EMPTY,
        m(&[CUR, ACCESS, ALT, MIG, RNR_TIMER]),
    );
    assert_row(s, s, UC, AttrMask::EMPTY, m(&[CUR, ACCESS, ALT, MIG]));
    assert_row(s, s, UD, AttrMask::EMPTY, m(&[CUR, QKEY]));
    assert_row(s, s, GSI, AttrMask::EMPTY, m(&[CUR, QKEY]));
}

#[test]
fn row_rts_to_sqd() {
    for ty in [RC, UC, UD, GSI] {
        assert_row(QpState::Rts, QpState::Sqd, ty, AttrMask::EMPTY, SQD_NOTIFY);
    }
}

#[test]
fn row_sqd_to_rts() {
    let (d, s) = (QpState::Sqd, QpState::Rts);
    assert_row(
        d,
        s,
        RC,
        AttrMask::EMPTY,
        m(&[CUR, ALT, ACCESS, RNR_TIMER, MIG]),
    );
    assert_row(d, s, UC, AttrMask::EMPTY, m(&[CUR, ALT, ACCESS, MIG]));
    assert_row(d, s, UD, AttrMask::EMPTY, m(&[CUR, QKEY]));
    assert_row(d, s, GSI, AttrMask::EMPTY, m(&[CUR, QKEY]));
}

#[test]
fn row_sqd_to_sqd() {
    let d = QpState::Sqd;
    assert_row(
        d,
        d,
        RC,
        AttrMask::EMPTY,
        m(&[
            PORT,
            AV,
            TIMEOUT,
            RETRY,
            RNR_RETRY,
            RD_ATOMIC,
            DEST_RD_ATOMIC,
            ALT,
            ACCESS,
            PKEY,
            RNR_TIMER,
            MIG,
        ]),
    );
    assert_row(d, d, UC, AttrMask::EMPTY, m(&[AV, ALT, ACCESS, PKEY, MIG]));
    assert_row(d, d, UD, AttrMask::EMPTY, m(&[PKEY, QKEY]));
    assert_row(d, d, GSI, AttrMask::EMPTY, m(&[PKEY, QKEY]));
}

#[test]
fn row_sqe_to_rts() {
    let (e, s) = (QpState::Sqe, QpState::Rts);
    assert_row(e, s, UD, AttrMask::EMPTY, m(&[CUR, QKEY]));
    assert_row(e, s, GSI, AttrMask::EMPTY, m(&[CUR, QKEY]));
    assert_row(e, s, UC, AttrMask::EMPTY, m(&[CUR, ACCESS]));
    assert_row(e, s, RC, AttrMask::EMPTY, AttrMask::EMPTY);
}

#[test]
fn apm_attributes_allowed_exactly_where_linux_allows_them() {
    use QpState::*;
    for ty in [RC, UC] {
        for (from, to) in [(Rtr, Rts), (Rts, Rts), (Sqd, Rts), (Sqd, Sqd)] {
            let req = transition_rule(from, to, ty).unwrap().required;
            assert_eq!(check_modify(from, to, ty, req | STATE | ALT | MIG), Ok(()));
        }
        // Init -> RTR may load an alternate path but not set the migration state.
        let base = to_rtr(ty) | STATE;
        assert_eq!(check_modify(Init, Rtr, ty, base | ALT), Ok(()));
        assert_eq!(
            check_modify(Init, Rtr, ty, base | MIG),
            Err(ModifyError::AttrNotAllowed(MIG))
        );
    }
    assert_eq!(
        check_modify(Rts, Rts, UD, STATE | ALT),
        Err(ModifyError::AttrNotAllowed(ALT))
    );
}
