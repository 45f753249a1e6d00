// SPDX-License-Identifier: GPL-2.0

//! A packet's payload by reference: [`Frags`] appends pages of registered memory to an skb as
//! fragments, each holding a page reference that the skb drops when it is freed, so that the
//! payload is never copied on its way out. The pages stay their owner's: the RDMA contract
//! leaves them untouched until the work request completes, which its peer's acknowledgement
//! of the data (already copied out of the packet) comes first.

use super::skb::Skb;
use kernel::{
    page::{Page, PAGE_SIZE},
    prelude::*,
};

/// The payload fragments of one skb being built ([`crate::net::tx::build_routed_paged`]).
pub struct Frags<'s> {
    skb: &'s mut Skb,
    /// Bytes appended so far.
    len: usize,
}

impl<'s> Frags<'s> {
    pub(super) fn new(skb: &'s mut Skb) -> Self {
        Frags { skb, len: 0 }
    }

    /// Appends the `len` bytes of `page` at `off` (all within the page). `EMSGSIZE` when the
    /// skb has no fragment slot left, `EINVAL` for a range past the page.
    pub fn add(&mut self, page: &Page, off: usize, len: usize) -> Result {
        if off.checked_add(len).is_none_or(|end| end > PAGE_SIZE) {
            return Err(EINVAL);
        }
        self.skb.add_page_frag(page, off, len)?;
        self.len += len;
        Ok(())
    }

    /// Bytes appended so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
