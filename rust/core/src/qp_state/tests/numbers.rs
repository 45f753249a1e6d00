//! The numbers and names shared with the kernel's `ib_verbs.h`.

extern crate std;
use super::*;
use std::format;

#[test]
fn kernel_numbers_match_ib_verbs_h() {
    let states = [
        (QpState::Reset, 0),
        (QpState::Init, 1),
        (QpState::Rtr, 2),
        (QpState::Rts, 3),
        (QpState::Sqd, 4),
        (QpState::Sqe, 5),
        (QpState::Error, 6),
    ];
    for (s, n) in states {
        assert_eq!(s.as_raw(), n);
        assert_eq!(QpState::from_raw(n), Some(s));
    }
    assert_eq!(QpState::from_raw(7), None);
    let types = [(RC, 2), (UC, 3), (UD, 4), (GSI, 1), (QpType::Smi, 0)];
    for (t, n) in types {
        assert_eq!(t.as_raw(), n);
        assert_eq!(QpType::from_raw(n), Some(t));
    }
    assert_eq!(QpType::RawPacket.as_raw(), 8);
    assert_eq!(QpType::XrcIni.as_raw(), 9);
    assert_eq!(QpType::XrcTgt.as_raw(), 10);
    assert_eq!(QpType::from_raw(7), None);
    let bits = [
        (AttrMask::STATE, 1u32),
        (AttrMask::CUR_STATE, 1 << 1),
        (AttrMask::EN_SQD_ASYNC_NOTIFY, 1 << 2),
        (AttrMask::ACCESS_FLAGS, 1 << 3),
        (AttrMask::PKEY_INDEX, 1 << 4),
        (AttrMask::PORT, 1 << 5),
        (AttrMask::QKEY, 1 << 6),
        (AttrMask::AV, 1 << 7),
        (AttrMask::PATH_MTU, 1 << 8),
        (AttrMask::TIMEOUT, 1 << 9),
        (AttrMask::RETRY_CNT, 1 << 10),
        (AttrMask::RNR_RETRY, 1 << 11),
        (AttrMask::RQ_PSN, 1 << 12),
        (AttrMask::MAX_QP_RD_ATOMIC, 1 << 13),
        (AttrMask::ALT_PATH, 1 << 14),
        (AttrMask::MIN_RNR_TIMER, 1 << 15),
        (AttrMask::SQ_PSN, 1 << 16),
        (AttrMask::MAX_DEST_RD_ATOMIC, 1 << 17),
        (AttrMask::PATH_MIG_STATE, 1 << 18),
        (AttrMask::CAP, 1 << 19),
        (AttrMask::DEST_QPN, 1 << 20),
        (AttrMask::RATE_LIMIT, 1 << 25),
    ];
    for (b, n) in bits {
        assert_eq!(b.bits(), n);
        assert!(b.name().starts_with("IB_QP_"));
    }
    assert_eq!(AttrMask::STANDARD_BITS.bits(), 0x1f_ffff);
}

#[test]
fn attr_mask_names_in_errors() {
    let e = ModifyError::MissingAttr(AttrMask::AV | AttrMask::RQ_PSN);
    assert_eq!(
        format!("{e}"),
        "missing required attribute(s) IB_QP_AV|IB_QP_RQ_PSN"
    );
    assert_eq!(format!("{:?}", AttrMask(1 << 30)), "0x40000000");
    assert_eq!(format!("{:?}", AttrMask::EMPTY), "(none)");
}
