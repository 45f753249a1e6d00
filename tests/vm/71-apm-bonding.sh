#!/usr/bin/env bash
# APM bonding (seed 002): with /sys/class/infiniband/<dev>/apm_bonding set, a connected QP on a
# two-port device gets an alternate path on the other port by itself, migrates the moment its
# primary path's port goes down, and re-arms when the port is back, so that programs that never
# heard of APM survive link cuts. Proven with unmodified ibv_rc_pingpong (a cut of link 1, its
# restoration and a cut of link 2, each longer than its whole retry budget: without the policy
# the same cut stops it, which a control run shows) and with traffic.py, which checks every byte
# and completion, through the same cuts; the counters show each QP migrating and re-arming.
. "$(dirname "$0")/lib.sh"

DIR=$(mktemp -d)
CUT=2
A=${DUT}0
B=${DUT}1

main() {
	ktap_print_header
	ktap_set_plan 12
	local t0 s0
	t0=$(klog_mark "71-apm-bonding start")
	dut_setup 2
	check "two-port devices: $A on veth0 + veth2, $B on veth1 + veth3, GIDs on every port" two_ports
	check "apm_bonding is 0 by default on both devices" eval \
		'[ "$(switch_of "$A")" = 0 ] && [ "$(switch_of "$B")" = 0 ]'
	check "a value that is not a boolean is refused (EINVAL), the switch stays 0" bad_value
	check "control, policy off: a ${CUT} s cut of link 1 stops ibv_rc_pingpong (retry exceeded)" \
		pingpong_fails_across_a_cut
	check "apm_bonding set to 1 on both devices" eval \
		'set_switch "$A" 1 && set_switch "$B" 1 && [ "$(switch_of "$A")$(switch_of "$B")" = 11 ]'
	check "ibv_rc_pingpong survives a cut of link 1, its restoration and a cut of link 2" \
		pingpong_survives
	diag "${SECONDS} s into the test"
	s0=$(counters)
	check "traffic.py (every op, 4 QP pairs, both ways) through the same cuts: every WR and byte right" \
		traffic_survives
	diag "${SECONDS} s into the test"
	check "every QP migrated at each cut, on both devices (path_migrations), A at once on its port event (apm_port_failovers)" \
		grew "$s0" 2
	check "every QP re-armed after each restoration, on both devices (apm_auto_rearms)" \
		rearmed "$s0"
	check "both ports ACTIVE again" eval \
		'port_is "$A" ACTIVE && port_is "$B" ACTIVE && port_is "$A" ACTIVE 2 && port_is "$B" ACTIVE 2'
	check "apm_bonding set back to 0" eval 'set_switch "$A" 0 && set_switch "$B" 0'
	check "no kernel report (lockdep, KASAN, refcount, hung task)" klog_clean_since "$t0"
	ktap_finished
}

two_ports() {
	if ! { link_add "$A" veth0 && link_add "$B" veth1 && link_add "$A" veth2 && link_add "$B" veth3; }; then
		echo "$LINK_OUT"
		return 1
	fi
	local d dev addr port
	for d in "$A:10.77.0.1:1" "$A:10.77.1.1:2" "$B:10.77.0.2:1" "$B:10.77.1.2:2"; do
		IFS=: read -r dev addr port <<<"$d"
		wait_for "$RVRDMA_WAIT" has_gid "$dev" "$addr" "$port" || { echo "no GID $addr on $dev/$port"; return 1; }
	done
}

switch_of() { cat "/sys/class/infiniband/$1/apm_bonding"; }
set_switch() { echo "$2" >"/sys/class/infiniband/$1/apm_bonding"; }

bad_value() {
	local err
	err=$( (echo maybe >"/sys/class/infiniband/$A/apm_bonding") 2>&1) && { echo "accepted"; return 1; }
	echo "$err"
	grep -q "Invalid argument" <<<"$err" && [ "$(switch_of "$A")" = 0 ]
}

# running: an RC QP of a user program is in RTS on A (the pingpong connected; a cut before that
# would stop its TCP exchange instead and prove nothing).
running() {
	wait_for "$((60 * ${RVRDMA_TIME_SCALE:-1}))" eval \
		"rdma resource show qp link $A/1 | grep -q 'type RC state RTS'" || { echo "no QP in RTS on $A"; return 1; }
	sleep 1
}

# cuts PID: while PID runs, link 1 (veth0) goes down for CUT s and up again, then, once the QPs
# had time to re-arm, link 2 (veth2) likewise. Fails if PID ended before the last cut was over
# (the program then proved nothing about it).
cuts() {
	local pid=$1
	running || return 1
	in_a ip link set veth0 down
	sleep "$CUT"
	in_a ip link set veth0 up
	wait_for "$RVRDMA_WAIT" port_is "$A" ACTIVE 1 >/dev/null
	sleep 3
	in_a ip link set veth2 down
	sleep "$CUT"
	kill -0 "$pid" 2>/dev/null || { echo "it ended before the end of the second cut"; in_a ip link set veth2 up; return 1; }
	in_a ip link set veth2 up
	wait_for "$RVRDMA_WAIT" port_is "$A" ACTIVE 2 >/dev/null
}

# pingpong N: ibv_rc_pingpong, server on B over link 1's addresses, N iterations of 4 KiB (about
# 1.2 ms each under TCG), in the background; its PID in PP_PID, its output in $DIR/pp.txt.
pingpong() {
	PP_TIMEOUT=${PP_TIMEOUT:-$((240 * ${RVRDMA_TIME_SCALE:-1}))} pp_run ibv_rc_pingpong "$B" 10.77.0.2 "$A" 10.77.0.1 \
		-n "$1" -s 4096 >"$DIR/pp.txt" 2>&1 &
	PP_PID=$!
}

pingpong_fails_across_a_cut() {
	local rc=0
	# The server waits for messages that never come once the client failed: its timeout ends it.
	PP_TIMEOUT=$((20 * ${RVRDMA_TIME_SCALE:-1})) pingpong 20000
	running || return 1
	in_a ip link set veth0 down
	sleep "$CUT"
	in_a ip link set veth0 up
	wait "$PP_PID" || rc=$?
	wait_for "$RVRDMA_WAIT" port_is "$A" ACTIVE 1 >/dev/null
	echo "ibv_rc_pingpong exit status $rc ($(wc -l <"$DIR/pp.txt") lines of output)"
	tail -4 "$DIR/pp.txt"
	[ "$rc" -ne 0 ] && grep -q "Failed status transport retry counter exceeded" "$DIR/pp.txt"
}

pingpong_survives() {
	local rc=0 cut=0
	pingpong 20000
	cuts "$PP_PID" || cut=1
	wait "$PP_PID" || rc=$?
	tail -3 "$DIR/pp.txt"
	echo "ibv_rc_pingpong exit status $rc"
	[ "$rc" -eq 0 ] && [ "$cut" -eq 0 ]
}

traffic_survives() {
	local out=$DIR/traffic.txt stop=$DIR/stop rc=0 cut=0
	rm -f "$stop"
	"$PY" "$RVRDMA_TESTS_DIR/traffic.py" "$A" "$B" --gid-a 10.77.0.1 --gid-b 10.77.0.2 \
		--ops all --qps 4 --random 20000 --mr-size 8M --sizes 1,1024,3079,65536 --until "$stop" \
		--timeout "$((60 * ${RVRDMA_TIME_SCALE:-1}))" >"$out" 2>&1 &
	local tpid=$!
	wait_for 120 grep -q "operations$" "$out" >/dev/null || { cat "$out"; kill "$tpid"; return 1; }
	cuts "$tpid" || cut=1
	sleep 1
	touch "$stop"
	wait "$tpid" || rc=$?
	grep -m5 '^FAIL' "$out"
	tail -2 "$out"
	[ "$rc" -eq 0 ] || traffic_counters "$A" "$B"
	[ "$rc" -eq 0 ] && [ "$cut" -eq 0 ]
}

# counters: "failovers migrations rearms" of A, then of B.
counters() {
	local d c
	for d in "$A" "$B"; do
		for c in apm_port_failovers path_migrations apm_auto_rearms; do
			printf '%s ' "$(link_stat "$d" "$c")"
		done
	done
}

# grew BEFORE N: path_migrations rose by at least N per traffic.py QP pair (4, and its Send with
# Invalidate pair) since BEFORE on each device, and apm_port_failovers as much on A, whose links
# are cut (B's QPs follow A's first MigReq=1 packet, usually before B's own port event).
grew() {
	local -a b a
	read -ra b <<<"$1"
	read -ra a <<<"$(counters)"
	echo "before: $1; after: ${a[*]} (A: failovers migrations rearms, then B)"
	local min=$((4 * $2))
	[ $((a[0] - b[0])) -ge "$min" ] && [ $((a[1] - b[1])) -ge "$min" ] && [ $((a[4] - b[4])) -ge "$min" ]
}

# rearmed BEFORE: on each device apm_auto_rearms rose by at least one per QP pair and cut.
rearmed() {
	local -a b a
	read -ra b <<<"$1"
	read -ra a <<<"$(counters)"
	echo "apm_auto_rearms: $A +$((a[2] - b[2])), $B +$((a[5] - b[5]))"
	[ $((a[2] - b[2])) -ge 8 ] && [ $((a[5] - b[5])) -ge 8 ]
}

trap 'rm -rf "$DIR"; topo_cleanup' EXIT
main "$@"
