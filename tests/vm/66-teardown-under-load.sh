#!/usr/bin/env bash
# Teardown under load: while traffic.py moves data-checked traffic between rvr0 (rvA) and rvr1
# (rvB) and a second process waits for rvr0's async events, each of `rdma link delete`,
# `ip link del` of the netdev, `ip netns del` of its namespace and `rmmod rvrdma` must finish
# within seconds; the processes then see IBV_EVENT_DEVICE_FATAL and errors instead of the
# command waiting for them to exit (the driver's disassociate_ucontext); traffic.py stops with an
# error, never with wrong data; a new device on the same netdev works right after.
. "$(dirname "$0")/lib.sh"

DIR=$(mktemp -d)
# Seconds the teardown command may take, and the processes to notice it. Unless a post fails
# first, traffic.py notices that its device is gone by its --timeout (STALL seconds without a
# completion), which traffic on a clean link never comes near.
LIMIT=$((20 * ${RVRDMA_TIME_SCALE:-1}))
NOTICE=$((60 * ${RVRDMA_TIME_SCALE:-1}))
STALL=$((10 * ${RVRDMA_TIME_SCALE:-1}))

main() {
	[ "$RVRDMA_LINK_TYPE" = rvrdma ] ||
		skip_all "rdma_rxe has no disassociate_ucontext: its removal waits for the processes"
	ktap_print_header
	ktap_set_plan 12
	local t0
	t0=$(klog_mark "66-teardown-under-load start")
	dut_setup 1
	pair_up
	teardown "rdma link delete ${DUT}0" rdma link delete "${DUT}0"
	link_add "${DUT}0" veth0
	check "a new ${DUT}0 on veth0 moves data-checked traffic" \
		eval 'wait_for $RVRDMA_WAIT has_gid ${DUT}0 10.77.0.1 && fresh'
	teardown "ip link del veth0 (and its peer)" ip netns exec "$NS_A" ip link del veth0
	RDMA_LINKS=()
	veth_pair 0
	pair_up
	teardown "ip netns del $NS_A" ip netns del "$NS_A"
	RDMA_LINKS=()
	topo_setup 1
	pair_up
	check "a new pair on a new topology moves data-checked traffic" fresh
	teardown "rmmod rvrdma" rmmod rvrdma
	RDMA_LINKS=()
	check "rvrdma loads again and moves data-checked traffic" eval 'dut_setup 1 && pair_up && fresh'
	check "no kernel report during the teardowns (lockdep, KASAN, refcount, hung task)" \
		klog_clean_since "$t0"
	ktap_finished
}

# teardown DESC CMD...: traffic and an event watcher on ${DUT}0, then CMD; two points: CMD
# finished within LIMIT s, and the processes noticed (DEVICE_FATAL, traffic.py ended without a
# data failure) within NOTICE s.
teardown() {
	local desc=$1 tpid wpid t rc=0 end load=
	shift
	rm -f "$DIR"/traffic.txt "$DIR"/watch.txt
	"$PY" "$RVRDMA_TESTS_DIR/traffic.py" "${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 \
		--qps 2 --random 5000 --sizes 1,1024,65536 --timeout "$STALL" \
		>"$DIR/traffic.txt" 2>&1 &
	tpid=$!
	"$PY" -c '
import sys
from pyverbs.device import Context
ctx = Context(name=sys.argv[1])
print("watching", flush=True)
while True:
    ev = ctx.get_async_event()
    print("event", ev.event_type, flush=True)
    ev.ack()
    if ev.event_type == 8:
        break' "${DUT}0" >"$DIR/watch.txt" 2>&1 &
	wpid=$!
	# Traffic must be flowing before the teardown: a teardown without load proves nothing here.
	wait_for 60 grep -q "operations$" "$DIR/traffic.txt" >/dev/null ||
		load="no load: traffic.py did not start posting within 60 s"
	wait_for 30 grep -q watching "$DIR/watch.txt" >/dev/null
	sleep 2
	[ -z "$load" ] && ! kill -0 "$tpid" 2>/dev/null &&
		load="no load: traffic.py ended before the teardown"
	t=$SECONDS
	timeout "$LIMIT" "$@" || rc=$?
	[ -n "$load" ] && [ "$rc" -eq 0 ] && rc=1
	result "$desc under load finishes within $LIMIT s" "$rc" \
		"rc $rc after $((SECONDS - t)) s${load:+; $load}; traffic: $(tail -3 "$DIR/traffic.txt")"
	end=$((SECONDS + NOTICE))
	while [ "$SECONDS" -lt "$end" ] && { kill -0 "$tpid" 2>/dev/null || kill -0 "$wpid" 2>/dev/null; }; do
		sleep 1
	done
	noticed "$tpid" "$wpid"
	result "... the processes noticed: IBV_EVENT_DEVICE_FATAL, traffic stopped without wrong data" $? \
		"$(cat "$DIR/watch.txt"; tail -5 "$DIR/traffic.txt")"
	kill -9 "$tpid" "$wpid" 2>/dev/null
	wait "$tpid" "$wpid" 2>/dev/null
	return 0
}

# noticed TPID WPID: both exited; the watcher saw event 8 (IBV_EVENT_DEVICE_FATAL, maybe after
# port events); traffic.py's
# first failure, if any, is an error from the device (a completion status, a failed post or
# verb, or completions that stopped coming from a device that is gone), not a data check.
noticed() {
	local first
	kill -0 "$1" 2>/dev/null && return 1
	kill -0 "$2" 2>/dev/null && return 1
	grep -qx "event 8" "$DIR/watch.txt" || return 1
	first=$(grep -m1 '^FAIL' "$DIR/traffic.txt")
	[ -z "$first" ] && return 0
	[[ $first =~ completion\ status|no\ completion\ for|failed|Errno|error ]] &&
		! [[ $first =~ byte|canary|MR\ changed ]]
}

fresh() {
	timeout "$((300 * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" \
		"${DUT}0" "${DUT}1" --gid-a 10.77.0.1 --gid-b 10.77.0.2 --qps 2 --random 50 \
		--sizes 1,1024,65536
}

trap 'rm -rf "$DIR"; topo_cleanup' EXIT
main "$@"
