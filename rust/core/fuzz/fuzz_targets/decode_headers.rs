//! Feeds arbitrary bytes (a UDP payload: BTH .. ICRC) to `Headers::decode`; whatever decodes must
//! be consistent, re-encode to the same bytes (reserved bits aside) and decode again to the same
//! value; the receive path's `Glance` at the same bytes must agree with it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rvrdma_core::wire::{DecodeError, Glance, Headers, Operation, ICRC_LEN};

fuzz_target!(|data: &[u8]| {
    let glance = Glance::of(data);
    let (h, range) = match Headers::decode(data) {
        Ok(d) => d,
        Err(DecodeError::UnknownOpcode(_)) => {
            assert_eq!(glance, None);
            return;
        }
        Err(_) => return,
    };
    let g = glance.expect("a packet that decodes has a glance");
    assert_eq!((g.opcode, g.dest_qp), (h.bth.opcode, h.bth.dest_qp));
    let bulk = match (h.info().operation, h.reth) {
        (Operation::RdmaReadRequest, Some(r)) => r.dma_len as usize,
        _ => range.len(),
    };
    assert_eq!(g.bulk_len, bulk);
    assert!(h.is_consistent());
    assert!(range.start == h.encoded_len());
    assert!(range.start <= range.end && range.end + ICRC_LEN <= data.len());
    let payload_and_pad = data.len() - ICRC_LEN - range.start;
    assert_eq!(payload_and_pad % 4, 0);
    assert_eq!(range.len() + usize::from(h.bth.pad_count), payload_and_pad);

    let mut out = [0u8; 64];
    let n = h.encode(&mut out).expect("decoded headers must re-encode");
    assert_eq!(n, h.encoded_len());

    // The encoding equals the input with the reserved bits cleared.
    let mut expect = data[..n].to_vec();
    expect[4] &= 0xC0; // BTH: FECN, BECN kept; resv6 cleared
    expect[8] &= 0x80; // BTH: AckReq kept; resv7 cleared
    if h.deth.is_some() {
        expect[12 + 4] = 0; // DETH reserved byte
    }
    if h.feth.is_some() {
        // FETH: all but Selectivity Level and Placement Type (the low six bits) reserved.
        let at = 12 + if h.deth.is_some() { 8 } else { 0 };
        expect[at..at + 3].fill(0);
        expect[at + 3] &= 0x3F;
    }
    assert_eq!(&out[..n], &expect[..]);

    let mut again = out[..n].to_vec();
    again.extend_from_slice(&data[n..]);
    assert_eq!(Headers::decode(&again), Ok((h, range)));
});
