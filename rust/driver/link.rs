// SPDX-License-Identifier: GPL-2.0

//! `rdma link add NAME type rvrdma netdev DEV` (again with the same NAME for port 2), and netdev
//! removal.

use super::device::{RvrDevice, DRIVER_ID, MAX_PORTS, UVERBS_ABI_VER};
use super::registry;
use crate::ib::attrs::PortState;
use crate::ib::device::{self, DeviceParams, IbDeviceRef, PinnedDevice};
use crate::ib::link::LinkDriver;
use crate::net::netdev::NetDev;
use crate::net::notifier::{NetdevEvent, NetdevHandler};
use kernel::prelude::*;

/// The `rvrdma` link type.
pub struct RvrLink;

impl LinkDriver for RvrLink {
    const TYPE: &'static CStr = c"rvrdma";

    fn newlink(name: &CStr, ndev: &NetDev) -> Result {
        if ndev.is_vlan() {
            pr_err!(
                "{}: create the device on the real netdev, not a VLAN\n",
                ndev.name()
            );
            return Err(EPERM);
        }
        // Ours are not in ib_core's netdev index (see `RvrDevice::get_netdev`); other drivers'
        // devices (rdma_rxe, siw) are.
        if registry::with_device_of(ndev, |_| ()).is_some()
            || IbDeviceRef::by_netdev(ndev).is_some()
        {
            pr_err!("{} already has an RDMA device\n", ndev.name());
            return Err(EEXIST);
        }
        // A second `rdma link add` naming an existing rvrdma device adds port 2.
        if let Some(found) = registry::with_device_named(name, |dev| {
            let d = dev.data();
            if d.nports() as usize >= MAX_PORTS {
                pr_err!("{} already has {} ports\n", name, MAX_PORTS);
                return Err(EEXIST);
            }
            if d.in_use() {
                pr_err!(
                    "{} is in use: add its second port before opening it\n",
                    name
                );
                return Err(EBUSY);
            }
            let first = d.port_netdev(1).ok_or(ENODEV)?;
            Ok((registry::pin(dev), first))
        }) {
            let (pinned, first) = found?;
            return add_port(name, pinned, &first, ndev);
        }
        create(name, &[ndev])?;
        pr_info!("{} created on {}\n", name, ndev.name());
        Ok(())
    }
}

/// Registers a new device called `name` on `netdevs` (port 1 first).
fn create(name: &CStr, netdevs: &[&NetDev]) -> Result {
    let data = RvrDevice::new(netdevs)?;
    let params = DeviceParams {
        name,
        nports: data.nports(),
        node_guid: netdevs[0].eui64(),
        driver_id: DRIVER_ID,
        uverbs_abi_ver: UVERBS_ABI_VER,
    };
    device::register(&crate::THIS_MODULE, &params, data).inspect_err(|e| {
        if *e == EEXIST {
            pr_err!("an RDMA device named {} already exists\n", name);
        }
    })
}

/// Replaces the one-port device `old` (on `first`) by a two-port device of the same name on
/// `first` and `second`. ib_core fixes a device's port count at registration, so the device is
/// registered again; nobody uses it (checked by the caller).
fn add_port(name: &CStr, old: PinnedDevice, first: &NetDev, second: &NetDev) -> Result {
    old.unregister();
    if registry::contains(&old) {
        pr_err!("{} did not go away; port 2 not added\n", name);
        return Err(EBUSY);
    }
    drop(old);
    match create(name, &[first, second]) {
        Ok(()) => {
            pr_info!(
                "{} now has two ports: {} and {}\n",
                name,
                first.name(),
                second.name()
            );
            Ok(())
        }
        Err(e) => {
            // Put the one-port device back as it was.
            let back = create(name, &[first]);
            pr_err!(
                "{}: adding port 2 on {} failed ({:?}); one-port device restored: {}\n",
                name,
                second.name(),
                e,
                back.is_ok()
            );
            Err(e)
        }
    }
}

/// Follows the net devices under rvrdma's ports: link changes become port events, and a
/// device whose net device goes away goes with it.
pub struct RvrNetdevEvents;

impl NetdevHandler for RvrNetdevEvents {
    fn event(ev: NetdevEvent, ndev: &NetDev) {
        registry::with_device_of(ndev, |dev| {
            if ev == NetdevEvent::Unregister {
                dev.data().netdev_gone(ndev);
            }
            // A device still registering, or already unregistering, needs nothing from us.
            let Some(reg) = dev.registered() else { return };
            match ev {
                // ib_core would do this for devices in its netdev index; ours are not in it.
                NetdevEvent::LinkChange => {
                    reg.dispatch_port_state_event(ndev);
                    // Also at each NETDEV_CHANGE while ACTIVE: IPv6 puts a kept address's
                    // prefix route back only once the link is operationally up. A failed
                    // allocation leaves the routes to the packets that find them stale (each
                    // lost once).
                    let port = dev.data().port_of(ndev).and_then(|p| u8::try_from(p).ok());
                    if let (PortState::Active, Some(port)) = (ndev.ib_port_state(), port) {
                        let _ = dev.data().shared.port_up(port);
                    }
                    // The bonding policy follows the ports (a failed allocation only skips it
                    // this time: the QPs then migrate at their retry exhaustion).
                    if dev.data().shared.apm_bonding() {
                        let _ = dev.data().shared.ports_changed();
                    }
                }
                NetdevEvent::Unregister => {
                    pr_info!("{} goes away with {}\n", dev.name(), ndev.name());
                    reg.unregister_queued();
                }
                // The port's MTU is read live by query_port.
                NetdevEvent::ChangeMtu | NetdevEvent::Other => {}
            }
        });
    }
}
