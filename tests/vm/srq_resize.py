#!/usr/bin/python3
"""SRQ resize (ibv_modify_srq with IBV_SRQ_MAX_WR) through rdma-core's rxe provider (pyverbs),
with Sends from an RC QP on DEV_A to an RC QP on DEV_B whose receives come from the SRQ. Every
receive buffer is poisoned before its WQE is posted and each Send carries a message of its own
(length and bytes depend on its number), so a WQE taken out of order, lost, duplicated or
pointing at the wrong buffer fails the data check.

Prints one line per test point, "ok DESC" or "not ok DESC", then "# ..." diagnostics; always
exactly NPOINTS points.
Usage: srq_resize.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B [LABEL]  (LABEL prefixes each point)"""
import errno
import sys
import time

import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from rcpair import Dev, Qp

NPOINTS = 12
# Bytes per buffer slot (sender and receiver), and slots per MR.
SLOT = 256
SLOTS = 64
POISON = b"\xee" * SLOT
# Messages of the last point, received while the SRQ is resized over and over.
STREAM = 1000
points = 0
label = sys.argv[5] + ": " if len(sys.argv) > 5 else ""


class Failed(Exception):
    """A test point's check failed (the message says how)."""


def report(desc, ok, diag=""):
    global points
    points += 1
    print(("ok " if ok else "not ok ") + label + desc)
    for line in str(diag).splitlines():
        print("# " + line)


def point(desc, fn):
    """Runs fn(); the point passes when it returns without raising, and prints what it
    returned as a diagnostic. Returns whether it passed."""
    try:
        r = fn()
    except Exception as ex:  # pylint: disable=broad-except
        report(desc, False, ex if isinstance(ex, Failed) else repr(ex))
        return False
    report(desc, True, r or "")
    return True


def msg_len(i):
    return 1 + (i * 37) % SLOT


def msg(i):
    """Message i: its number in the first bytes, then a pattern that depends on i."""
    head = i.to_bytes(4, "little")
    body = bytes((i * 7 + k) & 0xFF for k in range(SLOT))
    return (head + body)[:msg_len(i)]


class Link:
    """Sender QP on `a`, receiver QP on `b` taking its receives from `srq`; message numbers
    run on from one batch to the next."""

    def __init__(self, a, b, srq):
        self.a, self.b, self.srq = a, b, srq
        self.qa = Qp(a, cqe=256, depth=64)
        self.qb = Qp(b, cqe=256, srq=srq, depth=64)
        self.qa.to_init()
        self.qb.to_init()
        self.qa.to_rtr(self.qb, min_rnr_timer=1)
        self.qb.to_rtr(self.qa, min_rnr_timer=1)
        self.qa.to_rts()
        self.qb.to_rts()
        self.posted = 0    # WQEs posted to the SRQ (the next one's number)
        self.sent = 0      # Sends posted
        self.send_done = 0
        self.recvd = 0     # receive completions checked

    def post_wqe(self):
        """Posts the SRQ WQE for message `posted`, its buffer poisoned first."""
        i = self.posted
        off = (i % SLOTS) * SLOT
        self.b.mr.write(POISON, SLOT, off)
        self.srq.post_recv(RecvWR(wr_id=i, num_sge=1,
                                  sg=[SGE(self.b.mr.buf + off, SLOT, self.b.mr.lkey)]))
        self.posted += 1

    def post_send(self):
        i = self.sent
        off = (i % SLOTS) * SLOT
        m = msg(i)
        self.a.mr.write(m, len(m), off)
        self.qa.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                                    sg=[SGE(self.a.mr.buf + off, len(m), self.a.mr.lkey)]))
        self.sent += 1

    def poll(self):
        """Checks every completion there is; returns how many."""
        # A few at a time: more rounds, so more resizes between arrivals.
        n, wcs = self.qa.cq.poll(4)
        for wc in wcs[:n]:
            if wc.status != e.IBV_WC_SUCCESS or wc.wr_id != self.send_done:
                raise Failed("send completion %d: status %d wr_id %d" %
                             (self.send_done, wc.status, wc.wr_id))
            self.send_done += 1
        m, wcs = self.qb.cq.poll(4)
        for wc in wcs[:m]:
            i = self.recvd
            if wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_RECV:
                raise Failed("receive %d: status %d opcode %d" % (i, wc.status, wc.opcode))
            if wc.wr_id != i:
                raise Failed("receive %d completed WQE %d (out of order)" % (i, wc.wr_id))
            if wc.byte_len != msg_len(i):
                raise Failed("receive %d: byte_len %d, sent %d" % (i, wc.byte_len, msg_len(i)))
            got = self.b.mr.read(SLOT, (i % SLOTS) * SLOT)
            want = msg(i) + POISON[msg_len(i):]
            if got != want:
                bad = next(k for k in range(SLOT) if got[k] != want[k])
                raise Failed("receive %d: buffer differs from message %d at byte %d "
                             "(got %#x, want %#x; first 4 bytes say message %d)" %
                             (i, i, bad, got[bad], want[bad],
                              int.from_bytes(got[:4], "little")))
            self.recvd += 1
        return n + m

    def run(self, total, window, between=None, secs=120):
        """Sends messages until `total` have been received, at most `window` Sends and SRQ
        WQEs ahead (WQEs are posted as receives complete); calls `between()` before each round
        of posting. Returns the number of rounds."""
        rounds = 0
        end = time.time() + secs
        while self.recvd < total or self.send_done < total:
            if time.time() > end:
                raise Failed("timed out: %d of %d received, %d of %d sends completed" %
                             (self.recvd, total, self.send_done, total))
            if between:
                between()
            while self.posted < total and self.posted - self.recvd < window:
                self.post_wqe()
            while self.sent < total and self.sent - self.send_done < window:
                self.post_send()
            rounds += 1
            if not self.poll():
                time.sleep(0.002)
        return rounds


def query(srq):
    a = srq.query()
    return a.max_wr, a.srq_limit


def expect_einval(what, fn):
    try:
        fn()
    except PyverbsRDMAError as ex:
        if ex.error_code != errno.EINVAL:
            raise Failed("%s: errno %d (%s), want EINVAL" % (what, ex.error_code, ex))
        return
    raise Failed("%s: succeeded" % what)


def main():
    a = Dev(sys.argv[1], int(sys.argv[2]))
    b = Dev(sys.argv[3], int(sys.argv[4]))
    attr = b.ctx.query_device()
    max_srq_wr = attr.max_srq_wr

    def cap():
        if not attr.device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE:
            raise Failed("device_cap_flags %#x" % attr.device_cap_flags)

    point("the device advertises IBV_DEVICE_SRQ_RESIZE", cap)

    srq = SRQ(b.pd, SrqInitAttr(attr=SrqAttr(max_wr=8, max_sge=1)))
    link = Link(a, b, srq)

    def created():
        for _ in range(6):
            link.post_wqe()
        if query(srq) != (15, 0):
            raise Failed("query_srq (max_wr, srq_limit) = %s, want (15, 0)" % (query(srq),))

    point("SRQ of max_wr 8 (depth 15, as rxe), 6 WQEs posted", created)

    def grow():
        srq.modify(SrqAttr(max_wr=40), e.IBV_SRQ_MAX_WR)
        if query(srq) != (63, 0):
            raise Failed("query_srq after the resize: %s, want (63, 0)" % (query(srq),))

    point("resize to max_wr 40 with 6 WQEs outstanding: query_srq says 63", grow)

    def post_more():
        for _ in range(30):
            link.post_wqe()

    point("30 more WQEs posted into the remapped ring (36 outstanding, the old depth was 15)",
          post_more)

    def consume():
        link.run(36, 36)
        return "36 messages of 1..256 bytes"

    point("36 Sends consume the 36 WQEs in posting order, each buffer holds its own message",
          consume)

    def too_small():
        for _ in range(10):
            link.post_wqe()
        expect_einval("resize to max_wr 2 (depth 3) with 10 WQEs outstanding",
                      lambda: srq.modify(SrqAttr(max_wr=2), e.IBV_SRQ_MAX_WR))
        if query(srq) != (63, 0):
            raise Failed("query_srq after the refused resize: %s, want (63, 0)" % (query(srq),))

    point("resize below the outstanding WQEs (max_wr 2, 10 outstanding) fails with EINVAL, "
          "SRQ unchanged", too_small)

    def too_big():
        expect_einval("resize to max_srq_wr + 1 = %d" % (max_srq_wr + 1),
                      lambda: srq.modify(SrqAttr(max_wr=max_srq_wr + 1), e.IBV_SRQ_MAX_WR))
        expect_einval("resize to max_srq_wr + 1 with srq_limit 5",
                      lambda: srq.modify(SrqAttr(max_wr=max_srq_wr + 1, srq_limit=5),
                                         e.IBV_SRQ_MAX_WR | e.IBV_SRQ_LIMIT))
        if query(srq) != (63, 0):
            raise Failed("query_srq after the refused resizes: %s, want (63, 0)" % (query(srq),))
        return "max_srq_wr %d" % max_srq_wr

    point("resize beyond the device's max_srq_wr fails with EINVAL (also with IBV_SRQ_LIMIT: "
          "the limit not set either)", too_big)

    def with_limit():
        srq.modify(SrqAttr(max_wr=100, srq_limit=12), e.IBV_SRQ_MAX_WR | e.IBV_SRQ_LIMIT)
        if query(srq) != (127, 12):
            raise Failed("query_srq: %s, want (127, 12)" % (query(srq),))

    point("resize to max_wr 100 with srq_limit 12 in one call: query_srq says 127, limit 12",
          with_limit)

    def shrink():
        expect_einval("resize to max_wr 11 with the limit armed at 12",
                      lambda: srq.modify(SrqAttr(max_wr=11), e.IBV_SRQ_MAX_WR))
        if query(srq) != (127, 12):
            raise Failed("query_srq after the refused resize: %s, want (127, 12)" %
                         (query(srq),))
        srq.modify(SrqAttr(max_wr=12), e.IBV_SRQ_MAX_WR)
        if query(srq) != (15, 12):
            raise Failed("query_srq: %s, want (15, 12)" % (query(srq),))

    point("shrink below the armed limit (max_wr 11, limit 12) fails with EINVAL; to max_wr 12 "
          "with 10 WQEs outstanding: query_srq says 15, limit kept", shrink)

    def consume_rest():
        if b.event_pending(0):
            raise Failed("an async event came before the Sends: %s" % b.events(1))
        link.run(46, 10)
        return "messages 36..45"

    point("10 Sends consume the WQEs posted before the refused resizes, in order, data intact",
          consume_rest)

    def limit_event():
        if not b.event_pending(5.0):
            raise Failed("no async event within 5 s")
        got = b.events(1)[0]
        if got != e.IBV_EVENT_SRQ_LIMIT_REACHED:
            raise Failed("event %d, want SRQ_LIMIT_REACHED (%d)" %
                         (got, e.IBV_EVENT_SRQ_LIMIT_REACHED))
        if query(srq)[1] != 0:
            raise Failed("the limit is still armed: %s" % (query(srq),))

    point("SRQ_LIMIT_REACHED once the SRQ fell below the limit set with the resize",
          limit_event)

    def concurrent():
        sizes = [(16, 31), (100, 127)]
        n = [0]

        def resize():
            max_wr, depth = sizes[n[0] % 2]
            srq.modify(SrqAttr(max_wr=max_wr), e.IBV_SRQ_MAX_WR)
            if query(srq)[0] != depth:
                raise Failed("resize %d to max_wr %d: query_srq says %d" %
                             (n[0], max_wr, query(srq)[0]))
            n[0] += 1

        total = link.recvd + STREAM
        t0 = time.time()
        link.run(total, 16, between=resize, secs=240)
        return "%d messages in %.1f s with %d resizes between 31 and 127 slots" % (
            STREAM, time.time() - t0, n[0])

    point("%d Sends stream in while the SRQ is resized between depth 31 and 127 and refilled "
          "(16 in flight): all received in order, data intact" % STREAM, concurrent)


if __name__ == "__main__":
    try:
        main()
    except Exception as ex:  # pylint: disable=broad-except
        print("# stopped: %r" % ex)
    while points < NPOINTS:
        report("point %d: not run" % (points + 1), False)
    if points != NPOINTS:
        print("# srq_resize.py printed %d points, planned %d" % (points, NPOINTS))
