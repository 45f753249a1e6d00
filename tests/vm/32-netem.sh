#!/usr/bin/env bash
# Faults: tc netem on both veth ends (5% loss, 1% duplication, 25% reordering with 1 ms delay).
# ibv_rc_pingpong -c and ib_write_bw still complete with data intact, and the retry counters of
# `rdma statistic` show the recoveries (retransmissions, sequence NAKs, duplicates).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 4
dut_setup 1
pair_up

netem() {
	in_a tc qdisc add dev veth0 root netem loss 5% duplicate 1% delay 1ms reorder 25% 50% &&
		in_b tc qdisc add dev veth1 root netem loss 5% duplicate 1% delay 1ms reorder 25% 50%
}
check "tc netem loss 5% duplicate 1% reorder 25% on both veth ends" netem

before=$(( $(link_stat "${DUT}0" retransmitted_pkts) + $(link_stat "${DUT}1" retransmitted_pkts) ))
PP_TIMEOUT=400 check "ibv_rc_pingpong -c 64 KiB x 30 through the faults" \
	pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -s 65536 -n 30
PP_TIMEOUT=400 check "ib_write_bw 64 KiB x 200 through the faults" \
	pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536
after=$(( $(link_stat "${DUT}0" retransmitted_pkts) + $(link_stat "${DUT}1" retransmitted_pkts) ))
diag "retransmitted_pkts: $before -> $after"
for d in "${DUT}0" "${DUT}1"; do
	diag "$d: $(rdma statistic show link "$d/1" | tr ' ' '\n' | paste - - | grep -E 'retrans|retry|seq|dup|timeout' | tr '\n' ' ')"
done
check "the retry counters show the recoveries (retransmitted_pkts grew)" test "$after" -gt "$before"
ktap_finished
