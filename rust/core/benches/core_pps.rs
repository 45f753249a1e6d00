//! Host benchmark of the protocol core alone: messages and packets per second through
//! post -> requester -> header encoding -> header decoding -> responder -> ACK -> completer, for
//! two QPs back to back in one thread. The shell here is lean (packet buffers and memory
//! allocated once; payload copied as the kernel copies it, no ICRC, no locks), so the figures
//! are the core's per-packet cost plus one copy per byte. It prints figures, to compare a change
//! to the core before and after without a guest (under `cargo test --all-targets` it only runs
//! each line briefly and checks the data landed):
//! `cargo bench --bench core_pps` (`CORE_BENCH_SECS` sets the time per line, default 1;
//! `CORE_BENCH_ONLY=write` runs the lines whose name starts so).
#![allow(unreachable_pub, missing_docs, dead_code)]

#[path = "../tests/sim"]
mod sim {
    pub mod mem;
    pub mod node;
    pub mod rules {
        pub mod fixtures;
    }
}

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rvrdma_core::apm::{PathInfo, PathMatch};
use rvrdma_core::events::{
    AsyncEvent, Completion, CqFull, CqKind, Outputs, PayloadSource, Timer, WcStatus,
};
use rvrdma_core::memory::{AtomicOp, MemError, Memory, RxPayload};
use rvrdma_core::mw::BindMwParams;
use rvrdma_core::wire::{pad_count, Headers, ICRC_LEN};
use rvrdma_core::wqe::{RecvWr, RegMrParams, SendOpcode, SgList, Sge};
use sim::rules::fixtures::*;

/// WRs node 0 keeps posted (the SQ holds 16).
const IN_FLIGHT: u64 = 8;
const MR_LEN: usize = 1 << 16;

/// Flat memory: the fixtures' SRC, DST and RMT MRs, 64 KiB each, bounds-checked.
struct LeanMem {
    mrs: [(u32, u64, Vec<u8>); 3],
}

impl LeanMem {
    fn new() -> Rc<RefCell<LeanMem>> {
        Rc::new(RefCell::new(LeanMem {
            mrs: [
                (SRC, SRC_VA, vec![0x5A; MR_LEN]),
                (DST, DST_VA, vec![0; MR_LEN]),
                (RMT, RMT_VA, vec![0xC3; MR_LEN]),
            ],
        }))
    }

    fn range(&mut self, key: u32, va: u64, len: usize) -> Result<&mut [u8], MemError> {
        let (_, base, bytes) = self
            .mrs
            .iter_mut()
            .find(|m| m.0 == key)
            .ok_or(MemError::BadKey)?;
        let off = va.checked_sub(*base).ok_or(MemError::OutOfBounds)? as usize;
        bytes
            .get_mut(off..off.checked_add(len).ok_or(MemError::OutOfBounds)?)
            .ok_or(MemError::OutOfBounds)
    }

    /// Appends `len` bytes from `offset` into the gather list `sges` to `out`.
    fn gather(&mut self, sges: &[Sge], mut offset: u32, mut len: u32, out: &mut Vec<u8>) {
        for s in sges {
            if len == 0 {
                break;
            }
            if offset >= s.length {
                offset -= s.length;
                continue;
            }
            let n = (s.length - offset).min(len);
            let r = self
                .range(s.lkey, s.addr + u64::from(offset), n as usize)
                .expect("validated gather");
            out.extend_from_slice(r);
            len -= n;
            offset = 0;
        }
    }
}

struct Shared(Rc<RefCell<LeanMem>>);

impl Memory for Shared {
    fn check_local(&mut self, sges: &[Sge], _access: u32) -> Result<(), MemError> {
        let mut m = self.0.borrow_mut();
        for s in sges {
            m.range(s.lkey, s.addr, s.length as usize)?;
        }
        Ok(())
    }

    fn scatter(
        &mut self,
        sges: &[Sge],
        mut offset: u32,
        data: RxPayload<'_>,
    ) -> Result<(), MemError> {
        let mut data = data.bytes().ok_or(MemError::OutOfBounds)?;
        let mut m = self.0.borrow_mut();
        for s in sges {
            if data.is_empty() {
                break;
            }
            if offset >= s.length {
                offset -= s.length;
                continue;
            }
            let n = ((s.length - offset) as usize).min(data.len());
            m.range(s.lkey, s.addr + u64::from(offset), n)?
                .copy_from_slice(&data[..n]);
            data = &data[n..];
            offset = 0;
        }
        Ok(())
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, _access: u32) -> Result<(), MemError> {
        self.0
            .borrow_mut()
            .range(rkey, va, len as usize)
            .map(|_| ())
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        self.0
            .borrow_mut()
            .range(rkey, va, data.len())?
            .copy_from_slice(data);
        Ok(())
    }

    fn remote_atomic(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, MemError> {
        Err(MemError::NoAccess)
    }

    fn remote_atomic_write(&mut self, _: u32, _: u64, _: [u8; 8]) -> Result<(), MemError> {
        Err(MemError::NoAccess)
    }

    fn remote_flush(&mut self, _: u32, _: Option<(u64, u32)>, _: u32) -> Result<(), MemError> {
        Err(MemError::NoAccess)
    }

    fn invalidate_remote(&mut self, _: u32) -> Result<(), MemError> {
        Err(MemError::BadKey)
    }

    fn local_invalidate(&mut self, _: u32) -> Result<(), MemError> {
        Err(MemError::BadKey)
    }

    fn fast_register(&mut self, _: &RegMrParams) -> Result<(), MemError> {
        Err(MemError::OpFailed)
    }

    fn bind_mw(&mut self, _: &BindMwParams) -> Result<(), MemError> {
        Err(MemError::OpFailed)
    }
}

/// Packets in flight from one node: buffers reused, never freed.
struct LeanOut {
    mem: Rc<RefCell<LeanMem>>,
    bufs: Vec<Vec<u8>>,
    used: usize,
    sends_done: u64,
}

impl LeanOut {
    fn new(mem: Rc<RefCell<LeanMem>>) -> LeanOut {
        LeanOut {
            mem,
            bufs: Vec::new(),
            used: 0,
            sends_done: 0,
        }
    }
}

impl Outputs for LeanOut {
    fn transmit(&mut self, _path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>) {
        if self.used == self.bufs.len() {
            self.bufs.push(Vec::with_capacity(64 + 4096 + 8));
        }
        let buf = &mut self.bufs[self.used];
        self.used += 1;
        let mut h = *headers;
        let plen = match payload {
            PayloadSource::Gather { len, .. } | PayloadSource::Remote { len, .. } => len,
            PayloadSource::Bytes8(_) => 8,
            PayloadSource::None => 0,
        };
        h.bth.pad_count = pad_count(plen as usize);
        buf.resize(h.encoded_len(), 0);
        h.encode(buf).expect("consistent headers");
        let mut m = self.mem.borrow_mut();
        match payload {
            PayloadSource::Gather { sges, offset, len } => m.gather(sges, offset, len, buf),
            PayloadSource::Remote { rkey, va, len } => {
                let r = m.range(rkey, va, len as usize).expect("validated read");
                buf.extend_from_slice(r);
            }
            PayloadSource::Bytes8(b) => buf.extend_from_slice(&b),
            PayloadSource::None => {}
        }
        buf.resize(buf.len() + h.bth.pad_count as usize + ICRC_LEN, 0);
    }

    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull> {
        assert_eq!(wc.status, WcStatus::Success);
        if cq == CqKind::Send {
            self.sends_done += 1;
        }
        Ok(())
    }

    fn async_event(&mut self, ev: AsyncEvent, _: Option<CqKind>) {
        panic!("unexpected async event {ev:?}");
    }

    fn set_timer(&mut self, _: Timer, _: u64) {}

    fn cancel_timer(&mut self, _: Timer) {}
}

/// Panics unless the last message's bytes landed: the figures count only working transfers.
fn check_landed(op: SendOpcode, len: u32, mems: &[Rc<RefCell<LeanMem>>; 2]) {
    let (node, expect) = match op {
        SendOpcode::RdmaRead => (0, 0xC3),
        _ => (1, 0x5A),
    };
    let key = if op == SendOpcode::RdmaWrite {
        RMT
    } else {
        DST
    };
    let va = if key == RMT { RMT_VA } else { DST_VA };
    let mut m = mems[node].borrow_mut();
    let bytes = m.range(key, va, len as usize).expect("in bounds");
    assert!(
        bytes.iter().all(|&b| b == expect),
        "{op:?} of {len} B did not land"
    );
}

/// Runs `op` messages of `len` bytes for about `secs`; returns (messages, packets, elapsed).
fn run(op: SendOpcode, len: u32, mtu: u8, secs: f64) -> (u64, u64, Duration) {
    let mut d = Duo::running_with(Opts {
        path_mtu: mtu,
        ..Opts::default()
    });
    let mems = [LeanMem::new(), LeanMem::new()];
    let mut outs = [LeanOut::new(mems[0].clone()), LeanOut::new(mems[1].clone())];
    let mut shared = [Shared(mems[0].clone()), Shared(mems[1].clone())];
    let recv = RecvWr {
        wr_id: 0,
        sg: SgList::from_slice(&[Sge {
            addr: DST_VA,
            length: len,
            lkey: DST,
        }])
        .expect("sg"),
    };
    let (mut posted, mut packets) = (0u64, 0u64);
    let limit = Duration::from_secs_f64(secs);
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed();
        let done = outs[0].sends_done;
        if elapsed >= limit && posted == done {
            check_landed(op, len, &mems);
            return (done, packets, elapsed);
        }
        while elapsed < limit && posted - done < IN_FLIGHT {
            if op == SendOpcode::Send {
                d.e[1].qp.post_recv(&recv, &mut outs[1]).expect("recv");
            }
            let mut wr = send_wr(posted, op, len);
            if op == SendOpcode::RdmaRead {
                wr.sg = recv.sg;
                wr.remote_addr = RMT_VA;
                wr.rkey = RMT;
            }
            d.e[0].qp.post_send(&wr, &mut outs[0]).expect("post");
            posted += 1;
        }
        for from in 0..2 {
            d.e[from]
                .qp
                .progress(0, 64, &mut shared[from], &mut outs[from]);
            let to = 1 - from;
            let pm = PathMatch {
                port_num: 1,
                sgid: gid(from, 0),
                dgid: gid(to, 0),
                ..Default::default()
            };
            let n = outs[from].used;
            packets += n as u64;
            for i in 0..n {
                let bytes = std::mem::take(&mut outs[from].bufs[i]);
                let (h, payload) = Headers::decode_with_payload(&bytes).expect("decodable");
                let (q, s, o) = (&mut d.e[to].qp, &mut shared[to], &mut outs[to]);
                q.receive(0, &h, payload.into(), &pm, s, o);
                outs[from].bufs[i] = bytes;
            }
            // What the receiver answered is in its own buffers: it goes out on its turn.
            outs[from].used = 0;
        }
    }
}

fn main() {
    // `cargo test --all-targets` runs this without `--bench`: then each line runs briefly, as a
    // check that every operation still moves (and lands) data through the lean shell.
    let measuring = std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("CORE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if measuring { 1.0 } else { 0.01 });
    println!(
        "{:<22} {:>12} {:>12} {:>10}",
        "operation", "messages/s", "packets/s", "MB/s"
    );
    for (name, op, len, mtu) in [
        ("send 64 B", SendOpcode::Send, 64, 5),
        ("send 4 KiB", SendOpcode::Send, 4096, 5),
        ("send 64 KiB", SendOpcode::Send, 65536, 5),
        ("write 64 KiB", SendOpcode::RdmaWrite, 65536, 5),
        ("read 64 KiB", SendOpcode::RdmaRead, 65536, 5),
        ("write 64 KiB, MTU 1024", SendOpcode::RdmaWrite, 65536, 3),
    ] {
        if std::env::var("CORE_BENCH_ONLY").is_ok_and(|o| !name.starts_with(o.as_str())) {
            continue;
        }
        let (msgs, pkts, t) = run(op, len, mtu, secs);
        assert!(msgs > 0, "{name}: no message completed");
        let s = t.as_secs_f64();
        println!(
            "{:<22} {:>12.0} {:>12.0} {:>10.1}",
            name,
            msgs as f64 / s,
            pkts as f64 / s,
            msgs as f64 * f64::from(len) / s / 1e6
        );
    }
}
