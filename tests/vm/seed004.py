#!/usr/bin/python3
"""Seed 004 (the Initialized state) seen from user space with stock pyverbs:
  - a QP in Init refuses Post Send at once (the verb fails with EINVAL),
  - it accepts Post Receive (the WQE waits, no completion),
  - inbound packets to a QP in Init are silently dropped: a peer in RTS that sends to it gets
    no ACK and ends with a retry-exceeded completion, and the Init QP's receive stays pending,
  - until the QP moves to Error, which flushes that receive; the refused Send never completes,
  - and a QP whose Post Send was refused in Init, brought to RTS, sends only what is posted
    there: the refused WR (which the rxe ABI's provider wrote into the send ring before the
    call failed) never runs.

usage: seed004.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B"""
import errno
import sys

import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from rcpair import Dev, Qp, check

# wr_ids that name the work posted to the Init QP among its completions.
SEND_ID = 0x5E4D
RECV_ID = 0x4ECF
OK_ID = 0x0C


def post_send_errno(q, wr):
    """Posts `wr` on `q`: None if accepted, else the errno."""
    try:
        q.qp.post_send(wr)
        return None
    except PyverbsRDMAError as ex:
        return ex.error_code


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
    err = post_send_errno(b, wr)
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
    check(not [w for w in got if w.wr_id == SEND_ID],
          "the Send refused in Init never completes, not even flushed")
    refused_never_runs(a.dev, b.dev)


def refused_never_runs(dev_a, dev_b):
    """A Send refused in Init (32 bytes of "R") is not sent once the QP reaches RTS: the peer
    gets only the Send posted there (64 bytes of "A"), and the sender only its completion."""
    c = Qp(dev_b)
    d = Qp(dev_a)
    c.to_init()
    c.dev.mr.write(b"R" * 32, 32, 0)
    wr = SendWR(wr_id=SEND_ID, opcode=e.IBV_WR_SEND, num_sge=1,
                sg=[SGE(c.dev.mr.buf, 32, c.dev.mr.lkey)])
    err = post_send_errno(c, wr)
    check(err == errno.EINVAL, "a second QP in Init refuses Post Send too (errno %s)" % err)
    d.connect(c)
    d.recv(2)
    c.to_rtr(d)
    c.to_rts()
    c.dev.mr.write(b"A" * 64, 64, 0)
    c.qp.post_send(SendWR(wr_id=OK_ID, opcode=e.IBV_WR_SEND, num_sge=1,
                          sg=[SGE(c.dev.mr.buf, 64, c.dev.mr.lkey)]))
    sent = completions(c, 5.0)
    got = completions(d, 5.0)
    print("# after RTS: sender %s; receiver %s" % (
        ["wr_id %#x status %d" % (w.wr_id, w.status) for w in sent],
        ["status %d len %d" % (w.status, w.byte_len) for w in got]))
    check(len(sent) == 1 and sent[0].wr_id == OK_ID and sent[0].status == e.IBV_WC_SUCCESS,
          "the sender completes only the Send posted in RTS")
    data = d.dev.mr.read(64, 0)
    check(len(got) == 1 and got[0].status == e.IBV_WC_SUCCESS and got[0].byte_len == 64 and
          data == b"A" * 64,
          "the receiver gets only that Send, byte for byte (%r...)" % data[:8])
    c.close()
    d.close()


if __name__ == "__main__":
    main()
