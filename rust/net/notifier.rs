// SPDX-License-Identifier: GPL-2.0

//! Registration of a netdevice notifier with a safe callback.

use super::netdev::NetDev;
use crate::bindings as b;
use core::marker::PhantomData;
use kernel::{prelude::*, types::Opaque};

/// The netdev events rvrdma distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetdevEvent {
    /// The device is being unregistered (`NETDEV_UNREGISTER`).
    Unregister,
    /// The MTU changed (`NETDEV_CHANGEMTU`).
    ChangeMtu,
    /// The device went up, down, or its carrier changed.
    LinkChange,
    /// Anything else.
    Other,
}

/// A handler for netdevice events.
pub trait NetdevHandler: 'static {
    /// Called for each event on any net device; runs in process context under RTNL.
    fn event(ev: NetdevEvent, dev: &NetDev);
}

/// A registered netdevice notifier; unregistered on drop.
///
/// # Invariants
///
/// `nb` is registered with `register_netdevice_notifier` for the lifetime of the value.
#[pin_data(PinnedDrop)]
pub struct NetdevNotifier<H: NetdevHandler> {
    #[pin]
    nb: Opaque<b::notifier_block>,
    _h: PhantomData<H>,
}

// SAFETY: the notifier block is only touched by the notifier chain under its own locking.
unsafe impl<H: NetdevHandler> Send for NetdevNotifier<H> {}
// SAFETY: no `&self` method touches the notifier block.
unsafe impl<H: NetdevHandler> Sync for NetdevNotifier<H> {}

impl<H: NetdevHandler> NetdevNotifier<H> {
    /// Registers the notifier.
    pub fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            nb <- Opaque::try_ffi_init(|slot: *mut b::notifier_block| {
                // A zeroed notifier block with a callback is a valid initial value.
                // SAFETY: `slot` is valid for writes.
                unsafe {
                    slot.write(core::mem::zeroed());
                    (*slot).notifier_call = Some(Self::trampoline);
                }
                // INVARIANT: on success the block is registered.
                // SAFETY: `slot` is pinned and unregistered in `drop` before it is freed.
                kernel::error::to_result(unsafe { b::register_netdevice_notifier(slot) })
            }),
            _h: PhantomData,
        })
    }

    /// # Safety
    ///
    /// Called by the notifier chain with `ptr` a `netdev_notifier_info`.
    unsafe extern "C" fn trampoline(
        _nb: *mut b::notifier_block,
        event: c_ulong,
        ptr: *mut c_void,
    ) -> c_int {
        // SAFETY: for netdevice notifiers `ptr` is a `netdev_notifier_info`.
        let ndev = unsafe { b::rvr_netdev_notifier_info_to_dev(ptr) };
        if ndev.is_null() {
            return b::NOTIFY_DONE as c_int;
        }
        let ev = match event as u32 {
            b::netdev_cmd_NETDEV_UNREGISTER => NetdevEvent::Unregister,
            b::netdev_cmd_NETDEV_CHANGEMTU => NetdevEvent::ChangeMtu,
            b::netdev_cmd_NETDEV_UP | b::netdev_cmd_NETDEV_DOWN | b::netdev_cmd_NETDEV_CHANGE => {
                NetdevEvent::LinkChange
            }
            _ => NetdevEvent::Other,
        };
        // SAFETY: the device is live for the duration of the notifier call.
        H::event(ev, unsafe { NetDev::from_raw(ndev) });
        b::NOTIFY_DONE as c_int
    }
}

#[pinned_drop]
impl<H: NetdevHandler> PinnedDrop for NetdevNotifier<H> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: by the type invariant the block is registered.
        unsafe { b::unregister_netdevice_notifier(self.nb.get()) };
    }
}
