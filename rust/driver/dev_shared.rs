// SPDX-License-Identifier: GPL-2.0

//! The per-device state the datapath shares between verbs, work items, timers and the receive
//! path ([`super::receive`]): the port netdevs, the QP table, the MR table and the counters.

use super::counters::Counters;
use super::mr_table::MrTable;
use super::qp::QpShared;
use crate::net::netdev::{NetDev, NetDevRef};
use crate::net::udp_tunnel;
use crate::sync::irq_spinlock::IrqSpinLock;
use kernel::{prelude::*, sync::Arc};

/// The first QP number handed out (0 and 1 are the special QPs; rdma_rxe starts at 16 too).
pub const FIRST_QPN: u32 = 16;
/// Most QPs per device.
pub const MAX_QPS: usize = 4096;

/// An entry of the QP table.
enum QpSlot {
    /// The number is free.
    Free,
    /// Taken by a QP being created.
    Reserved,
    /// A live QP.
    Used(Arc<QpShared>),
}

/// State shared by a device's datapath.
#[pin_data]
pub struct DevShared {
    /// Port net devices (port 1 first), held for the device's life.
    pub ports: KVec<NetDevRef>,
    /// Memory regions.
    pub mrs: Arc<MrTable>,
    /// Counters for `rdma statistic`.
    pub counters: Counters,
    /// QPs by number (`qpn - FIRST_QPN`).
    #[pin]
    qps: IrqSpinLock<KVec<QpSlot>>,
}

impl DevShared {
    /// Creates the datapath state of a device on `ports`.
    pub fn new(ports: &[&NetDev], mrs: Arc<MrTable>) -> Result<Arc<Self>> {
        let mut table = KVec::with_capacity(MAX_QPS, GFP_KERNEL)?;
        for _ in 0..MAX_QPS {
            table.push(QpSlot::Free, GFP_KERNEL)?;
        }
        let mut held = KVec::with_capacity(ports.len(), GFP_KERNEL)?;
        for p in ports {
            held.push(p.hold(), GFP_KERNEL)?;
        }
        Arc::pin_init(
            try_pin_init!(Self {
                ports: held,
                mrs,
                counters: Counters::default(),
                qps <- crate::new_irq_spinlock!(table, "rvrdma_qp_table"),
            }),
            GFP_KERNEL,
        )
    }

    /// The net device of port `port` (1-based).
    pub fn port_netdev(&self, port: u8) -> Option<&NetDev> {
        let i = usize::from(port).checked_sub(1)?;
        self.ports.get(i).map(|n| &**n)
    }

    /// Builds a QP with `make` under a free QP number and adds it to the table.
    pub fn insert_qp(
        &self,
        make: impl FnOnce(u32) -> Result<Arc<QpShared>>,
    ) -> Result<Arc<QpShared>> {
        let idx = {
            let mut t = self.qps.lock();
            let i = t
                .iter()
                .position(|e| matches!(e, QpSlot::Free))
                .ok_or(ENOMEM)?;
            t[i] = QpSlot::Reserved;
            i
        };
        let qpn = FIRST_QPN + u32::try_from(idx).map_err(|_| EINVAL)?;
        let made = make(qpn);
        let mut t = self.qps.lock();
        match made {
            Ok(qp) => {
                t[idx] = QpSlot::Used(qp.clone());
                Ok(qp)
            }
            Err(e) => {
                t[idx] = QpSlot::Free;
                Err(e)
            }
        }
    }

    /// Removes QP `qpn` from the table; returns it so the caller drops it outside the lock.
    pub fn remove_qp(&self, qpn: u32) -> Option<Arc<QpShared>> {
        let i = usize::try_from(qpn.checked_sub(FIRST_QPN)?).ok()?;
        let mut t = self.qps.lock();
        let slot = t.get_mut(i)?;
        match core::mem::replace(slot, QpSlot::Free) {
            QpSlot::Used(qp) => Some(qp),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// The QP with number `qpn`.
    pub fn qp(&self, qpn: u32) -> Option<Arc<QpShared>> {
        let i = usize::try_from(qpn.checked_sub(FIRST_QPN)?).ok()?;
        let t = self.qps.lock();
        match t.get(i) {
            Some(QpSlot::Used(qp)) => Some(qp.clone()),
            _ => None,
        }
    }

    /// Stops the receive path of this device: it no longer gets packets, and the ones being
    /// handled are done when this returns. Process context.
    pub fn shutdown(self: &Arc<Self>) {
        udp_tunnel::unlisten(&**self);
        // Packets are handled inside the UDP layer's RCU read-side section.
        crate::sync::rcu::synchronize();
    }
}
