//! A glance at a received packet's BTH: what the receive path needs to choose where the packet
//! is handled (at once, or queued to its QP), without decoding the rest of its headers. A packet
//! that is queued has them decoded, and is checked in full, where it is handled.

use super::bth::Bth;
use super::opcode::{Opcode, Operation};
use super::reth::Reth;
use super::{read_array, read_u32, ICRC_LEN};

/// What the first bytes of a packet's UDP payload tell of it. Only the BTH's length and the
/// opcode are checked: [`super::Headers::decode`] still decides whether the packet is
/// well-formed (a packet queued on its glance may still be dropped as malformed), and agrees
/// with these fields whenever it succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Glance {
    /// BTH:OpCode, one the decoder knows.
    pub opcode: Opcode,
    /// BTH:DestQP.
    pub dest_qp: u32,
    /// The bytes handling the packet moves: for an RDMA Read request the DMA length its RETH
    /// asks for, else its payload's length (0 when the buffer is too short to hold one, or its
    /// pad or payload is one the decoder refuses).
    pub bulk_len: usize,
}

impl Glance {
    /// Glances at `buf`, from the first byte of the BTH to the last byte of the ICRC. `None`
    /// when it is shorter than a BTH or the opcode is unknown (the caller decodes such a
    /// packet in full, to answer or count it).
    pub fn of(buf: &[u8]) -> Option<Glance> {
        Self::of_prefix(buf, buf.len())
    }

    /// [`Glance::of`] a UDP payload of `len` bytes of which `head` holds the first (the rest
    /// lies elsewhere, in pages): the headers are read from `head`, the payload's length
    /// follows from `len`. A `head` too short for the headers a field needs reads as a
    /// shorter packet would.
    pub fn of_prefix(head: &[u8], len: usize) -> Option<Glance> {
        let buf = head.get(..len).unwrap_or(head);
        let b: [u8; Bth::LEN] = read_array(buf, 0)?;
        let opcode = Opcode::from_u8(b[0])?;
        let info = opcode.info();
        let bulk_len = if info.operation == Operation::RdmaReadRequest && info.has_reth {
            // The RETH follows the BTH, after a DETH and a FETH when the opcode has them.
            let off = Bth::LEN
                + if info.has_deth { super::Deth::LEN } else { 0 }
                + if info.has_feth { super::Feth::LEN } else { 0 };
            read_u32(buf, off + Reth::LEN - 4).map_or(0, |n| n as usize)
        } else {
            // What the decoder would refuse moves nothing: a payload where the opcode has none,
            // or a pad that does not fit or leaves payload + pad not a multiple of 4 (so a
            // malformed packet is not queued on its size).
            let pad = usize::from((b[1] >> 4) & 0x3);
            let rest = len.saturating_sub(info.header_len + ICRC_LEN);
            if !info.has_payload || pad > rest || rest & 3 != 0 || buf.len() < info.header_len {
                0
            } else {
                rest - pad
            }
        };
        Some(Glance {
            opcode,
            dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            bulk_len,
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;
    use crate::psn::Psn;
    use crate::wire::Headers;

    fn packet(op: Opcode, reth_len: u32, payload: usize, pad: u8) -> std::vec::Vec<u8> {
        let bth = Bth {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad_count: pad,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 0x12_3456,
            ack_req: false,
            psn: Psn::new(7),
        };
        let mut h = Headers::new(bth);
        if op.info().has_reth {
            h.reth = Some(Reth {
                va: 0x1000,
                rkey: 9,
                dma_len: reth_len,
            });
        }
        let mut buf = vec![0u8; op.info().header_len + payload + usize::from(pad) + ICRC_LEN];
        h.encode(&mut buf).unwrap();
        buf
    }

    #[test]
    fn reads_opcode_dest_qp_and_payload_length() {
        let buf = packet(Opcode::RcRdmaWriteMiddle, 0, 1024, 0);
        let g = Glance::of(&buf).unwrap();
        assert_eq!(
            g,
            Glance {
                opcode: Opcode::RcRdmaWriteMiddle,
                dest_qp: 0x12_3456,
                bulk_len: 1024
            }
        );
        // The pad bytes are not payload.
        let buf = packet(Opcode::RcSendLast, 0, 1021, 3);
        assert_eq!(Glance::of(&buf).unwrap().bulk_len, 1021);
        let buf = packet(Opcode::RcRdmaWriteFirst, 4096, 512, 0);
        assert_eq!(Glance::of(&buf).unwrap().bulk_len, 512);
    }

    #[test]
    fn a_packet_the_decoder_refuses_moves_nothing() {
        // Payload and pad not a multiple of 4.
        let buf = packet(Opcode::RcRdmaWriteMiddle, 0, 1023, 0);
        assert!(Headers::decode(&buf).is_err());
        assert_eq!(Glance::of(&buf).unwrap().bulk_len, 0);
        // A payload behind an opcode that carries none.
        let mut buf = packet(Opcode::RcSendOnly, 0, 1024, 0);
        buf[0] = Opcode::RcCompareSwap.as_u8();
        assert!(Headers::decode(&buf).is_err());
        assert_eq!(Glance::of(&buf).unwrap().bulk_len, 0);
    }

    #[test]
    fn a_read_request_moves_its_dma_length() {
        let buf = packet(Opcode::RcRdmaReadRequest, 65536, 0, 0);
        assert_eq!(Glance::of(&buf).unwrap().bulk_len, 65536);
        // Cut inside the RETH: nothing to move.
        assert_eq!(Glance::of(&buf[..Bth::LEN + 8]).unwrap().bulk_len, 0);
    }

    #[test]
    fn a_prefix_holding_the_headers_glances_as_the_whole() {
        for (op, reth, payload, pad) in [
            (Opcode::RcRdmaWriteMiddle, 0, 1024, 0),
            (Opcode::RcRdmaWriteFirst, 4096, 1024, 0),
            (Opcode::RcSendLast, 0, 1021, 3),
            (Opcode::RcRdmaReadRequest, 65536, 0, 0),
            (Opcode::RcRdmaWriteMiddle, 0, 1023, 0),
        ] {
            let buf = packet(op, reth, payload, pad);
            let whole = Glance::of(&buf);
            let hl = op.info().header_len;
            assert_eq!(Glance::of_prefix(&buf[..hl], buf.len()), whole);
            // A head past the packet's end reads only the packet.
            let mut longer = buf.clone();
            longer.extend_from_slice(&[0; 8]);
            assert_eq!(Glance::of_prefix(&longer, buf.len()), whole);
        }
        // A head cut inside the headers moves nothing, as a packet cut there would.
        let buf = packet(Opcode::RcRdmaWriteFirst, 4096, 1024, 0);
        let g = Glance::of_prefix(&buf[..Bth::LEN + 4], buf.len()).unwrap();
        assert_eq!(g.bulk_len, 0);
        assert_eq!(g.opcode, Opcode::RcRdmaWriteFirst);
    }

    #[test]
    fn short_buffers_and_unknown_opcodes_get_no_glance() {
        let buf = packet(Opcode::RcSendOnly, 0, 8, 0);
        assert!(Glance::of(&buf[..Bth::LEN - 1]).is_none());
        // Cut before its ICRC: no payload to move.
        assert_eq!(Glance::of(&buf[..Bth::LEN + 2]).unwrap().bulk_len, 0);
        let mut buf = buf;
        buf[0] = 0x1F; // reserved in the RC range
        assert!(Glance::of(&buf).is_none());
    }
}
