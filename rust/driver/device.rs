// SPDX-License-Identifier: GPL-2.0

//! An rvrdma ib device: its attributes and ports.

use super::datapath::{self, DevShared};
use super::memory::{MrTable, MAX_MRS};
use super::registry;
use crate::bindings as b;
use crate::ib::device::{Device, IbDriver};
use crate::net::netdev::{NetDev, NetDevRef};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

/// The ib driver id user space sees. rdma-core's rxe provider matches devices by this id, so
/// stock rdma-core drives rvrdma through the rxe user ABI (see README, "Provider matching").
pub const DRIVER_ID: b::rdma_driver_id = b::rdma_driver_id_RDMA_DRIVER_RXE;
/// The rxe user ABI version rvrdma speaks.
pub const UVERBS_ABI_VER: u32 = 2;

/// Most ports a device may have (path migration uses two).
pub const MAX_PORTS: usize = 2;
/// GID table entries per port.
const GID_TABLE_LEN: i32 = 64;
/// The only P_Key: the default full-membership key.
const DEFAULT_PKEY: u16 = 0xffff;
/// Worst-case RoCEv2 header bytes in front of a payload: IPv6 (40) + UDP (8) + BTH (12) +
/// AtomicETH (28) + ICRC (4). The IB MTU is the largest that fits in the netdev MTU after them.
const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 28 + 4;
/// Largest message (bytes).
const MAX_MSG_SIZE: u32 = 0x8000_0000;

/// One port: the net device it runs on.
struct Port {
    /// Held until the device is freed.
    ndev: NetDevRef,
    /// Set when the net device starts unregistering: from then on the port has no netdev.
    gone: AtomicBool,
}

/// Per-device data of an rvrdma ib device.
pub struct RvrDevice {
    /// Ports 1..=N, one net device each.
    ports: KVec<Port>,
    /// The identity of the next PD.
    pub(crate) next_pd_id: AtomicU32,
    /// PDs allocated and not yet freed: every user of the device holds one.
    pub(crate) live_pds: AtomicU32,
    /// The datapath state shared with QPs, work items and the receive path.
    pub(crate) shared: Arc<DevShared>,
    /// The memory regions.
    pub(crate) mrs: Arc<MrTable>,
}

impl RvrDevice {
    /// A device whose ports run on `netdevs` (port 1 first).
    pub fn new(netdevs: &[&NetDev]) -> Result<Self> {
        if netdevs.is_empty() || netdevs.len() > MAX_PORTS {
            return Err(EINVAL);
        }
        let mut ports = KVec::with_capacity(netdevs.len(), GFP_KERNEL)?;
        for nd in netdevs {
            ports.push(
                Port {
                    ndev: nd.hold(),
                    gone: AtomicBool::new(false),
                },
                GFP_KERNEL,
            )?;
        }
        let mrs = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        Ok(Self {
            ports,
            next_pd_id: AtomicU32::new(1),
            live_pds: AtomicU32::new(0),
            shared: DevShared::new(netdevs, mrs.clone())?,
            mrs,
        })
    }

    /// Number of ports.
    pub fn nports(&self) -> u32 {
        // At most MAX_PORTS (checked in `new`).
        self.ports.len() as u32
    }

    /// The port (1-based) that runs on `ndev`, if any.
    pub fn port_of(&self, ndev: &NetDev) -> Option<u32> {
        let i = self.ports.iter().position(|p| p.ndev.is(ndev))?;
        u32::try_from(i + 1).ok()
    }

    /// Whether anybody uses the device (holds a PD).
    pub fn in_use(&self) -> bool {
        self.live_pds.load(Ordering::Relaxed) != 0
    }

    /// A reference to the net device of `port` (1-based), unless it is unregistering.
    pub fn port_netdev(&self, port: u32) -> Option<NetDevRef> {
        let p = self.port(port).ok()?;
        (!p.gone.load(Ordering::Acquire)).then(|| p.ndev.hold())
    }

    /// Marks the port on `ndev` as gone (its net device is unregistering).
    pub fn netdev_gone(&self, ndev: &NetDev) {
        for p in self.ports.iter().filter(|p| p.ndev.is(ndev)) {
            p.gone.store(true, Ordering::Release);
        }
    }

    fn port(&self, port: u32) -> Result<&Port> {
        let i = usize::try_from(port).map_err(|_| EINVAL)?;
        i.checked_sub(1)
            .and_then(|i| self.ports.get(i))
            .ok_or(EINVAL)
    }
}

/// The IB MTU enum for a netdev MTU.
fn ib_mtu_for(netdev_mtu: u32) -> b::ib_mtu {
    let payload = netdev_mtu.saturating_sub(ROCE_OVERHEAD);
    let payload = i32::try_from(payload).unwrap_or(i32::MAX);
    // SAFETY: pure function of its argument.
    let mtu = unsafe { b::rvr_ib_mtu_int_to_enum(payload) };
    mtu
}

impl IbDriver for RvrDevice {
    fn query_device(dev: &Device<Self>, a: &mut b::ib_device_attr) -> Result {
        let guid = dev.netdev(1).map(|n| n.eui64()).unwrap_or(0);
        a.fw_ver = 0;
        a.sys_image_guid = guid;
        a.max_mr_size = u64::MAX;
        a.page_size_cap = 0xffff_f000;
        a.vendor_id = 0x00ff_ffff;
        a.vendor_part_id = 0x5256; // "RV"
        a.hw_ver = 0;
        a.max_qp = datapath::MAX_QPS as i32;
        a.max_qp_wr = 0x4000;
        // Automatic Path Migration works between the ports of a two-port device (issue 5). On a
        // RoCE port ib_core loads an alternate path only for a device with this flag, and only
        // with kernel/patches/0001 applied (README, "Path migration").
        a.device_cap_flags = (b::ib_device_cap_flags_IB_DEVICE_PORT_ACTIVE_EVENT
            | b::ib_device_cap_flags_IB_DEVICE_SYS_IMAGE_GUID
            | b::ib_device_cap_flags_IB_DEVICE_AUTO_PATH_MIG) as u64;
        a.kernel_cap_flags = b::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
        a.max_send_sge = super::qp::MAX_SGE as i32;
        a.max_recv_sge = super::qp::MAX_SGE as i32;
        a.max_sge_rd = super::qp::MAX_SGE as i32;
        a.max_cq = 0x4000;
        a.max_cqe = super::cq::MAX_CQE as i32;
        a.max_mr = MAX_MRS as i32;
        a.max_pd = 0x7ff0;
        a.max_qp_rd_atom = 16;
        a.max_res_rd_atom = 0x1_0000;
        a.max_qp_init_rd_atom = 16;
        a.atomic_cap = b::ib_atomic_cap_IB_ATOMIC_HCA;
        a.max_ah = 0x7fff;
        a.max_srq = 0x400;
        a.max_srq_wr = 0x4000;
        a.max_srq_sge = 27;
        a.max_fast_reg_page_list_len = 512;
        a.max_pkeys = 1;
        a.local_ca_ack_delay = 15;
        Ok(())
    }

    fn query_port(dev: &Device<Self>, port: u32, a: &mut b::ib_port_attr) -> Result {
        dev.data().port(port)?;
        let ndev = dev.netdev(port).ok_or(ENODEV)?;
        let state = ndev.ib_port_state();
        a.state = state;
        a.phys_state = if state == b::ib_port_state_IB_PORT_ACTIVE {
            b::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP as u8
        } else if ndev.is_up() {
            b::ib_port_phys_state_IB_PORT_PHYS_STATE_POLLING as u8
        } else {
            b::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED as u8
        };
        a.max_mtu = b::ib_mtu_IB_MTU_4096;
        a.active_mtu = ib_mtu_for(ndev.mtu());
        a.phys_mtu = ndev.mtu();
        a.gid_tbl_len = GID_TABLE_LEN;
        a.set_ip_gids(1);
        a.port_cap_flags = b::ib_port_capability_mask_bits_IB_PORT_CM_SUP
            | b::ib_port_capability_mask_bits_IB_PORT_AUTO_MIGR_SUP;
        a.max_msg_sz = MAX_MSG_SIZE;
        a.pkey_tbl_len = 1;
        a.max_vl_num = 1;
        let mut speed: u16 = 0;
        let mut width: u8 = 0;
        // SAFETY: the device is live and registered; both outputs are valid for writes.
        let ret = unsafe { b::ib_get_eth_speed(dev.as_raw(), port, &mut speed, &mut width) };
        if ret == 0 {
            a.active_speed = speed;
            a.active_width = width;
        }
        Ok(())
    }

    fn port_immutable(dev: &Device<Self>, port: u32, imm: &mut b::ib_port_immutable) -> Result {
        dev.data().port(port)?;
        imm.core_cap_flags = b::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
        imm.pkey_tbl_len = 1;
        imm.gid_tbl_len = GID_TABLE_LEN;
        imm.max_mad_size = b::IB_MGMT_MAD_SIZE;
        Ok(())
    }

    fn query_pkey(dev: &Device<Self>, port: u32, index: u16) -> Result<u16> {
        dev.data().port(port)?;
        if index != 0 {
            return Err(EINVAL);
        }
        Ok(DEFAULT_PKEY)
    }

    fn get_netdev(dev: &Device<Self>, port: u32) -> Option<NetDevRef> {
        dev.data().port_netdev(port)
    }

    fn allocated(dev: &Device<Self>) -> Result {
        registry::add(dev)?;
        datapath::rx_listen(&dev.data().shared)
    }

    fn dealloc(dev: &Device<Self>) {
        // ib_core destroyed every QP before this; stop receiving and drain the receive work.
        dev.data().shared.shutdown();
        registry::remove(dev);
        pr_debug!("{}: released\n", dev.name());
    }
}
