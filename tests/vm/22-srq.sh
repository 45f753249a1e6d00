#!/usr/bin/env bash
# Shared receive queues from user space, rvr0 <-> rvr1.
#
# traffic.py --srq: each side's receives come from one SRQ shared by 4 QPs; Sends, Sends with
# Immediate and Writes with Immediate (which consume a receive) mixed with Writes, Reads and
# atomics, both directions at once, 16 in flight, 1 B to 1 MiB with 1..max SGEs. Every byte,
# canary and completion is checked; receive completions are matched to messages per QP (in
# order) and to buffers by wr_id (an SRQ may hand out its WQEs in any order).
#
# Then smoke tests with stock ibv_srq_pingpong (16 QPs on one SRQ per side; completion only:
# its -c checks no real data), in both directions and with completion events.
. "$(dirname "$0")/lib.sh"

OPS=send,send_imm,write,write_imm,read,fetch_add,cmp_swap

main() {
	ktap_print_header
	ktap_set_plan 5
	dut_setup 1
	pair_up

	traffic_check "traffic.py --srq, 4 QPs on each SRQ, every op both ways: data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --srq --qps 4 --iters 2
	traffic_check "traffic.py --srq, 1 QP, receive-consuming ops only, 32 in flight" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops send,send_imm,write_imm --srq \
		--window 32 --sizes 1,63,mtu-1,mtu,mtu+1,3*mtu+7,65536 --iters 2

	check "smoke: ibv_srq_pingpong 16 QPs completes, server rvB" \
		pp_run ibv_srq_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -n 20
	check "smoke: ibv_srq_pingpong 16 QPs completes, server rvA" \
		pp_run ibv_srq_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -c -n 20
	check "smoke: ibv_srq_pingpong -e 4 QPs, 64 KiB, completes" \
		pp_run ibv_srq_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -e -q 4 -s 65536 -n 10
	ktap_finished
}

main "$@"
