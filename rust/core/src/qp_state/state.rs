//! The QP states and QP types, and what each state lets the data path do.

use core::fmt;

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
    /// UD and the special QPs that follow UD (GSI): datagrams, a Q_Key, no connection.
    pub const fn is_datagram(self) -> bool {
        matches!(self, QpType::Ud | QpType::Gsi | QpType::Smi)
    }

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
