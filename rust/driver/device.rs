// SPDX-License-Identifier: GPL-2.0

//! An rvrdma ib device: its attributes and ports.

use super::dev_shared::{self, DevShared};
use super::limits::Res;
use super::mcast;
use super::mr_table::{MrTable, MAX_MRS, MAX_MWS};
use crate::ib::attrs::{
    AtomicCap, DeviceAttr, DriverId, IbMtu, PhysPortState, PortAttr, PortImmutable, PortState,
};
use crate::ib::device::{Device, IbDriver, Switch};
use crate::net::netdev::{NetDev, NetDevRef};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

/// The ib driver id user space sees. rdma-core's rxe provider matches devices by this id, so
/// stock rdma-core drives rvrdma through the rxe user ABI (see README, "Provider matching").
pub const DRIVER_ID: DriverId = DriverId::Rxe;
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
    /// PDs user processes hold: every user process of the device holds one.
    pub(crate) user_pds: AtomicU32,
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
            user_pds: AtomicU32::new(0),
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

    /// Whether a user process uses the device (holds a PD). Kernel users (ib_mad's QP1 on
    /// every port, ULPs) are torn down and come back when the device registers again.
    pub fn in_use(&self) -> bool {
        self.user_pds.load(Ordering::Relaxed) != 0
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

/// The IB MTU for a netdev MTU.
fn ib_mtu_for(netdev_mtu: u32) -> IbMtu {
    IbMtu::at_most(netdev_mtu.saturating_sub(ROCE_OVERHEAD))
}

impl IbDriver for RvrDevice {
    fn query_device(dev: &Device<Self>) -> Result<DeviceAttr> {
        let guid = dev.netdev(1).map(|n| n.eui64()).unwrap_or(0);
        Ok(DeviceAttr {
            fw_ver: 0,
            sys_image_guid: guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0x00ff_ffff,
            vendor_part_id: 0x5256, // "RV"
            hw_ver: 0,
            max_qp: dev_shared::MAX_QPS as i32,
            max_qp_wr: 0x4000,
            // Automatic Path Migration works between the ports of a two-port device. On a RoCE
            // port ib_core loads an alternate path only for a device with this flag, and only
            // with kernel/patches/0001 applied (README, "Path migration").
            device_cap_flags: DeviceAttr::CAP_PORT_ACTIVE_EVENT
                | DeviceAttr::CAP_SYS_IMAGE_GUID
                | DeviceAttr::CAP_RC_RNR_NAK_GEN
                | DeviceAttr::CAP_AUTO_PATH_MIG
                | DeviceAttr::CAP_SRQ_RESIZE
                | DeviceAttr::CAP_MEM_MGT_EXTENSIONS
                // Memory windows of type 1 and 2B, as rdma_rxe.
                | DeviceAttr::CAP_MEM_WINDOW
                | DeviceAttr::CAP_MEM_WINDOW_TYPE_2B
                // IBA 1.5 ATOMIC WRITE and FLUSH, as rdma_rxe; not FLUSH_PERSISTENT: no MR is
                // persistent memory.
                | DeviceAttr::CAP_ATOMIC_WRITE
                | DeviceAttr::CAP_FLUSH_GLOBAL,
            kernel_cap_flags: DeviceAttr::KCAP_ALLOW_USER_UNREG | DeviceAttr::KCAP_ON_DEMAND_PAGING,
            max_send_sge: super::qp::MAX_SGE as i32,
            max_recv_sge: super::qp::MAX_SGE as i32,
            max_sge_rd: super::qp::MAX_SGE as i32,
            max_cq: Res::Cq.max() as i32,
            max_cqe: super::cq::MAX_CQE as i32,
            max_mr: MAX_MRS as i32,
            max_mw: MAX_MWS as i32,
            max_pd: Res::Pd.max() as i32,
            max_qp_rd_atom: crate::rvcore::responder::MAX_RESOURCES as i32,
            max_res_rd_atom: 0x1_0000,
            max_qp_init_rd_atom: i32::from(crate::rvcore::requester::MAX_RD_ATOMIC),
            atomic_cap: AtomicCap::Hca,
            max_ah: Res::Ah.max() as i32,
            max_mcast_grp: mcast::MAX_GROUPS as i32,
            max_mcast_qp_attach: mcast::MAX_QP_ATTACH as i32,
            max_total_mcast_qp_attach: (mcast::MAX_GROUPS * mcast::MAX_QP_ATTACH) as i32,
            max_srq: Res::Srq.max() as i32,
            max_srq_wr: super::srq::MAX_SRQ_WR as i32,
            max_srq_sge: super::qp::MAX_SGE as i32,
            max_fast_reg_page_list_len: 512,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            // On-demand paging as rdma_rxe offers it (no implicit ODP); see docs/odp.md.
            odp_general_caps: DeviceAttr::ODP_SUPPORT,
            odp_rc_caps: DeviceAttr::ODP_SEND
                | DeviceAttr::ODP_RECV
                | DeviceAttr::ODP_WRITE
                | DeviceAttr::ODP_READ
                | DeviceAttr::ODP_ATOMIC
                | DeviceAttr::ODP_SRQ_RECV
                | DeviceAttr::ODP_FLUSH
                | DeviceAttr::ODP_ATOMIC_WRITE,
            odp_ud_caps: DeviceAttr::ODP_SEND | DeviceAttr::ODP_RECV | DeviceAttr::ODP_SRQ_RECV,
        })
    }

    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr> {
        dev.data().port(port)?;
        let ndev = dev.netdev(port).ok_or(ENODEV)?;
        let state = ndev.ib_port_state();
        let phys_state = if state == PortState::Active {
            PhysPortState::LinkUp
        } else if ndev.is_up() {
            PhysPortState::Polling
        } else {
            PhysPortState::Disabled
        };
        Ok(PortAttr {
            state,
            phys_state,
            max_mtu: IbMtu::Mtu4096,
            active_mtu: ib_mtu_for(ndev.mtu()),
            phys_mtu: ndev.mtu(),
            gid_tbl_len: GID_TABLE_LEN,
            ip_gids: true,
            port_cap_flags: PortAttr::CAP_CM_SUP | PortAttr::CAP_AUTO_MIGR_SUP,
            max_msg_sz: MAX_MSG_SIZE,
            pkey_tbl_len: 1,
            // The counters are per device: every port shows the same count.
            qkey_viol_cntr: dev
                .data()
                .shared
                .counters
                .qkey_violations
                .load(Ordering::Relaxed)
                .min(0xFFFF) as u32,
            max_vl_num: 1,
            speed: dev.eth_speed(port),
        })
    }

    fn port_immutable(dev: &Device<Self>, port: u32) -> Result<PortImmutable> {
        dev.data().port(port)?;
        Ok(PortImmutable {
            core_cap_flags: PortImmutable::CORE_ROCE_UDP_ENCAP,
            pkey_tbl_len: 1,
            gid_tbl_len: GID_TABLE_LEN,
            max_mad_size: PortImmutable::MGMT_MAD_SIZE,
        })
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
        super::receive::rx_listen(&dev.data().shared)
    }

    fn dealloc(dev: &Device<Self>) {
        // ib_core destroyed every QP before this; stop receiving, and wait for the packets
        // being handled.
        dev.data().shared.shutdown();
        // Tests read the kernel log for this line: a count left is a leak.
        let [pd, cq, srq, ah, user_ah, qp, mr, mw] = dev.data().shared.leftovers();
        if pd + cq + srq + ah + user_ah + qp + mr + mw != 0 {
            pr_err!(
                "{}: objects still counted at removal: pd {pd} cq {cq} srq {srq} ah {ah} \
                 user_ah {user_ah} qp {qp} mr {mr} mw {mw}\n",
                dev.name()
            );
        }
        pr_debug!("{}: released\n", dev.name());
    }

    fn switch(dev: &Device<Self>, sw: Switch) -> bool {
        match sw {
            Switch::ApmBonding => dev.data().shared.apm_bonding(),
            Switch::RxSpread => dev.data().shared.rx_spread(),
            Switch::TxBurst => dev.data().shared.tx_burst(),
            Switch::TxPaged => dev.data().shared.tx_paged(),
        }
    }

    fn set_switch(dev: &Device<Self>, sw: Switch, on: bool) -> Result {
        match sw {
            Switch::ApmBonding => dev.data().shared.set_apm_bonding(on),
            Switch::RxSpread => {
                dev.data().shared.set_rx_spread(on);
                Ok(())
            }
            Switch::TxBurst => {
                dev.data().shared.set_tx_burst(on);
                Ok(())
            }
            Switch::TxPaged => {
                dev.data().shared.set_tx_paged(on);
                Ok(())
            }
        }
    }
}
