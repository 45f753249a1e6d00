// SPDX-License-Identifier: GPL-2.0

//! Conversions between ib_core's QP attributes (`struct ib_qp_attr`, `ib_qp_attr_mask`) and the
//! protocol core's [`QpAttrs`] / [`AttrMask`] (whose bits and enum values equal the kernel's).

use crate::bindings as b;
use crate::ib::qp::{fill_ah_attr, ModifyAttr, PathAttr};
use crate::rvcore::apm::{MigState, PathInfo};
use crate::rvcore::qp::QpAttrs;
use crate::rvcore::qp_state::{AttrMask, QpState};
use kernel::prelude::*;

/// The only P_Key of an rvrdma port.
pub const DEFAULT_PKEY: u16 = 0xffff;

fn qp_state(v: u32) -> Result<QpState> {
    QpState::ALL
        .iter()
        .copied()
        .find(|s| *s as u32 == v)
        .ok_or(EINVAL)
}

fn mig_state(v: u32) -> Result<MigState> {
    match v {
        0 => Ok(MigState::Migrated),
        1 => Ok(MigState::Rearm),
        2 => Ok(MigState::Armed),
        _ => Err(EINVAL),
    }
}

/// A core path from a resolved address vector; `timeout` is the local ACK timeout of that path.
pub fn path_info(p: &PathAttr, timeout: u8, pkey_index: u16) -> PathInfo {
    PathInfo {
        port_num: u8::try_from(p.port_num).unwrap_or(0),
        sgid_index: p.sgid_index,
        sgid: p.sgid,
        dgid: p.dgid,
        pkey_index,
        timeout,
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        flow_label: p.flow_label,
        sl: p.sl,
        static_rate: p.static_rate,
    }
}

/// A resolved address vector back from a core path (for Query QP).
pub fn path_attr(p: &PathInfo, dmac: [u8; 6]) -> PathAttr {
    PathAttr {
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

/// Converts one Modify QP call. `current` supplies the fields the mask does not name (the
/// core reads only masked fields, but paths need their companion values).
pub fn to_core(m: &ModifyAttr<'_>, current: &QpAttrs) -> Result<(QpAttrs, AttrMask)> {
    let r = m.raw;
    let mask = m.mask;
    let has = |bit: u32| mask & bit != 0;
    let mut a = *current;
    if has(b::ib_qp_attr_mask_IB_QP_STATE) {
        a.qp_state = qp_state(r.qp_state)?;
    }
    if has(b::ib_qp_attr_mask_IB_QP_CUR_STATE) {
        a.cur_qp_state = qp_state(r.cur_qp_state)?;
    }
    if has(b::ib_qp_attr_mask_IB_QP_EN_SQD_ASYNC_NOTIFY) {
        a.en_sqd_async_notify = r.en_sqd_async_notify != 0;
    }
    if has(b::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS) {
        a.qp_access_flags = r.qp_access_flags as u32;
    }
    if has(b::ib_qp_attr_mask_IB_QP_PKEY_INDEX) {
        if r.pkey_index != 0 {
            return Err(EINVAL);
        }
        a.pkey = DEFAULT_PKEY;
    }
    if has(b::ib_qp_attr_mask_IB_QP_QKEY) {
        a.qkey = r.qkey;
    }
    if has(b::ib_qp_attr_mask_IB_QP_PATH_MTU) {
        a.path_mtu = u8::try_from(r.path_mtu).map_err(|_| EINVAL)?;
    }
    if has(b::ib_qp_attr_mask_IB_QP_TIMEOUT) {
        a.timeout = r.timeout;
    }
    if has(b::ib_qp_attr_mask_IB_QP_RETRY_CNT) {
        a.retry_cnt = r.retry_cnt;
    }
    if has(b::ib_qp_attr_mask_IB_QP_RNR_RETRY) {
        a.rnr_retry = r.rnr_retry;
    }
    if has(b::ib_qp_attr_mask_IB_QP_RQ_PSN) {
        a.rq_psn = r.rq_psn;
    }
    if has(b::ib_qp_attr_mask_IB_QP_SQ_PSN) {
        a.sq_psn = r.sq_psn;
    }
    if has(b::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = r.max_rd_atomic;
    }
    if has(b::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = r.max_dest_rd_atomic;
    }
    if has(b::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER) {
        a.min_rnr_timer = r.min_rnr_timer;
    }
    if has(b::ib_qp_attr_mask_IB_QP_PATH_MIG_STATE) {
        a.path_mig_state = mig_state(r.path_mig_state)?;
    }
    if has(b::ib_qp_attr_mask_IB_QP_DEST_QPN) {
        a.dest_qp_num = r.dest_qp_num;
    }
    if has(b::ib_qp_attr_mask_IB_QP_AV) {
        // RoCE needs a GRH: the address vector is the IP addresses.
        let p = m.path.as_ref().ok_or(EINVAL)?;
        let timeout = if has(b::ib_qp_attr_mask_IB_QP_TIMEOUT) {
            r.timeout
        } else {
            current.path.timeout
        };
        a.path = path_info(p, timeout, 0);
    }
    if has(b::ib_qp_attr_mask_IB_QP_PORT) {
        // The port is part of the address vector (`port_num` of `ah_attr`, checked by ib_core
        // against the device); alone it only selects the port for the path.
        a.path.port_num = u8::try_from(r.port_num).map_err(|_| EINVAL)?;
    }
    if has(b::ib_qp_attr_mask_IB_QP_TIMEOUT) {
        a.path.timeout = r.timeout;
    }
    if has(b::ib_qp_attr_mask_IB_QP_ALT_PATH) {
        let p = m.alt_path.as_ref().ok_or(EINVAL)?;
        if r.alt_pkey_index != 0 {
            return Err(EINVAL);
        }
        let mut alt = path_info(p, r.alt_timeout, 0);
        alt.port_num = u8::try_from(r.alt_port_num).map_err(|_| EINVAL)?;
        a.alt_path = alt;
    }
    Ok((a, AttrMask(mask)))
}

/// Fills Query QP's `ib_qp_attr` from the core's view and the address vectors' MACs.
pub fn from_core(a: &QpAttrs, dmac: [u8; 6], alt_dmac: [u8; 6], attr: &mut b::ib_qp_attr) {
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
        fill_ah_attr(&mut attr.ah_attr, &path_attr(&a.path, dmac));
    }
    if a.alt_path.port_num != 0 {
        fill_ah_attr(&mut attr.alt_ah_attr, &path_attr(&a.alt_path, alt_dmac));
    }
}
