#!/usr/bin/python3
"""churn.py: one worker of the concurrency test (70-concurrency.sh). For --seconds it repeats an
iteration: open DEV_A and DEV_B (one process opens both: RDMA devices are visible from every
network namespace in the default "shared" rdma netns mode), a PD, an MR of a random size, a CQ
and an RC QP on each, connect the two QPs (random PSNs), move --messages messages of random sizes
(Send, RDMA Write, RDMA Read, in random directions, one at a time), then destroy everything.

Every message is checked: its completions (status, opcode, wr_id, qp_num, byte_len of receives
and Reads) and every byte it delivered, with 64 random canary bytes on either side of the target
(and the unused tail of a receive buffer) that must not change.

Without --churned, every error is a failure: the first one ends the worker with exit status 1.

With --churned, DEV_A is a device that 70-concurrency.sh adds and deletes all the time. An
iteration may then end early with a clean error, counted by its kind (where it happened and the
errno or completion status, e.g. "post_send:EIO", "send:wc-RETRY_EXC_ERR"). Clean means
explained by the churn, and nothing else:
  - DEV_A has no GID for ADDR_A yet, or its port is not ACTIVE yet (a device just added);
  - DEV_A does not open: within --timeout s it must be gone or replaced (another device of that
    name), or open after all (a device still registering);
  - anything else (a verb of DEV_A fails, a completion on either side has an error status or
    never comes) must come with IBV_EVENT_DEVICE_FATAL on DEV_A's context within --timeout s:
    the driver's disassociate_ucontext tells each process using a deleted device. A verb of
    DEV_B (which stays) that fails is never clean.
After the deletion the provider's rings are no longer the device's (rdma-core's rxe provider
maps them; ib_core puts a dummy page in their place), so a completion read after it may be
garbage: a successful completion that does not match the WR it names (wrong opcode, wr_id,
qp_num or byte_len) is excused by DEVICE_FATAL too. A completion that matches but whose bytes are
wrong is never excused: that is wrong data, on any device.

The last line is "RESULT key=value ..." (iterations, ok, clean, fatal, messages, bytes, ...);
"clean errors:" lists the clean ends by kind. Exit status: 0 when nothing failed, 1 on a failure
(a "FAIL" line says what), 2 on a usage or set-up error.

usage: churn.py DEV_A ADDR_A DEV_B ADDR_B --seconds S [--until FILE] [--churned] [--timeout T]
               [--seed N]
  ADDR_x is the IPv4 address whose RoCE v2 GID the device's QP uses. --until FILE: past the
  S seconds, go on until FILE exists (a churned worker sees the churn's last deletion)."""
import argparse
import collections
import errno
import ipaddress
import os
import random
import select
import sys
import time

import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import ACCESS, Qp, event_fds, gid_index, status_name  # noqa: E402

CANARY = 64
MAX_MSG = 65536
# Async events that mean something went wrong on a device that must stay healthy.
BAD_EVENTS = {
    e.IBV_EVENT_CQ_ERR, e.IBV_EVENT_QP_FATAL, e.IBV_EVENT_QP_REQ_ERR,
    e.IBV_EVENT_QP_ACCESS_ERR, e.IBV_EVENT_DEVICE_FATAL, e.IBV_EVENT_PORT_ERR,
    e.IBV_EVENT_PATH_MIG_ERR, e.IBV_EVENT_SRQ_ERR,
}


def errno_name(code):
    return errno.errorcode.get(code, str(code)) if code is not None and code >= 0 else "none"


class Clean(Exception):
    """An iteration ended by an error that may be clean (on the churned device); `kind` names
    where and how ("post_send:EIO", "wc:RETRY_EXC_ERR", ...). `needs_fatal`: excused only by
    DEVICE_FATAL on the churned context."""

    def __init__(self, kind, why, needs_fatal=True):
        super().__init__(why)
        self.kind, self.needs_fatal = kind, needs_fatal


class Failure(Exception):
    """Never excused: wrong data, or an error nothing explains."""


def verb_error(where, ex, side):
    """The Clean end for a verb of `side` that failed with `ex`; a verb of a device that is not
    churned has no excuse to fail (its peer's deletion fails completions, not verbs)."""
    code = getattr(ex, "error_code", None)
    why = "%s on %s failed: %s" % (where, side.name, str(ex).strip().splitlines()[-1]
                                   if str(ex).strip() else repr(ex))
    if not side.churned:
        raise Failure(why)
    return Clean("%s:%s" % (where, errno_name(code)), why)


def instance(dev):
    """Which device of that name is there (its sysfs directory's inode: a new device gets a new
    one), or None."""
    try:
        return os.stat("/sys/class/infiniband/" + dev).st_ino
    except OSError:
        return None


class Side:
    """One device's objects for one iteration (what rcpair's Qp needs: ctx, pd, mr, gid,
    gid_index), and its async event fd to wait for events with a timeout."""

    def __init__(self, name, churned):
        self.name, self.churned = name, churned
        self.ctx = self.pd = self.mr = self.qp = None
        self.events = []
        self.gone = False  # DEVICE_FATAL seen, or the event file reports the device gone
        before = event_fds()
        try:
            self.ctx = Context(name=name)
        except PyverbsError as ex:
            raise verb_error("open", ex, self)
        fds = event_fds() - before
        if len(fds) != 1:
            raise Failure("cannot tell %s's async event fd (new fds %s)" % (name, sorted(fds)))
        self.evfd = fds.pop()

    def check(self, addr, gid_index):
        """The GID to use is `addr`'s and port 1 is ACTIVE."""
        self.gid_index = gid_index
        try:
            self.gid = self.ctx.query_gid(1, gid_index)
            state = self.ctx.query_port(1).state
        except PyverbsError as ex:
            raise verb_error("query", ex, self)
        want = ipaddress.IPv6Address("::ffff:" + addr)
        why = None
        if ipaddress.IPv6Address(str(self.gid)) != want:
            # (The churned device may have been replaced since sysfs gave the GID index.)
            kind, why = "open:gid-not-ready", "GID %d is %s, not %s" % (gid_index, self.gid, want)
        elif state != e.IBV_PORT_ACTIVE:
            kind, why = "open:port-not-active", "port 1 state %d" % state
        if why and not self.churned:
            raise Failure("%s: %s" % (self.name, why))
        if why:
            raise Clean(kind, "%s: %s" % (self.name, why), needs_fatal=False)

    def make(self, rng):
        try:
            self.pd = PD(self.ctx)
            self.size = 2 * (MAX_MSG + 3 * CANARY) + rng.randrange(0, 1 << 17)
            self.mr = MR(self.pd, self.size, ACCESS)
            self.half = self.size // 2
        except PyverbsError as ex:
            raise verb_error("create", ex, self)

    def drain_events(self, wait=0.0):
        """Reads the pending async events, waiting up to `wait` s for DEVICE_FATAL; returns
        whether the device is gone (DEVICE_FATAL, or the event file fails: disassociated)."""
        end = time.monotonic() + wait
        poller = select.poll()
        poller.register(self.evfd, select.POLLIN)
        while not self.gone:
            if not poller.poll(max(0, int((end - time.monotonic()) * 1000))):
                break
            try:
                ev = self.ctx.get_async_event()
            except PyverbsError:
                self.gone = True
                break
            t = ev.event_type
            ev.ack()
            self.events.append(t)
            if t == e.IBV_EVENT_DEVICE_FATAL:
                self.gone = True
        return self.gone

    def bad_events(self):
        return [t for t in self.events if t in BAD_EVENTS]

    def close(self, errors, wait):
        """Destroys QP, CQ, MR, PD, context in that order; each failure goes to `errors`. A
        failure on the churned device waits up to `wait` s for DEVICE_FATAL (while the context
        is still open to read it)."""
        for what, obj in (("destroy_qp", self.qp), ("dereg_mr", self.mr),
                          ("dealloc_pd", self.pd), ("close_device", self.ctx)):
            if obj is None:
                continue
            try:
                obj.close()
            except PyverbsError as ex:
                try:
                    errors.append(verb_error(what, ex, self))
                except Failure as f:
                    errors.append(f)
                if self.churned and self.ctx is not None:
                    self.drain_events(wait)
        self.qp = self.mr = self.pd = self.ctx = None


class Worker:
    def __init__(self, args):
        self.a = args
        self.seed = args.seed if args.seed is not None else random.randrange(1 << 32)
        self.rng = random.Random(self.seed)
        self.tmo = args.timeout
        self.count = collections.Counter()
        self.clean = collections.Counter()
        self.ops = collections.Counter()
        self.gids = {}
        self.label = "%s%s<->%s" % (args.dev_a, " (churned)" if args.churned else "",
                                    args.dev_b)

    def gid_index(self, dev, addr, churned):
        if churned or dev not in self.gids:
            i = gid_index(dev, 1, addr)
            if i is None:
                if churned:
                    raise Clean("open:no-gid", "%s has no RoCE v2 GID for %s" % (dev, addr),
                                needs_fatal=False)
                raise Failure("%s has no RoCE v2 GID for %s" % (dev, addr))
            self.gids[dev] = i
        return self.gids[dev]

    # ---- one iteration ---------------------------------------------------------------------

    def iteration(self, n):
        a = self.a
        sides = []
        self.inst = None
        try:
            ga = self.gid_index(a.dev_a, a.addr_a, a.churned)
            gb = self.gid_index(a.dev_b, a.addr_b, False)
            self.count["iterations"] += 1
            self.inst = instance(a.dev_a)
            for name, churned in ((a.dev_a, a.churned), (a.dev_b, False)):
                sides.append(Side(name, churned))
            sides[0].check(a.addr_a, ga)
            sides[1].check(a.addr_b, gb)
            for s in sides:
                s.make(self.rng)
            self.connect(sides)
            for k in range(a.messages):
                self.message(sides, n, k)
            for s in sides:
                s.drain_events()
                if (s.bad_events() or s.gone) and not (s.churned and s.gone):
                    raise Failure("%s: async events %s%s in an iteration without errors" % (
                        s.name, s.bad_events(), ", event file failed" if s.gone else ""))
        except Clean as c:
            self.excuse(c, sides)
        finally:
            # Unread affiliated events would make ibv_destroy_qp wait for their ack.
            for s in sides:
                s.drain_events()
            errors = []
            for s in reversed(sides):
                s.close(errors, self.tmo)
            for c in errors:
                if isinstance(c, Failure):
                    raise c
                self.excuse(c, sides, closing=True)
        self.count["ok"] += 1

    def excuse(self, c, sides, closing=False):
        """Counts Clean `c` as a clean end, or raises Failure. Clean only on the churned
        worker, and then either the error needs no excuse (device absent, not ready yet) or the
        device went away: DEVICE_FATAL on the churned context (waited for up to --timeout s),
        or, when it did not open, the device we looked at before opening it is gone or
        replaced within --timeout s."""
        churned = [s for s in sides if s.churned]
        ok = False
        if self.a.churned and not c.needs_fatal:
            ok = True
        elif self.a.churned and churned:
            # (Side.close waited for the event already: the context is closed now.)
            ok = churned[0].gone if closing else churned[0].drain_events(self.tmo)
        elif self.a.churned:
            ok = self.unopenable()
        if not ok:
            raise Failure("%s (%s)%s" % (c, c.kind, "" if not self.a.churned else
                                        ", and %s was not deleted (no DEVICE_FATAL within "
                                        "%g s)" % (self.a.dev_a, self.tmo)))
        self.clean[c.kind] += 1
        if churned and churned[0].gone:
            self.count["fatal"] += 1
        if not closing:
            raise _Ended()

    def unopenable(self):
        """DEV_A did not open: whether within --timeout s it is gone or replaced, or opens."""
        end = time.monotonic() + self.tmo
        while time.monotonic() < end:
            if self.inst is None or instance(self.a.dev_a) != self.inst:
                return True
            try:
                Context(name=self.a.dev_a).close()
                return True
            except PyverbsError:
                time.sleep(0.05)
        return False

    def connect(self, sides):
        psn = [self.rng.randrange(1 << 24) for _ in sides]
        for s in sides:
            try:
                s.qp = Qp(s, cqe=16, depth=8)
            except PyverbsError as ex:
                raise verb_error("create_qp", ex, s)
        for i, (s, peer) in enumerate(((sides[0], sides[1]), (sides[1], sides[0]))):
            try:
                s.qp.to_init(ACCESS)
                self.to_rtr(s.qp, peer.qp, psn[1 - i])
                s.qp.to_rts(extra=lambda attr, p=psn[i]: setattr(attr, "sq_psn", p) or 0)
            except PyverbsError as ex:
                raise verb_error("modify_qp", ex, s)

    def to_rtr(self, q, peer, rq_psn):
        """Init -> RTR; resolving the peer's MAC may time out (ETIMEDOUT) and is tried again,
        at most 3 times (as traffic.py does)."""
        for attempt in range(3):
            try:
                q.to_rtr(peer, extra=lambda attr: setattr(attr, "rq_psn", rq_psn) or 0)
                return
            except PyverbsError as ex:
                if getattr(ex, "error_code", None) != errno.ETIMEDOUT or attempt == 2:
                    raise
                self.count["rtr_retries"] += 1

    def size(self):
        r = self.rng.random()
        if r < 0.2:
            return self.rng.randint(1, 64)
        if r < 0.5:
            return self.rng.randint(1, 4200)
        return self.rng.randint(1, MAX_MSG)

    def message(self, sides, n, k):
        op = self.rng.choice(("send", "write", "read"))
        req, resp = sides if self.rng.random() < 0.5 else sides[::-1]
        size = self.size()
        payload = self.rng.randbytes(size)
        slack = self.rng.randrange(0, CANARY + 1) if op == "send" else 0
        # Source in the MR's first half, target (with canaries) in the second.
        src_side, dst_side = (resp, req) if op == "read" else (req, resp)
        soff = self.rng.randrange(0, src_side.half - size + 1)
        doff = dst_side.half + CANARY + self.rng.randrange(
            0, dst_side.size - dst_side.half - size - slack - 2 * CANARY + 1)
        span = (doff - CANARY, size + slack + 2 * CANARY)
        guard = self.rng.randbytes(span[1])
        src_side.mr.write(payload, size, soff)
        dst_side.mr.write(guard, span[1], span[0])
        wr_id = (n << 20) | (k << 4) | 1
        rq, sq = resp.qp, req.qp
        try:
            if op == "send":
                rq.qp.post_recv(RecvWR(wr_id=wr_id | 2, num_sge=1, sg=[
                    SGE(resp.mr.buf + doff, size + slack, resp.mr.lkey)]))
            wr = SendWR(wr_id=wr_id, opcode={"send": e.IBV_WR_SEND,
                                             "write": e.IBV_WR_RDMA_WRITE,
                                             "read": e.IBV_WR_RDMA_READ}[op], num_sge=1,
                        sg=[SGE(req.mr.buf + (doff if op == "read" else soff), size,
                                req.mr.lkey)])
            if op == "write":
                wr.set_wr_rdma(resp.mr.rkey, resp.mr.buf + doff)
            elif op == "read":
                wr.set_wr_rdma(resp.mr.rkey, resp.mr.buf + soff)
        except PyverbsError as ex:
            raise verb_error("post_recv", ex, resp)
        try:
            sq.qp.post_send(wr)
        except PyverbsError as ex:
            raise verb_error("post_send", ex, req)
        want_op = {"send": e.IBV_WC_SEND, "write": e.IBV_WC_RDMA_WRITE,
                   "read": e.IBV_WC_RDMA_READ}[op]
        self.completion(sides, req, sq, wr_id, want_op, size if op == "read" else None, op)
        if op == "send":
            self.completion(sides, resp, rq, wr_id | 2, e.IBV_WC_RECV, size, op)
        # The completion(s) say the data is in place (an RC Write or Send completes at the
        # requester once the responder acknowledged it): every byte must be right now.
        got = dst_side.mr.read(span[1], span[0])
        want = guard[:CANARY] + payload + guard[CANARY + size:]
        if got != want:
            bad = next(i for i in range(len(want)) if got[i] != want[i])
            where = ("payload byte %d of %d" % (bad - CANARY, size)
                     if CANARY <= bad < CANARY + size else
                     "canary byte %d (target %d bytes at offset %d)" % (bad, size, doff))
            raise Failure("WRONG DATA: %s #%d.%d %s->%s %d B: %s is 0x%02x, want 0x%02x "
                          "(seed %d)" % (op, n, k, req.name, resp.name, size, where, got[bad],
                                         want[bad], self.seed))
        self.count["messages"] += 1
        self.count["bytes"] += size
        self.ops[op] += 1

    def completion(self, sides, side, q, wr_id, want_op, want_len, op):
        """Polls `q`'s CQ for one completion, for at most --timeout s (on the churned worker,
        watching for DEVICE_FATAL meanwhile), and checks it."""
        churned = [s for s in sides if s.churned]
        end = time.monotonic() + self.tmo
        while True:
            try:
                got, wcs = q.cq.poll(1)
            except PyverbsError as ex:
                raise verb_error("poll_cq", ex, side)
            if got:
                wc = wcs[0]
                break
            if churned and churned[0].drain_events():
                raise Clean("%s:device-fatal" % op, "DEVICE_FATAL while waiting for a %s "
                            "completion on %s" % (op, side.name))
            if time.monotonic() > end:
                raise Clean("%s:no-completion" % op, "no %s completion on %s in %d s" % (
                    op, side.name, self.tmo))
            time.sleep(0.0005)
        if wc.status != e.IBV_WC_SUCCESS:
            raise Clean("%s:wc-%s" % (op, status_name(wc.status)),
                        "%s completion on %s: status %s (vendor_err %d)" % (
                            op, side.name, status_name(wc.status), wc.vendor_err))
        bad = []
        if wc.wr_id != wr_id:
            bad.append("wr_id %d, want %d" % (wc.wr_id, wr_id))
        if wc.opcode != want_op:
            bad.append("opcode %d, want %d" % (wc.opcode, want_op))
        if wc.qp_num != q.qp.qp_num:
            bad.append("qp_num %d, want %d" % (wc.qp_num, q.qp.qp_num))
        if want_len is not None and wc.byte_len != want_len:
            bad.append("byte_len %d, want %d" % (wc.byte_len, want_len))
        if bad:
            raise Clean("%s:wc-mismatch" % op, "%s completion on %s: %s" % (
                op, side.name, ", ".join(bad)))

    # ---- the loop ----------------------------------------------------------------------------

    def run(self):
        print("churn.py %s: seed %d, %d s" % (self.label, self.seed, self.a.seconds),
              flush=True)
        end = time.monotonic() + self.a.seconds
        n = 0
        rc = 0
        while time.monotonic() < end or (self.a.until and not os.path.exists(self.a.until)):
            n += 1
            try:
                self.iteration(n)
            except _Ended:
                time.sleep(0.02)
            except Failure as f:
                print("FAIL iteration %d: %s" % (n, f), flush=True)
                rc = 1
                break
        self.count["clean"] = sum(self.clean.values())
        if self.clean:
            print("clean errors: " + " ".join("%s=%d" % kv for kv in sorted(self.clean.items())))
        print("ops: " + " ".join("%s=%d" % kv for kv in sorted(self.ops.items())))
        keys = ("iterations", "ok", "clean", "fatal", "messages", "bytes", "rtr_retries")
        print("RESULT " + " ".join("%s=%d" % (k, self.count.get(k, 0)) for k in keys), flush=True)
        return rc


class _Ended(Exception):
    """An iteration ended cleanly before its end (already counted)."""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dev_a")
    p.add_argument("addr_a")
    p.add_argument("dev_b")
    p.add_argument("addr_b")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--until", help="past --seconds, go on until this file exists")
    p.add_argument("--churned", action="store_true", help="DEV_A is added and deleted meanwhile")
    p.add_argument("--timeout", type=float, default=20.0,
                   help="seconds to wait for a completion or for DEVICE_FATAL (default 20)")
    p.add_argument("--messages", type=int, default=4, help="messages per iteration (default 4)")
    p.add_argument("--seed", type=int)
    args = p.parse_args()
    try:
        sys.exit(Worker(args).run())
    except (PyverbsError, OSError) as ex:
        print("FAIL set-up: %s" % ex, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
