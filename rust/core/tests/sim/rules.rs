//! Unit tests of the seed rules, each named after its seed, on a pair of QPs wired back to back
//! where the test decides which packet goes where.

use rvrdma_core::apm::{MigState, PathInfo, PathMatch};
use rvrdma_core::credit::{encode_credit, CreditLimit, CREDIT_CODE_INVALID};
use rvrdma_core::events::{AsyncEvent, Timer, WcOpcode, WcStatus};
use rvrdma_core::memory::{
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp::{QpAttrs, QpCreate};
use rvrdma_core::qp_state::{AttrMask, QpState, QpType};
use rvrdma_core::requester::{local_ack_timeout_ns, PostError};
use rvrdma_core::wire::{
    Aeth, AtomicEth, Bth, Headers, NakCode, Opcode, Operation, Reth, Syndrome,
};
use rvrdma_core::wqe::{RecvSlot, RecvWr, SendFlags, SendOpcode, SendSlot, SendWr, SgList, Sge};

use super::mem::SimMem;
use super::node::{timer_index, SimOut, SimQp};
use super::rng::Rng;

const MTU: u32 = 256;
// MR keys as the driver makes them: index << 8 | key byte.
const SRC: u32 = 0x1_5a;
const DST: u32 = 0x2_c3;
const RMT: u32 = 0x3_17;
const ATM: u32 = 0x4_e8;
const SRC_VA: u64 = 0x10000;
const DST_VA: u64 = 0x20000;
const RMT_VA: u64 = 0x30000;
const ATM_VA: u64 = 0x40000;
const PSN_A: u32 = 100;
const PSN_B: u32 = 500;

pub struct End {
    pub qp: SimQp,
    pub mem: SimMem,
    pub out: SimOut,
    pub paths: [PathInfo; 2],
}

fn gid(node: usize, link: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[13] = link as u8;
    g[15] = node as u8 + 1;
    g
}

fn path(node: usize, link: usize) -> PathInfo {
    let mut p = PathInfo::EMPTY;
    p.port_num = link as u8 + 1;
    p.sgid = gid(node, link);
    p.dgid = gid(1 - node, link);
    p.timeout = 8;
    p
}

#[derive(Clone, Copy)]
pub struct Opts {
    pub pre_rtr_recvs: [usize; 2],
    pub srq: [bool; 2],
    pub armed: bool,
    pub max_dest_rd_atomic: u8,
    pub max_rd_atomic: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub to: QpState,
    pub uc: bool,
    /// Starting PSNs of node 0's and node 1's SQ (default PSN_A, PSN_B).
    pub psns: (u32, u32),
    /// Local ACK timeout exponent of both SQs (0 = infinite).
    pub timeout: u8,
    /// P_Keys of node 0's and node 1's QP (the values of their pkey_index).
    pub pkeys: [u16; 2],
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            pre_rtr_recvs: [0, 0],
            srq: [false, false],
            armed: false,
            max_dest_rd_atomic: 4,
            max_rd_atomic: 4,
            retry_cnt: 3,
            rnr_retry: 7,
            to: QpState::Rts,
            uc: false,
            psns: (PSN_A, PSN_B),
            timeout: 8,
            pkeys: [0xFFFF; 2],
        }
    }
}

pub struct Duo {
    pub e: [End; 2],
    pub now: u64,
    pub recv_seq: [u64; 2],
}

fn mk_end(i: usize, srq: bool) -> End {
    mk_end_t(i, srq, QpType::Rc)
}

fn mk_end_t(i: usize, srq: bool, qp_type: QpType) -> End {
    let mem = SimMem::default();
    mem.add_mr(SRC, SRC_VA, 1 << 16, ACCESS_LOCAL_WRITE);
    mem.add_mr(DST, DST_VA, 1 << 16, ACCESS_LOCAL_WRITE);
    mem.add_mr(
        RMT,
        RMT_VA,
        1 << 16,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
    );
    mem.add_mr(ATM, ATM_VA, 64, ACCESS_REMOTE_ATOMIC);
    let qp = SimQp::new(
        QpCreate {
            qp_type,
            qpn: 0x11 + i as u32,
            srq,
        },
        vec![SendSlot::default(); 16],
        vec![RecvSlot::default(); 16],
    )
    .expect("RC");
    End {
        qp,
        out: SimOut::new(mem.clone()),
        mem,
        paths: [path(i, 0), path(i, 1)],
    }
}

impl Duo {
    pub fn new(o: Opts) -> Duo {
        let t = if o.uc { QpType::Uc } else { QpType::Rc };
        let mut d = Duo {
            e: [mk_end_t(0, o.srq[0], t), mk_end_t(1, o.srq[1], t)],
            now: 0,
            recv_seq: [0, 0],
        };
        for i in 0..2 {
            d.go_init(i, o.pkeys[i]);
            for _ in 0..o.pre_rtr_recvs[i] {
                d.post_recv(i, 4096).expect("recv");
            }
        }
        if o.to == QpState::Init {
            return d;
        }
        for i in 0..2 {
            d.go_rtr(i, &o);
        }
        if o.to == QpState::Rtr {
            return d;
        }
        for i in 0..2 {
            d.go_rts(i, &o);
        }
        d
    }

    fn go_init(&mut self, i: usize, pkey: u16) {
        let e = &mut self.e[i];
        let a = QpAttrs {
            qp_state: QpState::Init,
            pkey,
            qp_access_flags: ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC,
            ..QpAttrs::default()
        };
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
        e.qp.modify(0, &a, m, &mut e.out).expect("INIT");
    }

    fn go_rtr(&mut self, i: usize, o: &Opts) {
        let e = &mut self.e[i];
        let a = QpAttrs {
            qp_state: QpState::Rtr,
            path: e.paths[0],
            path_mtu: 1,
            dest_qp_num: 0x11 + (1 - i) as u32,
            rq_psn: if i == 0 { o.psns.1 } else { o.psns.0 },
            max_dest_rd_atomic: o.max_dest_rd_atomic,
            min_rnr_timer: 3,
            ..QpAttrs::default()
        };
        let mut m = AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN;
        if !o.uc {
            m = m | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
        }
        e.qp.modify(0, &a, m, &mut e.out).expect("RTR");
    }

    fn go_rts(&mut self, i: usize, o: &Opts) {
        let e = &mut self.e[i];
        let mut a = QpAttrs {
            qp_state: QpState::Rts,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            sq_psn: if i == 0 { o.psns.0 } else { o.psns.1 },
            max_rd_atomic: o.max_rd_atomic,
            ..QpAttrs::default()
        };
        let mut m = AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC;
        if o.uc {
            m = AttrMask::STATE | AttrMask::SQ_PSN;
        }
        if o.armed {
            a.alt_path = e.paths[1];
            a.path_mig_state = MigState::Rearm;
            m = m | AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE;
        }
        e.qp.modify(0, &a, m, &mut e.out).expect("RTS");
    }

    pub fn post_recv(&mut self, i: usize, len: u32) -> Result<(), PostError> {
        let k = self.recv_seq[i];
        self.recv_seq[i] += 1;
        let e = &mut self.e[i];
        let wr = RecvWr {
            wr_id: 1000 + k,
            sg: SgList::from_slice(&[Sge {
                addr: DST_VA + (k % 8) * 4096,
                length: len,
                lkey: DST,
            }])
            .expect("sg"),
        };
        e.qp.post_recv(&wr, &mut e.out)
    }

    pub fn post(&mut self, i: usize, wr: SendWr) -> Result<(), PostError> {
        let e = &mut self.e[i];
        e.qp.post_send(&wr, &mut e.out)
    }

    pub fn progress(&mut self, i: usize) -> usize {
        let now = self.now;
        let e = &mut self.e[i];
        e.qp.progress(now, 64, &mut e.mem, &mut e.out)
    }

    /// Takes the packets node `i` transmitted (decoded).
    pub fn take(&mut self, i: usize) -> Vec<(Headers, Vec<u8>, u8)> {
        std::mem::take(&mut self.e[i].out.tx)
            .into_iter()
            .map(|p| {
                let (h, pl) = Headers::decode_with_payload(&p.bytes).expect("decodable");
                (h, pl.to_vec(), p.path.port_num)
            })
            .collect()
    }

    /// Delivers one packet to node `to` as if it came over link `port - 1`.
    pub fn deliver(&mut self, to: usize, h: &Headers, payload: &[u8], port: u8) {
        let link = (port as usize).saturating_sub(1);
        let pm = PathMatch {
            port_num: port,
            sgid: gid(1 - to, link),
            dgid: gid(to, link),
        };
        let now = self.now;
        let e = &mut self.e[to];
        e.qp.receive(now, h, payload, &pm, &mut e.mem, &mut e.out);
    }

    /// Moves everything node `from` sent to the peer.
    pub fn flow(&mut self, from: usize) -> usize {
        let pk = self.take(from);
        let n = pk.len();
        for (h, p, port) in pk {
            self.deliver(1 - from, &h, &p, port);
        }
        n
    }

    /// Runs both sides until nothing moves.
    pub fn pump(&mut self) {
        for _ in 0..1000 {
            let mut moved = 0;
            for i in 0..2 {
                self.progress(i);
                moved += self.flow(i);
            }
            if moved == 0 {
                return;
            }
        }
        panic!("pump did not settle");
    }

    pub fn fire(&mut self, i: usize, t: Timer) {
        let d = self.e[i].out.timers[timer_index(t)]
            .take()
            .expect("timer armed");
        self.now = self.now.max(d);
        let now = self.now;
        let e = &mut self.e[i];
        e.qp.timer_expired(now, t, &mut e.out);
    }

    pub fn state(&self, i: usize) -> QpState {
        self.e[i].qp.state()
    }
}

fn fill(mem: &SimMem, key: u32, va: u64, data: &[u8]) {
    mem.0.borrow_mut().write(key, va, data).expect("fill");
}

fn send_wr(id: u64, op: SendOpcode, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, op);
    wr.sg = SgList::from_slice(&[Sge {
        addr: SRC_VA,
        length: len,
        lkey: SRC,
    }])
    .expect("sg");
    if op.is_write() {
        wr.remote_addr = RMT_VA;
        wr.rkey = RMT;
    }
    wr
}

fn aeth_of(h: &Headers) -> Aeth {
    h.aeth.expect("AETH")
}

fn is_nak(h: &Headers, code: NakCode) -> bool {
    h.bth.opcode == Opcode::RcAcknowledge && aeth_of(h).syndrome == Syndrome::Nak(code)
}

/// A request from node 0 to node 1 as raw headers (for malformed-packet tests).
fn req(opcode: Opcode, psn: u32) -> Headers {
    let mut h = Headers::new(Bth::new(opcode, 0x12, Psn::new(psn)));
    let info = opcode.info();
    if info.has_reth {
        h.reth = Some(Reth {
            va: RMT_VA,
            rkey: RMT,
            dma_len: 0,
        });
    }
    if info.has_atomic_eth {
        h.atomic_eth = Some(AtomicEth {
            va: ATM_VA,
            rkey: ATM,
            swap_add: 1,
            compare: 0,
        });
    }
    if info.has_immdt {
        h.immdt = Some(rvrdma_core::wire::ImmDt { imm: 7 });
    }
    h
}

// ---- seed 003: end-to-end credits ---------------------------------------------------------

#[test]
fn seed003_rq_credit_count_zero_at_reset_one_per_posted_receive() {
    let mut d = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    assert_eq!(d.e[1].qp.rq_logic().credits(), 0);
    d.post_recv(1, 64).expect("post in Init");
    d.post_recv(1, 64).expect("post in Init");
    assert_eq!(d.e[1].qp.rq_logic().credits(), 2);
    let e = &mut d.e[1];
    let a = QpAttrs {
        qp_state: QpState::Reset,
        ..QpAttrs::default()
    };
    e.qp.modify(0, &a, AttrMask::STATE, &mut e.out)
        .expect("to Reset");
    assert_eq!(e.qp.rq_logic().credits(), 0);
}

#[test]
fn seed003_initial_unsolicited_ack_on_entering_rtr() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        to: QpState::Rtr,
        ..Opts::default()
    });
    let p = d.take(1);
    assert_eq!(p.len(), 1, "exactly one unsolicited ACK");
    let h = &p[0].0;
    assert_eq!(h.bth.opcode, Opcode::RcAcknowledge);
    assert_eq!(h.bth.psn, Psn::new(PSN_A).prev(), "PSN = ePSN - 1");
    let a = aeth_of(h);
    assert_eq!(a.msn, 0);
    assert_eq!(
        a.syndrome,
        Syndrome::Ack {
            credit: encode_credit(3)
        }
    );
}

#[test]
fn seed003_srq_reports_invalid_credit_code() {
    let mut d = Duo::new(Opts {
        srq: [false, true],
        to: QpState::Rtr,
        ..Opts::default()
    });
    let p = d.take(1);
    assert_eq!(
        aeth_of(&p[0].0).syndrome,
        Syndrome::Ack {
            credit: CREDIT_CODE_INVALID
        }
    );
}

#[test]
fn seed003_msn_plus_credits_gives_lsn() {
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.take(1);
    let mut h = Headers::new(Bth::new(
        Opcode::RcAcknowledge,
        0x11,
        Psn::new(PSN_A).prev(),
    ));
    h.aeth = Some(Aeth::ack(5, 3));
    d.deliver(0, &h, &[], 1);
    assert_eq!(d.e[0].qp.sq_logic().credit_limit(), CreditLimit::Lsn(8));
}

/// The peer's initial unsolicited ACK is lost: the requester has heard no credit count from
/// the responder, so it behaves as seed 003 "SQ Logic's Behavior When No Credits Are
/// Available" says (only the first packet of a Send, with AckReq, then wait). Once the peer has
/// reported a count, the requester holds instead (see the credit probe tests).
fn credits_not_reported(d: &mut Duo) {
    assert_eq!(d.take(1).len(), 1, "initial ACK (lost)");
    d.take(0);
}

#[test]
fn seed003_limited_send_waits_for_the_unsolicited_ack_without_rnr_nak() {
    let mut d = Duo::new(Opts::default());
    d.flow(1); // initial ACK: 0 credits
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert!(
        d.take(0).is_empty(),
        "nothing goes while the peer has no WQE"
    );
    // The responder posts a receive: its RQ Logic sends an unsolicited ACK with the credit.
    d.post_recv(1, 4096).expect("recv");
    assert_eq!(d.flow(1), 1, "one unsolicited ACK");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 3, "the whole message goes at once");
    for (h, payload, port) in &p {
        d.deliver(1, h, payload, *port);
    }
    let acks = d.take(1);
    assert!(
        acks.iter().all(|(h, _, _)| h
            .aeth
            .is_some_and(|a| matches!(a.syndrome, Syndrome::Ack { .. }))),
        "no RNR NAK"
    );
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
}

#[test]
fn seed003_no_credit_only_first_packet_with_ackreq() {
    let mut d = Duo::new(Opts::default());
    credits_not_reported(&mut d);
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "only the first packet without credit");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendFirst);
    assert!(p[0].0.bth.ack_req, "AckReq on the uncredited first packet");
    // The responder has a WQE now: the first packet is accepted and ACKed, then the rest go.
    d.post_recv(1, 4096).expect("recv");
    d.take(1);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    d.flow(1);
    d.progress(0);
    let rest = d.take(0);
    assert_eq!(rest.len(), 2, "remaining packets after the ACK");
    assert_eq!(rest[1].0.bth.opcode, Opcode::RcSendLast);
}

#[test]
fn seed003_write_imm_without_credit_sends_all_packets_ackreq_on_last() {
    let mut d = Duo::new(Opts::default());
    credits_not_reported(&mut d);
    d.post(0, send_wr(1, SendOpcode::RdmaWriteWithImm, 3 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 3, "all WriteImm packets, then wait");
    assert!(p[2].0.bth.ack_req);
    assert_eq!(p[2].0.bth.opcode, Opcode::RcRdmaWriteLastWithImmediate);
}

#[test]
fn seed003_wqes_needing_no_rq_wqe_add_one_to_lsn() {
    // One credit (LSN = 1). WQE 1 is an RDMA Write (LSN + 1 = 2), so WQE 2, a Send, is
    // within the LSN and goes out whole.
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.flow(1);
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert_eq!(d.take(0).len(), 4);
}

#[test]
fn seed003_unlimited_peer_reporting_0x1f_is_never_throttled() {
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.take(1);
    let mut h = Headers::new(Bth::new(
        Opcode::RcAcknowledge,
        0x11,
        Psn::new(PSN_A).prev(),
    ));
    h.aeth = Some(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.deliver(0, &h, &[], 1);
    for k in 0..4 {
        d.post(0, send_wr(k, SendOpcode::Send, 2 * MTU))
            .expect("post");
    }
    d.progress(0);
    assert_eq!(d.take(0).len(), 8);
}

#[test]
fn seed003_no_credit_check_on_retransmission() {
    let mut d = Duo::new(Opts::default());
    credits_not_reported(&mut d);
    d.post(0, send_wr(1, SendOpcode::Send, 2 * MTU))
        .expect("post");
    d.progress(0);
    assert_eq!(d.take(0).len(), 1); // lost
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(
        p.len(),
        1,
        "the first packet is retransmitted without credit"
    );
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
}

#[test]
fn seed003_no_reordering_of_the_sq() {
    // Credits known to be 0: the Send holds, and the Write behind it waits too.
    let mut d = Duo::new(Opts::default());
    d.flow(1);
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 2 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    assert!(
        d.take(0).is_empty(),
        "the Write must not overtake the stalled Send"
    );
    // Credits not reported: the Send's first packet goes, the Write waits behind the rest.
    let mut d = Duo::new(Opts::default());
    credits_not_reported(&mut d);
    d.post(0, send_wr(1, SendOpcode::Send, 2 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "the Write must not overtake the stalled Send");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendFirst);
}

/// While the requester holds a limited message (the peer reported 0 credits), it asks for the
/// credits on a schedule of its own: a zero-length Send Only at the last acknowledged PSN, with
/// AckReq. The responder takes it as a duplicate: it re-acknowledges it with its current
/// credit count, consumes no receive WQE and sends no RNR NAK (seed 003: credits ride on every
/// ACK, duplicates included).
#[test]
fn seed003_credit_probe_is_a_duplicate_that_draws_the_current_credits() {
    let mut d = Duo::new(Opts::default());
    d.flow(1); // 0 credits
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    assert!(d.take(0).is_empty());
    let first = retransmit_deadline(&d, 0).expect("probe timer");
    assert_eq!(first, d.now + rvrdma_core::requester::CREDIT_PROBE_MIN_NS);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let h = &p[0].0;
    assert_eq!(h.bth.opcode, Opcode::RcSendOnly);
    assert!(h.bth.ack_req);
    assert_eq!(h.bth.psn, Psn::new(PSN_A).prev());
    assert!(p[0].1.is_empty());
    assert_eq!(
        retransmit_deadline(&d, 0),
        Some(d.now + 2 * rvrdma_core::requester::CREDIT_PROBE_MIN_NS),
        "the next probe waits twice as long"
    );
    // No receive yet: re-ACKed with 0 credits; nothing executed.
    d.deliver(1, h, &p[0].1, 1);
    let r = d.take(1);
    assert_eq!(aeth_of(&r[0].0).syndrome, Syndrome::Ack { credit: 0 });
    assert_eq!(r[0].0.bth.psn, Psn::new(PSN_A).prev());
    assert!(d.e[1].out.recv_cqes.is_empty());
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    // With a receive posted (its unsolicited ACK lost), the next probe brings the credit and
    // the Send goes.
    d.post_recv(1, 64).expect("recv");
    d.take(1);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    d.flow(0);
    d.flow(1);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendOnly);
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
    assert_eq!(d.e[1].qp.rq_logic().credits(), 1, "the probe took no WQE");
}

#[test]
fn seed003_fence_waits_for_earlier_reads() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.flow(1);
    d.take(0);
    let mut rd = SendWr::new(1, SendOpcode::RdmaRead);
    rd.sg = SgList::from_slice(&[Sge {
        addr: DST_VA,
        length: 100,
        lkey: DST,
    }])
    .expect("sg");
    rd.remote_addr = RMT_VA;
    rd.rkey = RMT;
    d.post(0, rd).expect("post");
    let mut s = send_wr(2, SendOpcode::Send, 10);
    s.flags = SendFlags(SendFlags::SIGNALED | SendFlags::FENCE);
    d.post(0, s).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1, "only the read; the fenced send waits");
    assert_eq!(p[0].0.bth.opcode, Opcode::RcRdmaReadRequest);
    for (h, pl, port) in p {
        d.deliver(1, &h, &pl, port);
    }
    d.progress(1);
    d.flow(1);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcSendOnly);
}

#[test]
fn seed003_unsolicited_ack_when_receives_posted_to_stalled_peer() {
    let mut d = Duo::new(Opts::default());
    d.take(1); // initial ACK said 0 credits
    d.post_recv(1, 64).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "unsolicited ACK with the new credit");
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A).prev());
    assert_eq!(
        aeth_of(&p[0].0).syndrome,
        Syndrome::Ack {
            credit: encode_credit(1)
        }
    );
}

#[test]
fn seed003_ack_carries_current_credit_count() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 5],
        ..Opts::default()
    });
    d.flow(1);
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.flow(0);
    let p = d.take(1);
    let a = aeth_of(&p[0].0);
    assert_eq!(
        a.syndrome,
        Syndrome::Ack {
            credit: encode_credit(4)
        }
    );
    assert_eq!(a.msn, 1);
}

// ---- seed 001: Table 17-7 ------------------------------------------------------------------

#[test]
fn seed001_class_b_psn_sequence_error_nak_sent_once() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.take(1);
    let h = req(Opcode::RcSendOnly, PSN_A + 2);
    d.deliver(1, &h, &[1], 1);
    d.deliver(1, &h, &[1], 1);
    let h3 = req(Opcode::RcSendOnly, PSN_A + 3);
    d.deliver(1, &h3, &[1], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1, "one NAK per sequence error");
    assert!(is_nak(&p[0].0, NakCode::PsnSequenceError));
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A), "NAK carries the ePSN");
    assert_eq!(d.state(1), QpState::Rts);
}

#[test]
fn seed001_class_b_rnr_nak_with_min_rnr_timer() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1, 2, 3], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1);
    assert_eq!(aeth_of(&p[0].0).syndrome, Syndrome::RnrNak { timer: 3 });
    assert_eq!(d.state(1), QpState::Rts, "no other action");
    assert_eq!(d.e[1].qp.rq_logic().epsn(), PSN_A);
}

fn class_c_with_wqe_in_use(second: Opcode) {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        ..Opts::default()
    });
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendFirst, PSN_A), &[0u8; MTU as usize], 1);
    d.take(1);
    d.deliver(1, &req(second, PSN_A + 1), &[0u8; MTU as usize], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
    assert_eq!(d.state(1), QpState::Error);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c.len(), 3);
    assert_eq!(
        c[0].status,
        WcStatus::RemInvReqErr,
        "current WQE retired with the error"
    );
    assert!(
        c[1..].iter().all(|w| w.status == WcStatus::WrFlushErr),
        "rest flushed"
    );
}

#[test]
fn seed001_class_c_first_where_middle_or_last_expected() {
    class_c_with_wqe_in_use(Opcode::RcSendFirst);
    class_c_with_wqe_in_use(Opcode::RcSendOnly);
}

#[test]
fn seed001_class_c_middle_or_last_where_first_expected() {
    for op in [Opcode::RcSendMiddle, Opcode::RcSendLast] {
        let mut d = Duo::new(Opts {
            pre_rtr_recvs: [0, 2],
            ..Opts::default()
        });
        d.take(1);
        d.deliver(1, &req(op, PSN_A), &[0u8; MTU as usize], 1);
        let p = d.take(1);
        assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
        assert_eq!(d.state(1), QpState::Error);
        // No RQ WQE was in use: affiliated async event, then the RQ is flushed.
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr));
        assert!(d.e[1]
            .out
            .recv_cqes
            .iter()
            .all(|w| w.status == WcStatus::WrFlushErr));
    }
}

#[test]
fn seed001_class_c_r_key_violation_nak_and_access_error_event() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcRdmaWriteOnly, PSN_A);
    h.reth = Some(Reth {
        va: RMT_VA,
        rkey: 0xdead,
        dma_len: 4,
    });
    d.deliver(1, &h, &[1, 2, 3, 4], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::RemoteAccessError));
    assert!(d.e[1].out.has_event(AsyncEvent::QpAccessErr));
    assert_eq!(d.state(1), QpState::Error);
    // Out of bounds of a valid MR: same, and memory untouched.
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcRdmaWriteOnly, PSN_A);
    h.reth = Some(Reth {
        va: RMT_VA + (1 << 16) - 2,
        rkey: RMT,
        dma_len: 4,
    });
    d.deliver(1, &h, &[9, 9, 9, 9], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::RemoteAccessError));
    let m = d.e[1].mem.0.borrow();
    assert_eq!(
        m.read(RMT, RMT_VA + (1 << 16) - 2, 2).expect("read"),
        vec![0, 0]
    );
}

#[test]
fn seed001_class_c_misaligned_atomic_va() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcFetchAdd, PSN_A);
    h.atomic_eth = Some(AtomicEth {
        va: ATM_VA + 4,
        rkey: ATM,
        swap_add: 1,
        compare: 0,
    });
    d.deliver(1, &h, &[], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr));
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
}

#[test]
fn seed001_class_c_too_many_rdma_read_or_atomic_requests() {
    let mut d = Duo::new(Opts {
        max_dest_rd_atomic: 1,
        ..Opts::default()
    });
    d.take(1);
    let mut h = req(Opcode::RcRdmaReadRequest, PSN_A);
    h.reth = Some(Reth {
        va: RMT_VA,
        rkey: RMT,
        dma_len: 8,
    });
    d.deliver(1, &h, &[], 1);
    let mut h2 = h;
    h2.bth.psn = Psn::new(PSN_A + 1);
    d.deliver(1, &h2, &[], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::InvalidRequest));
    assert_eq!(d.state(1), QpState::Error);
}

#[test]
fn seed001_class_c_length_error_send_exceeds_receive_buffers() {
    let mut d = Duo::new(Opts::default());
    d.post_recv(1, 10).expect("recv");
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[7u8; 100], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    assert_eq!(d.e[1].out.recv_cqes[0].status, WcStatus::LocLenErr);
    assert_eq!(d.state(1), QpState::Error);
}

#[test]
fn seed001_class_c_payload_length_inconsistent_with_opcode() {
    // First must carry exactly PMTU; Only at most PMTU; Last 1..=PMTU.
    for (op, len) in [
        (Opcode::RcSendFirst, MTU as usize - 1),
        (Opcode::RcSendOnly, MTU as usize + 4),
    ] {
        let mut d = Duo::new(Opts {
            pre_rtr_recvs: [0, 1],
            ..Opts::default()
        });
        d.take(1);
        d.deliver(1, &req(op, PSN_A), &vec![0u8; len], 1);
        assert!(
            is_nak(&d.take(1)[0].0, NakCode::InvalidRequest),
            "{op:?} {len}"
        );
    }
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendFirst, PSN_A), &[0u8; MTU as usize], 1);
    d.deliver(1, &req(Opcode::RcSendLast, PSN_A + 1), &[], 1);
    let p = d.take(1);
    assert!(
        is_nak(&p.last().expect("nak").0, NakCode::InvalidRequest),
        "empty Last"
    );
}

#[test]
fn seed001_class_c_rdma_write_payload_differs_from_dma_length() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcRdmaWriteOnly, PSN_A);
    h.reth = Some(Reth {
        va: RMT_VA,
        rkey: RMT,
        dma_len: 8,
    });
    d.deliver(1, &h, &[1, 2, 3, 4], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
}

#[test]
fn seed001_class_a_malformed_rq_wqe_flushes_rq_and_sq() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let e = &mut d.e[1];
    let bad = RecvWr {
        wr_id: 77,
        sg: SgList::from_slice(&[Sge {
            addr: DST_VA,
            length: 64,
            lkey: 0xbad,
        }])
        .expect("sg"),
    };
    e.qp.post_recv(&bad, &mut e.out).expect("post");
    d.post_recv(1, 64).expect("recv");
    d.post(1, send_wr(5, SendOpcode::RdmaWrite, 4))
        .expect("send");
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1, 2], 1);
    let p = d.take(1);
    assert!(is_nak(&p[0].0, NakCode::RemoteOperationalError));
    assert_eq!(d.state(1), QpState::Error);
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!(rc[0].wr_id, 77);
    assert_eq!(rc[0].status, WcStatus::LocQpOpErr);
    assert_eq!(rc[1].status, WcStatus::WrFlushErr);
    assert_eq!(d.e[1].out.send_cqes[0].status, WcStatus::WrFlushErr);
}

#[test]
fn seed001_class_d_invalid_duplicate_atomic_silently_dropped() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    // ePSN moves past PSN_A + 1 with two writes; then an "atomic" at PSN_A (a duplicate PSN
    // with no saved atomic result).
    for k in 0..2 {
        let mut h = req(Opcode::RcRdmaWriteOnly, PSN_A + k);
        h.reth = Some(Reth {
            va: RMT_VA,
            rkey: RMT,
            dma_len: 1,
        });
        d.deliver(1, &h, &[1], 1);
    }
    d.take(1);
    d.deliver(1, &req(Opcode::RcFetchAdd, PSN_A), &[], 1);
    d.progress(1);
    assert!(d.take(1).is_empty(), "no ACK, no NAK");
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
    assert_eq!(d.state(1), QpState::Rts);
}

#[test]
fn seed001_duplicate_atomic_replays_saved_result_executes_once() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let h = req(Opcode::RcFetchAdd, PSN_A);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    let r1 = d.take(1);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    let r2 = d.take(1);
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 1);
    assert_eq!(r1[0].0.atomic_ack_eth, r2[0].0.atomic_ack_eth);
    assert_eq!(r2[0].0.bth.psn, Psn::new(PSN_A));
}

#[test]
fn seed001_duplicate_read_is_executed_again() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 300]);
    let mut h = req(Opcode::RcRdmaReadRequest, PSN_A);
    h.reth = Some(Reth {
        va: RMT_VA,
        rkey: RMT,
        dma_len: 300,
    });
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 2);
    d.deliver(1, &h, &[], 1);
    d.progress(1);
    let p = d.take(1);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcRdmaReadResponseFirst);
}

#[test]
fn seed001_duplicate_send_acked_not_executed_again() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        ..Opts::default()
    });
    d.take(1);
    let mut h = req(Opcode::RcSendOnly, PSN_A);
    h.bth.ack_req = true;
    d.deliver(1, &h, &[1, 2, 3], 1);
    d.deliver(1, &h, &[1, 2, 3], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 2, "ACK and re-ACK");
    assert!(p.iter().all(|(h, _, _)| aeth_of(h).syndrome.is_ack()));
    assert_eq!(d.e[1].out.recv_cqes.len(), 1, "executed once");
}

#[test]
fn seed001_class_g_cq_overflow_qp_to_error_no_cqes() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        ..Opts::default()
    });
    d.take(1);
    d.e[1].out.cq_cap = 0;
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    assert_eq!(d.state(1), QpState::Error);
    assert!(d.e[1].out.recv_cqes.is_empty(), "no CQEs");
    assert!(d.e[1].out.has_event(AsyncEvent::CqErr));
    assert!(d.e[1].out.has_event(AsyncEvent::QpFatal));
    assert_eq!(d.e[1].qp.rq_logic().outstanding(), 3, "no WQE retired");
}

// ---- requester / completer -----------------------------------------------------------------

#[test]
fn requester_segmentation_and_end_to_end_transfer() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        ..Opts::default()
    });
    let data: Vec<u8> = (0..700u32).map(|x| x as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.pump();
    d.post(0, send_wr(1, SendOpcode::SendWithImm, 700))
        .expect("post");
    d.pump();
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(
        (c.opcode, c.byte_len, c.status),
        (WcOpcode::Recv, 700, WcStatus::Success)
    );
    let got = d.e[1].mem.0.borrow().read(DST, DST_VA, 700).expect("read");
    assert_eq!(got, data);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
}

#[test]
fn requester_psn_sequence_nak_retransmits_from_nak_psn() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.pump();
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    d.deliver(1, &p[2].0, &p[2].1, 1); // p[1] lost
    d.flow(1);
    d.progress(0);
    let r = d.take(0);
    assert_eq!(r[0].0.bth.psn, p[1].0.bth.psn, "go back to the NAKed PSN");
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
}

#[test]
fn requester_rnr_nak_waits_then_retries_rnr_retry_7_infinite() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 0],
        rnr_retry: 7,
        ..Opts::default()
    });
    let mut h = Headers::new(Bth::new(
        Opcode::RcAcknowledge,
        0x11,
        Psn::new(PSN_A).prev(),
    ));
    h.aeth = Some(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.take(1);
    d.deliver(0, &h, &[], 1);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    for _ in 0..20 {
        d.progress(0);
        d.flow(0);
        d.flow(1); // RNR NAK
        assert!(d.e[0].out.timers[timer_index(Timer::Rnr)].is_some());
        d.progress(0);
        assert!(d.take(0).is_empty(), "waits for the RNR timer");
        d.fire(0, Timer::Rnr);
    }
    assert_eq!(d.state(0), QpState::Rts);
    assert!(d.e[0].out.send_cqes.is_empty());
}

#[test]
fn requester_rnr_retry_exhausted_completes_with_rnr_retry_exc_err() {
    let mut d = Duo::new(Opts {
        rnr_retry: 1,
        ..Opts::default()
    });
    let mut h = Headers::new(Bth::new(
        Opcode::RcAcknowledge,
        0x11,
        Psn::new(PSN_A).prev(),
    ));
    h.aeth = Some(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.take(1);
    d.deliver(0, &h, &[], 1);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    for _ in 0..2 {
        d.progress(0);
        d.flow(0);
        d.flow(1);
        if d.state(0) == QpState::Error {
            break;
        }
        d.fire(0, Timer::Rnr);
    }
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(c[1].status, WcStatus::WrFlushErr);
}

#[test]
fn requester_remote_access_nak_error_completion_and_flush() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    let mut w = send_wr(1, SendOpcode::RdmaWrite, 8);
    w.rkey = 0xbad;
    d.post(0, w).expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c[0].status, WcStatus::RemAccessErr);
    assert_eq!(c[1].status, WcStatus::WrFlushErr);
    assert_eq!(d.state(0), QpState::Error);
}

#[test]
fn requester_local_ack_timeout_formula_and_infinite() {
    assert_eq!(local_ack_timeout_ns(0), None);
    assert_eq!(local_ack_timeout_ns(1), Some(8192));
    assert_eq!(local_ack_timeout_ns(14), Some(4096 << 14));
}

#[test]
fn requester_read_and_atomic_responses_fill_local_memory() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    fill(&d.e[1].mem, RMT, RMT_VA, &[0xAB; 600]);
    let mut rd = SendWr::new(1, SendOpcode::RdmaRead);
    rd.sg = SgList::from_slice(&[Sge {
        addr: DST_VA,
        length: 600,
        lkey: DST,
    }])
    .expect("sg");
    rd.remote_addr = RMT_VA;
    rd.rkey = RMT;
    d.post(0, rd).expect("post");
    let mut fa = SendWr::new(2, SendOpcode::AtomicFetchAndAdd);
    fa.sg = SgList::from_slice(&[Sge {
        addr: DST_VA + 1024,
        length: 8,
        lkey: DST,
    }])
    .expect("sg");
    fa.remote_addr = ATM_VA;
    fa.rkey = ATM;
    fa.compare_add = 5;
    d.post(0, fa).expect("post");
    d.post(0, fa).expect("post");
    d.pump();
    let m = d.e[0].mem.0.borrow();
    assert_eq!(m.read(DST, DST_VA, 600).expect("r"), vec![0xAB; 600]);
    assert_eq!(
        m.read(DST, DST_VA + 1024, 8).expect("r"),
        5u64.to_ne_bytes().to_vec()
    );
    assert!(d.e[0]
        .out
        .send_cqes
        .iter()
        .all(|c| c.status == WcStatus::Success));
}

#[test]
fn requester_psn_24_bit_wrap() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        psns: (0xFF_FFFE, 0xFF_FFFF),
        ..Opts::default()
    });
    d.pump();
    d.post(0, send_wr(1, SendOpcode::Send, 4 * MTU))
        .expect("post");
    d.post(1, read_wr(2, 3 * MTU)).expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[0].qp.sq_logic().una(), 2, "0xFFFFFE + 4 wraps to 2");
    assert_eq!(d.e[1].qp.sq_logic().una(), 2);
}

#[test]
fn responder_acks_at_message_end_and_every_n_packets() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    // A 20-packet RDMA Write without AckReq except the last: ACKs at 8, 16 and the end.
    let n = 20u32;
    for k in 0..n {
        let op = match k {
            0 => Opcode::RcRdmaWriteFirst,
            x if x == n - 1 => Opcode::RcRdmaWriteLast,
            _ => Opcode::RcRdmaWriteMiddle,
        };
        let mut h = req(op, PSN_A + k);
        if k == 0 {
            h.reth = Some(Reth {
                va: RMT_VA,
                rkey: RMT,
                dma_len: n * MTU,
            });
        }
        d.deliver(1, &h, &[0u8; MTU as usize], 1);
    }
    let acks = d.take(1);
    assert_eq!(acks.len(), 3);
    assert_eq!(acks[2].0.bth.psn, Psn::new(PSN_A + n - 1));
}

// ---- seeds 000 / 002: APM ------------------------------------------------------------------

fn armed_duo() -> Duo {
    let mut d = Duo::new(Opts {
        armed: true,
        pre_rtr_recvs: [4, 4],
        ..Opts::default()
    });
    // Packets with MigReq=0 both ways arm both sides (Rearm -> Armed, seed 002).
    d.pump();
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.post(1, send_wr(1, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.pump();
    assert_eq!(d.e[0].qp.mig_state(), MigState::Armed);
    assert_eq!(d.e[1].qp.mig_state(), MigState::Armed);
    d
}

#[test]
fn seed002_rearm_becomes_armed_on_migreq_0() {
    let d = armed_duo();
    assert!(!d.e[0].out.has_event(AsyncEvent::PathMig));
}

#[test]
fn seed000_retry_exhaustion_while_armed_migrates() {
    let mut d = armed_duo();
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.take(0); // lost on the dying primary
    for _ in 0..4 {
        d.fire(0, Timer::Retransmit);
        d.progress(0);
        d.take(0);
    }
    assert!(
        d.e[0].out.has_event(AsyncEvent::PathMig),
        "migrated on exhaustion"
    );
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(d.e[0].qp.sq_logic().retry_left(), 3, "retry count reloaded");
    d.progress(0);
    let p = if d.e[0].out.tx.is_empty() {
        d.fire(0, Timer::Retransmit);
        d.progress(0);
        d.take(0)
    } else {
        d.take(0)
    };
    let (h, pl, port) = &p[0];
    assert!(h.bth.mig_req, "MigReq=1 after migration");
    assert_eq!(*port, 2, "sent over the alternate path");
    // The peer accepts it over its alternate path and migrates too.
    d.deliver(1, h, pl, *port);
    assert!(d.e[1].out.has_event(AsyncEvent::PathMig));
    assert_eq!(d.e[1].qp.primary_path().port_num, 2);
    d.pump();
    assert!(d.e[0]
        .out
        .send_cqes
        .iter()
        .all(|c| c.status == WcStatus::Success));
}

#[test]
fn seed000_retry_exhaustion_unarmed_retry_exc_err_and_flush() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.pump();
    for k in 0..3 {
        d.post(0, send_wr(k, SendOpcode::Send, 10)).expect("post");
    }
    d.progress(0);
    d.take(0);
    for _ in 0..4 {
        d.fire(0, Timer::Retransmit);
        d.progress(0);
        d.take(0);
    }
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c.len(), 3);
    assert_eq!(c[0].status, WcStatus::RetryExcErr);
    assert!(c[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(d.state(0), QpState::Error);
    assert!(!d.e[0].out.has_event(AsyncEvent::PathMig));
}

/// A one-byte RDMA Write from A to B with BTH:MigReq=1 (a migration request).
fn migreq_write() -> Headers {
    let mut h = req(Opcode::RcRdmaWriteOnly, PSN_A + 1);
    h.reth = Some(Reth {
        va: RMT_VA,
        rkey: RMT,
        dma_len: 1,
    });
    h.bth.mig_req = true;
    h
}

#[test]
fn seed000_migreq_mismatch_dropped_with_path_mig_err() {
    let mut d = armed_duo();
    let h = migreq_write();
    // Arrives over the primary (port 1), which is not the alternate path.
    d.deliver(1, &h, &[1], 1);
    assert!(d.e[1].out.has_event(AsyncEvent::PathMigErr));
    assert_eq!(d.e[1].qp.mig_state(), MigState::Armed, "state unchanged");
    assert!(d.take(1).is_empty(), "silently dropped");
}

#[test]
fn seed000_repeated_migreq_mismatch_reports_once_per_arming() {
    let mut d = armed_duo();
    let h = migreq_write();
    let count = |d: &Duo| {
        d.e[1]
            .out
            .events
            .iter()
            .filter(|(e, _)| *e == AsyncEvent::PathMigErr)
            .count()
    };
    // A retransmitted bad request: every copy is dropped and counted, one event is raised (a
    // peer must not be able to queue events without bound).
    for _ in 0..5 {
        d.deliver(1, &h, &[1], 1);
    }
    assert_eq!(count(&d), 1);
    assert_eq!(d.e[1].qp.counters().mig_errors, 5);
    assert!(d.take(1).is_empty(), "all silently dropped");
    // Loading an alternate path again (allowed while Armed: it replaces the old one) re-enables
    // the report.
    let e = &mut d.e[1];
    let a = QpAttrs {
        alt_path: e.paths[1],
        ..QpAttrs::default()
    };
    e.qp.modify(0, &a, AttrMask::ALT_PATH, &mut e.out)
        .expect("load alternate path");
    assert_eq!(d.e[1].qp.mig_state(), MigState::Armed);
    d.deliver(1, &h, &[1], 1);
    assert_eq!(count(&d), 2);
}

#[test]
fn seed000_migreq_match_migrates_the_responder() {
    let mut d = armed_duo();
    d.take(1);
    let mut h = migreq_write();
    h.bth.ack_req = true;
    d.deliver(1, &h, &[1], 2);
    assert!(d.e[1].out.has_event(AsyncEvent::PathMig));
    let p = d.take(1);
    assert_eq!(p[0].2, 2, "the ACK leaves over the new path");
    assert!(p[0].0.bth.mig_req);
}

// ---- seed 004 and the state machine --------------------------------------------------------

#[test]
fn seed004_init_refuses_post_send_at_once() {
    let mut d = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    assert_eq!(
        d.post(0, send_wr(1, SendOpcode::Send, 1)),
        Err(PostError::InvalidState)
    );
    assert!(d.e[0].out.send_cqes.is_empty());
}

#[test]
fn seed004_init_accepts_receives_and_drops_inbound_packets() {
    let mut d = Duo::new(Opts {
        to: QpState::Init,
        ..Opts::default()
    });
    d.post_recv(1, 64)
        .expect("receive WRs can be posted in Init");
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    assert!(d.take(1).is_empty());
    assert!(d.e[1].out.recv_cqes.is_empty());
    assert_eq!(d.e[1].qp.counters().dropped, 1);
}

#[test]
fn comm_est_raised_for_first_packet_in_rtr() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        to: QpState::Rtr,
        ..Opts::default()
    });
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A + 1), &[1], 1);
    let n = d.e[1]
        .out
        .events
        .iter()
        .filter(|(e, _)| *e == AsyncEvent::CommEst)
        .count();
    assert_eq!(n, 1);
}

#[test]
fn sqd_drains_and_raises_sq_drained_only_if_requested() {
    for notify in [false, true] {
        let mut d = Duo::new(Opts {
            pre_rtr_recvs: [0, 4],
            ..Opts::default()
        });
        d.pump();
        d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
        d.progress(0);
        let e = &mut d.e[0];
        let a = QpAttrs {
            qp_state: QpState::Sqd,
            en_sqd_async_notify: notify,
            ..QpAttrs::default()
        };
        let mut m = AttrMask::STATE;
        if notify {
            m |= AttrMask::EN_SQD_ASYNC_NOTIFY;
        }
        e.qp.modify(0, &a, m, &mut e.out).expect("SQD");
        d.post(0, send_wr(2, SendOpcode::Send, 10))
            .expect("held in SQD");
        assert!(!d.e[0].out.has_event(AsyncEvent::SqDrained), "in flight");
        d.pump();
        assert_eq!(d.e[0].out.has_event(AsyncEvent::SqDrained), notify);
        assert_eq!(d.e[0].out.send_cqes.len(), 1, "the held WR did not start");
    }
}

#[test]
fn error_flushes_both_queues_in_order() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [3, 0],
        ..Opts::default()
    });
    for k in 0..3 {
        d.post(0, send_wr(k, SendOpcode::Send, 10)).expect("post");
    }
    let e = &mut d.e[0];
    let a = QpAttrs {
        qp_state: QpState::Error,
        ..QpAttrs::default()
    };
    e.qp.modify(0, &a, AttrMask::STATE, &mut e.out)
        .expect("ERR");
    let s: Vec<u64> = d.e[0].out.send_cqes.iter().map(|c| c.wr_id).collect();
    assert_eq!(s, vec![0, 1, 2]);
    assert!(d.e[0]
        .out
        .send_cqes
        .iter()
        .all(|c| c.status == WcStatus::WrFlushErr));
    assert_eq!(d.e[0].out.recv_cqes.len(), 3);
    d.post(0, send_wr(9, SendOpcode::Send, 1))
        .expect("accepted in Error");
    assert_eq!(
        d.e[0].out.send_cqes.last().map(|c| c.status),
        Some(WcStatus::WrFlushErr)
    );
}

#[test]
fn srq_qp_entering_error_raises_last_wqe_reached() {
    let mut d = Duo::new(Opts {
        srq: [true, false],
        ..Opts::default()
    });
    let e = &mut d.e[0];
    let a = QpAttrs {
        qp_state: QpState::Error,
        ..QpAttrs::default()
    };
    e.qp.modify(0, &a, AttrMask::STATE, &mut e.out)
        .expect("ERR");
    assert!(d.e[0].out.has_event(AsyncEvent::QpLastWqeReached));
}

// ---- malicious peer: nothing panics ----------------------------------------------------------

#[test]
fn garbage_packets_never_panic() {
    let mut rng = Rng::new(42);
    for round in 0..40 {
        let mut d = Duo::new(Opts {
            pre_rtr_recvs: [2, 2],
            armed: round % 2 == 0,
            ..Opts::default()
        });
        for _ in 0..500 {
            let mut bytes: Vec<u8> = (0..rng.below(200) + 12)
                .map(|_| rng.next_u64() as u8)
                .collect();
            // Make some of them plausible: our QPN, RC opcodes, PSNs near the window.
            if rng.chance(700) {
                bytes[0] = (rng.below(0x18)) as u8;
                bytes[1] &= 0xCF;
                bytes[5] = 0;
                bytes[6] = 0;
                bytes[7] = 0x11 + rng.below(2) as u8;
                if rng.chance(500) {
                    let psn = PSN_A.wrapping_add(rng.below(8) as u32).wrapping_sub(3);
                    bytes[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
                }
            }
            let to = rng.below(2) as usize;
            if let Ok((mut h, p)) = Headers::decode_with_payload(&bytes) {
                h.bth.dest_qp = 0x11 + to as u32;
                if let Some(r) = h.reth.as_mut() {
                    if rng.chance(500) {
                        r.rkey = RMT;
                        r.dma_len = rng.below(1 << 20) as u32;
                    }
                }
                let port = 1 + rng.below(2) as u8;
                d.deliver(to, &h, p, port);
            }
            // Also arbitrary, inconsistent header structs.
            let mut h = Headers::new(Bth::new(
                Opcode::RcRdmaWriteOnly,
                0x12,
                Psn::new(rng.next_u64() as u32),
            ));
            h.reth = Some(Reth {
                va: rng.next_u64(),
                rkey: rng.below(6) as u32,
                dma_len: rng.next_u64() as u32,
            });
            if rng.chance(300) {
                h.aeth = Some(Aeth::nak(1, NakCode::InvalidRequest));
            }
            d.deliver(1, &h, &[0u8; 3], 1);
            d.progress(0);
            d.progress(1);
            d.take(0);
            d.take(1);
            if rng.chance(50) {
                if let Some(t) = d.e[0].out.timers[0] {
                    d.now = d.now.max(t);
                    let now = d.now;
                    let e = &mut d.e[0];
                    e.qp.timer_expired(now, Timer::Retransmit, &mut e.out);
                }
            }
        }
    }
    let _ = Operation::Send;
}

#[test]
fn responder_send_with_invalidate_invalidates_rkey_and_reports_it() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 2],
        ..Opts::default()
    });
    d.pump();
    let mut w = send_wr(1, SendOpcode::SendWithInv, 16);
    w.invalidate_rkey = RMT;
    d.post(0, w).expect("post");
    d.pump();
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(
        c.flags & rvrdma_core::events::WC_WITH_INVALIDATE,
        rvrdma_core::events::WC_WITH_INVALIDATE
    );
    assert_eq!(c.imm_or_rkey, RMT);
    // The R_Key is gone: a later RDMA Write to it fails with a remote access error.
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[1].status, WcStatus::RemAccessErr);
}

#[test]
fn local_inv_and_reg_mr_complete_in_order() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    let mut inv = SendWr::new(1, SendOpcode::LocalInv);
    inv.invalidate_rkey = RMT;
    d.post(0, inv).expect("post");
    let mut reg = SendWr::new(2, SendOpcode::RegMr);
    reg.reg.key = RMT;
    reg.reg.iova = RMT_VA;
    reg.reg.length = 1 << 16;
    reg.reg.access = ACCESS_LOCAL_WRITE;
    d.post(0, reg).expect("post");
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(
        (c[0].opcode, c[0].status),
        (WcOpcode::LocalInv, WcStatus::Success)
    );
    assert_eq!(
        (c[1].opcode, c[1].status),
        (WcOpcode::RegMr, WcStatus::Success)
    );
}

// ---- UC --------------------------------------------------------------------------------------

#[test]
fn uc_send_and_write_with_imm_without_acks() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [0, 2],
        ..Opts::default()
    });
    assert!(d.take(1).is_empty(), "no initial ACK on UC");
    let data: Vec<u8> = (0..600u32).map(|x| (x * 7) as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post(0, send_wr(1, SendOpcode::Send, 600)).expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWriteWithImm, 300))
        .expect("post");
    let mut rd = SendWr::new(3, SendOpcode::RdmaRead);
    rd.sg = SgList::from_slice(&[Sge {
        addr: DST_VA,
        length: 8,
        lkey: DST,
    }])
    .expect("sg");
    assert_eq!(
        d.post(0, rd),
        Err(PostError::InvalidWr),
        "no RDMA Read on UC"
    );
    d.progress(0);
    assert_eq!(d.e[0].out.send_cqes.len(), 2, "complete once sent");
    let p = d.take(0);
    assert!(p.iter().all(|(h, _, _)| !h.bth.ack_req));
    for (h, pl, port) in p {
        d.deliver(1, &h, &pl, port);
    }
    d.progress(1);
    assert!(d.take(1).is_empty(), "UC never acknowledges");
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!((rc[0].opcode, rc[0].byte_len), (WcOpcode::Recv, 600));
    assert_eq!(rc[1].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(
        d.e[1].mem.0.borrow().read(DST, DST_VA, 600).expect("r"),
        data
    );
}

#[test]
fn uc_lost_packet_drops_message_and_reuses_the_receive_wqe() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 5)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 4);
    for (k, (h, pl, port)) in p.into_iter().enumerate() {
        if k != 1 {
            d.deliver(1, &h, &pl, port);
        }
    }
    let rc = &d.e[1].out.recv_cqes;
    assert_eq!(rc.len(), 1, "only the second message arrives");
    assert_eq!(
        (rc[0].wr_id, rc[0].byte_len),
        (1000, 5),
        "in the first receive WQE"
    );
    assert_eq!(d.state(1), QpState::Rts);
}

// ---- UD --------------------------------------------------------------------------------------

fn ud_pair(qkeys: [u32; 2]) -> Duo {
    let mut d = Duo {
        e: [
            mk_end_t(0, false, QpType::Ud),
            mk_end_t(1, false, QpType::Ud),
        ],
        now: 0,
        recv_seq: [0, 0],
    };
    for (e, qkey) in d.e.iter_mut().zip(qkeys) {
        e.qp.set_port_mtu(1024);
        let a = QpAttrs {
            qp_state: QpState::Init,
            qkey,
            ..QpAttrs::default()
        };
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY;
        e.qp.modify(0, &a, m, &mut e.out).expect("INIT");
        let a = QpAttrs {
            qp_state: QpState::Rtr,
            ..QpAttrs::default()
        };
        e.qp.modify(0, &a, AttrMask::STATE, &mut e.out)
            .expect("RTR");
        let a = QpAttrs {
            qp_state: QpState::Rts,
            sq_psn: 7,
            ..QpAttrs::default()
        };
        e.qp.modify(0, &a, AttrMask::STATE | AttrMask::SQ_PSN, &mut e.out)
            .expect("RTS");
    }
    d
}

fn ud_send(id: u64, len: u32, qkey: u32) -> SendWr {
    let mut w = send_wr(id, SendOpcode::SendWithImm, len);
    w.ud.path = path(0, 0);
    w.ud.remote_qpn = 0x12;
    w.ud.remote_qkey = qkey;
    w
}

#[test]
fn ud_single_packet_send_with_deth_qkey_and_grh() {
    let mut d = ud_pair([0x1111, 0x2222]);
    let data: Vec<u8> = (0..300u32).map(|x| x as u8).collect();
    fill(&d.e[0].mem, SRC, SRC_VA, &data);
    d.post_recv(1, 1024).expect("recv");
    d.post(0, ud_send(1, 300, 0x2222)).expect("post");
    d.progress(0);
    assert_eq!(
        d.e[0].out.send_cqes[0].status,
        WcStatus::Success,
        "complete once sent"
    );
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    let h = &p[0].0;
    assert_eq!(h.bth.opcode, Opcode::UdSendOnlyWithImmediate);
    assert_eq!(h.bth.dest_qp, 0x12);
    let deth = h.deth.expect("DETH");
    assert_eq!((deth.qkey, deth.src_qp), (0x2222, 0x11));
    d.deliver(1, &p[0].0, &p[0].1, 1);
    let c = d.e[1].out.recv_cqes[0];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(c.byte_len, 340, "40-byte GRH + payload");
    assert_eq!(c.src_qp, 0x11);
    assert_eq!(
        c.flags & rvrdma_core::events::WC_GRH,
        rvrdma_core::events::WC_GRH
    );
    let got = d.e[1]
        .mem
        .0
        .borrow()
        .read(DST, DST_VA + 40, 300)
        .expect("r");
    assert_eq!(got, data);
    assert!(d.take(1).is_empty(), "UD never acknowledges");
}

#[test]
fn ud_wrong_qkey_is_dropped_and_long_sends_refused() {
    let mut d = ud_pair([0x1111, 0x2222]);
    d.post_recv(1, 1024).expect("recv");
    d.post(0, ud_send(1, 10, 0x3333)).expect("post");
    d.progress(0);
    d.flow(0);
    assert!(
        d.e[1].out.recv_cqes.is_empty(),
        "Q_Key mismatch: silently dropped"
    );
    assert_eq!(
        d.post(0, ud_send(2, 2000, 0x2222)),
        Err(PostError::InvalidWr),
        "> MTU"
    );
    // Top bit set: the QP's own Q_Key is used.
    d.post(0, ud_send(3, 10, 0x8000_0000)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p[0].0.deth.expect("DETH").qkey, 0x1111);
}

#[test]
fn uc_send_error_moves_to_sqe_flushes_sq_and_rq_keeps_working() {
    let mut d = Duo::new(Opts {
        uc: true,
        pre_rtr_recvs: [1, 0],
        ..Opts::default()
    });
    let mut bad = send_wr(1, SendOpcode::Send, 8);
    bad.sg = SgList::from_slice(&[Sge {
        addr: SRC_VA,
        length: 8,
        lkey: 0xbad,
    }])
    .expect("sg");
    d.post(0, bad).expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 8)).expect("post");
    d.progress(0);
    assert_eq!(d.state(0), QpState::Sqe);
    let c = &d.e[0].out.send_cqes;
    assert_eq!(
        (c[0].status, c[1].status),
        (WcStatus::LocProtErr, WcStatus::WrFlushErr)
    );
    // The RQ still works in SQE.
    d.post(1, send_wr(9, SendOpcode::Send, 4)).expect("post");
    d.progress(1);
    d.flow(1);
    assert_eq!(d.e[0].out.recv_cqes[0].status, WcStatus::Success);
}

fn read_wr(id: u64, len: u32) -> SendWr {
    let mut rd = SendWr::new(id, SendOpcode::RdmaRead);
    rd.sg = SgList::from_slice(&[Sge {
        addr: DST_VA,
        length: len,
        lkey: DST,
    }])
    .expect("sg");
    rd.remote_addr = RMT_VA;
    rd.rkey = RMT;
    rd
}

#[test]
fn requester_implied_nak_retries_the_unanswered_read() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.pump();
    d.post(0, read_wr(1, 100)).expect("post");
    d.post(0, send_wr(2, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    d.flow(0);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 2, "read response, then the ACK of the send");
    let (h, p, port) = &r[1];
    d.deliver(0, h, p, *port); // the read response (r[0]) was lost
    d.progress(0);
    let again = d.take(0);
    assert_eq!(again[0].0.bth.opcode, Opcode::RcRdmaReadRequest);
    assert_eq!(again[0].0.bth.psn, Psn::new(PSN_A));
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
    for (h, p, port) in again {
        d.deliver(1, &h, &p, port);
    }
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn requester_resumes_a_partially_answered_read_from_the_first_missing_response() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    fill(&d.e[1].mem, RMT, RMT_VA, &[3u8; 600]);
    d.post(0, read_wr(1, 600)).expect("post");
    d.progress(0);
    d.flow(0);
    d.progress(1);
    let r = d.take(1);
    assert_eq!(r.len(), 3);
    d.deliver(0, &r[0].0, &r[0].1, 1); // First arrives, Middle and Last lost
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    let reth = p[0].0.reth.expect("RETH");
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A + 1));
    assert_eq!((reth.va, reth.dma_len), (RMT_VA + MTU as u64, 600 - MTU));
    for (h, pl, port) in p {
        d.deliver(1, &h, &pl, port);
    }
    d.pump();
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(
        d.e[0].mem.0.borrow().read(DST, DST_VA, 600).expect("r"),
        vec![3u8; 600]
    );
}

#[test]
fn malicious_peer_huge_lengths_unknown_rkeys_bogus_psns() {
    // Huge RDMA Read length: invalid request, nothing read.
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcRdmaReadRequest, PSN_A);
    h.reth = Some(Reth {
        va: u64::MAX - 3,
        rkey: RMT,
        dma_len: u32::MAX,
    });
    d.deliver(1, &h, &[], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    // Write whose VA + length wraps around: remote access error, memory untouched.
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcRdmaWriteFirst, PSN_A);
    h.reth = Some(Reth {
        va: u64::MAX - 10,
        rkey: RMT,
        dma_len: 1 << 30,
    });
    d.deliver(1, &h, &[0u8; MTU as usize], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::RemoteAccessError));
    // Unknown R_Key on an atomic: remote access error, not executed.
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut h = req(Opcode::RcCompareSwap, PSN_A);
    h.atomic_eth = Some(AtomicEth {
        va: 0x1000,
        rkey: 0x7777,
        swap_add: 1,
        compare: 0,
    });
    d.deliver(1, &h, &[], 1);
    assert!(is_nak(&d.take(1)[0].0, NakCode::RemoteAccessError));
    assert_eq!(d.e[1].mem.0.borrow().atomics_executed, 0);
    // Bogus response PSNs at the requester: ignored as ghosts, nothing completes.
    let mut d = Duo::new(Opts::default());
    d.pump();
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 8))
        .expect("post");
    d.progress(0);
    d.take(0);
    for psn in [0u32, 0x7F_FFFF, 0xFF_FFFF, PSN_A + 5000] {
        let mut h = Headers::new(Bth::new(Opcode::RcAcknowledge, 0x11, Psn::new(psn)));
        h.aeth = Some(Aeth::nak(0, NakCode::RemoteAccessError));
        d.deliver(0, &h, &[], 1);
        let mut h = Headers::new(Bth::new(
            Opcode::RcRdmaReadResponseOnly,
            0x11,
            Psn::new(psn),
        ));
        h.aeth = Some(Aeth::ack(0, 0));
        d.deliver(0, &h, &[1, 2, 3], 1);
    }
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.state(0), QpState::Rts);
}

#[test]
fn requester_new_message_takes_a_fresh_psn_after_rnr_and_late_ack() {
    // Found by the simulation (seed 72171): an RNR NAK rewinds to a Send that a duplicate's ACK
    // then completes; the next WQE must not reuse the Send's PSN.
    let mut d = Duo::new(Opts::default());
    d.take(0);
    d.take(1);
    let mut h = Headers::new(Bth::new(
        Opcode::RcAcknowledge,
        0x11,
        Psn::new(PSN_A).prev(),
    ));
    h.aeth = Some(Aeth::ack(0, CREDIT_CODE_INVALID));
    d.deliver(0, &h, &[], 1);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    let p = d.take(0);
    d.deliver(1, &p[0].0, &p[0].1, 1); // no receive posted: RNR NAK
    d.post_recv(1, 64).expect("recv");
    let mut dup = p[0].0;
    dup.bth.ack_req = true;
    d.deliver(1, &dup, &p[0].1, 1); // a duplicate of the Send arrives: executed, ACKed
    let r = d.take(1);
    assert!(r
        .iter()
        .any(|(h, _, _)| aeth_of(h).syndrome == Syndrome::RnrNak { timer: 3 }));
    for (h, pl, port) in r {
        d.deliver(0, &h, &pl, port);
    }
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.fire(0, Timer::Rnr);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0.bth.opcode, Opcode::RcRdmaWriteOnly);
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A + 1), "fresh PSN");
}

// ---- regressions found by the `responder_packets` fuzz target -----------------------------

/// A duplicate RDMA Read moved the response cursor back and every later read was sent again
/// from its stale `sent` offset: a read already answered in full went out as a zero-length
/// RDMA Read Response Last with a PSN past its range.
#[test]
fn fuzz_duplicate_read_resent_later_read_from_stale_offset() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    fill(&d.e[1].mem, RMT, RMT_VA, &[5u8; 600]);
    let read = |psn: u32, va: u64| {
        let mut h = req(Opcode::RcRdmaReadRequest, psn);
        h.reth = Some(Reth {
            va,
            rkey: RMT,
            dma_len: 300,
        });
        h
    };
    let first = read(PSN_A, RMT_VA);
    let second = read(PSN_A + 2, RMT_VA + 300);
    d.deliver(1, &first, &[], 1);
    d.deliver(1, &second, &[], 1);
    d.progress(1);
    assert_eq!(d.take(1).len(), 4);
    // The first read again: it is answered again, and so is the second, each in full.
    d.deliver(1, &first, &[], 1);
    d.progress(1);
    let p = d.take(1);
    let seen: Vec<(Opcode, u32, usize)> = p
        .iter()
        .map(|(h, pl, _)| (h.bth.opcode, h.bth.psn.value(), pl.len()))
        .collect();
    let want = |psn: u32| {
        [
            (Opcode::RcRdmaReadResponseFirst, psn, 256),
            (Opcode::RcRdmaReadResponseLast, psn + 1, 44),
        ]
    };
    let mut expect = want(PSN_A).to_vec();
    expect.extend(want(PSN_A + 2));
    assert_eq!(seen, expect);
}

// ---- transmit window, SRQ flush ----------------------------------------------------------------

#[test]
fn requester_keeps_at_most_max_unacked_psns_outstanding() {
    use rvrdma_core::requester::MAX_UNACKED_PSNS;
    let mut d = Duo::new(Opts::default());
    // The initial unsolicited ACKs of connection setup are not requests.
    d.take(0);
    d.take(1);
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 100 * MTU))
        .expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 100 * MTU))
        .expect("post");
    while d.progress(0) > 0 {}
    let first = d.take(0);
    assert_eq!(
        first.len() as u32,
        MAX_UNACKED_PSNS,
        "no more than the window before an ACK"
    );
    for (h, payload, port) in &first {
        d.deliver(1, h, payload, *port);
    }
    d.flow(1);
    while d.progress(0) > 0 {}
    assert_eq!(
        d.take(0).len(),
        200 - MAX_UNACKED_PSNS as usize,
        "the rest after the ACKs"
    );
}

#[test]
fn srq_qp_flushes_the_wqe_it_holds_on_error() {
    let mut d = Duo::new(Opts {
        srq: [true, false],
        ..Opts::default()
    });
    // The shell hands the SRQ QP one WQE from the SRQ; the QP then enters Error.
    d.post_recv(0, 4096).expect("recv");
    let e = &mut d.e[0];
    let a = QpAttrs {
        qp_state: QpState::Error,
        ..QpAttrs::default()
    };
    e.qp.modify(0, &a, AttrMask::STATE, &mut e.out)
        .expect("ERR");
    let c = &d.e[0].out.recv_cqes;
    assert_eq!(c.len(), 1, "the held WQE completes");
    assert_eq!(c[0].status, WcStatus::WrFlushErr);
    assert!(d.e[0].out.has_event(AsyncEvent::QpLastWqeReached));
}

// ---- seed 000: repeated NAKs for the same request exhaust the retry count ------------------

/// A response from node 1 to node 0 at `psn` with `aeth`.
fn ack_pkt(psn: u32, aeth: Aeth) -> Headers {
    let mut h = Headers::new(Bth::new(Opcode::RcAcknowledge, 0x11, Psn::new(psn)));
    h.aeth = Some(aeth);
    h
}

fn retransmit_deadline(d: &Duo, i: usize) -> Option<u64> {
    d.e[i].out.timers[timer_index(Timer::Retransmit)]
}

/// Node 0 has one RDMA Write outstanding (lost); the peer answers with PSN sequence
/// error NAKs for it, 0.1 ms apart (well inside the 1 ms local ACK timeout), and node 0
/// retransmits after each. Returns how many NAKs were delivered when node 0 stopped retrying
/// (left RTS or migrated), or `None` if it never did within 20 NAKs.
fn nak_storm(d: &mut Duo) -> Option<usize> {
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    let sent = d.take(0);
    assert_eq!(sent.len(), 1);
    let psn = sent[0].0.bth.psn;
    let first_deadline = retransmit_deadline(d, 0).expect("timer armed");
    let nak = ack_pkt(psn.value(), Aeth::nak(0, NakCode::PsnSequenceError));
    for k in 1..=20 {
        d.now += 100_000;
        d.deliver(0, &nak, &[], 1);
        if d.state(0) != QpState::Rts || d.e[0].out.has_event(AsyncEvent::PathMig) {
            return Some(k);
        }
        d.progress(0);
        let p = d.take(0);
        assert_eq!(p.len(), 1, "retransmits the NAKed packet (NAK {k})");
        assert_eq!(p[0].0.bth.psn, psn);
        assert!(d.now < first_deadline, "the NAKs alone, not the timer");
    }
    None
}

/// Seed 000 ("Repetitive PSN Sequence Error Naks"): each PSN sequence error NAK for the same
/// request costs a retry; when the count is exhausted and the QP is not armed, the request
/// completes with RETRY_EXC_ERR ("On Exhaustion") and the QP enters Error. A peer that NAKs
/// faster than the local ACK timeout must not hold the QP in RTS forever.
#[test]
fn seed000_repeated_sequence_naks_exhaust_the_retry_count() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    let n = nak_storm(&mut d).expect("the NAKs exhausted the retry count");
    assert_eq!(
        n, 4,
        "retry count 3: three retries, the fourth NAK exhausts"
    );
    assert_eq!(d.state(0), QpState::Error);
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c[0].status, WcStatus::RetryExcErr);
    assert!(!d.e[0].out.has_event(AsyncEvent::PathMig));
}

/// Seed 000: repetitive PSN sequence error NAKs that exhaust the retry count while the QP is
/// armed trigger a migration, and the retry count is reloaded (step 5).
#[test]
fn seed000_repeated_sequence_naks_migrate_when_armed() {
    let mut d = armed_duo();
    let n = nak_storm(&mut d).expect("the NAKs exhausted the retry count");
    assert_eq!(n, 4);
    assert!(d.e[0].out.has_event(AsyncEvent::PathMig));
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(d.state(0), QpState::Rts);
    assert_eq!(d.e[0].qp.sq_logic().retry_left(), 3, "reloaded");
    assert!(d.e[0]
        .out
        .send_cqes
        .iter()
        .all(|c| c.status == WcStatus::Success));
}

/// A NAK that the requester ignores (a copy of the NAK whose retransmission has not gone out
/// yet) neither costs a retry nor moves the transport timer: only a response that makes
/// progress restarts it (seed 000 counts timeouts per request).
#[test]
fn seed000_ignored_nak_does_not_push_the_transport_timer_out() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    d.take(0);
    let nak = ack_pkt(PSN_A, Aeth::nak(0, NakCode::PsnSequenceError));
    d.now += 100_000;
    d.deliver(0, &nak, &[], 1);
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
    let deadline = retransmit_deadline(&d, 0);
    for _ in 0..5 {
        d.now += 100_000;
        d.deliver(0, &nak, &[], 1);
        assert_eq!(retransmit_deadline(&d, 0), deadline, "timer not pushed out");
    }
    assert_eq!(d.e[0].qp.counters().sq.retries, 1, "copies cost nothing");
    // The timer still fires at its deadline.
    d.fire(0, Timer::Retransmit);
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 1);
}

/// Seed 000 ("Repetitive missing RDMA Read response or Atomic response"): a peer that keeps
/// answering an RDMA Read with ACKs beyond it (implied NAKs), faster than the local ACK timeout,
/// cannot hold the QP in RTS: the ignored ACKs do not restart the transport timer, every
/// timeout costs a retry, and the count runs out into RETRY_EXC_ERR within (retry count + 1)
/// timeouts.
#[test]
fn seed000_repeated_implied_naks_cannot_hold_off_the_transport_timer() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    d.post(0, read_wr(1, 100)).expect("post");
    d.post(0, send_wr(2, SendOpcode::RdmaWrite, 10))
        .expect("post");
    d.progress(0);
    assert_eq!(d.take(0).len(), 2);
    let start = d.now;
    let timeout = local_ack_timeout_ns(8).expect("finite");
    let ack = ack_pkt(PSN_A + 1, Aeth::ack(0, CREDIT_CODE_INVALID));
    let mut steps = 0;
    while d.state(0) == QpState::Rts {
        steps += 1;
        assert!(steps < 1000, "still in RTS after {} ns", d.now - start);
        d.now += 100_000;
        if retransmit_deadline(&d, 0).is_some_and(|t| t <= d.now) {
            d.fire(0, Timer::Retransmit);
        } else {
            d.deliver(0, &ack, &[], 1);
        }
        d.progress(0);
        d.take(0);
    }
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RetryExcErr);
    assert_eq!(d.e[0].qp.counters().sq.retries, 3);
    assert!(
        d.now - start <= 5 * (timeout + 100_000),
        "bounded: {} ns",
        d.now - start
    );
}

/// ACKs for packets sent before the peer saw the retransmitted Read (still in flight when the
/// retry began) are not repeated implied NAKs: they cost no retry, and the Read completes when
/// its response arrives.
#[test]
fn requester_acks_in_flight_before_a_read_retry_cost_no_retry() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    fill(&d.e[1].mem, RMT, RMT_VA, &[9u8; 100]);
    d.post(0, read_wr(1, 100)).expect("post");
    for k in 0..4 {
        let mut w = send_wr(2 + k, SendOpcode::RdmaWrite, 10);
        w.remote_addr = RMT_VA + 4096;
        d.post(0, w).expect("post");
    }
    d.progress(0);
    assert_eq!(d.flow(0), 5);
    d.progress(1);
    // The peer executed everything; its read response is lost. Its ACKs for the four writes
    // (one per message, as a peer without coalescing sends them) are on their way.
    d.take(1);
    let acks: Vec<_> = (1..=4)
        .map(|k| {
            (
                ack_pkt(PSN_A + k, Aeth::ack(k, CREDIT_CODE_INVALID)),
                Vec::new(),
                1u8,
            )
        })
        .collect();
    // The read response is lost; the first ACK beyond it starts a retry of the Read.
    d.deliver(0, &acks[0].0, &acks[0].1, 1);
    assert_eq!(d.e[0].qp.counters().sq.retries, 1);
    d.progress(0);
    let again = d.take(0);
    assert_eq!(again[0].0.bth.opcode, Opcode::RcRdmaReadRequest);
    // The other ACKs were already on their way.
    for (h, p, port) in &acks[1..] {
        d.deliver(0, h, p, *port);
    }
    assert_eq!(
        d.e[0].qp.counters().sq.retries,
        1,
        "no retry for ACKs in flight"
    );
    for (h, p, port) in again {
        d.deliver(1, &h, &p, port);
    }
    d.pump();
    let c = &d.e[0].out.send_cqes;
    assert_eq!(c.len(), 5);
    assert!(c.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        d.e[0].mem.0.borrow().read(DST, DST_VA, 100).expect("r"),
        vec![9u8; 100]
    );
}

// ---- seed 003: a lost credit update must not stall a limited message -----------------------

/// Runs both nodes on the simulated clock until `done` holds or `limit` ns have passed: moves
/// every packet, and when nothing moves, jumps to the earliest armed timer and fires it.
/// Packets for which `drop` says true are lost. Returns whether `done` became true.
fn run_until(
    d: &mut Duo,
    limit: u64,
    mut drop: impl FnMut(usize, &Headers) -> bool,
    mut done: impl FnMut(&Duo) -> bool,
) -> bool {
    let end = d.now + limit;
    for _ in 0..100_000 {
        if done(d) {
            return true;
        }
        let mut moved = 0;
        for i in 0..2 {
            d.progress(i);
            for (h, p, port) in d.take(i) {
                moved += 1;
                if !drop(i, &h) {
                    d.deliver(1 - i, &h, &p, port);
                }
            }
        }
        if moved > 0 {
            continue;
        }
        let next = (0..2)
            .flat_map(|i| [(i, Timer::Retransmit), (i, Timer::Rnr)])
            .filter_map(|(i, t)| d.e[i].out.timers[timer_index(t)].map(|at| (at, i, t)))
            .min_by_key(|(at, i, t)| (*at, *i, timer_index(*t)));
        match next {
            Some((at, i, t)) if at <= end => d.fire(i, t),
            _ => return done(d),
        }
    }
    panic!("run_until did not settle");
}

/// Node 0 (credits known to be 0: the peer's initial ACK said so) posts a three-packet Send;
/// node 1 posts a receive and the unsolicited ACK announcing it is lost. Returns whether the
/// Send completed within `limit` ns.
fn lost_credit_update(timeout: u8, limit: u64) -> Duo {
    let mut d = Duo::new(Opts {
        timeout,
        rnr_retry: 1,
        ..Opts::default()
    });
    d.flow(1); // initial ACK: 0 credits
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    assert!(d.take(0).is_empty(), "holds: the peer has no receive WQE");
    d.now += 1_000_000;
    d.post_recv(1, 4096).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "the unsolicited ACK (lost)");
    let ok = run_until(
        &mut d,
        limit,
        |_, _| false,
        |d| !d.e[0].out.send_cqes.is_empty(),
    );
    assert!(ok, "the Send completed within {limit} ns");
    d
}

/// Seed 003 lets the requester probe while it knows the responder has no credit; with an
/// infinite local ACK timeout (0) a lost unsolicited ACK must still not hold a Send forever.
/// The probes draw no RNR NAK, so no RNR retry is spent.
#[test]
fn seed003_lost_credit_update_infinite_timeout_send_still_completes() {
    let d = lost_credit_update(0, 1_000_000_000);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].out.recv_cqes[0].byte_len, 3 * MTU);
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    assert_eq!(d.e[0].qp.counters().sq.rnr_naks_received, 0);
}

/// The same with a finite local ACK timeout of 4.3 s (exponent 20): the probe schedule does not
/// wait for the timeout, so the Send completes well before it.
#[test]
fn seed003_lost_credit_update_finite_timeout_send_completes_before_the_timeout() {
    let d = lost_credit_update(20, 500_000_000);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 0);
}

/// While a requester may be waiting for credits, every receive posted that changes the credit
/// count the responder last announced sends a new unsolicited ACK (seed 003: an unsolicited
/// ACK may be sent at any time), so one lost update is repaired by the next receive.
#[test]
fn seed003_responder_reannounces_credits_while_the_requester_may_wait() {
    let mut d = Duo::new(Opts::default());
    d.take(1); // initial ACK said 0 credits
    d.post_recv(1, 64).expect("recv");
    assert_eq!(d.take(1).len(), 1, "first update (lost)");
    d.post_recv(1, 64).expect("recv");
    let p = d.take(1);
    assert_eq!(p.len(), 1, "the next receive announces again");
    assert_eq!(
        aeth_of(&p[0].0).syndrome,
        Syndrome::Ack {
            credit: encode_credit(2)
        }
    );
    // Once a request consumed a credit (the requester is moving), receives are quiet again
    // unless an ACK said 0 credits.
    d.deliver(1, &req(Opcode::RcSendOnly, PSN_A), &[1], 1);
    assert_eq!(d.take(1).len(), 1, "the ACK of the Send");
    d.post_recv(1, 64).expect("recv");
    assert!(d.take(1).is_empty());
}

/// A requester holding a limited message for credits sends no request packet of it (no RNR
/// NAK, no RNR retry spent) however long the responder takes to post a receive, and it
/// completes once the receive is posted.
#[test]
fn seed003_credit_hold_spends_no_rnr_retry_while_the_rq_stays_empty() {
    let mut d = Duo::new(Opts {
        timeout: 0,
        rnr_retry: 0,
        ..Opts::default()
    });
    d.flow(1);
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    let done = run_until(
        &mut d,
        3_000_000_000,
        |_, _| false,
        |d| !d.e[0].out.send_cqes.is_empty(),
    );
    assert!(!done, "nothing completes while the RQ is empty");
    assert_eq!(d.state(0), QpState::Rts);
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    assert_eq!(d.e[1].out.recv_cqes.len(), 0);
    d.post_recv(1, 64).expect("recv");
    let done = run_until(
        &mut d,
        1_000_000_000,
        |_, _| false,
        |d| !d.e[0].out.send_cqes.is_empty(),
    );
    assert!(done);
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::Success);
}

/// A credit hold on a dead path ends like any wait for a response (seed 000): each credit probe
/// left unanswered for a local ACK timeout costs a retry, and exhaustion completes the held Send
/// with RETRY_EXC_ERR (the QP is not armed).
#[test]
fn seed003_credit_hold_on_a_dead_path_exhausts_the_retry_count() {
    let mut d = Duo::new(Opts::default());
    d.flow(1); // 0 credits
    d.take(0);
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    let timeout = local_ack_timeout_ns(8).expect("finite");
    let start = d.now;
    let failed = run_until(
        &mut d,
        1_000_000_000,
        |from, _| from == 0,
        |d| d.state(0) == QpState::Error,
    );
    assert!(failed, "still holding after 1 s on a dead path");
    assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RetryExcErr);
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 4);
    let bound = 4 * (timeout + rvrdma_core::requester::CREDIT_PROBE_MAX_NS);
    assert!(d.now - start <= bound, "{} ns", d.now - start);
}

// ---- seed 001: reserved and unsupported opcodes (Table 17-7, class C) -------------------------

/// Node 0's packet to node 1 with BTH:OpCode `opcode` (which the wire decoder does not know),
/// as the receive path sees it: the fields every BTH carries.
fn raw_request(opcode: u8, psn: u32) -> rvrdma_core::wire::bth::RawBth {
    let mut b = Bth::new(Opcode::RcSendOnly, 0x12, Psn::new(psn));
    b.ack_req = true;
    let mut bytes = b.to_bytes().to_vec();
    bytes[0] = opcode;
    bytes.extend_from_slice(&[0u8; 20]);
    assert!(
        Headers::decode_with_payload(&bytes).is_err(),
        "{opcode:#x} is not decodable"
    );
    rvrdma_core::wire::bth::RawBth::decode(&bytes).expect("BTH")
}

fn deliver_raw(d: &mut Duo, to: usize, b: &rvrdma_core::wire::bth::RawBth) {
    let pm = PathMatch {
        port_num: 1,
        sgid: gid(1 - to, 0),
        dgid: gid(to, 0),
    };
    let now = d.now;
    let e = &mut d.e[to];
    e.qp.receive_unsupported(now, b, &pm, &mut e.out);
}

/// Seed 001, Table 17-7 "Unsupported or Reserved Opcode": an RC request packet whose opcode is
/// reserved (or names a function this QP does not support) gets an Invalid Request NAK and the
/// QP enters Error (class C). No RQ WQE was in use: the affiliated asynchronous error
/// (QP_REQ_ERR) is raised, and the receive WQEs are flushed.
#[test]
fn seed001_class_c_reserved_opcode_invalid_request_nak_qp_to_error() {
    for op in [0x15u8, 0x18, 0x1A, 0x1C, 0x1D, 0x1F] {
        let mut d = Duo::new(Opts {
            pre_rtr_recvs: [0, 2],
            ..Opts::default()
        });
        d.take(1);
        deliver_raw(&mut d, 1, &raw_request(op, PSN_A));
        let p = d.take(1);
        assert_eq!(p.len(), 1, "{op:#x}");
        assert!(is_nak(&p[0].0, NakCode::InvalidRequest), "{op:#x}");
        assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A));
        assert_eq!(d.state(1), QpState::Error, "{op:#x}");
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr), "{op:#x}");
        let c = &d.e[1].out.recv_cqes;
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|w| w.status == WcStatus::WrFlushErr));
        // The requester sees the NAK as an invalid request.
        d.post(0, send_wr(1, SendOpcode::RdmaWrite, 4))
            .expect("post");
        d.progress(0);
        d.take(0);
        d.deliver(0, &p[0].0, &[], 1);
        assert_eq!(d.e[0].out.send_cqes[0].status, WcStatus::RemInvReqErr);
    }
}

/// Class C while a Send is in progress: the RQ WQE in use is retired with "Remote Invalid
/// Request" and the remaining ones are flushed (no affiliated event then).
#[test]
fn seed001_class_c_reserved_opcode_with_a_wqe_in_use() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        ..Opts::default()
    });
    d.take(1);
    d.deliver(1, &req(Opcode::RcSendFirst, PSN_A), &[0u8; MTU as usize], 1);
    d.take(1);
    deliver_raw(&mut d, 1, &raw_request(0x1B, PSN_A + 1));
    assert!(is_nak(&d.take(1)[0].0, NakCode::InvalidRequest));
    assert_eq!(d.state(1), QpState::Error);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(c[0].status, WcStatus::RemInvReqErr);
    assert!(c[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert!(!d.e[1].out.has_event(AsyncEvent::QpReqErr));
}

/// The PSN check comes first: a reserved opcode at a duplicate PSN is silently dropped, one
/// beyond the ePSN draws the (single) PSN sequence error NAK of class B; neither changes the
/// state. An opcode of another transport (UC, UD, RD, CNP, manufacturer-specific) fails the
/// header checks and is dropped silently (class D), as is a reserved opcode sent to a UC QP.
#[test]
fn reserved_opcode_psn_checks_and_other_transports() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.pump(); // the responder's ePSN is PSN_A + 1
    deliver_raw(&mut d, 1, &raw_request(0x1A, PSN_A));
    assert!(d.take(1).is_empty(), "duplicate: dropped");
    deliver_raw(&mut d, 1, &raw_request(0x1A, PSN_A + 5));
    let p = d.take(1);
    assert_eq!(p.len(), 1);
    assert!(is_nak(&p[0].0, NakCode::PsnSequenceError));
    let dropped = d.e[1].qp.counters().dropped;
    for op in [0x2Cu8, 0x3F, 0x40, 0x66, 0x80, 0xC0, 0xFF] {
        deliver_raw(&mut d, 1, &raw_request(op, PSN_A + 1));
    }
    assert!(d.take(1).is_empty());
    assert_eq!(d.e[1].qp.counters().dropped, dropped + 7);
    assert_eq!(d.state(1), QpState::Rts);
    let mut d = Duo::new(Opts {
        uc: true,
        ..Opts::default()
    });
    deliver_raw(&mut d, 1, &raw_request(0x2C, PSN_A));
    deliver_raw(&mut d, 1, &raw_request(0x1A, PSN_A));
    assert!(d.take(1).is_empty());
    assert_eq!(d.state(1), QpState::Rts);
}

// ---- inbound P_Key check ---------------------------------------------------------------------

/// The inbound P_Key check (IBA partition rules): a packet is accepted only when its BTH:P_Key
/// and the QP's P_Key (from its pkey_index; RoCE's default table holds 0xFFFF at index 0) have
/// equal low 15 bits, not zero, and at least one of them is a full member (top bit). A
/// mismatch is dropped silently: no ACK or NAK, no state change, counted.
#[test]
fn inbound_pkey_mismatch_is_dropped_silently_and_counted() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        ..Opts::default()
    });
    d.take(1);
    let mut psn = PSN_A;
    // Node 0's next Send to node 1 with BTH:P_Key `pkey`; the number of responses.
    fn send(d: &mut Duo, psn: &mut u32, pkey: u16) -> usize {
        let mut h = req(Opcode::RcSendOnly, *psn);
        h.bth.ack_req = true;
        h.bth.pkey = pkey;
        d.deliver(1, &h, &[5], 1);
        let n = d.take(1).len();
        if n > 0 {
            *psn += 1;
        }
        n
    }
    for bad in [0x1234u16, 0x9234, 0x0000, 0x8000, 0x7FFE] {
        assert_eq!(send(&mut d, &mut psn, bad), 0, "{bad:#x}: no ACK, no NAK");
    }
    assert_eq!(d.e[1].qp.counters().pkey_violations, 5);
    assert_eq!(d.e[1].qp.rq_logic().epsn(), PSN_A, "nothing else changed");
    assert_eq!(d.state(1), QpState::Rts);
    assert!(d.e[1].out.recv_cqes.is_empty());
    // The default partition, full or limited member, matches the QP's full 0xFFFF.
    assert_eq!(send(&mut d, &mut psn, 0xFFFF), 1);
    assert_eq!(send(&mut d, &mut psn, 0x7FFF), 1);
    assert_eq!(d.e[1].out.recv_cqes.len(), 2);
    // A limited-member QP (0x7FFF) accepts full members only.
    let mut lim = Duo::new(Opts {
        pre_rtr_recvs: [0, 4],
        pkeys: [0xFFFF, 0x7FFF],
        ..Opts::default()
    });
    lim.take(1);
    psn = PSN_A;
    assert_eq!(
        send(&mut lim, &mut psn, 0x7FFF),
        0,
        "two limited members never match"
    );
    assert_eq!(send(&mut lim, &mut psn, 0xFFFF), 1);
    assert_eq!(lim.e[1].qp.counters().pkey_violations, 1);
    // Responses are checked the same way: a NAK with a foreign P_Key is ignored.
    d.post(0, send_wr(9, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.progress(0);
    let sent = d.take(0);
    let mut nak = Headers::new(Bth::new(Opcode::RcAcknowledge, 0x11, sent[0].0.bth.psn));
    nak.aeth = Some(Aeth::nak(0, NakCode::RemoteAccessError));
    nak.bth.pkey = 0x4321;
    d.deliver(0, &nak, &[], 1);
    assert_eq!(d.state(0), QpState::Rts);
    assert!(d.e[0].out.send_cqes.is_empty());
    assert_eq!(d.e[0].qp.counters().pkey_violations, 1);
}

// ---- seed 001: every R_Key violation is a remote access error --------------------------------

const TGT_VA: u64 = 0x50000;
const TGT_LEN: usize = 4096;
const TGT: u32 = 0x10 << 8 | 0x42;
const PATTERN: u8 = 0xA5;

/// The R_Key violations a responder must catch, as (what, R_Key, VA) of an RDMA request of
/// 64 bytes from node 0, with node 1's memory set up for each.
fn r_key_violations(op: SendOpcode) -> Vec<(&'static str, u32, u64)> {
    let mut v = vec![
        ("unused MR index", 0x11 << 8 | 0x42, TGT_VA),
        ("wrong key byte", TGT ^ 0x01, TGT_VA),
        ("invalidated MR", TGT, TGT_VA),
        ("MR of another PD", 0x12 << 8 | 0x42, TGT_VA + 0x10000),
        ("range past the MR's end", TGT, TGT_VA + TGT_LEN as u64 - 32),
        ("range before the MR", TGT, TGT_VA - 8),
    ];
    if op == SendOpcode::RdmaRead {
        v.push(("MR without remote read", 0x13 << 8 | 0x42, TGT_VA + 0x20000));
    } else {
        v.push((
            "MR without remote write",
            0x14 << 8 | 0x42,
            TGT_VA + 0x30000,
        ));
    }
    v
}

fn r_key_duo(case: &str) -> Duo {
    use rvrdma_core::memory::Memory;
    let mut d = Duo::new(Opts::default());
    let m = &d.e[1].mem;
    let all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;
    m.add_mr(TGT, TGT_VA, TGT_LEN, all);
    m.add_mr_pd(0x12 << 8 | 0x42, TGT_VA + 0x10000, TGT_LEN, all, 7);
    m.add_mr(
        0x13 << 8 | 0x42,
        TGT_VA + 0x20000,
        TGT_LEN,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
    );
    m.add_mr(
        0x14 << 8 | 0x42,
        TGT_VA + 0x30000,
        TGT_LEN,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
    );
    for (k, va) in [
        (TGT, TGT_VA),
        (0x13 << 8 | 0x42, TGT_VA + 0x20000),
        (0x14 << 8 | 0x42, TGT_VA + 0x30000),
    ] {
        fill(m, k, va, &[PATTERN; TGT_LEN]);
    }
    {
        let mut inner = m.0.borrow_mut();
        let saved = inner.pd;
        inner.pd = 7;
        inner
            .write(0x12 << 8 | 0x42, TGT_VA + 0x10000, &[PATTERN; TGT_LEN])
            .expect("fill");
        inner.pd = saved;
    }
    if case == "invalidated MR" {
        let mut m = d.e[1].mem.clone();
        m.local_invalidate(TGT).expect("invalidate");
    }
    fill(&d.e[0].mem, SRC, SRC_VA, &[0x3C; 64]);
    d.pump();
    d
}

/// Seed 001, Table 17-7 "R_Key Violation" (class C): whatever is wrong with the R_Key of an
/// RDMA Read or Write (no MR at its index, a wrong key byte, an invalidated MR, an MR of
/// another PD, a range outside the MR, an MR without the access), the responder answers with
/// the Remote Access Error NAK, enters Error and raises QP_ACCESS_ERR (no RQ WQE in use); the
/// requester completes with REM_ACCESS_ERR; no byte of either side's memory changes.
#[test]
fn seed001_class_c_every_r_key_violation_is_a_remote_access_error() {
    for op in [SendOpcode::RdmaWrite, SendOpcode::RdmaRead] {
        for (case, rkey, va) in r_key_violations(op) {
            let mut d = r_key_duo(case);
            let mut wr = if op == SendOpcode::RdmaRead {
                read_wr(1, 64)
            } else {
                send_wr(1, SendOpcode::RdmaWrite, 64)
            };
            wr.rkey = rkey;
            wr.remote_addr = va;
            d.post(0, wr).expect("post");
            d.pump();
            let what = format!("{op:?}, {case}");
            let c = &d.e[0].out.send_cqes;
            assert_eq!(c.len(), 1, "{what}");
            assert_eq!(c[0].status, WcStatus::RemAccessErr, "{what}");
            assert!(d.e[1].out.has_event(AsyncEvent::QpAccessErr), "{what}");
            assert!(!d.e[1].out.has_event(AsyncEvent::QpReqErr), "{what}");
            assert_eq!(d.state(1), QpState::Error, "{what}");
            for (k, base) in [
                (TGT, TGT_VA),
                (0x12 << 8 | 0x42, TGT_VA + 0x10000),
                (0x13 << 8 | 0x42, TGT_VA + 0x20000),
                (0x14 << 8 | 0x42, TGT_VA + 0x30000),
            ] {
                assert!(
                    d.e[1]
                        .mem
                        .peek(k, base, TGT_LEN)
                        .iter()
                        .all(|b| *b == PATTERN),
                    "{what}: target memory changed"
                );
            }
            assert!(
                d.e[0].mem.peek(DST, DST_VA, 64).iter().all(|b| *b == 0),
                "{what}: the reader's memory changed"
            );
        }
    }
}

/// The same checks pass with a good R_Key (the test setup itself is sound), and a QP without
/// remote access enabled answers an RDMA request with an Invalid Request NAK instead (Table
/// 17-7 "Unsupported or Reserved Opcode": a function the QP does not support): REM_INV_REQ_ERR
/// at the requester, QP_REQ_ERR at the target.
#[test]
fn seed001_r_key_good_key_works_and_disabled_qp_access_is_an_invalid_request() {
    let mut d = r_key_duo("");
    let mut w = send_wr(1, SendOpcode::RdmaWrite, 64);
    w.rkey = TGT;
    w.remote_addr = TGT_VA;
    d.post(0, w).expect("post");
    let mut r = read_wr(2, 64);
    r.rkey = TGT;
    r.remote_addr = TGT_VA + 64;
    d.post(0, r).expect("post");
    d.pump();
    assert!(d.e[0]
        .out
        .send_cqes
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert_eq!(d.e[1].mem.peek(TGT, TGT_VA, 64), vec![0x3C; 64]);
    assert_eq!(d.e[0].mem.peek(DST, DST_VA, 64), vec![PATTERN; 64]);
    for (op, access) in [
        (SendOpcode::RdmaWrite, ACCESS_REMOTE_READ),
        (SendOpcode::RdmaRead, ACCESS_REMOTE_WRITE),
    ] {
        let mut d = r_key_duo("");
        let e = &mut d.e[1];
        let a = QpAttrs {
            qp_access_flags: access,
            ..QpAttrs::default()
        };
        e.qp.modify(0, &a, AttrMask::ACCESS_FLAGS, &mut e.out)
            .expect("access flags");
        let mut wr = if op == SendOpcode::RdmaRead {
            read_wr(1, 64)
        } else {
            send_wr(1, SendOpcode::RdmaWrite, 64)
        };
        wr.rkey = TGT;
        wr.remote_addr = TGT_VA;
        d.post(0, wr).expect("post");
        d.pump();
        assert_eq!(
            d.e[0].out.send_cqes[0].status,
            WcStatus::RemInvReqErr,
            "{op:?}"
        );
        assert!(d.e[1].out.has_event(AsyncEvent::QpReqErr), "{op:?}");
        assert!(d.e[1]
            .mem
            .peek(TGT, TGT_VA, TGT_LEN)
            .iter()
            .all(|b| *b == PATTERN));
    }
}

// ---- declared behaviours -----------------------------------------------------------------------

/// Seed 001, Table 17-7 "CQ overflow" (class G): the message whose receive CQE could not be
/// written is not acknowledged (no ACK leaves for it, nor anything after it), so the requester
/// never completes a message the responder's owner never saw.
#[test]
fn seed001_class_g_leaves_no_ack_for_the_lost_message() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 3],
        ..Opts::default()
    });
    d.pump();
    d.e[1].out.cq_cap = 0;
    d.post(0, send_wr(1, SendOpcode::Send, 10)).expect("post");
    d.progress(0);
    let p = d.take(0);
    assert!(p[0].0.bth.ack_req);
    d.deliver(1, &p[0].0, &p[0].1, 1);
    d.progress(1);
    assert!(d.take(1).is_empty(), "no ACK for the lost message");
    assert_eq!(d.state(1), QpState::Error);
    // The requester gets nothing: its Send is not completed successfully.
    assert!(d.e[0].out.send_cqes.is_empty());
}

/// Seed 003 ("SQ Logic's Behavior When No Credits Are Available"): an RDMA Write with Immediate
/// takes its RQ WQE (its credit) at the packet carrying the immediate data, the Last (or
/// Only): the First and Middle packets need none, and without a WQE the Last draws the RNR NAK.
#[test]
fn seed003_write_with_immediate_takes_its_credit_at_the_last_packet() {
    let mut d = Duo::new(Opts::default());
    d.take(1);
    let mut first = req(Opcode::RcRdmaWriteFirst, PSN_A);
    first.reth = Some(Reth {
        va: RMT_VA,
        rkey: RMT,
        dma_len: 2 * MTU + 10,
    });
    d.deliver(1, &first, &[1u8; MTU as usize], 1);
    let mut middle = req(Opcode::RcRdmaWriteMiddle, PSN_A + 1);
    middle.bth.ack_req = true;
    d.deliver(1, &middle, &[2u8; MTU as usize], 1);
    let p = d.take(1);
    assert_eq!(p.len(), 1);
    assert!(
        aeth_of(&p[0].0).syndrome.is_ack(),
        "First and Middle need no WQE"
    );
    assert_eq!(d.e[1].qp.counters().rq.rnr_naks_sent, 0);
    let last = req(Opcode::RcRdmaWriteLastWithImmediate, PSN_A + 2);
    d.deliver(1, &last, &[3u8; 10], 1);
    let p = d.take(1);
    assert_eq!(aeth_of(&p[0].0).syndrome, Syndrome::RnrNak { timer: 3 });
    assert_eq!(p[0].0.bth.psn, Psn::new(PSN_A + 2), "RNR NAK at the Last");
    assert_eq!(d.e[1].qp.rq_logic().epsn(), PSN_A + 2);
    // With a receive posted, the retransmitted Last takes it: one credit less.
    d.post_recv(1, 64).expect("recv");
    d.take(1);
    assert_eq!(d.e[1].qp.rq_logic().credits(), 1);
    d.deliver(1, &last, &[3u8; 10], 1);
    assert_eq!(d.e[1].qp.rq_logic().credits(), 0);
    let c = &d.e[1].out.recv_cqes;
    assert_eq!(
        (c[0].opcode, c[0].byte_len, c[0].imm_or_rkey),
        (WcOpcode::RecvRdmaWithImm, 2 * MTU + 10, 7)
    );
}

/// Seed 003 ("SQ WQEs Are Internally Numbered"; the MSN counts messages the RQ Logic
/// completed): local operations (LOCAL_INV, fast registration) never reach the responder and
/// take no SSN, so a Send behind them keeps the SSN the peer's credits were counted for.
#[test]
fn seed003_local_operations_take_no_ssn() {
    let mut d = Duo::new(Opts {
        pre_rtr_recvs: [0, 1],
        ..Opts::default()
    });
    d.flow(1); // one credit: LSN = 1
    d.take(0);
    let mut inv = SendWr::new(1, SendOpcode::LocalInv);
    inv.invalidate_rkey = RMT;
    d.post(0, inv).expect("post");
    let mut reg = SendWr::new(2, SendOpcode::RegMr);
    reg.reg.key = RMT;
    reg.reg.iova = RMT_VA;
    reg.reg.length = 1 << 16;
    reg.reg.access = ACCESS_LOCAL_WRITE;
    d.post(0, reg).expect("post");
    d.post(0, send_wr(3, SendOpcode::Send, 3 * MTU))
        .expect("post");
    d.progress(0);
    let p = d.take(0);
    assert_eq!(
        p.len(),
        3,
        "the Send is SSN 1, within the LSN: all its packets go"
    );
    for (h, pl, port) in p {
        d.deliver(1, &h, &pl, port);
    }
    let acks = d.take(1);
    assert_eq!(aeth_of(&acks.last().expect("ACK").0).msn, 1);
    assert_eq!(d.e[0].qp.counters().sq.credit_stalls, 0);
}

/// Seed 000: after a migration the retry count is reloaded on both sides. Step 5 says so for
/// the QP that migrates on its own (retry exhaustion or a command); the QP that migrates on the
/// peer's MigReq=1 (steps 6-10) moves its own SQ to the new path too, and retries spent on the
/// old path say nothing about the new one: it reloads the count the same way.
#[test]
fn seed000_peer_requested_migration_reloads_the_retry_count() {
    let mut d = armed_duo();
    // Node 0 spends a retry on a Write lost on the old path.
    d.post(0, send_wr(5, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.progress(0);
    d.take(0);
    d.fire(0, Timer::Retransmit);
    d.take(0);
    assert_eq!(d.e[0].qp.sq_logic().retry_left(), 2);
    // Node 1 migrates by command and its next packet, MigReq=1 over the alternate path, is
    // the migration request node 0 accepts.
    let e = &mut d.e[1];
    let a = QpAttrs {
        path_mig_state: MigState::Migrated,
        ..QpAttrs::default()
    };
    e.qp.modify(0, &a, AttrMask::PATH_MIG_STATE, &mut e.out)
        .expect("migrate");
    d.post(1, send_wr(6, SendOpcode::RdmaWrite, 4))
        .expect("post");
    d.progress(1);
    let p = d.take(1);
    assert!(p[0].0.bth.mig_req);
    assert_eq!(p[0].2, 2);
    d.deliver(0, &p[0].0, &p[0].1, p[0].2);
    assert!(d.e[0].out.has_event(AsyncEvent::PathMig));
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    assert_eq!(
        d.e[0].qp.sq_logic().retry_left(),
        3,
        "reloaded on the peer's request"
    );
    // And node 0 retransmits its outstanding Write over the new path at once.
    d.progress(0);
    let r = d.take(0);
    assert!(r
        .iter()
        .any(|(h, _, port)| h.bth.opcode == Opcode::RcRdmaWriteOnly
            && *port == 2
            && h.bth.mig_req));
}

// ---- the send window -----------------------------------------------------------------------

/// The PSNs of a batch of packets.
fn psns(p: &[(Headers, Vec<u8>, u8)]) -> Vec<u32> {
    p.iter().map(|(h, _, _)| h.bth.psn.value()).collect()
}

/// After a transport timeout the requester resends one packet, which asks for an ACK, and
/// each acknowledged PSN widens the window by one; the packet that fills the window always
/// asks for an ACK (the responder coalesces them). A sequence NAK halves the window.
#[test]
fn requester_window_closes_on_timeout_and_reopens_with_acks() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 60 * MTU))
        .expect("post");
    d.progress(0);
    assert_eq!(
        d.take(0).len(),
        60,
        "a fresh window sends the whole message"
    );
    // Everything was lost.
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(psns(&p), [PSN_A], "one packet after a timeout");
    assert!(p[0].0.bth.ack_req);
    let mut acked = PSN_A;
    for want in [2u32, 4, 8, 16] {
        d.deliver(
            0,
            &ack_pkt(acked, Aeth::ack(0, CREDIT_CODE_INVALID)),
            &[],
            1,
        );
        d.progress(0);
        let p = d.take(0);
        let expect: Vec<u32> = (acked + 1..=acked + want).collect();
        assert_eq!(psns(&p), expect, "the window doubles per round");
        assert!(
            p.last().is_some_and(|(h, _, _)| h.bth.ack_req),
            "the last asks for an ACK"
        );
        acked += want;
    }
    // The peer NAKs the last packet (it acknowledges the ones before it): the window was
    // 1 + 30 acknowledged PSNs = 31 and halves to 15; the pass restarts at the NAK's PSN.
    let nak = ack_pkt(acked, Aeth::nak(0, NakCode::PsnSequenceError));
    d.deliver(0, &nak, &[], 1);
    d.progress(0);
    let p = d.take(0);
    assert_eq!(psns(&p), (acked..acked + 15).collect::<Vec<_>>());
    assert_eq!(d.e[0].qp.counters().sq.timeouts, 1);
}

/// An ACK that overtakes a window-limited go-back-N pass moves the pass to the first PSN the
/// peer lacks: what it already has is not sent again.
#[test]
fn requester_window_pass_resumes_at_the_acknowledged_psn() {
    let mut d = Duo::new(Opts::default());
    d.pump();
    d.post(0, send_wr(1, SendOpcode::RdmaWrite, 40 * MTU))
        .expect("post");
    d.progress(0);
    d.take(0);
    d.fire(0, Timer::Retransmit);
    d.progress(0);
    assert_eq!(psns(&d.take(0)), [PSN_A]);
    // The originals were only late: the peer acknowledges 30 of them at once.
    d.deliver(
        0,
        &ack_pkt(PSN_A + 29, Aeth::ack(0, CREDIT_CODE_INVALID)),
        &[],
        1,
    );
    d.progress(0);
    let p = d.take(0);
    assert_eq!(psns(&p), (PSN_A + 30..PSN_A + 40).collect::<Vec<_>>());
}
