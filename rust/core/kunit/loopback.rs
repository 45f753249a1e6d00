// SPDX-License-Identifier: GPL-2.0

//! KUnit suite: two protocol-core QPs, built into the kernel with `KVec` queue storage, move a
//! Send and an RDMA Write to each other over an in-memory wire (segmented at a 1024-byte path MTU).
//! It proves the engines run in the kernel build as on the host (overflow checks on).

use crate::rvcore::apm::{PathInfo, PathMatch};
use crate::rvcore::events::{
    AsyncEvent, Completion, CqFull, CqKind, Outputs, PayloadSource, Timer,
};
use crate::rvcore::memory::{AtomicOp, MemError, Memory, RxPayload};
use crate::rvcore::mw::BindMwParams;
use crate::rvcore::qp::{Qp, QpAttrs, QpCreate};
use crate::rvcore::qp_state::{AttrMask, QpState, QpType};
use crate::rvcore::wire::{pad_count, Headers, ICRC_LEN};
use crate::rvcore::wqe::{
    RecvSlot, RecvWr, RegMrParams, SendSlot, SendWr, SgList, Sge, UdDest, MAX_SGE,
};
use kernel::prelude::*;

/// The one memory region of a test node: `KEY` names it for local and remote access.
const KEY: u32 = 0x100;
/// Both send queues' first PSN: the third packet sent wraps to 0.
const FIRST_PSN: u32 = 0xff_fffe;
const BASE: u64 = 0x10_0000;
const LEN: usize = 8192;

/// A node's memory: one MR of `LEN` bytes at `BASE`.
struct TestMem(KVec<u8>);

impl TestMem {
    fn range(&self, key: u32, va: u64, len: usize) -> Result<core::ops::Range<usize>, MemError> {
        if key != KEY {
            return Err(MemError::BadKey);
        }
        let start = va.checked_sub(BASE).ok_or(MemError::OutOfBounds)? as usize;
        let end = start.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > self.0.len() {
            return Err(MemError::OutOfBounds);
        }
        Ok(start..end)
    }
}

impl Memory for TestMem {
    fn check_local(&mut self, sges: &[Sge], _access: u32) -> Result<(), MemError> {
        for s in sges {
            self.range(s.lkey, s.addr, s.length as usize)?;
        }
        Ok(())
    }

    fn scatter(&mut self, sges: &[Sge], offset: u32, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        let mut skip = offset as usize;
        let mut data = data;
        for s in sges {
            let len = s.length as usize;
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = (len - skip).min(data.len());
            let r = self.range(s.lkey, s.addr + skip as u64, n)?;
            self.0[r].copy_from_slice(&data[..n]);
            data = &data[n..];
            skip = 0;
        }
        if data.is_empty() {
            Ok(())
        } else {
            Err(MemError::OutOfBounds)
        }
    }

    fn check_remote(&mut self, rkey: u32, va: u64, len: u32, _access: u32) -> Result<(), MemError> {
        self.range(rkey, va, len as usize).map(|_| ())
    }

    fn remote_write(&mut self, rkey: u32, va: u64, data: RxPayload<'_>) -> Result<(), MemError> {
        let data = data.bytes().ok_or(MemError::OutOfBounds)?;
        let r = self.range(rkey, va, data.len())?;
        self.0[r].copy_from_slice(data);
        Ok(())
    }

    fn remote_atomic(&mut self, _rkey: u32, _va: u64, _op: AtomicOp) -> Result<u64, MemError> {
        Err(MemError::NoAccess)
    }

    fn remote_atomic_write(&mut self, _rkey: u32, _va: u64, _v: [u8; 8]) -> Result<(), MemError> {
        Err(MemError::NoAccess)
    }

    fn remote_flush(
        &mut self,
        _rkey: u32,
        _range: Option<(u64, u32)>,
        _access: u32,
    ) -> Result<(), MemError> {
        Err(MemError::NoAccess)
    }

    fn invalidate_remote(&mut self, _rkey: u32) -> Result<(), MemError> {
        Err(MemError::OpFailed)
    }

    fn local_invalidate(&mut self, _key: u32) -> Result<(), MemError> {
        Err(MemError::OpFailed)
    }

    fn fast_register(&mut self, _p: &RegMrParams) -> Result<(), MemError> {
        Err(MemError::OpFailed)
    }

    fn bind_mw(&mut self, _p: &BindMwParams) -> Result<(), MemError> {
        Err(MemError::OpFailed)
    }
}

/// Where a transmitted packet's payload is, copied out of the engine's borrow so the node
/// can gather it once the engine call returns (the kernel shell gathers into the skb instead).
#[derive(Clone, Copy)]
enum Pending {
    None,
    Gather(SgList, u32, u32),
    Remote(u32, u64, u32),
    Bytes8([u8; 8]),
}

/// What a node's engine asked for: packets, completions, events.
struct TestOut {
    tx: KVec<(Headers, Pending)>,
    cqes: KVec<(CqKind, Completion)>,
    events: usize,
}

impl TestMem {
    /// Encodes a packet: headers, payload gathered from this memory, pad, room for the ICRC.
    fn encode(&self, headers: &Headers, payload: Pending) -> Result<KVec<u8>> {
        let mut data = KVec::new();
        match payload {
            Pending::None => {}
            Pending::Gather(sg, offset, len) => {
                let (mut skip, mut left) = (offset as usize, len as usize);
                for s in sg.as_slice() {
                    let slen = s.length as usize;
                    if skip >= slen {
                        skip -= slen;
                        continue;
                    }
                    let n = (slen - skip).min(left);
                    let r = self
                        .range(s.lkey, s.addr + skip as u64, n)
                        .map_err(|_| EINVAL)?;
                    data.extend_from_slice(&self.0[r], GFP_KERNEL)?;
                    left -= n;
                    skip = 0;
                }
            }
            Pending::Remote(rkey, va, len) => {
                let r = self.range(rkey, va, len as usize).map_err(|_| EINVAL)?;
                data.extend_from_slice(&self.0[r], GFP_KERNEL)?;
            }
            Pending::Bytes8(b) => data.extend_from_slice(&b, GFP_KERNEL)?,
        }
        let mut h = *headers;
        h.bth.pad_count = pad_count(data.len());
        let total = h.encoded_len() + data.len() + h.bth.pad_count as usize + ICRC_LEN;
        let mut bytes = KVec::from_elem(0u8, total, GFP_KERNEL)?;
        let hl = h.encode(&mut bytes).map_err(|_| EINVAL)?;
        bytes[hl..hl + data.len()].copy_from_slice(&data);
        Ok(bytes)
    }
}

impl Outputs for TestOut {
    fn transmit(&mut self, _path: &PathInfo, headers: &Headers, payload: PayloadSource<'_>) {
        let p = match payload {
            PayloadSource::None => Pending::None,
            PayloadSource::Gather { sges, offset, len } => Pending::Gather(
                SgList::from_slice(sges).unwrap_or(SgList::EMPTY),
                offset,
                len,
            ),
            PayloadSource::Remote { rkey, va, len } => Pending::Remote(rkey, va, len),
            PayloadSource::Bytes8(b) => Pending::Bytes8(b),
        };
        let _ = self.tx.push((*headers, p), GFP_KERNEL);
    }

    fn complete(&mut self, cq: CqKind, wc: &Completion) -> Result<(), CqFull> {
        self.cqes.push((cq, *wc), GFP_KERNEL).map_err(|_| CqFull)
    }

    fn async_event(&mut self, _ev: AsyncEvent, _cq: Option<CqKind>) {
        self.events += 1;
    }

    fn set_timer(&mut self, _which: Timer, _deadline_ns: u64) {}

    fn cancel_timer(&mut self, _which: Timer) {}
}

type TestQp = Qp<KVec<SendSlot>, KVec<RecvSlot>, KVec<Sge>, KVec<UdDest>>;

struct Node {
    qp: TestQp,
    mem: TestMem,
    out: TestOut,
}

fn gid(node: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12] = 10;
    g[15] = node + 1;
    g
}

fn node(i: u8) -> Result<Node> {
    let qp = Qp::new(
        QpCreate {
            qp_type: QpType::Rc,
            qpn: 0x11 + u32::from(i),
            srq: false,
        },
        (
            KVec::from_elem(SendSlot::default(), 16, GFP_KERNEL)?,
            KVec::from_elem(Sge::default(), 16 * MAX_SGE, GFP_KERNEL)?,
            KVec::new(),
        ),
        (
            KVec::from_elem(RecvSlot::default(), 16, GFP_KERNEL)?,
            KVec::from_elem(Sge::default(), 16 * MAX_SGE, GFP_KERNEL)?,
        ),
    )
    .ok_or(EINVAL)?;
    let mem = TestMem(KVec::from_elem(0u8, LEN, GFP_KERNEL)?);
    let out = TestOut {
        tx: KVec::new(),
        cqes: KVec::new(),
        events: 0,
    };
    Ok(Node { qp, mem, out })
}

/// Brings node `i` of `n` to RTS, connected to the other node.
fn connect(n: &mut [Node; 2], i: usize) -> Result {
    let peer = 1 - i as u8;
    let mut path = PathInfo::EMPTY;
    path.port_num = 1;
    path.sgid = gid(i as u8);
    path.dgid = gid(peer);
    let mut a = QpAttrs {
        qp_state: QpState::Init,
        ..QpAttrs::default()
    };
    a.qp_access_flags = crate::rvcore::memory::ACCESS_REMOTE_WRITE;
    let q = &mut n[i];
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    q.qp.modify(0, &a, m, &mut q.out).map_err(|_| EINVAL)?;
    a.qp_state = QpState::Rtr;
    a.path = path;
    a.path_mtu = 3; // 1024 bytes
    a.dest_qp_num = 0x11 + u32::from(peer);
    a.rq_psn = FIRST_PSN;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    let m = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    q.qp.modify(0, &a, m, &mut q.out).map_err(|_| EINVAL)?;
    a.qp_state = QpState::Rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = FIRST_PSN;
    a.max_rd_atomic = 4;
    let m = AttrMask::STATE
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::SQ_PSN
        | AttrMask::MAX_QP_RD_ATOMIC;
    q.qp.modify(0, &a, m, &mut q.out).map_err(|_| EINVAL)
}

/// Runs both engines and delivers every packet until the wire is quiet; returns packets moved.
fn pump(n: &mut [Node; 2]) -> usize {
    let mut moved = 0;
    for _round in 0..1000 {
        let mut any = false;
        for q in n.iter_mut() {
            q.qp.progress(0, 64, &mut q.mem, &mut q.out);
        }
        for from in 0..2 {
            let to = 1 - from;
            let pkts = core::mem::take(&mut n[from].out.tx);
            for (h, p) in pkts.iter() {
                any = true;
                moved += 1;
                let Ok(bytes) = n[from].mem.encode(h, *p) else {
                    continue;
                };
                let pm = PathMatch {
                    port_num: 1,
                    sgid: gid(from as u8),
                    dgid: gid(to as u8),
                    ..Default::default()
                };
                if let Ok((h, payload)) = Headers::decode_with_payload(&bytes) {
                    let q = &mut n[to];
                    q.qp.receive(0, &h, payload.into(), &pm, &mut q.mem, &mut q.out);
                }
            }
        }
        if !any {
            break;
        }
    }
    moved
}

fn sg(addr: u64, len: u32) -> SgList {
    SgList::from_slice(&[Sge {
        addr,
        length: len,
        lkey: KEY,
    }])
    .unwrap_or(SgList::EMPTY)
}

#[kunit_tests(rvrdma_core_loopback)]
mod tests {
    use super::*;
    use crate::rvcore::events::WcStatus;
    use crate::rvcore::wqe::{SendFlags, SendOpcode};

    /// A 3000-byte Send (three packets) and a 2500-byte RDMA Write (three more) cross the
    /// in-memory wire byte-exact, the Send's PSNs wrapping past 0xffffff, and complete
    /// successfully on both sides.
    #[test]
    fn send_and_write_cross_in_kernel() -> Result {
        let mut n = [node(0)?, node(1)?];
        for (i, b) in n[0].mem.0.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(7);
        }
        connect(&mut n, 0)?;
        connect(&mut n, 1)?;
        let recv = RecvWr {
            wr_id: 77,
            sg: sg(BASE + 4096, 3000),
        };
        n[1].qp
            .post_recv(&recv, &mut n[1].out)
            .map_err(|_| EINVAL)?;
        pump(&mut n);

        let mut send = SendWr::new(1, SendOpcode::Send);
        send.flags = SendFlags(SendFlags::SIGNALED);
        send.sg = sg(BASE, 3000);
        n[0].qp
            .post_send(&send, &mut n[0].out)
            .map_err(|_| EINVAL)?;
        let mut write = SendWr::new(2, SendOpcode::RdmaWrite);
        write.flags = SendFlags(SendFlags::SIGNALED);
        write.sg = sg(BASE + 100, 2500);
        write.remote_addr = BASE + 100;
        write.rkey = KEY;
        n[0].qp
            .post_send(&write, &mut n[0].out)
            .map_err(|_| EINVAL)?;
        let moved = pump(&mut n);
        assert!(moved >= 6);
        // Six request packets from 0xfffffe: the next PSN is 4 at both ends.
        assert_eq!(n[0].qp.sq_logic().sq_psn(), 4);
        assert_eq!(n[1].qp.rq_logic().epsn(), 4);

        let mut sent = n[0]
            .out
            .cqes
            .iter()
            .filter(|c| c.0 == CqKind::Send)
            .map(|c| (c.1.wr_id, c.1.status));
        assert_eq!(sent.next(), Some((1, WcStatus::Success)));
        assert_eq!(sent.next(), Some((2, WcStatus::Success)));
        assert_eq!(sent.next(), None);
        let got = n[1]
            .out
            .cqes
            .iter()
            .find(|c| c.0 == CqKind::Recv)
            .map(|c| c.1);
        assert!(got
            .is_some_and(|c| c.wr_id == 77 && c.byte_len == 3000 && c.status == WcStatus::Success));
        assert!(n[1].mem.0[4096..7096] == n[0].mem.0[..3000]);
        assert!(n[1].mem.0[100..2600] == n[0].mem.0[100..2600]);
        assert_eq!(n[0].qp.state(), QpState::Rts);
        assert_eq!(n[1].qp.state(), QpState::Rts);
        Ok(())
    }
}
