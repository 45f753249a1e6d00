// SPDX-License-Identifier: GPL-2.0

//! KUnit suite: MR keys and bounds, the MR table, and the QP memory checks on fast-registration
//! MRs (REG_MR, LOCAL_INV, Send with Invalidate) and the inline area.

#[kernel::prelude::kunit_tests(rvrdma_mr)]
mod tests {
    use crate::driver::mr_table::{
        in_range, key_index, key_may_replace, make_key, MrInfo, MrMem, MrState, MrTable, OdpFault,
        QpMemory, RvrMr, ACCESS_REMOTE, INLINE_LKEY, MAX_MR_INDEX,
    };
    use crate::ib::mr::PageList;
    use crate::ib::umem::{check_range, for_each_block};
    use crate::rvcore::memory::{MemError, Memory, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ};
    use crate::rvcore::wqe::{RegMrParams, Sge};
    use kernel::{prelude::*, sync::Arc};

    /// Keys: index in the high 24 bits, the byte below; REG_MR may change only the byte.
    #[test]
    fn keys() {
        assert_eq!(make_key(1, 0xab), 0x1ab);
        assert_eq!(key_index(make_key(MAX_MR_INDEX, 0xff)), MAX_MR_INDEX);
        assert!(key_may_replace(0x1234_56ab, 0x1234_5600));
        assert!(!key_may_replace(0x1234_56ab, 0x1234_57ab));
    }

    /// Bounds are inclusive of the last byte, exclusive after it, and overflow-safe.
    #[test]
    fn bounds() {
        assert!(in_range(0x1000, 0x100, 0x1000, 0x100));
        assert!(in_range(0x1000, 0x100, 0x10ff, 1));
        assert!(in_range(0x1000, 0x100, 0x1100, 0));
        assert!(!in_range(0x1000, 0x100, 0x10ff, 2));
        assert!(!in_range(0x1000, 0x100, 0xfff, 1));
        assert!(!in_range(0x1000, 0x100, 0x1101, 0));
        assert!(!in_range(u64::MAX - 4, 4, u64::MAX - 1, u64::MAX));
        assert!(!in_range(0, u64::MAX, u64::MAX, 2));
        assert!(check_range(0, 8, 8).is_ok());
        assert!(check_range(1, 8, 8).is_err());
        assert!(check_range(u64::MAX, 2, 8).is_err());
    }

    /// A failed on-demand-paging fault-in fails later accesses to the same MR's bytes only.
    #[test]
    fn odp_fault_overlaps() {
        let f = |key, pos, len| OdpFault {
            key,
            pos,
            len,
            write: false,
        };
        let a = f(0x1ab, 0x1000, 0x100);
        assert!(a.overlaps(&f(0x1ab, 0x10ff, 1)));
        assert!(a.overlaps(&f(0x1ab, 0, 0x1001)));
        assert!(!a.overlaps(&f(0x1ab, 0x1100, 8)));
        assert!(!a.overlaps(&f(0x1ab, 0, 0x1000)));
        assert!(!a.overlaps(&f(0x2ab, 0x1000, 0x100)));
        assert!(f(0x1ab, u64::MAX - 1, 8).overlaps(&f(0x1ab, u64::MAX - 1, 1)));
    }

    /// Chunks never cross a block boundary and cover the range exactly.
    #[test]
    fn chunks() -> Result {
        let mut seen = KVec::new();
        for_each_block(4090, 8200, 4096, |i, off, done, len| {
            seen.push((i, off, done, len), GFP_KERNEL)?;
            Ok(())
        })?;
        assert_eq!(
            &seen[..],
            &[
                (0, 4090, 0, 6),
                (1, 0, 6, 4096),
                (2, 0, 4102, 4096),
                (3, 0, 8198, 2)
            ]
        );
        Ok(())
    }

    fn fast_mr(table: &MrTable, pd_id: u32) -> Result<Arc<RvrMr>> {
        table.insert(|index, key| {
            RvrMr::new(
                index,
                pd_id,
                MrMem::Fast(PageList::new(4)?),
                MrInfo {
                    key,
                    access: ACCESS_REMOTE,
                    iova: 0,
                    length: 0,
                    state: MrState::Free,
                },
            )
        })
    }

    /// The table hands out distinct non-zero indices, finds MRs by key, forgets removed ones.
    #[test]
    fn table() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let a = fast_mr(&table, 1)?;
        let b = fast_mr(&table, 1)?;
        assert!(a.index() != 0 && b.index() != 0 && a.index() != b.index());
        assert_eq!(table.len(), 2);
        let ka = a.info().key;
        assert!(table.lookup(ka).is_some());
        assert!(table
            .lookup(key_index(ka) << 8 | ((ka + 1) & 0xff))
            .is_none());
        assert!(table.remove(a.index()).is_some());
        assert!(table.lookup(ka).is_none());
        assert_eq!(table.len(), 1);
        // A failed creation releases its index.
        assert!(table.insert(|_, _| Err(ENOMEM)).is_err());
        assert_eq!(table.len(), 1);
        Ok(())
    }

    /// REG_MR needs a free MR of the same PD and the same index; the key then works, LOCAL_INV
    /// and Send with Invalidate free the MR again.
    #[test]
    fn fast_registration() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let mr = fast_mr(&table, 7)?;
        let old = mr.info().key;
        let new = (old & !0xff) | ((old + 1) & 0xff);
        let params = RegMrParams {
            key: new,
            iova: 0x5000,
            length: 0,
            access: ACCESS_REMOTE_READ,
            mr_handle: u64::from(mr.index()),
        };
        let inline = [0u8; 16];
        let mut other_pd = QpMemory::new(&table, 8, &inline);
        let mut mem = QpMemory::new(&table, 7, &inline);
        // Free: unusable.
        assert_eq!(mem.check_remote(old, 0, 0, 0), Err(MemError::BadKey));
        assert_eq!(other_pd.fast_register(&params), Err(MemError::OpFailed));
        let bad_index = RegMrParams {
            key: new + 0x100,
            ..params
        };
        assert_eq!(mem.fast_register(&bad_index), Err(MemError::OpFailed));
        // Nothing mapped: a non-empty registration is refused.
        let too_long = RegMrParams {
            length: 1,
            ..params
        };
        assert_eq!(mem.fast_register(&too_long), Err(MemError::OpFailed));
        assert_eq!(mem.fast_register(&params), Ok(()));
        assert_eq!(mem.fast_register(&params), Err(MemError::OpFailed));
        assert_eq!(mem.check_remote(new, 0x5000, 0, ACCESS_REMOTE_READ), Ok(()));
        assert_eq!(
            mem.check_remote(old, 0x5000, 0, ACCESS_REMOTE_READ),
            Err(MemError::BadKey)
        );
        assert_eq!(
            mem.check_remote(new, 0x5001, 0, ACCESS_REMOTE_READ),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            mem.check_remote(new, 0x5000, 1, ACCESS_REMOTE_READ),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            mem.check_remote(new, 0x5000, 0, ACCESS_LOCAL_WRITE),
            Err(MemError::NoAccess)
        );
        assert_eq!(
            other_pd.check_remote(new, 0x5000, 0, 0),
            Err(MemError::BadKey)
        );
        assert_eq!(mem.local_invalidate(old), Err(MemError::BadKey));
        assert_eq!(mem.local_invalidate(new), Ok(()));
        assert_eq!(mem.check_remote(new, 0x5000, 0, 0), Err(MemError::BadKey));
        assert_eq!(mem.fast_register(&params), Ok(()));
        assert_eq!(mem.invalidate_remote(new), Ok(()));
        assert_eq!(mem.check_remote(new, 0x5000, 0, 0), Err(MemError::BadKey));
        Ok(())
    }

    /// lkey 0 names the inline area: readable by offset, in bounds, never writable.
    #[test]
    fn inline_area() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let inline = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut mem = QpMemory::new(&table, 1, &inline);
        let sg = |addr, length| Sge {
            addr,
            length,
            lkey: INLINE_LKEY,
        };
        assert_eq!(mem.check_local(&[sg(2, 6)], 0), Ok(()));
        assert_eq!(mem.check_local(&[sg(2, 7)], 0), Err(MemError::BadKey));
        assert_eq!(
            mem.check_local(&[sg(0, 1)], ACCESS_LOCAL_WRITE),
            Err(MemError::BadKey)
        );
        let mut out = [0u8; 5];
        assert_eq!(mem.gather(&[sg(0, 2), sg(4, 4)], 1, &mut out), Ok(()));
        assert_eq!(out, [2, 5, 6, 7, 8]);
        assert_eq!(
            mem.gather(&[sg(0, 2)], 1, &mut out),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(mem.scatter(&[sg(0, 2)], 0, &[9]), Err(MemError::BadKey));
        // Unknown keys.
        let mr_sg = Sge {
            addr: 0,
            length: 1,
            lkey: 0x1234,
        };
        assert_eq!(mem.check_local(&[mr_sg], 0), Err(MemError::BadKey));
        Ok(())
    }
}
