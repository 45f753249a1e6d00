#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The report of scripts/lock-waits: lock-waits.py TRACE [DEPTH]

TRACE is the guest's ftrace output: `lock_wait` (queued_spin_lock_slowpath entered, with a
stack trace) and `lock_got` (it returned) events, and the markers `lock-waits: start` and
`lock-waits: end` around the perftest line. Prints the waits that began between the markers,
grouped by task and the DEPTH callers (default 4) above the lock functions: how many, the
lock word, and the total and median time from the first look to the lock in microseconds.
Those times include the probes' own cost (an int3 each under TCG)."""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tcg"))
from report import short  # noqa: E402

EVENT = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): "
                   r"(<stack trace>|\w+):? ?(.*)$")
# Frames that say nothing about the waiter: the probe's, the lock's own and its wrappers.
SKIP = re.compile(r"kprobe|int3|optimized_callback|pre_handler|_raw_spin_lock|"
                  r"rvr_spin_(try)?lock|queued_spin_lock_slowpath|^0x")


def task_name(comm):
    """`kworker/0:2H` -> `kworker`: workers and per-CPU threads grouped across CPUs."""
    return re.sub(r"/.*$", "", comm)


def parse(path, depth):
    """(waits between the markers: key -> [microseconds], their lock words, whether both markers
    were seen)."""
    waits = collections.defaultdict(list)
    locks = collections.defaultdict(collections.Counter)
    # cpu -> [(start, (task, frames), lock)], nested by IRQs
    open_waits = collections.defaultdict(list)
    # cpu -> a wait whose stack trace is still to come (another CPU's events may come first):
    # [comm, start, lock, frames], or None for one outside the markers.
    pending = {}
    inside = started = ended = False
    frames = None  # the frames of the stack trace being read

    def settle(cpu):
        w = pending.pop(cpu, False)
        if w is None:
            open_waits[cpu].append((0.0, None, None))
        elif w:
            # The frames list fills in after this, as the stack trace's lines are read.
            comm, start, lock, fr = w
            open_waits[cpu].append((start, (task_name(comm), fr), lock))

    with open(path) as f:
        for line in f:
            if line.lstrip().startswith("=>"):
                frame = line.split("=>", 1)[1].strip()
                if frames is not None and not SKIP.search(frame) and len(frames) < depth:
                    frames.append(short(frame))
                continue
            frames = None
            m = EVENT.match(line)
            if not m:
                continue
            comm, cpu, ev, rest = m.group(1), m.group(3), m.group(5), m.group(6)
            ts = float(m.group(4))
            if ev == "tracing_mark_write":
                if "lock-waits: start" in rest:
                    inside = started = True
                elif "lock-waits: end" in rest:
                    inside, ended = False, True
            elif ev == "<stack trace>":
                w = pending.get(cpu)
                if w:
                    frames = w[3]
                settle(cpu)
            elif ev == "lock_wait":
                settle(cpu)
                lock = re.search(r"lock=(\S+)", rest)
                pending[cpu] = [comm, ts, lock.group(1) if lock else "?", []] if inside else None
            elif ev == "lock_got":
                settle(cpu)
                if open_waits[cpu]:
                    start, key, lock = open_waits[cpu].pop()
                    if key is not None:
                        key = (key[0], tuple(key[1]))
                        waits[key].append((ts - start) * 1e6)
                        locks[key][lock] += 1
    return waits, locks, started and ended


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    waits, locks, marked = parse(sys.argv[1], depth)
    if not marked:
        sys.exit("the trace has no start and end markers: the line did not run")
    overrun = os.path.join(os.path.dirname(sys.argv[1]), "overrun")
    if os.path.exists(overrun) and open(overrun).read().strip() not in ("", "0"):
        print(f"warning: the trace buffer dropped {open(overrun).read().strip()} events")
    total = sum(len(v) for v in waits.values())
    print(f"{total} lock waits during the line (time: first look to lock, probes included)")
    print("%7s %10s %8s  %-18s %s" % ("waits", "total us", "median", "lock", "task: callers"))
    for key, v in sorted(waits.items(), key=lambda kv: -len(kv[1])):
        v.sort()
        lock, n = locks[key].most_common(1)[0]
        lock = lock if n == len(v) else f"{lock} +{len(locks[key]) - 1}"
        print("%7d %10.0f %8.1f  %-18s %s: %s" % (len(v), sum(v), v[len(v) // 2], lock, key[0],
                                                  " < ".join(key[1]) or "?"))


if __name__ == "__main__":
    main()
