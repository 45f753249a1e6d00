#!/usr/bin/env bash
# Unregistering the netdev removes the ib device: deleting veth0 (and with it its peer veth1), and
# deleting the namespace that holds the netdev.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 7
dut_setup 1

link_add "${DUT}0" veth0 && link_add "${DUT}1" veth1
result "devices on veth0 and veth1" $? "$LINK_OUT"
in_a ip link del veth0
check "ip link del veth0 removes ${DUT}0" eval "wait_for $RVRDMA_WAIT dev_gone ${DUT}0 && rdma_lists_not ${DUT}0"
check "... and ${DUT}1 on the peer veth1, deleted with it" eval "wait_for $RVRDMA_WAIT dev_gone ${DUT}1 && rdma_lists_not ${DUT}1"
# rdma_links_gone: `rdma link show` works and lists neither device.
rdma_links_gone() {
	local out
	out=$(rdma link show) || { echo "rdma link show failed"; return 1; }
	! grep -E "^link (${DUT}0|${DUT}1)/" <<<"$out"
}
check "rdma link show no longer lists them" rdma_links_gone
RDMA_LINKS=()
veth_pair 0
check_add "a new veth0 takes the same device name again" "${DUT}0" veth0
check "... and its port becomes ACTIVE" wait_for "$RVRDMA_WAIT" port_is "${DUT}0" ACTIVE
ip netns del "$NS_A"
check "deleting the netns holding veth0 removes ${DUT}0" eval "wait_for $RVRDMA_WAIT dev_gone ${DUT}0 && rdma_lists_not ${DUT}0"
RDMA_LINKS=()
ktap_finished
