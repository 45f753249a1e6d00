// SPDX-License-Identifier: GPL-2.0

//! rvrdma's driver code: safe Rust above the `ib` and `net` abstractions.
//!
//! No `unsafe` here (enforced below): every raw pointer, C structure and global that needs one
//! lives in [`crate::ib`], [`crate::net`] or [`crate::sync`].

#![deny(unsafe_code)]

pub mod ah;
pub mod counters;
pub mod cq;
pub mod datapath;
pub mod device;
pub mod link;
pub mod memory;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod qp_attr;
pub mod receive;
pub mod registry;
pub mod srq;
pub mod transport;
pub mod user_wqe;
