//! What the engine hands back to its caller: completions, affiliated async events, timers and
//! packets to transmit, all through the caller-implemented [`Outputs`] trait (no allocation).
//!
//! Numeric values equal the kernel's `enum ib_wc_status`, `enum ib_wc_opcode`,
//! `enum ib_wc_flags` and `enum ib_event_type` (include/rdma/ib_verbs.h), so the kernel shell
//! converts with a cast.

use crate::apm::PathInfo;
use crate::wire::Headers;
use crate::wqe::Sge;

/// Work completion status (`enum ib_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WcStatus {
    /// IB_WC_SUCCESS.
    Success = 0,
    /// IB_WC_LOC_LEN_ERR.
    LocLenErr = 1,
    /// IB_WC_LOC_QP_OP_ERR.
    LocQpOpErr = 2,
    /// IB_WC_LOC_PROT_ERR.
    LocProtErr = 4,
    /// IB_WC_MW_BIND_ERR.
    MwBindErr = 6,
    /// IB_WC_WR_FLUSH_ERR.
    WrFlushErr = 5,
    /// IB_WC_BAD_RESP_ERR.
    BadRespErr = 7,
    /// IB_WC_LOC_ACCESS_ERR.
    LocAccessErr = 8,
    /// IB_WC_REM_INV_REQ_ERR.
    RemInvReqErr = 9,
    /// IB_WC_REM_ACCESS_ERR.
    RemAccessErr = 10,
    /// IB_WC_REM_OP_ERR.
    RemOpErr = 11,
    /// IB_WC_RETRY_EXC_ERR.
    RetryExcErr = 12,
    /// IB_WC_RNR_RETRY_EXC_ERR.
    RnrRetryExcErr = 13,
    /// IB_WC_FATAL_ERR.
    FatalErr = 19,
    /// IB_WC_GENERAL_ERR.
    GeneralErr = 21,
}

/// Work completion opcode (`enum ib_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WcOpcode {
    /// IB_WC_SEND.
    Send = 0,
    /// IB_WC_RDMA_WRITE.
    RdmaWrite = 1,
    /// IB_WC_RDMA_READ.
    RdmaRead = 2,
    /// IB_WC_COMP_SWAP.
    CompSwap = 3,
    /// IB_WC_FETCH_ADD.
    FetchAdd = 4,
    /// IB_WC_BIND_MW.
    BindMw = 5,
    /// IB_WC_LOCAL_INV.
    LocalInv = 6,
    /// IB_WC_FLUSH.
    Flush = 8,
    /// IB_WC_ATOMIC_WRITE.
    AtomicWrite = 9,
    /// IB_WC_REG_MR.
    RegMr = 10,
    /// IB_WC_RECV.
    Recv = 128,
    /// IB_WC_RECV_RDMA_WITH_IMM.
    RecvRdmaWithImm = 129,
}

/// IB_WC_GRH: the first 40 bytes of a UD receive buffer hold a GRH.
pub const WC_GRH: u32 = 1;
/// IB_WC_WITH_NETWORK_HDR_TYPE: [`Completion::network_hdr_type`] says what the GRH area holds.
pub const WC_WITH_NETWORK_HDR_TYPE: u32 = 1 << 6;
/// `RDMA_NETWORK_IPV4`: the GRH area holds an IPv4 header (in its last 20 bytes).
pub const NETWORK_IPV4: u8 = 2;
/// `RDMA_NETWORK_IPV6`: the GRH area holds an IPv6 header.
pub const NETWORK_IPV6: u8 = 3;
/// IB_WC_WITH_IMM: [`Completion::imm_or_rkey`] holds immediate data.
pub const WC_WITH_IMM: u32 = 1 << 1;
/// IB_WC_WITH_INVALIDATE: [`Completion::imm_or_rkey`] holds the invalidated R_Key.
pub const WC_WITH_INVALIDATE: u32 = 1 << 2;

/// Which completion queue a completion goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqKind {
    /// The QP's send CQ.
    Send,
    /// The QP's receive CQ.
    Recv,
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Operation.
    pub opcode: WcOpcode,
    /// Bytes transferred (receives, reads, atomics).
    pub byte_len: u32,
    /// Immediate data (host order) or invalidated R_Key, see [`Completion::flags`].
    pub imm_or_rkey: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (receives).
    pub src_qp: u32,
    /// `ib_wc_flags` bits ([`WC_WITH_IMM`], [`WC_WITH_INVALIDATE`], [`WC_GRH`],
    /// [`WC_WITH_NETWORK_HDR_TYPE`]).
    pub flags: u32,
    /// [`NETWORK_IPV4`] or [`NETWORK_IPV6`] with [`WC_WITH_NETWORK_HDR_TYPE`], else 0.
    pub network_hdr_type: u8,
    /// A receive of a message whose last packet carried BTH:SE (the sender asked for a
    /// solicited event). A CQ armed for solicited completions notifies on these and on every
    /// unsuccessful completion (IBA 11.4.2.2), see [`Completion::wakes_solicited`].
    pub solicited: bool,
}

impl Completion {
    /// Whether the completion satisfies a CQ armed for the next solicited completion.
    pub fn wakes_solicited(&self) -> bool {
        self.solicited || self.status != WcStatus::Success
    }
}

/// The completion queue had no room (Table 17-7 class G).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqFull;

/// Affiliated asynchronous events (`enum ib_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum AsyncEvent {
    /// IB_EVENT_CQ_ERR (for the CQ named by [`Outputs::async_event`]'s `cq`).
    CqErr = 0,
    /// IB_EVENT_QP_FATAL.
    QpFatal = 1,
    /// IB_EVENT_QP_REQ_ERR (invalid request detected with no RQ WQE in use).
    QpReqErr = 2,
    /// IB_EVENT_QP_ACCESS_ERR (access violation detected with no RQ WQE in use).
    QpAccessErr = 3,
    /// IB_EVENT_COMM_EST (first packet arrived in RTR).
    CommEst = 4,
    /// IB_EVENT_SQ_DRAINED.
    SqDrained = 5,
    /// IB_EVENT_PATH_MIG.
    PathMig = 6,
    /// IB_EVENT_PATH_MIG_ERR.
    PathMigErr = 7,
    /// IB_EVENT_SRQ_LIMIT_REACHED.
    SrqLimitReached = 15,
    /// IB_EVENT_QP_LAST_WQE_REACHED.
    QpLastWqeReached = 16,
}

/// The engine's timers; one of each per QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Transport (local ACK timeout) timer of the SQ Logic.
    Retransmit,
    /// RNR NAK back-off of the SQ Logic.
    Rnr,
}

/// Where the payload of a packet to transmit lives; the shell gathers it straight into the
/// packet buffer (no copy in the core).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadSource<'a> {
    /// No payload.
    None,
    /// `len` bytes starting `offset` bytes into the local gather list `sges` (a send WQE's;
    /// the lkeys were validated by [`crate::memory::Memory::check_local`]).
    Gather {
        /// The gather list.
        sges: &'a [Sge],
        /// Byte offset into the list.
        offset: u32,
        /// Number of bytes.
        len: u32,
    },
    /// The 8 bytes of an ATOMIC WRITE request, carried in its WQE.
    Bytes8([u8; 8]),
    /// `len` bytes of remote-readable memory (an RDMA Read response), already validated by
    /// [`crate::memory::Memory::check_remote`].
    Remote {
        /// R_Key of the MR.
        rkey: u32,
        /// Virtual address of the first byte.
        va: u64,
        /// Number of bytes.
        len: u32,
    },
}

/// Everything the engine asks of its caller. The kernel shell implements it over skbs, CQs and
/// hrtimers; the simulation over in-memory queues.
pub trait Outputs {
    /// Transmit one packet on `path`: `headers` (BTH and extension headers) followed by the
    /// payload described by `payload`.
    fn transmit(&mut self, path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>);
    /// Post a completion to the QP's send or receive CQ. `Err(CqFull)` on overflow.
    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull>;
    /// Raise an affiliated asynchronous event. `cq` names the CQ for [`AsyncEvent::CqErr`].
    fn async_event(&mut self, ev: AsyncEvent, cq: Option<CqKind>);
    /// Arm (or re-arm) a timer to fire at `deadline_ns`; the shell then calls
    /// [`crate::qp::Qp::timer_expired`].
    fn set_timer(&mut self, which: Timer, deadline_ns: u64);
    /// Disarm a timer.
    fn cancel_timer(&mut self, which: Timer);
}
