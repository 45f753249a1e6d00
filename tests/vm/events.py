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


def expect_some(q, at_most, what, opcode, secs=1.0, length=None):
    """Every completion `q`'s CQ gets until `secs` pass without one: at most `at_most`, each
    successful with `opcode` from `q`'s QP (and `length` bytes long, if given). Returns how
    many."""
    got = []
    wc = q.poll(secs)
    while wc is not None:
        got.append(wc)
        wc = q.poll(secs)
    ok = len(got) <= at_most and all(
        wc.status == e.IBV_WC_SUCCESS and wc.opcode == opcode and wc.qp_num == q.qp.qp_num and
        length in (None, wc.byte_len) for wc in got)
    check(ok, "%s (%d completions, at most %d: %s)" % (what, len(got), at_most,
                                                      "; ".join(wc_str(wc) for wc in got)))
    return len(got)


def pair(a, b, cqe_a=64, srq_b=None, b_rts=True, cqe_b=64, access_b=None):
    qa, qb = Qp(a, cqe_a), Qp(b, cqe_b, srq=srq_b)
    qa.to_init()
    if access_b is None:
        qb.to_init()
    else:
        qb.to_init(access_b)
    qa.to_rtr(qb, min_rnr_timer=1)
    qa.to_rts()
    qb.to_rtr(qa, min_rnr_timer=1)
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


# The Sends of the SQD scenario: 32 packets each at MTU 1024, so that the first is on the wire
# when the Modify QP to SQD comes, and twice the send window (128 packets) in all, so that the
# last usually wait for it: SQD holds those until the QP is back in RTS.
SQD_SENDS, SQD_LEN = 8, 32768


def sqd_pair(a, b):
    """A connected pair that has carried one Send (its path is known), with SQD_SENDS Sends of
    SQD_LEN bytes just posted on `qa`."""
    qa, qb = pair(a, b)
    qb.recv(1)
    qa.send(1)
    expect_wcs(qa, 1, "SQD set-up: a first Send completes", opcode=e.IBV_WC_SEND)
    expect_wcs(qb, 1, "SQD set-up: ... and is received", opcode=e.IBV_WC_RECV)
    qb.recv(SQD_SENDS, SQD_LEN)
    qa.send(SQD_SENDS, SQD_LEN)
    return qa, qb


def sq_drained_completions(qa, qb):
    """SQD finishes the messages in progress and starts no new one: the first Send, on the wire
    when SQD came, completes, and every Send that completed did so successfully and was received
    whole. Back in RTS, the Sends SQD held complete too: each Send completes and is received
    once."""
    sent = expect_some(qa, SQD_SENDS, "the Sends that completed in SQD succeeded", e.IBV_WC_SEND)
    got = expect_some(qb, SQD_SENDS, "... and were received whole", e.IBV_WC_RECV,
                      length=SQD_LEN)
    check(sent >= 1, "SQD finished the Send in progress (%d of %d completed in SQD)" %
          (sent, SQD_SENDS))
    check(got >= sent, "every completed Send was received (%d sent, %d received)" % (sent, got))
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
    qa, qb = sqd_pair(a, b)
    at = QPAttr()
    at.qp_state = e.IBV_QPS_SQD
    qa.qp.modify(at, e.IBV_QP_STATE)
    check(not a.event_pending(1.0), "no SQ_DRAINED when Modify QP to SQD did not ask for it")
    sq_drained_completions(qa, qb)
    qa, qb = sqd_pair(a, b)
    at = QPAttr()
    at.qp_state = e.IBV_QPS_SQD
    at.en_sqd_async_notify = 1
    qa.qp.modify(at, e.IBV_QP_STATE | e.IBV_QP_EN_SQD_ASYNC_NOTIFY)
    time.sleep(0.5)
    a.event(e.IBV_EVENT_SQ_DRAINED, "SQ_DRAINED after Modify QP to SQD")
    sq_drained_completions(qa, qb)


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
