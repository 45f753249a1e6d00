// SPDX-License-Identifier: GPL-2.0

//! The per-device state the datapath shares between verbs, work items, timers and the receive
//! path ([`super::receive`]): the port netdevs, the QP table, the MR table, the user AHs, the
//! multicast groups and the counters.

use super::counters::Counters;
use super::mcast::McastTable;
use super::mr_table::MrTable;
use super::qp::QpShared;
use super::rx_hold::{RxHolds, RxQp};
use crate::ib::attrs::PortState;
use crate::net::netdev::{NetDev, NetDevRef};
use crate::net::udp_tunnel;
use crate::rvcore::apm::PathInfo;
use crate::sync::irq_spinlock::IrqSpinLock;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use kernel::{prelude::*, sync::Arc};

/// The first QP number handed out (0 and 1 are the special QPs; rdma_rxe starts at 16 too).
pub const FIRST_QPN: u32 = 16;
/// The number of the GSI QP on the wire, on every port.
pub const GSI_QPN: u32 = 1;
/// Most QPs per device (the table is one slot and one receive count each: 20 bytes, 320 KiB a
/// device).
pub const MAX_QPS: usize = 16384;
/// GSI QPs per device: one a port.
const GSI_SLOTS: usize = 2;

/// An entry of the QP table.
enum QpSlot {
    /// The number is free.
    Free,
    /// Taken by a QP being created.
    Reserved,
    /// A live QP.
    Used(Arc<QpShared>),
    /// Out of the table, its destroy not done: packets for it find no QP, and the number is
    /// not handed out yet.
    Dying,
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
    /// QPs by number.
    #[pin]
    qps: IrqSpinLock<QpTable>,
    /// The receive paths' holds on each QP of the table, by its index there
    /// ([`QpTable::index`]).
    rx_holds: RxHolds,
    /// User AHs by number (`ah_num - 1`): user datagram WQEs name their AH by number.
    #[pin]
    ahs: IrqSpinLock<KVec<Option<UserAh>>>,
    /// Multicast groups and the UD QPs attached to them.
    #[pin]
    pub mcast: McastTable,
    /// How many PDs, CQs, AHs and SRQs the device holds, against its limits.
    pub limits: super::limits::Limits,
    /// The `apm_bonding` switch (docs/apm-bonding.md).
    apm_bonding: AtomicBool,
    /// The `rx_spread` switch: a stream's bulk packets go to their QP's receive queue, which
    /// a work item drains on another CPU ([`super::qp`]).
    rx_spread: AtomicBool,
    /// The `tx_burst` switch: consecutive packets of an RC or UC QP leave as one UDP GSO packet
    /// ([`crate::net::tx::Burst`]).
    tx_burst: AtomicBool,
    /// The `tx_paged` switch: a payload in pinned user memory leaves by reference to its pages
    /// ([`crate::net::paged`]). Off by default: the receiver still makes such a packet linear,
    /// which costs more than the copy it spares the sender (docs/experiments.md).
    tx_paged: AtomicBool,
    /// Packets in the receive queues of all the device's QPs, against [`MAX_RX_QUEUED`].
    pub(crate) rx_queued: AtomicUsize,
}

/// Most packets the receive queues of one device's QPs hold together: past it, a packet of a
/// QP whose queue is empty is handled as it arrives, and one of a QP that holds packets joins
/// its queue, the receiving CPU then handling a batch of them (one more packet a CPU at most).
pub const MAX_RX_QUEUED: usize = 1024;

/// Most user AHs per device.
pub const MAX_USER_AHS: usize = 4096;

/// A user AH as datagram WQEs find it.
#[derive(Clone, Copy)]
pub struct UserAh {
    /// The AH's PD.
    pub pd_id: u32,
    /// The AH's address vector, as a path.
    pub path: PathInfo,
}

/// The QP table: QPs by number (`qpn - FIRST_QPN`), and each port's GSI QP (QP1: every port
/// has its own, under the same number).
struct QpTable {
    slots: KVec<QpSlot>,
    gsi: [QpSlot; GSI_SLOTS],
    /// Where the search for a free number starts: after the last one handed out, so that
    /// creating many QPs is not quadratic and a number just freed is not reused at once (a
    /// late packet of the old QP would find the new one).
    next: usize,
}

impl QpTable {
    /// Where `qpn` (for QP1, the GSI QP of `port`) is: the QP numbers' slots first, then the
    /// GSI QPs'.
    fn index(&self, qpn: u32, port: u8) -> Option<usize> {
        if qpn == GSI_QPN {
            let p = usize::from(port).checked_sub(1)?;
            return (p < self.gsi.len()).then(|| self.slots.len() + p);
        }
        let i = usize::try_from(qpn.checked_sub(FIRST_QPN)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    /// The slot at `i` ([`Self::index`]).
    fn at(&mut self, i: usize) -> Option<&mut QpSlot> {
        match i.checked_sub(self.slots.len()) {
            None => self.slots.get_mut(i),
            Some(p) => self.gsi.get_mut(p),
        }
    }

    /// The slot of `qpn` (for QP1, the GSI QP of `port`).
    fn slot(&mut self, qpn: u32, port: u8) -> Option<&mut QpSlot> {
        let i = self.index(qpn, port)?;
        self.at(i)
    }
}

impl DevShared {
    /// Creates the datapath state of a device on `ports`.
    pub fn new(ports: &[&NetDev], mrs: Arc<MrTable>) -> Result<Arc<Self>> {
        let mut table = KVec::with_capacity(MAX_QPS, GFP_KERNEL)?;
        for _ in 0..MAX_QPS {
            table.push(QpSlot::Free, GFP_KERNEL)?;
        }
        let mut ahs = KVec::with_capacity(MAX_USER_AHS, GFP_KERNEL)?;
        for _ in 0..MAX_USER_AHS {
            ahs.push(None, GFP_KERNEL)?;
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
                rx_holds: RxHolds::new(MAX_QPS + GSI_SLOTS)?,
                qps <- crate::new_irq_spinlock!(
                    QpTable {
                        slots: table,
                        gsi: [QpSlot::Free, QpSlot::Free],
                        next: 0,
                    },
                    "rvrdma_qp_table"
                ),
                ahs <- crate::new_irq_spinlock!(ahs, "rvrdma_ah_table"),
                mcast <- McastTable::new(),
                limits: super::limits::Limits::default(),
                apm_bonding: AtomicBool::new(false),
                rx_spread: AtomicBool::new(true),
                tx_burst: AtomicBool::new(true),
                tx_paged: AtomicBool::new(false),
                rx_queued: AtomicUsize::new(0),
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
            let n = t.slots.len();
            let start = t.next;
            let i = (0..n)
                .map(|k| (start + k) % n)
                .find(|&i| matches!(t.slots[i], QpSlot::Free))
                .ok_or(ENOMEM)?;
            t.slots[i] = QpSlot::Reserved;
            t.next = (i + 1) % n;
            i
        };
        let qpn = FIRST_QPN + u32::try_from(idx).map_err(|_| EINVAL)?;
        self.fill(qpn, 0, make(qpn))
    }

    /// Builds the GSI QP of `port` with `make` (it gets [`GSI_QPN`]) and adds it; `EBUSY` if the
    /// port has one.
    pub fn insert_gsi(
        &self,
        port: u8,
        make: impl FnOnce(u32) -> Result<Arc<QpShared>>,
    ) -> Result<Arc<QpShared>> {
        {
            let mut t = self.qps.lock();
            let slot = t.slot(GSI_QPN, port).ok_or(EINVAL)?;
            if !matches!(slot, QpSlot::Free) {
                return Err(EBUSY);
            }
            *slot = QpSlot::Reserved;
        }
        self.fill(GSI_QPN, port, make(GSI_QPN))
    }

    /// Puts what `make` gave into the reserved slot of `qpn` (on `port` for QP1), or frees it.
    fn fill(&self, qpn: u32, port: u8, made: Result<Arc<QpShared>>) -> Result<Arc<QpShared>> {
        let mut t = self.qps.lock();
        let slot = t.slot(qpn, port).ok_or(EINVAL)?;
        match made {
            Ok(qp) => {
                *slot = QpSlot::Used(qp.clone());
                Ok(qp)
            }
            Err(e) => {
                *slot = QpSlot::Free;
                Err(e)
            }
        }
    }

    /// Takes QP `qpn` (for QP1, the GSI QP of `port`) out of the table; returns it so the
    /// caller drops it outside the lock. Its number stays taken until [`Self::free_qpn`].
    pub fn remove_qp(&self, qpn: u32, port: u8) -> Option<Arc<QpShared>> {
        let mut t = self.qps.lock();
        let slot = t.slot(qpn, port)?;
        match core::mem::replace(slot, QpSlot::Dying) {
            QpSlot::Used(qp) => Some(qp),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Waits for the receive paths that found QP `qpn` (on `port` for QP1) before
    /// [`Self::remove_qp`] took it out, then frees its number. Process context (sleeps).
    pub fn free_qpn(&self, qpn: u32, port: u8) {
        let Some(i) = self.qps.lock().index(qpn, port) else {
            return;
        };
        self.rx_holds.wait(i);
        let mut t = self.qps.lock();
        if let Some(slot) = t.at(i) {
            if matches!(slot, QpSlot::Dying) {
                *slot = QpSlot::Free;
            }
        }
    }

    /// The QP a packet for `qpn` that arrived on `port` is for (QP1 is the port's GSI QP),
    /// held until the receive path drops it (its destroy waits for that).
    pub(crate) fn qp(&self, qpn: u32, port: u8) -> Option<RxQp<'_>> {
        let mut t = self.qps.lock();
        let i = t.index(qpn, port)?;
        match t.at(i) {
            Some(QpSlot::Used(qp)) => self.rx_holds.hold(i, qp),
            _ => None,
        }
    }

    /// Adds a user AH; returns its number (from 1). Any context (no allocation).
    pub fn insert_ah(&self, ah: UserAh) -> Result<u32> {
        let mut t = self.ahs.lock();
        let i = t.iter().position(|e| e.is_none()).ok_or(ENOMEM)?;
        t[i] = Some(ah);
        u32::try_from(i + 1).map_err(|_| EINVAL)
    }

    /// Removes user AH `ah_num`.
    pub fn remove_ah(&self, ah_num: u32) {
        let i = (ah_num as usize).wrapping_sub(1);
        if let Some(e) = self.ahs.lock().get_mut(i) {
            *e = None;
        }
    }

    /// User AH `ah_num`.
    pub fn ah(&self, ah_num: u32) -> Option<UserAh> {
        let i = (ah_num as usize).wrapping_sub(1);
        self.ahs.lock().get(i).copied().flatten()
    }

    /// Adds (`add`) or drops multicast group `gid` in the receive filters of the port netdevs.
    /// Process context.
    pub fn mc_filter(&self, gid: &[u8; 16], add: bool) -> Result {
        for (i, p) in self.ports.iter().enumerate() {
            if let Err(e) = p.mc_filter(gid, add) {
                if add {
                    for q in &self.ports[..i] {
                        let _ = q.mc_filter(gid, false);
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether the `apm_bonding` switch is on.
    pub fn apm_bonding(&self) -> bool {
        self.apm_bonding.load(Ordering::Relaxed)
    }

    /// Turns the `apm_bonding` switch on or off and tells every QP. Process context.
    pub fn set_apm_bonding(&self, on: bool) -> Result {
        self.apm_bonding.store(on, Ordering::Relaxed);
        self.ports_changed()
    }

    /// Whether the `rx_spread` switch is on.
    pub fn rx_spread(&self) -> bool {
        self.rx_spread.load(Ordering::Relaxed)
    }

    /// Turns the `rx_spread` switch on or off; packets already queued are still handled in
    /// order.
    pub fn set_rx_spread(&self, on: bool) {
        self.rx_spread.store(on, Ordering::Relaxed);
    }

    /// Whether the `tx_burst` switch is on.
    pub fn tx_burst(&self) -> bool {
        self.tx_burst.load(Ordering::Relaxed)
    }

    /// Turns the `tx_burst` switch on or off (packets queued meanwhile leave either way).
    pub fn set_tx_burst(&self, on: bool) {
        self.tx_burst.store(on, Ordering::Relaxed);
    }

    /// Whether the `tx_paged` switch is on.
    pub fn tx_paged(&self) -> bool {
        self.tx_paged.load(Ordering::Relaxed)
    }

    /// Turns the `tx_paged` switch on or off (for the packets built from then on).
    pub fn set_tx_paged(&self, on: bool) {
        self.tx_paged.store(on, Ordering::Relaxed);
    }

    /// What the bonding policy needs to know of the ports: which of the two are ACTIVE, or
    /// `None` while the switch is off or the device has one port.
    pub fn bonding_ports(&self) -> Option<[bool; 2]> {
        if !self.apm_bonding() || self.ports.len() < 2 {
            return None;
        }
        let active = |i: usize| {
            self.ports
                .get(i)
                .is_some_and(|p| p.ib_port_state() == PortState::Active)
        };
        Some([active(0), active(1)])
    }

    /// A port went up or down (or the switch changed): every connected QP hears of it, and
    /// with the switch on, migrates or re-arms as the bonding policy says. Process context.
    pub fn ports_changed(&self) -> Result {
        for qp in &self.qps_now()? {
            qp.ports_changed();
        }
        Ok(())
    }

    /// Port `port` came up: every QP whose paths leave through it without a valid route has
    /// its work item look them up. A netdev taken down released the routes through it, and the
    /// ones the QPs keep discard packets from then on; without this, the first packet of each
    /// QP after the link returns would be lost, costing a retry. Process context.
    pub fn port_up(&self, port: u8) -> Result {
        for qp in &self.qps_now()? {
            qp.port_came_up(port);
        }
        Ok(())
    }

    /// References to the QPs that exist now (those made meanwhile have their routes looked up
    /// as they connect). Process context: the list is allocated with the lock dropped.
    fn qps_now(&self) -> Result<KVec<Arc<QpShared>>> {
        let used = |s: &QpSlot| matches!(s, QpSlot::Used(_));
        let n = self.qps.lock().slots.iter().filter(|s| used(s)).count();
        let mut qps = KVec::with_capacity(n, GFP_KERNEL)?;
        let t = self.qps.lock();
        for s in t.slots.iter() {
            if let QpSlot::Used(qp) = s {
                if qps.push_within_capacity(qp.clone()).is_err() {
                    break;
                }
            }
        }
        Ok(qps)
    }

    /// Stops the receive path of this device: it no longer gets packets, and the ones being
    /// handled are done when this returns. Process context.
    pub fn shutdown(self: &Arc<Self>) {
        // It waits for the packets being handled: they are inside an RCU read-side section.
        udp_tunnel::unlisten(&**self);
    }

    /// What the device still counts as held, by kind: PDs, CQs, SRQs, AHs, user AH numbers,
    /// QPs, MRs and MWs. At the device's removal, after ib_core destroyed every object, any
    /// count here is an object some verb's failure path (or a destroy) never gave back.
    pub fn leftovers(&self) -> [usize; 8] {
        use super::limits::Res;
        let qps = {
            let t = self.qps.lock();
            Iterator::chain(t.slots.iter(), t.gsi.iter())
                .filter(|s| !matches!(s, QpSlot::Free))
                .count()
        };
        let ahs = self.ahs.lock().iter().filter(|a| a.is_some()).count();
        [
            self.limits.used(Res::Pd) as usize,
            self.limits.used(Res::Cq) as usize,
            self.limits.used(Res::Srq) as usize,
            self.limits.used(Res::Ah) as usize,
            ahs,
            qps,
            self.mrs.len(),
            self.mrs.mw_count(),
        ]
    }
}
