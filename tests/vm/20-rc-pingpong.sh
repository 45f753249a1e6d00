#!/usr/bin/env bash
# Data moves intact between rvr0 (netns rvA) and rvr1 (netns rvB) over veth, RoCE v2.
#
# traffic.py checks every byte and every completion: Send, Send with Immediate, RDMA Write, Write
# with Immediate, Read, Fetch&Add and Compare&Swap (with failing compares), both directions at
# once, 1 B to 1 MiB including MTU-1/MTU/MTU+1, 1..max SGEs with canaries in the gaps, random
# offsets in MRs of 8 to 64 MiB, 16 WRs in flight; path MTU 1024 and 4096, IPv4 and IPv6 GIDs. Its
# self-test shows the checks catch a flipped data byte, canary, byte_len, immediate and atomic
# result. Send with Invalidate, both ways: it invalidates a type 2 memory window of the receiver
# that a Write just used, and a second Write through it is refused with memory unchanged.
#
# The receive queues (rx_spread, on by default): the first run's streams put bulk packets in their
# QPs' receive queues on both devices, and work items handled some of them. Bursts (tx_burst, on
# by default): both devices sent runs of packets as one UDP GSO packet, which the peer's UDP
# layer split (so every later check with data also checks the split packets' ICRCs and order).
# Payloads by reference (tx_paged, off by default, on here): both devices sent payloads of the
# user's MRs as page fragments, not copied (so every later check with data also checks payloads
# across pages, SGEs and pads sent that way, which the receiver made linear). With the three
# switches off on both devices, the same traffic is intact, nothing is queued, nothing leaves in
# a burst and every payload is copied; then all three are on for the rest.
#
# During the first run, the kernel's drop tracing (skb:kfree_skb, what dropwatch reports) shows
# only the receive drops the devices counted: every packet handed to a QP, inline or from its
# receive queue, is freed as consumed, not as a drop.
#
# A send queue deeper than the requester's window (deep_sq.py): 400 Writes posted while the
# responder's ACKs are lost, then all of the window acknowledged by one ACK; 400 inline Sends;
# 400 Writes flushed in Error; each in order with its bytes. Then receives posted to the QP long
# in Error, which only the kernel's poll of the ring finds: flushed within 3 s, in order.
#
# Then smoke tests with stock ibv_rc_pingpong: they show completion only (its -c compares one
# byte per page, always 0, and exits 0 on a mismatch), 4 KiB and 1 MiB, both MTUs, server on
# either side, completion events, IPv6 GIDs.
. "$(dirname "$0")/lib.sh"

OPS=send,send_imm,write,write_imm,read,fetch_add,cmp_swap
sizes=(4096 1048576)
mtus=(1024 4096)

# queued N: packets device N put in its QPs' receive queues so far.
queued() { link_stat "${DUT}$1" rx_queued_pkts; }
# bursts N: packets device N sent in bursts so far.
bursts() { link_stat "${DUT}$1" tx_burst_pkts; }
# paged N: packets device N sent with their payload by reference so far.
paged() { link_stat "${DUT}$1" tx_paged_pkts; }
# rx_paged N: packets device N received and read in their fragments, never made linear.
rx_paged() { link_stat "${DUT}$1" rx_paged_pkts; }
# switches VALUE: rx_spread, tx_burst and tx_paged set to VALUE on both devices.
switches() {
	local d sw
	for d in "${DUT}0" "${DUT}1"; do
		for sw in rx_spread tx_burst tx_paged; do echo "$1" >"/sys/class/infiniband/$d/$sw" || return; done
	done
}

main() {
	ktap_print_header
	ktap_set_plan $((8 + 6 + 6 + ${#sizes[@]} * ${#mtus[@]} * 2 + 4))
	dut_setup 1
	# A 4096-byte path MTU needs a netdev MTU above 4096 + RoCE headers.
	ip -n "$NS_A" link set veth0 mtu 9000 && ip -n "$NS_B" link set veth1 mtu 9000
	pair_up
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" fd77::1 && wait_for "$RVRDMA_WAIT" has_gid "${DUT}1" fd77::2 ||
		diag "IPv6 GIDs did not appear"

	local mtu drops0
	switches 1
	drops0=$(rx_drops "${DUT}0" "${DUT}1")
	drop_trace_start || diag "the kernel's drop tracing did not start"
	traffic_check "traffic.py: every op both ways, IPv4, MTU 1024, data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --mtu 1024 --iters 2 --random 10
	check "every packet the devices handled, inline or from a receive queue, was consumed: the kernel's drop tracing shows rvrdma's counted drops only" \
		drops_traced "$drops0"
	check "rx_spread: bulk packets went through the receive queues on both devices, work items handled some" \
		eval '[ "$(queued 0)" -gt 0 ] && [ "$(queued 1)" -gt 0 ] &&
			[ "$(($(link_stat "${DUT}0" rx_queue_worker_pkts) + $(link_stat "${DUT}1" rx_queue_worker_pkts)))" -gt 0 ]'
	check "tx_burst: both devices sent packets in bursts" eval '[ "$(bursts 0)" -gt 0 ] && [ "$(bursts 1)" -gt 0 ]'
	check "tx_paged: both devices sent payloads by reference to the user's pages" \
		eval '[ "$(paged 0)" -gt 0 ] && [ "$(paged 1)" -gt 0 ]'
	check "rx_paged_pkts: both devices read such payloads where they lay, in the fragments" \
		eval '[ "$(rx_paged 0)" -gt 0 ] && [ "$(rx_paged 1)" -gt 0 ]'
	local before sent by_ref
	before=$(($(queued 0) + $(queued 1))) sent=$(($(bursts 0) + $(bursts 1)))
	by_ref=$(($(paged 0) + $(paged 1) + $(rx_paged 0) + $(rx_paged 1)))
	switches 0
	traffic_check "traffic.py with rx_spread, tx_burst and tx_paged off on both devices: data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --mtu 1024 --random 4
	check "rx_spread off: nothing was queued" eval '[ "$(($(queued 0) + $(queued 1)))" -eq "$before" ]'
	check "tx_burst off: nothing left in a burst" eval '[ "$(($(bursts 0) + $(bursts 1)))" -eq "$sent" ]'
	check "tx_paged off: every payload was copied, none arrived in fragments" \
		eval '[ "$(($(paged 0) + $(paged 1) + $(rx_paged 0) + $(rx_paged 1)))" -eq "$by_ref" ]'
	switches 1
	# A queue keeps room for just the QP's max_send_sge/max_recv_sge elements a WR, the slots'
	# lists side by side: WRs that fill the room must not spill into the next slot's.
	traffic_check "traffic.py with QPs of 2 SGEs a WR, lists of 1 or 2: data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --mtu 1024 --max-sge 2 --random 6
	traffic_check "traffic.py: every op both ways, IPv4, MTU 4096, data and completions intact" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --mtu 4096 --random 10
	for mtu in "${mtus[@]}"; do
		traffic_check "traffic.py: every op both ways, IPv6, MTU $mtu, data and completions intact" \
			"${DUT}0" "${DUT}1" --gid-a fd77::1 --gid-b fd77::2 --ops "$OPS" --mtu "$mtu"
	done
	traffic_check "traffic.py: Send with Invalidate both ways: memory window invalidated, then refused" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops send_inv --sizes 1,mtu-1,mtu+1,65536
	check "traffic.py catches injected faults (data, canary, byte_len, immediate, atomic result)" \
		traffic_selftest data,canary,byte_len,imm,old "${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --ops "$OPS" --sizes 1,mtu
	# A user send queue deeper than the core's window: WQEs wait in the ring for slots, and each
	# still leaves in order with its own inline data (deep_sq.py).
	run_points 4 "deep_sq.py ${DUT}0 -> ${DUT}1" timeout $((300 * ${RVRDMA_TIME_SCALE:-1})) \
		"$PY" "$RVRDMA_TESTS_DIR/deep_sq.py" "${DUT}0" "$GA" "${DUT}1" "$GB" "$NS_B" veth1

	local s n
	for mtu in "${mtus[@]}"; do
		for s in "${sizes[@]}"; do
			n=$(pp_iters "$s")
			if [ "$s" -gt 65536 ] && [ "${RVRDMA_ACK_TIMEOUT:-14}" -gt 16 ]; then
				# A kernel that needs a much longer Local ACK Timeout (the debug variant)
				# cannot give ibv_rc_pingpong one: it is fixed at 67 ms (14).
				why="ibv_rc_pingpong's Local ACK Timeout is fixed at 14, this kernel needs $RVRDMA_ACK_TIMEOUT"
				ktap_test_skip "smoke: ibv_rc_pingpong size $s mtu $mtu, server rvB: $why"
				ktap_test_skip "smoke: ibv_rc_pingpong size $s mtu $mtu, server rvA: $why"
				continue
			fi
			check "smoke: ibv_rc_pingpong size $s mtu $mtu completes, server rvB" \
				pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -s "$s" -m "$mtu" -n "$n"
			check "smoke: ibv_rc_pingpong size $s mtu $mtu completes, server rvA" \
				pp_run ibv_rc_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -c -s "$s" -m "$mtu" -n "$n"
		done
	done
	check "smoke: ibv_rc_pingpong -e (completion events) completes, 4096 B" \
		pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c -e -s 4096 -n 50
	PP_CONNECT=10.77.0.2 check "smoke: ibv_rc_pingpong over IPv6 GIDs completes" \
		pp_run ibv_rc_pingpong "${DUT}1" fd77::2 "${DUT}0" fd77::1 -c -s 8192 -n 20
	retransmission_point
	ktap_finished
}

# ---- helpers of this script ----------------------------------------------------------------------

# no_retransmission: on a clean veth every packet arrives once and in order, so a pingpong of
# 64 KiB messages (64 packets each at MTU 1024) moves none of RETRY_COUNTERS on either side.
no_retransmission() {
	retry_counters_unchanged pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 65536 -n 100
}

# retransmission_point: no_retransmission as a test point. ibv_rc_pingpong fixes its Local ACK
# Timeout at 14 (4.096 us * 2^14 = 67 ms); where one message (half an iteration) takes longer
# than that (a debug kernel on a loaded machine), the requester rightly resends before the ACK
# comes, so a moved counter there proves nothing. The tool prints only the mean iteration: once
# that passes the timeout, a message takes over half of it on average, and the slowest of 200
# pass it (seen on the debug kernel at a 97 ms mean), so the point is skipped, with the timing.
retransmission_point() {
	local desc="a clean link needs no retransmission: ibv_rc_pingpong 100 x 64 KiB moves no retry counter"
	local out usec
	if out=$(no_retransmission 2>&1); then
		ktap_test_pass "$desc"
		return
	fi
	diag "$out"
	usec=$(sed -n 's/.* = \([0-9]*\)\.[0-9]* usec\/iter.*/\1/p' <<<"$out" | tail -n 1)
	if [ "${usec:-0}" -gt 67109 ]; then
		ktap_test_skip "$desc: an iteration took $usec us on average, over the 67 ms ACK timeout"
	else
		ktap_test_fail "$desc"
	fi
}

pp_iters() { if [ "$1" -ge 1048576 ]; then echo 4; elif [ "$1" -ge 65536 ]; then echo 10; else echo 50; fi; }

main "$@"
