// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over the networking pieces rvrdma uses: net devices and their notifier.

pub mod netdev;
pub mod notifier;
