// SPDX-License-Identifier: GPL-2.0

//! Synchronisation pieces the kernel crate lacks: an IRQ-safe spinlock and a private workqueue.

pub mod clock;
pub mod irq_spinlock;
pub mod rcu;
pub mod workqueue;
