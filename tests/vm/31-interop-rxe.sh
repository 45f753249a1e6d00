#!/usr/bin/env bash
# rvrdma talks to Linux's soft-RoCE on the wire: rvr0 in rvA against rxe1 (rdma_rxe) in rvB over
# veth. ibv_rc_pingpong with data validation and perftest write/read bandwidth, both directions.
. "$(dirname "$0")/lib.sh"

if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
	skip_all "interop needs RVRDMA_LINK_TYPE=rvrdma"
fi
ktap_print_header
ktap_set_plan 8
dut_setup 1
link_add "${DUT}0" veth0 && link_add rxe1 veth1 rxe || fail_rest "rdma link add: $LINK_OUT"
wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 ||
	fail_rest "GIDs did not appear"

check "ibv_rc_pingpong -c 4096 B: rxe server, rvrdma client" \
	pp_run ibv_rc_pingpong rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -c -s 4096 -n 50
check "ibv_rc_pingpong -c 4096 B: rvrdma server, rxe client" \
	pp_run ibv_rc_pingpong "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -c -s 4096 -n 50
check "ibv_rc_pingpong -c 1 MiB, MTU 1024: rxe server, rvrdma client" \
	pp_run ibv_rc_pingpong rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -c -s 1048576 -m 1024 -n 3
check "ibv_rc_pingpong -c 1 MiB, MTU 1024: rvrdma server, rxe client" \
	pp_run ibv_rc_pingpong "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -c -s 1048576 -m 1024 -n 3
check "ib_write_bw: rvrdma writes to rxe" pf_run ib_write_bw rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536
check "ib_write_bw: rxe writes to rvrdma" pf_run ib_write_bw "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -n 200 -s 65536
check "ib_read_bw: rvrdma reads from rxe" pf_run ib_read_bw rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536
check "ib_read_bw: rxe reads from rvrdma" pf_run ib_read_bw "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -n 200 -s 65536
ktap_finished
