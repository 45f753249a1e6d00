// SPDX-License-Identifier: GPL-2.0

//! Memory regions (`struct ib_mr`): `reg_user_mr`, `get_dma_mr`, `alloc_mr`, `map_mr_sg` and
//! `dereg_mr`, plus the two kinds of kernel memory an MR may name:
//!
//! - [`KernelMemory`]: a DMA MR (`get_dma_mr`). With `CONFIG_INFINIBAND_VIRT_DMA` a "DMA address"
//!   is a kernel virtual address (`ib_virt_dma_to_ptr`), so the MR spans all of kernel memory.
//! - [`PageList`]: a fast-registration MR (`alloc_mr`); `map_mr_sg` fills it with the kernel
//!   virtual addresses of page-size blocks through `ib_sg_to_pages`.
//!
//! Unlike PDs, `ib_mr` is allocated by the driver: an `MrObj` (the `ib_mr` first, the driver data
//! behind it) in a `KBox`, freed by `dereg_mr`. ib_core fills `device`, `pd`, `type` and
//! `uobject` after the create verb returns.
//!
//! Kernel memory is accessed on the word of the kernel ULP that registered it, exactly as in
//! rdma_rxe: a ULP names only memory it owns, and keeps it alive while the MR or the fast
//! registration that maps it is valid.

use super::copy_src::CopySrc;
use super::{
    device::Device,
    pd::{Pd, PdVerbs},
    udata::Udata,
    umem::{check_range, for_each_block, hw_atomic},
};
use crate::bindings as b;
use crate::net::fill::Fill;
use crate::rvcore::memory::AtomicOp;
use core::{
    mem::MaybeUninit,
    sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering},
};
use kernel::prelude::*;

/// `IB_ACCESS_MW_BIND`: memory windows may be bound to the MR.
pub const ACCESS_MW_BIND: u32 = b::ib_access_flags_IB_ACCESS_MW_BIND;
/// `IB_ACCESS_FLUSH_GLOBAL`: FLUSH with placement type "global visibility" may target the MR.
pub const ACCESS_FLUSH_GLOBAL: u32 = b::ib_access_flags_IB_ACCESS_FLUSH_GLOBAL;
/// `IB_ACCESS_OPTIONAL`: the range of access bits a device may ignore.
pub const ACCESS_OPTIONAL: u32 = b::ib_access_flags_IB_ACCESS_OPTIONAL;
/// `IB_ACCESS_ON_DEMAND`: the MR's pages are faulted in on access, not pinned.
pub const ACCESS_ON_DEMAND: u32 = b::ib_access_flags_IB_ACCESS_ON_DEMAND;

/// What `ibv_advise_mr` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Fault the pages in for reading (`IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH`).
    Prefetch,
    /// Fault the pages in for writing (`..._PREFETCH_WRITE`).
    PrefetchWrite,
    /// Take the pages that are resident, without faulting (`..._PREFETCH_NO_FAULT`).
    PrefetchNoFault,
}

/// One range of an `advise_mr` call.
#[derive(Clone, Copy, Debug)]
pub struct AdviseSge {
    /// Address (in the MR's iova space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The MR's lkey.
    pub lkey: u32,
}

/// The keys of a new MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// The memory-region verbs of a driver. All may sleep except where noted.
pub trait MrVerbs: PdVerbs {
    /// The driver's data of an MR.
    type Mr: Send + Sync;

    /// Registers user memory `[start, start + length)`, addressed by the peer as
    /// `[iova, iova + length)`, with `access` (`ib_access_flags`). The driver pins the memory
    /// with [`super::umem::Umem::pin`].
    fn reg_user_mr(
        pd: &Pd<Self>,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Mr, MrKeys)>;

    /// Creates a DMA MR of a kernel ULP: all kernel memory, addressed by kernel virtual address,
    /// reachable through `mem`.
    fn get_dma_mr(pd: &Pd<Self>, access: u32, mem: KernelMemory) -> Result<(Self::Mr, MrKeys)>;

    /// Creates a fast-registration MR (`IB_MR_TYPE_MEM_REG`; ib_core's other types are refused
    /// before this is called) whose page list is `pages`. The MR starts FREE; `IB_WR_REG_MR`
    /// makes it valid.
    fn alloc_mr(pd: &Pd<Self>, pages: PageList) -> Result<(Self::Mr, MrKeys)>;

    /// The page list of a fast-registration MR (`None` for other MRs). Called by `map_mr_sg`,
    /// in atomic context.
    fn page_list(mr: &Self::Mr) -> Option<&PageList>;

    /// The handle that identifies the MR in an `IB_WR_REG_MR` work request
    /// (`RegMrParams::mr_handle`).
    fn mr_handle(mr: &Self::Mr) -> u64;

    /// Called before [`Self::dereg_mr`]: an error refuses the deregistration (the MR stays
    /// usable and ib_core returns the error to the caller); `Ok` commits to it.
    fn begin_dereg(mr: &Self::Mr) -> Result {
        let _ = mr;
        Ok(())
    }

    /// Destroys an MR; returns only when nothing can access its memory any more.
    fn dereg_mr(dev: &Device<Self>, mr: Self::Mr);

    /// `ibv_advise_mr`: prefetches the ranges `sges` of MRs of `pd` (`flush`: the pages are in
    /// when the call returns; otherwise a best effort). Process context.
    fn advise_mr(pd: &Pd<Self>, advice: Advice, flush: bool, sges: &[AdviseSge]) -> Result;
}

/// A driver-allocated MR: the `ib_mr` first, the driver's data behind it.
#[repr(C)]
struct MrObj<D> {
    ib: b::ib_mr,
    data: MaybeUninit<D>,
}

/// A random key byte (`get_random_u8`) different from `prev`.
pub fn random_key_byte(prev: Option<u8>) -> u8 {
    loop {
        // SAFETY: no preconditions; callable in any context.
        let k = unsafe { b::get_random_u8() };
        if Some(k) != prev {
            return k;
        }
    }
}

/// The driver data of an MR this driver created.
///
/// # Safety
///
/// `ibmr` must be the `ib_mr` of a live MR of driver `T` (created by one of the verbs below and
/// not yet deregistered), and stay so for `'a`.
pub unsafe fn mr_data<'a, T: MrVerbs>(ibmr: *const b::ib_mr) -> &'a T::Mr {
    let obj = ibmr.cast::<MrObj<T::Mr>>();
    // SAFETY: per the caller the MR is ours and live; its data was initialised at creation.
    unsafe { (*obj).data.assume_init_ref() }
}

/// The REG_MR handle of an MR this driver created (see [`MrVerbs::mr_handle`]).
///
/// # Safety
///
/// As for [`mr_data`].
pub unsafe fn mr_handle<T: MrVerbs>(ibmr: *const b::ib_mr) -> u64 {
    // SAFETY: per the caller.
    T::mr_handle(unsafe { mr_data::<T>(ibmr) })
}

/// Creates the `MrObj` of a new MR: allocates it, calls `create` for the driver data and keys,
/// and returns the `ib_mr` pointer or an `ERR_PTR`.
fn new_mr<T: MrVerbs>(
    create: impl FnOnce() -> Result<(T::Mr, MrKeys)>,
    iova: u64,
    length: u64,
) -> *mut b::ib_mr {
    let obj = match KBox::new(
        MrObj::<T::Mr> {
            ib: b::ib_mr::default(),
            data: MaybeUninit::uninit(),
        },
        GFP_KERNEL,
    ) {
        Ok(o) => o,
        Err(e) => return Error::from(e).to_ptr(),
    };
    let mut obj = obj;
    match create() {
        Ok((data, keys)) => {
            obj.data.write(data);
            obj.ib.lkey = keys.lkey;
            obj.ib.rkey = keys.rkey;
            obj.ib.iova = iova;
            obj.ib.length = length;
            obj.ib.page_size = kernel::page::PAGE_SIZE as u32;
            // The `ib_mr` is the first field of the `repr(C)` object: the pointers are equal.
            KBox::into_raw(obj).cast::<b::ib_mr>()
        }
        Err(e) => e.to_ptr(),
    }
}

/// Fills the MR entries of an ops table.
pub(crate) fn install<T: MrVerbs>(ops: &mut b::ib_device_ops) {
    ops.reg_user_mr = Some(reg_user_mr::<T>);
    ops.get_dma_mr = Some(get_dma_mr::<T>);
    ops.alloc_mr = Some(alloc_mr::<T>);
    ops.map_mr_sg = Some(map_mr_sg::<T>);
    ops.dereg_mr = Some(dereg_mr::<T>);
    ops.advise_mr = Some(advise_mr::<T>);
}

/// Most ranges one `advise_mr` call may name (ib_uverbs allows this many too).
const MAX_ADVISE_SGE: u32 = 32;

/// # Safety
///
/// ib_core callback: `ibpd` is a live PD of ours, `sg_list` valid for `num_sge` entries.
unsafe extern "C" fn advise_mr<T: MrVerbs>(
    ibpd: *mut b::ib_pd,
    advice: b::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut b::ib_sge,
    num_sge: u32,
    _attrs: *mut b::uverbs_attr_bundle,
) -> c_int {
    let advice = match advice {
        b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => Advice::Prefetch,
        b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => {
            Advice::PrefetchWrite
        }
        b::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => {
            Advice::PrefetchNoFault
        }
        _ => return crate::errno::eopnotsupp().to_errno(),
    };
    if num_sge > MAX_ADVISE_SGE || (num_sge > 0 && sg_list.is_null()) {
        return EINVAL.to_errno();
    }
    let mut sges = [AdviseSge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_ADVISE_SGE as usize];
    for (i, slot) in sges.iter_mut().enumerate().take(num_sge as usize) {
        // SAFETY: `sg_list` is valid for `num_sge` entries (ib_core's contract) and `i` is
        // below it.
        let sge = unsafe { &*sg_list.add(i) };
        *slot = AdviseSge {
            addr: sge.addr,
            length: sge.length,
            lkey: sge.lkey,
        };
    }
    // SAFETY: ib_core passes a live PD of ours, initialised by `alloc_pd`.
    let pd = unsafe { Pd::<T>::from_raw(ibpd) };
    let flush = flags & b::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0;
    match T::advise_mr(pd, advice, flush, &sges[..num_sge as usize]) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// ib_core callback: `ibpd` is a live PD of ours, `udata` NULL or valid for the call.
unsafe extern "C" fn reg_user_mr<T: MrVerbs>(
    ibpd: *mut b::ib_pd,
    start: u64,
    length: u64,
    iova: u64,
    access: c_int,
    dmah: *mut b::ib_dmah,
    udata: *mut b::ib_udata,
) -> *mut b::ib_mr {
    if !dmah.is_null() {
        return crate::errno::eopnotsupp().to_ptr();
    }
    // SAFETY: ib_core passes a live PD of ours, initialised by `alloc_pd`.
    let pd = unsafe { Pd::<T>::from_raw(ibpd) };
    // SAFETY: `udata` is NULL or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    new_mr::<T>(
        || T::reg_user_mr(pd, start, length, iova, access as u32, udata.as_mut()),
        iova,
        length,
    )
}

/// # Safety
///
/// ib_core callback: `ibpd` is a live PD of ours.
unsafe extern "C" fn get_dma_mr<T: MrVerbs>(ibpd: *mut b::ib_pd, access: c_int) -> *mut b::ib_mr {
    // SAFETY: ib_core passes a live PD of ours, initialised by `alloc_pd`.
    let pd = unsafe { Pd::<T>::from_raw(ibpd) };
    new_mr::<T>(|| T::get_dma_mr(pd, access as u32, KernelMemory(())), 0, 0)
}

/// # Safety
///
/// ib_core callback: `ibpd` is a live PD of ours.
unsafe extern "C" fn alloc_mr<T: MrVerbs>(
    ibpd: *mut b::ib_pd,
    mr_type: b::ib_mr_type,
    max_num_sg: u32,
) -> *mut b::ib_mr {
    if mr_type != b::ib_mr_type_IB_MR_TYPE_MEM_REG {
        return EINVAL.to_ptr();
    }
    // SAFETY: ib_core passes a live PD of ours, initialised by `alloc_pd`.
    let pd = unsafe { Pd::<T>::from_raw(ibpd) };
    new_mr::<T>(
        || T::alloc_mr(pd, PageList::new(max_num_sg as usize)?),
        0,
        0,
    )
}

/// `map_mr_sg` (atomic context: no allocation, no sleeping).
///
/// # Safety
///
/// ib_core callback: `ibmr` is a live MR of ours; `sg` a DMA-mapped list of `sg_nents` entries.
unsafe extern "C" fn map_mr_sg<T: MrVerbs>(
    ibmr: *mut b::ib_mr,
    sg: *mut b::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut c_uint,
) -> c_int {
    // SAFETY: the MR is ours and live for the call.
    let Some(pl) = T::page_list(unsafe { mr_data::<T>(ibmr) }) else {
        return EINVAL.to_errno();
    };
    // SAFETY: `ibmr` is valid; ib_map_mr_sg set `page_size` just before calling us.
    let page_size = unsafe { (*ibmr).page_size };
    if !page_size.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&page_size) {
        return EINVAL.to_errno();
    }
    pl.begin(page_size.trailing_zeros());
    // SAFETY: arguments as ib_core gave them; `set_page::<T>` finds the page list from `ibmr`.
    let n = unsafe { b::ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, Some(set_page::<T>)) };
    // SAFETY: `ib_sg_to_pages` has set `iova` and `length` of the valid `ibmr`.
    let (iova, length) = unsafe { ((*ibmr).iova, (*ibmr).length) };
    pl.finish(iova, length);
    n
}

/// `ib_sg_to_pages` callback: appends the block at kernel virtual address `addr`.
///
/// # Safety
///
/// `ibmr` is a live MR of ours (called from `map_mr_sg::<T>` only).
unsafe extern "C" fn set_page<T: MrVerbs>(ibmr: *mut b::ib_mr, addr: u64) -> c_int {
    // SAFETY: the MR is ours and live for the call.
    match T::page_list(unsafe { mr_data::<T>(ibmr) }) {
        Some(pl) => match pl.push(addr) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        },
        None => EINVAL.to_errno(),
    }
}

/// # Safety
///
/// ib_core callback: `ibmr` is a live MR of ours, never used again after we return 0.
unsafe extern "C" fn dereg_mr<T: MrVerbs>(ibmr: *mut b::ib_mr, _udata: *mut b::ib_udata) -> c_int {
    // SAFETY: the MR is live and ours (see below); ib_core keeps it so while this runs.
    if let Err(e) = T::begin_dereg(unsafe { mr_data::<T>(ibmr) }) {
        return e.to_errno();
    }
    // SAFETY: ib_core keeps `device` valid while the MR exists; it is one of ours.
    let dev = unsafe { Device::<T>::from_raw((*ibmr).device) };
    // SAFETY: the MR was created by `new_mr::<T>` (`KBox::into_raw` of an `MrObj<T::Mr>` whose
    // first field is `ibmr`), and ib_core gives up its pointer with this call.
    let obj = unsafe { KBox::from_raw(ibmr.cast::<MrObj<T::Mr>>()) };
    // SAFETY: the data was initialised by `new_mr` and is moved out exactly once.
    let data = unsafe { obj.data.assume_init_read() };
    T::dereg_mr(dev, data);
    drop(obj);
    0
}

/// Copies `len` bytes from kernel virtual address `src` to `dst`.
///
/// # Safety
///
/// Both ranges must be valid for `len` bytes.
pub(crate) unsafe fn kcopy(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: per the caller. The memory may be shared with other agents (as with a DMA engine),
    // which is the RDMA contract for registered memory.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
}

/// Checks a kernel virtual range for the obvious: not NULL, no wrap-around.
pub(crate) fn check_kva(va: u64, len: usize) -> Result {
    if va == 0 || va.checked_add(len as u64).is_none() {
        return Err(EFAULT);
    }
    Ok(())
}

/// Access to kernel memory by kernel virtual address, for the DMA MR of a kernel ULP. Only
/// `get_dma_mr` creates one.
pub struct KernelMemory(());

impl KernelMemory {
    /// Appends the `len` bytes at kernel virtual address `va` to `out` (`EMSGSIZE` if it has
    /// less room). Never sleeps.
    pub fn read(&self, va: u64, len: usize, out: &mut Fill<'_>) -> Result {
        check_kva(va, len)?;
        let dst = out.spare(len)?;
        // SAFETY: the ULP that created this DMA MR names only kernel memory it owns (the
        // contract of `get_dma_mr` / `pd->local_dma_lkey`); `dst` has room for `len` bytes.
        unsafe { kcopy(dst, va as usize as *const u8, len) };
        // SAFETY: the copy wrote the `len` bytes.
        unsafe { out.advance(len) };
        Ok(())
    }

    /// Copies `data` to kernel virtual address `va`. Never sleeps.
    pub fn write(&self, va: u64, data: &(impl CopySrc + ?Sized)) -> Result {
        check_kva(va, data.len())?;
        // SAFETY: as in `read`; the copy is all of `data`.
        unsafe { data.copy_to(0, va as usize as *mut u8, data.len()) }
    }

    /// Executes `op` on the `u64` at `va` (8-byte aligned, else `EINVAL`) with a hardware atomic
    /// and returns the old value. Never sleeps.
    pub fn atomic(&self, va: u64, op: AtomicOp) -> Result<u64> {
        check_kva(va, 8)?;
        if va % 8 != 0 {
            return Err(EINVAL);
        }
        // SAFETY: as in `read`; aligned.
        Ok(unsafe { hw_atomic(va as usize as *mut u64, op) })
    }
}

/// Smallest block size `map_mr_sg` accepts (the low bits of a block address hold its shift).
const MIN_BLOCK: u32 = 512;
/// Largest block size `map_mr_sg` accepts.
const MAX_BLOCK: u32 = 1 << 30;
/// The bits of a block entry that hold the block's size shift.
const SHIFT_MASK: u64 = (MIN_BLOCK as u64) - 1;

/// The page list of a fast-registration MR: kernel virtual addresses of blocks of `page_size`
/// bytes, filled by `map_mr_sg` (atomic context, never allocates) and read by the copies.
///
/// Every entry records its block's size, and every copy checks it, so a copy only ever touches
/// bytes of blocks a ULP handed to `map_mr_sg`, even if the ULP remaps an MR while it is in use
/// (a ULP bug that garbles data but cannot make us write elsewhere).
pub struct PageList {
    /// `block address | size shift`, `cap` entries.
    blocks: KVec<AtomicU64>,
    /// Entries filled by the mapping in progress.
    filling: AtomicUsize,
    /// Entries of the last completed mapping.
    count: AtomicUsize,
    /// Block size shift of the last mapping.
    shift: AtomicU32,
    /// Offset of the mapping's first byte in block 0.
    first: AtomicU64,
    /// Bytes mapped.
    length: AtomicU64,
}

impl PageList {
    /// A list of `cap` blocks (`alloc_mr`'s `max_num_sg`).
    pub fn new(cap: usize) -> Result<Self> {
        let mut blocks = KVec::with_capacity(cap, GFP_KERNEL)?;
        for _ in 0..cap {
            blocks.push(AtomicU64::new(0), GFP_KERNEL)?;
        }
        Ok(Self {
            blocks,
            filling: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            shift: AtomicU32::new(0),
            first: AtomicU64::new(0),
            length: AtomicU64::new(0),
        })
    }

    /// Capacity in blocks.
    pub fn capacity(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes the last `map_mr_sg` mapped (`ib_mr.length` after it).
    pub fn mapped_length(&self) -> u64 {
        self.length.load(Ordering::Acquire)
    }

    fn begin(&self, shift: u32) {
        self.count.store(0, Ordering::Release);
        self.length.store(0, Ordering::Release);
        self.filling.store(0, Ordering::Relaxed);
        self.shift.store(shift, Ordering::Release);
    }

    fn push(&self, addr: u64) -> Result {
        let shift = self.shift.load(Ordering::Acquire);
        let i = self.filling.load(Ordering::Relaxed);
        let slot = self.blocks.get(i).ok_or(ENOMEM)?;
        if addr & ((1u64 << shift) - 1) != 0 || addr == 0 {
            return Err(EINVAL);
        }
        slot.store(addr | u64::from(shift), Ordering::Release);
        self.filling.store(i + 1, Ordering::Relaxed);
        Ok(())
    }

    fn finish(&self, iova: u64, length: u64) {
        let shift = self.shift.load(Ordering::Acquire);
        self.first
            .store(iova & ((1u64 << shift) - 1), Ordering::Release);
        self.length.store(length, Ordering::Release);
        self.count
            .store(self.filling.load(Ordering::Relaxed), Ordering::Release);
    }

    /// Calls `f(kva, done, len)` for each contiguous chunk of `[pos, pos + total)` (bytes from the
    /// first mapped byte), after checking the range against the mapping.
    fn walk(&self, pos: u64, total: usize, mut f: impl FnMut(u64, usize, usize)) -> Result {
        let count = self.count.load(Ordering::Acquire);
        let shift = self.shift.load(Ordering::Acquire);
        check_range(pos, total as u64, self.length.load(Ordering::Acquire))?;
        let start = self
            .first
            .load(Ordering::Acquire)
            .checked_add(pos)
            .and_then(|s| usize::try_from(s).ok())
            .ok_or(ERANGE)?;
        for_each_block(start, total, 1usize << shift, |i, off, done, len| {
            if i >= count {
                return Err(ERANGE);
            }
            let e = self.blocks.get(i).ok_or(ERANGE)?.load(Ordering::Acquire);
            if e & SHIFT_MASK != u64::from(shift) {
                return Err(EAGAIN);
            }
            f((e & !SHIFT_MASK) + off as u64, done, len);
            Ok(())
        })
    }

    /// Appends the `len` bytes at position `pos` (bytes from the first mapped byte) to `out`.
    /// Never sleeps; nothing is counted filled if the range is not mapped (`ERANGE`) or `out`
    /// has less room (`EMSGSIZE`).
    pub fn read(&self, pos: u64, len: usize, out: &mut Fill<'_>) -> Result {
        check_range(pos, len as u64, self.mapped_length())?;
        let dst = out.spare(len)?;
        self.walk(pos, len, |kva, done, n| {
            // SAFETY: `kva` lies in a block the ULP mapped, `n` bytes within it (checked by
            // `walk`); `dst + done` is valid for `n` of the `len` spare bytes.
            unsafe { kcopy(dst.add(done), kva as usize as *const u8, n) }
        })?;
        // SAFETY: `walk` visited the `len` bytes in order, each copied.
        unsafe { out.advance(len) };
        Ok(())
    }

    /// Copies `data` to position `pos`. Never sleeps; nothing is written if the range is not
    /// mapped (`ERANGE`).
    pub fn write(&self, pos: u64, data: &(impl CopySrc + ?Sized)) -> Result {
        // Check everything first so that a failure writes nothing.
        self.walk(pos, data.len(), |_, _, _| ())?;
        let mut copied = Ok(());
        self.walk(pos, data.len(), |kva, done, len| {
            if copied.is_ok() {
                // SAFETY: as in `read`, the other way round; `walk` visits pieces of `data`.
                copied = unsafe { data.copy_to(done, kva as usize as *mut u8, len) };
            }
        })?;
        copied
    }

    /// Executes `op` on the `u64` at position `pos` (8-byte aligned address, else `EINVAL`) with
    /// a hardware atomic and returns the old value. Never sleeps.
    pub fn atomic(&self, pos: u64, op: AtomicOp) -> Result<u64> {
        let mut kva = 0;
        let mut chunks = 0;
        self.walk(pos, 8, |k, _, _| {
            kva = k;
            chunks += 1;
        })?;
        if chunks != 1 || kva % 8 != 0 {
            return Err(EINVAL);
        }
        // SAFETY: `kva` is 8 aligned bytes inside a mapped block.
        Ok(unsafe { hw_atomic(kva as usize as *mut u64, op) })
    }
}
