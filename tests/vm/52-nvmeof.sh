#!/usr/bin/env bash
# NVMe over Fabrics on rvrdma: the kernel's NVMe/RDMA target (nvmet-rdma) exports a 64 MiB file,
# the kernel's NVMe/RDMA host (nvme-cli's `nvme connect -t rdma`) attaches it as a block device,
# and data written through it reads back intact, on the device and in the file behind it.
# Kernel ULPs live in the initial network namespace, so the device runs on a veth end there
# and host and target share it: rvrdma carries the traffic the host sends to its own address
# (over the loopback device) like any other. The host side registers memory with fast
# registration (IB_WR_REG_MR) on every I/O.
. "$(dirname "$0")/lib.sh"

NQN=rvrdma-nvmeof-test
CFG=/sys/kernel/config/nvmet
ADDR=10.88.0.1
# The target's file lives in a tmpfs: nvmet takes the namespace's block size from the file's
# filesystem, and the guest's root (9p) reports none.
DIR=/tmp/rvrdma-nvmeof
IMG=$DIR/namespace.img

main() {
	command -v nvme >/dev/null || skip_all "nvme-cli is not installed (scripts/install-deps installs it)"
	ktap_print_header
	ktap_set_plan 6
	trap 'cleanup; topo_cleanup' EXIT
	local out
	out=$(dut_load 2>&1) || fail_rest "cannot load the $RVRDMA_LINK_TYPE driver: $out"
	modprobe -q nvmet-rdma 2>/dev/null
	modprobe -q nvme-rdma 2>/dev/null
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config ||
		fail_rest "configfs cannot be mounted"
	[ -d "$CFG" ] || fail_rest "no $CFG: the kernel has no NVMe target"
	ip link add rvnv0 type veth peer name rvnv1 && ip addr add "$ADDR/24" dev rvnv0 &&
		ip link set rvnv0 up && ip link set rvnv1 up || fail_rest "veth set-up failed"
	LINK_OUT=$(rdma link add rvn0 type "$RVRDMA_LINK_TYPE" netdev rvnv0 2>&1) ||
		fail_rest "rdma link add: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rvn0 "$ADDR" || fail_rest "rvn0's GID did not appear"

	check "nvmet-rdma listens on $ADDR:4420 over rvrdma (a 64 MiB file as namespace 1)" target_up
	check "nvme connect -t rdma attaches the namespace as a block device" host_connect
	check "4 MiB of random data written with O_DIRECT reads back intact" data_roundtrip
	check "the file behind the namespace holds the same bytes" backing_file_matches
	check "nvme disconnect detaches it" host_disconnect
	check "no kernel report during the NVMe-oF run (lockdep, KASAN, refcount, hung task)" \
		klog_clean_since "$T0"
	ktap_finished
}

target_up() {
	mkdir -p "$DIR" && mount -t tmpfs rvrdma-nvmeof "$DIR" && truncate -s 64M "$IMG" || return 1
	mkdir -p "$CFG/subsystems/$NQN/namespaces/1" || return 1
	echo 1 >"$CFG/subsystems/$NQN/attr_allow_any_host" &&
		echo -n "$IMG" >"$CFG/subsystems/$NQN/namespaces/1/device_path" &&
		echo 1 >"$CFG/subsystems/$NQN/namespaces/1/enable" || return 1
	mkdir -p "$CFG/ports/1" || return 1
	echo rdma >"$CFG/ports/1/addr_trtype" && echo ipv4 >"$CFG/ports/1/addr_adrfam" &&
		echo "$ADDR" >"$CFG/ports/1/addr_traddr" && echo 4420 >"$CFG/ports/1/addr_trsvcid" ||
		return 1
	ln -s "$CFG/subsystems/$NQN" "$CFG/ports/1/subsystems/$NQN"
}

# The block device of our subsystem, once connected.
nvme_dev() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
		for n in "$c"/nvme*n1 "$c"/../nvme*n1; do
			[ -e "$n" ] && { echo "/dev/$(basename "$n")"; return 0; }
		done
		ls /sys/block | grep -q "^$(basename "$c")n1$" && { echo "/dev/$(basename "$c")n1"; return 0; }
	done
	return 1
}

host_connect() {
	timeout 120 nvme connect -t rdma -a "$ADDR" -s 4420 -n "$NQN" || return 1
	wait_for 30 nvme_dev || { nvme list; return 1; }
	local dev
	dev=$(nvme_dev) && echo "attached as $dev" && [ -b "$dev" ]
}

# (check runs each step in a subshell: each finds the device again.)
data_roundtrip() {
	local DEV
	DEV=$(nvme_dev) && [ -b "$DEV" ] || return 1
	head -c 4M /dev/urandom >$DIR/pattern || return 1
	dd if=$DIR/pattern of="$DEV" bs=1M seek=8 oflag=direct status=none || return 1
	dd if="$DEV" of=$DIR/read-back bs=1M skip=8 count=4 iflag=direct status=none || return 1
	cmp $DIR/pattern $DIR/read-back
}

backing_file_matches() {
	sync
	dd if="$IMG" of=$DIR/from-file bs=1M skip=8 count=4 status=none || return 1
	cmp $DIR/pattern $DIR/from-file
}

host_disconnect() {
	timeout 60 nvme disconnect -n "$NQN" || return 1
	wait_for 30 eval '! nvme_dev >/dev/null'
}

cleanup() {
	nvme disconnect -n "$NQN" >/dev/null 2>&1
	rm -f "$CFG/ports/1/subsystems/$NQN" 2>/dev/null
	rmdir "$CFG/ports/1" 2>/dev/null
	echo 0 >"$CFG/subsystems/$NQN/namespaces/1/enable" 2>/dev/null
	rmdir "$CFG/subsystems/$NQN/namespaces/1" "$CFG/subsystems/$NQN" 2>/dev/null
	rdma link delete rvn0 2>/dev/null
	ip link del rvnv0 2>/dev/null
	umount "$DIR" 2>/dev/null
	rmdir "$DIR" 2>/dev/null
}

T0=$(klog_mark "52-nvmeof start")
main "$@"
