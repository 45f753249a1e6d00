//! The IBA QP state machine (IBA Ch. 10.3, 11.2.5) and the `modify_qp` attribute rules.
//!
//! Two layers:
//! - [`check_modify`]: the pure transition table. Which `cur -> next` transitions exist and,
//!   per QP type, which attributes each one requires and which it allows. It encodes the same
//!   rules as the kernel's `ib_modify_qp_is_ok()` (`drivers/infiniband/core/verbs.c`), written
//!   out as one readable table of rows, see [`transition_rule`].
//! - [`QpStateMachine`]: the current state plus the operational rules of each state (may a WR
//!   be posted, does the RQ logic process inbound packets, may the SQ logic start a new request)
//!   and [`QpStateMachine::modify`], which validates a verb call and returns the side effects the
//!   engines must perform as a [`Transition`] value. Nothing is called back.
//!
//! Numbers mirror the kernel: [`QpState`] is `enum ib_qp_state`, [`QpType`] is
//! `enum ib_qp_type`, [`AttrMask`] bits are `enum ib_qp_attr_mask`.
//!
//! Where the spec text and Linux differ, Linux wins for the attribute table (every verbs
//! consumer, rdma-core and rxe included, is written against it):
//! - Reset -> Error does not exist (the spec's "any state -> Error" starts at Init).
//! - Init -> RTR (seed 004, Table 12-3) lists Local ACK Timeout, Retry Count and RNR Retry in
//!   the address vector; Linux takes them in RTR -> RTS (required there for RC, refused in
//!   Init -> RTR). Linux also requires Min RNR NAK Timer for RC in Init -> RTR (the table says
//!   optional) and never accepts `IB_QP_CAP` (the table allows a resize everywhere).
//!
//! Rules added on top of the table ([`QpStateMachine::plan`]): `IB_QP_CUR_STATE` must name the
//! actual state (IBA "invalid current QP state"); SQD -> SQD may change attributes only after
//! the drain has finished (IBA 10.3.1: the SQD state exists so attributes change with nothing in
//! flight). SQD -> RTS while still draining is allowed and ends the drain without SQ_DRAINED.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign, Not};

/// A QP state (IBA 10.3.1); the values are the kernel's `enum ib_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    /// Reset (`IB_QPS_RESET`): the state after Create QP; nothing is processed.
    Reset = 0,
    /// Initialized (`IB_QPS_INIT`): receive WRs may be posted (not processed), inbound packets
    /// are silently dropped, posting a send WR fails at once (seed 004).
    Init = 1,
    /// Ready To Receive (`IB_QPS_RTR`): the RQ logic works, the SQ logic does not.
    Rtr = 2,
    /// Ready To Send (`IB_QPS_RTS`): fully operational.
    Rts = 3,
    /// Send Queue Drain (`IB_QPS_SQD`): in-flight messages finish, no new one starts.
    Sqd = 4,
    /// Send Queue Error (`IB_QPS_SQE`, UD/UC only): SQ WQEs are flushed, the RQ keeps working.
    Sqe = 5,
    /// Error (`IB_QPS_ERR`): every outstanding WR completes with a flush error, in order.
    Error = 6,
}

impl QpState {
    /// Every state, in numeric order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Error,
    ];

    /// The state with the kernel number `raw`, or `None` if there is none.
    pub const fn from_raw(raw: u32) -> Option<QpState> {
        match raw {
            0 => Some(QpState::Reset),
            1 => Some(QpState::Init),
            2 => Some(QpState::Rtr),
            3 => Some(QpState::Rts),
            4 => Some(QpState::Sqd),
            5 => Some(QpState::Sqe),
            6 => Some(QpState::Error),
            _ => None,
        }
    }

    /// The kernel number of this state (`enum ib_qp_state`).
    pub const fn as_raw(self) -> u32 {
        self as u32
    }

    /// The spec's short name ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR").
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Error => "ERR",
        }
    }

    /// What happens to a send WR posted in this state (seed 004 for Init).
    ///
    /// Reset, Init, RTR: [`PostVerdict::Refused`] (an immediate error, nothing is queued).
    /// RTS: [`PostVerdict::Process`]. SQD: [`PostVerdict::Hold`] (queued; the SQ logic starts
    /// it only after the QP is back in RTS). SQE, Error: [`PostVerdict::Flush`] (accepted and
    /// completed with `IB_WC_WR_FLUSH_ERR`).
    pub const fn post_send(self) -> PostVerdict {
        match self {
            QpState::Reset | QpState::Init | QpState::Rtr => PostVerdict::Refused,
            QpState::Rts => PostVerdict::Process,
            QpState::Sqd => PostVerdict::Hold,
            QpState::Sqe | QpState::Error => PostVerdict::Flush,
        }
    }

    /// What happens to a receive WR posted in this state (seed 004 for Init).
    ///
    /// Reset: [`PostVerdict::Refused`]. Init: [`PostVerdict::Hold`] (queued, not processed:
    /// inbound packets are dropped in Init anyway). RTR, RTS, SQD, SQE:
    /// [`PostVerdict::Process`]. Error: [`PostVerdict::Flush`].
    pub const fn post_recv(self) -> PostVerdict {
        match self {
            QpState::Reset => PostVerdict::Refused,
            QpState::Init => PostVerdict::Hold,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe => PostVerdict::Process,
            QpState::Error => PostVerdict::Flush,
        }
    }

    /// Whether the RQ logic processes an inbound request packet in this state: RTR, RTS, SQD
    /// and SQE do; Reset, Init (seed 004: "silently dropped") and Error silently drop it.
    pub const fn rq_processes_inbound(self) -> bool {
        matches!(
            self,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Whether the SQ logic may start transmitting a new request (a WQE not yet begun): RTS only.
    pub const fn sq_starts_new_requests(self) -> bool {
        matches!(self, QpState::Rts)
    }

    /// Whether the SQ logic keeps working on messages already begun: transmits their remaining
    /// packets, retransmits, and processes their ACKs/NAKs/read responses. RTS and SQD (which
    /// finishes what is in flight and then stops).
    pub const fn sq_continues_in_flight(self) -> bool {
        matches!(self, QpState::Rts | QpState::Sqd)
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a post (send or receive) does in the current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostVerdict {
    /// The verb fails at once; nothing is queued (the kernel shell returns `-EINVAL`).
    Refused,
    /// The WR is queued and processed.
    Process,
    /// The WR is queued but not processed in this state (RQ in Init, SQ in SQD).
    Hold,
    /// The WR is accepted and completed with `IB_WC_WR_FLUSH_ERR` (behind any older WRs).
    Flush,
}

/// A QP type; the values are the kernel's `enum ib_qp_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum QpType {
    /// QP0, the subnet management QP (`IB_QPT_SMI`); not used on RoCE.
    Smi = 0,
    /// QP1, the general services QP (`IB_QPT_GSI`), UD-like.
    Gsi = 1,
    /// Reliable Connected (`IB_QPT_RC`).
    Rc = 2,
    /// Unreliable Connected (`IB_QPT_UC`).
    Uc = 3,
    /// Unreliable Datagram (`IB_QPT_UD`).
    Ud = 4,
    /// Raw IPv6 (`IB_QPT_RAW_IPV6`); no attribute rules in the kernel table.
    RawIpv6 = 5,
    /// Raw Ethertype (`IB_QPT_RAW_ETHERTYPE`); no attribute rules in the kernel table.
    RawEthertype = 6,
    /// Raw packet (`IB_QPT_RAW_PACKET`).
    RawPacket = 8,
    /// XRC initiator (`IB_QPT_XRC_INI`).
    XrcIni = 9,
    /// XRC target (`IB_QPT_XRC_TGT`).
    XrcTgt = 10,
}

impl QpType {
    /// The type with the kernel number `raw`, or `None` if there is none.
    pub const fn from_raw(raw: u32) -> Option<QpType> {
        match raw {
            0 => Some(QpType::Smi),
            1 => Some(QpType::Gsi),
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            5 => Some(QpType::RawIpv6),
            6 => Some(QpType::RawEthertype),
            8 => Some(QpType::RawPacket),
            9 => Some(QpType::XrcIni),
            10 => Some(QpType::XrcTgt),
            _ => None,
        }
    }

    /// The kernel number of this type (`enum ib_qp_type`).
    pub const fn as_raw(self) -> u32 {
        self as u32
    }

    /// Connected service (RC, UC, XRC): has a destination QP and a path, may use APM.
    pub const fn is_connected(self) -> bool {
        matches!(
            self,
            QpType::Rc | QpType::Uc | QpType::XrcIni | QpType::XrcTgt
        )
    }

    /// Whether the QP may ever be in SQE. Only UD-like and UC QPs have that state; a send error
    /// on an RC (or XRC) QP moves it to Error (IBA 10.3.1; rdmavt refuses SQE for RC as well).
    pub const fn has_sqe_state(self) -> bool {
        matches!(self, QpType::Ud | QpType::Uc | QpType::Gsi | QpType::Smi)
    }
}

/// A set of `modify_qp` attributes; the bits are exactly the kernel's `enum ib_qp_attr_mask`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// No attribute.
    pub const EMPTY: AttrMask = AttrMask(0);
    /// `IB_QP_STATE`: the next state is given.
    pub const STATE: AttrMask = AttrMask(1);
    /// `IB_QP_CUR_STATE`: the caller's idea of the current state.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// `IB_QP_EN_SQD_ASYNC_NOTIFY`: raise SQ_DRAINED when the SQ has drained.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// `IB_QP_ACCESS_FLAGS`: remote read/write/atomic enables.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// `IB_QP_PKEY_INDEX`: primary P_Key index.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// `IB_QP_PORT`: primary port.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// `IB_QP_QKEY`: Q_Key (UD, GSI).
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// `IB_QP_AV`: primary path address vector.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// `IB_QP_PATH_MTU`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// `IB_QP_TIMEOUT`: local ACK timeout.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// `IB_QP_RETRY_CNT`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// `IB_QP_RNR_RETRY`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// `IB_QP_RQ_PSN`: the RQ logic's starting ePSN.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// `IB_QP_MAX_QP_RD_ATOMIC`: outstanding RDMA Read/Atomic as requester.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// `IB_QP_ALT_PATH`: alternate path (address vector, port, P_Key index, timeout).
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// `IB_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// `IB_QP_SQ_PSN`: the SQ logic's starting PSN.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// `IB_QP_MAX_DEST_RD_ATOMIC`: depth of the responder's RDMA Read/Atomic queue.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// `IB_QP_PATH_MIG_STATE`: APM state (only Migrated or Rearm may be set).
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// `IB_QP_CAP`: queue sizes (resize).
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// `IB_QP_DEST_QPN`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);
    /// `IB_QP_RATE_LIMIT` (raw packet QPs only).
    pub const RATE_LIMIT: AttrMask = AttrMask(1 << 25);
    /// `IB_QP_ATTR_STANDARD_BITS`: bits 0..=20, the IBA attributes.
    pub const STANDARD_BITS: AttrMask = AttrMask((1 << 21) - 1);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: AttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// `self | other`.
    pub const fn union(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// `self & !other`.
    pub const fn difference(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }

    /// The lowest set bit alone (empty if none).
    pub const fn lowest(self) -> AttrMask {
        AttrMask(self.0 & self.0.wrapping_neg())
    }

    /// The kernel name of the lowest set bit ("IB_QP_AV", ...); "none" if empty, "unknown"
    /// for a bit the kernel does not name.
    pub const fn name(self) -> &'static str {
        match self.lowest().0 {
            0 => "none",
            0x1 => "IB_QP_STATE",
            0x2 => "IB_QP_CUR_STATE",
            0x4 => "IB_QP_EN_SQD_ASYNC_NOTIFY",
            0x8 => "IB_QP_ACCESS_FLAGS",
            0x10 => "IB_QP_PKEY_INDEX",
            0x20 => "IB_QP_PORT",
            0x40 => "IB_QP_QKEY",
            0x80 => "IB_QP_AV",
            0x100 => "IB_QP_PATH_MTU",
            0x200 => "IB_QP_TIMEOUT",
            0x400 => "IB_QP_RETRY_CNT",
            0x800 => "IB_QP_RNR_RETRY",
            0x1000 => "IB_QP_RQ_PSN",
            0x2000 => "IB_QP_MAX_QP_RD_ATOMIC",
            0x4000 => "IB_QP_ALT_PATH",
            0x8000 => "IB_QP_MIN_RNR_TIMER",
            0x1_0000 => "IB_QP_SQ_PSN",
            0x2_0000 => "IB_QP_MAX_DEST_RD_ATOMIC",
            0x4_0000 => "IB_QP_PATH_MIG_STATE",
            0x8_0000 => "IB_QP_CAP",
            0x10_0000 => "IB_QP_DEST_QPN",
            0x200_0000 => "IB_QP_RATE_LIMIT",
            _ => "unknown",
        }
    }
}

impl BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 | rhs.0)
    }
}

impl BitOrAssign for AttrMask {
    fn bitor_assign(&mut self, rhs: AttrMask) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for AttrMask {
    type Output = AttrMask;
    fn bitand(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 & rhs.0)
    }
}

impl Not for AttrMask {
    type Output = AttrMask;
    fn not(self) -> AttrMask {
        AttrMask(!self.0)
    }
}

impl fmt::Debug for AttrMask {
    /// Prints the kernel names of the set bits, e.g. `IB_QP_STATE|IB_QP_AV`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut rest = *self;
        let mut first = true;
        while !rest.is_empty() {
            let bit = rest.lowest();
            if !first {
                f.write_str("|")?;
            }
            first = false;
            if bit.name() == "unknown" {
                write!(f, "{:#x}", bit.0)?;
            } else {
                f.write_str(bit.name())?;
            }
            rest = rest.difference(bit);
        }
        Ok(())
    }
}

impl fmt::Display for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

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

// Shorthands for the table below.
const STATE: AttrMask = AttrMask::STATE;
const CUR: AttrMask = AttrMask::CUR_STATE;
const SQD_NOTIFY: AttrMask = AttrMask::EN_SQD_ASYNC_NOTIFY;
const ACCESS: AttrMask = AttrMask::ACCESS_FLAGS;
const PKEY: AttrMask = AttrMask::PKEY_INDEX;
const PORT: AttrMask = AttrMask::PORT;
const QKEY: AttrMask = AttrMask::QKEY;
const AV: AttrMask = AttrMask::AV;
const MTU: AttrMask = AttrMask::PATH_MTU;
const TIMEOUT: AttrMask = AttrMask::TIMEOUT;
const RETRY: AttrMask = AttrMask::RETRY_CNT;
const RNR_RETRY: AttrMask = AttrMask::RNR_RETRY;
const RQ_PSN: AttrMask = AttrMask::RQ_PSN;
const RD_ATOMIC: AttrMask = AttrMask::MAX_QP_RD_ATOMIC;
const ALT: AttrMask = AttrMask::ALT_PATH;
const RNR_TIMER: AttrMask = AttrMask::MIN_RNR_TIMER;
const SQ_PSN: AttrMask = AttrMask::SQ_PSN;
const DEST_RD_ATOMIC: AttrMask = AttrMask::MAX_DEST_RD_ATOMIC;
const MIG: AttrMask = AttrMask::PATH_MIG_STATE;
const DEST_QPN: AttrMask = AttrMask::DEST_QPN;
const RATE: AttrMask = AttrMask::RATE_LIMIT;

/// `const`-friendly union of a list of masks.
const fn all(masks: &[AttrMask]) -> AttrMask {
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

/// An async event the state machine itself decides on; the values are the kernel's
/// `enum ib_event_type`, so the engine maps it to its own event type with a cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StateEvent {
    /// `IB_EVENT_COMM_EST`: the first packet arrived while the QP is in RTR.
    CommEst = 4,
    /// `IB_EVENT_SQ_DRAINED`: the SQ drain in SQD finished and the consumer asked to be told.
    SqDrained = 5,
}

/// The values a `modify_qp` call carries besides the mask, as far as the state machine needs
/// them. Each field is read only when its mask bit is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyParams {
    /// `cur_qp_state` (read with `IB_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// `en_sqd_async_notify` (read with `IB_QP_EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
}

impl ModifyParams {
    /// No extra values (for masks without `IB_QP_CUR_STATE` and `IB_QP_EN_SQD_ASYNC_NOTIFY`).
    pub const NONE: ModifyParams = ModifyParams {
        cur_qp_state: QpState::Reset,
        en_sqd_async_notify: false,
    };
}

impl Default for ModifyParams {
    fn default() -> Self {
        ModifyParams::NONE
    }
}

/// The side effects of a state change that the engines (SQ logic, RQ logic, timers) must carry
/// out. Every flag is independent; the order to apply them is the field order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: QpState,
    /// The state after.
    pub to: QpState,
    /// Entering Reset from another state: discard every WQE of both queues without completions,
    /// forget PSNs, MSN, the responder's read/atomic queue and any partial message, and reset
    /// the APM state (`Apm::reset`). The QP is as after Create QP.
    pub reset_queues: bool,
    /// Stop the retransmit (local ACK timeout) and RNR timers.
    pub stop_timers: bool,
    /// Complete every outstanding SQ WQE, oldest first, with `IB_WC_WR_FLUSH_ERR` (Error; SQE:
    /// after the WQE that failed has completed with its own error status).
    pub flush_sq: bool,
    /// Complete every outstanding RQ WQE, oldest first, with `IB_WC_WR_FLUSH_ERR` (Error).
    /// A QP attached to an SRQ flushes nothing of the SRQ and raises
    /// `IB_EVENT_QP_LAST_WQE_REACHED` instead (see `last_wqe_reached`).
    pub flush_rq: bool,
    /// Entering Error from a live state: a QP attached to an SRQ must raise
    /// `IB_EVENT_QP_LAST_WQE_REACHED` (IBA 11.6.3.1) once its last WQE is done.
    pub last_wqe_reached: bool,
    /// RTS -> SQD: the SQ logic starts no new message, finishes the ones in flight (including
    /// their ACKs and read responses) and then calls [`QpStateMachine::sq_drained`].
    pub start_drain: bool,
    /// Entering RTS: schedule the SQ logic, WQEs posted earlier (held in SQD) may be waiting.
    pub kick_sq: bool,
}

impl Transition {
    /// A transition that changes nothing (`from == to`, no side effect).
    pub const fn none(state: QpState) -> Transition {
        Transition {
            from: state,
            to: state,
            reset_queues: false,
            stop_timers: false,
            flush_sq: false,
            flush_rq: false,
            last_wqe_reached: false,
            start_drain: false,
            kick_sq: false,
        }
    }

    /// Whether the state changes.
    pub const fn changes_state(&self) -> bool {
        self.from as u8 != self.to as u8
    }
}

/// The state of one QP and the rules that go with it.
///
/// Use [`QpStateMachine::modify`] for the Modify QP verb, [`QpStateMachine::enter_error`] and
/// [`QpStateMachine::on_send_error`] for transitions the QP makes by itself, and the `post_*`,
/// `rq_processes_inbound`, `sq_*` predicates in the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpStateMachine {
    state: QpState,
    qp_type: QpType,
    en_sqd_async_notify: bool,
    draining: bool,
    comm_est_pending: bool,
}

impl QpStateMachine {
    /// A new QP in Reset (the state after Create QP).
    pub const fn new(qp_type: QpType) -> QpStateMachine {
        QpStateMachine {
            state: QpState::Reset,
            qp_type,
            en_sqd_async_notify: false,
            draining: false,
            comm_est_pending: false,
        }
    }

    /// The current state.
    pub const fn state(&self) -> QpState {
        self.state
    }

    /// The QP type.
    pub const fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Whether the last RTS -> SQD asked for `IB_EVENT_SQ_DRAINED` (query_qp reports it).
    pub const fn en_sqd_async_notify(&self) -> bool {
        self.en_sqd_async_notify
    }

    /// In SQD with messages still in flight (query_qp's `sq_draining`).
    pub const fn is_draining(&self) -> bool {
        self.draining
    }

    /// See [`QpState::post_send`].
    pub const fn post_send(&self) -> PostVerdict {
        self.state.post_send()
    }

    /// See [`QpState::post_recv`].
    pub const fn post_recv(&self) -> PostVerdict {
        self.state.post_recv()
    }

    /// See [`QpState::rq_processes_inbound`].
    pub const fn rq_processes_inbound(&self) -> bool {
        self.state.rq_processes_inbound()
    }

    /// See [`QpState::sq_starts_new_requests`].
    pub const fn sq_starts_new_requests(&self) -> bool {
        self.state.sq_starts_new_requests()
    }

    /// See [`QpState::sq_continues_in_flight`].
    pub const fn sq_continues_in_flight(&self) -> bool {
        self.state.sq_continues_in_flight()
    }

    /// Validate a Modify QP without changing anything and return the transition it would make.
    ///
    /// `next` is the requested state (`attr->qp_state`), or the current state when the mask has
    /// no `IB_QP_STATE`. On top of [`check_modify`]:
    /// - with `IB_QP_CUR_STATE`, `params.cur_qp_state` must equal the actual state
    ///   ([`ModifyError::CurStateMismatch`]);
    /// - SQD -> SQD with attributes is refused while the SQ is still draining
    ///   ([`ModifyError::SqStillDraining`]).
    ///
    /// APM attributes (`IB_QP_ALT_PATH`, `IB_QP_PATH_MIG_STATE`) need `Apm::check_modify` too:
    /// call both `plan`s first, then both commits, so a refused call changes nothing.
    pub fn plan(
        &self,
        next: QpState,
        mask: AttrMask,
        params: &ModifyParams,
    ) -> Result<Transition, ModifyError> {
        let cur = self.state;
        check_modify(cur, next, self.qp_type, mask)?;
        if mask.contains(CUR) && params.cur_qp_state != cur {
            return Err(ModifyError::CurStateMismatch {
                given: params.cur_qp_state,
                actual: cur,
            });
        }
        if cur == QpState::Sqd
            && next == QpState::Sqd
            && self.draining
            && !mask.difference(STATE.union(CUR)).is_empty()
        {
            return Err(ModifyError::SqStillDraining);
        }
        Ok(self.transition_to(next))
    }

    /// Apply a transition returned by [`QpStateMachine::plan`] (or by `modify`, which already
    /// applied it). `mask`/`params` are those given to `plan`; they carry the SQD notify flag.
    pub fn commit(&mut self, t: &Transition, mask: AttrMask, params: &ModifyParams) {
        self.apply(t);
        if t.start_drain {
            self.en_sqd_async_notify = mask.contains(SQD_NOTIFY) && params.en_sqd_async_notify;
        }
    }

    /// The Modify QP verb: [`QpStateMachine::plan`] then [`QpStateMachine::commit`].
    pub fn modify(
        &mut self,
        next: QpState,
        mask: AttrMask,
        params: &ModifyParams,
    ) -> Result<Transition, ModifyError> {
        let t = self.plan(next, mask, params)?;
        self.commit(&t, mask, params);
        Ok(t)
    }

    /// The QP moves itself to Error (fatal error, RC retry/RNR exhaustion, remote access or
    /// operation error, CQ overrun, ...). From Reset or Error nothing happens.
    pub fn enter_error(&mut self) -> Transition {
        if matches!(self.state, QpState::Reset | QpState::Error) {
            return Transition::none(self.state);
        }
        let t = self.transition_to(QpState::Error);
        self.apply(&t);
        t
    }

    /// A send WQE completed in error. UD and UC QPs (and QP1) move from RTS or SQD to SQE: the
    /// SQ is flushed, the RQ keeps working. An RC or XRC QP moves to Error (IBA 10.3.1: an RC
    /// QP has no SQE state). In other states nothing happens.
    pub fn on_send_error(&mut self) -> Transition {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Transition::none(self.state);
        }
        if !self.qp_type.has_sqe_state() {
            return self.enter_error();
        }
        let t = self.transition_to(QpState::Sqe);
        self.apply(&t);
        t
    }

    /// The SQ logic reports that the drain is over: in SQD, every message begun before the
    /// RTS -> SQD has completed (ACKed and its CQE written). Returns
    /// `Some(StateEvent::SqDrained)` if the consumer asked for the event
    /// (`en_sqd_async_notify`), `None` otherwise or when not draining (so a second call raises
    /// nothing).
    pub fn sq_drained(&mut self) -> Option<StateEvent> {
        if self.state != QpState::Sqd || !self.draining {
            return None;
        }
        self.draining = false;
        if self.en_sqd_async_notify {
            Some(StateEvent::SqDrained)
        } else {
            None
        }
    }

    /// Called for every inbound packet the QP accepts (after header and path checks). Returns
    /// `Some(StateEvent::CommEst)` for the first one received in RTR since the QP entered RTR
    /// (IBA 11.6.3.1 "Communication Established"); `None` otherwise.
    pub fn on_inbound_packet(&mut self) -> Option<StateEvent> {
        if self.state == QpState::Rtr && self.comm_est_pending {
            self.comm_est_pending = false;
            Some(StateEvent::CommEst)
        } else {
            None
        }
    }

    /// The side effects of moving from the current state to `to` (no checks).
    const fn transition_to(&self, to: QpState) -> Transition {
        let from = self.state;
        let mut t = Transition::none(from);
        t.to = to;
        let changes = from as u8 != to as u8;
        match to {
            QpState::Reset => {
                t.reset_queues = changes;
                t.stop_timers = changes;
            }
            QpState::Error => {
                t.stop_timers = changes;
                t.flush_sq = changes;
                t.flush_rq = changes;
                t.last_wqe_reached = changes;
            }
            QpState::Sqe => {
                t.flush_sq = changes;
            }
            QpState::Sqd => {
                t.start_drain = matches!(from, QpState::Rts);
            }
            QpState::Rts => {
                t.kick_sq = true;
            }
            QpState::Init | QpState::Rtr => {}
        }
        t
    }

    fn apply(&mut self, t: &Transition) {
        self.state = t.to;
        if t.start_drain {
            self.draining = true;
        } else if t.to != QpState::Sqd {
            self.draining = false;
        }
        if t.to != QpState::Sqd {
            self.en_sqd_async_notify = false;
        }
        if t.from != QpState::Rtr && t.to == QpState::Rtr {
            self.comm_est_pending = true;
        } else if t.to != QpState::Rtr {
            self.comm_est_pending = false;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    const RC: QpType = QpType::Rc;
    const UC: QpType = QpType::Uc;
    const UD: QpType = QpType::Ud;
    const GSI: QpType = QpType::Gsi;

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

    fn sm_in(ty: QpType, path: &[(QpState, AttrMask)]) -> QpStateMachine {
        let mut sm = QpStateMachine::new(ty);
        for &(next, mask) in path {
            sm.modify(next, mask | STATE, &ModifyParams::NONE)
                .unwrap_or_else(|e| panic!("{next}: {e}"));
        }
        sm
    }

    fn to_init(ty: QpType) -> AttrMask {
        transition_rule(QpState::Reset, QpState::Init, ty)
            .unwrap()
            .required
    }
    fn to_rtr(ty: QpType) -> AttrMask {
        transition_rule(QpState::Init, QpState::Rtr, ty)
            .unwrap()
            .required
    }
    fn to_rts(ty: QpType) -> AttrMask {
        transition_rule(QpState::Rtr, QpState::Rts, ty)
            .unwrap()
            .required
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

    // ---- kernel numbers --------------------------------------------------------------------

    #[test]
    fn kernel_numbers_match_ib_verbs_h() {
        let states = [
            (QpState::Reset, 0),
            (QpState::Init, 1),
            (QpState::Rtr, 2),
            (QpState::Rts, 3),
            (QpState::Sqd, 4),
            (QpState::Sqe, 5),
            (QpState::Error, 6),
        ];
        for (s, n) in states {
            assert_eq!(s.as_raw(), n);
            assert_eq!(QpState::from_raw(n), Some(s));
        }
        assert_eq!(QpState::from_raw(7), None);
        let types = [(RC, 2), (UC, 3), (UD, 4), (GSI, 1), (QpType::Smi, 0)];
        for (t, n) in types {
            assert_eq!(t.as_raw(), n);
            assert_eq!(QpType::from_raw(n), Some(t));
        }
        assert_eq!(QpType::RawPacket.as_raw(), 8);
        assert_eq!(QpType::XrcIni.as_raw(), 9);
        assert_eq!(QpType::XrcTgt.as_raw(), 10);
        assert_eq!(QpType::from_raw(7), None);
        let bits = [
            (AttrMask::STATE, 1u32),
            (AttrMask::CUR_STATE, 1 << 1),
            (AttrMask::EN_SQD_ASYNC_NOTIFY, 1 << 2),
            (AttrMask::ACCESS_FLAGS, 1 << 3),
            (AttrMask::PKEY_INDEX, 1 << 4),
            (AttrMask::PORT, 1 << 5),
            (AttrMask::QKEY, 1 << 6),
            (AttrMask::AV, 1 << 7),
            (AttrMask::PATH_MTU, 1 << 8),
            (AttrMask::TIMEOUT, 1 << 9),
            (AttrMask::RETRY_CNT, 1 << 10),
            (AttrMask::RNR_RETRY, 1 << 11),
            (AttrMask::RQ_PSN, 1 << 12),
            (AttrMask::MAX_QP_RD_ATOMIC, 1 << 13),
            (AttrMask::ALT_PATH, 1 << 14),
            (AttrMask::MIN_RNR_TIMER, 1 << 15),
            (AttrMask::SQ_PSN, 1 << 16),
            (AttrMask::MAX_DEST_RD_ATOMIC, 1 << 17),
            (AttrMask::PATH_MIG_STATE, 1 << 18),
            (AttrMask::CAP, 1 << 19),
            (AttrMask::DEST_QPN, 1 << 20),
            (AttrMask::RATE_LIMIT, 1 << 25),
        ];
        for (b, n) in bits {
            assert_eq!(b.bits(), n);
            assert!(b.name().starts_with("IB_QP_"));
        }
        assert_eq!(AttrMask::STANDARD_BITS.bits(), 0x1f_ffff);
    }

    #[test]
    fn attr_mask_names_in_errors() {
        let e = ModifyError::MissingAttr(AttrMask::AV | AttrMask::RQ_PSN);
        assert_eq!(
            format!("{e}"),
            "missing required attribute(s) IB_QP_AV|IB_QP_RQ_PSN"
        );
        assert_eq!(format!("{:?}", AttrMask(1 << 30)), "0x40000000");
        assert_eq!(format!("{:?}", AttrMask::EMPTY), "(none)");
    }

    // ---- which transitions exist -----------------------------------------------------------

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

    // ---- one test per attribute row ---------------------------------------------------------

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

    // ---- seed 004: the Initialized state ----------------------------------------------------

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

    // ---- RTR, RTS -----------------------------------------------------------------------------

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

    // ---- SQD ----------------------------------------------------------------------------------

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

    // ---- SQE ----------------------------------------------------------------------------------

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

    // ---- Error and Reset ----------------------------------------------------------------------

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
}
