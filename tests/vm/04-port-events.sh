#!/usr/bin/env bash
# Link down -> port DOWN and IB_EVENT_PORT_ERR seen from user space; link up -> PORT_ACTIVE and
# IB_EVENT_PORT_ACTIVE. Both for our own end going down and for the peer's (carrier loss).
# The user-space witness is rdma-core's ibv_asyncwatch (libibverbs' async event channel).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 9
dut_setup 1

d=${DUT}0
link_add "$d" veth0 || fail_rest "rdma link add $d type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"
wait_for "$RVRDMA_WAIT" port_is "$d" ACTIVE >/dev/null || fail_rest "port of $d never became ACTIVE"

log=$(mktemp)
watch_pid=
stop_watch() {
	[ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null
	watch_pid=
}
trap 'stop_watch; rm -f "$log"; topo_cleanup' EXIT
timeout 600 stdbuf -oL ibv_asyncwatch -d "$d" >"$log" 2>&1 &
watch_pid=$!

events() { grep -c "EVENT_$1\b" "$log"; }
# more_events KIND N: more than N events of KIND were seen.
more_events() { [ "$(events "$1")" -gt "$2" ]; }
devinfo_state_is() { ibv_devinfo -d "$d" | grep -q "state:.*$1"; }

check "ibv_asyncwatch opened $d" wait_for "$RVRDMA_WAIT" grep -q "async event FD" "$log"

# Our end goes down, then up.
e=$(events PORT_ERR)
in_a ip link set veth0 down
check "veth0 down: port DOWN (sysfs and ibv_devinfo)" eval 'wait_for $RVRDMA_WAIT port_is $d DOWN && devinfo_state_is PORT_DOWN'
check "veth0 down: IBV_EVENT_PORT_ERR seen by ibv_asyncwatch" wait_for "$RVRDMA_WAIT" more_events PORT_ERR "$e"
e=$(events PORT_ACTIVE)
in_a ip link set veth0 up
check "veth0 up: port ACTIVE (sysfs and ibv_devinfo)" eval 'wait_for $RVRDMA_WAIT port_is $d ACTIVE && devinfo_state_is PORT_ACTIVE'
check "veth0 up: IBV_EVENT_PORT_ACTIVE seen by ibv_asyncwatch" wait_for "$RVRDMA_WAIT" more_events PORT_ACTIVE "$e"

# The peer goes down: veth0 loses carrier but stays administratively up.
e=$(events PORT_ERR)
in_b ip link set veth1 down
check "peer down (carrier loss): port DOWN" wait_for "$RVRDMA_WAIT" port_is "$d" DOWN
check "peer down: IBV_EVENT_PORT_ERR seen" wait_for "$RVRDMA_WAIT" more_events PORT_ERR "$e"
e=$(events PORT_ACTIVE)
in_b ip link set veth1 up
check "peer up: port ACTIVE and IBV_EVENT_PORT_ACTIVE seen" eval 'wait_for $RVRDMA_WAIT port_is $d ACTIVE && wait_for $RVRDMA_WAIT more_events PORT_ACTIVE $e'
check "ibv_asyncwatch still running (no error from the event channel)" kill -0 "$watch_pid"
diag "ibv_asyncwatch output:"
diag "$(cat "$log")"
ktap_finished
