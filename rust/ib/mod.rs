// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over ib_core: device allocation, registration and ops, rdma link types and
//! the verbs objects (PD, CQ, MR, QP, SRQ, AH).

pub mod ah;
pub mod attrs;
pub mod copy_src;
pub mod cq;
pub mod device;
pub mod link;
pub mod mmap;
pub mod mr;
pub mod mw;
pub(crate) mod object;
pub mod odp;
pub mod pd;
pub mod qp;
pub mod queue;
pub mod registry;
pub mod srq;
pub mod stats;
pub mod uabi;
pub mod udata;
pub mod umem;
pub mod verbs;
