#!/usr/bin/python3
"""IBA 1.5 ATOMIC WRITE from user space, with stock pyverbs (rdma-core's extended QP API,
ibv_wr_atomic_write): device A writes 8 bytes atomically into device B's memory.

For the pair A -> B it checks, on fresh RC QP pairs:
  lands      several ATOMIC WRITEs at 8-aligned addresses of B's MR each complete with
             IBV_WC_ATOMIC_WRITE / IBV_WC_SUCCESS, and afterwards B's whole MR is compared with
             a model: exactly those 8-byte words hold the values written, every other byte kept
             its random fill (a second write to the same word replaces it);
  misaligned an address that is not a multiple of 8 gives IBV_WC_REM_INV_REQ_ERR, memory unchanged;
  no right   an MR without remote write gives IBV_WC_REM_ACCESS_ERR, memory unchanged;
  caps       (with --caps) the device advertises IB_UVERBS_DEVICE_ATOMIC_WRITE and
             IB_UVERBS_DEVICE_FLUSH_GLOBAL, not FLUSH_PERSISTENT, and lets an MR be registered
             with IB_ACCESS_FLUSH_GLOBAL but not IB_ACCESS_FLUSH_PERSISTENT.

Prints one "ok DESC" / "not ok DESC: WHY" line per test point (see run_points in lib.sh).
usage: atomic_write.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B [--caps DEV]"""
import os
import random
import sys

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QPCap, QPEx, QPInitAttrEx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import ACCESS, Dev, Qp, point  # noqa: E402

# ib_user_verbs.h (rdma-core 44's verbs.h names neither the flush bits nor these device bits).
DEVICE_FLUSH_GLOBAL = 1 << 38
DEVICE_FLUSH_PERSISTENT = 1 << 39
DEVICE_ATOMIC_WRITE = 1 << 40
ACCESS_FLUSH_GLOBAL = 1 << 8
ACCESS_FLUSH_PERSISTENT = 1 << 9
MR_SIZE = 65536



class QpEx(Qp):
    """An RC QP created through the extended API with ATOMIC WRITE among its send ops."""

    def __init__(self, dev, depth=16):
        self.dev = dev
        self.qp_type = e.IBV_QPT_RC
        self.cq = CQ(dev.ctx, 64)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, pd=dev.pd,
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            send_ops_flags=e.IBV_QP_EX_WITH_ATOMIC_WRITE |
                            e.IBV_QP_EX_WITH_RDMA_WRITE)
        self.qp = QPEx(dev.ctx, attr)

    def atomic_write(self, wr_id, rkey, addr, value):
        self.qp.wr_start()
        self.qp.wr_id = wr_id
        self.qp.wr_flags = e.IBV_SEND_SIGNALED
        self.qp.wr_atomic_write(rkey, addr, value)
        self.qp.wr_complete()


def pair(a, b, b_access=ACCESS):
    qa, qb = QpEx(a), Qp(b)
    qa.connect(qb)
    qb.connect(qa, access=b_access)
    return qa, qb


def wc_str(wc):
    if wc is None:
        return "no completion"
    return "status %d opcode %d wr_id %d" % (wc.status, wc.opcode, wc.wr_id)


def lands(a, b, rng):
    """Several ATOMIC WRITEs; then B's whole MR against the model."""
    fill = bytes(rng.getrandbits(8) for _ in range(MR_SIZE))
    b.mr.write(fill, MR_SIZE)
    model = bytearray(fill)
    qa, qb = pair(a, b)
    words = rng.sample(range(MR_SIZE // 8), 6)
    words.append(words[0])  # the same word again: the last value stays
    bad = []
    for i, w in enumerate(words):
        value = bytes(rng.getrandbits(8) for _ in range(8))
        qa.atomic_write(100 + i, b.mr.rkey, b.mr.buf + 8 * w, value)
        wc = qa.poll()
        if wc is None or wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_ATOMIC_WRITE \
                or wc.wr_id != 100 + i:
            bad.append("write %d to word %d: %s" % (i, w, wc_str(wc)))
            break
        model[8 * w:8 * w + 8] = value
    got = b.mr.read(MR_SIZE, 0)
    if not bad and got != bytes(model):
        first = next(i for i in range(MR_SIZE) if got[i] != model[i])
        bad.append("B's MR differs from the model at byte %d: %#x, want %#x"
                   % (first, got[first], model[first]))
    point(not bad, "%d ATOMIC WRITEs complete (IBV_WC_ATOMIC_WRITE) and land exactly their 8 bytes"
          % len(words), "; ".join(bad))
    qa.close()
    qb.close()


def refused(a, b, rng, desc, status, mr_access=None, offset=8):
    """One ATOMIC WRITE that B must refuse with `status`, leaving its memory unchanged."""
    mr = b.mr if mr_access is None else MR(b.pd, MR_SIZE, mr_access)
    fill = bytes(rng.getrandbits(8) for _ in range(MR_SIZE))
    mr.write(fill, MR_SIZE)
    qa, qb = pair(a, b)
    qa.atomic_write(7, mr.rkey, mr.buf + offset, b"\x11" * 8)
    wc = qa.poll()
    got = mr.read(MR_SIZE, 0)
    why = []
    if wc is None or wc.status != status:
        why.append("%s, want status %d" % (wc_str(wc), status))
    if got != fill:
        why.append("memory changed")
    point(not why, desc, "; ".join(why))
    qa.close()
    qb.close()
    if mr is not b.mr:
        mr.close()


def caps(dev):
    d = Dev(dev, 0)
    flags = d.ctx.query_device_ex().device_cap_flags_ex
    want = DEVICE_ATOMIC_WRITE | DEVICE_FLUSH_GLOBAL
    point(flags & want == want and not flags & DEVICE_FLUSH_PERSISTENT,
          "%s advertises ATOMIC_WRITE and FLUSH_GLOBAL, not FLUSH_PERSISTENT" % dev,
          "device_cap_flags_ex %#x" % flags)
    try:
        MR(d.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
           ACCESS_FLUSH_GLOBAL).close()
        point(True, "%s registers an MR with IB_ACCESS_FLUSH_GLOBAL" % dev)
    except PyverbsError as x:
        point(False, "%s registers an MR with IB_ACCESS_FLUSH_GLOBAL" % dev, str(x))
    try:
        MR(d.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | ACCESS_FLUSH_PERSISTENT).close()
        point(False, "%s refuses an MR with IB_ACCESS_FLUSH_PERSISTENT" % dev, "registered")
    except PyverbsRDMAError as x:
        point(True, "%s refuses an MR with IB_ACCESS_FLUSH_PERSISTENT (%s)" % (dev, x))


def main():
    args = sys.argv[1:]
    if "--caps" in args:
        i = args.index("--caps")
        caps(args[i + 1])
        del args[i:i + 2]
    rng = random.Random(int(os.environ.get("SEED", "57")))
    a = Dev(args[0], int(args[1]), mr_size=MR_SIZE)
    b = Dev(args[2], int(args[3]), mr_size=MR_SIZE)
    lands(a, b, rng)
    refused(a, b, rng, "misaligned address: IBV_WC_REM_INV_REQ_ERR, memory unchanged",
            e.IBV_WC_REM_INV_REQ_ERR, offset=12)
    refused(a, b, rng, "MR without remote write: IBV_WC_REM_ACCESS_ERR, memory unchanged",
            e.IBV_WC_REM_ACCESS_ERR, mr_access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)


main()
