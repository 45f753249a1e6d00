#!/usr/bin/env bash
# In-guest part of scripts/bench: runs each perftest line over rvrdma (rvr0 in rvA, rvr1 in
# rvB) and right after over rdma_rxe on the same veth pair, and prints the comparison table:
# each line's figure for both drivers, the ratio, and the requester's retries during the line
# (completer_retry_err, which both drivers count; on a clean veth it must stay 0). Then the scale
# line (1,024 QPs at once against one), the memory one QP costs, and the guest's memcpy
# bandwidth / 2 (a software RoCE device copies every byte at least twice: the limit it can
# reach). -b KO adds a column for a second build of rvrdma.ko, loaded in its turn: a same-boot
# A/B of two builds.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"
trap - EXIT

size=65536 bw_iters=2000 lat_iters=20000 rps=0 only= ab=0 rounds=1 switch=rx_spread ko_b=
while getopts s:n:rl:ak:w:b: o; do
	case $o in
	a) ab=1 ;;
	b) ko_b=$OPTARG ;;
	k) rounds=$OPTARG ;;
	w) switch=$OPTARG ;;
	l) only=$OPTARG ;;
	s) size=$OPTARG ;;
	n) bw_iters=$OPTARG lat_iters=$OPTARG ;;
	r) rps=1 ;;
	*) exit 2 ;;
	esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "-k takes a count of rounds (1 or more)" >&2; exit 2; }
[[ $switch =~ ^(rx_spread|tx_burst|tx_paged)$ ]] || { echo "-w takes rx_spread, tx_burst or tx_paged" >&2; exit 2; }
[ -z "$ko_b" ] || [ "$ab" = 0 ] || { echo "-a and -b each add a column: give one of them" >&2; exit 2; }
[ -z "$ko_b" ] || [ -f "$ko_b" ] || { echo "-b $ko_b: no such file" >&2; exit 2; }
# The 4 KiB bandwidth lines move as many bytes as the SIZE ones: at 2,000 messages a 4 KiB line
# lasted a quarter of a second, which one stall of the receive path (up to 20 ms under TCG) or
# a run's start could move by nearly a tenth.
small_iters=$((bw_iters * size / 4096))
[ "$small_iters" -ge "$bw_iters" ] || small_iters=$bw_iters
# Each line: a name, the tool and its arguments (without -n, the iteration count of its kind).
lines=(
	"send_bw|ib_send_bw -s $size"
	"write_bw|ib_write_bw -s $size"
	"read_bw|ib_read_bw -s $size"
	"send_bw 4K|ib_send_bw -s 4096 -n $small_iters"
	"write_bw 4K|ib_write_bw -s 4096 -n $small_iters"
	"read_bw 4K|ib_read_bw -s 4096 -n $small_iters"
	"atomic_bw|ib_atomic_bw"
	"send_lat 2B|ib_send_lat -s 2"
	"send_lat|ib_send_lat -s 64"
	"write_lat 2B|ib_write_lat -s 2"
	"write_lat|ib_write_lat -s 64"
	"read_lat|ib_read_lat -s 64"
	"atomic_lat|ib_atomic_lat"
	# Scale: 1,024 QPs moving data at once, against one QP with the same message size. perftest
	# sizes the CQ at QPs x iterations (below its TX depth): 20 x 1,024 fits both drivers'
	# 32,767 CQEs, 32 would not.
	"write_bw 4K q1|ib_write_bw -s 4096 -q 1 -n 200"
	"write_bw 4K q1024|ib_write_bw -s 4096 -q 1024 -n 20"
)
# -l REGEX: only the lines whose name matches. -a: an rvrdma set with a switch off as well, the
# rvrdma set then having it on (-w: rx_spread, the default, tx_burst or tx_paged).
if [ -n "$only" ]; then
	sel=()
	for l in "${lines[@]}"; do [[ ${l%%|*} =~ $only ]] && sel+=("$l"); done
	lines=("${sel[@]}")
fi
declare -A res retries mem runs tries

# load_build KO: rvrdma.ko from KO loaded, in place of another build; loaded_ko says which.
loaded_ko=$RVRDMA_KO
load_build() {
	[ "$loaded_ko" = "$1" ] && [ -d /sys/module/rvrdma ] && return 0
	dut_unload && insmod "$1" && loaded_ko=$1
}

# set_up SET DEV0 DEV1: DEV0 on veth0 (client, rvA) and DEV1 on veth1 (server, rvB). SET is the
# driver (rvrdma, rxe), rvrdma-solo (rvrdma with the -w switch off; with -a, the rvrdma set has
# it on) or rvrdma-b (the -b build).
set_up() {
	local type=${1%-solo} d0=$2 d1=$3
	type=${type%-b}
	topo_setup 1 >/dev/null
	if [ "$type" = rvrdma ]; then
		if [ "$1" = rvrdma-b ]; then load_build "$ko_b"; else load_build "$RVRDMA_KO"; fi || return 1
	fi
	if ! { link_add "$d0" veth0 "$type" && link_add "$d1" veth1 "$type"; }; then
		echo "link add: $LINK_OUT" >&2
		return 1
	fi
	wait_for 30 has_gid "$d0" 10.77.0.1 >/dev/null && wait_for 30 has_gid "$d1" 10.77.0.2 >/dev/null
	if [[ $1 == *-solo ]]; then
		echo 0 >"/sys/class/infiniband/$d0/$switch" && echo 0 >"/sys/class/infiniband/$d1/$switch"
	elif [ "$ab" = 1 ] && [ "$1" = rvrdma ]; then
		# The A/B's other column has the switch on, whatever its default.
		echo 1 >"/sys/class/infiniband/$d0/$switch" && echo 1 >"/sys/class/infiniband/$d1/$switch"
	fi
	if [ "$rps" = 1 ]; then
		# Receive packet steering on both veth ends: received packets are processed on any CPU,
		# not only on the sender's (veth hands packets to the sending CPU's backlog).
		in_a sh -c 'echo 3 > /sys/class/net/veth0/queues/rx-0/rps_cpus'
		in_b sh -c 'echo 3 > /sys/class/net/veth1/queues/rx-0/rps_cpus'
	fi
}

# run_line SET DEV0 DEV1 LINE: one line on fresh links of SET (see set_up), DEV1 the server.
run_line() {
	local type=$1 d0=$2 d1=$3 l=$4 name spec tool out v r0 r1 k0 k1 dev
	local -a args words
	set_up "$type" "$d0" "$d1" || { res[$type,${l%%|*}]=fail; return 1; }
	name=${l%%|*} spec=${l#*|}
	read -ra words <<<"$spec"
	tool=${words[0]} args=("${words[@]:1}")
	# The default iteration count of its kind, unless the line sets its own.
	if [[ " ${args[*]} " != *" -n "* ]]; then
		if [[ $tool == *_bw ]]; then args+=(-n "$bw_iters"); else args+=(-n "$lat_iters"); fi
	fi
	r0=$(retry_count "$d0" "$d1") k0=$(backlog_drops) c0=$(cpu_counts)
	out=$(PP_TIMEOUT=900 pf_run "$tool" "$d1" 10.77.0.2 "$d0" 10.77.0.1 "${args[@]}" 2>&1)
	r1=$(retry_count "$d0" "$d1") k1=$(backlog_drops) c1=$(cpu_counts)
	# The result line is the first line starting with the message size: BW average is its
	# 4th column, MsgRate the 5th (a bandwidth tool's), t_typical the 5th (a latency tool's).
	if [ "$(unit_of "$tool")" = MB/s ]; then
		v=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $4; exit }' <<<"$out")
	else
		v=$(awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $5; exit }' <<<"$out")
	fi
	res[$type,$name]=${v:-fail}
	# A failed or empty figure: what the tool said, to tell why.
	if [[ ! $v =~ ^[0-9.]+$ ]] || awk -v v="$v" 'BEGIN { exit !(v == 0) }'; then
		tail -n 12 <<<"$out" | sed 's/^/#   /' >&2
	fi
	retries[$type,$name]=$((r1 - r0))
	echo "# $type $name ($tool ${args[*]}): ${v:-failed}, retries $((r1 - r0))," \
		"backlog drops $((k1 - k0))" >&2
	echo "#   $(cpu_delta "$c0" "$c1")" >&2
	if [[ $type == rvrdma* ]]; then
		for dev in "$d0" "$d1"; do
			echo "#   $dev: $(rdma statistic show link "$dev/1" | tr ' ' '\n' | paste - - |
				grep -E '^(retrans|completer_retry|dup|rx_queue|transport_timeouts|seq_naks|out_of_seq|rcvd_rnr|send_err|credit_probes|tx_cpu|tx_handoff|tx_doorbell|tx_linger|tx_burst|tx_paged|rx_paged)' |
				tr '\t\n' '= ')" >&2
		done
	else
		echo "#   $(rdma statistic show link "$d0/1" | tr ' ' '\n' | paste - - |
			grep -E 'retrans|retry|dup' | tr '\t\n' '= ')" >&2
	fi
	topo_cleanup
}

# qp_memory SET DEV0 DEV1: the memory one RC QP costs on SET, into mem[SET].
qp_memory() {
	set_up "$1" "$2" "$3" || return 1
	mem[$1]=$("$PY" "$here/qp_memory.py" "$2" 1024 2>&1 | tail -1)
	echo "# $1: memory per RC QP ${mem[$1]}" >&2
	topo_cleanup
}

# unit_of TOOL: the unit of a line's figure. Atomics move 8 bytes each, so their bandwidth in
# MB/s has two significant digits at most: their message rate (Mpps) tells the drivers apart.
unit_of() {
	case $1 in
	ib_atomic_bw) echo Mpps ;;
	*_bw) echo MB/s ;;
	*) echo usec ;;
	esac
}

# retry_count DEV...: completer_retry_err of the DEVs, added up.
retry_count() {
	local d n=0 v
	for d in "$@"; do
		v=$(link_stat "$d" completer_retry_err)
		n=$((n + ${v:-0}))
	done
	echo "$n"
}

# backlog_drops: packets the CPUs' receive backlogs dropped so far (/proc/net/softnet_stat,
# second column, hexadecimal).
backlog_drops() {
	local n=0 d
	while read -r _ d _; do n=$((n + 16#$d)); done </proc/net/softnet_stat
	echo "$n"
}

# cpu_counts: the guest's inter-processor interrupts (function calls, reschedules, IRQ work,
# each summed over the CPUs), then each CPU's idle and busy jiffies, on one line.
cpu_counts() {
	local k
	for k in CAL RES IWI; do
		awk -v k="$k:" '$1 == k { n = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i } END { printf "%d ", n }' /proc/interrupts
	done
	awk '/^cpu[0-9]/ { b = 0; for (i = 2; i <= NF; i++) if (i != 5 && i != 6) b += $i; printf "%s %s ", $5 + $6, b }' /proc/stat
}

# cpu_delta BEFORE AFTER: what a run cost in IPIs, and each CPU's idle share (the setup and the
# tool's start are inside the window: compare drivers, not absolute shares).
cpu_delta() {
	local -a a b
	local i out
	read -ra a <<<"$1"
	read -ra b <<<"$2"
	out="IPIs: calls $((b[0] - a[0])), reschedules $((b[1] - a[1])), IRQ work $((b[2] - a[2])); idle:"
	for ((i = 3; i + 1 < ${#b[@]}; i += 2)); do
		local idle=$((b[i] - a[i])) busy=$((b[i + 1] - a[i + 1]))
		out+=" $(( idle * 100 / (idle + busy > 0 ? idle + busy : 1) ))%"
	done
	echo "$out"
}

# memcpy_mbs: the guest's memcpy bandwidth in MB/s (64 MiB buffers, one CPU).
memcpy_mbs() {
	"$PY" - <<'PYEOF'
import time
n = 64 << 20
a, b = bytearray(n), bytearray(b"\x5a" * n)
m = memoryview(a)
best = 0.0
for _ in range(5):
    t = time.perf_counter()
    for _ in range(8):
        m[:] = b
    best = max(best, 8 * n / (time.perf_counter() - t) / 1e6)
print("%.0f" % best)
PYEOF
}

dut_load >/dev/null
cpy=$(memcpy_mbs)
echo "# guest memcpy ${cpy} MB/s" >&2
# Which CRC-32 the module measured faster for the ICRC when it loaded (net/crc32.rs).
dmesg | grep -o 'ICRC: crc32_le.*' | tail -1 | sed 's/^/# rvrdma /' >&2
# Before the lines: the last ones (1,024 QPs) can keep a driver busy past its timeout.
qp_memory rvrdma rvr0 rvr1
qp_memory rxe rxe0 rxe1
# Each line runs on every driver in turn, back to back: the host's speed drifts by up to 2x
# within minutes, so only figures taken close together make a fair ratio. -a: rvrdma with the
# -w switch off too, as an A/B column.
sets=(rvrdma rxe)
[ "$ab" = 1 ] && sets=(rvrdma-solo rvrdma rxe)
[ -n "$ko_b" ] && sets=(rvrdma rvrdma-b rxe)
# median VALUE...: the middle one of the VALUEs (the lower of the two middle ones for an even
# count); "fail" if any of them is not a figure.
median() {
	local -a v
	mapfile -t v < <(printf '%s\n' "$@" | sort -g)
	if printf '%s\n' "$@" | grep -qvE '^[0-9.]+$'; then echo fail; else echo "${v[$(((${#v[@]} - 1) / 2))]}"; fi
}

# -k ROUNDS: each line ROUNDS times, the drivers alternating, and the median in the table (a
# single run of a 4 KiB line can land far from the next one in the same boot). Each round starts
# with the next driver: the first run of a line after another line measures lower (about 15% in
# an A/A test, docs/experiments.md), and a fixed order would charge that to one driver.
t0=$SECONDS
for l in "${lines[@]}"; do
	name=${l%%|*} spec=${l#*|}
	unit=$(unit_of "${spec%% *}")
	for ((k = 0; k < rounds; k++)); do
		for ((i = 0; i < ${#sets[@]}; i++)); do
			t=${sets[(i + k) % ${#sets[@]}]}
			retries[$t,$name]=0
			if [ "$t" = rxe ]; then run_line rxe rxe0 rxe1 "$l"; else run_line "$t" rvr0 rvr1 "$l"; fi
			runs[$t,$name]+="${res[$t,$name]} "
			# One line per run for scripts/bench -B, which pools the runs of several boots.
			echo "#run|$t|$name|$unit|$k|${res[$t,$name]}|${retries[$t,$name]}" >&2
			tries[$t,$name]=$((${tries[$t,$name]:-0} + ${retries[$t,$name]}))
		done
	done
	for t in "${sets[@]}"; do
		# shellcheck disable=SC2086 # the runs' figures, one word each
		res[$t,$name]=$(median ${runs[$t,$name]})
		retries[$t,$name]=${tries[$t,$name]}
	done
done
echo "# the lines took $((SECONDS - t0)) s" >&2

# ratio A B UNIT: A against B, > 1 when A is better (rates A/B, latency B/A); "-" if either
# is missing.
ratio() {
	if [[ $1 =~ ^[0-9.]+$ && $2 =~ ^[0-9.]+$ ]] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && b > 0) }'; then
		if [ "$3" != usec ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'
		else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", b / a }'; fi
	else
		echo -
	fi
}

printf '\n%-18s %-6s %12s %12s %8s %10s' test unit rvrdma rxe ratio retries
[ "$ab" = 1 ] && printf ' %12s %8s %8s' "$switch=0" ratio "on/off"
[ -n "$ko_b" ] && printf ' %12s %8s %8s' "build B" ratio "B/A"
echo
for l in "${lines[@]}"; do
	name=${l%%|*} spec=${l#*|}
	read -r tool _ <<<"$spec"
	a=${res[rvrdma,$name]} b=${res[rxe,$name]}
	unit=$(unit_of "$tool")
	r=$(ratio "$a" "$b" "$unit")
	printf '%-18s %-6s %12s %12s %8s %10s' "$name" "$unit" "$a" "$b" "$r" \
		"${retries[rvrdma,$name]}/${retries[rxe,$name]}"
	if [ "$ab" = 1 ]; then
		s=${res[rvrdma-solo,$name]}
		printf ' %12s %8s %8s' "$s" "$(ratio "$s" "$b" "$unit")" "$(ratio "$a" "$s" "$unit")"
	fi
	if [ -n "$ko_b" ]; then
		s=${res[rvrdma-b,$name]}
		printf ' %12s %8s %8s' "$s" "$(ratio "$s" "$b" "$unit")" "$(ratio "$s" "$a" "$unit")"
	fi
	echo
done
for t in rvrdma rxe; do
	a=${res[$t,write_bw 4K q1]:-} b=${res[$t,write_bw 4K q1024]:-}
	if [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ ]]; then
		echo "scale, $t: 1,024 QPs reach $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.0f%%", 100 * b / a }') of one QP's write bandwidth (4 KiB)"
	fi
done
echo "memory per RC QP (128/128 WRs): rvrdma ${mem[rvrdma]}, rdma_rxe ${mem[rxe]}"
echo "guest memcpy ${cpy} MB/s; the soft-RoCE limit (memcpy / 2) $((cpy / 2)) MB/s: rvrdma's" \
	"best bandwidth line reaches $(for l in "${lines[@]}"; do n=${l%%|*}; v=${res[rvrdma,$n]}; [[ $n == *_bw* && $n != atomic_bw && $v =~ ^[0-9.]+$ ]] && echo "$v"; done |
		sort -g | tail -1 | awk -v c="$cpy" '{ printf "%.1f%%", 200 * $1 / c } END { if (NR == 0) printf "-" }') of it"
echo "(ratio > 1: rvrdma better; retries: rvrdma/rxe completer_retry_err during the line;" \
	"bandwidth ${bw_iters} iterations (the 4 KiB lines ${small_iters}), latency ${lat_iters}; each line ${rounds} time(s), the median;" \
	"RPS on the veths:" \
	"$([ "$rps" = 1 ] && echo "on (rps_cpus=3)" || echo off))"
