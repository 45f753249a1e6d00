#!/usr/bin/python3
"""End-to-end credits seen from user space (seed 003), with stock pyverbs: two RC QPs, one on
each device, connected to each other over the veth pair. The responder's RQ is empty, so a Send
must wait, and go as soon as the responder posts a receive, without an RNR NAK.

usage: credits.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B   (prints one line per check; exit 1 on
failure)"""
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

MSG = 3000  # three packets at MTU 1024


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

    def connect(self, peer):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = 0
        a.port_num = 1
        a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
                       e.IBV_QP_ACCESS_FLAGS)
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
        a.timeout = 20  # 4.3 s: a probe would only go after that
        a.retry_cnt = 7
        a.rnr_retry = 7
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


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        sys.exit(1)


def main():
    a = Side(sys.argv[1], int(sys.argv[2]))
    b = Side(sys.argv[3], int(sys.argv[4]))
    # A first: B's initial unsolicited ACK (credit count 0) then reaches an A ready to hear it.
    a.connect(b)
    b.connect(a)
    time.sleep(0.3)
    payload = bytes((i * 7) & 0xff for i in range(MSG))
    a.mr.write(payload, MSG)
    a.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, MSG, a.mr.lkey)]))
    check(a.poll(1.5) is None, "the Send waits while the responder's RQ is empty")
    t0 = time.time()
    b.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 4096, b.mr.lkey)]))
    wa = a.poll(3.0)
    dt = time.time() - t0
    check(wa is not None and wa.status == e.IBV_WC_SUCCESS,
          "the Send completes once the responder posts a receive (%.3f s)" % dt)
    wb = b.poll(3.0)
    check(wb is not None and wb.status == e.IBV_WC_SUCCESS and wb.byte_len == MSG,
          "the receive completes with all %d bytes" % MSG)
    check(b.mr.read(MSG, 0) == payload, "the data arrived intact")


if __name__ == "__main__":
    main()
