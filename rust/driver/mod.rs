// SPDX-License-Identifier: GPL-2.0

//! rvrdma's driver code: safe Rust above the `ib` and `net` abstractions.

pub mod cq;
pub mod device;
pub mod link;
pub mod memory;
pub mod mr;
pub mod registry;
pub mod pd;
pub mod counters;
pub mod datapath;
pub mod qp;
pub mod qp_attr;
pub mod receive;
pub mod transport;
pub mod user_wqe;
pub mod srq;
