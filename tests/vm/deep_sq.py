#!/usr/bin/python3
"""A send queue deeper than the requester's window, with stock pyverbs: device A posts far more
WRs than rvrdma's core takes from a user QP's send ring at once (128), so most of them wait in
the ring until ACKs free the core's slots, and every one must still leave, in order, with its
own inline data.

1. RDMA Writes: A posts DEPTH Writes while tc netem drops everything B sends, so none is
   acknowledged and the ring fills behind the core's window. Then the link is clean again: the
   one ACK B sends for A's resent Write frees the whole window at once, and nothing else comes
   to make A look at its ring (IBA 9.7.5.1.2, C9-105: a responder answers a duplicate
   request with an ACK of the last request it executed). Every Write completes, in posting
   order, the ones behind the window at once rather than when a timer next fires, and B's
   memory holds each one's bytes: small ones inline (their data copied when they were taken
   from the ring, one place per core slot, which later WRs reuse), larger ones from A's MR.
2. Inline Sends: DEPTH Sends of distinct bytes into as many receives; B receives them in order,
   each with its own bytes, so no inline place was overwritten while its WR was outstanding.
3. Flush: A's QP is moved to Error and DEPTH more Writes are posted; every one completes with
   WR_FLUSH_ERR, in order.
4. Receives posted in Error, a while after the flush: rdma-core posts a receive without a
   system call, so only the kernel's poll of the ring finds them; each completes with
   WR_FLUSH_ERR, in order, within RECV_FLUSH_S (a drain waits for such a flush).

Prints one "ok DESC" / "not ok DESC: WHY" line per part (see run_points in lib.sh).
usage: deep_sq.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B NETNS_B NETDEV_B
(NETDEV_B in network namespace NETNS_B is DEV_B's: the netem qdisc goes there)"""
import os
import random
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.qp import QPAttr
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import ACK_TIMEOUT, Dev, Qp, point, status_name  # noqa: E402

DEPTH = 400
RECV_FLUSH_S = 3.0
# Four SGEs a WR give an inline room of 64 bytes (the rxe geometry: a WQE holds its SGEs or its
# inline data, whichever is larger).
SEND_SGE = 4
INLINE_MAX = 64
SLOT = 256  # bytes of memory per WR, on both sides
MR_SIZE = DEPTH * SLOT
# The send WQEs rvrdma's core takes from a user QP's ring at most.
WINDOW = 128
# Local ACK Timeout of A's QP: 17 s (4.096 us * 2^22), far longer than the Writes take, so a
# ring left unread until a timer fires shows.
ACK_TIMEOUT_EXP = max(22, ACK_TIMEOUT)
ACK_TIMEOUT_S = 4.096e-6 * 2 ** ACK_TIMEOUT_EXP


def completions(qp, n, secs, times=None):
    """The next `n` completions of `qp`'s CQ (fewer if `secs` pass first); `times`, a list,
    gets the time each was polled."""
    got = []
    end = time.monotonic() + secs
    while len(got) < n and time.monotonic() < end:
        k, wcs = qp.cq.poll(num_entries=min(64, n - len(got)))
        if k:
            got.extend(wcs[:k])
            if times is not None:
                times.extend([time.monotonic()] * k)
        else:
            time.sleep(0.001)
    return got


def in_order(wcs, n, status, what, first=0):
    """None if `wcs` are `n` completions of wr_id first..first+n-1 in order, all with `status`;
    else why."""
    if len(wcs) != n:
        return "%s: %d of %d completions came" % (what, len(wcs), n)
    for i, wc in enumerate(wcs):
        if wc.wr_id != first + i:
            return "%s: completion %d is for wr_id %d" % (what, i, wc.wr_id)
        if wc.status != status:
            return "%s: wr_id %d completed with %s" % (what, wc.wr_id, status_name(wc.status))
    return None


def tc(ns, dev, *args):
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc"] + list(args[:1]) +
                   ["dev", dev, "root"] + list(args[1:]), check=True)


def writes(a, b, qa, qb, rng, ns_b, dev_b):
    data = [bytes(rng.getrandbits(8) for _ in range(rng.choice((1, 8, INLINE_MAX, 200, SLOT))))
            for _ in range(DEPTH)]
    a.mr.write(b"".join(d.ljust(SLOT, b"\0") for d in data), MR_SIZE, 0)
    b.mr.write(b"\xee" * MR_SIZE, MR_SIZE, 0)
    qb.connect(qa)
    qa.to_init()
    qa.to_rtr(qb)
    qa.to_rts(timeout=ACK_TIMEOUT_EXP)
    # B executes the Writes but its ACKs are lost, so A's window fills and the rest of the WRs
    # wait in the ring. Once the link is clean, A resends the oldest Write, and B answers the
    # duplicate with one ACK for every Write it has executed: it frees the whole window at once,
    # with no other packet or post to come, and A must still take the rest from the ring.
    tc(ns_b, dev_b, "add", "netem", "loss", "100%")
    try:
        for i, d in enumerate(data):
            flags = e.IBV_SEND_SIGNALED | (e.IBV_SEND_INLINE if len(d) <= INLINE_MAX else 0)
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(a.mr.buf + i * SLOT, len(d), a.mr.lkey)], send_flags=flags)
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + i * SLOT)
            qa.qp.post_send(wr)
            if flags & e.IBV_SEND_INLINE:
                # Inline data is the caller's to reuse once the post returns.
                a.mr.write(b"\x55" * len(d), len(d), i * SLOT)
        early = completions(qa, 1, 0.2)
    finally:
        tc(ns_b, dev_b, "del")
    if early:
        return "a Write completed while B's ACKs were dropped (wr_id %d, %s)" % (
            early[0].wr_id, status_name(early[0].status))
    times = []
    why = in_order(completions(qa, DEPTH, 3 * ACK_TIMEOUT_S, times), DEPTH, e.IBV_WC_SUCCESS,
                   "Writes")
    if why:
        return why
    # The window's Writes complete on that ACK; the rest must follow at once, not when a timer
    # next makes A look at its ring.
    late = times[-1] - times[WINDOW - 1]
    print("# the %d Writes after the window completed %.2f s after it" % (DEPTH - WINDOW, late))
    if late > ACK_TIMEOUT_S / 2:
        return "the %d Writes after the window took %.1f s more (the Local ACK Timeout is %.1f s)" % (
            DEPTH - WINDOW, late, ACK_TIMEOUT_S)
    got = b.mr.read(MR_SIZE, 0)
    for i, d in enumerate(data):
        at = got[i * SLOT:i * SLOT + SLOT]
        if at[:len(d)] != d or at[len(d):] != b"\xee" * (SLOT - len(d)):
            return "Write %d (%d B%s): B's memory differs" % (
                i, len(d), ", inline" if len(d) <= INLINE_MAX else "")
    return None


def sends(a, b, qa, qb, rng):
    data = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, INLINE_MAX)))
            for _ in range(DEPTH)]
    b.mr.write(b"\xee" * MR_SIZE, MR_SIZE, 0)
    for i in range(DEPTH):
        qb.qp.post_recv(RecvWR(wr_id=i, num_sge=1,
                               sg=[SGE(b.mr.buf + i * SLOT, SLOT, b.mr.lkey)]))
    for i, d in enumerate(data):
        a.mr.write(d, len(d), 0)
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                    sg=[SGE(a.mr.buf, len(d), a.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE)
        qa.qp.post_send(wr)
    why = in_order(completions(qa, DEPTH, 60.0), DEPTH, e.IBV_WC_SUCCESS, "Sends")
    if why:
        return why
    recvd = completions(qb, DEPTH, 60.0)
    why = in_order(recvd, DEPTH, e.IBV_WC_SUCCESS, "receives")
    if why:
        return why
    got = b.mr.read(MR_SIZE, 0)
    for i, d in enumerate(data):
        if recvd[i].byte_len != len(d):
            return "receive %d: byte_len %d, sent %d" % (i, recvd[i].byte_len, len(d))
        if got[i * SLOT:i * SLOT + len(d)] != d:
            return "receive %d (%d B): the bytes differ from its Send's" % (i, len(d))
    return None


def flush(a, b, qa):
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_ERR
    qa.qp.modify(attr, e.IBV_QP_STATE)
    for i in range(DEPTH):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(a.mr.buf, 8, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        qa.qp.post_send(wr)
    return in_order(completions(qa, DEPTH, 60.0), DEPTH, e.IBV_WC_WR_FLUSH_ERR, "flushed Writes")


def recv_flush(a, qa):
    """Part 4: A's QP has been in Error for a while, its rings empty."""
    time.sleep(2.0)
    n = 16
    t0 = time.monotonic()
    for i in range(n):
        qa.qp.post_recv(RecvWR(wr_id=DEPTH + i, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)]))
    got = completions(qa, n, RECV_FLUSH_S)
    print("# %d of %d receives flushed after %.2f s" % (len(got), n, time.monotonic() - t0))
    return in_order(got, n, e.IBV_WC_WR_FLUSH_ERR, "receives posted in Error", DEPTH)


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    a = Dev(sys.argv[1], int(sys.argv[2]), mr_size=MR_SIZE)
    b = Dev(sys.argv[3], int(sys.argv[4]), mr_size=MR_SIZE)
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    qa = Qp(a, cqe=DEPTH, depth=DEPTH, send_sge=SEND_SGE)
    qb = Qp(b, cqe=DEPTH, depth=DEPTH)
    why = writes(a, b, qa, qb, rng, sys.argv[5], sys.argv[6])
    point(why is None, "%d RDMA Writes posted past the window while the responder's ACKs were "
          "lost complete in order with their bytes (inline ones too)" % DEPTH, why)
    why = sends(a, b, qa, qb, rng)
    point(why is None, "%d inline Sends posted at once arrive in order, each with its own bytes"
          % DEPTH, why)
    why = flush(a, b, qa)
    point(why is None, "%d Writes posted in Error all complete with WR_FLUSH_ERR, in order"
          % DEPTH, why)
    why = recv_flush(a, qa)
    point(why is None, "receives posted to a QP long in Error complete with WR_FLUSH_ERR within "
          "%.0f s, in order" % RECV_FLUSH_S, why)


if __name__ == "__main__":
    main()
