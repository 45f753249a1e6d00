// SPDX-License-Identifier: GPL-2.0

//! Rings in the rxe layout (`struct rxe_queue_buf`): a 384-byte header (`log2_elem_size`,
//! `index_mask`, `producer_index` at 128, `consumer_index` at 256) followed by a power-of-two
//! number of power-of-two-sized slots. rdma-core's rxe provider maps them and drives its side
//! of each (design doc §1.1-1.2):
//!
//! - [`RingDir::FromUser`] (SQ, RQ, SRQ): user space produces, the kernel consumes;
//! - [`RingDir::ToUser`] (CQ): the kernel produces, user space consumes.
//!
//! The kernel keeps a private copy of every index it owns and never reads it back from the
//! shared header (user space can write anything there); it publishes its index with release
//! stores and reads the user's with acquire loads, masked with its own mask. A kernel-private
//! ring (a kernel ULP's, never mapped) has the same layout and the kernel owns both indices.
//!
//! Slots are copied out once ([`Ring::peek_copy`]); callers validate the copy, never the shared
//! memory (no TOCTOU).
//!
//! [`KernelRing`] is a typed ring with the same geometry for kernel objects that need no shared
//! memory (kernel CQs store typed completions).

use super::{
    mmap::SharedBuf,
    uabi::{
        MmapInfo, QUEUE_CONSUMER_OFF, QUEUE_HDR_SIZE, QUEUE_INDEX_MASK_OFF, QUEUE_LOG2_ELEM_OFF,
        QUEUE_PRODUCER_OFF,
    },
    udata::Udata,
};
use crate::bindings as b;
use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, Ordering};
use kernel::{prelude::*, sync::rcu, sync::Arc};

/// The ring had no free slot (producer side), or a pending entry did not fit (resize).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// Largest number of elements a ring may be asked for (rvrdma's device limits are far below).
pub const MAX_RING_ELEMS: u32 = 1 << 20;
/// Largest element size a ring may be asked for, in bytes.
pub const MAX_RING_ELEM_SIZE: usize = 1 << 16;

/// The number of slots rxe allocates for `nelem` usable elements: one more, rounded up to a
/// power of two. The usable capacity (what verbs report back) is `slots - 1`.
pub fn ring_slots(nelem: u32) -> Result<u32> {
    if nelem > MAX_RING_ELEMS {
        return Err(EINVAL);
    }
    (nelem + 1).checked_next_power_of_two().ok_or(EINVAL)
}

/// The usable capacity of a ring created for `nelem` elements (`slots - 1`, what rxe reports
/// as `cq->cqe`, `max_send_wr`, ...).
pub fn ring_capacity(nelem: u32) -> Result<u32> {
    Ok(ring_slots(nelem)? - 1)
}

/// The slot size rxe uses for elements of `requested` bytes: at least a cache line, rounded up
/// to a power of two.
pub fn ring_elem_size(requested: usize) -> Result<usize> {
    if requested == 0 || requested > MAX_RING_ELEM_SIZE {
        return Err(EINVAL);
    }
    // SAFETY: a pure query.
    let line = unsafe { b::rvr_cache_line_size() } as usize;
    requested
        .max(line)
        .checked_next_power_of_two()
        .ok_or(EINVAL)
}

/// Which side produces a ring's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingDir {
    /// User space produces, the kernel consumes (SQ, RQ, SRQ).
    FromUser,
    /// The kernel produces, user space consumes (CQ).
    ToUser,
}

/// A ring in the rxe layout, in user-mapped or kernel-private memory.
///
/// Dropping a user ring removes its mmap entry, which may sleep: drop rings only in process
/// context, outside spinlocks (swap them out under the lock, drop them after).
///
/// # Invariants
///
/// `buf` holds at least `QUEUE_HDR_SIZE + (mask + 1) << log2_elem` bytes, 4-byte aligned; its
/// header was initialised with `log2_elem` and `mask`. `mask + 1` is a power of two.
/// `prod` and `cons` are `<= mask`.
pub struct Ring {
    buf: SharedBuf,
    dir: RingDir,
    mask: u32,
    log2_elem: u32,
    /// Private copy of the producer index (meaningful when the kernel owns it).
    prod: u32,
    /// Private copy of the consumer index (meaningful when the kernel owns it). A cell, so
    /// that a QP can take receive WQEs while its completion path holds the ring to retire them.
    cons: Cell<u32>,
    /// The consumer index last published to the header (see [`Ring::retire_one`]).
    published: Cell<u32>,
    /// Whether user space owns one of the indices (a mapped ring).
    user: bool,
    /// The look at the ring's fill from outside its owner's lock, if one was asked for.
    watch: Option<Arc<ProducerWatch>>,
}

/// Whether a ring user space produces into holds elements the kernel has not consumed, told
/// without the lock that serialises the ring's consumer: a doorbell that finds everything
/// taken (by another context, under that lock) has nothing to do. The ring mirrors its
/// consumer index here as it advances; the producer index is read from the ring's header, as
/// long as the ring lives. A look can be stale by the time it returns: only "empty" is worth
/// acting on, and only by a producer's own doorbell, whose elements were produced before it
/// looked. A consumer may also mark a take under way ([`Ring::begin_take`]), which then looks
/// at the ring again before it stops: a doorbell that sees the mark may count on that take.
///
/// # Invariants
///
/// `prod` is null or points to the producer index word of a live [`SharedBuf`]'s ring header;
/// the ring nulls it before its buffer is dropped, and a [`SharedBuf`] is freed only after an
/// RCU grace period that begins after its drop.
pub struct ProducerWatch {
    prod: AtomicPtr<u32>,
    /// The kernel's consumer index (masked), stored with release as it advances.
    cons: AtomicU32,
    mask: u32,
    /// A take is under way ([`Ring::begin_take`]).
    taking: AtomicBool,
}

// SAFETY: `prod` is read only through atomic loads of the pointer and of the index word it
// points to (type invariant), which any thread may do.
unsafe impl Send for ProducerWatch {}
// SAFETY: as for `Send`: every access through `&ProducerWatch` is an atomic load.
unsafe impl Sync for ProducerWatch {}

impl ProducerWatch {
    /// `Some(true)` if every element produced so far has been consumed, `Some(false)` if some
    /// wait, `None` if the ring is gone.
    pub fn is_empty(&self) -> Option<bool> {
        let _rcu = rcu::read_lock();
        let p = self.prod.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null, `p` points to the producer index of a ring buffer that was live
        // when it was loaded; its buffer is freed only after a grace period that began after
        // the pointer was nulled, hence after this read-side section began (type invariant).
        // User space writes the word too: it is read atomically.
        let prod = unsafe { AtomicU32::from_ptr(p) }.load(Ordering::Acquire) & self.mask;
        Some(prod == self.cons.load(Ordering::Acquire))
    }

    /// For a producer's doorbell, after it produced: `Some(true)` if what it produced has been
    /// consumed, or a take under way will consume it; otherwise as [`Self::is_empty`].
    pub fn taken_or_taking(&self) -> Option<bool> {
        // Pairs with the fence in `Ring::end_take`: either this sees the mark, or that take,
        // having cleared it, sees what was produced before this call.
        fence(Ordering::SeqCst);
        if self.taking.load(Ordering::Relaxed) && !self.prod.load(Ordering::Relaxed).is_null() {
            return Some(true);
        }
        self.is_empty()
    }
}

impl Ring {
    fn alloc(
        udata: Option<&Udata<'_>>,
        dir: RingDir,
        nelem: u32,
        elem_size: usize,
    ) -> Result<Self> {
        let slots = ring_slots(nelem)?;
        let elem = ring_elem_size(elem_size)?;
        let len = (slots as usize)
            .checked_mul(elem)
            .and_then(|n| n.checked_add(QUEUE_HDR_SIZE))
            .ok_or(EINVAL)?;
        let buf = match udata {
            Some(u) => SharedBuf::new_user(u, len)?,
            None => SharedBuf::new_kernel(len)?,
        };
        let mask = slots - 1;
        let log2_elem = elem.trailing_zeros();
        // SAFETY: the buffer is fresh, page aligned and `len >= QUEUE_HDR_SIZE` bytes long;
        // user space cannot map it before we return its mmap info.
        unsafe {
            buf.as_ptr()
                .add(QUEUE_LOG2_ELEM_OFF)
                .cast::<u32>()
                .write(log2_elem);
            buf.as_ptr()
                .add(QUEUE_INDEX_MASK_OFF)
                .cast::<u32>()
                .write(mask);
        }
        // INVARIANT: sized and initialised above; indices start at 0.
        Ok(Self {
            buf,
            dir,
            mask,
            log2_elem,
            prod: 0,
            cons: Cell::new(0),
            published: Cell::new(0),
            user: udata.is_some(),
            watch: None,
        })
    }

    /// A ring of at least `nelem` elements of `elem_size` bytes that the caller of `udata` maps
    /// with the returned [`MmapInfo`] (answer it in the verb's response).
    pub fn new_user(
        udata: &Udata<'_>,
        dir: RingDir,
        nelem: u32,
        elem_size: usize,
    ) -> Result<(Self, MmapInfo)> {
        let r = Self::alloc(Some(udata), dir, nelem, elem_size)?;
        let mi = r.buf.mmap_info();
        Ok((r, mi))
    }

    /// A kernel-private ring (never mapped; the kernel owns both indices).
    pub fn new_kernel(dir: RingDir, nelem: u32, elem_size: usize) -> Result<Self> {
        Self::alloc(None, dir, nelem, elem_size)
    }

    /// Usable capacity (`slots - 1`).
    pub fn capacity(&self) -> u32 {
        self.mask
    }

    /// Slot size in bytes (a power of two, at least a cache line).
    pub fn elem_size(&self) -> usize {
        1 << self.log2_elem
    }

    /// The direction of the ring.
    pub fn dir(&self) -> RingDir {
        self.dir
    }

    /// Whether the ring is mapped by user space.
    pub fn is_user(&self) -> bool {
        self.user
    }

    /// A [`ProducerWatch`] on this ring, the same one each time; `None` if the kernel owns the
    /// producer index (nothing to watch).
    pub fn watch_producer(&mut self) -> Result<Option<Arc<ProducerWatch>>> {
        if self.kernel_owns_prod() {
            return Ok(None);
        }
        if let Some(w) = &self.watch {
            return Ok(Some(w.clone()));
        }
        // INVARIANT: the producer index word of this ring's live buffer; `Drop` nulls it
        // before the buffer goes.
        let w = Arc::new(
            ProducerWatch {
                prod: AtomicPtr::new(self.index(QUEUE_PRODUCER_OFF).as_ptr()),
                cons: AtomicU32::new(self.cons.get()),
                mask: self.mask,
                taking: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?;
        self.watch = Some(w.clone());
        Ok(Some(w))
    }

    /// Marks a take under way for the watch, if any and not marked yet. A consumer marks when
    /// it has found an element, so a look at an empty ring costs no store and no fence. Before
    /// it stops for an empty ring it calls [`Ring::end_take`]; when it stops with elements left
    /// (for want of room for them), [`Ring::stop_take`]. A producer whose doorbell saw the mark
    /// relies on that take, so only a take whose elements are never left for want of something
    /// its doorbell would get marks.
    pub fn begin_take(&self) {
        if let Some(w) = &self.watch {
            // Only the consumer, under its lock, writes the mark: its own load is current.
            if !w.taking.load(Ordering::Relaxed) {
                w.taking.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Ends a take at an empty ring. Unmarked, it is over: a doorbell that did not see a mark
    /// looks at the ring itself. Marked, it clears the mark, then looks again. `true`: still
    /// empty, the take is over; `false`: an element came meanwhile, the mark is set again and
    /// the take goes on.
    pub fn end_take(&self) -> bool {
        let Some(w) = &self.watch else {
            return true;
        };
        if !w.taking.load(Ordering::Relaxed) {
            return true;
        }
        w.taking.store(false, Ordering::Relaxed);
        // Pairs with the fence in `ProducerWatch::taken_or_taking`.
        fence(Ordering::SeqCst);
        if self.is_empty() {
            return true;
        }
        w.taking.store(true, Ordering::Relaxed);
        false
    }

    /// Clears the mark, if set, of a take that stops with elements left in the ring (they wait
    /// for a later take, which the consumer owes them without a doorbell).
    pub fn stop_take(&self) {
        if let Some(w) = &self.watch {
            if w.taking.load(Ordering::Relaxed) {
                w.taking.store(false, Ordering::Release);
            }
        }
    }

    /// Sets the private consumer index (masked) and its mirror in the watch, if any.
    fn set_cons(&self, v: u32) {
        self.cons.set(v);
        if let Some(w) = &self.watch {
            w.cons.store(v, Ordering::Release);
        }
    }

    /// Where user space maps the ring (zero for a kernel-private ring).
    pub fn mmap_info(&self) -> MmapInfo {
        self.buf.mmap_info()
    }

    fn kernel_owns_prod(&self) -> bool {
        !self.is_user() || self.dir == RingDir::ToUser
    }

    fn kernel_owns_cons(&self) -> bool {
        !self.is_user() || self.dir == RingDir::FromUser
    }

    fn index(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is one of the header offsets, inside the buffer and 4-byte aligned
        // (type invariant); the buffer lives as long as `self`, and all accesses to the index
        // words, kernel and user, are atomic.
        unsafe { AtomicU32::from_ptr(self.buf.as_ptr().add(off).cast::<u32>()) }
    }

    /// The producer index: the private copy, or the user's, read with acquire and masked.
    fn producer(&self) -> u32 {
        if self.kernel_owns_prod() {
            self.prod
        } else {
            self.index(QUEUE_PRODUCER_OFF).load(Ordering::Acquire) & self.mask
        }
    }

    /// The consumer index: the private copy, or the user's, read with acquire and masked.
    fn consumer(&self) -> u32 {
        if self.kernel_owns_cons() {
            self.cons.get()
        } else {
            self.index(QUEUE_CONSUMER_OFF).load(Ordering::Acquire) & self.mask
        }
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let off = QUEUE_HDR_SIZE + (((index & self.mask) as usize) << self.log2_elem);
        // SAFETY: masked, the slot is inside the buffer (type invariant).
        unsafe { self.buf.as_ptr().add(off) }
    }

    /// Number of elements produced and not yet consumed.
    ///
    /// With rdma-core < 55 a user CQ consumer can sit one past the producer; the ring then
    /// counts as full, as in rxe.
    pub fn count(&self) -> u32 {
        self.producer().wrapping_sub(self.consumer()) & self.mask
    }

    /// Whether no element is pending.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Whether no slot is free for the producer.
    pub fn is_full(&self) -> bool {
        self.producer()
            .wrapping_add(1)
            .wrapping_sub(self.consumer())
            & self.mask
            == 0
    }

    /// Copies the element at the kernel's consumer index into `out` (at most
    /// [`Ring::elem_size`] bytes; the rest of `out` is zeroed) without consuming it. Returns
    /// `false` if the ring is empty. Validate the copy, never the ring.
    pub fn peek_copy(&self, out: &mut [u8]) -> bool {
        if self.is_empty() {
            return false;
        }
        let n = out.len().min(self.elem_size());
        let src = self.slot(self.consumer());
        // SAFETY: `src` is a slot of `elem_size() >= n` bytes inside the live buffer; `out` is
        // ours. User space may write the slot concurrently: we copy bytes, whose values we
        // validate afterwards.
        unsafe { core::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), n) };
        // Usually the slot fills `out`: no `memset` call for nothing.
        if n < out.len() {
            out[n..].fill(0);
        }
        true
    }

    /// Consumes the element at the consumer index and publishes the new index (release).
    /// Does nothing if the ring is empty or the kernel does not own the consumer index.
    pub fn advance_consumer(&mut self) {
        if self.advance_consumer_private() {
            self.publish(self.cons.get());
        }
    }

    /// Consumes the element at the consumer index without publishing it (see
    /// [`Ring::publish_consumer`]); returns whether it advanced.
    pub fn advance_consumer_private(&self) -> bool {
        if !self.kernel_owns_cons() || self.is_empty() {
            return false;
        }
        self.set_cons((self.cons.get() + 1) & self.mask);
        true
    }

    /// Publishes the consumer index lagging `outstanding` elements behind the private one: slots
    /// taken but not yet retired stay unavailable to the user producer, so user space never has
    /// more than the ring's capacity in flight (a QP's receive ring).
    pub fn publish_consumer(&self, outstanding: u32) {
        if self.kernel_owns_cons() {
            self.publish(self.cons.get().wrapping_sub(outstanding.min(self.mask)) & self.mask);
        }
    }

    /// Publishes one more element as retired (at most up to the private consumer index): call
    /// it before the element's completion becomes visible, so that user space, seeing the
    /// completion, finds its slot free.
    pub fn retire_one(&self) {
        let p = self.published.get();
        if self.kernel_owns_cons() && p != self.cons.get() {
            self.publish((p + 1) & self.mask);
        }
    }

    fn publish(&self, v: u32) {
        self.published.set(v);
        self.index(QUEUE_CONSUMER_OFF).store(v, Ordering::Release);
    }

    /// Writes `elem` (at most [`Ring::elem_size`] bytes) into the next free slot and publishes
    /// the producer index (release). `Err(Full)` if no slot is free or the kernel does not own
    /// the producer index.
    pub fn produce(&mut self, elem: &[u8]) -> Result<(), Full> {
        if !self.kernel_owns_prod() || self.is_full() {
            return Err(Full);
        }
        let n = elem.len().min(self.elem_size());
        let dst = self.slot(self.prod);
        // SAFETY: `dst` is a free slot of `elem_size() >= n` bytes inside the live buffer.
        unsafe { core::ptr::copy_nonoverlapping(elem.as_ptr(), dst, n) };
        self.prod = (self.prod + 1) & self.mask;
        self.index(QUEUE_PRODUCER_OFF)
            .store(self.prod, Ordering::Release);
        Ok(())
    }

    /// Moves the pending elements of `old` into this fresh ring (the resize verbs): they are
    /// copied from `old`'s consumer index into slots `0..count`, the producer index becomes
    /// `count` and the consumer index 0, in the private copies and the header. `Err(Full)` (and
    /// nothing changes) if they do not fit.
    ///
    /// Call it under the lock that serialises the kernel's use of `old`, then swap the rings
    /// and drop the old one outside the lock.
    pub fn take_pending(&mut self, old: &Ring) -> Result<(), Full> {
        let count = old.count();
        if count > self.capacity() {
            return Err(Full);
        }
        let n = old.elem_size().min(self.elem_size());
        let start = old.consumer();
        for i in 0..count {
            let src = old.slot(start.wrapping_add(i));
            let dst = self.slot(i);
            // SAFETY: both are slots of at least `n` bytes in distinct live buffers.
            unsafe { core::ptr::copy_nonoverlapping(src, dst, n) };
        }
        self.prod = count;
        self.set_cons(0);
        self.published.set(0);
        self.index(QUEUE_CONSUMER_OFF).store(0, Ordering::Release);
        self.index(QUEUE_PRODUCER_OFF)
            .store(count, Ordering::Release);
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Before the buffer goes (fields drop after this): a watch looks no more.
        if let Some(w) = &self.watch {
            w.prod.store(ptr::null_mut(), Ordering::Release);
        }
    }
}

/// A kernel-only typed ring with rxe's geometry (`slots - 1` usable entries).
pub struct KernelRing<T> {
    slots: KVec<Option<T>>,
    prod: u32,
    cons: u32,
    mask: u32,
}

impl<T> KernelRing<T> {
    /// A ring for at least `nelem` entries (allocates; may sleep).
    pub fn new(nelem: u32) -> Result<Self> {
        let n = ring_slots(nelem)?;
        let mut slots = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            slots,
            prod: 0,
            cons: 0,
            mask: n - 1,
        })
    }

    /// Usable capacity (`slots - 1`).
    pub fn capacity(&self) -> u32 {
        self.mask
    }

    /// Number of pending entries.
    pub fn count(&self) -> u32 {
        self.prod.wrapping_sub(self.cons) & self.mask
    }

    /// Whether no entry is pending.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Whether no slot is free.
    pub fn is_full(&self) -> bool {
        self.count() == self.mask
    }

    /// Appends `v`; `Err(Full)` if no slot is free.
    pub fn push(&mut self, v: T) -> Result<(), Full> {
        if self.is_full() {
            return Err(Full);
        }
        if let Some(s) = self.slots.get_mut(self.prod as usize) {
            *s = Some(v);
        }
        self.prod = (self.prod + 1) & self.mask;
        Ok(())
    }

    /// Removes the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let v = self
            .slots
            .get_mut(self.cons as usize)
            .and_then(Option::take);
        self.cons = (self.cons + 1) & self.mask;
        v
    }

    /// Moves all pending entries of `old` into this (fresh) ring; `Err(Full)` (nothing moved)
    /// if they do not fit.
    pub fn take_pending(&mut self, old: &mut KernelRing<T>) -> Result<(), Full> {
        if old.count() > self.capacity() - self.count() {
            return Err(Full);
        }
        while let Some(v) = old.pop() {
            self.push(v)?;
        }
        Ok(())
    }
}

#[kernel::prelude::kunit_tests(rvrdma_queue)]
mod tests {
    use super::*;

    /// A kernel-memory ring whose user-side index behaves as if user space owned it.
    fn fake_user(dir: RingDir, nelem: u32, elem: usize) -> Ring {
        let mut r = Ring::new_kernel(dir, nelem, elem).unwrap();
        r.user = true;
        r
    }

    fn user_store(r: &Ring, off: usize, v: u32) {
        r.index(off).store(v, Ordering::Release);
    }

    fn header(r: &Ring, off: usize) -> u32 {
        r.index(off).load(Ordering::Acquire)
    }

    /// rxe's geometry: `roundup_pow_of_two(n + 1)` slots, elements of at least a cache line.
    #[test]
    fn geometry_as_rxe() {
        for (n, cap) in [
            (0, 0),
            (1, 1),
            (2, 3),
            (3, 3),
            (4, 7),
            (255, 255),
            (256, 511),
        ] {
            assert_eq!(ring_capacity(n).ok(), Some(cap));
        }
        assert_eq!(ring_capacity(0x7fff).ok(), Some(0x7fff));
        assert!(ring_capacity(MAX_RING_ELEMS + 1).is_err());
        assert_eq!(ring_elem_size(1).ok(), Some(64));
        assert_eq!(ring_elem_size(48).ok(), Some(64));
        assert_eq!(
            ring_elem_size(super::super::uabi::RXE_CQE_SIZE).ok(),
            Some(128)
        );
        assert_eq!(ring_elem_size(208 + 16).ok(), Some(256));
        assert!(ring_elem_size(0).is_err());
        let r = Ring::new_kernel(RingDir::ToUser, 5, 48).unwrap();
        assert_eq!(r.capacity(), 7);
        assert_eq!(r.elem_size(), 64);
        assert_eq!(header(&r, QUEUE_INDEX_MASK_OFF), 7);
        assert_eq!(header(&r, QUEUE_LOG2_ELEM_OFF), 6);
    }

    /// A kernel-produced ring (CQ) with a user consumer: fills to capacity, publishes the
    /// producer index, frees slots as the user consumer moves, and masks the user's index.
    #[test]
    fn to_user_producer() {
        let mut r = fake_user(RingDir::ToUser, 3, 48);
        for i in 0..3u8 {
            assert!(r.produce(&[i; 48]).is_ok());
        }
        assert!(r.is_full());
        assert_eq!(r.produce(&[9; 48]), Err(Full));
        assert_eq!(header(&r, QUEUE_PRODUCER_OFF), 3);
        // The kernel does not consume a ring user space consumes.
        r.advance_consumer();
        assert_eq!(r.count(), 3);
        // The user consumes two (with garbage in the high bits).
        user_store(&r, QUEUE_CONSUMER_OFF, 0xffff_ff02);
        assert_eq!(r.count(), 1);
        assert!(r.produce(&[3; 48]).is_ok());
        assert!(r.produce(&[4; 48]).is_ok());
        assert!(r.is_full());
        // rdma-core < 55 can leave the consumer one past the producer: full, never more.
        user_store(&r, QUEUE_CONSUMER_OFF, header(&r, QUEUE_PRODUCER_OFF) + 1);
        assert!(r.is_full());
        assert_eq!(r.count(), r.capacity());
        assert_eq!(r.produce(&[5; 48]), Err(Full));
    }

    /// A user-produced ring (SQ/RQ/SRQ): the kernel copies out, advances and publishes its
    /// private consumer index, never trusting the user's producer beyond the mask.
    #[test]
    fn from_user_consumer() {
        let mut r = fake_user(RingDir::FromUser, 3, 64);
        let mut out = [0u8; 80];
        assert!(!r.peek_copy(&mut out));
        assert_eq!(r.produce(&[1; 64]), Err(Full));
        // The user writes two elements, then publishes the producer index.
        for i in 0..2u32 {
            let slot = r.slot(i);
            // SAFETY: a slot of 64 bytes inside the live ring.
            unsafe { core::ptr::write_bytes(slot, 0x10 + i as u8, 64) };
        }
        user_store(&r, QUEUE_PRODUCER_OFF, 0x1234_5672);
        assert_eq!(r.count(), 2);
        assert!(r.peek_copy(&mut out));
        assert!(out[..64].iter().all(|b| *b == 0x10) && out[64..].iter().all(|b| *b == 0));
        r.advance_consumer();
        assert_eq!(header(&r, QUEUE_CONSUMER_OFF), 1);
        assert!(r.peek_copy(&mut out));
        assert_eq!(out[0], 0x11);
        assert!(r.advance_consumer_private());
        assert_eq!(header(&r, QUEUE_CONSUMER_OFF), 1);
        r.publish_consumer(0);
        assert_eq!(header(&r, QUEUE_CONSUMER_OFF), 2);
        assert!(r.is_empty());
        assert!(!r.advance_consumer_private());
        r.publish_consumer(1);
        assert_eq!(header(&r, QUEUE_CONSUMER_OFF), 1);
    }

    /// The watch on a user-produced ring sees what the user produced and what the kernel
    /// consumed, masks the user's index, and looks no more once the ring is gone; a ring whose
    /// producer the kernel owns has none.
    #[test]
    fn producer_watch() {
        assert!(fake_user(RingDir::ToUser, 3, 64)
            .watch_producer()
            .unwrap()
            .is_none());
        assert!(Ring::new_kernel(RingDir::FromUser, 3, 64)
            .unwrap()
            .watch_producer()
            .unwrap()
            .is_none());
        let mut r = fake_user(RingDir::FromUser, 3, 64);
        let w = r.watch_producer().unwrap().unwrap();
        assert!(Arc::ptr_eq(&w, &r.watch_producer().unwrap().unwrap()));
        assert_eq!(w.is_empty(), Some(true));
        user_store(&r, QUEUE_PRODUCER_OFF, 0xffff_fff2);
        assert_eq!(w.is_empty(), Some(false));
        r.advance_consumer();
        assert_eq!(w.is_empty(), Some(false));
        assert!(r.advance_consumer_private());
        assert_eq!(w.is_empty(), Some(true));
        // Around the end of the ring (4 slots).
        user_store(&r, QUEUE_PRODUCER_OFF, 1);
        assert_eq!(w.is_empty(), Some(false));
        for _ in 0..3 {
            r.advance_consumer();
        }
        assert_eq!(w.is_empty(), Some(true));
        // An unmarked take ends at once, even if an element came: its doorbell looks itself.
        user_store(&r, QUEUE_PRODUCER_OFF, 2);
        assert!(r.end_take());
        assert_eq!(w.taken_or_taking(), Some(false));
        r.stop_take();
        assert_eq!(w.taken_or_taking(), Some(false));
        // A take under way counts for a doorbell, and looks again as it ends.
        r.begin_take();
        r.begin_take();
        assert_eq!(w.is_empty(), Some(false));
        assert_eq!(w.taken_or_taking(), Some(true));
        assert!(!r.end_take());
        assert_eq!(w.taken_or_taking(), Some(true));
        r.advance_consumer();
        assert!(r.end_take());
        assert_eq!(w.taken_or_taking(), Some(true));
        user_store(&r, QUEUE_PRODUCER_OFF, 3);
        assert_eq!(w.taken_or_taking(), Some(false));
        r.begin_take();
        r.stop_take();
        assert_eq!(w.taken_or_taking(), Some(false));
        r.begin_take();
        drop(r);
        assert_eq!(w.is_empty(), None);
        assert_eq!(w.taken_or_taking(), None);
    }

    /// Resizing copies the pending elements in order to slot 0 on, and refuses a ring that is
    /// too small.
    #[test]
    fn resize_moves_pending() {
        let mut old = Ring::new_kernel(RingDir::ToUser, 7, 64).unwrap();
        for i in 0..7u8 {
            assert!(old.produce(&[i; 64]).is_ok());
        }
        for _ in 0..4 {
            old.advance_consumer();
        }
        // Wrap the producer around.
        for i in 7..10u8 {
            assert!(old.produce(&[i; 64]).is_ok());
        }
        assert_eq!(old.count(), 6);
        let mut small = Ring::new_kernel(RingDir::ToUser, 3, 64).unwrap();
        assert_eq!(small.take_pending(&old), Err(Full));
        let mut new = Ring::new_kernel(RingDir::ToUser, 6, 128).unwrap();
        assert!(new.take_pending(&old).is_ok());
        assert_eq!(new.count(), 6);
        assert_eq!(header(&new, QUEUE_PRODUCER_OFF), 6);
        assert_eq!(header(&new, QUEUE_CONSUMER_OFF), 0);
        let mut out = [0u8; 64];
        for want in 4..10u8 {
            assert!(new.peek_copy(&mut out));
            assert_eq!(out[0], want);
            new.advance_consumer();
        }
        assert!(new.is_empty());
    }

    /// The typed kernel ring has the same geometry and FIFO order.
    #[test]
    fn kernel_ring_fifo() {
        let mut k = KernelRing::<u32>::new(2).unwrap();
        assert_eq!(k.capacity(), 3);
        for i in 0..3 {
            assert!(k.push(i).is_ok());
        }
        assert_eq!(k.push(9), Err(Full));
        assert_eq!(k.pop(), Some(0));
        assert!(k.push(3).is_ok());
        let mut big = KernelRing::<u32>::new(7).unwrap();
        assert!(big.take_pending(&mut k).is_ok());
        assert!(k.is_empty());
        for want in 1..4 {
            assert_eq!(big.pop(), Some(want));
        }
        assert_eq!(big.pop(), None);
    }
}
