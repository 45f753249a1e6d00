// SPDX-License-Identifier: GPL-2.0

//! rvrdma's driver code: safe Rust above the `ib` and `net` abstractions.

pub mod cq;
pub mod device;
pub mod link;
pub mod registry;
pub mod pd;
