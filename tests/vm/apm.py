#!/usr/bin/python3
"""Automatic Path Migration between the two ports of two rvrdma devices, driven by stock pyverbs
(ibv_modify_qp with IBV_QP_ALT_PATH / IBV_QP_PATH_MIG_STATE, ibv_get_async_event).

Topology (tests/vm/lib.sh, topo_setup 2): DEV_A has port 1 on veth0 (10.77.0.1) and port 2 on
veth2 (10.77.1.1) in netns rvA; DEV_B has port 1 on veth1 (10.77.0.2) and port 2 on veth3
(10.77.1.2) in rvB. One RC QP on each; the primary path uses port 1, the alternate port 2.

Scenarios (IBA 17.2.8; seeds 000 and 002):
  failover  both sides arm the alternate path; A streams Sends and RDMA Writes (data checked) to
            B; link A is cut mid-stream: A's retries run out, A migrates (MigReq=1), B validates
            and migrates, both raise PATH_MIG, nothing is lost, duplicated or failed. Then link A
            comes back, both load port 1 as the new alternate path and re-arm, link B is cut, and
            the QPs migrate back the same way.
  failover_netem  the same first cut made by tc netem (100% loss) with the link left up.
  command   the alternate path loaded in Init -> RTR and armed in RTR -> RTS; migration by
            Modify QP (PATH_MIG_STATE=MIGRATED) on A, with no link cut.
  mig_err   B's alternate path names a remote address A does not send from: A's MigReq=1
            packets are dropped by B with PATH_MIG_ERR; B stays ARMED on its primary path.
  no_alt    no alternate path: the cut ends in a retry-exceeded completion, every later WR is
            flushed, the QP is in Error and no PATH_MIG is raised.

usage: apm.py DEV_A DEV_B SCENARIO"""
import os
import select
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.qp import QPAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from rcpair import Dev, Qp, gid_index, link_counters

NS = {"a": os.environ.get("NS_A", "rvA"), "b": os.environ.get("NS_B", "rvB")}
ADDR = {("a", 1): "10.77.0.1", ("a", 2): "10.77.1.1", ("b", 1): "10.77.0.2", ("b", 2): "10.77.1.2"}
LINK = {1: "veth0", 2: "veth2"}  # the rvA end of each link
MSG = 256  # bytes per message
RECV_SLOTS = 32  # receive buffers at the start of B's MR
WRITE_BASE = 64 * 1024  # RDMA Write targets in B's MR
WRITE_SLOTS = 64
WINDOW = 8  # outstanding WRs
TIMEOUT = 14  # local ACK timeout exponent: 4.096 us * 2^14 = 67 ms
EVENT_NAMES = {getattr(e, n): n[len("IBV_EVENT_"):] for n in dir(e) if n.startswith("IBV_EVENT_")}
failures = 0


def check(ok, what):
    """Prints one result line; counts failures (the script exits 1 if any)."""
    global failures
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def fatal(what):
    check(False, what)
    sys.exit(1)


def gid_index_of(dev, port, addr):
    """Index of the RoCE v2 GID of IPv4 `addr` on `dev`'s `port`; fatal if there is none."""
    i = gid_index(dev, port, addr)
    if i is None:
        fatal("no RoCE v2 GID for %s on %s port %d" % (addr, dev, port))
    return i


def gid_index_quiet(dev, port, addr):
    """`gid_index`, raising LookupError instead of failing the test."""
    i = gid_index(dev, port, addr)
    if i is None:
        raise LookupError(addr)
    return i


def ip(ns, *args):
    subprocess.run(["ip", "-n", ns] + list(args), check=True)


class Side:
    """A device, its PD, a 1 MiB MR, a CQ and one RC QP (rcpair's); and its async events."""

    def __init__(self, name, tag):
        self.tag = tag
        self.name = name
        self.events = []  # (time, event type)
        self.gidx = {p: gid_index_of(name, p, ADDR[(tag, p)]) for p in (1, 2)}
        self.dev = Dev(name, self.gidx[1], mr_size=1 << 20)
        if self.dev.evfd is None:
            fatal("cannot find the async event fd of %s" % name)
        self.ctx, self.mr = self.dev.ctx, self.dev.mr
        self.gid = {p: self.ctx.query_gid(p, self.gidx[p]) for p in (1, 2)}
        self.q = Qp(self.dev, cqe=256, depth=64)
        self.cq, self.qp = self.q.cq, self.q.qp

    def drain_events(self, wait=0.0):
        """Collects the queued async events, waiting up to `wait` seconds for the first."""
        while select.select([self.dev.evfd], [], [], wait)[0]:
            ev = self.ctx.get_async_event()
            self.events.append((time.monotonic(), ev.event_type))
            ev.ack()
            wait = 0.0

    def wait_event(self, want, secs):
        """Time of the first `want` event seen, waiting up to `secs` for it."""
        end = time.monotonic() + secs
        while True:
            self.drain_events()
            for t, ev in self.events:
                if ev == want:
                    return t
            left = end - time.monotonic()
            if left <= 0:
                return None
            self.drain_events(min(left, 0.2))

    def count(self, want):
        self.drain_events()
        return sum(1 for _, ev in self.events if ev == want)

    def names(self):
        self.drain_events()
        return [EVENT_NAMES.get(ev, str(ev)) for _, ev in self.events]

    def set_alt(self, a, peer, port, dgid=None):
        """Adds an alternate path over `port` (and PATH_MIG_STATE=REARM) to Modify QP attrs."""
        gr = GlobalRoute(dgid=dgid or peer.gid[port], sgid_index=self.gidx[port])
        a.alt_ah_attr = AHAttr(gr=gr, is_global=1, port_num=port)
        a.alt_port_num = port
        a.alt_pkey_index = 0
        a.alt_timeout = TIMEOUT
        a.path_mig_state = e.IBV_MIG_REARM
        return e.IBV_QP_ALT_PATH | e.IBV_QP_PATH_MIG_STATE

    def connect(self, peer, alt_port=None, alt_dgid=None, alt_at_rtr=False):
        """Reset -> Init -> RTR -> RTS on port 1; with `alt_port`, the RTR -> RTS step also loads
        the alternate path and rearms (with `alt_at_rtr`, Init -> RTR loads it and RTR -> RTS
        only rearms)."""

        def at_rtr(a):
            if not (alt_port and alt_at_rtr):
                return 0
            # Init -> RTR takes an alternate path but not PATH_MIG_STATE (IBA Table 227).
            return self.set_alt(a, peer, alt_port, alt_dgid) & ~e.IBV_QP_PATH_MIG_STATE

        def at_rts(a):
            if not alt_port:
                return 0
            if alt_at_rtr:
                a.path_mig_state = e.IBV_MIG_REARM
                return e.IBV_QP_PATH_MIG_STATE
            return self.set_alt(a, peer, alt_port, alt_dgid)

        self.q.to_init()
        self.q.to_rtr(peer.q, min_rnr_timer=1, extra=at_rtr)
        self.q.to_rts(timeout=TIMEOUT, extra=at_rts)

    def rearm(self, peer, port):
        """RTS -> RTS: loads a new alternate path over `port` and rearms."""
        a = QPAttr()
        self.qp.modify(a, self.set_alt(a, peer, port))

    def migrate(self):
        """RTS -> RTS with PATH_MIG_STATE=MIGRATED: migration by command."""
        a = QPAttr()
        a.path_mig_state = e.IBV_MIG_MIGRATED
        self.qp.modify(a, e.IBV_QP_PATH_MIG_STATE)

    def query(self):
        """(QP state, path_mig_state, port_num, alt_port_num)."""
        a, _ = self.qp.query(e.IBV_QP_STATE | e.IBV_QP_PATH_MIG_STATE | e.IBV_QP_PORT |
                             e.IBV_QP_ALT_PATH | e.IBV_QP_AV)
        return a.qp_state, a.path_mig_state, a.ah_attr.port_num, a.alt_port_num


def payload(seq):
    head = seq.to_bytes(8, "little")
    return head + bytes((seq * 7 + i) & 0xFF for i in range(MSG - 8))


class Stream:
    """A streams Sends (even sequence numbers) and RDMA Writes (odd ones) to B; B checks every
    received message and every written buffer."""

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.posted = 0
        self.done = 0  # A's completions
        self.errors = []  # (seq, status) of A's failed completions
        self.received = []  # B's received sequence numbers, in order
        self.bad_data = 0
        self.outstanding = {}  # wr_id -> seq
        self.t_first_after = None
        self.cut_at = None
        self.received_at_cut = 0
        for slot in range(RECV_SLOTS):
            self.post_recv(slot)

    def post_recv(self, slot):
        b = self.b
        b.qp.post_recv(RecvWR(wr_id=slot, num_sge=1,
                              sg=[SGE(b.mr.buf + slot * MSG, MSG, b.mr.lkey)]))

    def post(self, seq):
        a = self.a
        off = 2 * WRITE_BASE + (seq % WRITE_SLOTS) * MSG  # A's source buffer for this message
        a.mr.write(payload(seq), MSG, off)
        sge = [SGE(a.mr.buf + off, MSG, a.mr.lkey)]
        if seq % 2 == 0:
            wr = SendWR(wr_id=seq, opcode=e.IBV_WR_SEND, num_sge=1, sg=sge)
        else:
            wr = SendWR(wr_id=seq, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=sge)
            wr.set_wr_rdma(self.b.mr.rkey, self.b.mr.buf + WRITE_BASE + (seq % WRITE_SLOTS) * MSG)
        a.qp.post_send(wr)
        self.outstanding[seq] = seq
        self.posted += 1

    def poll(self):
        self.a.drain_events()
        self.b.drain_events()
        n, wcs = self.a.cq.poll(16)
        now = time.monotonic()
        for wc in wcs[:n]:
            seq = wc.wr_id
            self.outstanding.pop(seq, None)
            self.done += 1
            if self.cut_at is not None and self.t_first_after is None and \
                    wc.status == e.IBV_WC_SUCCESS:
                self.t_first_after = now
            if wc.status != e.IBV_WC_SUCCESS:
                self.errors.append((seq, wc.status))
            elif seq % 2 == 1:
                off = WRITE_BASE + (seq % WRITE_SLOTS) * MSG
                if self.b.mr.read(MSG, off) != payload(seq):
                    self.bad_data += 1
        n, wcs = self.b.cq.poll(16)
        for wc in wcs[:n]:
            if wc.status != e.IBV_WC_SUCCESS:
                self.errors.append(("recv", wc.status))
                continue
            slot = wc.wr_id
            data = self.b.mr.read(MSG, slot * MSG)
            seq = int.from_bytes(data[:8], "little")
            if data != payload(seq) or wc.byte_len != MSG:
                self.bad_data += 1
            self.received.append(seq)
            self.post_recv(slot)

    def run(self, count, cut=None, at=None, secs=60.0):
        """Posts `count` more messages (at most WINDOW outstanding) and waits for them; calls
        `cut()` once `at` messages of this run have completed."""
        start, target = self.posted, self.posted + count
        end = time.monotonic() + secs
        while time.monotonic() < end:
            while self.posted < target and len(self.outstanding) < WINDOW and not self.errors:
                self.post(self.posted)
            self.poll()
            if cut and self.cut_at is None and self.done - start >= at:
                self.cut_at = time.monotonic()
                self.received_at_cut = len(self.received)
                cut()
            if self.done >= self.posted and (self.posted >= target or self.errors):
                # Let B's last receive completions arrive.
                for _ in range(50):
                    self.poll()
                    if len(self.received) >= (self.posted + 1) // 2:
                        break
                    time.sleep(0.01)
                return
            time.sleep(0.0005)

    def check_clean(self, what):
        sends = list(range(0, self.posted, 2))
        check(self.done == self.posted, "%s: %d of %d WRs completed" %
              (what, self.done, self.posted))
        check(not self.errors, "%s: no failed completion (%s)" % (what, self.errors[:4]))
        check(self.received == sends, "%s: B received every Send once, in order (%d of %d)" %
              (what, len(self.received), len(sends)))
        check(self.bad_data == 0, "%s: every Send and RDMA Write carried the right data "
              "(%d bad)" % (what, self.bad_data))


def link(port, up):
    ip(NS["a"], "link", "set", LINK[port], "up" if up else "down")


def wait_port_active(sides, port, secs=30):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if all(s.ctx.query_port(port).state == e.IBV_PORT_ACTIVE for s in sides):
            return True
        time.sleep(0.2)
    return False


def arm(a, b, stream):
    """Both sides rearmed: a few messages carry MigReq=0 both ways; then both must be ARMED."""
    stream.run(4)
    qa, qb = a.query(), b.query()
    return check(qa[1] == e.IBV_MIG_ARMED and qb[1] == e.IBV_MIG_ARMED,
                 "both QPs ARMED after rearm and traffic (A %s, B %s)" % (qa, qb))


def migrate_on_cut(a, b, s, port, n_mig, cut=None):
    """Streams 200 messages and cuts the link of `port` after 40 (by `cut`, default: link
    down); checks the migration."""
    s.cut_at = None
    s.t_first_after = None
    s.run(200, cut=cut or (lambda: link(port, False)), at=40)
    s.check_clean("link %d cut" % port)
    other = 3 - port
    for side in (a, b):
        check(side.count(e.IBV_EVENT_PATH_MIG) == n_mig,
              "%s raised PATH_MIG (%d so far; events %s)" %
              (side.tag.upper(), side.count(e.IBV_EVENT_PATH_MIG), side.names()))
        st = side.query()
        check(st[0] == e.IBV_QPS_RTS and st[1] == e.IBV_MIG_MIGRATED and st[2] == other,
              "%s: RTS, MIGRATED, primary path now on port %d (%s)" %
              (side.tag.upper(), other, st))
    tmig = [t for t, ev in a.events if ev == e.IBV_EVENT_PATH_MIG]
    if s.t_first_after and tmig:
        print("# failover (link %d cut): first completion after %.0f ms, PATH_MIG on A after "
              "%.0f ms; the cut came with %d Sends received" %
              (port, (s.t_first_after - s.cut_at) * 1000, (tmig[-1] - s.cut_at) * 1000,
               s.received_at_cut), flush=True)


def failover(a, b):
    a.connect(b, alt_port=2)
    b.connect(a, alt_port=2)
    st = a.query()
    check(st[1] == e.IBV_MIG_REARM and st[3] == 2,
          "Modify QP loaded the alternate path on port 2 in REARM (%s)" % (st,))
    s = Stream(a, b)
    arm(a, b, s)
    try:
        migrate_on_cut(a, b, s, 1, 1)
        # Link A back; port 1 becomes the new alternate path; then link B fails.
        link(1, True)
        check(wait_port_active([a, b], 1), "port 1 ACTIVE again on both devices")
        a.rearm(b, 1)
        b.rearm(a, 1)
        arm(a, b, s)
        migrate_on_cut(a, b, s, 2, 2)
    finally:
        link(1, True)
        link(2, True)


def failover_netem(a, b):
    """As the first half of `failover`, but the link stays up and loses every packet."""
    a.connect(b, alt_port=2)
    b.connect(a, alt_port=2)
    s = Stream(a, b)
    arm(a, b, s)
    netem = ["tc", "-n", NS["a"], "qdisc", "add", "dev", LINK[1], "root", "netem", "loss", "100%"]
    try:
        migrate_on_cut(a, b, s, 1, 1, cut=lambda: subprocess.run(netem, check=True))
        check(a.count(e.IBV_EVENT_PORT_ERR) == 0, "no PORT_ERR: the link stayed up")
    finally:
        subprocess.run(["tc", "-n", NS["a"], "qdisc", "del", "dev", LINK[1], "root"])


def command(a, b):
    # This time the alternate path is loaded in Init -> RTR and armed in RTR -> RTS.
    a.connect(b, alt_port=2, alt_at_rtr=True)
    b.connect(a, alt_port=2, alt_at_rtr=True)
    st = a.query()
    check(st[1] == e.IBV_MIG_REARM and st[3] == 2,
          "alternate path loaded in Init -> RTR, REARM in RTR -> RTS (%s)" % (st,))
    s = Stream(a, b)
    arm(a, b, s)
    s.run(100, cut=a.migrate, at=30)
    s.check_clean("migration by command")
    for side in (a, b):
        check(side.wait_event(e.IBV_EVENT_PATH_MIG, 5) is not None,
              "%s raised PATH_MIG (events %s)" % (side.tag.upper(), side.names()))
        st = side.query()
        check(st[1] == e.IBV_MIG_MIGRATED and st[2] == 2,
              "%s: MIGRATED, primary path now on port 2 (%s)" % (side.tag.upper(), st))


def mig_err(a, b):
    # An address of A's port-2 netdev that A's QP never sends from.
    ip(NS["a"], "addr", "add", "10.77.1.9/24", "dev", LINK[2])
    try:
        wrong = None
        end = time.monotonic() + 30
        while wrong is None and time.monotonic() < end:
            try:
                wrong = a.ctx.query_gid(2, gid_index_quiet(a.name, 2, "10.77.1.9"))
            except LookupError:
                time.sleep(0.2)
        if wrong is None:
            fatal("10.77.1.9 never became a GID of port 2")
        a.connect(b, alt_port=2)
        b.connect(a, alt_port=2, alt_dgid=wrong)
        s = Stream(a, b)
        arm(a, b, s)
        a.migrate()
        s.run(4, secs=30)
        check(b.wait_event(e.IBV_EVENT_PATH_MIG_ERR, 10) is not None,
              "B raised PATH_MIG_ERR for MigReq packets from the wrong address (events %s)" %
              b.names())
        dropped = link_counters(b.name, 2).get("path_mig_errors", -1)
        check(b.count(e.IBV_EVENT_PATH_MIG_ERR) == 1 and dropped > 1,
              "one PATH_MIG_ERR for the %d retransmitted bad requests (rdma statistic "
              "path_mig_errors)" % dropped)
        st = b.query()
        check(st[0] == e.IBV_QPS_RTS and st[1] == e.IBV_MIG_ARMED and st[2] == 1,
              "B did not migrate: RTS, ARMED, primary path on port 1 (%s)" % (st,))
        check(b.count(e.IBV_EVENT_PATH_MIG) == 0, "B raised no PATH_MIG")
        check(s.errors and s.errors[0][1] == e.IBV_WC_RETRY_EXC_ERR,
              "A's requests went unanswered: retry exceeded (%s)" % s.errors[:2])
    finally:
        ip(NS["a"], "addr", "del", "10.77.1.9/24", "dev", LINK[2])


def no_alt(a, b):
    a.connect(b)
    b.connect(a)
    s = Stream(a, b)
    s.run(4)
    try:
        s.run(200, cut=lambda: link(1, False), at=40)
        # Anything still posted after the error is flushed; collect it.
        end = time.monotonic() + 10
        while s.done < s.posted and time.monotonic() < end:
            s.poll()
            time.sleep(0.01)
    finally:
        link(1, True)
    check(s.done == s.posted, "every posted WR completed (%d of %d)" % (s.done, s.posted))
    st = [status for seq, status in s.errors if seq != "recv"]
    check(st and st[0] == e.IBV_WC_RETRY_EXC_ERR,
          "the first failed WR ended with retry exceeded (%s)" % st[:3])
    check(all(x == e.IBV_WC_WR_FLUSH_ERR for x in st[1:]),
          "every later WR was flushed (%d flushed)" % (len(st) - 1))
    check(a.query()[0] == e.IBV_QPS_ERR, "A's QP is in Error")
    check(a.count(e.IBV_EVENT_PATH_MIG) == 0, "no PATH_MIG without an alternate path")


SCENARIOS = {"failover": failover, "failover_netem": failover_netem, "command": command, "mig_err": mig_err, "no_alt": no_alt}


def main():
    a = Side(sys.argv[1], "a")
    b = Side(sys.argv[2], "b")
    SCENARIOS[sys.argv[3]](a, b)
    print("# events on A: %s" % a.names())
    print("# events on B: %s" % b.names())
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
