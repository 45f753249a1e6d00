// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over ib_core: device allocation, registration and ops, and rdma link types.

pub mod device;
pub mod link;
