#!/usr/bin/python3
"""Receiver Not Ready (IBA 9.7.5.2.8, 9.7.5.1.3: RNR NAK; 9.7.6.1.4: the requester's RNR
retry count) with stock pyverbs: device A sends to device B, whose receive queue (RQ, or SRQ) is
empty when the Send comes, so B's responder answers with RNR NAKs carrying the RNR timer of B's
QP, and A's requester waits that long and retries, `rnr_retry` times (7: without end).

Between two rvrdma devices a QP with its own RQ gives end-to-end credits, and the requester
holds a Send until a receive is posted instead of drawing RNR NAKs (33-credits); a QP on an SRQ
gives none (IBA Table 17-8: the invalid credit code), so its peer sends and meets RNR NAKs.

Points, each on a fresh RC QP pair, B's QP on its RQ or (with `srq`) on an SRQ:
  retry0    with rnr_retry 0 the first RNR NAK ends the Send: RNR_RETRY_EXC_ERR, nothing
            received; B counts one RNR NAK sent, A one received;
  count     with rnr_retry 3 the Send ends after four RNR NAKs (the first and three retries),
            no sooner than three RNR timers (81.92 ms each) after it was posted;
  endless   with rnr_retry 7 the Send is retried until B posts a receive, then completes, and
            its bytes land intact.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (see run_points in lib.sh).
usage: rnr.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B rq|srq"""
import os
import sys
import time

import pyverbs.enums as e
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import Dev, Qp, link_counters, point, status_name  # noqa: E402

LEN = 3000  # three packets at MTU 1024
# B's RNR timers (IBA table 45): 81.92 ms to time the retries, 10.24 ms to wait for a receive.
TIMER_SLOW, SECS_SLOW = 26, 0.08192
TIMER_FAST = 20
# How long a Send retried without end stays pending before B posts its receive.
HOLD_SECS = 0.5


def rnr_counts(a, b):
    """(RNR NAKs A received, RNR NAKs B sent) so far."""
    return (link_counters(a.ctx.name).get("rcvd_rnr_err", -1),
            link_counters(b.ctx.name).get("send_rnr_err", -1))


class Pair:
    """A's RC QP connected to B's (on an SRQ if `srq`), A's with `rnr_retry`, B's with RNR timer
    `timer_b`; `recv()` posts one receive of 4096 bytes at the start of B's MR."""

    def __init__(self, a, b, rnr_retry, timer_b, srq):
        self.b = b
        self.srq = SRQ(b.pd, SrqInitAttr(attr=SrqAttr(max_wr=16, max_sge=1))) if srq else None
        self.qa, self.qb = Qp(a), Qp(b, srq=self.srq)
        self.qa.to_init()
        self.qb.to_init()
        self.qa.to_rtr(self.qb)
        self.qa.to_rts(rnr_retry=rnr_retry)
        self.qb.to_rtr(self.qa, min_rnr_timer=timer_b)
        self.qb.to_rts()

    def recv(self):
        if self.srq is None:
            self.qb.recv(1)
        else:
            b = self.b
            self.srq.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))


def send_pattern(a, qa):
    """Posts one Send of LEN fresh random bytes from the start of A's MR; returns the bytes."""
    data = os.urandom(LEN)
    a.mr.write(data, LEN, 0)
    qa.send(1, LEN)
    return data


def landed(b, qb, data):
    """Why B's receive of `data` (at the start of its MR) is wrong, or ''."""
    wc = qb.poll(10.0)
    if wc is None:
        return "B received nothing"
    if wc.status != e.IBV_WC_SUCCESS or wc.byte_len != LEN:
        return "B's receive: %s, %d bytes" % (status_name(wc.status), wc.byte_len)
    got = b.mr.read(LEN, 0)
    if got != data:
        bad = next(i for i in range(LEN) if got[i] != data[i])
        return "B's bytes differ from byte %d on" % bad
    return ""


def ends_rnr(a, b, rnr_retry, timer_b, srq):
    """A Send to an empty receive queue with `rnr_retry`: (why it went wrong or '', seconds
    from posting to the completion, RNR NAKs A received, RNR NAKs B sent)."""
    p = Pair(a, b, rnr_retry, timer_b, srq)
    ra, sb = rnr_counts(a, b)
    t0 = time.monotonic()
    send_pattern(a, p.qa)
    wc = p.qa.poll(30.0)
    took = time.monotonic() - t0
    ra2, sb2 = rnr_counts(a, b)
    why = ""
    if wc is None:
        why = "no completion"
    elif wc.status != e.IBV_WC_RNR_RETRY_EXC_ERR:
        why = "completion %s, want RNR_RETRY_EXC_ERR" % status_name(wc.status)
    elif p.qb.poll(0.2) is not None:
        why = "B completed a receive it never had"
    return why, took, ra2 - ra, sb2 - sb


def retry0(a, b, srq):
    why, _, got, sent = ends_rnr(a, b, 0, TIMER_FAST, srq)
    if not why and (got, sent) != (1, 1):
        why = "%d RNR NAKs received by A, %d sent by B, want 1 and 1" % (got, sent)
    return why, "rnr_retry 0: one RNR NAK ends the Send with RNR_RETRY_EXC_ERR"


def count(a, b, srq):
    why, took, got, sent = ends_rnr(a, b, 3, TIMER_SLOW, srq)
    if not why and (got, sent) != (4, 4):
        why = "%d RNR NAKs received by A, %d sent by B, want 4 and 4" % (got, sent)
    if not why and took < 3 * SECS_SLOW:
        why = "ended after %.3f s, before three RNR timers (%.3f s)" % (took, 3 * SECS_SLOW)
    return why, ("rnr_retry 3 ends the Send with RNR_RETRY_EXC_ERR after four RNR NAKs, each "
                 "retry an RNR timer after its NAK")


def endless(a, b, srq):
    p = Pair(a, b, 7, TIMER_FAST, srq)
    before = rnr_counts(a, b)[0]
    data = send_pattern(a, p.qa)
    time.sleep(HOLD_SECS)
    naks = rnr_counts(a, b)[0] - before
    early = p.qa.poll(0.0)
    p.recv()
    wc = p.qa.poll(10.0)
    why = ""
    if early is not None:
        why = "the Send completed (%s) before B posted a receive" % status_name(early.status)
    elif naks < 2:
        why = "%d RNR NAKs in %.1f s, want retries" % (naks, HOLD_SECS)
    elif wc is None or wc.status != e.IBV_WC_SUCCESS:
        why = "A's Send: %s" % ("no completion" if wc is None else status_name(wc.status))
    why = why or landed(b, p.qb, data)
    return why, ("rnr_retry 7 retries until B posts a receive; then the Send completes, bytes "
                 "intact")


def main():
    a = Dev(sys.argv[1], int(sys.argv[2]))
    b = Dev(sys.argv[3], int(sys.argv[4]))
    srq = sys.argv[5] == "srq"
    for fn in (retry0, count, endless):
        why, desc = fn(a, b, srq)
        point(not why, "%s (%s -> %s, %s): %s" % (fn.__name__, sys.argv[1], sys.argv[3],
                                                   sys.argv[5], desc), why)


if __name__ == "__main__":
    main()
