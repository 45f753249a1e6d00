//! Wire formats of the InfiniBand transport headers carried by RoCEv2 (IBA chapter 9, RoCEv2
//! annex A17): everything after the UDP header, i.e. BTH, the extended transport headers that
//! the opcode calls for, the payload, the pad bytes and the 4-byte ICRC.
//!
//! All multi-byte fields are big-endian on the wire. Decoding never panics on any input; it
//! checks lengths and returns [`DecodeError`]. Encoding writes headers only (the caller appends
//! payload, pad bytes and the ICRC, see [`crate::icrc`]).

pub mod aeth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod feth;
pub mod glance;
pub mod headers;
pub mod imm;
pub mod ip_udp;
pub mod opcode;
pub mod reth;

pub use aeth::{Aeth, NakCode, Syndrome};
pub use atomic_eth::{AtomicAckEth, AtomicEth};
pub use bth::Bth;
pub use deth::Deth;
pub use feth::Feth;
pub use glance::Glance;
pub use headers::Headers;
pub use imm::{Ieth, ImmDt};
pub use opcode::{Opcode, OpcodeInfo, Operation, Position, Transport};
pub use reth::Reth;

/// The UDP destination port of RoCEv2 (IANA "roce").
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// Length of the invariant CRC that ends every RoCEv2 packet.
pub const ICRC_LEN: usize = crate::icrc::ICRC_LEN;

/// Why a byte buffer is not a well-formed header stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends before the headers (plus the ICRC) that the opcode calls for.
    Truncated,
    /// BTH:OpCode is reserved or belongs to a transport we do not speak (RD, CNP, ...).
    UnknownOpcode(u8),
    /// BTH:PadCnt is larger than the bytes between the headers and the ICRC, or payload + pad
    /// is not a multiple of 4 bytes.
    BadPadding,
    /// The opcode carries no payload (ACK, RDMA Read request, Atomic request) but bytes other
    /// than the ICRC follow its headers.
    UnexpectedPayload,
}

/// Why headers could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The output buffer is shorter than [`Headers::encoded_len`].
    BufferTooSmall,
    /// The set of extension headers present does not match what the BTH opcode dictates
    /// (e.g. an RDMA Write First without a RETH, or an ACK with a RETH).
    HeaderMismatch,
}

/// The pad count (BTH:PadCnt) for a payload of `payload_len` bytes: the number of bytes
/// (0..=3) that bring it to a multiple of 4.
pub const fn pad_count(payload_len: usize) -> u8 {
    ((4 - (payload_len % 4)) % 4) as u8
}

/// Reads `N` bytes at `off`, or `None` when `buf` is too short.
pub(crate) fn read_array<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    let end = off.checked_add(N)?;
    let s = buf.get(off..end)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Some(a)
}

/// Reads a big-endian `u32` at `off`.
pub(crate) fn read_u32(buf: &[u8], off: usize) -> Option<u32> {
    read_array::<4>(buf, off).map(u32::from_be_bytes)
}

/// Reads a big-endian `u64` at `off`.
pub(crate) fn read_u64(buf: &[u8], off: usize) -> Option<u64> {
    read_array::<8>(buf, off).map(u64::from_be_bytes)
}

/// Writes `bytes` at `off`; `BufferTooSmall` when they do not fit.
pub(crate) fn write_bytes(out: &mut [u8], off: usize, bytes: &[u8]) -> Result<(), EncodeError> {
    let end = off
        .checked_add(bytes.len())
        .ok_or(EncodeError::BufferTooSmall)?;
    let dst = out.get_mut(off..end).ok_or(EncodeError::BufferTooSmall)?;
    dst.copy_from_slice(bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn pad_count_brings_payload_to_4_bytes() {
        assert_eq!(pad_count(0), 0);
        assert_eq!(pad_count(1), 3);
        assert_eq!(pad_count(2), 2);
        assert_eq!(pad_count(3), 1);
        assert_eq!(pad_count(4), 0);
        assert_eq!(pad_count(usize::MAX), 1);
    }

    #[test]
    fn readers_reject_short_buffers() {
        assert_eq!(read_u32(&[1, 2, 3], 0), None);
        assert_eq!(read_u32(&[0, 1, 2, 3, 4], 1), Some(0x0102_0304));
        assert_eq!(read_u64(&[0; 8], usize::MAX), None);
        let mut out = [0u8; 2];
        assert_eq!(
            write_bytes(&mut out, 1, &[1, 2]),
            Err(EncodeError::BufferTooSmall)
        );
        assert_eq!(
            write_bytes(&mut out, usize::MAX, &[1]),
            Err(EncodeError::BufferTooSmall)
        );
    }
}
