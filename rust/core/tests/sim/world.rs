//! The simulated world: two nodes, a lossy two-path network, a virtual clock and random
//! workloads, with the invariants checked at the end of each run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rvrdma_core::apm::{MigState, PathInfo, PathMatch};
use rvrdma_core::events::{AsyncEvent, Completion, Timer, WcOpcode, WcStatus};
use rvrdma_core::memory::{
    RxPayload, ACCESS_FLUSH_GLOBAL, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use rvrdma_core::qp::{QpAttrs, QpCreate};
use rvrdma_core::qp_state::{AttrMask, QpState, QpType};
use rvrdma_core::wire::feth::{PLACEMENT_GLOBAL, SELECT_MR, SELECT_RANGE};
use rvrdma_core::wire::Headers;
use rvrdma_core::wqe::{
    FlushParams, RecvSlot, RecvWr, RegMrParams, SendFlags, SendOpcode, SendWr, SgList, Sge, WrExtra,
};

use super::mem::SimMem;
use super::node::{sim_queue, sim_send_queue, SimOut, SimQp};
use super::rng::Rng;

pub const KEY_SRC: u32 = 0x100;
pub const KEY_RECV: u32 = 0x200;
pub const KEY_WTGT: u32 = 0x300;
pub const KEY_RSRC: u32 = 0x400;
pub const KEY_RDST: u32 = 0x500;
pub const KEY_ATOM: u32 = 0x600;
pub const KEY_SPARE: u32 = 0x700;

const BASE_SRC: u64 = 0x1_0000_0000;
const BASE_RECV: u64 = 0x2_0000_0000;
const BASE_WTGT: u64 = 0x3_0000_0000;
const BASE_RSRC: u64 = 0x4_0000_0000;
const BASE_RDST: u64 = 0x5_0000_0000;
const BASE_ATOM: u64 = 0x6_0000_0000;
const BASE_SPARE: u64 = 0x7_0000_0000;

const BUF: usize = 2 << 20;
const RSRC_LEN: usize = 64 * 1024;
/// Memory regions of a bulk run (messages up to 1 MiB).
const BULK_BUF: usize = 16 << 20;
const BULK_RSRC_LEN: usize = 1 << 20;
const ATOM_SLOTS: usize = 512;

/// Which kind of run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Loss, duplication, reordering; both directions; all opcodes.
    Lossy,
    /// Both QPs armed with an alternate path; the primary dies mid-run.
    ApmArmed,
    /// No alternate path; the primary dies mid-run: node 0 ends in error.
    PathDeathUnarmed,
    /// UC QPs over a lossy network: messages may be lost, never corrupted or reordered.
    UcLossy,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub scenario: Scenario,
    pub loss: u64,
    pub dup: u64,
    pub jitter: u64,
    pub base_delay: u64,
    pub mtu_enum: u8,
    pub n_wrs: [usize; 2],
    pub sq_depth: usize,
    pub rq_depth: usize,
    pub max_len: u32,
    pub recv_lazy: u64,
    pub psn0: [u32; 2],
    pub max_rd_atomic: u8,
    /// The network is a bounded FIFO bottleneck per direction, like `tc netem` on a veth:
    /// [`Bottleneck`]. Jitter and base delay are then unused.
    pub bottleneck: Option<Bottleneck>,
    /// Local ACK Timeout exponent of both QPs.
    pub timeout: u8,
    /// Both QPs take their receive WQEs from an SRQ, as the driver does: a request that needs
    /// one when the QP holds none takes the oldest one posted to the SRQ first.
    pub srq: bool,
    /// Node 0's initial ACK never reaches node 1 (node 1 was not yet in RTR when it came), so
    /// node 1's requester starts without knowing node 0's credits.
    pub lose_initial_ack: bool,
    /// Node 0 posts only RDMA Reads, each `max_len` bytes long (an NVMe-oF target fetching the
    /// data of large writes).
    pub reads_only: bool,
    /// Link 0 goes down and up by turns, `(up, down)` ns each, starting up (`ip link set down`
    /// and `up` in a loop): packets sent, or due to arrive, while it is down are lost.
    pub flap: Option<(u64, u64)>,
    /// Virtual time a run may take (ns).
    pub time_limit: u64,
    pub trace: bool,
}

/// A queue each packet waits in, then a fixed delay that some packets skip (netem's
/// `delay D reorder P`): bulk traffic that outruns it fills the queue and then loses packets,
/// so ACKs wait behind retransmissions.
#[derive(Clone, Copy, Debug)]
pub struct Bottleneck {
    /// Time to transmit one packet (ns).
    pub per_packet: u64,
    /// Packets the queue holds; more are dropped.
    pub limit: u64,
    /// Delay after the queue (ns).
    pub delay: u64,
    /// Per mille of packets that skip the delay (and so overtake the ones before them).
    pub reorder: u64,
    /// Parallel queues (CPUs): each batch a node sends joins one of them, picked at random,
    /// as a veth queues packets to the backlog of the CPU that sends them; batches in two
    /// queues overtake each other.
    pub lanes: usize,
}

impl Config {
    pub fn random(seed: u64) -> Config {
        let mut r = Rng::new(seed.wrapping_mul(7919));
        let scenario = match seed % 10 {
            0 | 1 => Scenario::ApmArmed,
            2 => Scenario::PathDeathUnarmed,
            3 => Scenario::UcLossy,
            _ => Scenario::Lossy,
        };
        // One run in five uses extreme shapes: 4096-byte MTU and large messages, or queues of
        // depth 1 with heavy reordering.
        let extreme = r.below(5);
        let mtu_enum = match extreme {
            0 => 5,
            _ => 1 + r.below(3) as u8, // 256..1024
        };
        let mtu = 128u32 << mtu_enum;
        let psn_base = if r.chance(500) { 0xFF_FFF0 } else { 0 };
        Config {
            seed,
            scenario,
            loss: if scenario == Scenario::Lossy {
                r.below(60)
            } else {
                r.below(15)
            },
            dup: r.below(30),
            jitter: if extreme == 1 {
                20_000
            } else {
                r.below(3) * 2_000
            },
            base_delay: 1_000 + r.below(4_000),
            mtu_enum,
            n_wrs: [
                10 + r.below(30) as usize,
                if scenario == Scenario::PathDeathUnarmed {
                    0
                } else {
                    r.below(15) as usize
                },
            ],
            sq_depth: if extreme == 1 {
                1
            } else {
                4 + r.below(13) as usize
            },
            rq_depth: if extreme == 1 {
                1
            } else {
                4 + r.below(13) as usize
            },
            max_len: if extreme == 0 {
                mtu * (1 + r.below(8) as u32)
            } else {
                mtu * (1 + r.below(4) as u32) + r.below(50) as u32
            },
            recv_lazy: r.below(400),
            psn0: [
                (psn_base + r.below(30) as u32) & 0xFF_FFFF,
                (psn_base + r.below(30) as u32) & 0xFF_FFFF,
            ],
            max_rd_atomic: 1 + r.below(4) as u8,
            bottleneck: None,
            timeout: 8, // ~1 ms
            srq: false,
            lose_initial_ack: false,
            reads_only: false,
            flap: None,
            time_limit: 30_000_000_000,
            trace: false,
        }
    }

    /// A bulk run through a netem-like bottleneck, the mix of guest test 32 (5% loss, 1%
    /// duplication, 25% reordering, 1 ms delay) with messages up to `max_len` and the local
    /// ACK timeout of `ibv_rc_pingpong` (14, 67 ms).
    pub fn bulk(seed: u64, max_len: u32) -> Config {
        let mut c = Config::random(seed);
        c.scenario = Scenario::Lossy;
        c.loss = 50;
        c.dup = 10;
        c.mtu_enum = 3;
        c.max_len = max_len;
        c.sq_depth = 16;
        c.rq_depth = 16;
        c.n_wrs = [20, 20];
        c.bottleneck = Some(Bottleneck {
            per_packet: 10_000,
            limit: 1000,
            delay: 1_000_000,
            reorder: 250,
            lanes: 1,
        });
        c.timeout = 14;
        c
    }

    fn buf(&self) -> usize {
        if self.max_len as usize > BUF / 16 {
            BULK_BUF
        } else {
            BUF
        }
    }

    fn rsrc_len(&self) -> usize {
        if self.max_len as usize > RSRC_LEN {
            BULK_RSRC_LEN
        } else {
            RSRC_LEN
        }
    }
}

/// What a node expects to see completed.
#[derive(Clone, Debug)]
pub struct WrPlan {
    pub wr: SendWr,
    /// The payload bytes (Send/Write) or the bytes a Read must return.
    pub data: Vec<u8>,
    /// Region in the peer's write-target MR (Write) or the read destination (Read/atomic).
    pub check_va: u64,
    /// Expected atomic original value.
    pub atomic_orig: u64,
    pub posted: bool,
}

#[derive(Clone, Debug)]
pub struct ExpectedRecv {
    pub opcode: WcOpcode,
    pub len: u32,
    pub imm: Option<u32>,
    pub data: Vec<u8>,
    /// An RDMA Write with Immediate's target in the receiver's write-target MR: its bytes are
    /// `data` of the sender's plan once the receive completes.
    pub write_va: Option<u64>,
}

pub struct Node {
    pub qp: SimQp,
    pub mem: SimMem,
    pub out: SimOut,
    pub plans: Vec<WrPlan>,
    pub next_post: usize,
    pub recv_posted: usize,
    pub recv_needed: usize,
    pub recv_regions: Vec<(u64, u32)>,
    pub recv_checked: usize,
    pub send_checked: usize,
    pub paths: [PathInfo; 2],
    /// Receive WRs posted to the node's SRQ and not yet taken by its QP (`Config::srq`).
    pub srq: std::collections::VecDeque<RecvWr>,
}

/// An independent model of the requester's end-to-end credit obligations (seed 003), fed from
/// the packets on the wire: which WR each new request packet belongs to, the LSN from the ACKs
/// the requester received, and whether a message sent beyond the LSN behaved.
#[derive(Debug)]
pub struct CreditModel {
    /// Non-local WRs in post order: (needs RQ WQE, is send, npsn).
    pub wrs: Vec<(bool, bool, u32)>,
    pub cur: usize,
    pub cur_pkt: u32,
    pub high: Option<rvrdma_core::psn::Psn>,
    pub limit: ModelLimit,
    /// A message went out beyond the LSN: no new packet until an ACK at or after this PSN.
    pub waiting: Option<rvrdma_core::psn::Psn>,
    /// The WR (index into `wrs`) sent beyond the LSN whose wait point is its last packet.
    pub uncredited_wr: Option<usize>,
    pub uncredited_msgs: u64,
    /// Credit probes seen.
    pub probes: u64,
    /// Which WR (index into `wrs`) and operation every request PSN belongs to.
    pub owner: std::collections::HashMap<u32, (usize, rvrdma_core::wire::Operation)>,
}

impl CreditModel {
    fn new() -> CreditModel {
        CreditModel {
            wrs: Vec::new(),
            cur: 0,
            cur_pkt: 0,
            high: None,
            limit: ModelLimit::Lsn(0),
            waiting: None,
            uncredited_wr: None,
            uncredited_msgs: 0,
            probes: 0,
            owner: std::collections::HashMap::new(),
        }
    }
}

/// The number of credits an AETH credit code stands for (IBA Table 17-8), written out here
/// again rather than taken from the engine, so that the model checks the engine's table too.
const MODEL_CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// The requester's limit in the model (seed 003): the last SSN it may start a message needing
/// a receive WQE with, or none (credit code 0x1F).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelLimit {
    Unlimited,
    Lsn(u32),
}

impl ModelLimit {
    /// Whether `a` is at or before `b` in 24-bit sequence arithmetic.
    fn not_after(a: u32, b: u32) -> bool {
        b.wrapping_sub(a) & 0xFF_FFFF < 0x80_0000
    }

    /// After an ACK with `msn` and credit `code`: LSN = MSN + credits, which never moves back.
    fn after_ack(self, msn: u32, code: u8) -> ModelLimit {
        let Some(&credits) = MODEL_CREDITS.get(usize::from(code)) else {
            return ModelLimit::Unlimited;
        };
        let new = msn.wrapping_add(credits) & 0xFF_FFFF;
        match self {
            ModelLimit::Lsn(old) if Self::not_after(new, old) => self,
            _ => ModelLimit::Lsn(new),
        }
    }

    /// A message that needs no receive WQE still takes an SSN: the LSN moves with it.
    fn bump(self) -> ModelLimit {
        match self {
            ModelLimit::Unlimited => self,
            ModelLimit::Lsn(l) => ModelLimit::Lsn(l.wrapping_add(1) & 0xFF_FFFF),
        }
    }

    fn allows(self, ssn: u32) -> bool {
        match self {
            ModelLimit::Unlimited => true,
            ModelLimit::Lsn(l) => Self::not_after(ssn, l),
        }
    }
}

struct InFlight {
    to: usize,
    link: usize,
    bytes: Vec<u8>,
}

pub struct Sim {
    /// When each direction's bottleneck queue empties (see [`Bottleneck`]).
    pub queue_free: [[u64; 4]; 2],
    pub cfg: Config,
    pub nodes: [Node; 2],
    pub rng: Rng,
    pub now: u64,
    pub steps: u64,
    flights: BTreeMap<(u64, u64), InFlight>,
    seq: u64,
    pub link_alive: [bool; 2],
    pub trace: Vec<String>,
    pub killed_at: Option<u64>,
    pub expected_recv: [Vec<ExpectedRecv>; 2],
    pub fadd_init: [u64; 2],
    pub fadd_sum: [u64; 2],
    pub atomics_posted: [u64; 2],
    /// ATOMIC WRITEs and FLUSHes posted towards each node (each must execute exactly once).
    pub placed_posted: [(u64, u64); 2],
    pub credit: [CreditModel; 2],
    pub violation: Option<String>,
    /// SQD exercise on node 0: (first WR index that must not start, drained seen).
    pub sqd_guard: Option<usize>,
    pub sqd_done: bool,
    /// UC: which of the messages each node expects have completed a receive (a message can
    /// complete more than once: a duplicate of a packet that starts one starts it again).
    pub uc_received: [Vec<bool>; 2],
}

fn gid(node: usize, link: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12] = 10;
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

fn sg(addr: u64, len: u32, key: u32, rng: &mut Rng) -> SgList {
    // Split into up to 3 SGEs to exercise gather/scatter across elements.
    let parts = if len >= 3 { 1 + rng.below(3) } else { 1 };
    let mut v = Vec::new();
    let mut off = 0u32;
    for i in 0..parts {
        let rem = len - off;
        let l = if i + 1 == parts {
            rem
        } else {
            rng.below(rem as u64 + 1) as u32
        };
        v.push(Sge {
            addr: addr + off as u64,
            length: l,
            lkey: key,
        });
        off += l;
    }
    SgList::from_slice(&v).expect("<= MAX_SGE")
}

impl Sim {
    pub fn new(cfg: Config) -> Sim {
        let mut rng = Rng::new(cfg.seed);
        let mtu = 128u32 << cfg.mtu_enum;
        let mk_node = |i: usize, rng: &mut Rng| -> Node {
            let mem = SimMem::default();
            let (buf, rsrc_len) = (cfg.buf(), cfg.rsrc_len());
            mem.add_mr(KEY_SRC, BASE_SRC, buf, 0);
            mem.add_mr(KEY_RECV, BASE_RECV, buf, ACCESS_LOCAL_WRITE);
            mem.add_mr(
                KEY_WTGT,
                BASE_WTGT,
                buf,
                ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_FLUSH_GLOBAL,
            );
            mem.add_mr(KEY_RSRC, BASE_RSRC, rsrc_len, ACCESS_REMOTE_READ);
            mem.add_mr(KEY_RDST, BASE_RDST, buf, ACCESS_LOCAL_WRITE);
            mem.add_mr(KEY_ATOM, BASE_ATOM, ATOM_SLOTS * 8, ACCESS_REMOTE_ATOMIC);
            mem.add_mr(KEY_SPARE, BASE_SPARE, 4096, ACCESS_LOCAL_WRITE);
            {
                let mut m = mem.0.borrow_mut();
                let rs = m.mrs.iter_mut().find(|x| x.key == KEY_RSRC).expect("mr");
                for b in rs.bytes.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                let at = m.mrs.iter_mut().find(|x| x.key == KEY_ATOM).expect("mr");
                for b in at.bytes.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
            }
            let qp = SimQp::new(
                QpCreate {
                    qp_type: if cfg.scenario == Scenario::UcLossy {
                        QpType::Uc
                    } else {
                        QpType::Rc
                    },
                    qpn: 0x11 + i as u32,
                    srq: cfg.srq,
                },
                sim_send_queue(cfg.sq_depth, false),
                sim_queue(RecvSlot::default(), if cfg.srq { 4 } else { cfg.rq_depth }),
            )
            .expect("RC QP");
            Node {
                qp,
                out: SimOut::new(mem.clone()),
                mem,
                plans: Vec::new(),
                next_post: 0,
                recv_posted: 0,
                recv_needed: 0,
                recv_regions: Vec::new(),
                recv_checked: 0,
                send_checked: 0,
                paths: [path(i, 0), path(i, 1)],
                srq: std::collections::VecDeque::new(),
            }
        };
        let n0 = mk_node(0, &mut rng);
        let n1 = mk_node(1, &mut rng);
        let mut sim = Sim {
            queue_free: [[0; 4]; 2],
            nodes: [n0, n1],
            rng,
            now: 0,
            steps: 0,
            flights: BTreeMap::new(),
            seq: 0,
            link_alive: [true, true],
            trace: Vec::new(),
            killed_at: None,
            expected_recv: [Vec::new(), Vec::new()],
            fadd_init: [0, 0],
            fadd_sum: [0, 0],
            atomics_posted: [0, 0],
            placed_posted: [(0, 0), (0, 0)],
            credit: [CreditModel::new(), CreditModel::new()],
            violation: None,
            sqd_guard: None,
            sqd_done: false,
            uc_received: [Vec::new(), Vec::new()],
            cfg,
        };
        for i in 0..2 {
            sim.plan_workload(i, mtu);
            let wrs: Vec<(bool, bool, u32)> = sim.nodes[i]
                .plans
                .iter()
                .filter(|p| !p.wr.opcode.is_local())
                .map(|p| {
                    let op = p.wr.opcode;
                    let len = p.wr.sg.total_len().unwrap_or(0);
                    let n = if op.is_atomic() || len == 0 {
                        1
                    } else {
                        len.div_ceil(mtu)
                    };
                    (op.needs_rq_wqe(), op.is_send(), n)
                })
                .collect();
            sim.credit[i].wrs = wrs;
            sim.credit[i].high = Some(rvrdma_core::psn::Psn::new(sim.cfg.psn0[i]));
        }
        sim.connect();
        sim
    }

    fn atom_read(&self, node: usize, slot: usize) -> u64 {
        let m = self.nodes[node].mem.0.borrow();
        let b = m
            .read(KEY_ATOM, BASE_ATOM + slot as u64 * 8, 8)
            .expect("atom");
        u64::from_ne_bytes(b.try_into().expect("8"))
    }

    fn plan_workload(&mut self, i: usize, _mtu: u32) {
        let peer = 1 - i;
        let n = self.cfg.n_wrs[i];
        let mut src_off = 0u64;
        let mut wtgt_off = 0u64;
        let mut rdst_off = 0u64;
        let mut cas_slot = 1usize;
        let fadd_init = self.atom_read(peer, 0);
        self.fadd_init[peer] = fadd_init;
        let mut fadd_acc = fadd_init;
        let mut spare_valid = true;
        let max_len = self.cfg.max_len.max(1);
        for k in 0..n {
            let r = &mut self.rng;
            let pick = r.below(100);
            let op = match pick {
                0..=24 => SendOpcode::Send,
                25..=34 => SendOpcode::SendWithImm,
                35..=49 => SendOpcode::RdmaWrite,
                50..=59 => SendOpcode::RdmaWriteWithImm,
                60..=74 => SendOpcode::RdmaRead,
                75..=81 => SendOpcode::AtomicFetchAndAdd,
                82..=87 => SendOpcode::AtomicCmpAndSwp,
                88..=93 => {
                    if spare_valid {
                        SendOpcode::LocalInv
                    } else {
                        SendOpcode::RegMr
                    }
                }
                94..=96 => SendOpcode::AtomicWrite,
                97..=98 => SendOpcode::Flush,
                _ => SendOpcode::Send,
            };
            let op = if self.cfg.scenario == Scenario::UcLossy && (op.is_read_or_atomic()) {
                SendOpcode::RdmaWriteWithImm
            } else {
                op
            };
            let op = if self.cfg.reads_only {
                SendOpcode::RdmaRead
            } else {
                op
            };
            let len = if self.cfg.reads_only {
                max_len
            } else if r.chance(100) {
                0
            } else {
                r.below(max_len as u64 + 1) as u32
            };
            let mut wr = SendWr::new(k as u64, op);
            if r.chance(150) {
                wr.flags = SendFlags(wr.flags.0 | SendFlags::FENCE);
            }
            if r.chance(100) {
                wr.flags = SendFlags(wr.flags.0 | SendFlags::SOLICITED);
            }
            let mut plan = WrPlan {
                wr,
                data: Vec::new(),
                check_va: 0,
                atomic_orig: 0,
                posted: false,
            };
            match op {
                SendOpcode::Send
                | SendOpcode::SendWithImm
                | SendOpcode::RdmaWrite
                | SendOpcode::RdmaWriteWithImm => {
                    let data: Vec<u8> = (0..len).map(|_| r.next_u64() as u8).collect();
                    let va = BASE_SRC + src_off;
                    src_off += len as u64 + 8;
                    self.nodes[i]
                        .mem
                        .0
                        .borrow_mut()
                        .write(KEY_SRC, va, &data)
                        .expect("src");
                    plan.wr.sg = sg(va, len, KEY_SRC, r);
                    plan.wr.imm = r.next_u64() as u32;
                    if op.is_write() {
                        plan.wr.remote_addr = BASE_WTGT + wtgt_off;
                        plan.wr.rkey = KEY_WTGT;
                        plan.check_va = plan.wr.remote_addr;
                        wtgt_off += len as u64 + 8;
                    }
                    if op.needs_rq_wqe() {
                        self.expected_recv[peer].push(ExpectedRecv {
                            opcode: if op.is_send() {
                                WcOpcode::Recv
                            } else {
                                WcOpcode::RecvRdmaWithImm
                            },
                            len,
                            imm: if op == SendOpcode::Send || op == SendOpcode::RdmaWrite {
                                None
                            } else {
                                Some(plan.wr.imm)
                            },
                            data: data.clone(),
                            write_va: op.is_write().then_some(plan.wr.remote_addr),
                        });
                    }
                    plan.data = data;
                }
                SendOpcode::RdmaRead => {
                    let rsrc_len = self.cfg.rsrc_len() as u32;
                    let len = len.min(rsrc_len);
                    let off = r.below((rsrc_len - len) as u64 + 1);
                    plan.wr.remote_addr = BASE_RSRC + off;
                    plan.wr.rkey = KEY_RSRC;
                    let dst = BASE_RDST + rdst_off;
                    rdst_off += len as u64 + 8;
                    plan.wr.sg = sg(dst, len, KEY_RDST, r);
                    plan.check_va = dst;
                    plan.data = self.nodes[peer]
                        .mem
                        .0
                        .borrow()
                        .read(KEY_RSRC, BASE_RSRC + off, len as u64)
                        .expect("rsrc");
                }
                SendOpcode::AtomicFetchAndAdd | SendOpcode::AtomicCmpAndSwp => {
                    self.atomics_posted[peer] += 1;
                    let dst = BASE_RDST + rdst_off;
                    rdst_off += 16;
                    plan.wr.sg = SgList::from_slice(&[Sge {
                        addr: dst,
                        length: 8,
                        lkey: KEY_RDST,
                    }])
                    .expect("sg");
                    plan.check_va = dst;
                    if op == SendOpcode::AtomicFetchAndAdd {
                        let add = r.next_u64();
                        plan.wr.remote_addr = BASE_ATOM;
                        plan.wr.extra = WrExtra::Atomic {
                            compare_add: add,
                            swap: 0,
                        };
                        plan.atomic_orig = fadd_acc;
                        fadd_acc = fadd_acc.wrapping_add(add);
                        self.fadd_sum[peer] = self.fadd_sum[peer].wrapping_add(add);
                    } else {
                        let slot = cas_slot.min(ATOM_SLOTS - 1);
                        cas_slot += 1;
                        let cur = self.atom_read(peer, slot);
                        plan.wr.remote_addr = BASE_ATOM + slot as u64 * 8;
                        plan.wr.extra = WrExtra::Atomic {
                            compare_add: if self.rng.chance(700) { cur } else { cur ^ 1 },
                            swap: self.rng.next_u64(),
                        };
                        plan.atomic_orig = cur;
                    }
                    plan.wr.rkey = KEY_ATOM;
                }
                SendOpcode::AtomicWrite => {
                    self.placed_posted[peer].0 += 1;
                    wtgt_off = (wtgt_off + 7) & !7;
                    plan.wr.remote_addr = BASE_WTGT + wtgt_off;
                    plan.wr.rkey = KEY_WTGT;
                    plan.wr.extra = WrExtra::AtomicWrite(r.next_u64().to_ne_bytes());
                    plan.check_va = plan.wr.remote_addr;
                    plan.data = plan.wr.atomic_write().to_vec();
                    wtgt_off += 16;
                }
                SendOpcode::Flush => {
                    self.placed_posted[peer].1 += 1;
                    plan.wr.remote_addr = BASE_WTGT;
                    plan.wr.rkey = KEY_WTGT;
                    plan.wr.extra = WrExtra::Flush(FlushParams {
                        length: len.min(self.cfg.buf() as u32),
                        placement: PLACEMENT_GLOBAL,
                        selectivity: if r.chance(300) {
                            SELECT_MR
                        } else {
                            SELECT_RANGE
                        },
                    });
                }
                SendOpcode::LocalInv => {
                    plan.wr.invalidate_rkey = KEY_SPARE;
                    spare_valid = false;
                }
                SendOpcode::RegMr => {
                    plan.wr.extra = WrExtra::Reg(RegMrParams {
                        key: KEY_SPARE,
                        iova: BASE_SPARE,
                        length: 4096,
                        access: ACCESS_LOCAL_WRITE,
                        mr_handle: 0,
                    });
                    spare_valid = true;
                }
                _ => {}
            }
            self.nodes[i].plans.push(plan);
        }
        // Receive buffers: exact size or larger.
        let need = self.expected_recv[peer].len();
        let _ = need;
    }

    fn connect(&mut self) {
        let mtu_enum = self.cfg.mtu_enum;
        let armed = self.cfg.scenario == Scenario::ApmArmed;
        for i in 0..2 {
            let peer = 1 - i;
            // Receives needed at node i = messages the peer sends that consume a WQE.
            self.nodes[i].recv_needed = self.expected_recv[i].len();
            let mut a = QpAttrs {
                qp_state: QpState::Init,
                qp_access_flags: ACCESS_REMOTE_WRITE
                    | ACCESS_REMOTE_READ
                    | ACCESS_REMOTE_ATOMIC
                    | ACCESS_FLUSH_GLOBAL,
                ..QpAttrs::default()
            };
            let n = &mut self.nodes[i];
            let m =
                AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
            n.qp.modify(0, &a, m, &mut n.out).expect("to INIT");
            // A few receives before RTR: the initial ACK carries them as credits.
            let initial = (self.rng.below(3) as usize).min(n.recv_needed);
            for _ in 0..initial {
                Self::post_one_recv(n, &self.expected_recv[i]);
            }
            a.qp_state = QpState::Rtr;
            a.path = n.paths[0];
            a.path_mtu = mtu_enum;
            a.dest_qp_num = 0x11 + peer as u32;
            a.rq_psn = self.cfg.psn0[peer];
            a.max_dest_rd_atomic = 16;
            a.min_rnr_timer = 1 + self.rng.below(4) as u8;
            let uc = self.cfg.scenario == Scenario::UcLossy;
            let mut m = AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN;
            if !uc {
                m = m | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
            }
            n.qp.modify(0, &a, m, &mut n.out).expect("to RTR");
            if i == 0 && self.cfg.lose_initial_ack {
                n.out.tx.clear();
            }
            a.qp_state = QpState::Rts;
            a.timeout = self.cfg.timeout;
            a.retry_cnt = if armed || self.cfg.scenario == Scenario::PathDeathUnarmed {
                5
            } else {
                7
            };
            a.rnr_retry = 7;
            a.sq_psn = self.cfg.psn0[i];
            a.max_rd_atomic = self.cfg.max_rd_atomic;
            let mut m = AttrMask::STATE
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::SQ_PSN
                | AttrMask::MAX_QP_RD_ATOMIC;
            if uc {
                m = AttrMask::STATE | AttrMask::SQ_PSN;
            }
            if armed {
                a.alt_path = n.paths[1];
                a.path_mig_state = MigState::Rearm;
                m = m | AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE;
            }
            n.qp.modify(0, &a, m, &mut n.out).expect("to RTS");
        }
    }

    fn post_one_recv(n: &mut Node, exp: &[ExpectedRecv]) {
        let k = n.recv_posted;
        let need = exp.get(k).map(|e| e.len).unwrap_or(0);
        let off = n
            .recv_regions
            .last()
            .map(|(va, l)| va - BASE_RECV + *l as u64 + 8)
            .unwrap_or(0);
        let va = BASE_RECV + off;
        let len = need + (k as u32 % 3) * 7;
        let mut r = Rng::new(k as u64);
        let wr = RecvWr {
            wr_id: 1_000_000 + k as u64,
            sg: sg(va, len, KEY_RECV, &mut r),
        };
        if n.qp.rq_logic().config().srq {
            n.srq.push_back(wr);
            n.recv_regions.push((va, len));
            n.recv_posted += 1;
        } else if n.qp.post_recv(&wr, &mut n.out).is_ok() {
            n.recv_regions.push((va, len));
            n.recv_posted += 1;
        }
    }

    pub fn log(&mut self, s: impl FnOnce() -> String) {
        if self.cfg.trace {
            let line = format!("[{:>12} ns] {}", self.now, s());
            self.trace.push(line);
        }
    }

    fn drive_posts(&mut self) -> usize {
        let mut posted = 0;
        for i in 0..2 {
            // Post send WRs while the SQ has room.
            loop {
                let n = &mut self.nodes[i];
                if n.next_post >= n.plans.len() {
                    break;
                }
                let wr = n.plans[n.next_post].wr;
                match n.qp.post_send(&wr, &mut n.out) {
                    Ok(()) => {
                        n.plans[n.next_post].posted = true;
                        n.next_post += 1;
                        posted += 1;
                    }
                    Err(_) => break,
                }
            }
            // Receives: lazily (exercises credits and RNR).
            let lazy = self.cfg.recv_lazy;
            let n = &mut self.nodes[i];
            while n.recv_posted < n.recv_needed {
                if self.rng.below(1000) < lazy {
                    break;
                }
                let before = n.recv_posted;
                Self::post_one_recv(n, &self.expected_recv[i]);
                if n.recv_posted == before {
                    break;
                }
                posted += 1;
            }
        }
        posted
    }

    fn flush_tx(&mut self) {
        for i in 0..2 {
            let pkts = std::mem::take(&mut self.nodes[i].out.tx);
            let lane = match self.cfg.bottleneck {
                Some(b) if b.lanes > 1 => self.rng.below(b.lanes.min(4) as u64) as usize,
                _ => 0,
            };
            for p in pkts {
                if let Err(e) = self.credit_tx(i, &p.bytes) {
                    self.violation.get_or_insert(e);
                }
                let link = (p.path.port_num as usize).saturating_sub(1).min(1);
                if self.cfg.trace {
                    let d = describe(&p.bytes);
                    let line = format!("[{:>12} ns] n{} tx link{} {}", self.now, i, link, d);
                    self.trace.push(line);
                }
                if !self.alive(link) {
                    continue;
                }
                if self.rng.chance(self.cfg.loss) {
                    self.log(|| "  (lost)".to_string());
                    continue;
                }
                let copies = if self.rng.chance(self.cfg.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut at =
                        self.now + self.cfg.base_delay + self.rng.below(self.cfg.jitter + 1);
                    if let Some(b) = self.cfg.bottleneck {
                        let free = &mut self.queue_free[i][lane];
                        if *free > self.now + b.per_packet * b.limit {
                            self.log(|| "  (queue full)".to_string());
                            continue;
                        }
                        *free = (*free).max(self.now) + b.per_packet;
                        at = *free;
                        if !self.rng.chance(b.reorder) {
                            at += b.delay;
                        }
                    }
                    self.seq += 1;
                    self.flights.insert(
                        (at, self.seq),
                        InFlight {
                            to: 1 - i,
                            link,
                            bytes: p.bytes.clone(),
                        },
                    );
                }
            }
        }
    }

    fn progress_all(&mut self) {
        for _ in 0..64 {
            let mut sent = 0;
            for i in 0..2 {
                let now = self.now;
                let n = &mut self.nodes[i];
                let k = n.qp.progress(now, 64, &mut n.mem, &mut n.out);
                // A driver stops at a full budget once nothing is pending: nothing may be left.
                if k >= 64 && !n.qp.transmit_pending() {
                    let again = n.qp.progress(now, 64, &mut n.mem, &mut n.out);
                    assert_eq!(again, 0, "transmit_pending said nothing was left");
                }
                sent += k;
            }
            let posted = self.drive_posts();
            self.flush_tx();
            if sent == 0 && posted == 0 {
                break;
            }
        }
    }

    /// Runs until done or stuck. Returns Err(description) on an invariant violation.
    pub fn run(&mut self) -> Result<(), String> {
        self.drive_posts();
        self.progress_all();
        let limit_ns = self.cfg.time_limit;
        loop {
            self.steps += 1;
            let max_steps = if self.cfg.bottleneck.is_some() {
                20_000_000
            } else {
                400_000
            };
            if self.steps > max_steps {
                return Err("step limit".into());
            }
            self.maybe_kill_path();
            // Next event.
            let next_pkt = self.flights.keys().next().copied();
            let mut next_timer: Option<(u64, usize, usize)> = None;
            for i in 0..2 {
                for (w, t) in self.nodes[i].out.timers.iter().enumerate() {
                    if let Some(t) = t {
                        if next_timer.is_none_or(|(b, _, _)| *t < b) {
                            next_timer = Some((*t, i, w));
                        }
                    }
                }
            }
            let take_pkt = match (next_pkt, next_timer) {
                (None, None) => break,
                (Some((pt, _)), Some((tt, _, _))) => pt <= tt,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if take_pkt {
                let key = next_pkt.expect("pkt");
                let f = self.flights.remove(&key).expect("flight");
                self.now = self.now.max(key.0);
                if !self.alive(f.link) {
                    continue;
                }
                let to = f.to;
                let from = 1 - to;
                let pm = PathMatch {
                    port_num: f.link as u8 + 1,
                    sgid: gid(from, f.link),
                    dgid: gid(to, f.link),
                    ..Default::default()
                };
                match Headers::decode_with_payload(&f.bytes) {
                    Ok((h, payload)) => {
                        if self.cfg.trace {
                            let d = describe(&f.bytes);
                            let line =
                                format!("[{:>12} ns] n{} rx link{} {}", self.now, to, f.link, d);
                            self.trace.push(line);
                        }
                        self.credit_rx(to, &h);
                        let now = self.now;
                        let n = &mut self.nodes[to];
                        // The driver's SRQ: a WQE is taken only when a message needs one.
                        if n.qp.wants_srq_wqe(&h) {
                            if let Some(wr) = n.srq.pop_front() {
                                let _ = n.qp.post_recv(&wr, &mut n.out);
                            }
                        }
                        // Every other payload is handed in held, as the driver hands in one left
                        // in an skb's pages: the engine must treat both kinds alike.
                        let held = h.info().operation.payload_may_be_held();
                        let p = if held && h.bth.psn.value() % 2 == 1 {
                            n.mem.0.borrow_mut().held = payload.to_vec();
                            RxPayload::Held(payload.len())
                        } else {
                            RxPayload::Bytes(payload)
                        };
                        n.qp.receive(now, &h, p, &pm, &mut n.mem, &mut n.out);
                    }
                    Err(e) => return Err(format!("undecodable packet {e:?}")),
                }
            } else {
                let (t, i, w) = next_timer.expect("timer");
                self.now = self.now.max(t);
                self.nodes[i].out.timers[w] = None;
                let which = if w == 0 {
                    Timer::Retransmit
                } else {
                    Timer::Rnr
                };
                self.log(|| format!("n{i} timer {which:?}"));
                let now = self.now;
                let n = &mut self.nodes[i];
                n.qp.timer_expired(now, which, &mut n.out);
            }
            self.progress_all();
            self.maybe_sqd()?;
            if let Some(v) = self.violation.take() {
                return Err(v);
            }
            self.check_completions_strict()?;
            if self.done() {
                break;
            }
            if self.now > limit_ns {
                return Err("virtual time limit".into());
            }
        }
        self.final_checks()
    }

    /// The requester `i` received a response: fold its AETH into the model's LSN and end a
    /// credit wait if it acknowledges the awaited packet.
    fn credit_rx(&mut self, i: usize, h: &Headers) {
        if h.info().is_request {
            return;
        }
        let m = &mut self.credit[i];
        if let Some(a) = h.aeth {
            if let rvrdma_core::wire::Syndrome::Ack { credit } = a.syndrome {
                m.limit = m.limit.after_ack(a.msn, credit);
                if let Some(w) = m.waiting {
                    if h.bth.psn.is_after_or_eq(w) {
                        m.waiting = None;
                    }
                }
            }
        }
    }

    /// Node `i` transmitted `bytes`: check seed 003's rules for new request packets.
    fn credit_tx(&mut self, i: usize, bytes: &[u8]) -> Result<(), String> {
        let Ok((h, payload)) = Headers::decode_with_payload(bytes) else {
            return Err(format!("n{i} sent an undecodable packet"));
        };
        let info = h.info();
        if !info.is_request || self.cfg.scenario == Scenario::UcLossy {
            return Ok(());
        }
        let m = &mut self.credit[i];
        let Some(high) = m.high else { return Ok(()) };
        if h.bth.psn == high.prev()
            && h.bth.opcode == rvrdma_core::wire::Opcode::RcSendOnly
            && h.bth.ack_req
            && payload.is_empty()
        {
            // A credit probe: a duplicate of the last PSN used, which the responder only
            // re-acknowledges (see `SqLogic::transmit`). It must not be taken for a request.
            m.probes += 1;
            return Ok(());
        }
        if h.bth.psn.is_before(high) {
            // A retransmission: no credit check (seed 003), but it must repeat a packet of the
            // same message that first used this PSN.
            if let Some((wr, op)) = m.owner.get(&h.bth.psn.value()) {
                if *op != info.operation {
                    return Err(format!(
                        "n{i}: PSN {:#x} of WR #{wr} ({op:?}) reused by a {:?} packet",
                        h.bth.psn.value(),
                        info.operation
                    ));
                }
            }
            return Ok(());
        }
        if h.bth.psn != high {
            return Err(format!(
                "n{i}: new request PSN {:#x} skips {:#x}",
                h.bth.psn.value(),
                high.value()
            ));
        }
        if let Some(w) = m.waiting {
            return Err(format!(
                "n{i}: new packet PSN {:#x} sent while waiting for an ACK of {:#x} (no credit)",
                h.bth.psn.value(),
                w.value()
            ));
        }
        if i == 0 && m.cur_pkt == 0 && self.sqd_guard.is_some_and(|g| m.cur >= g) {
            return Err(format!("n0: WR #{} started while the QP is in SQD", m.cur));
        }
        let Some(&(needs_wqe, is_send, npsn)) = m.wrs.get(m.cur) else {
            return Err(format!("n{i}: more new request packets than WRs"));
        };
        let ssn = (m.cur as u32 + 1) & 0xFF_FFFF;
        let first = m.cur_pkt == 0;
        let is_read = info.operation == rvrdma_core::wire::Operation::RdmaReadRequest;
        let last = is_read || m.cur_pkt + 1 >= npsn;
        if first {
            if needs_wqe {
                if !m.limit.allows(ssn) {
                    m.uncredited_msgs += 1;
                    m.uncredited_wr = Some(m.cur);
                }
            } else {
                m.limit = m.limit.bump();
            }
        }
        if m.uncredited_wr == Some(m.cur) {
            if is_send && first {
                if !h.bth.ack_req {
                    return Err(format!(
                        "n{i}: Send SSN {ssn} beyond the LSN without AckReq"
                    ));
                }
                m.waiting = Some(h.bth.psn);
                m.uncredited_wr = None;
            } else if last {
                if !h.bth.ack_req {
                    return Err(format!(
                        "n{i}: WriteImm SSN {ssn} beyond the LSN: last packet without AckReq"
                    ));
                }
                m.waiting = Some(h.bth.psn);
                m.uncredited_wr = None;
            }
        }
        let adv = if is_read { npsn - m.cur_pkt } else { 1 };
        for k in 0..adv {
            m.owner
                .insert(h.bth.psn.add(k).value(), (m.cur, info.operation));
        }
        m.high = Some(h.bth.psn.add(adv));
        if last {
            m.cur += 1;
            m.cur_pkt = 0;
        } else {
            m.cur_pkt += 1;
        }
        Ok(())
    }

    /// Lossy runs with seed % 3 == 0 take node 0 through RTS -> SQD (notify) -> RTS halfway.
    fn maybe_sqd(&mut self) -> Result<(), String> {
        if self.cfg.scenario != Scenario::Lossy || !self.cfg.seed.is_multiple_of(3) || self.sqd_done
        {
            return Ok(());
        }
        let n = &mut self.nodes[0];
        if self.sqd_guard.is_none() {
            if n.out.send_cqes.len() >= n.plans.len() / 2 && n.qp.state() == QpState::Rts {
                let a = QpAttrs {
                    qp_state: QpState::Sqd,
                    en_sqd_async_notify: true,
                    ..QpAttrs::default()
                };
                n.qp.modify(
                    self.now,
                    &a,
                    AttrMask::STATE | AttrMask::EN_SQD_ASYNC_NOTIFY,
                    &mut n.out,
                )
                .map_err(|e| format!("to SQD: {e:?}"))?;
                let m = &self.credit[0];
                self.sqd_guard = Some(if m.cur_pkt == 0 { m.cur } else { m.cur + 1 });
                self.log(|| "n0 RTS -> SQD".to_string());
            }
        } else if n.out.has_event(AsyncEvent::SqDrained) {
            let a = QpAttrs {
                qp_state: QpState::Rts,
                ..QpAttrs::default()
            };
            n.qp.modify(self.now, &a, AttrMask::STATE, &mut n.out)
                .map_err(|e| format!("back to RTS: {e:?}"))?;
            self.sqd_guard = None;
            self.sqd_done = true;
            self.log(|| "n0 SQ drained, SQD -> RTS".to_string());
            self.progress_all();
        }
        Ok(())
    }

    /// Whether `link` carries packets now (see [`Config::flap`]).
    fn alive(&self, link: usize) -> bool {
        let up = match self.cfg.flap {
            Some((up, down)) if link == 0 => self.now % (up + down) < up,
            _ => true,
        };
        up && self.link_alive[link]
    }

    fn maybe_kill_path(&mut self) {
        // UC has no alternate path: a dead one would leave the lossy UC run nothing to carry.
        if self.killed_at.is_some()
            || matches!(self.cfg.scenario, Scenario::Lossy | Scenario::UcLossy)
        {
            return;
        }
        let progress = self.nodes[0].out.send_cqes.len();
        let want = self.nodes[0].plans.len() / 3;
        let armed_ok = self.cfg.scenario != Scenario::ApmArmed
            || (self.nodes[0].qp.mig_state() == MigState::Armed
                && self.nodes[1].qp.mig_state() == MigState::Armed);
        if progress >= want.max(1) && armed_ok {
            self.link_alive[0] = false;
            self.killed_at = Some(self.now);
            self.log(|| "primary path (link0) dies".to_string());
        }
    }

    fn done(&self) -> bool {
        (0..2).all(|i| {
            let n = &self.nodes[i];
            let sends_done = n.out.send_cqes.len() == n.plans.len();
            let recvs_done = if self.cfg.scenario == Scenario::PathDeathUnarmed {
                true
            } else if self.cfg.scenario == Scenario::UcLossy {
                self.flights.is_empty()
            } else {
                n.out.recv_cqes.len() >= n.recv_needed
            };
            sends_done && recvs_done
        })
    }

    fn check_completions_strict(&mut self) -> Result<(), String> {
        for i in 0..2 {
            let peer = 1 - i;
            // Send completions: in order, each WR exactly once.
            while self.nodes[i].send_checked < self.nodes[i].out.send_cqes.len() {
                let k = self.nodes[i].send_checked;
                let wc: Completion = self.nodes[i].out.send_cqes[k];
                if wc.wr_id != k as u64 {
                    return Err(format!(
                        "n{i}: send completion {k} has wr_id {} (out of order or duplicated)",
                        wc.wr_id
                    ));
                }
                let plan = self.nodes[i].plans[k].clone();
                match self.cfg.scenario {
                    Scenario::PathDeathUnarmed if wc.status != WcStatus::Success => {
                        let first_err = self.nodes[i].out.send_cqes[..k]
                            .iter()
                            .all(|c| c.status == WcStatus::Success);
                        let ok = if first_err {
                            wc.status == WcStatus::RetryExcErr
                        } else {
                            wc.status == WcStatus::WrFlushErr
                        };
                        if !ok {
                            return Err(format!(
                                "n{i}: WR {k} status {:?} after path death",
                                wc.status
                            ));
                        }
                    }
                    _ => {
                        if wc.status != WcStatus::Success {
                            return Err(format!(
                                "n{i}: WR {k} ({:?}) failed: {:?}",
                                plan.wr.opcode, wc.status
                            ));
                        }
                    }
                }
                if wc.status == WcStatus::Success {
                    let m = self.nodes[i].mem.0.borrow();
                    match plan.wr.opcode {
                        SendOpcode::RdmaRead => {
                            let got = m
                                .read(KEY_RDST, plan.check_va, plan.data.len() as u64)
                                .map_err(|e| format!("{e:?}"))?;
                            if got != plan.data {
                                return Err(format!("n{i}: RDMA Read WR {k} returned wrong bytes"));
                            }
                        }
                        SendOpcode::AtomicCmpAndSwp | SendOpcode::AtomicFetchAndAdd => {
                            let got = m
                                .read(KEY_RDST, plan.check_va, 8)
                                .map_err(|e| format!("{e:?}"))?;
                            let v = u64::from_ne_bytes(got.try_into().expect("8"));
                            if v != plan.atomic_orig {
                                return Err(format!(
                                    "n{i}: atomic WR {k} returned {v:#x}, expected {:#x}",
                                    plan.atomic_orig
                                ));
                            }
                        }
                        _ => {}
                    }
                    drop(m);
                    let lands =
                        plan.wr.opcode.is_write() || plan.wr.opcode == SendOpcode::AtomicWrite;
                    if lands && self.cfg.scenario != Scenario::UcLossy {
                        let pm = self.nodes[peer].mem.0.borrow();
                        let got = pm
                            .read(KEY_WTGT, plan.check_va, plan.data.len() as u64)
                            .map_err(|e| format!("{e:?}"))?;
                        if got != plan.data {
                            return Err(format!("n{i}: RDMA Write WR {k} did not land byte-exact"));
                        }
                    }
                }
                self.nodes[i].send_checked += 1;
            }
            // Receive completions: in order, byte-exact.
            while self.nodes[i].recv_checked < self.nodes[i].out.recv_cqes.len() {
                let k = self.nodes[i].recv_checked;
                let wc = self.nodes[i].out.recv_cqes[k];
                if wc.status != WcStatus::Success {
                    if self.cfg.scenario == Scenario::PathDeathUnarmed
                        && wc.status == WcStatus::WrFlushErr
                    {
                        self.nodes[i].recv_checked += 1;
                        continue;
                    }
                    return Err(format!("n{i}: receive {k} failed: {:?}", wc.status));
                }
                if wc.wr_id != 1_000_000 + k as u64 {
                    return Err(format!(
                        "n{i}: receive completion {k} has wr_id {}",
                        wc.wr_id
                    ));
                }
                let exp = if self.cfg.scenario == Scenario::UcLossy {
                    // UC drops a message on any gap in its PSNs and starts one on any first
                    // packet, so over a network that loses, reorders and duplicates packets a
                    // receive completes some message the peer sent, in any order, even twice.
                    let imm = if wc.flags & rvrdma_core::events::WC_WITH_IMM != 0 {
                        Some(wc.imm_or_rkey)
                    } else {
                        None
                    };
                    let (va, _) = self.nodes[i].recv_regions[k];
                    let m = self.nodes[i].mem.0.borrow();
                    let lands = |e: &ExpectedRecv| {
                        let (key, at) = match e.write_va {
                            Some(w) => (KEY_WTGT, w),
                            None => (KEY_RECV, va),
                        };
                        m.read(key, at, e.len as u64).is_ok_and(|g| g == e.data)
                    };
                    let found = self.expected_recv[i].iter().position(|e| {
                        e.opcode == wc.opcode && e.len == wc.byte_len && e.imm == imm && lands(e)
                    });
                    drop(m);
                    let Some(j) = found else {
                        return Err(format!(
                            "n{i}: UC receive {k} matches no message the peer sent"
                        ));
                    };
                    let seen = &mut self.uc_received[i];
                    seen.resize(self.expected_recv[i].len(), false);
                    seen[j] = true;
                    self.expected_recv[i][j].clone()
                } else {
                    let Some(exp) = self.expected_recv[i].get(k).cloned() else {
                        return Err(format!("n{i}: unexpected receive completion {k}"));
                    };
                    exp
                };
                if wc.opcode != exp.opcode || wc.byte_len != exp.len {
                    return Err(format!(
                        "n{i}: receive {k}: got {:?}/{} expected {:?}/{}",
                        wc.opcode, wc.byte_len, exp.opcode, exp.len
                    ));
                }
                let got_imm = if wc.flags & rvrdma_core::events::WC_WITH_IMM != 0 {
                    Some(wc.imm_or_rkey)
                } else {
                    None
                };
                if got_imm != exp.imm {
                    return Err(format!(
                        "n{i}: receive {k}: imm {got_imm:?} expected {:?}",
                        exp.imm
                    ));
                }
                if exp.opcode == WcOpcode::Recv {
                    let (va, _) = self.nodes[i].recv_regions[k];
                    let m = self.nodes[i].mem.0.borrow();
                    let got = m
                        .read(KEY_RECV, va, exp.len as u64)
                        .map_err(|e| format!("{e:?}"))?;
                    if got != exp.data {
                        return Err(format!("n{i}: receive {k}: payload differs"));
                    }
                }
                if let Some(wva) = exp.write_va {
                    // The Write's bytes are in place once its immediate completes the receive.
                    let m = self.nodes[i].mem.0.borrow();
                    let got = m
                        .read(KEY_WTGT, wva, exp.len as u64)
                        .map_err(|e| format!("{e:?}"))?;
                    if got != exp.data {
                        return Err(format!(
                            "n{i}: receive {k}: the RDMA Write with Immediate did not land \
                             byte-exact"
                        ));
                    }
                }
                self.nodes[i].recv_checked += 1;
            }
        }
        Ok(())
    }

    fn final_checks(&mut self) -> Result<(), String> {
        if !self.done() {
            return Err(format!(
                "stuck: n0 {}/{} sends {}/{} recvs, n1 {}/{} sends {}/{} recvs; states {:?}/{:?}",
                self.nodes[0].out.send_cqes.len(),
                self.nodes[0].plans.len(),
                self.nodes[0].out.recv_cqes.len(),
                self.nodes[0].recv_needed,
                self.nodes[1].out.send_cqes.len(),
                self.nodes[1].plans.len(),
                self.nodes[1].out.recv_cqes.len(),
                self.nodes[1].recv_needed,
                self.nodes[0].qp.state(),
                self.nodes[1].qp.state(),
            ));
        }
        match self.cfg.scenario {
            Scenario::Lossy | Scenario::ApmArmed => {
                for i in 0..2 {
                    // Atomics executed exactly once; FetchAdd counter exact.
                    let executed = self.nodes[i].mem.0.borrow().atomics_executed;
                    if executed != self.atomics_posted[i] {
                        return Err(format!(
                            "n{i}: {executed} atomics executed, {} posted",
                            self.atomics_posted[i]
                        ));
                    }
                    let (aw, fl) = {
                        let m = self.nodes[i].mem.0.borrow();
                        (m.atomic_writes_executed, m.flushes_executed)
                    };
                    if (aw, fl) != self.placed_posted[i] {
                        return Err(format!(
                            "n{i}: {aw} atomic writes and {fl} flushes executed, {:?} posted",
                            self.placed_posted[i]
                        ));
                    }
                    let v = self.atom_read(i, 0);
                    let want = self.fadd_init[i].wrapping_add(self.fadd_sum[i]);
                    if v != want {
                        return Err(format!("n{i}: FetchAdd counter {v:#x} expected {want:#x}"));
                    }
                    if self.nodes[i].qp.state() != QpState::Rts {
                        return Err(format!("n{i}: ended in {:?}", self.nodes[i].qp.state()));
                    }
                }
                if self.cfg.scenario == Scenario::ApmArmed && self.killed_at.is_some() {
                    for i in 0..2 {
                        if !self.nodes[i].out.has_event(AsyncEvent::PathMig) {
                            // A node with nothing left to send after the kill may see the
                            // migration only through the peer's MigReq=1 packets.
                            return Err(format!("n{i}: no PATH_MIG event after the primary died"));
                        }
                    }
                }
            }
            Scenario::UcLossy => {
                for i in 0..2 {
                    if self.nodes[i].qp.state() != QpState::Rts {
                        return Err(format!(
                            "n{i}: UC QP ended in {:?}",
                            self.nodes[i].qp.state()
                        ));
                    }
                    if self.nodes[i].mem.0.borrow().atomics_executed != 0 {
                        return Err(format!("n{i}: atomics on UC"));
                    }
                }
            }
            Scenario::PathDeathUnarmed => {
                let n = &self.nodes[0];
                let errs = n
                    .out
                    .send_cqes
                    .iter()
                    .filter(|c| c.status != WcStatus::Success)
                    .count();
                if self.killed_at.is_some() && errs > 0 && n.qp.state() != QpState::Error {
                    return Err(format!(
                        "n0: state {:?} after retry exhaustion",
                        n.qp.state()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A short human-readable description of a packet.
pub fn describe(bytes: &[u8]) -> String {
    match Headers::decode_with_payload(bytes) {
        Ok((h, p)) => {
            let mut s = format!(
                "{:?} psn={:#08x}{}{} len={}",
                h.bth.opcode,
                h.bth.psn.value(),
                if h.bth.ack_req { " A" } else { "" },
                if h.bth.mig_req { " M" } else { "" },
                p.len()
            );
            if let Some(a) = h.aeth {
                let _ = write!(s, " {:?} msn={}", a.syndrome, a.msn);
            }
            if let Some(r) = h.reth {
                let _ = write!(s, " reth(va={:#x} len={})", r.va, r.dma_len);
            }
            s
        }
        Err(e) => format!("undecodable {e:?}"),
    }
}
