#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Report of scripts/tcg-count: guest kernel instructions, indirect branches and memory accesses
per operation, by function, for rvrdma and rdma_rxe side by side, and the instructions TCG runs
in a helper call (atomics, `pause`, FPU state, interrupt flags, system instructions). Each driver ran the line at N and 6N
iterations; the difference of the two runs' counts over 5N is the cost of one operation, without
the set-up (connection, memory registration, process start) both runs share.

Indirect calls are counted in the retpoline thunk that makes them (`__x86_indirect_thunk_*`),
returns in the function returning. Usage: report.py DIR N [TOP]"""
import bisect
import collections
import re
import sys


def load_symbols(path):
    """Text symbols of /proc/kallsyms, sorted: (address, name, module or "")."""
    syms = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[1] in "tTwW" and not p[2].startswith("__pfx_"):
                syms.append((int(p[0], 16), p[2], p[3].strip("[]") if len(p) > 3 else ""))
    syms.sort()
    return syms


def short(name):
    """A Rust v0 symbol as `Type::function` (`QpShared::drive`), or its last two names when no
    type is named; a C name as is. Not a full demangler: disambiguators (`s<base62>_`) and
    back-references (`B<base62>_`) are dropped, then each `<length><identifier>` is read at
    its length."""
    if not name.startswith("_R"):
        return name
    rest = re.sub(r"(?<=[CMXYNtvB])s[0-9A-Za-z]*_|B[0-9A-Za-z]*_", "", name[2:])
    idents, i = [], 0
    while i < len(rest):
        m = re.match(r"(\d+)_?", rest[i:])
        if not m:
            i += 1
            continue
        n = int(m.group(1))
        start = i + m.end()
        ident = rest[start:start + n]
        if len(ident) == n and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident):
            idents.append(ident)
            i = start + n
        else:
            i += len(m.group(1))
    if not idents:
        return name
    types = [x for x in idents if x[:1].isupper()]
    if not types:
        return "::".join(idents[-2:])
    # The function is the last lower-case name right after a type's (generic arguments may
    # follow it); its type, the first type named (the impl's, before its generic arguments).
    fns = [b for a, b in zip(idents, idents[1:]) if a[:1].isupper() and b[:1].islower()]
    fn = fns[-1] if fns else idents[-1]
    return "%s::%s%s" % (types[0], fn, "<..>" if name.startswith("_RI") else "")


# The helper-run kinds the plugin counts, in its dump's column order.
KINDS = ("atomic", "pause", "fpu", "flags", "system")
NCOUNTS = 3 + len(KINDS)


def per_function(path, syms):
    """Instructions, indirect branches, memory accesses and each of KINDS per function in one
    dump (a dump without a column counts none of it)."""
    addrs = [a for a, _, _ in syms]
    counts = tuple(collections.Counter() for _ in range(NCOUNTS))
    with open(path) as f:
        for line in f:
            va, n, execs, indirect, *rest = line.split()
            i = bisect.bisect_right(addrs, int(va, 16)) - 1
            if i < 0:
                continue
            _, name, mod = syms[i]
            key = (short(name), mod)
            counts[0][key] += int(n) * int(execs)
            if indirect == "1":
                counts[1][key] += int(execs)
            counts[2][key] += int(rest[0]) if rest else 0
            for j, k in enumerate(rest[1:1 + len(KINDS)]):
                counts[3 + j][key] += int(k) * int(execs)
    return counts


def run_counts(d, driver, iters, syms):
    """One run's counts: the dump after it minus the dump before it."""
    before = per_function(f"{d}/before.{driver}.{iters}", syms)
    after = per_function(f"{d}/after.{driver}.{iters}", syms)
    for a, b in zip(after, before):
        a.subtract(b)
    return after


def per_op(d, driver, n, syms):
    """(instructions, branches, accesses, *KINDS) per operation and function: 6N run minus N
    run, over 5N."""
    one = run_counts(d, driver, n, syms)
    six = run_counts(d, driver, 6 * n, syms)
    if sum(one[0].values()) <= 0 or sum(six[0].values()) <= 0:
        sys.exit(f"no instructions counted for {driver}: did the guest run under TCG?")
    ops = 5 * n
    return tuple({k: (c6[k] - c1[k]) / ops for k in set(c1) | set(c6)} for c1, c6 in zip(one, six))


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    syms = load_symbols(f"{d}/kallsyms")
    res = {drv: per_op(d, drv, n, syms) for drv in ("rvrdma", "rxe")}
    own = {
        "rvrdma": lambda k: k[1] == "rvrdma",
        "rxe": lambda k: k[1] == "rdma_rxe" or k[0].startswith("rxe_"),
    }
    print("per operation   instructions  indirect branches  memory accesses   of which the "
          "driver's own code")
    for drv, (ins, br, acc, *_) in res.items():
        mine = [sum(v for k, v in c.items() if own[drv](k)) for c in (ins, br, acc)]
        print("%-8s %19.0f %18.0f %16.0f   %.0f instructions, %.0f branches, %.0f accesses" %
              (drv, sum(ins.values()), sum(br.values()), sum(acc.values()), *mine))
    print("\nper operation, run in a helper: " + ", ".join(KINDS) + " (the driver's own code)")
    for drv, c in res.items():
        print("%-8s " % drv + ", ".join(
            "%.0f (%.0f)" % (sum(c[3 + j].values()),
                             sum(v for k, v in c[3 + j].items() if own[drv](k)))
            for j in range(len(KINDS))))
    keys = set(res["rvrdma"][0]) | set(res["rxe"][0])
    rank = sorted(keys, key=lambda k: -max(abs(res[drv][0].get(k, 0)) for drv in res))
    print("\n%30s %30s" % ("rvrdma", "rdma_rxe"))
    print("%11s %8s %9s %11s %8s %9s   function" % (("insns", "branches", "accesses") * 2))
    for k in rank[:top]:
        r = [res["rvrdma"][c].get(k, 0) for c in range(3)]
        x = [res["rxe"][c].get(k, 0) for c in range(3)]
        print("%11.0f %8.1f %9.0f %11.0f %8.1f %9.0f   %s%s" %
              (*r, *x, k[0], " [%s]" % k[1] if k[1] else ""))
    for j, kind in enumerate(KINDS[:2]):
        c = 3 + j
        rank = sorted(keys, key=lambda k: -max(res[drv][c].get(k, 0) for drv in res))
        rank = [k for k in rank if max(res[drv][c].get(k, 0) for drv in res) >= 0.5]
        if rank:
            print("\n%s per operation: %8s %8s   function" % (kind, "rvrdma", "rdma_rxe"))
            for k in rank[:top]:
                print("%22s %8.1f %8.1f   %s%s" % ("", res["rvrdma"][c].get(k, 0),
                                                  res["rxe"][c].get(k, 0), k[0],
                                                  " [%s]" % k[1] if k[1] else ""))


if __name__ == "__main__":
    main()
