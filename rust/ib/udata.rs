// SPDX-License-Identifier: GPL-2.0

//! `struct ib_udata`: the driver-specific request and response of a verb called from user space.

use crate::bindings as b;
use core::marker::PhantomData;
use kernel::{
    error::to_result,
    prelude::*,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

/// The user data of one verb call from user space (kernel callers have none).
///
/// # Invariants
///
/// The pointer is a valid `ib_udata` of a uverbs call in progress, for `'a`.
pub struct Udata<'a>(*mut b::ib_udata, PhantomData<&'a mut b::ib_udata>);

impl<'a> Udata<'a> {
    /// Wraps the udata of a callback; `None` for a kernel caller (NULL).
    ///
    /// # Safety
    ///
    /// `p` must be NULL or a valid `ib_udata` for `'a`.
    pub(crate) unsafe fn from_raw(p: *mut b::ib_udata) -> Option<Self> {
        // INVARIANT: non-NULL `p` is valid for `'a` per the caller.
        (!p.is_null()).then_some(Self(p, PhantomData))
    }

    /// The raw pointer, for ib_core calls.
    pub fn as_raw(&self) -> *mut b::ib_udata {
        self.0
    }

    /// Length of the request the caller passed.
    pub fn inlen(&self) -> usize {
        // SAFETY: valid by the type invariant.
        unsafe { (*self.0).inlen }
    }

    /// Length of the response buffer the caller passed.
    pub fn outlen(&self) -> usize {
        // SAFETY: valid by the type invariant.
        unsafe { (*self.0).outlen }
    }

    /// Reads the request as `T`: fails with `EINVAL` if it is shorter than `T`, or longer with
    /// a non-zero tail (the udata compatibility rule).
    pub fn read<T: FromBytes + AsBytes + Default>(&self) -> Result<T> {
        let size = size_of::<T>();
        if self.inlen() < size {
            return Err(EINVAL);
        }
        if self.inlen() > size {
            // SAFETY: valid by the type invariant.
            if !unsafe { b::rvr_ib_is_udata_cleared(self.0, size, self.inlen() - size) } {
                return Err(crate::errno::eopnotsupp());
            }
        }
        let mut v = T::default();
        // SAFETY: `v` is `size` writable bytes; any bytes are a valid `T` (`FromBytes`).
        to_result(unsafe {
            b::rvr_ib_copy_from_udata(core::ptr::from_mut(&mut v).cast(), self.0, size)
        })?;
        Ok(v)
    }

    /// Checks that the request is empty (or all zero).
    pub fn check_in_empty(&self) -> Result {
        // SAFETY: valid by the type invariant.
        to_result(unsafe { b::rvr_ib_is_udata_in_empty(self.0) })
    }

    /// Writes `v` as the response, truncated to the caller's buffer (`ib_respond_udata`).
    pub fn respond<T: AsBytes>(&mut self, v: &T) -> Result {
        let len = size_of::<T>().min(self.outlen());
        // SAFETY: `v` is `size_of::<T>() >= len` readable bytes without padding (`AsBytes`).
        to_result(unsafe { b::rvr_ib_copy_to_udata(self.0, core::ptr::from_ref(v).cast(), len) })
    }

    /// Writes `v` at the user address `addr` that the request named (rxe's `modify_srq` answers
    /// a resize through such a pointer). `EFAULT` if the address is not writable.
    pub fn respond_at<T: AsBytes>(&self, addr: u64, v: &T) -> Result {
        let addr = usize::try_from(addr).map_err(|_| EFAULT)?;
        UserSlice::new(UserPtr::from_addr(addr), size_of::<T>())
            .writer()
            .write(v)
    }

    /// The user context the call runs in.
    pub fn ucontext(&self) -> *mut b::ib_ucontext {
        // SAFETY: every uverbs call runs with an attribute bundle holding this udata.
        unsafe { b::rvr_ib_udata_ucontext(self.0) }
    }
}
