#!/usr/bin/env bash
# In-guest part of scripts/lock-waits: runs one perftest line over rvrdma (rvr1 server in rvB,
# rvr0 client in rvA) or rdma_rxe (-x rxe), with a kprobe (and a stack trace) on
# queued_spin_lock_slowpath and a return probe on it, and writes the trace, marked where the
# line starts and ends, to $RVRDMA_RESULTS/trace.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"
trap - EXIT

n=2000 type=rvrdma
while getopts x:n: o; do
	case $o in
	x) type=$OPTARG ;;
	n) n=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: lock-waits.sh [-x rxe] [-n N] TOOL [ARGS...]" >&2; exit 2; }
out=${RVRDMA_RESULTS:?RVRDMA_RESULTS is not set}
t=/sys/kernel/tracing
d0=rvr0 d1=rvr1
if [ "$type" = rxe ]; then
	modprobe rdma_rxe || exit 1
	d0=rxe0 d1=rxe1
else
	RVRDMA_LINK_TYPE=rvrdma dut_load || exit 1
fi
topo_setup 1 >/dev/null || { echo "no topology" >&2; exit 1; }
link_add "$d0" veth0 "$type" && link_add "$d1" veth1 "$type" ||
	{ echo "link add: $LINK_OUT" >&2; exit 1; }
wait_for 30 has_gid "$d0" 10.77.0.1 >/dev/null && wait_for 30 has_gid "$d1" 10.77.0.2 >/dev/null ||
	{ echo "no GIDs on $d0/$d1" >&2; exit 1; }
# A jump-optimized probe has no frame the unwinder can walk: plain int3 probes.
echo 0 >/proc/sys/debug/kprobes-optimization
echo 'p:lock_wait queued_spin_lock_slowpath lock=%di:x64' >"$t/kprobe_events" &&
	echo 'r:lock_got queued_spin_lock_slowpath' >>"$t/kprobe_events" || exit 1
echo 16384 >"$t/buffer_size_kb"
echo stacktrace >"$t/events/kprobes/lock_wait/trigger"
echo >"$t/trace"
echo 1 >"$t/events/kprobes/enable"
echo "lock-waits: start" >"$t/trace_marker"
r=$(PF_SERVER_OUT=$out/server PP_TIMEOUT=900 PP_LISTEN_WAIT=600 \
	pf_run "$1" "$d1" 10.77.0.2 "$d0" 10.77.0.1 "${@:2}" -n "$n" 2>&1)
echo "lock-waits: end" >"$t/trace_marker"
echo 0 >"$t/events/kprobes/enable"
cp "$t/trace" "$out/trace"
# Events the ring buffer dropped (the report says so rather than count too few waits).
awk '$1 == "overrun:" { n += $2 } END { print n + 0 }' "$t"/per_cpu/cpu*/stats >"$out/overrun"
grep -qE '^ *[0-9]+ +[0-9]+ ' <<<"$r" || { echo "# the tool failed:"; tail -n 12 <<<"$r"; exit 1; }
echo "# $type, $n iterations: $(grep -E '^ *[0-9]+ +[0-9]+ ' <<<"$r" | head -1)"
