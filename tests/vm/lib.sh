# shellcheck shell=bash
# Helpers for rvrdma's in-guest tests (kselftest style, KTAP output). Source it from a test script;
# it runs inside the virtme-ng guest as root, on the test kernel.
#
# Environment (all optional; scripts/vm and scripts/test set them):
#   KDIR               the built test kernel tree (for kselftest's ktap_helpers.sh)
#   RVRDMA_KO          the module to load (default: <repo>/rvrdma.ko)
#   RVRDMA_LINK_TYPE   the rdma link type under test: rvrdma (default) or rxe, to prove the harness
#                      on the in-tree soft-RoCE driver with the same tests
#   RVRDMA_WAIT        seconds to wait for asynchronous state changes (default 30; TCG is slow)
#   RVRDMA_ACK_TIMEOUT Local ACK Timeout exponent of the QPs the Python tools make, and perftest's
#                      -u (default: 14, the stock tools' 67 ms; the debug kernel sets 18)
#   RVRDMA_TIME_SCALE  factor on the time limit of data-checked transfers and of the pingpong,
#                      perftest and RDMA CM programs (default 1)
#
# Topology (topo_setup): two network namespaces wired by veth pairs
#   rvA: veth0 10.77.0.1/24 fd77::1/64      <->  rvB: veth1 10.77.0.2/24 fd77::2/64
#   rvA: veth2 10.77.1.1/24 fd77:1::1/64    <->  rvB: veth3 10.77.1.2/24 fd77:1::2/64  (topo_setup 2)

RVRDMA_TESTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RVRDMA_TOP=${RVRDMA_TOP:-$(cd "$RVRDMA_TESTS_DIR/../.." && pwd)}
RVRDMA_KO=${RVRDMA_KO:-$RVRDMA_TOP/rvrdma.ko}
RVRDMA_LINK_TYPE=${RVRDMA_LINK_TYPE:-rvrdma}
RVRDMA_WAIT=${RVRDMA_WAIT:-30}
KDIR=${KDIR:-${RVRDMA_CACHE:-$HOME/.cache/rvrdma}/linux-release}
# pyverbs and friends are Debian's: never a python from a host-side pyenv or venv.
PY=/usr/bin/python3

NS_A=rvA
NS_B=rvB
# The device-under-test names: rvr0 on veth0 (rvA), rvr1 on veth1 (rvB), rvr2/rvr3 on veth2/veth3.
DUT=rvr

KTAP_HELPERS=$KDIR/tools/testing/selftests/kselftest/ktap_helpers.sh
if [ ! -r "$KTAP_HELPERS" ]; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 harness: $KTAP_HELPERS not found (KDIR=$KDIR)"
	exit 1
fi
# shellcheck source=/dev/null
. "$KTAP_HELPERS"
# shellcheck source=tests/vm/klog.sh
. "$RVRDMA_TESTS_DIR/klog.sh"

# Each point's line is followed by the seconds since the previous point (or the script's start):
# the suite has a time budget, and the log should show which points spend it.
eval "$(declare -f __ktap_test | sed '1s/^__ktap_test /__ktap_test_untimed /')"
KTAP_LAST_US=${EPOCHREALTIME/[.,]/}
__ktap_test() {
	local now=${EPOCHREALTIME/[.,]/} ds
	__ktap_test_untimed "$@"
	ds=$(((now - KTAP_LAST_US) / 100000))
	KTAP_LAST_US=$now
	printf '# time: %d.%d s\n' $((ds / 10)) $((ds % 10))
}

# ---- KTAP helpers ------------------------------------------------------------------------------

# Prints text as KTAP diagnostics ("# " on every line).
diag() {
	local line
	while IFS= read -r line; do
		printf '# %s\n' "$line"
	done <<<"$*"
}

# check DESC CMD...: one test point; passes when CMD succeeds, else prints CMD and its output.
check() {
	local desc=$1 out rc
	shift
	out=$("$@" 2>&1)
	rc=$?
	if [ "$rc" -eq 0 ]; then
		ktap_test_pass "$desc"
	else
		diag "FAILED (rc=$rc): $*"
		[ -n "$out" ] && diag "$out"
		ktap_test_fail "$desc"
	fi
	return "$rc"
}

# check_not DESC CMD...: one test point; passes when CMD fails.
check_not() {
	local desc=$1 out rc
	shift
	out=$("$@" 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ]; then
		ktap_test_pass "$desc"
		return 0
	fi
	diag "FAILED: expected failure but succeeded: $*"
	[ -n "$out" ] && diag "$out"
	ktap_test_fail "$desc"
	return 1
}

# result DESC RC [DIAG]: one test point from a status already computed (for steps that must run in
# this shell, e.g. link_add, which records the links it made).
result() {
	local desc=$1 rc=$2
	if [ "$rc" -eq 0 ]; then
		ktap_test_pass "$desc"
	else
		diag "FAILED (rc=$rc)"
		[ -n "${3:-}" ] && diag "$3"
		ktap_test_fail "$desc"
	fi
	return "$rc"
}

# fail_rest REASON: a prerequisite failed; every remaining planned test point fails (never skips:
# a test that could not run has not shown anything works). Then exits.
fail_rest() {
	diag "cannot continue: $*"
	while [ "$KTAP_TESTNO" -le "$KSFT_NUM_TESTS" ]; do
		ktap_test_fail "not run: $*"
	done
	ktap_finished
}

# skip_all REASON: the whole script does not apply to this configuration (e.g. module tests when
# the device under test is the built-in rdma_rxe). Counted as skipped by the runner.
skip_all() {
	ktap_print_header
	ktap_skip_all "$*"
	exit "$KSFT_SKIP"
}

# ---- waiting -----------------------------------------------------------------------------------

# wait_for SECONDS CMD...: polls CMD until it succeeds; fails after SECONDS, then runs CMD once
# more with its output shown (the last state, for the diagnostics).
wait_for() {
	local secs=$1 deadline
	shift
	deadline=$((SECONDS + secs))
	while ! "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "timed out after ${secs}s waiting for: $*"
			"$@"
			return 1
		fi
		sleep 0.2
	done
	return 0
}

# ---- netns/veth topology -----------------------------------------------------------------------

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

# Which netns holds veth N: even numbers are in rvA, odd in rvB.
ns_of() {
	local n=${1#veth}
	if [ $((n % 2)) -eq 0 ]; then echo "$NS_A"; else echo "$NS_B"; fi
}

# veth_pair N: veth(2N) in rvA <-> veth(2N+1) in rvB with IPv4 and IPv6 addresses, both up.
veth_pair() {
	local n=$1 a=veth$((2 * $1)) b=veth$((2 * $1 + 1))
	local v6=fd77::
	[ "$n" -gt 0 ] && v6=fd77:$n::
	ip link add "$a" netns "$NS_A" type veth peer name "$b" netns "$NS_B" || return 1
	ip -n "$NS_A" addr add "10.77.$n.1/24" dev "$a" || return 1
	ip -n "$NS_B" addr add "10.77.$n.2/24" dev "$b" || return 1
	ip -n "$NS_A" addr add "${v6}1/64" dev "$a" nodad || return 1
	ip -n "$NS_B" addr add "${v6}2/64" dev "$b" nodad || return 1
	ip -n "$NS_A" link set "$a" up || return 1
	ip -n "$NS_B" link set "$b" up || return 1
}

# topo_setup [PAIRS]: fresh rvA/rvB namespaces with PAIRS veth pairs (default 1).
topo_setup() {
	local pairs=${1:-1} i
	topo_cleanup
	ip netns add "$NS_A" || return 1
	ip netns add "$NS_B" || return 1
	ip -n "$NS_A" link set lo up || return 1
	ip -n "$NS_B" link set lo up || return 1
	for ((i = 0; i < pairs; i++)); do
		veth_pair "$i" || return 1
	done
}

# Links this script added (deleted again by topo_cleanup).
RDMA_LINKS=()

# topo_cleanup: deletes the rdma links we made, then the namespaces (and so the veths), and waits
# for the devices to go. Quiet; never fails.
topo_cleanup() {
	local l
	for l in "${RDMA_LINKS[@]}"; do
		[ -e "/sys/class/infiniband/$l" ] && rdma link delete "$l" >/dev/null 2>&1
	done
	RDMA_LINKS=()
	ip netns del "$NS_A" >/dev/null 2>&1
	ip netns del "$NS_B" >/dev/null 2>&1
	for l in /sys/class/infiniband/"$DUT"* /sys/class/infiniband/rxe* /sys/class/infiniband/siw*; do
		[ -e "$l" ] && wait_for "$RVRDMA_WAIT" test ! -e "$l" >/dev/null 2>&1
	done
	return 0
}

# ---- rdma devices ------------------------------------------------------------------------------

# link_add NAME NETDEV [TYPE]: `rdma link add` run in the netdev's namespace; TYPE defaults to the
# device under test. Returns rdma's status; its output is in LINK_OUT. Run it in this shell (not in
# $(...)) so that topo_cleanup knows the link.
LINK_OUT=
link_add() {
	local name=$1 netdev=$2 type=${3:-$RVRDMA_LINK_TYPE} rc
	LINK_OUT=$(ip netns exec "$(ns_of "$netdev")" rdma link add "$name" type "$type" netdev "$netdev" 2>&1)
	rc=$?
	[ "$rc" -eq 0 ] && RDMA_LINKS+=("$name")
	return "$rc"
}

# check_add DESC NAME NETDEV [TYPE]: link_add as a test point.
check_add() {
	local desc=$1
	shift
	link_add "$@"
	result "$desc" $? "rdma link add $1 type ${3:-$RVRDMA_LINK_TYPE} netdev $2: $LINK_OUT"
}

link_del() {
	rdma link delete "$1"
}

dev_exists() { [ -e "/sys/class/infiniband/$1" ]; }
dev_gone() { [ ! -e "/sys/class/infiniband/$1" ]; }

# Sorted names of all ib devices, as the rdma tool lists them; fails when `rdma dev show` fails
# (an empty list must not read as "not listed" then).
dev_list() {
	local out
	out=$(rdma dev show) || { echo "rdma dev show failed" >&2; return 1; }
	awk -F': ' '/^[0-9]+: /{print $2}' <<<"$out" | sort
}

rdma_lists() {
	local l
	l=$(dev_list) || return 1
	grep -qx "$1" <<<"$l"
}

rdma_lists_not() {
	local l
	l=$(dev_list) || return 1
	! grep -qx "$1" <<<"$l"
}

# port_state DEV [PORT]: ACTIVE, DOWN, ... from sysfs ("4: ACTIVE"); PORT defaults to 1.
port_state() {
	local s
	s=$(cat "/sys/class/infiniband/$1/ports/${2:-1}/state" 2>/dev/null) || return 1
	echo "${s#*: }"
}

# port_is DEV STATE [PORT]
port_is() { [ "$(port_state "$1" "${3:-1}")" = "$2" ]; }

# dut_load: makes sure the device-under-test's driver is present. For rvrdma: insmod $RVRDMA_KO
# unless loaded. For rxe: built in, nothing to do.
dut_load() {
	case $RVRDMA_LINK_TYPE in
	rvrdma)
		[ -d /sys/module/rvrdma ] && return 0
		if [ ! -f "$RVRDMA_KO" ]; then
			echo "rvrdma.ko not found at $RVRDMA_KO (build it: make KDIR=\$KDIR)"
			return 1
		fi
		insmod "$RVRDMA_KO"
		;;
	*) return 0 ;;
	esac
}

# dut_unload: rmmod rvrdma if loaded (with a timeout: a hang is a failure, not a stuck run).
dut_unload() {
	[ "$RVRDMA_LINK_TYPE" = rvrdma ] || return 0
	[ -d /sys/module/rvrdma ] || return 0
	timeout 120 rmmod rvrdma
}

# dut_setup [PAIRS]: topology + driver, or fail every planned point with the reason.
dut_setup() {
	local out
	topo_setup "${1:-1}" || fail_rest "could not build the netns/veth topology"
	out=$(dut_load 2>&1) || fail_rest "cannot load the $RVRDMA_LINK_TYPE driver: $out"
}

# gid_full ADDR: the GID spelled as sysfs does (8 groups of 4 hex digits); IPv4 -> ::ffff:a.b.c.d.
# Pure bash (it runs in polling loops): IPv4 dotted quads and IPv6 without embedded IPv4.
gid_full() {
	local a=$1 head tail grp=() h=() t=() i
	if [[ $a =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
		printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' \
			"${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" "${BASH_REMATCH[4]}"
		return
	fi
	if [[ $a == *::* ]]; then
		head=${a%%::*} tail=${a#*::}
	else
		head=$a tail=
	fi
	[ -n "$head" ] && IFS=: read -r -a h <<<"$head"
	[ -n "$tail" ] && IFS=: read -r -a t <<<"$tail"
	grp=("${h[@]}")
	if [[ $a == *::* ]]; then
		for ((i = ${#h[@]} + ${#t[@]}; i < 8; i++)); do
			grp+=(0)
		done
	fi
	grp+=("${t[@]}")
	[ "${#grp[@]}" -eq 8 ] || { echo "bad address: $a" >&2; return 1; }
	printf '%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x\n' "${grp[@]/#/0x}"
}

# sysfs_gid_index DEV GID TYPE [PORT]: prints the index of GID with gid type TYPE ("RoCE v2") on
# PORT (default 1). One grep over the table (it has up to 1024 entries: a process per entry is
# minutes under TCG).
sysfs_gid_index() {
	local dev=$1 gid=$2 type=$3 f i
	local port=/sys/class/infiniband/$dev/ports/${4:-1}
	while IFS= read -r f; do
		i=${f##*/}
		[ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "$type" ] || continue
		echo "$i"
		return 0
	done < <(grep -lsxF "$gid" "$port"/gids/*)
	return 1
}

# has_gid DEV ADDR [PORT]
has_gid() { sysfs_gid_index "$1" "$(gid_full "$2")" "RoCE v2" "${3:-1}" >/dev/null; }
# has_no_gid DEV ADDR [PORT]: the port's GID table is there and ADDR is not in it.
has_no_gid() { [ -d "/sys/class/infiniband/$1/ports/${3:-1}/gids" ] && ! has_gid "$@"; }

# pair_up: ${DUT}0 on veth0 and ${DUT}1 on veth1 with their IPv4 RoCE v2 GIDs present; sets GA
# and GB to those GID indexes. Otherwise fails every planned point.
pair_up() {
	link_add "${DUT}0" veth0 && link_add "${DUT}1" veth1 || fail_rest "rdma link add: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid "${DUT}1" 10.77.0.2 ||
		fail_rest "GIDs did not appear"
	GA=$(sysfs_gid_index "${DUT}0" "$(gid_full 10.77.0.1)" "RoCE v2")
	GB=$(sysfs_gid_index "${DUT}1" "$(gid_full 10.77.0.2)" "RoCE v2")
}

# rxe_on_b: ${DUT}1, if there, leaves veth1 (rvB) to rdma_rxe's rxe1 (one UDP 4791 socket per
# netns); GX becomes rxe1's IPv4 RoCE v2 GID index. Otherwise fails every planned point.
rxe_on_b() {
	if dev_exists "${DUT}1"; then
		link_del "${DUT}1"
	fi
	link_add rxe1 veth1 rxe || fail_rest "rdma link add rxe1: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 || fail_rest "rxe1's GID did not appear"
	GX=$(sysfs_gid_index rxe1 "$(gid_full 10.77.0.2)" "RoCE v2")
}

# The kernel's drop tracing: the skb:kfree_skb event fires for every skb freed as a drop (what
# dropwatch and `perf trace` report), not for one consumed (consume_skb).
TRACEFS=/sys/kernel/tracing

# drop_trace_start: records the kernel's skb drops from here on, in a buffer big enough for a
# fuzz run's.
drop_trace_start() {
	[ -e "$TRACEFS/trace" ] || mount -t tracefs nodev "$TRACEFS" || return
	# "7 (expanded: 1408)" until the buffer is first used: the size it expands to is the one.
	DROP_TRACE_KB=$(awk '{ if (match($0, /expanded: [0-9]+/)) print substr($0, RSTART + 10,
		RLENGTH - 10); else print $1 }' "$TRACEFS/buffer_size_kb") || return
	echo 0 >"$TRACEFS/tracing_on" && echo 16384 >"$TRACEFS/buffer_size_kb" &&
		: >"$TRACEFS/trace" && echo 1 >"$TRACEFS/events/skb/kfree_skb/enable" &&
		echo 1 >"$TRACEFS/tracing_on"
}

# drop_trace_stop: stops the recording and prints how many of the drops were rvrdma's (the
# event's location, where the skb was freed, in the module); fails if the buffer lost events.
drop_trace_stop() {
	local lost
	[ "$(cat "$TRACEFS/events/skb/kfree_skb/enable" 2>/dev/null)" = 1 ] ||
		{ echo "the drop tracing was not on"; return 1; }
	echo 0 >"$TRACEFS/tracing_on" && echo 0 >"$TRACEFS/events/skb/kfree_skb/enable" || return
	lost=$(awk '$1 == "overrun:" { n += $2 } END { print n + 0 }' "$TRACEFS"/per_cpu/cpu*/stats)
	[ "$lost" = 0 ] || { echo "the trace buffer lost $lost events"; return 1; }
	awk '/location=[^ ]+ \[rvrdma\]/ { n++ } END { print n + 0 }' "$TRACEFS/trace"
}

# rx_drops DEV...: the packets the devices counted as dropped on receive, summed.
rx_drops() {
	local d c n=0
	for d in "$@"; do
		for c in rx_malformed icrc_errors rx_no_qp; do n=$((n + $(link_stat "$d" "$c"))); done
	done
	echo "$n"
}

# drops_traced BEFORE: after a second's quiet, the skbs rvrdma freed as drops since
# drop_trace_start are exactly the receive drops ${DUT}0 and ${DUT}1 counted since rx_drops
# printed BEFORE: a handled packet is consumed, and every drop counted is a drop.
drops_traced() {
	local n counted
	sleep 1
	n=$(drop_trace_stop) || { echo "$n"; return 1; }
	counted=$(($(rx_drops "${DUT}0" "${DUT}1") - $1))
	echo "rvrdma's skbs freed as drops: $n; receive drops its devices counted: $counted"
	local rc=0
	if [ "$n" -ne "$counted" ]; then
		echo "drops traced, by where they were freed:"
		grep -oE 'location=[^ ]+( \[[a-z_]+\])?' "$TRACEFS/trace" | sed 's/+[^ ]*//' |
			sort | uniq -c | sort -rn | head -8
		rc=1
	fi
	# The buffer shrinks back: the tests after this one have the guest's memory to themselves.
	echo "${DROP_TRACE_KB:-1408}" >"$TRACEFS/buffer_size_kb"
	return "$rc"
}

# link_stat DEV NAME: the counter NAME of DEV's port 1 (`rdma statistic`); nothing, and status 1,
# if DEV has no such counter.
link_stat() {
	rdma statistic show link "$1/1" | tr ' ' '\n' |
		awk -v n="$2" '$0 == n { getline; print; found = 1; exit } END { exit !found }'
}

# stat_num DEV NAME: as link_stat, but status 1 (and why, on stderr) unless the value is a number:
# for checks that expect a counter to stay put, which an unreadable counter would pass.
stat_num() {
	local v
	v=$(link_stat "$1" "$2")
	[[ $v =~ ^[0-9]+$ ]] || { echo "counter $2 of $1 unreadable: '$v'" >&2; return 1; }
	echo "$v"
}

# Counters that move only when a packet was lost (send_err: built, then not sent), duplicated or
# reordered; and duplicate_request, less the peer's credit probes (seed 003: a requester held for
# credits asks for them with a probe, which is a duplicate request by design).
RETRY_COUNTERS=(retransmitted_pkts completer_retry_err duplicate_responses out_of_seq_request
	rcvd_seq_err transport_timeouts send_err)

# retry_counters: DEV/COUNTER=VALUE lines of RETRY_COUNTERS for ${DUT}0 and ${DUT}1.
retry_counters() {
	local d c v peer dup probes
	for d in "${DUT}0" "${DUT}1"; do
		for c in "${RETRY_COUNTERS[@]}"; do
			v=$(stat_num "$d" "$c") || return 1
			printf '%s/%s=%s\n' "$d" "$c" "$v"
		done
		peer=${DUT}0
		[ "$d" = "${DUT}0" ] && peer=${DUT}1
		dup=$(stat_num "$d" duplicate_request) && probes=$(stat_num "$peer" credit_probes) || return 1
		printf '%s/duplicate_request-peer_credit_probes=%s\n' "$d" "$((dup - probes))"
	done
}

# retry_counters_unchanged CMD...: runs CMD; fails if it fails or if it moved a retry counter.
retry_counters_unchanged() {
	local before after
	before=$(retry_counters) || return 1
	"$@" || return 1
	after=$(retry_counters) || return 1
	diff <(echo "$before") <(echo "$after") && echo "retry counters unchanged: $(tr '\n' ' ' <<<"$after")"
}

# ---- helpers in Python ---------------------------------------------------------------------------

# run_points POINTS NAME CMD...: a helper NAME that prints "ok DESC" / "not ok DESC[: WHY]" lines (anything
# else is a diagnostic) as POINTS KTAP test points, then one more: the helper ran to its end
# (exit status 0, exactly POINTS points). Missing points fail. Plan POINTS + 1 for it.
run_points() {
	local want=$1 name=$2 out rc n=0 line i
	shift 2
	out=$("$@" 2>&1)
	rc=$?
	while IFS= read -r line; do
		case $line in
		"ok "*)
			n=$((n + 1))
			[ "$n" -le "$want" ] && ktap_test_pass "${line#ok }"
			;;
		"not ok "*)
			n=$((n + 1))
			[ "$n" -le "$want" ] && ktap_test_fail "${line#not ok }"
			;;
		"") ;;
		*) diag "${line#\# }" ;;
		esac
	done <<<"$out"
	for ((i = n; i < want; i++)); do
		ktap_test_fail "not run: $name stopped after $n of $want points"
	done
	if [ "$rc" -eq 0 ] && [ "$n" -eq "$want" ]; then
		ktap_test_pass "$name ran to its end"
	else
		diag "$name: exit status $rc, $n points printed, $want planned"
		ktap_test_fail "$name ran to its end"
	fi
}

# klog_clean_since T: no checker report (klog.sh) in the kernel log since kernel time T (from
# klog_mark); prints the reports. Fails when dmesg fails too.
klog_clean_since() {
	local log hits
	log=$(dmesg) || { echo "dmesg failed"; return 1; }
	hits=$(klog_window "$1" <<<"$log" | klog_reports)
	[ -z "$hits" ] || { echo "$hits"; return 1; }
}

# ---- traffic -------------------------------------------------------------------------------------

# The last TCP port a traffic run used, in a file: pp_run is often called in a subshell ($(...),
# check), where a shell variable would not keep the count and every run would reuse one port.
PP_PORT_FILE=${PP_PORT_FILE:-/tmp/rvrdma-pp-port}
PP_PORT_FIRST=18516

# pp_next_port: a TCP port no earlier traffic run of this boot used.
pp_next_port() {
	(
		flock 9 || exit 1
		p=$(cat "$PP_PORT_FILE" 2>/dev/null)
		[[ $p =~ ^[0-9]+$ ]] && [ "$p" -lt 60000 ] && p=$((p + 1)) || p=$PP_PORT_FIRST
		echo "$p" >"$PP_PORT_FILE" || exit 1
		echo "$p"
	) 9>>"$PP_PORT_FILE.lock"
}

# pp_run PROG SDEV SADDR CDEV CADDR [ARGS...]: a stock rdma-core example (ibv_rc_pingpong,
# ibv_srq_pingpong, ...) with its server on SDEV in the netns that owns SADDR and its client on
# CDEV in the other one, over RoCE v2 GIDs of SADDR/CADDR; ARGS go to both sides. Succeeds when
# both sides exit 0. Each run uses a fresh TCP port (pp_next_port). The examples exchange QP information over
# TCP, whose server listens on IPv4 only: with IPv6 GIDs set PP_CONNECT to the server's IPv4.
pp_run() { ex_run -g /dev/stdout "$@"; }

# pf_run PROG SDEV SADDR CDEV CADDR [ARGS...]: a perftest program (ib_send_bw, ...) as pp_run
# runs the rdma-core examples (perftest names the GID index -x and takes -F). The server's output
# goes to $PF_SERVER_OUT (default: discarded), the client's to stdout.
pf_run() {
	local prog=$1
	shift
	ex_run -x "${PF_SERVER_OUT:-/dev/null}" "$prog" "$@" -F ${RVRDMA_ACK_TIMEOUT:+-u "$RVRDMA_ACK_TIMEOUT"}
}

# pp_limit: the seconds one pingpong, perftest or RDMA CM program may run: PP_TIMEOUT (default
# 240) times RVRDMA_TIME_SCALE, as for the data-checked transfers (the debug kernel is slower).
pp_limit() {
	echo $((${PP_TIMEOUT:-240} * ${RVRDMA_TIME_SCALE:-1}))
}

# ex_run GIDFLAG SERVER_OUT PROG SDEV SADDR CDEV CADDR [ARGS...]: what pp_run and pf_run share.
ex_run() {
	local gflag=$1 sout=$2 prog=$3 sdev=$4 saddr=$5 cdev=$6 caddr=$7 gs gc spid rc=1 port sns cns
	shift 7
	gs=$(sysfs_gid_index "$sdev" "$(gid_full "$saddr")" "RoCE v2") || { echo "no RoCE v2 GID for $saddr on $sdev"; return 1; }
	gc=$(sysfs_gid_index "$cdev" "$(gid_full "$caddr")" "RoCE v2") || { echo "no RoCE v2 GID for $caddr on $cdev"; return 1; }
	port=$(pp_next_port) || { echo "no TCP port from $PP_PORT_FILE"; return 1; }
	if ip -n "$NS_A" -br addr | grep -qF " $saddr/"; then sns=$NS_A cns=$NS_B; else sns=$NS_B cns=$NS_A; fi
	if [ "$sout" = /dev/stdout ]; then
		# Opening /dev/stdout anew would truncate a file the caller sent stdout to.
		ip netns exec "$sns" timeout "$(pp_limit)" "$prog" -d "$sdev" "$gflag" "$gs" -p "$port" "$@" 2>&1 &
	else
		ip netns exec "$sns" timeout "$(pp_limit)" "$prog" -d "$sdev" "$gflag" "$gs" -p "$port" "$@" >"$sout" 2>&1 &
	fi
	spid=$!
	# PP_LISTEN_WAIT: seconds for the server to listen (it sets up its QPs first); a server that
	# exits before it listens ends the wait.
	if ! wait_for "${PP_LISTEN_WAIT:-30}" eval "ip netns exec $sns ss -ltn | grep -q ':$port ' || ! kill -0 $spid 2>/dev/null" ||
		! kill -0 "$spid" 2>/dev/null; then
		echo "the server exited or did not listen"
		kill "$spid" 2>/dev/null
		wait "$spid"
		return 1
	fi
	ip netns exec "$cns" timeout "$(pp_limit)" "$prog" -d "$cdev" "$gflag" "$gc" -p "$port" "$@" "${PP_CONNECT:-$saddr}" && rc=0
	wait "$spid" || rc=1
	return "$rc"
}

# pf_cm_run PROG SDEV SADDR CDEV [ARGS...]: a perftest program connected through the RDMA CM
# (-R): its server listens on SADDR's netns (an RDMA CM id, not a TCP socket), its client in the
# other connects to SADDR. Passes when both exit 0. The server's output goes to $PF_SERVER_OUT
# (default: discarded), the client's to stdout.
pf_cm_run() {
	local prog=$1 sdev=$2 saddr=$3 cdev=$4 port sns cns spid rc=0 t=()
	shift 4
	[ -n "${RVRDMA_ACK_TIMEOUT:-}" ] && t=(-u "$RVRDMA_ACK_TIMEOUT")
	port=$(pp_next_port) || return 1
	cm_pair "$saddr"
	ip netns exec "$sns" timeout "$(pp_limit)" "$prog" -d "$sdev" -R -p "$port" -F "${t[@]}" "$@" \
		>"${PF_SERVER_OUT:-/dev/null}" 2>&1 &
	spid=$!
	wait_for 30 eval "rdma resource show cm_id 2>/dev/null | grep -q LISTEN" || { kill "$spid"; return 1; }
	ip netns exec "$cns" timeout "$(pp_limit)" "$prog" -d "$cdev" -R -p "$port" -F "${t[@]}" "$@" \
		"$saddr" || rc=1
	wait "$spid" || rc=1
	return "$rc"
}

# pf_checked SIZE ITERS RUNNER PROG ...: RUNNER (pf_run or pf_cm_run) with its output shown, and
# perftest's report checked: a line for SIZE-byte messages and ITERS iterations from the client,
# and for ib_send_bw from the server too (the receiver: it counts the messages it took). perftest
# prints it only after ITERS completions, each of whose status it checks (a failed one ends the run
# with an error). That is all it shows: perftest's bandwidth tests compare no data.
pf_checked() {
	local size=$1 iters=$2 out sout rc=0 who
	shift 2
	sout=$(mktemp)
	out=$(PF_SERVER_OUT=$sout "$@" 2>&1) || rc=1
	echo "$out"
	sed 's/^/server: /' "$sout"
	for who in client server; do
		[ "$who" = server ] && [ "$2" != ib_send_bw ] && continue
		[ "$who" = server ] && out=$(cat "$sout")
		awk -v s="$size" -v n="$iters" '
			/#bytes +#iterations/ { hdr = 1; next }
			hdr && $1 == s && $2 == n && $4 ~ /^[0-9.]+$/ { ok = 1 }
			END { exit !ok }' <<<"$out" || { echo "no $who report line for $size B x $iters"; rc=1; }
	done
	rm -f "$sout"
	return "$rc"
}

# ---- RDMA CM programs ----------------------------------------------------------------------------

# cm_pair SADDR: sets sns/cns, the netns of the server (which owns SADDR) and of the client.
cm_pair() {
	if ip -n "$NS_A" -br addr | grep -qF " $1/"; then sns=$NS_A cns=$NS_B; else sns=$NS_B cns=$NS_A; fi
}

# cm_server CMD...: starts a CM server in $sns, its output in $srv_out, pid in $srv_pid, and
# waits until an RDMA CM id listens.
cm_server() {
	srv_out=$(mktemp)
	ip netns exec "$sns" timeout "$(pp_limit)" "$@" >"$srv_out" 2>&1 &
	srv_pid=$!
	wait_for 30 eval "rdma resource show cm_id 2>/dev/null | grep -q LISTEN"
}

# cm_server_done: waits for the server; fails (printing its output) unless it exited 0.
cm_server_done() {
	local rc=0
	wait "$srv_pid" || rc=1
	sed 's/^/server: /' "$srv_out"
	rm -f "$srv_out"
	return "$rc"
}

trap topo_cleanup EXIT

# ---- data-checked traffic ----------------------------------------------------------------------

# traffic_check DESC DEV_A DEV_B [ARGS...]: one test point: tests/vm/traffic.py, run in the
# initial netns (it opens both devices). Its summary and wall time are shown either way, all its
# output when it fails.
traffic_check() {
	local desc=$1 out rc t0=$SECONDS
	shift
	out=$(timeout "$((${TRAFFIC_TIMEOUT:-240} * ${RVRDMA_TIME_SCALE:-1}))" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" "$@" 2>&1)
	rc=$?
	diag "traffic.py $*"
	diag "$(tail -n 1 <<<"$out") [wall $((SECONDS - t0)) s]"
	[ "$rc" -eq 0 ] || traffic_counters "$1" "$2"
	result "$desc" "$rc" "$out"
}

# traffic_selftest KINDS DEV_A DEV_B [ARGS...]: traffic.py --inject KINDS (comma-separated) must
# fail with exactly one FAIL line per injected fault, and no other.
traffic_selftest() {
	local kinds=$1 out rc n want
	shift
	want=$(tr ',' '\n' <<<"$kinds" | grep -c .)
	out=$(timeout "${TRAFFIC_TIMEOUT:-240}" "$PY" "$RVRDMA_TESTS_DIR/traffic.py" "$@" --inject "$kinds" 2>&1)
	rc=$?
	n=$(grep -c '^FAIL ' <<<"$out")
	echo "$out"
	echo "exit status $rc (want 1), $n FAIL lines (want $want)"
	[ "$rc" -eq 1 ] && [ "$n" -eq "$want" ]
}

# traffic_counters DEV...: the non-zero port counters of each device and the packets each CPU's
# backlog dropped, to tell a failed transfer's story.
traffic_counters() {
	local d drops=() x
	for d in "$@"; do
		diag "$d: $(rdma statistic show link "$d/1" 2>&1 | tr ' ' '\n' |
			awk '$0 ~ /^[1-9][0-9]*$/ && prev ~ /^[a-z_]+$/ { printf "%s=%s ", prev, $0 } { prev = $0 }')"
	done
	while read -r _ x _; do drops+=($((16#$x))); done </proc/net/softnet_stat
	diag "backlog drops per CPU (softnet_stat): ${drops[*]}"
}
