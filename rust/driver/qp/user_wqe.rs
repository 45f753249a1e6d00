// SPDX-License-Identifier: GPL-2.0

//! Work queue entries written by user space into the mmapped rings, in the rdma_rxe ABI
//! (`include/uapi/rdma/rdma_user_rxe.h`): `struct rxe_send_wqe` and `struct rxe_recv_wqe`.
//!
//! The shell copies an element out of the shared ring once and parses the copy here, so user
//! space cannot change a WQE while it is validated. Only the fields a provider is required to
//! write are read; lengths are recomputed from the SGEs (older providers write wrong
//! `dma.length` values), and the provider's private fields (`ssn`, `state`, PSNs) are ignored.

use crate::ib::uabi::{self, recv_wqe, send_wqe, sge};
use crate::rvcore::mw::BindMwParams;
use crate::rvcore::wqe::{
    FlushParams, RecvWr, SendFlags, SendOpcode, SendWr, SgList, Sge, WrExtra, MAX_SGE,
};

/// Size of `struct rxe_send_wqe` up to its SGE array / inline data.
pub(crate) const SEND_WQE_HEADER: usize = uabi::SEND_WQE_SIZE;
/// Size of `struct rxe_recv_wqe` up to its SGE array.
pub(crate) const RECV_WQE_HEADER: usize = uabi::RECV_WQE_SIZE;
/// Size of one `struct rxe_sge`.
pub(crate) const SGE_SIZE: usize = uabi::SGE_SIZE;

/// Why a user WQE was refused (the WR completes in error: `IB_WC_LOC_QP_OP_ERR` for an
/// opcode rvrdma does not offer, `IB_WC_LOC_LEN_ERR` for bad lengths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WqeError {
    /// Unknown or unsupported opcode (TSO, kernel-only REG_MR).
    Opcode,
    /// Too many SGEs, or inline data longer than the QP allows.
    Length,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut v = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        v.copy_from_slice(s);
    }
    u32::from_ne_bytes(v)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        v.copy_from_slice(s);
    }
    u64::from_ne_bytes(v)
}

fn sges_at(b: &[u8], off: usize, n: usize) -> Option<SgList> {
    let mut l = SgList::EMPTY;
    sges_into(b, off, n, &mut l)?;
    Some(l)
}

/// [`sges_at`] appended to `l` where it lies (a list moved is a copy of all its slots).
fn sges_into(b: &[u8], off: usize, n: usize, l: &mut SgList) -> Option<()> {
    for i in 0..n {
        let o = off + i * SGE_SIZE;
        if b.len() < o + SGE_SIZE {
            return None;
        }
        l.push(Sge {
            addr: u64_at(b, o + sge::ADDR),
            length: u32_at(b, o + sge::LENGTH),
            lkey: u32_at(b, o + sge::LKEY),
        })?;
    }
    Some(())
}

/// What a parsed send WQE holds besides its work request: for inline sends the inline bytes'
/// range within the copied element (the shell moves them into the QP's inline area).
pub(crate) struct UserSend {
    /// `Some(len)`: `len` inline bytes start at [`SEND_WQE_HEADER`] in the element.
    pub inline_len: Option<usize>,
    /// The AH number of a datagram send (the shell resolves it into the WR's path).
    pub ah_num: u32,
}

/// Parses a copied `rxe_send_wqe` into `wr` (reused from WQE to WQE: a ring's take builds each
/// work request where the core reads it; inline WRs get their SGE from the shell). `max_sge`
/// and `max_inline` are the QP's granted limits; `datagram`: the QP is UD, and the WQE names its
/// destination.
pub(crate) fn parse_send(
    e: &[u8],
    max_sge: usize,
    max_inline: usize,
    datagram: bool,
    wr: &mut SendWr,
) -> Result<UserSend, (u64, WqeError)> {
    let wr_id = u64_at(e, send_wqe::WR_ID);
    let opcode =
        SendOpcode::from_u32(u32_at(e, send_wqe::OPCODE)).ok_or((wr_id, WqeError::Opcode))?;
    if opcode == SendOpcode::RegMr {
        // Fast registration is a kernel-only operation.
        return Err((wr_id, WqeError::Opcode));
    }
    let flags = u32_at(e, send_wqe::SEND_FLAGS);
    wr.reset(wr_id, opcode);
    wr.flags = SendFlags(flags);
    let ex = u32_at(e, send_wqe::EX);
    match opcode {
        // `imm_data` is big-endian in the WQE; the core wants host order.
        SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm => wr.imm = u32::from_be(ex),
        SendOpcode::SendWithInv | SendOpcode::LocalInv => wr.invalidate_rkey = ex,
        _ => {}
    }
    if opcode.is_write() || opcode == SendOpcode::RdmaRead {
        wr.remote_addr = u64_at(e, send_wqe::REMOTE_ADDR);
        wr.rkey = u32_at(e, send_wqe::RDMA_RKEY);
    } else if opcode.is_atomic() {
        wr.remote_addr = u64_at(e, send_wqe::REMOTE_ADDR);
        wr.extra = WrExtra::Atomic {
            compare_add: u64_at(e, send_wqe::ATOMIC_COMPARE_ADD),
            swap: u64_at(e, send_wqe::ATOMIC_SWAP),
        };
        wr.rkey = u32_at(e, send_wqe::ATOMIC_RKEY);
    }
    if opcode == SendOpcode::AtomicWrite {
        // rdma-core's wr_atomic_write: `wr.rdma` names the target, the 8 bytes sit where the
        // SGEs would (`dma.atomic_wr`).
        wr.remote_addr = u64_at(e, send_wqe::REMOTE_ADDR);
        wr.rkey = u32_at(e, send_wqe::RDMA_RKEY);
        let v = e
            .get(SEND_WQE_HEADER..SEND_WQE_HEADER + 8)
            .ok_or((wr_id, WqeError::Length))?;
        wr.extra = WrExtra::AtomicWrite(v.try_into().map_err(|_| (wr_id, WqeError::Length))?);
        return Ok(UserSend {
            inline_len: None,
            ah_num: 0,
        });
    }
    if opcode == SendOpcode::BindMw {
        // `ibv_bind_mw` (type 1, the provider writes this WQE) and IBV_WR_BIND_MW (type 2).
        wr.extra = WrExtra::Bind(BindMwParams {
            mw_rkey: u32_at(e, send_wqe::MW_MW_RKEY),
            rkey: u32_at(e, send_wqe::MW_RKEY),
            mr_lkey: u32_at(e, send_wqe::MW_MR_LKEY),
            addr: u64_at(e, send_wqe::MW_ADDR),
            length: u64_at(e, send_wqe::MW_LENGTH),
            access: u32_at(e, send_wqe::MW_ACCESS),
        });
        return Ok(UserSend {
            inline_len: None,
            ah_num: 0,
        });
    }
    if opcode == SendOpcode::Flush {
        wr.remote_addr = u64_at(e, send_wqe::REMOTE_ADDR);
        wr.rkey = u32_at(e, send_wqe::FLUSH_RKEY);
        wr.extra = WrExtra::Flush(FlushParams {
            length: u32_at(e, send_wqe::FLUSH_LENGTH),
            placement: e.get(send_wqe::FLUSH_TYPE).copied().unwrap_or(0),
            selectivity: e.get(send_wqe::FLUSH_LEVEL).copied().unwrap_or(0),
        });
        return Ok(UserSend {
            inline_len: None,
            ah_num: 0,
        });
    }
    let mut ah_num = 0;
    if datagram && !opcode.is_local() {
        wr.set_ud_dest(
            u32_at(e, send_wqe::UD_REMOTE_QPN),
            u32_at(e, send_wqe::UD_REMOTE_QKEY),
        );
        ah_num = u32_at(e, send_wqe::UD_AH_NUM);
    }
    let inline = flags & SendFlags::INLINE != 0 && !opcode.is_local();
    if inline {
        let len = u32_at(e, send_wqe::DMA_LENGTH) as usize;
        if len > max_inline || e.len() < SEND_WQE_HEADER + len {
            return Err((wr_id, WqeError::Length));
        }
        return Ok(UserSend {
            inline_len: Some(len),
            ah_num,
        });
    }
    let n = u32_at(e, send_wqe::DMA_NUM_SGE) as usize;
    if n > max_sge.min(MAX_SGE) {
        return Err((wr_id, WqeError::Length));
    }
    sges_into(e, SEND_WQE_HEADER, n, &mut wr.sg).ok_or((wr_id, WqeError::Length))?;
    if wr.sg.total_len().is_none() {
        return Err((wr_id, WqeError::Length));
    }
    Ok(UserSend {
        inline_len: None,
        ah_num,
    })
}

/// Parses a copied `rxe_recv_wqe`.
pub(crate) fn parse_recv(e: &[u8], max_sge: usize) -> Result<RecvWr, (u64, WqeError)> {
    let wr_id = u64_at(e, recv_wqe::WR_ID);
    let n = u32_at(e, recv_wqe::DMA_NUM_SGE) as usize;
    if n > max_sge.min(MAX_SGE) {
        return Err((wr_id, WqeError::Length));
    }
    let sg = sges_at(e, RECV_WQE_HEADER, n).ok_or((wr_id, WqeError::Length))?;
    if sg.total_len().is_none() {
        return Err((wr_id, WqeError::Length));
    }
    Ok(RecvWr { wr_id, sg })
}
