#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Where inside rvrdma a scripts/tcg-count run's work goes, per operation (rvrdma's runs only):

  sites.py blocks DIR N FUNCTION [TOP]
      the blocks of one function (a substring of its symbol, e.g. `QpShared6locked`), by
      offset: instructions a pass, passes per operation, instructions per operation. A block
      run 8 times a call is a loop; a long block run once a packet is often a struct copy.
  sites.py calls DIR N KO TARGET [TOP]
      each call site of TARGET (e.g. `memcpy`, `memset`) in the module KO, the rvrdma.ko the
      run loaded: calls per operation (the passes of the block after the call).

DIR and N as for report.py. Offsets match `objdump -d KO` at the function's address."""
import re
import subprocess
import sys

from report import short


def module_symbols(d):
    """rvrdma's text symbols in the run's kallsyms: name -> loaded address, and the sorted
    addresses of every text symbol (where a function ends)."""
    syms, addrs = {}, []
    with open(f"{d}/kallsyms") as f:
        for line in f:
            p = line.split()
            if len(p) < 3 or p[1] not in "tT":
                continue
            addrs.append(int(p[0], 16))
            if len(p) > 3 and p[3] == "[rvrdma]":
                syms[p[2]] = int(p[0], 16)
    return syms, sorted(addrs)


def passes(path, lo, hi):
    """Block address -> (instructions, passes) of one dump, for blocks in [lo, hi)."""
    out = {}
    with open(path) as f:
        for line in f:
            va, n, execs, *_ = line.split()
            a = int(va, 16)
            if lo <= a < hi:
                out[a] = (int(n), int(execs))
    return out


def per_op(d, n, lo, hi):
    """Block address -> (instructions a pass, passes per operation): the 6N run minus the N
    run, over 5N, each run its dump after minus its dump before."""
    runs = {}
    for iters in (n, 6 * n):
        before = passes(f"{d}/before.rvrdma.{iters}", lo, hi)
        after = passes(f"{d}/after.rvrdma.{iters}", lo, hi)
        runs[iters] = {a: (i, c - before.get(a, (i, 0))[1]) for a, (i, c) in after.items()}
    res = {}
    for a in set(runs[n]) | set(runs[6 * n]):
        i = (runs[6 * n].get(a) or runs[n].get(a))[0]
        c = runs[6 * n].get(a, (i, 0))[1] - runs[n].get(a, (i, 0))[1]
        res[a] = (i, c / (5 * n))
    return res


def blocks(d, n, func, top):
    syms, addrs = module_symbols(d)
    names = [s for s in syms if func in s and not s.startswith("__pfx_")]
    # A function's closures carry its name too: the one ending in it is the function.
    names = [s for s in names if s.endswith(func)] or names
    if len(names) != 1:
        sys.exit(f"{len(names)} rvrdma symbols match {func!r}: {names[:5]}")
    start = syms[names[0]]
    end = next((a for a in addrs if a > start), start + 1)
    res = per_op(d, n, start, end)
    print(f"{short(names[0])}: {sum(i * c for i, c in res.values()):.0f} instructions per operation")
    print("%8s %6s %10s %10s" % ("offset", "insns", "passes", "total"))
    for a, (i, c) in sorted(res.items(), key=lambda x: -x[1][0] * x[1][1])[:top]:
        print("%8x %6d %10.2f %10.0f" % (a - start, i, c, i * c))


def calls(d, n, ko, target, top):
    syms, _ = module_symbols(d)
    dis = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", ko],
                         capture_output=True, text=True, check=True).stdout
    func, fstart, sites = None, 0, []
    for line in dis.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.+)>:$", line)
        if m:
            func, fstart = m.group(2), int(m.group(1), 16)
            continue
        m = re.match(r"^\s+([0-9a-f]+): R_X86_64_PLT32\s+(\S+)-0x4$", line)
        if m and m.group(2) == target and func in syms:
            # The call's relocation is its last four bytes: the block after it starts there.
            ret = int(m.group(1), 16) + 4 - fstart
            sites.append((func, ret, syms[func] + ret))
    if not sites:
        sys.exit(f"no call to {target} in {ko} that the run loaded (the same build?)")
    lo, hi = min(s[2] for s in sites), max(s[2] for s in sites) + 1
    res = per_op(d, n, lo, hi)
    rows = sorted(((res.get(a, (0, 0))[1], short(f), off) for f, off, a in sites), reverse=True)
    print(f"calls to {target} per operation: {sum(r[0] for r in rows):.2f}")
    for c, f, off in rows[:top]:
        if abs(c) > 0.05:
            print("%10.2f  %s +0x%x" % (c, f, off))


def main():
    a = sys.argv[1:]
    if len(a) >= 4 and a[0] == "blocks":
        blocks(a[1], int(a[2]), a[3], int(a[4]) if len(a) > 4 else 30)
    elif len(a) >= 5 and a[0] == "calls":
        calls(a[1], int(a[2]), a[3], a[4], int(a[5]) if len(a) > 5 else 30)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
