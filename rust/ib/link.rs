// SPDX-License-Identifier: GPL-2.0

//! `rdma link add NAME type TYPE netdev DEV`: registration of an rdma link type.

use crate::bindings as b;
use crate::net::netdev::NetDev;
use core::marker::PhantomData;
use kernel::{prelude::*, types::Opaque};

/// A driver that creates ib devices on `rdma link add`.
pub trait LinkDriver: 'static {
    /// The link type name (`rdma link add ... type NAME`).
    const TYPE: &'static CStr;

    /// Creates a device called `name` on `ndev`.
    fn newlink(name: &CStr, ndev: &NetDev) -> Result;
}

/// A registered link type; unregistered on drop.
///
/// # Invariants
///
/// `ops` is registered with `rdma_link_register` for the lifetime of the value.
#[pin_data(PinnedDrop)]
pub struct LinkRegistration<T: LinkDriver> {
    #[pin]
    ops: Opaque<b::rdma_link_ops>,
    _t: PhantomData<T>,
}

// SAFETY: ib_core only touches the ops under its own lock.
unsafe impl<T: LinkDriver> Send for LinkRegistration<T> {}
// SAFETY: no `&self` method touches the ops.
unsafe impl<T: LinkDriver> Sync for LinkRegistration<T> {}

impl<T: LinkDriver> LinkRegistration<T> {
    /// Registers the link type.
    pub fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            ops <- Opaque::ffi_init(|slot: *mut b::rdma_link_ops| {
                // A zeroed `rdma_link_ops` is valid; we then set the type and callback.
                // SAFETY: `slot` is valid for writes and these fields are plain data.
                unsafe {
                    slot.write(core::mem::zeroed());
                    (*slot).type_ = T::TYPE.as_char_ptr();
                    (*slot).newlink = Some(Self::newlink_trampoline);
                    // INVARIANT: registered here, unregistered in `drop`.
                    b::rdma_link_register(slot);
                }
            }),
            _t: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called by ib_core with a NUL-terminated name and a live, referenced net device.
    unsafe extern "C" fn newlink_trampoline(
        name: *const c_char,
        ndev: *mut b::net_device,
    ) -> c_int {
        // SAFETY: ib_core passes a NUL-terminated name buffer that outlives this call.
        let name = unsafe { CStr::from_char_ptr(name) };
        // SAFETY: ib_core holds a reference on `ndev` for the duration of the call.
        let ndev = unsafe { NetDev::from_raw(ndev) };
        match T::newlink(name, ndev) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }
}

#[pinned_drop]
impl<T: LinkDriver> PinnedDrop for LinkRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: by the type invariant the ops are registered.
        unsafe { b::rdma_link_unregister(self.ops.get()) };
    }
}
