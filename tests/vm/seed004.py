#!/usr/bin/python3
"""Seed 004 (the Initialized state) seen from user space with stock pyverbs:
  - a QP in Init refuses Post Send at once (the verb fails with EINVAL),
  - it accepts Post Receive (the WQE waits, no completion),
  - inbound packets to a QP in Init are silently dropped: a peer in RTS that sends to it gets
    no ACK and ends with a retry-exceeded completion, and the Init QP's receive stays pending,
  - until the QP moves to Error, which flushes that receive.

usage: seed004.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B"""
import errno
import sys

import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr
from pyverbs.wr import SGE, RecvWR

from rcpair import Dev, Qp, check

# wr_ids that name the work posted to the Init QP among its completions.
SEND_ID = 0x5E4D
RECV_ID = 0x4ECF


def completions(q, secs):
    """Every completion `q`'s CQ gets within `secs` (after the first, 0.5 s of quiet ends it)."""
    got = []
    wc = q.poll(secs)
    while wc is not None:
        got.append(wc)
        wc = q.poll(0.5)
    return got


def main():
    a = Qp(Dev(sys.argv[1], int(sys.argv[2]), e.IBV_ACCESS_LOCAL_WRITE))
    b = Qp(Dev(sys.argv[3], int(sys.argv[4]), e.IBV_ACCESS_LOCAL_WRITE))
    b.to_init()
    # ibv_post_send(3) returns an errno on failure; the verbs layer (rxe too) gives EINVAL for a
    # QP whose state takes no sends.
    wr = b.send_wr()
    wr.wr_id = SEND_ID
    try:
        b.qp.post_send(wr)
        err = None
    except PyverbsRDMAError as ex:
        err = ex.error_code
    check(err == errno.EINVAL, "Post Send on a QP in Init fails at once with EINVAL (errno %s)" % err)
    try:
        b.qp.post_recv(RecvWR(wr_id=RECV_ID, num_sge=1,
                              sg=[SGE(b.dev.mr.buf, 4096, b.dev.mr.lkey)]))
        err = None
    except PyverbsRDMAError as ex:
        err = ex
    check(err is None, "Post Receive on a QP in Init is accepted (%s)" % (err or "no error"))
    # Timeout 12 (16.8 ms), 2 retries: the unanswered Send fails fast.
    a.connect(b, timeout=12, retry_cnt=2, rnr_retry=0)
    a.send()
    wc = a.poll(10.0)
    check(wc is not None and wc.status == e.IBV_WC_RETRY_EXC_ERR and wc.qp_num == a.qp.qp_num,
          "a Send to the QP in Init is never acknowledged (status %s)" %
          (None if wc is None else wc.status))
    check(b.poll(0.5) is None, "the Init QP's receive stays pending: the packets were dropped")
    # The receive was queued, not lost: Error flushes it.
    at = QPAttr()
    at.qp_state = e.IBV_QPS_ERR
    b.qp.modify(at, e.IBV_QP_STATE)
    got = completions(b, 5.0)
    seen = ["wr_id %#x status %d" % (w.wr_id, w.status) for w in got]
    print("# completions after Init -> Error: %s" % (seen or "none"))
    flushed = [w for w in got if w.wr_id == RECV_ID]
    check(len(flushed) == 1 and flushed[0].status == e.IBV_WC_WR_FLUSH_ERR and
          flushed[0].qp_num == b.qp.qp_num,
          "Init -> Error flushes the receive posted in Init (WR_FLUSH_ERR)")


if __name__ == "__main__":
    main()
