#!/usr/bin/env bash
# rdma link add/delete, twice; what `rdma link show` and `rdma dev show` report.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 14
dut_setup 1

d=${DUT}0
# `rdma link show DEV/1` in the netdev's namespace: "link rvr0/1 state ACTIVE physical_state LINK_UP netdev veth0"
link_line_ok() {
	local l
	l=$(in_a rdma link show "$d/1") || return 1
	echo "$l"
	[[ $l == *"state ACTIVE"* && $l == *"physical_state LINK_UP"* && $l == *"netdev veth0"* ]]
}
dev_line_ok() {
	local l
	l=$(rdma dev show "$d") || return 1
	echo "$l"
	[[ $l == *"node_type ca"* ]]
}

for round in 1 2; do
	check_add "link add $d on veth0 (round $round)" "$d" veth0
	check "rdma dev show lists $d as a CA (round $round)" dev_line_ok
	check "rdma link show: port ACTIVE on veth0 (round $round)" wait_for "$RVRDMA_WAIT" link_line_ok
	check "sysfs has /sys/class/infiniband/$d (round $round)" dev_exists "$d"
	check "rdma link delete $d (round $round)" link_del "$d"
	check "$d gone from rdma dev show and sysfs (round $round)" eval "wait_for $RVRDMA_WAIT dev_gone $d && rdma_lists_not $d"
done
RDMA_LINKS=()

link_add "${DUT}0" veth0 && link_add "${DUT}1" veth1
result "two devices on the two ends of a veth pair" $? "$LINK_OUT"
check "both listed by rdma dev show" eval "rdma_lists ${DUT}0 && rdma_lists ${DUT}1"
ktap_finished
