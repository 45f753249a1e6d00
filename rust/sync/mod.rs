// SPDX-License-Identifier: GPL-2.0

//! Synchronisation pieces the kernel crate lacks: an IRQ-safe spinlock, a private workqueue and
//! process-context stretches with bottom halves off.

pub mod bh;
pub mod clock;
pub mod irq_spinlock;
pub mod rcu;
pub mod sched;
pub mod workqueue;
