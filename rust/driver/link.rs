// SPDX-License-Identifier: GPL-2.0

//! `rdma link add NAME type rvrdma netdev DEV`, and netdev removal.

use super::device::{RvrDevice, DRIVER_ID, UVERBS_ABI_VER};
use super::registry;
use crate::ib::device::{self, DeviceParams, IbDeviceRef};
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
        let data = RvrDevice::new(&[ndev])?;
        let params = DeviceParams {
            name,
            nports: data.nports(),
            node_guid: ndev.eui64(),
            driver_id: DRIVER_ID,
            uverbs_abi_ver: UVERBS_ABI_VER,
        };
        device::register(&crate::THIS_MODULE, &params, data).inspect_err(|e| {
            if *e == EEXIST {
                pr_err!("an RDMA device named {} already exists\n", name);
            }
        })?;
        pr_info!("{} created on {}\n", name, ndev.name());
        Ok(())
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
                NetdevEvent::LinkChange => reg.dispatch_port_state_event(ndev),
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
