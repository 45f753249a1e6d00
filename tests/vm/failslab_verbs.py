#!/usr/bin/python3
"""Allocation failures injected into one process's verbs (tests/vm/69-fault-injection.sh sets up
failslab and fail_page_alloc: task-filter on, ignore-gfp-wait off, min-order 0, a probability).
Only this process's own allocations fail, and only inside a verb call: /proc/thread-self/fail-nth
or /proc/thread-self/make-it-fail is set right before the call and cleared right after it.

verbs DEV GID PEER PEER_GID ITERS: for each create verb on DEV (PD, CQ, MR over user memory of 64
KiB and 4 MiB, SRQ, AH to PEER, type 2 MW, RC/UC/UD QP) and for each transition of an RC QP to
RTS whose peer on PEER is connected to it (INIT, RTR, RTS):
  sweep   fail-nth: the call runs with its 1st, 2nd, 3rd, ... allocation failing, until it makes
          fewer allocations than that (then, with no fault left, it must succeed). Every
          allocation site the call reaches fails once;
  random  ITERS calls with make-it-fail on, each allocation failing at the debugfs probability.
Each call either succeeds or fails with a clean errno: ENOMEM or ENOBUFS (a route or neighbour
entry could not be allocated), and for the verbs that resolve the peer's MAC (create AH, modify
to RTR) also ETIMEDOUT or ENODATA (a neighbour lookup that could not start; the resolution then
times out); create AH also EINVAL, which rdma-core's user-space MAC resolution (netlink)
returns for most of its failures. Anything else fails the point. Every object made is
destroyed; after each kind the `rdma resource show` counts of both devices are what they were
(no object left behind). A QP whose transition failed must still be in its previous state; the
transition is then made again without faults and the pair must carry one Send each way,
compared byte for byte.

datapath DEV_A GID_A DEV_B GID_B WRS: an RC QP pair; WRS signaled Sends, RDMA Writes and RDMA
Reads of 1 B to 64 KiB, up to 8 in flight, each posted with make-it-fail on: the send doorbell
builds the request packets inline (GFP_ATOMIC skbs), so those allocations fail; the driver
must lose them as on a lossy wire (the transport retransmits from its timer or on a NAK, neither
of which runs in this process). The rxe user ABI writes the WQE into the ring before the
doorbell system call, so ibv_post_send failing with ENOMEM (the doorbell's own allocation) still
leaves the WR posted: the next doorbell carries it (when none follows, a 1-byte Write is posted
to ring again). Every WR must complete with its bytes right (target compared byte for byte, 64
canary bytes on each side and the source unchanged), or the QP stop at a retry-exceeded
completion with the rest flushed; no WR may hang.

Prints one "ok DESC" / "not ok DESC: WHY" line per point (run_points in lib.sh), "# " lines
otherwise. Run it with PYTHONMALLOC=malloc and glibc's trimming off (69-fault-injection.sh does):
the heap this process grows before the faults start is then never given back, so Python's own
allocations inside a faulted call come from it and do not fail."""
import collections
import ctypes
import errno
import faulthandler
import gc
import json
import mmap
import os
import random
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR, MW
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import ACCESS, Dev, Qp, point  # noqa: E402

CLEAN = frozenset((errno.ENOMEM, errno.ENOBUFS))
RESOLVING = CLEAN | {errno.ETIMEDOUT, errno.ENODATA}
# rdma-core's rxe provider resolves an AH's MAC in user space first (ibv_resolve_eth_l2_from_gid,
# over netlink, 3 s timeout), and that reports most of its failures as EINVAL.
AH_ERRS = RESOLVING | {errno.EINVAL}
# More allocations than any of these verbs makes: a sweep still injecting here never ends.
SWEEP_MAX = 3000
SCALE = int(os.environ.get("RVRDMA_TIME_SCALE", "1"))
# A completion of a clean pair comes within this (retransmits included).
WC_WAIT = 10.0 * SCALE
# The datapath phase: no completion for this long with WRs outstanding is a hang (7 retries of
# the longest Local ACK Timeout the tests use, 1.07 s, fit well inside it).
STALL = 30.0 * SCALE
WINDOW = 8            # regular WRs in flight, each in its slot of both MRs
GUARD = 64            # canary bytes on each side of a target
BIG = 65536
SLOT = BIG + 2 * GUARD
KICKS = 200           # doorbell kicks at most, each with a 1-byte target of its own
KICK_SLOT = 1 + 2 * GUARD
MR_SIZE = WINDOW * SLOT + KICKS * KICK_SLOT
# Send queue depth: the window and a few kicks (never full: a full ring fails the post with
# ENOMEM too, and then the WR is not posted).
SQ_DEPTH = WINDOW + 8
SIZES = (1, 63, 64, 1024, 1025, 3079, 4096, 16384, BIG)
WR_OPCODE = {"send": e.IBV_WR_SEND, "write": e.IBV_WR_RDMA_WRITE, "read": e.IBV_WR_RDMA_READ}
WC_OPCODE = {"send": e.IBV_WC_SEND, "write": e.IBV_WC_RDMA_WRITE, "read": e.IBV_WC_RDMA_READ}


class Faults:
    """This thread's fault-injection switches (opened once: opening allocates)."""

    def __init__(self):
        self.mif = os.open("/proc/thread-self/make-it-fail", os.O_WRONLY)
        self.nth = os.open("/proc/thread-self/fail-nth", os.O_RDWR)

    def call(self, fn, nth=0):
        """fn() with its nth fault-injection site failing (nth > 0) or, with nth 0, each failing
        at the debugfs probability. Returns (result, exception, injected); injected is None when
        not known (nth 0)."""
        res = exc = None
        arm = b"%d" % nth
        if nth:
            os.write(self.nth, arm)
        else:
            os.write(self.mif, b"1")
        try:
            res = fn()
        except Exception as ex:  # noqa: BLE001 - classified by the caller, with faults off
            exc = ex
        if nth:
            left = int(os.pread(self.nth, 32, 0))
            os.write(self.nth, b"0")
            return res, exc, left == 0
        os.write(self.mif, b"0")
        return res, exc, None


def errname(code):
    return errno.errorcode.get(code, str(code))


def unclean(exc, allowed):
    """None when `exc` is a clean failure of a verb, else what is wrong with it."""
    if isinstance(exc, PyverbsRDMAError):
        code = abs(exc.error_code)
        if code in allowed:
            return None
        return "errno %d (%s), not one of %s: %s" % (
            code, errname(code), ",".join(sorted(errname(c) for c in allowed)),
            str(exc).strip())
    return "%s: %s" % (type(exc).__name__, str(exc).strip())


def held(devs):
    """{dev: {kind: count}} as `rdma resource show` reports them (pd, cq, qp, cm_id, mr, ctx,
    srq, whatever this rdma tool counts)."""
    out = subprocess.run(["rdma", "-j", "resource", "show"], check=True, capture_output=True,
                         text=True).stdout
    got = {}
    for d in json.loads(out):
        if d.get("ifname") in devs:
            got[d["ifname"]] = {k: int(v) for k, v in d.items()
                                if k not in ("ifindex", "ifname") and str(v).isdigit()}
    missing = [d for d in devs if d not in got]
    if missing:
        raise RuntimeError("rdma resource show does not list %s" % missing)
    return got


def warm_heap():
    """Grows the heap by 64 MiB of touched pages and frees it: with trimming off it stays, and
    later allocations of this process come from it without a system call."""
    blocks = [b"\x5a" * 65536 for _ in range(1024)]
    del blocks


class Tally:
    """Outcomes of the faulted calls of one kind."""

    def __init__(self):
        self.errs = collections.Counter()
        self.absorbed = 0
        self.bad = []

    def add(self, results, problem, where):
        for exc, injected, allowed in results:
            if exc is None:
                if injected:
                    self.absorbed += 1
                continue
            why = unclean(exc, allowed)
            if why:
                self.bad.append("%s: %s" % (where, why))
            else:
                self.errs[errname(abs(exc.error_code))] += 1
        if problem:
            self.bad.append("%s: %s" % (where, problem))

    def failed(self):
        return sum(self.errs.values())

    def summary(self):
        errs = ", ".join("%d %s" % (n, k) for k, n in sorted(self.errs.items())) or "none"
        return "failed cleanly: %s; succeeded despite a fault: %d" % (errs, self.absorbed)


def create_trial(make, allowed):
    """A trial of one create verb: the object, if made, is destroyed with faults off."""

    def trial(arm):
        obj, exc, injected = arm(make)
        if obj is not None:
            obj.close()
        return [(exc, injected, allowed)], None
    return trial


def exchange(qa, qb, rng):
    """One 64-byte Send each way over a connected pair, compared byte for byte: None, or what
    went wrong."""
    for src, dst in ((qa, qb), (qb, qa)):
        data = rng.randbytes(64)
        dst.dev.mr.write(bytes(64), 64, 0)
        src.dev.mr.write(data, 64, 4096)
        dst.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(dst.dev.mr.buf, 64, dst.dev.mr.lkey)]))
        src.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(src.dev.mr.buf + 4096, 64, src.dev.mr.lkey)]))
        for q, what in ((src, "send"), (dst, "receive")):
            wc = q.poll(WC_WAIT)
            if wc is None:
                return "%s -> %s: no %s completion within %d s" % (
                    src.dev.ctx.name, dst.dev.ctx.name, what, WC_WAIT)
            if wc.status != e.IBV_WC_SUCCESS:
                return "%s -> %s: %s completion status %d" % (
                    src.dev.ctx.name, dst.dev.ctx.name, what, wc.status)
        if dst.dev.mr.read(64, 0) != data:
            return "%s -> %s: the bytes received differ from those sent" % (
                src.dev.ctx.name, dst.dev.ctx.name)
    return None


def modify_trial(a, b, which, rng):
    """A trial of one transition (init, rtr, rts) of an RC QP on `a` whose peer on `b` is
    connected to it; the other transitions run without faults."""

    def trial(arm):
        res, problem, qs = [], None, []
        try:
            qa = Qp(a, cqe=8, depth=4)
            qs.append(qa)
            qb = Qp(b, cqe=8, depth=4)
            qs.append(qb)
            qb.connect(qa)
            steps = (("init", qa.to_init, e.IBV_QPS_RESET, CLEAN),
                     ("rtr", lambda: qa.to_rtr(qb), e.IBV_QPS_INIT, RESOLVING),
                     ("rts", qa.to_rts, e.IBV_QPS_RTR, CLEAN))
            for name, step, before, allowed in steps:
                if name != which:
                    step()
                    continue
                _, exc, injected = arm(step)
                res.append((exc, injected, allowed))
                if exc is not None:
                    state = qa.qp.query(e.IBV_QP_STATE)[0].qp_state
                    if state != before:
                        problem = "the QP is in state %d after the failed modify, was %d" % (
                            state, before)
                        break
                    step()
            if problem is None:
                problem = exchange(qa, qb, rng)
        except PyverbsError as ex:
            problem = "without faults: %s" % str(ex).strip()
        finally:
            for q in qs:
                q.close()
        return res, problem
    return trial


def sweep(f, trial):
    """Runs `trial` with fail-nth 1, 2, ...; returns the tally and the number of sites (None
    when the sweep did not end)."""
    t = Tally()
    for nth in range(1, SWEEP_MAX + 1):
        results, problem = trial(lambda fn: f.call(fn, nth))
        if not any(r[1] for r in results):
            # Fewer allocations than nth: it ran without a fault and must have succeeded.
            for exc, _, _ in results:
                if exc is not None:
                    t.bad.append("no fault left at site %d, yet %s" % (nth, unclean(exc, ())))
            if problem:
                t.bad.append("no fault left at site %d, yet %s" % (nth, problem))
            return t, nth - 1
        t.add(results, problem, "site %d" % nth)
    t.bad.append("still injecting at site %d" % SWEEP_MAX)
    return t, None


def verbs(dev, gid, peer, peer_gid, iters):
    f = Faults()
    # No collection inside a faulted call (it would free objects there): collected between kinds.
    gc.disable()
    rng = random.Random(int(os.environ.get("RVRDMA_SEED", "0")) or None)
    devs = (dev, peer)
    pre = held(devs)
    a = Dev(dev, gid)
    b = Dev(peer, peer_gid)
    cq = CQ(a.ctx, 16)
    # User memory for the MRs, present before the faults start (pinning need not fault it in).
    buf = mmap.mmap(-1, 4 << 20)
    buf.write(b"\x01" * (4 << 20))
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    ah_attr = AHAttr(gr=GlobalRoute(dgid=b.gid, sgid_index=a.gid_index), is_global=1, port_num=1)

    def qp(t):
        return lambda: QP(a.pd, QPInitAttr(qp_type=t, scq=cq, rcq=cq, cap=cap))

    kinds = [
        ("create PD", create_trial(lambda: PD(a.ctx), CLEAN)),
        ("create CQ", create_trial(lambda: CQ(a.ctx, 64), CLEAN)),
        ("register a 64 KiB MR of user memory",
         create_trial(lambda: MR(a.pd, 65536, ACCESS, address=addr), CLEAN)),
        ("register a 4 MiB MR of user memory",
         create_trial(lambda: MR(a.pd, 4 << 20, ACCESS, address=addr), CLEAN)),
        ("create SRQ",
         create_trial(lambda: SRQ(a.pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=1))), CLEAN)),
        ("create AH", create_trial(lambda: AH(a.pd, attr=ah_attr), AH_ERRS)),
        ("allocate a type 2 MW", create_trial(lambda: MW(a.pd, e.IBV_MW_TYPE_2), CLEAN)),
        ("create RC QP", create_trial(qp(e.IBV_QPT_RC), CLEAN)),
        ("create UC QP", create_trial(qp(e.IBV_QPT_UC), CLEAN)),
        ("create UD QP", create_trial(qp(e.IBV_QPT_UD), CLEAN)),
        ("modify RC QP to INIT", modify_trial(a, b, "init", rng)),
        ("modify RC QP to RTR (peer connected)", modify_trial(a, b, "rtr", rng)),
        ("modify RC QP to RTS (peer connected)", modify_trial(a, b, "rts", rng)),
    ]

    def plain(fn):
        return fn(), None, False

    # Without faults every kind works (else the faulted runs below prove nothing).
    warm = []
    for name, trial in kinds:
        try:
            results, problem = trial(plain)
        except PyverbsError as ex:
            results, problem = [], str(ex).strip()
        for exc, _, _ in results:
            if exc is not None:
                problem = problem or unclean(exc, ())
        if problem:
            warm.append("%s: %s" % (name, problem))
    point(not warm, "without faults every create verb and QP transition succeeds",
          "; ".join(warm))
    warm_heap()

    for name, trial in kinds:
        gc.collect()
        faulthandler.dump_traceback_later(600 * SCALE, exit=True)
        # Compared with the counts before this kind: a leak is named by the kind that left it.
        base = held(devs)
        t0 = time.monotonic()
        t, sites = sweep(f, trial)
        now = held(devs)
        if now != base:
            t.bad.append("resource counts %s, were %s" % (now, base))
        if sites == 0:
            t.bad.append("no allocation site reached (fail-nth does not reach the verb)")
        print("# %s: sweep over %s allocation sites, %s [%.1f s]" % (
            name, sites, t.summary(), time.monotonic() - t0), flush=True)
        point(not t.bad, "%s: each allocation failing in turn (fail-nth): clean errors, "
              "success once no fault is left, nothing left behind" % name,
              "; ".join(t.bad[:5]))

        base = now
        t0 = time.monotonic()
        t = Tally()
        for i in range(iters):
            results, problem = trial(lambda fn: f.call(fn))
            t.add(results, problem, "call %d" % (i + 1))
        now = held(devs)
        if now != base:
            t.bad.append("resource counts %s, were %s" % (now, base))
        if not t.failed():
            t.bad.append("no call failed: the injected faults did not reach the verb")
        print("# %s: %d calls with make-it-fail, %s [%.1f s]" % (
            name, iters, t.summary(), time.monotonic() - t0), flush=True)
        point(not t.bad, "%s: %d calls with allocations failing at random: clean errors only, "
              "nothing left behind" % (name, iters), "; ".join(t.bad[:5]))
    faulthandler.cancel_dump_traceback_later()

    cq.close()
    for d in (a, b):
        d.ctx.close()
    after = held(devs)
    point(after == pre, "every object and context freed: the resource counts of %s and %s are "
          "back where they were" % devs, "now %s, were %s" % (after, pre))


class Op:
    """One WR of the datapath phase: its buffers are at `off` in both MRs (slot `slot`, or a
    kick's own area when `slot` is None)."""

    def __init__(self, n, kind, size, slot, off):
        self.n, self.kind, self.size, self.slot, self.off = n, kind, size, slot, off
        self.data = self.pre = None
        self.sent = None      # the requester's completion status
        self.recvd = None     # the responder's receive completion status (Sends)

    def describe(self):
        return "WR %d (%s, %d B, %s)" % (self.n, self.kind, self.size,
                                        "kick" if self.slot is None else "slot %d" % self.slot)


class Datapath:
    def __init__(self, f, a, b, qa, qb, rng):
        self.f, self.a, self.b, self.qa, self.qb, self.rng = f, a, b, qa, qb, rng
        self.free = list(range(WINDOW))
        self.order = collections.deque()   # posted, no requester completion yet
        self.recvs = {}                    # n -> Op with a receive outstanding
        self.bad = []                      # wrong data, wrong completions
        self.stopped = None                # the first error completion's status
        self.halt = False                  # a post failed other than with ENOMEM
        self.unrung = False                # the last post's doorbell failed
        self.enomem = self.posts = self.kicks = self.checked = 0
        self.other_post_err = []
        self.n = 0
        self.kinds = collections.Counter()

    def post(self, kind, size, kick=False):
        self.n += 1
        if kick:
            op = Op(self.n, kind, size, None, WINDOW * SLOT + self.kicks * KICK_SLOT)
            self.kicks += 1
        else:
            slot = self.free.pop(0)
            op = Op(self.n, kind, size, slot, slot * SLOT)
        a, b = self.a, self.b
        op.data = self.rng.randbytes(size)
        op.pre = self.rng.randbytes(size + 2 * GUARD)
        src, dst = (b, a) if kind == "read" else (a, b)
        src.mr.write(op.data, size, op.off + GUARD)
        dst.mr.write(op.pre, len(op.pre), op.off)
        if kind == "send":
            self.qb.qp.post_recv(RecvWR(wr_id=op.n, num_sge=1,
                                        sg=[SGE(b.mr.buf + op.off + GUARD, size, b.mr.lkey)]))
            self.recvs[op.n] = op
        wr = SendWR(wr_id=op.n, opcode=WR_OPCODE[kind], num_sge=1,
                    sg=[SGE(a.mr.buf + op.off + GUARD, size, a.mr.lkey)])
        if kind != "send":
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + op.off + GUARD)
        self.posts += 1
        self.kinds[kind] += 1
        _, exc, _ = self.f.call(lambda: self.qa.qp.post_send(wr))
        if exc is None:
            self.unrung = False
        elif isinstance(exc, PyverbsRDMAError) and abs(exc.error_code) == errno.ENOMEM:
            # The WQE is in the ring (the provider writes it before the doorbell).
            self.enomem += 1
            self.unrung = True
        else:
            self.other_post_err.append("%s: ibv_post_send: %s" % (op.describe(),
                                                                  unclean(exc, CLEAN)))
            self.halt = True
            self.recvs.pop(op.n, None)
            return
        self.order.append(op)

    def check(self, op):
        """Compares the target (with its canaries) and the source of a completed WR."""
        src, dst = (self.b, self.a) if op.kind == "read" else (self.a, self.b)
        got = dst.mr.read(len(op.pre), op.off)
        want = op.pre[:GUARD] + op.data + op.pre[GUARD + op.size:]
        if got != want:
            i = next(k for k in range(len(want)) if got[k] != want[k])
            where = ("canary before the target" if i < GUARD else
                     "canary after the target" if i >= GUARD + op.size else
                     "target byte %d" % (i - GUARD))
            self.bad.append("%s: %s on %s is 0x%02x, want 0x%02x (%d bytes differ)" % (
                op.describe(), where, dst.ctx.name, got[i], want[i],
                sum(1 for x, y in zip(got, want) if x != y)))
        if src.mr.read(op.size, op.off + GUARD) != op.data:
            self.bad.append("%s: the source on %s changed" % (op.describe(), src.ctx.name))
        self.checked += 1

    def release(self, op):
        if op.slot is None:
            return
        if op.sent is not None and (op.kind != "send" or op.recvd is not None or
                                    op.sent != e.IBV_WC_SUCCESS):
            if op.slot not in self.free:
                self.free.append(op.slot)

    def poll(self):
        n = 0
        got, wcs = self.qa.cq.poll(16)
        for wc in wcs:
            n += 1
            op = self.order.popleft() if self.order else None
            if op is None or wc.wr_id != op.n:
                self.bad.append("requester completion wr_id %d, want %s (completions in posting "
                                "order)" % (wc.wr_id, op.n if op else "none"))
                if op is not None:
                    self.order.appendleft(op)
                continue
            op.sent = wc.status
            if self.stopped is not None:
                if wc.status != e.IBV_WC_WR_FLUSH_ERR:
                    self.bad.append("%s: status %d after the QP stopped, want WR_FLUSH_ERR" % (
                        op.describe(), wc.status))
            elif wc.status != e.IBV_WC_SUCCESS:
                self.stopped = wc.status
                if wc.status != e.IBV_WC_RETRY_EXC_ERR:
                    self.bad.append("%s: error completion status %d (vendor_err %d); only "
                                    "retry-exceeded is a clean stop" % (
                                        op.describe(), wc.status, wc.vendor_err))
            elif wc.opcode != WC_OPCODE[op.kind]:
                self.bad.append("%s: completion opcode %d, want %d" % (
                    op.describe(), wc.opcode, WC_OPCODE[op.kind]))
            elif op.kind != "send":
                self.check(op)
            elif op.recvd == e.IBV_WC_SUCCESS:
                self.check(op)
            self.release(op)
        got, wcs = self.qb.cq.poll(16)
        for wc in wcs:
            n += 1
            op = self.recvs.pop(wc.wr_id, None)
            if op is None:
                self.bad.append("receive completion for unknown wr_id %d" % wc.wr_id)
                continue
            op.recvd = wc.status
            if wc.status != e.IBV_WC_SUCCESS:
                self.bad.append("%s: receive completion status %d" % (op.describe(), wc.status))
            elif wc.byte_len != op.size or wc.opcode != e.IBV_WC_RECV:
                self.bad.append("%s: receive completion byte_len %d opcode %d, want %d, %d" % (
                    op.describe(), wc.byte_len, wc.opcode, op.size, e.IBV_WC_RECV))
            elif op.sent is not None:
                # Data that arrived is checked even when the requester's completion failed.
                self.check(op)
            self.release(op)
        return n

    def waiting(self):
        """Whether completions are still due."""
        if self.order:
            return True
        if self.stopped is None:
            return bool(self.recvs)
        return False

    def run(self, plan):
        last = time.monotonic()
        hang = None
        while True:
            now = time.monotonic()
            if self.poll():
                last = now
            going = self.stopped is None and not self.halt
            if plan and going and self.free:
                kind, size = plan.pop()
                self.post(kind, size)
                continue
            if not (plan and going) and not self.waiting():
                break
            if (self.unrung and going and now - last > 0.5 and self.kicks < KICKS and
                    len(self.order) < SQ_DEPTH - 2):
                # The last doorbell failed and nothing moves: ring again with a 1-byte Write.
                self.post("write", 1, kick=True)
                last = now
                continue
            if now - last > STALL:
                hang = "no completion for %d s with %d WRs and %d receives outstanding (%s)" % (
                    STALL, len(self.order), len(self.recvs),
                    ", ".join(o.describe() for o in list(self.order)[:3]))
                break
            time.sleep(0.0005)
        return hang


def datapath(dev_a, gid_a, dev_b, gid_b, wrs):
    f = Faults()
    gc.disable()
    seed = int(os.environ.get("RVRDMA_SEED", "0")) or random.randrange(1, 1 << 31)
    rng = random.Random(seed)
    a = Dev(dev_a, gid_a, mr_size=MR_SIZE)
    b = Dev(dev_b, gid_b, mr_size=MR_SIZE)
    qa = Qp(a, cqe=4 * SQ_DEPTH, depth=SQ_DEPTH)
    qb = Qp(b, cqe=4 * SQ_DEPTH, depth=SQ_DEPTH)
    qa.connect(qb)
    qb.connect(qa)
    warm_heap()
    plan = [(rng.choice(("send", "write", "read")), rng.choice(SIZES)) for _ in range(wrs)]
    plan.reverse()
    d = Datapath(f, a, b, qa, qb, rng)
    faulthandler.dump_traceback_later(1200 * SCALE, exit=True)
    t0 = time.monotonic()
    hang = d.run(plan)
    faulthandler.cancel_dump_traceback_later()
    stop = "none" if d.stopped is None else str(d.stopped)
    print("# datapath: seed %d, %d WRs posted (%s), %d compared, %d posts failed with ENOMEM "
          "(their WRs stayed posted), %d kick Writes, first error completion: %s [%.1f s]" % (
              seed, d.posts, ", ".join("%d %s" % (n, k) for k, n in sorted(d.kinds.items())),
              d.checked, d.enomem, d.kicks, stop, time.monotonic() - t0), flush=True)
    for line in (d.bad + d.other_post_err)[:10]:
        print("# " + line)
    point(not d.bad, "datapath: %d Sends, Writes and Reads (1 B to 64 KiB) posted with "
          "allocations failing: every completed WR's bytes right, canaries and sources "
          "unchanged" % wrs, "; ".join(d.bad[:3]))
    ok = hang is None and not d.other_post_err and (
        d.stopped is None and not plan or d.stopped == e.IBV_WC_RETRY_EXC_ERR)
    point(ok, "datapath: every WR completed, or the QP stopped at a retry-exceeded completion "
          "and flushed the rest; nothing hung",
          hang or "; ".join(d.other_post_err[:3]) or "stopped at %s after %d of %d WRs" % (
              stop, d.posts, wrs))
    point(d.enomem > 0 and not d.other_post_err,
          "datapath: ibv_post_send failed only with ENOMEM, and did (the faults reached it)",
          "; ".join(d.other_post_err[:3]) or "no post failed")
    qa.close()
    qb.close()
    a.ctx.close()
    b.ctx.close()


def main():
    if len(sys.argv) != 7 or sys.argv[1] not in ("verbs", "datapath"):
        sys.exit(__doc__)
    mode, d1, g1, d2, g2, n = sys.argv[1:]
    if mode == "verbs":
        verbs(d1, int(g1), d2, int(g2), int(n))
    else:
        datapath(d1, int(g1), d2, int(g2), int(n))


if __name__ == "__main__":
    main()
