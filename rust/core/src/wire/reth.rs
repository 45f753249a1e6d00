//! RDMA Extended Transport Header (RETH, IBA 9.3.3), 16 bytes: in RDMA Write First/Only and
//! RDMA Read Request packets.
//!
//! ```text
//! bytes 0-7   Virtual Address
//! bytes 8-11  R_Key
//! bytes 12-15 DMA Length
//! ```

use super::{read_u32, read_u64, write_bytes, DecodeError, EncodeError};

/// RDMA Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reth {
    /// RETH:VA, the remote virtual address of the first byte.
    pub va: u64,
    /// RETH:R_Key, the remote key authorising the access.
    pub rkey: u32,
    /// RETH:DMA Length, the length in bytes of the whole RDMA message.
    pub dma_len: u32,
}

impl Reth {
    /// Encoded length in bytes.
    pub const LEN: usize = 16;

    /// Decodes the RETH at the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Reth, DecodeError> {
        let (Some(va), Some(rkey), Some(dma_len)) =
            (read_u64(buf, 0), read_u32(buf, 8), read_u32(buf, 12))
        else {
            return Err(DecodeError::Truncated);
        };
        Ok(Reth { va, rkey, dma_len })
    }

    /// Writes the RETH at the start of `out`; returns [`Reth::LEN`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if out.len() < Reth::LEN {
            return Err(EncodeError::BufferTooSmall);
        }
        write_bytes(out, 0, &self.va.to_be_bytes())?;
        write_bytes(out, 8, &self.rkey.to_be_bytes())?;
        write_bytes(out, 12, &self.dma_len.to_be_bytes())?;
        Ok(Reth::LEN)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn layout_is_va_rkey_len_big_endian() {
        let r = Reth {
            va: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            dma_len: 0x5566_7788,
        };
        let mut b = [0u8; 16];
        assert_eq!(r.encode(&mut b), Ok(16));
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        assert_eq!(Reth::decode(&b), Ok(r));
        assert_eq!(Reth::decode(&b[..15]), Err(DecodeError::Truncated));
        assert_eq!(r.encode(&mut b[..15]), Err(EncodeError::BufferTooSmall));
    }
}
