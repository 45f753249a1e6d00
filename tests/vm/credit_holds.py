#!/usr/bin/python3
"""Messages that each wait for credits, with the Local ACK Timeout perftest and rdma_cm use (14,
67 ms), with stock pyverbs: the responder's RQ is empty whenever the requester posts a 64 KiB
Send, and the responder posts the receive up to 3 ms after, so every message starts a credit hold
and goes on the credit update that ends it. The credit probes a hold schedules must not time
the message that follows: the caller checks the retry counters.

usage: credit_holds.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B ROUNDS [ACK_TIMEOUT]   (the Local
ACK Timeout exponent, default 14; prints one line per check; exit 1 on failure)"""
import sys
import time

import pyverbs.enums as e

from rcpair import Dev, Qp, check

MSG = 65536  # 64 packets at MTU 1024


def main():
    rounds = int(sys.argv[5])
    timeout = int(sys.argv[6]) if len(sys.argv) > 6 else 14
    a = Qp(Dev(sys.argv[1], int(sys.argv[2]), e.IBV_ACCESS_LOCAL_WRITE))
    b = Qp(Dev(sys.argv[3], int(sys.argv[4]), e.IBV_ACCESS_LOCAL_WRITE))
    a.connect(b, timeout=timeout)
    b.connect(a, timeout=timeout)
    for r in range(rounds):
        payload = bytes(((i >> 8) * 31 + i + r * 7) & 0xff for i in range(MSG))
        a.dev.mr.write(payload, MSG)
        a.send(length=MSG)
        # Holds of different lengths end at different points of the probe schedule.
        time.sleep((r % 4) * 0.001)
        b.recv(length=MSG)
        wa, wb = a.poll(10.0), b.poll(10.0)
        check(wa is not None and wa.status == e.IBV_WC_SUCCESS,
              "round %d: the Send completes" % r)
        check(wb is not None and wb.status == e.IBV_WC_SUCCESS and wb.byte_len == MSG,
              "round %d: the receive completes with all %d bytes" % (r, MSG))
        check(b.dev.mr.read(MSG, 0) == payload, "round %d: the data arrived intact" % r)
    print("%d messages of %d bytes, each held for credits, arrived intact" % (rounds, MSG))


if __name__ == "__main__":
    main()
