#!/usr/bin/env bash
# Module load/unload: insmod/rmmod twice, then rmmod with devices present tears them down, and the
# module loads and works again afterwards.
. "$(dirname "$0")/lib.sh"

[ "$RVRDMA_LINK_TYPE" = rvrdma ] || skip_all "module tests need RVRDMA_LINK_TYPE=rvrdma (rdma_$RVRDMA_LINK_TYPE is built in)"

ktap_print_header
ktap_set_plan 11

topo_setup 1 || fail_rest "could not build the netns/veth topology"
dut_unload >/dev/null 2>&1
[ -f "$RVRDMA_KO" ] || fail_rest "rvrdma.ko not found at $RVRDMA_KO (build it: make KDIR=\$KDIR)"

loaded() { [ -d /sys/module/rvrdma ]; }
unloaded() { [ ! -d /sys/module/rvrdma ]; }
insmod_loaded() { insmod "$RVRDMA_KO" && loaded; }

for round in 1 2; do
	check "insmod rvrdma.ko (round $round)" insmod_loaded
	check "rmmod rvrdma (round $round)" timeout 120 rmmod rvrdma
	check "module gone after rmmod (round $round)" unloaded
done

out=$(insmod "$RVRDMA_KO" 2>&1) || fail_rest "insmod failed: $out"
link_add "${DUT}0" veth0 && link_add "${DUT}1" veth1
result "two devices before rmmod" $? "$LINK_OUT"
check "rmmod with devices present" timeout 120 rmmod rvrdma
check "rmmod removed every rvrdma device" eval "dev_gone ${DUT}0 && dev_gone ${DUT}1 && rdma_lists_not ${DUT}0 && rdma_lists_not ${DUT}1"
check "netdevs survive rmmod" eval "in_a ip link show veth0 && in_b ip link show veth1"
RDMA_LINKS=()
out=$(insmod "$RVRDMA_KO" 2>&1)
link_add "${DUT}0" veth0
result "reload, and the same name and netdev work again" $? "$out $LINK_OUT"
ktap_finished
