// SPDX-License-Identifier: GPL-2.0

//! rvrdma: a virtual RDMA device speaking RoCEv2 over any Ethernet netdev.
//!
//! `rdma link add NAME type rvrdma netdev DEV` creates an ib device with one port on `DEV`.
//! The protocol (the RC transport of the IBA spec) lives in [`rvcore`], a pure Rust engine shared
//! with a host crate that forbids `unsafe`. The `ib`, `net` and `sync` modules wrap the kernel's C
//! interfaces and hold the `unsafe` code (besides one call in the KUnit glue); `driver`, the
//! device itself, is safe Rust above them (`#![deny(unsafe_code)]`).

use kernel::prelude::*;

pub mod bindings;
/// KUnit suites of the protocol core built into the kernel (the others sit in the modules
/// they test: `net::kunit`, `driver::kunit_mr_table`).
#[path = "core/kunit/mod.rs"]
mod core_kunit;
pub mod driver;
pub mod errno;
pub mod ib;
#[cfg(CONFIG_KUNIT = "y")]
mod kunit_support;
pub mod net;
#[path = "core/src/lib.rs"]
pub mod rvcore;
pub mod sync;
// The core names its files `crate::psn`, `crate::wire`, ... (it is a crate root on the host);
// re-exporting them here makes those paths resolve the same way inside the module.
pub use rvcore::*;

use driver::link::{RvrLink, RvrNetdevEvents};
use ib::link::LinkRegistration;
use net::notifier::NetdevNotifier;
use net::udp_tunnel::PernetRegistration;

module! {
    type: RvrdmaModule,
    name: "rvrdma",
    authors: ["rvrdma developers"],
    description: "Virtual RDMA device: RoCEv2 over any Ethernet netdev, in Rust",
    license: "GPL",
    alias: ["rdma-link-rvrdma"],
}

/// Tears down every rvrdma device when dropped (between the link type and the notifier).
struct DeviceTeardown;

impl Drop for DeviceTeardown {
    fn drop(&mut self) {
        ib::registry::unregister_all();
    }
}

/// The module: the link type, then device teardown, then the netdev notifier, then the pernet
/// registration of the RoCEv2 sockets (fields drop in this order, so no device can be created
/// while they are torn down, and the sockets outlive every device; unregistering the pernet
/// operations releases any socket left and waits for `encap_rcv` callers), then the workqueue.
#[pin_data]
struct RvrdmaModule {
    #[pin]
    link: LinkRegistration<RvrLink>,
    teardown: DeviceTeardown,
    #[pin]
    notifier: NetdevNotifier<RvrNetdevEvents>,
    #[pin]
    pernet: PernetRegistration,
    /// The protocol workqueue: destroyed (drained) last, once no device or socket is left.
    queue: sync::workqueue::ModuleQueue,
}

impl kernel::InPlaceModule for RvrdmaModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        ib::registry::init();
        net::crc32::select();
        driver::receive::rx_init();
        try_pin_init!(Self {
            queue: sync::workqueue::ModuleQueue::new()?,
            pernet <- PernetRegistration::register(),
            notifier <- NetdevNotifier::register(),
            teardown: DeviceTeardown,
            link <- LinkRegistration::register(),
        })
    }
}
