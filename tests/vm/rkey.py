#!/usr/bin/python3
"""R_Key violations seen from user space (seed 001, Table 17-7 "R_Key Violation", class C), with
stock pyverbs: an RDMA READ and an RDMA WRITE from device A to device B, on a fresh RC QP pair
for each case, with an R_Key that names no MR (unused MR index), a wrong key byte, an MR of
another PD, a range past the MR's end, an invalidated MR (deregistered: user space cannot
invalidate an MR otherwise), and an MR without the access right (remote read for the READ,
remote write for the WRITE). Every case must give the requester IBV_WC_REM_ACCESS_ERR, the
target IBV_EVENT_QP_ACCESS_ERR (and no other event), and leave memory as it was: the target's
bytes for a WRITE, the requester's destination for a READ. Two controls first show that a good
R_Key moves the bytes (so the comparisons can fail).

Prints one "ok DESC" / "not ok DESC: WHY" line per test point (see run_points in lib.sh).
usage: rkey.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B"""
import sys

import pyverbs.enums as e
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE, SendWR

from rcpair import ACCESS, Dev, Qp

LEN = 64
MR_SIZE = 65536
SRC = 0x3C  # the requester's buffer: a WRITE's source, a READ's destination
TARGET = 0xA5  # what the target holds

points = 0
failures = 0


def point(ok, desc, why=""):
    global points, failures
    points += 1
    if ok:
        print("ok " + desc)
    else:
        failures += 1
        print("not ok %s: %s" % (desc, why))


def wc_str(wc):
    return "no completion" if wc is None else "status %d" % wc.status


def events(dev, first_wait, then_wait=0.3):
    """The async event types `dev` gets: waits up to `first_wait` s for the first, then takes
    every further one arriving within `then_wait` s of the last."""
    got = []
    wait = first_wait
    while dev.event_pending(wait):
        got.extend(dev.events(1))
        wait = then_wait
    return got


class Target:
    """Device B's memory: its main MR (the rcpair Dev's), an MR of a second PD, an MR without
    remote read and one without remote write, each filled with TARGET."""

    def __init__(self, b):
        self.b = b
        self.pd2 = PD(b.ctx)
        self.other_pd = MR(self.pd2, MR_SIZE, ACCESS)
        self.no_read = MR(b.pd, MR_SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        self.no_write = MR(b.pd, MR_SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
        self.mrs = [b.mr, self.other_pd, self.no_read, self.no_write]
        self.fill()

    def fill(self):
        for mr in self.mrs:
            mr.write(bytes([TARGET]) * MR_SIZE, MR_SIZE)

    def unchanged(self):
        """The MRs that do not hold TARGET in full any more."""
        want = bytes([TARGET]) * MR_SIZE
        return [i for i, mr in enumerate(self.mrs) if mr.read(MR_SIZE, 0) != want]

    def unused_rkey(self):
        """An R_Key whose MR index (key >> 8) names no MR: far above every index in use."""
        top = max(mr.rkey >> 8 for mr in self.mrs)
        return ((top + 0x1000) << 8) | (self.b.mr.rkey & 0xFF)

    def deregistered(self):
        """The R_Key and address of an MR that was registered and then deregistered."""
        mr = MR(self.b.pd, MR_SIZE, ACCESS)
        key, addr = mr.rkey, mr.buf
        mr.close()
        return key, addr


def cases(t):
    """(name, op, rkey, remote address) of each violation, for READ and WRITE."""
    b = t.b
    dead_key, dead_addr = t.deregistered()
    out = []
    for op in (e.IBV_WR_RDMA_READ, e.IBV_WR_RDMA_WRITE):
        out += [
            ("unused MR index", op, t.unused_rkey(), b.mr.buf),
            ("wrong key byte", op, b.mr.rkey ^ 0x01, b.mr.buf),
            ("MR of another PD", op, t.other_pd.rkey, t.other_pd.buf),
            ("range past the MR's end", op, b.mr.rkey, b.mr.buf + MR_SIZE - LEN // 2),
            ("invalidated (deregistered) MR", op, dead_key, dead_addr),
        ]
        if op == e.IBV_WR_RDMA_READ:
            out.append(("MR without remote read", op, t.no_read.rkey, t.no_read.buf))
        else:
            out.append(("MR without remote write", op, t.no_write.rkey, t.no_write.buf))
    return out


def connect(a, b):
    qa, qb = Qp(a), Qp(b)
    qa.connect(qb, timeout=14, retry_cnt=7, rnr_retry=7)
    qb.connect(qa, timeout=14, retry_cnt=7, rnr_retry=7)
    return qa, qb


def post(qa, op, rkey, addr):
    a = qa.dev
    wr = SendWR(opcode=op, num_sge=1, sg=[SGE(a.mr.buf, LEN, a.mr.lkey)])
    wr.set_wr_rdma(rkey, addr)
    qa.qp.post_send(wr)


def reset_local(a):
    a.mr.write(bytes([SRC]) * LEN, LEN)


def opname(op):
    return "READ" if op == e.IBV_WR_RDMA_READ else "WRITE"


def controls(a, b, t):
    """A good R_Key: the WRITE changes the target's bytes, the READ brings them back."""
    qa, qb = connect(a, b)
    reset_local(a)
    post(qa, e.IBV_WR_RDMA_WRITE, b.mr.rkey, b.mr.buf)
    wc = qa.poll(10)
    got = b.mr.read(LEN, 0)
    point(wc is not None and wc.status == e.IBV_WC_SUCCESS and got == bytes([SRC]) * LEN,
          "control: a WRITE with a good R_Key succeeds and changes the target's bytes",
          "%s, target now %s" % (wc_str(wc), got[:8].hex()))
    t.fill()
    reset_local(a)
    post(qa, e.IBV_WR_RDMA_READ, b.mr.rkey, b.mr.buf)
    wc = qa.poll(10)
    got = a.mr.read(LEN, 0)
    point(wc is not None and wc.status == e.IBV_WC_SUCCESS and got == bytes([TARGET]) * LEN,
          "control: a READ with a good R_Key succeeds and brings the target's bytes",
          "%s, destination now %s" % (wc_str(wc), got[:8].hex()))
    ev = events(b, 0.3)
    point(ev == [], "control: no async event on the target", "events %s" % ev)


def violation(a, b, t, name, op, rkey, addr):
    what = "%s %s" % (opname(op), name)
    t.fill()
    reset_local(a)
    qa, _qb = connect(a, b)
    post(qa, op, rkey, addr)
    wc = qa.poll(10)
    point(wc is not None and wc.status == e.IBV_WC_REM_ACCESS_ERR,
          "%s: the requester completes with IBV_WC_REM_ACCESS_ERR" % what,
          "%s (R_Key %#x, address %#x)" % (wc_str(wc), rkey, addr))
    ev = events(b, 5.0)
    point(ev == [e.IBV_EVENT_QP_ACCESS_ERR],
          "%s: the target raises IBV_EVENT_QP_ACCESS_ERR and nothing else" % what,
          "events %s (want [%d])" % (ev, e.IBV_EVENT_QP_ACCESS_ERR))
    events(a, 0.1)
    if op == e.IBV_WR_RDMA_WRITE:
        bad = t.unchanged()
        point(bad == [], "%s: the target's memory is unchanged" % what,
              "MRs changed: %s" % bad)
    else:
        got = a.mr.read(LEN, 0)
        point(got == bytes([SRC]) * LEN and t.unchanged() == [],
              "%s: no byte reached the requester's destination" % what,
              "destination now %s" % got[:8].hex())


def main():
    a = Dev(sys.argv[1], int(sys.argv[2]))
    b = Dev(sys.argv[3], int(sys.argv[4]))
    t = Target(b)
    controls(a, b, t)
    for c in cases(t):
        violation(a, b, t, *c)
    print("# %d points, %d failed" % (points, failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
