#!/usr/bin/python3
"""Affiliated async events seen from user space (stock pyverbs, ibv_get_async_event), each forced
by a real scenario between two RC QPs on two devices connected over the veth pair:
  COMM_EST            a Send reaches a QP still in RTR
  QP_ACCESS_ERR       the peer writes with a wrong R_Key (and gets a remote access error)
  QP_REQ_ERR          the peer writes to a QP that does not allow remote writes (invalid request)
  CQ_ERR              a CQ too small for the completions (with QP_FATAL; the QP enters Error):
                      the requester's send CQ, and the responder's receive CQ
  SQ_DRAINED          Modify QP to SQD with en_sqd_async_notify, once the SQ is drained (and
                      none without it)
  SRQ_LIMIT_REACHED   an armed SRQ limit crossed by inbound Sends
  QP_LAST_WQE_REACHED an SRQ QP moved to Error
usage: events.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B [EVENT...]"""
import sys
import time

import pyverbs.enums as e
from pyverbs.qp import QPAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR

from rcpair import Dev, Qp, check


def wc_str(wc):
    return "none" if wc is None else "status %d opcode %d qp %#x len %d" % (
        wc.status, wc.opcode, wc.qp_num, wc.byte_len)


def expect_wcs(q, n, what, status=e.IBV_WC_SUCCESS, opcode=None, secs=5.0):
    """The next `n` completions of `q`'s CQ have `status` and come from `q`'s QP; successful ones
    also have `opcode` (ibv_poll_cq(3): an error completion's opcode is undefined)."""
    got = []
    for _ in range(n):
        wc = q.poll(secs)
        if wc is None:
            break
        got.append(wc)
    ok = len(got) == n and all(
        wc.status == status and wc.qp_num == q.qp.qp_num and
        (status != e.IBV_WC_SUCCESS or wc.opcode == opcode) for wc in got)
    check(ok, "%s (%d of %d completions: %s)" % (what, len(got), n,
                                               "; ".join(wc_str(wc) for wc in got) or "none"))


def expect_some(q, at_most, what, opcode, secs=1.0, length=None, first_secs=None):
    """Every completion `q`'s CQ gets until `secs` pass without one (`first_secs` for the
    first, if given): at most `at_most`, each successful with `opcode` from `q`'s QP (and
    `length` bytes long, if given). Returns how many."""
    got = []
    wc = q.poll(secs if first_secs is None else first_secs)
    while wc is not None:
        got.append(wc)
        wc = q.poll(secs)
    ok = len(got) <= at_most and all(
        wc.status == e.IBV_WC_SUCCESS and wc.opcode == opcode and wc.qp_num == q.qp.qp_num and
        length in (None, wc.byte_len) for wc in got)
    check(ok, "%s (%d completions, at most %d: %s)" % (what, len(got), at_most,
                                                      "; ".join(wc_str(wc) for wc in got)))
    return len(got)


def pair(a, b, cqe_a=64, srq_b=None, b_rts=True, cqe_b=64, access_b=None, rnr_timer_b=1):
    qa, qb = Qp(a, cqe_a), Qp(b, cqe_b, srq=srq_b)
    qa.to_init()
    if access_b is None:
        qb.to_init()
    else:
        qb.to_init(access_b)
    qa.to_rtr(qb, min_rnr_timer=1)
    qa.to_rts()
    qb.to_rtr(qa, min_rnr_timer=rnr_timer_b)
    if b_rts:
        qb.to_rts()
    return qa, qb


def comm_est(a, b):
    qa, qb = pair(a, b, b_rts=False)
    qb.recv()
    qa.send()
    expect_wcs(qa, 1, "COMM_EST: the Send to a QP in RTR completes", opcode=e.IBV_WC_SEND)
    expect_wcs(qb, 1, "COMM_EST: the QP in RTR receives it", opcode=e.IBV_WC_RECV)
    b.event(e.IBV_EVENT_COMM_EST, "COMM_EST on the RTR side")


def access_err(a, b):
    qa, qb = pair(a, b)
    qa.write(b.mr.rkey ^ 0x80, b.mr.buf)
    expect_wcs(qa, 1, "QP_ACCESS_ERR: the writer gets a remote access error",
               status=e.IBV_WC_REM_ACCESS_ERR)
    b.event(e.IBV_EVENT_QP_ACCESS_ERR, "QP_ACCESS_ERR on the target")


def req_err(a, b):
    qa, qb = pair(a, b, access_b=e.IBV_ACCESS_LOCAL_WRITE)
    qa.write(b.mr.rkey, b.mr.buf)
    expect_wcs(qa, 1, "QP_REQ_ERR: the writer gets a remote invalid request error",
               status=e.IBV_WC_REM_INV_REQ_ERR)
    b.event(e.IBV_EVENT_QP_REQ_ERR, "QP_REQ_ERR on the QP without remote write access")
    attr, _ = qb.qp.query(e.IBV_QP_STATE)
    check(attr.qp_state == e.IBV_QPS_ERR, "the target QP entered Error (class C)")


def drain(q):
    """Every completion left in `q`'s CQ."""
    got = []
    while True:
        n, wcs = q.cq.poll(16)
        if not n:
            return got
        got.extend(wcs[:n])


def overflowed(dev, q, posted, what, opcode):
    """Class G: CQ_ERR on the CQ and an affiliated error (QP_FATAL) on the QP, in either order
    (the CQ's event is delivered from its own work item); the QP in Error; no completion for
    the work that found the CQ full (nor a flush completion after it)."""
    got = dev.events(2)
    check(sorted(got) == sorted([e.IBV_EVENT_CQ_ERR, e.IBV_EVENT_QP_FATAL]),
          "CQ_ERR and QP_FATAL when the %s overflows (events %s)" % (what, got))
    attr, _ = q.qp.query(e.IBV_QP_STATE)
    check(attr.qp_state == e.IBV_QPS_ERR, "the QP entered Error (class G)")
    wcs = drain(q)
    check(0 < len(wcs) < posted and
          all(wc.status == e.IBV_WC_SUCCESS and wc.opcode == opcode and
              wc.qp_num == q.qp.qp_num for wc in wcs),
          "the CQ holds only the successful completions (opcode %d) that fit: %d of %d (%s)" %
          (opcode, len(wcs), posted, "; ".join(wc_str(wc) for wc in wcs)))


def cq_err(a, b):
    qa, qb = pair(a, b, cqe_a=1)
    qa.write(b.mr.rkey, b.mr.buf, n=4)
    time.sleep(1.0)
    overflowed(a, qa, 4, "requester's send CQ", e.IBV_WC_RDMA_WRITE)


def rq_cq_err(a, b):
    qa, qb = pair(a, b, cqe_b=1)
    qb.recv(4)
    qa.send(4)
    time.sleep(1.0)
    overflowed(b, qb, 4, "responder's receive CQ", e.IBV_WC_RECV)


# The Sends of the SQD scenario: 32 packets each at MTU 1024, twice the send window (128
# packets) in all, so that at most half of them can have begun when the Modify QP to SQD comes.
# B's QP takes its receives from an SRQ (so it gives no end-to-end credits: A sends regardless)
# that is empty until then: the first Send draws RNR NAKs (retried every 10.24 ms, RNR timer
# 20) and stays in progress, where a Send with a receive waiting would complete inside its own
# doorbell.
SQD_SENDS, SQD_LEN, SQD_RNR_TIMER = 8, 32768, 20


def rnr_naks(dev):
    """Port 1's rcvd_rnr_err counter, from sysfs: quicker to read than `rdma statistic`."""
    with open("/sys/class/infiniband/%s/ports/1/hw_counters/rcvd_rnr_err" % dev) as f:
        return int(f.read())


def srq_recv(srq, dev, n, length):
    for _ in range(n):
        srq.post_recv(RecvWR(num_sge=1, sg=[SGE(dev.mr.buf, length, dev.mr.lkey)]))


def sqd_pair(a, b, notify):
    """A connected pair, B's QP on an SRQ, that has carried one Send (its path is known), then
    has SQD_SENDS Sends of SQD_LEN bytes posted on `qa`, the first of them held by RNR NAKs, and
    `qa` moved to SQD (asking for SQ_DRAINED if `notify`). Returns the QPs and the SRQ."""
    srq = SRQ(b.pd, SrqInitAttr(attr=SrqAttr(max_wr=2 * SQD_SENDS, max_sge=1)))
    qa, qb = pair(a, b, srq_b=srq, rnr_timer_b=SQD_RNR_TIMER)
    srq_recv(srq, b, 1, 64)
    qa.send(1)
    expect_wcs(qa, 1, "SQD set-up: a first Send completes", opcode=e.IBV_WC_SEND)
    expect_wcs(qb, 1, "SQD set-up: ... and is received", opcode=e.IBV_WC_RECV)
    before = rnr_naks(a.ctx.name)
    qa.send(SQD_SENDS, SQD_LEN)
    end = time.monotonic() + 5.0
    now = before
    while now == before and time.monotonic() < end:
        time.sleep(0.001)
        now = rnr_naks(a.ctx.name)
    check(now != before, "SQD set-up: the first Send is in progress, drawing RNR NAKs "
          "(rcvd_rnr_err %d -> %d)" % (before, now))
    at = QPAttr()
    at.qp_state = e.IBV_QPS_SQD
    mask = e.IBV_QP_STATE
    if notify:
        at.en_sqd_async_notify = 1
        mask |= e.IBV_QP_EN_SQD_ASYNC_NOTIFY
    qa.qp.modify(at, mask)
    return qa, qb, srq


def sq_drained_completions(b, qa, qb, srq):
    """SQD finishes the messages in progress and starts no new one: once B posts its receives,
    the first Send, held by RNR NAKs when SQD came, completes; every Send that completed did so
    successfully and was received whole; the Sends not begun wait. Back in RTS, those complete
    too: each Send completes and is received once."""
    srq_recv(srq, b, SQD_SENDS, SQD_LEN)
    # The first completes on the next RNR retry; the others in progress follow it at once, and
    # 3 s without one means none is left (TCG's pauses are shorter).
    sent = expect_some(qa, SQD_SENDS, "the Sends that completed in SQD succeeded", e.IBV_WC_SEND,
                       secs=3.0, first_secs=10.0)
    got = expect_some(qb, SQD_SENDS, "... and were received whole", e.IBV_WC_RECV,
                      length=SQD_LEN)
    check(sent >= 1, "SQD finished the Send in progress (%d of %d completed in SQD)" %
          (sent, SQD_SENDS))
    check(sent < SQD_SENDS, "SQD held the Sends not begun (%d of %d completed in SQD; the send "
          "window lets at most half begin)" % (sent, SQD_SENDS))
    check(got == sent, "every completed Send was received (%d sent, %d received)" % (sent, got))
    at = QPAttr()
    at.qp_state = e.IBV_QPS_RTS
    qa.qp.modify(at, e.IBV_QP_STATE)
    more = expect_some(qa, SQD_SENDS - sent, "back in RTS, the Sends SQD held complete",
                       e.IBV_WC_SEND, secs=3.0)
    more_got = expect_some(qb, SQD_SENDS - got, "... and are received whole", e.IBV_WC_RECV,
                           secs=3.0, length=SQD_LEN)
    check(sent + more == SQD_SENDS and got + more_got == SQD_SENDS,
          "each of the %d Sends completed once and was received once (%d + %d sent, %d + %d "
          "received)" % (SQD_SENDS, sent, more, got, more_got))


def sq_drained(a, b):
    # Without en_sqd_async_notify, SQD raises nothing.
    qa, qb, srq = sqd_pair(a, b, notify=False)
    sq_drained_completions(b, qa, qb, srq)
    check(not a.event_pending(1.0), "no SQ_DRAINED when Modify QP to SQD did not ask for it")
    # With it, SQ_DRAINED comes once the Send in progress has completed, not before.
    qa, qb, srq = sqd_pair(a, b, notify=True)
    check(not a.event_pending(0.5), "no SQ_DRAINED while the Send in progress waits on RNR NAKs")
    sq_drained_completions(b, qa, qb, srq)
    a.event(e.IBV_EVENT_SQ_DRAINED, "SQ_DRAINED after Modify QP to SQD, once it drained")


def srq_events(a, b):
    srq = SRQ(b.pd, SrqInitAttr(attr=SrqAttr(max_wr=16, max_sge=1)))
    for _ in range(4):
        srq.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))
    srq.modify(SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT)
    qa, qb = pair(a, b, srq_b=srq)
    qa.send(2)
    expect_wcs(qa, 2, "SRQ_LIMIT_REACHED: Sends to the SRQ QP complete", opcode=e.IBV_WC_SEND)
    expect_wcs(qb, 2, "... and are received through the SRQ", opcode=e.IBV_WC_RECV)
    time.sleep(0.3)
    b.event(e.IBV_EVENT_SRQ_LIMIT_REACHED, "SRQ_LIMIT_REACHED when the SRQ falls below 3")
    at = QPAttr()
    at.qp_state = e.IBV_QPS_ERR
    qb.qp.modify(at, e.IBV_QP_STATE)
    time.sleep(0.3)
    b.event(e.IBV_EVENT_QP_LAST_WQE_REACHED, "QP_LAST_WQE_REACHED when the SRQ QP enters Error")


SCENARIOS = {"comm_est": comm_est, "access_err": access_err, "req_err": req_err,
             "cq_err": cq_err, "rq_cq_err": rq_cq_err,
             "sq_drained": sq_drained, "srq": srq_events}


def main():
    names = sys.argv[5:] or list(SCENARIOS)
    for n in names:
        a = Dev(sys.argv[1], int(sys.argv[2]))
        b = Dev(sys.argv[3], int(sys.argv[4]))
        SCENARIOS[n](a, b)


if __name__ == "__main__":
    main()
