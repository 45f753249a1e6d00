#!/usr/bin/env bash
# Device and port attributes as stock rdma-core shows them (ibv_devices, ibv_devinfo -v), the
# node description set through sysfs, pkeys and the RoCE v2 GID table in sysfs, and the GID table
# following the netdev's addresses.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 23
dut_setup 1

d=${DUT}0
link_add "$d" veth0 || fail_rest "rdma link add $d type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"
wait_for "$RVRDMA_WAIT" port_is "$d" ACTIVE >/dev/null

info=$(ibv_devinfo -v -d "$d" 2>&1)
info_rc=$?
# field NAME: the value of "NAME: value" in ibv_devinfo -v (first occurrence).
field() { awk -v k="$1:" '$1 == k { $1 = ""; sub(/^ +/, ""); print; exit }' <<<"$info"; }
field_is() {
	local v
	v=$(field "$1")
	[ "$v" = "$2" ] || { echo "$1: '$v', expected '$2'"; return 1; }
}
positive() {
	local v
	v=$(field "$1")
	# A number with a non-zero digit (not $((v)): 0xffffffffffffffff is -1 in bash arithmetic).
	if [[ ! $v =~ ^(0x)?[0-9a-fA-F]*[1-9a-fA-F][0-9a-fA-F]*$ ]]; then
		echo "$1: '$v', expected > 0"
		return 1
	fi
}
caps_ok() {
	local f rc=0
	for f in max_mr_size max_qp max_qp_wr max_sge max_cq max_cqe max_mr max_pd; do
		positive "$f" || rc=1
	done
	return "$rc"
}
ibv_devices_lists() {
	ibv_devices | awk -v d="$d" '$1 == d { found = 1; if ($2 !~ /^0+$/) ok = 1 } END { exit !(found && ok) }' ||
		{ ibv_devices; return 1; }
}
# IB MTU for a netdev MTU, as ib_addr.h iboe_get_mtu() computes it (GRH+UDP+BTH+XRC+AtomicETH+ICRC).
ib_mtu_for() {
	local m=$(($1 - 40 - 8 - 12 - 4 - 28 - 4)) best=0 v
	for v in 256 512 1024 2048 4096; do
		[ "$v" -le "$m" ] && best=$v
	done
	echo "$best"
}
active_mtu() { ibv_devinfo -v -d "$d" | awk '$1 == "active_mtu:" { print $2; exit }'; }
mtu_follows() {
	local want
	want=$(ib_mtu_for "$1")
	[ "$(active_mtu)" = "$want" ] || { echo "netdev mtu $1: active_mtu $(active_mtu), expected $want"; return 1; }
}
set_mtu() { in_a ip link set veth0 mtu "$1" && in_b ip link set veth1 mtu "$1"; }
# node_desc in sysfs: a write goes through ib_modify_device (IB_DEVICE_MODIFY_NODE_DESC); the
# description is up to 64 bytes, the rest of a longer write cut.
ND=/sys/class/infiniband/$d/node_desc
node_desc_set() {
	local got
	printf '%s' "$1" >"$ND" || return 1
	got=$(cat "$ND")
	[ "$got" = "$2" ] || { echo "node_desc '$got', expected '$2'"; return 1; }
}
LONG_DESC=$(printf 'node-%03d;' $(seq 1 9))
gid_in_devinfo() {
	ibv_devinfo -v -d "$d" | "$PY" "$RVRDMA_TESTS_DIR/devinfo_gids.py" | grep -qx "$(gid_full "$1") RoCE v2"
}
gid_ndev_is_veth0() {
	local i
	i=$(sysfs_gid_index "$d" "$(gid_full "$1")" "RoCE v2") || return 1
	[ "$(cat "/sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/$i")" = veth0 ]
}
default_gid() {
	[[ $(cat "/sys/class/infiniband/$d/ports/1/gids/0") == fe80:* ]]
}
pkey0() { [ "$(cat "/sys/class/infiniband/$d/ports/1/pkeys/0")" = 0xffff ]; }

check "ibv_devices lists $d with a node GUID" ibv_devices_lists
result "ibv_devinfo -v -d $d opens the device (provider matched)" "$info_rc" "$info"
check "transport: InfiniBand (0)" field_is transport "InfiniBand (0)"
check "phys_port_cnt: 1" field_is phys_port_cnt 1
check "node_guid is not zero" eval '[[ $(field node_guid) =~ [1-9a-f] ]]'
# One device is one system image (SYS_IMAGE_GUID is set): its GUID is the node GUID.
check "sys_image_guid is the node GUID" eval '[ "$(field sys_image_guid)" = "$(field node_guid)" ]'
ND_WAS=$(cat "$ND")
check "node_desc written in sysfs reads back" node_desc_set "$d test node" "$d test node"
check "a node_desc of ${#LONG_DESC} bytes is cut at 64" \
	node_desc_set "$LONG_DESC" "${LONG_DESC:0:64}"
printf "%s" "$ND_WAS" >"$ND" 2>/dev/null
check "device limits are positive (max_qp, max_cq, max_mr, ...)" caps_ok
check "port 1 state: PORT_ACTIVE (4)" field_is state "PORT_ACTIVE (4)"
check "port 1 phys_state: LINK_UP (5)" field_is phys_state "LINK_UP (5)"
check "port 1 link_layer: Ethernet" field_is link_layer Ethernet
check "active_mtu fits the netdev MTU 1500 (1024)" mtu_follows 1500
check "active_mtu follows a netdev MTU change (9000 -> 4096)" eval 'set_mtu 9000 && wait_for $RVRDMA_WAIT mtu_follows 9000'
check "active_mtu follows a netdev MTU change (back to 1500)" eval 'set_mtu 1500 && wait_for $RVRDMA_WAIT mtu_follows 1500'
check "pkey[0] is the default 0xffff" pkey0
check "GID[0] is the link-local default GID" default_gid
check "sysfs GID table has RoCE v2 ::ffff:10.77.0.1 on veth0" eval 'wait_for $RVRDMA_WAIT has_gid $d 10.77.0.1 && gid_ndev_is_veth0 10.77.0.1'
check "sysfs GID table has RoCE v2 fd77::1 on veth0" eval 'wait_for $RVRDMA_WAIT has_gid $d fd77::1 && gid_ndev_is_veth0 fd77::1'
check "ibv_devinfo -v lists both RoCE v2 GIDs" eval 'gid_in_devinfo 10.77.0.1 && gid_in_devinfo fd77::1'
in_a ip addr add 10.77.0.11/24 dev veth0
in_a ip addr add fd77::11/64 dev veth0 nodad
check "an added IPv4 and IPv6 address appear as GIDs" eval 'wait_for $RVRDMA_WAIT has_gid $d 10.77.0.11 && wait_for $RVRDMA_WAIT has_gid $d fd77::11'
in_a ip addr del 10.77.0.11/24 dev veth0
in_a ip addr del fd77::11/64 dev veth0
check "a deleted address's GIDs disappear" eval 'wait_for $RVRDMA_WAIT has_no_gid $d 10.77.0.11 && wait_for $RVRDMA_WAIT has_no_gid $d fd77::11'
check "the other GIDs stay" eval 'has_gid $d 10.77.0.1 && has_gid $d fd77::1'
ktap_finished
