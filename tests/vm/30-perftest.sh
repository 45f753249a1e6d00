#!/usr/bin/env bash
# perftest over rvrdma: every bandwidth and latency test of the RC set completes between rvr0
# (rvA) and rvr1 (rvB). Numbers are not judged here (TCG); scripts/bench compares with rdma_rxe.
. "$(dirname "$0")/lib.sh"

tests=(ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat)
ktap_print_header
ktap_set_plan $((${#tests[@]} + 2))
dut_setup 1
pair_up

for t in "${tests[@]}"; do
	case $t in
	*_bw) args=(-n 200 -s 65536) ;;
	ib_atomic_lat) args=(-n 200) ;;
	*) args=(-n 200 -s 64) ;;
	esac
	[ "$t" = ib_atomic_bw ] && args=(-n 200)
	check "$t ${args[*]} completes over ${DUT}" pf_run "$t" "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 "${args[@]}"
done
# A clean link: every packet arrives once and in order, so streams of Sends (which wait on the
# receiver's posted receives and its credit updates) and of Writes resend nothing, and every
# ACK is an answer or a credit update, never a duplicate response.
clean_streams() {
	pf_run ib_send_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 4096 -n 2000 &&
		pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 65536 -n 300
}
check "a clean link needs no retransmission: ib_send_bw 4 KiB and ib_write_bw 64 KiB move no retry counter" \
	retry_counters_unchanged clean_streams
# Scale: 1,024 QPs on each side, none with a receive posted. Idle QPs must cost no CPU: a timer
# per QP that fired on its own would starve the guest at this count and the run would not end.
# perftest checks no data; this proves that the device stays live at scale.
PP_TIMEOUT=$((300 * ${RVRDMA_TIME_SCALE:-1})) check "ib_write_bw -q 1024 -s 4096 -n 20 completes over ${DUT}" \
	pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -q 1024 -s 4096 -n 20
ktap_finished
