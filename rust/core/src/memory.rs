//! The memory the engine reaches only through the caller: local gather/scatter lists checked by
//! L_Key, remote accesses checked by R_Key, bounds and access rights, invalidation and fast
//! registration. The core never holds references into memory.
//!
//! Implementations must perform the check and the access as one step: a request outside an
//! MR's bounds or rights returns an error and touches nothing.

use crate::mw::BindMwParams;
use crate::wqe::{RegMrParams, Sge};

/// IB_ACCESS_LOCAL_WRITE.
pub const ACCESS_LOCAL_WRITE: u32 = 1;
/// IB_ACCESS_REMOTE_WRITE.
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// IB_ACCESS_REMOTE_READ.
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
/// IB_ACCESS_REMOTE_ATOMIC.
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
/// IB_ACCESS_FLUSH_GLOBAL: the MR (or QP) accepts FLUSH with placement type "global".
pub const ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
/// IB_ACCESS_FLUSH_PERSISTENT: the MR (or QP) accepts FLUSH with placement type "persistent".
pub const ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;

/// Why a memory operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// Unknown or invalidated key, or a key of another protection domain.
    BadKey,
    /// The access lies (partly) outside the MR.
    OutOfBounds,
    /// The MR does not grant the requested access right.
    NoAccess,
    /// The operation itself failed (e.g. fast-register of an MR still valid).
    OpFailed,
    /// The memory is valid but not resident now (an on-demand-paging MR whose pages the caller
    /// must fault in first, which it cannot do where the engine runs). Nothing is reported to
    /// anyone: the engine leaves its state as if it had not seen the request packet, response
    /// packet or WQE, and the caller hands it in again once the memory is resident. A copy
    /// that stopped part way may be repeated in full (the same bytes land again).
    NotPresent,
}

/// An atomic operation on 8 bytes of remote memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap: if `*va == compare` then `*va = swap`.
    CmpSwap {
        /// Value compared with memory.
        compare: u64,
        /// Value stored on equality.
        swap: u64,
    },
    /// Fetch and add: `*va += add` (wrapping).
    FetchAdd {
        /// Value added.
        add: u64,
    },
}

/// The payload of an inbound packet as the engine sees it: bytes in hand, or bytes only the
/// caller can reach (a received packet's payload left in the pages it arrived in, which a
/// kernel shell cannot lend as a slice: their owner may write them at any time). The engine
/// reads neither kind itself beyond its length, except the 8 bytes of an ATOMIC WRITE, which
/// it needs in hand; it hands either kind to [`Memory::scatter`] and [`Memory::remote_write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxPayload<'a> {
    /// The bytes, in hand.
    Bytes(&'a [u8]),
    /// This many bytes, held by the caller's [`Memory`] for the packet being handed in.
    Held(usize),
}

impl<'a> RxPayload<'a> {
    /// The payload's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Bytes(b) => b.len(),
            Self::Held(n) => *n,
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, when they are in hand.
    pub fn bytes(&self) -> Option<&'a [u8]> {
        match self {
            Self::Bytes(b) => Some(b),
            Self::Held(_) => None,
        }
    }
}

impl<'a> From<&'a [u8]> for RxPayload<'a> {
    fn from(b: &'a [u8]) -> Self {
        Self::Bytes(b)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for RxPayload<'a> {
    fn from(b: &'a [u8; N]) -> Self {
        Self::Bytes(b)
    }
}

/// Memory operations the engine needs; the kernel shell implements them over its MR table,
/// the simulation over byte arrays.
pub trait Memory {
    /// Checks that every element of `sges` lies inside a valid MR of this QP's PD named by its
    /// L_Key and grants `access` (0 for gather, [`ACCESS_LOCAL_WRITE`] for scatter).
    fn check_local(&mut self, sges: &[Sge], access: u32) -> Result<(), MemError>;
    /// Copies `data` into the scatter list `sges`, starting `offset` bytes into the list.
    /// The caller guarantees `offset + data.len()` is within the list's total length.
    fn scatter(&mut self, sges: &[Sge], offset: u32, data: RxPayload<'_>) -> Result<(), MemError>;
    /// Checks that `[va, va+len)` lies inside the MR named by `rkey` and that it grants
    /// `access` (one of the `ACCESS_REMOTE_*` bits).
    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, access: u32) -> Result<(), MemError>;
    /// Writes `data` at `va` of the MR named by `rkey` (needs [`ACCESS_REMOTE_WRITE`]).
    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError>;
    /// Executes an atomic at `va` (8 bytes, needs [`ACCESS_REMOTE_ATOMIC`]); returns the value
    /// memory held before.
    fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError>;
    /// ATOMIC WRITE: stores `value` at `va` (8 bytes, 8-aligned, needs [`ACCESS_REMOTE_WRITE`])
    /// as one store, after every earlier write to memory (no reader sees part of it).
    fn remote_atomic_write(&mut self, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError>;
    /// FLUSH: checks that the MR named by `rkey` grants `access` (the `ACCESS_FLUSH_*` bits the
    /// placement type asks for) and, for `Some((va, len))`, that the range lies inside it
    /// (`None`: the whole MR); then makes every earlier write to it globally visible (and
    /// persistent, as far as the memory can be).
    fn remote_flush(
        &mut self,
        rkey: u32,
        range: Option<(u64, u32)>,
        access: u32,
    ) -> Result<(), MemError>;
    /// Invalidates the MR named by `rkey` (Send with Invalidate at the responder).
    fn invalidate_remote(&mut self, rkey: u32) -> Result<(), MemError>;
    /// Invalidates the MR named by `key` (LOCAL_INV work request).
    fn local_invalidate(&mut self, key: u32) -> Result<(), MemError>;
    /// Fast-registers an MR (REG_MR work request).
    fn fast_register(&mut self, params: &RegMrParams) -> Result<(), MemError>;
    /// Binds a memory window (BIND_MW work request) by the rules of
    /// [`crate::mw::Window::bind`]. [`Self::check_remote`] and the remote accesses accept the
    /// window's R_Key afterwards; [`Self::local_invalidate`] and [`Self::invalidate_remote`]
    /// invalidate a type 2 window by it.
    fn bind_mw(&mut self, params: &BindMwParams) -> Result<(), MemError>;
}
