#!/usr/bin/env bash
# In-guest part of scripts/profile: one perftest line over rvrdma (rvr0 client in rvA, rvr1
# server in rvB; with -x also over rdma_rxe, same boot) under `perf record -a -g` (cpu-clock:
# TCG has no PMU), and text reports per driver in $RVRDMA_RESULTS: by CPU and task, by symbol
# (self and with children) and call graphs, with rvrdma's symbols named from /proc/kallsyms.
# A sample taken while interrupts are off lands where they come back on: time under rvrdma's
# IRQ-safe locks shows as _raw_spin_unlock_irqrestore, called from the function that held one.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"
trap - EXIT

hz=1000 rxe=0
while getopts F:x o; do
	case $o in
	F) hz=$OPTARG ;;
	x) rxe=1 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: profile.sh [-F HZ] [-x] TOOL [ARGS...]" >&2; exit 2; }
out=${RVRDMA_RESULTS:?RVRDMA_RESULTS is not set}
dut_load || exit 1

# module_syms MODE KALLSYMS: with MODE name, copies stdin naming the module addresses
# (0xffffffffc...) perf left as numbers, as symbol+offset; with MODE self, reads sampled addresses
# (`perf script -F ip`) and prints how many fell in each of the module's functions, as a share
# of all samples. The program is an argument: stdin is the data.
module_syms() {
	python3 -c "$(cat <<'PY'
import bisect, collections, re, sys
mode, path = sys.argv[1], sys.argv[2]
syms = sorted((int(a, 16), n) for a, t, n, *_ in (l.split() for l in open(path)))
addrs = [a for a, _ in syms]
def lookup(x):
    i = bisect.bisect_right(addrs, x) - 1
    # A module function is shorter than 128 KiB: farther is another module's.
    return syms[i] if i >= 0 and x - syms[i][0] < 0x20000 else None
if mode == "name":
    def name(m):
        x = int(m.group(0), 16)
        s = lookup(x)
        return m.group(0) if s is None else "%s+0x%x" % (s[1], x - s[0])
    for line in sys.stdin:
        sys.stdout.write(re.sub(r"0xffffffffc[0-9a-f]{7}", name, line))
else:
    total, hits = 0, collections.Counter()
    for line in sys.stdin:
        try:
            x = int(line.split()[0], 16)
        except (IndexError, ValueError):
            continue
        total += 1
        s = lookup(x)
        if s is not None:
            hits[s[1]] += 1
    for n, c in hits.most_common(40):
        print("%8.2f%%  %s" % (100.0 * c / max(total, 1), n))
    share = 100.0 * sum(hits.values()) / max(total, 1)
    print("%8.2f%%  (all of the module, of %d samples)" % (share, total))
PY
)" "$1" "$2"
}

# run TYPE DEV0 DEV1 TOOL ARGS...: the line on fresh links of TYPE, profiled, and its reports.
run() {
	local type=$1 d0=$2 d1=$3 data=/tmp/perf.$1.data syms=$out/kallsyms.$1 pid r
	shift 3
	topo_setup 1 >/dev/null
	link_add "$d0" veth0 "$type" && link_add "$d1" veth1 "$type" || { echo "link add: $LINK_OUT" >&2; return 1; }
	wait_for 30 has_gid "$d0" 10.77.0.1 >/dev/null && wait_for 30 has_gid "$d1" 10.77.0.2 >/dev/null
	grep -w "\[$type\]" /proc/kallsyms >"$syms" 2>/dev/null || : >"$syms"
	perf record -q -e cpu-clock -F "$hz" -a -g -o "$data" -- sleep 100000 >/dev/null 2>&1 &
	pid=$!
	sleep 1
	r=$(PF_SERVER_OUT=$out/server.$type PP_TIMEOUT=900 PP_LISTEN_WAIT=600 pf_run "$1" "$d1" 10.77.0.2 "$d0" 10.77.0.1 "${@:2}" 2>&1)
	kill -INT "$pid"
	wait "$pid"
	topo_cleanup
	{
		echo "# $type: $*"
		grep -E '^ *[0-9]+ +[0-9]+ ' <<<"$r" || { echo "# the tool failed:"; tail -n 12 <<<"$r"; }
		echo "## by CPU and task"
		perf report -i "$data" --sort cpu,comm --stdio -g none 2>/dev/null | grep -v '^#' | grep . | head -20
		echo "## by symbol, self"
		perf report -i "$data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -v '^#' | grep . | head -60
		echo "## the module's functions, self"
		perf script -i "$data" -F ip --hide-call-graph 2>/dev/null | module_syms self "$syms"
		echo "## by symbol, with children"
		perf report -i "$data" --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep . | head -120
		echo "## call graphs (callers, entries of 1% or more)"
		perf report -i "$data" --no-children --sort sym --stdio -g caller,0.5,callee,function,percent \
			--percent-limit 1 2>/dev/null | grep -v '^#' | grep . | head -600
	} | module_syms name "$syms" >"$out/profile.$type.txt"
	echo "# $type: $(grep -E '^ *[0-9]+ +[0-9]+ ' <<<"$r" | head -1) -> $out/profile.$type.txt"
}

run rvrdma rvr0 rvr1 "$@"
if [ "$rxe" = 1 ]; then
	modprobe rdma_rxe
	run rxe rxe0 rxe1 "$@"
fi
