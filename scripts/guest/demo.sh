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
echo
if [ "$rc" -eq 0 ]; then
	echo "demo: rvr0 (netns rvA, veth0) and rvr1 (netns rvB, veth1) are up"
else
	echo "demo: FAILED"
fi
exit "$rc"
