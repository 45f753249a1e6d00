// SPDX-License-Identifier: GPL-2.0

//! Modify QP: ib_core's attributes ([`ModifyAttr`]) into the protocol core's [`QpAttrs`] /
//! [`AttrMask`], with rvrdma's rules for the attributes the core does not check (one P_Key,
//! ports and paths from the address vectors).

use crate::ib::qp::ModifyAttr;
use crate::rvcore::qp::QpAttrs;
use crate::rvcore::qp_state::AttrMask;
use kernel::prelude::*;

/// The only P_Key of an rvrdma port.
pub(super) const DEFAULT_PKEY: u16 = 0xffff;

/// Converts one Modify QP call. `current` supplies the fields the mask does not name (the
/// core reads only masked fields, but paths need their companion values).
pub(super) fn to_core(m: &ModifyAttr<'_>, current: &QpAttrs) -> Result<(QpAttrs, AttrMask)> {
    let mask = m.mask();
    let has = |bit: AttrMask| mask.contains(bit);
    let mut a = *current;
    if has(AttrMask::STATE) {
        a.qp_state = m.qp_state()?;
    }
    if has(AttrMask::CUR_STATE) {
        a.cur_qp_state = m.cur_qp_state()?;
    }
    if has(AttrMask::EN_SQD_ASYNC_NOTIFY) {
        a.en_sqd_async_notify = m.en_sqd_async_notify();
    }
    if has(AttrMask::ACCESS_FLAGS) {
        a.qp_access_flags = m.access_flags();
    }
    if has(AttrMask::PKEY_INDEX) {
        if m.pkey_index() != 0 {
            return Err(EINVAL);
        }
        a.pkey = DEFAULT_PKEY;
    }
    if has(AttrMask::QKEY) {
        a.qkey = m.qkey();
    }
    if has(AttrMask::PATH_MTU) {
        a.path_mtu = m.path_mtu()?;
    }
    if has(AttrMask::TIMEOUT) {
        a.timeout = m.timeout();
    }
    if has(AttrMask::RETRY_CNT) {
        a.retry_cnt = m.retry_cnt();
    }
    if has(AttrMask::RNR_RETRY) {
        a.rnr_retry = m.rnr_retry();
    }
    if has(AttrMask::RQ_PSN) {
        a.rq_psn = m.rq_psn();
    }
    if has(AttrMask::SQ_PSN) {
        a.sq_psn = m.sq_psn();
    }
    if has(AttrMask::MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = m.max_rd_atomic();
    }
    if has(AttrMask::MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = m.max_dest_rd_atomic();
    }
    if has(AttrMask::MIN_RNR_TIMER) {
        a.min_rnr_timer = m.min_rnr_timer();
    }
    if has(AttrMask::PATH_MIG_STATE) {
        a.path_mig_state = m.path_mig_state()?;
    }
    if has(AttrMask::DEST_QPN) {
        a.dest_qp_num = m.dest_qp_num();
    }
    if has(AttrMask::AV) {
        // RoCE needs a GRH: the address vector is the IP addresses.
        let p = m.path().ok_or(EINVAL)?;
        let timeout = if has(AttrMask::TIMEOUT) {
            m.timeout()
        } else {
            current.path.timeout
        };
        a.path = p.to_info(timeout, 0);
    }
    if has(AttrMask::PORT) {
        // The port is part of the address vector (`port_num` of `ah_attr`, checked by ib_core
        // against the device); alone it only selects the port for the path.
        a.path.port_num = m.port_num()?;
    }
    if has(AttrMask::TIMEOUT) {
        a.path.timeout = m.timeout();
    }
    if has(AttrMask::ALT_PATH) {
        let p = m.alt_path().ok_or(EINVAL)?;
        if m.alt_pkey_index() != 0 {
            return Err(EINVAL);
        }
        let mut alt = p.to_info(m.alt_timeout(), 0);
        alt.port_num = m.alt_port_num()?;
        a.alt_path = alt;
    }
    Ok((a, mask))
}
