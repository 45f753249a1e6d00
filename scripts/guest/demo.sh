#!/usr/bin/env bash
# The demo, inside the guest (scripts/demo runs it through scripts/vm, which has already loaded
# rvrdma.ko and made rvr0 on veth0 in netns rvA and rvr1 on veth1 in netns rvB).
set -uo pipefail

show() {
	echo
	echo "\$ $*"
	"$@"
}

rc=0
show ibv_devices || rc=1
for d in rvr0 rvr1; do
	show ibv_devinfo -d "$d" || rc=1
done
show ip netns exec rvA rdma link show rvr0/1 || rc=1
show ip netns exec rvB rdma link show rvr1/1 || rc=1
echo
echo "RoCE v2 GIDs (sysfs):"
for d in rvr0 rvr1; do
	for f in /sys/class/infiniband/"$d"/ports/1/gids/*; do
		i=${f##*/}
		g=$(cat "$f" 2>/dev/null) || continue
		[ "$g" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
		t=$(cat "/sys/class/infiniband/$d/ports/1/gid_attrs/types/$i" 2>/dev/null)
		n=$(cat "/sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/$i" 2>/dev/null)
		printf '  %s GID[%s] %s %s %s\n' "$d" "$i" "$g" "$t" "$n"
	done
done
for d in rvr0 rvr1; do
	ibv_devinfo -d "$d" 2>/dev/null | grep -q 'state:.*PORT_ACTIVE' || { echo "demo: $d is not PORT_ACTIVE"; rc=1; }
done
# Traffic: stock ibv_rc_pingpong with data validation, server on rvr1 (rvB), client on rvr0 (rvA).
gid_index() {
	local d=$1 want=$2 f i
	for f in /sys/class/infiniband/"$d"/ports/1/gids/*; do
		i=${f##*/}
		[ "$(cat "$f")" = "$want" ] || continue
		[ "$(cat "/sys/class/infiniband/$d/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] && { echo "$i"; return 0; }
	done
	return 1
}
g1=$(gid_index rvr1 0000:0000:0000:0000:0000:ffff:0a4d:0002)
g0=$(gid_index rvr0 0000:0000:0000:0000:0000:ffff:0a4d:0001)
if [ -n "$g0" ] && [ -n "$g1" ]; then
	echo
	echo "\$ ip netns exec rvB ibv_rc_pingpong -d rvr1 -g $g1 -c -s 65536 -n 100 &"
	ip netns exec rvB timeout 120 ibv_rc_pingpong -d rvr1 -g "$g1" -c -s 65536 -n 100 &
	spid=$!
	for _ in $(seq 1 100); do ip netns exec rvB ss -ltn | grep -q ':18515 ' && break; sleep 0.2; done
	show ip netns exec rvA timeout 120 ibv_rc_pingpong -d rvr0 -g "$g0" -c -s 65536 -n 100 10.77.0.2 || rc=1
	wait "$spid" || rc=1
	show rdma statistic show link rvr0/1 || rc=1
else
	echo "demo: no RoCE v2 IPv4 GIDs on rvr0/rvr1"
	rc=1
fi
echo
echo "== Automatic Path Migration: two ports per device, the primary link cut mid-stream"
echo "\$ samples/apm-failover/run-in-guest.sh"
bash "$(cd "$(dirname "$0")/../.." && pwd)/samples/apm-failover/run-in-guest.sh" || rc=1
echo
if [ "$rc" -eq 0 ]; then
	echo "demo: rvr0 (netns rvA, veth0) and rvr1 (netns rvB, veth1) are up and moved data with ibv_rc_pingpong;"
	echo "demo: with a second port each (veth2/veth3), their QPs survived the cut of veth0 by path migration"
else
	echo "demo: FAILED"
fi
exit "$rc"
