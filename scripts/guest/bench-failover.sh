#!/usr/bin/env bash
# In-guest part of scripts/bench-failover: the stall a link cut causes to a running RC stream
# (tests/vm/failover_stall.py: 4 KiB signaled RDMA Writes, a window of 4, link 1 cut by
# `ip link set veth0 down` in rvA), RUNS times for each of
#   (a) rvrdma, the spec's APM: the program loads the alternate path (port 2) and arms it;
#       migration at retry exhaustion (n/a without the ib_core patch)
#   (b) rvrdma with apm_bonding=1 on both devices: the program loads nothing
#   (c) rdma_rxe over Linux active-backup bonds of the same two veth pairs (miimon 10)
# then prints one table: per case the median stall and longest completion gap, and the failed runs.
# Options: -n RUNS (3), -b SECS of stream before the cut (2), -a SECS after it (3),
# -t EXP Local ACK Timeout exponent for every case (default $RVRDMA_ACK_TIMEOUT, else 14),
# -s SIZE bytes per write (4096), -w WINDOW writes outstanding (4).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"

runs=3 before=2 after=3 ack=${RVRDMA_ACK_TIMEOUT:-14} size=4096 window=4 retry=7
while getopts n:b:a:t:s:w: o; do
	case $o in
	n) runs=$OPTARG ;;
	b) before=$OPTARG ;;
	a) after=$OPTARG ;;
	t) ack=$OPTARG ;;
	s) size=$OPTARG ;;
	w) window=$OPTARG ;;
	*) exit 2 ;;
	esac
done
A=${DUT}0 B=${DUT}1
# Per case: the stall and max-gap figures of the runs that passed (space separated), the runs
# that failed, the first failure's reason, and why the case does not apply (n/a).
declare -A stalls gaps failed why na
# Each run's limit: the stream, waiting for ARMED (20 s) and for the first completion after the
# cut (30 s), draining, reconnecting the ports; generous under TCG.
run_limit=$((300 * ${RVRDMA_TIME_SCALE:-1}))

say() { printf '# %s\n' "$*" >&2; }

# ---- rvrdma: two two-port devices -----------------------------------------------------------

rvrdma_topo() {
	local d dev addr port
	topo_setup 2 || { echo "could not build the netns/veth topology"; return 1; }
	dut_load || return 1
	if ! { link_add "$A" veth0 && link_add "$B" veth1 && link_add "$A" veth2 && link_add "$B" veth3; }; then
		echo "rdma link add: $LINK_OUT"
		return 1
	fi
	for d in "$A:10.77.0.1:1" "$A:10.77.1.1:2" "$B:10.77.0.2:1" "$B:10.77.1.2:2"; do
		IFS=: read -r dev addr port <<<"$d"
		wait_for "$RVRDMA_WAIT" has_gid "$dev" "$addr" "$port" >/dev/null || { echo "no GID $addr on $dev/$port"; return 1; }
	done
}

# Both ports of both devices ACTIVE with their GIDs.
rvrdma_ready() {
	port_is "$A" ACTIVE 1 && port_is "$A" ACTIVE 2 && port_is "$B" ACTIVE 1 && port_is "$B" ACTIVE 2 &&
		has_gid "$A" 10.77.0.1 1 && has_gid "$A" 10.77.1.1 2 && has_gid "$B" 10.77.0.2 1 && has_gid "$B" 10.77.1.2 2
}

# set_bonding 0|1: apm_bonding on both devices; fails when the switch is missing or refuses.
set_bonding() {
	local d
	for d in "$A" "$B"; do
		[ -w "/sys/class/infiniband/$d/apm_bonding" ] || return 1
		echo "$1" >"/sys/class/infiniband/$d/apm_bonding" || return 1
		[ "$(cat "/sys/class/infiniband/$d/apm_bonding")" = "$1" ] || return 1
	done
}

# ---- rdma_rxe over active-backup bonds ------------------------------------------------------

# bond0 in rvA over veth0 (primary) + veth2, bond1 in rvB over veth1 (primary) + veth3, miimon
# 10 ms (veth carrier follows the peer: taking veth0 down drops veth1's carrier, so both bonds
# fail over); 10.77.0.1/2 on the bonds; rxe0 on bond0, rxe1 on bond1.
bond_topo() {
	local n out
	topo_cleanup
	ip netns add "$NS_A" && ip netns add "$NS_B" || return 1
	ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up || return 1
	ip -n "$NS_A" link add bond0 type bond mode active-backup miimon 10 || return 1
	ip -n "$NS_B" link add bond1 type bond mode active-backup miimon 10 || return 1
	for n in 0 1; do
		# New veths are down, as a bond wants its slaves; enslaving opens them.
		ip link add "veth$((2 * n))" netns "$NS_A" type veth peer name "veth$((2 * n + 1))" netns "$NS_B" || return 1
		ip -n "$NS_A" link set "veth$((2 * n))" master bond0 || return 1
		ip -n "$NS_B" link set "veth$((2 * n + 1))" master bond1 || return 1
	done
	ip -n "$NS_A" link set bond0 type bond primary veth0 || return 1
	ip -n "$NS_B" link set bond1 type bond primary veth1 || return 1
	ip -n "$NS_A" addr add 10.77.0.1/24 dev bond0 || return 1
	ip -n "$NS_B" addr add 10.77.0.2/24 dev bond1 || return 1
	ip -n "$NS_A" link set bond0 up && ip -n "$NS_B" link set bond1 up || return 1
	for n in 0 2; do ip -n "$NS_A" link set "veth$n" up || return 1; done
	for n in 1 3; do ip -n "$NS_B" link set "veth$n" up || return 1; done
	# link_add picks the netns from a vethN name: the bonds need their netns said.
	out=$(in_a rdma link add rxe0 type rxe netdev bond0 2>&1) || { echo "rdma link add rxe0: $out"; return 1; }
	RDMA_LINKS+=(rxe0)
	out=$(in_b rdma link add rxe1 type rxe netdev bond1 2>&1) || { echo "rdma link add rxe1: $out"; return 1; }
	RDMA_LINKS+=(rxe1)
	if ! { wait_for "$RVRDMA_WAIT" has_gid rxe0 10.77.0.1 >/dev/null && wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 >/dev/null; }; then
		echo "rxe0/rxe1 GIDs did not appear"
		return 1
	fi
}

active_slave() { ip netns exec "$1" cat "/proc/net/bonding/$2" 2>/dev/null | sed -n 's/^Currently Active Slave: //p'; }
lower_up() { ip -n "$1" link show "$2" 2>/dev/null | grep -q LOWER_UP; }

# Every veth with carrier, each bond back on its primary slave, both rxe ports ACTIVE.
bond_ready() {
	lower_up "$NS_A" veth0 && lower_up "$NS_A" veth2 && lower_up "$NS_B" veth1 && lower_up "$NS_B" veth3 &&
		[ "$(active_slave "$NS_A" bond0)" = veth0 ] && [ "$(active_slave "$NS_B" bond1)" = veth1 ] &&
		port_is rxe0 ACTIVE && port_is rxe1 ACTIVE && has_gid rxe0 10.77.0.1 && has_gid rxe1 10.77.0.2
}

# ---- the runs -------------------------------------------------------------------------------

# kv LINE KEY: the value of KEY=... in a "result ..." line.
kv() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

# run_case CASE READY DEV_A DEV_B MODE: RUNS runs of failover_stall.py, each once READY holds.
run_case() {
	local c=$1 ready=$2 da=$3 db=$4 mode=$5 i out rc line st gp fl r l
	stalls[$c]="" gaps[$c]="" failed[$c]=0
	for ((i = 1; i <= runs; i++)); do
		if ! out=$(wait_for "$RVRDMA_WAIT" "$ready" 2>&1); then
			say "($c) run $i: links/ports not ready: $out"
			failed[$c]=$((failed[$c] + 1))
			[ -n "${why[$c]:-}" ] || why[$c]="run $i: links/ports not ready before it"
			continue
		fi
		out=$(timeout "$run_limit" "$PY" "$RVRDMA_TESTS_DIR/failover_stall.py" "$da" "$db" --mode "$mode" \
			--ack-timeout "$ack" --retry-cnt "$retry" --size "$size" --window "$window" \
			--before "$before" --after "$after" --ns "$NS_A" --link veth0 2>&1)
		rc=$?
		# Whatever happened, link 1 comes back (failover_stall.py does it too).
		in_a ip link set veth0 up 2>/dev/null
		while IFS= read -r l; do say "($c) run $i: $l"; done <<<"$out"
		if [ "$rc" -eq 3 ] && grep -q '^n/a ' <<<"$out"; then
			na[$c]=$(sed -n 's/^n\/a //p' <<<"$out" | head -n 1)
			return
		fi
		line=$(grep -m1 '^result ' <<<"$out")
		st=$(kv "$line" stall_ms) gp=$(kv "$line" max_gap_ms)
		if [ "$rc" -eq 0 ] && [[ $st =~ ^[0-9.]+$ ]] && [[ $gp =~ ^[0-9.]+$ ]]; then
			stalls[$c]+=" $st" gaps[$c]+=" $gp"
		else
			failed[$c]=$((failed[$c] + 1))
			fl=$(grep -m1 '^FAIL ' <<<"$out")
			if [ -n "$fl" ]; then
				r=${fl#FAIL }
			elif [ "$rc" -eq 124 ]; then
				r="timed out after $run_limit s"
			else
				r="exit status $rc: $(tail -n 1 <<<"$out")"
			fi
			[ -n "${why[$c]:-}" ] || why[$c]="run $i: $r"
		fi
	done
}

# median: of the numbers on stdin (one a word), to 2 decimals; "-" when there are none.
median() {
	tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 }
		END {
			if (!NR) { print "-"; exit }
			if (NR % 2) printf "%.2f\n", v[(NR + 1) / 2]
			else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
		}'
}

say "kernel $(uname -r); $runs runs per case; Local ACK Timeout $ack, retry_cnt $retry, $size B writes, window $window"

# The set-ups run in this shell (not in $(...)): link_add records the links for topo_cleanup.
setup_log=$(mktemp)
trap 'rm -f "$setup_log"; topo_cleanup' EXIT
if rvrdma_topo >"$setup_log" 2>&1; then
	# (a) the spec's APM, loaded by the program.
	if [ -e "/sys/class/infiniband/$A/apm_bonding" ] && ! set_bonding 0; then
		na[a]="could not set apm_bonding to 0"
	else
		run_case a rvrdma_ready "$A" "$B" spec
	fi
	# (b) apm_bonding=1 on both devices, the program loads nothing.
	if set_bonding 1; then
		run_case b rvrdma_ready "$A" "$B" bonding
		set_bonding 0
	else
		na[b]="no writable /sys/class/infiniband/$A/apm_bonding (or it refused 1)"
	fi
else
	out=$(tr '\n' ' ' <"$setup_log")
	say "rvrdma setup failed: $out"
	na[a]="rvrdma setup failed: $out" na[b]="rvrdma setup failed: $out"
fi
topo_cleanup

if bond_topo >"$setup_log" 2>&1; then
	run_case c bond_ready rxe0 rxe1 none
else
	out=$(tr '\n' ' ' <"$setup_log")
	say "bond/rxe setup failed: $out"
	na[c]="bond/rxe setup failed: $out"
fi
topo_cleanup

tmo=$(awk -v t="$ack" 'BEGIN { printf "%.1f", 4.096e-3 * 2 ^ t }')
echo
echo "Failover stall of a running RC stream ($size B signaled RDMA Writes, window $window; link 1 cut"
echo "by 'ip link set veth0 down' in $NS_A; Local ACK Timeout $ack = $tmo ms and retry_cnt $retry in every case)."
echo "Medians of $runs runs per case (failed runs left out), in ms. Goal: (b) under 10 ms and far below (c)."
printf '%-52s %12s %12s %12s\n' case "stall ms" "max gap ms" "failed runs"
declare -A label=(
	[a]="(a) rvrdma, spec APM (program loads alt path)"
	[b]="(b) rvrdma, apm_bonding=1 (program loads nothing)"
	[c]="(c) rdma_rxe over active-backup bond (miimon 10)"
)
for c in a b c; do
	if [ -n "${na[$c]:-}" ]; then
		printf '%-52s %12s %12s %12s\n' "${label[$c]}" n/a n/a n/a
		continue
	fi
	printf '%-52s %12s %12s %12s\n' "${label[$c]}" "$(median <<<"${stalls[$c]}")" \
		"$(median <<<"${gaps[$c]}")" "${failed[$c]}/$runs"
done
echo "(stall: the cut -> the first completion of a write posted after the cut began; max gap: the"
echo " longest time between consecutive completions of a run; a failed run: an error completion,"
echo " lost data, QPs never ARMED or no completion after the cut; it is left out of the medians)"
for c in a b c; do
	if [ -n "${na[$c]:-}" ]; then echo "($c) n/a: ${na[$c]}"; fi
	if [ -n "${why[$c]:-}" ]; then echo "($c) first failure: ${why[$c]}"; fi
done
