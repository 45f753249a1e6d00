#!/usr/bin/env bash
# UD and UC QPs from user space between rvr0 (netns rvA) and rvr1 (rvB), and against rdma_rxe.
#
# traffic.py --qp-type ud / uc checks every byte and every completion, both directions at once:
# UD Sends and Sends with Immediate of 1 B up to the port MTU from 4 QPs to 4 QPs (any to any),
# receive buffers in 1..8 SGEs behind the 40-byte GRH area, canaries around them; completions
# with IBV_WC_GRH, src_qp, byte_len = payload + 40, pkey_index and sl 0, receives consumed in
# posting order; in the GRH area the IPv4 header (or IPv6 header) of the packet with both
# peers' addresses. IPv4 and IPv6 GIDs, and on an SRQ. UC: Send, Send with Immediate, RDMA
# Write (checked once it lands: UC has no responder completion for it) and Write with
# Immediate, 1 B to 64 KiB at path MTU 1024 and 256. UD and UC do not retransmit; on this clean
# link a lost message is a failure. The self-test shows the UD checks catch a flipped data byte,
# canary, byte_len and immediate.
#
# Then smoke tests: rdma-core's ibv_ud_pingpong and ibv_uc_pingpong and perftest over UD, UC and
# through the RDMA CM (-R); they show that messages complete, not that their bytes arrived.
# perftest's report is checked: it comes only after every message completed with a good status.
# 54-perftest-rxe runs perftest against rdma_rxe.
. "$(dirname "$0")/lib.sh"

main() {
	ktap_print_header
	ktap_set_plan 18
	dut_setup 1
	pair_up
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" fd77::1 && wait_for "$RVRDMA_WAIT" has_gid "${DUT}1" fd77::2 ||
		diag "IPv6 GIDs did not appear"
	local v4=(--gid-a 10.77.0.1 --gid-b 10.77.0.2)
	# UC has no flow control: at most 8 messages of up to 64 KiB in flight (512 packets) each
	# way, below the receiving CPU's backlog (1000 packets). 1 MiB messages 16 at a time
	# overflow it under TCG, and the host drops what UC cannot resend.
	local uc_load=(--window 8 --sizes 1,2,63,mtu-1,mtu,mtu+1,3*mtu+7,16K,64K)
	traffic_check "traffic.py UD, 4 QPs a side, both ways, IPv4: data, GRH area and completions intact" \
		"${DUT}0" "${DUT}1" "${v4[@]}" --qp-type ud --qps 4 --iters 4 --random 40
	traffic_check "traffic.py UD, 4 QPs a side, both ways, IPv6: data, GRH area and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a fd77::1 --gid-b fd77::2 --qp-type ud --qps 4 --iters 2 --random 20
	traffic_check "traffic.py UD, receives on an SRQ, 32 in flight: data, GRH area and completions intact" \
		"${DUT}0" "${DUT}1" "${v4[@]}" --qp-type ud --qps 3 --srq --window 32 --iters 2 --random 40
	check "traffic.py UD catches injected faults (data, canary, byte_len, immediate)" \
		traffic_selftest data,canary,byte_len,imm "${DUT}0" "${DUT}1" "${v4[@]}" --qp-type ud --qps 2
	traffic_check "traffic.py UC, 2 QP pairs, every UC op both ways, MTU 1024: data and completions intact" \
		"${DUT}0" "${DUT}1" "${v4[@]}" --qp-type uc --qps 2 "${uc_load[@]}" --iters 2 --random 20
	traffic_check "traffic.py UC, every UC op both ways, MTU 256: data and completions intact" \
		"${DUT}0" "${DUT}1" "${v4[@]}" --qp-type uc --mtu 256 --window 2 \
		--sizes 1,mtu-1,mtu,mtu+1,3*mtu+7,65536
	# Only RC QPs hand bulk packets to another CPU: UC resends nothing a burst could lose.
	check "UD and UC traffic is handled as it arrives: nothing went to a receive queue (rx_queued_pkts 0)" \
		eval '[ "$(($(link_stat "${DUT}0" rx_queued_pkts) + $(link_stat "${DUT}1" rx_queued_pkts)))" -eq 0 ]'
	# A UD message fits one packet: at most the path MTU (1024 on a 1500-byte veth).
	check "smoke: ibv_ud_pingpong 512 B x 100 completes, rvrdma <-> rvrdma" \
		pp_run ibv_ud_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 512 -n 100
	check "smoke: ibv_ud_pingpong 1024 B (the MTU) x 50 completes, server rvA" \
		pp_run ibv_ud_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -s 1024 -n 50
	check "smoke: ibv_uc_pingpong 4096 B x 100 completes, rvrdma <-> rvrdma" \
		pp_run ibv_uc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 4096 -n 100
	check "smoke: ibv_uc_pingpong 64 KiB x 20 (64 packets a message) completes, server rvA" \
		pp_run ibv_uc_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -s 65536 -n 20
	check "smoke: ib_send_bw -c UD 1024 B x 500 completes, rvrdma <-> rvrdma" \
		pf_checked 1024 500 pf_run ib_send_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c UD -s 1024 -n 500
	check "smoke: ib_write_bw -c UC 64 KiB x 200 completes, rvrdma <-> rvrdma" \
		pf_checked 65536 200 pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c UC -s 65536 -n 200
	check "smoke: ib_send_bw -R (connected through the RDMA CM) 64 KiB x 200 completes" \
		pf_checked 65536 200 pf_cm_run ib_send_bw "${DUT}1" 10.77.0.2 "${DUT}0" -s 65536 -n 200

	rdma link delete "${DUT}1" && link_add rxe1 veth1 rxe || fail_rest "rxe1: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 || fail_rest "rxe1's GID did not appear"
	traffic_check "traffic.py UD rvrdma <-> rxe, 4 QPs a side, both ways: data, GRH area and completions intact" \
		"${DUT}0" rxe1 "${v4[@]}" --qp-type ud --qps 4 --iters 4 --random 40
	traffic_check "traffic.py UC rvrdma <-> rxe, every UC op both ways: data and completions intact" \
		"${DUT}0" rxe1 "${v4[@]}" --qp-type uc --qps 2 "${uc_load[@]}" --iters 2 --random 20
	check "smoke: ibv_ud_pingpong 512 B x 100 completes, rdma_rxe server, rvrdma client" \
		pp_run ibv_ud_pingpong rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -s 512 -n 100
	check "smoke: ibv_uc_pingpong 4096 B x 100 completes, rvrdma server, rdma_rxe client" \
		pp_run ibv_uc_pingpong "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -s 4096 -n 100
	ktap_finished
}

main "$@"
