#!/usr/bin/python3
"""Resource exhaustion: creates PDs, CQs, MRs, SRQs, AHs, MWs and QPs on one device until a create
fails; each kind must stop exactly at the limit `ibv_query_device` advertises (counting what the
kernel already holds on the device, from `rdma resource show`), with ENOMEM, the errno the
verbs man pages give for a device out of resources. Then everything is freed and the device's
resource counts are back where they were (nothing leaked). With DEV_B, a PD on DEV_B can still
be allocated while DEV_A holds every PD it may: the limits are per device.

The objects are made and freed by `exhaust_fill` (exhaust_fill.c, next to this file), one run
per kind: tens of thousands of objects a kind, and under TCG pyverbs' own cost per object was
most of the test's time.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (see run_points in lib.sh).
usage: exhaust.py DEV_A GID_INDEX_A [DEV_B]"""
import errno
import json
import os
import subprocess
import sys

from pyverbs.device import Context

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from rcpair import point  # noqa: E402

FILL = os.path.join(HERE, "exhaust_fill")


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


def fill(dev, name, cap, *extra):
    """Runs exhaust_fill: makes up to `cap` objects of kind `name`, then frees them. Returns its
    report (exhaust_fill.c) as numbers by name: made, errno (0: `cap` made), create_s, free_s,
    and where given other (0: the PD on the other device was made) and free_errno."""
    run = subprocess.run([FILL, dev, name, str(cap)] + [str(x) for x in extra],
                         capture_output=True, text=True)
    rep = dict(w.split("=", 1) for w in run.stdout.split() if "=" in w)
    if run.returncode != 0 or not {"made", "errno", "create_s", "free_s"} <= rep.keys():
        raise RuntimeError("exhaust_fill %s %s: exit status %d, %s%s" % (
            dev, name, run.returncode, run.stdout.strip(), run.stderr.strip()))
    return {k: float(v) for k, v in rep.items()}


def main():
    dev = sys.argv[1]
    gid_index = int(sys.argv[2])
    other = sys.argv[3] if len(sys.argv) > 3 else None
    ctx = Context(name=dev)
    a = ctx.query_device()
    ctx.close()
    base = held(dev)

    def kind(name, limit, held_key=None):
        """Fills one kind to its limit and frees it; returns exhaust_fill's report."""
        # What the device holds already (the kernel's objects) leaves the rest. exhaust_fill's
        # own parents (a PD for the kinds that need one, a CQ for the QPs) count against no
        # kind it fills.
        now = held(dev)
        pre = now[held_key] if held_key else 0
        if held_key == "qp":
            pre -= gsi_qps(dev)
        if held_key == "mr":
            # Each kernel PD (the device has no local DMA lkey) holds an internal DMA MR that
            # `rdma resource` does not list.
            pre += base["pd"]
        want = limit - pre
        extra = [gid_index] + ([other] if name == "pd" and other else [])
        rep = fill(dev, name, want + 16, *extra)
        n, err = int(rep["made"]), int(rep["errno"])
        # Where the run's time goes (the suite has a time budget).
        print("# %s: %d created in %.1f s, freed in %.1f s" %
              (name, n, rep["create_s"], rep["free_s"]), flush=True)
        ok = n == want and err == errno.ENOMEM and "free_errno" not in rep
        why = "%d created (the limit %d less %d held), then %s%s" % (
            n, limit, pre, "errno %d" % err if err else "no failure",
            ", a free failed with errno %d" % rep["free_errno"] if "free_errno" in rep else "")
        return rep, ok, why, err

    rep, ok, why, err = kind("pd", a.max_pd, "pd")
    if other:
        # The limits are per device: with every PD of this one taken, another still has its own.
        o = rep.get("other")
        if o != 0:
            why = "a PD on %s: %s" % (other, "no report" if o is None else "errno %d" % o)
        else:
            why = "filling %s's PDs ended with %s" % (
                dev, "errno %d" % err if err else "no failure")
        point(o == 0 and err == errno.ENOMEM,
              "with every PD of %s taken, %s still allocates one" % (dev, other), why)
    point(ok, "pd: exactly max_pd = %d, then ENOMEM" % a.max_pd, why)
    for name, limit, key in (("cq", a.max_cq, "cq"), ("mr", a.max_mr, "mr"),
                             ("srq", a.max_srq, "srq"), ("ah", a.max_ah, None),
                             ("mw", a.max_mw, None), ("qp", a.max_qp, "qp")):
        _, ok, why, _ = kind(name, limit, key)
        point(ok, "%s: exactly max_%s = %d, then ENOMEM" % (name, name, limit), why)

    after = held(dev)
    point(after == base, "every object freed: %s's counts are back to %s" % (dev, base),
          "now %s" % after)


if __name__ == "__main__":
    main()
