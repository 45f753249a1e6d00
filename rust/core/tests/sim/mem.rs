//! A memory model for the simulation: MRs are byte arrays with a key (lkey = rkey), a base
//! address, access rights and a protection domain. Every access is checked first and touches
//! nothing on failure.
//!
//! Keys and checks follow the driver's MR table (`rust/driver/memory.rs`): a key is
//! `index << 8 | byte`; the index finds the MR, then the key must match in full, the MR must
//! belong to the QP's PD and be valid (else `BadKey`), grant the access (else `NoAccess`) and
//! hold the range (else `OutOfBounds`).
//!
//! The fuzz target `fuzz/fuzz_targets/responder_packets.rs` includes this file too (through
//! `#[path]`) and adds its own checks of what the engine may touch.

use std::cell::RefCell;
use std::rc::Rc;

use rvrdma_core::memory::{
    AtomicOp, MemError, Memory, RxPayload, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_WRITE,
};
use rvrdma_core::mw::{BindMwParams, MrFacts, MwType, QpRef, Window};
use rvrdma_core::wqe::{RegMrParams, Sge};

/// One memory region.
#[derive(Debug)]
pub struct Mr {
    pub key: u32,
    pub base: u64,
    pub bytes: Vec<u8>,
    pub access: u32,
    pub valid: bool,
    /// Protection domain; the QP's is [`MemInner::pd`].
    pub pd: u32,
}

/// One memory window and the MR it is bound to (the driver's `RvrMw`).
#[derive(Debug)]
pub struct Mw {
    /// The window's state and rules.
    pub w: Window,
    /// Key of the MR the window was bound to.
    pub mr_key: u32,
}

/// The MR index of a key (the driver's `key_index`).
pub fn key_index(key: u32) -> u32 {
    key >> 8
}

/// The pieces, as (L_Key, VA, length), of the SGE list `sges` that its bytes `offset..offset +
/// len` lie in, in order; `OutOfBounds` if the list is shorter or an address overflows.
pub fn sge_pieces(sges: &[Sge], offset: u32, len: u64) -> Result<Vec<(u32, u64, u64)>, MemError> {
    let mut skip = offset as u64;
    let mut need = len;
    let mut pieces = Vec::new();
    for s in sges {
        if need == 0 {
            break;
        }
        let l = s.length as u64;
        if skip >= l {
            skip -= l;
            continue;
        }
        let take = (l - skip).min(need);
        // A bogus SGE (the fuzz target posts them) must fail, not overflow.
        let va = s.addr.checked_add(skip).ok_or(MemError::OutOfBounds)?;
        pieces.push((s.lkey, va, take));
        need -= take;
        skip = 0;
    }
    if need != 0 {
        return Err(MemError::OutOfBounds);
    }
    Ok(pieces)
}

/// The MRs of one QP's PD (and of other PDs, which it must not reach).
#[derive(Debug, Default)]
pub struct MemInner {
    pub mrs: Vec<Mr>,
    /// Memory windows; their key indices never collide with an MR's (one key space).
    pub mws: Vec<Mw>,
    /// The PD of the QP this memory serves.
    pub pd: u32,
    /// The number of the QP this memory serves (type 2 windows are tied to it).
    pub qpn: u32,
    /// Number of atomics executed (for the exactly-once check).
    pub atomics_executed: u64,
    /// Number of ATOMIC WRITEs executed (exactly once each, also when duplicated).
    pub atomic_writes_executed: u64,
    /// Number of FLUSHes executed.
    pub flushes_executed: u64,
    /// Keys of MRs whose memory is not resident (on-demand paging): every checked access to
    /// them is [`MemError::NotPresent`] and touches nothing.
    pub absent: Vec<u32>,
    /// Accesses refused as not resident.
    pub not_present_hits: std::cell::Cell<u64>,
    /// The payload of the packet being handed in as [`RxPayload::Held`] (as the driver holds a
    /// payload left in an skb's pages).
    pub held: Vec<u8>,
}

/// A shared handle: the QP uses it as [`Memory`], the simulated shell to gather payloads.
#[derive(Clone, Debug, Default)]
pub struct SimMem(pub Rc<RefCell<MemInner>>);

impl MemInner {
    /// The bytes of `p`: a held payload must be the one [`MemInner::held`] holds, whole.
    fn payload(&self, p: RxPayload<'_>) -> Result<Vec<u8>, MemError> {
        match p {
            RxPayload::Bytes(b) => Ok(b.to_vec()),
            RxPayload::Held(n) if n == self.held.len() => Ok(self.held.clone()),
            RxPayload::Held(_) => Err(MemError::OutOfBounds),
        }
    }

    /// The MR `key` names for this QP: found by index, then the whole key, the PD and the
    /// state must match (the driver's `RvrMr::check`).
    pub fn mr(&self, key: u32) -> Option<&Mr> {
        let pd = self.pd;
        self.mrs
            .iter()
            .find(|m| key_index(m.key) == key_index(key))
            .filter(|m| m.key == key && m.pd == pd && m.valid)
    }

    fn mr_mut(&mut self, key: u32) -> Option<&mut Mr> {
        let pd = self.pd;
        self.mrs
            .iter_mut()
            .find(|m| key_index(m.key) == key_index(key))
            .filter(|m| m.key == key && m.pd == pd && m.valid)
    }

    fn range(m: &Mr, va: u64, len: u64) -> Result<std::ops::Range<usize>, MemError> {
        let off = va.checked_sub(m.base).ok_or(MemError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > m.bytes.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok(off as usize..end as usize)
    }

    /// Checks that `key` names an MR granting `access` that holds `va..va + len`, and that
    /// its memory is resident (not in [`MemInner::absent`]).
    pub fn check(&self, key: u32, va: u64, len: u64, access: u32) -> Result<(), MemError> {
        let m = self.mr(key).ok_or(MemError::BadKey)?;
        if m.access & access != access {
            return Err(MemError::NoAccess);
        }
        Self::range(m, va, len)?;
        if self.absent.contains(&key) {
            self.not_present_hits.set(self.not_present_hits.get() + 1);
            return Err(MemError::NotPresent);
        }
        Ok(())
    }

    /// The QP this memory serves.
    pub fn qp(&self) -> QpRef {
        QpRef {
            pd: self.pd,
            qpn: self.qpn,
        }
    }

    /// The window whose key index `key` has.
    pub fn mw(&self, key: u32) -> Option<&Mw> {
        self.mws
            .iter()
            .find(|m| key_index(m.w.key()) == key_index(key))
    }

    /// A remote access with R_Key `rkey`: an MR's key, or a window's, checked against the
    /// window ([`Window::resolve`]) and then its MR. Returns the MR's key and the address in it.
    pub fn remote_target(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        access: u32,
    ) -> Result<(u32, u64), MemError> {
        if let Some(mw) = self.mw(rkey) {
            let mva = mw.w.resolve(rkey, self.qp(), va, len, access)?;
            let m = self.mr(mw.mr_key).ok_or(MemError::BadKey)?;
            Self::range(m, mva, len)?;
            return Ok((mw.mr_key, mva));
        }
        self.check(rkey, va, len, access)?;
        Ok((rkey, va))
    }

    /// The bytes at `va..va + len` of the MR `key` names (no access check).
    pub fn read(&self, key: u32, va: u64, len: u64) -> Result<Vec<u8>, MemError> {
        let m = self.mr(key).ok_or(MemError::BadKey)?;
        let r = Self::range(m, va, len)?;
        Ok(m.bytes[r].to_vec())
    }

    /// Writes `data` at `va` into the MR `key` names (no access check).
    pub fn write(&mut self, key: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        let m = self.mr_mut(key).ok_or(MemError::BadKey)?;
        let r = Self::range(m, va, data.len() as u64)?;
        m.bytes[r].copy_from_slice(data);
        Ok(())
    }

    /// Gathers `len` bytes from `offset` into the SGE list.
    pub fn gather(&self, sges: &[Sge], offset: u32, len: u32) -> Result<Vec<u8>, MemError> {
        let mut out = Vec::with_capacity(len as usize);
        for (k, va, take) in sge_pieces(sges, offset, len as u64)? {
            out.extend(self.read(k, va, take)?);
        }
        Ok(out)
    }
}

// The `Memory` operations themselves, on the MRs: `SimMem` delegates to them, and the fuzz
// target `responder_packets` wraps them with its contract checks.
impl MemInner {
    /// [`Memory::check_local`]: every SGE lies in an MR granting `access`.
    pub fn check_local(&self, sges: &[Sge], access: u32) -> Result<(), MemError> {
        for s in sges {
            self.check(s.lkey, s.addr, s.length as u64, access)?;
        }
        Ok(())
    }

    /// [`Memory::scatter`], each touched SGE checked for `access` first: nothing is written
    /// unless every piece fits. The fuzz target asks for local write, the simulation for none.
    pub fn scatter(
        &mut self,
        sges: &[Sge],
        offset: u32,
        data: &[u8],
        access: u32,
    ) -> Result<(), MemError> {
        // Check everything first.
        let plan = sge_pieces(sges, offset, data.len() as u64)?;
        for &(k, va, take) in &plan {
            self.check(k, va, take, access)?;
        }
        let mut pos = 0usize;
        for (k, va, take) in plan {
            self.write(k, va, &data[pos..pos + take as usize])?;
            pos += take as usize;
        }
        Ok(())
    }

    /// [`Memory::remote_write`]: the range must grant remote write.
    pub fn remote_write(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        let (key, va) = self.remote_target(rkey, va, data.len() as u64, ACCESS_REMOTE_WRITE)?;
        self.write(key, va, data)
    }

    /// [`Memory::remote_atomic`] on the 8 bytes at `va`, counted in `atomics_executed`.
    pub fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let (rkey, va) = self.remote_target(rkey, va, 8, ACCESS_REMOTE_ATOMIC)?;
        let b = self.read(rkey, va, 8)?;
        let old = u64::from_ne_bytes(b.try_into().map_err(|_| MemError::OutOfBounds)?);
        let new = match op {
            AtomicOp::CmpSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        };
        self.write(rkey, va, &new.to_ne_bytes())?;
        self.atomics_executed += 1;
        Ok(old)
    }

    /// [`Memory::remote_atomic_write`]: the 8 bytes at `va`, counted in `atomic_writes_executed`.
    pub fn remote_atomic_write(&mut self, rkey: u32, va: u64, v: [u8; 8]) -> Result<(), MemError> {
        let (rkey, va) = self.remote_target(rkey, va, 8, ACCESS_REMOTE_WRITE)?;
        self.write(rkey, va, &v)?;
        self.atomic_writes_executed += 1;
        Ok(())
    }

    /// [`Memory::remote_flush`]: key and rights, and the range when one is named.
    pub fn remote_flush(
        &mut self,
        rkey: u32,
        range: Option<(u64, u32)>,
        access: u32,
    ) -> Result<(), MemError> {
        match range {
            Some((va, len)) => self
                .remote_target(rkey, va, len as u64, access)
                .map(|_| ())?,
            None => {
                let m = self.mr(rkey).ok_or(MemError::BadKey)?;
                if m.access & access != access {
                    return Err(MemError::NoAccess);
                }
            }
        }
        self.flushes_executed += 1;
        Ok(())
    }

    /// Invalidates the MR `key` names ([`Memory::invalidate_remote`] and
    /// [`Memory::local_invalidate`]).
    pub fn invalidate(&mut self, key: u32) -> Result<(), MemError> {
        let qp = self.qp();
        if let Some(mw) = self
            .mws
            .iter_mut()
            .find(|m| key_index(m.w.key()) == key_index(key))
        {
            return mw.w.invalidate(key, qp);
        }
        let mr = self.mr_mut(key).ok_or(MemError::BadKey)?;
        mr.valid = false;
        Ok(())
    }

    /// [`Memory::fast_register`]: revalidates the invalid MR with the key's index (of this PD),
    /// or adds a new one.
    pub fn fast_register(&mut self, p: &RegMrParams) -> Result<(), MemError> {
        let pd = self.pd;
        if let Some(mr) = self
            .mrs
            .iter_mut()
            .find(|x| key_index(x.key) == key_index(p.key))
        {
            if mr.valid || mr.pd != pd {
                return Err(MemError::OpFailed);
            }
            mr.valid = true;
            mr.key = p.key;
            mr.base = p.iova;
            mr.access = p.access;
            return Ok(());
        }
        self.mrs.push(Mr {
            key: p.key,
            base: p.iova,
            bytes: vec![0; p.length as usize],
            access: p.access,
            valid: true,
            pd,
        });
        Ok(())
    }
}

impl MemInner {
    /// [`Memory::bind_mw`]: the window `p.mw_rkey` names, bound to the MR `p.mr_lkey` names.
    pub fn bind_mw(&mut self, p: &BindMwParams) -> Result<(), MemError> {
        let qp = self.qp();
        let facts = self
            .mrs
            .iter()
            .find(|m| m.key == p.mr_lkey)
            .map(|m| MrFacts {
                pd: m.pd,
                access: m.access,
                iova: m.base,
                length: m.bytes.len() as u64,
                valid: m.valid,
            });
        let mw = self
            .mws
            .iter_mut()
            .find(|m| key_index(m.w.key()) == key_index(p.mw_rkey))
            .ok_or(MemError::BadKey)?;
        mw.w.bind(p, qp, facts.as_ref())
            .map_err(|_| MemError::OpFailed)?;
        mw.mr_key = p.mr_lkey;
        Ok(())
    }
}

impl Memory for SimMem {
    fn check_local(&mut self, sges: &[Sge], access: u32) -> Result<(), MemError> {
        self.0.borrow().check_local(sges, access)
    }

    fn scatter(&mut self, sges: &[Sge], offset: u32, data: RxPayload<'_>) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        let data = m.payload(data)?;
        m.scatter(sges, offset, &data, 0)
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, access: u32) -> Result<(), MemError> {
        self.0
            .borrow()
            .remote_target(rkey, va, len as u64, access)
            .map(|_| ())
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        let data = m.payload(data)?;
        m.remote_write(rkey, va, &data)
    }

    fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.0.borrow_mut().remote_atomic(rkey, va, op)
    }

    fn remote_atomic_write(&mut self, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError> {
        self.0.borrow_mut().remote_atomic_write(rkey, va, value)
    }

    fn remote_flush(
        &mut self,
        rkey: u32,
        range: Option<(u64, u32)>,
        access: u32,
    ) -> Result<(), MemError> {
        self.0.borrow_mut().remote_flush(rkey, range, access)
    }

    fn invalidate_remote(&mut self, rkey: u32) -> Result<(), MemError> {
        self.0.borrow_mut().invalidate(rkey)
    }

    fn local_invalidate(&mut self, key: u32) -> Result<(), MemError> {
        self.invalidate_remote(key)
    }

    fn fast_register(&mut self, p: &RegMrParams) -> Result<(), MemError> {
        self.0.borrow_mut().fast_register(p)
    }

    fn bind_mw(&mut self, p: &BindMwParams) -> Result<(), MemError> {
        self.0.borrow_mut().bind_mw(p)
    }
}

impl SimMem {
    /// Adds an MR of the QP's PD.
    pub fn add_mr(&self, key: u32, base: u64, len: usize, access: u32) {
        let pd = self.0.borrow().pd;
        self.add_mr_pd(key, base, len, access, pd);
    }

    /// Adds an MR of protection domain `pd`; its index (`key >> 8`) must be unused.
    pub fn add_mr_pd(&self, key: u32, base: u64, len: usize, access: u32, pd: u32) {
        let mut m = self.0.borrow_mut();
        assert!(
            m.mrs.iter().all(|x| key_index(x.key) != key_index(key)),
            "MR index {:#x} in use",
            key_index(key)
        );
        m.mrs.push(Mr {
            key,
            base,
            bytes: vec![0; len],
            access,
            valid: true,
            pd,
        });
    }

    /// Allocates a memory window of the QP's PD with R_Key `key` (index unused by MRs and
    /// windows).
    pub fn add_mw(&self, kind: MwType, key: u32) {
        let mut m = self.0.borrow_mut();
        assert!(m.mrs.iter().all(|x| key_index(x.key) != key_index(key)));
        assert!(m.mws.iter().all(|x| key_index(x.w.key()) != key_index(key)));
        let pd = m.pd;
        m.mws.push(Mw {
            w: Window::new(kind, pd, key),
            mr_key: 0,
        });
    }

    /// The current key of the window with index `key >> 8`.
    pub fn mw_key(&self, key: u32) -> u32 {
        self.0.borrow().mw(key).expect("MW").w.key()
    }

    /// The bytes of the MR with index `key >> 8` at `va`, whatever its key, PD and state (to
    /// compare memory the engine must not have touched).
    pub fn peek(&self, key: u32, va: u64, len: usize) -> Vec<u8> {
        let m = self.0.borrow();
        let mr = m
            .mrs
            .iter()
            .find(|x| key_index(x.key) == key_index(key))
            .expect("MR");
        let off = (va - mr.base) as usize;
        mr.bytes[off..off + len].to_vec()
    }
}
