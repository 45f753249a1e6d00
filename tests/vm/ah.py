#!/usr/bin/python3
"""Address handles from pyverbs: 64 created with RoCE v2 GRHs of varied attributes and destroyed;
AHs the verbs layer must refuse are refused with EINVAL (ib_core's rdma_check_ah_attr: a RoCE port
needs a GRH, the port must exist, the source GID index must be in the table).
User space cannot read an AH back: libibverbs has no query verb for AHs and uverbs no such command
(the kernel's query_ah is for kernel callers), so the attributes are checked where they can be:
the kernel validates them at creation.
usage: ah.py DEV GID_INDEX"""
import errno
import sys

from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError

failed = False


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAILED: ") + what)
    failed |= not ok


def refused(pd, what, want, **attr):
    """Creating an AH on `pd` with `attr` fails with errno `want`."""
    try:
        AH(pd, attr=AHAttr(**attr)).close()
        check(False, "%s is refused with %s (it was created)" % (what, errno.errorcode[want]))
    except PyverbsRDMAError as ex:
        check(ex.error_code == want, "%s is refused with %s (errno %d: %s)" %
              (what, errno.errorcode[want], ex.error_code, ex))


def main():
    ctx = Context(name=sys.argv[1])
    idx = int(sys.argv[2])
    pd = PD(ctx)
    gid = ctx.query_gid(1, idx)
    table = ctx.query_port(1).gid_tbl_len
    ahs = []
    try:
        for i in range(64):
            gr = GlobalRoute(dgid=gid, sgid_index=idx, hop_limit=1 + 3 * i,
                             traffic_class=4 * i, flow_label=(i * 0x2345) & 0xFFFFF)
            ahs.append(AH(pd, attr=AHAttr(gr=gr, is_global=1, port_num=1, sl=i % 8)))
        err = None
    except PyverbsRDMAError as ex:
        err = ex
    check(err is None and len(ahs) == 64,
          "64 AHs with varied hop limit, traffic class, flow label and SL created (%d; %s)" %
          (len(ahs), err or "no error"))
    try:
        for a in ahs:
            a.close()
        err = None
    except PyverbsRDMAError as ex:
        err = ex
    check(err is None, "all destroyed (%s)" % (err or "no error"))
    gr = GlobalRoute(dgid=gid, sgid_index=idx)
    refused(pd, "an AH without a GRH on a RoCE port", errno.EINVAL, is_global=0, port_num=1)
    refused(pd, "an AH on port 2 of a one-port device", errno.EINVAL, gr=gr, is_global=1,
            port_num=2)
    refused(pd, "an AH on port 0", errno.EINVAL, gr=gr, is_global=1, port_num=0)
    # The first index past the table (sgid_index is 8 bits wide).
    check(table <= 255, "the GID table (%d entries) ends below index 256" % table)
    bad = GlobalRoute(dgid=gid, sgid_index=min(table, 255))
    refused(pd, "an AH with source GID index %d (table of %d)" % (min(table, 255), table),
            errno.EINVAL, gr=bad, is_global=1, port_num=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
