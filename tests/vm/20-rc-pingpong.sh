#!/usr/bin/env bash
# Stock rdma-core moves data over rvrdma: ibv_rc_pingpong with data validation (-c) between rvr0
# (netns rvA) and rvr1 (netns rvB) over veth, RoCE v2 over IPv4, message sizes from 1 B to 1 MiB,
# path MTU 1024 and 4096, each direction (server on either side), polling and event modes.
. "$(dirname "$0")/lib.sh"

sizes=(1 4096 65536 1048576)
mtus=(1024 4096)
ktap_print_header
ktap_set_plan $((${#sizes[@]} * ${#mtus[@]} * 2 + 2))
dut_setup 1
# A 4096-byte path MTU needs a netdev MTU above 4096 + RoCE headers.
ip -n "$NS_A" link set veth0 mtu 9000 && ip -n "$NS_B" link set veth1 mtu 9000
pair_up

iters() { if [ "$1" -ge 1048576 ]; then echo 4; elif [ "$1" -ge 65536 ]; then echo 10; else echo 50; fi; }

for mtu in "${mtus[@]}"; do
	for s in "${sizes[@]}"; do
		n=$(iters "$s")
		check "ibv_rc_pingpong -c size $s mtu $mtu, server rvB" \
			pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -s "$s" -m "$mtu" -n "$n"
		check "ibv_rc_pingpong -c size $s mtu $mtu, server rvA" \
			pp_run ibv_rc_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -c -s "$s" -m "$mtu" -n "$n"
	done
done
check "ibv_rc_pingpong -c -e (completion events), 4096 B" \
	pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -e -s 4096 -n 50
PP_CONNECT=10.77.0.2 check "ibv_rc_pingpong -c over IPv6 GIDs" \
	pp_run ibv_rc_pingpong "${DUT}1" fd77::2 "${DUT}0" fd77::1 -c -s 8192 -n 20
ktap_finished
