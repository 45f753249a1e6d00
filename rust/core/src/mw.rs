//! Memory windows (IBA 10.6.7): a remote key over part of an MR, with its own access rights,
//! bound and invalidated by work requests.
//!
//! A [`Window`] is the state of one memory window and owns its rules: which binds are allowed
//! (the MR, PD, range and access checks), which invalidations, and whether a remote access
//! through the window's R_Key may proceed. The caller keeps the window (under a lock), looks
//! up the MR a bind names and hands in its [`MrFacts`]; after a successful access check it
//! reaches the MR's memory at the address [`Window::resolve`] returns.
//!
//! Type 1 windows are bound and unbound by `ibv_bind_mw` (the provider posts a bind work
//! request) and may be rebound at any time; type 2 windows (type 2B: bound to a QP) are bound
//! by a BIND_MW work request only while free and become free again by invalidation
//! (LOCAL_INV, or a peer's Send with Invalidate).

use crate::memory::{
    MemError, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};

/// IB_ACCESS_MW_BIND: memory windows may be bound to the MR.
pub const ACCESS_MW_BIND: u32 = 1 << 4;
/// IB_ZERO_BASED: the window is addressed from 0 rather than by the MR's virtual addresses.
pub const ACCESS_ZERO_BASED: u32 = 1 << 5;
/// IB_ACCESS_OPTIONAL: the range of access bits a device may ignore.
pub const ACCESS_OPTIONAL: u32 = 0x3ff0_0000;
/// The access bits a bind may ask for: rdma_rxe's set (an MR's rights plus zero-based) without
/// on-demand paging and the FLUSH rights, which rvrdma's windows do not grant.
pub const ACCESS_SUPPORTED_MW: u32 = ACCESS_LOCAL_WRITE
    | ACCESS_REMOTE_WRITE
    | ACCESS_REMOTE_READ
    | ACCESS_REMOTE_ATOMIC
    | ACCESS_MW_BIND
    | ACCESS_ZERO_BASED
    | ACCESS_OPTIONAL;

/// The type of a memory window (`enum ib_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MwType {
    /// IB_MW_TYPE_1: bound by `ibv_bind_mw`, usable on every QP of its PD.
    Type1 = 1,
    /// IB_MW_TYPE_2 (type 2B): bound by a BIND_MW work request, usable only on that QP.
    Type2 = 2,
}

impl MwType {
    /// Converts a kernel `ib_mw_type` value; `None` for other values.
    pub fn from_u32(v: u32) -> Option<MwType> {
        match v {
            1 => Some(MwType::Type1),
            2 => Some(MwType::Type2),
            _ => None,
        }
    }
}

/// Parameters of a BIND_MW work request (the `mw` member of the rxe send WQE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindMwParams {
    /// The window's current R_Key.
    pub mw_rkey: u32,
    /// The R_Key the window gets: its low byte replaces the window key's low byte.
    pub rkey: u32,
    /// L_Key of the MR the window is bound to (ignored for a zero-length bind).
    pub mr_lkey: u32,
    /// First address of the window (an address of the MR).
    pub addr: u64,
    /// Length in bytes; 0 unbinds a type 1 window.
    pub length: u64,
    /// `ib_access_flags` of the window.
    pub access: u32,
}

/// What a bind needs to know about the MR its L_Key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrFacts {
    /// The MR's protection domain.
    pub pd: u32,
    /// The MR's `ib_access_flags`.
    pub access: u32,
    /// First address.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// The MR may be used (registered, not invalidated, not being deregistered).
    pub valid: bool,
}

/// The QP a bind, invalidation or access comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpRef {
    /// The QP's protection domain.
    pub pd: u32,
    /// The QP number.
    pub qpn: u32,
}

/// Why a bind was refused (the work request completes with `IB_WC_MW_BIND_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindError {
    /// Access bits outside [`ACCESS_SUPPORTED_MW`].
    UnsupportedAccess,
    /// The work request's MW R_Key is not the window's current key.
    WrongKey,
    /// The window or the MR is not in the QP's PD (C10-72).
    WrongPd,
    /// A type 2 window is bound already (o10-37.2.30): it must be invalidated first.
    NotFree,
    /// A type 1 window cannot be zero-based (o10-36.2.2).
    Type1ZeroBased,
    /// A type 2 window needs an MR and a nonzero length (o10-37.2.40).
    Type2Empty,
    /// The L_Key names no usable MR.
    MrInvalid,
    /// The MR was not registered with `IB_ACCESS_MW_BIND` (C10-73).
    MrNoBind,
    /// Remote write or atomic rights on a window need local write on the MR (C10-74).
    MrNoLocalWrite,
    /// The window does not lie inside the MR (C10-75).
    OutsideMr,
}

/// Whether a window may be accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// A type 2 window not bound (or invalidated).
    Free,
    /// Bound (a type 1 window is always valid; with length 0 it grants nothing).
    Valid,
}

/// The state and rules of one memory window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    kind: MwType,
    pd: u32,
    key: u32,
    state: WindowState,
    addr: u64,
    length: u64,
    access: u32,
    qpn: u32,
}

/// True when `[va, va + len)` lies inside `[base, base + length)`; overflow-safe.
fn inside(base: u64, length: u64, va: u64, len: u64) -> bool {
    va >= base && len <= length && va - base <= length - len
}

impl Window {
    /// A new window of PD `pd` with R_Key `key`: type 1 valid and empty, type 2 free
    /// (`alloc_mw`).
    pub fn new(kind: MwType, pd: u32, key: u32) -> Window {
        Window {
            kind,
            pd,
            key,
            state: match kind {
                MwType::Type1 => WindowState::Valid,
                MwType::Type2 => WindowState::Free,
            },
            addr: 0,
            length: 0,
            access: 0,
            qpn: 0,
        }
    }

    /// The window's type.
    pub fn kind(&self) -> MwType {
        self.kind
    }

    /// The current R_Key.
    pub fn key(&self) -> u32 {
        self.key
    }

    /// The protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// Free or valid.
    pub fn state(&self) -> WindowState {
        self.state
    }

    /// The bound range `(addr, length)` and access rights, `None` when the window grants
    /// nothing.
    pub fn bound(&self) -> Option<(u64, u64, u32)> {
        (self.state == WindowState::Valid && self.length > 0).then_some((
            self.addr,
            self.length,
            self.access,
        ))
    }

    /// The QP a type 2 window is bound to.
    pub fn bound_qpn(&self) -> Option<u32> {
        (self.kind == MwType::Type2 && self.state == WindowState::Valid).then_some(self.qpn)
    }

    /// Checks a bind (BIND_MW work request of `qp`, naming MR `mr` when `p.length > 0`) and,
    /// if allowed, binds the window: new key byte, range and rights; a type 2 window becomes
    /// tied to `qp`. On error the window is unchanged.
    pub fn bind(
        &mut self,
        p: &BindMwParams,
        qp: QpRef,
        mr: Option<&MrFacts>,
    ) -> Result<(), BindError> {
        if p.access & !ACCESS_SUPPORTED_MW != 0 {
            return Err(BindError::UnsupportedAccess);
        }
        if p.mw_rkey != self.key {
            return Err(BindError::WrongKey);
        }
        if self.pd != qp.pd {
            return Err(BindError::WrongPd);
        }
        match self.kind {
            MwType::Type1 => {
                if p.access & ACCESS_ZERO_BASED != 0 {
                    return Err(BindError::Type1ZeroBased);
                }
            }
            MwType::Type2 => {
                if self.state != WindowState::Free {
                    return Err(BindError::NotFree);
                }
                if p.length == 0 {
                    return Err(BindError::Type2Empty);
                }
            }
        }
        if p.length > 0 {
            let mr = mr.filter(|m| m.valid).ok_or(BindError::MrInvalid)?;
            if mr.pd != qp.pd {
                return Err(BindError::WrongPd);
            }
            if mr.access & ACCESS_MW_BIND == 0 {
                return Err(BindError::MrNoBind);
            }
            if p.access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
                && mr.access & ACCESS_LOCAL_WRITE == 0
            {
                return Err(BindError::MrNoLocalWrite);
            }
            if !inside(mr.iova, mr.length, p.addr, p.length) {
                return Err(BindError::OutsideMr);
            }
        }
        *self = Window {
            key: (self.key & !0xff) | (p.rkey & 0xff),
            state: WindowState::Valid,
            addr: p.addr,
            length: p.length,
            access: p.access,
            qpn: match self.kind {
                MwType::Type1 => 0,
                MwType::Type2 => qp.qpn,
            },
            ..*self
        };
        Ok(())
    }

    /// Invalidates a type 2 window by its R_Key `key` (LOCAL_INV on `qp`, or a Send with
    /// Invalidate received on `qp`). Only the QP the window is bound to may invalidate it;
    /// type 1 windows cannot be invalidated (o10-37.2.26), only rebound.
    pub fn invalidate(&mut self, key: u32, qp: QpRef) -> Result<(), MemError> {
        if key != self.key || qp.pd != self.pd {
            return Err(MemError::BadKey);
        }
        if self.kind == MwType::Type1 {
            return Err(MemError::OpFailed);
        }
        if self.state != WindowState::Valid || self.qpn != qp.qpn {
            return Err(MemError::BadKey);
        }
        self.unbind();
        Ok(())
    }

    /// Forgets the binding (deallocation, or destruction of the QP a type 2 window is bound
    /// to): a type 2 window becomes free, a type 1 window valid and empty.
    pub fn unbind(&mut self) {
        *self = Window::new(self.kind, self.pd, self.key);
    }

    /// Checks a remote access of `len` bytes at `va` needing `access` (`ACCESS_REMOTE_*`
    /// bits) with R_Key `key`, arriving on `qp`: the key must be the window's, the window
    /// bound, in the QP's PD and, for type 2, bound to that QP; the rights and the range are
    /// the window's, not the MR's. Returns the address in the MR (a zero-based window adds
    /// its start address). The caller still checks that the MR is valid and holds the range.
    pub fn resolve(
        &self,
        key: u32,
        qp: QpRef,
        va: u64,
        len: u64,
        access: u32,
    ) -> Result<u64, MemError> {
        let (addr, length, rights) = self.bound().ok_or(MemError::BadKey)?;
        if key != self.key || qp.pd != self.pd || (self.kind == MwType::Type2 && qp.qpn != self.qpn)
        {
            return Err(MemError::BadKey);
        }
        if rights & access != access {
            return Err(MemError::NoAccess);
        }
        if rights & ACCESS_ZERO_BASED != 0 {
            if !inside(0, length, va, len) {
                return Err(MemError::OutOfBounds);
            }
            return addr.checked_add(va).ok_or(MemError::OutOfBounds);
        }
        if !inside(addr, length, va, len) {
            return Err(MemError::OutOfBounds);
        }
        Ok(va)
    }
}

#[cfg(test)]
mod tests;
