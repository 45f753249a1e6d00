// SPDX-License-Identifier: GPL-2.0

//! The kernel's CRC-32 (`crc32_le`), which rdma_rxe uses for the RoCEv2 ICRC.

use crate::bindings as b;

/// Continues a little-endian (Ethernet-polynomial, reflected) CRC-32 from `crc` over `data`,
/// without pre- or post-inversion (the kernel's `crc32_le`).
pub fn crc32_le(crc: u32, data: &[u8]) -> u32 {
    // SAFETY: `data` is a valid slice for `data.len()` bytes; `crc32_le` only reads it.
    unsafe { b::crc32_le(crc, data.as_ptr().cast(), data.len()) }
}
