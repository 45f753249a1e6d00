#!/usr/bin/env bash
# Solicited events (IBA 11.4.2.2; see tests/vm/solicited.py): a CQ armed with
# ibv_req_notify_cq(cq, 1) raises its event for a Send or RDMA Write with Immediate that carries
# IBV_SEND_SOLICITED (BTH:SE on its last packet) and stays quiet for one without; armed for the
# next completion it fires for any. Every message's bytes are compared. rvrdma to rvrdma, then
# against rdma_rxe both ways (rdma_rxe sets and honours BTH:SE).
. "$(dirname "$0")/lib.sh"

POINTS=4

main() {
	ktap_print_header
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		ktap_set_plan $((POINTS + 1))
		dut_setup 1
		pair_up
		run_points "$POINTS" "solicited.py $RVRDMA_LINK_TYPE -> $RVRDMA_LINK_TYPE" timeout 300 \
			"$PY" "$RVRDMA_TESTS_DIR/solicited.py" "${DUT}0" "$GA" "${DUT}1" "$GB"
		ktap_finished
		return
	fi
	ktap_set_plan $((3 * (POINTS + 1) + 1))
	local t0
	t0=$(klog_mark "61-solicited-events start")
	dut_setup 1
	pair_up
	run_points "$POINTS" "solicited.py rvrdma -> rvrdma" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/solicited.py" "${DUT}0" "$GA" "${DUT}1" "$GB"
	rxe_on_b
	run_points "$POINTS" "solicited.py rvrdma -> rxe" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/solicited.py" "${DUT}0" "$GA" rxe1 "$GX"
	run_points "$POINTS" "solicited.py rxe -> rvrdma" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/solicited.py" rxe1 "$GX" "${DUT}0" "$GA"
	check "no kernel report during the solicited-event run" klog_clean_since "$t0"
	ktap_finished
}

main "$@"
