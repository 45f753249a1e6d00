//! Atomic Extended Transport Header (AtomicETH, IBA 9.3.4), 28 bytes, in Compare & Swap and
//! Fetch & Add requests; and Atomic Acknowledge Extended Transport Header (AtomicAckETH,
//! IBA 9.5.3), 8 bytes, in Atomic Acknowledge responses.
//!
//! ```text
//! AtomicETH:    bytes 0-7 VA | 8-11 R_Key | 12-19 Swap (or Add) Data | 20-27 Compare Data
//! AtomicAckETH: bytes 0-7 Original Remote Data
//! ```

use super::{read_u32, read_u64, write_bytes, DecodeError, EncodeError};

/// Atomic Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// AtomicETH:VA, the remote address of the 64-bit operand (must be 8-byte aligned; a
    /// misaligned VA is a Class C error for the responder, seed 001).
    pub va: u64,
    /// AtomicETH:R_Key.
    pub rkey: u32,
    /// Swap Data (Compare & Swap) or Add Data (Fetch & Add).
    pub swap_add: u64,
    /// Compare Data (Compare & Swap; ignored by Fetch & Add).
    pub compare: u64,
}

impl AtomicEth {
    /// Encoded length in bytes.
    pub const LEN: usize = 28;

    /// Decodes the AtomicETH at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<AtomicEth, DecodeError> {
        let (Some(va), Some(rkey), Some(swap_add), Some(compare)) = (
            read_u64(buf, 0),
            read_u32(buf, 8),
            read_u64(buf, 12),
            read_u64(buf, 20),
        ) else {
            return Err(DecodeError::Truncated);
        };
        Ok(AtomicEth {
            va,
            rkey,
            swap_add,
            compare,
        })
    }

    /// Writes the AtomicETH at the start of `out`; returns [`AtomicEth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if out.len() < AtomicEth::LEN {
            return Err(EncodeError::BufferTooSmall);
        }
        write_bytes(out, 0, &self.va.to_be_bytes())?;
        write_bytes(out, 8, &self.rkey.to_be_bytes())?;
        write_bytes(out, 12, &self.swap_add.to_be_bytes())?;
        write_bytes(out, 20, &self.compare.to_be_bytes())?;
        Ok(AtomicEth::LEN)
    }
}

/// Atomic Acknowledge Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// The value of the remote operand before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Encoded length in bytes.
    pub const LEN: usize = 8;

    /// Decodes the AtomicAckETH at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<AtomicAckEth, DecodeError> {
        let orig = read_u64(buf, 0).ok_or(DecodeError::Truncated)?;
        Ok(AtomicAckEth { orig })
    }

    /// Writes the AtomicAckETH at the start of `out`; returns [`AtomicAckEth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        write_bytes(out, 0, &self.orig.to_be_bytes())?;
        Ok(AtomicAckEth::LEN)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn atomic_eth_layout() {
        let a = AtomicEth {
            va: 0x1000,
            rkey: 0xAABB_CCDD,
            swap_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
        };
        let mut b = [0u8; 28];
        assert_eq!(a.encode(&mut b), Ok(28));
        assert_eq!(&b[..8], &[0, 0, 0, 0, 0, 0, 0x10, 0]);
        assert_eq!(&b[8..12], &[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(&b[12..20], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            &b[20..28],
            &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
        );
        assert_eq!(AtomicEth::decode(&b), Ok(a));
        assert_eq!(AtomicEth::decode(&b[..27]), Err(DecodeError::Truncated));
        assert_eq!(a.encode(&mut b[..27]), Err(EncodeError::BufferTooSmall));
    }

    #[test]
    fn atomic_ack_eth_layout() {
        let a = AtomicAckEth {
            orig: 0xFEDC_BA98_7654_3210,
        };
        let mut b = [0u8; 8];
        assert_eq!(a.encode(&mut b), Ok(8));
        assert_eq!(b, [0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10]);
        assert_eq!(AtomicAckEth::decode(&b), Ok(a));
        assert_eq!(AtomicAckEth::decode(&b[..7]), Err(DecodeError::Truncated));
    }
}
