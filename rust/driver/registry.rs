// SPDX-License-Identifier: GPL-2.0

//! Lookups of rvrdma devices in the module's device list ([`crate::ib::registry`]): by the
//! netdev of one of their ports, and by name.

use super::device::RvrDevice;
use crate::ib::device::{Device, PinnedDevice};
use crate::ib::registry;
use crate::net::netdev::NetDev;
use kernel::prelude::*;

/// Runs `f` on the rvrdma device that has `ndev` as a port, if any, with the device list locked
/// (so the device cannot go away meanwhile).
pub fn with_device_of<R>(ndev: &NetDev, f: impl FnOnce(&Device<RvrDevice>) -> R) -> Option<R> {
    registry::with_device(|d: &Device<RvrDevice>| d.data().port_of(ndev).is_some(), f)
}

/// Runs `f` on the rvrdma device called `name`, if any, with the device list locked.
pub fn with_device_named<R>(name: &CStr, f: impl FnOnce(&Device<RvrDevice>) -> R) -> Option<R> {
    registry::with_device(|d: &Device<RvrDevice>| d.name() == name, f)
}

/// Pins `dev` (for unregistration after the device list's lock is dropped).
pub fn pin(dev: &Device<RvrDevice>) -> PinnedDevice {
    dev.pin()
}

/// Whether `pinned` is still listed (not yet released by ib_core).
pub fn contains(pinned: &PinnedDevice) -> bool {
    registry::contains(pinned)
}
