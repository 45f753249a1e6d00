//! FLUSH Extended Transport Header (FETH, IBA 1.5 9.3.8), 4 bytes: in the RC FLUSH request,
//! between the BTH and the RETH.
//!
//! ```text
//! bits 31-6   reserved
//! bits 5-4    Selectivity Level (0: memory range, 1: whole memory region)
//! bits 3-0    Placement Type (bit 0: global visibility, bit 1: persistence)
//! ```

use super::{read_u32, write_bytes, DecodeError, EncodeError};

/// Placement type bit: make the data globally visible (`IB_FLUSH_GLOBAL`).
pub const PLACEMENT_GLOBAL: u8 = 1;
/// Placement type bit: make the data persistent (`IB_FLUSH_PERSISTENT`).
pub const PLACEMENT_PERSISTENT: u8 = 1 << 1;
/// Selectivity level: the range named by the RETH (`IB_FLUSH_RANGE`).
pub const SELECT_RANGE: u8 = 0;
/// Selectivity level: the whole MR named by the RETH's R_Key (`IB_FLUSH_MR`).
pub const SELECT_MR: u8 = 1;

/// FLUSH Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Feth {
    /// FETH:PlT, the placement type (4 bits).
    pub placement: u8,
    /// FETH:SeL, the selectivity level (2 bits).
    pub selectivity: u8,
}

impl Feth {
    /// Encoded length in bytes.
    pub const LEN: usize = 4;

    /// Decodes the FETH at the start of `buf`; reserved bits are ignored.
    pub fn decode(buf: &[u8]) -> Result<Feth, DecodeError> {
        let Some(w) = read_u32(buf, 0) else {
            return Err(DecodeError::Truncated);
        };
        Ok(Feth {
            placement: (w & 0xF) as u8,
            selectivity: ((w >> 4) & 0x3) as u8,
        })
    }

    /// Writes the FETH at the start of `out`; returns [`Feth::LEN`]. Fields wider than their
    /// wire field are truncated to it.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let w = u32::from(self.placement & 0xF) | (u32::from(self.selectivity & 0x3) << 4);
        write_bytes(out, 0, &w.to_be_bytes())?;
        Ok(Feth::LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_rxe_feth() {
        let f = Feth {
            placement: PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT,
            selectivity: SELECT_MR,
        };
        let mut b = [0u8; 4];
        assert_eq!(f.encode(&mut b), Ok(4));
        assert_eq!(b, [0, 0, 0, 0x13]);
        assert_eq!(Feth::decode(&b), Ok(f));
        assert_eq!(
            Feth::decode(&[0xFF, 0xFF, 0xFF, 0xC2]),
            Ok(Feth {
                placement: 2,
                selectivity: 0
            })
        );
        assert_eq!(Feth::decode(&[0, 0, 0]), Err(DecodeError::Truncated));
        assert_eq!(f.encode(&mut [0u8; 3]), Err(EncodeError::BufferTooSmall));
    }
}
