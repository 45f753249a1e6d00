#!/usr/bin/env bash
# APM bonding (seed 002): with /sys/class/infiniband/<dev>/apm_bonding set, a connected QP on a
# two-port device gets an alternate path on the other port by itself, migrates the moment its
# primary path's port goes down, and re-arms when the port is back, so that programs that never
# heard of APM survive link cuts. Proven with unmodified ibv_rc_pingpong (a cut of link 1, its
# restoration and a cut of link 2, each longer than its whole retry budget: without the policy
# the same cut stops it, which a control run shows), with rping (rdma_cm, every ping's data
# checked) and with traffic.py, which checks every byte and completion, through the same cuts;
# the counters show each QP migrating and re-arming.
. "$(dirname "$0")/lib.sh"

DIR=$(mktemp -d)
CUT=2
# traffic.py's ops through the cuts. Not Send with Invalidate: each takes a fresh QP pair, whose
# connection a cut link's missing route would refuse.
CUT_OPS=send,send_imm,write,write_imm,read,fetch_add,cmp_swap
A=${DUT}0
B=${DUT}1

main() {
	ktap_print_header
	ktap_set_plan 13
	local t0 s0
	t0=$(klog_mark "71-apm-bonding start")
	dut_setup 2
	check "two-port devices: $A on veth0 + veth2, $B on veth1 + veth3, GIDs on every port" two_ports
	check "apm_bonding is 0 by default on both devices" eval \
		'[ "$(switch_of "$A")" = 0 ] && [ "$(switch_of "$B")" = 0 ]'
	check "a value that is not a boolean is refused (EINVAL), the switch stays 0" bad_value
	PP_N=$(pp_iters)
	diag "ibv_rc_pingpong runs $PP_N iterations (calibrated to about 25 s)"
	check "control, policy off: a ${CUT} s cut of link 1 stops ibv_rc_pingpong (retry exceeded)" \
		pingpong_fails_across_a_cut
	check "apm_bonding set to 1 on both devices" eval \
		'set_switch "$A" 1 && set_switch "$B" 1 && [ "$(switch_of "$A")$(switch_of "$B")" = 11 ]'
	check "ibv_rc_pingpong survives a cut of link 1, its restoration and a cut of link 2" \
		pingpong_survives
	diag "${SECONDS} s into the test"
	check "rping -v -V (rdma_cm, every ping's data checked) runs on through the same cuts" \
		rping_survives
	diag "${SECONDS} s into the test"
	s0=$(counters)
	check "traffic.py (every op but Send with Invalidate, 4 QP pairs, both ways) through the same cuts: every WR and byte right" \
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

# all_armed DEV: DEV has RC QPs in RTS, each with its alternate path loaded (ARMED).
all_armed() {
	rdma -j -d resource show qp link "$1" 2>/dev/null | "$PY" -c '
import json, sys
qps = [q for q in json.load(sys.stdin) if q.get("type") == "RC" and q.get("state") == "RTS"]
sys.exit(0 if qps and all(q.get("path-mig-state") == "ARMED" for q in qps) else 1)'
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
	# The second cut only once every QP has its alternate path again (ARMED, on both sides): a
	# QP cut before its re-arm cannot migrate, and the cut would test nothing but the timing.
	if ! wait_for "$RVRDMA_WAIT" all_armed "$A" >/dev/null ||
		! wait_for "$RVRDMA_WAIT" all_armed "$B" >/dev/null; then
		echo "not every RC QP re-armed within ${RVRDMA_WAIT} s"
		return 1
	fi
	sleep 0.5
	in_a ip link set veth2 down
	sleep "$CUT"
	kill -0 "$pid" 2>/dev/null || { echo "it ended before the end of the second cut"; in_a ip link set veth2 up; return 1; }
	in_a ip link set veth2 up
	wait_for "$RVRDMA_WAIT" port_is "$A" ACTIVE 2 >/dev/null
}

# pingpong N: ibv_rc_pingpong, server on B over link 1's addresses, N iterations of 4 KiB, in the
# background; its PID in PP_PID, its output in $DIR/pp.txt.
pingpong() {
	pp_run ibv_rc_pingpong "$B" 10.77.0.2 "$A" 10.77.0.1 \
		-n "$1" -s 4096 >"$DIR/pp.txt" 2>&1 &
	PP_PID=$!
}

# pp_iters: iterations that keep ibv_rc_pingpong running for about 25 s on this machine (the cuts
# take 10 to 15 s), from a short calibration run's usec/iter; guest speed varies several-fold.
pp_iters() {
	local usec
	pingpong 300
	wait "$PP_PID"
	usec=$(sed -n 's/.* = \([0-9]*\)\.[0-9]* usec\/iter.*/\1/p' "$DIR/pp.txt" | tail -n 1)
	echo $((25000000 / ${usec:-1000} + 1000))
}

pingpong_fails_across_a_cut() {
	local rc=0
	# The server waits for messages that never come once the client failed: its timeout ends it.
	PP_TIMEOUT=20 pingpong "$PP_N"
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
	pingpong "$PP_N"
	cuts "$PP_PID" || cut=1
	wait "$PP_PID" || rc=$?
	tail -3 "$DIR/pp.txt"
	echo "ibv_rc_pingpong exit status $rc"
	[ "$rc" -eq 0 ] && [ "$cut" -eq 0 ]
}

# rping_survives: rping's server on B, its client on A, pinging without end (-C 0; output
# line-buffered, as it is killed) through the cuts and 2 s beyond; then both must still run,
# every ping printed in sequence, none failed or mismatched (-V stops it on a mismatch), and
# pings made after the last cut. rping uses rdma_cm, which reports a failed neighbour entry on
# the cut link's netdev as UNREACHABLE to a connected cm_id: a packet sent into a port that is
# down must not make one.
rping_survives() {
	local so=$DIR/rping-srv.txt co=$DIR/rping-cli.txt sp cp cut=0 alive=1 n0 n gap
	# Not through in_a/in_b (a function, run in a subshell): the kill below must reach timeout,
	# which passes it on to rping.
	ip netns exec "$NS_B" timeout 600 stdbuf -oL rping -s -a 10.77.0.2 -p 7471 -v -V -S 64 -C 0 >"$so" 2>&1 &
	sp=$!
	wait_for 30 eval "rdma resource show cm_id 2>/dev/null | grep -q LISTEN" >/dev/null
	ip netns exec "$NS_A" timeout 600 stdbuf -oL rping -c -a 10.77.0.2 -p 7471 -v -V -S 64 -C 0 >"$co" 2>&1 &
	cp=$!
	cuts "$cp" || cut=1
	n0=$(grep -c "ping data: " "$co")
	sleep 2
	kill -0 "$cp" 2>/dev/null && kill -0 "$sp" 2>/dev/null || alive=0
	kill "$cp" "$sp" 2>/dev/null
	wait "$cp" "$sp" 2>/dev/null
	n=$(grep -c "ping data: " "$co")
	# The numbers of the printed pings, each one more than the last, from 0.
	gap=$(grep -o "ping data: rdma-ping-[0-9]*" "$co" | awk -F- '$3 != NR - 1 { print "line " NR ": " $0; exit }')
	echo "client: $n pings ($((n - n0)) after the last cut), still running: $alive${gap:+; out of sequence at $gap}"
	echo "tx_port_down: $A $(link_stat "$A" tx_port_down), $B $(link_stat "$B" tx_port_down)"
	[ -n "$gap" ] && grep -n -m3 -A2 "ping data: " "$co" | head -6 | sed 's/^/client: /'
	grep -v "ping data: " "$co" | head -5 | sed 's/^/client: /'
	grep -v "ping data: " "$so" | head -5 | sed 's/^/server: /'
	[ "$cut" -eq 0 ] && [ "$alive" -eq 1 ] && [ "$n" -gt "$n0" ] && [ -z "$gap" ] &&
		! grep -v "ping data: " "$co" | grep -q .
}

traffic_survives() {
	local out=$DIR/traffic.txt stop=$DIR/stop rc=0 cut=0
	rm -f "$stop"
	"$PY" "$RVRDMA_TESTS_DIR/traffic.py" "$A" "$B" --gid-a 10.77.0.1 --gid-b 10.77.0.2 \
		--ops "$CUT_OPS" --qps 4 --random 20000 --mr-size 8M --sizes 1,1024,3079,65536 --until "$stop" \
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

# grew BEFORE N: path_migrations rose by at least N per traffic.py QP pair (4) since BEFORE on
# each device, and apm_port_failovers as much on A, whose links are cut (B's QPs follow A's
# first MigReq=1 packet, usually before B's own port event).
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
