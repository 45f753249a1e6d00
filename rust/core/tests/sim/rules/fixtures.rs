//! The fixture every rule test uses: [`Duo`], two QPs wired back to back (each an [`End`]
//! with its memory and outputs) brought up to the state [`Opts`] asks for, where the test moves
//! each packet by hand; the usual starting points ([`Duo::responder`], [`Duo::running`],
//! [`Duo::credits_known`]); plus the MRs, PSNs and helpers to build work requests and packets.

use rvrdma_core::apm::{MigState, PathInfo, PathMatch};
use rvrdma_core::events::{Timer, WcStatus};
use rvrdma_core::memory::{
    ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
use rvrdma_core::psn::Psn;
use rvrdma_core::qp::{QpAttrs, QpCreate, QpModifyError};
use rvrdma_core::qp_state::{AttrMask, QpState, QpType};
use rvrdma_core::requester::PostError;
use rvrdma_core::wire::{Aeth, AtomicEth, Bth, Headers, NakCode, Opcode, Reth, Syndrome};
use rvrdma_core::wqe::{
    RecvSlot, RecvWr, SendOpcode, SendSlot, SendWr, SgList, Sge, UdDest, MAX_SGE,
};

use crate::sim::mem::SimMem;
use crate::sim::node::{timer_index, SimOut, SimQp};

pub const MTU: u32 = 256;
// MR keys as the driver makes them: index << 8 | key byte.
pub const SRC: u32 = 0x1_5a;
pub const DST: u32 = 0x2_c3;
pub const RMT: u32 = 0x3_17;
pub const ATM: u32 = 0x4_e8;
pub const SRC_VA: u64 = 0x10000;
pub const DST_VA: u64 = 0x20000;
pub const RMT_VA: u64 = 0x30000;
pub const ATM_VA: u64 = 0x40000;
pub const PSN_A: u32 = 100;
pub const PSN_B: u32 = 500;

pub struct End {
    pub qp: SimQp,
    pub mem: SimMem,
    pub out: SimOut,
    pub paths: [PathInfo; 2],
}

impl End {
    /// True when there are send completions and every one so far has `status` (none at all is
    /// not a flush that happened).
    pub fn sends_all(&self, status: WcStatus) -> bool {
        let c = &self.out.send_cqes;
        !c.is_empty() && c.iter().all(|c| c.status == status)
    }

    /// True when there are receive completions and every one so far has `status`.
    pub fn recvs_all(&self, status: WcStatus) -> bool {
        let c = &self.out.recv_cqes;
        !c.is_empty() && c.iter().all(|c| c.status == status)
    }
}

pub fn gid(node: usize, link: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[13] = link as u8;
    g[15] = node as u8 + 1;
    g
}

pub fn path(node: usize, link: usize) -> PathInfo {
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
    /// The alternate path's local ACK timeout exponent (`armed`), which applies after a
    /// migration.
    pub alt_timeout: u8,
    /// P_Keys of node 0's and node 1's QP (the values of their pkey_index).
    pub pkeys: [u16; 2],
    /// Path MTU of both QPs, as IB encodes it (1 = 256 bytes, the default; 5 = 4096).
    pub path_mtu: u8,
    /// Scatter/gather elements each queue slot of both QPs holds (default `MAX_SGE`).
    pub sge_room: usize,
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
            sge_room: MAX_SGE,
            uc: false,
            psns: (PSN_A, PSN_B),
            timeout: 8,
            alt_timeout: 8,
            pkeys: [0xFFFF; 2],
            path_mtu: 1,
        }
    }
}

pub struct Duo {
    pub e: [End; 2],
    pub now: u64,
    pub recv_seq: [u64; 2],
}

pub fn mk_end(i: usize, srq: bool) -> End {
    mk_end_t(i, srq, QpType::Rc)
}

pub fn mk_end_t(i: usize, srq: bool, qp_type: QpType) -> End {
    mk_end_room(i, srq, qp_type, MAX_SGE)
}

/// An end whose queue slots hold `room` scatter/gather elements each.
pub fn mk_end_room(i: usize, srq: bool, qp_type: QpType, room: usize) -> End {
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
    mem.0.borrow_mut().qpn = 0x11 + i as u32;
    let qp = SimQp::new(
        QpCreate {
            qp_type,
            qpn: 0x11 + i as u32,
            srq,
        },
        (
            vec![SendSlot::default(); 16],
            vec![Sge::default(); 16 * room],
            vec![UdDest::EMPTY; if qp_type.is_datagram() { 16 } else { 0 }],
        ),
        (
            vec![RecvSlot::default(); 16],
            vec![Sge::default(); 16 * room],
        ),
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
            e: [
                mk_end_room(0, o.srq[0], t, o.sge_room),
                mk_end_room(1, o.srq[1], t, o.sge_room),
            ],
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

    /// A pair in RTS for a test of node 1's responder: node 1 has `recvs` receives posted
    /// before RTR, and its initial ACK is taken, so `take(1)` returns only its answers to the
    /// packets the test delivers.
    pub fn responder(recvs: usize) -> Duo {
        Duo::responder_with(Opts {
            pre_rtr_recvs: [0, recvs],
            ..Opts::default()
        })
    }

    /// [`Duo::responder`] with other options.
    pub fn responder_with(o: Opts) -> Duo {
        let mut d = Duo::new(o);
        d.take(1);
        d
    }

    /// A connection at rest, ready for work requests: node 1 has `recvs` receives posted
    /// before RTR and both initial ACKs have arrived.
    pub fn running(recvs: usize) -> Duo {
        Duo::running_with(Opts {
            pre_rtr_recvs: [0, recvs],
            ..Opts::default()
        })
    }

    /// [`Duo::running`] with other options.
    pub fn running_with(o: Opts) -> Duo {
        let mut d = Duo::new(o);
        d.pump();
        d
    }

    /// [`Duo::new`] once node 1's initial ACK has reached node 0, which so knows node 1's credit
    /// count; node 0's own initial ACK is taken (lost).
    pub fn credits_known(o: Opts) -> Duo {
        let mut d = Duo::new(o);
        d.flow(1);
        d.take(0);
        d
    }

    /// Node 1's initial ACK is replaced by one carrying `aeth` (an ACK of nothing, at PSN_A - 1):
    /// the credit count and MSN node 0 then believes node 1 has.
    pub fn announce(&mut self, aeth: Aeth) {
        self.take(1);
        let h = ack_pkt(Psn::new(PSN_A).prev().value(), aeth);
        self.deliver(0, &h, &[], 1);
    }

    /// Modify QP of node `i`: the attributes of `a` that `m` names.
    pub fn modify(&mut self, i: usize, a: &QpAttrs, m: AttrMask) -> Result<(), QpModifyError> {
        let e = &mut self.e[i];
        e.qp.modify(0, a, m, &mut e.out)
    }

    /// Moves node `i` to `state` (a Modify QP of the state alone).
    pub fn move_to(&mut self, i: usize, state: QpState) {
        let a = QpAttrs {
            qp_state: state,
            ..QpAttrs::default()
        };
        self.modify(i, &a, AttrMask::STATE)
            .unwrap_or_else(|e| panic!("to {state:?}: {e:?}"));
    }

    /// Moves node `i` from Reset to Init with `pkey` and every remote access enabled.
    pub fn go_init(&mut self, i: usize, pkey: u16) {
        let a = QpAttrs {
            qp_state: QpState::Init,
            pkey,
            qp_access_flags: ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC,
            ..QpAttrs::default()
        };
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
        self.modify(i, &a, m).expect("INIT");
    }

    /// Moves node `i` from Init to RTR, connected to the other node as `o` says.
    pub fn go_rtr(&mut self, i: usize, o: &Opts) {
        let a = QpAttrs {
            qp_state: QpState::Rtr,
            path: self.e[i].paths[0],
            path_mtu: o.path_mtu,
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
        self.modify(i, &a, m).expect("RTR");
    }

    fn go_rts(&mut self, i: usize, o: &Opts) {
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
            a.alt_path = self.e[i].paths[1];
            a.alt_path.timeout = o.alt_timeout;
            a.path_mig_state = MigState::Rearm;
            m = m | AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE;
        }
        self.modify(i, &a, m).expect("RTS");
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

    /// Posts node 0's local operations: WR 1 invalidates RMT (LOCAL_INV), WR 2 registers it
    /// again (REG_MR).
    pub fn post_local_ops(&mut self) {
        let mut inv = SendWr::new(1, SendOpcode::LocalInv);
        inv.invalidate_rkey = RMT;
        self.post(0, inv).expect("post");
        let mut reg = SendWr::new(2, SendOpcode::RegMr);
        reg.extra = rvrdma_core::wqe::WrExtra::Reg(rvrdma_core::wqe::RegMrParams {
            key: RMT,
            iova: RMT_VA,
            length: 1 << 16,
            access: ACCESS_LOCAL_WRITE,
            mr_handle: 0,
        });
        self.post(0, reg).expect("post");
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
            ..Default::default()
        };
        let now = self.now;
        let e = &mut self.e[to];
        e.qp.receive(now, h, payload.into(), &pm, &mut e.mem, &mut e.out);
    }

    /// Delivers `packets`, as [`Duo::take`] returns them, to node `to`.
    pub fn deliver_all(&mut self, to: usize, packets: &[(Headers, Vec<u8>, u8)]) {
        for (h, p, port) in packets {
            self.deliver(to, h, p, *port);
        }
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

    /// Node 0 sends what it has and node 1 takes it (node 1's answers stay queued).
    pub fn flow_after_progress(&mut self) {
        self.progress(0);
        self.flow(0);
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

pub fn fill(mem: &SimMem, key: u32, va: u64, data: &[u8]) {
    mem.0.borrow_mut().write(key, va, data).expect("fill");
}

pub fn send_wr(id: u64, op: SendOpcode, len: u32) -> SendWr {
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

pub fn aeth_of(h: &Headers) -> Aeth {
    h.aeth.expect("AETH")
}

pub fn is_nak(h: &Headers, code: NakCode) -> bool {
    h.bth.opcode == Opcode::RcAcknowledge && aeth_of(h).syndrome == Syndrome::Nak(code)
}

/// A request from node 0 to node 1 as raw headers (for malformed-packet tests).
pub fn req(opcode: Opcode, psn: u32) -> Headers {
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

/// [`req`] with a RETH asking for `dma_len` bytes at `va` under `rkey`.
pub fn req_reth(opcode: Opcode, psn: u32, rkey: u32, va: u64, dma_len: u32) -> Headers {
    let mut h = req(opcode, psn);
    h.reth = Some(Reth { va, rkey, dma_len });
    h
}

/// [`req`] (an atomic) on the 8 bytes at `va` under `rkey`.
pub fn req_atomic(opcode: Opcode, psn: u32, rkey: u32, va: u64) -> Headers {
    let mut h = req(opcode, psn);
    let a = h.atomic_eth.as_mut().expect("an atomic opcode");
    a.rkey = rkey;
    a.va = va;
    h
}

pub fn armed_duo() -> Duo {
    armed_duo_with(Opts::default())
}

/// [`armed_duo`] with other options (`armed` and the receives are set here).
pub fn armed_duo_with(o: Opts) -> Duo {
    let mut d = Duo::new(Opts {
        armed: true,
        pre_rtr_recvs: [4, 4],
        ..o
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

/// A Fetch and Add of `add` to the atomic MR's first word, the original value to `dst_va`.
pub fn fetch_add_wr(id: u64, add: u64, dst_va: u64) -> SendWr {
    let mut fa = SendWr::new(id, SendOpcode::AtomicFetchAndAdd);
    fa.sg = SgList::from_slice(&[Sge {
        addr: dst_va,
        length: 8,
        lkey: DST,
    }])
    .expect("sg");
    fa.remote_addr = ATM_VA;
    fa.rkey = ATM;
    fa.extra = rvrdma_core::wqe::WrExtra::Atomic {
        compare_add: add,
        swap: 0,
    };
    fa
}

pub fn read_wr(id: u64, len: u32) -> SendWr {
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

/// A response from node 1 to node 0 at `psn` with `aeth`.
pub fn ack_pkt(psn: u32, aeth: Aeth) -> Headers {
    let mut h = Headers::new(Bth::new(Opcode::RcAcknowledge, 0x11, Psn::new(psn)));
    h.aeth = Some(aeth);
    h
}

pub fn retransmit_deadline(d: &Duo, i: usize) -> Option<u64> {
    d.e[i].out.timers[timer_index(Timer::Retransmit)]
}
