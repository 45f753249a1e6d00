// SPDX-License-Identifier: GPL-2.0

//! Hardware counters (`rdma statistic show`): `alloc_hw_port_stats` and `get_hw_stats`.

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

/// The counter verbs of a driver.
pub trait StatsVerbs: IbDriver {
    /// The counters of every port, in [`StatsVerbs::read_stats`] order.
    fn stat_descs() -> &'static [StatDesc];
    /// Reads port `port`'s counters into `values` (as many as there are descriptors).
    fn read_stats(dev: &Device<Self>, port: u32, values: &mut [u64]);
}

/// Fills the counter entries of an ops table.
pub(crate) fn install<T: StatsVerbs>(ops: &mut b::ib_device_ops) {
    ops.alloc_hw_port_stats = Some(alloc_hw_port_stats::<T>);
    ops.get_hw_stats = Some(get_hw_stats::<T>);
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
