#!/usr/bin/python3
"""Resource exhaustion: creates PDs, CQs, MRs, SRQs, AHs, MWs and QPs on one device until a create
fails; each kind must stop exactly at the limit `ibv_query_device` advertises (counting what the
kernel already holds on the device, from `rdma resource show`), with ENOMEM, the errno the
verbs man pages give for a device out of resources. Then everything is freed and the device's
resource counts are back where they were (nothing leaked). With DEV_B, a PD on DEV_B can still
be allocated while DEV_A holds every PD it may: the limits are per device.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (see run_points in lib.sh).
usage: exhaust.py DEV_A GID_INDEX_A [DEV_B]"""
import errno
import json
import os
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import point  # noqa: E402


def held(dev):
    """The device's object counts as `rdma resource show` reports them (pd, cq, qp, mr, srq)."""
    out = subprocess.run(["rdma", "-j", "resource", "show"], check=True, capture_output=True,
                         text=True).stdout
    for d in json.loads(out):
        if d.get("ifname") == dev:
            return {k: int(v) for k, v in d.items() if k in ("pd", "cq", "qp", "mr", "srq")}
    raise RuntimeError("rdma resource show does not list %s" % dev)


def gsi_qps(dev):
    """QP1 of each port: counted by `rdma resource show`, outside the table QPs come from."""
    out = subprocess.run(["rdma", "-j", "resource", "show", "qp", "link", dev], check=True,
                         capture_output=True, text=True).stdout
    return sum(1 for q in json.loads(out) if q.get("type") == "GSI")


def fill(make, cap):
    """Creates objects with `make` until one fails (at most `cap`); returns them and the errno
    of the failure (None if `cap` objects were made)."""
    objs = []
    while len(objs) < cap:
        try:
            objs.append(make())
        except PyverbsRDMAError as ex:
            return objs, ex.error_code
    return objs, None


def close_all(objs):
    for o in reversed(objs):
        o.close()


def main():
    dev = sys.argv[1]
    gid_index = int(sys.argv[2])
    other = sys.argv[3] if len(sys.argv) > 3 else None
    ctx = Context(name=dev)
    a = ctx.query_device()
    gid = ctx.query_gid(1, gid_index)
    base = held(dev)
    pd = PD(ctx)
    cq = CQ(ctx, 4)
    mine = {"pd": 1, "cq": 1, "qp": 0, "mr": 0, "srq": 0}

    def kind(name, limit, make, held_key=None, while_full=None):
        """Fills one kind to its limit; `while_full` runs while every object is still held."""
        # What the device holds already (the kernel's objects and ours above) leaves the rest.
        now = held(dev)
        pre = now[held_key] if held_key else 0
        if held_key == "qp":
            pre -= gsi_qps(dev)
        if held_key == "mr":
            # Each kernel PD (the device has no local DMA lkey) holds an internal DMA MR that
            # `rdma resource` does not list.
            pre += base["pd"]
        want = limit - pre
        t0 = time.monotonic()
        objs, err = fill(make, want + 16)
        n = len(objs)
        t1 = time.monotonic()
        if while_full:
            while_full(err)
        close_all(objs)
        # Where the run's time goes (the suite has a time budget).
        print("# %s: %d created in %.1f s, freed in %.1f s" %
              (name, n, t1 - t0, time.monotonic() - t1), flush=True)
        ok = n == want and err == errno.ENOMEM
        why = "%d created (the limit %d less %d held), then %s" % (
            n, limit, pre, "errno %d" % err if err is not None else "no failure")
        point(ok, "%s: exactly max_%s = %d, then ENOMEM" % (name, name, limit), why)

    def other_pd(err):
        # The limits are per device: with every PD of this one taken, another still has its own.
        try:
            octx = Context(name=other)
            PD(octx).close()
            octx.close()
            why = None
        except PyverbsRDMAError as ex:
            why = "a PD on %s failed with errno %d" % (other, ex.error_code)
        point(why is None and err == errno.ENOMEM,
              "with every PD of %s taken, %s still allocates one" % (dev, other),
              why or "filling %s's PDs ended with %s" % (dev, err))

    kind("pd", a.max_pd, lambda: PD(ctx), "pd", other_pd if other else None)
    kind("cq", a.max_cq, lambda: CQ(ctx, 1), "cq")
    kind("mr", a.max_mr, lambda: MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE), "mr")
    kind("srq", a.max_srq, lambda: SRQ(pd, SrqInitAttr(SrqAttr(max_wr=1, max_sge=1))), "srq")
    ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=gid_index), is_global=1, port_num=1)
    kind("ah", a.max_ah, lambda: AH(pd, attr=ah_attr))
    kind("mw", a.max_mw, lambda: MW(pd, e.IBV_MW_TYPE_2))
    cap = QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    kind("qp", a.max_qp,
         lambda: QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)), "qp")

    cq.close()
    pd.close()
    ctx.close()
    after = held(dev)
    point(after == base, "every object freed: %s's counts are back to %s" % (dev, base),
          "now %s (created %s)" % (after, mine))


if __name__ == "__main__":
    main()
