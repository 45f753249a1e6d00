#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Report of scripts/tcg-count: guest kernel instructions and indirect branches per operation,
by function, for rvrdma and rdma_rxe side by side. Each driver ran the line at N and 6N
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


def per_function(path, syms):
    """Instructions and indirect branches per function in one dump."""
    addrs = [a for a, _, _ in syms]
    insns, branches = collections.Counter(), collections.Counter()
    with open(path) as f:
        for line in f:
            va, n, execs, indirect = line.split()
            i = bisect.bisect_right(addrs, int(va, 16)) - 1
            if i < 0:
                continue
            _, name, mod = syms[i]
            key = (short(name), mod)
            insns[key] += int(n) * int(execs)
            if indirect == "1":
                branches[key] += int(execs)
    return insns, branches


def run_counts(d, driver, iters, syms):
    """One run's counts: the dump after it minus the dump before it."""
    bi, bb = per_function(f"{d}/before.{driver}.{iters}", syms)
    ai, ab = per_function(f"{d}/after.{driver}.{iters}", syms)
    ai.subtract(bi)
    ab.subtract(bb)
    return ai, ab


def per_op(d, driver, n, syms):
    """(instructions, branches) per operation and function: 6N run minus N run, over 5N."""
    i1, b1 = run_counts(d, driver, n, syms)
    i6, b6 = run_counts(d, driver, 6 * n, syms)
    if sum(i1.values()) <= 0 or sum(i6.values()) <= 0:
        sys.exit(f"no instructions counted for {driver}: did the guest run under TCG?")
    ops = 5 * n
    ins = {k: (i6[k] - i1[k]) / ops for k in set(i1) | set(i6)}
    br = {k: (b6[k] - b1[k]) / ops for k in set(b1) | set(b6)}
    return ins, br


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    syms = load_symbols(f"{d}/kallsyms")
    res = {drv: per_op(d, drv, n, syms) for drv in ("rvrdma", "rxe")}
    own = {
        "rvrdma": lambda k: k[1] == "rvrdma",
        "rxe": lambda k: k[1] == "rdma_rxe" or k[0].startswith("rxe_"),
    }
    print("per operation      instructions   indirect branches   of which the driver's own code")
    for drv, (ins, br) in res.items():
        mine_i = sum(v for k, v in ins.items() if own[drv](k))
        mine_b = sum(v for k, v in br.items() if own[drv](k))
        print("%-8s %20.0f %19.0f   %.0f instructions, %.0f branches" %
              (drv, sum(ins.values()), sum(br.values()), mine_i, mine_b))
    keys = set(res["rvrdma"][0]) | set(res["rxe"][0])
    rank = sorted(keys, key=lambda k: -max(abs(res[drv][0].get(k, 0)) for drv in res))
    print("\n%11s %9s %11s %9s   function (rvrdma insns, branches | rdma_rxe insns, branches)" %
          ("rvrdma", "", "rdma_rxe", ""))
    for k in rank[:top]:
        ri, rb = res["rvrdma"][0].get(k, 0), res["rvrdma"][1].get(k, 0)
        xi, xb = res["rxe"][0].get(k, 0), res["rxe"][1].get(k, 0)
        print("%11.0f %9.1f %11.0f %9.1f   %s%s" % (ri, rb, xi, xb, k[0], " [%s]" % k[1] if k[1] else ""))


if __name__ == "__main__":
    main()
