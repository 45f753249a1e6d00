#!/usr/bin/env bash
# Shared receive queues from user space: ibv_srq_pingpong (16 QPs sharing one SRQ per side,
# data validation) between rvr0 and rvr1, in both directions and with completion events.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 3
dut_setup 1
pair_up

check "ibv_srq_pingpong -c 16 QPs, server rvB" \
	pp_run ibv_srq_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -n 20
check "ibv_srq_pingpong -c 16 QPs, server rvA" \
	pp_run ibv_srq_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -c -n 20
check "ibv_srq_pingpong -c -e 4 QPs, 64 KiB" \
	pp_run ibv_srq_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -e -q 4 -s 65536 -n 10
ktap_finished
