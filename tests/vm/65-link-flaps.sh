#!/usr/bin/env bash
# Link flaps and MTU changes under data-checked traffic (traffic.py, 4 RC QP pairs, both
# directions): veth0 goes down and up every 0.5 s for 60 s, then its MTU (and its peer's) cycles
# 1500 -> 9000 -> 1200 -> 1500 for 20 s, each while traffic runs. Every WR must complete
# successfully with every byte right (no retry-exceeded stop either: the QPs' Local ACK Timeout is
# 17, 0.5 s, and seven retries outlast a 0.5 s outage many times); the ports come back ACTIVE,
# the flaps show as retransmissions, and a fresh run afterwards passes. First, link_return.py: a
# Send posted while the link is down completes after one transport timeout once it is back, each
# way (the first packet after the link returns is not lost to a route released meanwhile).
. "$(dirname "$0")/lib.sh"

DIR=$(mktemp -d)
# (At least: the debug kernel asks for 18.)
export RVRDMA_ACK_TIMEOUT=$((${RVRDMA_ACK_TIMEOUT:-14} > 17 ? ${RVRDMA_ACK_TIMEOUT:-14} : 17))

main() {
	ktap_print_header
	ktap_set_plan 10
	local t0 r0
	t0=$(klog_mark "65-link-flaps start")
	dut_setup 1
	pair_up
	run_points 2 link_return.py "$PY" "$RVRDMA_TESTS_DIR/link_return.py" \
		"${DUT}0" "$GA" "${DUT}1" "$GB" "$NS_A"
	r0=$(retransmitted)
	check "traffic through 60 s of link flaps (down/up every 0.5 s): every byte right" \
		under flap 60
	check "both ports ACTIVE again after the flaps" \
		wait_for "$RVRDMA_WAIT" eval 'port_is ${DUT}0 ACTIVE && port_is ${DUT}1 ACTIVE'
	check "the flaps cost retransmissions (retransmitted_pkts grew)" grew "$r0"
	check "traffic through 20 s of MTU changes (1500, 9000, 1200): every byte right" \
		under mtu_cycle 20
	check "MTU back to 1500 on both ends" \
		eval '[ "$(in_a cat /sys/class/net/veth0/mtu)" = 1500 ] && [ "$(in_b cat /sys/class/net/veth1/mtu)" = 1500 ]'
	check "a fresh run after the flaps and MTU changes passes" \
		timeout "$((300 * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --qps 2 --random 100 \
		--sizes 1,1024,65536
	check "no kernel report during the flaps (lockdep, KASAN, refcount, hung task)" \
		klog_clean_since "$t0"
	ktap_finished
}

# grew BEFORE: retransmitted_pkts (both devices) is above BEFORE.
grew() {
	local now
	now=$(retransmitted)
	echo "retransmitted_pkts +$((now - $1))"
	[ "$now" -gt "$1" ]
}

retransmitted() {
	echo $(($(link_stat "${DUT}0" retransmitted_pkts) + $(link_stat "${DUT}1" retransmitted_pkts)))
}

# under DISTURB SECS: traffic.py runs while DISTURB SECS runs; then it stops posting, finishes
# what is in flight and compares the MRs. Passes only if traffic.py passed: a link down for 0.5 s
# at a time is well inside the retry budget (7 retries of at least 0.5 s), so every WR completes
# and every byte is checked.
under() {
	local out=$DIR/traffic.txt stop=$DIR/stop rc=0
	rm -f "$stop"
	"$PY" "$RVRDMA_TESTS_DIR/traffic.py" "${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 \
		--qps 4 --random 3000 --sizes 1,63,1024,3079,65536 --until "$stop" \
		--timeout "$((60 * ${RVRDMA_TIME_SCALE:-1}))" >"$out" 2>&1 &
	local tpid=$!
	# Connected and moving data before the disturbance starts.
	wait_for 120 grep -q "operations$" "$out" >/dev/null || { cat "$out"; return 1; }
	"$@"
	touch "$stop"
	wait "$tpid" || rc=$?
	grep -m3 '^FAIL' "$out"
	tail -4 "$out"
	[ "$rc" -eq 0 ]
}

# flap SECS: veth0 down and up every 0.5 s.
flap() {
	local end=$((SECONDS + $1))
	while [ "$SECONDS" -lt "$end" ]; do
		in_a ip link set veth0 down
		sleep 0.5
		in_a ip link set veth0 up
		sleep 0.5
	done
}

# mtu_cycle SECS: both veth ends through 1500, 9000, 1200, one second each, ending at 1500.
mtu_cycle() {
	local end=$((SECONDS + $1)) m
	while [ "$SECONDS" -lt "$end" ]; do
		for m in 9000 1200 1500; do
			in_a ip link set veth0 mtu "$m"
			in_b ip link set veth1 mtu "$m"
			sleep 1
		done
	done
}

trap 'touch "$DIR/stop"; rm -rf "$DIR"; topo_cleanup' EXIT
main "$@"
