// SPDX-License-Identifier: GPL-2.0

//! KUnit suite: MR keys and bounds, the MR table, and the QP memory checks on fast-registration
//! MRs (REG_MR, LOCAL_INV, Send with Invalidate), memory windows and the inline area.

#[kernel::prelude::kunit_tests(rvrdma_mr)]
mod tests {
    use crate::driver::mr_table::{
        in_range, key_index, key_may_replace, make_key, MrInfo, MrMem, MrState, MrTable, OdpFault,
        QpMemory, RvrMr, ACCESS_REMOTE, INLINE_LKEY, MAX_MR_INDEX,
    };
    use crate::driver::mw::RvrMw;
    use crate::ib::mr::PageList;
    use crate::ib::umem::{check_range, for_each_block};
    use crate::net::fill::Fill;
    use crate::rvcore::memory::{
        MemError, Memory, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
    };
    use crate::rvcore::mw::{BindMwParams, MwType, ACCESS_MW_BIND};
    use crate::rvcore::wqe::{RegMrParams, Sge};
    use core::mem::MaybeUninit;
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
        let mut other_pd = &QpMemory::new(&table, 8, 1, &inline);
        let mut mem = &QpMemory::new(&table, 7, 1, &inline);
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

    /// A valid MR of PD 7 over `[0x1000, 0x2000)` that windows may be bound to (its page list
    /// maps nothing: these checks move no bytes).
    fn bindable_mr(table: &MrTable) -> Result<Arc<RvrMr>> {
        table.insert(|index, key| {
            RvrMr::new(
                index,
                7,
                MrMem::Fast(PageList::new(1)?),
                MrInfo {
                    key,
                    access: ACCESS_LOCAL_WRITE | ACCESS_MW_BIND,
                    iova: 0x1000,
                    length: 0x1000,
                    state: MrState::Valid,
                },
            )
        })
    }

    /// A `QpMemory` keeps the MR it found last, yet every access through it is checked as a
    /// fresh lookup would be: a wrong key byte is refused, and so is an MR whose deregistration
    /// has begun, before and after the table forgets it; invalidation and re-registration are
    /// seen at once.
    #[test]
    fn last_mr_found_is_checked() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let a = bindable_mr(&table)?;
        let b = bindable_mr(&table)?;
        let inline = [0u8; 16];
        let mut mem = &QpMemory::new(&table, 7, 1, &inline);
        let sge = |lkey| Sge {
            addr: 0x1000,
            length: 0x10,
            lkey,
        };
        let (ka, kb) = (a.info().key, b.info().key);
        let wrong = (ka & !0xff) | ((ka + 1) & 0xff);
        for key in [ka, kb, ka] {
            assert_eq!(mem.check_local(&[sge(key)], ACCESS_LOCAL_WRITE), Ok(()));
        }
        assert_eq!(
            mem.check_local(&[sge(wrong)], ACCESS_LOCAL_WRITE),
            Err(MemError::BadKey)
        );
        assert_eq!(mem.check_local(&[sge(ka)], ACCESS_LOCAL_WRITE), Ok(()));
        assert_eq!(a.begin_dereg(), Ok(()));
        assert_eq!(
            mem.check_local(&[sge(ka)], ACCESS_LOCAL_WRITE),
            Err(MemError::BadKey)
        );
        drop(table.remove(a.index()));
        assert_eq!(
            mem.check_local(&[sge(ka)], ACCESS_LOCAL_WRITE),
            Err(MemError::BadKey)
        );
        assert_eq!(mem.check_local(&[sge(kb)], ACCESS_LOCAL_WRITE), Ok(()));
        // A fast-registration MR found last follows LOCAL_INV and a REG_MR to a new key byte.
        let f = fast_mr(&table, 7)?;
        let k1 = f.info().key;
        let k2 = (k1 & !0xff) | ((k1 + 1) & 0xff);
        let reg = |key| RegMrParams {
            key,
            iova: 0x5000,
            length: 0,
            access: ACCESS_REMOTE_READ,
            mr_handle: u64::from(f.index()),
        };
        let read =
            |mem: &mut &QpMemory<'_>, key| mem.check_remote(key, 0x5000, 0, ACCESS_REMOTE_READ);
        assert_eq!(mem.fast_register(&reg(k1)), Ok(()));
        assert_eq!(read(&mut mem, k1), Ok(()));
        assert_eq!(mem.local_invalidate(k1), Ok(()));
        assert_eq!(read(&mut mem, k1), Err(MemError::BadKey));
        assert_eq!(mem.fast_register(&reg(k2)), Ok(()));
        assert_eq!(read(&mut mem, k1), Err(MemError::BadKey));
        assert_eq!(read(&mut mem, k2), Ok(()));
        Ok(())
    }

    fn window(table: &MrTable, kind: MwType) -> Result<Arc<RvrMw>> {
        table.insert_mw(|index, key| RvrMw::new(index, kind, 7, key))
    }

    /// Windows share the key space with MRs: a key names one object, a window key is no L_Key
    /// and no MR key, and a window grants its own range and rights over its MR.
    #[test]
    fn windows_share_the_key_space() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let mr = bindable_mr(&table)?;
        let mw = window(&table, MwType::Type2)?;
        assert!(mw.index() != mr.index());
        assert_eq!((table.len(), table.mw_count()), (1, 1));
        let key = mw.window().key();
        assert!(table.lookup(key).is_none() && table.get(mw.index()).is_none());
        assert!(table.get_mw(mr.index()).is_none());
        let inline = [0u8; 16];
        let mut mem = &QpMemory::new(&table, 7, 0x11, &inline);
        let mut other_qp = &QpMemory::new(&table, 7, 0x12, &inline);
        let bind = BindMwParams {
            mw_rkey: key,
            rkey: (key & !0xff) | ((key + 1) & 0xff),
            mr_lkey: mr.info().key,
            addr: 0x1100,
            length: 0x200,
            access: ACCESS_REMOTE_READ,
        };
        // Unbound: nothing.
        assert_eq!(
            mem.check_remote(key, 0x1100, 1, ACCESS_REMOTE_READ),
            Err(MemError::BadKey)
        );
        assert_eq!(mem.bind_mw(&bind), Ok(()));
        let key = bind.rkey;
        assert_eq!(mw.window().key(), key);
        assert_eq!(mr.windows(), 1);
        assert_eq!(
            mem.check_remote(key, 0x1100, 0x200, ACCESS_REMOTE_READ),
            Ok(())
        );
        assert_eq!(
            mem.check_remote(key, 0x10ff, 2, ACCESS_REMOTE_READ),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            mem.check_remote(key, 0x1100, 8, ACCESS_REMOTE_WRITE),
            Err(MemError::NoAccess)
        );
        // The MR itself grants no remote read.
        assert_eq!(
            mem.check_remote(mr.info().key, 0x1100, 8, ACCESS_REMOTE_READ),
            Err(MemError::NoAccess)
        );
        // Type 2B: only the QP that bound it.
        assert_eq!(
            other_qp.check_remote(key, 0x1100, 1, ACCESS_REMOTE_READ),
            Err(MemError::BadKey)
        );
        let sge = Sge {
            addr: 0x1100,
            length: 8,
            lkey: key,
        };
        assert_eq!(mem.check_local(&[sge], 0), Err(MemError::BadKey));
        // Bound: the MR stays; invalidation frees the window and the MR.
        assert_eq!(mr.begin_dereg(), Err(EBUSY));
        assert_eq!(other_qp.local_invalidate(key), Err(MemError::BadKey));
        assert_eq!(mem.local_invalidate(key), Ok(()));
        assert_eq!(mr.windows(), 0);
        assert_eq!(
            mem.check_remote(key, 0x1100, 1, ACCESS_REMOTE_READ),
            Err(MemError::BadKey)
        );
        drop(table.remove(mw.index()));
        assert_eq!(table.mw_count(), 0);
        Ok(())
    }

    /// Destroying a QP unbinds its type 2 windows; an MR being deregistered takes no windows;
    /// a type 1 window rebinds and cannot be invalidated.
    #[test]
    fn window_lifetimes() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let mr = bindable_mr(&table)?;
        let w2 = window(&table, MwType::Type2)?;
        let w1 = window(&table, MwType::Type1)?;
        let inline = [0u8; 16];
        let mut mem = &QpMemory::new(&table, 7, 0x11, &inline);
        let bind = |key: u32| BindMwParams {
            mw_rkey: key,
            rkey: key,
            mr_lkey: mr.info().key,
            addr: 0x1000,
            length: 0x10,
            access: ACCESS_REMOTE_READ,
        };
        assert_eq!(mem.bind_mw(&bind(w2.window().key())), Ok(()));
        assert_eq!(mem.bind_mw(&bind(w1.window().key())), Ok(()));
        assert_eq!(mem.bind_mw(&bind(w1.window().key())), Ok(()));
        assert_eq!(mr.windows(), 2);
        assert_eq!(
            mem.local_invalidate(w1.window().key()),
            Err(MemError::OpFailed)
        );
        table.unbind_qp(0x12);
        assert_eq!(mr.windows(), 2);
        table.unbind_qp(0x11);
        assert_eq!(mr.windows(), 1);
        assert!(w2.window().bound().is_none());
        w1.unbind();
        assert_eq!(mr.windows(), 0);
        assert_eq!(mr.begin_dereg(), Ok(()));
        assert_eq!(
            mem.bind_mw(&bind(w2.window().key())),
            Err(MemError::OpFailed)
        );
        assert_eq!(mr.windows(), 0);
        Ok(())
    }

    /// lkey 0 names the inline area: readable by offset, in bounds, never writable.
    #[test]
    fn inline_area() -> Result {
        let table = Arc::pin_init(MrTable::new(), GFP_KERNEL)?;
        let inline = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut mem = &QpMemory::new(&table, 1, 1, &inline);
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
        let mut raw = [MaybeUninit::uninit(); 5];
        let mut out = Fill::new(&mut raw);
        assert_eq!(mem.gather(&[sg(0, 2), sg(4, 4)], 1, 5, &mut out), Ok(()));
        assert_eq!(out.into_init().as_deref(), Some(&[2u8, 5, 6, 7, 8][..]));
        let mut raw = [MaybeUninit::uninit(); 5];
        let mut out = Fill::new(&mut raw);
        assert_eq!(
            mem.gather(&[sg(0, 2)], 1, 5, &mut out),
            Err(MemError::OutOfBounds)
        );
        // A destination too short for what the list holds.
        let mut raw = [MaybeUninit::uninit(); 3];
        let mut out = Fill::new(&mut raw);
        assert_eq!(
            mem.gather(&[sg(0, 2), sg(4, 4)], 1, 5, &mut out),
            Err(MemError::OutOfBounds)
        );
        // A range within one SGE (the single-piece path), past SGEs it skips, an empty SGE
        // with an unknown key skipped wherever it lies (never looked up), and nothing at all.
        let empty = Sge {
            addr: 0,
            length: 0,
            lkey: 0x1234,
        };
        for (list, offset, len, want) in [
            (&[sg(0, 2), sg(4, 4)][..], 2, 3, &[5u8, 6, 7][..]),
            (&[sg(0, 2), sg(4, 4)][..], 3, 3, &[6, 7, 8][..]),
            (&[empty, sg(0, 2)][..], 0, 2, &[1, 2][..]),
            (&[sg(0, 2), empty, sg(4, 4)][..], 1, 5, &[2, 5, 6, 7, 8][..]),
            (&[sg(0, 2), empty][..], 2, 0, &[][..]),
        ] {
            let mut raw = [MaybeUninit::uninit(); 5];
            let mut out = Fill::new(&mut raw[..len]);
            assert_eq!(mem.gather(list, offset, len, &mut out), Ok(()));
            assert_eq!(out.into_init().as_deref(), Some(want));
        }
        assert_eq!(
            mem.scatter(&[sg(0, 2)], 0, (&[9u8]).into()),
            Err(MemError::BadKey)
        );
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
