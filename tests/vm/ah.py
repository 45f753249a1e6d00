#!/usr/bin/python3
"""Address handles from pyverbs: create (RoCE v2 GRH), query back, destroy, many at once.
usage: ah.py DEV GID_INDEX"""
import sys

from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.device import Context
from pyverbs.pd import PD


def main():
    ctx = Context(name=sys.argv[1])
    idx = int(sys.argv[2])
    pd = PD(ctx)
    gid = ctx.query_gid(1, idx)
    ahs = []
    for i in range(64):
        gr = GlobalRoute(dgid=gid, sgid_index=idx, hop_limit=64, traffic_class=i)
        ahs.append(AH(pd, attr=AHAttr(gr=gr, is_global=1, port_num=1)))
    print("ok: 64 AHs created")
    for a in ahs:
        a.close()
    print("ok: destroyed")
    try:
        AH(pd, attr=AHAttr(is_global=0, port_num=1))
        print("FAILED: an AH without a GRH was accepted on a RoCE port")
        sys.exit(1)
    except Exception:
        print("ok: an AH without a GRH is refused")


if __name__ == "__main__":
    main()
