// SPDX-License-Identifier: GPL-2.0

//! Multicast groups: which UD QPs are attached to which multicast GID, so the receive path
//! can hand a packet for DestQP 0xFFFFFF to each of them (rdma_rxe's `rxe_mcast.c`, as a table).
//! Entries hold QP numbers, not QPs: ib_core refuses to destroy a QP that is still attached
//! (`ib_destroy_qp_user` answers `EBUSY` while `qp->usecnt` counts attachments), so a number
//! here always names the QP that attached.

use crate::sync::irq_spinlock::IrqSpinLock;
use kernel::prelude::*;

/// Most multicast groups per device.
pub const MAX_GROUPS: usize = 1024;
/// Most QPs attached to one group (rdma_rxe's limit).
pub const MAX_QP_ATTACH: usize = 56;

/// One group: its GID and the QPs attached to it.
struct Group {
    gid: [u8; 16],
    qpns: [u32; MAX_QP_ATTACH],
    len: usize,
}

impl Group {
    fn members(&self) -> &[u32] {
        &self.qpns[..self.len]
    }
}

/// What an attach or detach did to the group itself: the caller programs the port netdevs'
/// multicast filters when a group appears or goes.
#[derive(PartialEq, Eq)]
pub enum GroupChange {
    /// The group was created (attach) or removed (detach).
    Changed,
    /// The group existed before and still does.
    Same,
}

/// The multicast groups of a device.
#[pin_data]
pub struct McastTable {
    #[pin]
    groups: IrqSpinLock<KVec<Group>>,
}

impl McastTable {
    /// An empty table.
    pub fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            groups <- crate::new_irq_spinlock!(KVec::new(), "rvrdma_mcast_table"),
        })
    }

    /// Attaches QP `qpn` to group `gid`. Attaching twice is not an error (IBA 11.3.1: the
    /// QP stays attached once). `ENOMEM` past [`MAX_GROUPS`] or [`MAX_QP_ATTACH`].
    pub fn attach(&self, gid: &[u8; 16], qpn: u32) -> Result<GroupChange> {
        let mut t = self.groups.lock();
        if let Some(g) = t.iter_mut().find(|g| g.gid == *gid) {
            if g.members().contains(&qpn) {
                return Ok(GroupChange::Same);
            }
            let slot = g.qpns.get_mut(g.len).ok_or(ENOMEM)?;
            *slot = qpn;
            g.len += 1;
            return Ok(GroupChange::Same);
        }
        if t.len() >= MAX_GROUPS {
            return Err(ENOMEM);
        }
        let mut qpns = [0; MAX_QP_ATTACH];
        qpns[0] = qpn;
        t.push(
            Group {
                gid: *gid,
                qpns,
                len: 1,
            },
            GFP_ATOMIC,
        )?;
        Ok(GroupChange::Changed)
    }

    /// Detaches QP `qpn` from group `gid`; `EINVAL` if it is not attached.
    pub fn detach(&self, gid: &[u8; 16], qpn: u32) -> Result<GroupChange> {
        let mut t = self.groups.lock();
        let gi = t.iter().position(|g| g.gid == *gid).ok_or(EINVAL)?;
        let g = &mut t[gi];
        let i = g.members().iter().position(|&q| q == qpn).ok_or(EINVAL)?;
        g.len -= 1;
        g.qpns[i] = g.qpns[g.len];
        if g.len > 0 {
            return Ok(GroupChange::Same);
        }
        // `gi` was just found, so the removal cannot fail.
        let _ = t.remove(gi);
        Ok(GroupChange::Changed)
    }

    /// Copies the QPs attached to `gid` into `out`; returns how many.
    pub fn members(&self, gid: &[u8; 16], out: &mut [u32; MAX_QP_ATTACH]) -> usize {
        let t = self.groups.lock();
        match t.iter().find(|g| g.gid == *gid) {
            Some(g) => {
                out[..g.len].copy_from_slice(g.members());
                g.len
            }
            None => 0,
        }
    }
}
