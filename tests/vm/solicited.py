#!/usr/bin/python3
"""Solicited events (IBA 11.4.2.2, ibv_req_notify_cq(cq, 1)) with stock pyverbs: device A sends
to device B, whose CQ has a completion channel.

Points, on one RC QP pair:
  quiet      armed for solicited completions only, B's CQ raises no event for a Send without
             IBV_SEND_SOLICITED (its completion is there to poll);
  send       ... and raises one for a Send with IBV_SEND_SOLICITED;
  write-imm  ... and for a solicited RDMA Write with Immediate;
  next       armed for the next completion, a Send without the flag raises one.
Every received message is compared byte for byte with what A sent.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (see run_points in lib.sh).
usage: solicited.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B"""
import os
import select
import sys

import pyverbs.enums as e
from pyverbs.cq import CQ, CompChannel
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import Dev, Qp, event_fds, point  # noqa: E402

# How long a CQ may stay silent before "no event" is believed (TCG, debug kernel included).
QUIET_SECS = float(os.environ.get("RVRDMA_TIME_SCALE", "1")) * 1.0
EVENT_SECS = 10.0
LEN = 3000  # three packets at MTU 1024: SE belongs on the last one only


class ChannelQp(Qp):
    """An RC QP whose one CQ reports to a completion channel; `chfd` is the channel's fd."""

    def __init__(self, dev):
        self.dev = dev
        self.qp_type = e.IBV_QPT_RC
        before = event_fds()
        self.ch = CompChannel(dev.ctx)
        fds = event_fds() - before
        if len(fds) != 1:
            raise RuntimeError("cannot find the completion channel's fd")
        self.chfd = fds.pop()
        self.cq = CQ(dev.ctx, 64, None, self.ch, 0)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(dev.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))

    def event_within(self, secs):
        """Whether the channel has an event within `secs`; takes and acknowledges it."""
        if not select.select([self.chfd], [], [], secs)[0]:
            return False
        self.ch.get_cq_event(self.cq)
        self.cq.ack_events(1)
        return True




def main():
    a = Dev(sys.argv[1], int(sys.argv[2]))
    b = Dev(sys.argv[3], int(sys.argv[4]))
    qa, qb = Qp(a), ChannelQp(b)
    qa.connect(qb)
    qb.connect(qa)
    qb.recv(8, length=LEN)
    seq = [0]

    def post(opcode, solicited):
        """A message of LEN fresh bytes from A; returns them."""
        seq[0] += 1
        data = bytes((seq[0] * 7 + i) % 251 for i in range(LEN))
        a.mr.write(data, LEN, 0)
        wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(a.mr.buf, LEN, a.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED | (e.IBV_SEND_SOLICITED if solicited else 0))
        if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM:
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 8192)
            wr.imm_data = seq[0]
        qa.qp.post_send(wr)
        wc = qa.poll(EVENT_SECS)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            raise RuntimeError("A's send did not complete: %s" % (wc and wc.status))
        return data

    def received(data, at):
        """B's receive completion and the bytes it placed (at offset `at` of B's MR)."""
        wc = qb.poll(EVENT_SECS)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            return "receive completion: %s" % (wc and wc.status)
        got = b.mr.read(LEN, at)
        if got != data:
            return "received bytes differ from those sent"
        return None

    def case(desc, opcode, solicited, arm_solicited, want_event):
        qb.cq.req_notify(1 if arm_solicited else 0)
        at = 8192 if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM else 0
        data = post(opcode, solicited)
        got = qb.event_within(EVENT_SECS if want_event else QUIET_SECS)
        why = received(data, at)
        if why is None and got != want_event:
            why = "an event came" if got else "no event within %.0f s" % EVENT_SECS
        if opcode != e.IBV_WR_RDMA_WRITE_WITH_IMM:
            qb.recv(1, length=LEN)
        point(why is None, desc, why)

    case("armed for solicited: a Send without IBV_SEND_SOLICITED raises no CQ event",
         e.IBV_WR_SEND, False, True, False)
    case("armed for solicited: a solicited Send raises the CQ event",
         e.IBV_WR_SEND, True, True, True)
    case("armed for solicited: a solicited RDMA Write with Immediate raises the CQ event",
         e.IBV_WR_RDMA_WRITE_WITH_IMM, True, True, True)
    case("armed for the next completion: a Send without the flag raises the CQ event",
         e.IBV_WR_SEND, False, False, True)


if __name__ == "__main__":
    main()
