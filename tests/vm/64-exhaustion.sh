#!/usr/bin/env bash
# Resource exhaustion (tests/vm/exhaust.py; exhaust_fill.c makes and frees the objects): PDs, CQs,
# MRs, SRQs, AHs, MWs and QPs are created on one device until a create fails; each kind stops
# exactly at the limit `ibv_devinfo -v` advertises (counting what the kernel holds on the device)
# with ENOMEM; while one device holds all its PDs another still allocates one; afterwards every
# count is back where it was. rdma_rxe is not run: its limits (tens of thousands of each) take too
# long to reach under TCG.
. "$(dirname "$0")/lib.sh"

POINTS=9

main() {
	ktap_print_header
	ktap_set_plan $((POINTS + 2))
	local t0
	t0=$(klog_mark "64-exhaustion start")
	dut_setup 1
	pair_up
	run_points "$POINTS" "exhaust.py ${DUT}0" timeout "$((900 * ${RVRDMA_TIME_SCALE:-1}))" \
		"$PY" "$RVRDMA_TESTS_DIR/exhaust.py" "${DUT}0" "$GA" "${DUT}1"
	check "no kernel report during the exhaustion run" klog_clean_since "$t0"
	ktap_finished
}

main "$@"
