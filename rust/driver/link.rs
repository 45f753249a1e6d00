// SPDX-License-Identifier: GPL-2.0

//! `rdma link add NAME type rvrdma netdev DEV`, and netdev removal.

use super::device::{RvrDevice, DRIVER_ID, UVERBS_ABI_VER};
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
            pr_err!("{}: create the device on the real netdev, not a VLAN\n", ndev.name());
            return Err(EPERM);
        }
        if let Some(other) = IbDeviceRef::by_netdev(ndev) {
            drop(other);
            pr_err!("{} already has an RDMA device\n", ndev.name());
            return Err(EEXIST);
        }
        let params = DeviceParams {
            name,
            ports: &[ndev],
            node_guid: ndev.eui64(),
            driver_id: DRIVER_ID,
            uverbs_abi_ver: UVERBS_ABI_VER,
        };
        device::register(&crate::THIS_MODULE, &params, RvrDevice::new(1)).inspect_err(|e| {
            if *e == EEXIST {
                pr_err!("an RDMA device named {} already exists\n", name);
            }
        })?;
        pr_info!("{} created on {}\n", name, ndev.name());
        Ok(())
    }
}

/// Removes a device whose netdev goes away.
pub struct RvrNetdevEvents;

impl NetdevHandler for RvrNetdevEvents {
    fn event(ev: NetdevEvent, ndev: &NetDev) {
        // Port state changes are dispatched by ib_core itself (IB_EVENT_PORT_ACTIVE/ERR).
        if ev != NetdevEvent::Unregister {
            return;
        }
        let Some(dev) = IbDeviceRef::by_netdev(ndev) else {
            return;
        };
        if let Some(ours) = dev.as_driver::<RvrDevice>() {
            pr_info!("{} goes away with {}\n", ours.name(), ndev.name());
            ours.unregister_queued();
        }
    }
}
