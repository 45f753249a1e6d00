#!/usr/bin/python3
"""qp_memory.py DEV N: the kernel memory one RC QP costs on DEV, in KiB: MemFree before and
after creating N RC QPs (128 send and 128 receive WRs, one SGE each, as perftest's defaults),
divided by N; the median of three rounds (the QPs destroyed between them), as other activity in
the guest moves MemFree too. User-space memory of the process is allocated before the first
reading (rdma-core's rings are mapped from the kernel's, which count as kernel memory here).
Also, apart, what moves with little else: the rise of vmalloc'd pages (`VmallocUsed`, steady
from round to round: both drivers' rings and rvrdma's larger queues come from vmalloc) and of
slab objects (`Slab`). Pages taken from the CPUs' free lists do not move MemFree, so these two
may add up to more."""
import sys
import time

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
import pyverbs.enums as e


FIELDS = ("MemFree", "VmallocUsed", "Slab")


def meminfo_kib():
    """The FIELDS of /proc/meminfo, in KiB."""
    got = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name in FIELDS:
                got[name] = int(value.split()[0])
    if len(got) != len(FIELDS):
        raise RuntimeError("/proc/meminfo lacks one of %s" % ", ".join(FIELDS))
    return got


def main():
    dev, n = sys.argv[1], int(sys.argv[2])
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 256)
    cap = QPCap(max_send_wr=128, max_recv_wr=128, max_send_sge=1, max_recv_sge=1)
    qps = [None] * n
    per_qp = {f: [] for f in FIELDS}
    for _ in range(3):
        before = meminfo_kib()
        for i in range(n):
            qps[i] = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
        after = meminfo_kib()
        per_qp["MemFree"].append((before["MemFree"] - after["MemFree"]) / n)
        for f in FIELDS[1:]:
            per_qp[f].append((after[f] - before[f]) / n)
        for qp in qps:
            qp.close()
        # Memory freed after an RCU grace period is back before the next round.
        time.sleep(1)
    med = {f: sorted(v)[1] for f, v in per_qp.items()}
    print(
        "%.1f KiB (vmalloc %.1f, slab %.1f)"
        % (med["MemFree"], med["VmallocUsed"], med["Slab"])
    )


if __name__ == "__main__":
    main()
