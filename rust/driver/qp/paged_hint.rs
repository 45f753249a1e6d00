// SPDX-License-Identifier: GPL-2.0

//! Which of a QP's payloads leave by reference to the user's pages ([`crate::net::paged`]), and
//! which are copied.

use crate::ib::qp::QpType as IbQpType;
use core::sync::atomic::{AtomicU8, Ordering};

/// The smallest payload sent by reference to the user's pages rather than copied: below it, the
/// page references, the trailer's fragment and the receiver's linearization cost more than
/// the copy they spare.
pub(super) const PAGED_MIN: usize = 1024;

/// Whether a QP's payloads are worth building by reference ([`super::transmit::build`]): only
/// an RC QP's, whose send work requests complete when the responder acknowledges the data,
/// which it read out of the packet before; a UD or UC send completes once sent, and its buffer
/// may change while the packet is still on its way. Then the QP's MRs must be pinned user
/// memory: a payload elsewhere (a kernel ULP's memory, on-demand paging) is copied, and after
/// such a refusal the next [`PagedHint::SKIP`] payloads are copied without trying.
pub(super) struct PagedHint(AtomicU8);

impl PagedHint {
    /// Payloads copied without a try after a refusal.
    const SKIP: u8 = 64;
    /// Never tried.
    const NEVER: u8 = u8::MAX;

    /// A hint for a QP of type `qp_type`.
    pub(super) fn new(qp_type: IbQpType) -> Self {
        Self(AtomicU8::new(match qp_type {
            IbQpType::Rc => 0,
            _ => Self::NEVER,
        }))
    }

    /// Whether to try this payload by reference (the `tx_paged` switch of the device is on:
    /// `enabled`).
    pub(super) fn worth_trying(&self, enabled: bool) -> bool {
        if !enabled {
            return false;
        }
        // Only the QP's lock holder builds packets: a plain load and store suffice.
        match self.0.load(Ordering::Relaxed) {
            0 => true,
            Self::NEVER => false,
            n => {
                self.0.store(n - 1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Records how a try went.
    pub(super) fn tried(&self, ok: bool) {
        if !ok {
            self.0.store(Self::SKIP, Ordering::Relaxed);
        }
    }
}
