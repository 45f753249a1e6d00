//! RQ Logic (the "responder"): ePSN and duplicate detection, MSN, the end-to-end credit count
//! (seed 003), receive WQEs, RDMA Write/Read and atomic execution through
//! [`Memory`](crate::memory::Memory), the responder resources that replay duplicate RDMA Reads
//! and atomics, ACK coalescing, and the error classes of Table 17-7 (seed 001): B (PSN sequence
//! error NAK once, RNR NAK), C (invalid request / remote access NAK, QP to Error), A (malformed
//! RQ WQE: remote operational error NAK), D (silent drop) and G (CQ overflow).
//!
//! Files: `recv_queue.rs` (receive WQEs and the credit count), `request.rs` (the RC request
//! path: PSN classes, duplicates, RDMA Read and atomic requests), `send_write.rs` (Send and
//! RDMA Write payload placement), `unreliable.rs` (UC and UD), `acks.rs` (ACKs, coalescing,
//! credit updates), `faults.rs` (the error classes), `resources.rs` (the responder resources
//! themselves: the saved RDMA Read/atomic requests and the ordered response stream).

use crate::apm::PathInfo;
use crate::memory::{MemError, Memory, RxPayload};
use crate::psn::Psn;
use crate::sg_pool::{SgPool, SgStore};
use crate::wire::{Bth, Opcode, Reth};
use crate::wqe::RecvSlot;

mod acks;
mod faults;
mod recv_queue;
mod request;
mod resources;
mod send_write;
mod unreliable;

/// Bytes reserved for the GRH at the start of a UD receive buffer.
pub const GRH_LEN: u32 = 40;

pub use resources::MAX_RESOURCES;
use resources::{AckItem, Resource, FREE_RES};

/// The responder acknowledges at least every this many request packets (besides AckReq and
/// message ends). An ACK costs both ends a pass through the QP (and often a hand-off of the
/// response stream to another CPU); a requester keeps up to 128 packets unacknowledged, so
/// one ACK every 16 still frees its window in eighths.
pub const ACK_COALESCE: u32 = 16;

/// Static parameters of the RQ Logic (from Create/Modify QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqConfig {
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Minimum RNR NAK timer code sent in RNR NAKs.
    pub min_rnr_timer: u8,
    /// Max outstanding inbound RDMA Reads/atomics (1..=16).
    pub max_dest_rd_atomic: u8,
    /// `ib_access_flags` of the QP (remote write/read/atomic enables).
    pub access_flags: u32,
    /// The QP takes receive WQEs from an SRQ: ACKs carry credit code 0x1F.
    pub srq: bool,
    /// Unreliable Connected: no ACK/NAK ever; a lost packet or any error silently drops the
    /// message in progress and its receive WQE is reused for the next message.
    pub uc: bool,
    /// Unreliable Datagram: single-packet Sends checked against [`RqConfig::qkey`], a GRH
    /// area in front of the payload, no ACKs.
    pub ud: bool,
    /// The QP's Q_Key (UD).
    pub qkey: u32,
}

impl Default for RqConfig {
    fn default() -> RqConfig {
        RqConfig {
            mtu: 1024,
            min_rnr_timer: 1,
            max_dest_rd_atomic: 1,
            access_flags: 0,
            srq: false,
            uc: false,
            ud: false,
            qkey: 0,
        }
    }
}

/// Counters kept by the RQ Logic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RqCounters {
    /// Request packets received and accepted as new.
    pub packets_received: u64,
    /// Response packets sent (ACK, NAK, read responses, atomic ACKs).
    pub responses_sent: u64,
    /// Duplicate request packets.
    pub duplicates: u64,
    /// PSN sequence errors detected.
    pub sequence_errors: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks_sent: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Packets silently dropped (class D and invalid duplicates).
    pub silent_drops: u64,
    /// Unsolicited ACKs sent (credit updates).
    pub unsolicited_acks: u64,
    /// R_Keys invalidated by a Send with Invalidate (remote invalidation).
    pub remote_invalidations: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InMsg {
    Send {
        off: u32,
    },
    Write {
        va: u64,
        rkey: u32,
        len: u32,
        off: u32,
    },
}

/// What the Qp must do after an RQ Logic step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RqOutcome {
    /// Nothing special.
    Ok,
    /// A class A or C error: the NAK is sent and the RQ WQE in use completed with its error (or
    /// the affiliated event raised); move the QP to Error and flush.
    Error,
    /// The receive CQ overflowed (class G).
    CqOverflow,
}

/// The RQ Logic of one QP.
#[derive(Debug)]
pub struct RqLogic<R, G> {
    pub(crate) rq: R,
    /// The slots' scatter lists.
    sges: SgPool<G>,
    /// Oldest receive WQE not completed.
    pub(crate) rq_head: u64,
    /// Next receive WQE to take for a new message (`rq_head` or `rq_head + 1`).
    pub(crate) rq_next: u64,
    /// Next free slot.
    pub(crate) rq_tail: u64,
    pub(crate) epsn: Psn,
    pub(crate) msn: u32,
    cur: Option<InMsg>,
    nak_seq_sent: bool,
    pub(crate) res: [Resource; MAX_RESOURCES],
    pub(crate) res_tail: u64,
    pub(crate) res_send: u64,
    /// First resource whose responses have not all been sent once: a resource sent again
    /// for a duplicate is one the requester already counted, so only those from here on
    /// hold a place of `max_dest_rd_atomic`.
    pub(crate) res_fresh: u64,
    /// First resource whose responses wait for the requester to ask for them again: set by a
    /// duplicate RDMA Read that asks for part of what is left of its read (see
    /// `RqLogic::reschedule`).
    pub(crate) res_hold: Option<u64>,
    pub(crate) pending_ack: Option<AckItem>,
    pkts_since_ack: u32,
    peer_may_stall: bool,
    /// Credit code of the last ACK sent.
    announced: Option<u8>,
    /// UC: drop Middle/Last packets until the next First/Only.
    uc_skip: bool,
    pub(crate) cfg: RqConfig,
    pub(crate) counters: RqCounters,
    pub(crate) frozen: bool,
    /// The last packet was not taken: its memory is not resident ([`MemError::NotPresent`]).
    deferred: bool,
}

/// Per-connection values the RQ Logic uses when transmitting responses.
#[derive(Clone, Copy, Debug)]
pub struct RxCtx<'a> {
    /// Path to send on.
    pub path: &'a PathInfo,
    /// BTH:MigReq for every packet.
    pub mig_req: bool,
    /// Destination QP number.
    pub dest_qp: u32,
    /// BTH:P_Key.
    pub pkey: u16,
    /// Our QP number.
    pub qpn: u32,
    /// Source GID of the packet being processed.
    pub src_gid: [u8; 16],
    /// Destination GID of the packet being processed.
    pub dst_gid: [u8; 16],
    /// Network header of the packet being processed (UD: goes into the GRH area).
    pub net: crate::apm::NetHeader,
}

/// The payload length the length checks see: one that does not fit in 32 bits saturates, so
/// it fails them.
fn payload_len(payload: RxPayload<'_>) -> u32 {
    u32::try_from(payload.len()).unwrap_or(u32::MAX)
}

/// Checks the RETH's range for `access` (an error is a remote access error, class C, except
/// [`MemError::NotPresent`]). A zero-length request names no memory: its R_Key and VA are not
/// checked.
fn reth_check<M: Memory>(mem: &mut M, reth: &Reth, access: u32) -> Result<(), MemError> {
    if reth.dma_len == 0 {
        return Ok(());
    }
    mem.check_remote(reth.rkey, reth.va, reth.dma_len, access)
}

impl RxCtx<'_> {
    /// The BTH of a response at `psn` to this connection (RC Acknowledge; the caller changes
    /// the opcode of read responses and atomic ACKs).
    pub(crate) fn response_bth(&self, psn: Psn) -> Bth {
        let mut bth = Bth::new(Opcode::RcAcknowledge, self.dest_qp, psn);
        bth.mig_req = self.mig_req;
        bth.pkey = self.pkey;
        bth
    }
}

impl<R: core::ops::DerefMut<Target = [RecvSlot]>, G: SgStore> RqLogic<R, G> {
    /// A new RQ Logic over caller-provided storage: `rq`'s length is the RQ depth, and `sges`
    /// holds the same number of elements for each slot, the most a WR may carry.
    pub fn new(rq: R, sges: G) -> RqLogic<R, G> {
        let sges = SgPool::new(sges, rq.len());
        RqLogic {
            rq,
            sges,
            rq_head: 0,
            rq_next: 0,
            rq_tail: 0,
            epsn: Psn::ZERO,
            msn: 0,
            cur: None,
            nak_seq_sent: false,
            res: [FREE_RES; MAX_RESOURCES],
            res_tail: 0,
            res_send: 0,
            res_fresh: 0,
            res_hold: None,
            pending_ack: None,
            pkts_since_ack: 0,
            peer_may_stall: false,
            announced: None,
            uc_skip: false,
            cfg: RqConfig::default(),
            counters: RqCounters::default(),
            frozen: false,
            deferred: false,
        }
    }

    /// Back to the state after creation (Modify QP to Reset): WQEs discarded, credits zero.
    pub fn reset(&mut self) {
        self.rq_head = 0;
        self.rq_next = 0;
        self.rq_tail = 0;
        self.epsn = Psn::ZERO;
        self.msn = 0;
        self.cur = None;
        self.nak_seq_sent = false;
        self.res = [FREE_RES; MAX_RESOURCES];
        self.res_tail = 0;
        self.res_send = 0;
        self.res_fresh = 0;
        self.res_hold = None;
        self.pending_ack = None;
        self.pkts_since_ack = 0;
        self.peer_may_stall = false;
        self.announced = None;
        self.uc_skip = false;
        self.frozen = false;
        self.deferred = false;
    }

    /// Sets the expected PSN (Modify QP `rq_psn`).
    pub fn set_epsn(&mut self, psn: u32) {
        self.epsn = Psn::new(psn);
    }

    /// The expected PSN.
    pub fn epsn(&self) -> u32 {
        self.epsn.value()
    }

    /// The message sequence number.
    pub fn msn(&self) -> u32 {
        self.msn
    }

    /// The configuration (read).
    pub fn config(&self) -> &RqConfig {
        &self.cfg
    }

    /// The configuration (write).
    pub fn config_mut(&mut self) -> &mut RqConfig {
        &mut self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &RqCounters {
        &self.counters
    }

    /// A packet whose memory is not resident: not taken, nothing changes or is answered (the
    /// caller hands it in again, see [`MemError::NotPresent`]). `undo_wqe` gives back the
    /// receive WQE the message took.
    pub(super) fn not_present(&mut self, undo_wqe: bool) -> RqOutcome {
        if undo_wqe {
            self.rq_next = self.rq_next.wrapping_sub(1);
        }
        self.deferred = true;
        RqOutcome::Ok
    }
}
