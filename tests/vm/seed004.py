#!/usr/bin/python3
"""Seed 004 (the Initialized state) seen from user space with stock pyverbs:
  - a QP in Init refuses Post Send at once (the verb fails; nothing is queued),
  - it accepts Post Receive (the WQE waits, no completion),
  - inbound packets to a QP in Init are silently dropped: a peer in RTS that sends to it gets
    no ACK and ends with a retry-exceeded completion, and the Init QP's receive stays pending.

usage: seed004.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B"""
import sys

import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError

from rcpair import Dev, Qp, check


def main():
    a = Qp(Dev(sys.argv[1], int(sys.argv[2]), e.IBV_ACCESS_LOCAL_WRITE))
    b = Qp(Dev(sys.argv[3], int(sys.argv[4]), e.IBV_ACCESS_LOCAL_WRITE))
    b.to_init()
    try:
        b.qp.post_send(b.send_wr())
        refused = False
    except PyverbsRDMAError:
        refused = True
    check(refused, "Post Send on a QP in Init fails at once")
    b.recv()
    check(True, "Post Receive on a QP in Init is accepted")
    # Timeout 12 (16.8 ms), 2 retries: the unanswered Send fails fast.
    a.connect(b, timeout=12, retry_cnt=2, rnr_retry=0)
    a.send()
    wc = a.poll(10.0)
    check(wc is not None and wc.status == e.IBV_WC_RETRY_EXC_ERR,
          "a Send to the QP in Init is never acknowledged (status %s)" %
          (None if wc is None else wc.status))
    check(b.poll(0.5) is None, "the Init QP's receive stays pending: the packets were dropped")


if __name__ == "__main__":
    main()
