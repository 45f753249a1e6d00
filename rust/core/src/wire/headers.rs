//! The whole transport header stack of a RoCEv2 packet: everything after the UDP header.
//!
//! ```text
//! BTH | [DETH] | [FETH] | [RETH] | [AtomicETH] | [AETH] | [AtomicAckETH] | [ImmDt] | [IETH] | payload | pad | ICRC
//! ```
//!
//! Which extension headers are present is dictated by BTH:OpCode ([`OpcodeInfo`]); the payload
//! is followed by BTH:PadCnt pad bytes that bring it to a multiple of 4, then the 4-byte ICRC.

use core::ops::Range;

use super::aeth::Aeth;
use super::atomic_eth::{AtomicAckEth, AtomicEth};
use super::bth::Bth;
use super::deth::Deth;
use super::feth::Feth;
use super::imm::{Ieth, ImmDt};
use super::opcode::OpcodeInfo;
use super::reth::Reth;
use super::{pad_count, DecodeError, EncodeError, ICRC_LEN};

/// A decoded header stack: the BTH and each extension header the opcode calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Base Transport Header.
    pub bth: Bth,
    /// Datagram ETH (UD).
    pub deth: Option<Deth>,
    /// FLUSH ETH (FLUSH).
    pub feth: Option<Feth>,
    /// RDMA ETH (RDMA Write First/Only, RDMA Read Request, FLUSH, ATOMIC WRITE).
    pub reth: Option<Reth>,
    /// Atomic ETH (Compare & Swap, Fetch & Add).
    pub atomic_eth: Option<AtomicEth>,
    /// ACK ETH (Acknowledge, Atomic Acknowledge, RDMA Read Response First/Last/Only).
    pub aeth: Option<Aeth>,
    /// Atomic ACK ETH (Atomic Acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data (… with Immediate, last/only packet).
    pub immdt: Option<ImmDt>,
    /// Invalidate ETH (Send with Invalidate, last/only packet).
    pub ieth: Option<Ieth>,
}

impl Headers {
    /// A header stack with `bth` and no extension headers (fill in the ones the opcode needs).
    pub const fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// What the BTH opcode dictates.
    pub const fn info(&self) -> OpcodeInfo {
        self.bth.opcode.info()
    }

    /// True when exactly the extension headers the opcode dictates are present.
    pub const fn is_consistent(&self) -> bool {
        let i = self.info();
        i.has_deth == self.deth.is_some()
            && i.has_feth == self.feth.is_some()
            && i.has_reth == self.reth.is_some()
            && i.has_atomic_eth == self.atomic_eth.is_some()
            && i.has_aeth == self.aeth.is_some()
            && i.has_atomic_ack_eth == self.atomic_ack_eth.is_some()
            && i.has_immdt == self.immdt.is_some()
            && i.has_ieth == self.ieth.is_some()
    }

    /// Bytes [`Headers::encode`] writes: BTH plus the extension headers of the opcode.
    pub const fn encoded_len(&self) -> usize {
        self.info().header_len
    }

    /// Bytes of the whole packet after the UDP header for a payload of `payload_len` bytes:
    /// headers, payload, pad bytes (see [`pad_count`]) and ICRC. `None` on overflow.
    pub const fn packet_len(&self, payload_len: usize) -> Option<usize> {
        let pad = pad_count(payload_len) as usize;
        match payload_len.checked_add(pad + ICRC_LEN + self.encoded_len()) {
            Some(n) => Some(n),
            None => None,
        }
    }

    /// Decodes a packet. `buf` spans from the first byte of the BTH to the last byte of the
    /// ICRC (the UDP payload). Returns the headers and the byte range of the payload within
    /// `buf`, which excludes the pad bytes and the ICRC. The ICRC itself is not checked here
    /// (see [`crate::icrc`]).
    ///
    /// Checks: the opcode is known; `buf` holds the headers the opcode dictates plus the ICRC;
    /// BTH:PadCnt fits and payload + pad is a multiple of 4; opcodes without payload carry none.
    /// Reserved bits are ignored. Never panics.
    pub fn decode(buf: &[u8]) -> Result<(Headers, Range<usize>), DecodeError> {
        let mut h = Headers::new(Bth::decode(buf)?);
        let range = h.decode_after_bth(buf)?;
        Ok((h, range))
    }

    /// The rest of [`Headers::decode`] for headers whose `bth` is already the one decoded from
    /// `buf` (BTH .. ICRC): decodes the extension headers its opcode dictates into `self`, every
    /// one of them written (absent ones as `None`), and returns the payload's range. A receive
    /// path decodes the BTH first and builds the headers where they stay (a header stack moved
    /// by value is a `memcpy` a packet); on an error `self` holds nothing meaningful.
    pub fn decode_after_bth(&mut self, buf: &[u8]) -> Result<Range<usize>, DecodeError> {
        self.decode_after_bth_of_prefix(buf, buf.len())
    }

    /// [`Headers::decode_after_bth`] of a buffer of `len` bytes of which `head` holds the
    /// first (the rest lies elsewhere, in pages): the headers are read from `head`, which must
    /// hold them all ([`DecodeError::Truncated`] otherwise); the payload's range follows from
    /// `len`.
    pub fn decode_after_bth_of_prefix(
        &mut self,
        head: &[u8],
        len: usize,
    ) -> Result<Range<usize>, DecodeError> {
        let info = self.bth.opcode.info();
        let min = info.header_len + ICRC_LEN;
        if len < min || head.len() < info.header_len {
            return Err(DecodeError::Truncated);
        }
        let buf = head.get(..len).unwrap_or(head);
        let mut off = Bth::LEN;
        /// Decodes the header `$t` at `off` if `$has`, moving `off` past it.
        macro_rules! ext {
            ($has:expr, $t:ty) => {
                if $has {
                    let x = <$t>::decode(tail(buf, off))?;
                    off += <$t>::LEN;
                    Some(x)
                } else {
                    None
                }
            };
        }
        self.deth = ext!(info.has_deth, Deth);
        self.feth = ext!(info.has_feth, Feth);
        self.reth = ext!(info.has_reth, Reth);
        self.atomic_eth = ext!(info.has_atomic_eth, AtomicEth);
        self.aeth = ext!(info.has_aeth, Aeth);
        self.atomic_ack_eth = ext!(info.has_atomic_ack_eth, AtomicAckEth);
        self.immdt = ext!(info.has_immdt, ImmDt);
        self.ieth = ext!(info.has_ieth, Ieth);
        // buf.len() >= header_len + ICRC_LEN and off == header_len, so this cannot underflow;
        // checked anyway so that no input can make it panic.
        let rest = len
            .checked_sub(off)
            .and_then(|r| r.checked_sub(ICRC_LEN))
            .ok_or(DecodeError::Truncated)?;
        let pad = usize::from(self.bth.pad_count);
        if pad > rest || rest % 4 != 0 {
            return Err(DecodeError::BadPadding);
        }
        if !info.has_payload && rest != 0 {
            return Err(DecodeError::UnexpectedPayload);
        }
        let payload_len = rest - pad;
        Ok(off..off + payload_len)
    }

    /// Like [`Headers::decode`], returning the payload as a sub-slice of `buf`.
    pub fn decode_with_payload(buf: &[u8]) -> Result<(Headers, &[u8]), DecodeError> {
        let (h, range) = Headers::decode(buf)?;
        let payload = buf.get(range).ok_or(DecodeError::Truncated)?;
        Ok((h, payload))
    }

    /// Writes the headers (BTH and extension headers, not payload, pad or ICRC) at the start of
    /// `out` and returns the number of bytes written, [`Headers::encoded_len`].
    ///
    /// Fails with [`EncodeError::HeaderMismatch`] unless exactly the extension headers the opcode
    /// dictates are present, and with [`EncodeError::BufferTooSmall`] when `out` is too short.
    /// Fields wider than their wire field (24-bit QPNs and MSN, 2-bit PadCnt, 4-bit TVer, 5-bit
    /// syndrome values) are truncated to it. The caller sets BTH:PadCnt, e.g. with
    /// [`pad_count`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.encode_with(&self.bth, out)
    }

    /// [`Headers::encode`] with BTH:PadCnt set for a payload of `payload_len` bytes
    /// ([`pad_count`]), whatever `self.bth.pad_count` holds: a sender need not copy the whole
    /// header stack to set it.
    pub fn encode_for_payload(
        &self,
        payload_len: usize,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        let bth = Bth {
            pad_count: pad_count(payload_len),
            ..self.bth
        };
        self.encode_with(&bth, out)
    }

    /// [`Headers::encode`] with `bth` in place of `self.bth`.
    fn encode_with(&self, bth: &Bth, out: &mut [u8]) -> Result<usize, EncodeError> {
        if !self.is_consistent() {
            return Err(EncodeError::HeaderMismatch);
        }
        let len = self.encoded_len();
        if out.len() < len {
            return Err(EncodeError::BufferTooSmall);
        }
        let mut off = bth.encode(out)?;
        if let Some(x) = &self.deth {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.feth {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.reth {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.atomic_eth {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.aeth {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.atomic_ack_eth {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.immdt {
            off += x.encode(tail_mut(out, off))?;
        }
        if let Some(x) = &self.ieth {
            off += x.encode(tail_mut(out, off))?;
        }
        Ok(off)
    }
}

/// `buf[off..]`, or empty when `off` is past the end.
fn tail(buf: &[u8], off: usize) -> &[u8] {
    buf.get(off..).unwrap_or(&[])
}

/// `out[off..]`, or empty when `off` is past the end.
fn tail_mut(out: &mut [u8], off: usize) -> &mut [u8] {
    out.get_mut(off..).unwrap_or(&mut [])
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::psn::Psn;
    use crate::wire::aeth::NakCode;
    use crate::wire::opcode::Opcode;

    /// Headers with every extension the opcode needs, filled with recognisable values.
    fn full(op: Opcode) -> Headers {
        let i = op.info();
        let mut h = Headers::new(Bth::new(op, 0x11, Psn::new(0x22)));
        if i.has_deth {
            h.deth = Some(Deth {
                qkey: 0x8001_0000,
                src_qp: 3,
            });
        }
        if i.has_feth {
            h.feth = Some(Feth {
                placement: 3,
                selectivity: 1,
            });
        }
        if i.has_reth {
            h.reth = Some(Reth {
                va: 0x1000,
                rkey: 0x55,
                dma_len: 4096,
            });
        }
        if i.has_atomic_eth {
            h.atomic_eth = Some(AtomicEth {
                va: 0x2000,
                rkey: 0x66,
                swap_add: 7,
                compare: 8,
            });
        }
        if i.has_aeth {
            h.aeth = Some(Aeth::nak(9, NakCode::InvalidRequest));
        }
        if i.has_atomic_ack_eth {
            h.atomic_ack_eth = Some(AtomicAckEth { orig: 10 });
        }
        if i.has_immdt {
            h.immdt = Some(ImmDt { imm: 11 });
        }
        if i.has_ieth {
            h.ieth = Some(Ieth { rkey: 12 });
        }
        h
    }

    fn packet(h: &Headers, payload: &[u8]) -> Vec<u8> {
        let mut h = *h;
        h.bth.pad_count = pad_count(payload.len());
        let mut v = std::vec![0u8; h.encoded_len()];
        assert_eq!(h.encode(&mut v), Ok(h.encoded_len()));
        v.extend_from_slice(payload);
        v.extend(core::iter::repeat_n(0u8, usize::from(h.bth.pad_count)));
        v.extend_from_slice(&[0xAA; ICRC_LEN]);
        assert_eq!(Some(v.len()), h.packet_len(payload.len()));
        v
    }

    #[test]
    fn every_opcode_round_trips_with_and_without_payload() {
        for op in Opcode::ALL {
            let h = full(op);
            let payload: &[u8] = if op.info().has_payload { b"hello" } else { b"" };
            let pkt = packet(&h, payload);
            let (d, range) = Headers::decode(&pkt).unwrap();
            assert_eq!(d.bth.pad_count, pad_count(payload.len()));
            let mut expect = h;
            expect.bth.pad_count = pad_count(payload.len());
            assert_eq!(d, expect, "{op:?}");
            assert_eq!(&pkt[range], payload);
        }
    }

    #[test]
    fn extension_order_deth_reth_atomic_aeth_atomicack_imm_ieth() {
        let h = full(Opcode::UdSendOnlyWithImmediate);
        let pkt = packet(&h, b"");
        assert_eq!(&pkt[12..20], &[0x80, 0x01, 0, 0, 0, 0, 0, 3]);
        assert_eq!(&pkt[20..24], &[0, 0, 0, 11]);
        let h = full(Opcode::RcAtomicAcknowledge);
        let pkt = packet(&h, b"");
        assert_eq!(&pkt[12..16], &[0x61, 0, 0, 9]);
        assert_eq!(&pkt[16..24], &[0, 0, 0, 0, 0, 0, 0, 10]);
        let h = full(Opcode::RcRdmaWriteOnlyWithImmediate);
        let pkt = packet(&h, b"");
        assert_eq!(&pkt[24..28], &[0, 0, 0x10, 0]); // RETH DMA length
        assert_eq!(&pkt[28..32], &[0, 0, 0, 11]); // then ImmDt
        let h = full(Opcode::RcFlush);
        let pkt = packet(&h, b"");
        assert_eq!(pkt.len(), 12 + 4 + 16 + 4);
        assert_eq!(&pkt[12..16], &[0, 0, 0, 0x13]); // FETH first
        assert_eq!(&pkt[16..24], &[0, 0, 0, 0, 0, 0, 0x10, 0]); // then RETH VA
    }

    #[test]
    fn decode_rejects_truncated_bad_pad_and_unexpected_payload() {
        let pkt = packet(&full(Opcode::RcRdmaWriteFirst), b"abcd");
        for n in 0..(12 + 16 + 4) {
            assert_eq!(
                Headers::decode(&pkt[..n]),
                Err(DecodeError::Truncated),
                "{n}"
            );
        }
        // Pad count larger than what follows the headers.
        let mut p = packet(&full(Opcode::RcSendOnly), b"");
        p[1] |= 0x30;
        assert_eq!(Headers::decode(&p), Err(DecodeError::BadPadding));
        // Payload + pad not a multiple of 4.
        let mut p = packet(&full(Opcode::RcSendOnly), b"abcd");
        p.push(0);
        assert_eq!(Headers::decode(&p), Err(DecodeError::BadPadding));
        // ACK with trailing bytes.
        let mut p = packet(&full(Opcode::RcAcknowledge), b"");
        p.extend_from_slice(&[0; 4]);
        assert_eq!(Headers::decode(&p), Err(DecodeError::UnexpectedPayload));
        // Unknown opcode.
        let mut p = packet(&full(Opcode::RcSendOnly), b"");
        p[0] = 0x1F;
        assert_eq!(Headers::decode(&p), Err(DecodeError::UnknownOpcode(0x1F)));
    }

    /// Decoding into headers that held another packet's gives what decoding afresh gives: no
    /// extension header of the earlier packet survives, whatever the two opcodes.
    #[test]
    fn decode_after_bth_overwrites_every_header() {
        for before in Opcode::ALL {
            for op in Opcode::ALL {
                let payload: &[u8] = if op.info().has_payload {
                    b"abcdefg"
                } else {
                    b""
                };
                let pkt = packet(&full(op), payload);
                let mut out = full(before);
                out.bth = Bth::decode(&pkt).unwrap();
                let got = out.decode_after_bth(&pkt);
                let (h, range) = Headers::decode(&pkt).unwrap();
                assert_eq!(got, Ok(range), "{before:?} then {op:?}");
                assert_eq!(out, h, "{before:?} then {op:?}");
            }
        }
    }

    #[test]
    fn payload_excludes_pad_and_icrc() {
        let pkt = packet(&full(Opcode::RcSendOnly), b"abcdefg");
        assert_eq!(pkt.len(), 12 + 8 + 4);
        let (h, payload) = Headers::decode_with_payload(&pkt).unwrap();
        assert_eq!(h.bth.pad_count, 1);
        assert_eq!(payload, b"abcdefg");
    }

    #[test]
    fn encode_rejects_mismatched_extensions_and_short_buffers() {
        let mut h = full(Opcode::RcRdmaWriteFirst);
        h.reth = None;
        let mut out = [0u8; 64];
        assert_eq!(h.encode(&mut out), Err(EncodeError::HeaderMismatch));
        let mut h = full(Opcode::RcAcknowledge);
        h.immdt = Some(ImmDt { imm: 1 });
        assert_eq!(h.encode(&mut out), Err(EncodeError::HeaderMismatch));
        let h = full(Opcode::RcCompareSwap);
        assert_eq!(h.encode(&mut out[..39]), Err(EncodeError::BufferTooSmall));
        assert_eq!(h.encode(&mut out[..40]), Ok(40));
    }

    /// Encoding for a payload length writes what encoding a copy with BTH:PadCnt set for it
    /// writes, whatever PadCnt the headers hold, and checks as `encode` does.
    #[test]
    fn encode_for_payload_sets_only_the_pad_count() {
        for op in [
            Opcode::RcSendOnly,
            Opcode::RcRdmaWriteFirst,
            Opcode::UdSendOnlyWithImmediate,
        ] {
            for held in 0..4 {
                let mut h = full(op);
                h.bth.pad_count = held;
                for len in 0..9 {
                    let mut want = [0u8; 64];
                    let mut copy = h;
                    copy.bth.pad_count = pad_count(len);
                    let n = copy.encode(&mut want);
                    let mut got = [0xaa_u8; 64];
                    assert_eq!(h.encode_for_payload(len, &mut got), n);
                    let n = n.unwrap_or(0);
                    assert_eq!(got[..n], want[..n]);
                    assert_eq!(got[1] >> 4 & 3, pad_count(len));
                }
            }
        }
        let mut h = full(Opcode::RcRdmaWriteFirst);
        let mut out = [0u8; 64];
        assert_eq!(
            h.encode_for_payload(3, &mut out[..27]),
            Err(EncodeError::BufferTooSmall)
        );
        h.reth = None;
        assert_eq!(
            h.encode_for_payload(3, &mut out),
            Err(EncodeError::HeaderMismatch)
        );
    }
}
