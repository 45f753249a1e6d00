#!/usr/bin/env bash
# Memory windows from user space (stock pyverbs; see tests/vm/memory_windows.py): device B binds
# type 2 (IBV_WR_BIND_MW) and type 1 (ibv_bind_mw) windows over part of an MR that has no remote
# rights of its own, device A reads and writes through the window's R_Key inside the window
# (bytes compared with a model of B's whole MR) and outside it or beyond its rights
# (IBV_WC_REM_ACCESS_ERR, memory unchanged), invalidates a type 2 window with Send with
# Invalidate. Where rvrdma owns the windows, also: a bind to an MR without MW bind access
# completes with IBV_WC_MW_BIND_ERR.
# rvrdma to rvrdma, rdma_rxe to rvrdma and rvrdma to rdma_rxe. Where rvrdma owns the windows,
# also: a Write past the window's end is refused (rdma_rxe checks only the MR's range: with its
# windows that outcome is a diagnostic), a type 2 window answers only on the QP that bound it
# (type 2B), deregistering an MR with a bound window is EBUSY
# (rdma_rxe: EINVAL), and the capability flags.
. "$(dirname "$0")/lib.sh"

POINTS=4

main() {
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		# The reference behaviour: rdma_rxe to rdma_rxe.
		ktap_print_header
		ktap_set_plan $((POINTS + 1))
		dut_setup 1
		pair_up
		run_points "$POINTS" "memory_windows.py $RVRDMA_LINK_TYPE -> $RVRDMA_LINK_TYPE" timeout 300 \
			"$PY" "$RVRDMA_TESTS_DIR/memory_windows.py" "${DUT}0" "$GA" "${DUT}1" "$GB"
		ktap_finished
		return
	fi
	ktap_print_header
	ktap_set_plan $((2 * (POINTS + 6) + POINTS + 1))
	dut_setup 1
	pair_up
	run_points $((POINTS + 5)) "memory_windows.py rvrdma -> rvrdma" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/memory_windows.py" "${DUT}0" "$GA" "${DUT}1" "$GB" --owner-checks
	rxe_on_b
	run_points $((POINTS + 5)) "memory_windows.py rxe -> rvrdma (windows on rvrdma)" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/memory_windows.py" rxe1 "$GX" "${DUT}0" "$GA" --owner-checks
	run_points "$POINTS" "memory_windows.py rvrdma -> rxe (windows on rdma_rxe)" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/memory_windows.py" "${DUT}0" "$GA" rxe1 "$GX"
	ktap_finished
}

main "$@"
