// SPDX-License-Identifier: GPL-2.0

//! Device and port attributes as plain Rust values: what a driver's
//! [`IbDriver::query_device`](super::device::IbDriver::query_device),
//! [`query_port`](super::device::IbDriver::query_port) and
//! [`port_immutable`](super::device::IbDriver::port_immutable) return. The ops trampolines write
//! them into ib_core's `struct ib_device_attr`, `struct ib_port_attr` and
//! `struct ib_port_immutable`, touching only the fields named here.

use crate::bindings as b;

/// The ib driver id reported to user space (`enum rdma_driver_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverId {
    /// `RDMA_DRIVER_RXE`: rdma-core's rxe provider matches devices with this id.
    Rxe,
}

impl DriverId {
    /// The C value.
    pub(super) fn to_raw(self) -> b::rdma_driver_id {
        match self {
            Self::Rxe => b::rdma_driver_id_RDMA_DRIVER_RXE,
        }
    }
}

/// Atomic operation support (`enum ib_atomic_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtomicCap {
    /// No atomic operations.
    #[default]
    None,
    /// Atomic operations are atomic with respect to this device only (`IB_ATOMIC_HCA`).
    Hca,
}

impl AtomicCap {
    fn to_raw(self) -> b::ib_atomic_cap {
        match self {
            Self::None => b::ib_atomic_cap_IB_ATOMIC_NONE,
            Self::Hca => b::ib_atomic_cap_IB_ATOMIC_HCA,
        }
    }
}

/// Device attributes (the fields of `struct ib_device_attr` a driver sets).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: u64,
    /// System image GUID (network byte order).
    pub sys_image_guid: u64,
    /// Largest memory region (bytes).
    pub max_mr_size: u64,
    /// Supported page sizes (bit `n` set: 2^n bytes).
    pub page_size_cap: u64,
    /// IEEE vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: i32,
    /// Most work requests per QP.
    pub max_qp_wr: i32,
    /// `IB_DEVICE_*` capability flags (the `CAP_*` constants).
    pub device_cap_flags: u64,
    /// `IBK_*` kernel capability flags (the `KCAP_*` constants).
    pub kernel_cap_flags: u64,
    /// Most scatter/gather elements per send WR.
    pub max_send_sge: i32,
    /// Most scatter/gather elements per receive WR.
    pub max_recv_sge: i32,
    /// Most scatter/gather elements per RDMA Read.
    pub max_sge_rd: i32,
    /// Most CQs.
    pub max_cq: i32,
    /// Most entries per CQ.
    pub max_cqe: i32,
    /// Most memory regions.
    pub max_mr: i32,
    /// Most memory windows.
    pub max_mw: i32,
    /// Most protection domains.
    pub max_pd: i32,
    /// Most outstanding RDMA Reads and atomics a QP accepts as responder.
    pub max_qp_rd_atom: i32,
    /// Most outstanding RDMA Reads and atomics the device accepts as responder.
    pub max_res_rd_atom: i32,
    /// Most outstanding RDMA Reads and atomics a QP issues as requester.
    pub max_qp_init_rd_atom: i32,
    /// Atomic operation support.
    pub atomic_cap: AtomicCap,
    /// Most address handles.
    pub max_ah: i32,
    /// Most multicast groups.
    pub max_mcast_grp: i32,
    /// Most QPs attached to one multicast group.
    pub max_mcast_qp_attach: i32,
    /// Most QP attachments over all multicast groups.
    pub max_total_mcast_qp_attach: i32,
    /// Most SRQs.
    pub max_srq: i32,
    /// Most work requests per SRQ.
    pub max_srq_wr: i32,
    /// Most scatter/gather elements per SRQ receive WR.
    pub max_srq_sge: i32,
    /// Most pages of a fast-registration page list.
    pub max_fast_reg_page_list_len: u32,
    /// P_Key table entries.
    pub max_pkeys: u16,
    /// Local CA ACK delay (4.096 us * 2^value).
    pub local_ca_ack_delay: u8,
    /// On-demand paging: `odp_caps.general_caps` (the `ODP_*` constants).
    pub odp_general_caps: u64,
    /// On-demand paging: the operations RC QPs support on such MRs (`IB_ODP_SUPPORT_*`).
    pub odp_rc_caps: u32,
    /// On-demand paging: the operations UD QPs support on such MRs.
    pub odp_ud_caps: u32,
}

impl DeviceAttr {
    /// `IB_DEVICE_PORT_ACTIVE_EVENT`: the device reports port active events.
    pub const CAP_PORT_ACTIVE_EVENT: u64 =
        b::ib_device_cap_flags_IB_DEVICE_PORT_ACTIVE_EVENT as u64;
    /// `IB_DEVICE_RC_RNR_NAK_GEN`: an RC QP answers a Send it has no receive for with an RNR NAK.
    pub const CAP_RC_RNR_NAK_GEN: u64 = b::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN as u64;
    /// `IB_DEVICE_SYS_IMAGE_GUID`: `sys_image_guid` is valid.
    pub const CAP_SYS_IMAGE_GUID: u64 = b::ib_device_cap_flags_IB_DEVICE_SYS_IMAGE_GUID as u64;
    /// `IB_DEVICE_AUTO_PATH_MIG`: Automatic Path Migration.
    pub const CAP_AUTO_PATH_MIG: u64 = b::ib_device_cap_flags_IB_DEVICE_AUTO_PATH_MIG as u64;
    /// `IB_DEVICE_SRQ_RESIZE`: Modify SRQ may change `max_wr`.
    pub const CAP_SRQ_RESIZE: u64 = b::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE as u64;
    /// `IB_DEVICE_MEM_MGT_EXTENSIONS`: fast registration (REG_MR) and invalidation (LOCAL_INV,
    /// Send with Invalidate) work requests, which kernel ULPs such as NVMe/RDMA require.
    pub const CAP_MEM_MGT_EXTENSIONS: u64 =
        b::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64;
    /// `IB_DEVICE_MEM_WINDOW`: memory windows (`alloc_mw`, binding).
    pub const CAP_MEM_WINDOW: u64 = b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW as u64;
    /// `IB_DEVICE_MEM_WINDOW_TYPE_2B`: type 2 windows are type 2B (bound to a QP).
    pub const CAP_MEM_WINDOW_TYPE_2B: u64 =
        b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B as u64;
    /// `IB_DEVICE_ATOMIC_WRITE`: ATOMIC WRITE (IBA 1.5) work requests.
    pub const CAP_ATOMIC_WRITE: u64 = b::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE as u64;
    /// `IB_DEVICE_FLUSH_GLOBAL`: FLUSH (IBA 1.5) with placement type "global visibility"; ib_core
    /// lets MRs be registered with `IB_ACCESS_FLUSH_GLOBAL` only on such a device.
    pub const CAP_FLUSH_GLOBAL: u64 = b::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL as u64;
    /// `IBK_ALLOW_USER_UNREG`: the device may be unregistered while user space holds it open.
    pub const KCAP_ALLOW_USER_UNREG: u64 = b::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
    /// `IBK_ON_DEMAND_PAGING`: user MRs may be registered with `IB_ACCESS_ON_DEMAND`.
    pub const KCAP_ON_DEMAND_PAGING: u64 = b::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING as u64;
    /// `IB_ODP_SUPPORT`: on-demand paging (general capability).
    pub const ODP_SUPPORT: u64 = b::ib_odp_general_cap_bits_IB_ODP_SUPPORT as u64;
    /// `IB_ODP_SUPPORT_SEND`.
    pub const ODP_SEND: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND;
    /// `IB_ODP_SUPPORT_RECV`.
    pub const ODP_RECV: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV;
    /// `IB_ODP_SUPPORT_WRITE`.
    pub const ODP_WRITE: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE;
    /// `IB_ODP_SUPPORT_READ`.
    pub const ODP_READ: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ;
    /// `IB_ODP_SUPPORT_ATOMIC`.
    pub const ODP_ATOMIC: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC;
    /// `IB_ODP_SUPPORT_SRQ_RECV`.
    pub const ODP_SRQ_RECV: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV;
    /// `IB_ODP_SUPPORT_FLUSH`.
    pub const ODP_FLUSH: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_FLUSH;
    /// `IB_ODP_SUPPORT_ATOMIC_WRITE`.
    pub const ODP_ATOMIC_WRITE: u32 = b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC_WRITE;

    /// Writes the attributes into ib_core's structure.
    pub(super) fn write_to(&self, a: &mut b::ib_device_attr) {
        a.fw_ver = self.fw_ver;
        a.sys_image_guid = self.sys_image_guid;
        a.max_mr_size = self.max_mr_size;
        a.page_size_cap = self.page_size_cap;
        a.vendor_id = self.vendor_id;
        a.vendor_part_id = self.vendor_part_id;
        a.hw_ver = self.hw_ver;
        a.max_qp = self.max_qp;
        a.max_qp_wr = self.max_qp_wr;
        a.device_cap_flags = self.device_cap_flags;
        a.kernel_cap_flags = self.kernel_cap_flags;
        a.max_send_sge = self.max_send_sge;
        a.max_recv_sge = self.max_recv_sge;
        a.max_sge_rd = self.max_sge_rd;
        a.max_cq = self.max_cq;
        a.max_cqe = self.max_cqe;
        a.max_mr = self.max_mr;
        a.max_mw = self.max_mw;
        a.max_pd = self.max_pd;
        a.max_qp_rd_atom = self.max_qp_rd_atom;
        a.max_res_rd_atom = self.max_res_rd_atom;
        a.max_qp_init_rd_atom = self.max_qp_init_rd_atom;
        a.atomic_cap = self.atomic_cap.to_raw();
        a.max_ah = self.max_ah;
        a.max_mcast_grp = self.max_mcast_grp;
        a.max_mcast_qp_attach = self.max_mcast_qp_attach;
        a.max_total_mcast_qp_attach = self.max_total_mcast_qp_attach;
        a.max_srq = self.max_srq;
        a.max_srq_wr = self.max_srq_wr;
        a.max_srq_sge = self.max_srq_sge;
        a.max_fast_reg_page_list_len = self.max_fast_reg_page_list_len;
        a.max_pkeys = self.max_pkeys;
        a.local_ca_ack_delay = self.local_ca_ack_delay;
        a.odp_caps.general_caps = self.odp_general_caps;
        a.odp_caps.per_transport_caps.rc_odp_caps = self.odp_rc_caps;
        a.odp_caps.per_transport_caps.ud_odp_caps = self.odp_ud_caps;
    }
}

/// The logical state of a port (`enum ib_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// `IB_PORT_NOP`.
    Nop,
    /// `IB_PORT_DOWN`.
    Down,
    /// `IB_PORT_INIT`.
    Init,
    /// `IB_PORT_ARMED`.
    Armed,
    /// `IB_PORT_ACTIVE`.
    Active,
    /// `IB_PORT_ACTIVE_DEFER`.
    ActiveDefer,
}

impl PortState {
    /// The state for a C value (`Down` for a value outside the enum).
    pub(crate) fn from_raw(v: b::ib_port_state) -> Self {
        match v {
            b::ib_port_state_IB_PORT_NOP => Self::Nop,
            b::ib_port_state_IB_PORT_INIT => Self::Init,
            b::ib_port_state_IB_PORT_ARMED => Self::Armed,
            b::ib_port_state_IB_PORT_ACTIVE => Self::Active,
            b::ib_port_state_IB_PORT_ACTIVE_DEFER => Self::ActiveDefer,
            _ => Self::Down,
        }
    }

    fn to_raw(self) -> b::ib_port_state {
        match self {
            Self::Nop => b::ib_port_state_IB_PORT_NOP,
            Self::Down => b::ib_port_state_IB_PORT_DOWN,
            Self::Init => b::ib_port_state_IB_PORT_INIT,
            Self::Armed => b::ib_port_state_IB_PORT_ARMED,
            Self::Active => b::ib_port_state_IB_PORT_ACTIVE,
            Self::ActiveDefer => b::ib_port_state_IB_PORT_ACTIVE_DEFER,
        }
    }
}

/// The physical state of a port (`enum ib_port_phys_state`), the values rvrdma reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysPortState {
    /// `IB_PORT_PHYS_STATE_POLLING`: the link is down but the interface is up.
    Polling,
    /// `IB_PORT_PHYS_STATE_DISABLED`: the interface is down.
    Disabled,
    /// `IB_PORT_PHYS_STATE_LINK_UP`.
    LinkUp,
}

impl PhysPortState {
    fn to_raw(self) -> u8 {
        let v = match self {
            Self::Polling => b::ib_port_phys_state_IB_PORT_PHYS_STATE_POLLING,
            Self::Disabled => b::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED,
            Self::LinkUp => b::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP,
        };
        v as u8
    }
}

/// An IB path MTU (`enum ib_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IbMtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl IbMtu {
    /// The largest IB MTU that is at most `bytes` (256 below that: `ib_mtu_int_to_enum`).
    pub fn at_most(bytes: u32) -> Self {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        // SAFETY: a pure function of its argument.
        let raw = unsafe { b::rvr_ib_mtu_int_to_enum(bytes) };
        match raw {
            b::ib_mtu_IB_MTU_512 => Self::Mtu512,
            b::ib_mtu_IB_MTU_1024 => Self::Mtu1024,
            b::ib_mtu_IB_MTU_2048 => Self::Mtu2048,
            b::ib_mtu_IB_MTU_4096 => Self::Mtu4096,
            _ => Self::Mtu256,
        }
    }

    fn to_raw(self) -> b::ib_mtu {
        match self {
            Self::Mtu256 => b::ib_mtu_IB_MTU_256,
            Self::Mtu512 => b::ib_mtu_IB_MTU_512,
            Self::Mtu1024 => b::ib_mtu_IB_MTU_1024,
            Self::Mtu2048 => b::ib_mtu_IB_MTU_2048,
            Self::Mtu4096 => b::ib_mtu_IB_MTU_4096,
        }
    }
}

/// A port's Ethernet speed and width as IB reports them (`ib_get_eth_speed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthSpeed {
    /// `enum ib_port_speed`.
    pub speed: u16,
    /// `enum ib_port_width`.
    pub width: u8,
}

/// Port attributes (the fields of `struct ib_port_attr` a driver sets).
#[derive(Clone, Copy, Debug)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Physical port state.
    pub phys_state: PhysPortState,
    /// Largest supported path MTU.
    pub max_mtu: IbMtu,
    /// Path MTU the link allows now.
    pub active_mtu: IbMtu,
    /// The link's MTU (bytes).
    pub phys_mtu: u32,
    /// GID table entries.
    pub gid_tbl_len: i32,
    /// GIDs are IP addresses (RoCEv2).
    pub ip_gids: bool,
    /// `IB_PORT_*` capability bits (the `CAP_*` constants).
    pub port_cap_flags: u32,
    /// Largest message (bytes).
    pub max_msg_sz: u32,
    /// P_Key table entries.
    pub pkey_tbl_len: u16,
    /// Q_Key violations (PortInfo:Q_KeyViolations, 16 bits wide, saturating).
    pub qkey_viol_cntr: u32,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// Link speed and width, when known.
    pub speed: Option<EthSpeed>,
}

impl PortAttr {
    /// `IB_PORT_CM_SUP`: the port supports connection management.
    pub const CAP_CM_SUP: u32 = b::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
    /// `IB_PORT_AUTO_MIGR_SUP`: Automatic Path Migration.
    pub const CAP_AUTO_MIGR_SUP: u32 = b::ib_port_capability_mask_bits_IB_PORT_AUTO_MIGR_SUP;

    /// Writes the attributes into ib_core's structure.
    pub(super) fn write_to(&self, a: &mut b::ib_port_attr) {
        a.state = self.state.to_raw();
        a.phys_state = self.phys_state.to_raw();
        a.max_mtu = self.max_mtu.to_raw();
        a.active_mtu = self.active_mtu.to_raw();
        a.phys_mtu = self.phys_mtu;
        a.gid_tbl_len = self.gid_tbl_len;
        a.set_ip_gids(u32::from(self.ip_gids));
        a.port_cap_flags = self.port_cap_flags;
        a.max_msg_sz = self.max_msg_sz;
        a.pkey_tbl_len = self.pkey_tbl_len;
        a.qkey_viol_cntr = self.qkey_viol_cntr;
        a.max_vl_num = self.max_vl_num;
        if let Some(s) = self.speed {
            a.active_speed = s.speed;
            a.active_width = s.width;
        }
    }
}

/// The immutable properties of a port (`struct ib_port_immutable`).
#[derive(Clone, Copy, Debug)]
pub struct PortImmutable {
    /// `RDMA_CORE_PORT_*` flags (the `CORE_*` constants).
    pub core_cap_flags: u32,
    /// P_Key table entries.
    pub pkey_tbl_len: i32,
    /// GID table entries.
    pub gid_tbl_len: i32,
    /// Largest MAD (bytes).
    pub max_mad_size: u32,
}

impl PortImmutable {
    /// `RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP`: a RoCEv2 port.
    pub const CORE_ROCE_UDP_ENCAP: u32 = b::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
    /// `IB_MGMT_MAD_SIZE`: the size of a standard MAD.
    pub const MGMT_MAD_SIZE: u32 = b::IB_MGMT_MAD_SIZE;

    /// Writes the properties into ib_core's structure.
    pub(super) fn write_to(&self, imm: &mut b::ib_port_immutable) {
        imm.core_cap_flags = self.core_cap_flags;
        imm.pkey_tbl_len = self.pkey_tbl_len;
        imm.gid_tbl_len = self.gid_tbl_len;
        imm.max_mad_size = self.max_mad_size;
    }
}
