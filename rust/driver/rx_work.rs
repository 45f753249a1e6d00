// SPDX-License-Identifier: GPL-2.0

//! The device's receive work item: bulk packets handed over by the receive path
//! ([`super::receive`]) are handled here, on whichever CPU the unbound workqueue picks, in the
//! order they arrived.

use super::counters::Counters;
use super::dev_shared::DevShared;
use crate::net::skb::{Skb, SkbQueue};
use crate::sync::{irq_spinlock::IrqSpinLock, rcu, workqueue};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{prelude::*, sync::Arc, workqueue::WorkItem};

/// Packets one run handles before it queues itself again (other work on the queue gets a turn).
const RX_WORK_BUDGET: usize = 64;
/// Most packets waiting for the work item; more are dropped (and counted), as a full receive
/// backlog drops them (`netdev_max_backlog` is 1000 too): a peer sending faster than the work
/// item can follow must not be able to fill memory.
const RX_WORK_MAX: usize = 1000;

/// The packets waiting for the receive work item.
#[pin_data]
pub struct RxWork {
    #[pin]
    queue: SkbQueue,
    /// Whether the work item owns the packet order: it is queued or running, and every packet
    /// that arrives queues behind the ones it holds. Cleared by the work item, under this lock,
    /// when it finds `queue` empty.
    #[pin]
    active: IrqSpinLock<bool>,
    /// The `bulk_rx_work` switch.
    enabled: AtomicBool,
}

impl RxWork {
    /// An empty queue; the switch is off (docs/benchmarks.md: it has not paid under TCG).
    pub fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(RxWork {
            queue <- SkbQueue::new(),
            active <- crate::new_irq_spinlock!(false, "rvrdma_rx_work"),
            enabled: AtomicBool::new(false),
        })
    }
}

impl DevShared {
    /// Whether the `bulk_rx_work` switch is on.
    pub fn bulk_rx_work(&self) -> bool {
        self.rx_work_state().enabled.load(Ordering::Relaxed)
    }

    /// Turns the `bulk_rx_work` switch on or off. Packets already handed over are still
    /// handled by the work item, in order.
    pub fn set_bulk_rx_work(&self, on: bool) {
        self.rx_work_state().enabled.store(on, Ordering::Relaxed);
    }

    /// Hands `skb` to the receive work item if it is `bulk` or the work item holds packets
    /// (which it must not overtake), or drops it when the work item holds too many; otherwise
    /// gives it back, to be handled now.
    pub fn rx_defer(self: &Arc<Self>, skb: Skb, bulk: bool) -> Option<Skb> {
        let rx = self.rx_work_state();
        let mut active = rx.active.lock();
        if !*active && !bulk {
            return Some(skb);
        }
        if rx.queue.len() >= RX_WORK_MAX {
            drop(active);
            Counters::inc(&self.counters.rx_work_drops);
            return None;
        }
        rx.queue.push(skb);
        if !*active {
            *active = true;
            drop(active);
            // Not queued while inactive, so this queues it.
            let _ = workqueue::queue().enqueue(self.clone());
        }
        None
    }

    /// Waits until the work item has handled every packet it was given. No packet may be handed
    /// over any more (the device no longer listens). Process context.
    pub fn rx_work_drain(&self) {
        loop {
            workqueue::flush_work::<_, 0>(self);
            if !*self.rx_work_state().active.lock() {
                return;
            }
        }
    }
}

impl WorkItem for DevShared {
    type Pointer = Arc<DevShared>;

    fn run(this: Arc<DevShared>) {
        let rx = this.rx_work_state();
        for _ in 0..RX_WORK_BUDGET {
            let skb = {
                let mut active = rx.active.lock();
                match rx.queue.pop() {
                    Some(skb) => skb,
                    None => {
                        *active = false;
                        return;
                    }
                }
            };
            // Still active: packets arriving meanwhile queue behind this one.
            Counters::inc(&this.counters.rx_work_pkts);
            rcu::with_bh_disabled(|| super::receive::packet(&this, skb));
        }
        // Still active, and not queued while running: this queues it again.
        let _ = workqueue::queue().enqueue(this);
    }
}
