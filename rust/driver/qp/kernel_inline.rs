// SPDX-License-Identifier: GPL-2.0

//! Inline data of a kernel caller's send WRs (`IB_SEND_INLINE`): copied at post time, as the
//! caller may reuse its buffers once the post returns, into the QP's inline area at the place
//! of the send slot the WR takes (a user WQE's comes out of the ring the same way).

use crate::driver::mr_table::INLINE_LKEY;
use crate::rvcore::wqe::Sge;
use kernel::prelude::*;

/// Copies a WR's inline data with `copy` (`None`: the WR has none) to the place of send slot
/// `slot` in the QP's inline area `inline` (`max_inline` bytes a slot), and returns the one
/// SGE that names it there. `ENOMEM` when there is no slot (the queue is full: the post would
/// fail anyway, and every place holds the data of a WR still queued), `EINVAL` when the data
/// does not fit.
pub(crate) fn stage(
    slot: Option<usize>,
    inline: &mut [u8],
    max_inline: usize,
    copy: impl FnOnce(&mut [u8]) -> Result<Option<usize>>,
) -> Result<Option<Sge>> {
    let slot = slot.ok_or(ENOMEM)?;
    let start = slot.checked_mul(max_inline).ok_or(EINVAL)?;
    let end = start.checked_add(max_inline).ok_or(EINVAL)?;
    let place = inline.get_mut(start..end).ok_or(EINVAL)?;
    Ok(copy(place)?.map(|len| Sge {
        addr: start as u64,
        length: len as u32,
        lkey: INLINE_LKEY,
    }))
}

#[kernel::prelude::kunit_tests(rvrdma_kernel_inline)]
mod tests {
    use super::*;

    /// The data lands at its slot's place, nowhere else, and the SGE names that place.
    #[test]
    fn the_data_lands_at_its_slots_place() {
        let mut area = [0u8; 16];
        let sge = stage(Some(2), &mut area, 4, |dst| {
            dst[..3].copy_from_slice(&[7, 8, 9]);
            Ok(Some(3))
        });
        assert_eq!(
            sge,
            Ok(Some(Sge {
                addr: 8,
                length: 3,
                lkey: INLINE_LKEY
            }))
        );
        assert_eq!(area, [0, 0, 0, 0, 0, 0, 0, 0, 7, 8, 9, 0, 0, 0, 0, 0]);
    }

    /// The copy is offered exactly the slot's room.
    #[test]
    fn the_copy_gets_the_slots_room_only() {
        let mut area = [0u8; 16];
        let mut room = 0;
        let sge = stage(Some(3), &mut area, 4, |dst| {
            room = dst.len();
            Ok(None)
        });
        assert_eq!((sge, room), (Ok(None), 4));
    }

    /// No slot (a full queue), a slot past the area, or a copy that fails: an error, and
    /// nothing written.
    #[test]
    fn no_place_or_a_failed_copy_is_an_error() {
        let mut area = [0u8; 16];
        let mut called = false;
        let r = stage(None, &mut area, 4, |_| {
            called = true;
            Ok(Some(0))
        });
        assert_eq!((r, called), (Err(ENOMEM), false));
        assert_eq!(stage(Some(4), &mut area, 4, |_| Ok(Some(0))), Err(EINVAL));
        assert_eq!(stage(Some(1), &mut area, 4, |_| Err(EINVAL)), Err(EINVAL));
        assert_eq!(area, [0; 16]);
    }
}
