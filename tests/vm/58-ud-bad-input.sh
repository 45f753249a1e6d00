#!/usr/bin/env bash
# Datagrams and connection requests that must go nowhere, and disturb nothing: rvr0 (netns rvA)
# against rvr1 (rvB), then against rdma_rxe, which does the same in each case.
#
# ud_bad.py (pyverbs; each case on fresh UD QPs, and each followed by a good Send that must land
# intact in the receiver's next receive WR with both QPs still in RTS):
#   wrong Q_Key   the sender's completions succeed; the receiver drops the datagrams without a
#                 completion and counts them in its port's qkey_viol_cntr (and rvrdma in the
#                 rdma statistic qkey_violations);
#   > port MTU    a Send of MTU + 1 and of 2 x MTU bytes completes successfully and sends nothing
#                 (IBA C10-93.1.1: no packet and no error; rdma_rxe the same);
#   no ARP answer an address handle for an address nobody answers ARP for: ib_core resolves the
#                 MAC when the AH is created, so creating it fails (ETIMEDOUT after ~1 s);
#   nobody there  an AH for an address with a static neighbour entry to a MAC nobody has: Sends
#                 complete successfully and reach no one;
#   route gone    an AH for an address behind a route (via the peer) that is deleted after the
#                 AH is made: the Sends complete successfully and are lost (the route lookup,
#                 bound to the netdev, takes the address as on-link; nobody answers its ARP),
#                 and Sends through a good AH behind them still go;
#   P_Key         a UD QP on P_Key index 1 is refused with EINVAL (the P_Key table of a RoCE
#                 port has one entry, 0xFFFF; rdma_rxe accepts the index and always sends
#                 0xFFFF): a wrong P_Key cannot be put on the wire through the verbs.
# POST_SEND command: a user QP's uverbs POST_SEND command that carries a work request of its own
#                 (built from user input: an inline Send at address 1) posts nothing and is the
#                 QP's doorbell, as on rdma_rxe (uverbs_cmd_post.c).
# rdma_cm: rping connecting to a port nobody listens on gets a REJ (ib_cm's "invalid service
# ID", reason 8) within seconds, not a timeout: rvrdma answering and rvrdma asking.
. "$(dirname "$0")/lib.sh"

NOARP=10.77.0.99 NOHOST=10.77.0.98 NOHOST_MAC=02:00:00:00:00:98

main() {
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		# rdma_rxe is the reference here; it also takes a UD QP on an out-of-table P_Key index.
		skip_all "checks rvrdma against rdma_rxe: needs RVRDMA_LINK_TYPE=rvrdma"
	fi
	ktap_print_header
	ktap_set_plan 49
	dut_setup 1
	pair_up
	# A static neighbour entry: the AH resolves to a MAC no one on the link has.
	ip -n "$NS_A" neigh replace "$NOHOST" lladdr "$NOHOST_MAC" dev veth0 nud permanent ||
		fail_rest "ip neigh replace $NOHOST failed"

	run_points 18 "ud_bad.py rvrdma -> rvrdma" \
		"$PY" "$RVRDMA_TESTS_DIR/ud_bad.py" "${DUT}0" "$GA" "${DUT}1" "$GB" "$NOARP" "$NOHOST"
	check "rvr1's rdma statistic qkey_violations counts the 4 wrong Q_Keys" counter_is "${DUT}1" qkey_violations 4
	check "rdma_cm: a connect to a port nobody listens on is rejected at once, rvrdma -> rvrdma" \
		cm_rejected "$NS_A" 10.77.0.2
	check "a user QP's POST_SEND command carrying a WR (inline, at address 1) posts nothing: a doorbell" \
		uverbs_cmd_post "${DUT}0" "$GA"

	rdma link delete "${DUT}1" && link_add rxe1 veth1 rxe || fail_rest "rxe1: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 || fail_rest "rxe1's GID did not appear"
	local gx
	gx=$(sysfs_gid_index rxe1 "$(gid_full 10.77.0.2)" "RoCE v2")
	run_points 18 "ud_bad.py rvrdma -> rdma_rxe" \
		"$PY" "$RVRDMA_TESTS_DIR/ud_bad.py" "${DUT}0" "$GA" rxe1 "$gx" "$NOARP" "$NOHOST"
	# rvrdma receives: the wrong Q_Keys come from rxe.
	run_points 5 "ud_bad.py rdma_rxe -> rvrdma, wrong Q_Key" \
		"$PY" "$RVRDMA_TESTS_DIR/ud_bad.py" rxe1 "$gx" "${DUT}0" "$GA" "$NOARP" "$NOHOST" qkey
	check "rdma_cm: a connect to a port nobody listens on is rejected at once, rvrdma -> rdma_rxe" \
		cm_rejected "$NS_A" 10.77.0.2
	check "rdma_cm: a connect to a port nobody listens on is rejected at once, rdma_rxe -> rvrdma" \
		cm_rejected "$NS_B" 10.77.0.1
	ktap_finished
}

# counter_is DEV NAME VALUE: DEV's rdma statistic NAME is VALUE.
counter_is() {
	local v
	v=$(link_stat "$1" "$2")
	echo "$1 $2 = ${v:-missing} (want $3)"
	[ "$v" = "$3" ]
}

# uverbs_cmd_post DEV GID_INDEX: the helper of that name (uverbs_cmd_post.c says what it checks).
uverbs_cmd_post() {
	local bin=$RVRDMA_TESTS_DIR/uverbs_cmd_post
	[ -x "$bin" ] || { echo "$bin is not built (scripts/test builds it)"; return 1; }
	"$bin" "$@"
}

# cm_rejected NS ADDR: rping in NS connecting to ADDR on a port nobody listens on gets
# RDMA_CM_EVENT_REJECTED with ib_cm's reason 8 (invalid service ID) within 5 s.
cm_rejected() {
	local out rc t0=$EPOCHREALTIME secs
	out=$(ip netns exec "$1" timeout 60 rping -c -a "$2" -p 7999 -C 1 -v 2>&1)
	rc=$?
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	echo "rping -c -a $2 -p 7999: exit status $rc after $secs s: $out"
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 8" <<<"$out" &&
		awk -v s="$secs" 'BEGIN { exit !(s < 5) }'
}

main "$@"
