//! A memory model for the simulation: MRs are byte arrays with a key (lkey = rkey), a base
//! address, access rights and a protection domain. Every access is checked first and touches
//! nothing on failure.
//!
//! Keys and checks follow the driver's MR table (`rust/driver/memory.rs`): a key is
//! `index << 8 | byte`; the index finds the MR, then the key must match in full, the MR must
//! belong to the QP's PD and be valid (else `BadKey`), grant the access (else `NoAccess`) and
//! hold the range (else `OutOfBounds`).

use std::cell::RefCell;
use std::rc::Rc;

use rvrdma_core::memory::{AtomicOp, MemError, Memory, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_WRITE};
use rvrdma_core::wqe::{RegMrParams, Sge};

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

/// The MR index of a key (the driver's `key_index`).
pub fn key_index(key: u32) -> u32 {
    key >> 8
}

#[derive(Debug, Default)]
pub struct MemInner {
    pub mrs: Vec<Mr>,
    /// The PD of the QP this memory serves.
    pub pd: u32,
    /// Number of atomics executed (for the exactly-once check).
    pub atomics_executed: u64,
}

/// A shared handle: the QP uses it as [`Memory`], the simulated shell to gather payloads.
#[derive(Clone, Debug, Default)]
pub struct SimMem(pub Rc<RefCell<MemInner>>);

impl MemInner {
    /// The MR `key` names for this QP: found by index, then the whole key, the PD and the
    /// state must match (the driver's `RvrMr::check`).
    fn mr(&self, key: u32) -> Option<&Mr> {
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

    pub fn check(&self, key: u32, va: u64, len: u64, access: u32) -> Result<(), MemError> {
        let m = self.mr(key).ok_or(MemError::BadKey)?;
        if m.access & access != access {
            return Err(MemError::NoAccess);
        }
        Self::range(m, va, len).map(|_| ())
    }

    pub fn read(&self, key: u32, va: u64, len: u64) -> Result<Vec<u8>, MemError> {
        let m = self.mr(key).ok_or(MemError::BadKey)?;
        let r = Self::range(m, va, len)?;
        Ok(m.bytes[r].to_vec())
    }

    pub fn write(&mut self, key: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        let m = self.mr_mut(key).ok_or(MemError::BadKey)?;
        let r = Self::range(m, va, data.len() as u64)?;
        m.bytes[r].copy_from_slice(data);
        Ok(())
    }

    /// Gathers `len` bytes from `offset` into the SGE list.
    pub fn gather(&self, sges: &[Sge], offset: u32, len: u32) -> Result<Vec<u8>, MemError> {
        let mut out = Vec::with_capacity(len as usize);
        let mut skip = offset as u64;
        let mut need = len as u64;
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
            out.extend(self.read(s.lkey, s.addr + skip, take)?);
            need -= take;
            skip = 0;
        }
        if need != 0 {
            return Err(MemError::OutOfBounds);
        }
        Ok(out)
    }
}

impl Memory for SimMem {
    fn check_local(&mut self, sges: &[Sge], access: u32) -> Result<(), MemError> {
        let m = self.0.borrow();
        for s in sges {
            m.check(s.lkey, s.addr, s.length as u64, access)?;
        }
        Ok(())
    }

    fn scatter(&mut self, sges: &[Sge], offset: u32, data: &[u8]) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        // Check everything first.
        let mut skip = offset as u64;
        let mut need = data.len() as u64;
        let mut plan = Vec::new();
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
            m.check(s.lkey, s.addr + skip, take, 0)?;
            plan.push((s.lkey, s.addr + skip, take));
            need -= take;
            skip = 0;
        }
        if need != 0 {
            return Err(MemError::OutOfBounds);
        }
        let mut pos = 0usize;
        for (k, va, take) in plan {
            m.write(k, va, &data[pos..pos + take as usize])?;
            pos += take as usize;
        }
        Ok(())
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, access: u32) -> Result<(), MemError> {
        self.0.borrow().check(rkey, va, len as u64, access)
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: &[u8]) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        m.check(rkey, va, data.len() as u64, ACCESS_REMOTE_WRITE)?;
        m.write(rkey, va, data)
    }

    fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let mut m = self.0.borrow_mut();
        m.check(rkey, va, 8, ACCESS_REMOTE_ATOMIC)?;
        let b = m.read(rkey, va, 8)?;
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
        m.write(rkey, va, &new.to_ne_bytes())?;
        m.atomics_executed += 1;
        Ok(old)
    }

    fn invalidate_remote(&mut self, rkey: u32) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        let mr = m.mr_mut(rkey).ok_or(MemError::BadKey)?;
        mr.valid = false;
        Ok(())
    }

    fn local_invalidate(&mut self, key: u32) -> Result<(), MemError> {
        self.invalidate_remote(key)
    }

    fn fast_register(&mut self, p: &RegMrParams) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        let pd = m.pd;
        if let Some(mr) = m
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
        m.mrs.push(Mr {
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
