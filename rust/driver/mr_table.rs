// SPDX-License-Identifier: GPL-2.0

//! Memory regions and the per-device MR table, and the protocol core's [`Memory`] for one QP.
//!
//! Keys: `key = index << 8 | byte`, `index` in `1..=MAX_MR_INDEX` (never 0, so key 0 is never an
//! MR: it names a QP's inline area), `byte` random; lkey == rkey. REG_MR may change only the
//! byte. Memory windows ([`super::mw`]) take their indices from the same table, so a key names
//! exactly one MR or one window; a window key is an R_Key only (never a local key).
//!
//! Locks: the table lock, each window's lock and each MR's info lock are IRQ-safe, so all may
//! be taken under a QP lock; their order is table, window, MR info (a bind holds the window's
//! lock while it counts itself in the MR). None is held while bytes are copied. An access's
//! check reads the MR's info from a copy without the lock (`mr_info_copy`), and a
//! [`QpMemory`] keeps the MR it found last, so a stream's packets take none of these locks.
//!
//! Lifetimes: the table holds an `Arc<RvrMr>`, lookups hand out clones that workers drop before
//! their work item returns (never keep one longer). `dereg_mr` removes the MR from the table (no
//! new lookup finds it), drops its own reference, and then drops the umem pin
//! ([`crate::ib::umem::UmemPin`]), which sleeps until the last `Arc<RvrMr>` is gone (its
//! `UmemPages` signals a completion when dropped, in any context) and only then unpins. So the
//! last reference may drop anywhere, with IRQs off too: dropping an `RvrMr` never sleeps. A bound
//! memory window keeps a reference for as long as it is bound, which is why `dereg_mr` is
//! refused (`EBUSY`) while windows are bound to the MR.

use super::mr_info_copy::InfoCopy;
use super::mw::RvrMw;
use crate::ib::copy_src::{part, CopySrc};
use crate::ib::{
    mr::{KernelMemory, PageList},
    odp::{OdpError, OdpPages},
    umem::UmemPages,
};
use crate::net::fill::Fill;
use crate::net::paged::Frags;
use crate::new_irq_spinlock;
use crate::rvcore::memory::{
    AtomicOp, MemError, Memory, RxPayload, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use crate::rvcore::mw::{BindMwParams, MrFacts, QpRef};
use crate::rvcore::wqe::{RegMrParams, Sge, MAX_SGE};
use crate::sync::irq_spinlock::IrqSpinLock;
use core::cell::Cell;
use kernel::{
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::Arc,
};

/// Largest MR index (23 bits, like rxe's pool).
pub const MAX_MR_INDEX: u32 = (1 << 23) - 1;
/// Most MRs a device holds at once (`max_mr` in the device attributes).
pub const MAX_MRS: usize = 0x4000;
/// Most memory windows a device holds at once (`max_mw` in the device attributes).
pub const MAX_MWS: usize = 0x1000;
/// The lkey that names a QP's inline area (never an MR key, index 0 is not allocated).
pub const INLINE_LKEY: u32 = 0;
/// All remote access rights.
pub const ACCESS_REMOTE: u32 = ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;

/// The key of MR `index` with key byte `byte`.
pub fn make_key(index: u32, byte: u8) -> u32 {
    (index << 8) | u32::from(byte)
}

/// The MR index of a key.
pub fn key_index(key: u32) -> u32 {
    key >> 8
}

/// True when a REG_MR may move an MR from key `old` to key `new` (only the low byte changes).
pub fn key_may_replace(old: u32, new: u32) -> bool {
    old & !0xff == new & !0xff
}

/// True when `[va, va + len)` lies inside `[iova, iova + length)`; overflow-safe.
pub fn in_range(iova: u64, length: u64, va: u64, len: u64) -> bool {
    va >= iova && len <= length && va - iova <= length - len
}

/// What memory an MR names.
pub enum MrMem {
    /// Pinned user pages (`reg_user_mr`); position 0 is the MR's iova.
    User(UmemPages),
    /// All kernel memory by virtual address (`get_dma_mr`); no bounds.
    Dma(KernelMemory),
    /// A fast-registration page list (`alloc_mr` + `map_mr_sg` + REG_MR).
    Fast(PageList),
    /// On-demand-paging user memory (`IB_ACCESS_ON_DEMAND`); position 0 is the MR's iova.
    Odp(OdpPages),
}

/// A range of an on-demand-paging MR an access found not resident: what to fault in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OdpFault {
    /// The key the access used.
    pub key: u32,
    /// Position in the MR.
    pub pos: u64,
    /// Bytes.
    pub len: u64,
    /// The access writes.
    pub write: bool,
}

impl OdpFault {
    /// True when `other` asks for (part of) the same memory.
    pub fn overlaps(&self, other: &OdpFault) -> bool {
        self.key == other.key
            && self.pos < other.pos.saturating_add(other.len)
            && other.pos < self.pos.saturating_add(self.len)
    }
}

/// Whether access rights `access` mean writing the memory.
fn writes(access: u32) -> bool {
    access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
}

fn odp_err(e: OdpError) -> MemError {
    match e {
        OdpError::NotPresent => MemError::NotPresent,
        OdpError::Invalid => MemError::OutOfBounds,
    }
}

/// Whether an MR may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrState {
    /// Fast-registration MR not (or no longer) registered.
    Free,
    /// Usable.
    Valid,
}

/// The mutable part of an MR.
#[derive(Clone, Copy, Debug)]
pub struct MrInfo {
    /// Current lkey and rkey.
    pub key: u32,
    /// `ib_access_flags`.
    pub access: u32,
    /// First address.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// Valid or free.
    pub state: MrState,
}

/// What an MR's lock protects: its mutable part and its memory windows' claim on it.
struct MrLocked {
    info: MrInfo,
    /// Memory windows bound to the MR (it cannot be deregistered while there are any).
    windows: u32,
    /// Deregistration has begun: no window may be bound to it any more.
    closing: bool,
}

/// A memory region.
#[pin_data]
pub struct RvrMr {
    index: u32,
    pd_id: u32,
    mem: MrMem,
    #[pin]
    info: IrqSpinLock<MrLocked>,
    /// What `info` holds of the MR's info and `closing`, for [`RvrMr::check`] without the lock.
    /// INVARIANT: it matches `info` whenever the lock is free (each change under the lock
    /// stores it, [`RvrMr::update`]).
    copy: InfoCopy,
}

impl RvrMr {
    /// A new MR; `info.key` must have index `index`.
    pub fn new(index: u32, pd_id: u32, mem: MrMem, info: MrInfo) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                index,
                pd_id,
                mem,
                // INVARIANT: the copy starts as the locked part does.
                copy: InfoCopy::new(&info),
                info <- new_irq_spinlock!(
                    MrLocked { info, windows: 0, closing: false },
                    "rvrdma_mr"
                ),
            }),
            GFP_KERNEL,
        )
    }

    /// The table index (the `mr_handle` of REG_MR work requests).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The PD's identity.
    pub fn pd_id(&self) -> u32 {
        self.pd_id
    }

    /// The memory.
    pub fn mem(&self) -> &MrMem {
        &self.mem
    }

    /// A snapshot of the mutable part.
    pub fn info(&self) -> MrInfo {
        self.info.lock().info
    }

    /// Runs `f` on the locked part and, if it succeeds, stores what it leaves in `copy`: the
    /// only way the MR's info or `closing` changes (a failed `f` changes neither).
    fn update<T, E>(&self, f: impl FnOnce(&mut MrLocked) -> Result<T, E>) -> Result<T, E> {
        let mut l = self.info.lock();
        let r = f(&mut l)?;
        // INVARIANT: the copy matches the locked part again before the lock is released.
        self.copy.store(&l.info, l.closing);
        Ok(r)
    }

    /// Starts deregistration: refused with `EBUSY` while memory windows are bound to the MR
    /// (IBA 10.6.7.2.6, as rdma_rxe); afterwards no window can be bound to it.
    pub fn begin_dereg(&self) -> Result {
        self.update(|l| {
            if l.windows > 0 {
                return Err(EBUSY);
            }
            l.closing = true;
            Ok(())
        })
    }

    /// Number of memory windows bound to the MR.
    pub fn windows(&self) -> u32 {
        self.info.lock().windows
    }

    /// Runs a window's bind check `f` on this MR's facts, under the MR's lock; if it succeeds
    /// the window counts as bound to the MR. Called with the window's lock held.
    pub(crate) fn bind_window<E>(
        &self,
        f: impl FnOnce(&MrFacts) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut l = self.info.lock();
        let i = l.info;
        let facts = MrFacts {
            pd: self.pd_id,
            access: i.access,
            iova: i.iova,
            // A DMA MR spans all kernel memory.
            length: if matches!(self.mem, MrMem::Dma(_)) {
                u64::MAX
            } else {
                i.length
            },
            valid: i.state == MrState::Valid && !l.closing,
        };
        f(&facts)?;
        l.windows += 1;
        Ok(())
    }

    /// A window bound to the MR was unbound, rebound elsewhere or invalidated.
    pub(crate) fn window_gone(&self) {
        let mut l = self.info.lock();
        l.windows = l.windows.saturating_sub(1);
    }

    /// The position of `[va, va + len)` (an address range a window resolved to) in the MR's
    /// memory: the MR must still be valid and hold the range. The window has checked the key,
    /// PD and rights.
    pub(crate) fn window_pos(&self, va: u64, len: u64) -> Result<u64, MemError> {
        let l = self.info.lock();
        let i = l.info;
        if i.state != MrState::Valid || l.closing {
            return Err(MemError::BadKey);
        }
        if let MrMem::Dma(_) = self.mem {
            return Ok(va);
        }
        if !in_range(i.iova, i.length, va, len) {
            return Err(MemError::OutOfBounds);
        }
        Ok(va - i.iova)
    }

    /// Validates an access of `len` bytes at `va` with key `key` from PD `pd_id` needing
    /// `access`; returns the position in the MR's memory (DMA: `va` itself). Reads the MR's
    /// info from its copy, without the lock. Fails once deregistration has begun, so that a
    /// [`QpMemory`] that still holds the MR from an earlier lookup reaches no more than a fresh
    /// lookup would.
    fn check(&self, key: u32, pd_id: u32, va: u64, len: u64, access: u32) -> Result<u64, MemError> {
        let (i, closing) = self.copy.load();
        if i.key != key || self.pd_id != pd_id || i.state != MrState::Valid || closing {
            return Err(MemError::BadKey);
        }
        if i.access & access != access {
            return Err(MemError::NoAccess);
        }
        if let MrMem::Dma(_) = self.mem {
            return Ok(va);
        }
        if !in_range(i.iova, i.length, va, len) {
            return Err(MemError::OutOfBounds);
        }
        Ok(va - i.iova)
    }

    /// False when `[pos, pos + len)` of an on-demand-paging MR is not resident (writable for
    /// `write`); true for every other MR.
    fn resident(&self, pos: u64, len: u64, write: bool) -> bool {
        match &self.mem {
            MrMem::Odp(p) => p.present(pos, len, write),
            _ => true,
        }
    }

    /// Makes `[pos, pos + len)` of an on-demand-paging MR resident (`fault` false: only what
    /// the process has resident); nothing to do for other MRs. Process context.
    pub fn fault_in(&self, pos: u64, len: u64, write: bool, fault: bool) -> Result {
        match &self.mem {
            MrMem::Odp(p) => p.fault_in(pos, len, write, fault),
            _ => Ok(()),
        }
    }

    /// Appends the `len` bytes at `pos` to `out`.
    fn read_at(&self, pos: u64, len: usize, out: &mut Fill<'_>) -> Result<(), MemError> {
        if let MrMem::Odp(p) = &self.mem {
            return p.read(pos, len, out).map_err(odp_err);
        }
        match &self.mem {
            MrMem::User(p) => p.read(pos, len, out),
            MrMem::Dma(m) => m.read(pos, len, out),
            MrMem::Fast(p) => p.read(pos, len, out),
            MrMem::Odp(_) => Err(EINVAL),
        }
        .map_err(|_| MemError::OutOfBounds)
    }

    fn write_at(&self, pos: u64, data: &(impl CopySrc + ?Sized)) -> Result<(), MemError> {
        if let MrMem::Odp(p) = &self.mem {
            return p.write(pos, data).map_err(odp_err);
        }
        match &self.mem {
            MrMem::User(p) => p.write(pos, data),
            MrMem::Dma(m) => m.write(pos, data),
            MrMem::Fast(p) => p.write(pos, data),
            MrMem::Odp(_) => Err(EINVAL),
        }
        .map_err(|_| MemError::OutOfBounds)
    }

    fn atomic_at(&self, pos: u64, op: AtomicOp) -> Result<u64, MemError> {
        if let MrMem::Odp(p) = &self.mem {
            return p.atomic(pos, op).map_err(|e| match e {
                OdpError::NotPresent => MemError::NotPresent,
                OdpError::Invalid => MemError::OpFailed,
            });
        }
        match &self.mem {
            MrMem::User(p) => p.atomic(pos, op),
            MrMem::Dma(m) => m.atomic(pos, op),
            MrMem::Fast(p) => p.atomic(pos, op),
            MrMem::Odp(_) => Err(EINVAL),
        }
        .map_err(|_| MemError::OpFailed)
    }

    /// Stores `value` in the aligned 8 bytes at `pos` as one atomic store (ATOMIC WRITE), built
    /// from the atomics every kind of MR memory offers: a compare-and-swap from the value seen.
    /// A word that keeps changing under it (a local writer racing the remote one) gives up
    /// after a bounded number of tries.
    fn atomic_store_at(&self, pos: u64, value: u64) -> Result<(), MemError> {
        let mut seen = self.atomic_at(pos, AtomicOp::FetchAdd { add: 0 })?;
        for _ in 0..64 {
            let before = self.atomic_at(
                pos,
                AtomicOp::CmpSwap {
                    compare: seen,
                    swap: value,
                },
            )?;
            if before == seen {
                return Ok(());
            }
            seen = before;
        }
        Err(MemError::OpFailed)
    }

    /// Invalidation (LOCAL_INV, Send with Invalidate): rxe_invalidate_mr's rules plus a PD
    /// check.
    fn invalidate(&self, key: u32, pd_id: u32) -> Result<(), MemError> {
        self.update(|l| {
            let i = &mut l.info;
            if i.key != key || self.pd_id != pd_id {
                return Err(MemError::BadKey);
            }
            if !matches!(self.mem, MrMem::Fast(_)) {
                return Err(MemError::OpFailed);
            }
            i.state = MrState::Free;
            Ok(())
        })
    }

    /// REG_MR: the MR must be a free fast-registration MR of `pd_id`, and the new key may
    /// differ only in its low byte.
    fn fast_register(&self, p: &RegMrParams, pd_id: u32) -> Result<(), MemError> {
        let MrMem::Fast(pages) = &self.mem else {
            return Err(MemError::OpFailed);
        };
        self.update(|l| {
            let i = &mut l.info;
            if i.state != MrState::Free || self.pd_id != pd_id || !key_may_replace(i.key, p.key) {
                return Err(MemError::OpFailed);
            }
            if p.length > pages.mapped_length() {
                return Err(MemError::OpFailed);
            }
            *i = MrInfo {
                key: p.key,
                access: p.access,
                iova: p.iova,
                length: p.length,
                state: MrState::Valid,
            };
            Ok(())
        })
    }
}

/// What a key index names.
#[derive(Clone)]
pub enum Entry {
    /// A memory region.
    Mr(Arc<RvrMr>),
    /// A memory window.
    Mw(Arc<RvrMw>),
}

/// A table slot: an object, or an index reserved for one being created.
enum Slot {
    Reserved(Kind),
    Used(Entry),
}

/// The kinds of objects in the table, each with its own limit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mr,
    Mw,
}

impl Slot {
    fn kind(&self) -> Kind {
        match self {
            Slot::Reserved(k) => *k,
            Slot::Used(Entry::Mr(_)) => Kind::Mr,
            Slot::Used(Entry::Mw(_)) => Kind::Mw,
        }
    }

    fn entry(&self) -> Option<&Entry> {
        match self {
            Slot::Used(e) => Some(e),
            Slot::Reserved(_) => None,
        }
    }
}

/// The locked part of the table.
struct TableInner {
    /// Index -> MR or memory window.
    tree: RBTree<u32, Slot>,
    /// Where the search for a free index starts.
    next: u32,
    /// MR slots in `tree`.
    mrs: usize,
    /// Window slots in `tree`.
    mws: usize,
}

impl TableInner {
    fn count_mut(&mut self, kind: Kind) -> &mut usize {
        match kind {
            Kind::Mr => &mut self.mrs,
            Kind::Mw => &mut self.mws,
        }
    }
}

/// The MRs and memory windows of a device, by index.
#[pin_data]
pub struct MrTable {
    #[pin]
    inner: IrqSpinLock<TableInner>,
}

impl MrTable {
    /// An empty table.
    pub fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            inner <- new_irq_spinlock!(
                TableInner { tree: RBTree::new(), next: 1, mrs: 0, mws: 0 },
                "rvrdma_mr_table"
            ),
        })
    }

    /// Adds an MR: reserves an index, picks a key byte, calls `make(index, key)` (outside the
    /// lock) and stores what it returns. Process context (allocates).
    pub fn insert(&self, make: impl FnOnce(u32, u32) -> Result<Arc<RvrMr>>) -> Result<Arc<RvrMr>> {
        self.add(Kind::Mr, MAX_MRS, make, |mr| Entry::Mr(mr.clone()))
    }

    /// Adds a memory window, as [`Self::insert`] does an MR.
    pub fn insert_mw(
        &self,
        make: impl FnOnce(u32, u32) -> Result<Arc<RvrMw>>,
    ) -> Result<Arc<RvrMw>> {
        self.add(Kind::Mw, MAX_MWS, make, |mw| Entry::Mw(mw.clone()))
    }

    fn add<T>(
        &self,
        kind: Kind,
        max: usize,
        make: impl FnOnce(u32, u32) -> Result<T>,
        entry: impl FnOnce(&T) -> Entry,
    ) -> Result<T> {
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let index = {
            let mut t = self.inner.lock();
            if *t.count_mut(kind) >= max {
                return Err(ENOMEM);
            }
            let mut index = t.next;
            while t.tree.get(&index).is_some() {
                index = if index >= MAX_MR_INDEX { 1 } else { index + 1 };
            }
            t.next = if index >= MAX_MR_INDEX { 1 } else { index + 1 };
            // The index is free: nothing is replaced.
            let _ = t.tree.insert(node.into_node(index, Slot::Reserved(kind)));
            *t.count_mut(kind) += 1;
            index
        };
        let key = make_key(index, crate::ib::mr::random_key_byte(None));
        match make(index, key) {
            Ok(obj) => {
                if let Some(slot) = self.inner.lock().tree.get_mut(&index) {
                    *slot = Slot::Used(entry(&obj));
                }
                Ok(obj)
            }
            Err(e) => {
                drop(self.remove(index));
                Err(e)
            }
        }
    }

    /// Removes the MR or window `index`: no lookup finds it afterwards. Returns the table's
    /// reference.
    pub fn remove(&self, index: u32) -> Option<Entry> {
        let node = {
            let mut t = self.inner.lock();
            let kind = t.tree.get(&index)?.kind();
            let node = t.tree.remove_node(&index)?;
            *t.count_mut(kind) -= 1;
            node
        };
        // Freed outside the lock.
        match node.to_key_value().1 {
            Slot::Used(e) => Some(e),
            Slot::Reserved(_) => None,
        }
    }

    /// What index `index` names.
    pub fn entry(&self, index: u32) -> Option<Entry> {
        self.inner
            .lock()
            .tree
            .get(&index)
            .and_then(|s| s.entry().cloned())
    }

    /// The MR with table index `index`, whatever its key and state.
    pub fn get(&self, index: u32) -> Option<Arc<RvrMr>> {
        match self.entry(index)? {
            Entry::Mr(mr) => Some(mr),
            Entry::Mw(_) => None,
        }
    }

    /// The memory window with table index `index`, whatever its key and state.
    pub fn get_mw(&self, index: u32) -> Option<Arc<RvrMw>> {
        match self.entry(index)? {
            Entry::Mw(mw) => Some(mw),
            Entry::Mr(_) => None,
        }
    }

    /// Unbinds the type 2 windows bound to QP `qpn` (the QP is being destroyed: its number may
    /// be reused, and the windows must not follow it).
    pub fn unbind_qp(&self, qpn: u32) {
        let t = self.inner.lock();
        for (_, slot) in t.tree.iter() {
            if let Some(Entry::Mw(mw)) = slot.entry() {
                mw.unbind_if_qp(qpn);
            }
        }
    }

    /// The MR `key` names (index and current key), whatever its state.
    pub fn lookup(&self, key: u32) -> Option<Arc<RvrMr>> {
        self.get(key_index(key)).filter(|m| m.info().key == key)
    }

    /// Number of MRs (including reservations).
    pub fn len(&self) -> usize {
        self.inner.lock().mrs
    }

    /// Number of memory windows (including reservations).
    pub fn mw_count(&self) -> usize {
        self.inner.lock().mws
    }

    /// True if the table holds no MR.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One resolved piece of an SGE list: the MR (`None`: inline area), the position in it and the
/// length.
type Piece = (Option<Arc<RvrMr>>, u64, usize);

/// The memory one QP may reach: the MRs and memory windows of its PD in the device's table,
/// and its inline area.
///
/// An access to an on-demand-paging MR that finds a page not resident fails with
/// [`MemError::NotPresent`] and records the range ([`QpMemory::take_fault`]), for the QP to
/// fault in from process context before it hands the packet or WQE in again.
pub struct QpMemory<'a> {
    table: &'a MrTable,
    pd_id: u32,
    qpn: u32,
    inline: &'a [u8],
    /// The first range found not resident.
    fault: Cell<Option<OdpFault>>,
    /// A range whose fault-in failed: an access to it that finds it not resident fails for
    /// real (the memory is gone, or never was writable).
    failed: Option<OdpFault>,
    /// The MR the last lookup found, by table index. The packets of one batch mostly reach one
    /// MR, and this spares each of them the table's lock and a reference taken and dropped (an
    /// access borrows it, [`QpMemory::with_mr`]); every access still checks the MR's key, state
    /// and rights ([`RvrMr::check`]). Held only as long as the `QpMemory`, which
    /// lives for one locked section of a QP.
    last: Cell<Option<(u32, Arc<RvrMr>)>>,
}

impl<'a> QpMemory<'a> {
    /// The memory of QP `qpn` of PD `pd_id` whose inline area is `inline` (SGEs with lkey
    /// [`INLINE_LKEY`] address it by offset).
    pub fn new(table: &'a MrTable, pd_id: u32, qpn: u32, inline: &'a [u8]) -> Self {
        Self {
            table,
            pd_id,
            qpn,
            inline,
            fault: Cell::new(None),
            failed: None,
            last: Cell::new(None),
        }
    }

    /// Finds what table index `index` names, checks an access to it and runs `then` on the MR
    /// reached and the position in its memory. For an MR, `mr_pos` checks the access; for a
    /// window, `mw_pos` checks it and gives the window's MR. The MR the last lookup found is
    /// asked first, lent from the cache: a packet takes and drops no reference on it (an
    /// atomic operation each, on a count the other CPU's packets touch too). A key it refuses
    /// is asked of the table too: the index may name another object by now. An MR the table
    /// gives becomes the last one.
    fn with_mr<T>(
        &self,
        index: u32,
        mr_pos: impl Fn(&RvrMr) -> Result<u64, MemError>,
        mw_pos: impl FnOnce(&RvrMw) -> Result<(Arc<RvrMr>, u64), MemError>,
        then: impl FnOnce(&Arc<RvrMr>, u64) -> Result<T, MemError>,
    ) -> Result<T, MemError> {
        if let Some((i, mr)) = self.last.take() {
            if i != index {
                self.last.set(Some((i, mr)));
            } else {
                // Put back after `then`: a lookup inside it would find the cache empty and
                // ask the table, which is only slower.
                match mr_pos(&mr) {
                    Err(MemError::BadKey) => {}
                    Err(e) => {
                        self.last.set(Some((i, mr)));
                        return Err(e);
                    }
                    Ok(pos) => {
                        let r = then(&mr, pos);
                        self.last.set(Some((i, mr)));
                        return r;
                    }
                }
            }
        }
        match self.table.entry(index).ok_or(MemError::BadKey)? {
            Entry::Mr(mr) => {
                let r = mr_pos(&mr).and_then(|pos| then(&mr, pos));
                self.last.set(Some((index, mr)));
                r
            }
            Entry::Mw(mw) => {
                let (mr, pos) = mw_pos(&mw)?;
                then(&mr, pos)
            }
        }
    }

    /// Looks up the local key `key` (an MR's; a window's is no local key), checks an access
    /// of `len` bytes at `va` needing `access` ([`RvrMr::check`]) and runs `then` on the MR and
    /// the position in its memory.
    fn with_local<T>(
        &self,
        key: u32,
        va: u64,
        len: u64,
        access: u32,
        then: impl FnOnce(&Arc<RvrMr>, u64) -> Result<T, MemError>,
    ) -> Result<T, MemError> {
        self.with_mr(
            key_index(key),
            |mr| mr.check(key, self.pd_id, va, len, access),
            |_| Err(MemError::BadKey),
            then,
        )
    }

    fn qp(&self) -> QpRef {
        QpRef {
            pd: self.pd_id,
            qpn: self.qpn,
        }
    }

    /// The same, where `failed` (if any) is a range whose fault-in failed.
    pub fn with_failed(mut self, failed: Option<OdpFault>) -> Self {
        self.failed = failed;
        self
    }

    /// The first range an access found not resident, if any.
    pub fn take_fault(&self) -> Option<OdpFault> {
        self.fault.take()
    }

    /// Puts back `f`, a fault [`QpMemory::take_fault`] took (nothing for `None`).
    pub fn put_fault(&self, f: Option<OdpFault>) {
        if f.is_some() {
            self.fault.set(f);
        }
    }

    /// Passes `r` on; a [`MemError::NotPresent`] records `[pos, pos + len)` of `mr` under its
    /// own key (an access through a window faults its MR in), or, for a range whose fault-in
    /// failed, becomes an access error.
    fn note<T>(
        &self,
        r: Result<T, MemError>,
        mr: &RvrMr,
        pos: u64,
        len: u64,
        write: bool,
    ) -> Result<T, MemError> {
        if r.is_ok() {
            return r;
        }
        match r {
            Err(MemError::NotPresent) => {
                let f = OdpFault {
                    key: mr.info().key,
                    pos,
                    len,
                    write,
                };
                if self.failed.is_some_and(|x| x.overlaps(&f)) {
                    return Err(MemError::OutOfBounds);
                }
                if self.fault.get().is_none() {
                    self.fault.set(Some(f));
                }
                Err(MemError::NotPresent)
            }
            r => r,
        }
    }

    /// Looks up the R_Key `rkey` (an MR's or a memory window's), checks a remote access of
    /// `len` bytes at `va` needing `access` (through a window, against the window's range,
    /// rights, PD and QP, then its MR) and runs `then` on the MR and the position in its memory.
    fn with_remote<T>(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        access: u32,
        then: impl FnOnce(&Arc<RvrMr>, u64) -> Result<T, MemError>,
    ) -> Result<T, MemError> {
        self.with_mr(
            key_index(rkey),
            |mr| mr.check(rkey, self.pd_id, va, len, access),
            |mw| {
                let (mr, mva) = mw.resolve(rkey, self.qp(), va, len, access)?;
                let pos = mr.window_pos(mva, len)?;
                Ok((mr, pos))
            },
            then,
        )
    }

    /// Invalidates the MR or type 2 window `key` names (LOCAL_INV, Send with Invalidate).
    fn invalidate(&self, key: u32) -> Result<(), MemError> {
        match self.table.entry(key_index(key)).ok_or(MemError::BadKey)? {
            Entry::Mr(mr) => mr.invalidate(key, self.pd_id),
            Entry::Mw(mw) => mw.invalidate(key, self.qp()),
        }
    }

    /// Resolves an access (`remote`: through an R_Key, which may name a window) and, for an
    /// on-demand-paging MR, checks the range is resident.
    fn resolve_resident(
        &self,
        key: u32,
        va: u64,
        len: u64,
        access: u32,
        remote: bool,
    ) -> Result<(), MemError> {
        let resident = |mr: &Arc<RvrMr>, pos: u64| {
            if mr.resident(pos, len, writes(access)) {
                return Ok(());
            }
            self.note(Err(MemError::NotPresent), mr, pos, len, writes(access))
        };
        if remote {
            self.with_remote(key, va, len, access, resident)
        } else {
            self.with_local(key, va, len, access, resident)
        }
    }

    /// Checks the piece of `len` bytes `skip` bytes into the SGE `s` for `access` and runs
    /// `then` on its MR (`None`: the inline area) and the position in it.
    fn with_piece<T>(
        &self,
        s: &Sge,
        skip: usize,
        len: usize,
        access: u32,
        then: impl FnOnce(Option<&Arc<RvrMr>>, u64) -> Result<T, MemError>,
    ) -> Result<T, MemError> {
        let va = s
            .addr
            .checked_add(skip as u64)
            .ok_or(MemError::OutOfBounds)?;
        if s.lkey == INLINE_LKEY {
            if access != 0 || !in_range(0, self.inline.len() as u64, va, len as u64) {
                return Err(MemError::BadKey);
            }
            return then(None, va);
        }
        self.with_local(s.lkey, va, len as u64, access, |mr, pos| {
            then(Some(mr), pos)
        })
    }

    /// Resolves `[offset, offset + total)` of the SGE list into at most `MAX_SGE` pieces, all
    /// checked for `access` before any byte moves; calls `f(mr, pos, len, done)` on each.
    fn resolve_sges(
        &self,
        sges: &[Sge],
        offset: u32,
        total: usize,
        access: u32,
        mut f: impl FnMut(Option<&Arc<RvrMr>>, u64, usize, usize) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let mut skip = offset as usize;
        // The SGEs the range begins in: those before it are skipped.
        let mut rest = sges;
        while let Some((s, after)) = rest.split_first() {
            if skip < s.length as usize {
                break;
            }
            skip -= s.length as usize;
            rest = after;
        }
        // Within one SGE, as nearly every packet of a stream is: one piece, and no list of them
        // to fill and drop.
        if let Some(s) = rest.first().filter(|s| total <= s.length as usize - skip) {
            if total == 0 {
                return Ok(());
            }
            return self.with_piece(s, skip, total, access, |mr, pos| f(mr, pos, total, 0));
        }
        let mut pieces: [Option<Piece>; MAX_SGE] = Default::default();
        let mut left = total;
        let mut n = 0;
        for s in rest {
            if left == 0 {
                break;
            }
            let slen = s.length as usize;
            if skip >= slen {
                skip -= slen;
                continue;
            }
            let len = (slen - skip).min(left);
            let piece =
                self.with_piece(s, skip, len, access, |mr, pos| Ok((mr.cloned(), pos, len)))?;
            *pieces.get_mut(n).ok_or(MemError::OutOfBounds)? = Some(piece);
            n += 1;
            skip = 0;
            left -= len;
        }
        if left != 0 {
            return Err(MemError::OutOfBounds);
        }
        let mut done = 0;
        for (mr, pos, len) in pieces.iter().flatten() {
            f(mr.as_ref(), *pos, *len, done)?;
            done += len;
        }
        Ok(())
    }

    /// Appends the `len` bytes starting `offset` bytes into the gather list `sges` to `out`
    /// (transmit path). Checks everything before copying.
    pub fn gather(
        &self,
        sges: &[Sge],
        offset: u32,
        len: usize,
        out: &mut Fill<'_>,
    ) -> Result<(), MemError> {
        self.resolve_sges(sges, offset, len, 0, |mr, pos, n, _| match mr {
            Some(mr) => self.note(mr.read_at(pos, n, out), mr, pos, n as u64, false),
            None => {
                let p = pos as usize;
                let src = self.inline.get(p..p + n).ok_or(MemError::OutOfBounds)?;
                out.copy(src).map_err(|_| MemError::OutOfBounds)
            }
        })
    }

    /// Appends the `len` bytes starting `offset` bytes into the gather list `sges` to `out` by
    /// reference to their pages (transmit path), where every byte lies in a pinned user MR;
    /// otherwise fails (with what it appended still in `out`): such a payload is copied
    /// ([`QpMemory::gather`], which reports the access's own error).
    pub fn gather_pages(
        &self,
        sges: &[Sge],
        offset: u32,
        len: usize,
        out: &mut Frags<'_>,
    ) -> Result<(), MemError> {
        self.resolve_sges(sges, offset, len, 0, |mr, pos, n, _| {
            match mr.map(|m| m.mem()) {
                Some(MrMem::User(p)) => {
                    p.for_each_page(pos, n, |page, off, k| out.add(page, off, k))
                }
                _ => Err(EINVAL),
            }
            .map_err(|_| MemError::OutOfBounds)
        })
    }

    /// Appends the `len` bytes at `va` of the MR `rkey` names (needs remote read) to `out`: the
    /// payload of an RDMA Read response.
    pub fn read_remote(
        &self,
        rkey: u32,
        va: u64,
        len: usize,
        out: &mut Fill<'_>,
    ) -> Result<(), MemError> {
        self.with_remote(rkey, va, len as u64, ACCESS_REMOTE_READ, |mr, pos| {
            self.note(mr.read_at(pos, len, out), mr, pos, len as u64, false)
        })
    }
}

impl QpMemory<'_> {
    /// [`Memory::scatter`] of bytes from any source (a payload held in an skb's fragments).
    pub fn scatter_from(
        &self,
        sges: &[Sge],
        offset: u32,
        data: &(impl CopySrc + ?Sized),
    ) -> Result<(), MemError> {
        self.resolve_sges(
            sges,
            offset,
            data.len(),
            ACCESS_LOCAL_WRITE,
            |mr, pos, len, done| {
                let src = part(data, done, len).ok_or(MemError::OutOfBounds)?;
                match mr {
                    Some(mr) => self.note(mr.write_at(pos, &src), mr, pos, len as u64, true),
                    None => Err(MemError::BadKey),
                }
            },
        )
    }

    /// [`Memory::remote_write`] of bytes from any source.
    pub fn remote_write_from(
        &self,
        rkey: u32,
        va: u64,
        data: &(impl CopySrc + ?Sized),
    ) -> Result<(), MemError> {
        let len = data.len() as u64;
        self.with_remote(rkey, va, len, ACCESS_REMOTE_WRITE, |mr, pos| {
            self.note(mr.write_at(pos, data), mr, pos, len, true)
        })
    }
}

// On a shared reference: the locked section's packets are built (`QpOut`) from the memory the
// core's accesses go through, so the MR a request resolved is the one its response reads.
impl Memory for &QpMemory<'_> {
    fn check_local(&mut self, sges: &[Sge], access: u32) -> Result<(), MemError> {
        for s in sges.iter().filter(|s| s.length > 0) {
            if s.lkey == INLINE_LKEY {
                if access != 0
                    || !in_range(0, self.inline.len() as u64, s.addr, u64::from(s.length))
                {
                    return Err(MemError::BadKey);
                }
                continue;
            }
            self.resolve_resident(s.lkey, s.addr, u64::from(s.length), access, false)?;
        }
        Ok(())
    }

    fn scatter(&mut self, sges: &[Sge], offset: u32, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        self.scatter_from(sges, offset, data)
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, access: u32) -> Result<(), MemError> {
        self.resolve_resident(rkey, va, u64::from(len), access, true)
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        self.remote_write_from(rkey, va, data)
    }

    fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if va % 8 != 0 {
            return Err(MemError::OpFailed);
        }
        self.with_remote(rkey, va, 8, ACCESS_REMOTE_ATOMIC, |mr, pos| {
            self.note(mr.atomic_at(pos, op), mr, pos, 8, true)
        })
    }

    fn remote_atomic_write(&mut self, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError> {
        self.with_remote(rkey, va, 8, ACCESS_REMOTE_WRITE, |mr, pos| {
            self.note(
                mr.atomic_store_at(pos, u64::from_ne_bytes(value)),
                mr,
                pos,
                8,
                true,
            )
        })
    }

    fn remote_flush(
        &mut self,
        rkey: u32,
        range: Option<(u64, u32)>,
        access: u32,
    ) -> Result<(), MemError> {
        match self.table.entry(key_index(rkey)).ok_or(MemError::BadKey)? {
            Entry::Mr(mr) => {
                let (va, len) = match range {
                    Some((va, len)) => (va, u64::from(len)),
                    None => (mr.info().iova, 0),
                };
                mr.check(rkey, self.pd_id, va, len, access)?;
            }
            Entry::Mw(mw) => {
                // Windows grant no FLUSH rights (not in `ACCESS_SUPPORTED_MW`): this fails on
                // the rights unless the key itself is bad.
                let (va, len) = range.map_or((0, 0), |(va, len)| (va, u64::from(len)));
                mw.resolve(rkey, self.qp(), va, len, access)?;
            }
        }
        // Every MR is ordinary memory written through the CPU caches: once every earlier write
        // is ordered before the response, it is globally visible. (No MR is persistent memory:
        // the device offers no IB_DEVICE_FLUSH_PERSISTENT, so no MR has that right.)
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn invalidate_remote(&mut self, rkey: u32) -> Result<(), MemError> {
        self.invalidate(rkey)
    }

    fn local_invalidate(&mut self, key: u32) -> Result<(), MemError> {
        self.invalidate(key)
    }

    fn fast_register(&mut self, params: &RegMrParams) -> Result<(), MemError> {
        let index = u32::try_from(params.mr_handle).map_err(|_| MemError::BadKey)?;
        let mr = self.table.get(index).ok_or(MemError::BadKey)?;
        mr.fast_register(params, self.pd_id)
    }

    fn bind_mw(&mut self, p: &BindMwParams) -> Result<(), MemError> {
        let mw = self
            .table
            .get_mw(key_index(p.mw_rkey))
            .ok_or(MemError::BadKey)?;
        // A zero-length bind names no MR.
        let mr = if p.length > 0 {
            self.table.lookup(p.mr_lkey)
        } else {
            None
        };
        mw.bind(p, self.qp(), mr)
    }
}

/// The `ib_access_flags` bits `reg_user_mr` accepts (rxe's set without persistent flush,
/// which rvrdma does not offer).
pub const ACCESS_SUPPORTED_MR: u32 = ACCESS_LOCAL_WRITE
    | ACCESS_REMOTE
    | crate::ib::mr::ACCESS_MW_BIND
    | crate::ib::mr::ACCESS_FLUSH_GLOBAL
    | crate::ib::mr::ACCESS_ON_DEMAND
    | crate::ib::mr::ACCESS_OPTIONAL;

/// Faults in the range `f` names, in an MR of PD `pd_id` (process context: sleeps). An MR
/// that is gone, or whose key changed, needs nothing: the access fails on its own.
pub fn fault_in(table: &MrTable, pd_id: u32, f: &OdpFault) -> Result {
    let Some(mr) = table.lookup(f.key) else {
        return Ok(());
    };
    if mr.pd_id() != pd_id {
        return Ok(());
    }
    mr.fault_in(f.pos, f.len, f.write, true)
}
