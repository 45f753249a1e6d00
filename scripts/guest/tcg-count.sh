#!/usr/bin/env bash
# In-guest part of scripts/tcg-count: runs one perftest line over rvrdma (rvr1 server in rvB,
# rvr0 client in rvA) and then over rdma_rxe on fresh links, each twice (N and 6N iterations),
# the plugin's counts written before and after each run to $RVRDMA_RESULTS/before.DRIVER.ITERATIONS
# and after.DRIVER.ITERATIONS, with /proc/kallsyms for the report.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"
trap - EXIT

n=2000
while getopts n: o; do
	case $o in
	n) n=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: tcg-count.sh [-n N] TOOL [ARGS...]" >&2; exit 2; }
out=${RVRDMA_RESULTS:?RVRDMA_RESULTS is not set}

# dump NAME: has the counting plugin write its counts so far to $out/NAME (through its control
# file, each command numbered so that an answer is never taken for another's).
seq=0
dump() {
	local i a
	seq=$((seq + 1))
	echo "$seq dump $1" >"$out/ctl" || return 1
	for ((i = 0; i < 150; i++)); do
		a=$(cat "$out/ctl" 2>/dev/null)
		[ "$a" = "done $seq" ] && return 0
		[ "$a" = "error $seq" ] && break
		sleep 0.2
	done
	echo "the plugin did not write $1" >&2
	return 1
}

dut_load || exit 1
modprobe rdma_rxe || exit 1
cat /proc/kallsyms >"$out/kallsyms"

# run TYPE DEV0 DEV1 ITERS TOOL ARGS...: the line on fresh links of TYPE, counted.
run() {
	local type=$1 d0=$2 d1=$3 iters=$4 r
	shift 4
	topo_setup 1 >/dev/null
	link_add "$d0" veth0 "$type" && link_add "$d1" veth1 "$type" || { echo "link add: $LINK_OUT" >&2; return 1; }
	wait_for 30 has_gid "$d0" 10.77.0.1 >/dev/null && wait_for 30 has_gid "$d1" 10.77.0.2 >/dev/null ||
		{ echo "no GIDs on $d0/$d1" >&2; topo_cleanup; return 1; }
	dump "before.$type.$iters" || return 1
	r=$(PF_SERVER_OUT=$out/server.$type.$iters PP_TIMEOUT=900 PP_LISTEN_WAIT=600 pf_run "$1" "$d1" 10.77.0.2 "$d0" 10.77.0.1 "${@:2}" -n "$iters" 2>&1)
	dump "after.$type.$iters" || return 1
	topo_cleanup
	grep -qE '^ *[0-9]+ +[0-9]+ ' <<<"$r" || {
		echo "# $type: the tool failed:"
		tail -n 12 <<<"$r"
		echo "# its server:"
		tail -n 12 "$out/server.$type.$iters"
		return 1
	}
	echo "# $type, $iters iterations: $(grep -E '^ *[0-9]+ +[0-9]+ ' <<<"$r" | head -1)"
}

rc=0
for type in rvrdma rxe; do
	d0=rvr0 d1=rvr1
	[ "$type" = rxe ] && d0=rxe0 d1=rxe1
	for iters in "$n" $((6 * n)); do
		run "$type" "$d0" "$d1" "$iters" "$@" || rc=1
	done
done
exit "$rc"
