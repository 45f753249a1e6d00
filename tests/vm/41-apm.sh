#!/usr/bin/env bash
# Automatic Path Migration across two links: two-port devices made by a second
# `rdma link add`, the capability as user space sees it, and the migration scenarios of
# tests/vm/apm.py (link cut with failover and migration back, the same with tc netem 100% loss,
# migration by command, a MigReq from the wrong address (PATH_MIG_ERR), and a link cut with no
# alternate path).
. "$(dirname "$0")/lib.sh"

scenarios=(failover failover_netem command mig_err no_alt)
ktap_print_header
ktap_set_plan $((6 + ${#scenarios[@]}))
dut_setup 2
a=${DUT}0 b=${DUT}1
link_add "$a" veth0 && link_add "$b" veth1 || fail_rest "rdma link add: $LINK_OUT"
link_add "$a" veth2
check "a second 'rdma link add $a ... netdev veth2' adds port 2" test "$(ls /sys/class/infiniband/$a/ports 2>/dev/null | tr '\n' ' ')" = "1 2 "
# Adding a port re-registers the device: refused while somebody holds a PD on it.
busy_add() {
	$PY - "$b" "$NS_B" <<'PYEOF'
import subprocess, sys
from pyverbs.device import Context
from pyverbs.pd import PD
ctx = Context(name=sys.argv[1])
pd = PD(ctx)
r = subprocess.run(["ip", "netns", "exec", sys.argv[2], "rdma", "link", "add", sys.argv[1],
                    "type", "rvrdma", "netdev", "veth3"], capture_output=True, text=True)
print(r.stderr.strip())
sys.exit(0 if r.returncode != 0 and "busy" in r.stderr else 1)
PYEOF
}
check "adding port 2 to a device in use fails with EBUSY" busy_add
link_add "$b" veth3 || fail_rest "rdma link add $b netdev veth3: $LINK_OUT"
check "rdma link (in rvA) shows both ports with their netdevs" eval \
	'in_a rdma link show | grep -q "link $a/1 .* netdev veth0" && in_a rdma link show | grep -q "link $a/2 .* netdev veth2"'
# third_refused: a third netdev (veth4, of a third veth pair) for a two-port device fails with
# EEXIST and leaves the device with its two ports.
third_refused() {
	veth_pair 2 || { echo "could not add the veth4/veth5 pair"; return 1; }
	if link_add "$a" veth4; then
		echo "rdma link add $a netdev veth4 succeeded"
		return 1
	fi
	echo "$LINK_OUT"
	grep -q "File exists" <<<"$LINK_OUT" &&
		test "$(ls "/sys/class/infiniband/$a/ports" 2>/dev/null | tr '\n' ' ')" = "1 2 "
}
check "a third netdev (veth4) is refused with EEXIST" third_refused
# port_cap_flags_ok: every port advertises IB_PORT_AUTO_MIGR_SUP (0x20).
port_cap_flags_ok() {
	local f n=0
	for f in $(ibv_devinfo -v -d "$a" | awk '/port_cap_flags:/{print $2}'); do
		[ $((f & 0x20)) -ne 0 ] || return 1
		n=$((n + 1))
	done
	[ "$n" -eq 2 ]
}
check "ibv_devinfo -v: device cap AUTO_PATH_MIG, port cap AUTO_MIGR_SUP on both ports" eval \
	"ibv_devinfo -v -d $a | grep -q AUTO_PATH_MIG && port_cap_flags_ok"
ok=1
for d in "$a:10.77.0.1:1" "$a:10.77.1.1:2" "$b:10.77.0.2:1" "$b:10.77.1.2:2"; do
	IFS=: read -r dev addr port <<<"$d"
	wait_for "$RVRDMA_WAIT" has_gid "$dev" "$addr" "$port" || ok=0
done
result "GIDs on both ports of both devices" $((1 - ok))
for s in "${scenarios[@]}"; do
	out=$(NS_A=$NS_A NS_B=$NS_B timeout 300 $PY "$RVRDMA_TESTS_DIR/apm.py" "$a" "$b" "$s" 2>&1)
	rc=$?
	diag "$out"
	result "path migration: $s" "$rc" ""
done
ktap_finished
