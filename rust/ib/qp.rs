// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (`struct ib_qp`): create, modify, query, destroy, and the posting verbs.
//!
//! The trampolines turn ib_core's raw structures into safe views: [`QpInitAttr`] for creation,
//! [`PathAttr`] for the address vectors of Modify QP, [`QpHandle`] for completions and events,
//! and the kernel work-request lists into [`SendWr`] / [`RecvWr`] values of the protocol core.

use super::{
    ah::AhVerbs,
    cq::{Cq, CqVerbs, WcQp},
    device::{Device, IbDriver},
    mr::{mr_handle, MrVerbs},
    object::Obj,
    pd::{Pd, PdVerbs},
    srq::{Srq, SrqVerbs},
    udata::Udata,
};
use crate::bindings as b;
use crate::rvcore::apm::{MigState, PathInfo};
use crate::rvcore::qp::QpAttrs;
use crate::rvcore::qp_state::{AttrMask, QpState};
use crate::rvcore::wqe::{
    RecvWr, RegMrParams, SendFlags, SendOpcode, SendWr, SgList, Sge, WrExtra, MAX_SGE,
};
use core::ptr::NonNull;
use kernel::{error::from_result, prelude::*};

/// The queue-pair verbs of a driver.
pub trait QpVerbs: PdVerbs + CqVerbs + SrqVerbs + IbDriver {
    /// The driver's data of a QP.
    type Qp: Send + Sync;
    /// Creates a QP; returns its data and its QP number. `udata` is `None` for kernel callers.
    fn create_qp(
        pd: &Pd<Self>,
        init: &mut QpInitAttr<'_, Self>,
        handle: QpHandle,
        udata: Option<&mut Udata<'_>>,
    ) -> Result<(Self::Qp, u32)>;
    /// Modify QP: the mask of `attr` is already checked against the standard bits.
    fn modify_qp(
        dev: &Device<Self>,
        qp: &Self::Qp,
        attr: &ModifyAttr<'_>,
        udata: Option<&mut Udata<'_>>,
    ) -> Result;
    /// Query QP: the QP's attributes.
    fn query_qp(qp: &Self::Qp) -> Result<QpQuery>;
    /// Destroys a QP. After it returns the driver must not use the QP's [`QpHandle`].
    fn destroy_qp(qp: Self::Qp);
    /// Posts kernel send work requests, or (`wrs` is `None`) rings a user QP's doorbell:
    /// the work requests are in the user's mmapped send queue. A user QP's call always comes
    /// as a doorbell, also when the uverbs command carried work requests (built from user
    /// input, they are not posted, as on rdma_rxe).
    fn post_send(qp: &Self::Qp, wrs: Option<&mut SendWrList<'_>>) -> Result;
    /// Posts kernel receive work requests.
    fn post_recv(qp: &Self::Qp, wrs: &mut RecvWrList<'_>) -> Result;
    /// Attaches a UD QP to the multicast group `gid` (ib_core has checked that the GID is a
    /// multicast one and the QP is UD). Process context.
    fn attach_mcast(qp: &Self::Qp, gid: &[u8; 16]) -> Result;
    /// Detaches a QP from the multicast group `gid`. Process context.
    fn detach_mcast(qp: &Self::Qp, gid: &[u8; 16]) -> Result;
}

/// The `struct ib_qp` behind a QP, for completions (`ib_wc.qp`) and async events.
///
/// # Invariants
///
/// The pointer is a live `ib_qp` from the moment `create_qp` succeeds until `destroy_qp`
/// returns. The driver keeps handles only inside its QP data and stops using them before its
/// `destroy_qp` returns (it drains its work items and timers there).
#[derive(Clone, Copy)]
pub struct QpHandle(NonNull<b::ib_qp>);

// SAFETY: the handle is an identity plus event dispatch, which ib_core allows from any thread.
unsafe impl Send for QpHandle {}
// SAFETY: as above.
unsafe impl Sync for QpHandle {}

impl QpHandle {
    /// The raw pointer (for `ib_wc.qp`).
    pub fn as_raw(&self) -> *mut b::ib_qp {
        self.0.as_ptr()
    }

    /// The handle completions of this QP carry (`ib_wc.qp`), reported on port `port_num`.
    pub fn wc_qp(&self, port_num: u8) -> WcQp {
        // SAFETY: this is the QP the completions belong to (type invariant).
        unsafe { WcQp::from_raw(self.0.as_ptr(), port_num) }
    }

    /// Reports an affiliated asynchronous event (`enum ib_event_type`) on this QP to its owner.
    /// Call it from process context without driver locks held.
    pub fn dispatch_event(&self, event: u32) {
        let qp = self.0.as_ptr();
        // SAFETY: the QP is live (type invariant). `event_handler` is set by ib_core at
        // creation (`__ib_qp_event_handler`) and may be called from any context.
        unsafe {
            let mut ev: b::ib_event = core::mem::zeroed();
            ev.device = (*qp).device;
            *ev.element.qp.as_mut() = qp;
            ev.event = event;
            if let Some(h) = (*qp).event_handler {
                h(&mut ev, (*qp).qp_context);
            }
        }
    }
}

/// Creation attributes of a QP (`struct ib_qp_init_attr`), with the CQs and SRQ resolved.
pub struct QpInitAttr<'a, T: QpVerbs> {
    raw: &'a mut b::ib_qp_init_attr,
    send_cq: &'a Cq<T>,
    recv_cq: &'a Cq<T>,
    srq: Option<&'a Srq<T>>,
}

impl<T: QpVerbs> QpInitAttr<'_, T> {
    /// The QP type, `None` for a type rvrdma does not know (`enum ib_qp_type`).
    pub fn qp_type(&self) -> Option<QpType> {
        QpType::from_raw(self.raw.qp_type)
    }
    /// `create_flags` (rvrdma supports none).
    pub fn create_flags(&self) -> u32 {
        self.raw.create_flags
    }
    /// Every send WR generates a completion (`IB_SIGNAL_ALL_WR`).
    pub fn signal_all(&self) -> bool {
        self.raw.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR
    }
    /// The requested capabilities.
    pub fn cap(&self) -> QpCap {
        QpCap::from_raw(&self.raw.cap)
    }
    /// Reports the granted capabilities back to the caller.
    pub fn set_cap(&mut self, cap: QpCap) {
        self.raw.cap = cap.to_raw();
    }
    /// The send CQ.
    pub fn send_cq(&self) -> &Cq<T> {
        self.send_cq
    }
    /// The receive CQ.
    pub fn recv_cq(&self) -> &Cq<T> {
        self.recv_cq
    }
    /// The SRQ receives come from, if any.
    pub fn srq(&self) -> Option<&Srq<T>> {
        self.srq
    }
    /// `port_num` (special QPs only).
    pub fn port_num(&self) -> u32 {
        self.raw.port_num
    }
}

/// A QP type (`enum ib_qp_type`): the ones rvrdma offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable Connected (`IB_QPT_RC`).
    Rc,
    /// Unreliable Connected (`IB_QPT_UC`).
    Uc,
    /// Unreliable Datagram (`IB_QPT_UD`).
    Ud,
    /// The General Services QP, QP1 of a port (`IB_QPT_GSI`).
    Gsi,
}

impl QpType {
    fn from_raw(v: b::ib_qp_type) -> Option<Self> {
        match v {
            b::ib_qp_type_IB_QPT_RC => Some(Self::Rc),
            b::ib_qp_type_IB_QPT_UC => Some(Self::Uc),
            b::ib_qp_type_IB_QPT_UD => Some(Self::Ud),
            b::ib_qp_type_IB_QPT_GSI => Some(Self::Gsi),
            _ => None,
        }
    }

    fn to_raw(self) -> b::ib_qp_type {
        match self {
            Self::Rc => b::ib_qp_type_IB_QPT_RC,
            Self::Uc => b::ib_qp_type_IB_QPT_UC,
            Self::Ud => b::ib_qp_type_IB_QPT_UD,
            Self::Gsi => b::ib_qp_type_IB_QPT_GSI,
        }
    }
}

/// The capabilities of a QP (`struct ib_qp_cap`): queue depths, SGEs and inline data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather elements per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive WR.
    pub max_recv_sge: u32,
    /// Inline data bytes per send WR.
    pub max_inline_data: u32,
    /// RDMA read/write contexts (for the RW API; rvrdma reports 0).
    pub max_rdma_ctxs: u32,
}

impl QpCap {
    fn from_raw(c: &b::ib_qp_cap) -> Self {
        Self {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
            max_rdma_ctxs: c.max_rdma_ctxs,
        }
    }

    fn to_raw(self) -> b::ib_qp_cap {
        b::ib_qp_cap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
            max_rdma_ctxs: self.max_rdma_ctxs,
        }
    }
}

/// What Query QP reports: the core's view of the attributes, the peers' MACs of the two paths,
/// the capabilities and the creation parameters.
#[derive(Clone, Copy, Debug)]
pub struct QpQuery {
    /// The attributes as the protocol core holds them.
    pub attrs: QpAttrs,
    /// The peer's MAC address on the primary path.
    pub dmac: [u8; 6],
    /// The peer's MAC address on the alternate path.
    pub alt_dmac: [u8; 6],
    /// The granted capabilities.
    pub cap: QpCap,
    /// Every send WR generates a completion (`IB_SIGNAL_ALL_WR`).
    pub sig_all: bool,
    /// The QP type.
    pub qp_type: QpType,
}

impl QpQuery {
    /// Writes the answer into ib_core's structures (`pkey_index` and `alt_pkey_index` are 0:
    /// the only P_Key).
    fn write_to(&self, attr: &mut b::ib_qp_attr, init: &mut b::ib_qp_init_attr) {
        let a = &self.attrs;
        attr.qp_state = a.qp_state as u32;
        attr.cur_qp_state = a.qp_state as u32;
        attr.path_mtu = u32::from(a.path_mtu);
        attr.path_mig_state = a.path_mig_state as u32;
        attr.qkey = a.qkey;
        attr.rq_psn = a.rq_psn;
        attr.sq_psn = a.sq_psn;
        attr.dest_qp_num = a.dest_qp_num;
        attr.qp_access_flags = a.qp_access_flags as i32;
        attr.pkey_index = 0;
        attr.alt_pkey_index = 0;
        attr.en_sqd_async_notify = u8::from(a.en_sqd_async_notify);
        attr.sq_draining = 0;
        attr.max_rd_atomic = a.max_rd_atomic;
        attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        attr.min_rnr_timer = a.min_rnr_timer;
        attr.port_num = u32::from(a.path.port_num);
        attr.timeout = a.timeout;
        attr.retry_cnt = a.retry_cnt;
        attr.rnr_retry = a.rnr_retry;
        attr.alt_port_num = u32::from(a.alt_path.port_num);
        attr.alt_timeout = a.alt_path.timeout;
        if a.path.port_num != 0 {
            fill_ah_attr(&mut attr.ah_attr, &PathAttr::from_info(&a.path, self.dmac));
        }
        if a.alt_path.port_num != 0 {
            fill_ah_attr(
                &mut attr.alt_ah_attr,
                &PathAttr::from_info(&a.alt_path, self.alt_dmac),
            );
        }
        init.cap = self.cap.to_raw();
        attr.cap = self.cap.to_raw();
        init.sq_sig_type = if self.sig_all {
            b::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            b::ib_sig_type_IB_SIGNAL_REQ_WR
        };
        init.qp_type = self.qp_type.to_raw();
    }
}

/// An address vector of Modify QP (`ah_attr` or `alt_ah_attr`), resolved: the source GID
/// comes from the GID table entry ib_core attached.
#[derive(Clone, Copy, Debug, Default)]
pub struct PathAttr {
    /// Local port (1-based).
    pub port_num: u32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Source GID (our address).
    pub sgid: [u8; 16],
    /// Destination GID (the peer's address).
    pub dgid: [u8; 16],
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// Static rate.
    pub static_rate: u8,
    /// The peer's MAC address (resolved by ib_core).
    pub dmac: [u8; 6],
}

impl PathAttr {
    /// The core's path for this address vector; `timeout` is the local ACK timeout of the
    /// path.
    pub fn to_info(&self, timeout: u8, pkey_index: u16) -> PathInfo {
        PathInfo {
            port_num: u8::try_from(self.port_num).unwrap_or(0),
            sgid_index: self.sgid_index,
            sgid: self.sgid,
            dgid: self.dgid,
            pkey_index,
            timeout,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            sl: self.sl,
            static_rate: self.static_rate,
        }
    }

    /// The address vector of a core path whose peer has the MAC address `dmac`.
    pub fn from_info(p: &PathInfo, dmac: [u8; 6]) -> Self {
        Self {
            port_num: u32::from(p.port_num),
            sgid_index: p.sgid_index,
            sgid: p.sgid,
            dgid: p.dgid,
            flow_label: p.flow_label,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            sl: p.sl,
            static_rate: p.static_rate,
            dmac,
        }
    }
}

/// The attributes of one Modify QP call: the mask and, for each attribute, a getter (whose
/// value is meaningful only when the mask names the attribute).
pub struct ModifyAttr<'a> {
    raw: &'a b::ib_qp_attr,
    mask: AttrMask,
    path: Option<PathAttr>,
    alt_path: Option<PathAttr>,
}

impl ModifyAttr<'_> {
    /// The attributes to modify (`ib_qp_attr_mask`; the core's bits equal the kernel's).
    pub fn mask(&self) -> AttrMask {
        self.mask
    }
    /// The next state (`qp_state`); `EINVAL` for a value outside `enum ib_qp_state`.
    pub fn qp_state(&self) -> Result<QpState> {
        qp_state_from_raw(self.raw.qp_state)
    }
    /// The caller's idea of the current state (`cur_qp_state`).
    pub fn cur_qp_state(&self) -> Result<QpState> {
        qp_state_from_raw(self.raw.cur_qp_state)
    }
    /// Whether to raise SQ_DRAINED once the SQ has drained (`en_sqd_async_notify`).
    pub fn en_sqd_async_notify(&self) -> bool {
        self.raw.en_sqd_async_notify != 0
    }
    /// Remote access enables (`qp_access_flags`, `enum ib_access_flags` bits).
    pub fn access_flags(&self) -> u32 {
        self.raw.qp_access_flags as u32
    }
    /// Primary P_Key index.
    pub fn pkey_index(&self) -> u16 {
        self.raw.pkey_index
    }
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        self.raw.qkey
    }
    /// Path MTU (`enum ib_mtu` value); `EINVAL` when it does not fit a byte.
    pub fn path_mtu(&self) -> Result<u8> {
        u8::try_from(self.raw.path_mtu).map_err(|_| EINVAL)
    }
    /// Local ACK timeout of the primary path.
    pub fn timeout(&self) -> u8 {
        self.raw.timeout
    }
    /// Retry count.
    pub fn retry_cnt(&self) -> u8 {
        self.raw.retry_cnt
    }
    /// RNR retry count.
    pub fn rnr_retry(&self) -> u8 {
        self.raw.rnr_retry
    }
    /// The responder's starting PSN.
    pub fn rq_psn(&self) -> u32 {
        self.raw.rq_psn
    }
    /// The requester's starting PSN.
    pub fn sq_psn(&self) -> u32 {
        self.raw.sq_psn
    }
    /// Outstanding RDMA Reads and atomics as requester.
    pub fn max_rd_atomic(&self) -> u8 {
        self.raw.max_rd_atomic
    }
    /// Outstanding RDMA Reads and atomics as responder.
    pub fn max_dest_rd_atomic(&self) -> u8 {
        self.raw.max_dest_rd_atomic
    }
    /// Minimum RNR NAK timer.
    pub fn min_rnr_timer(&self) -> u8 {
        self.raw.min_rnr_timer
    }
    /// Path migration state; `EINVAL` for a value outside `enum ib_mig_state`.
    pub fn path_mig_state(&self) -> Result<MigState> {
        match self.raw.path_mig_state {
            b::ib_mig_state_IB_MIG_MIGRATED => Ok(MigState::Migrated),
            b::ib_mig_state_IB_MIG_REARM => Ok(MigState::Rearm),
            b::ib_mig_state_IB_MIG_ARMED => Ok(MigState::Armed),
            _ => Err(EINVAL),
        }
    }
    /// Destination QP number.
    pub fn dest_qp_num(&self) -> u32 {
        self.raw.dest_qp_num
    }
    /// Primary port; `EINVAL` when it does not fit a byte.
    pub fn port_num(&self) -> Result<u8> {
        u8::try_from(self.raw.port_num).map_err(|_| EINVAL)
    }
    /// The primary path, when the mask has `AV` and it carries a GRH.
    pub fn path(&self) -> Option<&PathAttr> {
        self.path.as_ref()
    }
    /// The alternate path, when the mask has `ALT_PATH` and it carries a GRH.
    pub fn alt_path(&self) -> Option<&PathAttr> {
        self.alt_path.as_ref()
    }
    /// Alternate P_Key index.
    pub fn alt_pkey_index(&self) -> u16 {
        self.raw.alt_pkey_index
    }
    /// Local ACK timeout of the alternate path.
    pub fn alt_timeout(&self) -> u8 {
        self.raw.alt_timeout
    }
    /// Alternate port; `EINVAL` when it does not fit a byte.
    pub fn alt_port_num(&self) -> Result<u8> {
        u8::try_from(self.raw.alt_port_num).map_err(|_| EINVAL)
    }
}

/// The core's QP state for an `enum ib_qp_state` value (the core's values equal the kernel's).
fn qp_state_from_raw(v: u32) -> Result<QpState> {
    QpState::ALL
        .iter()
        .copied()
        .find(|s| *s as u32 == v)
        .ok_or(EINVAL)
}

/// Resolves an `rdma_ah_attr` of a RoCE port; `None` without a GRH or GID attribute.
pub fn path_attr(ah: &b::rdma_ah_attr) -> Option<PathAttr> {
    if u32::from(ah.ah_flags) & b::ib_ah_flags_IB_AH_GRH == 0 || ah.grh.sgid_attr.is_null() {
        return None;
    }
    // SAFETY: ib_core holds a reference on the GID attribute for the duration of the call
    // (`rdma_fill_sgid_attr`); it is non-NULL (checked).
    let gid_attr = unsafe { &*ah.grh.sgid_attr };
    // SAFETY: `ib_gid` is a union of byte arrays and integers: every bit pattern is valid.
    let sgid = unsafe { *gid_attr.gid.raw.as_ref() };
    // SAFETY: as above.
    let dgid = unsafe { *ah.grh.dgid.raw.as_ref() };
    // SAFETY: a RoCE port's `rdma_ah_attr` uses the `roce` member of the union.
    let dmac = unsafe { ah.__bindgen_anon_1.roce.as_ref().dmac };
    Some(PathAttr {
        port_num: ah.port_num,
        sgid_index: ah.grh.sgid_index,
        sgid,
        dgid,
        flow_label: ah.grh.flow_label,
        hop_limit: ah.grh.hop_limit,
        traffic_class: ah.grh.traffic_class,
        sl: ah.sl,
        static_rate: ah.static_rate,
        dmac,
    })
}

/// Fills an `rdma_ah_attr` for Query QP from a path.
pub fn fill_ah_attr(ah: &mut b::rdma_ah_attr, p: &PathAttr) {
    ah.type_ = b::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
    ah.port_num = p.port_num;
    ah.sl = p.sl;
    ah.static_rate = p.static_rate;
    ah.ah_flags = b::ib_ah_flags_IB_AH_GRH as u8;
    // SAFETY: every bit pattern is a valid `ib_gid`.
    unsafe { *ah.grh.dgid.raw.as_mut() = p.dgid };
    ah.grh.flow_label = p.flow_label;
    ah.grh.sgid_index = p.sgid_index;
    ah.grh.hop_limit = p.hop_limit;
    ah.grh.traffic_class = p.traffic_class;
    ah.grh.sgid_attr = core::ptr::null();
    // SAFETY: a RoCE address vector uses the `roce` member of the union.
    unsafe { ah.__bindgen_anon_1.roce.as_mut().dmac = p.dmac };
}

/// Converts a kernel caller's scatter/gather list; `EINVAL` beyond [`MAX_SGE`] elements.
///
/// # Safety
///
/// `list` must point to `num` valid `ib_sge` elements (or `num` must be 0).
unsafe fn sg_list(list: *const b::ib_sge, num: c_int) -> Result<SgList> {
    let n = usize::try_from(num).map_err(|_| EINVAL)?;
    if n > MAX_SGE {
        return Err(EINVAL);
    }
    let mut sges = [Sge::default(); MAX_SGE];
    for (i, s) in sges.iter_mut().take(n).enumerate() {
        // SAFETY: `i < num`, and the caller guarantees `num` valid elements.
        let src = unsafe { &*list.add(i) };
        *s = Sge {
            addr: src.addr,
            length: src.length,
            lkey: src.lkey,
        };
    }
    SgList::from_slice(&sges[..n]).ok_or(EINVAL)
}

/// A kernel caller's list of send work requests, consumed front to back.
pub struct SendWrList<'a> {
    next: *const b::ib_send_wr,
    bad: &'a mut *const b::ib_send_wr,
    /// The QP is UD or GSI: every WR but a local operation's is the `wr` member of an `ib_ud_wr`.
    datagram: bool,
    /// The AH of the WR returned last (datagram QPs).
    ah: *const b::ib_ah,
    /// The WR returned last, if it is a fast registration (an `ib_reg_wr`).
    reg: *const b::ib_reg_wr,
    /// The WR returned last, if it carries inline data (`IB_SEND_INLINE`).
    inline: *const b::ib_send_wr,
}

impl SendWrList<'_> {
    /// The fast registration the WR [`Self::next_wr`] returned last asks for (`IB_WR_REG_MR`:
    /// the MR, its new key and access rights; the pages, IOVA and length `map_mr_sg` gave it):
    /// `None` for another opcode or a WR without an MR.
    pub fn reg_mr<T: MrVerbs>(&self) -> Option<RegMrParams> {
        if self.reg.is_null() {
            return None;
        }
        // SAFETY: `reg` is the caller's `ib_reg_wr` of this call (its opcode said so).
        let r = unsafe { &*self.reg };
        if r.mr.is_null() {
            return None;
        }
        // SAFETY: a REG_MR work request names an MR of this device, which the caller holds
        // for the call; ib_core's `ib_map_mr_sg` set its IOVA and length.
        let (handle, iova, length) =
            unsafe { (mr_handle::<T>(r.mr), (*r.mr).iova, (*r.mr).length) };
        Some(RegMrParams {
            key: r.key,
            iova,
            length,
            access: r.access as u32,
            mr_handle: handle,
        })
    }

    /// Copies the data of the WR [`Self::next_wr`] returned last, if it is an `IB_SEND_INLINE`
    /// one, to the front of `dst` (its SGEs' bytes one after the other) and returns its length;
    /// `None` for a WR without inline data. The caller may reuse an inline WR's buffers once the
    /// post returns, so they are copied now, and their L_Keys mean nothing (rdma_rxe copies
    /// them the same way). `EINVAL` if the data does not fit in `dst`, `EFAULT` for a NULL or
    /// wrapping address.
    pub fn copy_inline(&self, dst: &mut [u8]) -> Result<Option<usize>> {
        if self.inline.is_null() {
            return Ok(None);
        }
        // SAFETY: `inline` is the caller's WR of this call.
        let wr = unsafe { &*self.inline };
        let n = usize::try_from(wr.num_sge).map_err(|_| EINVAL)?;
        let mut done = 0usize;
        for i in 0..n {
            // SAFETY: a kernel caller's `sg_list` holds `num_sge` valid elements.
            let s = unsafe { &*wr.sg_list.add(i) };
            let len = s.length as usize;
            let end = done.checked_add(len).ok_or(EINVAL)?;
            let to = dst.get_mut(done..end).ok_or(EINVAL)?;
            if len > 0 {
                super::mr::check_kva(s.addr, len)?;
                // SAFETY: this device takes DMA addresses for kernel virtual ones
                // (`ib_virt_dma_to_ptr`), and the SGEs of an inline WR name `length` bytes of
                // kernel memory the caller owns for the call; `to` is `len` bytes of `dst`.
                unsafe { super::mr::kcopy(to.as_mut_ptr(), s.addr as usize as *const u8, len) };
            }
            done = end;
        }
        Ok(Some(done))
    }

    /// The AH of the WR [`Self::next_wr`] returned last, as the driver's data: `None` for a
    /// connected QP or a WR without one. ib_core keeps the AH alive while the WR is posted.
    pub fn ah<T: AhVerbs>(&self) -> Option<&T::Ah> {
        if self.ah.is_null() {
            return None;
        }
        // SAFETY: `ah` came from the caller's `ib_ud_wr` of this call; ib_core AHs of a device
        // of driver `T` hold `T::Ah` (created by its `create_ah`), live for the call.
        Some(unsafe { Obj::<b::ib_ah, T::Ah>::data(self.ah) })
    }

    /// Converts the next work request; `Ok(None)` at the end. A WR with an unknown opcode or too
    /// many SGEs fails with `EINVAL` (and becomes the caller's `bad_wr`, as does any WR the
    /// driver refuses after this returned it).
    pub fn next_wr(&mut self) -> Result<Option<SendWr>> {
        if self.next.is_null() {
            return Ok(None);
        }
        *self.bad = self.next;
        // SAFETY: ib_core passes a valid, NULL-terminated list that lives for the call.
        let wr = unsafe { &*self.next };
        let opcode = SendOpcode::from_u32(wr.opcode).ok_or(EINVAL)?;
        if opcode.is_flush_or_atomic_write() || opcode == SendOpcode::BindMw {
            // ib_verbs.h has no WR layout for them: only user space (rxe ABI) posts them.
            return Err(EINVAL);
        }
        // SAFETY: a kernel caller's `sg_list` holds `num_sge` valid elements.
        let sg = unsafe { sg_list(wr.sg_list, wr.num_sge)? };
        // SAFETY: `wr_id` is the member a kernel caller sets (the other is a CQE pointer).
        let mut out = SendWr::new(unsafe { *wr.__bindgen_anon_1.wr_id.as_ref() }, opcode);
        out.flags = SendFlags(wr.send_flags as u32);
        if out.flags.has(SendFlags::INLINE) && (opcode.is_read_or_atomic() || opcode.is_local()) {
            // Only Sends and Writes carry data to inline: a Read's or atomic's SGEs are where
            // the answer lands (rdma_rxe refuses them too).
            return Err(EINVAL);
        }
        out.sg = sg;
        // SAFETY: the union member matches the opcode (ib_verbs.h).
        unsafe {
            match opcode {
                SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => {
                    out.imm = u32::from_be(*wr.ex.imm_data.as_ref())
                }
                SendOpcode::SendWithInv | SendOpcode::LocalInv => {
                    out.invalidate_rkey = *wr.ex.invalidate_rkey.as_ref()
                }
                _ => {}
            }
        }
        if opcode.is_write() || opcode == SendOpcode::RdmaRead {
            // SAFETY: an RDMA WR is the `wr` member of an `ib_rdma_wr`.
            let r = unsafe { &*self.next.cast::<b::ib_rdma_wr>() };
            out.remote_addr = r.remote_addr;
            out.rkey = r.rkey;
        } else if opcode.is_atomic() {
            // SAFETY: an atomic WR is the `wr` member of an `ib_atomic_wr`.
            let a = unsafe { &*self.next.cast::<b::ib_atomic_wr>() };
            out.remote_addr = a.remote_addr;
            out.rkey = a.rkey;
            out.extra = WrExtra::Atomic {
                compare_add: a.compare_add,
                swap: a.swap,
            };
        }
        self.ah = core::ptr::null();
        self.inline = if out.flags.has(SendFlags::INLINE) {
            self.next
        } else {
            core::ptr::null()
        };
        self.reg = if opcode == SendOpcode::RegMr {
            self.next.cast::<b::ib_reg_wr>()
        } else {
            core::ptr::null()
        };
        if self.datagram && !opcode.is_local() {
            // SAFETY: on a UD or GSI QP a send WR is the `wr` member of an `ib_ud_wr` (a local
            // operation's is that of its own type, such as `ib_reg_wr`).
            let u = unsafe { &*self.next.cast::<b::ib_ud_wr>() };
            out.set_ud_dest(u.remote_qpn, u.remote_qkey);
            self.ah = u.ah;
        }
        // A fast registration (`ib_reg_wr`) comes out with its opcode only: the driver takes
        // its MR and keys from `reg_mr`, and decides whether to accept it.
        self.next = wr.next;
        Ok(Some(out))
    }
}

/// A kernel caller's list of receive work requests, consumed front to back.
pub struct RecvWrList<'a> {
    next: *const b::ib_recv_wr,
    bad: &'a mut *const b::ib_recv_wr,
}

impl<'a> RecvWrList<'a> {
    /// A list starting at `next`; `bad` receives the failing WR.
    pub(crate) fn new(next: *const b::ib_recv_wr, bad: &'a mut *const b::ib_recv_wr) -> Self {
        Self { next, bad }
    }

    /// Converts the next work request; `Ok(None)` at the end.
    pub fn next_wr(&mut self) -> Result<Option<RecvWr>> {
        if self.next.is_null() {
            return Ok(None);
        }
        *self.bad = self.next;
        // SAFETY: ib_core passes a valid, NULL-terminated list that lives for the call.
        let wr = unsafe { &*self.next };
        // SAFETY: a kernel caller's `sg_list` holds `num_sge` valid elements.
        let sg = unsafe { sg_list(wr.sg_list, wr.num_sge)? };
        self.next = wr.next;
        Ok(Some(RecvWr {
            // SAFETY: `wr_id` is the member a kernel caller sets (the other is a CQE pointer).
            wr_id: unsafe { *wr.__bindgen_anon_1.wr_id.as_ref() },
            sg,
        }))
    }
}

/// Fills the QP entries of an ops table.
pub(crate) fn install<T: QpVerbs>(ops: &mut b::ib_device_ops) {
    ops.create_qp = Some(create_qp::<T>);
    ops.modify_qp = Some(modify_qp::<T>);
    ops.query_qp = Some(query_qp::<T>);
    ops.destroy_qp = Some(destroy_qp::<T>);
    ops.post_send = Some(post_send::<T>);
    ops.post_recv = Some(post_recv::<T>);
    ops.attach_mcast = Some(attach_mcast::<T>);
    ops.detach_mcast = Some(detach_mcast::<T>);
    ops.size_ib_qp = Obj::<b::ib_qp, T::Qp>::SIZE;
}

/// # Safety
///
/// `ibqp` must be a QP of driver `T` that `create_qp` initialised and `destroy_qp` has not
/// yet torn down, for `'a`.
unsafe fn qp_data<'a, T: QpVerbs>(ibqp: *const b::ib_qp) -> &'a T::Qp {
    // SAFETY: per the caller.
    unsafe { Obj::<b::ib_qp, T::Qp>::data(ibqp) }
}

/// # Safety
///
/// ib_core callback: `ibqp` is a fresh QP of `size_ib_qp` bytes with `device`, `pd`, the CQs
/// and the SRQ set; `init` is valid.
unsafe extern "C" fn create_qp<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    init: *mut b::ib_qp_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        // SAFETY: valid per the callback contract.
        let init = unsafe { &mut *init };
        // SAFETY: ib_core set these fields (verbs.c `create_qp`).
        let (pd, scq, rcq, srq) =
            unsafe { ((*ibqp).pd, (*ibqp).send_cq, (*ibqp).recv_cq, init.srq) };
        if pd.is_null() || scq.is_null() || rcq.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: ib_core resolved these objects of our device and holds them for the call.
        let (pd, send_cq, recv_cq) = unsafe {
            (
                Pd::<T>::from_raw(pd),
                Cq::<T>::from_raw(scq),
                Cq::<T>::from_raw(rcq),
            )
        };
        // SAFETY: NULL or an SRQ of our device, held by ib_core for the call.
        let srq = (!srq.is_null()).then(|| unsafe { Srq::<T>::from_raw(srq) });
        let mut attr = QpInitAttr {
            raw: init,
            send_cq,
            recv_cq,
            srq,
        };
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        // INVARIANT: `ibqp` is live until `destroy_qp` returns.
        let handle = QpHandle(NonNull::new(ibqp).ok_or(EINVAL)?);
        let (data, qpn) = T::create_qp(pd, &mut attr, handle, udata.as_mut())?;
        // SAFETY: the object is fresh and ours.
        unsafe {
            (*ibqp).qp_num = qpn;
            Obj::<b::ib_qp, T::Qp>::init(ibqp, data);
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live QP of ours; `attr` is valid.
unsafe extern "C" fn modify_qp<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    mask: c_int,
    udata: *mut b::ib_udata,
) -> c_int {
    from_result(|| {
        let mask = mask as u32;
        if mask & !b::ib_qp_attr_mask_IB_QP_ATTR_STANDARD_BITS != 0 {
            return Err(crate::errno::eopnotsupp());
        }
        let mask = AttrMask(mask);
        // SAFETY: valid per the callback contract.
        let raw = unsafe { &*attr };
        let m = ModifyAttr {
            raw,
            mask,
            path: mask
                .contains(AttrMask::AV)
                .then(|| path_attr(&raw.ah_attr))
                .flatten(),
            alt_path: mask
                .contains(AttrMask::ALT_PATH)
                .then(|| path_attr(&raw.alt_ah_attr))
                .flatten(),
        };
        // SAFETY: `udata` is NULL or valid for this call.
        let mut udata = unsafe { Udata::from_raw(udata) };
        // SAFETY: the QP and its device are live.
        let (dev, data) = unsafe { (Device::<T>::from_raw((*ibqp).device), qp_data::<T>(ibqp)) };
        T::modify_qp(dev, data, &m, udata.as_mut())?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live QP of ours; `attr` and `init` are valid.
unsafe extern "C" fn query_qp<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    _mask: c_int,
    init: *mut b::ib_qp_init_attr,
) -> c_int {
    from_result(|| {
        // SAFETY: the QP is live per the callback contract.
        let q = T::query_qp(unsafe { qp_data::<T>(ibqp) })?;
        // SAFETY: `attr` and `init` are valid for writes and exclusively ours for the call.
        q.write_to(unsafe { &mut *attr }, unsafe { &mut *init });
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback: the QP is live and ib_core never uses it again after this.
unsafe extern "C" fn destroy_qp<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: initialised by `create_qp`; moved out exactly once.
    let data = unsafe { Obj::<b::ib_qp, T::Qp>::take(ibqp) };
    T::destroy_qp(data);
    0
}

/// # Safety
///
/// ib_core callback on a live QP of ours (any context); `wr` is NULL (user doorbell) or a
/// valid list; `bad` is valid.
unsafe extern "C" fn post_send<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    wr: *const b::ib_send_wr,
    bad: *mut *const b::ib_send_wr,
) -> c_int {
    from_result(|| {
        // SAFETY: the QP is live.
        let data = unsafe { qp_data::<T>(ibqp) };
        // SAFETY: the QP is live; ib_core sets `uobject` at creation, for a user QP only.
        let user = unsafe { !(*ibqp).uobject.is_null() };
        if wr.is_null() {
            T::post_send(data, None)?;
        } else if user {
            // Work requests of the uverbs POST_SEND command: their addresses and flags are the
            // user's, unchecked. A user QP's WQEs are in its ring: the call is its doorbell.
            T::post_send(data, None).inspect_err(|_| {
                // SAFETY: `bad` is valid for writes per the callback contract.
                unsafe { *bad = wr };
            })?;
        } else {
            // SAFETY: `bad` is valid for writes per the callback contract, and only written
            // through this reference for the call.
            let bad = unsafe { &mut *bad };
            // SAFETY: the QP is live; ib_core set its type at creation.
            let qp_type = unsafe { (*ibqp).qp_type };
            let mut list = SendWrList {
                next: wr,
                bad,
                datagram: matches!(QpType::from_raw(qp_type), Some(QpType::Ud | QpType::Gsi)),
                ah: core::ptr::null(),
                reg: core::ptr::null(),
                inline: core::ptr::null(),
            };
            T::post_send(data, Some(&mut list))?;
        }
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live QP of ours (any context); `wr` is a valid list, `bad` valid.
unsafe extern "C" fn post_recv<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    wr: *const b::ib_recv_wr,
    bad: *mut *const b::ib_recv_wr,
) -> c_int {
    from_result(|| {
        // SAFETY: the QP is live; `bad` is valid for writes.
        let (data, bad) = unsafe { (qp_data::<T>(ibqp), &mut *bad) };
        let mut list = RecvWrList { next: wr, bad };
        T::post_recv(data, &mut list)?;
        Ok(0)
    })
}

/// # Safety
///
/// ib_core callback on a live QP of ours (process context); `gid` is valid.
unsafe extern "C" fn attach_mcast<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> c_int {
    // RoCE has no multicast LIDs: the GID alone names the group.
    // SAFETY: the QP is live and `gid` valid per the callback contract; every bit pattern is a
    // valid `raw`.
    let (data, gid) = unsafe { (qp_data::<T>(ibqp), *(*gid).raw.as_ref()) };
    from_result(|| T::attach_mcast(data, &gid).map(|()| 0))
}

/// # Safety
///
/// As [`attach_mcast`].
unsafe extern "C" fn detach_mcast<T: QpVerbs>(
    ibqp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: as in `attach_mcast`.
    let (data, gid) = unsafe { (qp_data::<T>(ibqp), *(*gid).raw.as_ref()) };
    from_result(|| T::detach_mcast(data, &gid).map(|()| 0))
}

#[kernel::prelude::kunit_tests(rvrdma_send_wr)]
mod kunit_send_wr {
    use super::{b, SendWrList};
    use crate::rvcore::wqe::{SendOpcode, UdDest};

    /// A list of the one WR `wr` on a UD QP, as `post_send` builds it.
    fn ud_list<'a>(wr: &b::ib_send_wr, bad: &'a mut *const b::ib_send_wr) -> SendWrList<'a> {
        SendWrList {
            next: wr,
            bad,
            datagram: true,
            ah: core::ptr::null(),
            reg: core::ptr::null(),
            inline: core::ptr::null(),
        }
    }

    /// A list of the one WR `wr` on a connected QP.
    fn rc_list<'a>(wr: &b::ib_send_wr, bad: &'a mut *const b::ib_send_wr) -> SendWrList<'a> {
        SendWrList {
            datagram: false,
            ..ud_list(wr, bad)
        }
    }

    /// An SGE for `buf`, with an L_Key that names nothing.
    fn sge(buf: &[u8]) -> b::ib_sge {
        b::ib_sge {
            addr: buf.as_ptr() as u64,
            length: buf.len() as u32,
            lkey: 0xdead_beef,
        }
    }

    /// A WR of `opcode` and `flags` over `sges`.
    fn wr_over(
        opcode: b::ib_wr_opcode,
        flags: b::ib_send_flags,
        sges: &mut [b::ib_sge],
    ) -> b::ib_send_wr {
        b::ib_send_wr {
            opcode,
            send_flags: flags as kernel::ffi::c_int,
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as kernel::ffi::c_int,
            ..Default::default()
        }
    }

    /// An inline Send's bytes are copied at post time, its SGEs' one after the other, whatever
    /// their L_Keys; data longer than the room, or at a NULL address, is refused.
    #[test]
    fn inline_data_is_copied_at_post_time() {
        let (a, c) = ([1u8, 2, 3], [4u8, 5, 6, 7, 8]);
        let mut sges = [sge(&a), sge(&[]), sge(&c)];
        let wr = wr_over(
            b::ib_wr_opcode_IB_WR_SEND,
            b::ib_send_flags_IB_SEND_INLINE,
            &mut sges,
        );
        let mut bad = core::ptr::null();
        let mut list = rc_list(&wr, &mut bad);
        assert!(list.next_wr().is_ok_and(|w| w.is_some()));
        let mut dst = [0u8; 10];
        assert_eq!(list.copy_inline(&mut dst), Ok(Some(8)));
        assert_eq!(dst, [1, 2, 3, 4, 5, 6, 7, 8, 0, 0]);
        assert_eq!(
            list.copy_inline(&mut dst[..7]),
            Err(kernel::error::code::EINVAL)
        );

        let mut sges = [b::ib_sge {
            addr: 0,
            length: 4,
            lkey: 0,
        }];
        let wr = wr_over(
            b::ib_wr_opcode_IB_WR_SEND,
            b::ib_send_flags_IB_SEND_INLINE,
            &mut sges,
        );
        let mut list = rc_list(&wr, &mut bad);
        assert!(list.next_wr().is_ok_and(|w| w.is_some()));
        assert_eq!(list.copy_inline(&mut dst), Err(kernel::error::code::EFAULT));
    }

    /// A WR without `IB_SEND_INLINE` has no inline data.
    #[test]
    fn a_wr_without_the_inline_flag_has_no_inline_data() {
        let a = [9u8; 4];
        let mut sges = [sge(&a)];
        let mut bad = core::ptr::null();
        let mut dst = [0u8; 8];
        let wr = wr_over(b::ib_wr_opcode_IB_WR_SEND, 0, &mut sges);
        let mut list = rc_list(&wr, &mut bad);
        assert!(list.next_wr().is_ok_and(|w| w.is_some()));
        assert_eq!(list.copy_inline(&mut dst), Ok(None));
        // Nothing copied.
        assert_eq!(dst, [0; 8]);
    }

    /// Only Sends and Writes carry data to inline: an RDMA Read's SGEs are where its answer
    /// lands, and a local operation moves no data. Either with `IB_SEND_INLINE` is refused,
    /// and is the bad WR.
    #[test]
    fn inline_on_a_read_or_a_local_operation_is_refused() {
        let a = [9u8; 8];
        let mut sges = [sge(&a)];
        let read = b::ib_rdma_wr {
            wr: wr_over(
                b::ib_wr_opcode_IB_WR_RDMA_READ,
                b::ib_send_flags_IB_SEND_INLINE,
                &mut sges,
            ),
            ..Default::default()
        };
        let inv = wr_over(
            b::ib_wr_opcode_IB_WR_LOCAL_INV,
            b::ib_send_flags_IB_SEND_INLINE,
            &mut [],
        );
        for wr in [&read.wr, &inv] {
            let mut bad = core::ptr::null();
            {
                let mut list = rc_list(wr, &mut bad);
                assert_eq!(list.next_wr().err(), Some(kernel::error::code::EINVAL));
            }
            assert!(core::ptr::eq(bad, wr));
        }
    }

    /// A fast registration on a UD QP is an `ib_reg_wr`: its MR pointer, where an `ib_ud_wr`
    /// has its AH, is not taken for an AH, and nothing past it is read as a destination.
    #[test]
    fn a_fast_registration_on_a_ud_qp_is_not_read_as_a_ud_wr() {
        let reg = b::ib_reg_wr {
            wr: b::ib_send_wr {
                opcode: b::ib_wr_opcode_IB_WR_REG_MR,
                ..Default::default()
            },
            mr: core::ptr::NonNull::dangling().as_ptr(),
            ..Default::default()
        };
        let mut bad = core::ptr::null();
        let mut list = ud_list(&reg.wr, &mut bad);
        let wr = list.next_wr().ok().flatten();
        assert!(wr.is_some_and(|w| w.opcode == SendOpcode::RegMr && w.ud == UdDest::EMPTY));
        assert!(list.ah.is_null());
        assert!(core::ptr::eq(list.reg, &reg));
    }

    /// A LOCAL_INV is a bare `ib_send_wr`: on a UD QP nothing past its end is read.
    #[test]
    fn a_local_invalidate_on_a_ud_qp_reads_only_its_own_wr() {
        let mut wr = b::ib_send_wr {
            opcode: b::ib_wr_opcode_IB_WR_LOCAL_INV,
            ..Default::default()
        };
        // SAFETY: `invalidate_rkey` is the member a LOCAL_INV uses; any `u32` is valid.
        unsafe { *wr.ex.invalidate_rkey.as_mut() = 0x1234_5678 };
        let mut bad = core::ptr::null();
        let mut list = ud_list(&wr, &mut bad);
        let got = list.next_wr().ok().flatten();
        assert!(got.is_some_and(|w| w.opcode == SendOpcode::LocalInv
            && w.invalidate_rkey == 0x1234_5678
            && w.ud == UdDest::EMPTY));
        assert!(list.ah.is_null());
    }
}
