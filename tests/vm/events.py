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
    check(qa.poll() is not None, "COMM_EST: the Send to a QP in RTR completes")
    b.event(e.IBV_EVENT_COMM_EST, "COMM_EST on the RTR side")


def access_err(a, b):
    qa, qb = pair(a, b)
    qa.write(b.mr.rkey ^ 0x80, b.mr.buf)
    wc = qa.poll()
    check(wc is not None and wc.status == e.IBV_WC_REM_ACCESS_ERR,
          "QP_ACCESS_ERR: the writer gets a remote access error (%s)" %
          (None if wc is None else wc.status))
    b.event(e.IBV_EVENT_QP_ACCESS_ERR, "QP_ACCESS_ERR on the target")


def req_err(a, b):
    qa, qb = pair(a, b, access_b=e.IBV_ACCESS_LOCAL_WRITE)
    qa.write(b.mr.rkey, b.mr.buf)
    wc = qa.poll()
    check(wc is not None and wc.status == e.IBV_WC_REM_INV_REQ_ERR,
          "QP_REQ_ERR: the writer gets a remote invalid request error (%s)" %
          (None if wc is None else wc.status))
    b.event(e.IBV_EVENT_QP_REQ_ERR, "QP_REQ_ERR on the QP without remote write access")
    attr, _ = qb.qp.query(e.IBV_QP_STATE)
    check(attr.qp_state == e.IBV_QPS_ERR, "the target QP entered Error (class C)")


def drain(q):
    """Every completion left in `q`'s CQ (statuses)."""
    got = []
    while True:
        n, wcs = q.cq.poll(16)
        if not n:
            return got
        got.extend(wc.status for wc in wcs[:n])


def overflowed(dev, q, posted, what):
    """Class G: CQ_ERR on the CQ and an affiliated error (QP_FATAL) on the QP, in either order
    (the CQ's event is delivered from its own work item); the QP in Error; no completion for
    the work that found the CQ full (nor a flush completion after it)."""
    got = dev.events(2)
    check(sorted(got) == sorted([e.IBV_EVENT_CQ_ERR, e.IBV_EVENT_QP_FATAL]),
          "CQ_ERR and QP_FATAL when the %s overflows (events %s)" % (what, got))
    attr, _ = q.qp.query(e.IBV_QP_STATE)
    check(attr.qp_state == e.IBV_QPS_ERR, "the QP entered Error (class G)")
    st = drain(q)
    check(len(st) < posted and all(s == e.IBV_WC_SUCCESS for s in st),
          "the CQ holds only the %d successful completions that fit, of %d (%s)" %
          (len(st), posted, st))


def cq_err(a, b):
    qa, qb = pair(a, b, cqe_a=1)
    qa.write(b.mr.rkey, b.mr.buf, n=4)
    time.sleep(1.0)
    overflowed(a, qa, 4, "requester's send CQ")


def rq_cq_err(a, b):
    qa, qb = pair(a, b, cqe_b=1)
    qb.recv(4)
    qa.send(4)
    time.sleep(1.0)
    overflowed(b, qb, 4, "responder's receive CQ")


def sq_drained(a, b):
    # Without en_sqd_async_notify, SQD raises nothing.
    qa, qb = pair(a, b)
    qb.recv(4)
    qa.send(4)
    at = QPAttr()
    at.qp_state = e.IBV_QPS_SQD
    qa.qp.modify(at, e.IBV_QP_STATE)
    check(not a.event_pending(1.0), "no SQ_DRAINED when Modify QP to SQD did not ask for it")
    qa, qb = pair(a, b)
    qb.recv(4)
    qa.send(4)
    at = QPAttr()
    at.qp_state = e.IBV_QPS_SQD
    at.en_sqd_async_notify = 1
    qa.qp.modify(at, e.IBV_QP_STATE | e.IBV_QP_EN_SQD_ASYNC_NOTIFY)
    time.sleep(0.5)
    a.event(e.IBV_EVENT_SQ_DRAINED, "SQ_DRAINED after Modify QP to SQD")


def srq_events(a, b):
    srq = SRQ(b.pd, SrqInitAttr(attr=SrqAttr(max_wr=16, max_sge=1)))
    for _ in range(4):
        srq.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))
    srq.modify(SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT)
    qa, qb = pair(a, b, srq_b=srq)
    qa.send(2)
    check(qa.poll() is not None, "SRQ_LIMIT_REACHED: Sends to the SRQ QP complete")
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
