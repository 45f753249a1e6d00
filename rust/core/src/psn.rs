//! 24-bit packet sequence numbers (PSN) and the IBA windows built on them.
//!
//! IBA 9.7.5 ("Packet sequence numbers") makes the PSN a 24-bit counter that wraps from
//! `0xFF_FFFF` to `0`. Both ends split the PSN space in halves around a reference point:
//!
//! - the responder (RQ Logic, IBA 9.7.5.1.2 / 9.7.5.2) compares a request PSN with its expected
//!   PSN (ePSN): equal is the expected packet, the 2^23 PSNs *before* ePSN are duplicates and the
//!   2^23 − 1 PSNs *after* it are out of sequence (the "invalid" range);
//! - the requester (SQ Logic, IBA 9.7.5.1.1 / 9.7.5.2.1) compares a response PSN with the range
//!   of PSNs it has sent and not yet seen acknowledged: inside is valid, just before it is a
//!   duplicate, anything else is a "ghost".
//!
//! All arithmetic here wraps modulo 2^24 and never panics.

/// Mask of the 24 significant bits of a PSN (also used for MSN, SSN and LSN).
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// Half of the 24-bit sequence space: 2^23. A requester never has more than this many PSNs
/// outstanding, and the responder's duplicate window is this wide (IBA 9.7.5.1.2).
pub const PSN_HALF_WINDOW: u32 = 1 << 23;

/// A 24-bit packet sequence number (BTH:PSN). The upper 8 bits are always zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// PSN 0.
    pub const ZERO: Psn = Psn(0);
    /// The largest PSN, `0xFF_FFFF`; its successor is [`Psn::ZERO`].
    pub const MAX: Psn = Psn(PSN_MASK);

    /// Builds a PSN from the low 24 bits of `v` (the upper 8 bits are discarded).
    pub const fn new(v: u32) -> Psn {
        Psn(v & PSN_MASK)
    }

    /// The PSN as a number in `0..=0xFF_FFFF`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The next PSN (`self + 1` modulo 2^24).
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// The previous PSN (`self − 1` modulo 2^24).
    pub const fn prev(self) -> Psn {
        self.sub(1)
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self − n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The forward distance from `earlier` to `self`: `(self − earlier)` modulo 2^24, in
    /// `0..2^24`. Use it for "how many PSNs does the range `earlier..self` hold".
    pub const fn distance_from(self, earlier: Psn) -> u32 {
        self.0.wrapping_sub(earlier.0) & PSN_MASK
    }

    /// Signed distance `self − other` on the 24-bit circle, in `[-2^23, 2^23)`.
    ///
    /// Negative means `self` lies in the half-window before `other`, zero means equal, positive
    /// means `self` lies in the half-window after it (IBA 9.7.5's half-space comparison).
    pub const fn diff(self, other: Psn) -> i32 {
        let d = self.distance_from(other);
        if d >= PSN_HALF_WINDOW {
            // d in [2^23, 2^24): the result d - 2^24 is in [-2^23, 0); no overflow possible.
            (d as i32) - (1 << 24)
        } else {
            d as i32
        }
    }

    /// True when `self` lies in the half-window strictly before `other` (`diff < 0`).
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` lies in the half-window strictly after `other` (`diff > 0`).
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True when `self` equals `other` or lies before it (`diff <= 0`).
    pub const fn is_before_or_eq(self, other: Psn) -> bool {
        self.diff(other) <= 0
    }

    /// True when `self` equals `other` or lies after it (`diff >= 0`).
    pub const fn is_after_or_eq(self, other: Psn) -> bool {
        self.diff(other) >= 0
    }

    /// True when `self` lies in the half-open range `start..end` walked forward modulo 2^24
    /// (empty when `start == end`).
    pub const fn in_range(self, start: Psn, end: Psn) -> bool {
        self.distance_from(start) < end.distance_from(start)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.value()
    }
}

/// How the responder's RQ Logic classifies the PSN of an inbound request packet against its
/// ePSN (IBA 9.7.5.1.2 "Responder – checking the PSN"; Table 17-7 of seed 001 for the
/// resulting handling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestPsnClass {
    /// PSN == ePSN: the next request in sequence; execute it.
    Expected,
    /// PSN is one of the 2^23 PSNs before ePSN: a retried request already seen. Re-send the
    /// response (re-execute reads from saved state, replay saved atomic results) but do not
    /// execute side effects again.
    Duplicate,
    /// PSN is one of the 2^23 − 1 PSNs after ePSN: out of sequence (packets were lost). Class B
    /// handling: return a PSN Sequence Error NAK once, nothing else (seed 001, Table 17-7).
    Invalid,
}

/// Classifies a request PSN against the responder's ePSN with the half-window rule of IBA
/// 9.7.5.1.2: `diff(psn, epsn)` is 0 → [`RequestPsnClass::Expected`], in `[-2^23, -1]` →
/// [`RequestPsnClass::Duplicate`], in `[1, 2^23 − 1]` → [`RequestPsnClass::Invalid`].
pub const fn classify_request_psn(psn: Psn, epsn: Psn) -> RequestPsnClass {
    let d = psn.diff(epsn);
    if d == 0 {
        RequestPsnClass::Expected
    } else if d < 0 {
        RequestPsnClass::Duplicate
    } else {
        RequestPsnClass::Invalid
    }
}

/// How the requester's SQ Logic classifies the PSN of an inbound response (ACK, NAK, RDMA Read
/// response, Atomic response) (IBA 9.7.5.1.1 "Requester – checking the PSN of responses").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckPsnClass {
    /// The PSN lies in `oldest_unacked ..= last sent` (i.e. `oldest_unacked..next_psn`): it
    /// acknowledges or answers an outstanding request; process it.
    Valid,
    /// The PSN lies in the 2^23 PSNs before `oldest_unacked`: a duplicate or unsolicited
    /// response for something already acknowledged. Its AETH may still carry credits and an
    /// MSN (seed 003: "the requester saves the Credit Count and the MSN and then discards the
    /// packet"); the initial unsolicited ACK with PSN = ePSN − 1 lands here.
    Duplicate,
    /// Anything else (the PSN is at or after `next_psn`, a request never sent): a "ghost"
    /// response, silently discarded.
    Ghost,
}

/// Classifies a response PSN for the requester.
///
/// `oldest_unacked` is the PSN of the oldest request packet not yet acknowledged and
/// `next_psn` the PSN the requester will use for its next new request packet, so the
/// outstanding PSNs are `oldest_unacked..next_psn` (empty when equal). The requester keeps at
/// most 2^23 PSNs outstanding (IBA 9.7.5.1.1), so the three classes below partition the space:
///
/// - `ack_psn` in `oldest_unacked..next_psn` → [`AckPsnClass::Valid`];
/// - `ack_psn` in the 2^23 PSNs before `oldest_unacked` → [`AckPsnClass::Duplicate`];
/// - otherwise → [`AckPsnClass::Ghost`].
///
/// Coalesced ACKs are allowed: an ACK with a valid PSN acknowledges every outstanding packet up
/// to and including it (IBA 9.7.5.1.4 / 9.7.6.1.3).
pub const fn classify_ack_psn(ack_psn: Psn, oldest_unacked: Psn, next_psn: Psn) -> AckPsnClass {
    if ack_psn.in_range(oldest_unacked, next_psn) {
        AckPsnClass::Valid
    } else if ack_psn.is_before(oldest_unacked) {
        AckPsnClass::Duplicate
    } else {
        AckPsnClass::Ghost
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn new_masks_to_24_bits() {
        assert_eq!(Psn::new(0xFFFF_FFFF).value(), 0xFF_FFFF);
        assert_eq!(Psn::new(0x0100_0005).value(), 5);
    }

    #[test]
    fn next_wraps_from_max_to_zero() {
        assert_eq!(Psn::MAX.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO.prev(), Psn::MAX);
        assert_eq!(Psn::new(0xFF_FFFE).add(5), Psn::new(3));
        assert_eq!(Psn::new(3).sub(5), Psn::new(0xFF_FFFE));
        assert_eq!(Psn::new(1).add(u32::MAX), Psn::ZERO);
    }

    #[test]
    fn diff_is_signed_half_window() {
        assert_eq!(Psn::new(5).diff(Psn::new(3)), 2);
        assert_eq!(Psn::new(3).diff(Psn::new(5)), -2);
        assert_eq!(Psn::new(1).diff(Psn::MAX), 2);
        assert_eq!(Psn::MAX.diff(Psn::new(1)), -2);
        // Exactly half a circle apart is "before" (the range is [-2^23, 2^23)).
        assert_eq!(Psn::new(PSN_HALF_WINDOW).diff(Psn::ZERO), -(1 << 23));
        assert_eq!(Psn::ZERO.diff(Psn::new(PSN_HALF_WINDOW)), -(1 << 23));
        assert_eq!(Psn::new(PSN_HALF_WINDOW - 1).diff(Psn::ZERO), (1 << 23) - 1);
    }

    #[test]
    fn ordering_helpers_across_wrap() {
        assert!(Psn::MAX.is_before(Psn::ZERO));
        assert!(Psn::ZERO.is_after(Psn::MAX));
        assert!(Psn::ZERO.is_before_or_eq(Psn::ZERO));
        assert!(Psn::ZERO.is_after_or_eq(Psn::ZERO));
        assert!(!Psn::ZERO.is_before(Psn::ZERO));
        assert!(Psn::new(0xFF_FFF0).in_range(Psn::new(0xFF_FFE0), Psn::new(0x10)));
        assert!(Psn::new(0x5).in_range(Psn::new(0xFF_FFE0), Psn::new(0x10)));
        assert!(!Psn::new(0x10).in_range(Psn::new(0xFF_FFE0), Psn::new(0x10)));
        assert!(!Psn::new(7).in_range(Psn::new(7), Psn::new(7)));
    }

    #[test]
    fn seed001_responder_psn_expected_duplicate_invalid_half_window() {
        let epsn = Psn::new(0x10);
        assert_eq!(classify_request_psn(epsn, epsn), RequestPsnClass::Expected);
        assert_eq!(
            classify_request_psn(Psn::new(0xF), epsn),
            RequestPsnClass::Duplicate
        );
        assert_eq!(
            classify_request_psn(Psn::new(0x11), epsn),
            RequestPsnClass::Invalid
        );
        // The duplicate window is the 2^23 PSNs before ePSN, wrapping below zero.
        assert_eq!(
            classify_request_psn(epsn.sub(PSN_HALF_WINDOW), epsn),
            RequestPsnClass::Duplicate
        );
        assert_eq!(
            classify_request_psn(epsn.add(PSN_HALF_WINDOW - 1), epsn),
            RequestPsnClass::Invalid
        );
        assert_eq!(
            classify_request_psn(Psn::MAX, Psn::ZERO),
            RequestPsnClass::Duplicate
        );
    }

    #[test]
    fn iba_9_7_5_requester_valid_duplicate_ghost() {
        let oldest = Psn::new(0xFF_FFFE);
        let next = Psn::new(0x2); // outstanding: FFFFFE, FFFFFF, 0, 1
        assert_eq!(classify_ack_psn(oldest, oldest, next), AckPsnClass::Valid);
        assert_eq!(
            classify_ack_psn(Psn::new(1), oldest, next),
            AckPsnClass::Valid
        );
        assert_eq!(
            classify_ack_psn(Psn::new(2), oldest, next),
            AckPsnClass::Ghost
        );
        assert_eq!(
            classify_ack_psn(Psn::new(0xFF_FFFD), oldest, next),
            AckPsnClass::Duplicate
        );
        assert_eq!(
            classify_ack_psn(Psn::new(0x40_0000), oldest, next),
            AckPsnClass::Ghost
        );
    }

    #[test]
    fn seed003_initial_unsolicited_ack_is_not_valid() {
        // RQ Logic sends its initial credits with PSN = ePSN - 1 (seed 003). With nothing
        // outstanding it must never be taken as acknowledging a request.
        let start = Psn::ZERO;
        let class = classify_ack_psn(start.prev(), start, start);
        assert_ne!(class, AckPsnClass::Valid);
        assert_eq!(class, AckPsnClass::Duplicate);
    }
}
