#!/usr/bin/env bash
# The Initialized-state rules of seed 004 seen from user space: Post Send in Init fails at once,
# Post Receive is accepted, and inbound packets are dropped (the peer's Send is never
# acknowledged; rvrdma counts the drops).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 2
dut_setup 1
link_add "${DUT}0" veth0 && link_add "${DUT}1" veth1 || fail_rest "rdma link add: $LINK_OUT"
wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid "${DUT}1" 10.77.0.2 ||
	fail_rest "GIDs did not appear"
ga=$(sysfs_gid_index "${DUT}0" "$(gid_full 10.77.0.1)" "RoCE v2")
gb=$(sysfs_gid_index "${DUT}1" "$(gid_full 10.77.0.2)" "RoCE v2")
stat() {
	rdma statistic show link "$1/1" | tr ' ' '\n' | awk -v n="$2" '$0 == n { getline; print; exit }'
}
before=$(stat "${DUT}1" qp_dropped)
out=$($PY "$RVRDMA_TESTS_DIR/seed004.py" "${DUT}0" "$ga" "${DUT}1" "$gb" 2>&1)
rc=$?
diag "$out"
result "seed 004: Post Send refused in Init, Post Receive accepted, inbound packets dropped" "$rc" ""
after=$(stat "${DUT}1" qp_dropped)
check "the dropped packets are counted (qp_dropped $before -> $after)" test "$after" -gt "$before"
ktap_finished
