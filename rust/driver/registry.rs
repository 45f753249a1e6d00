// SPDX-License-Identifier: GPL-2.0

//! The list of rvrdma devices: lookups by netdev (rvrdma's devices are not in ib_core's netdev
//! index, see `IbDriver::get_netdev`) and teardown of them all on module unload (rdma_rxe
//! shares our driver id, so `ib_unregister_driver()` is not an option).

use super::device::RvrDevice;
use crate::ib::device::{Device, PinnedDevice, Registry};
use crate::net::netdev::NetDev;
use kernel::prelude::*;

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` in the module initialiser, before any use.
    unsafe(uninit) static DEVICES: Mutex<Registry<RvrDevice>> =
        // Every device is added by `RvrDevice::allocated` and removed by `RvrDevice::dealloc`.
        // SAFETY: the registry lives behind this lock, and nothing else removes entries.
        unsafe { Registry::new() };
}

/// Initialises the registry; call once, first thing in module init.
pub fn init() {
    // SAFETY: called exactly once, before any other use of `DEVICES`.
    unsafe { DEVICES.init() };
}

/// Records a new device (before it is registered with ib_core).
pub fn add(dev: &Device<RvrDevice>) -> Result {
    DEVICES.lock().add(dev)
}

/// Forgets a device (from its `dealloc_driver`).
pub fn remove(dev: &Device<RvrDevice>) {
    DEVICES.lock().remove(dev);
}

/// Runs `f` on the rvrdma device that has `ndev` as a port, if any, with the registry locked
/// (so the device cannot go away meanwhile).
pub fn with_device_of<R>(ndev: &NetDev, f: impl FnOnce(&Device<RvrDevice>) -> R) -> Option<R> {
    let list = DEVICES.lock();
    list.find(|d| d.data().port_of(ndev).is_some()).map(f)
}

/// Runs `f` on the rvrdma device called `name`, if any, with the registry locked.
pub fn with_device_named<R>(name: &CStr, f: impl FnOnce(&Device<RvrDevice>) -> R) -> Option<R> {
    let list = DEVICES.lock();
    list.find(|d| d.name() == name).map(f)
}

/// Pins `dev` (for unregistration after the registry lock is dropped).
pub fn pin(dev: &Device<RvrDevice>) -> PinnedDevice {
    Registry::pin(dev)
}

/// Whether `pinned` is still listed (not yet released by ib_core).
pub fn contains(pinned: &PinnedDevice) -> bool {
    DEVICES.lock().contains(pinned)
}

/// Unregisters every device still listed, one at a time; returns when all are gone.
///
/// Call after the link type is unregistered, so no new device can appear.
pub fn unregister_all() {
    loop {
        let Some(pinned) = DEVICES.lock().pin_last() else {
            DEVICES.lock().release_storage();
            return;
        };
        // Synchronous: `dealloc_driver` has run (and removed the entry) when this returns.
        pinned.unregister();
        if DEVICES.lock().contains(&pinned) {
            // Only a device that never got registered can stay; its own error path removes it.
            pr_warn!("a device did not go away on unregister\n");
            return;
        }
    }
}
