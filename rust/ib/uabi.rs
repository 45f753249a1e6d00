// SPDX-License-Identifier: GPL-2.0

//! The rdma_rxe user ABI (`include/uapi/rdma/rdma_user_rxe.h`, `ib_user_verbs.h`): what stock
//! rdma-core's rxe provider reads and writes in verb responses and in the mmapped rings.
//!
//! The structs here are plain `#[repr(C)]` copies of the uapi ones, with their sizes checked
//! against the bindgen types, so that they can carry the kernel crate's byte-conversion traits.

use crate::bindings as b;
use core::mem::{offset_of, size_of};
use kernel::transmute::{AsBytes, FromBytes};

/// Where a ring lives in the user's address space (`struct mminfo`): the `mmap` offset on the
/// uverbs file and the length to map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmapInfo {
    /// The `offset` argument of `mmap`.
    pub offset: u64,
    /// The `length` argument of `mmap` (page aligned).
    pub size: u32,
    /// Zero.
    pub pad: u32,
}

/// Response of `create_cq` (`struct rxe_create_cq_resp`); `resize_cq` has the same layout
/// (`struct rxe_resize_cq_resp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateCqResp {
    /// The CQ ring.
    pub mi: MmapInfo,
}

/// Response of `create_qp` (`struct rxe_create_qp_resp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateQpResp {
    /// The receive queue ring (zero with an SRQ).
    pub rq_mi: MmapInfo,
    /// The send queue ring.
    pub sq_mi: MmapInfo,
}

/// Response of `create_srq` (`struct rxe_create_srq_resp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateSrqResp {
    /// The SRQ ring.
    pub mi: MmapInfo,
    /// The SRQ number.
    pub srq_num: u32,
    /// Zero.
    pub reserved: u32,
}

/// Request of `modify_srq` (`struct rxe_modify_srq_cmd`): where the answer of a resize goes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ModifySrqCmd {
    /// A user address for the new ring's [`MmapInfo`] (rxe answers a resize there, not in the
    /// response buffer).
    pub mmap_info_addr: u64,
}

/// Response of `create_ah` (`struct rxe_create_ah_resp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateAhResp {
    /// The AH number UD work requests name (never 0).
    pub ah_num: u32,
    /// Zero.
    pub reserved: u32,
}

/// A completion queue entry as user space reads it (`struct ib_uverbs_wc`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UverbsWc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// `enum ib_wc_status`.
    pub status: u32,
    /// `enum ib_wc_opcode`.
    pub opcode: u32,
    /// Vendor error (0).
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data (stored big-endian) or the invalidated R_Key (host order).
    pub ex: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number.
    pub src_qp: u32,
    /// `ib_wc_flags`.
    pub wc_flags: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits (0 on RoCE).
    pub dlid_path_bits: u8,
    /// Port number.
    pub port_num: u8,
    /// Zero.
    pub reserved: u8,
}

// SAFETY: `repr(C)` integers without padding (sizes asserted below); any bits are valid.
unsafe impl AsBytes for MmapInfo {}
// SAFETY: as above.
unsafe impl FromBytes for MmapInfo {}
// SAFETY: as above.
unsafe impl AsBytes for CreateCqResp {}
// SAFETY: as above.
unsafe impl AsBytes for CreateQpResp {}
// SAFETY: as above.
unsafe impl AsBytes for CreateSrqResp {}
// SAFETY: as above.
unsafe impl AsBytes for CreateAhResp {}
// SAFETY: as above.
unsafe impl AsBytes for ModifySrqCmd {}
// SAFETY: as above.
unsafe impl FromBytes for ModifySrqCmd {}
// SAFETY: as above.
unsafe impl AsBytes for UverbsWc {}
// SAFETY: as above.
unsafe impl FromBytes for UverbsWc {}

/// Size of the `rxe_queue_buf` header in front of a ring's elements.
pub const QUEUE_HDR_SIZE: usize = 384;
/// Offset of `log2_elem_size` in the ring header.
pub const QUEUE_LOG2_ELEM_OFF: usize = 0;
/// Offset of `index_mask` in the ring header.
pub const QUEUE_INDEX_MASK_OFF: usize = 4;
/// Offset of `producer_index` in the ring header.
pub const QUEUE_PRODUCER_OFF: usize = 128;
/// Offset of `consumer_index` in the ring header.
pub const QUEUE_CONSUMER_OFF: usize = 256;

/// Fixed part of a send WQE (`struct rxe_send_wqe`); the SGEs or inline data follow.
pub const SEND_WQE_SIZE: usize = 208;
/// Fixed part of a receive WQE (`struct rxe_recv_wqe`); the SGEs follow.
pub const RECV_WQE_SIZE: usize = 40;
/// One scatter/gather entry (`struct rxe_sge`).
pub const SGE_SIZE: usize = 16;

/// Offsets, within a send WQE (`struct rxe_send_wqe`), of the fields a provider writes and
/// rvrdma reads; the union members are those of the opcode.
pub mod send_wqe {
    /// `wr.wr_id`.
    pub const WR_ID: usize = 0;
    /// `wr.opcode`.
    pub const OPCODE: usize = 12;
    /// `wr.send_flags`.
    pub const SEND_FLAGS: usize = 16;
    /// `wr.ex` (`imm_data`, big-endian, or `invalidate_rkey`).
    pub const EX: usize = 20;
    /// `wr.wr.rdma.remote_addr` and `wr.wr.atomic.remote_addr`.
    pub const REMOTE_ADDR: usize = 24;
    /// `wr.wr.rdma.rkey`.
    pub const RDMA_RKEY: usize = 32;
    /// `wr.wr.atomic.compare_add`.
    pub const ATOMIC_COMPARE_ADD: usize = 32;
    /// `wr.wr.atomic.swap`.
    pub const ATOMIC_SWAP: usize = 40;
    /// `wr.wr.atomic.rkey`.
    pub const ATOMIC_RKEY: usize = 48;
    /// `wr.flush.length` (FLUSH).
    pub const FLUSH_LENGTH: usize = 32;
    /// `wr.flush.rkey` (FLUSH).
    pub const FLUSH_RKEY: usize = 36;
    /// `wr.flush.type`, the placement type (FLUSH).
    pub const FLUSH_TYPE: usize = 40;
    /// `wr.flush.level`, the selectivity level (FLUSH).
    pub const FLUSH_LEVEL: usize = 41;
    /// `wr.wr.ud.remote_qpn`.
    pub const UD_REMOTE_QPN: usize = 24;
    /// `wr.wr.ud.remote_qkey`.
    pub const UD_REMOTE_QKEY: usize = 28;
    /// `wr.wr.ud.ah_num` (the AH number `create_ah` returned to user space).
    pub const UD_AH_NUM: usize = 36;
    /// `wr.wr.mw.addr` (BIND_MW).
    pub const MW_ADDR: usize = 24;
    /// `wr.wr.mw.length` (BIND_MW).
    pub const MW_LENGTH: usize = 32;
    /// `wr.wr.mw.mr_lkey` (BIND_MW).
    pub const MW_MR_LKEY: usize = 40;
    /// `wr.wr.mw.mw_rkey` (BIND_MW).
    pub const MW_MW_RKEY: usize = 44;
    /// `wr.wr.mw.rkey` (BIND_MW): the R_Key the window gets.
    pub const MW_RKEY: usize = 48;
    /// `wr.wr.mw.access` (BIND_MW).
    pub const MW_ACCESS: usize = 52;
    /// `dma.length` (the inline data length of an inline send).
    pub const DMA_LENGTH: usize = 184;
    /// `dma.num_sge`.
    pub const DMA_NUM_SGE: usize = 196;
}

/// Offsets, within a receive WQE (`struct rxe_recv_wqe`), of the fields rvrdma reads.
pub mod recv_wqe {
    /// `wr_id`.
    pub const WR_ID: usize = 0;
    /// `dma.num_sge`.
    pub const DMA_NUM_SGE: usize = 28;
}

/// Offsets, within a scatter/gather entry (`struct rxe_sge`), of its fields.
pub mod sge {
    /// `addr`.
    pub const ADDR: usize = 0;
    /// `length`.
    pub const LENGTH: usize = 8;
    /// `lkey`.
    pub const LKEY: usize = 12;
}

/// Size of the kernel's CQE type in rxe (`struct rxe_cqe`, a union of `ib_wc` and
/// `ib_uverbs_wc`): the element size rxe requests for CQ rings.
pub const RXE_CQE_SIZE: usize = {
    let a = size_of::<b::ib_wc>();
    let u = size_of::<UverbsWc>();
    if a > u {
        a
    } else {
        u
    }
};

const _: () = {
    assert!(size_of::<MmapInfo>() == 16 && size_of::<b::mminfo>() == 16);
    assert!(size_of::<CreateCqResp>() == 16 && size_of::<b::rxe_create_cq_resp>() == 16);
    assert!(size_of::<b::rxe_resize_cq_resp>() == 16);
    assert!(size_of::<CreateQpResp>() == 32 && size_of::<b::rxe_create_qp_resp>() == 32);
    assert!(size_of::<CreateSrqResp>() == 24 && size_of::<b::rxe_create_srq_resp>() == 24);
    assert!(size_of::<ModifySrqCmd>() == 8 && size_of::<b::rxe_modify_srq_cmd>() == 8);
    assert!(size_of::<UverbsWc>() == 48 && size_of::<b::ib_uverbs_wc>() == 48);
    assert!(offset_of!(UverbsWc, ex) == 24 && offset_of!(UverbsWc, port_num) == 46);
    assert!(size_of::<b::rxe_queue_buf>() == QUEUE_HDR_SIZE);
    assert!(offset_of!(b::rxe_queue_buf, log2_elem_size) == QUEUE_LOG2_ELEM_OFF);
    assert!(offset_of!(b::rxe_queue_buf, index_mask) == QUEUE_INDEX_MASK_OFF);
    assert!(offset_of!(b::rxe_queue_buf, producer_index) == QUEUE_PRODUCER_OFF);
    assert!(offset_of!(b::rxe_queue_buf, consumer_index) == QUEUE_CONSUMER_OFF);
    assert!(size_of::<b::rxe_send_wqe>() == SEND_WQE_SIZE);
    assert!(size_of::<b::rxe_recv_wqe>() == RECV_WQE_SIZE);
    assert!(size_of::<b::rxe_sge>() == SGE_SIZE);
    // The user WQE offsets, against the uapi layout.
    let wr = offset_of!(b::rxe_send_wqe, wr);
    let u = wr + offset_of!(b::rxe_send_wr, wr);
    let dma = offset_of!(b::rxe_send_wqe, dma);
    assert!(send_wqe::WR_ID == wr + offset_of!(b::rxe_send_wr, wr_id));
    assert!(send_wqe::OPCODE == wr + offset_of!(b::rxe_send_wr, opcode));
    assert!(send_wqe::SEND_FLAGS == wr + offset_of!(b::rxe_send_wr, send_flags));
    assert!(send_wqe::EX == wr + offset_of!(b::rxe_send_wr, ex));
    assert!(size_of::<b::rxe_send_wr__bindgen_ty_1>() == 4);
    // `rdma` and `atomic` are members of the union at `u`.
    type Rdma = b::rxe_send_wr__bindgen_ty_2__bindgen_ty_2;
    type Atomic = b::rxe_send_wr__bindgen_ty_2__bindgen_ty_3;
    assert!(send_wqe::REMOTE_ADDR == u + offset_of!(Rdma, remote_addr));
    assert!(send_wqe::RDMA_RKEY == u + offset_of!(Rdma, rkey));
    assert!(send_wqe::REMOTE_ADDR == u + offset_of!(Atomic, remote_addr));
    assert!(send_wqe::ATOMIC_COMPARE_ADD == u + offset_of!(Atomic, compare_add));
    assert!(send_wqe::ATOMIC_SWAP == u + offset_of!(Atomic, swap));
    assert!(send_wqe::ATOMIC_RKEY == u + offset_of!(Atomic, rkey));
    // `flush` is the union's first member.
    type Flush = b::rxe_send_wr__bindgen_ty_2__bindgen_ty_1;
    assert!(send_wqe::REMOTE_ADDR == u + offset_of!(Flush, remote_addr));
    assert!(send_wqe::FLUSH_LENGTH == u + offset_of!(Flush, length));
    assert!(send_wqe::FLUSH_RKEY == u + offset_of!(Flush, rkey));
    assert!(send_wqe::FLUSH_TYPE == u + offset_of!(Flush, type_));
    assert!(send_wqe::FLUSH_LEVEL == u + offset_of!(Flush, level));
    type Ud = b::rxe_send_wr__bindgen_ty_2__bindgen_ty_4;
    assert!(send_wqe::UD_REMOTE_QPN == u + offset_of!(Ud, remote_qpn));
    assert!(send_wqe::UD_REMOTE_QKEY == u + offset_of!(Ud, remote_qkey));
    assert!(send_wqe::UD_AH_NUM == u + offset_of!(Ud, ah_num));
    type Mw = b::rxe_send_wr__bindgen_ty_2__bindgen_ty_5;
    assert!(send_wqe::MW_ADDR == u + offset_of!(Mw, addr));
    assert!(send_wqe::MW_LENGTH == u + offset_of!(Mw, length));
    assert!(send_wqe::MW_MR_LKEY == u + offset_of!(Mw, mr_lkey));
    assert!(send_wqe::MW_MW_RKEY == u + offset_of!(Mw, mw_rkey));
    assert!(send_wqe::MW_RKEY == u + offset_of!(Mw, rkey));
    assert!(send_wqe::MW_ACCESS == u + offset_of!(Mw, access));
    assert!(send_wqe::DMA_LENGTH == dma + offset_of!(b::rxe_dma_info, length));
    assert!(send_wqe::DMA_NUM_SGE == dma + offset_of!(b::rxe_dma_info, num_sge));
    // The SGEs (or the inline data) start right after the fixed parts.
    assert!(dma + offset_of!(b::rxe_dma_info, __bindgen_anon_1) == SEND_WQE_SIZE);
    let rdma = offset_of!(b::rxe_recv_wqe, dma);
    assert!(recv_wqe::WR_ID == offset_of!(b::rxe_recv_wqe, wr_id));
    assert!(recv_wqe::DMA_NUM_SGE == rdma + offset_of!(b::rxe_dma_info, num_sge));
    assert!(rdma + offset_of!(b::rxe_dma_info, __bindgen_anon_1) == RECV_WQE_SIZE);
    assert!(sge::ADDR == offset_of!(b::rxe_sge, addr));
    assert!(sge::LENGTH == offset_of!(b::rxe_sge, length));
    assert!(sge::LKEY == offset_of!(b::rxe_sge, lkey));
};

impl UverbsWc {
    /// The user CQE of a completion on port `port_num` (no LIDs or SLs on RoCE; P_Key index 0).
    pub fn from_completion(wc: &crate::events::Completion, port_num: u8) -> Self {
        use crate::events::{WC_WITH_IMM, WC_WITH_INVALIDATE, WC_WITH_NETWORK_HDR_TYPE};
        let ex = if wc.flags & WC_WITH_IMM != 0 {
            // `ex.imm_data` is big-endian in memory.
            wc.imm_or_rkey.to_be()
        } else if wc.flags & WC_WITH_INVALIDATE != 0 {
            wc.imm_or_rkey
        } else {
            0
        };
        Self {
            wr_id: wc.wr_id,
            status: wc.status as u32,
            opcode: wc.opcode as u32,
            vendor_err: 0,
            byte_len: wc.byte_len,
            ex,
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            // The user CQE has no network header type (the bit means something else to
            // libibverbs): user space reads the GRH area itself.
            wc_flags: wc.flags & !WC_WITH_NETWORK_HDR_TYPE,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            port_num,
            reserved: 0,
        }
    }
}
