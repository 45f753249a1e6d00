//! The `modify_qp` attribute mask, bit for bit the kernel's `enum ib_qp_attr_mask`.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign, Not};

/// A set of `modify_qp` attributes; the bits are exactly the kernel's `enum ib_qp_attr_mask`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// No attribute.
    pub const EMPTY: AttrMask = AttrMask(0);
    /// `IB_QP_STATE`: the next state is given.
    pub const STATE: AttrMask = AttrMask(1);
    /// `IB_QP_CUR_STATE`: the caller's idea of the current state.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// `IB_QP_EN_SQD_ASYNC_NOTIFY`: raise SQ_DRAINED when the SQ has drained.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// `IB_QP_ACCESS_FLAGS`: remote read/write/atomic enables.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// `IB_QP_PKEY_INDEX`: primary P_Key index.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// `IB_QP_PORT`: primary port.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// `IB_QP_QKEY`: Q_Key (UD, GSI).
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// `IB_QP_AV`: primary path address vector.
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// `IB_QP_PATH_MTU`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// `IB_QP_TIMEOUT`: local ACK timeout.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// `IB_QP_RETRY_CNT`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// `IB_QP_RNR_RETRY`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// `IB_QP_RQ_PSN`: the RQ logic's starting ePSN.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// `IB_QP_MAX_QP_RD_ATOMIC`: outstanding RDMA Read/Atomic as requester.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// `IB_QP_ALT_PATH`: alternate path (address vector, port, P_Key index, timeout).
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// `IB_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// `IB_QP_SQ_PSN`: the SQ logic's starting PSN.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// `IB_QP_MAX_DEST_RD_ATOMIC`: depth of the responder's RDMA Read/Atomic queue.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// `IB_QP_PATH_MIG_STATE`: APM state (only Migrated or Rearm may be set).
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// `IB_QP_CAP`: queue sizes (resize).
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// `IB_QP_DEST_QPN`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);
    /// `IB_QP_RATE_LIMIT` (raw packet QPs only).
    pub const RATE_LIMIT: AttrMask = AttrMask(1 << 25);
    /// `IB_QP_ATTR_STANDARD_BITS`: bits 0..=20, the IBA attributes.
    pub const STANDARD_BITS: AttrMask = AttrMask((1 << 21) - 1);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: AttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// `self | other`.
    pub const fn union(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// `self & !other`.
    pub const fn difference(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }

    /// The lowest set bit alone (empty if none).
    pub const fn lowest(self) -> AttrMask {
        AttrMask(self.0 & self.0.wrapping_neg())
    }

    /// The kernel name of the lowest set bit ("IB_QP_AV", ...); "none" if empty, "unknown"
    /// for a bit the kernel does not name.
    pub const fn name(self) -> &'static str {
        match self.lowest().0 {
            0 => "none",
            0x1 => "IB_QP_STATE",
            0x2 => "IB_QP_CUR_STATE",
            0x4 => "IB_QP_EN_SQD_ASYNC_NOTIFY",
            0x8 => "IB_QP_ACCESS_FLAGS",
            0x10 => "IB_QP_PKEY_INDEX",
            0x20 => "IB_QP_PORT",
            0x40 => "IB_QP_QKEY",
            0x80 => "IB_QP_AV",
            0x100 => "IB_QP_PATH_MTU",
            0x200 => "IB_QP_TIMEOUT",
            0x400 => "IB_QP_RETRY_CNT",
            0x800 => "IB_QP_RNR_RETRY",
            0x1000 => "IB_QP_RQ_PSN",
            0x2000 => "IB_QP_MAX_QP_RD_ATOMIC",
            0x4000 => "IB_QP_ALT_PATH",
            0x8000 => "IB_QP_MIN_RNR_TIMER",
            0x1_0000 => "IB_QP_SQ_PSN",
            0x2_0000 => "IB_QP_MAX_DEST_RD_ATOMIC",
            0x4_0000 => "IB_QP_PATH_MIG_STATE",
            0x8_0000 => "IB_QP_CAP",
            0x10_0000 => "IB_QP_DEST_QPN",
            0x200_0000 => "IB_QP_RATE_LIMIT",
            _ => "unknown",
        }
    }
}

impl BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 | rhs.0)
    }
}

impl BitOrAssign for AttrMask {
    fn bitor_assign(&mut self, rhs: AttrMask) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for AttrMask {
    type Output = AttrMask;
    fn bitand(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 & rhs.0)
    }
}

impl Not for AttrMask {
    type Output = AttrMask;
    fn not(self) -> AttrMask {
        AttrMask(!self.0)
    }
}

impl fmt::Debug for AttrMask {
    /// Prints the kernel names of the set bits, e.g. `IB_QP_STATE|IB_QP_AV`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let mut rest = *self;
        let mut first = true;
        while !rest.is_empty() {
            let bit = rest.lowest();
            if !first {
                f.write_str("|")?;
            }
            first = false;
            if bit.name() == "unknown" {
                write!(f, "{:#x}", bit.0)?;
            } else {
                f.write_str(bit.name())?;
            }
            rest = rest.difference(bit);
        }
        Ok(())
    }
}

impl fmt::Display for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
