// SPDX-License-Identifier: GPL-2.0

//! rvrdma's driver code: safe Rust above the `ib` and `net` abstractions.
//!
//! No `unsafe` here (enforced below): every raw pointer, C structure and global that needs one
//! lives in [`crate::ib`], [`crate::net`] or [`crate::sync`].

#![deny(unsafe_code)]

pub mod ah;
pub mod counters;
pub mod cq;
pub mod dev_shared;
pub mod device;
mod held_payload;
mod kunit_mr_table;
pub mod limits;
pub mod link;
pub mod mcast;
pub mod mr;
mod mr_info_copy;
pub mod mr_table;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod receive;
pub mod registry;
mod rx_hold;
pub mod srq;
