#!/usr/bin/python3
"""CQ verbs through rdma-core's rxe provider (pyverbs): prints one line per test point,
"ok DESC" or "not ok DESC" followed by "# ..." diagnostics. Always prints exactly NPOINTS points.
Usage: cq_test.py DEVICE"""
import errno
import sys

from pyverbs.cq import CQ, CQEX, CompChannel, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context
from pyverbs.pyverbs_error import PyverbsRDMAError

NPOINTS = 12
MAX_CQE = 0x7FFF
points = 0


def report(desc, ok, diag=""):
    global points
    points += 1
    print(("ok " if ok else "not ok ") + desc)
    for line in str(diag).splitlines():
        print("# " + line)


def rxe_capacity(n):
    """rxe's usable CQ size for n requested entries: roundup_pow_of_two(n + 1) - 1."""
    slots = 1
    while slots < n + 1:
        slots <<= 1
    return slots - 1


def expect_errno(desc, want, fn):
    try:
        obj = fn()
    except PyverbsRDMAError as e:
        report(desc, e.error_code == want, f"errno {e.error_code}: {e}")
        return
    except Exception as e:  # pylint: disable=broad-except
        report(desc, False, f"unexpected exception {e!r}")
        return
    obj.close()
    report(desc, False, "succeeded")


def point(desc, fn):
    """Runs fn(); a point passes when it returns None (or a true value), fails on an exception
    or a message string."""
    try:
        r = fn()
    except Exception as e:  # pylint: disable=broad-except
        report(desc, False, repr(e))
        return
    if isinstance(r, str):
        report(desc, False, r)
    else:
        report(desc, True)


def main():
    dev = sys.argv[1]
    try:
        ctx = Context(name=dev)
    except Exception as e:  # pylint: disable=broad-except
        for i in range(NPOINTS):
            report(f"point {i + 1}: open {dev}", False, repr(e))
        return

    sizes = [1, 2, 3, 4, 7, 8, 15, 16, 31, 63, 64, 100, 127, 128, 255, 256, 511, 1000, 1023,
             1024, 2047, 2048, 4095, 4096, MAX_CQE]

    def capacities():
        bad = []
        for n in sizes:
            cq = CQ(ctx, n, None, None, 0)
            if cq.cqe != rxe_capacity(n):
                bad.append(f"cqe {n}: got {cq.cqe}, rxe gives {rxe_capacity(n)}")
            cq.close()
        return "\n".join(bad) if bad else None

    point(f"create/destroy CQs of {len(sizes)} sizes 1..{MAX_CQE}: capacity as rxe", capacities)

    expect_errno(f"cqe {MAX_CQE + 1} (> max_cqe) fails with EINVAL", errno.EINVAL,
                 lambda: CQ(ctx, MAX_CQE + 1, None, None, 0))
    nvec = ctx.num_comp_vectors
    expect_errno(f"comp_vector {nvec} (= num_comp_vectors) fails with EINVAL", errno.EINVAL,
                 lambda: CQ(ctx, 16, None, None, nvec))

    def poll_empty():
        cq = CQ(ctx, 16, None, None, 0)
        n, wcs = cq.poll(4)
        cq.close()
        if n != 0 or wcs:
            return f"polled {n} completions: {wcs}"
        return None

    point("polling an empty CQ returns nothing", poll_empty)

    def notify():
        ch = CompChannel(ctx)
        cq = CQ(ctx, 16, None, ch, 0)
        cq.req_notify()
        cq.req_notify(1)
        cq.req_notify(0)
        cq.close()
        ch.close()

    point("req_notify (next completion and solicited only) with a completion channel", notify)

    def resize(to, want):
        def run():
            cq = CQ(ctx, 100, None, None, 0)
            cq.resize(to)
            got = cq.cqe
            n, _ = cq.poll(1)
            cq.close()
            if got != want:
                return f"cqe after resize({to}): {got}, want {want}"
            if n != 0:
                return f"resized empty CQ polled {n}"
            return None
        return run

    point("resize 100 -> 1000 (up): capacity 1023, still empty", resize(1000, 1023))
    point("resize 100 -> 10 (down): capacity 15, still empty", resize(10, 15))

    def resize_many():
        cq = CQ(ctx, 1, None, None, 0)
        for to, want in [(2, 3), (4096, 8191), (5, 7), (MAX_CQE, 32767), (1, 1)]:
            cq.resize(to)
            if cq.cqe != want:
                cq.close()
                return f"resize({to}): cqe {cq.cqe}, want {want}"
        cq.close()
        return None

    point("repeated resizes of one CQ keep rxe's capacities", resize_many)

    def resize_too_big():
        cq = CQ(ctx, 16, None, None, 0)
        try:
            cq.resize(MAX_CQE + 1)
        except PyverbsRDMAError as e:
            ok = e.error_code == errno.EINVAL and cq.cqe == 31
            cq.close()
            return None if ok else f"errno {e.error_code}, cqe {cq.cqe}"
        cq.close()
        return "resize succeeded"

    point(f"resize to {MAX_CQE + 1} fails with EINVAL and keeps the CQ", resize_too_big)

    def many():
        cqs = [CQ(ctx, 4096, None, None, 0) for _ in range(64)]
        bad = [c.cqe for c in cqs if c.cqe != 8191]
        for c in cqs:
            c.close()
        return f"capacities {bad}" if bad else None

    point("64 CQs of 4096 entries at once", many)

    def cqex():
        cq = CQEX(ctx, CqInitAttrEx(cqe=32))
        try:
            r = cq.start_poll(PollCqAttr())
        except PyverbsRDMAError as e:
            r = e.error_code
        cq.close()
        return None if r == errno.ENOENT else f"start_poll on an empty CQ: {r}"

    point("extended CQ: start_poll on an empty CQ gives ENOENT", cqex)

    def reopen():
        # A second context on the same device: mmap offsets are per context.
        ctx2 = Context(name=dev)
        a = CQ(ctx, 8, None, None, 0)
        b = CQ(ctx2, 8, None, None, 0)
        ok = a.cqe == 15 and b.cqe == 15
        b.close()
        a.close()
        ctx2.close()
        return None if ok else f"cqe {a.cqe} / {b.cqe}"

    point("CQs in two contexts of one device", reopen)
    ctx.close()


if __name__ == "__main__":
    main()
    while points < NPOINTS:
        report(f"point {points + 1}: not run", False)
    if points != NPOINTS:
        print(f"# cq_test.py printed {points} points, planned {NPOINTS}")
