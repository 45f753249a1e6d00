#!/usr/bin/env bash
# In-guest part of scripts/bench: runs the perftest set over rvrdma (rvr0 in rvA, rvr1 in rvB),
# then over rdma_rxe on the same veth pair, and prints the comparison table.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"
trap - EXIT

size=65536 bw_iters=2000 lat_iters=1000 rps=0
while getopts s:n:r o; do
	case $o in
	s) size=$OPTARG ;;
	n) bw_iters=$OPTARG lat_iters=$OPTARG ;;
	r) rps=1 ;;
	*) exit 2 ;;
	esac
done
tools=(ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat)
declare -A res

# run_set TYPE DEV0 DEV1: every tool between DEV1 (server, rvB) and DEV0 (client, rvA).
run_set() {
	local type=$1 d0=$2 d1=$3 t args out v
	topo_setup 1 >/dev/null
	link_add "$d0" veth0 "$type" && link_add "$d1" veth1 "$type" || { echo "link add: $LINK_OUT" >&2; return 1; }
	wait_for 30 has_gid "$d0" 10.77.0.1 >/dev/null && wait_for 30 has_gid "$d1" 10.77.0.2 >/dev/null
	if [ "$rps" = 1 ]; then
		# Receive packet steering on both veth ends: received packets are processed on any CPU,
		# not only on the sender's (veth hands packets to the sending CPU's backlog).
		in_a sh -c 'echo 3 > /sys/class/net/veth0/queues/rx-0/rps_cpus'
		in_b sh -c 'echo 3 > /sys/class/net/veth1/queues/rx-0/rps_cpus'
	fi
	for t in "${tools[@]}"; do
		case $t in
		ib_atomic_bw) args=(-n "$bw_iters") ;;
		ib_atomic_lat) args=(-n "$lat_iters") ;;
		*_bw) args=(-n "$bw_iters" -s "$size") ;;
		*) args=(-n "$lat_iters" -s 64) ;;
		esac
		out=$(PP_TIMEOUT=600 pf_run "$t" "$d1" 10.77.0.2 "$d0" 10.77.0.1 "${args[@]}" 2>&1)
		# The result line is the first line starting with the message size.
		if [[ $t == *_bw ]]; then
			v=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $4; exit }' <<<"$out")
		else
			v=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $5; exit }' <<<"$out")
		fi
		res[$type,$t]=${v:-fail}
		echo "# $type $t: ${v:-failed}" >&2
	done
	topo_cleanup
}

dut_load >/dev/null
run_set rvrdma rvr0 rvr1
run_set rxe rxe0 rxe1

printf '\n%-14s %-6s %14s %14s %9s\n' test unit rvrdma rxe ratio
for t in "${tools[@]}"; do
	a=${res[rvrdma,$t]} b=${res[rxe,$t]}
	if [[ $t == *_bw ]]; then unit=MB/s; else unit=usec; fi
	if [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ ]] && awk -v b="$b" 'BEGIN { exit !(b > 0) }'; then
		# ratio > 1 means rvrdma is better: bandwidth a/b, latency b/a.
		if [ "$unit" = MB/s ]; then r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", a / b }')
		else r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", b / a }'); fi
	else
		r=-
	fi
	printf '%-14s %-6s %14s %14s %9s\n' "$t" "$unit" "$a" "$b" "$r"
done
echo "(ratio > 1: rvrdma better; bandwidth size $size B x $bw_iters, latency 64 B x $lat_iters;" \
	"RPS on the veths: $([ "$rps" = 1 ] && echo "on (rps_cpus=3)" || echo off))"
