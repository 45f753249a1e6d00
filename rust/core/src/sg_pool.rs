//! The scatter/gather lists of a work queue, kept apart from its slots.
//!
//! A slot holds a work request without its list, and the pool holds `room` elements for each
//! slot, where `room` is the most the QP accepts per WR (its `max_send_sge` or `max_recv_sge`).
//! A queue whose WRs carry one element then keeps one, not [`MAX_SGE`](crate::wqe::MAX_SGE): a
//! 255-slot queue keeps 4 KiB of elements instead of 32.

use crate::wqe::Sge;

/// Storage of scatter/gather elements: a `Vec<Sge>` on the host, the module's own in the kernel.
pub trait SgStore: core::ops::DerefMut<Target = [Sge]> {}

impl<T: core::ops::DerefMut<Target = [Sge]>> SgStore for T {}

/// Scatter/gather storage for the slots of one work queue (caller-provided).
#[derive(Debug)]
pub struct SgPool<G> {
    sges: G,
    room: usize,
}

impl<G: SgStore> SgPool<G> {
    /// Storage `sges` shared evenly by `slots` slots: each gets `sges.len() / slots` elements.
    pub fn new(sges: G, slots: usize) -> SgPool<G> {
        let room = sges.len().checked_div(slots).unwrap_or(0);
        SgPool { sges, room }
    }

    /// Elements a slot can hold.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Stores `list` as slot `slot`'s list; returns its length, or `None` (nothing stored) if it
    /// is longer than [`SgPool::room`] or the slot is out of range.
    pub(crate) fn put(&mut self, slot: usize, list: &[Sge]) -> Option<u8> {
        let n = u8::try_from(list.len()).ok()?;
        if list.len() > self.room {
            return None;
        }
        let start = slot.checked_mul(self.room)?;
        let dst = self.sges.get_mut(start..start.checked_add(list.len())?)?;
        dst.copy_from_slice(list);
        Some(n)
    }

    /// The first `n` elements stored for slot `slot` (fewer if `n` exceeds the room; none for a
    /// slot out of range).
    pub(crate) fn get(&self, slot: usize, n: u8) -> &[Sge] {
        let n = usize::from(n).min(self.room);
        let start = slot.saturating_mul(self.room);
        self.sges.get(start..start.saturating_add(n)).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(i: u64) -> Sge {
        Sge {
            addr: i,
            length: i as u32,
            lkey: 1,
        }
    }

    #[test]
    fn each_slot_keeps_its_own_list() {
        let mut buf = [Sge::default(); 6];
        let mut p = SgPool::new(&mut buf[..], 3);
        assert_eq!(p.room(), 2);
        assert_eq!(p.put(0, &[sge(1), sge(2)]), Some(2));
        assert_eq!(p.put(1, &[sge(3)]), Some(1));
        assert_eq!(p.put(2, &[]), Some(0));
        assert_eq!(p.get(0, 2), &[sge(1), sge(2)]);
        assert_eq!(p.get(1, 1), &[sge(3)]);
        assert_eq!(p.get(2, 0), &[]);
    }

    #[test]
    fn a_list_longer_than_the_room_is_refused_and_stores_nothing() {
        let mut buf = [Sge::default(); 4];
        let mut p = SgPool::new(&mut buf[..], 4);
        assert_eq!(p.put(0, &[sge(1), sge(2)]), None);
        assert_eq!(p.get(1, 1), &[Sge::default()], "the next slot is untouched");
        assert_eq!(p.put(4, &[sge(1)]), None, "no slot 4");
    }

    #[test]
    fn reads_stay_inside_the_slot_and_the_storage() {
        let mut buf = [sge(9); 4];
        let p = SgPool::new(&mut buf[..], 2);
        assert_eq!(
            p.get(0, 200).len(),
            2,
            "a count past the room reads only the room"
        );
        assert_eq!(p.get(2, 1), &[], "no slot 2");
        assert_eq!(SgPool::new(&mut buf[..], 0).room(), 0, "no slots");
    }
}
