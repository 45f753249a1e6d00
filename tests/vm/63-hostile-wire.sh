#!/usr/bin/env bash
# A hostile wire: while traffic.py moves data-checked traffic between rvr0 (rvA) and rvr1 (rvB)
# over RC QP pairs, tests/vm/roce_fuzz.py sends crafted RoCEv2 packets with a valid ICRC from
# both namespaces (random opcodes, PSNs, flags, header fields, lengths, truncations; most aimed
# at the victims' QP numbers with their real peer's address). Then:
#  - probes to a QP nobody has, sent alone first, were counted as for no QP, exactly (so the
#    fuzzer's ICRC is valid and its packets reach the transport), and the packets with a wrong
#    ICRC exactly as ICRC errors;
#  - every UDP datagram each namespace received is accounted for by exactly one device counter
#    (rcvd_pkts, rx_malformed, icrc_errors, rx_no_qp);
#  - the kernel's drop tracing (the skb:kfree_skb event, what dropwatch reports) shows exactly the
#    drops the devices counted: a packet handed to a QP, hostile or not, is consumed;
#  - the victims never had wrong data: each pair finished with every byte right or stopped at an
#    error completion (a forged NAK or response inside a QP's window may move it to Error, as
#    the spec allows), and the other pairs went on, checked to the end (traffic.py --isolate);
#  - a fresh connection works, and the kernel log is clean.
# First, --isolate itself: a Write given a wrong R_Key stops its pair alone, and the other pairs
# run on, checked.
# RVRDMA_FUZZ_COUNT sets the packets per direction (default 25000: 50,000 in all; the host's
# cargo-fuzz targets cover the parsers with far more).
. "$(dirname "$0")/lib.sh"

COUNT=${RVRDMA_FUZZ_COUNT:-25000}
PROBES=25
BAD=25
DIR=$(mktemp -d)
STOP=$DIR/stop

main() {
	ktap_print_header
	ktap_set_plan 10
	[ "$RVRDMA_LINK_TYPE" = rvrdma ] || skip_all "the counters checked are rvrdma's"
	local t0
	t0=$(klog_mark "63-hostile-wire start")
	dut_setup 1
	pair_up
	check "traffic.py --isolate: a Write with a wrong R_Key stops its pair alone, the rest run on" \
		isolate_selftest
	# The probes alone first, on a quiet link: each must count as for no QP, no more, no fewer.
	local n0 n1
	n0=$(stat_num "${DUT}1" rx_no_qp) n1=$(stat_num "${DUT}0" rx_no_qp)
	in_a "$PY" "$RVRDMA_TESTS_DIR/roce_fuzz.py" --src 10.77.0.1 --dst 10.77.0.2 --count 0 \
		--probe "$PROBES" --bad-icrc 0 >"$DIR/probe-a.txt" 2>&1
	in_b "$PY" "$RVRDMA_TESTS_DIR/roce_fuzz.py" --src 10.77.0.2 --dst 10.77.0.1 --count 0 \
		--probe "$PROBES" --bad-icrc 0 >"$DIR/probe-b.txt" 2>&1
	sleep 1
	PROBED=("$(($(stat_num "${DUT}1" rx_no_qp) - n0))" "$(($(stat_num "${DUT}0" rx_no_qp) - n1))")
	snap S0
	local drops0
	drops0=$(rx_drops "${DUT}0" "${DUT}1")
	drop_trace_start || diag "the kernel's drop tracing did not start"
	# The victims: 4 RC QP pairs, both directions, until the fuzzers are done.
	"$PY" "$RVRDMA_TESTS_DIR/traffic.py" "${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 \
		--qps 4 --random 5000 --sizes 1,63,1024,3079,65536 --until "$STOP" --isolate \
		--timeout "$((60 * ${RVRDMA_TIME_SCALE:-1}))" >"$DIR/victim.txt" 2>&1 &
	local vpid=$! qa qb
	wait_for 120 rts_qps "${DUT}1" 4 || fail_rest "the victims' QPs did not reach RTS: $(tail -5 "$DIR/victim.txt")"
	qa=$(rts_qps "${DUT}0" 4)
	qb=$(rts_qps "${DUT}1" 4)
	diag "victim QPs: ${DUT}0 $qa, ${DUT}1 $qb"
	in_a "$PY" "$RVRDMA_TESTS_DIR/roce_fuzz.py" --src 10.77.0.1 --dst 10.77.0.2 --qpns "$qb" \
		--count "$COUNT" --probe 0 --bad-icrc "$BAD" >"$DIR/fuzz-a.txt" 2>&1 &
	local fa=$!
	in_b "$PY" "$RVRDMA_TESTS_DIR/roce_fuzz.py" --src 10.77.0.2 --dst 10.77.0.1 --qpns "$qa" \
		--count "$COUNT" --probe 0 --bad-icrc "$BAD" >"$DIR/fuzz-b.txt" 2>&1 &
	local fb=$! t1=$SECONDS rc_a=0 rc_b=0
	wait "$fa" || rc_a=$?
	wait "$fb" || rc_b=$?
	diag "fuzzers: $((SECONDS - t1)) s; rvA -> rvB: $(tail -1 "$DIR/fuzz-a.txt") ($(head -1 "$DIR/fuzz-a.txt"));" \
		"rvB -> rvA: $(tail -1 "$DIR/fuzz-b.txt") ($(head -1 "$DIR/fuzz-b.txt"))"
	check "both fuzzers sent all $((2 * COUNT)) packets (plus probes and bad ICRCs)" \
		fuzz_sent "$rc_a" "$rc_b"
	touch "$STOP"
	local vrc=0
	wait "$vpid" || vrc=$?
	# Quiet: nothing in flight, so every counter is final.
	sleep 2
	snap S1
	local traced traced_rc=0
	traced=$(drops_traced "$drops0") || traced_rc=$?
	diag "$traced"
	check "the probes (valid ICRC, no such QP) were counted as for no QP on both devices, exactly" \
		probes_counted
	check "the packets with a wrong ICRC were counted exactly as ICRC errors" bad_icrc_counted
	check "every datagram each netns received is counted by exactly one device counter" accounted
	check "the kernel's drop tracing shows rvrdma's drops (bad ICRC, malformed, no QP) exactly as counted, and no handled packet" \
		eval 'echo "$traced"; [ "$traced_rc" = 0 ] && [ "$(rx_drops "${DUT}0" "${DUT}1")" -gt "$drops0" ]'
	diag "$(counters_table)"
	diag "victims: $(grep -m1 -E '^traffic: (PASS|FAIL):' "$DIR/victim.txt")"
	check "the victims' data was never wrong: each pair finished clean or stopped at an error completion, the others checked to the end" \
		victims_ok "$vrc"
	check "a fresh connection after the fuzz moves data-checked traffic" \
		timeout "$((300 * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --qps 2 --random 100 \
		--sizes 1,1024,65536
	check "rmmod rvrdma and load again after the fuzz" reload
	check "no kernel report during the fuzz (lockdep, KASAN, refcount, hung task)" \
		klog_clean_since "$t0"
	ktap_finished
}

# rts_qps DEV N: prints DEV's RC QP numbers in RTS (comma separated), fails with fewer than N.
rts_qps() {
	local q
	q=$(rdma -j resource show qp link "$1/1" | "$PY" -c '
import json, sys
qps = [str(q["lqpn"]) for q in json.load(sys.stdin) if q.get("state") == "RTS" and q.get("type") == "RC"]
print(",".join(qps))')
	[ "$(tr ',' '\n' <<<"$q" | grep -c .)" -ge "$2" ] || return 1
	echo "$q"
}

COUNTERS=(rcvd_pkts rx_malformed icrc_errors rx_no_qp duplicate_request out_of_seq_request
	seq_naks_sent duplicate_responses qp_dropped pkey_violations retransmitted_pkts)

# snap NAME: NAME_udpa/NAME_udpb (UdpInDatagrams of rvA, rvB) and NAME[dev:counter].
snap() {
	declare -gA "$1"
	local -n s=$1
	local d n
	s["udpa"]=$(udp_in "$NS_A")
	s["udpb"]=$(udp_in "$NS_B")
	for d in "${DUT}0" "${DUT}1"; do
		for n in "${COUNTERS[@]}"; do
			s["$d:$n"]=$(link_stat "$d" "$n")
		done
	done
}

# delta DEV COUNTER
delta() { echo "$((${S1["$1:$2"]} - ${S0["$1:$2"]}))"; }

udp_in() {
	ip netns exec "$1" nstat -a -z UdpInDatagrams | awk '/UdpInDatagrams/ { print $2 }'
}

fuzz_sent() {
	[ "$1" -eq 0 ] && [ "$2" -eq 0 ] || { cat "$DIR"/fuzz-*.txt | tail -20; return 1; }
	grep -q "^sent $COUNT " "$DIR/fuzz-a.txt" && grep -q "^sent $COUNT " "$DIR/fuzz-b.txt"
}

# probes_counted: the probes sent alone before the fuzz (PROBES each way) moved rx_no_qp by
# exactly PROBES on the receiving device (rvA's go to ${DUT}1, rvB's to ${DUT}0).
probes_counted() {
	echo "${DUT}1: rx_no_qp +${PROBED[0]} for $PROBES probes from rvA; ${DUT}0: +${PROBED[1]} from rvB"
	[ "${PROBED[0]}" -eq "$PROBES" ] && [ "${PROBED[1]}" -eq "$PROBES" ]
}

bad_icrc_counted() {
	local d
	for d in "${DUT}0" "${DUT}1"; do
		echo "$d: icrc_errors +$(delta "$d" icrc_errors), $BAD sent"
		[ "$(delta "$d" icrc_errors)" -eq "$BAD" ] || return 1
	done
}

# accounted: for each side, the UDP datagrams its netns took in = the packets the device
# counted as received, malformed, bad ICRC or for no QP (each datagram is exactly one of them).
accounted() {
	local d udp sum rc=0
	for d in "${DUT}0:udpa" "${DUT}1:udpb"; do
		udp=$((${S1["${d#*:}"]} - ${S0["${d#*:}"]}))
		d=${d%:*}
		sum=$(($(delta "$d" rcvd_pkts) + $(delta "$d" rx_malformed) + $(delta "$d" icrc_errors) +
			$(delta "$d" rx_no_qp)))
		echo "$d: $udp UDP datagrams in, $sum counted (rcvd_pkts +$(delta "$d" rcvd_pkts)," \
			"rx_malformed +$(delta "$d" rx_malformed), icrc_errors +$(delta "$d" icrc_errors)," \
			"rx_no_qp +$(delta "$d" rx_no_qp))"
		[ "$udp" -gt 0 ] && [ "$udp" -eq "$sum" ] || rc=1
	done
	return "$rc"
}

counters_table() {
	local n
	echo "counter deltas during the fuzz (${DUT}0 / ${DUT}1):"
	for n in "${COUNTERS[@]}"; do
		printf '  %-22s %10s %10s\n' "$n" "$(delta "${DUT}0" "$n")" "$(delta "${DUT}1" "$n")"
	done
}

# victims_ok RC: traffic.py passed, or every failure was an error completion (a forged
# NAK/response may legally move a QP to Error, which stops that pair alone); a data, length or
# ordering failure, or an MR changed outside the buffers, is not. Either way they must have
# completed and checked operations during the fuzz: a run stopped at once checks nothing.
victims_ok() {
	local done_ops others
	grep -m3 '^FAIL' "$DIR/victim.txt"
	grep '^traffic: op#' "$DIR/victim.txt"
	tail -3 "$DIR/victim.txt"
	done_ops=$(sed -n 's/^traffic: [A-Z]*: [A-Z]*, \([0-9]*\) operations.*/\1/p' "$DIR/victim.txt")
	echo "operations completed and checked: ${done_ops:-none}"
	[ "${done_ops:-0}" -gt 0 ] || return 1
	[ "$1" -eq 0 ] && return 0
	others=$(sed -n 's/^traffic: isolated: .*, \([0-9]*\) failures other than error .*/\1/p' \
		"$DIR/victim.txt")
	[ "${others:-x}" = 0 ]
}

# isolate_selftest: traffic.py --isolate with one Write given a wrong R_Key (--inject rkey): that
# Write, and nothing else, fails (REM_ACCESS_ERR); its pair stops, and the others complete their
# operations (at least half of the run's) with every byte checked and the MRs compared whole.
isolate_selftest() {
	local out rc planned done_ops
	local one='^traffic: isolated: 1 of 4 QP pairs stopped at an error completion, [0-9]* operations'
	out=$(timeout "$((300 * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --qps 4 --random 200 \
		--sizes 1,1024,65536 --isolate --inject rkey 2>&1)
	rc=$?
	grep -E '^(FAIL|traffic: (op#|isolated|injecting|PASS|FAIL))' <<<"$out"
	planned=$(sed -n 's/^traffic: RC, .* \([0-9]*\) operations$/\1/p' <<<"$out")
	done_ops=$(sed -n 's/^traffic: [A-Z]*: [A-Z]*, \([0-9]*\) operations.*/\1/p' <<<"$out")
	echo "exit status $rc (want 1), ${done_ops:-no} operations completed of ${planned:-?} planned"
	[ "$rc" -eq 1 ] && [ "$(grep -c '^FAIL ' <<<"$out")" -eq 1 ] &&
		grep -q '^FAIL .*completion status REM_ACCESS_ERR' <<<"$out" &&
		grep -q "$one left unposted, 0 failures other than error completions\$" <<<"$out" &&
		[ "$((2 * ${done_ops:-0}))" -ge "${planned:-1}" ]
}

reload() {
	topo_cleanup
	dut_unload || return 1
	dut_setup 1
	link_add "${DUT}0" veth0
}

trap 'touch "$STOP"; rm -rf "$DIR"; topo_cleanup' EXIT
main "$@"
