#!/usr/bin/python3
"""Unsignaled RDMA Reads and atomics posted back to back, with stock pyverbs: device A reads
from device B's memory and adds to a counter there, in rounds of WRs on one RC QP created
without sq_sig_all. Only the last WR of a round is signaled: RC completes in order, so its
completion reports the whole round. (On rvrdma such doorbells hand their requests to another
CPU, so that the call returns before the responses and the operations overlap.)

After each round it checks every Read's bytes against B's source, and every Fetch & Add's
returned value against the counter's value after the adds posted before it (the responder
executes a QP's atomics in order); after the last round, that B's counter holds the sum of all
adds.

Prints one "ok DESC" / "not ok DESC: WHY" line (see run_points in lib.sh).
usage: unsignaled.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B [--rounds R]"""
import argparse
import os
import random
import sys

import pyverbs.enums as e
from pyverbs.wr import SGE, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import ACCESS, Dev, Qp, point, status_name  # noqa: E402

MR_SIZE = 256 << 10
# B: Read sources in [0, SRC), the counter at COUNTER. A: Read targets at READ_AT + i * 4 KiB,
# Fetch & Add results at RESULT_AT + i * 8.
SRC = 128 << 10
COUNTER = SRC
READ_AT = 0
RESULT_AT = 128 << 10
PER_ROUND = 16  # Reads and as many Fetch & Adds, interleaved
MASK64 = (1 << 64) - 1
B_ACCESS = ACCESS | e.IBV_ACCESS_REMOTE_ATOMIC


def u64(b):
    return int.from_bytes(b, "little")


def run(a, b, rounds, rng):
    qa, qb = Qp(a, depth=2 * PER_ROUND, sig_all=False), Qp(b, depth=2 * PER_ROUND)
    qa.connect(qb)
    qb.connect(qa, access=B_ACCESS)
    src = bytes(rng.getrandbits(8) for _ in range(SRC))
    b.mr.write(src, SRC, 0)
    counter = rng.getrandbits(64)
    b.mr.write(counter.to_bytes(8, "little"), 8, COUNTER)
    for r in range(rounds):
        a.mr.write(b"\xa5" * (PER_ROUND * 8), PER_ROUND * 8, RESULT_AT)
        reads, adds = [], []
        for i in range(PER_ROUND):
            size = rng.choice((1, 8, 1000, 1024, 4096))
            off = rng.randrange(0, SRC - size + 1)
            reads.append((i, off, size))
            # The target starts as the complement of what should land there: every byte differs.
            a.mr.write(bytes(x ^ 0xFF for x in src[off:off + size]), size, READ_AT + i * 4096)
            # pyverbs's SendWR is signaled unless told otherwise.
            wr = SendWR(wr_id=2 * i, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                        sg=[SGE(a.mr.buf + READ_AT + i * 4096, size, a.mr.lkey)], send_flags=0)
            wr.set_wr_rdma(b.mr.rkey, b.mr.buf + off)
            qa.qp.post_send(wr)
            add = rng.getrandbits(64)
            adds.append(add)
            last = i == PER_ROUND - 1
            wr = SendWR(wr_id=2 * i + 1, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                        sg=[SGE(a.mr.buf + RESULT_AT + i * 8, 8, a.mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED if last else 0)
            wr.set_wr_atomic(b.mr.rkey, b.mr.buf + COUNTER, add, 0)
            qa.qp.post_send(wr)
        wc = qa.poll(30.0)
        if wc is None:
            return "round %d: no completion for its signaled WR" % r
        if wc.status != e.IBV_WC_SUCCESS:
            return "round %d: completion status %s" % (r, status_name(wc.status))
        if wc.wr_id != 2 * PER_ROUND - 1:
            return "round %d: a completion for wr_id %d, an unsignaled WR" % (r, wc.wr_id)
        extra = qa.poll(0.05)
        if extra is not None:
            return "round %d: a completion for an unsignaled WR (wr_id %d)" % (r, extra.wr_id)
        for i, off, size in reads:
            got = a.mr.read(size, READ_AT + i * 4096)
            if got != src[off:off + size]:
                bad = next(k for k in range(size) if got[k] != src[off + k])
                return ("round %d: Read %d (%d bytes from B+%d) differs at byte %d: %#x, want %#x"
                        % (r, i, size, off, bad, got[bad], src[off + bad]))
        for i, add in enumerate(adds):
            got = u64(a.mr.read(8, RESULT_AT + i * 8))
            if got != counter:
                return ("round %d: Fetch & Add %d returned %#x, want %#x"
                        % (r, i, got, counter))
            counter = (counter + add) & MASK64
    final = u64(b.mr.read(8, COUNTER))
    if final != counter:
        return "B's counter is %#x after the last round, want %#x" % (final, counter)
    qa.close()
    qb.close()
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dev_a")
    p.add_argument("gid_a", type=int)
    p.add_argument("dev_b")
    p.add_argument("gid_b", type=int)
    p.add_argument("--rounds", type=int, default=50)
    args = p.parse_args()
    seed = random.randrange(1 << 32)
    print("# seed %d" % seed)
    a = Dev(args.dev_a, args.gid_a, mr_size=MR_SIZE)
    b = Dev(args.dev_b, args.gid_b, access=B_ACCESS, mr_size=MR_SIZE)
    why = run(a, b, args.rounds, random.Random(seed))
    point(why is None, "%d rounds of %d unsignaled RDMA Reads and Fetch & Adds, each round's last "
          "signaled: every Read's bytes and every atomic's result are right"
          % (args.rounds, PER_ROUND), why or "")


if __name__ == "__main__":
    main()
