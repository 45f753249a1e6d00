//! BTH:OpCode values for RC, UC and UD (IBA Table 38 "OpCode field"; the same numbers as
//! `IB_OPCODE_*` in Linux's `include/rdma/ib_pack.h`), and what each opcode implies.
//!
//! The upper 3 bits of the opcode select the transport (RC `000`, UC `001`, UD `011`), the
//! lower 5 bits the operation. RD (`010`), CNP and the manufacturer-specific ranges are not
//! spoken and decode as unknown.

use super::aeth::Aeth;
use super::atomic_eth::{AtomicAckEth, AtomicEth};
use super::bth::Bth;
use super::deth::Deth;
use super::feth::Feth;
use super::imm::{Ieth, ImmDt};
use super::reth::Reth;

/// The transport service an opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// The place of a packet in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last packet of a multi-packet message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The single packet of a single-packet message (also every ACK, RDMA Read request and
    /// Atomic request or response).
    Only,
}

impl Position {
    /// True for `First` and `Only`: the packet starts a message.
    pub const fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// True for `Last` and `Only`: the packet ends a message.
    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The operation a packet belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Send (with or without immediate or invalidate).
    Send,
    /// RDMA Write (with or without immediate).
    RdmaWrite,
    /// RDMA Read request.
    RdmaReadRequest,
    /// RDMA Read response.
    RdmaReadResponse,
    /// Acknowledge (ACK / NAK).
    Acknowledge,
    /// Atomic Acknowledge (response to an Atomic request).
    AtomicAcknowledge,
    /// Atomic Compare & Swap request.
    CompareSwap,
    /// Atomic Fetch & Add request.
    FetchAdd,
    /// FLUSH request (IBA 1.5): make earlier writes to a range or MR visible or persistent.
    Flush,
    /// ATOMIC WRITE request (IBA 1.5): 8 bytes written at once.
    AtomicWrite,
}

impl Operation {
    /// Whether a packet of this operation may hand its payload in as
    /// [`RxPayload::Held`](crate::memory::RxPayload::Held): the engine only moves such a
    /// payload into memory. The rest (ATOMIC WRITE's 8 bytes) must come in hand.
    pub const fn payload_may_be_held(self) -> bool {
        matches!(
            self,
            Operation::Send | Operation::RdmaWrite | Operation::RdmaReadResponse
        )
    }
}

/// Everything the opcode dictates about a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// First / Middle / Last / Only.
    pub position: Position,
    /// True for request packets (sent by the requester's SQ Logic), false for responses
    /// (RDMA Read responses, ACKs, Atomic ACKs).
    pub is_request: bool,
    /// True when the packet needs a receive WQE at the responder: every packet of a Send, and the
    /// RDMA Write packet that carries immediate data (the RQ WQE is consumed there).
    pub needs_rq_wqe: bool,
    /// An RDMA Extended Transport Header follows the BTH.
    pub has_reth: bool,
    /// An ACK Extended Transport Header follows the BTH.
    pub has_aeth: bool,
    /// An Atomic Extended Transport Header follows the BTH.
    pub has_atomic_eth: bool,
    /// An Atomic ACK Extended Transport Header follows the AETH.
    pub has_atomic_ack_eth: bool,
    /// Immediate data (ImmDt) follows the other headers.
    pub has_immdt: bool,
    /// An Invalidate Extended Transport Header (IETH) follows the other headers.
    pub has_ieth: bool,
    /// A Datagram Extended Transport Header follows the BTH (UD).
    pub has_deth: bool,
    /// A FLUSH Extended Transport Header follows the BTH (before the RETH).
    pub has_feth: bool,
    /// The packet may carry payload bytes.
    pub has_payload: bool,
    /// Bytes of BTH plus all extension headers.
    pub header_len: usize,
}

/// Extension header flags, in the order used by [`info_of`].
const RETH: u16 = 1;
const AETH: u16 = 2;
const ATOMIC: u16 = 4;
const ATOMIC_ACK: u16 = 8;
const IMM: u16 = 16;
const IETH: u16 = 32;
const DETH: u16 = 64;
const PAYLOAD: u16 = 128;
const FETH: u16 = 256;

const fn has_flag(flags: u16, f: u16) -> bool {
    flags & f != 0
}

const fn info_of(t: Transport, op: Operation, pos: Position, flags: u16) -> OpcodeInfo {
    let is_request = !matches!(
        op,
        Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
    );
    let needs_rq_wqe = match op {
        Operation::Send => true,
        Operation::RdmaWrite => has_flag(flags, IMM),
        _ => false,
    };
    let mut len = Bth::LEN;
    if has_flag(flags, RETH) {
        len += Reth::LEN;
    }
    if has_flag(flags, AETH) {
        len += Aeth::LEN;
    }
    if has_flag(flags, ATOMIC) {
        len += AtomicEth::LEN;
    }
    if has_flag(flags, ATOMIC_ACK) {
        len += AtomicAckEth::LEN;
    }
    if has_flag(flags, IMM) {
        len += ImmDt::LEN;
    }
    if has_flag(flags, IETH) {
        len += Ieth::LEN;
    }
    if has_flag(flags, DETH) {
        len += Deth::LEN;
    }
    if has_flag(flags, FETH) {
        len += Feth::LEN;
    }
    OpcodeInfo {
        transport: t,
        operation: op,
        position: pos,
        is_request,
        needs_rq_wqe,
        has_reth: has_flag(flags, RETH),
        has_aeth: has_flag(flags, AETH),
        has_atomic_eth: has_flag(flags, ATOMIC),
        has_atomic_ack_eth: has_flag(flags, ATOMIC_ACK),
        has_immdt: has_flag(flags, IMM),
        has_ieth: has_flag(flags, IETH),
        has_deth: has_flag(flags, DETH),
        has_feth: has_flag(flags, FETH),
        has_payload: has_flag(flags, PAYLOAD),
        header_len: len,
    }
}

/// [`Opcode::info`] of every opcode, at its wire value (every opcode is below 0x80; the other
/// entries are never read).
const INFO: [OpcodeInfo; 0x80] = {
    let mut t = [Opcode::RcSendFirst.compute_info(); 0x80];
    let mut i = 0;
    while i < Opcode::ALL.len() {
        let op = Opcode::ALL[i];
        t[op as usize] = op.compute_info();
        i += 1;
    }
    t
};

/// A BTH opcode this implementation understands. The discriminants are the wire values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// RC Send First.
    RcSendFirst = 0x00,
    /// RC Send Middle.
    RcSendMiddle = 0x01,
    /// RC Send Last.
    RcSendLast = 0x02,
    /// RC Send Last with Immediate.
    RcSendLastWithImmediate = 0x03,
    /// RC Send Only.
    RcSendOnly = 0x04,
    /// RC Send Only with Immediate.
    RcSendOnlyWithImmediate = 0x05,
    /// RC RDMA Write First.
    RcRdmaWriteFirst = 0x06,
    /// RC RDMA Write Middle.
    RcRdmaWriteMiddle = 0x07,
    /// RC RDMA Write Last.
    RcRdmaWriteLast = 0x08,
    /// RC RDMA Write Last with Immediate.
    RcRdmaWriteLastWithImmediate = 0x09,
    /// RC RDMA Write Only.
    RcRdmaWriteOnly = 0x0A,
    /// RC RDMA Write Only with Immediate.
    RcRdmaWriteOnlyWithImmediate = 0x0B,
    /// RC RDMA Read Request.
    RcRdmaReadRequest = 0x0C,
    /// RC RDMA Read Response First.
    RcRdmaReadResponseFirst = 0x0D,
    /// RC RDMA Read Response Middle.
    RcRdmaReadResponseMiddle = 0x0E,
    /// RC RDMA Read Response Last.
    RcRdmaReadResponseLast = 0x0F,
    /// RC RDMA Read Response Only.
    RcRdmaReadResponseOnly = 0x10,
    /// RC Acknowledge.
    RcAcknowledge = 0x11,
    /// RC Atomic Acknowledge.
    RcAtomicAcknowledge = 0x12,
    /// RC Compare & Swap.
    RcCompareSwap = 0x13,
    /// RC Fetch & Add.
    RcFetchAdd = 0x14,
    /// RC Send Last with Invalidate.
    RcSendLastWithInvalidate = 0x16,
    /// RC Send Only with Invalidate.
    RcSendOnlyWithInvalidate = 0x17,
    /// RC FLUSH (IBA 1.5).
    RcFlush = 0x1C,
    /// RC ATOMIC WRITE (IBA 1.5).
    RcAtomicWrite = 0x1D,
    /// UC Send First.
    UcSendFirst = 0x20,
    /// UC Send Middle.
    UcSendMiddle = 0x21,
    /// UC Send Last.
    UcSendLast = 0x22,
    /// UC Send Last with Immediate.
    UcSendLastWithImmediate = 0x23,
    /// UC Send Only.
    UcSendOnly = 0x24,
    /// UC Send Only with Immediate.
    UcSendOnlyWithImmediate = 0x25,
    /// UC RDMA Write First.
    UcRdmaWriteFirst = 0x26,
    /// UC RDMA Write Middle.
    UcRdmaWriteMiddle = 0x27,
    /// UC RDMA Write Last.
    UcRdmaWriteLast = 0x28,
    /// UC RDMA Write Last with Immediate.
    UcRdmaWriteLastWithImmediate = 0x29,
    /// UC RDMA Write Only.
    UcRdmaWriteOnly = 0x2A,
    /// UC RDMA Write Only with Immediate.
    UcRdmaWriteOnlyWithImmediate = 0x2B,
    /// UD Send Only.
    UdSendOnly = 0x64,
    /// UD Send Only with Immediate.
    UdSendOnlyWithImmediate = 0x65,
}

impl Opcode {
    /// Every opcode, in wire-value order.
    pub const ALL: [Opcode; 39] = [
        Opcode::RcSendFirst,
        Opcode::RcSendMiddle,
        Opcode::RcSendLast,
        Opcode::RcSendLastWithImmediate,
        Opcode::RcSendOnly,
        Opcode::RcSendOnlyWithImmediate,
        Opcode::RcRdmaWriteFirst,
        Opcode::RcRdmaWriteMiddle,
        Opcode::RcRdmaWriteLast,
        Opcode::RcRdmaWriteLastWithImmediate,
        Opcode::RcRdmaWriteOnly,
        Opcode::RcRdmaWriteOnlyWithImmediate,
        Opcode::RcRdmaReadRequest,
        Opcode::RcRdmaReadResponseFirst,
        Opcode::RcRdmaReadResponseMiddle,
        Opcode::RcRdmaReadResponseLast,
        Opcode::RcRdmaReadResponseOnly,
        Opcode::RcAcknowledge,
        Opcode::RcAtomicAcknowledge,
        Opcode::RcCompareSwap,
        Opcode::RcFetchAdd,
        Opcode::RcSendLastWithInvalidate,
        Opcode::RcSendOnlyWithInvalidate,
        Opcode::RcFlush,
        Opcode::RcAtomicWrite,
        Opcode::UcSendFirst,
        Opcode::UcSendMiddle,
        Opcode::UcSendLast,
        Opcode::UcSendLastWithImmediate,
        Opcode::UcSendOnly,
        Opcode::UcSendOnlyWithImmediate,
        Opcode::UcRdmaWriteFirst,
        Opcode::UcRdmaWriteMiddle,
        Opcode::UcRdmaWriteLast,
        Opcode::UcRdmaWriteLastWithImmediate,
        Opcode::UcRdmaWriteOnly,
        Opcode::UcRdmaWriteOnlyWithImmediate,
        Opcode::UdSendOnly,
        Opcode::UdSendOnlyWithImmediate,
    ];

    /// The opcode with wire value `v`, or `None` for reserved and unsupported values.
    pub const fn from_u8(v: u8) -> Option<Opcode> {
        Some(match v {
            0x00 => Opcode::RcSendFirst,
            0x01 => Opcode::RcSendMiddle,
            0x02 => Opcode::RcSendLast,
            0x03 => Opcode::RcSendLastWithImmediate,
            0x04 => Opcode::RcSendOnly,
            0x05 => Opcode::RcSendOnlyWithImmediate,
            0x06 => Opcode::RcRdmaWriteFirst,
            0x07 => Opcode::RcRdmaWriteMiddle,
            0x08 => Opcode::RcRdmaWriteLast,
            0x09 => Opcode::RcRdmaWriteLastWithImmediate,
            0x0A => Opcode::RcRdmaWriteOnly,
            0x0B => Opcode::RcRdmaWriteOnlyWithImmediate,
            0x0C => Opcode::RcRdmaReadRequest,
            0x0D => Opcode::RcRdmaReadResponseFirst,
            0x0E => Opcode::RcRdmaReadResponseMiddle,
            0x0F => Opcode::RcRdmaReadResponseLast,
            0x10 => Opcode::RcRdmaReadResponseOnly,
            0x11 => Opcode::RcAcknowledge,
            0x12 => Opcode::RcAtomicAcknowledge,
            0x13 => Opcode::RcCompareSwap,
            0x14 => Opcode::RcFetchAdd,
            0x16 => Opcode::RcSendLastWithInvalidate,
            0x17 => Opcode::RcSendOnlyWithInvalidate,
            0x1C => Opcode::RcFlush,
            0x1D => Opcode::RcAtomicWrite,
            0x20 => Opcode::UcSendFirst,
            0x21 => Opcode::UcSendMiddle,
            0x22 => Opcode::UcSendLast,
            0x23 => Opcode::UcSendLastWithImmediate,
            0x24 => Opcode::UcSendOnly,
            0x25 => Opcode::UcSendOnlyWithImmediate,
            0x26 => Opcode::UcRdmaWriteFirst,
            0x27 => Opcode::UcRdmaWriteMiddle,
            0x28 => Opcode::UcRdmaWriteLast,
            0x29 => Opcode::UcRdmaWriteLastWithImmediate,
            0x2A => Opcode::UcRdmaWriteOnly,
            0x2B => Opcode::UcRdmaWriteOnlyWithImmediate,
            0x64 => Opcode::UdSendOnly,
            0x65 => Opcode::UdSendOnlyWithImmediate,
            _ => return None,
        })
    }

    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// What this opcode dictates: transport, operation, position, extension headers, payload.
    /// A table lookup: every packet built or parsed asks, several times.
    pub const fn info(self) -> OpcodeInfo {
        INFO[self as usize]
    }

    /// [`Opcode::info`] worked out, for the table.
    const fn compute_info(self) -> OpcodeInfo {
        use Operation as O;
        use Position as P;
        use Transport as T;
        match self {
            Opcode::RcSendFirst => info_of(T::Rc, O::Send, P::First, PAYLOAD),
            Opcode::RcSendMiddle => info_of(T::Rc, O::Send, P::Middle, PAYLOAD),
            Opcode::RcSendLast => info_of(T::Rc, O::Send, P::Last, PAYLOAD),
            Opcode::RcSendLastWithImmediate => info_of(T::Rc, O::Send, P::Last, IMM | PAYLOAD),
            Opcode::RcSendOnly => info_of(T::Rc, O::Send, P::Only, PAYLOAD),
            Opcode::RcSendOnlyWithImmediate => info_of(T::Rc, O::Send, P::Only, IMM | PAYLOAD),
            Opcode::RcRdmaWriteFirst => info_of(T::Rc, O::RdmaWrite, P::First, RETH | PAYLOAD),
            Opcode::RcRdmaWriteMiddle => info_of(T::Rc, O::RdmaWrite, P::Middle, PAYLOAD),
            Opcode::RcRdmaWriteLast => info_of(T::Rc, O::RdmaWrite, P::Last, PAYLOAD),
            Opcode::RcRdmaWriteLastWithImmediate => {
                info_of(T::Rc, O::RdmaWrite, P::Last, IMM | PAYLOAD)
            }
            Opcode::RcRdmaWriteOnly => info_of(T::Rc, O::RdmaWrite, P::Only, RETH | PAYLOAD),
            Opcode::RcRdmaWriteOnlyWithImmediate => {
                info_of(T::Rc, O::RdmaWrite, P::Only, RETH | IMM | PAYLOAD)
            }
            Opcode::RcRdmaReadRequest => info_of(T::Rc, O::RdmaReadRequest, P::Only, RETH),
            Opcode::RcRdmaReadResponseFirst => {
                info_of(T::Rc, O::RdmaReadResponse, P::First, AETH | PAYLOAD)
            }
            Opcode::RcRdmaReadResponseMiddle => {
                info_of(T::Rc, O::RdmaReadResponse, P::Middle, PAYLOAD)
            }
            Opcode::RcRdmaReadResponseLast => {
                info_of(T::Rc, O::RdmaReadResponse, P::Last, AETH | PAYLOAD)
            }
            Opcode::RcRdmaReadResponseOnly => {
                info_of(T::Rc, O::RdmaReadResponse, P::Only, AETH | PAYLOAD)
            }
            Opcode::RcAcknowledge => info_of(T::Rc, O::Acknowledge, P::Only, AETH),
            Opcode::RcAtomicAcknowledge => {
                info_of(T::Rc, O::AtomicAcknowledge, P::Only, AETH | ATOMIC_ACK)
            }
            Opcode::RcCompareSwap => info_of(T::Rc, O::CompareSwap, P::Only, ATOMIC),
            Opcode::RcFetchAdd => info_of(T::Rc, O::FetchAdd, P::Only, ATOMIC),
            Opcode::RcSendLastWithInvalidate => info_of(T::Rc, O::Send, P::Last, IETH | PAYLOAD),
            Opcode::RcSendOnlyWithInvalidate => info_of(T::Rc, O::Send, P::Only, IETH | PAYLOAD),
            Opcode::RcFlush => info_of(T::Rc, O::Flush, P::Only, FETH | RETH),
            Opcode::RcAtomicWrite => info_of(T::Rc, O::AtomicWrite, P::Only, RETH | PAYLOAD),
            Opcode::UcSendFirst => info_of(T::Uc, O::Send, P::First, PAYLOAD),
            Opcode::UcSendMiddle => info_of(T::Uc, O::Send, P::Middle, PAYLOAD),
            Opcode::UcSendLast => info_of(T::Uc, O::Send, P::Last, PAYLOAD),
            Opcode::UcSendLastWithImmediate => info_of(T::Uc, O::Send, P::Last, IMM | PAYLOAD),
            Opcode::UcSendOnly => info_of(T::Uc, O::Send, P::Only, PAYLOAD),
            Opcode::UcSendOnlyWithImmediate => info_of(T::Uc, O::Send, P::Only, IMM | PAYLOAD),
            Opcode::UcRdmaWriteFirst => info_of(T::Uc, O::RdmaWrite, P::First, RETH | PAYLOAD),
            Opcode::UcRdmaWriteMiddle => info_of(T::Uc, O::RdmaWrite, P::Middle, PAYLOAD),
            Opcode::UcRdmaWriteLast => info_of(T::Uc, O::RdmaWrite, P::Last, PAYLOAD),
            Opcode::UcRdmaWriteLastWithImmediate => {
                info_of(T::Uc, O::RdmaWrite, P::Last, IMM | PAYLOAD)
            }
            Opcode::UcRdmaWriteOnly => info_of(T::Uc, O::RdmaWrite, P::Only, RETH | PAYLOAD),
            Opcode::UcRdmaWriteOnlyWithImmediate => {
                info_of(T::Uc, O::RdmaWrite, P::Only, RETH | IMM | PAYLOAD)
            }
            Opcode::UdSendOnly => info_of(T::Ud, O::Send, P::Only, DETH | PAYLOAD),
            Opcode::UdSendOnlyWithImmediate => {
                info_of(T::Ud, O::Send, P::Only, DETH | IMM | PAYLOAD)
            }
        }
    }

    /// The transport service of this opcode.
    pub const fn transport(self) -> Transport {
        self.info().transport
    }

    /// The position of the packet in its message.
    pub const fn position(self) -> Position {
        self.info().position
    }

    /// The Send opcode for `transport` and `position`, with immediate data (`imm`) or an
    /// invalidate R_Key (`inv`) on the last/only packet. `None` for combinations that do not
    /// exist (invalidate outside RC, UD other than Only, immediate or invalidate on First or
    /// Middle, both immediate and invalidate).
    pub const fn send(
        transport: Transport,
        position: Position,
        imm: bool,
        inv: bool,
    ) -> Option<Opcode> {
        use Position as P;
        use Transport as T;
        Some(match (transport, position, imm, inv) {
            (_, _, true, true) => return None,
            (T::Rc, P::First, false, false) => Opcode::RcSendFirst,
            (T::Rc, P::Middle, false, false) => Opcode::RcSendMiddle,
            (T::Rc, P::Last, false, false) => Opcode::RcSendLast,
            (T::Rc, P::Last, true, false) => Opcode::RcSendLastWithImmediate,
            (T::Rc, P::Last, false, true) => Opcode::RcSendLastWithInvalidate,
            (T::Rc, P::Only, false, false) => Opcode::RcSendOnly,
            (T::Rc, P::Only, true, false) => Opcode::RcSendOnlyWithImmediate,
            (T::Rc, P::Only, false, true) => Opcode::RcSendOnlyWithInvalidate,
            (T::Uc, P::First, false, false) => Opcode::UcSendFirst,
            (T::Uc, P::Middle, false, false) => Opcode::UcSendMiddle,
            (T::Uc, P::Last, false, false) => Opcode::UcSendLast,
            (T::Uc, P::Last, true, false) => Opcode::UcSendLastWithImmediate,
            (T::Uc, P::Only, false, false) => Opcode::UcSendOnly,
            (T::Uc, P::Only, true, false) => Opcode::UcSendOnlyWithImmediate,
            (T::Ud, P::Only, false, false) => Opcode::UdSendOnly,
            (T::Ud, P::Only, true, false) => Opcode::UdSendOnlyWithImmediate,
            _ => return None,
        })
    }

    /// The RDMA Write opcode for `transport` (RC or UC) and `position`, with immediate data on
    /// the last/only packet when `imm`. `None` for UD and for immediate on First or Middle.
    pub const fn rdma_write(transport: Transport, position: Position, imm: bool) -> Option<Opcode> {
        use Position as P;
        use Transport as T;
        Some(match (transport, position, imm) {
            (T::Rc, P::First, false) => Opcode::RcRdmaWriteFirst,
            (T::Rc, P::Middle, false) => Opcode::RcRdmaWriteMiddle,
            (T::Rc, P::Last, false) => Opcode::RcRdmaWriteLast,
            (T::Rc, P::Last, true) => Opcode::RcRdmaWriteLastWithImmediate,
            (T::Rc, P::Only, false) => Opcode::RcRdmaWriteOnly,
            (T::Rc, P::Only, true) => Opcode::RcRdmaWriteOnlyWithImmediate,
            (T::Uc, P::First, false) => Opcode::UcRdmaWriteFirst,
            (T::Uc, P::Middle, false) => Opcode::UcRdmaWriteMiddle,
            (T::Uc, P::Last, false) => Opcode::UcRdmaWriteLast,
            (T::Uc, P::Last, true) => Opcode::UcRdmaWriteLastWithImmediate,
            (T::Uc, P::Only, false) => Opcode::UcRdmaWriteOnly,
            (T::Uc, P::Only, true) => Opcode::UcRdmaWriteOnlyWithImmediate,
            _ => return None,
        })
    }

    /// The RC RDMA Read Response opcode for `position`.
    pub const fn rdma_read_response(position: Position) -> Opcode {
        match position {
            Position::First => Opcode::RcRdmaReadResponseFirst,
            Position::Middle => Opcode::RcRdmaReadResponseMiddle,
            Position::Last => Opcode::RcRdmaReadResponseLast,
            Position::Only => Opcode::RcRdmaReadResponseOnly,
        }
    }
}

impl TryFrom<u8> for Opcode {
    type Error = u8;

    /// Same as [`Opcode::from_u8`]; the error is the unknown value.
    fn try_from(v: u8) -> Result<Opcode, u8> {
        Opcode::from_u8(v).ok_or(v)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn the_info_table_holds_each_opcodes_facts() {
        for op in Opcode::ALL {
            assert_eq!(op.info(), op.compute_info(), "{op:?}");
        }
    }

    #[test]
    fn wire_values_match_ib_pack_h() {
        assert_eq!(Opcode::RcSendFirst as u8, 0x00);
        assert_eq!(Opcode::RcAcknowledge as u8, 0x11);
        assert_eq!(Opcode::RcAtomicAcknowledge as u8, 0x12);
        assert_eq!(Opcode::RcCompareSwap as u8, 0x13);
        assert_eq!(Opcode::RcFetchAdd as u8, 0x14);
        assert_eq!(Opcode::RcSendLastWithInvalidate as u8, 0x16);
        assert_eq!(Opcode::RcSendOnlyWithInvalidate as u8, 0x17);
        assert_eq!(Opcode::RcFlush as u8, 0x1C);
        assert_eq!(Opcode::RcAtomicWrite as u8, 0x1D);
        assert_eq!(Opcode::UcSendFirst as u8, 0x20);
        assert_eq!(Opcode::UcRdmaWriteOnlyWithImmediate as u8, 0x2B);
        assert_eq!(Opcode::UdSendOnly as u8, 0x64);
        assert_eq!(Opcode::UdSendOnlyWithImmediate as u8, 0x65);
    }

    #[test]
    fn from_u8_round_trips_and_rejects_the_rest() {
        let mut known = 0;
        for v in 0..=255u8 {
            match Opcode::from_u8(v) {
                Some(op) => {
                    known += 1;
                    assert_eq!(op.as_u8(), v);
                    assert!(Opcode::ALL.contains(&op));
                }
                None => assert!(!Opcode::ALL.iter().any(|o| o.as_u8() == v)),
            }
        }
        assert_eq!(known, Opcode::ALL.len());
        // RC RESYNC (0x15, RD only), RD and CNP values are not spoken.
        assert_eq!(Opcode::from_u8(0x15), None);
        assert_eq!(Opcode::from_u8(0x1B), None);
        assert_eq!(Opcode::from_u8(0x1E), None);
        assert_eq!(Opcode::from_u8(0x40), None);
        assert_eq!(Opcode::from_u8(0x81), None);
    }

    #[test]
    fn transport_follows_upper_three_bits() {
        for op in Opcode::ALL {
            let expected = match op.as_u8() >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                3 => Transport::Ud,
                _ => unreachable!(),
            };
            assert_eq!(op.transport(), expected, "{op:?}");
        }
    }

    #[test]
    fn extension_headers_per_iba_table() {
        let i = Opcode::RcRdmaWriteOnlyWithImmediate.info();
        assert!(i.has_reth && i.has_immdt && i.has_payload && i.needs_rq_wqe);
        assert_eq!(i.header_len, 12 + 16 + 4);
        let i = Opcode::RcRdmaWriteFirst.info();
        assert!(i.has_reth && !i.needs_rq_wqe);
        let i = Opcode::RcRdmaReadRequest.info();
        assert!(i.has_reth && !i.has_payload && i.is_request);
        let i = Opcode::RcRdmaReadResponseMiddle.info();
        assert!(!i.has_aeth && i.has_payload && !i.is_request);
        let i = Opcode::RcRdmaReadResponseFirst.info();
        assert!(i.has_aeth && i.has_payload);
        let i = Opcode::RcAtomicAcknowledge.info();
        assert!(i.has_aeth && i.has_atomic_ack_eth && !i.has_payload);
        assert_eq!(i.header_len, 12 + 4 + 8);
        let i = Opcode::RcCompareSwap.info();
        assert!(i.has_atomic_eth && !i.has_payload && i.is_request);
        assert_eq!(i.header_len, 12 + 28);
        let i = Opcode::RcSendOnlyWithInvalidate.info();
        assert!(i.has_ieth && !i.has_immdt && i.needs_rq_wqe);
        let i = Opcode::UdSendOnlyWithImmediate.info();
        assert!(i.has_deth && i.has_immdt);
        assert_eq!(i.header_len, 12 + 8 + 4);
        // IBA 1.5 Table 38: FLUSH is BTH+FETH+RETH without payload, ATOMIC WRITE BTH+RETH
        // with its 8 bytes as payload (rxe_opcode.c agrees).
        let i = Opcode::RcFlush.info();
        assert!(i.has_feth && i.has_reth && !i.has_payload && i.is_request && !i.needs_rq_wqe);
        assert_eq!(i.header_len, 12 + 4 + 16);
        assert_eq!(i.position, Position::Only);
        let i = Opcode::RcAtomicWrite.info();
        assert!(!i.has_feth && i.has_reth && i.has_payload && i.is_request && !i.needs_rq_wqe);
        assert_eq!(i.header_len, 12 + 16);
        assert_eq!(i.position, Position::Only);
        let i = Opcode::RcAcknowledge.info();
        assert!(i.has_aeth && !i.has_payload && !i.is_request);
        assert_eq!(i.position, Position::Only);
    }

    #[test]
    fn builders_pick_matching_opcodes() {
        for op in Opcode::ALL {
            let i = op.info();
            match i.operation {
                Operation::Send => assert_eq!(
                    Opcode::send(i.transport, i.position, i.has_immdt, i.has_ieth),
                    Some(op)
                ),
                Operation::RdmaWrite => assert_eq!(
                    Opcode::rdma_write(i.transport, i.position, i.has_immdt),
                    Some(op)
                ),
                Operation::RdmaReadResponse => {
                    assert_eq!(Opcode::rdma_read_response(i.position), op)
                }
                _ => {}
            }
        }
        assert_eq!(
            Opcode::send(Transport::Uc, Position::Only, false, true),
            None
        );
        assert_eq!(
            Opcode::send(Transport::Rc, Position::First, true, false),
            None
        );
        assert_eq!(
            Opcode::rdma_write(Transport::Ud, Position::Only, false),
            None
        );
    }
}
