// SPDX-License-Identifier: GPL-2.0

//! A user QP's send and receive rings: mmapped rxe-layout rings that rdma-core fills without a
//! system call. The kernel takes WQEs from them into the core whenever the QP runs (the send
//! doorbell, a packet, the work item) and, while the peer may wait for credits or the QP is in
//! Error (what user space posts there must be flushed), polls them on a timer.

use super::kernel_inline;
use super::outputs::QpOut;
use super::routes::QpPaths;
use super::timers::{QpTimer, QpTimers};
use super::user_wqe::{self, WqeError};
use super::{CoreQp, Pending, QpShared};
use crate::ib::{qp::QpType as IbQpType, queue::Ring};
use crate::rvcore::events::{Completion, CqKind, Outputs, WcOpcode, WcStatus};
use crate::rvcore::qp::QpAttrs;
use crate::rvcore::qp_state::{AttrMask, QpState};
use crate::rvcore::requester::{PostError, CREDIT_PROBE_MAX_NS};
use crate::rvcore::wqe::{SendFlags, SendOpcode, SendWr};
use crate::sync::clock::now_ns;
use kernel::prelude::*;

/// First period of the ring poll. User space posts receives without a system call, so the
/// kernel must look; the period doubles while nothing comes, up to [`RING_POLL_MAX_NS`], and
/// starts again from here once receives appear.
const RING_POLL_NS: u64 = 20_000;
/// Longest ring poll period.
const RING_POLL_MAX_NS: u64 = 16_000_000;
/// Longest ring poll period of a QP in Error whose rings are empty. User space may still post
/// there (a drain posts a marker WR and waits for its flush, which says every earlier WR is
/// done), and without a system call only a poll finds it: it is flushed within this time, and
/// sooner right after the QP entered Error (the period doubles from its first). A QP left in
/// Error costs one look a second.
const ERROR_POLL_MAX_NS: u64 = 1_000_000_000;
/// How long the ring poll of a QP without credits goes on after the peer last showed that it
/// wants some (a duplicate request, such as a credit probe, or a Send the responder RNR-NAKed).
/// A requester held for credits probes at least every [`CREDIT_PROBE_MAX_NS`]; a QP whose peer
/// asks for nothing (RDMA Writes only, or idle) is not polled: thousands of such QPs polling
/// would keep the CPUs busy with nothing.
const CREDIT_WANTED_NS: u64 = 2 * CREDIT_PROBE_MAX_NS;

/// The rings of a user QP (kernel QPs have none) and what the kernel keeps about them.
pub(crate) struct UserRings {
    /// The send ring.
    pub(crate) sq: Option<Ring>,
    /// The receive ring (none with an SRQ).
    pub(crate) rq: Option<Ring>,
    /// Scratch for one ring element.
    elem: KVec<u8>,
    /// The work request of the send WQE being taken, reused from one to the next.
    wr: SendWr,
    /// Inline data of outstanding sends: one place of `max_inline` bytes per send slot of the
    /// core, named by [`crate::driver::mr_table::INLINE_LKEY`] SGEs.
    pub(crate) inline: KVec<u8>,
    /// Whether the last pull left send WQEs in the ring because the core's send slots were
    /// all taken.
    sq_blocked: bool,
    /// Current ring poll period (0: not polling).
    poll_period: u64,
    /// Duplicate requests and RNR NAKs the responder counted at the last look.
    asked: u64,
    /// Until when the peer may be waiting for credits (ns, [`now_ns`] clock).
    credit_wanted_until: u64,
    /// What the last pull of send WQEs took.
    took: Taken,
}

impl UserRings {
    /// The rings `sq` and `rq` (both `None` for a kernel QP), with room for the inline data of
    /// `sq_slots` send slots of `max_inline` bytes.
    pub(crate) fn new(
        sq: Option<Ring>,
        rq: Option<Ring>,
        sq_slots: u32,
        max_inline: usize,
    ) -> Result<Self> {
        let elem_len = [sq.as_ref(), rq.as_ref()]
            .iter()
            .flatten()
            .map(|r| r.elem_size())
            .max()
            .unwrap_or(0);
        Ok(Self {
            sq,
            rq,
            elem: KVec::from_elem(0u8, elem_len, GFP_KERNEL)?,
            wr: SendWr::new(0, SendOpcode::Send),
            inline: KVec::from_elem(0u8, sq_slots as usize * max_inline, GFP_KERNEL)?,
            sq_blocked: false,
            poll_period: 0,
            asked: 0,
            credit_wanted_until: 0,
            took: Taken::Nothing,
        })
    }

    /// Takes the WQEs user space posted since the last look into the core: receives first (a
    /// packet may need one). A datagram WQE whose destination has no route yet stays in the
    /// ring: `paths` asks for the route, and the work item, which looks it up, pulls it again.
    pub(crate) fn pull(
        &mut self,
        core: &mut CoreQp,
        qp: &QpShared,
        paths: &mut QpPaths,
        timers: &mut QpTimers,
        pending: &mut Pending,
    ) {
        let Self {
            sq,
            rq,
            elem,
            wr,
            inline,
            sq_blocked,
            took,
            ..
        } = self;
        // Most pulls (each packet's turn at the QP) find both rings empty: no set-up for those.
        if let Some(rq) = rq.as_ref().filter(|r| !r.is_empty()) {
            // A receive WQE may let the responder send a credit update: it needs the routes.
            let mem = qp.memory(&[]);
            let mut out =
                QpOut::new(qp, true, timers, pending, &mem, Some(&paths.routes)).with_rq(Some(rq));
            pull_recv(core, rq, elem, qp.max_recv_sge, &mut out);
            // An update built for a path without a route yet: the work item looks it up.
            let need_route = out.need_route;
            paths.need_route |= need_route;
        }
        match sq.as_mut() {
            Some(sq) if !sq.is_empty() => {
                // Taking send WQEs sends nothing (`progress` does): no routes needed.
                let mem = qp.memory(&[]);
                let mut out =
                    QpOut::new(qp, true, timers, pending, &mem, None).with_rq(rq.as_ref());
                let mut send = SendPull {
                    sq,
                    elem,
                    wr,
                    inline,
                    blocked: sq_blocked,
                };
                *took = pull_send(&mut send, core, qp, paths, &mut out).unwrap_or(Taken::Nothing);
            }
            // As a take that finds the ring empty ends: unmarked, nothing taken, not blocked.
            Some(_) => {
                *sq_blocked = false;
                *took = Taken::Nothing;
            }
            None => {}
        }
    }

    /// What the last [`Self::pull`] took from the send ring (see
    /// [`QpShared::flush_tx_elsewhere`](super::QpShared::flush_tx_elsewhere) and
    /// [`QpShared::flush_tx_rd_atomic`](super::QpShared::flush_tx_rd_atomic)).
    pub(crate) fn took(&self) -> Taken {
        self.took
    }

    /// Whether user space posted send WQEs since the last pull that the core has slots for.
    pub(crate) fn sq_posted(&self) -> bool {
        !self.sq_blocked && self.sq.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Whether send WQEs wait in the ring for send slots the core has freed since the last
    /// pull (an ACK retired WQEs after it): the QP must pull again.
    pub(crate) fn sq_waits(&self, core: &CoreQp) -> bool {
        self.sq_blocked && core.sq_logic().next_slot().is_some()
    }

    /// Publishes the receive ring's consumer index behind the WQEs the core still holds (their
    /// slots stay unavailable to user space until they complete).
    pub(crate) fn publish_rq(&self, core: &CoreQp) {
        if let Some(rq) = self.rq.as_ref() {
            let held = u32::try_from(core.rq_logic().outstanding()).unwrap_or(u32::MAX);
            rq.publish_consumer(held);
        }
    }

    /// Starts, continues or stops the ring poll of a QP in `core`'s state.
    pub(crate) fn schedule_poll(&mut self, core: &CoreQp, timers: &mut QpTimers, now: u64) {
        let c = core.rq_logic().counters();
        let asked = c.duplicates.wrapping_add(c.rnr_naks_sent);
        if asked != self.asked {
            self.asked = asked;
            self.credit_wanted_until = now.saturating_add(CREDIT_WANTED_NS);
        }
        if let Some(max) = self.poll_limit(core, now) {
            if !timers.is_set(QpTimer::RingPoll) {
                self.poll_period = (self.poll_period * 2).clamp(RING_POLL_NS, max);
                timers.set(QpTimer::RingPoll, now + self.poll_period);
            }
        } else {
            self.poll_period = 0;
            timers.stop(QpTimer::RingPoll);
        }
    }

    /// Whether the rings need polling, and at most how far apart: the peer is stalled for
    /// credits, or the QP is in Error, where what user space posts must be flushed (soon if it
    /// posted already).
    fn poll_limit(&self, core: &CoreQp, now: u64) -> Option<u64> {
        let rq = self.rq.as_ref()?;
        match core.state() {
            QpState::Rtr | QpState::Rts | QpState::Sqd => {
                let wanted = core.rq_logic().credits() == 0 && now < self.credit_wanted_until;
                wanted.then_some(RING_POLL_MAX_NS)
            }
            QpState::Error => {
                if rq.count() > 0 || self.sq.as_ref().is_some_and(|s| s.count() > 0) {
                    Some(RING_POLL_MAX_NS)
                } else {
                    Some(ERROR_POLL_MAX_NS)
                }
            }
            _ => None,
        }
    }
}

/// Takes user receive WQEs into the core while it has room.
fn pull_recv(
    core: &mut CoreQp,
    rq: &Ring,
    elem: &mut KVec<u8>,
    max_sge: usize,
    out: &mut QpOut<'_>,
) {
    let cap = u64::from(rq.capacity());
    while core.rq_logic().outstanding() < cap {
        let Some(e) = elem.get_mut(..rq.elem_size()) else {
            break;
        };
        if !rq.peek_copy(e) {
            break;
        }
        match user_wqe::parse_recv(e, max_sge) {
            Ok(wr) => {
                if core.post_recv(&wr, out).is_err() {
                    // Reset/Init-before-ready: leave it in the ring for later.
                    break;
                }
            }
            Err((wr_id, _)) => {
                rq.advance_consumer_private();
                bad_wqe(core, wr_id, CqKind::Recv, WcOpcode::Recv, out);
                continue;
            }
        }
        rq.advance_consumer_private();
    }
}

/// The parts of [`UserRings`] that taking send WQEs uses.
struct SendPull<'a> {
    sq: &'a mut Ring,
    elem: &'a mut KVec<u8>,
    wr: &'a mut SendWr,
    inline: &'a mut KVec<u8>,
    blocked: &'a mut bool,
}

/// What a pull of send WQEs took into the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// No WQE.
    Nothing,
    /// Only RDMA Reads and atomics; `signaled` if any of them is.
    RdAtomic {
        /// Whether any of them is signaled.
        signaled: bool,
    },
    /// Anything else.
    Other,
}

/// Takes user send WQEs into the core while it has send slots, and says what it took. `Err` if
/// the QP's state refuses sends (seed 004: the WQEs stay in the ring, and their doorbell fails
/// and drops them, see `QpShared::refuse_sends`).
fn pull_send(
    rings: &mut SendPull<'_>,
    core: &mut CoreQp,
    qp: &QpShared,
    paths: &mut QpPaths,
    out: &mut QpOut<'_>,
) -> Result<Taken> {
    // A doorbell that sees the take under way returns at once. A datagram WQE may stay in the
    // ring until its route is known, which its own doorbell looks up: no mark for those.
    let mark = !matches!(qp.qp_type, IbQpType::Ud | IbQpType::Gsi);
    let taken = take_send(rings, mark, core, qp, paths, out);
    rings.sq.stop_take();
    taken
}

/// [`pull_send`]'s loop: takes WQEs until the ring is empty or the core has no slot for the
/// next. If `mark`, the take marks itself at the first WQE it finds and ends the mark at the
/// empty ring: most pulls (each ACK's turn at the QP) find nothing and cost no fence.
fn take_send(
    rings: &mut SendPull<'_>,
    mark: bool,
    core: &mut CoreQp,
    qp: &QpShared,
    paths: &mut QpPaths,
    out: &mut QpOut<'_>,
) -> Result<Taken> {
    let mut taken = Taken::Nothing;
    let sq = &mut *rings.sq;
    let elem = &mut *rings.elem;
    let wr = &mut *rings.wr;
    let inline_area = &mut rings.inline[..];
    let datagram = matches!(qp.qp_type, IbQpType::Ud | IbQpType::Gsi);
    *rings.blocked = false;
    loop {
        // The core may hold fewer WQEs than the ring: the rest wait there for slots.
        let Some(slot) = core.sq_logic().next_slot() else {
            *rings.blocked = sq.count() > 0;
            break;
        };
        let Some(e) = elem.get_mut(..sq.elem_size()) else {
            break;
        };
        if !sq.peek_copy(e) {
            if !mark || sq.end_take() {
                break;
            }
            continue;
        }
        if mark {
            sq.begin_take();
        }
        match user_wqe::parse_send(e, qp.max_send_sge, qp.max_inline, datagram, wr) {
            Ok(us) => {
                if datagram && !wr.opcode.is_local() {
                    // The destination is a user AH of the QP's PD, named by number.
                    match qp.dev.ah(us.ah_num) {
                        Some(ah) if ah.pd_id == qp.pd_id => {
                            wr.set_ud_path(ah.path);
                            if !paths.has_route(&ah.path) {
                                paths.want(&ah.path);
                                break;
                            }
                        }
                        _ => {
                            bad_wqe(core, wr.wr_id, CqKind::Send, WcOpcode::Send, out);
                            sq.advance_consumer();
                            continue;
                        }
                    }
                }
                if qp.sig_all {
                    wr.flags.0 |= SendFlags::SIGNALED;
                }
                if let Some(len) = us.inline_len {
                    let src = e.get(user_wqe::SEND_WQE_HEADER..user_wqe::SEND_WQE_HEADER + len);
                    let copy = |dst: &mut [u8]| match (dst.get_mut(..len), src) {
                        (Some(dst), Some(src)) => {
                            dst.copy_from_slice(src);
                            Ok(Some(len))
                        }
                        _ => Err(EINVAL),
                    };
                    // The parse bounds the length by the element and `max_inline`.
                    let sge = kernel_inline::stage(Some(slot), inline_area, qp.max_inline, copy);
                    let Ok(Some(sge)) = sge else {
                        bad_wqe(core, wr.wr_id, CqKind::Send, WcOpcode::Send, out);
                        sq.advance_consumer();
                        continue;
                    };
                    wr.sg.clear();
                    let _ = wr.sg.push(sge);
                }
                let rd_atomic = wr.opcode.is_read_or_atomic();
                let signaled = wr.flags.0 & SendFlags::SIGNALED != 0;
                match core.post_send(&*wr, out) {
                    Ok(()) => {
                        taken = match taken {
                            Taken::Nothing if rd_atomic => Taken::RdAtomic { signaled },
                            Taken::RdAtomic { signaled: s } if rd_atomic => Taken::RdAtomic {
                                signaled: s || signaled,
                            },
                            _ => Taken::Other,
                        };
                    }
                    Err(PostError::InvalidState) => return Err(EINVAL),
                    Err(PostError::QueueFull) => {
                        *rings.blocked = true;
                        break;
                    }
                    Err(PostError::InvalidWr) => {
                        bad_wqe(core, wr.wr_id, CqKind::Send, WcOpcode::Send, out)
                    }
                }
            }
            Err((wr_id, _e @ (WqeError::Opcode | WqeError::Length))) => {
                bad_wqe(core, wr_id, CqKind::Send, WcOpcode::Send, out)
            }
        }
        sq.advance_consumer();
    }
    Ok(taken)
}

/// A malformed user WQE: it completes with `IB_WC_LOC_QP_OP_ERR` and the QP enters Error
/// (its later WQEs are flushed), as for any local QP operation error.
fn bad_wqe(core: &mut CoreQp, wr_id: u64, kind: CqKind, opcode: WcOpcode, out: &mut QpOut<'_>) {
    let wc = Completion {
        wr_id,
        status: WcStatus::LocQpOpErr,
        opcode,
        byte_len: 0,
        imm_or_rkey: 0,
        qp_num: out.qpn(),
        src_qp: 0,
        flags: 0,
        network_hdr_type: 0,
        solicited: false,
    };
    let _ = Outputs::complete(out, kind, &wc);
    let a = QpAttrs {
        qp_state: QpState::Error,
        ..QpAttrs::default()
    };
    let _ = core.modify(now_ns(), &a, AttrMask::STATE, out);
}
