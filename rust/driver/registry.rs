// SPDX-License-Identifier: GPL-2.0

//! The list of rvrdma devices, so that module unload can tear them all down (and only ours:
//! rdma_rxe shares our driver id, so `ib_unregister_driver()` is not an option).

use crate::ib::device::{DeviceHandle, PinnedDevice};
use kernel::prelude::*;

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` in the module initialiser, before any use.
    unsafe(uninit) static DEVICES: Mutex<KVec<DeviceHandle>> = KVec::new();
}

/// Initialises the registry; call once, first thing in module init.
pub fn init() {
    // SAFETY: called exactly once, before any other use of `DEVICES`.
    unsafe { DEVICES.init() };
}

/// Records a new device (before it is registered with ib_core).
pub fn add(h: DeviceHandle) -> Result {
    DEVICES.lock().push(h, GFP_KERNEL)?;
    Ok(())
}

/// Forgets a device (from its `dealloc_driver`).
pub fn remove(h: DeviceHandle) {
    let mut list = DEVICES.lock();
    if let Some(i) = list.iter().position(|e| *e == h) {
        let _ = list.remove(i);
    }
}

/// Unregisters every device still listed, one at a time; returns when all are gone.
///
/// Call after the link type is unregistered, so no new device can appear.
pub fn unregister_all() {
    loop {
        let pinned: PinnedDevice = {
            let list = DEVICES.lock();
            let Some(h) = list.last() else { return };
            // SAFETY: `h` is listed under the lock that `remove` (called from the device's
            // `dealloc_driver`) takes, so the device is live.
            unsafe { h.pin() }
        };
        // Synchronous: `dealloc_driver` has run (and removed the entry) when this returns.
        pinned.unregister();
        // A device that was allocated but never registered (a racing, failed `newlink`) is
        // removed by its own error path; do not spin on it.
        let h_still_listed = {
            let list = DEVICES.lock();
            list.last().is_some_and(|h| pinned.is(*h))
        };
        if h_still_listed {
            pr_warn!("a device did not go away on unregister\n");
            return;
        }
    }
}
