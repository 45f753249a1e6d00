#!/usr/bin/python3
"""Memory windows with stock pyverbs: device B binds a window over part of an MR (an MR with
local write and MW bind only, no remote rights of its own), device A reaches B's memory through
the window's R_Key.

For the pair A -> B it checks, each on fresh RC QP pairs:
  type 2     B binds a type 2 window (IBV_WR_BIND_MW: completion IBV_WC_BIND_MW) over 8 KiB of
             its 64 KiB MR; A's RDMA Write inside the window lands (B's whole MR compared with a
             model) and A's RDMA Read inside it returns the model's bytes;
  rights     a Write through a read-only window gives IBV_WC_REM_ACCESS_ERR, memory unchanged;
  invalidate A's Send with Invalidate of the window's R_Key arrives flagged as invalidating
             (IBV_WC_WITH_INV, or the kernel's bit that rxe-ABI providers pass on) with that
             key; afterwards a Write inside the window gives IBV_WC_REM_ACCESS_ERR and B's
             memory is unchanged;
  type 1     B binds a type 1 window with ibv_bind_mw; A reads inside it (bytes compared); B
             rebinds it with length 0 and A's next Read gives IBV_WC_REM_ACCESS_ERR;
  bind error binding to an MR without IBV_ACCESS_MW_BIND completes with IBV_WC_MW_BIND_ERR
             and B's QP enters the Error state;
  outside    (with --owner-checks) a Write that starts inside the window and ends past it gives
             IBV_WC_REM_ACCESS_ERR and B's memory is unchanged (rdma_rxe checks only the MR's
             range, not the window's: without --owner-checks the outcome is a diagnostic);
  one QP     (with --owner-checks) a type 2 window is bound to the QP that bound it (type 2B):
             a Write through it on another QP pair gives IBV_WC_REM_ACCESS_ERR, memory
             unchanged, while the same Write on the binding QP's pair lands;
  dereg      (with --owner-checks) B's MR with a bound window cannot be deregistered (EBUSY);
             after the window is deallocated it can;
  caps       (with --owner-checks) B advertises IBV_DEVICE_MEM_WINDOW, MEM_WINDOW_TYPE_2B and
             max_mw > 0.

Prints one "ok DESC" / "not ok DESC: WHY" line per test point (see run_points in lib.sh).
usage: memory_windows.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B [--owner-checks]"""
import errno
import os
import random
import sys

import pyverbs.enums as e
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import Dev, Qp  # noqa: E402

MR_SIZE = 65536
WIN_OFF = 4096
WIN_LEN = 8192
RW = e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE
# "Invalidated" in a receive completion: libibverbs' IBV_WC_WITH_INV (1 << 3), or the kernel's
# IB_WC_WITH_INVALIDATE (1 << 2), which providers of the rxe user ABI hand over unchanged.
WC_INV_ANY = e.IBV_WC_WITH_INV | (1 << 2)

points = 0


def point(ok, desc, why=""):
    global points
    points += 1
    print(("ok " + desc) if ok else "not ok %s: %s" % (desc, why))


def wc_str(wc):
    if wc is None:
        return "no completion"
    return "status %d opcode %d wr_id %d" % (wc.status, wc.opcode, wc.wr_id)


class Owner:
    """B's side: an MR the windows are bound to (local write and MW bind only), filled with
    random bytes, and the model of what it must hold."""

    def __init__(self, b, rng, access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND):
        self.b = b
        self.mr = MR(b.pd, MR_SIZE, access)
        self.model = bytearray(rng.getrandbits(8) for _ in range(MR_SIZE))
        self.mr.write(bytes(self.model), MR_SIZE)

    def unchanged(self):
        """Why B's MR differs from the model, or None."""
        got = self.mr.read(MR_SIZE, 0)
        if got == bytes(self.model):
            return None
        first = next(i for i in range(MR_SIZE) if got[i] != self.model[i])
        return "B's MR differs from the model at byte %d: %#x, want %#x" % (
            first, got[first], self.model[first])

    def bind_type2(self, qb, mw, access=RW, wr_id=1):
        """Binds type 2 window `mw` over the window range with a BIND_MW work request on `qb`;
        returns (completion, R_Key the window now has)."""
        wr = SendWR(opcode=e.IBV_WR_BIND_MW, wr_id=wr_id, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(mw, MWBindInfo(self.mr, self.mr.buf + WIN_OFF, WIN_LEN, access))
        qb.qp.post_send(wr)
        return qb.poll(), wr.rkey


def pair(a, b):
    qa, qb = Qp(a), Qp(b)
    qa.connect(qb)
    qb.connect(qa)
    return qa, qb


def rdma(qa, op, rkey, addr, length, wr_id):
    """One RDMA Write (from A's MR start) or Read (into it) of `length` bytes; its completion."""
    wr = SendWR(opcode=op, wr_id=wr_id, num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                sg=[SGE(qa.dev.mr.buf, length, qa.dev.mr.lkey)])
    wr.set_wr_rdma(rkey, addr)
    qa.qp.post_send(wr)
    return qa.poll()


def close(*objs):
    """Closes `objs` in order: the window before the QPs (rdma_rxe's bound type 2 window holds
    its QP, whose destroy would otherwise wait for it in vain)."""
    for o in objs:
        o.close()


def type2(a, b, rng):
    o = Owner(b, rng)
    qa, qb = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    why = []
    wc, rkey = o.bind_type2(qb, mw)
    if wc is None or wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_BIND_MW:
        why.append("bind: %s" % wc_str(wc))
    else:
        data = bytes(rng.getrandbits(8) for _ in range(512))
        a.mr.write(data, len(data))
        va = o.mr.buf + WIN_OFF + 100
        wc = rdma(qa, e.IBV_WR_RDMA_WRITE, rkey, va, len(data), 2)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            why.append("write: %s" % wc_str(wc))
        o.model[WIN_OFF + 100:WIN_OFF + 100 + len(data)] = data
        bad = o.unchanged()
        if bad:
            why.append("after the write: " + bad)
        # Read the window's last 1 KiB back (partly what was written, partly the fill).
        start = WIN_OFF + WIN_LEN - 1024
        wc = rdma(qa, e.IBV_WR_RDMA_READ, rkey, o.mr.buf + start, 1024, 3)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            why.append("read: %s" % wc_str(wc))
        elif a.mr.read(1024, 0) != bytes(o.model[start:start + 1024]):
            why.append("the bytes read differ from B's MR")
    point(not why, "type 2 window: bind completes as IBV_WC_BIND_MW; a Write inside it lands "
          "exactly its bytes, a Read inside it returns B's bytes", "; ".join(why))
    close(mw, qa, qb, o.mr)


def refused_access(a, b, rng, desc, access, offset, length, diag_only=False):
    """A Write through a bound type 2 window that B must refuse; B's memory unchanged. With
    `diag_only` the outcome is printed as a diagnostic, not a test point."""
    o = Owner(b, rng)
    qa, qb = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    why = []
    wc, rkey = o.bind_type2(qb, mw, access)
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        why.append("bind: %s" % wc_str(wc))
    else:
        a.mr.write(b"\x5a" * length, length)
        wc = rdma(qa, e.IBV_WR_RDMA_WRITE, rkey, o.mr.buf + offset, length, 2)
        if wc is None or wc.status != e.IBV_WC_REM_ACCESS_ERR:
            why.append("%s, want IBV_WC_REM_ACCESS_ERR" % wc_str(wc))
        bad = o.unchanged()
        if bad:
            why.append(bad)
    if diag_only:
        print("# %s: %s" % (desc, "; ".join(why) if why else "yes"))
    else:
        point(not why, desc, "; ".join(why))
    close(mw, qa, qb, o.mr)


def one_qp(a, b, rng):
    """Type 2B: the window answers only on the QP it was bound through."""
    o = Owner(b, rng)
    qa, qb = pair(a, b)
    qa2, qb2 = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    why = []
    wc, rkey = o.bind_type2(qb, mw)
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        why.append("bind: %s" % wc_str(wc))
    else:
        data = bytes(rng.getrandbits(8) for _ in range(256))
        a.mr.write(data, len(data))
        va = o.mr.buf + WIN_OFF
        wc = rdma(qa2, e.IBV_WR_RDMA_WRITE, rkey, va, len(data), 2)
        if wc is None or wc.status != e.IBV_WC_REM_ACCESS_ERR:
            why.append("Write on another QP pair: %s, want IBV_WC_REM_ACCESS_ERR" % wc_str(wc))
        bad = o.unchanged()
        if bad:
            why.append("after the Write on another QP pair: " + bad)
        wc = rdma(qa, e.IBV_WR_RDMA_WRITE, rkey, va, len(data), 3)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            why.append("Write on the binding QP's pair: %s" % wc_str(wc))
        o.model[WIN_OFF:WIN_OFF + len(data)] = data
        bad = o.unchanged()
        if bad:
            why.append("after the Write on the binding QP's pair: " + bad)
    point(not why, "a type 2 window answers only on the QP that bound it: a Write on another QP "
          "pair gives IBV_WC_REM_ACCESS_ERR, memory unchanged; on the binding QP's it lands",
          "; ".join(why))
    close(mw, qa, qb, qa2, qb2, o.mr)


def invalidate(a, b, rng):
    o = Owner(b, rng)
    qa, qb = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    why = []
    wc, rkey = o.bind_type2(qb, mw)
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        why.append("bind: %s" % wc_str(wc))
    else:
        qb.recv(1)
        inv = SendWR(opcode=e.IBV_WR_SEND_WITH_INV, wr_id=4, num_sge=1,
                     send_flags=e.IBV_SEND_SIGNALED, sg=[SGE(a.mr.buf, 16, a.mr.lkey)])
        inv.imm_data = rkey
        qa.qp.post_send(inv)
        wa, wb = qa.poll(), qb.poll()
        if wa is None or wa.status != e.IBV_WC_SUCCESS:
            why.append("send with invalidate: %s" % wc_str(wa))
        if wb is None or wb.status != e.IBV_WC_SUCCESS or not wb.wc_flags & WC_INV_ANY \
                or wb.imm_data != rkey:
            why.append("B's receive: %s, flags %#x, key %#x (want WITH_INV and %#x)" % (
                wc_str(wb), 0 if wb is None else wb.wc_flags, 0 if wb is None else wb.imm_data,
                rkey))
        wc = rdma(qa, e.IBV_WR_RDMA_WRITE, rkey, o.mr.buf + WIN_OFF, 64, 5)
        if wc is None or wc.status != e.IBV_WC_REM_ACCESS_ERR:
            why.append("write after invalidation: %s, want IBV_WC_REM_ACCESS_ERR" % wc_str(wc))
        bad = o.unchanged()
        if bad:
            why.append(bad)
    point(not why, "Send with Invalidate of a type 2 window's R_Key arrives with WITH_INV; "
          "a Write through the key then gives IBV_WC_REM_ACCESS_ERR, memory unchanged",
          "; ".join(why))
    close(mw, qa, qb, o.mr)


def type1(a, b, rng):
    o = Owner(b, rng)
    qa, qb = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    why = []
    qb.qp.bind_mw(mw, MWBind(MWBindInfo(o.mr, o.mr.buf + WIN_OFF, WIN_LEN,
                                        e.IBV_ACCESS_REMOTE_READ), e.IBV_SEND_SIGNALED))
    wc = qb.poll()
    if wc is None or wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_BIND_MW:
        why.append("ibv_bind_mw: %s" % wc_str(wc))
    else:
        start = WIN_OFF + 512
        wc = rdma(qa, e.IBV_WR_RDMA_READ, mw.rkey, o.mr.buf + start, 256, 2)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            why.append("read: %s" % wc_str(wc))
        elif a.mr.read(256, 0) != bytes(o.model[start:start + 256]):
            why.append("the bytes read differ from B's MR")
        # Length 0: the window grants nothing any more.
        qb.qp.bind_mw(mw, MWBind(MWBindInfo(o.mr, o.mr.buf, 0, 0), e.IBV_SEND_SIGNALED))
        wc = qb.poll()
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            why.append("zero-length bind: %s" % wc_str(wc))
        wc = rdma(qa, e.IBV_WR_RDMA_READ, mw.rkey, o.mr.buf + start, 256, 3)
        if wc is None or wc.status != e.IBV_WC_REM_ACCESS_ERR:
            why.append("read after the zero-length bind: %s, want IBV_WC_REM_ACCESS_ERR"
                       % wc_str(wc))
    point(not why, "type 1 window: ibv_bind_mw, a Read inside it returns B's bytes; after a "
          "zero-length bind a Read gives IBV_WC_REM_ACCESS_ERR", "; ".join(why))
    close(mw, qa, qb, o.mr)


def bind_error(a, b, rng):
    o = Owner(b, rng, access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    qa, qb = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    wc, _ = o.bind_type2(qb, mw, e.IBV_ACCESS_REMOTE_READ)
    attr, _ = qb.qp.query(e.IBV_QP_STATE)
    why = []
    if wc is None or wc.status != e.IBV_WC_MW_BIND_ERR:
        why.append("%s, want IBV_WC_MW_BIND_ERR" % wc_str(wc))
    if attr.qp_state != e.IBV_QPS_ERR:
        why.append("QP state %d, want IBV_QPS_ERR" % attr.qp_state)
    point(not why, "binding to an MR without IBV_ACCESS_MW_BIND completes with "
          "IBV_WC_MW_BIND_ERR and the QP enters Error", "; ".join(why))
    close(mw, qa, qb, o.mr)


def dereg(a, b, rng):
    o = Owner(b, rng)
    qa, qb = pair(a, b)
    mw = MW(b.pd, e.IBV_MW_TYPE_2)
    why = []
    wc, _ = o.bind_type2(qb, mw)
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        why.append("bind: %s" % wc_str(wc))
    else:
        try:
            o.mr.close()
            why.append("an MR with a bound window was deregistered")
        except PyverbsRDMAError as x:
            if x.error_code != errno.EBUSY:
                why.append("dereg: %s, want EBUSY" % x)
        mw.close()
        try:
            o.mr.close()
        except PyverbsRDMAError as x:
            why.append("dereg after the window's deallocation: %s" % x)
    point(not why, "an MR with a bound window cannot be deregistered (EBUSY); once the window "
          "is deallocated it can", "; ".join(why))
    close(mw, qa, qb, o.mr)


def caps(b):
    a = b.ctx.query_device()
    want = e.IBV_DEVICE_MEM_WINDOW | e.IBV_DEVICE_MEM_WINDOW_TYPE_2B
    point(a.device_cap_flags & want == want and a.max_mw > 0,
          "the device advertises IBV_DEVICE_MEM_WINDOW, MEM_WINDOW_TYPE_2B and max_mw > 0",
          "device_cap_flags %#x, max_mw %d" % (a.device_cap_flags, a.max_mw))


def main():
    args = sys.argv[1:]
    owner_checks = "--owner-checks" in args
    args = [x for x in args if x != "--owner-checks"]
    rng = random.Random(int(os.environ.get("SEED", "60")))
    a = Dev(args[0], int(args[1]), mr_size=MR_SIZE)
    b = Dev(args[2], int(args[3]), mr_size=MR_SIZE)
    type2(a, b, rng)
    refused_access(a, b, rng, "a Write through a read-only window gives IBV_WC_REM_ACCESS_ERR, "
                   "memory unchanged", e.IBV_ACCESS_REMOTE_READ, WIN_OFF, 64)
    invalidate(a, b, rng)
    type1(a, b, rng)
    if owner_checks:
        # Not on rdma_rxe's windows: its failed bind leaves an object its clean-up waits for
        # in vain (a WARNING in rxe_pool.c), which would fail the run's kernel-log check.
        bind_error(a, b, rng)
    refused_access(a, b, rng, "a Write from inside a type 2 window to past its end gives "
                   "IBV_WC_REM_ACCESS_ERR, memory unchanged", RW, WIN_OFF + WIN_LEN - 32, 64,
                   diag_only=not owner_checks)
    if owner_checks:
        one_qp(a, b, rng)
        dereg(a, b, rng)
        caps(b)


main()
