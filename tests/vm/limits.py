#!/usr/bin/python3
"""The limits a device advertises (ibv_query_device, as `ibv_devinfo -v` prints them) hold:
for each, a resource at the limit is created and one past it is refused with the errno the
verbs man pages give (EINVAL). Capability flags: every flag the device sets must be one whose
guest test is named below (a new flag needs a test first).

Points: max_qp_wr (send and receive), max_sge (send and receive), max_cqe, max_srq_wr,
max_srq_sge, max_qp_rd_atom (max_dest_rd_atomic at RTR), max_qp_init_rd_atom (max_rd_atomic at
RTS), max_pkeys (the P_Key index at INIT), the capability flags.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (see run_points in lib.sh).
usage: limits.py DEV GID_INDEX"""
import errno
import os
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqInitAttr, SrqAttr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import point  # noqa: E402

# ibv_device_cap_flags and the extended ones of ibv_query_device_ex (verbs.h values: rdma-core
# 44's pyverbs does not name them all) rvrdma may set, with the guest test that proves each.
PROVEN = {
    1 << 4: "AUTO_PATH_MIG: 41-apm, 42-apm-sample",
    1 << 10: "PORT_ACTIVE_EVENT: 04-port-events",
    1 << 11: "SYS_IMAGE_GUID: 03-attrs",
    1 << 12: "RC_RNR_NAK_GEN: 73-rnr-naks",
    1 << 13: "SRQ_RESIZE: 22-srq (srq_resize.py)",
    1 << 17: "MEM_WINDOW: 60-memory-windows",
    1 << 21: "MEM_MGT_EXTENSIONS: 52-nvmeof (fast registration, remote invalidation)",
    1 << 24: "MEM_WINDOW_TYPE_2B: 60-memory-windows (a window answers only on its QP)",
    1 << 38: "FLUSH_GLOBAL: 59-atomic-write (MRs with the access; FLUSH itself, which rdma-core 44 "
             "cannot post: the host simulation)",
    1 << 40: "ATOMIC_WRITE: 59-atomic-write",
}



def refused(fn):
    """None if `fn` fails with EINVAL, else what happened instead."""
    try:
        obj = fn()
    except PyverbsRDMAError as ex:
        return None if ex.error_code == errno.EINVAL else "errno %d, not EINVAL" % ex.error_code
    obj.close()
    return "accepted"


def accepted(fn):
    """None if `fn` succeeds (the object is closed again), else the error."""
    try:
        fn().close()
    except PyverbsRDMAError as ex:
        return "refused with errno %d" % ex.error_code
    return None


def limit_point(desc, at, past):
    why = accepted(at)
    if why is None:
        why = refused(past)
        why = None if why is None else "one past the limit: " + why
    else:
        why = "at the limit: " + why
    point(why is None, desc, why)


def main():
    ctx = Context(name=sys.argv[1])
    gid_index = int(sys.argv[2])
    a = ctx.query_device()
    pd = PD(ctx)
    cq = CQ(ctx, 16)

    def qp(send_wr=1, recv_wr=1, send_sge=1, recv_sge=1):
        cap = QPCap(max_send_wr=send_wr, max_recv_wr=recv_wr, max_send_sge=send_sge,
                    max_recv_sge=recv_sge)
        return lambda: QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))

    n = a.max_qp_wr
    limit_point("max_qp_wr %d: a send queue that deep, not deeper" % n, qp(send_wr=n),
                qp(send_wr=n + 1))
    limit_point("max_qp_wr %d: a receive queue that deep, not deeper" % n, qp(recv_wr=n),
                qp(recv_wr=n + 1))
    n = a.max_sge
    limit_point("max_sge %d: send WRs with that many SGEs, not more" % n, qp(send_sge=n),
                qp(send_sge=n + 1))
    limit_point("max_sge %d: receive WRs with that many SGEs, not more" % n, qp(recv_sge=n),
                qp(recv_sge=n + 1))
    n = a.max_cqe
    limit_point("max_cqe %d: a CQ that big, not bigger" % n, lambda: CQ(ctx, n),
                lambda: CQ(ctx, n + 1))

    def srq(wr, sge):
        return lambda: SRQ(pd, SrqInitAttr(SrqAttr(max_wr=wr, max_sge=sge)))

    n = a.max_srq_wr
    limit_point("max_srq_wr %d: an SRQ that deep, not deeper" % n, srq(n, 1), srq(n + 1, 1))
    n = a.max_srq_sge
    limit_point("max_srq_sge %d: SRQ WRs with that many SGEs, not more" % n, srq(1, n),
                srq(1, n + 1))

    gid = ctx.query_gid(1, gid_index)

    def modify_point(desc, prepare, attr_fn, mask):
        """A fresh RC QP connected to itself, brought through `prepare` states, then `attr_fn`
        at the limit (accepted) and past it (EINVAL) for the last transition."""
        def make(over):
            q = qp()()
            try:
                prepare(q)
                at = QPAttr()
                attr_fn(at, over)
                q.modify(at, mask)
            except PyverbsRDMAError:
                q.close()
                raise
            return q
        limit_point(desc, lambda: make(False), lambda: make(True))

    def to_init(q, pkey_index=0):
        at = QPAttr()
        at.qp_state = e.IBV_QPS_INIT
        at.pkey_index = pkey_index
        at.port_num = 1
        at.qp_access_flags = e.IBV_ACCESS_REMOTE_READ
        q.modify(at, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
                 e.IBV_QP_ACCESS_FLAGS)

    def rtr_attr(at, q, dest_rd):
        at.qp_state = e.IBV_QPS_RTR
        at.path_mtu = e.IBV_MTU_1024
        at.dest_qp_num = q.qp_num
        at.rq_psn = 0
        at.max_dest_rd_atomic = dest_rd
        at.min_rnr_timer = 12
        at.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=gid_index), is_global=1,
                            port_num=1)

    RTR_MASK = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
                e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)

    # max_dest_rd_atomic: the Reads and atomics this QP answers at once (max_qp_rd_atom).
    n = a.max_qp_rd_atom
    holder = {}

    def prep_init(q):
        to_init(q)
        holder["q"] = q

    def dest_attr(at, over):
        rtr_attr(at, holder["q"], n + 1 if over else n)

    modify_point("max_qp_rd_atom %d: max_dest_rd_atomic that high at RTR, not higher" % n,
                 prep_init, dest_attr, RTR_MASK)

    # max_rd_atomic: the Reads and atomics this QP has outstanding (max_qp_init_rd_atom).
    m = a.max_qp_init_rd_atom

    def prep_rtr(q):
        to_init(q)
        at = QPAttr()
        rtr_attr(at, q, 1)
        q.modify(at, RTR_MASK)

    def rts_attr(at, over):
        at.qp_state = e.IBV_QPS_RTS
        at.timeout = 14
        at.retry_cnt = 7
        at.rnr_retry = 7
        at.sq_psn = 0
        at.max_rd_atomic = m + 1 if over else m

    modify_point("max_qp_init_rd_atom %d: max_rd_atomic that high at RTS, not higher" % m,
                 prep_rtr, rts_attr,
                 e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
                 e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    p = ctx.query_port(1).pkey_tbl_len

    def init_with(index):
        def make():
            q = qp()()
            try:
                to_init(q, index)
            except PyverbsRDMAError:
                q.close()
                raise
            return q
        return make

    limit_point("pkey_tbl_len %d: P_Key index %d at INIT, not %d" % (p, p - 1, p),
                init_with(p - 1), init_with(p))

    flags = a.device_cap_flags | ctx.query_device_ex().device_cap_flags_ex
    unproven = [f for f in range(64) if flags & (1 << f) and (1 << f) not in PROVEN]
    print("# device_cap_flags 0x%x: %s" % (flags, "; ".join(
        t for f, t in sorted(PROVEN.items()) if flags & f)))
    point(not unproven, "every capability flag it sets has a test",
          "flags without a test: " + ", ".join("0x%x" % (1 << f) for f in unproven))


if __name__ == "__main__":
    main()
