// SPDX-License-Identifier: GPL-2.0

//! The module's list of its live ib devices.
//!
//! Drivers built on [`super::device`] are not in ib_core's netdev index (see
//! [`IbDriver::get_netdev`]), so they look their devices up here, by netdev or by name; and
//! module unload unregisters every device listed here ([`unregister_all`]), because rdma_rxe
//! shares rvrdma's driver id, which rules out `ib_unregister_driver()`.
//!
//! [`super::device::register`] adds a device before it calls [`IbDriver::allocated`], and the
//! `dealloc_driver` callback removes it after [`IbDriver::dealloc`]: every listed device is live,
//! with its driver data, while the list's lock is held.

use super::device::{Device, IbDriver, PinnedDevice};
use crate::bindings as b;
use core::any::TypeId;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};
use kernel::prelude::*;

/// One listed device.
///
/// # Invariants
///
/// `dev` is the `ib_device` of a live device of the driver type whose [`TypeId`] is `driver`,
/// with initialised driver data, whose `dealloc_driver` callback has not yet removed it.
struct Entry {
    dev: NonNull<b::ib_device>,
    driver: TypeId,
}

// SAFETY: an entry is an identity; it is only dereferenced with `DEVICES` locked, on any thread.
unsafe impl Send for Entry {}

kernel::sync::global_lock! {
    // SAFETY: initialised by `init`, once (guarded by `STATE`), and used only after `STATE`
    // says it is initialised.
    unsafe(uninit) static DEVICES: Mutex<KVec<Entry>> = KVec::new();
}

/// `DEVICES` is not initialised yet.
const UNINIT: u8 = 0;
/// `init` is initialising `DEVICES`.
const INITIALISING: u8 = 1;
/// `DEVICES` is initialised and usable.
const READY: u8 = 2;

/// Where `DEVICES` is in its initialisation.
static STATE: AtomicU8 = AtomicU8::new(UNINIT);

/// The locked list, or `None` before [`init`] has run.
fn devices() -> Option<kernel::sync::lock::GlobalGuard<DEVICES>> {
    (STATE.load(Ordering::Acquire) == READY).then(|| DEVICES.lock())
}

/// Initialises the device list. Call it in module init, before any device is registered; later
/// calls do nothing. Until it has run, [`add`] fails and lookups find nothing.
pub fn init() {
    if STATE
        .compare_exchange(UNINIT, INITIALISING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    // SAFETY: only the one caller that moved `STATE` away from `UNINIT` gets here, so `init` runs
    // once; every other use of `DEVICES` goes through `devices()`, which waits for `READY`, set
    // below once `init` has returned.
    unsafe { DEVICES.init() };
    STATE.store(READY, Ordering::Release);
}

/// Lists `dev`. Called by [`super::device::register`] before [`IbDriver::allocated`].
pub(super) fn add<T: IbDriver>(dev: &Device<T>) -> Result {
    let mut list = devices().ok_or(EINVAL)?;
    let dev = NonNull::new(dev.as_raw()).ok_or(EINVAL)?;
    // INVARIANT: `dev` is live with its data (the caller's `&Device<T>`), and `dealloc_driver`
    // removes it before the data is dropped.
    list.push(
        Entry {
            dev,
            driver: TypeId::of::<T>(),
        },
        GFP_KERNEL,
    )?;
    Ok(())
}

/// Forgets `dev`. Called by `dealloc_driver` after [`IbDriver::dealloc`], before the data is
/// dropped.
pub(super) fn remove<T: IbDriver>(dev: &Device<T>) {
    let Some(mut list) = devices() else { return };
    let raw = dev.as_raw();
    if let Some(i) = list.iter().position(|e| e.dev.as_ptr() == raw) {
        let _ = list.remove(i);
    }
}

/// Runs `f` on the first listed device of driver `T` for which `pred` holds, with the list
/// locked (so the device cannot go away meanwhile). `None` when there is no such device.
pub fn with_device<T: IbDriver, R>(
    pred: impl Fn(&Device<T>) -> bool,
    f: impl FnOnce(&Device<T>) -> R,
) -> Option<R> {
    let list = devices()?;
    list.iter()
        .filter(|e| e.driver == TypeId::of::<T>())
        .map(|e| {
            // SAFETY: by the invariant of `Entry`, `e.dev` is a live device of `T` with data; it
            // stays so while `list` (the lock) is held, which outlives this borrow.
            unsafe { Device::<T>::from_raw(e.dev.as_ptr()) }
        })
        .find(|d| pred(d))
        .map(f)
}

/// Whether `pinned` is still listed (ib_core has not released it yet).
pub fn contains(pinned: &PinnedDevice) -> bool {
    devices().is_some_and(|list| list.iter().any(|e| e.dev.as_ptr() == pinned.as_raw()))
}

/// Pins the last listed device, if any, so that it can be unregistered without the lock.
fn pin_last() -> Option<PinnedDevice> {
    let list = devices()?;
    let e = list.last()?;
    // SAFETY: by the invariant of `Entry`, `e.dev` is a live `ib_device`, for as long as the
    // lock is held, which covers this call.
    Some(unsafe { PinnedDevice::pin(e.dev) })
}

/// Unregisters every listed device, one at a time; returns when all are gone.
///
/// Call it after the link type is unregistered, so that no new device can appear.
pub fn unregister_all() {
    loop {
        let Some(pinned) = pin_last() else {
            if let Some(mut list) = devices() {
                // Free the storage: the static is never dropped.
                *list = KVec::new();
            }
            return;
        };
        // Synchronous: `dealloc_driver` has run (and removed the entry) when this returns.
        pinned.unregister();
        if contains(&pinned) {
            // Only a device that never got registered can stay; its own error path removes it.
            pr_warn!("a device did not go away on unregister\n");
            return;
        }
    }
}
