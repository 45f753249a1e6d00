// SPDX-License-Identifier: GPL-2.0

//! The CRC-32 of the RoCEv2 ICRC: the kernel's `crc32_le` (which rdma_rxe uses), or the core's
//! slicing-by-16 table CRC where that is faster.
//!
//! On x86 the kernel folds with the carry-less multiply (`pclmulqdq`) inside a
//! `kernel_fpu_begin` section. Under QEMU without KVM (TCG), where CI systems run this driver,
//! the instruction is emulated in C, and a table CRC is faster: every byte sent and received
//! goes through the ICRC once, so the choice is worth a measurement. [`select`] times both when
//! the module loads and keeps the faster; on hardware and under KVM that is the kernel's.

use crate::bindings as b;
use crate::rvcore::icrc;
use crate::sync::clock::now_ns;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::c_void;
use kernel::prelude::*;

/// A CRC-32 implementation, same result either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcImpl {
    /// The kernel's `crc32_le` (arch-accelerated).
    Kernel,
    /// The core's [`icrc::crc32_update_sliced`].
    Sliced,
}

/// The slicing-by-16 CRC is in use ([`select`]); until then, the kernel's.
static SLICED: AtomicBool = AtomicBool::new(false);

/// The implementation in use.
pub fn chosen() -> CrcImpl {
    if SLICED.load(Ordering::Relaxed) {
        CrcImpl::Sliced
    } else {
        CrcImpl::Kernel
    }
}

/// Continues a little-endian (Ethernet-polynomial, reflected) CRC-32 from `crc` over `data`,
/// without pre- or post-inversion (the kernel's `crc32_le`), with the implementation in use.
pub fn crc32_le(crc: u32, data: &[u8]) -> u32 {
    crc32_with(chosen(), crc, data)
}

/// [`crc32_le`] with implementation `i`.
pub fn crc32_with(i: CrcImpl, crc: u32, data: &[u8]) -> u32 {
    match i {
        // SAFETY: `data` is a valid slice for `data.len()` bytes; `crc32_le` only reads it.
        CrcImpl::Kernel => unsafe { b::crc32_le(crc, data.as_ptr().cast(), data.len()) },
        CrcImpl::Sliced => icrc::crc32_update_sliced(crc, data),
    }
}

/// The C helpers' CRC callback: [`icrc::crc32_update_sliced`] over `len` bytes at `p`.
///
/// # Safety
///
/// `p` must be valid for reads of `len` bytes for the duration of the call.
unsafe extern "C" fn sliced_c(crc: u32, p: *const c_void, len: usize) -> u32 {
    // SAFETY: the caller guarantees that `p` is valid for reads of `len` bytes.
    let data = unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) };
    icrc::crc32_update_sliced(crc, data)
}

/// The callback a C helper that walks an skb's pages takes for implementation `i`: `None`
/// for the kernel's `crc32_le`, which the helper calls directly.
pub(super) fn c_callback(i: CrcImpl) -> b::rvr_crc32_fn {
    match i {
        CrcImpl::Kernel => None,
        CrcImpl::Sliced => Some(sliced_c),
    }
}

/// Bytes one timing pass covers, in pieces of `PIECE` (a packet's payload at path MTU 1024).
const SPAN: usize = 4096;
const PIECE: usize = 1024;
/// Timing passes of each implementation, alternating; the fastest of each counts.
const PASSES: usize = 5;

/// Times both implementations over the same bytes and keeps the faster for every ICRC from
/// now on (both give the same CRC, so packets in flight are unaffected). Process context.
pub fn select() {
    let mut buf = KVec::new();
    if buf.extend_with(SPAN, 0u8, GFP_KERNEL).is_err() {
        return;
    }
    for (i, x) in buf.iter_mut().enumerate() {
        *x = (i.wrapping_mul(131) >> 2) as u8;
    }
    let pass = |i: CrcImpl| {
        let start = now_ns();
        let mut crc = icrc::ICRC_SEED;
        for piece in buf.chunks(PIECE) {
            crc = crc32_with(i, crc, piece);
        }
        (now_ns().saturating_sub(start), crc)
    };
    let (mut kernel, mut sliced) = (u64::MAX, u64::MAX);
    for _ in 0..PASSES {
        let (k, a) = pass(CrcImpl::Kernel);
        let (s, b) = pass(CrcImpl::Sliced);
        if a != b {
            // Cannot happen (the KUnit suite compares them); the kernel's is the reference.
            pr_warn!("ICRC: slicing-by-16 CRC differs from crc32_le; using crc32_le\n");
            return;
        }
        kernel = kernel.min(k);
        sliced = sliced.min(s);
    }
    let use_sliced = sliced < kernel;
    SLICED.store(use_sliced, Ordering::Relaxed);
    pr_info!(
        "ICRC: crc32_le {} ns, slicing-by-16 {} ns per {} bytes: using {}\n",
        kernel,
        sliced,
        SPAN,
        if use_sliced {
            "slicing-by-16"
        } else {
            "crc32_le"
        }
    );
}
