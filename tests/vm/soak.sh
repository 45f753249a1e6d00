#!/usr/bin/env bash
# Soak (run by scripts/soak, not by the suite): mixed, data-checked traffic for a long time, on
# the debug kernel above all (RVRDMA_DEBUG=1: KASAN, lockdep, kmemleak). Cycles through
# traffic.py over RC (every op), RC with a shared receive queue, UC and UD, RC with four QP pairs
# and 1 MiB messages, the perftest bandwidth programs and ibv_rc_pingpong, rvrdma <-> rvrdma for
# the first three quarters of the time and rvrdma <-> rdma_rxe for the rest. Every traffic.py run
# must pass (every completion and byte checked), every program exit 0; afterwards the devices
# hold what they held before and run-all.sh checks the kernel log and kmemleak.
# RVRDMA_SOAK_MINUTES sets the length (default 30).
. "$(dirname "$0")/lib.sh"

MINUTES=${RVRDMA_SOAK_MINUTES:-30}
DIR=$(mktemp -d)

main() {
	ktap_print_header
	ktap_set_plan 5
	local t0 end rxe_at base
	t0=$(klog_mark "soak start")
	dut_setup 1
	pair_up
	base=$(held "${DUT}0") || fail_rest "rdma resource show failed"
	end=$((SECONDS + MINUTES * 60))
	rxe_at=$((SECONDS + MINUTES * 45))
	check "rvrdma <-> rvrdma: every run passed for $((MINUTES * 3 / 4)) min" cycles "${DUT}1" "$rxe_at"
	diag "$(runs) runs, ${SECONDS} s into the soak"
	rxe_on_b
	check "rvrdma <-> rdma_rxe: every run passed until the end ($MINUTES min in all)" cycles rxe1 "$end"
	diag "$(runs) runs in all"
	check "at least one full cycle with each peer ran (18 runs)" eval '[ "$(runs)" -ge 18 ]'
	check "${DUT}0 holds what it held before (rdma resource show: no leak)" \
		eval '[ "$(held "${DUT}0")" = "$base" ] || { echo "before: $base"; held "${DUT}0"; false; }'
	check "no kernel report during the soak (lockdep, KASAN, refcount, hung task)" \
		klog_clean_since "$t0"
	ktap_finished
}

# held DEV: DEV's line of `rdma resource show` (counts of PDs, CQs, QPs, MRs...).
held() {
	rdma resource show | awk -v d="^$1:\$" '$2 ~ d'
}

# runs: how many soak steps ran (each appends a line to $DIR/runs: check runs them in a subshell).
runs() { grep -c . "$DIR/runs" 2>/dev/null || echo 0; }

# run WHAT CMD...: one soak step; counts it, and on failure shows its output and fails.
run() {
	local what=$1 out rc t1=$SECONDS
	shift
	out=$("$@" 2>&1)
	rc=$?
	echo "$what" >>"$DIR/runs"
	if [ "$rc" -ne 0 ]; then
		echo "FAILED after $((SECONDS - t1)) s: $what (exit status $rc)"
		tail -n 30 <<<"$out"
		return 1
	fi
}

# traffic PEER ARGS...: traffic.py between ${DUT}0 and PEER over link 1's addresses.
traffic() {
	local peer=$1
	shift
	timeout "$((300 * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" "${DUT}0" "$peer" \
		--gid-a 10.77.0.1 --gid-b 10.77.0.2 "$@"
}

# cycles PEER UNTIL: whole cycles of every kind of traffic until SECONDS reaches UNTIL (at least
# one); fails at the first failed step.
cycles() {
	local peer=$1 until=$2 p
	while :; do
		run "RC, every op" traffic "$peer" --ops all --qps 2 --random 300 || return 1
		run "RC with an SRQ" traffic "$peer" --srq --qps 2 --random 200 || return 1
		# UC has no flow control: the load 51-ud-uc uses stays below the receiving backlog.
		run "UC" traffic "$peer" --qp-type uc --qps 2 --window 8 \
			--sizes 1,2,63,mtu-1,mtu,mtu+1,3*mtu+7,16K,64K --random 200 || return 1
		run "UD" traffic "$peer" --qp-type ud --qps 2 --sizes 1,63,mtu-1,mtu --random 200 || return 1
		run "RC, 4 QP pairs, 1 MiB messages" traffic "$peer" --qps 4 --sizes 1M,4097 --iters 2 || return 1
		for p in ib_write_bw ib_send_bw ib_read_bw; do
			run "$p" pf_run "$p" "$peer" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 65536 -n 500 || return 1
		done
		run "ibv_rc_pingpong" pp_run ibv_rc_pingpong "$peer" 10.77.0.2 "${DUT}0" 10.77.0.1 \
			-n 500 -s 4096 || return 1
		[ "$SECONDS" -lt "$until" ] || return 0
	done
}

trap 'rm -rf "$DIR"; topo_cleanup' EXIT
main "$@"
