// SPDX-License-Identifier: GPL-2.0

//! Everything a driver implements to be an ib_core verbs provider, and the ops-table assembly.

use super::{
    ah::AhVerbs, cq::CqVerbs, device::IbDriver, mr::MrVerbs, mw::MwVerbs, pd::PdVerbs, qp::QpVerbs,
    srq::SrqVerbs, stats::StatsVerbs,
};
use crate::bindings as b;

/// The full set of verbs a registered driver provides.
pub trait Verbs:
    IbDriver + PdVerbs + CqVerbs + MrVerbs + MwVerbs + QpVerbs + SrqVerbs + AhVerbs + StatsVerbs
{
}

impl<T> Verbs for T where
    T: IbDriver + PdVerbs + CqVerbs + MrVerbs + MwVerbs + QpVerbs + SrqVerbs + AhVerbs + StatsVerbs
{
}

/// Fills the verb entries of an ops table for driver `T`.
pub(crate) fn install<T: Verbs>(ops: &mut b::ib_device_ops) {
    super::pd::install::<T>(ops);
    super::mr::install::<T>(ops);
    super::mw::install::<T>(ops);
    super::cq::install::<T>(ops);
    // Device-wide: the rings of every object are mapped through the same entries.
    super::mmap::install(ops);
    super::qp::install::<T>(ops);
    super::srq::install::<T>(ops);
    super::ah::install::<T>(ops);
    super::stats::install::<T>(ops);
}
