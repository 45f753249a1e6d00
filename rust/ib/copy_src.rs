// SPDX-License-Identifier: GPL-2.0

//! Where the bytes written into registered memory come from: a slice, or a received packet's
//! payload left in its skb's fragments ([`crate::net::skb::SkbBytes`]), which is copied from
//! the pages where it lies, without a slice over them (their owner, a sending process on this
//! host, may write them at any time).

use kernel::prelude::*;

/// A source of bytes for a copy into memory.
pub trait CopySrc {
    /// The number of bytes.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as a slice, when they are one.
    fn as_slice(&self) -> Option<&[u8]>;

    /// Copies the `n` bytes starting `at` bytes in to `dst`; on an error `dst` may hold part of
    /// them.
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of `n` bytes, and `at + n <= self.len()`.
    unsafe fn copy_to(&self, at: usize, dst: *mut u8, n: usize) -> Result;
}

impl CopySrc for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }

    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }

    unsafe fn copy_to(&self, at: usize, dst: *mut u8, n: usize) -> Result {
        // SAFETY: per the caller, `at + n` lies inside the slice and `dst` takes `n` bytes;
        // registered memory may be shared with other agents, the RDMA contract (`kcopy`).
        unsafe { super::mr::kcopy(dst, self.as_ptr().add(at), n) };
        Ok(())
    }
}

/// The `len` bytes of `src` starting `at` bytes in ([`part`]).
pub struct Part<'a, S: CopySrc + ?Sized> {
    src: &'a S,
    at: usize,
    len: usize,
}

/// The bytes `at .. at + len` of `src`; `None` unless they lie inside it.
pub fn part<S: CopySrc + ?Sized>(src: &S, at: usize, len: usize) -> Option<Part<'_, S>> {
    (at.checked_add(len)? <= src.len()).then_some(Part { src, at, len })
}

impl<S: CopySrc + ?Sized> CopySrc for Part<'_, S> {
    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> Option<&[u8]> {
        self.src.as_slice()?.get(self.at..self.at + self.len)
    }

    unsafe fn copy_to(&self, at: usize, dst: *mut u8, n: usize) -> Result {
        // SAFETY: `at + n <= self.len` (caller) and `self.at + self.len <= src.len()` (`part`).
        unsafe { self.src.copy_to(self.at + at, dst, n) }
    }
}
