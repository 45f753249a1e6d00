#!/usr/bin/env bash
# rvrdma talks to Linux's soft-RoCE on the wire: rvr0 in rvA against rxe1 (rdma_rxe) in rvB over
# veth.
#
# traffic.py between them checks every byte and every completion of Send, Send with Immediate,
# RDMA Write, Write with Immediate, Read, Fetch&Add and Compare&Swap in both directions at once
# (rvrdma as requester and as responder of each), 1 B to 1 MiB, 1..max SGEs on each side (8 on
# rvrdma, 32 on rxe), path MTU 1024 and 4096. Send with Invalidate both ways: it invalidates a
# type 2 memory window of the receiver (rxe's, then rvrdma's) that a Write just used, and a second
# Write through it is refused with memory unchanged.
#
# Then smoke tests with stock tools (completion only): ibv_rc_pingpong and perftest Write/Read
# bandwidth, both directions.
. "$(dirname "$0")/lib.sh"

OPS=send,send_imm,write,write_imm,read,fetch_add,cmp_swap

main() {
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		skip_all "interop needs RVRDMA_LINK_TYPE=rvrdma"
	fi
	ktap_print_header
	ktap_set_plan 10
	dut_setup 1
	# Room for a 4096-byte path MTU.
	ip -n "$NS_A" link set veth0 mtu 9000 && ip -n "$NS_B" link set veth1 mtu 9000
	link_add "${DUT}0" veth0 && link_add rxe1 veth1 rxe || fail_rest "rdma link add: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 ||
		fail_rest "GIDs did not appear"

	traffic_check "traffic.py rvrdma <-> rxe, every op both ways, MTU 1024: data and completions intact" \
		"${DUT}0" rxe1 --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --mtu 1024 --iters 2 --random 20
	traffic_check "traffic.py rvrdma <-> rxe, every op both ways, MTU 4096: data and completions intact" \
		"${DUT}0" rxe1 --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --mtu 4096 \
		--sizes 1,63,mtu-1,mtu,mtu+1,3*mtu+7,65536,1M
	traffic_check "traffic.py rvrdma -> rxe Send with Invalidate: memory window invalidated, then refused" \
		"${DUT}0" rxe1 --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops send_inv --dir a2b --sizes 1,mtu-1,mtu+1,65536,1M
	traffic_check "traffic.py rxe -> rvrdma Send with Invalidate: memory window invalidated, then refused" \
		"${DUT}0" rxe1 --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops send_inv --dir b2a --sizes 1,mtu-1,mtu+1,65536,1M

	check "smoke: ibv_rc_pingpong 4096 B: rxe server, rvrdma client" \
		pp_run ibv_rc_pingpong rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -c -s 4096 -n 50
	check "smoke: ibv_rc_pingpong 4096 B: rvrdma server, rxe client" \
		pp_run ibv_rc_pingpong "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -c -s 4096 -n 50
	check "smoke: ib_write_bw: rvrdma writes to rxe" pf_run ib_write_bw rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536
	check "smoke: ib_write_bw: rxe writes to rvrdma" pf_run ib_write_bw "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -n 200 -s 65536
	check "smoke: ib_read_bw: rvrdma reads from rxe" pf_run ib_read_bw rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536
	check "smoke: ib_read_bw: rxe reads from rvrdma" pf_run ib_read_bw "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -n 200 -s 65536
	ktap_finished
}

main "$@"
