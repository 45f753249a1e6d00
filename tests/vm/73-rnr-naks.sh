#!/usr/bin/env bash
# Receiver Not Ready (IBA 9.7.5.2.8, 9.7.6.1.4; see tests/vm/rnr.py): a Send to an RC QP whose
# receive queue or SRQ is empty draws RNR NAKs with the responder's RNR timer; the requester
# retries after it, `rnr_retry` times (7: without end) before RNR_RETRY_EXC_ERR, and a receive
# posted meanwhile takes the retried Send, bytes compared. Proves IBV_DEVICE_RC_RNR_NAK_GEN.
# rvrdma to rvrdma on an SRQ (a QP with its own RQ gives end-to-end credits there, and its peer
# waits for them instead: 33-credits), then against rdma_rxe both ways, on an RQ and an SRQ.
. "$(dirname "$0")/lib.sh"

POINTS=3

# rnr DESC DEV_A GID_A DEV_B GID_B rq|srq: the points of rnr.py, A sending to B.
rnr() {
	run_points "$POINTS" "rnr.py $1, $6" timeout 300 "$PY" "$RVRDMA_TESTS_DIR/rnr.py" "${@:2}"
}

main() {
	ktap_print_header
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		ktap_set_plan $((2 * (POINTS + 1)))
		dut_setup 1
		pair_up
		rnr "$RVRDMA_LINK_TYPE -> $RVRDMA_LINK_TYPE" "${DUT}0" "$GA" "${DUT}1" "$GB" rq
		rnr "$RVRDMA_LINK_TYPE -> $RVRDMA_LINK_TYPE" "${DUT}0" "$GA" "${DUT}1" "$GB" srq
		ktap_finished
		return
	fi
	ktap_set_plan $((5 * (POINTS + 1) + 1))
	local t0
	t0=$(klog_mark "73-rnr-naks start")
	dut_setup 1
	pair_up
	rnr "rvrdma -> rvrdma" "${DUT}0" "$GA" "${DUT}1" "$GB" srq
	rxe_on_b
	rnr "rvrdma -> rxe" "${DUT}0" "$GA" rxe1 "$GX" rq
	rnr "rvrdma -> rxe" "${DUT}0" "$GA" rxe1 "$GX" srq
	rnr "rxe -> rvrdma" rxe1 "$GX" "${DUT}0" "$GA" rq
	rnr "rxe -> rvrdma" rxe1 "$GX" "${DUT}0" "$GA" srq
	check "no kernel report during the RNR run" klog_clean_since "$t0"
	ktap_finished
}

main "$@"
