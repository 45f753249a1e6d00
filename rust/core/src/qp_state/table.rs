//! The transition table: which `cur -> next` transitions exist and, per QP type, which
//! `modify_qp` attributes each requires and allows ([`transition_rule`], [`check_modify`]).

use core::fmt;

use super::{AttrMask, QpState, QpType};

/// Why a `modify_qp` is refused. The kernel shell maps every variant to `-EINVAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModifyError {
    /// There is no `from -> to` transition (for this QP type).
    InvalidTransition {
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
    },
    /// The transition requires these attributes and they are absent from the mask.
    MissingAttr(AttrMask),
    /// These attributes are in the mask but the transition does not allow them for this QP type.
    AttrNotAllowed(AttrMask),
    /// `IB_QP_CUR_STATE` names a state other than the QP's actual state (IBA: "invalid current
    /// QP state").
    CurStateMismatch {
        /// The state the caller asserted.
        given: QpState,
        /// The QP's actual state.
        actual: QpState,
    },
    /// SQD -> SQD with attribute changes while the SQ is still draining: attributes may only be
    /// changed once the drain has completed.
    SqStillDraining,
}

impl fmt::Display for ModifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModifyError::InvalidTransition { from, to } => {
                write!(f, "invalid QP state transition {from} -> {to}")
            }
            ModifyError::MissingAttr(m) => write!(f, "missing required attribute(s) {m}"),
            ModifyError::AttrNotAllowed(m) => write!(f, "attribute(s) not allowed here: {m}"),
            ModifyError::CurStateMismatch { given, actual } => {
                write!(f, "IB_QP_CUR_STATE says {given} but the QP is in {actual}")
            }
            ModifyError::SqStillDraining => {
                f.write_str("SQD attributes may change only after the SQ has drained")
            }
        }
    }
}

/// One row of the transition table for one QP type: which attributes are required and which
/// are optional (besides `IB_QP_STATE`, which is always allowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionRule {
    /// Attributes that must be present.
    pub required: AttrMask,
    /// Attributes that may be present.
    pub optional: AttrMask,
}

// Shorthands for the table below (the state machine and the tests use them too).
pub(super) const STATE: AttrMask = AttrMask::STATE;
pub(super) const CUR: AttrMask = AttrMask::CUR_STATE;
pub(super) const SQD_NOTIFY: AttrMask = AttrMask::EN_SQD_ASYNC_NOTIFY;
pub(super) const ACCESS: AttrMask = AttrMask::ACCESS_FLAGS;
pub(super) const PKEY: AttrMask = AttrMask::PKEY_INDEX;
pub(super) const PORT: AttrMask = AttrMask::PORT;
pub(super) const QKEY: AttrMask = AttrMask::QKEY;
pub(super) const AV: AttrMask = AttrMask::AV;
pub(super) const MTU: AttrMask = AttrMask::PATH_MTU;
pub(super) const TIMEOUT: AttrMask = AttrMask::TIMEOUT;
pub(super) const RETRY: AttrMask = AttrMask::RETRY_CNT;
pub(super) const RNR_RETRY: AttrMask = AttrMask::RNR_RETRY;
pub(super) const RQ_PSN: AttrMask = AttrMask::RQ_PSN;
pub(super) const RD_ATOMIC: AttrMask = AttrMask::MAX_QP_RD_ATOMIC;
pub(super) const ALT: AttrMask = AttrMask::ALT_PATH;
pub(super) const RNR_TIMER: AttrMask = AttrMask::MIN_RNR_TIMER;
pub(super) const SQ_PSN: AttrMask = AttrMask::SQ_PSN;
pub(super) const DEST_RD_ATOMIC: AttrMask = AttrMask::MAX_DEST_RD_ATOMIC;
pub(super) const MIG: AttrMask = AttrMask::PATH_MIG_STATE;
pub(super) const DEST_QPN: AttrMask = AttrMask::DEST_QPN;
pub(super) const RATE: AttrMask = AttrMask::RATE_LIMIT;

/// `const`-friendly union of a list of masks.
pub(super) const fn all(masks: &[AttrMask]) -> AttrMask {
    let mut acc = 0;
    let mut i = 0;
    while i < masks.len() {
        acc |= masks[i].0;
        i += 1;
    }
    AttrMask(acc)
}

/// A row whose transition takes no attribute at all (only `IB_QP_STATE`).
const BARE: TransitionRule = TransitionRule {
    required: AttrMask::EMPTY,
    optional: AttrMask::EMPTY,
};

const fn rule(required: AttrMask, optional: AttrMask) -> TransitionRule {
    TransitionRule { required, optional }
}

const fn opt(optional: AttrMask) -> TransitionRule {
    rule(AttrMask::EMPTY, optional)
}

/// The transition table: `Some(rule)` if `from -> to` exists for `qp_type`, with the attributes
/// it requires and allows; `None` if there is no such transition.
///
/// Which transitions exist does not depend on the QP type (IBA 10.3.1, Fig. 124): any state
/// except Reset may go to Reset or Error by Modify QP, Reset may stay in Reset or go to Init,
/// Init -> Init/RTR, RTR -> RTS, RTS -> RTS/SQD, SQD -> SQD/RTS, SQE -> RTS, Error -> Reset or
/// Error. Software never commands SQE: the QP enters it by itself (UD/UC send error).
///
/// The attribute columns are IBA Tables 12-2..12-7 as Linux encodes them: RoCE needs no
/// extra column (the AV is required in Init -> RTR for RC/UC/XRC on every link layer; the
/// Ethernet-only SMAC/VID bits of old kernels are reserved now).
pub const fn transition_rule(
    from: QpState,
    to: QpState,
    qp_type: QpType,
) -> Option<TransitionRule> {
    use QpState as S;
    use QpType as T;
    let r = match (from, to) {
        // Leaving to Reset or Error never takes attributes. Reset -> Error does not exist.
        (S::Init | S::Rtr | S::Rts | S::Sqd | S::Sqe | S::Error, S::Reset | S::Error) => BARE,
        (S::Reset, S::Reset) => BARE,

        // Table 12-2: Reset -> Init.
        (S::Reset, S::Init) => match qp_type {
            T::Rc | T::Uc | T::XrcIni | T::XrcTgt => {
                rule(all(&[PKEY, PORT, ACCESS]), AttrMask::EMPTY)
            }
            T::Ud => rule(all(&[PKEY, PORT, QKEY]), AttrMask::EMPTY),
            T::Gsi | T::Smi => rule(all(&[PKEY, QKEY]), AttrMask::EMPTY),
            T::RawPacket => rule(PORT, AttrMask::EMPTY),
            T::RawIpv6 | T::RawEthertype => BARE,
        },

        // Init -> Init: the Reset -> Init attributes may be changed again.
        (S::Init, S::Init) => match qp_type {
            T::Rc | T::Uc | T::XrcIni | T::XrcTgt => opt(all(&[PKEY, PORT, ACCESS])),
            T::Ud => opt(all(&[PKEY, PORT, QKEY])),
            T::Gsi | T::Smi => opt(all(&[PKEY, QKEY])),
            T::RawPacket | T::RawIpv6 | T::RawEthertype => BARE,
        },

        // Table 12-3 (seed 004): Init -> RTR.
        (S::Init, S::Rtr) => match qp_type {
            T::Rc | T::XrcTgt => rule(
                all(&[AV, MTU, DEST_QPN, RQ_PSN, DEST_RD_ATOMIC, RNR_TIMER]),
                all(&[ALT, ACCESS, PKEY]),
            ),
            T::Uc | T::XrcIni => rule(all(&[AV, MTU, DEST_QPN, RQ_PSN]), all(&[ALT, ACCESS, PKEY])),
            T::Ud | T::Gsi | T::Smi => opt(all(&[PKEY, QKEY])),
            T::RawPacket | T::RawIpv6 | T::RawEthertype => BARE,
        },

        // Table 12-4: RTR -> RTS.
        (S::Rtr, S::Rts) => match qp_type {
            T::Rc => rule(
                all(&[TIMEOUT, RETRY, RNR_RETRY, SQ_PSN, RD_ATOMIC]),
                all(&[CUR, ALT, ACCESS, RNR_TIMER, MIG]),
            ),
            T::XrcIni => rule(
                all(&[TIMEOUT, RETRY, RNR_RETRY, SQ_PSN, RD_ATOMIC]),
                all(&[CUR, ALT, ACCESS, MIG]),
            ),
            T::XrcTgt => rule(
                all(&[TIMEOUT, SQ_PSN]),
                all(&[CUR, ALT, ACCESS, RNR_TIMER, MIG]),
            ),
            T::Uc => rule(SQ_PSN, all(&[CUR, ALT, ACCESS, MIG])),
            T::Ud | T::Gsi | T::Smi => rule(SQ_PSN, all(&[CUR, QKEY])),
            T::RawPacket => opt(RATE),
            T::RawIpv6 | T::RawEthertype => BARE,
        },

        // Table 12-5: RTS -> RTS (change attributes of a running QP, load/arm/migrate APM).
        (S::Rts, S::Rts) => match qp_type {
            T::Rc | T::XrcTgt => opt(all(&[CUR, ACCESS, ALT, MIG, RNR_TIMER])),
            T::Uc | T::XrcIni => opt(all(&[CUR, ACCESS, ALT, MIG])),
            T::Ud | T::Gsi | T::Smi => opt(all(&[CUR, QKEY])),
            T::RawPacket => opt(RATE),
            T::RawIpv6 | T::RawEthertype => BARE,
        },

        // RTS -> SQD: only the "notify me when drained" flag.
        (S::Rts, S::Sqd) => match qp_type {
            T::RawPacket | T::RawIpv6 | T::RawEthertype => BARE,
            _ => opt(SQD_NOTIFY),
        },

        // SQD -> RTS: resume; the RTS -> RTS attributes may come along.
        (S::Sqd, S::Rts) => match qp_type {
            T::Rc | T::XrcTgt => opt(all(&[CUR, ALT, ACCESS, RNR_TIMER, MIG])),
            T::Uc | T::XrcIni => opt(all(&[CUR, ALT, ACCESS, MIG])),
            T::Ud | T::Gsi | T::Smi => opt(all(&[CUR, QKEY])),
            T::RawPacket | T::RawIpv6 | T::RawEthertype => BARE,
        },

        // Table 12-6: SQD -> SQD, the one place the primary path and the requester's limits
        // may change on a connected QP.
        (S::Sqd, S::Sqd) => match qp_type {
            T::Rc => opt(all(&[
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
            ])),
            T::XrcIni => opt(all(&[
                PORT, AV, TIMEOUT, RETRY, RNR_RETRY, RD_ATOMIC, ALT, ACCESS, PKEY, MIG,
            ])),
            T::XrcTgt => opt(all(&[
                PORT,
                AV,
                TIMEOUT,
                DEST_RD_ATOMIC,
                ALT,
                ACCESS,
                PKEY,
                RNR_TIMER,
                MIG,
            ])),
            T::Uc => opt(all(&[AV, ALT, ACCESS, PKEY, MIG])),
            T::Ud | T::Gsi | T::Smi => opt(all(&[PKEY, QKEY])),
            T::RawPacket | T::RawIpv6 | T::RawEthertype => BARE,
        },

        // Table 12-7: SQE -> RTS (UD/UC only; an RC QP is never in SQE).
        (S::Sqe, S::Rts) => match qp_type {
            T::Uc => opt(all(&[CUR, ACCESS])),
            T::Ud | T::Gsi | T::Smi => opt(all(&[CUR, QKEY])),
            _ => BARE,
        },

        _ => return None,
    };
    Some(r)
}

/// Validate one `modify_qp` call: `cur -> next` for a QP of type `qp_type` with the attributes
/// in `mask`. The same rules as the kernel's `ib_modify_qp_is_ok()`; the error names the first
/// rule broken, in this order:
///
/// 1. `next != cur` needs `IB_QP_STATE` in the mask ([`ModifyError::MissingAttr`]); callers pass
///    `next = cur` when the mask has no `IB_QP_STATE`.
/// 2. `IB_QP_CUR_STATE` is only meaningful from RTR, RTS, SQD or SQE
///    ([`ModifyError::AttrNotAllowed`]).
/// 3. The transition must exist ([`ModifyError::InvalidTransition`], see [`transition_rule`]).
/// 4. Every required attribute must be present ([`ModifyError::MissingAttr`] with all of them).
/// 5. No attribute outside required + optional + `IB_QP_STATE` ([`ModifyError::AttrNotAllowed`]
///    with all of them; this includes `IB_QP_CAP`, reserved and unknown bits).
pub fn check_modify(
    cur: QpState,
    next: QpState,
    qp_type: QpType,
    mask: AttrMask,
) -> Result<(), ModifyError> {
    if next != cur && !mask.contains(STATE) {
        return Err(ModifyError::MissingAttr(STATE));
    }
    if mask.contains(CUR)
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        return Err(ModifyError::AttrNotAllowed(CUR));
    }
    let Some(row) = transition_rule(cur, next, qp_type) else {
        return Err(ModifyError::InvalidTransition {
            from: cur,
            to: next,
        });
    };
    let missing = row.required.difference(mask);
    if !missing.is_empty() {
        return Err(ModifyError::MissingAttr(missing));
    }
    let extra = mask.difference(row.required.union(row.optional).union(STATE));
    if !extra.is_empty() {
        return Err(ModifyError::AttrNotAllowed(extra));
    }
    Ok(())
}
