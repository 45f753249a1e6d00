#!/usr/bin/env bash
# librdmacm's own examples on rvrdma: rdma_server / rdma_client (the rdma_create_ep API: one RC
# connection, a 16-byte send each way, disconnect) and cmtime (N connections set up and torn
# down step by step, each step timed). rvrdma <-> rvrdma, then against rdma_rxe both ways.
#
# Neither tool says much by its exit status. rdma_server and rdma_client check no completion
# status and no data (so these are smoke tests: both must print "end 0", and the server's port
# must have established the connection). cmtime exits with the status of its last rdma_connect
# call: a connection that was rejected or unreachable, or a step that failed, only prints a line.
# So its output is parsed (no such line, every step in the table), and ib_cm's counters of the
# server's port (ports/1/cm_rx_msgs, ...) must show N connections established (N RTUs taken,
# duplicates not counted) and no REJ either way.
. "$(dirname "$0")/lib.sh"

# Connections per cmtime run (its default, 100, takes minutes under TCG).
CMTIME_CONNS=${CMTIME_CONNS:-40}

main() {
	ktap_print_header
	ktap_set_plan 6
	dut_setup 1
	pair_up
	check "smoke: rdma_server / rdma_client, one message each way, rvrdma <-> rvrdma" \
		ep_run 10.77.0.2 "${DUT}1"
	cmtime_point "cmtime: $CMTIME_CONNS connections, all established, rvrdma <-> rvrdma" \
		10.77.0.2 "${DUT}1" "$CMTIME_CONNS"

	rdma link delete "${DUT}1" && link_add rxe1 veth1 rxe || fail_rest "rxe1: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 || fail_rest "rxe1's GID did not appear"
	check "smoke: rdma_server / rdma_client, rvrdma client -> rdma_rxe server" \
		ep_run 10.77.0.2 rxe1
	check "smoke: rdma_server / rdma_client, rdma_rxe client -> rvrdma server" \
		ep_run 10.77.0.1 "${DUT}0"
	cmtime_point "cmtime: $CMTIME_CONNS connections, rvrdma client -> rdma_rxe server" \
		10.77.0.2 rxe1 "$CMTIME_CONNS"
	cmtime_point "cmtime: $CMTIME_CONNS connections, rdma_rxe client -> rvrdma server" \
		10.77.0.1 "${DUT}0" "$CMTIME_CONNS"
	ktap_finished
}

# ep_run SADDR SDEV: rdma_server on SADDR (device SDEV), rdma_client in the other netns; both must
# exit 0 and say "end 0", and SDEV's ib_cm counters show the connection established.
ep_run() {
	local saddr=$1 sdev=$2 sns cns srv_out srv_pid port out sout rc=0 before
	cm_pair "$saddr"
	port=$(pp_next_port) || return 1
	before=$(cm_counts "$sdev") || { echo "no ib_cm counters for $sdev"; return 1; }
	cm_server rdma_server -s "$saddr" -p "$port" || rc=1
	out=$(ip netns exec "$cns" timeout "$(pp_limit)" rdma_client -s "$saddr" -p "$port" 2>&1) || rc=1
	echo "client: $out"
	grep -qx "rdma_client: end 0" <<<"$out" || rc=1
	# In this shell (it waits for the server, a child of this shell), its output kept in a file.
	sout=$(mktemp)
	cm_server_done >"$sout" || rc=1
	cat "$sout"
	grep -qx "server: rdma_server: end 0" "$sout" || rc=1
	rm -f "$sout"
	cm_established "$sdev" 1 "$before" || rc=1
	return "$rc"
}

# cm_count DEV GROUP NAME: ib_cm's counter NAME (req, rep, rtu, rej, ...) of DEV's port 1 in GROUP
# (cm_rx_msgs, cm_tx_msgs, cm_rx_duplicates).
cm_count() {
	cat "/sys/class/infiniband/$1/ports/1/$2/$3"
}

# cm_counts DEV: "rx_rtu dup_rtu rx_rej tx_rej" of DEV.
cm_counts() {
	local a b c d
	a=$(cm_count "$1" cm_rx_msgs rtu) && b=$(cm_count "$1" cm_rx_duplicates rtu) &&
		c=$(cm_count "$1" cm_rx_msgs rej) && d=$(cm_count "$1" cm_tx_msgs rej) || return 1
	echo "$a $b $c $d"
}

# cm_established DEV CONNS BEFORE: DEV's ib_cm counters (cm_counts) since BEFORE show CONNS
# connections established (RTUs taken, not counting duplicates) and no REJ either way.
cm_established() {
	local dev=$1 conns=$2 rtu0 dup0 rrej0 trej0 rtu1 dup1 rrej1 trej1 n
	read -r rtu0 dup0 rrej0 trej0 <<<"$3"
	read -r rtu1 dup1 rrej1 trej1 < <(cm_counts "$dev") || { echo "no ib_cm counters for $dev"; return 1; }
	n=$((rtu1 - rtu0 - (dup1 - dup0)))
	echo "$dev ib_cm: connections established $n of $conns (RTUs $((rtu1 - rtu0)), duplicates $((dup1 - dup0))), REJ received $((rrej1 - rrej0)), sent $((trej1 - trej0))"
	[ "$n" -eq "$conns" ] && [ $((rrej1 - rrej0)) -eq 0 ] && [ $((trej1 - trej0)) -eq 0 ]
}

# The steps cmtime times (its table's rows; "bind addr" only with -b).
CMTIME_STEPS=("create id" "resolve addr" "resolve route" "create qp" "connect" "disconnect" "destroy")

# cmtime_run SADDR SDEV CONNS: cmtime's server on SADDR (device SDEV), its client in the other
# netns making CONNS connections. Prints the client's output; fails when the client failed, printed
# an error, or left a step out of its table, when the server died, or when SDEV's ib_cm counters
# do not show CONNS connections established and no REJ.
cmtime_run() {
	local saddr=$1 sdev=$2 conns=$3 sns cns srv_out srv_pid port out rc=0 before s
	cm_pair "$saddr"
	port=$(pp_next_port) || return 1
	before=$(cm_counts "$sdev") || { echo "no ib_cm counters for $sdev"; return 1; }
	cm_server cmtime -b "$saddr" -p "$port" || rc=1
	out=$(ip netns exec "$cns" timeout "$(pp_limit)" cmtime -s "$saddr" -p "$port" \
		-c "$conns" 2>&1) || rc=1
	echo "$out"
	# The server never exits by itself: it must still be running, then it is stopped.
	if ! kill -0 "$srv_pid" 2>/dev/null; then
		echo "the cmtime server died"
		rc=1
	fi
	kill "$srv_pid" 2>/dev/null
	wait "$srv_pid"
	sed 's/^/server: /' "$srv_out"
	if grep -qiE "error|fail|event:|reject|unreachable" "$srv_out"; then rc=1; fi
	rm -f "$srv_out"
	if grep -iE "error|fail|event:|reject|unreachable" <<<"$out"; then
		echo "the client reported errors"
		rc=1
	fi
	for s in "${CMTIME_STEPS[@]}"; do
		grep -qE "^$s *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+\$" <<<"$out" ||
			{ echo "no timing for step '$s'"; rc=1; }
	done
	cm_established "$sdev" "$conns" "$before" || rc=1
	return "$rc"
}

# cmtime_point DESC SADDR SDEV CONNS: cmtime_run as a test point; cmtime's table and the ib_cm
# tally are printed as diagnostics either way.
cmtime_point() {
	local desc=$1 out rc
	shift
	out=$(cmtime_run "$@" 2>&1)
	rc=$?
	diag "$(grep -E '^step |^[a-z ]+ *: +[0-9.]|ib_cm: ' <<<"$out")"
	result "$desc" "$rc" "$out"
}

main "$@"
