// SPDX-License-Identifier: GPL-2.0

//! Borrowed and counted references to a `struct net_device`.

use crate::bindings as b;
use core::ptr::NonNull;
use kernel::prelude::*;

/// A borrowed net device, valid for the lifetime of the reference.
///
/// # Invariants
///
/// The wrapped pointer points to a live `struct net_device` for as long as the `&NetDev` exists.
#[repr(transparent)]
pub struct NetDev(kernel::types::Opaque<b::net_device>);

impl NetDev {
    /// Creates a borrowed reference from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a live `struct net_device` that stays alive for `'a`.
    pub unsafe fn from_raw<'a>(ptr: *mut b::net_device) -> &'a NetDev {
        // INVARIANT: the caller guarantees liveness for `'a`.
        // `NetDev` is `repr(transparent)` over `Opaque<net_device>`.
        // SAFETY: the cast keeps the layout; the caller guarantees the device outlives `'a`.
        unsafe { &*ptr.cast::<NetDev>() }
    }

    /// The raw pointer, for calls into C.
    pub fn as_raw(&self) -> *mut b::net_device {
        self.0.get()
    }

    /// The interface name (e.g. `veth0`).
    pub fn name(&self) -> &CStr {
        // The name is a NUL-terminated array inside the device.
        // SAFETY: the device is live (type invariant), so the name is too.
        unsafe { CStr::from_char_ptr(b::rvr_netdev_name(self.as_raw())) }
    }

    /// Adds (`add`) or drops the Ethernet address of multicast GID `gid` (an IPv4-mapped or an
    /// IPv6 multicast address) to or from the device's receive filter; the filter counts
    /// references, so each add needs one drop. Process context (it may sleep).
    pub fn mc_filter(&self, gid: &[u8; 16], add: bool) -> Result {
        // SAFETY: the device is live (type invariant) and `gid` holds the 16 bytes the helper
        // reads.
        let r = unsafe { b::rvr_dev_mc_gid(self.as_raw(), gid.as_ptr(), add) };
        kernel::error::to_result(r)
    }

    /// The device MTU in bytes.
    pub fn mtu(&self) -> u32 {
        // SAFETY: by the type invariant the device is live.
        unsafe { b::rvr_netdev_mtu(self.as_raw()) }
    }

    /// Whether the interface is administratively up (`netif_running`).
    pub fn is_up(&self) -> bool {
        // SAFETY: by the type invariant the device is live.
        unsafe { b::rvr_netif_is_up(self.as_raw()) }
    }

    /// Whether the device is a VLAN device.
    pub fn is_vlan(&self) -> bool {
        // SAFETY: by the type invariant the device is live.
        unsafe { b::rvr_netdev_is_vlan(self.as_raw()) }
    }

    /// The IB port state the link implies (ACTIVE when running with carrier, else DOWN).
    pub fn ib_port_state(&self) -> crate::ib::attrs::PortState {
        // SAFETY: by the type invariant the device is live.
        let raw = unsafe { b::rvr_ib_get_curr_port_state(self.as_raw()) };
        crate::ib::attrs::PortState::from_raw(raw)
    }

    /// An EUI-64 built from the MAC address, in network byte order (a node GUID).
    pub fn eui64(&self) -> u64 {
        let mut guid: u64 = 0;
        // SAFETY: the device is live and `guid` is a valid 8-byte destination.
        unsafe { b::rvr_netdev_eui64(self.as_raw(), &mut guid) };
        guid
    }

    /// Takes a counted reference.
    pub fn hold(&self) -> NetDevRef {
        // SAFETY: the device is live; `dev_hold` takes a reference released in `NetDevRef::drop`.
        unsafe { b::rvr_dev_hold(self.as_raw()) };
        // INVARIANT: we hold one reference, released on drop.
        NetDevRef(NonNull::from(&self.0).cast())
    }
}

/// A counted reference to a net device (`dev_hold` / `dev_put`).
///
/// # Invariants
///
/// The pointer is to a live net device on which this value holds one reference.
pub struct NetDevRef(NonNull<b::net_device>);

// SAFETY: net device references may be taken and released from any thread.
unsafe impl Send for NetDevRef {}
// SAFETY: `NetDevRef` only exposes `&NetDev`, whose methods are safe to call concurrently.
unsafe impl Sync for NetDevRef {}

impl NetDevRef {
    /// Adopts a reference the caller already holds (e.g. returned by `ib_device_get_netdev`).
    ///
    /// # Safety
    ///
    /// `ptr` must be non-null and carry one reference that is transferred to the result.
    pub unsafe fn from_raw_owned(ptr: *mut b::net_device) -> Option<NetDevRef> {
        // INVARIANT: the caller transfers one reference on a live device.
        NonNull::new(ptr).map(NetDevRef)
    }
}

impl NetDevRef {
    /// The net device called `name` in the initial namespace, referenced (`dev_get_by_name`).
    pub fn init_net_by_name(name: &CStr) -> Option<NetDevRef> {
        // SAFETY: `name` is NUL-terminated; a non-null result carries one reference.
        unsafe { NetDevRef::from_raw_owned(b::rvr_init_net_dev_get_by_name(name.as_char_ptr())) }
    }

    /// Hands the reference to C (e.g. as the return value of `get_netdev`).
    pub fn into_raw(self) -> *mut b::net_device {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }

    /// Whether this is the net device `other`.
    pub fn is(&self, other: &NetDev) -> bool {
        self.0.as_ptr() == other.as_raw()
    }
}

impl core::ops::Deref for NetDevRef {
    type Target = NetDev;

    fn deref(&self) -> &NetDev {
        // SAFETY: by the type invariant the device is live while we hold the reference.
        unsafe { NetDev::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for NetDevRef {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold one reference, released exactly once here.
        unsafe { b::rvr_dev_put(self.0.as_ptr()) };
    }
}
