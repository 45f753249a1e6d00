// SPDX-License-Identifier: GPL-2.0

//! A received payload left in its skb's fragments, handed to the core as
//! [`RxPayload::Held`]: the QP's memory for the one packet, which copies such a payload
//! straight from the fragments into the MR (one copy, where making the packet linear first
//! would take a second, and an allocation).

use super::mr_table::QpMemory;
use crate::ib::copy_src::CopySrc;
use crate::net::skb::{Skb, SkbBytes};
use crate::rvcore::memory::{AtomicOp, MemError, Memory, RxPayload};
use crate::rvcore::mw::BindMwParams;
use crate::rvcore::wqe::{RegMrParams, Sge};

/// A received packet's payload, where it lies.
#[derive(Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// In hand, as a slice (the linear part of its skb, or a copy).
    Bytes(&'a [u8]),
    /// In the fragments of its skb.
    InSkb(SkbBytes<'a>),
}

impl<'a> Payload<'a> {
    /// The payload at `range` of `skb`'s data: a slice where it lies in the linear part.
    pub(crate) fn of(skb: &'a Skb, range: core::ops::Range<usize>) -> Self {
        debug_assert!(range.end <= skb.len(), "callers check the payload's span");
        match SkbBytes::new(skb, range) {
            Some(b) => match b.linear() {
                Some(s) => Payload::Bytes(s),
                None => Payload::InSkb(b),
            },
            None => Payload::Bytes(&[]),
        }
    }
}

/// The memory of a QP while it takes one packet whose payload is held in an skb: every access
/// is the QP's own ([`QpMemory`]); a [`RxPayload::Held`] payload is copied from the skb.
pub(crate) struct HeldPayload<'m, 'a, 'h> {
    /// The QP's memory.
    pub(crate) mem: &'m QpMemory<'a>,
    /// The payload the core hands back as [`RxPayload::Held`].
    pub(crate) held: SkbBytes<'h>,
}

impl HeldPayload<'_, '_, '_> {
    /// `p`, checked to be the payload held (the core hands it back whole).
    fn check(&self, p: RxPayload<'_>) -> Result<(), MemError> {
        match p {
            RxPayload::Held(n) if n == self.held.len() => Ok(()),
            _ => Err(MemError::OutOfBounds),
        }
    }
}

impl Memory for HeldPayload<'_, '_, '_> {
    fn check_local(&mut self, sges: &[Sge], access: u32) -> Result<(), MemError> {
        self.mem.check_local(sges, access)
    }

    fn scatter(&mut self, sges: &[Sge], offset: u32, data: RxPayload<'_>) -> Result<(), MemError> {
        if let RxPayload::Bytes(b) = data {
            return self.mem.scatter_from(sges, offset, b);
        }
        self.check(data)?;
        self.mem.scatter_from(sges, offset, &self.held)
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, access: u32) -> Result<(), MemError> {
        self.mem.check_remote(rkey, va, len, access)
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError> {
        if let RxPayload::Bytes(b) = data {
            return self.mem.remote_write_from(rkey, va, b);
        }
        self.check(data)?;
        self.mem.remote_write_from(rkey, va, &self.held)
    }

    fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.mem.remote_atomic(rkey, va, op)
    }

    fn remote_atomic_write(&mut self, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError> {
        self.mem.remote_atomic_write(rkey, va, value)
    }

    fn remote_flush(
        &mut self,
        rkey: u32,
        range: Option<(u64, u32)>,
        access: u32,
    ) -> Result<(), MemError> {
        self.mem.remote_flush(rkey, range, access)
    }

    fn invalidate_remote(&mut self, rkey: u32) -> Result<(), MemError> {
        self.mem.invalidate_remote(rkey)
    }

    fn local_invalidate(&mut self, key: u32) -> Result<(), MemError> {
        self.mem.local_invalidate(key)
    }

    fn fast_register(&mut self, params: &RegMrParams) -> Result<(), MemError> {
        self.mem.fast_register(params)
    }

    fn bind_mw(&mut self, params: &BindMwParams) -> Result<(), MemError> {
        self.mem.bind_mw(params)
    }
}
