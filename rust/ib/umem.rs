// SPDX-License-Identifier: GPL-2.0

//! Pinned user memory (`struct ib_umem`) as an array of pages, and byte copies into and out of it.
//!
//! [`Umem::pin`] pins a user range and returns two halves:
//!
//! - [`UmemPages`], the page array with safe, bounds-checked copies. It is `Send + Sync`, never
//!   sleeps (not even when dropped) and may be used with interrupts disabled: the pages are pinned,
//!   so `kmap_local_page` copies cannot fault.
//! - [`UmemPin`], the pin itself. Dropping it first waits until the [`UmemPages`] half has been
//!   dropped (wherever it went: typically an `Arc` that in-flight workers clone), then releases
//!   the pages with `ib_umem_release`, which may sleep. So a `UmemPin` must only be dropped in
//!   process context, never under a spinlock, and never while the same thread still owns the
//!   matching [`UmemPages`] (that would wait forever).

use super::copy_src::CopySrc;
use super::device::{Device, IbDriver};
use crate::bindings as b;
use crate::net::fill::Fill;
use crate::rvcore::memory::AtomicOp;
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::{
    alloc::KVVec,
    error::from_err_ptr,
    page::{BorrowedPage, PAGE_SHIFT, PAGE_SIZE},
    prelude::*,
    sync::{Arc, Completion},
};

/// Calls `f(index, offset, done, len)` for every chunk of `[pos, pos + total)` that lies in one
/// block of `block_size` bytes (a power of two): `index` is the block, `offset` the byte offset in
/// it, `done` how many bytes came before this chunk. Stops at the first error.
pub(crate) fn for_each_block(
    pos: usize,
    total: usize,
    block_size: usize,
    mut f: impl FnMut(usize, usize, usize, usize) -> Result,
) -> Result {
    let mut done = 0;
    while done < total {
        let at = pos.checked_add(done).ok_or(EINVAL)?;
        let offset = at & (block_size - 1);
        let len = (block_size - offset).min(total - done);
        f(at / block_size, offset, done, len)?;
        done += len;
    }
    Ok(())
}

/// Checks that `[pos, pos + len)` lies in `[0, size)`, overflow-safe.
pub(crate) fn check_range(pos: u64, len: u64, size: u64) -> Result {
    if len > size || pos > size - len {
        return Err(ERANGE);
    }
    Ok(())
}

/// Entry point: pins user memory.
pub struct Umem;

impl Umem {
    /// Pins `[addr, addr + length)` of the calling process for a memory region with `access`
    /// (`ib_access_flags`), and collects its pages. Process context only (may sleep).
    pub fn pin<T: IbDriver>(
        dev: &Device<T>,
        addr: u64,
        length: u64,
        access: u32,
    ) -> Result<(UmemPin, UmemPages)> {
        let addr_ul = usize::try_from(addr).map_err(|_| EINVAL)?;
        let size = usize::try_from(length).map_err(|_| EINVAL)?;
        let access = i32::try_from(access).map_err(|_| EINVAL)?;
        // SAFETY: `dev` is a live ib device; the call runs in the context of the process whose
        // memory is pinned.
        let raw =
            from_err_ptr(unsafe { b::rvr_ib_umem_get_va(dev.as_raw(), addr_ul, size, access) })?;
        let raw = NonNull::new(raw).ok_or(EINVAL)?;
        let (pages, offset, done) = match Self::collect(raw, size) {
            Ok(v) => v,
            Err(e) => {
                // SAFETY: `raw` was pinned above, nothing points into it, it is released once.
                unsafe { b::ib_umem_release(raw.as_ptr()) };
                return Err(e);
            }
        };
        // INVARIANT: the page array lives in `pin` (a KVVec buffer never moves while it is not
        // resized), which outlives the `UmemPages` half because `UmemPin::drop` waits for `done`,
        // which only that half completes.
        let half = UmemPages {
            pages: NonNull::new(pages.as_ptr().cast_mut()).unwrap_or(NonNull::dangling()),
            npages: pages.len(),
            offset,
            length,
            done: done.clone(),
        };
        let pin = UmemPin { raw, pages, done };
        Ok((pin, half))
    }

    /// Collects the pages of the pinned umem `raw`, checks they cover `size` bytes, and returns
    /// them with the in-page offset of the first byte and a fresh completion.
    fn collect(
        raw: NonNull<b::ib_umem>,
        size: usize,
    ) -> Result<(KVVec<NonNull<b::page>>, usize, Arc<Completion>)> {
        let done = Arc::pin_init(Completion::new(), GFP_KERNEL)?;
        // SAFETY: `raw` is a valid umem.
        let npages = unsafe { b::rvr_ib_umem_num_pages(raw.as_ptr()) };
        let mut pages = KVVec::with_capacity(npages, GFP_KERNEL)?;
        // SAFETY: `raw` is a valid umem; its sg table is valid while it is pinned.
        let sgt = unsafe { b::rvr_ib_umem_sgt(raw.as_ptr()) };
        let mut iter = b::sg_page_iter::default();
        // SAFETY: `sgt` is the umem's valid sg table; `iter` is a valid out slot.
        unsafe { b::__sg_page_iter_start(&mut iter, (*sgt).sgl, (*sgt).orig_nents, 0) };
        // SAFETY: `iter` was started on a valid table.
        while unsafe { b::__sg_page_iter_next(&mut iter) } {
            // SAFETY: `iter` points at a valid page entry of the table.
            let page = unsafe { b::rvr_sg_page_iter_page(&mut iter) };
            let page = NonNull::new(page).ok_or(EINVAL)?;
            // More pages than ib_core counted would be a bug: refuse rather than grow.
            pages.push_within_capacity(page).map_err(|_| EINVAL)?;
        }
        // SAFETY: `raw` is a valid umem.
        let offset = unsafe { (*raw.as_ptr()).address } & (PAGE_SIZE - 1);
        // The pinned pages must cover every byte the copies may touch.
        let covered = pages.len().checked_mul(PAGE_SIZE).ok_or(EINVAL)?;
        if offset.checked_add(size).is_none_or(|end| end > covered) {
            return Err(EINVAL);
        }
        Ok((pages, offset, done))
    }
}

/// The pin of a user memory range (see the module documentation).
///
/// # Invariants
///
/// `raw` is a pinned umem, released only in `drop`; `pages` are its pages; `done` is completed
/// when the matching [`UmemPages`] is dropped, and is the only thing that completes it.
pub struct UmemPin {
    raw: NonNull<b::ib_umem>,
    pages: KVVec<NonNull<b::page>>,
    done: Arc<Completion>,
}

// SAFETY: the umem and its page array are plain memory owned by this object; ib_umem_release
// may run on any thread (in process context).
unsafe impl Send for UmemPin {}
// SAFETY: `&UmemPin` offers no access at all.
unsafe impl Sync for UmemPin {}

impl Drop for UmemPin {
    /// Waits until the [`UmemPages`] half is gone, then unpins. May sleep.
    fn drop(&mut self) {
        self.done.wait_for_completion();
        // SAFETY: `raw` is a pinned umem (type invariant) and no page pointer into it remains.
        unsafe { b::ib_umem_release(self.raw.as_ptr()) };
        // The page pointers are stale now; the array itself is freed with `self`.
        self.pages.clear();
    }
}

/// The pages of a pinned user range, with byte copies addressed by position (bytes from the
/// first byte of the range).
///
/// # Invariants
///
/// `pages` points to `npages` valid, pinned pages (owned by the matching [`UmemPin`], which
/// waits for `done` before unpinning and freeing them); `offset + length <= npages * PAGE_SIZE`.
pub struct UmemPages {
    pages: NonNull<NonNull<b::page>>,
    npages: usize,
    offset: usize,
    length: u64,
    done: Arc<Completion>,
}

// SAFETY: pinned pages may be accessed from any thread; copies use thread-local mappings only.
unsafe impl Send for UmemPages {}
// SAFETY: all methods take `&self` and only copy bytes through short-lived local mappings.
unsafe impl Sync for UmemPages {}

impl Drop for UmemPages {
    fn drop(&mut self) {
        // Never sleeps: safe in any context.
        self.done.complete_all();
    }
}

impl UmemPages {
    /// Length of the range in bytes.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Offset of the first byte in its page (`ib_umem_offset`).
    pub fn page_offset(&self) -> usize {
        self.offset
    }

    /// Number of pages.
    pub fn npages(&self) -> usize {
        self.npages
    }

    fn page(&self, i: usize) -> Result<BorrowedPage<'_>> {
        if i >= self.npages {
            return Err(ERANGE);
        }
        // SAFETY: `i < npages` and the array is valid while `self` lives (type invariant).
        let p = unsafe { *self.pages.as_ptr().add(i) };
        // SAFETY: the page is pinned while `self` lives.
        Ok(unsafe { BorrowedPage::from_raw(p) })
    }

    /// Absolute position (from the first page's start) of range position `pos` for `len` bytes,
    /// after the bounds check.
    fn abs(&self, pos: u64, len: usize) -> Result<usize> {
        check_range(pos, len as u64, self.length)?;
        // Fits: `pos + len <= length <= npages * PAGE_SIZE - offset`.
        Ok(self.offset + pos as usize)
    }

    /// Appends the `len` bytes at position `pos` to `out`; nothing is counted filled if the
    /// range is not inside the memory (`ERANGE`) or `out` has less room (`EMSGSIZE`). Never
    /// sleeps.
    pub fn read(&self, pos: u64, len: usize, out: &mut Fill<'_>) -> Result {
        let abs = self.abs(pos, len)?;
        let dst = out.spare(len)?;
        for_each_block(abs, len, PAGE_SIZE, |i, off, done, n| {
            // SAFETY: `dst + done` is valid for `n` of the `len` spare bytes. The memory is the
            // user's: concurrent user writes race as they would with a DMA engine, which is the
            // RDMA contract for registered memory.
            unsafe { self.page(i)?.read_raw(dst.add(done), off, n) }
        })?;
        // SAFETY: the blocks cover the `len` bytes at `dst`, and each was copied.
        unsafe { out.advance(len) };
        Ok(())
    }

    /// Calls `f(page, offset, len)` for each piece of the `len` bytes at position `pos` that
    /// lies in one page, in order (`ERANGE` if the range is not inside the memory); stops at
    /// `f`'s first error. Never sleeps.
    pub fn for_each_page(
        &self,
        pos: u64,
        len: usize,
        mut f: impl FnMut(&BorrowedPage<'_>, usize, usize) -> Result,
    ) -> Result {
        let abs = self.abs(pos, len)?;
        for_each_block(abs, len, PAGE_SIZE, |i, off, _, n| {
            f(&self.page(i)?, off, n)
        })
    }

    /// Copies `data` to position `pos`; nothing is written if the range is not inside the memory
    /// (`ERANGE`). Never sleeps.
    pub fn write(&self, pos: u64, data: &(impl CopySrc + ?Sized)) -> Result {
        let abs = self.abs(pos, data.len())?;
        for_each_block(abs, data.len(), PAGE_SIZE, |i, off, done, len| {
            let page = self.page(i)?;
            // SAFETY: the page is pinned (type invariant).
            let va = unsafe { b::kmap_local_page(page.as_ptr()) };
            // SAFETY: `va + off` is valid for `len` bytes inside the mapped page, and
            // `done + len` lies inside `data`; races as in `read`.
            let copied = unsafe { data.copy_to(done, va.cast::<u8>().add(off), len) };
            // SAFETY: `va` was mapped above, and is the last mapping of this thread.
            unsafe { b::kunmap_local(va) };
            copied
        })
    }

    /// Executes `op` on the native-endian `u64` at position `pos` with a hardware atomic (so it
    /// is atomic with respect to every CPU access), and returns the old value. The address must be
    /// 8-byte aligned (`EINVAL`). Never sleeps.
    pub fn atomic(&self, pos: u64, op: AtomicOp) -> Result<u64> {
        let abs = self.abs(pos, 8)?;
        if abs % 8 != 0 {
            return Err(EINVAL);
        }
        let page = self.page(abs >> PAGE_SHIFT)?;
        let off = abs & (PAGE_SIZE - 1);
        // SAFETY: the page is pinned (type invariant).
        let va = unsafe { b::kmap_local_page(page.as_ptr()) };
        // SAFETY: `va + off` is an aligned u64 inside the mapped page (`off <= PAGE_SIZE - 8`).
        let old = unsafe { hw_atomic(va.cast::<u8>().add(off).cast::<u64>(), op) };
        // SAFETY: `va` was mapped above, and is the last mapping of this thread.
        unsafe { b::kunmap_local(va) };
        Ok(old)
    }
}

/// Executes `op` on `*p` atomically and returns the old value.
///
/// # Safety
///
/// `p` must be valid and 8-byte aligned for the call.
pub(crate) unsafe fn hw_atomic(p: *mut u64, op: AtomicOp) -> u64 {
    // SAFETY: per the caller; all accesses we make to registered memory that may overlap are
    // either atomic (here) or byte copies, which the RDMA contract leaves unordered.
    let a = unsafe { AtomicU64::from_ptr(p) };
    match op {
        AtomicOp::CmpSwap { compare, swap } => {
            match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            }
        }
        AtomicOp::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
    }
}
