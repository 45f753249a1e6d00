//! Base Transport Header (BTH, IBA 9.2), 12 bytes, present in every packet.
//!
//! ```text
//! byte 0     OpCode
//! byte 1     SE(1) M(1) PadCnt(2) TVer(4)
//! bytes 2-3  P_Key
//! byte 4     FECN(1) BECN(1) resv6(6)     (RoCEv2: the IBA "resv8a" byte; ICRC-masked)
//! bytes 5-7  DestQP
//! byte 8     A(1) resv7(7)
//! bytes 9-11 PSN
//! ```
//!
//! Reserved bits are written as zero and ignored on receipt.

use super::opcode::Opcode;
use super::{read_array, write_bytes, DecodeError, EncodeError};
use crate::psn::Psn;

/// Mask of the 24-bit queue pair number fields (BTH:DestQP, DETH:SrcQP).
pub const QPN_MASK: u32 = 0x00FF_FFFF;

/// BTH:DestQP of a multicast packet (IBA 10.8.3.2): the receiver delivers it to every UD QP
/// attached to the packet's destination GID.
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// Base Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth {
    /// BTH:OpCode.
    pub opcode: Opcode,
    /// BTH:SE, solicited event: the responder should raise a solicited completion event.
    pub solicited: bool,
    /// BTH:M, MigReq: the sender's path migration state (APM); set once migrated.
    pub mig_req: bool,
    /// BTH:PadCnt, 0..=3 pad bytes between payload and ICRC (only the low 2 bits are encoded).
    pub pad_count: u8,
    /// BTH:TVer, transport header version, 4 bits; IBA defines only 0 and the RQ packet checks
    /// drop other values (decode reports it as is).
    pub tver: u8,
    /// BTH:P_Key, partition key.
    pub pkey: u16,
    /// FECN (RoCEv2 congestion notification, forward), the top bit of the reserved byte 4.
    pub fecn: bool,
    /// BECN (RoCEv2 congestion notification, backward), the second bit of byte 4.
    pub becn: bool,
    /// BTH:DestQP, 24-bit destination queue pair number (only the low 24 bits are encoded).
    pub dest_qp: u32,
    /// BTH:A, AckReq: the requester asks for an acknowledge of this packet.
    pub ack_req: bool,
    /// BTH:PSN.
    pub psn: Psn,
}

impl Bth {
    /// Encoded length in bytes.
    pub const LEN: usize = 12;

    /// The only transport header version IBA defines.
    pub const TVER: u8 = 0;

    /// A BTH with the given opcode, destination QP and PSN, P_Key 0xFFFF (default partition,
    /// full member) and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Bth {
        Bth {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: Bth::TVER,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & QPN_MASK,
            ack_req: false,
            psn,
        }
    }

    /// Decodes the BTH at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Bth, DecodeError> {
        let b: [u8; Bth::LEN] = read_array(buf, 0).ok_or(DecodeError::Truncated)?;
        let opcode = Opcode::from_u8(b[0]).ok_or(DecodeError::UnknownOpcode(b[0]))?;
        Ok(Bth {
            opcode,
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 0x3,
            tver: b[1] & 0x0F,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]])),
        })
    }

    /// The 12 wire bytes.
    pub fn to_bytes(&self) -> [u8; Bth::LEN] {
        let mut b = [0u8; Bth::LEN];
        b[0] = self.opcode.as_u8();
        b[1] = (u8::from(self.solicited) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad_count & 0x3) << 4)
            | (self.tver & 0x0F);
        let [p0, p1] = self.pkey.to_be_bytes();
        b[2] = p0;
        b[3] = p1;
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        let [_, q0, q1, q2] = (self.dest_qp & QPN_MASK).to_be_bytes();
        b[5] = q0;
        b[6] = q1;
        b[7] = q2;
        b[8] = u8::from(self.ack_req) << 7;
        let [_, s0, s1, s2] = self.psn.value().to_be_bytes();
        b[9] = s0;
        b[10] = s1;
        b[11] = s2;
        b
    }

    /// Writes the BTH at the start of `out`; returns [`Bth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        write_bytes(out, 0, &self.to_bytes())?;
        Ok(Bth::LEN)
    }
}

/// The IBA P_Key match rule between a packet's BTH:P_Key and the receiving QP's P_Key: the
/// low 15 bits (the partition) are equal and not zero (0x0000 and 0x8000 are invalid P_Keys),
/// and at least one of the two is a full member (top bit set); two limited members may not
/// talk to each other.
pub const fn pkey_matches(packet: u16, qp: u16) -> bool {
    let base = packet & 0x7FFF;
    base != 0 && base == qp & 0x7FFF && (packet | qp) & 0x8000 != 0
}

/// The BTH fields that do not depend on the opcode, decoded from a packet whose opcode
/// [`Opcode::from_u8`] does not know: enough for the receive path to find the QP and answer a
/// reserved or unsupported RC opcode with the NAK of seed 001 (Table 17-7), although the
/// headers behind the BTH cannot be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBth {
    /// BTH:OpCode, any value.
    pub opcode: u8,
    /// BTH:M (MigReq).
    pub mig_req: bool,
    /// BTH:TVer.
    pub tver: u8,
    /// BTH:P_Key.
    pub pkey: u16,
    /// BTH:DestQP.
    pub dest_qp: u32,
    /// BTH:A (AckReq).
    pub ack_req: bool,
    /// BTH:PSN.
    pub psn: Psn,
}

impl RawBth {
    /// Decodes the BTH at the start of `buf` without looking at the opcode.
    pub fn decode(buf: &[u8]) -> Result<RawBth, DecodeError> {
        let b: [u8; Bth::LEN] = read_array(buf, 0).ok_or(DecodeError::Truncated)?;
        Ok(RawBth {
            opcode: b[0],
            mig_req: b[1] & 0x40 != 0,
            tver: b[1] & 0x0F,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]])),
        })
    }

    /// True when the opcode lies in the RC range (top three bits `000`, IBA Table 38): an RC
    /// QP must answer it even when it is reserved.
    pub const fn is_rc_range(&self) -> bool {
        self.opcode >> 5 == 0
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn bit_positions_match_iba_9_2() {
        let bth = Bth {
            opcode: Opcode::RcSendOnly,
            solicited: true,
            mig_req: true,
            pad_count: 3,
            tver: 0,
            pkey: 0xFFFF,
            fecn: true,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: true,
            psn: Psn::new(0xAB_CDEF),
        };
        assert_eq!(
            bth.to_bytes(),
            [0x04, 0xF0, 0xFF, 0xFF, 0x80, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF]
        );
        assert_eq!(Bth::decode(&bth.to_bytes()), Ok(bth));
    }

    #[test]
    fn reserved_bits_are_ignored_on_decode() {
        let bytes = [0x11, 0x00, 0x12, 0x34, 0x3F, 0, 0, 1, 0x7F, 0, 0, 2];
        let bth = Bth::decode(&bytes).unwrap();
        assert!(!bth.fecn && !bth.becn && !bth.ack_req);
        assert_eq!(bth.dest_qp, 1);
        assert_eq!(bth.psn, Psn::new(2));
        assert_eq!(bth.to_bytes()[4], 0);
        assert_eq!(bth.to_bytes()[8], 0);
    }

    #[test]
    fn pkey_match_rule() {
        assert!(pkey_matches(0xFFFF, 0xFFFF));
        assert!(pkey_matches(0x7FFF, 0xFFFF));
        assert!(pkey_matches(0xFFFF, 0x7FFF));
        assert!(!pkey_matches(0x7FFF, 0x7FFF));
        assert!(!pkey_matches(0x8001, 0xFFFF));
        assert!(!pkey_matches(0x8000, 0x8000));
        assert!(!pkey_matches(0x0000, 0x8000));
        assert!(pkey_matches(0x8123, 0x0123));
    }

    #[test]
    fn raw_bth_reads_the_common_fields_of_any_opcode() {
        let mut b = Bth::new(Opcode::RcSendOnly, 0x12_3456, Psn::new(0xAB_CDEF));
        b.mig_req = true;
        b.ack_req = true;
        b.pkey = 0x8001;
        let mut bytes = b.to_bytes();
        bytes[0] = 0x1A;
        let r = RawBth::decode(&bytes).unwrap();
        assert_eq!(
            (r.opcode, r.mig_req, r.tver, r.pkey, r.dest_qp, r.ack_req, r.psn),
            (0x1A, true, 0, 0x8001, 0x12_3456, true, Psn::new(0xAB_CDEF))
        );
        assert!(r.is_rc_range());
        bytes[0] = 0x20;
        assert!(!RawBth::decode(&bytes).unwrap().is_rc_range());
        assert_eq!(RawBth::decode(&bytes[..11]), Err(DecodeError::Truncated));
    }

    #[test]
    fn decode_rejects_short_and_unknown() {
        assert_eq!(Bth::decode(&[0x04; 11]), Err(DecodeError::Truncated));
        assert_eq!(
            Bth::decode(&[0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::UnknownOpcode(0x15))
        );
        let mut out = [0u8; 11];
        assert_eq!(
            Bth::new(Opcode::RcSendOnly, 1, Psn::ZERO).encode(&mut out),
            Err(EncodeError::BufferTooSmall)
        );
    }
}
