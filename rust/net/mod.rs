// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over the networking pieces rvrdma uses: net devices and their notifier,
//! socket buffers, the per-netns RoCEv2 UDP socket and the dispatch of what it receives, the
//! kernel's CRC-32, and RoCEv2 packet building and parsing.

pub mod backlog;
pub mod crc32;
pub mod fill;
mod kunit;
pub mod netdev;
pub mod notifier;
pub mod paged;
pub mod roce;
pub mod skb;
pub mod tx;
pub mod udp_tunnel;

use kernel::prelude::*;

/// The kernel error for a positive errno constant from the bindings (e.g. `EADDRINUSE`), for
/// the codes `kernel::error::code` does not name.
pub(crate) fn errno(code: u32) -> Error {
    // Errno constants are small positive numbers, so the negation cannot overflow.
    Error::from_errno(-(code as c_int))
}
