// SPDX-License-Identifier: GPL-2.0

//! Ring memory shared with user space, exported the siw way: a `vmalloc_user` buffer behind an
//! ib_core mmap entry (`rdma_user_mmap_entry_insert`), mapped by `ops.mmap` with
//! `remap_vmalloc_range` and freed by `ops.mmap_free`, after an RCU grace period, once the
//! entry is removed and its last user mapping is gone.
//!
//! Pages mapped into a process hold their own page references, so the kernel may stop using a
//! buffer as soon as its owner drops it; the free in `mmap_free` only waits for concurrent
//! `mmap` calls (which look the entry up) to finish, and for RCU readers of the ring's header
//! (see [`ProducerWatch`](super::queue::ProducerWatch)).

use super::{uabi::MmapInfo, udata::Udata};
use crate::bindings as b;
use core::ptr::NonNull;
use kernel::{
    error::{from_result, to_result},
    prelude::*,
};

/// The driver's mmap entry: ib_core's part first (ib_core hands back pointers to it), then the
/// buffer it exports.
#[repr(C)]
struct MmapEntry {
    rdma: b::rdma_user_mmap_entry,
    buf: NonNull<u8>,
}

/// A zeroed, page-granular `vmalloc_user` buffer, either private to the kernel or exported to
/// one user context through an mmap entry. Either way it is freed only after an RCU grace period
/// that begins once its owner dropped it: a reader that found the buffer in an RCU read-side
/// section may finish reading it.
///
/// Dropping it may sleep (`rdma_user_mmap_entry_remove` takes a mutex; `kvfree_rcu_mightsleep`
/// waits for a grace period when it cannot allocate): drop it only in process context, never
/// under a spinlock.
///
/// # Invariants
///
/// `ptr` is a live `vmalloc_user` allocation of at least `len` bytes. With `entry`, the buffer
/// is owned by that mmap entry (inserted into ib_core, on which this value holds the driver's
/// reference, and which frees the buffer in `mmap_free`); without, it is owned by this value.
pub struct SharedBuf {
    ptr: NonNull<u8>,
    len: usize,
    entry: Option<NonNull<MmapEntry>>,
    mi: MmapInfo,
}

// SAFETY: the buffer and the entry reference may be used and released from any thread.
unsafe impl Send for SharedBuf {}
// SAFETY: `&SharedBuf` only hands out the address; accesses are the owner's business.
unsafe impl Sync for SharedBuf {}

fn vmalloc_user(len: usize) -> Result<NonNull<u8>> {
    let size = kernel::ffi::c_ulong::try_from(len).map_err(|_| EINVAL)?;
    // SAFETY: any size may be requested; the result is NULL or a zeroed allocation of `len`
    // bytes (rounded up to pages).
    let p = unsafe { b::rvr_vmalloc_user(size) };
    NonNull::new(p.cast::<u8>()).ok_or(ENOMEM)
}

impl SharedBuf {
    /// A kernel-private buffer of `len` zeroed bytes (never mapped).
    pub fn new_kernel(len: usize) -> Result<Self> {
        let ptr = vmalloc_user(len)?;
        // INVARIANT: a fresh allocation we own.
        Ok(Self {
            ptr,
            len,
            entry: None,
            mi: MmapInfo::default(),
        })
    }

    /// A buffer of `len` zeroed bytes that the caller of `udata` may `mmap` (see
    /// [`SharedBuf::mmap_info`]).
    pub fn new_user(udata: &Udata<'_>, len: usize) -> Result<Self> {
        let page_len = len
            .checked_next_multiple_of(kernel::page::PAGE_SIZE)
            .ok_or(EINVAL)?;
        let size = u32::try_from(page_len).map_err(|_| EINVAL)?;
        let ptr = vmalloc_user(len)?;
        let entry = KBox::new(
            MmapEntry {
                // SAFETY: all-zero is a valid (not yet inserted) `rdma_user_mmap_entry`.
                rdma: unsafe { core::mem::zeroed() },
                buf: ptr,
            },
            GFP_KERNEL,
        );
        let entry = match entry {
            Ok(e) => KBox::into_raw(e),
            Err(e) => {
                // SAFETY: `ptr` is ours and unused.
                unsafe { b::vfree(ptr.as_ptr().cast()) };
                return Err(e.into());
            }
        };
        // SAFETY: `entry` is a live, pinned (boxed) entry; the ucontext is the caller's, valid
        // for this verb call.
        let ret = unsafe {
            b::rdma_user_mmap_entry_insert(
                udata.ucontext(),
                core::ptr::addr_of_mut!((*entry).rdma),
                page_len,
            )
        };
        if let Err(e) = to_result(ret) {
            // SAFETY: the insert failed, so `entry` and `ptr` are still only ours.
            unsafe {
                drop(KBox::from_raw(entry));
                b::vfree(ptr.as_ptr().cast());
            }
            return Err(e);
        }
        // SAFETY: the entry is inserted and live (we hold its reference).
        let offset = unsafe { b::rvr_mmap_get_offset(core::ptr::addr_of!((*entry).rdma)) };
        // INVARIANT: the inserted entry owns the buffer; we hold the driver's reference.
        Ok(Self {
            ptr,
            len,
            // SAFETY: `KBox::into_raw` never returns NULL.
            entry: Some(unsafe { NonNull::new_unchecked(entry) }),
            mi: MmapInfo {
                offset,
                size,
                pad: 0,
            },
        })
    }

    /// The kernel address of the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length asked for at creation.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: kept for API completeness).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where user space maps the buffer (all zero for a kernel-private buffer).
    pub fn mmap_info(&self) -> MmapInfo {
        self.mi
    }

    /// Whether the buffer is exported to user space.
    pub fn is_user(&self) -> bool {
        self.entry.is_some()
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        match self.entry {
            // SAFETY: we hold the driver's reference on the inserted entry (type invariant);
            // removing it drops that reference, and `mmap_free` frees the buffer at the last
            // one. We never touch the buffer again.
            Some(e) => unsafe {
                b::rdma_user_mmap_entry_remove(core::ptr::addr_of_mut!((*e.as_ptr()).rdma))
            },
            // After a grace period, as in `mmap_free`.
            // SAFETY: we own the buffer (type invariant) and drop it once; dropping may sleep
            // (see the type's docs).
            None => unsafe { b::rvr_vfree_after_rcu(self.ptr.as_ptr().cast()) },
        }
    }
}

/// Fills the device-wide mmap entries of an ops table.
pub(crate) fn install(ops: &mut b::ib_device_ops) {
    ops.mmap = Some(mmap);
    ops.mmap_free = Some(mmap_free);
}

/// # Safety
///
/// ib_core callback: `uctx` is a live user context of one of our devices, `vma` the mapping
/// being created on its uverbs file.
unsafe extern "C" fn mmap(uctx: *mut b::ib_ucontext, vma: *mut b::vm_area_struct) -> c_int {
    from_result(|| {
        // SAFETY: valid per the callback contract; the entry comes back with a reference.
        let e = unsafe { b::rdma_user_mmap_entry_get(uctx, vma) };
        if e.is_null() {
            return Err(EINVAL);
        }
        // Every entry of our devices is an `MmapEntry` (inserted by `SharedBuf::new_user`)
        // with `rdma` first.
        let entry = e.cast::<MmapEntry>();
        // SAFETY: we hold a reference, so the entry and its buffer (freed only in
        // `mmap_free`) are live; `get` checked that the VMA is shared and exactly as long as
        // the entry, which is no longer than the vmalloc area.
        let ret = unsafe { b::remap_vmalloc_range(vma, (*entry).buf.as_ptr().cast(), 0) };
        // SAFETY: drops the reference `get` took.
        unsafe { b::rdma_user_mmap_entry_put(e) };
        to_result(ret)?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: the last reference on `e`, one of our entries, is gone.
unsafe extern "C" fn mmap_free(e: *mut b::rdma_user_mmap_entry) {
    let entry = e.cast::<MmapEntry>();
    // SAFETY: every entry of our devices was boxed by `SharedBuf::new_user` and leaked into
    // ib_core, which hands it back exactly once here; `rdma` is its first field.
    let entry = unsafe { KBox::from_raw(entry) };
    // The buffer goes after an RCU grace period: a [`ProducerWatch`](super::queue::ProducerWatch)
    // may still be reading its producer index in a read-side section that began before the
    // ring, dropped, revoked it.
    // SAFETY: the entry owned the buffer, and no new user of it can appear; ib_core calls this
    // in process context (the entry's removal or an `mmap` call's put), where it may sleep.
    unsafe { b::rvr_vfree_after_rcu(entry.buf.as_ptr().cast()) };
}
