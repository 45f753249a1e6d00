//! Drives one QP (RC mostly, sometimes UC or UD), brought to RTS with a realistic attribute set,
//! with a sequence of steps derived from the fuzz input: inbound packets (decoded from raw bytes
//! or built from structured fields: an opcode from the table, a PSN near the ePSN / oldest
//! unacknowledged PSN, RETH/AtomicETH/AETH values aimed at the MRs), `timer_expired`,
//! `post_recv`, `post_send`, `progress`, polls of a small CQ and rare Modify QPs (SQD and back,
//! Error and a new connection), under a monotonically advancing fake clock.
//!
//! Invariants checked for every input:
//! - no panic (the kernel builds with overflow checks: a panic is a kernel BUG);
//! - memory is only written inside what the engine validated: a scatter stays inside its list, a
//!   remote write inside the range the RETH check covered, an RDMA Read response reads inside a
//!   range checked for remote read, a gather inside its (validated) list, and every access the
//!   memory model sees lies inside a registered MR (out-of-MR requests are recorded, not done);
//! - every completion names a posted work request, completes it at most once and in queue
//!   order, with the QP's number; after the QP enters Error every posted WR has completed
//!   exactly once (unless the CQ overflowed or the RQ is an SRQ);
//! - every transmitted packet has consistent, encodable headers, the peer's QPN and a payload
//!   of at most one MTU;
//! - work is bounded: `progress` never sends more than its budget, the "call again while it
//!   returns a full budget" loop ends, and each step emits a bounded number of outputs.
#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use rvrdma_core::apm::{MigState, PathInfo, PathMatch};
use rvrdma_core::events::{
    AsyncEvent, Completion, CqFull, CqKind, Outputs, PayloadSource, Timer, WcOpcode, WcStatus,
};
use rvrdma_core::memory::{
    AtomicOp, MemError, Memory, RxPayload, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp::{Qp, QpAttrs, QpCreate};
use rvrdma_core::qp_state::{AttrMask, QpState, QpType};
use rvrdma_core::wire::{
    pad_count, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Headers, Ieth, ImmDt, NakCode, Opcode,
    Position, Reth, Syndrome, Transport,
};
use rvrdma_core::wqe::{
    RecvSlot, RecvWr, RegMrParams, SendFlags, SendOpcode, SendSlot, SendWr, SgList, Sge, UdDest,
    WrExtra,
};

// ---------------------------------------------------------------------------------------------
// Input reader: never fails, yields zeros once the input is exhausted.

struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start.saturating_add(n);
        &self.data[start..end]
    }
}

// ---------------------------------------------------------------------------------------------
// Memory: a few MRs in the simulation's memory model; every access is checked first and touches
// nothing on failure. Contract breaches by the engine are recorded as violations.

#[path = "../../tests/sim/mem.rs"]
#[allow(dead_code)] // the simulation's helpers this target does not need
mod sim_mem;
use sim_mem::{sge_pieces, MemInner, Mr};

const KEY_RECV: u32 = 0x100; // receive buffers (local write)
const KEY_TGT: u32 = 0x200; // remote write/read/atomic target
const KEY_RO: u32 = 0x300; // remote read only
const KEY_SRC: u32 = 0x400; // local gather source (no remote rights)
const KEY_RDST: u32 = 0x500; // local destination of our RDMA Reads and atomics
const KEY_HIGH: u32 = 0x600; // all rights, at the very top of the address space
const KEY_EMPTY: u32 = 0x700; // zero-length, all rights
const KEY_SPARE: u32 = 0x800; // LOCAL_INV / REG_MR by our own work requests
const ALL_REMOTE: u32 = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

/// (key, base, length, access)
const MRS: [(u32, u64, usize, u32); 8] = [
    (KEY_RECV, 0x1_0000, 4096, ACCESS_LOCAL_WRITE),
    (KEY_TGT, 0x2_0000, 8192, ACCESS_LOCAL_WRITE | ALL_REMOTE),
    (KEY_RO, 0x3_0000, 4096, ACCESS_REMOTE_READ),
    (KEY_SRC, 0x4_0000, 4096, 0),
    (KEY_RDST, 0x5_0000, 4096, ACCESS_LOCAL_WRITE),
    (
        KEY_HIGH,
        u64::MAX - 4095,
        4096,
        ACCESS_LOCAL_WRITE | ALL_REMOTE,
    ),
    (KEY_EMPTY, 0x7_0000, 0, ACCESS_LOCAL_WRITE | ALL_REMOTE),
    (KEY_SPARE, 0x8_0000, 256, ACCESS_LOCAL_WRITE),
];

/// The fuzz target's memory: the simulation's MR model (`tests/sim/mem.rs`: keys, bounds,
/// access rights, validity; every access checked first) plus a record of what the engine
/// validated, to catch accesses beyond it.
#[derive(Default)]
struct FuzzMem {
    model: MemInner,
    /// The last range validated for remote write: (rkey, va, len).
    write_window: Option<(u32, u64, u32)>,
    /// Every range validated for remote read.
    read_windows: Vec<(u32, u64, u32)>,
    violations: Vec<String>,
}

fn window_covers(w: (u32, u64, u32), rkey: u32, va: u64, len: u64) -> bool {
    let (k, wva, wlen) = w;
    if k != rkey {
        return false;
    }
    let Some(off) = va.checked_sub(wva) else {
        return false;
    };
    off.checked_add(len).is_some_and(|e| e <= u64::from(wlen))
}

impl FuzzMem {
    fn new() -> FuzzMem {
        let mut m = FuzzMem::default();
        for (key, base, len, access) in MRS {
            let bytes = (0..len).map(|i| (i as u8) ^ (key as u8)).collect();
            m.model.mrs.push(Mr {
                key,
                base,
                bytes,
                access,
                valid: true,
                pd: m.model.pd,
            });
        }
        m
    }

    fn check(&self, key: u32, va: u64, len: u64, access: u32) -> Result<(), MemError> {
        self.model.check(key, va, len, access)
    }

    fn violation(&mut self, s: String) {
        self.violations.push(s);
    }

    /// Checks a transmitted payload (after the call that transmitted it).
    fn check_payload(&mut self, p: &TxPayload) {
        match p {
            TxPayload::None | TxPayload::Bytes8 => {}
            TxPayload::Gather { sges, offset, len } => {
                let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
                if u64::from(*offset) + u64::from(*len) > total {
                    self.violation(format!("gather {offset}+{len} beyond list of {total}"));
                    return;
                }
                // Each touched element must lie in a valid MR (the lkeys were validated).
                let Ok(pieces) = sge_pieces(sges, *offset, u64::from(*len)) else {
                    self.violation(format!("gather from a wrapping list {sges:?}"));
                    return;
                };
                for (lkey, va, take) in pieces {
                    if self.check(lkey, va, take, 0).is_err() {
                        self.violation(format!(
                            "gather from unchecked memory: lkey {lkey:#x} va {va:#x} len {take}"
                        ));
                    }
                }
            }
            TxPayload::Remote { rkey, va, len } => {
                let ok = self
                    .read_windows
                    .iter()
                    .any(|w| window_covers(*w, *rkey, *va, u64::from(*len)));
                if !ok {
                    self.violation(format!(
                        "read response from unchecked range rkey {rkey:#x} va {va:#x} len {len}"
                    ));
                }
            }
        }
    }
}

impl Memory for FuzzMem {
    fn check_local(&mut self, sges: &[Sge], access: u32) -> Result<(), MemError> {
        self.model.check_local(sges, access)
    }

    fn scatter(&mut self, sges: &[Sge], offset: u32, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if u64::from(offset) + data.len() as u64 > total {
            // The engine guarantees offset + len is within the list.
            self.violation(format!(
                "scatter {offset}+{} beyond list of {total}",
                data.len()
            ));
            return Err(MemError::OutOfBounds);
        }
        self.model.scatter(sges, offset, data, ACCESS_LOCAL_WRITE)
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, access: u32) -> Result<(), MemError> {
        self.check(rkey, va, u64::from(len), access)?;
        if access & ACCESS_REMOTE_WRITE != 0 {
            self.write_window = Some((rkey, va, len));
        }
        if access & ACCESS_REMOTE_READ != 0 && self.read_windows.len() < 4096 {
            self.read_windows.push((rkey, va, len));
        }
        Ok(())
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        let covered = self
            .write_window
            .is_some_and(|w| window_covers(w, rkey, va, data.len() as u64));
        if !covered {
            self.violation(format!(
                "remote write outside the checked range: rkey {rkey:#x} va {va:#x} len {} \
                 (checked {:?})",
                data.len(),
                self.write_window
            ));
        }
        self.model.remote_write(rkey, va, data)
    }

    fn remote_atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        self.model.remote_atomic(rkey, va, op)
    }

    fn remote_atomic_write(&mut self, rkey: u32, va: u64, value: [u8; 8]) -> Result<(), MemError> {
        // Checked by check_remote just before, like a write.
        let covered = self
            .write_window
            .is_some_and(|w| window_covers(w, rkey, va, 8));
        if !covered {
            self.violation(format!(
                "atomic write outside the checked range: rkey {rkey:#x} va {va:#x}"
            ));
        }
        self.model.remote_atomic_write(rkey, va, value)
    }

    fn remote_flush(
        &mut self,
        rkey: u32,
        range: Option<(u64, u32)>,
        access: u32,
    ) -> Result<(), MemError> {
        self.model.remote_flush(rkey, range, access)
    }

    fn invalidate_remote(&mut self, rkey: u32) -> Result<(), MemError> {
        // Only MRs with remote rights have an R_Key.
        let remote = self
            .model
            .mr(rkey)
            .is_some_and(|m| m.access & ALL_REMOTE != 0);
        if !remote {
            return Err(MemError::BadKey);
        }
        self.model.invalidate(rkey)
    }

    fn local_invalidate(&mut self, key: u32) -> Result<(), MemError> {
        if key != KEY_SPARE {
            return Err(MemError::BadKey);
        }
        self.model.invalidate(key)
    }

    fn fast_register(&mut self, p: &RegMrParams) -> Result<(), MemError> {
        if p.key != KEY_SPARE {
            return Err(MemError::OpFailed);
        }
        let spare = self.model.mrs.iter().find(|m| m.key == p.key);
        let Some(base) = spare.map(|m| m.base) else {
            return Err(MemError::BadKey);
        };
        // The spare MR stays where it is (its range is not tracked) and stays local.
        self.model.fast_register(&RegMrParams {
            iova: base,
            access: p.access & ACCESS_LOCAL_WRITE,
            ..*p
        })
    }

    fn bind_mw(&mut self, p: &rvrdma_core::mw::BindMwParams) -> Result<(), MemError> {
        // The fuzzed traffic posts no BIND_MW; the model applies the window rules.
        self.model.bind_mw(p)
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs: records packets and checks completions as they come.

enum TxPayload {
    None,
    Gather {
        sges: Vec<Sge>,
        offset: u32,
        len: u32,
    },
    Remote {
        rkey: u32,
        va: u64,
        len: u32,
    },
    /// An ATOMIC WRITE's 8 bytes, from the WQE.
    Bytes8,
}

struct Expect {
    /// Posted and not yet completed, in posting order: (wr_id, total scatter length).
    outstanding: VecDeque<(u64, u64)>,
}

struct FuzzOut {
    qpn: u32,
    dest_qpn: u32,
    mtu: u32,
    /// Packets of the current call, payload checked against memory afterwards.
    tx: Vec<TxPayload>,
    /// Outputs (of any kind) during the current call.
    outputs_in_call: usize,
    outputs_total: u64,
    send: Expect,
    recv: Expect,
    srq: bool,
    cq_cap: usize,
    cq_len: [usize; 2],
    cq_overflowed: bool,
    events: Vec<AsyncEvent>,
    timers: [Option<u64>; 2],
    /// Completions by CQ, opcode and status (for `RESPONDER_STATS`).
    wc_log: Vec<(String, u64)>,
    log_wc: bool,
    /// The last request packets we transmitted (for the step that answers them as the peer).
    sent_reqs: VecDeque<Headers>,
}

fn timer_index(t: Timer) -> usize {
    match t {
        Timer::Retransmit => 0,
        Timer::Rnr => 1,
    }
}

impl Outputs for FuzzOut {
    fn transmit(&mut self, _path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>) {
        self.outputs_in_call += 1;
        assert!(headers.is_consistent(), "inconsistent headers {headers:?}");
        let mut h = *headers;
        let (p, len) = match payload {
            PayloadSource::None => (TxPayload::None, 0u32),
            PayloadSource::Gather { sges, offset, len } => (
                TxPayload::Gather {
                    sges: sges.to_vec(),
                    offset,
                    len,
                },
                len,
            ),
            PayloadSource::Remote { rkey, va, len } => (TxPayload::Remote { rkey, va, len }, len),
            PayloadSource::Bytes8(_) => (TxPayload::Bytes8, 8),
        };
        let info = h.info();
        assert!(
            info.has_payload || len == 0,
            "payload on {:?}",
            h.bth.opcode
        );
        assert!(len <= self.mtu, "payload {len} > mtu {}", self.mtu);
        if info.transport != Transport::Ud {
            assert_eq!(h.bth.dest_qp, self.dest_qpn, "packet to another QP");
        }
        // Segmentation: First and Middle packets carry exactly one MTU, a Last packet 1..=MTU.
        if info.has_payload {
            match info.position {
                Position::First | Position::Middle => assert_eq!(
                    len,
                    self.mtu,
                    "{:?} psn {} with {len} bytes",
                    h.bth.opcode,
                    h.bth.psn.value()
                ),
                Position::Last => assert!(
                    len >= 1,
                    "{:?} psn {} with no payload",
                    h.bth.opcode,
                    h.bth.psn.value()
                ),
                Position::Only => {}
            }
        }
        h.bth.pad_count = pad_count(len as usize);
        let mut buf = [0u8; 64];
        let n = h.encode(&mut buf).expect("engine headers encode");
        let mut pkt = buf[..n].to_vec();
        pkt.extend(std::iter::repeat_n(
            0u8,
            len as usize + usize::from(h.bth.pad_count) + 4,
        ));
        let (d, range) = Headers::decode(&pkt).expect("engine packet decodes");
        assert_eq!(range.len(), len as usize);
        assert_eq!(d.bth.opcode, h.bth.opcode);
        self.tx.push(p);
        if info.is_request {
            if self.sent_reqs.len() >= 64 {
                self.sent_reqs.pop_front();
            }
            self.sent_reqs.push_back(h);
        }
    }

    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull> {
        self.outputs_in_call += 1;
        let i = match cq {
            CqKind::Send => 0,
            CqKind::Recv => 1,
        };
        if self.cq_len[i] >= self.cq_cap {
            self.cq_overflowed = true;
            return Err(CqFull);
        }
        self.cq_len[i] += 1;
        if self.log_wc && self.wc_log.len() < 10_000 {
            self.wc_log
                .push((format!("wc.{cq:?}.{:?}.{:?}", wc.opcode, wc.status), 1));
        }
        assert_eq!(wc.qp_num, self.qpn, "completion for another QP: {wc:?}");
        let q = match cq {
            CqKind::Send => &mut self.send,
            CqKind::Recv => &mut self.recv,
        };
        let entry = if self.srq && cq == CqKind::Recv {
            // SRQ WQEs still complete at most once.
            let pos = q.outstanding.iter().position(|&(w, _)| w == wc.wr_id);
            assert!(pos.is_some(), "recv completion of an unposted WR {wc:?}");
            q.outstanding.remove(pos.unwrap_or(0))
        } else {
            let head = q.outstanding.pop_front();
            assert_eq!(
                head.map(|(w, _)| w),
                Some(wc.wr_id),
                "{cq:?} completion out of order, unposted or twice: {wc:?}"
            );
            head
        };
        if let Some((_, total)) = entry {
            if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                assert!(
                    u64::from(wc.byte_len) <= total,
                    "received {} bytes into a {total}-byte WQE",
                    wc.byte_len
                );
            }
        }
        Ok(())
    }

    fn async_event(&mut self, ev: AsyncEvent, _cq: Option<CqKind>) {
        self.outputs_in_call += 1;
        self.events.push(ev);
    }

    fn set_timer(&mut self, which: Timer, deadline_ns: u64) {
        self.outputs_in_call += 1;
        self.timers[timer_index(which)] = Some(deadline_ns);
    }

    fn cancel_timer(&mut self, which: Timer) {
        self.outputs_in_call += 1;
        self.timers[timer_index(which)] = None;
    }
}

// ---------------------------------------------------------------------------------------------
// The driver.

type FuzzQp = Qp<Vec<SendSlot>, Vec<RecvSlot>, Vec<Sge>, Vec<UdDest>>;

const QPN: u32 = 0x11;
const DEST_QPN: u32 = 0x22;
const BUDGET: usize = 16;
/// Outputs one step may produce: every responder resource re-sent in full (reads of the
/// largest MR at the smallest MTU), every WQE of both queues completed, plus a margin.
const MAX_OUTPUTS_PER_STEP: usize = 16 * (8192 / 256 + 1) + 2 * 16 + 64;

fn gid(last: u8, link: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12] = 10;
    g[13] = link;
    g[15] = last;
    g
}

fn path(link: u8) -> PathInfo {
    let mut p = PathInfo::EMPTY;
    p.port_num = link + 1;
    p.sgid = gid(1, link);
    p.dgid = gid(2, link);
    p.timeout = 8;
    p.hop_limit = 64;
    p
}

fn arrived(p: &PathInfo) -> PathMatch {
    PathMatch {
        port_num: p.port_num,
        sgid: p.dgid,
        dgid: p.sgid,
        ..Default::default()
    }
}

struct Driver {
    qp: FuzzQp,
    mem: FuzzMem,
    out: FuzzOut,
    now: u64,
    qp_type: QpType,
    srq: bool,
    apm: bool,
    mtu: u32,
    next_wr_id: u64,
    cfg: [u8; 12],
    rq_psn: u32,
    sq_psn: u32,
    wc_stats: Vec<(String, u64)>,
    /// MSN the peer reports in the ACKs of the answering step.
    peer_msn: u32,
}

/// Packets a message of `len` bytes uses at `mtu` (at least one).
fn npackets(len: u32, mtu: u32) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(mtu.max(1))
    }
}

fn position(k: u32, n: u32) -> Position {
    if n <= 1 {
        Position::Only
    } else if k == 0 {
        Position::First
    } else if k + 1 >= n {
        Position::Last
    } else {
        Position::Middle
    }
}

impl Driver {
    fn new(inp: &mut Input<'_>) -> Option<Driver> {
        let mut cfg = [0u8; 12];
        for b in cfg.iter_mut() {
            *b = inp.u8();
        }
        let qp_type = match cfg[0] % 16 {
            0 => QpType::Uc,
            1 => QpType::Ud,
            _ => QpType::Rc,
        };
        let srq = cfg[0] / 16 == 15;
        let apm = qp_type == QpType::Rc && cfg[0] / 16 == 14;
        let sq_depth = usize::from(cfg[1] % 9);
        let rq_depth = usize::from((cfg[1] / 16) % 9);
        let path_mtu = 1 + cfg[2] % 5;
        // Room for 1 to 4 elements a slot: the 1 to 3 a WR here carries sometimes do not fit.
        let sge_room = 1 + usize::from(cfg[2] / 8 % 4);
        let mtu = 128u32 << path_mtu;
        let cq_cap = if cfg[3] % 8 == 0 {
            1 + usize::from(cfg[3] / 8 % 8)
        } else {
            usize::MAX
        };
        let qp = Qp::new(
            QpCreate {
                qp_type,
                qpn: QPN,
                srq,
            },
            (
                vec![SendSlot::default(); sq_depth],
                vec![Sge::default(); sq_depth * sge_room],
                vec![UdDest::EMPTY; if qp_type.is_datagram() { sq_depth } else { 0 }],
            ),
            (
                vec![RecvSlot::default(); rq_depth],
                vec![Sge::default(); rq_depth * sge_room],
            ),
        )?;
        let out = FuzzOut {
            qpn: QPN,
            dest_qpn: DEST_QPN,
            mtu: if qp_type == QpType::Ud { 1024 } else { mtu },
            tx: Vec::new(),
            outputs_in_call: 0,
            outputs_total: 0,
            send: Expect {
                outstanding: VecDeque::new(),
            },
            recv: Expect {
                outstanding: VecDeque::new(),
            },
            srq,
            cq_cap,
            cq_len: [0, 0],
            cq_overflowed: false,
            events: Vec::new(),
            timers: [None, None],
            wc_log: Vec::new(),
            log_wc: stats::enabled(),
            sent_reqs: VecDeque::new(),
        };
        let psn = |b: u8, x: u8| -> u32 {
            match b % 4 {
                0 => 0,
                1 => 0xFF_FFFF - u32::from(x % 8), // close to the 24-bit wrap
                2 => 0x80_0000 + u32::from(x),
                _ => u32::from(x) << 16 | u32::from(b),
            }
        };
        let rq_psn = psn(cfg[4], cfg[5]);
        let sq_psn = psn(cfg[6], cfg[7]);
        let mut d = Driver {
            qp,
            mem: FuzzMem::new(),
            out,
            now: 1_000_000_000,
            qp_type,
            srq,
            apm,
            mtu: if qp_type == QpType::Ud { 1024 } else { mtu },
            next_wr_id: 1,
            cfg,
            rq_psn,
            sq_psn,
            wc_stats: Vec::new(),
            peer_msn: 0,
        };
        if qp_type == QpType::Ud {
            d.qp.set_port_mtu(1024);
        }
        d.connect(path_mtu, inp);
        Some(d)
    }

    /// Reset -> Init (a few receives) -> RTR -> RTS with the attributes a verbs user passes.
    fn connect(&mut self, path_mtu: u8, inp: &mut Input<'_>) {
        let cfg = self.cfg;
        let mut a = QpAttrs {
            qp_state: QpState::Init,
            qp_access_flags: match cfg[8] % 4 {
                0 => ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC,
                _ => u32::from(cfg[8] >> 2) & ALL_REMOTE | ACCESS_REMOTE_WRITE,
            },
            qkey: 0x1111_0000 | u32::from(cfg[9]),
            pkey: 0xFFFF,
            ..QpAttrs::default()
        };
        let m = match self.qp_type {
            QpType::Ud => AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY,
            _ => AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        };
        self.call(|d| d.qp.modify(d.now, &a, m, &mut d.out))
            .expect("to INIT");
        for _ in 0..(cfg[10] % 4) {
            self.post_recv(inp);
        }
        a.qp_state = QpState::Rtr;
        a.path = path(0);
        a.path_mtu = path_mtu;
        a.dest_qp_num = DEST_QPN;
        a.rq_psn = self.rq_psn;
        a.max_dest_rd_atomic = 1 + cfg[11] % 16;
        a.min_rnr_timer = cfg[11] / 16 * 2;
        let m = match self.qp_type {
            QpType::Rc => {
                AttrMask::STATE
                    | AttrMask::AV
                    | AttrMask::PATH_MTU
                    | AttrMask::DEST_QPN
                    | AttrMask::RQ_PSN
                    | AttrMask::MAX_DEST_RD_ATOMIC
                    | AttrMask::MIN_RNR_TIMER
            }
            QpType::Uc => {
                AttrMask::STATE
                    | AttrMask::AV
                    | AttrMask::PATH_MTU
                    | AttrMask::DEST_QPN
                    | AttrMask::RQ_PSN
            }
            _ => AttrMask::STATE,
        };
        self.call(|d| d.qp.modify(d.now, &a, m, &mut d.out))
            .expect("to RTR");
        a.qp_state = QpState::Rts;
        a.timeout = [0, 1, 8, 14, 20, 31][usize::from(cfg[9] % 6)];
        a.retry_cnt = cfg[9] / 8 % 8;
        a.rnr_retry = cfg[10] / 4 % 8;
        a.sq_psn = self.sq_psn;
        a.max_rd_atomic = cfg[10] / 32 % 8 + 1;
        let mut m = match self.qp_type {
            QpType::Rc => {
                AttrMask::STATE
                    | AttrMask::TIMEOUT
                    | AttrMask::RETRY_CNT
                    | AttrMask::RNR_RETRY
                    | AttrMask::SQ_PSN
                    | AttrMask::MAX_QP_RD_ATOMIC
            }
            _ => AttrMask::STATE | AttrMask::SQ_PSN,
        };
        if self.apm {
            a.alt_path = path(1);
            a.path_mig_state = MigState::Rearm;
            m = m | AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE;
        }
        self.call(|d| d.qp.modify(d.now, &a, m, &mut d.out))
            .expect("to RTS");
    }

    /// Runs one engine call and checks what it produced.
    fn call<T>(&mut self, f: impl FnOnce(&mut Driver) -> T) -> T {
        self.out.outputs_in_call = 0;
        let r = f(self);
        for p in std::mem::take(&mut self.out.tx) {
            self.mem.check_payload(&p);
        }
        assert!(
            self.mem.violations.is_empty(),
            "memory contract violated: {:?}",
            self.mem.violations
        );
        assert!(
            self.out.outputs_in_call <= MAX_OUTPUTS_PER_STEP,
            "{} outputs in one call",
            self.out.outputs_in_call
        );
        self.out.outputs_total += self.out.outputs_in_call as u64;
        r
    }

    fn wr_id(&mut self) -> u64 {
        self.next_wr_id += 1;
        self.next_wr_id
    }

    fn sg(&self, inp: &mut Input<'_>, key: u32, base: u64, size: u32) -> SgList {
        let sel = inp.u8();
        let n = 1 + usize::from(sel % 3);
        let mut v = Vec::new();
        for _ in 0..n {
            let l = match inp.u8() % 8 {
                0 => 0,
                1 => 8,
                2 => self.mtu,
                3 => self.mtu * 2,
                4 => u32::from(inp.u16()) % (size + 1),
                5 => self.mtu / 2,
                6 => 40 + 8,
                _ => u32::from(inp.u8()),
            };
            let off = match inp.u8() % 4 {
                0 => 0,
                1 => size.saturating_sub(l),
                2 => u32::from(inp.u16()) % size.max(1),
                _ => size.saturating_sub(l) / 2,
            };
            let lkey = if sel & 0x80 != 0 && inp.u8() % 4 == 0 {
                [KEY_TGT, KEY_RO, 0x999, KEY_EMPTY][usize::from(inp.u8() % 4)]
            } else {
                key
            };
            v.push(Sge {
                addr: base + u64::from(off),
                length: l,
                lkey,
            });
        }
        SgList::from_slice(&v).unwrap_or(SgList::EMPTY)
    }

    fn post_recv(&mut self, inp: &mut Input<'_>) {
        let wr = RecvWr {
            wr_id: self.wr_id(),
            sg: self.sg(inp, KEY_RECV, 0x1_0000, 4096),
        };
        // Expect it before the call: a post in Error completes at once.
        let total = wr.sg.as_slice().iter().map(|s| u64::from(s.length)).sum();
        self.out.recv.outstanding.push_back((wr.wr_id, total));
        let r = self.call(|d| d.qp.post_recv(&wr, &mut d.out));
        if r.is_err() {
            assert_eq!(
                self.out.recv.outstanding.pop_back(),
                Some((wr.wr_id, total))
            );
        }
    }

    fn post_send(&mut self, inp: &mut Input<'_>) {
        let op = [
            SendOpcode::Send,
            SendOpcode::SendWithImm,
            SendOpcode::SendWithInv,
            SendOpcode::RdmaWrite,
            SendOpcode::RdmaWriteWithImm,
            SendOpcode::RdmaRead,
            SendOpcode::AtomicCmpAndSwp,
            SendOpcode::AtomicFetchAndAdd,
            SendOpcode::LocalInv,
            SendOpcode::RegMr,
        ][usize::from(inp.u8() % 10)];
        let mut wr = SendWr::new(self.wr_id(), op);
        let fl = inp.u8();
        wr.flags = SendFlags(SendFlags::SIGNALED | u32::from(fl & 0x5));
        wr.sg = if op.is_read_or_atomic() {
            self.sg(inp, KEY_RDST, 0x5_0000, 4096)
        } else {
            self.sg(inp, KEY_SRC, 0x4_0000, 4096)
        };
        wr.imm = inp.u32();
        wr.invalidate_rkey = KEY_SPARE;
        wr.remote_addr = inp.u64();
        wr.rkey = inp.u32();
        let (compare_add, swap) = (inp.u64(), inp.u64());
        wr.extra = match op {
            _ if op.is_atomic() => WrExtra::Atomic { compare_add, swap },
            SendOpcode::RegMr => WrExtra::Reg(RegMrParams {
                key: KEY_SPARE,
                iova: 0x8_0000,
                length: 256,
                access: ACCESS_LOCAL_WRITE,
                mr_handle: 1,
            }),
            _ => WrExtra::None,
        };
        // Ignored by the RC and UC QPs.
        wr.ud = UdDest {
            path: path(0),
            remote_qpn: DEST_QPN,
            remote_qkey: 0x8000_0000,
        };
        self.out.send.outstanding.push_back((wr.wr_id, 0));
        let r = self.call(|d| d.qp.post_send(&wr, &mut d.out));
        if r.is_err() {
            assert_eq!(self.out.send.outstanding.pop_back(), Some((wr.wr_id, 0)));
        }
    }

    /// `progress` until it returns less than its budget; must end.
    fn progress(&mut self) {
        for _ in 0..256 {
            let n = self.call(|d| {
                let n = d.qp.progress(d.now, BUDGET, &mut d.mem, &mut d.out);
                let transmitted = d.out.tx.len();
                assert!(n <= BUDGET, "progress sent {n} > budget");
                assert!(
                    transmitted <= n,
                    "progress transmitted {transmitted}, said {n}"
                );
                if n >= BUDGET && !d.qp.transmit_pending() {
                    let again = d.qp.progress(d.now, BUDGET, &mut d.mem, &mut d.out);
                    assert_eq!(again, 0, "transmit_pending said nothing was left");
                }
                n
            });
            if n < BUDGET {
                return;
            }
        }
        panic!("progress still returns a full budget after 256 calls");
    }

    fn fire_timer(&mut self, inp: &mut Input<'_>) {
        let sel = inp.u8();
        let which = if sel & 1 == 0 {
            Timer::Retransmit
        } else {
            Timer::Rnr
        };
        if let Some(d) = self.out.timers[timer_index(which)] {
            if sel & 6 != 0 {
                self.now = self.now.max(d);
            }
            self.out.timers[timer_index(which)] = None;
        } else if sel & 8 == 0 {
            return; // not armed: a stale call only sometimes
        }
        self.call(|d| d.qp.timer_expired(d.now, which, &mut d.out));
    }

    fn transport(&self) -> Transport {
        match self.qp_type {
            QpType::Uc => Transport::Uc,
            QpType::Ud => Transport::Ud,
            _ => Transport::Rc,
        }
    }

    fn key(&self, inp: &mut Input<'_>) -> (u32, u64, u32) {
        let s = inp.u8();
        let i = usize::from(s % (MRS.len() as u8 + 1));
        match MRS.get(i) {
            Some(&(k, b, l, _)) => (k, b, l as u32),
            None => (inp.u32(), inp.u64(), 4096),
        }
    }

    fn va(&self, inp: &mut Input<'_>, base: u64, size: u32, align: bool) -> u64 {
        let s = inp.u8();
        let off = match s % 8 {
            0 => 0,
            1 => u64::from(size).saturating_sub(8),
            2 => u64::from(size),
            3 => u64::from(inp.u16() % 1024) * 8,
            4 => u64::from(inp.u16()),
            5 => u64::from(size).saturating_sub(u64::from(inp.u8())),
            6 => return inp.u64(),
            _ => u64::from(size / 2),
        };
        let va = base.wrapping_add(off);
        if align {
            va & !7
        } else {
            va
        }
    }

    fn dma_len(&self, inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 10 {
            0 => 0,
            1 => 8,
            2 => self.mtu,
            3 => self.mtu * 2 + 1,
            4 => u32::from(inp.u16()),
            5 => inp.u32(),
            6 => 0x8000_0000,
            7 => u32::MAX,
            8 => self.mtu * u32::from(inp.u8() % 8),
            _ => u32::from(inp.u8()),
        }
    }

    /// A packet from structured fields.
    fn structured(&mut self, inp: &mut Input<'_>) -> Option<(Headers, Vec<u8>, PathMatch)> {
        let s = inp.u8();
        let own: Vec<Opcode> = Opcode::ALL
            .iter()
            .copied()
            .filter(|o| o.transport() == self.transport())
            .collect();
        let op = if s & 0x80 == 0 && !own.is_empty() {
            own[usize::from(s & 0x7F) % own.len()]
        } else {
            Opcode::ALL[usize::from(s & 0x7F) % Opcode::ALL.len()]
        };
        let info = op.info();
        let q = self.qp.query();
        let f = inp.u8();
        let dest = if f & 0xF0 == 0xF0 { inp.u32() } else { QPN };
        let base = if info.is_request {
            Psn::new(q.rq_psn)
        } else {
            match f & 3 {
                0 | 1 => Psn::new(self.qp.sq_logic().una()),
                2 => Psn::new(q.sq_psn).prev(),
                _ => Psn::new(q.sq_psn),
            }
        };
        let d = inp.u8();
        let psn = match d % 8 {
            0..=2 => base,
            3 => base.prev(),
            4 => base.next(),
            5 => base.sub(u32::from(inp.u8())),
            6 => base.add(u32::from(inp.u8())),
            _ => Psn::new(inp.u32()),
        };
        let mut bth = Bth::new(op, dest, psn);
        bth.ack_req = f & 4 != 0;
        bth.solicited = f & 8 != 0;
        bth.mig_req = d & 0x80 != 0;
        if d & 0x70 == 0x70 {
            bth.tver = inp.u8() & 0xF;
            bth.pkey = inp.u16();
        }
        let mut h = Headers::new(bth);
        if info.has_deth {
            let qk = inp.u8();
            h.deth = Some(Deth {
                qkey: if qk & 1 == 0 {
                    0x1111_0000 | u32::from(self.cfg[9])
                } else {
                    inp.u32()
                },
                src_qp: u32::from(qk),
            });
        }
        if info.has_reth {
            let (rkey, b, size) = self.key(inp);
            h.reth = Some(Reth {
                va: self.va(inp, b, size, false),
                rkey,
                dma_len: self.dma_len(inp),
            });
        }
        if info.has_atomic_eth {
            let (rkey, b, size) = self.key(inp);
            let a = inp.u8();
            h.atomic_eth = Some(AtomicEth {
                va: self.va(inp, b, size, a & 1 == 0),
                rkey,
                swap_add: if a & 2 == 0 { u64::from(a) } else { inp.u64() },
                compare: if a & 4 == 0 { 0 } else { inp.u64() },
            });
        }
        if info.has_aeth {
            let a = inp.u8();
            let syndrome = match a % 8 {
                0..=2 => Syndrome::Ack { credit: a >> 3 },
                3 => Syndrome::RnrNak { timer: a >> 3 },
                4 | 5 => Syndrome::Nak(
                    NakCode::from_u8((a >> 3) % 5).unwrap_or(NakCode::PsnSequenceError),
                ),
                _ => Syndrome::from_u8(inp.u8()),
            };
            let m = inp.u8();
            let msn = match m % 4 {
                0 | 1 => u32::from(m >> 2),
                2 => (u32::from(m) << 16 | 0xFF00).wrapping_sub(1) & 0xFF_FFFF,
                _ => inp.u32() & 0xFF_FFFF,
            };
            h.aeth = Some(Aeth { syndrome, msn });
        }
        if info.has_atomic_ack_eth {
            h.atomic_ack_eth = Some(AtomicAckEth { orig: inp.u64() });
        }
        if info.has_immdt {
            h.immdt = Some(ImmDt { imm: inp.u32() });
        }
        if info.has_ieth {
            let (rkey, _, _) = self.key(inp);
            h.ieth = Some(Ieth { rkey });
        }
        let mut payload = Vec::new();
        if info.has_payload {
            let l = match inp.u8() % 8 {
                0 => 0,
                1 | 2 => self.mtu as usize,
                3 => 8,
                4 => usize::from(inp.u16()) % (2 * self.mtu as usize + 2),
                5 => self.mtu as usize - 1,
                6 => self.mtu as usize + 1,
                _ => usize::from(inp.u8()),
            };
            let fill = inp.u8();
            payload = (0..l).map(|i| fill.wrapping_add(i as u8)).collect();
        }
        h.bth.pad_count = pad_count(payload.len());
        Some((h, payload, self.arrival(inp)))
    }

    fn arrival(&self, inp: &mut Input<'_>) -> PathMatch {
        match inp.u8() % 16 {
            0 => arrived(&path(1)),
            1 => PathMatch {
                port_num: inp.u8(),
                sgid: gid(inp.u8(), 0),
                dgid: gid(1, 0),
                ..Default::default()
            },
            _ => arrived(self.qp.primary_path()),
        }
    }

    /// A packet decoded from raw bytes, optionally re-addressed to us near the ePSN.
    fn raw(&mut self, inp: &mut Input<'_>) -> Option<(Headers, Vec<u8>, PathMatch)> {
        let l = usize::from(inp.u8()) * 4 + usize::from(inp.u8() % 4);
        let fix = inp.u8();
        let bytes = inp.take(l);
        let (mut h, payload) = Headers::decode_with_payload(bytes).ok()?;
        if fix & 1 != 0 {
            h.bth.dest_qp = QPN;
        }
        if fix & 2 != 0 {
            let q = self.qp.query();
            let base = if h.info().is_request {
                q.rq_psn
            } else {
                self.qp.sq_logic().una()
            };
            h.bth.psn = Psn::new(base).add(u32::from(fix >> 4)).sub(2);
        }
        let payload = payload.to_vec();
        Some((h, payload, self.arrival(inp)))
    }

    fn receive(&mut self, pkt: (Headers, Vec<u8>, PathMatch)) {
        let (h, payload, on) = pkt;
        self.call(|d| {
            d.qp.receive(d.now, &h, payload[..].into(), &on, &mut d.mem, &mut d.out)
        });
    }

    fn modify(&mut self, inp: &mut Input<'_>) {
        let s = inp.u8();
        let state = self.qp.state();
        match s % 8 {
            0 | 1 if state == QpState::Rts => {
                let a = QpAttrs {
                    qp_state: QpState::Sqd,
                    en_sqd_async_notify: true,
                    ..QpAttrs::default()
                };
                let m = AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY;
                let _ = self.call(|d| d.qp.modify(d.now, &a, m, &mut d.out));
            }
            0..=3 if matches!(state, QpState::Sqd | QpState::Sqe) => {
                let a = QpAttrs {
                    qp_state: QpState::Rts,
                    ..QpAttrs::default()
                };
                let _ = self.call(|d| d.qp.modify(d.now, &a, AttrMask::STATE, &mut d.out));
            }
            4 if state == QpState::Rts && self.qp_type == QpType::Rc => {
                // RTS -> RTS with new access flags and RNR timer.
                let a = QpAttrs {
                    qp_state: QpState::Rts,
                    qp_access_flags: u32::from(inp.u8()) & ALL_REMOTE,
                    min_rnr_timer: inp.u8() % 32,
                    ..QpAttrs::default()
                };
                let m = AttrMask::STATE | AttrMask::ACCESS_FLAGS | AttrMask::MIN_RNR_TIMER;
                self.call(|d| d.qp.modify(d.now, &a, m, &mut d.out))
                    .expect("RTS -> RTS");
            }
            5 => self.reconnect(inp),
            _ => {}
        }
    }

    /// To Error (everything posted must have completed exactly once), Reset, and up again.
    fn to_error(&mut self) {
        if self.qp.state() != QpState::Error {
            let a = QpAttrs {
                qp_state: QpState::Error,
                ..QpAttrs::default()
            };
            self.call(|d| d.qp.modify(d.now, &a, AttrMask::STATE, &mut d.out))
                .expect("to Error");
        }
        if !self.out.cq_overflowed {
            assert!(
                self.out.send.outstanding.is_empty(),
                "send WRs never completed: {:?}",
                self.out.send.outstanding
            );
            if !self.srq {
                assert!(
                    self.out.recv.outstanding.is_empty(),
                    "recv WRs never completed: {:?}",
                    self.out.recv.outstanding
                );
            }
        }
    }

    fn reconnect(&mut self, inp: &mut Input<'_>) {
        self.to_error();
        let a = QpAttrs {
            qp_state: QpState::Reset,
            ..QpAttrs::default()
        };
        self.call(|d| d.qp.modify(d.now, &a, AttrMask::STATE, &mut d.out))
            .expect("to Reset");
        self.out.send.outstanding.clear();
        self.out.recv.outstanding.clear();
        self.out.cq_len = [0, 0];
        self.out.cq_overflowed = false;
        self.out.timers = [None, None];
        self.rq_psn = inp.u32() & 0xFF_FFFF;
        self.sq_psn = inp.u32() & 0xFF_FFFF;
        let path_mtu = 1 + self.cfg[2] % 5;
        self.connect(path_mtu, inp);
    }

    /// Delivers a well-formed packet train, perhaps with one packet lost and one duplicated.
    fn deliver_train(&mut self, inp: &mut Input<'_>, pkts: Vec<(Headers, Vec<u8>)>) {
        let m = inp.u8();
        let n = pkts.len().max(1);
        let lose = if m & 0x10 != 0 {
            usize::from(m & 0xF) % n
        } else {
            usize::MAX
        };
        let dup = if m & 0x20 != 0 {
            usize::from(inp.u8()) % n
        } else {
            usize::MAX
        };
        let on = arrived(self.qp.primary_path());
        for (i, (h, payload)) in pkts.into_iter().enumerate() {
            if i == lose {
                continue;
            }
            let times = if i == dup { 2 } else { 1 };
            for _ in 0..times {
                self.receive((h, payload.clone(), on));
            }
            if m & 0x40 != 0 {
                self.progress();
            }
        }
    }

    /// A whole well-formed request message at the ePSN, as a correct peer would send it.
    fn message(&mut self, inp: &mut Input<'_>) {
        let t = self.transport();
        let k = inp.u8();
        let mtu = self.mtu;
        let mut len = match inp.u8() % 8 {
            0 => 0,
            1 => 8,
            2 => mtu,
            3 => 2 * mtu,
            4 => 3 * mtu + 5,
            5 => u32::from(inp.u16()) % 4097,
            6 => 40,
            _ => u32::from(inp.u8()),
        };
        let (rkey, base, size) = match inp.u8() % 8 {
            0..=3 => (KEY_TGT, 0x2_0000u64, 8192u32),
            4 => (KEY_HIGH, u64::MAX - 4095, 4096),
            5 => (KEY_RO, 0x3_0000, 4096),
            6 => (KEY_EMPTY, 0x7_0000, 0),
            _ => self.key(inp),
        };
        let psn0 = Psn::new(self.qp.query().rq_psn);
        let fill = inp.u8();
        let imm = inp.u32();
        let bth = |op: Opcode, k: u32| {
            let mut b = Bth::new(op, QPN, psn0.add(k));
            b.ack_req = fill & 1 != 0;
            b
        };
        let mut pkts = Vec::new();
        match k % 8 {
            kind @ (0..=2 | 3 | 4) => {
                let is_send = kind <= 2;
                if t == Transport::Ud {
                    len = len.min(1024);
                }
                let off = u64::from(size.saturating_sub(len)) / 2;
                let n = npackets(len, mtu);
                for i in 0..n {
                    let pos = position(i, n);
                    let last = pos.ends_message();
                    let op = if is_send {
                        Opcode::send(t, pos, last && kind == 1, last && kind == 2)
                    } else {
                        Opcode::rdma_write(t, pos, last && kind == 4)
                    };
                    let Some(op) = op else {
                        return;
                    };
                    let mut h = Headers::new(bth(op, i));
                    let info = op.info();
                    if info.has_deth {
                        h.deth = Some(Deth {
                            qkey: 0x1111_0000 | u32::from(self.cfg[9]),
                            src_qp: DEST_QPN,
                        });
                    }
                    if info.has_reth {
                        h.reth = Some(Reth {
                            va: base.wrapping_add(off),
                            rkey,
                            dma_len: len,
                        });
                    }
                    if info.has_immdt {
                        h.immdt = Some(ImmDt { imm });
                    }
                    if info.has_ieth {
                        h.ieth = Some(Ieth { rkey: imm });
                    }
                    let plen = len.saturating_sub(i * mtu).min(mtu);
                    let payload: Vec<u8> = (0..plen).map(|j| fill ^ j as u8).collect();
                    h.bth.pad_count = pad_count(payload.len());
                    pkts.push((h, payload));
                }
            }
            5 => {
                let off = u64::from(size.saturating_sub(len)) / 2;
                let mut h = Headers::new(bth(Opcode::RcRdmaReadRequest, 0));
                h.bth.ack_req = true;
                h.reth = Some(Reth {
                    va: base.wrapping_add(off),
                    rkey,
                    dma_len: len,
                });
                pkts.push((h, Vec::new()));
            }
            kind => {
                let op = if kind == 6 {
                    Opcode::RcCompareSwap
                } else {
                    Opcode::RcFetchAdd
                };
                let mut h = Headers::new(bth(op, 0));
                h.bth.ack_req = true;
                h.atomic_eth = Some(AtomicEth {
                    va: base.wrapping_add(u64::from(size / 2 & !7)),
                    rkey,
                    swap_add: u64::from(imm),
                    compare: u64::from(fill),
                });
                pkts.push((h, Vec::new()));
            }
        }
        self.deliver_train(inp, pkts);
    }

    /// The peer answers one of our request packets: ACK (or a NAK), RDMA Read responses or
    /// an Atomic ACK, as a correct responder would.
    fn answer(&mut self, inp: &mut Input<'_>) {
        let sel = inp.u8();
        let Some(&req) = (if sel & 0x80 != 0 {
            let n = self.out.sent_reqs.len().max(1);
            self.out.sent_reqs.get(usize::from(sel & 0x7F) % n)
        } else {
            // The oldest request not yet acknowledged.
            let una = Psn::new(self.qp.sq_logic().una());
            self.out
                .sent_reqs
                .iter()
                .find(|h| h.bth.psn.is_after_or_eq(una))
        }) else {
            return;
        };
        let mode = inp.u8();
        let psn = req.bth.psn;
        let info = req.info();
        if info.position.ends_message() && mode & 0x80 == 0 {
            self.peer_msn = self.peer_msn.wrapping_add(1) & 0xFF_FFFF;
        }
        let credit = if mode & 0x40 != 0 { mode & 0x1F } else { 0x1F };
        let ack = Aeth {
            syndrome: Syndrome::Ack { credit },
            msn: self.peer_msn,
        };
        let mk = |op: Opcode, p: Psn| {
            let mut b = Bth::new(op, QPN, p);
            b.mig_req = req.bth.mig_req;
            Headers::new(b)
        };
        let mut pkts = Vec::new();
        match info.operation {
            rvrdma_core::wire::Operation::RdmaReadRequest => {
                let len = req.reth.map_or(0, |r| r.dma_len).min(1 << 16);
                let n = npackets(len, self.mtu);
                for k in 0..n {
                    let pos = position(k, n);
                    let mut h = mk(Opcode::rdma_read_response(pos), psn.add(k));
                    if h.info().has_aeth {
                        h.aeth = Some(ack);
                    }
                    let plen = len.saturating_sub(k * self.mtu).min(self.mtu);
                    let payload: Vec<u8> = (0..plen).map(|j| mode ^ j as u8).collect();
                    h.bth.pad_count = pad_count(payload.len());
                    pkts.push((h, payload));
                }
            }
            rvrdma_core::wire::Operation::CompareSwap | rvrdma_core::wire::Operation::FetchAdd => {
                let mut h = mk(Opcode::RcAtomicAcknowledge, psn);
                h.aeth = Some(ack);
                h.atomic_ack_eth = Some(AtomicAckEth { orig: inp.u64() });
                pkts.push((h, Vec::new()));
            }
            _ => {
                let mut h = mk(Opcode::RcAcknowledge, psn);
                h.aeth = Some(match mode % 16 {
                    13 => Aeth::rnr_nak(self.peer_msn, mode >> 3),
                    14 => Aeth::nak(self.peer_msn, NakCode::PsnSequenceError),
                    15 => Aeth::nak(
                        self.peer_msn,
                        NakCode::from_u8(inp.u8() % 5).unwrap_or(NakCode::InvalidRequest),
                    ),
                    _ => ack,
                });
                if mode % 16 >= 13 {
                    h.bth.psn = psn;
                }
                pkts.push((h, Vec::new()));
            }
        }
        self.deliver_train(inp, pkts);
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        let op = inp.u8();
        // Time always moves forward, mostly by a little.
        let dt = match op >> 5 {
            0..=3 => u64::from(op & 0x1F) * 1000,
            4..=5 => u64::from(inp.u16()) * 64,
            6 => 1u64 << (inp.u8() % 40),
            _ => 0,
        };
        self.now = self.now.saturating_add(dt);
        match op % 32 {
            0..=8 => {
                if let Some(p) = self.structured(inp) {
                    self.receive(p);
                }
            }
            9..=11 => {
                if let Some(p) = self.raw(inp) {
                    self.receive(p);
                }
            }
            12..=15 => self.message(inp),
            16..=18 | 31 => self.answer(inp),
            19 | 20 => self.fire_timer(inp),
            21 | 22 => self.post_recv(inp),
            23 | 30 => self.post_send(inp),
            24..=26 => self.progress(),
            27 => {
                // The shell polls the CQs empty.
                self.out.cq_len = [0, 0];
            }
            28 => self.modify(inp),
            _ => {
                // A burst: the same structured packet several times (duplicates).
                if let Some(p) = self.structured(inp) {
                    for _ in 0..(1 + inp.u8() % 4) {
                        self.receive(p.clone());
                    }
                }
            }
        }
    }
}

/// With `RESPONDER_STATS=1` in the environment (e.g. `-runs=` over the corpus), how deep the
/// inputs reach: engine counters, completion statuses and events summed over all runs.
mod stats {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    pub static STATS: Mutex<Option<BTreeMap<String, u64>>> = Mutex::new(None);

    pub fn enabled() -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| std::env::var_os("RESPONDER_STATS").is_some())
    }

    pub fn add(items: &[(String, u64)]) {
        let Ok(mut g) = STATS.lock() else {
            return;
        };
        let m = g.get_or_insert_with(BTreeMap::new);
        for (k, v) in items {
            *m.entry(k.clone()).or_insert(0) += v;
        }
        let runs = m.entry("runs".into()).or_insert(0);
        *runs += 1;
        if *runs % 500 == 0 {
            eprintln!("stats: {m:?}");
        }
    }
}

fn record_stats(d: &Driver) {
    let c = d.qp.counters();
    let mut v: Vec<(String, u64)> = vec![
        ("rq.packets_received".into(), c.rq.packets_received),
        ("rq.responses_sent".into(), c.rq.responses_sent),
        ("rq.duplicates".into(), c.rq.duplicates),
        ("rq.sequence_errors".into(), c.rq.sequence_errors),
        ("rq.rnr_naks_sent".into(), c.rq.rnr_naks_sent),
        ("rq.silent_drops".into(), c.rq.silent_drops),
        ("rq.unsolicited_acks".into(), c.rq.unsolicited_acks),
        ("rq.remote_invalidations".into(), c.rq.remote_invalidations),
        ("sq.packets_sent".into(), c.sq.packets_sent),
        ("sq.retransmitted".into(), c.sq.retransmitted),
        ("sq.retries".into(), c.sq.retries),
        ("sq.timeouts".into(), c.sq.timeouts),
        ("sq.rnr_naks_received".into(), c.sq.rnr_naks_received),
        ("sq.seq_naks_received".into(), c.sq.seq_naks_received),
        ("sq.credit_stalls".into(), c.sq.credit_stalls),
        ("sq.responses_received".into(), c.sq.responses_received),
        ("sq.duplicate_responses".into(), c.sq.duplicate_responses),
        ("qp.dropped".into(), c.dropped),
        ("qp.migrations".into(), c.migrations),
    ];
    for (k, n) in &d.wc_stats {
        v.push((k.clone(), *n));
    }
    for e in &d.out.events {
        v.push((format!("event.{e:?}"), 1));
    }
    stats::add(&v);
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input { data, pos: 0 };
    let Some(mut d) = Driver::new(&mut inp) else {
        return;
    };
    let mut steps = 0u64;
    while !inp.done() {
        d.step(&mut inp);
        steps += 1;
    }
    d.progress();
    assert!(
        d.out.outputs_total <= (steps + 8) * MAX_OUTPUTS_PER_STEP as u64,
        "{} outputs for {steps} steps",
        d.out.outputs_total
    );
    d.to_error();
    d.progress();
    if stats::enabled() {
        d.wc_stats = std::mem::take(&mut d.out.wc_log);
        record_stats(&d);
    }
});
