#!/usr/bin/env bash
# rdma_rxe and siw keep working in the same kernel as rvrdma: devices side by side, rxe traffic
# (ibv_rc_pingpong), and deleting or unloading rvrdma leaves the others alone (and the reverse).
#
# rvrdma and rdma_rxe each take UDP port 4791 in the network namespace of their netdev (rxe when
# its device is added; rvrdma with its first QP, which ib_mad's QP1 makes at once), so they share
# a kernel, not a namespace: the device under test runs in a namespace of its own.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 11
dut_setup 2
NS_C=rvC
trap 'topo_cleanup; ip netns del "$NS_C" >/dev/null 2>&1' EXIT
ip netns add "$NS_C" && ip -n "$NS_C" link add vethc0 type veth peer name vethc1 &&
	ip -n "$NS_C" addr add 10.77.9.1/24 dev vethc0 && ip -n "$NS_C" link set vethc0 up &&
	ip -n "$NS_C" link set vethc1 up || fail_rest "could not build namespace $NS_C"

# dut_add: the device under test on vethc0, in its own namespace.
dut_add() {
	LINK_OUT=$(ip netns exec "$NS_C" rdma link add "$d" type "$RVRDMA_LINK_TYPE" netdev vethc0 2>&1) &&
		RDMA_LINKS+=("$d")
}

d=${DUT}0
dut_add && link_add rxe0 veth2 rxe && link_add rxe1 veth3 rxe && link_add siw0 veth1 siw
result "$d ($RVRDMA_LINK_TYPE), rxe0, rxe1 and siw0 side by side" $? "$LINK_OUT"

devices_list() {
	local n out
	out=$(ibv_devices)
	for n in "$@"; do
		awk -v n="$n" '$1 == n { f = 1 } END { exit !f }' <<<"$out" || { echo "$n missing from:"; echo "$out"; return 1; }
	done
}
others_ok() {
	devices_list rxe0 rxe1 siw0 &&
		ibv_devinfo -d rxe0 | grep -q 'state:.*PORT_ACTIVE' &&
		ibv_devinfo -d siw0 | grep -q 'state:.*PORT_ACTIVE'
}
# pingpong: ibv_rc_pingpong between rxe1 (server, rvB) and rxe0 (client, rvA) over IPv4 RoCE v2.
pingpong() {
	local gs gc spid rc i
	gs=$(sysfs_gid_index rxe1 "$(gid_full 10.77.1.2)" "RoCE v2") || { echo "no RoCE v2 GID for 10.77.1.2 on rxe1"; return 1; }
	gc=$(sysfs_gid_index rxe0 "$(gid_full 10.77.1.1)" "RoCE v2") || { echo "no RoCE v2 GID for 10.77.1.1 on rxe0"; return 1; }
	in_b timeout 120 ibv_rc_pingpong -d rxe1 -g "$gs" -n 50 &
	spid=$!
	wait_for 30 eval "in_b ss -ltn | grep -q ':18515'" || { kill "$spid"; return 1; }
	rc=1
	for _ in 1 2 3; do
		in_a timeout 120 ibv_rc_pingpong -d rxe0 -g "$gc" -n 50 10.77.1.2 && { rc=0; break; }
		sleep 1
	done
	wait "$spid" || rc=1
	return "$rc"
}

check "ibv_devices lists all four" devices_list "$d" rxe0 rxe1 siw0
check "siw0 is an iWARP device, port ACTIVE" eval "ibv_devinfo -d siw0 | grep -q 'transport:.*iWARP' && ibv_devinfo -d siw0 | grep -q 'state:.*PORT_ACTIVE'"
check "rxe traffic: ibv_rc_pingpong rxe0 <-> rxe1 with $d present" pingpong
check "rdma link delete $d leaves rxe and siw alone" eval "link_del $d && wait_for $RVRDMA_WAIT dev_gone $d && others_ok"
RDMA_LINKS=(rxe0 rxe1 siw0)
if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
	dut_add
	result "$d added again" $? "$LINK_OUT"
	check "rmmod rvrdma leaves rxe and siw alone" eval "dut_unload && others_ok"
	check "rxe traffic still works after rmmod rvrdma" pingpong
	out=$(dut_load 2>&1) && dut_add
	result "insmod again and $d back" $? "$out $LINK_OUT"
else
	ktap_test_skip "$d added again (module steps need RVRDMA_LINK_TYPE=rvrdma)"
	ktap_test_skip "rmmod rvrdma leaves rxe and siw alone (needs RVRDMA_LINK_TYPE=rvrdma)"
	ktap_test_skip "rxe traffic still works after rmmod rvrdma (needs RVRDMA_LINK_TYPE=rvrdma)"
	dut_add
	result "$d back" $? "$LINK_OUT"
fi
check "rdma link delete rxe0 and siw0 leave $d alone" eval "link_del rxe0 && link_del siw0 && wait_for $RVRDMA_WAIT dev_gone rxe0 && wait_for $RVRDMA_WAIT port_is $d ACTIVE && devices_list $d rxe1"
check "ibv_devinfo -d $d still works" eval "ibv_devinfo -d $d | grep -q 'state:.*PORT_ACTIVE'"
ktap_finished
