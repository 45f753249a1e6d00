#!/usr/bin/python3
"""qp_memory.py DEV N: the kernel memory one RC QP costs on DEV, in KiB: MemFree before and
after creating N RC QPs (128 send and 128 receive WRs, one SGE each, as perftest's defaults),
divided by N; the median of three rounds (the QPs destroyed between them), as other activity in
the guest moves MemFree too. User-space memory of the process is allocated before the first
reading (rdma-core's rings are mapped from the kernel's, which count as kernel memory here)."""
import sys
import time

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
import pyverbs.enums as e


def mem_free_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemFree:"):
                return int(line.split()[1])
    raise RuntimeError("no MemFree in /proc/meminfo")


def main():
    dev, n = sys.argv[1], int(sys.argv[2])
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 256)
    cap = QPCap(max_send_wr=128, max_recv_wr=128, max_send_sge=1, max_recv_sge=1)
    qps = [None] * n
    per_qp = []
    for _ in range(3):
        before = mem_free_kib()
        for i in range(n):
            qps[i] = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
        after = mem_free_kib()
        per_qp.append((before - after) / n)
        for qp in qps:
            qp.close()
        # Memory freed after an RCU grace period is back before the next round.
        time.sleep(1)
    print("%.1f" % sorted(per_qp)[1])


if __name__ == "__main__":
    main()
