#!/usr/bin/env bash
# Allocation failures (failslab and fail_page_alloc, tests/vm/failslab_verbs.py). Only the
# helper's own allocations fail: task-filter is on and the helper sets its fail-nth or
# make-it-fail right around each verb call; every allocation is eligible (ignore-gfp-wait off,
# min-order 0), user pages are not (a page fault would only retry).
#  - Each create verb on rvr0 (PD, CQ, MR of user memory, SRQ, AH, MW, RC/UC/UD QP) and each
#    transition of an RC QP to RTS whose peer on rvr1 is connected: every allocation site the
#    call reaches fails in turn (fail-nth), then RVRDMA_FAILSLAB_ITERS (200) calls fail
#    allocations at 10%. Each call succeeds or fails with a clean errno, never hangs; every
#    object is destroyed and the `rdma resource` counts come back (nothing left behind); a QP
#    whose modify failed keeps its state, and the pair then carries data.
#  - The datapath: RVRDMA_FAILSLAB_WRS (2000) Sends, Writes and Reads posted on an RC pair with
#    make-it-fail on, so the skbs the send doorbell builds inline fail (send_err counts them):
#    every WR completes with its bytes right, or the QP stops at a retry-exceeded completion;
#    never wrong data, never a hang. A fresh connection without faults moves data-checked traffic.
#  - Afterwards the counts are where they were, rmmod and reload work (no reference left), and
#    the kernel log has no report. An allocation-failure report (warn_alloc: a line and a stack
#    dump) is no bug and has a point of its own (warn_alloc_point).
. "$(dirname "$0")/lib.sh"

FI=/sys/kernel/debug
PERCENT=10
ITERS=${RVRDMA_FAILSLAB_ITERS:-200}
WRS=${RVRDMA_FAILSLAB_WRS:-2000}
VERBS_POINTS=28
DATA_POINTS=3
DIR=$(mktemp -d)
declare -A FI_SAVED=()

main() {
	ktap_print_header
	ktap_set_plan $((VERBS_POINTS + DATA_POINTS + 9))
	[ "$RVRDMA_LINK_TYPE" = rvrdma ] || skip_all "the counters and the module reload checked are rvrdma's"
	local t0 e0 r0 base
	t0=$(klog_mark "69-fault-injection start")
	dut_setup 1
	pair_up
	fi_setup >"$DIR/fi.txt" 2>&1
	result "failslab and fail_page_alloc set: task filter, ${PERCENT}%, every allocation eligible, quiet" \
		$? "$(cat "$DIR/fi.txt")" || fail_rest "fault injection could not be set up"
	base=$(res_counts)
	diag "$base"
	run_points "$VERBS_POINTS" "failslab_verbs.py verbs" helper "$((1500 * ${RVRDMA_TIME_SCALE:-1}))" \
		verbs "${DUT}0" "$GA" "${DUT}1" "$GB" "$ITERS"
	e0=$(link_stat "${DUT}0" send_err)
	r0=$(link_stat "${DUT}0" retransmitted_pkts)
	run_points "$DATA_POINTS" "failslab_verbs.py datapath" helper "$((1200 * ${RVRDMA_TIME_SCALE:-1}))" \
		datapath "${DUT}0" "$GA" "${DUT}1" "$GB" "$WRS"
	diag "${DUT}0: send_err +$(($(link_stat "${DUT}0" send_err) - e0))," \
		"retransmitted_pkts +$(($(link_stat "${DUT}0" retransmitted_pkts) - r0))"
	check "the failed allocations reached rvrdma's transmit path (${DUT}0's send_err grew)" \
		grew "${DUT}0" send_err "$e0"
	fi_restore >"$DIR/fi.txt" 2>&1
	result "fault injection back to its settings before the test" $? "$(cat "$DIR/fi.txt")"
	check "a fresh connection without fault injection moves data-checked traffic" \
		timeout "$((300 * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --qps 2 --random 200 \
		--sizes 1,1024,65536
	check "the rdma resource counts of ${DUT}0 and ${DUT}1 are back where they were" \
		wait_for 10 same_counts "$base"
	check "rmmod rvrdma and load it again (no reference left behind)" reload
	diag "allocation-failure reports (warn_alloc) since the start: $(dmesg | klog_window "$t0" |
		grep -cE -- "$KLOG_WARN_ALLOC")"
	check "no kernel report (oops, KASAN, WARN, refcount, lockdep, hung task)" \
		klog_clean_since "$t0"
	ktap_finished
}

# helper SECS ARGS...: failslab_verbs.py ARGS with a time limit, its heap never trimmed (see its
# docstring: Python's own allocations must not fail inside a faulted call).
helper() {
	local secs=$1
	shift
	timeout "$secs" env PYTHONMALLOC=malloc \
		GLIBC_TUNABLES=glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=33554432 \
		"$PY" "$RVRDMA_TESTS_DIR/failslab_verbs.py" "$@"
}

# fi_set KNOB VALUE: writes VALUE to $FI/KNOB, its value before kept for fi_restore (run it in
# this shell, not in $(...)). A missing knob fails.
fi_set() {
	local f=$FI/$1
	[ -w "$f" ] || { echo "no fault-injection knob $f"; return 1; }
	[ -n "${FI_SAVED[$f]+set}" ] || FI_SAVED[$f]=$(cat "$f") || return 1
	echo "$2" >"$f" || { echo "cannot write $2 to $f"; return 1; }
	[ "$(cat "$f")" = "$2" ] || { echo "$f reads $(cat "$f") after $2 was written"; return 1; }
}

# fi_setup: both capabilities limited to tasks with make-it-fail (or fail-nth) before the
# probability is raised, so no other task ever sees a failure.
fi_setup() {
	local t k
	mountpoint -q "$FI" || mount -t debugfs debugfs "$FI" || { echo "cannot mount debugfs on $FI"; return 1; }
	for k in /proc/thread-self/make-it-fail /proc/thread-self/fail-nth; do
		[ -w "$k" ] || { echo "no $k"; return 1; }
	done
	for t in failslab fail_page_alloc; do
		fi_set "$t/task-filter" Y || return 1
		fi_set "$t/verbose" 0 || return 1
		fi_set "$t/interval" 1 || return 1
		fi_set "$t/times" -1 || return 1
		fi_set "$t/space" 0 || return 1
		fi_set "$t/ignore-gfp-wait" N || return 1
	done
	fi_set failslab/cache-filter N || return 1
	fi_set fail_page_alloc/min-order 0 || return 1
	fi_set fail_page_alloc/ignore-gfp-highmem Y || return 1
	fi_set failslab/probability "$PERCENT" || return 1
	fi_set fail_page_alloc/probability "$PERCENT" || return 1
}

# fi_restore: every knob fi_set wrote back to its value before, the probabilities first (the
# task filter must not go while they are raised).
fi_restore() {
	local f rc=0
	for f in "$FI/failslab/probability" "$FI/fail_page_alloc/probability" "${!FI_SAVED[@]}"; do
		[ -n "${FI_SAVED[$f]+set}" ] || continue
		echo "${FI_SAVED[$f]}" >"$f" || { echo "cannot restore $f to ${FI_SAVED[$f]}"; rc=1; }
	done
	for f in "${!FI_SAVED[@]}"; do
		[ "$(cat "$f")" = "${FI_SAVED[$f]}" ] || { echo "$f reads $(cat "$f"), was ${FI_SAVED[$f]}"; rc=1; }
	done
	FI_SAVED=()
	return "$rc"
}

# res_counts: the `rdma resource show` lines of ${DUT}0 and ${DUT}1 (pd, cq, qp, cm_id, mr, ctx,
# srq).
res_counts() {
	rdma resource show | grep -E "^[0-9]+: ${DUT}[01]: "
}

same_counts() {
	local now
	now=$(res_counts)
	[ "$now" = "$1" ] || { printf 'now:\n%s\nbefore:\n%s\n' "$now" "$1"; return 1; }
}

# grew DEV COUNTER BEFORE
grew() {
	local now
	now=$(link_stat "$1" "$2")
	echo "$1 $2: $3 -> $now"
	[ "$now" -gt "$3" ]
}

reload() {
	topo_cleanup
	dut_unload || return 1
	dut_setup 1
	link_add "${DUT}0" veth0
}

trap 'fi_restore >/dev/null 2>&1; rm -rf "$DIR"; topo_cleanup' EXIT
main "$@"
