#!/usr/bin/env bash
# End-to-end credits (seed 003) seen from user space: a Send posted while the peer's RQ is
# empty waits, and goes as soon as the peer posts a receive, without a single RNR NAK; the
# counters show the credit stall and no RNR NAK on either side. Messages that each wait for
# credits need no retransmission.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 8
dut_setup 1
pair_up

out=$($PY "$RVRDMA_TESTS_DIR/credits.py" "${DUT}0" "$GA" "${DUT}1" "$GB" 2>&1)
rc=$?
diag "$out"
result "the Send waits for credits and completes once a receive is posted, data intact" "$rc" ""
check "no RNR NAK sent by the responder (send_rnr_err = 0)" test "$(link_stat "${DUT}1" send_rnr_err)" -eq 0
check "no RNR NAK received by the requester (rcvd_rnr_err = 0)" test "$(link_stat "${DUT}0" rcvd_rnr_err)" -eq 0
check "the requester counted a credit stall (credit_stalls > 0)" test "$(link_stat "${DUT}0" credit_stalls)" -gt 0
check "the responder sent a credit update (credit_acks_sent > 0)" test "$(link_stat "${DUT}1" credit_acks_sent)" -gt 0
# A receive taken from the user ring makes the responder send its credit update there and then:
# the packet must leave, not be counted as built and dropped.
no_send_err() {
	local a b
	a=$(link_stat "${DUT}0" send_err) b=$(link_stat "${DUT}1" send_err)
	echo "send_err: ${DUT}0 ${a:-unread}, ${DUT}1 ${b:-unread}"
	[ "$a" = 0 ] && [ "$b" = 0 ]
}
check "every packet built left its device (send_err = 0 on both)" no_send_err

# A hold arms its credit probes on the transport timer: the message that goes when the credits
# come must be timed by the Local ACK Timeout, not by the probe due next. The QPs take the
# suite's timeout (RVRDMA_ACK_TIMEOUT: 268 ms in scripts/test, 1.07 s on the debug kernel), at
# least the stock tools' 67 ms: a guest stalled longer than the timeout by its host resends
# rightly, and the probes' 1 ms deadline is far below any of them.
HOLDS=40
HOLDS_TIMEOUT=${RVRDMA_ACK_TIMEOUT:-14}
[ "$HOLDS_TIMEOUT" -ge 14 ] || HOLDS_TIMEOUT=14
stalls=$(link_stat "${DUT}0" credit_stalls)
check "$HOLDS x 64 KiB Sends, each held for credits, arrive intact and move no retry counter" \
	retry_counters_unchanged $PY "$RVRDMA_TESTS_DIR/credit_holds.py" "${DUT}0" "$GA" "${DUT}1" "$GB" "$HOLDS" \
		"$HOLDS_TIMEOUT"
check "each of them was held (credit_stalls rose by $HOLDS)" \
	test "$(($(link_stat "${DUT}0" credit_stalls) - ${stalls:-0}))" -ge "$HOLDS"
ktap_finished
