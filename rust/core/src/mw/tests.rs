//! The memory window rules, one test per rule (IBA 10.6.7 compliance statements where the spec
//! numbers them, otherwise rdma_rxe's behaviour).

use super::*;

const PD: u32 = 7;
const QP: QpRef = QpRef { pd: PD, qpn: 0x11 };
const OTHER_QP: QpRef = QpRef { pd: PD, qpn: 0x12 };
const KEY: u32 = 0x0004_2a17;
const MR_BASE: u64 = 0x1000;
const MR: MrFacts = MrFacts {
    pd: PD,
    access: ACCESS_LOCAL_WRITE | ACCESS_MW_BIND,
    iova: MR_BASE,
    length: 0x1000,
    valid: true,
};
const RW: u32 = ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;

fn bind(addr: u64, length: u64, access: u32) -> BindMwParams {
    BindMwParams {
        mw_rkey: KEY,
        rkey: KEY + 1,
        mr_lkey: 0x100,
        addr,
        length,
        access,
    }
}

fn bound(kind: MwType) -> Window {
    let mut w = Window::new(kind, PD, KEY);
    w.bind(&bind(MR_BASE + 0x100, 0x200, RW), QP, Some(&MR))
        .expect("bind");
    w
}

#[test]
fn alloc_type1_is_valid_but_grants_nothing_type2_is_free() {
    let w1 = Window::new(MwType::Type1, PD, KEY);
    assert_eq!(w1.state(), WindowState::Valid);
    assert_eq!(w1.bound(), None);
    assert_eq!(
        w1.resolve(KEY, QP, 0, 0, ACCESS_REMOTE_READ),
        Err(MemError::BadKey)
    );
    let w2 = Window::new(MwType::Type2, PD, KEY);
    assert_eq!(w2.state(), WindowState::Free);
    assert_eq!(w2.bound(), None);
}

#[test]
fn mw_type_from_kernel_values() {
    assert_eq!(MwType::from_u32(1), Some(MwType::Type1));
    assert_eq!(MwType::from_u32(2), Some(MwType::Type2));
    assert_eq!(MwType::from_u32(3), None);
    assert_eq!(MwType::from_u32(0), None);
}

#[test]
fn bind_takes_the_new_key_byte_range_and_rights() {
    for kind in [MwType::Type1, MwType::Type2] {
        let w = bound(kind);
        assert_eq!(w.key(), (KEY & !0xff) | ((KEY + 1) & 0xff));
        assert_eq!(w.bound(), Some((MR_BASE + 0x100, 0x200, RW)));
        // Only the low byte of the new key counts: the index stays the window's.
        let mut w = Window::new(kind, PD, KEY);
        let mut p = bind(MR_BASE, 0x10, RW);
        p.rkey = 0xdead_be99;
        w.bind(&p, QP, Some(&MR)).expect("bind");
        assert_eq!(w.key(), (KEY & !0xff) | 0x99);
    }
}

#[test]
fn bind_refuses_unsupported_access_bits() {
    let mut w = Window::new(MwType::Type2, PD, KEY);
    let before = w;
    // IB_ACCESS_ON_DEMAND (1 << 6) is not a window right.
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, RW | 1 << 6), QP, Some(&MR)),
        Err(BindError::UnsupportedAccess)
    );
    assert_eq!(w, before);
}

#[test]
fn bind_needs_the_current_window_key() {
    let mut w = Window::new(MwType::Type1, PD, KEY);
    let mut p = bind(MR_BASE, 0x10, RW);
    p.mw_rkey = KEY ^ 0x1;
    assert_eq!(w.bind(&p, QP, Some(&MR)), Err(BindError::WrongKey));
    // After a bind the old key no longer names the window.
    let mut w = bound(MwType::Type1);
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, RW), QP, Some(&MR)),
        Err(BindError::WrongKey)
    );
}

#[test]
fn c10_72_window_and_mr_must_be_in_the_qps_pd() {
    for kind in [MwType::Type1, MwType::Type2] {
        let mut w = Window::new(kind, PD, KEY);
        let other_pd = QpRef { pd: PD + 1, qpn: 1 };
        let mr_other = MrFacts { pd: PD + 1, ..MR };
        assert_eq!(
            w.bind(&bind(MR_BASE, 0x10, RW), other_pd, Some(&mr_other)),
            Err(BindError::WrongPd)
        );
        assert_eq!(
            w.bind(&bind(MR_BASE, 0x10, RW), QP, Some(&mr_other)),
            Err(BindError::WrongPd)
        );
        assert_eq!(w, Window::new(kind, PD, KEY));
    }
}

#[test]
fn o10_37_2_30_type2_binds_only_when_free_type1_rebinds() {
    let mut w2 = bound(MwType::Type2);
    let key = w2.key();
    let mut p = bind(MR_BASE, 0x10, RW);
    p.mw_rkey = key;
    assert_eq!(w2.bind(&p, QP, Some(&MR)), Err(BindError::NotFree));
    assert_eq!(w2.bound(), Some((MR_BASE + 0x100, 0x200, RW)));
    let mut w1 = bound(MwType::Type1);
    p.mw_rkey = w1.key();
    w1.bind(&p, QP, Some(&MR)).expect("rebind");
    assert_eq!(w1.bound(), Some((MR_BASE, 0x10, RW)));
}

#[test]
fn o10_37_2_40_type2_needs_an_mr_and_a_length() {
    let mut w = Window::new(MwType::Type2, PD, KEY);
    assert_eq!(
        w.bind(&bind(MR_BASE, 0, RW), QP, Some(&MR)),
        Err(BindError::Type2Empty)
    );
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, RW), QP, None),
        Err(BindError::MrInvalid)
    );
    assert_eq!(w.state(), WindowState::Free);
}

#[test]
fn type1_zero_length_bind_unbinds_without_an_mr() {
    let mut w = bound(MwType::Type1);
    let key = w.key();
    let mut p = bind(0, 0, 0);
    p.mw_rkey = key;
    p.rkey = key.wrapping_add(1);
    w.bind(&p, QP, None).expect("zero-length bind");
    assert_eq!(w.bound(), None);
    assert_eq!(
        w.resolve(w.key(), QP, MR_BASE + 0x100, 1, ACCESS_REMOTE_READ),
        Err(MemError::BadKey)
    );
}

#[test]
fn o10_36_2_2_type1_cannot_be_zero_based() {
    let mut w = Window::new(MwType::Type1, PD, KEY);
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, RW | ACCESS_ZERO_BASED), QP, Some(&MR)),
        Err(BindError::Type1ZeroBased)
    );
}

#[test]
fn bind_needs_a_valid_mr() {
    let mut w = Window::new(MwType::Type1, PD, KEY);
    let dead = MrFacts { valid: false, ..MR };
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, RW), QP, Some(&dead)),
        Err(BindError::MrInvalid)
    );
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, RW), QP, None),
        Err(BindError::MrInvalid)
    );
}

#[test]
fn c10_73_mr_needs_mw_bind_access() {
    let mut w = Window::new(MwType::Type2, PD, KEY);
    let no_bind = MrFacts {
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE,
        ..MR
    };
    assert_eq!(
        w.bind(&bind(MR_BASE, 0x10, ACCESS_REMOTE_READ), QP, Some(&no_bind)),
        Err(BindError::MrNoBind)
    );
}

#[test]
fn c10_74_remote_write_or_atomic_need_local_write_on_the_mr() {
    let read_only = MrFacts {
        access: ACCESS_MW_BIND,
        ..MR
    };
    for access in [ACCESS_REMOTE_WRITE, ACCESS_REMOTE_ATOMIC] {
        let mut w = Window::new(MwType::Type2, PD, KEY);
        assert_eq!(
            w.bind(&bind(MR_BASE, 0x10, access), QP, Some(&read_only)),
            Err(BindError::MrNoLocalWrite)
        );
    }
    // Remote read alone needs no local write; nor does the MR need remote rights itself.
    let mut w = Window::new(MwType::Type2, PD, KEY);
    w.bind(
        &bind(MR_BASE, 0x10, ACCESS_REMOTE_READ),
        QP,
        Some(&read_only),
    )
    .expect("read-only window");
}

#[test]
fn c10_75_window_must_lie_inside_the_mr() {
    let end = MR_BASE + MR.length;
    for (addr, len) in [
        (MR_BASE - 1, 0x10),
        (end - 0x10, 0x11),
        (end, 1),
        (u64::MAX, 2),
        (MR_BASE, u64::MAX),
    ] {
        let mut w = Window::new(MwType::Type2, PD, KEY);
        assert_eq!(
            w.bind(&bind(addr, len, RW), QP, Some(&MR)),
            Err(BindError::OutsideMr),
            "{addr:#x}+{len:#x}"
        );
    }
    let mut w = Window::new(MwType::Type2, PD, KEY);
    w.bind(&bind(MR_BASE, MR.length, RW), QP, Some(&MR))
        .expect("the whole MR");
}

#[test]
fn access_is_checked_against_the_window_not_the_mr() {
    let w = bound(MwType::Type1);
    let k = w.key();
    let start = MR_BASE + 0x100;
    assert_eq!(w.resolve(k, QP, start, 0x200, RW), Ok(start));
    assert_eq!(
        w.resolve(k, QP, start + 0x1ff, 1, ACCESS_REMOTE_WRITE),
        Ok(start + 0x1ff)
    );
    // Inside the MR, outside the window.
    assert_eq!(
        w.resolve(k, QP, start - 1, 1, ACCESS_REMOTE_READ),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        w.resolve(k, QP, start + 0x100, 0x101, ACCESS_REMOTE_READ),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        w.resolve(k, QP, u64::MAX, 2, ACCESS_REMOTE_READ),
        Err(MemError::OutOfBounds)
    );
    // The window grants no atomics, whatever the MR allows.
    assert_eq!(
        w.resolve(k, QP, start, 8, ACCESS_REMOTE_ATOMIC),
        Err(MemError::NoAccess)
    );
    // A read-only window refuses writes.
    let mut r = Window::new(MwType::Type1, PD, KEY);
    r.bind(&bind(start, 0x10, ACCESS_REMOTE_READ), QP, Some(&MR))
        .expect("bind");
    assert_eq!(
        r.resolve(r.key(), QP, start, 1, ACCESS_REMOTE_WRITE),
        Err(MemError::NoAccess)
    );
}

#[test]
fn access_needs_the_current_key_and_the_pd() {
    let w = bound(MwType::Type1);
    let start = MR_BASE + 0x100;
    assert_eq!(
        w.resolve(KEY, QP, start, 1, ACCESS_REMOTE_READ),
        Err(MemError::BadKey)
    );
    let other_pd = QpRef { pd: PD + 1, qpn: 9 };
    assert_eq!(
        w.resolve(w.key(), other_pd, start, 1, ACCESS_REMOTE_READ),
        Err(MemError::BadKey)
    );
    // Type 1: any QP of the PD.
    assert_eq!(
        w.resolve(w.key(), OTHER_QP, start, 1, ACCESS_REMOTE_READ),
        Ok(start)
    );
}

#[test]
fn type2b_window_is_reached_only_through_its_qp() {
    let w = bound(MwType::Type2);
    let start = MR_BASE + 0x100;
    assert_eq!(w.bound_qpn(), Some(QP.qpn));
    assert_eq!(
        w.resolve(w.key(), QP, start, 1, ACCESS_REMOTE_READ),
        Ok(start)
    );
    assert_eq!(
        w.resolve(w.key(), OTHER_QP, start, 1, ACCESS_REMOTE_READ),
        Err(MemError::BadKey)
    );
}

#[test]
fn zero_based_type2_window_is_addressed_from_zero() {
    let mut w = Window::new(MwType::Type2, PD, KEY);
    let start = MR_BASE + 0x100;
    w.bind(&bind(start, 0x200, RW | ACCESS_ZERO_BASED), QP, Some(&MR))
        .expect("bind");
    let k = w.key();
    assert_eq!(w.resolve(k, QP, 0, 0x200, RW), Ok(start));
    assert_eq!(
        w.resolve(k, QP, 0x1f8, 8, ACCESS_REMOTE_WRITE),
        Ok(start + 0x1f8)
    );
    assert_eq!(
        w.resolve(k, QP, 0x1f9, 8, ACCESS_REMOTE_WRITE),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(
        w.resolve(k, QP, start, 1, ACCESS_REMOTE_READ),
        Err(MemError::OutOfBounds)
    );
}

#[test]
fn invalidation_frees_a_type2_window_and_access_then_fails() {
    let mut w = bound(MwType::Type2);
    let k = w.key();
    w.invalidate(k, QP).expect("invalidate");
    assert_eq!(w.state(), WindowState::Free);
    assert_eq!(w.key(), k);
    assert_eq!(
        w.resolve(k, QP, MR_BASE + 0x100, 1, ACCESS_REMOTE_READ),
        Err(MemError::BadKey)
    );
    // Free again: it binds anew (with the key it has now).
    let mut p = bind(MR_BASE, 0x10, RW);
    p.mw_rkey = k;
    w.bind(&p, QP, Some(&MR))
        .expect("rebind after invalidation");
    // A second invalidation of a free window fails.
    let k = w.key();
    w.invalidate(k, QP).expect("invalidate");
    assert_eq!(w.invalidate(k, QP), Err(MemError::BadKey));
}

#[test]
fn invalidation_needs_the_key_pd_and_bound_qp() {
    let mut w = bound(MwType::Type2);
    let k = w.key();
    let before = w;
    assert_eq!(w.invalidate(KEY, QP), Err(MemError::BadKey));
    assert_eq!(
        w.invalidate(
            k,
            QpRef {
                pd: PD + 1,
                qpn: QP.qpn
            }
        ),
        Err(MemError::BadKey)
    );
    assert_eq!(w.invalidate(k, OTHER_QP), Err(MemError::BadKey));
    assert_eq!(w, before);
}

#[test]
fn o10_37_2_26_type1_cannot_be_invalidated() {
    let mut w = bound(MwType::Type1);
    let before = w;
    assert_eq!(w.invalidate(w.key(), QP), Err(MemError::OpFailed));
    assert_eq!(w, before);
}

#[test]
fn unbind_forgets_the_binding() {
    let mut w2 = bound(MwType::Type2);
    let k = w2.key();
    w2.unbind();
    assert_eq!(w2.state(), WindowState::Free);
    assert_eq!(w2.key(), k);
    assert_eq!(w2.bound_qpn(), None);
    let mut w1 = bound(MwType::Type1);
    w1.unbind();
    assert_eq!(w1.state(), WindowState::Valid);
    assert_eq!(w1.bound(), None);
}
