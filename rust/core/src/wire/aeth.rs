//! ACK Extended Transport Header (AETH, IBA 9.3.3 / 9.7.5.2.x, Table 43 "AETH Syndrome"),
//! 4 bytes: in Acknowledge, Atomic Acknowledge and RDMA Read Response First/Last/Only packets.
//!
//! ```text
//! byte 0     Syndrome: resv(1) Type(2) Value(5)
//!              Type 00 ACK      Value = credit count code (Table 17-8, 0x1F = none)
//!              Type 01 RNR NAK  Value = RNR NAK timer code
//!              Type 10 reserved
//!              Type 11 NAK      Value = NAK code (0 PSN sequence error, 1 invalid request,
//!                               2 remote access error, 3 remote operational error,
//!                               4 invalid RD request; others reserved)
//! bytes 1-3  MSN (24 bits)
//! ```
//!
//! The full syndrome bytes equal Linux's `AETH_*` values (`AETH_ACK_UNLIMITED` 0x1F,
//! `AETH_RNR_NAK` 0x20, `AETH_NAK_PSN_SEQ_ERROR` 0x60 ... `AETH_NAK_INV_RD_REQ` 0x64).

use super::{read_u32, write_bytes, DecodeError, EncodeError};
use crate::psn::PSN_MASK;

/// Mask of the AETH syndrome type bits (including the reserved top bit).
pub const SYNDROME_TYPE_MASK: u8 = 0xE0;
/// Syndrome type bits of a positive ACK.
pub const SYNDROME_TYPE_ACK: u8 = 0x00;
/// Syndrome type bits of an RNR NAK.
pub const SYNDROME_TYPE_RNR_NAK: u8 = 0x20;
/// Syndrome type bits of the reserved type.
pub const SYNDROME_TYPE_RESERVED: u8 = 0x40;
/// Syndrome type bits of a NAK.
pub const SYNDROME_TYPE_NAK: u8 = 0x60;
/// Syndrome of an ACK carrying no credit information (credit code 0x1F), as rdma_rxe sends.
pub const SYNDROME_ACK_UNLIMITED: u8 = 0x1F;

/// NAK codes (the low 5 bits of a NAK syndrome).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    /// PSN Sequence Error: the responder saw a PSN after its ePSN (Class B, seed 001).
    PsnSequenceError = 0,
    /// Invalid Request: unsupported/reserved opcode, bad First/Middle/Last sequencing, length
    /// error, too many RDMA Read/Atomic requests (Class C).
    InvalidRequest = 1,
    /// Remote Access Error: R_Key violation (Class C).
    RemoteAccessError = 2,
    /// Remote Operational Error: e.g. malformed RQ WQE (Class A).
    RemoteOperationalError = 3,
    /// Invalid RD Request (RD only; decoded for completeness).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code with value `v` (0..=4), or `None` for reserved values.
    pub const fn from_u8(v: u8) -> Option<NakCode> {
        match v {
            0 => Some(NakCode::PsnSequenceError),
            1 => Some(NakCode::InvalidRequest),
            2 => Some(NakCode::RemoteAccessError),
            3 => Some(NakCode::RemoteOperationalError),
            4 => Some(NakCode::InvalidRdRequest),
            _ => None,
        }
    }
}

/// The decoded AETH syndrome byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledge with a 5-bit credit code (Table 17-8; 0x1F = no credit info).
    Ack {
        /// Credit code, 0..=0x1F (only the low 5 bits are encoded).
        credit: u8,
    },
    /// Receiver Not Ready NAK with a 5-bit RNR NAK timer code (see [`rnr_timer_ns`]).
    RnrNak {
        /// Timer code, 0..=31 (only the low 5 bits are encoded).
        timer: u8,
    },
    /// NAK with a defined code.
    Nak(NakCode),
    /// A syndrome byte with the reserved type, the reserved top bit set, or a reserved NAK code.
    /// The raw byte is kept; the requester treats it as an invalid response.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte. Never fails: unknown encodings become [`Syndrome::Reserved`].
    pub const fn from_u8(b: u8) -> Syndrome {
        let value = b & 0x1F;
        match b & SYNDROME_TYPE_MASK {
            SYNDROME_TYPE_ACK => Syndrome::Ack { credit: value },
            SYNDROME_TYPE_RNR_NAK => Syndrome::RnrNak { timer: value },
            SYNDROME_TYPE_NAK => match NakCode::from_u8(value) {
                Some(c) => Syndrome::Nak(c),
                None => Syndrome::Reserved(b),
            },
            _ => Syndrome::Reserved(b),
        }
    }

    /// The syndrome byte.
    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credit } => SYNDROME_TYPE_ACK | (credit & 0x1F),
            Syndrome::RnrNak { timer } => SYNDROME_TYPE_RNR_NAK | (timer & 0x1F),
            Syndrome::Nak(c) => SYNDROME_TYPE_NAK | c as u8,
            Syndrome::Reserved(b) => b,
        }
    }

    /// True for a positive ACK.
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

/// ACK Extended Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// AETH:Syndrome.
    pub syndrome: Syndrome,
    /// AETH:MSN, the 24-bit message sequence number (only the low 24 bits are encoded).
    pub msn: u32,
}

impl Aeth {
    /// Encoded length in bytes.
    pub const LEN: usize = 4;

    /// A positive ACK with credit code `credit` and MSN `msn`.
    pub const fn ack(msn: u32, credit: u8) -> Aeth {
        Aeth {
            syndrome: Syndrome::Ack { credit },
            msn: msn & PSN_MASK,
        }
    }

    /// An RNR NAK with timer code `timer`.
    pub const fn rnr_nak(msn: u32, timer: u8) -> Aeth {
        Aeth {
            syndrome: Syndrome::RnrNak { timer },
            msn: msn & PSN_MASK,
        }
    }

    /// A NAK with `code`.
    pub const fn nak(msn: u32, code: NakCode) -> Aeth {
        Aeth {
            syndrome: Syndrome::Nak(code),
            msn: msn & PSN_MASK,
        }
    }

    /// The 4 wire bytes.
    pub const fn to_u32(self) -> u32 {
        ((self.syndrome.to_u8() as u32) << 24) | (self.msn & PSN_MASK)
    }

    /// Decodes an AETH from its 4 wire bytes read big-endian.
    pub const fn from_u32(w: u32) -> Aeth {
        Aeth {
            syndrome: Syndrome::from_u8((w >> 24) as u8),
            msn: w & PSN_MASK,
        }
    }

    /// Decodes the AETH at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Aeth, DecodeError> {
        read_u32(buf, 0)
            .map(Aeth::from_u32)
            .ok_or(DecodeError::Truncated)
    }

    /// Writes the AETH at the start of `out`; returns [`Aeth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        write_bytes(out, 0, &self.to_u32().to_be_bytes())?;
        Ok(Aeth::LEN)
    }
}

/// RNR NAK timer codes (IBA Table 45 "Encoding for RNR NAK Timer Field"; Linux's
/// `IB_RNR_TIMER_*`), in nanoseconds. Code 0 is the longest, 655.36 ms.
pub const RNR_TIMER_NS: [u64; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// The minimum wait, in nanoseconds, that an RNR NAK timer code asks for (only the low 5 bits of
/// `code` are used).
pub const fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_NS[(code & 0x1F) as usize]
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn syndrome_bytes_match_kernel_aeth_values() {
        assert_eq!(Syndrome::Ack { credit: 0x1F }.to_u8(), 0x1F);
        assert_eq!(Syndrome::RnrNak { timer: 0 }.to_u8(), 0x20);
        assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).to_u8(), 0x60);
        assert_eq!(Syndrome::Nak(NakCode::InvalidRequest).to_u8(), 0x61);
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).to_u8(), 0x62);
        assert_eq!(Syndrome::Nak(NakCode::RemoteOperationalError).to_u8(), 0x63);
        assert_eq!(Syndrome::Nak(NakCode::InvalidRdRequest).to_u8(), 0x64);
    }

    #[test]
    fn every_syndrome_byte_round_trips() {
        for b in 0..=255u8 {
            let s = Syndrome::from_u8(b);
            assert_eq!(s.to_u8(), b, "{b:#x}");
            let reserved = b & 0x80 != 0 || b & 0x60 == 0x40 || (b & 0x60 == 0x60 && b & 0x1F > 4);
            assert_eq!(matches!(s, Syndrome::Reserved(_)), reserved, "{b:#x}");
        }
    }

    #[test]
    fn aeth_layout_is_syndrome_then_msn() {
        let a = Aeth::ack(0x12_3456, 0x1F);
        let mut b = [0u8; 4];
        assert_eq!(a.encode(&mut b), Ok(4));
        assert_eq!(b, [0x1F, 0x12, 0x34, 0x56]);
        assert_eq!(Aeth::decode(&b), Ok(a));
        let n = Aeth::decode(&[0x63, 0, 0, 7]).unwrap();
        assert_eq!(n, Aeth::nak(7, NakCode::RemoteOperationalError));
        assert_eq!(Aeth::decode(&[0x63, 0, 0]), Err(DecodeError::Truncated));
        assert_eq!(Aeth::rnr_nak(0, 14).to_u32(), 0x2E00_0000);
    }

    #[test]
    fn rnr_timer_table_45() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        assert_eq!(rnr_timer_ns(0xFF), 491_520_000);
        for c in 2..32u8 {
            assert!(rnr_timer_ns(c) > rnr_timer_ns(c - 1));
        }
    }
}
