#!/usr/bin/env bash
# Error cases of `rdma link add`: a second device on the same netdev, an unknown netdev, a name
# that is taken (by our own device in use, or by an rxe device). Each must fail with an error message, and
# leave the device list as it was.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 14
dut_setup 2

link_add "${DUT}0" veth0 || fail_rest "rdma link add ${DUT}0 type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"
link_add rxe7 veth3 rxe || fail_rest "rdma link add rxe7 type rxe netdev veth3: $LINK_OUT"
before=$(dev_list)

# must_fail DESC NAME NETDEV: link_add fails, says why, and changes nothing.
must_fail() {
	local desc=$1 after
	shift
	if link_add "$@"; then
		result "$desc: rdma link add fails" 1 "succeeded: rdma link add $1 type $RVRDMA_LINK_TYPE netdev $2"
	else
		result "$desc: rdma link add fails" 0
	fi
	after=$(dev_list)
	if [ -n "$LINK_OUT" ] && [ "$after" = "$before" ]; then
		diag "rdma said: $LINK_OUT"
		result "$desc: with an error message, device list unchanged" 0
	else
		result "$desc: with an error message, device list unchanged" 1 \
			"rdma said: '$LINK_OUT'; devices before: $before; after: $after"
	fi
}

# clear_clash_error DESC: the last error says the name is taken (EEXIST). ib_core's own answer to a
# taken name is ENFILE ("Too many open files in system"), which misleads; rdma_rxe passes it through
# (reported as XFAIL when rxe is the device under test), rvrdma must say what is wrong.
clear_clash_error() {
	if [[ $LINK_OUT == *"File exists"* ]]; then
		ktap_test_pass "$1: the error says the name is taken"
	elif [ "$RVRDMA_LINK_TYPE" = rxe ]; then
		ktap_test_xfail "$1: the error says the name is taken (rdma_rxe: '$LINK_OUT')"
	else
		diag "rdma said: '$LINK_OUT' (expected EEXIST, \"File exists\")"
		ktap_test_fail "$1: the error says the name is taken"
	fi
}

must_fail "second device on veth0" "${DUT}9" veth0
must_fail "unknown netdev" "${DUT}9" nosuch0
if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
	# A second add naming an rvrdma device adds its port 2 (41-apm), but only while nobody uses
	# the device: here a process holds a PD on it.
	ready=$(mktemp)
	$PY -c "import sys, time; from pyverbs.device import Context; from pyverbs.pd import PD
ctx = Context(name=sys.argv[1]); pd = PD(ctx)
open(sys.argv[2], 'w').write('ready'); time.sleep(120)" "${DUT}0" "$ready" &
	holder=$!
	wait_for "$RVRDMA_WAIT" grep -q ready "$ready" >/dev/null || diag "the PD holder did not start"
	must_fail "name clash with ${DUT}0 (in use)" "${DUT}0" veth2
	kill "$holder" 2>/dev/null
	wait "$holder" 2>/dev/null
	rm -f "$ready"
	check "name clash with ${DUT}0 (in use): the error says the device is busy" eval '[[ $LINK_OUT == *busy* ]]'
else
	must_fail "name clash with ${DUT}0" "${DUT}0" veth2
	clear_clash_error "name clash with ${DUT}0"
fi
check "${DUT}0 is still on veth0" eval "in_a rdma link show ${DUT}0/1 | grep -q 'netdev veth0'"
must_fail "name clash with an rxe device" rxe7 veth2
clear_clash_error "name clash with an rxe device"
check "rxe7 is still the rxe device on veth3" eval "in_b rdma link show rxe7/1 | grep -q 'netdev veth3' && ibv_devinfo -d rxe7 >/dev/null"
check_add "after the errors, a good add still works" "${DUT}2" veth2
check "... and lists exactly one more device" eval '[ "$(dev_list | wc -l)" -eq $(($(wc -l <<<"$before") + 1)) ]'
ktap_finished
