// SPDX-License-Identifier: GPL-2.0

//! The layout of objects ib_core allocates for a driver (`INIT_RDMA_OBJ_SIZE`): the ib struct
//! first, the driver's data right behind it.
//!
//! ib_core allocates `size_ib_X` zeroed bytes, the driver's create verb writes its data, the
//! destroy verb drops it, and ib_core frees the memory afterwards.

use core::mem::MaybeUninit;

/// An ib_core-allocated object: `ib` (e.g. `struct ib_cq`) followed by driver data `D`.
#[repr(C)]
pub(crate) struct Obj<I, D> {
    ib: I,
    data: MaybeUninit<D>,
}

impl<I, D> Obj<I, D> {
    /// The size ib_core must allocate (`size_ib_X` in the ops table).
    pub(crate) const SIZE: usize = {
        // kmalloc'ed memory is 8-byte aligned at least.
        assert!(core::mem::align_of::<Self>() <= 8);
        core::mem::size_of::<Self>()
    };

    /// Writes the driver data of a fresh object.
    ///
    /// # Safety
    ///
    /// `ib` must be the first field of a live allocation of [`Self::SIZE`] bytes whose data is
    /// not initialised (or was dropped), and no one else may access the data concurrently.
    pub(crate) unsafe fn init(ib: *mut I, data: D) {
        let obj = ib.cast::<Self>();
        // SAFETY: per the caller, `obj` is a live, exclusively ours `Obj<I, D>`.
        unsafe { (*obj).data.write(data) };
    }

    /// The driver data.
    ///
    /// # Safety
    ///
    /// `ib` must be the first field of a live `Obj<I, D>` whose data is initialised and stays so
    /// for `'a`.
    pub(crate) unsafe fn data<'a>(ib: *const I) -> &'a D {
        let obj = ib.cast::<Self>();
        // SAFETY: per the caller the data is initialised and outlives `'a`.
        unsafe { (*obj).data.assume_init_ref() }
    }

    /// Moves the driver data out (the object is being destroyed).
    ///
    /// # Safety
    ///
    /// As for [`Self::data`]; afterwards the data counts as uninitialised again and must not be
    /// read until a new [`Self::init`].
    pub(crate) unsafe fn take(ib: *mut I) -> D {
        let obj = ib.cast::<Self>();
        // SAFETY: per the caller the data is initialised; we move it out exactly once.
        unsafe { (*obj).data.assume_init_read() }
    }
}
