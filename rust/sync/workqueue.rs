// SPDX-License-Identifier: GPL-2.0

//! rvrdma's private workqueue: all protocol work (receive, transmit, timers, completion
//! notifications) runs on it in process context. Being private, it can be drained at module
//! unload.

use crate::bindings as b;
use core::ptr::NonNull;
use kernel::{prelude::*, workqueue::Queue};

/// An owned workqueue (`alloc_workqueue`), destroyed (drained first) on drop.
///
/// # Invariants
///
/// The pointer is a live workqueue this value owns.
pub struct OwnedQueue(NonNull<b::workqueue_struct>);

// SAFETY: a workqueue may be used and destroyed from any thread.
unsafe impl Send for OwnedQueue {}
// SAFETY: queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// Allocates an unbound, memory-reclaim-safe workqueue named `name`.
    pub fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a NUL-terminated static string.
        let q = unsafe { b::rvr_alloc_wq(name.as_char_ptr()) };
        // INVARIANT: a non-NULL result is a live workqueue we own.
        NonNull::new(q).map(Self).ok_or(ENOMEM)
    }

    /// The queue, for enqueueing work items.
    pub fn queue(&self) -> &Queue {
        // SAFETY: the workqueue lives as long as `self` (type invariant).
        unsafe { Queue::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: we own the live queue (type invariant); `destroy_workqueue` drains it first.
        unsafe { b::destroy_workqueue(self.0.as_ptr()) };
    }
}

/// The module's protocol workqueue, set by [`ModuleQueue`] while the module is loaded.
static QUEUE: core::sync::atomic::AtomicPtr<b::workqueue_struct> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Owns the module-wide protocol workqueue: created at module init, drained and destroyed
/// at module exit after every device is gone.
pub struct ModuleQueue(OwnedQueue);

impl ModuleQueue {
    /// Creates the module workqueue and publishes it for [`queue`].
    pub fn new() -> Result<Self> {
        let q = OwnedQueue::new(c"rvrdma")?;
        QUEUE.store(q.0.as_ptr(), core::sync::atomic::Ordering::Release);
        Ok(Self(q))
    }
}

impl Drop for ModuleQueue {
    fn drop(&mut self) {
        QUEUE.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Release);
    }
}

/// The module's protocol workqueue (all per-QP and receive work runs on it).
///
/// Only callable while the module is initialised (between [`ModuleQueue::new`] and its drop),
/// which holds for every verb and work item: devices exist only in that window.
pub fn queue() -> &'static Queue {
    let q = QUEUE.load(core::sync::atomic::Ordering::Acquire);
    assert!(!q.is_null());
    // SAFETY: non-NULL means `ModuleQueue` is alive, and it outlives every device, hence every
    // caller (module exit tears devices down before dropping it).
    unsafe { Queue::from_raw(q) }
}

/// Waits until `work` is idle: if it is queued it runs first (`flush_work`).
pub fn flush<T: ?Sized, const ID: u64>(work: &kernel::workqueue::Work<T, ID>) {
    // SAFETY: a `&Work` is an initialised, pinned work item (it is only built by pin-init).
    unsafe { b::flush_work(kernel::workqueue::Work::raw_get(work)) };
}
