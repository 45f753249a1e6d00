// SPDX-License-Identifier: GPL-2.0

//! Storage for the core's send and receive queue slots, their scatter/gather elements and
//! datagram destinations.
//!
//! A queue of more than a page comes from vmalloc, which rounds to pages: kmalloc (and kvmalloc,
//! which tries it first) rounds to a power of two, so a 255-slot send queue of 90 KiB would take
//! 128 KiB. A queue of a page or less stays in kmalloc, which vmalloc would round up to a page.

use core::ops::{Deref, DerefMut};
use kernel::{page::PAGE_SIZE, prelude::*};

/// `n` queue slots.
pub(crate) enum Slots<T> {
    /// At most a page.
    Small(KVec<T>),
    /// More than a page.
    Large(VVec<T>),
}

impl<T: Clone> Slots<T> {
    /// `n` copies of `v`.
    pub(crate) fn new(v: T, n: usize) -> Result<Self> {
        let bytes = n.checked_mul(size_of::<T>()).ok_or(ENOMEM)?;
        Ok(if bytes <= PAGE_SIZE {
            Self::Small(KVec::from_elem(v, n, GFP_KERNEL)?)
        } else {
            Self::Large(VVec::from_elem(v, n, GFP_KERNEL)?)
        })
    }
}

impl<T> Deref for Slots<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::Small(v) => v,
            Self::Large(v) => v,
        }
    }
}

impl<T> DerefMut for Slots<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::Small(v) => v,
            Self::Large(v) => v,
        }
    }
}
