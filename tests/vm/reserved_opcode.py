#!/usr/bin/python3
"""Seed 001 on the wire: an RC QP answers a packet whose BTH opcode is reserved in the RC range.

Device A's QP and device B's QP are connected (stock pyverbs, rcpair.py); a Send from A lands in
B's first receive, byte for byte. Then, from A's network namespace, crafted packets with a
valid ICRC (roce_fuzz.py's) and A's address go to B's QP, at B's expected PSN (ePSN, queried):

  ahead     opcode 0x1F at ePSN + 5: a PSN sequence error comes first (class B: a sequence NAK,
            B's `seq_naks_sent` counts it); B stays in RTS;
  other     opcode 0xC0 (manufacturer-specific, not RC) at the ePSN: dropped, B stays in RTS;
  reserved  opcode 0x1F at the ePSN: Table 17-7 "Unsupported or Reserved Opcode", class C: an
            Invalid Request NAK, B's QP enters Error, its receives are flushed (WR_FLUSH_ERR)
            and, no receive WQE being in use, the affiliated event QP_REQ_ERR is raised;
  nak       A's next RDMA Write is answered by that NAK or by nothing: it completes with
            REM_INV_REQ_ERR or RETRY_EXC_ERR, never successfully.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (see run_points in lib.sh).
usage: reserved_opcode.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B NETNS_A ADDR_A ADDR_B
       reserved_opcode.py send SRC DST QPN PSN OPCODE (run in A's netns: one packet)"""
import os
import random
import socket
import struct
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.qp import QPAttr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import Dev, Qp, link_counters, point, status_name  # noqa: E402
from roce_fuzz import ROCE_PORT, datagram  # noqa: E402

RESERVED = 0x1F  # RC range (top bits 000), no operation assigned (IBA Table 38)
OTHER = 0xC0  # manufacturer-specific: no transport this QP speaks
SECS = 10.0 * float(os.environ.get("RVRDMA_TIME_SCALE", "1"))


def send_one(src, dst, qpn, psn, opcode):
    """One packet from this netns: BTH (AckReq set, P_Key 0xFFFF) and 8 payload bytes."""
    roce = struct.pack(">BBHII", opcode, 0, 0xFFFF, qpn, 1 << 31 | psn) + b"reserved"
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.sendto(datagram(random.Random(psn), src, dst, roce), (dst, ROCE_PORT))


def inject(ns, src, dst, qpn, psn, opcode):
    """Runs `send_one` in netns `ns`; True when it went out."""
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, os.path.abspath(__file__),
                        "send", src, dst, str(qpn), str(psn), str(opcode)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("# send failed: %s" % r.stderr.strip())
    return r.returncode == 0


def state_and_epsn(qp):
    attr, _ = qp.qp.query(e.IBV_QP_STATE | e.IBV_QP_RQ_PSN)
    return attr.qp_state, attr.rq_psn


def seq_naks_sent(dev):
    return link_counters(dev).get("seq_naks_sent")


def wait_state(qp, want):
    end = time.time() + SECS
    while time.time() < end:
        if state_and_epsn(qp)[0] == want:
            return True
        time.sleep(0.01)
    return False


def main():
    if sys.argv[1:2] == ["send"]:
        src, dst, qpn, psn, opcode = sys.argv[2:7]
        send_one(src, dst, int(qpn), int(psn), int(opcode))
        return 0
    dev_a, gid_a, dev_b, gid_b, ns_a, addr_a, addr_b = sys.argv[1:8]
    a = Dev(dev_a, int(gid_a))
    b = Dev(dev_b, int(gid_b))
    qa, qb = Qp(a), Qp(b)
    qa.connect(qb)
    qb.connect(qa)
    qb.recv(3)
    msg = bytes(random.Random(1).getrandbits(8) for _ in range(64))
    a.mr.write(msg, len(msg))
    qa.send()
    wa, wb = qa.poll(SECS), qb.poll(SECS)
    got = b.mr.read(len(msg), 0)
    if not (wa and wb and wa.status == wb.status == e.IBV_WC_SUCCESS and got == msg):
        point(False, "the pair moves a Send intact first", "completions %s %s, data %s" % (
            wa and status_name(wa.status), wb and status_name(wb.status), got == msg))
        return 1
    qpn = qb.qp.qp_num
    state, epsn = state_and_epsn(qb)

    naks = seq_naks_sent(dev_b)
    ok = inject(ns_a, addr_a, addr_b, qpn, (epsn + 5) & 0xFFFFFF, RESERVED)
    end = time.time() + SECS
    while ok and seq_naks_sent(dev_b) != naks + 1 and time.time() < end:
        time.sleep(0.01)
    after = seq_naks_sent(dev_b)
    point(ok and after == naks + 1 and state_and_epsn(qb) == (e.IBV_QPS_RTS, epsn),
          "ahead of the ePSN a reserved opcode draws a sequence NAK and the QP stays in RTS",
          "seq_naks_sent %s -> %s, state/ePSN %s" % (naks, after, state_and_epsn(qb)))

    # The drop is counted (qp_dropped): the packet reached the QP and was handled.
    dropped = link_counters(dev_b).get("qp_dropped")
    ok = inject(ns_a, addr_a, addr_b, qpn, epsn, OTHER)
    end = time.time() + SECS
    while ok and link_counters(dev_b).get("qp_dropped") == dropped and time.time() < end:
        time.sleep(0.01)
    after = link_counters(dev_b).get("qp_dropped")
    point(ok and dropped is not None and after == dropped + 1 and
          state_and_epsn(qb) == (e.IBV_QPS_RTS, epsn),
          "a manufacturer-specific opcode at the ePSN is dropped and the QP stays in RTS",
          "qp_dropped %s -> %s, state/ePSN %s, want RTS at %d" % (
              dropped, after, state_and_epsn(qb), epsn))

    ok = inject(ns_a, addr_a, addr_b, qpn, epsn, RESERVED)
    in_error = ok and wait_state(qb, e.IBV_QPS_ERR)
    flushed = [qb.poll(SECS) for _ in range(2)]
    event = b.event_pending(SECS) and b.events(1)[0]
    point(in_error and all(w and w.status == e.IBV_WC_WR_FLUSH_ERR for w in flushed) and
          event == e.IBV_EVENT_QP_REQ_ERR,
          "a reserved RC opcode at the ePSN: the QP enters Error, receives flushed, QP_REQ_ERR",
          "error %s, receives %s, event %s" % (
              in_error, [w and status_name(w.status) for w in flushed], event))

    qa.write(b.mr.rkey, b.mr.buf)
    w = qa.poll(SECS * 20)
    point(w is not None and w.status in (e.IBV_WC_REM_INV_REQ_ERR, e.IBV_WC_RETRY_EXC_ERR),
          "the requester's next Write fails (the NAK, or no answer from the QP in Error)",
          "completion %s" % (w and status_name(w.status)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
