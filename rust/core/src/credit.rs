//! End-to-end flow control credits for RC (seed 003, IBA 9.7.7.2).
//!
//! The responder's RQ Logic reports how many receive WQEs it has posted as a 5-bit credit code in
//! the AETH of every positive ACK (Table 17-8). The requester's SQ Logic adds the credits to the
//! MSN carried in the same AETH to get the Limit Sequence Number (LSN): a new message that needs a
//! receive WQE at the responder (Send, RDMA Write with Immediate) may be started only while its
//! SSN is within the LSN. Code `0x1F` means "no credit information": the peer does not do
//! end-to-end flow control and the requester never throttles (Linux rdma_rxe sends `0x1F` in
//! every ACK).
//!
//! This file holds the arithmetic only; the engines own the per-QP state.

use crate::psn::{PSN_HALF_WINDOW, PSN_MASK};

/// The credit code meaning "invalid / no credit information supplied" (Table 17-8, `11111b`).
pub const CREDIT_CODE_INVALID: u8 = 0x1F;

/// Table 17-8: the number of credits (receive WQEs) each code `0x00..=0x1E` stands for.
pub const CREDIT_TABLE: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Decodes a 5-bit credit code (Table 17-8) into a number of credits. `None` for
/// [`CREDIT_CODE_INVALID`] (no credit information) and for values above `0x1F`, which are not
/// credit codes.
pub const fn decode_credit(code: u8) -> Option<u32> {
    let i = code as usize;
    if i < CREDIT_TABLE.len() {
        Some(CREDIT_TABLE[i])
    } else {
        None
    }
}

/// Encodes a credit count as the code of the largest Table 17-8 entry not above `count`
/// (so the responder never advertises more WQEs than it has). Counts of 32768 and above give
/// `0x1E`. Never returns [`CREDIT_CODE_INVALID`].
pub const fn encode_credit(count: u32) -> u8 {
    // Binary search over the (strictly increasing) table for the last entry <= count.
    let mut lo = 0usize; // CREDIT_TABLE[lo] <= count always holds (entry 0 is 0)
    let mut hi = CREDIT_TABLE.len(); // exclusive
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if CREDIT_TABLE[mid] <= count {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo as u8
}

/// Computes the LSN from an ACK's AETH: `LSN = MSN + credits` modulo 2^24 (seed 003,
/// "MSN + Credits = LSN"). `None` when the credit code is [`CREDIT_CODE_INVALID`] (or not a
/// 5-bit code): the ACK carries no limit.
pub const fn lsn_from_ack(msn: u32, credit_code: u8) -> Option<u32> {
    match decode_credit(credit_code) {
        Some(c) => Some(msn.wrapping_add(c) & PSN_MASK),
        None => None,
    }
}

/// True when `ssn` is within `lsn`, i.e. `ssn <= lsn` in 24-bit modular order (the SSN lies in
/// the half-window ending at `lsn`): a message with this SSN may be started even if it needs a
/// receive WQE (seed 003, "Unless the LSN is >= to their respective SSNs ...").
pub const fn ssn_within_lsn(ssn: u32, lsn: u32) -> bool {
    (lsn.wrapping_sub(ssn) & PSN_MASK) < PSN_HALF_WINDOW
}

/// The requester's view of the responder's end-to-end credits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreditLimit {
    /// The peer supplies no credits (its last ACK had code `0x1F`): never throttle.
    Unlimited,
    /// Messages that need a receive WQE may start while their SSN is within this 24-bit LSN.
    Lsn(u32),
}

impl CreditLimit {
    /// The state before any ACK arrived: MSN 0 and no credits, so LSN = 0 and the first WQE
    /// (SSN 1) is limited (seed 003, "Providing Initial Credits" / "SQ Logic's Behavior When No
    /// Credits Are Available").
    pub const INITIAL: CreditLimit = CreditLimit::Lsn(0);

    /// The limit described by one positive ACK's AETH (MSN and credit code), ignoring history.
    pub const fn from_ack(msn: u32, credit_code: u8) -> CreditLimit {
        match lsn_from_ack(msn, credit_code) {
            Some(lsn) => CreditLimit::Lsn(lsn),
            None => CreditLimit::Unlimited,
        }
    }

    /// Folds a positive ACK's MSN and credit code into the current limit and returns the new one.
    ///
    /// Code `0x1F` switches to [`CreditLimit::Unlimited`]. Otherwise the LSN computed from the
    /// ACK replaces the current one unless it lies before it: an older or duplicate ACK never
    /// withdraws credits already granted (the behaviour of Linux rdmavt's `rvt_get_credit`).
    pub const fn update(self, msn: u32, credit_code: u8) -> CreditLimit {
        match (self, lsn_from_ack(msn, credit_code)) {
            (_, None) => CreditLimit::Unlimited,
            (CreditLimit::Unlimited, Some(new)) => CreditLimit::Lsn(new),
            (CreditLimit::Lsn(old), Some(new)) => {
                if ssn_within_lsn(new, old) {
                    CreditLimit::Lsn(old)
                } else {
                    CreditLimit::Lsn(new)
                }
            }
        }
    }

    /// Adds one to the LSN, as the SQ Logic does for each posted WQE that needs no receive WQE at
    /// the responder (RDMA Read, RDMA Write without immediate, Atomic; seed 003, "LSN + 1 for
    /// Each SQ WQE That Doesn't Need RQ WQE"). No effect when unlimited.
    pub const fn bump(self) -> CreditLimit {
        match self {
            CreditLimit::Unlimited => CreditLimit::Unlimited,
            CreditLimit::Lsn(l) => CreditLimit::Lsn(l.wrapping_add(1) & PSN_MASK),
        }
    }

    /// True when a new message with this SSN may be started even though it needs a receive WQE.
    pub const fn allows(self, ssn: u32) -> bool {
        match self {
            CreditLimit::Unlimited => true,
            CreditLimit::Lsn(lsn) => ssn_within_lsn(ssn & PSN_MASK, lsn),
        }
    }

    /// True when the peer supplies no credits (never throttle).
    pub const fn is_unlimited(self) -> bool {
        matches!(self, CreditLimit::Unlimited)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn seed003_table_17_8_values() {
        let expected: [(u8, u32); 31] = [
            (0b00000, 0),
            (0b00001, 1),
            (0b00010, 2),
            (0b00011, 3),
            (0b00100, 4),
            (0b00101, 6),
            (0b00110, 8),
            (0b00111, 12),
            (0b01000, 16),
            (0b01001, 24),
            (0b01010, 32),
            (0b01011, 48),
            (0b01100, 64),
            (0b01101, 96),
            (0b01110, 128),
            (0b01111, 192),
            (0b10000, 256),
            (0b10001, 384),
            (0b10010, 512),
            (0b10011, 768),
            (0b10100, 1024),
            (0b10101, 1536),
            (0b10110, 2048),
            (0b10111, 3072),
            (0b11000, 4096),
            (0b11001, 6144),
            (0b11010, 8192),
            (0b11011, 12288),
            (0b11100, 16384),
            (0b11101, 24576),
            (0b11110, 32768),
        ];
        for (code, credits) in expected {
            assert_eq!(decode_credit(code), Some(credits), "code {code:#x}");
        }
    }

    #[test]
    fn seed003_table_17_8_round_trip() {
        for code in 0u8..0x1F {
            let c = decode_credit(code).unwrap();
            assert_eq!(encode_credit(c), code);
        }
    }

    #[test]
    fn seed003_code_11111b_is_invalid() {
        assert_eq!(decode_credit(CREDIT_CODE_INVALID), None);
        assert_eq!(decode_credit(0x20), None);
        assert_eq!(decode_credit(0xFF), None);
    }

    #[test]
    fn seed003_encode_rounds_down_to_table_entry() {
        assert_eq!(encode_credit(0), 0);
        assert_eq!(encode_credit(5), 0b00100); // 5 WQEs advertise 4
        assert_eq!(encode_credit(7), 0b00101); // 6
        assert_eq!(encode_credit(32767), 0b11101); // 24576
        assert_eq!(encode_credit(32768), 0b11110);
        assert_eq!(encode_credit(u32::MAX), 0b11110);
    }

    #[test]
    fn seed003_msn_plus_credits_is_lsn() {
        // Figure 17-18: MSN 0x18 + credit count 6 = LSN 0x1E.
        assert_eq!(lsn_from_ack(0x18, encode_credit(6)), Some(0x1E));
        let limit = CreditLimit::from_ack(0x18, encode_credit(6));
        assert!(limit.allows(0x1E)); // message 31
        assert!(!limit.allows(0x1F)); // message 32 is limited
                                      // "LSN + 1 for each SQ WQE that doesn't need an RQ WQE": two such WQEs give 0x20.
        assert_eq!(limit.bump().bump(), CreditLimit::Lsn(0x20));
    }

    #[test]
    fn seed003_lsn_wraps_at_24_bits() {
        assert_eq!(lsn_from_ack(0xFF_FFFE, encode_credit(4)), Some(2));
        assert!(ssn_within_lsn(0xFF_FFFF, 2));
        assert!(ssn_within_lsn(2, 2));
        assert!(!ssn_within_lsn(3, 2));
    }

    #[test]
    fn seed003_code_0x1f_never_throttles() {
        let limit = CreditLimit::INITIAL.update(0, CREDIT_CODE_INVALID);
        assert!(limit.is_unlimited());
        assert!(limit.allows(0x12_3456));
        assert_eq!(lsn_from_ack(5, CREDIT_CODE_INVALID), None);
    }

    #[test]
    fn seed003_no_initial_credits_limits_first_wqe() {
        // SSN of the first WQE is 1; with no ACK yet, LSN = MSN (0) + 0 credits.
        assert!(!CreditLimit::INITIAL.allows(1));
        // The initial unsolicited ACK (MSN 0, credits 2) opens SSN 1 and 2.
        let l = CreditLimit::INITIAL.update(0, encode_credit(2));
        assert!(l.allows(1) && l.allows(2) && !l.allows(3));
    }

    #[test]
    fn stale_ack_does_not_shrink_lsn() {
        let l = CreditLimit::Lsn(0x30).update(0x10, encode_credit(4));
        assert_eq!(l, CreditLimit::Lsn(0x30));
        let l = l.update(0x30, encode_credit(1));
        assert_eq!(l, CreditLimit::Lsn(0x31));
        // Leaving unlimited takes the ACK's LSN as is.
        assert_eq!(
            CreditLimit::Unlimited.update(0x10, encode_credit(0)),
            CreditLimit::Lsn(0x10)
        );
    }
}
