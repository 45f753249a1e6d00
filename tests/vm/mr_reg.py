#!/usr/bin/python3
"""Registers memory regions on an rvrdma device through stock pyverbs and prints one line per
check: "ok DESC" or "not ok DESC: WHY" (12-mr.sh turns them into KTAP test points)."""
import errno
import sys

from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.enums as e

LW = e.IBV_ACCESS_LOCAL_WRITE
RW = e.IBV_ACCESS_REMOTE_WRITE
RR = e.IBV_ACCESS_REMOTE_READ
RA = e.IBV_ACCESS_REMOTE_ATOMIC


def report(desc, ok, why=""):
    print(("ok " if ok else "not ok ") + desc + ("" if ok else ": " + why), flush=True)


def main(dev, max_size):
    ctx = Context(name=dev)
    pd = PD(ctx)
    sizes = [s for s in [1, 7, 4095, 4096, 4097, 65536, 1 << 20, 64 << 20] if s <= max_size]
    accesses = [0, LW, LW | RR, LW | RW, LW | RA, LW | RW | RR | RA, RR]
    mrs, keys, errs = [], set(), []
    for size in sizes:
        for acc in accesses:
            try:
                mr = MR(pd, size, acc)
            except PyverbsRDMAError as ex:
                errs.append(f"size {size} access {acc:#x}: {ex}")
                continue
            if mr.lkey != mr.rkey:
                errs.append(f"size {size} access {acc:#x}: lkey {mr.lkey:#x} != rkey {mr.rkey:#x}")
            if mr.lkey == 0:
                errs.append(f"size {size} access {acc:#x}: lkey 0")
            if mr.lkey in keys:
                errs.append(f"size {size} access {acc:#x}: key {mr.lkey:#x} reused")
            keys.add(mr.lkey)
            mrs.append(mr)
    n = len(sizes) * len(accesses)
    report(f"{n} MRs of 1 B .. {sizes[-1]} B with 7 access sets register", len(mrs) == n, "; ".join(errs[:5]))
    report("lkey == rkey, non-zero and unique for every MR", not errs, "; ".join(errs[:5]))

    for desc, acc in [("REMOTE_WRITE without LOCAL_WRITE", RW),
                      ("REMOTE_ATOMIC without LOCAL_WRITE", RA)]:
        try:
            MR(pd, 4096, acc).close()
            report(f"{desc} fails with EINVAL", False, "registration succeeded")
        except PyverbsRDMAError as ex:
            report(f"{desc} fails with EINVAL", ex.error_code == errno.EINVAL, str(ex))
    # On-demand paging: an explicit range registers (tests/vm/odp.py moves data through one);
    # implicit ODP (the whole address space) is not offered (as rdma_rxe).
    desc = "ON_DEMAND registers; implicit ON_DEMAND (whole address space) fails with EINVAL"
    try:
        odp = MR(pd, 4096, LW | e.IBV_ACCESS_ON_DEMAND)
        ok, why = odp.lkey != 0, f"lkey {odp.lkey:#x}"
        odp.close()
        try:
            MR(pd, 0, LW | e.IBV_ACCESS_ON_DEMAND, implicit=True).close()
            ok, why = False, "implicit registration succeeded"
        except PyverbsRDMAError as ex:
            if ex.error_code != errno.EINVAL:
                ok, why = False, f"implicit: {ex}"
        report(desc, ok, why)
    except PyverbsRDMAError as ex:
        report(desc, False, str(ex))

    closed = 0
    try:
        for mr in mrs:
            mr.close()
            closed += 1
        report(f"dereg of {len(mrs)} MRs", True)
    except PyverbsRDMAError as ex:
        report(f"dereg of {len(mrs)} MRs", False, f"after {closed}: {ex}")

    # Keys are per MR: registering again after dereg still gives valid, distinct keys.
    again = [MR(pd, 4096, LW) for _ in range(64)]
    ks = {m.lkey for m in again}
    report("64 MRs after dereg get 64 distinct keys", len(ks) == 64 and 0 not in ks, f"{len(ks)} keys")
    for m in again:
        m.close()
    pd.close()
    ctx.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "rvr0",
         int(sys.argv[2]) if len(sys.argv) > 2 else 64 << 20)
