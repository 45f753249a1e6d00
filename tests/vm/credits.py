#!/usr/bin/python3
"""End-to-end credits seen from user space (seed 003), with stock pyverbs: two RC QPs, one on
each device, connected to each other over the veth pair. The responder's RQ is empty, so a Send
must wait, and go as soon as the responder posts a receive, without an RNR NAK.

usage: credits.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B   (prints one line per check; exit 1 on
failure)"""
import sys
import time

import pyverbs.enums as e

from rcpair import Dev, Qp, check, link_counters

MSG = 3000  # three packets at MTU 1024


def main():
    a = Qp(Dev(sys.argv[1], int(sys.argv[2]), e.IBV_ACCESS_LOCAL_WRITE))
    b = Qp(Dev(sys.argv[3], int(sys.argv[4]), e.IBV_ACCESS_LOCAL_WRITE))
    # A first: B's initial unsolicited ACK (credit count 0) then reaches an A ready to hear it.
    # Timeout 20 (4.3 s): the Send must go on the credits the responder announces (or its answer
    # to a credit probe), long before any transport timeout.
    acks = link_counters(a.dev.ctx.name).get("credit_acks_rcvd", 0)
    a.connect(b, timeout=20)
    b.connect(a, timeout=20)
    # B's initial ACK (entering RTR) must have reached A, or A would send its first packet as a
    # probe into the empty RQ and draw an RNR NAK.
    end = time.monotonic() + 10.0
    while (link_counters(a.dev.ctx.name).get("credit_acks_rcvd", 0) == acks
           and time.monotonic() < end):
        time.sleep(0.02)
    check(link_counters(a.dev.ctx.name).get("credit_acks_rcvd", 0) > acks,
          "A heard B's initial ACK (credit_acks_rcvd)")
    payload = bytes((i * 7) & 0xff for i in range(MSG))
    a.dev.mr.write(payload, MSG)
    a.send(length=MSG)
    check(a.poll(1.5) is None, "the Send waits while the responder's RQ is empty")
    t0 = time.time()
    b.recv()
    wa = a.poll(3.0)
    dt = time.time() - t0
    check(wa is not None and wa.status == e.IBV_WC_SUCCESS,
          "the Send completes once the responder posts a receive (%.3f s)" % dt)
    wb = b.poll(3.0)
    check(wb is not None and wb.status == e.IBV_WC_SUCCESS and wb.byte_len == MSG,
          "the receive completes with all %d bytes" % MSG)
    check(b.dev.mr.read(MSG, 0) == payload, "the data arrived intact")


if __name__ == "__main__":
    main()
