//! Immediate Data (ImmDt, IBA 9.3.5) and the Invalidate Extended Transport Header (IETH,
//! IBA 9.3.6), 4 bytes each.

use super::{read_u32, write_bytes, DecodeError, EncodeError};

/// Immediate data carried by Send/RDMA Write "with Immediate" (last or only packet).
///
/// The value is the 4 wire bytes read big-endian; the kernel's `__be32 imm_data` holds the same
/// bytes in memory, i.e. `u32::to_be(imm)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImmDt {
    /// The immediate value.
    pub imm: u32,
}

impl ImmDt {
    /// Encoded length in bytes.
    pub const LEN: usize = 4;

    /// Decodes the ImmDt at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<ImmDt, DecodeError> {
        let imm = read_u32(buf, 0).ok_or(DecodeError::Truncated)?;
        Ok(ImmDt { imm })
    }

    /// Writes the ImmDt at the start of `out`; returns [`ImmDt::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        write_bytes(out, 0, &self.imm.to_be_bytes())?;
        Ok(ImmDt::LEN)
    }
}

/// Invalidate Extended Transport Header: the R_Key the responder invalidates on a Send with
/// Invalidate (last or only packet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ieth {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Encoded length in bytes.
    pub const LEN: usize = 4;

    /// Decodes the IETH at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Ieth, DecodeError> {
        let rkey = read_u32(buf, 0).ok_or(DecodeError::Truncated)?;
        Ok(Ieth { rkey })
    }

    /// Writes the IETH at the start of `out`; returns [`Ieth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        write_bytes(out, 0, &self.rkey.to_be_bytes())?;
        Ok(Ieth::LEN)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn immdt_and_ieth_are_big_endian_words() {
        let mut b = [0u8; 4];
        assert_eq!(ImmDt { imm: 0xDEAD_BEEF }.encode(&mut b), Ok(4));
        assert_eq!(b, [0xDE, 0xAD, 0xBE, 0xEF]);
        assert_eq!(ImmDt::decode(&b), Ok(ImmDt { imm: 0xDEAD_BEEF }));
        assert_eq!(Ieth { rkey: 0x0102_0304 }.encode(&mut b), Ok(4));
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(Ieth::decode(&b), Ok(Ieth { rkey: 0x0102_0304 }));
        assert_eq!(ImmDt::decode(&b[..3]), Err(DecodeError::Truncated));
        assert_eq!(Ieth::decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(
            Ieth { rkey: 1 }.encode(&mut b[..3]),
            Err(EncodeError::BufferTooSmall)
        );
    }
}
