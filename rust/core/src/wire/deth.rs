//! Datagram Extended Transport Header (DETH, IBA 9.3.2), 8 bytes: in every UD packet.
//!
//! ```text
//! bytes 0-3  Q_Key
//! byte 4     reserved
//! bytes 5-7  SrcQP
//! ```

use super::bth::QPN_MASK;
use super::{read_array, write_bytes, DecodeError, EncodeError};

/// Datagram Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Deth {
    /// DETH:Q_Key, checked against the destination QP's Q_Key.
    pub qkey: u32,
    /// DETH:SrcQP, the 24-bit sending queue pair number (only the low 24 bits are encoded).
    pub src_qp: u32,
}

impl Deth {
    /// Encoded length in bytes.
    pub const LEN: usize = 8;

    /// Decodes the DETH at the start of `buf` (the reserved byte is ignored).
    pub fn decode(buf: &[u8]) -> Result<Deth, DecodeError> {
        let b: [u8; Deth::LEN] = read_array(buf, 0).ok_or(DecodeError::Truncated)?;
        Ok(Deth {
            qkey: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            src_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
        })
    }

    /// Writes the DETH at the start of `out`; returns [`Deth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let [q0, q1, q2, q3] = self.qkey.to_be_bytes();
        let [_, s0, s1, s2] = (self.src_qp & QPN_MASK).to_be_bytes();
        write_bytes(out, 0, &[q0, q1, q2, q3, 0, s0, s1, s2])?;
        Ok(Deth::LEN)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn layout_is_qkey_reserved_srcqp() {
        let d = Deth {
            qkey: 0x8001_0000,
            src_qp: 0xAB_CDEF,
        };
        let mut b = [0xFFu8; 8];
        assert_eq!(d.encode(&mut b), Ok(8));
        assert_eq!(b, [0x80, 0x01, 0, 0, 0, 0xAB, 0xCD, 0xEF]);
        b[4] = 0x5A; // reserved byte ignored
        assert_eq!(Deth::decode(&b), Ok(d));
        assert_eq!(Deth::decode(&b[..7]), Err(DecodeError::Truncated));
        assert_eq!(d.encode(&mut b[..7]), Err(EncodeError::BufferTooSmall));
    }
}
