#!/usr/bin/env bash
# NVMe over Fabrics on rvrdma: the kernel's NVMe/RDMA target (nvmet-rdma) exports a 128 MiB file,
# the kernel's NVMe/RDMA host (nvme-cli's `nvme connect -t rdma`) attaches it as a block device,
# and data written through it reads back intact, on the device and in the file behind it:
#  - 4 MiB written with O_DIRECT by dd, compared through the device and in the file;
#  - fio, libaio at queue depth 32, O_DIRECT, random writes of 4 KiB, 64 KiB and 1 MiB blocks,
#    each block then read back and checked (verify=crc32c: a checksum of the data and a header
#    naming the block's offset); any verify error, or a verify phase that read back less than was
#    written, fails;
#  - disconnect, reconnect: the dd data is still there, and fio again on the new controller;
#  - fio again with netem dropping 1% of the packets (a quarter as much in 1 MiB blocks):
#    retransmissions must show in rvrdma's counters, no QP may run out of retries and the
#    controller must never reset.
# Then, for comparison only, the same fio workload with rdma_rxe as the RDMA device (its
# figures are printed beside rvrdma's; its failure is reported, not counted).
#
# Kernel ULPs live in the initial network namespace (nvme-rdma and nvmet-rdma only use devices
# whose netdev is there), so the device runs on a veth end there and host and target share it:
# rvrdma carries the traffic the host sends to its own address like any other, and the route to a
# local address leaves by the loopback device, which is where netem goes. rvrdma and rdma_rxe
# cannot both have a device in one namespace (each binds UDP 4791 there), so an NVMe-oF host on
# one driver against a target on the other is impossible in one kernel: the rxe run comes after
# rvrdma's device is deleted, on the same netdev. rxe loops traffic to a local address back inside
# the driver, so netem would not see it: its run has no fault step. The host side registers
# memory with fast registration (IB_WR_REG_MR) on every I/O.
. "$(dirname "$0")/lib.sh"

NQN=rvrdma-nvmeof-test
CFG=/sys/kernel/config/nvmet
ADDR=10.88.0.1
# The target's file lives in a tmpfs: nvmet takes the namespace's block size from the file's
# filesystem, and the guest's root (9p) reports none.
DIR=/tmp/rvrdma-nvmeof
IMG=$DIR/namespace.img
NETEM=(loss 1%)
# fio jobs, one after the other, on separate areas of the namespace (the dd data is at 8 MiB):
# name, block size, offset, size. Sizes keep each run well under a minute under TCG; fio has no
# time limit of its own here because it skips the verify phase of a write phase cut short.
FIO_JOBS=("bs4k 4k 16M 4M" "bs64k 64k 32M 16M" "bs1m 1m 64M 32M")
# Through the loss, a quarter as much in 1 MiB blocks: at iodepth 32 those put the whole job in
# flight at once, and the last command waits for all the others. Through 1% loss every 1 MiB
# (1,024 packets at the veth's MTU) loses about ten packets, and each loss wastes the responses
# already queued behind it (go-back-N): under TCG that moved 1.6 MB/s in a passing run on a slow
# host, so 32 MiB in flight came close to the NVMe host's I/O timeout, and once passed it; 8 MiB
# does not. The small blocks keep their sizes: the many short messages are where the lost last
# packets are, which only the transport timer finds.
LOSSY_JOBS=("bs4k 4k 16M 4M" "bs64k 64k 32M 16M" "bs1m 1m 64M 8M")
FIO_TIMEOUT=${FIO_TIMEOUT:-150}
# The NVMe host's I/O timeout (nvme_core's 30 s) and its Keep Alive timeout (the 5 s default of
# `nvme connect`, for each Keep Alive's round trip) are time limits on a transfer: they scale
# with RVRDMA_TIME_SCALE like the others. The debug kernel (KASAN, lockdep) moves about 0.5 MB/s
# under TCG: there every job writes a quarter as much, with the same block sizes and queue depth,
# and the host waits ten times as long for each command. A Keep Alive lost to netem waits for
# the transport timer (about 0.5 s as rdma_cm sets it), which a busy debug guest serves seconds
# late.
NVME_IO_TIMEOUT=$((30 * ${RVRDMA_TIME_SCALE:-1}))
NVME_KATO=$((5 * ${RVRDMA_TIME_SCALE:-1}))
if [ "${RVRDMA_DEBUG:-0}" = 1 ]; then
	FIO_JOBS=("bs4k 4k 16M 1M" "bs64k 64k 32M 4M" "bs1m 1m 64M 8M")
	LOSSY_JOBS=("${FIO_JOBS[@]}")
	FIO_TIMEOUT=$((FIO_TIMEOUT * ${RVRDMA_TIME_SCALE:-4}))
	NVME_IO_TIMEOUT=300
	NVME_KATO=50
fi
# Counters shown after the faults; the first two must grow, the third must not.
COUNTERS=(retransmitted_pkts transport_timeouts retry_exceeded_err seq_naks_sent rcvd_seq_err
	duplicate_request duplicate_responses out_of_seq_request send_err qp_dropped sent_pkts)

main() {
	command -v nvme >/dev/null || skip_all "nvme-cli is not installed (scripts/install-deps installs it)"
	command -v fio >/dev/null || skip_all "fio is not installed (scripts/install-deps installs it)"
	ktap_print_header
	ktap_set_plan 17
	trap 'cleanup; topo_cleanup' EXIT
	local out
	out=$(dut_load 2>&1) || fail_rest "cannot load the $RVRDMA_LINK_TYPE driver: $out"
	modprobe -q nvmet-rdma 2>/dev/null
	modprobe -q nvme-rdma 2>/dev/null
	IO_TIMEOUT0=$(cat /sys/module/nvme_core/parameters/io_timeout)
	echo "$NVME_IO_TIMEOUT" >/sys/module/nvme_core/parameters/io_timeout ||
		fail_rest "cannot set nvme_core's io_timeout"
	diag "fio jobs ${FIO_JOBS[*]} (through the loss: ${LOSSY_JOBS[*]})," \
		"nvme io_timeout ${NVME_IO_TIMEOUT} s, keep-alive ${NVME_KATO} s"
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config ||
		fail_rest "configfs cannot be mounted"
	[ -d "$CFG" ] || fail_rest "no $CFG: the kernel has no NVMe target"
	ip link add rvnv0 type veth peer name rvnv1 && ip addr add "$ADDR/24" dev rvnv0 &&
		ip link set rvnv0 up && ip link set rvnv1 up || fail_rest "veth set-up failed"
	device_add rvn0 "$RVRDMA_LINK_TYPE" || fail_rest "$LINK_OUT"

	check "nvmet-rdma listens on $ADDR:4420 over $RVRDMA_LINK_TYPE (a 128 MiB file as namespace 1)" \
		target_up
	check "nvme connect -t rdma attaches the namespace as a block device" host_connect
	check "4 MiB of random data written with O_DIRECT reads back intact" data_roundtrip
	check "the file behind the namespace holds the same bytes" backing_file_matches
	wire_snap W0
	fio_point "fio verify=crc32c, 4k/64k/1m random writes at iodepth 32, all read back intact" clean
	wire_snap W1
	diag "where the packets went: $RVRDMA_LINK_TYPE's rvn0 sent $((W1[sent] - W0[sent])), lo carried" \
		"$((W1[lo] - W0[lo])), rvnv0 $((W1[veth] - W0[veth])) (packets, during the fio run)"
	if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
		check "the target's Sends with Invalidate invalidated the host's R_Keys" \
			remote_invalidated
	else
		ktap_test_skip "remote invalidation counted ($RVRDMA_LINK_TYPE has no such counter)"
	fi
	check "nvme disconnect detaches it" host_disconnect
	check "nvme connect attaches it again" host_connect
	check "the 4 MiB written before the disconnect read back intact after it" data_still_there
	counters_snap C0
	fio_point "fio verify on the reconnected controller: all read back intact" reconnected
	counters_snap C1

	local faults=1
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		faults=0
		for out in "tc netem ${NETEM[*]} on lo" "fio verify through the loss" \
			"the loss made the requesters retransmit" "no QP ran out of retries, no controller reset"; do
			ktap_test_skip "$out ($RVRDMA_LINK_TYPE loops local traffic back inside the driver)"
		done
	fi
	if [ "$faults" = 1 ]; then
		T1=$(klog_mark "52-nvmeof faults")
		check "tc netem ${NETEM[*]} on lo (where the traffic to the local address goes)" \
			tc qdisc add dev lo root netem "${NETEM[@]}"
		local jobs=("${FIO_JOBS[@]}")
		FIO_JOBS=("${LOSSY_JOBS[@]}")
		fio_point "fio verify through ${NETEM[*]}: all read back intact" lossy
		FIO_JOBS=("${jobs[@]}")
		counters_snap C2
		diag "netem on lo: $(tc -s qdisc show dev lo | tr '\n' ' ' | tr -s ' ')"
		tc qdisc del dev lo root 2>/dev/null
		for out in "${COUNTERS[@]}"; do
			diag "rvn0 $out: +$((C1[$out] - C0[$out])) without loss, +$((C2[$out] - C1[$out])) with it"
		done
		diag "rdma statistic show link rvn0/1:"
		diag "$(rdma statistic show link rvn0/1 | tr ' ' '\n' | paste - - | tail -n +2 | column -c 100)"
		check "the loss made the requesters retransmit (retransmitted_pkts, transport_timeouts)" \
			retransmitted
		check "no QP ran out of retries and the controller never reset" no_recovery "$T1"
	fi
	check "nvme disconnect detaches it again" host_disconnect

	if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
		rxe_run
	else
		diag "no rdma_rxe comparison: the device under test is $RVRDMA_LINK_TYPE already"
	fi
	figures

	cleanup
	check "clean-up leaves nothing behind (controller, configfs, rdma links, qdisc, tmpfs, veth)" \
		all_gone
	check "no kernel report during the NVMe-oF run (lockdep, KASAN, refcount, hung task)" \
		klog_clean_since "$T0"
	ktap_finished
}

# device_add NAME TYPE: an RDMA device on rvnv0 with its IPv4 GID.
device_add() {
	LINK_OUT=$(rdma link add "$1" type "$2" netdev rvnv0 2>&1) ||
		{ LINK_OUT="rdma link add $1 type $2: $LINK_OUT"; return 1; }
	wait_for "$RVRDMA_WAIT" has_gid "$1" "$ADDR" || { LINK_OUT="$1's GID did not appear"; return 1; }
}

target_up() {
	mkdir -p "$DIR" && mount -t tmpfs rvrdma-nvmeof "$DIR" && truncate -s 128M "$IMG" || return 1
	mkdir -p "$CFG/subsystems/$NQN/namespaces/1" || return 1
	echo 1 >"$CFG/subsystems/$NQN/attr_allow_any_host" &&
		echo -n "$IMG" >"$CFG/subsystems/$NQN/namespaces/1/device_path" &&
		echo 1 >"$CFG/subsystems/$NQN/namespaces/1/enable" || return 1
	port_up
}

port_up() {
	mkdir -p "$CFG/ports/1" || return 1
	echo rdma >"$CFG/ports/1/addr_trtype" && echo ipv4 >"$CFG/ports/1/addr_adrfam" &&
		echo "$ADDR" >"$CFG/ports/1/addr_traddr" && echo 4420 >"$CFG/ports/1/addr_trsvcid" ||
		return 1
	ln -s "$CFG/subsystems/$NQN" "$CFG/ports/1/subsystems/$NQN"
}

port_down() {
	rm -f "$CFG/ports/1/subsystems/$NQN" 2>/dev/null
	rmdir "$CFG/ports/1" 2>/dev/null
	[ ! -e "$CFG/ports/1" ]
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

# Whether a controller of our subsystem exists (connected or not).
nvme_ctrl() {
	grep -qxF "$NQN" /sys/class/nvme/nvme*/subsysnqn 2>/dev/null
}

host_connect() {
	timeout 120 nvme connect -t rdma -a "$ADDR" -s 4420 -n "$NQN" -k "$NVME_KATO" || return 1
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
	data_still_there
}

data_still_there() {
	local DEV
	DEV=$(nvme_dev) && [ -b "$DEV" ] || return 1
	rm -f $DIR/read-back
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
	wait_for 30 eval '! nvme_ctrl'
}

# fio_verify LABEL: the fio jobs on our namespace; the JSON in $DIR/fio-LABEL.json, the summary
# (fio_summary.py) and anything fio printed in $DIR/fio-LABEL.txt.
fio_verify() {
	local label=$1 dev job name bs off size args=() rc t0=$SECONDS
	if ! dev=$(nvme_dev) || [ ! -b "$dev" ]; then
		echo "$label: no block device" >"$DIR/fio-$label.txt"
		return 1
	fi
	for job in "${FIO_JOBS[@]}"; do
		read -r name bs off size <<<"$job"
		args+=(--name="$name" --stonewall --bs="$bs" --offset="$off" --size="$size")
	done
	timeout "$FIO_TIMEOUT" fio --output-format=json --output="$DIR/fio-$label.json" \
		--filename="$dev" --ioengine=libaio --direct=1 --iodepth=32 --rw=randwrite \
		--verify=crc32c --verify_state_save=0 "${args[@]}" >"$DIR/fio-$label.err" 2>&1
	rc=$?
	{
		"$PY" "$RVRDMA_TESTS_DIR/fio_summary.py" "$DIR/fio-$label.json" 2>&1 || { [ "$rc" -ne 0 ] || rc=1; }
		echo "$label: fio exit status $rc, $((SECONDS - t0)) s"
		head -20 "$DIR/fio-$label.err"
	} >"$DIR/fio-$label.txt"
	return "$rc"
}

# fio_point DESC LABEL: fio_verify as a test point, its figures as diagnostics.
fio_point() {
	fio_verify "$2"
	local rc=$?
	diag "$(cat "$DIR/fio-$2.txt")"
	result "$1" "$rc"
}

declare -A W0 W1 C0 C1 C2

# wire_snap NAME: packets rvn0 sent, and the packets lo and rvnv0 transmitted, into NAME.
wire_snap() {
	local -n to=$1
	to[sent]=$(link_stat rvn0 sent_pkts)
	to[sent]=${to[sent]:-0}
	to[lo]=$(cat /sys/class/net/lo/statistics/tx_packets)
	to[veth]=$(cat /sys/class/net/rvnv0/statistics/tx_packets)
	to[inv]=$(link_stat rvn0 remote_invalidations)
	to[inv]=${to[inv]:-0}
}

# remote_invalidated: Sends with Invalidate invalidated R_Keys during the fio run. nvme-rdma asks
# for it (NVME_SGL_FMT_INVALIDATE) on every command whose data it fast-registers, and fails the
# command on a completion that invalidated another R_Key than its own.
remote_invalidated() {
	echo "remote_invalidations +$((W1[inv] - W0[inv]))"
	[ "$((W1[inv] - W0[inv]))" -gt 0 ]
}

# counters_snap NAME: rvn0's COUNTERS into NAME (an absent counter reads -1).
counters_snap() {
	local -n to=$1
	local c v
	for c in "${COUNTERS[@]}"; do
		v=$(link_stat rvn0 "$c")
		to[$c]=${v:--1}
	done
}

# retransmitted: the fio run through the loss retransmitted more than twice + 10 what the run
# without it did, and transport timers expired (a lost last packet or ACK is found by the
# timer, not by a sequence NAK).
retransmitted() {
	local r0=$((C1[retransmitted_pkts] - C0[retransmitted_pkts]))
	local r1=$((C2[retransmitted_pkts] - C1[retransmitted_pkts]))
	local t1=$((C2[transport_timeouts] - C1[transport_timeouts]))
	echo "retransmitted_pkts +$r0 without loss, +$r1 with it; transport_timeouts +$t1 with it"
	[ "${C2[retransmitted_pkts]}" -ge 0 ] && [ "$r1" -gt $((2 * r0 + 10)) ] && [ "$t1" -gt 0 ]
}

# no_recovery T: retry_exceeded_err did not move during the faults, and since kernel time T
# neither the NVMe host nor the target logged an error recovery, a reconnect or an I/O timeout.
no_recovery() {
	local e=$((C2[retry_exceeded_err] - C1[retry_exceeded_err])) log hits
	echo "retry_exceeded_err +$e"
	log=$(dmesg) || return 1
	hits=$(klog_window "$1" <<<"$log" |
		grep -E 'starting error recovery|Reconnecting in|I/O tag .* timeout|failed with status|nvmet_rdma: .*(fail|error)')
	[ -n "$hits" ] && echo "$hits"
	[ "${C2[retry_exceeded_err]}" -ge 0 ] && [ "$e" -eq 0 ] && [ -z "$hits" ]
}

# rxe_run: the same fio run with rdma_rxe as the device on rvnv0, informative: a failure is
# said in diagnostics, not counted.
rxe_run() {
	local why= out
	# The device goes before the port (see devices_down).
	devices_down rvn0 || why="rdma link delete rvn0 failed"
	if [ -z "$why" ]; then
		port_down || why="the nvmet port would not go"
	fi
	# rdma_rxe is built into the test kernel (CONFIG_RDMA_RXE=y): then modprobe does nothing and
	# nothing is unloaded at the end. A module (it has an initstate) that we load goes again.
	if [ -z "$why" ] && [ ! -e /sys/module/rdma_rxe/initstate ]; then
		modprobe rdma_rxe || why="modprobe rdma_rxe failed"
		[ -e /sys/module/rdma_rxe/initstate ] && RXE_LOADED=1
	fi
	[ -z "$why" ] && { device_add rxn0 rxe || why=$LINK_OUT; }
	[ -z "$why" ] && { port_up || why="the nvmet port would not come back on rxn0"; }
	[ -z "$why" ] && { out=$(host_connect 2>&1) || why="nvme connect over rxe failed: $out"; }
	if [ -z "$why" ]; then
		fio_verify rxe || why="fio verify over rxe failed"
		diag "$(cat "$DIR/fio-rxe.txt")"
		out=$(host_disconnect 2>&1) || why="${why:+$why; }nvme disconnect over rxe failed: $out"
	fi
	if [ -n "$why" ]; then
		diag "rdma_rxe comparison FAILED (informative, not counted): $why"
	else
		diag "rdma_rxe comparison: fio verify passed over rxe"
	fi
}

# figures: rvrdma's and rxe's fio figures side by side.
figures() {
	local l a=()
	for l in clean reconnected lossy rxe; do
		[ -s "$DIR/fio-$l.json" ] && a+=("$l=$DIR/fio-$l.json")
	done
	diag "fio figures (write IOPS, MB/s / verify-read IOPS, MB/s; clean, reconnected and lossy are $RVRDMA_LINK_TYPE):"
	diag "$("$PY" "$RVRDMA_TESTS_DIR/fio_summary.py" --table "${a[@]}" 2>&1)"
}

# devices_down DEV...: deletes the RDMA devices that exist, before the nvmet port goes. The
# device's removal destroys the port's listening rdma_cm ID (nvmet-rdma returns 1 to the
# DEVICE_REMOVAL event), so the port's removal finds none left to destroy. Destroyed by the
# port's removal instead, under nvmet_config_sem, it records the lock order nvmet_config_sem ->
# rdma_cm's handler_mutex, which lockdep reports against nvmet-rdma's own opposite order: a
# Connect that arrives before the ESTABLISHED event is run from the CM handler, and it looks
# the subsystem up under nvmet_config_sem. That is the upstream kernel's, whichever RDMA device
# carries the traffic (it was seen in the rdma_rxe comparison run).
devices_down() {
	local d rc=0
	for d in "$@"; do
		dev_exists "$d" || continue
		{ rdma link delete "$d" && wait_for "$RVRDMA_WAIT" dev_gone "$d" >/dev/null; } 2>/dev/null || rc=1
	done
	return "$rc"
}

RXE_LOADED=0
IO_TIMEOUT0=
cleanup() {
	[ -n "$IO_TIMEOUT0" ] && echo "$IO_TIMEOUT0" >/sys/module/nvme_core/parameters/io_timeout
	tc qdisc del dev lo root >/dev/null 2>&1
	nvme disconnect -n "$NQN" >/dev/null 2>&1
	wait_for 30 eval '! nvme_ctrl' >/dev/null 2>&1
	devices_down rvn0 rxn0
	port_down
	[ -e "$CFG/subsystems/$NQN" ] && echo 0 >"$CFG/subsystems/$NQN/namespaces/1/enable"
	rmdir "$CFG/subsystems/$NQN/namespaces/1" "$CFG/subsystems/$NQN" 2>/dev/null
	[ "$RXE_LOADED" = 1 ] && modprobe -r rdma_rxe 2>/dev/null && RXE_LOADED=0
	ip link del rvnv0 2>/dev/null
	umount "$DIR" 2>/dev/null
	rmdir "$DIR" 2>/dev/null
}

all_gone() {
	local bad=()
	nvme_ctrl && bad+=("a controller of $NQN")
	[ -e "$CFG/ports/1" ] && bad+=("nvmet port 1")
	[ -e "$CFG/subsystems/$NQN" ] && bad+=("nvmet subsystem $NQN")
	dev_exists rvn0 && bad+=(rvn0)
	dev_exists rxn0 && bad+=(rxn0)
	[ "$RXE_LOADED" = 1 ] && bad+=("rdma_rxe module")
	tc qdisc show dev lo | grep -q netem && bad+=("netem on lo")
	mountpoint -q "$DIR" && bad+=("tmpfs on $DIR")
	[ -e /sys/class/net/rvnv0 ] && bad+=(rvnv0)
	[ ${#bad[@]} -eq 0 ] || { echo "left behind: ${bad[*]}"; return 1; }
}

T0=$(klog_mark "52-nvmeof start")
main "$@"
