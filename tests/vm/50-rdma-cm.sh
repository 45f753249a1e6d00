#!/usr/bin/env bash
# Connection management: programs that connect through the RDMA CM (librdmacm) run on rvrdma.
# ib_mad opens a GSI QP (QP1) on every port; ib_cm and rdma_cm exchange their MADs through it
# (UD, Q_Key 0x80010000, the GRH area telling the receiver the peer's address), then the
# programs move data over the RC QPs they connected.
#
# rping -v -V moves a pattern with RDMA Read and Write and checks every byte of it on each
# ping; rstream -T v (rsockets) streams data and the receiver checks every byte; ucmatose
# connects several QPs at once and sends over each; udaddy sends over user UD QPs whose peers
# it found through the CM. All run rvrdma <-> rvrdma, then rvrdma <-> rdma_rxe.
. "$(dirname "$0")/lib.sh"

main() {
	ktap_print_header
	ktap_set_plan 12
	dut_setup 1
	pair_up
	check "ib_mad opened QP1 on rvrdma (no 'Couldn't create ib_mad QP1' in the kernel log)" \
		no_mad_qp1_error
	check "rping -v -V, 64 B x 20: every ping's data checked, rvrdma <-> rvrdma" \
		rping_run 10.77.0.2 64 20
	check "rping -v -V, 4000 B x 10 (several packets per RDMA op), rvrdma <-> rvrdma" \
		rping_run 10.77.0.2 4000 10
	check "rping -v -V, 60000 B x 5, server on rvA, rvrdma <-> rvrdma" \
		rping_run 10.77.0.1 60000 5
	check "ucmatose: 8 connections, 10 sends each, rvrdma <-> rvrdma" \
		ucmatose_run 10.77.0.2 8 10
	check "udaddy: UD QPs resolved through the CM (SIDR), rvrdma <-> rvrdma" \
		udaddy_run 10.77.0.2
	check "rsockets: rstream -T v (every byte verified), 64 KiB x 200, rvrdma <-> rvrdma" \
		rstream_run 10.77.0.2

	# rdma_rxe on the rvB side: rvrdma and rdma_rxe connect to each other through the CM.
	rdma link delete "${DUT}1" && link_add rxe1 veth1 rxe || fail_rest "rxe1: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 || fail_rest "rxe1's GID did not appear"
	check "rping -v -V, 64 B x 20, rvrdma client -> rdma_rxe server" \
		rping_run 10.77.0.2 64 20
	check "rping -v -V, 4000 B x 10, rdma_rxe client -> rvrdma server" \
		rping_run 10.77.0.1 4000 10
	check "ucmatose: 8 connections, rvrdma client -> rdma_rxe server" \
		ucmatose_run 10.77.0.2 8 10
	check "udaddy: rvrdma client -> rdma_rxe server" \
		udaddy_run 10.77.0.2
	check "rsockets: rstream -T v, rdma_rxe client -> rvrdma server" \
		rstream_run 10.77.0.1
	ktap_finished
}

# ---- helpers of this script ----------------------------------------------------------------------

no_mad_qp1_error() {
	local log
	log=$(dmesg) || return 1
	! grep -E "Couldn't create ib_mad QP1|Couldn't open port" <<<"$log"
}

# rping_run SADDR SIZE COUNT: rping's server on SADDR, its client in the other netns, both
# verbose and validating. Passes when both exit 0, nothing mismatched, and the client printed
# COUNT pings.
rping_run() {
	local saddr=$1 size=$2 count=$3 sns cns srv_out srv_pid port out rc=0 n
	cm_pair "$saddr"
	port=$(pp_next_port) || return 1
	cm_server rping -s -a "$saddr" -p "$port" -v -V -S "$size" -C "$count" || rc=1
	out=$(ip netns exec "$cns" timeout "$(pp_limit)" rping -c -a "$saddr" -p "$port" -v -V \
		-S "$size" -C "$count" 2>&1) || rc=1
	cm_server_done || rc=1
	n=$(grep -c "ping data: " <<<"$out")
	echo "client: $(head -c 2000 <<<"$out")"
	echo "client printed $n of $count pings"
	if grep -qi "mismatch" <<<"$out"; then rc=1; fi
	[ "$n" -eq "$count" ] || rc=1
	return "$rc"
}

# ucmatose_run SADDR CONNS MSGS: ucmatose with CONNS connections of MSGS sends each.
ucmatose_run() {
	local saddr=$1 conns=$2 msgs=$3 sns cns srv_out srv_pid port rc=0
	cm_pair "$saddr"
	port=$(pp_next_port) || return 1
	cm_server ucmatose -b "$saddr" -p "$port" -c "$conns" -C "$msgs" || rc=1
	ip netns exec "$cns" timeout "$(pp_limit)" ucmatose -s "$saddr" -p "$port" \
		-c "$conns" -C "$msgs" 2>&1 || rc=1
	cm_server_done || rc=1
	return "$rc"
}

# udaddy_run SADDR: udaddy (user UD QPs and AHs, the peer's QP found through the CM's SIDR
# exchange; it always uses UDP port 7174).
udaddy_run() {
	local saddr=$1 sns cns srv_out srv_pid rc=0
	cm_pair "$saddr"
	cm_server udaddy -b "$saddr" || rc=1
	ip netns exec "$cns" timeout "$(pp_limit)" udaddy -s "$saddr" 2>&1 || rc=1
	cm_server_done || rc=1
	return "$rc"
}

# rstream_run SADDR: rsockets (a socket API over RDMA CM connections) streaming 64 KiB
# transfers with rstream's data verification (-T v: the receiver checks every byte).
rstream_run() {
	local saddr=$1 sns cns srv_out srv_pid port rc=0
	cm_pair "$saddr"
	port=$(pp_next_port) || return 1
	cm_server rstream -b "$saddr" -p "$port" -T v -S 65536 -C 200 || rc=1
	ip netns exec "$cns" timeout "$(pp_limit)" rstream -s "$saddr" -p "$port" -T v \
		-S 65536 -C 200 2>&1 || rc=1
	cm_server_done || rc=1
	return "$rc"
}

main "$@"
