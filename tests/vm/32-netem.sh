#!/usr/bin/env bash
# Faults on the wire, rvr0 <-> rvr1: tc netem on both veth ends drops 5% of the packets,
# duplicates 1%, corrupts 1% (one flipped bit) and reorders 25% (1 ms delay for the rest).
#
# traffic.py runs twice, both directions at once, every op: first through the 1 ms delay alone
# (the baseline), then through all the faults. Every byte must arrive intact (a corrupted
# packet must be dropped, by the IPv4 or UDP checksum or by rvrdma's ICRC check, never reach
# memory) and every completion must be as it should be. The counters must show the faults met
# and recovered from: retransmissions, PSN sequence NAKs sent and received each more than
# 4x + 100 what the same traffic gave through the delay alone (the delay alone gives some:
# packets of one QP that leave from two CPUs may overtake each other on a veth), duplicate
# requests more than 1x + 100 (netem's 1% on top of the go-back-N resends), and packets dropped for a bad
# ICRC: none without corruption, some with it (UDP over IPv4 carries no checksum here, so the
# ICRC is what catches a flipped payload bit). Bursts (tx_burst) stay on: a burst forms only
# where the packets leave by a device with no queueing discipline, so netem drops, duplicates and
# delays single packets, as the per-packet counts need, and no packet may leave in a burst while
# it is on. Then perftest's ib_write_bw as a smoke test through the same faults (it checks no
# data), and once more with netem off, where bursts leave again. Payloads by reference (tx_paged)
# are off: netem flips a bit only in a packet's linear part, and such a payload lies in the user's
# pages, so only copied payloads let the flips reach payload bytes, which the ICRC must catch
# (68-fault-storm runs its storm with tx_paged on).
. "$(dirname "$0")/lib.sh"

OPS=send,send_imm,write,write_imm,read,fetch_add,cmp_swap
BASE=(delay 1ms)
FAULTS=(loss 5% duplicate 1% corrupt 1% delay 1ms reorder 25% 50%)
TRAFFIC=(--ops "$OPS" --sizes "1,mtu-1,mtu,mtu+1,3*mtu+7,65536,256K,1M" --iters 2)
GROW=(retransmitted_pkts seq_naks_sent rcvd_seq_err duplicate_request)
COUNTERS=("${GROW[@]}" icrc_errors)

main() {
	ktap_print_header
	ktap_set_plan $((8 + ${#GROW[@]}))
	dut_setup 1
	pair_up
	set_bursts 1
	echo 0 >"/sys/class/infiniband/${DUT}0/tx_paged" && echo 0 >"/sys/class/infiniband/${DUT}1/tx_paged"

	local c d sent
	check "tc netem ${BASE[*]} on both veth ends (the baseline)" netem add "${BASE[@]}"
	sent=$(burst_pkts)
	snap S0
	traffic_check "traffic.py through the delay alone, every op both ways: data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 "${TRAFFIC[@]}"
	snap S1
	check "tc netem ${FAULTS[*]} on both veth ends" netem change "${FAULTS[@]}"
	TRAFFIC_TIMEOUT=270 traffic_check "traffic.py through the faults, every op both ways: data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 "${TRAFFIC[@]}"
	snap S2
	for c in "${COUNTERS[@]}"; do
		diag "$c (both devices): baseline +$((S1[$c] - S0[$c])), faults +$((S2[$c] - S1[$c]))"
	done
	for d in "${DUT}0" "${DUT}1"; do
		diag "$d: $(rdma statistic show link "$d/1" | tr ' ' '\n' | paste - - |
			grep -E 'retrans|retry|seq|dup|timeout|icrc|malformed|dropped' | tr '\t\n' '= ')"
	done
	for d in "$NS_A" "$NS_B"; do
		diag "$d: $(snmp_drops "$d")"
	done
	check "loss made the requesters retransmit (retransmitted_pkts)" grew retransmitted_pkts
	check "gaps made the responders send PSN sequence NAKs (seq_naks_sent)" grew seq_naks_sent
	check "the requesters got those NAKs (rcvd_seq_err)" grew rcvd_seq_err
	# Most duplicates of the baseline are go-back-N resends after reordering, which the faults
	# cause too; the 1% that netem duplicates add about 100 to them.
	check "duplicates reached the responders (duplicate_request)" grew duplicate_request 1
	check "ICRC drops: none without corruption, some with it (icrc_errors)" icrc_only_corrupt

	PP_TIMEOUT=200 check "smoke: ib_write_bw 64 KiB x 200 completes through the faults" \
		pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536
	check "no packet left in a burst through netem (tx_burst_pkts unchanged)" \
		eval '[ "$(burst_pkts)" -eq "$sent" ]'
	in_a tc qdisc del dev veth0 root && in_b tc qdisc del dev veth1 root
	check "netem off: ib_write_bw 64 KiB x 200 sends bursts again (tx_burst_pkts)" \
		eval 'pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -n 200 -s 65536 &&
			[ "$(burst_pkts)" -gt "$sent" ]'
	ktap_finished
}

# ---- helpers of this script ----------------------------------------------------------------------

declare -A S0 S1 S2

# set_bursts 0|1: the tx_burst switch of both devices.
set_bursts() {
	echo "$1" >"/sys/class/infiniband/${DUT}0/tx_burst" && echo "$1" >"/sys/class/infiniband/${DUT}1/tx_burst"
}

# burst_pkts: packets both devices sent in bursts so far.
burst_pkts() { echo $(($(link_stat "${DUT}0" tx_burst_pkts) + $(link_stat "${DUT}1" tx_burst_pkts))); }

# netem add|change ARGS...: the same netem qdisc on both veth ends.
netem() {
	local op=$1
	shift
	in_a tc qdisc "$op" dev veth0 root netem "$@" && in_b tc qdisc "$op" dev veth1 root netem "$@"
}

# snap NAME: the COUNTERS of both devices, added up, into the associative array NAME.
snap() {
	local -n to=$1
	local c a b
	for c in "${COUNTERS[@]}"; do
		# An absent counter reads 0: the checks on it then fail.
		a=$(link_stat "${DUT}0" "$c")
		b=$(link_stat "${DUT}1" "$c")
		to[$c]=$((${a:-0} + ${b:-0}))
	done
}

# grew NAME [FACTOR]: counter NAME rose through the faults by more than FACTOR (default 4) times
# + 100 what it rose without them.
grew() {
	local base=$((S1[$1] - S0[$1])) faults=$((S2[$1] - S1[$1])) k=${2:-4}
	echo "$1: +$base without the faults, +$faults with them (must be > $((k * base + 100)))"
	[ "$faults" -gt $((k * base + 100)) ]
}

icrc_only_corrupt() {
	local base=$((S1[icrc_errors] - S0[icrc_errors])) faults=$((S2[icrc_errors] - S1[icrc_errors]))
	echo "icrc_errors: +$base without the faults, +$faults with them"
	[ "$base" -eq 0 ] && [ "$faults" -gt 0 ]
}

# snmp_drops NS: the kernel's IPv4/UDP drop counters in netns NS (corruption that hit a header).
snmp_drops() {
	ip netns exec "$1" awk '
		$1 == "Ip:" && !ip { for (i = 2; i <= NF; i++) h[i] = $i; ip = 1; next }
		$1 == "Ip:" { for (i = 2; i <= NF; i++) if (h[i] ~ /InHdrErrors|InCsumErrors|InDiscards/) printf "Ip %s=%s ", h[i], $i }
		$1 == "Udp:" && !udp { for (i = 2; i <= NF; i++) u[i] = $i; udp = 1; next }
		$1 == "Udp:" { for (i = 2; i <= NF; i++) if (u[i] ~ /InErrors|InCsumErrors|NoPorts/) printf "Udp %s=%s ", u[i], $i }
	' /proc/net/snmp
}

main "$@"
