// SPDX-License-Identifier: GPL-2.0

//! rvrdma's private workqueue: all protocol work (receive, transmit, timers, completion
//! notifications) runs on it in process context. Being private, it can be drained at module
//! unload.

use crate::bindings as b;
use core::ptr::NonNull;
use kernel::{
    prelude::*,
    workqueue::{HasWork, Queue, Work},
};

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

/// Waits until the work item `W` embedded in `item` is neither queued nor running
/// (`flush_work`): a queued run still happens (and drops its own reference), then this returns.
/// Returns whether it had to wait. May sleep: process context only.
pub fn flush_work<T: HasWork<T, ID>, const ID: u64>(item: &T) -> bool {
    // SAFETY: `item` is a live `T`, so the pointer to its embedded `Work` is valid.
    let work = unsafe { T::raw_get_work(core::ptr::from_ref(item).cast_mut()) };
    // SAFETY: `work` points at an initialised `Work` inside `item`, live for this call;
    // `flush_work` only waits.
    unsafe { b::flush_work(Work::raw_get(work)) }
}
