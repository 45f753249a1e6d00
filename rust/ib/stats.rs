// SPDX-License-Identifier: GPL-2.0

//! Hardware counters (`rdma statistic show`): `alloc_hw_port_stats` and `get_hw_stats`; and the
//! Performance Management class's port counters (`process_mad`), which ib_core shows in
//! `ports/N/counters/` (port_xmit_data, ...) and ib_mad answers PMA queries with.

use super::device::{Device, IbDriver};
use crate::bindings as b;
use kernel::prelude::*;

/// One counter's descriptor (`struct rdma_stat_desc`), usable in a `static`.
#[repr(transparent)]
pub struct StatDesc(b::rdma_stat_desc);

// SAFETY: the descriptor only points at a `'static` C string; ib_core only reads it.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter named `name`.
    // `CStr::as_char_ptr` is not a `const fn`; the cast gives the same pointer.
    #[allow(clippy::disallowed_methods)]
    pub const fn new(name: &'static core::ffi::CStr) -> Self {
        Self(b::rdma_stat_desc {
            name: name.as_ptr().cast(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }
}

/// A port's traffic as the PortCountersExtended attribute reports it (IBA 16.1.4.11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmaCounters {
    /// Bytes transmitted (reported in units of 4 bytes, as PortXmitData is).
    pub xmit_bytes: u64,
    /// Bytes received (reported in units of 4 bytes).
    pub rcv_bytes: u64,
    /// Packets transmitted.
    pub xmit_packets: u64,
    /// Packets received.
    pub rcv_packets: u64,
}

/// The counter verbs of a driver.
pub trait StatsVerbs: IbDriver {
    /// The counters of every port, in [`StatsVerbs::read_stats`] order.
    fn stat_descs() -> &'static [StatDesc];
    /// Reads port `port`'s counters into `values` (as many as there are descriptors).
    fn read_stats(dev: &Device<Self>, port: u32, values: &mut [u64]);
    /// Port `port`'s PMA counters; `None` for a port the device does not have.
    fn pma_counters(dev: &Device<Self>, port: u32) -> Option<PmaCounters>;
}

/// Fills the counter entries of an ops table.
pub(crate) fn install<T: StatsVerbs>(ops: &mut b::ib_device_ops) {
    ops.alloc_hw_port_stats = Some(alloc_hw_port_stats::<T>);
    ops.get_hw_stats = Some(get_hw_stats::<T>);
    ops.process_mad = Some(process_mad::<T>);
}

/// # Safety
///
/// ib_core callback on one of our devices.
unsafe extern "C" fn alloc_hw_port_stats<T: StatsVerbs>(
    _ibdev: *mut b::ib_device,
    _port: u32,
) -> *mut b::rdma_hw_stats {
    let descs = T::stat_descs();
    // SAFETY: `descs` is a `'static` array of `rdma_stat_desc` (`StatDesc` is transparent);
    // ib_core keeps the pointer for the life of the stats struct.
    unsafe {
        b::rdma_alloc_hw_stats_struct(
            descs.as_ptr().cast(),
            descs.len() as c_int,
            b::RDMA_HW_STATS_DEFAULT_LIFESPAN as kernel::ffi::c_ulong,
        )
    }
}

/// # Safety
///
/// ib_core callback on one of our devices; `stats` was allocated by `alloc_hw_port_stats`.
unsafe extern "C" fn get_hw_stats<T: StatsVerbs>(
    ibdev: *mut b::ib_device,
    stats: *mut b::rdma_hw_stats,
    port: u32,
    _index: c_int,
) -> c_int {
    if stats.is_null() || port == 0 {
        return -(b::EINVAL as c_int);
    }
    let n = T::stat_descs().len();
    // SAFETY: `stats` holds `num_counters == n` values (allocated above), and ib_core holds
    // its lock while we fill them.
    let values = unsafe { core::slice::from_raw_parts_mut((*stats).value.as_mut_ptr(), n) };
    // SAFETY: the device is ours and live.
    T::read_stats(unsafe { Device::from_raw(ibdev) }, port, values);
    n as c_int
}

// PMA attributes and the ClassPortInfo capability bit (include/rdma/ib_pma.h), host order.
const PMA_CLASS_PORT_INFO: u16 = 0x0001;
const PMA_PORT_COUNTERS: u16 = 0x0012;
const PMA_PORT_COUNTERS_EXT: u16 = 0x001d;
const PMA_CLASS_CAP_EXT_WIDTH: u16 = 1 << 9;
/// Where a PMA MAD's attribute data starts in `ib_mad::data` (after 40 reserved bytes).
const PMA_DATA: usize = 40;

/// The attribute data of a reply to a PMA Get of `attr_id` on `port`, or `None` when the
/// attribute is not supported.
fn pma_reply(attr_id: u16, port_select: u8, c: &PmaCounters, out: &mut [u8]) -> Option<()> {
    match attr_id {
        // ClassPortInfo: CapabilityMask (bytes 2..4) says the extended counters are there.
        PMA_CLASS_PORT_INFO => out
            .get_mut(2..4)?
            .copy_from_slice(&PMA_CLASS_CAP_EXT_WIDTH.to_be_bytes()),
        // PortCounters: nothing of it is counted (no link errors on a virtual link); all zero.
        PMA_PORT_COUNTERS => *out.get_mut(1)? = port_select,
        // PortCountersExtended: PortSelect at 1, then from byte 8 the 64-bit data and packet
        // counters (data in units of 4 bytes).
        PMA_PORT_COUNTERS_EXT => {
            *out.get_mut(1)? = port_select;
            let vals = [
                c.xmit_bytes >> 2,
                c.rcv_bytes >> 2,
                c.xmit_packets,
                c.rcv_packets,
            ];
            for (i, v) in vals.iter().enumerate() {
                out.get_mut(8 + 8 * i..16 + 8 * i)?
                    .copy_from_slice(&v.to_be_bytes());
            }
        }
        _ => return None,
    }
    Some(())
}

/// # Safety
///
/// ib_core callback on one of our devices: `in_mad` and `out_mad` point to whole MADs (ib_core's
/// sysfs counters and ib_mad, which first offers every MAD received on QP1 here).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn process_mad<T: StatsVerbs>(
    ibdev: *mut b::ib_device,
    _flags: c_int,
    port: u32,
    _in_wc: *const b::ib_wc,
    _in_grh: *const b::ib_grh,
    in_mad: *const b::ib_mad,
    out_mad: *mut b::ib_mad,
    _out_mad_size: *mut usize,
    _out_mad_pkey_index: *mut u16,
) -> c_int {
    const SUCCESS: c_int = b::ib_mad_result_IB_MAD_RESULT_SUCCESS as c_int;
    const REPLY: c_int = b::ib_mad_result_IB_MAD_RESULT_REPLY as c_int;
    if in_mad.is_null() || out_mad.is_null() {
        return b::ib_mad_result_IB_MAD_RESULT_FAILURE as c_int;
    }
    // SAFETY: by the function's contract both point to whole MADs, the output one ours to write.
    let (inp, out) = unsafe { (&*in_mad, &mut *out_mad) };
    let hdr = &inp.mad_hdr;
    if u32::from(hdr.mgmt_class) != b::IB_MGMT_CLASS_PERF_MGMT
        || u32::from(hdr.method) != b::IB_MGMT_METHOD_GET
    {
        // Not a PMA query (CM, SIDR, ... MADs): ib_mad goes on with it.
        return SUCCESS;
    }
    // SAFETY: the device is ours and live.
    let Some(c) = T::pma_counters(unsafe { Device::from_raw(ibdev) }, port) else {
        return b::ib_mad_result_IB_MAD_RESULT_FAILURE as c_int;
    };
    *out = b::ib_mad::default();
    out.mad_hdr = b::ib_mad_hdr {
        base_version: hdr.base_version,
        mgmt_class: hdr.mgmt_class,
        class_version: hdr.class_version,
        method: b::IB_MGMT_METHOD_GET_RESP as u8,
        status: 0,
        class_specific: hdr.class_specific,
        tid: hdr.tid,
        attr_id: hdr.attr_id,
        resv: hdr.resv,
        attr_mod: hdr.attr_mod,
    };
    match pma_reply(
        u16::from_be(hdr.attr_id),
        inp.data[PMA_DATA + 1],
        &c,
        &mut out.data[PMA_DATA..],
    ) {
        Some(()) => SUCCESS | REPLY,
        None => {
            out.mad_hdr.status = (b::IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB as u16).to_be();
            SUCCESS | REPLY
        }
    }
}
