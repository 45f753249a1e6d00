#!/usr/bin/python3
"""Benchmark helper (not a test) for scripts/bench-failover: how long a link cut stalls a running
RC stream.

One process opens both devices (ib devices are visible from every netns), connects one RC QP pair
over the link-1 addresses (10.77.0.1 <-> 10.77.0.2), and posts signaled RDMA Writes of --size
bytes from DEV_A to DEV_B continuously, --window of them outstanding, each completion stamped
with time.monotonic(). After --before seconds (and, with --mode spec or bonding, once both QPs
are ARMED) a second thread cuts link 1: `ip link set veth0 down` in netns rvA, sent as one
rtnetlink request from a socket made in rvA, so the cut's timestamp is taken by this process on
the same clock as the completions, immediately before the request (no ip(8) start-up in it).
The stream goes on for --after seconds past the cut (longer while nothing has completed yet, up
to --max-wait), then stops posting, waits for what is outstanding, checks that the last write of
every target slot landed, restores the link and waits for every port ACTIVE again.

Modes:
  spec     the spec's APM, done by this program: the alternate path over port 2 (DEV_B's port-2
           GID, 10.77.1.x) is loaded and armed at RTR -> RTS, as tests/vm/apm.py does; migration
           happens at retry exhaustion. Needs the ib_core patch the project carries
           (kernel/patches/0001-...): without it Modify QP with IBV_QP_ALT_PATH fails with EINVAL,
           and this prints "n/a ..." and exits 3.
  bonding  loads nothing; the device (apm_bonding=1, set by the caller) gives the QPs their
           alternate path; the cut waits until both are ARMED.
  none     loads nothing, waits for nothing (rdma_rxe over a Linux bond).

Output: "# ..." diagnostics, then one line
  result stall_ms=.. max_gap_ms=.. completions=.. errors=.. first_any_ms=.. max_gap_before_ms=..
         cut_call_ms=.. port_after=.. path_mig_events=..
  stall_ms       the cut -> the first completion of a write posted after the cut began (such a
                 write cannot have been acknowledged over the dead link, so this is a completion
                 over the new path; it can overstate the stall by one write's round trip, when
                 the window was full at the cut)
  first_any_ms   the cut -> the first completion of any write (may be an ACK already in flight)
  max_gap_ms     the longest time between consecutive completions, from --warmup seconds after
                 the stream started to its end
  max_gap_before_ms  the same before the cut only (the noise floor)
  cut_call_ms    how long the rtnetlink request took to return
and "FAIL <why>" (exit 1) when any completion failed (with its status), a write's data did not
land, the QPs never armed, or nothing completed after the cut.

usage: failover_stall.py DEV_A DEV_B --mode spec|bonding|none [options]"""
import argparse
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import threading
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE, SendWR

from rcpair import Dev, Qp, gid_index, status_name

SLOTS = 16  # target (and source) buffers; a slot is rewritten only SLOTS writes later
CLONE_NEWNET = 0x40000000
RTM_NEWLINK = 16
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
NLM_F_ACK = 4
IFF_UP = 1
EXIT_NA = 3


def note(msg):
    print("# " + msg, flush=True)


def fail(msg):
    print("FAIL " + msg, flush=True)


class NsLink:
    """Sets one interface of a named netns up or down with a single rtnetlink request, from a
    socket created in that netns (the thread enters it only to create the socket)."""

    def __init__(self, ns, ifname):
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open("/run/netns/" + ns, os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, "setns(%s): %s" % (ns, os.strerror(err)))
            try:
                self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                          socket.NETLINK_ROUTE)
                self.sock.bind((0, 0))
                self.index = socket.if_nametoindex(ifname)
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, "setns back: %s" % os.strerror(err))
        finally:
            os.close(own)
            os.close(target)
        self.name = "%s in %s" % (ifname, ns)
        self.seq = 0

    def request(self, up):
        """The RTM_NEWLINK request that sets the interface up or down (its sequence number is
        the next one)."""
        ifi = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, self.index, IFF_UP if up else 0, IFF_UP)
        return struct.pack("=LHHLL", 16 + len(ifi), RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK,
                           self.seq + 1, 0) + ifi

    def set(self, up, msg=None):
        """Sends `msg` (default: `request(up)`) and waits for the kernel's answer."""
        if msg is None:
            msg = self.request(up)
        self.seq += 1
        self.sock.send(msg)
        self.wait_ack()

    def wait_ack(self):
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, mtype, _, seq, _ = struct.unpack_from("=LHHLL", data, off)
                if mtype == NLMSG_ERROR and seq == self.seq:
                    err = struct.unpack_from("=i", data, off + 16)[0]
                    if err:
                        raise OSError(-err, "RTM_NEWLINK %s: %s" % (self.name, os.strerror(-err)))
                    return
                off += (length + 3) & ~3
                if length == 0:
                    break


class Cutter(threading.Thread):
    """Cuts the link once, timestamping just before the request and after it returned."""

    def __init__(self, link):
        super().__init__(daemon=True)
        self.link = link
        self.msg = link.request(False)
        self.t0 = self.t1 = None
        self.err = None

    def run(self):
        # As few bytecodes as possible between the timestamp and the send (which lets the GIL
        # go): the stream thread must not post, unseen, a write that the live link completes
        # after t0. The default GIL switch interval (5 ms) keeps this thread running that long.
        # The kernel handles the request within send() (rtnetlink runs in the sender's
        # context): the link is down when it returns, and the stream thread classifies its
        # completions against t0 meanwhile.
        send = self.link.sock.send
        msg = self.msg
        try:
            self.t0 = time.monotonic()
            send(msg)
            self.link.seq += 1
            self.link.wait_ack()
            self.t1 = time.monotonic()
        except Exception as ex:  # reported by the stream thread
            self.err = ex


class AltPathRefused(Exception):
    pass


class Side:
    def __init__(self, name, addr1, addr2, mr_size):
        self.name = name
        g1 = gid_index(name, 1, addr1)
        if g1 is None:
            fail("no RoCE v2 GID for %s on %s port 1" % (addr1, name))
            sys.exit(1)
        self.dev = Dev(name, g1, mr_size=mr_size)
        self.ctx, self.mr = self.dev.ctx, self.dev.mr
        self.gidx = {1: g1}
        self.gid = {1: self.dev.gid}
        self.addr2 = addr2
        self.q = Qp(self.dev, cqe=256, depth=64)
        self.cq, self.qp = self.q.cq, self.q.qp
        self.ports = self.ctx.query_device().phys_port_cnt

    def load_port2_gid(self):
        g2 = gid_index(self.name, 2, self.addr2)
        if g2 is None:
            return False
        self.gidx[2] = g2
        self.gid[2] = self.ctx.query_gid(2, g2)
        return True

    def connect(self, peer, timeout, retry_cnt, spec_alt):
        def alt(a):
            if not spec_alt:
                return 0
            a.alt_ah_attr = AHAttr(gr=GlobalRoute(dgid=peer.gid[2], sgid_index=self.gidx[2]),
                                   is_global=1, port_num=2)
            a.alt_port_num = 2
            a.alt_pkey_index = 0
            a.alt_timeout = timeout
            a.path_mig_state = e.IBV_MIG_REARM
            return e.IBV_QP_ALT_PATH | e.IBV_QP_PATH_MIG_STATE

        self.q.to_init()
        self.q.to_rtr(peer.q, min_rnr_timer=1)
        try:
            self.q.to_rts(timeout=timeout, retry_cnt=retry_cnt, rnr_retry=7, extra=alt)
        except PyverbsRDMAError as ex:
            # What a kernel without the ib_core patch answers to IBV_QP_ALT_PATH on RoCE.
            if spec_alt and ex.error_code == errno.EINVAL:
                raise AltPathRefused(str(ex)) from ex
            raise

    def mig_state(self):
        """(path_mig_state, primary port)."""
        a, _ = self.qp.query(e.IBV_QP_STATE | e.IBV_QP_PATH_MIG_STATE | e.IBV_QP_PORT |
                             e.IBV_QP_ALT_PATH | e.IBV_QP_AV)
        return a.path_mig_state, a.ah_attr.port_num

    def path_mig_events(self):
        n = 0
        if self.dev.evfd is None:
            return -1
        while select.select([self.dev.evfd], [], [], 0)[0]:
            ev = self.ctx.get_async_event()
            if ev.event_type == e.IBV_EVENT_PATH_MIG:
                n += 1
            ev.ack()
        return n

    def all_active(self):
        return all(self.ctx.query_port(p).state == e.IBV_PORT_ACTIVE
                   for p in range(1, self.ports + 1))


def ms(x):
    return "%.3f" % (x * 1000) if x is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dev_a")
    ap.add_argument("dev_b")
    ap.add_argument("--mode", choices=("spec", "bonding", "none"), required=True)
    ap.add_argument("--ack-timeout", type=int, default=14,
                    help="Local ACK Timeout exponent of both QPs (and of the alternate path)")
    ap.add_argument("--retry-cnt", type=int, default=7)
    ap.add_argument("--size", type=int, default=4096, help="bytes per RDMA Write")
    ap.add_argument("--window", type=int, default=4, help="writes outstanding")
    ap.add_argument("--before", type=float, default=2.0, help="seconds of stream before the cut")
    ap.add_argument("--after", type=float, default=3.0, help="seconds of stream after the cut")
    ap.add_argument("--warmup", type=float, default=0.5,
                    help="seconds at the start left out of the gap figures")
    ap.add_argument("--max-wait", type=float, default=30.0,
                    help="seconds after the cut to wait for a completion before failing")
    ap.add_argument("--arm-wait", type=float, default=20.0,
                    help="seconds to wait for both QPs ARMED (spec, bonding)")
    ap.add_argument("--ns", default=os.environ.get("NS_A", "rvA"), help="netns of --link")
    ap.add_argument("--link", default="veth0", help="the interface the cut takes down")
    args = ap.parse_args()
    if args.window > SLOTS // 2:
        ap.error("--window at most %d" % (SLOTS // 2))

    link = NsLink(args.ns, args.link)
    mr_size = max(1 << 20, SLOTS * args.size)
    a = Side(args.dev_a, "10.77.0.1", "10.77.1.1", mr_size)
    b = Side(args.dev_b, "10.77.0.2", "10.77.1.2", mr_size)
    spec = args.mode == "spec"
    if spec and not (a.load_port2_gid() and b.load_port2_gid()):
        fail("no RoCE v2 GID of 10.77.1.x on port 2 of %s or %s" % (a.name, b.name))
        sys.exit(1)
    try:
        a.connect(b, args.ack_timeout, args.retry_cnt, spec)
        b.connect(a, args.ack_timeout, args.retry_cnt, spec)
    except AltPathRefused as ex:
        print("n/a Modify QP RTR -> RTS with IBV_QP_ALT_PATH fails with EINVAL (%s): this "
              "kernel lacks the ib_core patch kernel/patches/0001-RDMA-core-allow-alternate-"
              "paths-on-RoCE-for-APM-devices.patch" % ex, flush=True)
        sys.exit(EXIT_NA)
    note("%s -> %s, mode %s: %d B RDMA Writes, window %d, Local ACK Timeout %d (%.1f ms), "
         "retry_cnt %d" % (a.name, b.name, args.mode, args.size, args.window, args.ack_timeout,
                           4.096e-3 * (1 << args.ack_timeout), args.retry_cnt))

    # Sources: A's slot k holds an 8-byte sequence number then a fixed pattern.
    pattern = bytes((i * 7 + 3) & 0xFF for i in range(args.size))
    for k in range(SLOTS):
        a.mr.write(pattern, args.size, k * args.size)

    def expect(seq):
        return seq.to_bytes(8, "little") + pattern[8:]

    post_t = []  # post time of write seq
    comp_t = []  # completion times, in order
    comp_id = []
    errors = []  # (seq, status)
    last_ok = {}  # slot -> last successful seq
    outstanding = 0
    posted = 0

    def post():
        nonlocal posted, outstanding
        seq = posted
        off = (seq % SLOTS) * args.size
        a.mr.write(seq.to_bytes(8, "little"), 8, off)
        wr = SendWR(wr_id=seq, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    send_flags=e.IBV_SEND_SIGNALED, sg=[SGE(a.mr.buf + off, args.size, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + off)
        post_t.append(time.monotonic())
        a.qp.post_send(wr)
        posted += 1
        outstanding += 1

    def poll():
        nonlocal outstanding
        n, wcs = a.cq.poll(args.window)
        if not n:
            return 0
        now = time.monotonic()
        for wc in wcs[:n]:
            outstanding -= 1
            comp_t.append(now)
            comp_id.append(wc.wr_id)
            if wc.status != e.IBV_WC_SUCCESS:
                errors.append((wc.wr_id, wc.status))
            else:
                last_ok[wc.wr_id % SLOTS] = wc.wr_id
        return n

    cutter = None
    scan_from = 0
    first_new = None  # index into comp_t of the first completion of a write posted after t0
    new_checked = None  # whether that write's data had landed when it completed
    armed_at = None
    next_arm_check = 0.0
    failed = None
    start = time.monotonic()
    try:
        while True:
            while outstanding < args.window and not errors:
                post()
            poll()
            now = time.monotonic()
            if cutter is None:
                if now - start >= args.before:
                    if args.mode == "none":
                        armed_at = now
                    elif now >= next_arm_check:
                        next_arm_check = now + 0.05
                        sa, sb = a.mig_state(), b.mig_state()
                        if sa[0] == e.IBV_MIG_ARMED and sb[0] == e.IBV_MIG_ARMED:
                            armed_at = now
                        elif now - start >= args.before + args.arm_wait:
                            failed = "the QPs were not both ARMED %.0f s after the stream " \
                                     "started (A %s, B %s)" % (now - start, sa, sb)
                            break
                    if armed_at is not None:
                        note("cut after %.2f s of stream, %d completions" % (now - start,
                                                                             len(comp_t)))
                        cutter = Cutter(link)
                        scan_from = len(comp_t)
                        cutter.start()
            elif first_new is None and cutter.t0 is not None:
                # Completions since the cut thread started (some may have come before it set
                # t0): the first of a write posted after t0, and its data, read at once (its
                # slot is rewritten only SLOTS writes later).
                for i in range(scan_from, len(comp_t)):
                    seq = comp_id[i]
                    if post_t[seq] > cutter.t0:
                        first_new = i
                        off = (seq % SLOTS) * args.size
                        new_checked = b.mr.read(args.size, off) == expect(seq)
                        break
                scan_from = len(comp_t)
            if errors:
                break
            if cutter is not None and cutter.err is not None:
                failed = "the cut failed: %s" % cutter.err
                break
            if cutter is not None and cutter.t0 is not None:
                if first_new is not None and cutter.t1 is not None and \
                        now >= max(cutter.t1, cutter.t0) + args.after:
                    break
                if first_new is None and now - cutter.t0 >= args.max_wait:
                    failed = "no write posted after the cut completed within %.0f s" % \
                             args.max_wait
                    break
        # Stop posting; collect what is outstanding (flushed at once after an error).
        end = time.monotonic() + max(args.max_wait, 10.0)
        while outstanding > 0 and time.monotonic() < end:
            poll()
        stopped = time.monotonic()
    finally:
        if cutter is not None:
            cutter.join(30)
        restored = True
        try:
            link.set(True)
        except OSError as ex:
            restored = False
            note("could not set %s up again: %s" % (link.name, ex))

    port_after = "%d" % a.mig_state()[1] if not errors else "-"
    mig_events = a.path_mig_events()
    # Data: the last successful write of every slot, and the first write over the new path.
    bad = [seq for k, seq in sorted(last_ok.items())
           if b.mr.read(args.size, k * args.size) != expect(seq)]

    t0 = cutter.t0 if cutter is not None else None
    stall = comp_t[first_new] - t0 if first_new is not None else None
    after = [t for t in comp_t if t0 is not None and t > t0]
    first_any = after[0] - t0 if after else None
    lo = start + args.warmup

    def max_gap(ts):
        ts = [t for t in ts if t >= lo]
        return max((y - x for x, y in zip(ts, ts[1:])), default=None)

    gap = max_gap(comp_t)
    gap_before = max_gap([t for t in comp_t if t0 is None or t <= t0])
    cut_call = cutter.t1 - cutter.t0 if cutter is not None and cutter.t1 is not None else None
    note("stream %.2f s, %d writes posted, %d completed, %d outstanding at the end" %
         (stopped - start, posted, len(comp_t), outstanding))
    print("result stall_ms=%s max_gap_ms=%s completions=%d errors=%d first_any_ms=%s "
          "max_gap_before_ms=%s cut_call_ms=%s port_after=%s path_mig_events=%d" %
          (ms(stall), ms(gap), len(comp_t), len(errors), ms(first_any), ms(gap_before),
           ms(cut_call), port_after, mig_events), flush=True)

    # Ports back before the next run.
    deadline = time.monotonic() + 30
    while restored and not (a.all_active() and b.all_active()):
        if time.monotonic() > deadline:
            note("ports not all ACTIVE 30 s after the link came back")
            break
        time.sleep(0.1)

    if errors:
        seq, st = errors[0]
        failed = "write %d completed with status %s (%d failed completions)" % (
            seq, status_name(st), len(errors))
    elif failed is None and outstanding:
        failed = "%d writes never completed" % outstanding
    elif failed is None and bad:
        failed = "%d target slots do not hold their last write (first: write %d)" % (
            len(bad), bad[0])
    elif failed is None and new_checked is False:
        failed = "write %d completed after the cut but its data had not landed" % \
                 comp_id[first_new]
    if failed:
        fail(failed)
        sys.exit(1)


if __name__ == "__main__":
    main()
