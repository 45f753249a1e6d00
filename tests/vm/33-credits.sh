#!/usr/bin/env bash
# End-to-end credits (seed 003) seen from user space: a Send posted while the peer's RQ is
# empty waits, and goes as soon as the peer posts a receive, without a single RNR NAK; the
# counters show the credit stall and no RNR NAK on either side.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 5
dut_setup 1
link_add "${DUT}0" veth0 && link_add "${DUT}1" veth1 || fail_rest "rdma link add: $LINK_OUT"
wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid "${DUT}1" 10.77.0.2 ||
	fail_rest "GIDs did not appear"
ga=$(sysfs_gid_index "${DUT}0" "$(gid_full 10.77.0.1)" "RoCE v2")
gb=$(sysfs_gid_index "${DUT}1" "$(gid_full 10.77.0.2)" "RoCE v2")

stat() {
	rdma statistic show link "$1/1" | tr ' ' '\n' | awk -v n="$2" '$0 == n { getline; print; exit }'
}
out=$($PY "$RVRDMA_TESTS_DIR/credits.py" "${DUT}0" "$ga" "${DUT}1" "$gb" 2>&1)
rc=$?
diag "$out"
result "the Send waits for credits and completes once a receive is posted, data intact" "$rc" ""
check "no RNR NAK sent by the responder (send_rnr_err = 0)" test "$(stat "${DUT}1" send_rnr_err)" -eq 0
check "no RNR NAK received by the requester (rcvd_rnr_err = 0)" test "$(stat "${DUT}0" rcvd_rnr_err)" -eq 0
check "the requester counted a credit stall (credit_stalls > 0)" test "$(stat "${DUT}0" credit_stalls)" -gt 0
check "the responder sent a credit update (credit_acks_sent > 0)" test "$(stat "${DUT}1" credit_acks_sent)" -gt 0
ktap_finished
