#!/usr/bin/python3
"""Seed 004 (the Initialized state) seen from user space with stock pyverbs:
  - a QP in Init refuses Post Send at once (the verb fails; nothing is queued),
  - it accepts Post Receive (the WQE waits, no completion),
  - inbound packets to a QP in Init are silently dropped: a peer in RTS that sends to it gets
    no ACK and ends with a retry-exceeded completion, and the Init QP's receive stays pending.

usage: seed004.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B"""
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR


class Side:
    def __init__(self, dev, gid_index):
        self.ctx = Context(name=dev)
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(1, gid_index)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        self.mr = MR(self.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))

    def init(self):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = 0
        a.port_num = 1
        a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
                       e.IBV_QP_ACCESS_FLAGS)

    def rts(self, peer):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTR
        a.path_mtu = e.IBV_MTU_1024
        a.dest_qp_num = peer.qp.qp_num
        a.rq_psn = 0
        a.max_dest_rd_atomic = 1
        a.min_rnr_timer = 12
        gr = GlobalRoute(dgid=peer.gid, sgid_index=self.gid_index)
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
                       e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTS
        a.timeout = 12  # 16.8 ms
        a.retry_cnt = 2
        a.rnr_retry = 0
        a.sq_psn = 0
        a.max_rd_atomic = 1
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
                       e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def poll(self, secs):
        end = time.time() + secs
        while time.time() < end:
            n, wcs = self.cq.poll()
            if n:
                return wcs[0]
            time.sleep(0.001)
        return None

    def send_wr(self):
        return SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(self.mr.buf, 64, self.mr.lkey)])


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        sys.exit(1)


def main():
    a = Side(sys.argv[1], int(sys.argv[2]))
    b = Side(sys.argv[3], int(sys.argv[4]))
    b.init()
    try:
        b.qp.post_send(b.send_wr())
        refused = False
    except PyverbsRDMAError:
        refused = True
    check(refused, "Post Send on a QP in Init fails at once")
    b.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))
    check(True, "Post Receive on a QP in Init is accepted")
    a.init()
    a.rts(b)
    a.qp.post_send(a.send_wr())
    wc = a.poll(10.0)
    check(wc is not None and wc.status == e.IBV_WC_RETRY_EXC_ERR,
          "a Send to the QP in Init is never acknowledged (status %s)" %
          (None if wc is None else wc.status))
    check(b.poll(0.5) is None, "the Init QP's receive stays pending: the packets were dropped")


if __name__ == "__main__":
    main()
