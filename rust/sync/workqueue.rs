// SPDX-License-Identifier: GPL-2.0

//! rvrdma's private workqueue: every QP's work item runs on it, in process context. That work
//! is whatever the QP's other entry points defer: timer expiries (retransmission, RNR, ring
//! polling; the hrtimer callbacks only queue the work item), sending what a burst left beyond
//! its transmit budget, route lookups, and the processing of work requests posted by kernel
//! callers.
//! The CQs' calls of ib_core's completion and event handlers run here too. Received packets
//! are not handled here (the UDP tunnel's receive hook handles them in softirq context). Being
//! private, the queue can be drained at module unload.

use crate::bindings as b;
use core::ptr::NonNull;
use kernel::{
    prelude::*,
    workqueue::{HasDelayedWork, HasWork, Queue, RawWorkItem, Work},
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
    /// Takes the workqueue that `alloc` makes for `name`.
    ///
    /// # Safety
    ///
    /// `alloc` must be one of the C helpers that allocate a workqueue: given a NUL-terminated
    /// name, it returns NULL or a new workqueue the caller owns.
    unsafe fn allocated(
        alloc: unsafe extern "C" fn(*const c_char) -> *mut b::workqueue_struct,
        name: &'static CStr,
    ) -> Result<Self> {
        // SAFETY: `name` is a NUL-terminated static string, which is all `alloc` needs (the
        // caller's guarantee).
        let q = unsafe { alloc(name.as_char_ptr()) };
        // INVARIANT: a non-NULL result is a live workqueue we own.
        NonNull::new(q).map(Self).ok_or(ENOMEM)
    }

    /// Allocates an unbound, memory-reclaim-safe workqueue named `name`.
    pub fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `rvr_alloc_wq` allocates a workqueue and hands it to its caller.
        unsafe { Self::allocated(b::rvr_alloc_wq, name) }
    }

    /// Allocates a per-CPU (bound), high-priority, memory-reclaim-safe workqueue named `name`:
    /// work queued for a CPU runs on that CPU.
    pub fn new_percpu(name: &'static CStr) -> Result<Self> {
        // SAFETY: `rvr_alloc_percpu_wq` allocates a workqueue and hands it to its caller.
        unsafe { Self::allocated(b::rvr_alloc_percpu_wq, name) }
    }

    /// Allocates a per-CPU (bound), high-priority workqueue named `name` for work items that
    /// wait by spinning: `WQ_CPU_INTENSIVE`, so that while one runs, the CPU's other work items
    /// still start (in another worker, which the scheduler then runs beside it).
    pub fn new_spin(name: &'static CStr) -> Result<Self> {
        // SAFETY: `rvr_alloc_spin_wq` allocates a workqueue and hands it to its caller.
        unsafe { Self::allocated(b::rvr_alloc_spin_wq, name) }
    }

    /// Allocates a bottom-half workqueue named `name`: work queued for a CPU runs there in
    /// softirq context, ahead of every task (queued for another CPU, it gets there by IPI).
    pub fn new_bh(name: &'static CStr) -> Result<Self> {
        // SAFETY: `rvr_alloc_bh_wq` allocates a workqueue and hands it to its caller.
        unsafe { Self::allocated(b::rvr_alloc_bh_wq, name) }
    }

    /// Allocates an unbound, high-priority, memory-reclaim-safe workqueue named `name`: its
    /// workers run ahead of ordinary tasks, on whichever CPU the scheduler finds free.
    pub fn new_any_cpu(name: &'static CStr) -> Result<Self> {
        // SAFETY: `rvr_alloc_any_cpu_wq` allocates a workqueue and hands it to its caller.
        unsafe { Self::allocated(b::rvr_alloc_any_cpu_wq, name) }
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
/// The module's per-CPU workqueue, set with [`QUEUE`].
static CPU_QUEUE: core::sync::atomic::AtomicPtr<b::workqueue_struct> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// The module's per-CPU workqueue for work items that spin, set with [`QUEUE`].
static SPIN_QUEUE: core::sync::atomic::AtomicPtr<b::workqueue_struct> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// The module's bottom-half workqueue, set with [`QUEUE`].
static BH_QUEUE: core::sync::atomic::AtomicPtr<b::workqueue_struct> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// The module's unbound high-priority workqueue, set with [`QUEUE`].
static ANY_CPU_QUEUE: core::sync::atomic::AtomicPtr<b::workqueue_struct> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Owns the module-wide workqueues: created at module init, drained and destroyed at module
/// exit after every device is gone.
pub struct ModuleQueue {
    /// Kept alive (and destroyed) with the module, in this order.
    _any_cpu: OwnedQueue,
    _bh: OwnedQueue,
    _spin: OwnedQueue,
    _percpu: OwnedQueue,
    _queue: OwnedQueue,
}

impl ModuleQueue {
    /// Creates the module workqueues and publishes them for [`queue`] and [`enqueue_on`].
    pub fn new() -> Result<Self> {
        let q = OwnedQueue::new(c"rvrdma")?;
        let pc = OwnedQueue::new_percpu(c"rvrdma_cpu")?;
        let spin = OwnedQueue::new_spin(c"rvrdma_spin")?;
        let bh = OwnedQueue::new_bh(c"rvrdma_bh")?;
        let any_cpu = OwnedQueue::new_any_cpu(c"rvrdma_any")?;
        QUEUE.store(q.0.as_ptr(), core::sync::atomic::Ordering::Release);
        CPU_QUEUE.store(pc.0.as_ptr(), core::sync::atomic::Ordering::Release);
        SPIN_QUEUE.store(spin.0.as_ptr(), core::sync::atomic::Ordering::Release);
        BH_QUEUE.store(bh.0.as_ptr(), core::sync::atomic::Ordering::Release);
        ANY_CPU_QUEUE.store(any_cpu.0.as_ptr(), core::sync::atomic::Ordering::Release);
        Ok(Self {
            _any_cpu: any_cpu,
            _bh: bh,
            _spin: spin,
            _percpu: pc,
            _queue: q,
        })
    }
}

impl Drop for ModuleQueue {
    fn drop(&mut self) {
        ANY_CPU_QUEUE.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Release);
        BH_QUEUE.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Release);
        SPIN_QUEUE.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Release);
        CPU_QUEUE.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Release);
        QUEUE.store(core::ptr::null_mut(), core::sync::atomic::Ordering::Release);
    }
}

/// Queues the work item `w` to run on `cpu` (the module's per-CPU workqueue), or on this CPU if
/// `cpu` is offline. Returns `Err(w)` if it was already queued. Any context; only while the
/// module is initialised, as [`queue`].
pub fn enqueue_on<W, const ID: u64>(cpu: u32, w: W) -> W::EnqueueOutput
where
    W: RawWorkItem<ID> + Send + 'static,
{
    enqueue_on_queue(&CPU_QUEUE, cpu, w)
}

/// Queues the work item `w`, one that waits by spinning, to run on `cpu` (the module's
/// CPU-intensive per-CPU workqueue), or on this CPU if `cpu` is offline. Returns `Err(w)` if
/// it was already queued. Any context; only while the module is initialised, as [`queue`].
pub fn enqueue_spin_on<W, const ID: u64>(cpu: u32, w: W) -> W::EnqueueOutput
where
    W: RawWorkItem<ID> + Send + 'static,
{
    enqueue_on_queue(&SPIN_QUEUE, cpu, w)
}

/// Queues the work item `w` to run in softirq context on `cpu` (the module's bottom-half
/// workqueue), or on this CPU if `cpu` is offline. Returns `Err(w)` if it was already queued.
/// Any context; only while the module is initialised, as [`queue`].
pub fn enqueue_bh_on<W, const ID: u64>(cpu: u32, w: W) -> W::EnqueueOutput
where
    W: RawWorkItem<ID> + Send + 'static,
{
    enqueue_on_queue(&BH_QUEUE, cpu, w)
}

/// `queue_work_on(cpu)` on one of the module's bound queues.
fn enqueue_on_queue<W, const ID: u64>(
    queue: &core::sync::atomic::AtomicPtr<b::workqueue_struct>,
    cpu: u32,
    w: W,
) -> W::EnqueueOutput
where
    W: RawWorkItem<ID> + Send + 'static,
{
    let q = queue.load(core::sync::atomic::Ordering::Acquire);
    assert!(!q.is_null());
    let cpu = c_int::try_from(cpu).unwrap_or(0);
    // SAFETY: `q` is one of the module's live bound queues (non-NULL while `ModuleQueue` lives,
    // which outlives every caller). `__enqueue` hands the closure a pointer to the item's
    // `work_struct`, valid until the work runs, as `queue_work_on` requires; the closure returns
    // whether the item was queued, which is what `__enqueue` expects.
    unsafe { w.__enqueue(move |work_ptr| b::rvr_queue_work_on_online(cpu, q, work_ptr.cast())) }
}

/// The module's protocol workqueue (every QP's work item runs on it).
///
/// Only callable while the module is initialised (between [`ModuleQueue::new`] and its drop),
/// which holds for every verb and work item: devices exist only in that window.
pub fn queue() -> &'static Queue {
    published(&QUEUE)
}

/// The module's per-CPU, high-priority workqueue: work queued on it runs on the queuing CPU
/// (for a delayed item, the CPU its timer fires on) ahead of ordinary tasks.
///
/// Only callable while the module is initialised, as [`queue`].
pub fn cpu_queue() -> &'static Queue {
    published(&CPU_QUEUE)
}

/// The module's unbound, high-priority workqueue: work queued on it runs in a worker thread
/// ahead of ordinary tasks, on whichever CPU the scheduler finds free.
///
/// Only callable while the module is initialised, as [`queue`].
pub fn any_cpu_queue() -> &'static Queue {
    published(&ANY_CPU_QUEUE)
}

/// The module's bottom-half workqueue: work queued on it runs in softirq context on the
/// queuing CPU, after the current softirq work.
///
/// Only callable while the module is initialised, as [`queue`].
pub fn bh_queue() -> &'static Queue {
    published(&BH_QUEUE)
}

/// One of the module's workqueues, as [`ModuleQueue`] published it.
fn published(queue: &core::sync::atomic::AtomicPtr<b::workqueue_struct>) -> &'static Queue {
    let q = queue.load(core::sync::atomic::Ordering::Acquire);
    assert!(!q.is_null());
    // SAFETY: non-NULL means `ModuleQueue` is alive, and it outlives every caller (module exit
    // tears devices down before dropping it).
    unsafe { Queue::from_raw(q) }
}

/// The kernel's default unbound workqueue (`system_dfl_wq`, without `WQ_MEM_RECLAIM`): for work
/// that may wait for memory reclaim, which the module's own queues must not.
pub fn system_dfl() -> &'static Queue {
    // SAFETY: `system_dfl_wq` is set up at boot, never changes and is never destroyed.
    unsafe { Queue::from_raw(kernel::bindings::system_dfl_wq) }
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

/// Runs the delayed work item `W` embedded in `item` now if its timer is pending, and waits
/// until it is neither queued nor running (`flush_delayed_work`). May sleep: process context
/// only.
pub fn flush_delayed_work<T: HasDelayedWork<T, ID>, const ID: u64>(item: &T) -> bool {
    // SAFETY: `item` is a live `T`, so the pointer to its embedded `Work` is valid.
    let work = unsafe { T::raw_get_work(core::ptr::from_ref(item).cast_mut()) };
    // SAFETY: `work` points at an initialised `Work` inside `item`.
    let ws = unsafe { Work::raw_get(work) };
    // SAFETY: `HasDelayedWork` promises that this `work_struct` is the `work` field of a
    // `delayed_work`, live as long as `item`.
    let dw = unsafe { kernel::container_of!(ws, b::delayed_work, work) };
    // SAFETY: `dw` is an initialised `delayed_work` inside `item`, live for this call.
    unsafe { b::flush_delayed_work(dw) }
}
