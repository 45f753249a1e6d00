//! One simulated host: a QP, its memory and the "shell" side of the engine's traits.

use rvrdma_core::apm::PathInfo;
use rvrdma_core::events::{AsyncEvent, Completion, CqFull, CqKind, Outputs, PayloadSource, Timer};
use rvrdma_core::memory::ACCESS_REMOTE_READ;
use rvrdma_core::qp::Qp;
use rvrdma_core::wire::{pad_count, Headers, ICRC_LEN};
use rvrdma_core::wqe::{RecvSlot, SendSlot, Sge, UdDest, MAX_SGE};

use super::mem::SimMem;

pub type SimQp = Qp<Vec<SendSlot>, Vec<RecvSlot>, Vec<Sge>, Vec<UdDest>>;

/// Storage for a simulated queue of `depth` slots, each with room for `MAX_SGE` elements.
pub fn sim_queue<T: Clone>(slot: T, depth: usize) -> (Vec<T>, Vec<Sge>) {
    (vec![slot; depth], vec![Sge::default(); depth * MAX_SGE])
}

/// Storage for a simulated send queue of `depth` slots, each with room for `MAX_SGE` elements
/// and, when `datagram`, a destination.
pub fn sim_send_queue(depth: usize, datagram: bool) -> (Vec<SendSlot>, Vec<Sge>, Vec<UdDest>) {
    let (sq, sges) = sim_queue(SendSlot::default(), depth);
    let dests = vec![UdDest::EMPTY; if datagram { depth } else { 0 }];
    (sq, sges, dests)
}

/// A packet as transmitted: the path it left on and its bytes (headers, payload, pad, ICRC).
#[derive(Clone, Debug)]
pub struct TxPacket {
    pub path: PathInfo,
    pub bytes: Vec<u8>,
}

/// The simulated shell: collects what the engine asks for.
#[derive(Debug)]
pub struct SimOut {
    pub mem: SimMem,
    pub tx: Vec<TxPacket>,
    pub send_cqes: Vec<Completion>,
    pub recv_cqes: Vec<Completion>,
    pub events: Vec<(AsyncEvent, Option<CqKind>)>,
    pub timers: [Option<u64>; 2],
    /// CQ capacity (entries not yet "polled"); `usize::MAX` = unbounded.
    pub cq_cap: usize,
}

impl SimOut {
    pub fn new(mem: SimMem) -> SimOut {
        SimOut {
            mem,
            tx: Vec::new(),
            send_cqes: Vec::new(),
            recv_cqes: Vec::new(),
            events: Vec::new(),
            timers: [None, None],
            cq_cap: usize::MAX,
        }
    }

    pub fn has_event(&self, ev: AsyncEvent) -> bool {
        self.events.iter().any(|(e, _)| *e == ev)
    }

    /// How many times `ev` was raised.
    pub fn event_count(&self, ev: AsyncEvent) -> usize {
        self.events.iter().filter(|(e, _)| *e == ev).count()
    }
}

pub fn timer_index(t: Timer) -> usize {
    match t {
        Timer::Retransmit => 0,
        Timer::Rnr => 1,
    }
}

impl Outputs for SimOut {
    fn transmit(&mut self, path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>) {
        let data = {
            let m = self.mem.0.borrow();
            match payload {
                PayloadSource::None => Vec::new(),
                PayloadSource::Gather { sges, offset, len } => m
                    .gather(sges, offset, len)
                    .expect("gather from validated SGEs"),
                PayloadSource::Remote { rkey, va, len } => {
                    // Through a window's key too, as the shell's `read_remote`.
                    let (key, va) = m
                        .remote_target(rkey, va, len as u64, ACCESS_REMOTE_READ)
                        .expect("validated remote read");
                    m.read(key, va, len as u64).expect("validated remote read")
                }
                PayloadSource::Bytes8(b) => b.to_vec(),
            }
        };
        let mut h = *headers;
        h.bth.pad_count = pad_count(data.len());
        let hl = h.encoded_len();
        let mut bytes = vec![0u8; hl];
        h.encode(&mut bytes)
            .expect("engine produced consistent headers");
        bytes.extend_from_slice(&data);
        bytes.extend(std::iter::repeat_n(
            0u8,
            h.bth.pad_count as usize + ICRC_LEN,
        ));
        self.tx.push(TxPacket { path: *path, bytes });
    }

    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull> {
        let q = match cq {
            CqKind::Send => &mut self.send_cqes,
            CqKind::Recv => &mut self.recv_cqes,
        };
        if q.len() >= self.cq_cap {
            return Err(CqFull);
        }
        q.push(*wc);
        Ok(())
    }

    fn async_event(&mut self, ev: AsyncEvent, cq: Option<CqKind>) {
        self.events.push((ev, cq));
    }

    fn set_timer(&mut self, which: Timer, deadline_ns: u64) {
        self.timers[timer_index(which)] = Some(deadline_ns);
    }

    fn cancel_timer(&mut self, which: Timer) {
        self.timers[timer_index(which)] = None;
    }
}
