// SPDX-License-Identifier: GPL-2.0

//! A buffer of possibly uninitialised bytes written front to back ([`Fill`]), so that a packet's
//! payload is copied straight into a fresh skb without zeroing it first: the zeroing would be a
//! second pass over every byte sent.

use core::mem::MaybeUninit;
use kernel::prelude::*;

/// Bytes a short [`Fill::zeroed`] clears in one fixed-size write when that many remain.
const SHORT: usize = 64;

/// Zeroes `buf` with a `memset` call: out of line, so that the compiler cannot merge the
/// fixed-size clear into the same call with a length chosen at run time.
#[inline(never)]
fn clear(buf: &mut [MaybeUninit<u8>]) {
    buf.fill(MaybeUninit::new(0));
}

/// Bytes written front to back over memory that may be uninitialised: a filled prefix, which
/// may be read, and the rest, which is only ever written.
///
/// # Invariants
///
/// `buf[..filled]` is initialised and `filled <= buf.len()`.
pub struct Fill<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    filled: usize,
}

impl<'a> Fill<'a> {
    /// An empty fill over `buf`.
    pub fn new(buf: &'a mut [MaybeUninit<u8>]) -> Self {
        // INVARIANT: nothing is filled.
        Fill { buf, filled: 0 }
    }

    /// The bytes not yet filled.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.filled
    }

    /// Whether every byte is filled.
    pub fn is_full(&self) -> bool {
        self.remaining() == 0
    }

    /// Zeroes the next `len` bytes and returns them for the caller to write (a header: a few
    /// bytes, where a second pass costs nothing). `EMSGSIZE` if fewer remain.
    pub fn zeroed(&mut self, len: usize) -> Result<&mut [u8]> {
        let start = self.filled;
        let end = start.checked_add(len).ok_or(EMSGSIZE)?;
        let rest = self.buf.get_mut(start..).ok_or(EMSGSIZE)?;
        // A clear of a length known only at run time is a `memset` call, dearer than the few
        // stores of a fixed-size one; bytes cleared past `end` are only ever written.
        let short: Option<&mut [MaybeUninit<u8>; SHORT]> =
            rest.get_mut(..SHORT).and_then(|h| h.try_into().ok());
        match short {
            Some(head) if len <= SHORT => *head = [MaybeUninit::new(0); SHORT],
            _ => clear(rest.get_mut(..len).ok_or(EMSGSIZE)?),
        }
        let dst = self.buf.get_mut(start..end).ok_or(EMSGSIZE)?;
        // INVARIANT: `buf[start..end]` was just written and `end <= buf.len()`.
        self.filled = end;
        let p = dst.as_mut_ptr().cast::<u8>();
        // SAFETY: the `len` bytes at `p` were just initialised and stay borrowed from `self`.
        Ok(unsafe { core::slice::from_raw_parts_mut(p, len) })
    }

    /// Copies `src` into the next `src.len()` bytes. `EMSGSIZE` if fewer remain.
    pub fn copy(&mut self, src: &[u8]) -> Result {
        let dst = self.spare(src.len())?;
        // SAFETY: `spare` gave `src.len()` writable bytes at `dst`; a shared `src` cannot
        // overlap the buffer this fill borrows mutably.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        // SAFETY: the copy wrote them all.
        unsafe { self.advance(src.len()) };
        Ok(())
    }

    /// Where the next `len` bytes go, for a copy from memory Rust cannot borrow (a user page, a
    /// kernel ULP's buffer); [`Fill::advance`] counts them once written. `EMSGSIZE` if fewer
    /// remain.
    pub fn spare(&mut self, len: usize) -> Result<*mut u8> {
        if len > self.remaining() {
            return Err(EMSGSIZE);
        }
        let rest = self.buf.get_mut(self.filled..).ok_or(EMSGSIZE)?;
        Ok(rest.as_mut_ptr().cast())
    }

    /// Counts `len` more bytes as filled.
    ///
    /// # Safety
    ///
    /// The `len` bytes at the pointer [`Fill::spare`] last returned, with no fill or advance
    /// since, must have been written, and `len` must be at most what that call asked for.
    pub unsafe fn advance(&mut self, len: usize) {
        debug_assert!(len <= self.remaining());
        // INVARIANT: per the caller, `len` more bytes are written and within the buffer.
        self.filled += len;
    }

    /// How many bytes are filled, if this fill is over exactly the `len` bytes at `p`; else
    /// `None` (a writer handed `&mut Fill` may have put another one in its place).
    pub(super) fn filled_over(&self, p: *const MaybeUninit<u8>, len: usize) -> Option<usize> {
        (core::ptr::eq(self.buf.as_ptr(), p) && self.buf.len() == len).then_some(self.filled)
    }

    /// The whole buffer as bytes, if every byte is filled.
    pub fn into_init(self) -> Option<&'a mut [u8]> {
        if !self.is_full() {
            return None;
        }
        let Fill { buf, .. } = self;
        let len = buf.len();
        // SAFETY: every byte is filled, hence initialised (type invariant), and the borrow of
        // the buffer passes to the result.
        Some(unsafe { core::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), len) })
    }
}
