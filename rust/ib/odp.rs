// SPDX-License-Identifier: GPL-2.0

//! On-demand-paging user memory (`IB_ACCESS_ON_DEMAND`): an `ib_umem_odp` with an mmu interval
//! notifier, and the MR's own page table (`c/rvrdma_odp.c`).
//!
//! [`Odp::register`] returns two halves, as [`super::umem::Umem::pin`] does:
//!
//! - [`OdpPages`], the copies (any context, never sleep): a copy that meets a page not in the
//!   table fails with [`OdpError::NotPresent`] and touches nothing; [`OdpPages::fault_in`]
//!   (process context) makes a range resident. The table's lock keeps every page a copy uses
//!   mapped until the copy is done: an invalidation (munmap, `madvise(MADV_DONTNEED)`,
//!   migration, reclaim...) waits for it, then clears the pages, so a later copy faults again
//!   and sees the new memory.
//! - [`OdpPin`], the registration. Dropping it waits until the [`OdpPages`] half is gone, then
//!   removes the notifier and frees the table (process context only, may sleep).

use super::copy_src::CopySrc;
use super::device::{Device, IbDriver};
use crate::bindings as b;
use crate::net::fill::Fill;
use crate::rvcore::memory::AtomicOp;
use core::ptr::NonNull;
use kernel::{
    error::from_err_ptr,
    prelude::*,
    sync::{Arc, Completion},
};

/// Why an on-demand-paging copy failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OdpError {
    /// A page of the range is not resident (or not writable for a write): fault it in.
    NotPresent,
    /// The range is not inside the memory, or the atomic's address is not 8-aligned.
    Invalid,
}

fn copy_result(r: c_int) -> Result<(), OdpError> {
    match r {
        0 => Ok(()),
        r if r == -(b::EAGAIN as c_int) => Err(OdpError::NotPresent),
        _ => Err(OdpError::Invalid),
    }
}

/// Entry point: registers on-demand-paging user memory.
pub struct Odp;

impl Odp {
    /// Registers `[addr, addr + length)` of the calling process for on-demand paging with
    /// `access` (`ib_access_flags`, including `IB_ACCESS_ON_DEMAND`). Nothing is faulted in.
    /// Process context only.
    pub fn register<T: IbDriver>(
        dev: &Device<T>,
        addr: u64,
        length: u64,
        access: u32,
    ) -> Result<(OdpPin, OdpPages)> {
        let addr_ul = usize::try_from(addr).map_err(|_| EINVAL)?;
        let size = usize::try_from(length).map_err(|_| EINVAL)?;
        let access = i32::try_from(access).map_err(|_| EINVAL)?;
        let done = Arc::pin_init(Completion::new(), GFP_KERNEL)?;
        // SAFETY: `dev` is a live ib device; the call runs in the context of the process whose
        // memory is registered.
        let raw = from_err_ptr(unsafe { b::rvr_odp_get(dev.as_raw(), addr_ul, size, access) })?;
        let raw = NonNull::new(raw).ok_or(EINVAL)?;
        // INVARIANT: `raw` is released only by `OdpPin::drop`, after `done` completes, which
        // only the drop of this `OdpPages` does.
        let pages = OdpPages {
            raw,
            length,
            done: done.clone(),
        };
        Ok((OdpPin { raw, done }, pages))
    }
}

/// The registration of on-demand-paging memory (see the module documentation).
///
/// # Invariants
///
/// `raw` is a live `rvr_odp`, released only in `drop`, after `done` completed.
pub struct OdpPin {
    raw: NonNull<b::rvr_odp>,
    done: Arc<Completion>,
}

// SAFETY: the registration is plain memory owned by this object; it may be released from any
// thread (in process context).
unsafe impl Send for OdpPin {}
// SAFETY: `&OdpPin` offers no access at all.
unsafe impl Sync for OdpPin {}

impl Drop for OdpPin {
    /// Waits until the [`OdpPages`] half is gone, then removes the notifier. May sleep.
    fn drop(&mut self) {
        self.done.wait_for_completion();
        // SAFETY: `raw` is live (type invariant) and nothing else uses it any more.
        unsafe { b::rvr_odp_release(self.raw.as_ptr()) };
    }
}

/// The memory of an on-demand-paging registration, addressed by position (bytes from its first
/// byte).
///
/// # Invariants
///
/// `raw` is a live `rvr_odp` of `length` bytes while `self` lives (the matching [`OdpPin`]
/// waits for `done`).
pub struct OdpPages {
    raw: NonNull<b::rvr_odp>,
    length: u64,
    done: Arc<Completion>,
}

// SAFETY: every C entry point used from `&self` takes the table's IRQ-safe lock or the umem
// mutex; none depends on the calling thread.
unsafe impl Send for OdpPages {}
// SAFETY: as for `Send`.
unsafe impl Sync for OdpPages {}

impl Drop for OdpPages {
    fn drop(&mut self) {
        // Never sleeps: safe in any context.
        self.done.complete_all();
    }
}

impl OdpPages {
    /// Length in bytes.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Whether the memory may be written at all.
    pub fn writable(&self) -> bool {
        // SAFETY: `raw` is live (type invariant).
        unsafe { b::rvr_odp_writable(self.raw.as_ptr()) }
    }

    /// True when every page of `[pos, pos + len)` is resident (and writable for `write`).
    /// Never sleeps.
    pub fn present(&self, pos: u64, len: u64, write: bool) -> bool {
        // SAFETY: `raw` is live (type invariant).
        unsafe { b::rvr_odp_present(self.raw.as_ptr(), pos, len, write) }
    }

    /// Makes `[pos, pos + len)` resident (writable for `write`); with `fault` false, takes
    /// only the pages the process has resident now (prefetch without page faults). Process
    /// context only: sleeps.
    pub fn fault_in(&self, pos: u64, len: u64, write: bool, fault: bool) -> Result {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `raw` is live (type invariant); we are in process context.
        kernel::error::to_result(unsafe {
            b::rvr_odp_fault(self.raw.as_ptr(), pos, len, write, fault)
        })
    }

    /// Appends the `len` bytes at position `pos` to `out`. Never sleeps.
    pub fn read(&self, pos: u64, len: usize, out: &mut Fill<'_>) -> Result<(), OdpError> {
        let dst = out.spare(len).map_err(|_| OdpError::Invalid)?;
        // SAFETY: `raw` is live (type invariant); `dst` is valid for `len` bytes.
        copy_result(unsafe { b::rvr_odp_copy(self.raw.as_ptr(), pos, dst.cast(), len, false) })?;
        // SAFETY: the copy succeeded, so it wrote the `len` bytes.
        unsafe { out.advance(len) };
        Ok(())
    }

    /// Copies `data` to position `pos`. Never sleeps.
    pub fn write(&self, pos: u64, data: &(impl CopySrc + ?Sized)) -> Result<(), OdpError> {
        if let Some(s) = data.as_slice() {
            return self.write_slice(pos, s);
        }
        // Bytes that are no slice go through a bounce buffer, a piece at a time (a copy that
        // stops part way is repeated in full once the memory is resident).
        let mut buf = [0u8; 256];
        let mut done = 0;
        while done < data.len() {
            let n = (data.len() - done).min(buf.len());
            // SAFETY: `buf` takes `n` bytes, and `done + n` lies inside `data`.
            unsafe { data.copy_to(done, buf.as_mut_ptr(), n) }.map_err(|_| OdpError::Invalid)?;
            self.write_slice(pos + done as u64, buf.get(..n).ok_or(OdpError::Invalid)?)?;
            done += n;
        }
        Ok(())
    }

    fn write_slice(&self, pos: u64, data: &[u8]) -> Result<(), OdpError> {
        // SAFETY: `raw` is live (type invariant); `data` is valid for `data.len()` bytes and
        // only read (the C side copies from it when `to_mr` is true).
        copy_result(unsafe {
            b::rvr_odp_copy(
                self.raw.as_ptr(),
                pos,
                data.as_ptr().cast_mut().cast(),
                data.len(),
                true,
            )
        })
    }

    /// Executes `op` on the native-endian `u64` at position `pos` (8-aligned address) with a
    /// hardware atomic and returns the old value. Never sleeps.
    pub fn atomic(&self, pos: u64, op: AtomicOp) -> Result<u64, OdpError> {
        let (cmp_swap, a, bb) = match op {
            AtomicOp::CmpSwap { compare, swap } => (true, compare, swap),
            AtomicOp::FetchAdd { add } => (false, add, 0),
        };
        let mut old = 0u64;
        // SAFETY: `raw` is live (type invariant); `old` is a valid out slot.
        copy_result(unsafe {
            b::rvr_odp_atomic(self.raw.as_ptr(), pos, cmp_swap, a, bb, &mut old)
        })?;
        Ok(old)
    }
}
