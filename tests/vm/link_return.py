#!/usr/bin/python3
"""When a link comes back, the next retransmission gets through. A Send posted while veth0 (side
A's netdev) is down is lost; the link returns well before the Local ACK Timeout (2.1 s) expires,
so the Send must complete after exactly one transport timeout, in each direction: A -> B (A's
request leaves through the returned link) and B -> A (A's ACK does). Taking a netdev down
releases the kernel routes through it, and a QP that kept one would lose its first packet after
the link returns to it, costing a second timeout. An attempt whose link takes more than 60% of
the timeout to return (a slow guest) tells nothing and is made again, up to three times.

Prints one "ok ..."/"not ok ..." point per direction (run_points in lib.sh).

usage: link_return.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B NETNS_A"""
import subprocess
import sys
import time

import pyverbs.enums as e

from rcpair import Dev, Qp, link_counters, point, status_name

TIMEOUT_EXP = 19  # 4.096 us * 2^19 = 2.1 s
TIMEOUT_S = 4.096e-6 * 2 ** TIMEOUT_EXP
LEN = 1000
# Why an attempt told nothing: the link took too long to return for one timeout to be expected.
SLOW = "the link took too long to return"
ATTEMPTS = 3


def port_state(dev):
    with open("/sys/class/infiniband/%s/ports/1/state" % dev) as f:
        return f.read().split(":")[-1].strip()


def wait_ports(devs, state, secs=10.0):
    """Whether every device's port 1 reaches `state` ("ACTIVE", "DOWN") within `secs`."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if all(port_state(d) == state for d in devs):
            return True
        time.sleep(0.01)
    return False


def timeouts(dev):
    return link_counters(dev)["transport_timeouts"]


def link(ns, state):
    subprocess.run(["ip", "-n", ns, "link", "set", "veth0", state], check=True)


def one_way(name, snd, rcv, devs, ns):
    """A Send from `snd` to `rcv` (which has a receive posted) while the link is down. Returns
    why it failed, or ''."""
    link(ns, "down")
    if not wait_ports(devs, "DOWN"):
        return "the ports did not go DOWN"
    before = timeouts(snd.dev.ctx.name)
    c0 = [link_counters(d) for d in devs]
    t0 = time.monotonic()
    snd.send(1, LEN)
    time.sleep(0.2)
    link(ns, "up")
    if not wait_ports(devs, "ACTIVE"):
        return "the ports did not come back ACTIVE"
    back = time.monotonic() - t0
    if back > 0.6 * TIMEOUT_S:
        # The guest was slow, not the driver: this attempt tells nothing. Its Send still has
        # to complete before the next attempt.
        wc = snd.poll(4 * TIMEOUT_S)
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            return "after a slow return, send completion %s" % (
                "missing" if wc is None else status_name(wc.status))
        rcv.poll(5.0)
        return SLOW + " (%.2f s, the timeout is %.1f s)" % (back, TIMEOUT_S)
    wc = snd.poll(4 * TIMEOUT_S)
    took = time.monotonic() - t0
    if wc is None:
        return "no send completion within %.1f s" % (4 * TIMEOUT_S)
    if wc.status != e.IBV_WC_SUCCESS:
        return "send completion status %s" % status_name(wc.status)
    got = rcv.poll(5.0)
    if got is None or got.status != e.IBV_WC_SUCCESS or got.byte_len != LEN:
        return "receive completion %s" % (
            "missing" if got is None else "%s, %d bytes" % (status_name(got.status), got.byte_len))
    n = timeouts(snd.dev.ctx.name) - before
    # What each device counted meanwhile, to tell where a packet went.
    for d, c in zip(devs, c0):
        c1 = link_counters(d)
        print("# %s: %s" % (d, " ".join("%s +%d" % (k, c1[k] - c[k]) for k in sorted(c1)
                                        if k in c and c1[k] != c[k])))
    print("# %s: link back after %.2f s, completed after %.2f s, %d transport timeout(s)" % (
        name, back, took, n))
    if n != 1:
        return "%d transport timeouts, want 1: a packet after the link came back (the " \
               "retransmission or its ACK) was lost" % n
    return ""


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    dev_a, ga, dev_b, gb, ns = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), \
        sys.argv[5]
    a, b = Dev(dev_a, ga), Dev(dev_b, gb)
    qa, qb = Qp(a), Qp(b)
    qa.connect(qb, timeout=TIMEOUT_EXP)
    qb.connect(qa, timeout=TIMEOUT_EXP)
    # The receives of every Send first: each side's ACKs then tell the other it has credits
    # (seed 003), and the Sends leave at once rather than wait for an update.
    qa.recv(1 + ATTEMPTS, LEN)
    qb.recv(1 + ATTEMPTS, LEN)
    # Both ways once over the working link: routes and neighbours in place.
    for snd, rcv in ((qa, qb), (qb, qa)):
        snd.send(1, LEN)
        for q in (snd, rcv):
            wc = q.poll(10.0)
            if wc is None or wc.status != e.IBV_WC_SUCCESS:
                sys.exit("the first exchange failed: %s" % (
                    "no completion" if wc is None else status_name(wc.status)))
    for name, snd, rcv in (("%s -> %s" % (dev_a, dev_b), qa, qb),
                           ("%s -> %s" % (dev_b, dev_a), qb, qa)):
        why = SLOW
        for _ in range(ATTEMPTS):
            if not why.startswith(SLOW):
                break
            why = one_way(name, snd, rcv, (dev_a, dev_b), ns)
        point(not why, "%s: a Send posted while the link was down completes after one transport "
              "timeout once it is back" % name, why)
    qa.close()
    qb.close()


if __name__ == "__main__":
    main()
