// SPDX-License-Identifier: GPL-2.0

//! KUnit suites that run the protocol core inside the kernel build (`rvrdma.ko`; the host
//! crate never compiles this directory): the core against the kernel's own primitives, and two
//! core QPs talking over an in-memory wire.

mod loopback;
mod primitives;
