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
#
# Then SRQ resize (srq_resize.py, pyverbs): the device advertises SRQ_RESIZE; an SRQ grows with
# WQEs outstanding and the provider's remapped ring takes more than the old depth; Sends consume
# every WQE in posting order with each buffer holding its own message; resizing below the
# outstanding WQEs or beyond max_srq_wr is EINVAL and changes nothing; a resize with srq_limit in
# one call sets both (the limit event follows); a shrink below the armed limit is EINVAL, one
# that fits keeps the WQEs; 1000 Sends stream in while the SRQ is resized back and forth. The
# same script then runs on rdma_rxe (rxe0/rxe1 on the same veths, once the rvrdma links are
# gone) to show that the semantics match.
. "$(dirname "$0")/lib.sh"

OPS=send,send_imm,write,write_imm,read,fetch_add,cmp_swap
RESIZE_POINTS=12

main() {
	ktap_print_header
	ktap_set_plan $((5 + 2 * (RESIZE_POINTS + 1) + 1))
	k0=$(klog_mark "22-srq: begin")
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

	run_points "$RESIZE_POINTS" "srq_resize.py on $RVRDMA_LINK_TYPE" \
		timeout 300 $PY "$RVRDMA_TESTS_DIR/srq_resize.py" "${DUT}0" "$GA" "${DUT}1" "$GB" \
		"$RVRDMA_LINK_TYPE"
	check "no kernel checker report during the SRQ tests" klog_clean_since "$k0"

	# The same on rdma_rxe: it needs the veths' UDP port, so the links under test go first.
	link_del "${DUT}0" && link_del "${DUT}1" && wait_for "$RVRDMA_WAIT" dev_gone "${DUT}0" &&
		wait_for "$RVRDMA_WAIT" dev_gone "${DUT}1" && link_add rxe0 veth0 rxe && link_add rxe1 veth1 rxe &&
		wait_for "$RVRDMA_WAIT" has_gid rxe0 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 ||
		fail_rest "rdma_rxe links on veth0/veth1: $LINK_OUT"
	run_points "$RESIZE_POINTS" "srq_resize.py on rdma_rxe" \
		timeout 300 $PY "$RVRDMA_TESTS_DIR/srq_resize.py" rxe0 \
		"$(sysfs_gid_index rxe0 "$(gid_full 10.77.0.1)" "RoCE v2")" rxe1 \
		"$(sysfs_gid_index rxe1 "$(gid_full 10.77.0.2)" "RoCE v2")" rdma_rxe
	ktap_finished
}

main "$@"
