#!/usr/bin/env bash
# The kernel's own rdma selftests (tools/testing/selftests/rdma of the test kernel's tree, written
# for rdma_rxe), each run twice: unmodified against rdma_rxe, and against rvrdma from a copy
# in a temporary directory with the link type, the module and the device names substituted.
# Nothing of them is kept in this repository: they are read from $KDIR at run time.
#
# They run in the initial network namespace (and one of their own), on interfaces they make
# (tun0, tun1, veth0/veth1, veth-a/veth-b), one at a time: rvrdma and rdma_rxe cannot both hold
# UDP port 4791 in one namespace. They print nothing (stdout goes to /dev/null): they run under
# bash -x, and a failure shows the end of the trace.
#
# Every assertion of theirs applies to rvrdma as well: the UDP socket comes with the first device
# of a namespace and goes with the last, an IPv6-only netdev works, a netdev's unregistration
# takes its device along, and the PMA port counters (ports/1/counters/port_xmit_data, ...) count
# whole IP packets both ways (on a loopback run, bytes sent = bytes received).
#
# rvrdma is not in /lib/modules: for the rvrdma runs, modprobe and modinfo of "rvrdma" are answered
# from $RVRDMA_KO (modprobe -r rvrdma leaves it loaded: unloading is 01-module's test, and every
# load runs the KUnit suites again). Other modules go to the real tools.
. "$(dirname "$0")/lib.sh"

KSFT_RDMA=$KDIR/tools/testing/selftests/rdma
KSFT_TESTS=(rxe_rping_between_netns rxe_ipv6 rxe_socket_with_netns rxe_test_NETDEV_UNREGISTER
	rxe_sent_rcvd_bytes)

main() {
	[ -d "$KSFT_RDMA" ] ||
		skip_all "no kernel rdma selftests at $KSFT_RDMA (the kernel tree scripts/build-kernel builds; KDIR=$KDIR)"
	ktap_print_header
	ktap_set_plan $((2 * ${#KSFT_TESTS[@]} + 1))
	topo_cleanup
	stage || fail_rest "cannot stage the selftests in a temporary directory"
	local out t
	out=$(dut_load 2>&1) || fail_rest "cannot load rvrdma: $out"
	for t in "${KSFT_TESTS[@]}"; do
		ksft_point rxe "$t"
		ksft_point rvrdma "$t"
	done
	# rxe_sent_rcvd_bytes compares sent with received: here each PMA counter is matched with the
	# counter it reports, after traffic between two devices.
	dut_setup 1
	pair_up
	check "rvrdma's PMA port counters report its rdma statistic counters (after ibv_rc_pingpong)" \
		pma_matches "${DUT}0"
	ktap_finished
}

# pma_matches DEV: ibv_rc_pingpong between ${DUT}1 and DEV, then each of DEV's PMA counters
# (ports/1/counters) is non-zero and equals the rdma statistic counter it reports (data in 4-byte
# units).
pma_matches() {
	local dev=$1 f stat div pv sv rc=0
	pp_run ibv_rc_pingpong "${DUT}1" 10.77.0.2 "$dev" 10.77.0.1 -s 4096 -n 20 >/dev/null || return 1
	for f in port_xmit_data:sent_bytes:4 port_rcv_data:rcvd_bytes:4 port_xmit_packets:sent_pkts:1 \
		port_rcv_packets:rcvd_pkts:1; do
		IFS=: read -r f stat div <<<"$f"
		pv=$(cat "/sys/class/infiniband/$dev/ports/1/counters/$f") || return 1
		sv=$(link_stat "$dev" "$stat")
		echo "$f $pv, $stat $sv"
		[[ $sv =~ ^[0-9]+$ ]] && [ "$pv" -gt 0 ] && [ "$pv" -eq $((sv / div)) ] || rc=1
	done
	return "$rc"
}

# stage: $STAGE/rdma-rvrdma/ has the rvrdma copies (next to a link to kselftest/, which they
# source as ../kselftest/ktap_helpers.sh), $STAGE/bin the modprobe and modinfo shims.
stage() {
	local t real_modprobe real_modinfo
	STAGE=$(mktemp -d /tmp/rvrdma-ksft-XXXXXX) || return 1
	trap 'rm -rf "$STAGE"; topo_cleanup' EXIT
	mkdir "$STAGE/rdma-rvrdma" "$STAGE/bin" || return 1
	ln -s "$KDIR/tools/testing/selftests/kselftest" "$STAGE/kselftest" || return 1
	for t in "${KSFT_TESTS[@]}"; do
		[ -f "$KSFT_RDMA/$t.sh" ] || continue
		# rdma_rxe -> rvrdma (the module), "type rxe" -> "type rvrdma", rxeN -> rvrN (devices).
		sed -e 's/\brdma_rxe\b/rvrdma/g' -e 's/\btype rxe\b/type rvrdma/g' \
			-e "s/\\brxe\\([0-9]\\)/${DUT}\\1/g" "$KSFT_RDMA/$t.sh" >"$STAGE/rdma-rvrdma/$t.sh" || return 1
	done
	real_modprobe=$(command -v modprobe) && real_modinfo=$(command -v modinfo) || return 1
	cat >"$STAGE/bin/modprobe" <<EOF || return 1
#!/bin/bash
remove=0 mods=()
for a; do case \$a in -r) remove=1 ;; -*) ;; *) mods+=("\$a") ;; esac; done
if [ "\${mods[*]}" = rvrdma ]; then
	[ "\$remove" = 1 ] && exit 0
	[ -d /sys/module/rvrdma ] && exit 0
	exec insmod $(printf %q "$RVRDMA_KO")
fi
exec $real_modprobe "\$@"
EOF
	cat >"$STAGE/bin/modinfo" <<EOF || return 1
#!/bin/bash
[ "\$*" = rvrdma ] && exec $real_modinfo $(printf %q "$RVRDMA_KO")
exec $real_modinfo "\$@"
EOF
	chmod +x "$STAGE/bin/modprobe" "$STAGE/bin/modinfo"
}

# ksft_point DRIVER TEST: one test point, TEST run against DRIVER (rxe: the kernel tree's script
# as it is; rvrdma: the staged copy, with the shims first in PATH).
ksft_point() {
	local drv=$1 t=$2 script trace rc desc left why fig
	desc="kselftest rdma/$t.sh on $([ "$drv" = rxe ] && echo "rdma_rxe (unmodified)" || echo "rvrdma (link type, module and names substituted)")"
	if [ ! -f "$KSFT_RDMA/$t.sh" ]; then
		ktap_test_skip "$desc: not in this kernel tree ($KSFT_RDMA)"
		return
	fi
	trace=$STAGE/$drv-$t.trace
	if [ "$drv" = rxe ]; then
		script=$KSFT_RDMA/$t.sh
		timeout 120 bash -x "$script" 2>"$trace"
		rc=$?
	else
		script=$STAGE/rdma-rvrdma/$t.sh
		left=$(grep -nE '\brdma_rxe\b|\btype rxe\b|\brxe[0-9]' "$script")
		if [ -n "$left" ]; then
			diag "the substitution left rdma_rxe names in $script:"
			diag "$left"
			ktap_test_fail "$desc"
			return
		fi
		PATH=$STAGE/bin:$PATH timeout 120 bash -x "$script" 2>"$trace"
		rc=$?
	fi
	why=$(settle)
	[ -n "$why" ] && diag "after $t on $drv: $why"
	fig=$(counter_figures "$t" "$trace")
	[ -n "$fig" ] && diag "$fig"
	case $rc in
	0)
		why=$(vacuous "$t" "$trace")
		if [ -n "$why" ]; then
			diag "$t exited 0 but proved nothing: $why"
			ktap_test_fail "$desc"
		else
			ktap_test_pass "$desc"
		fi
		;;
	"$KSFT_SKIP")
		ktap_test_skip "$desc: $(grep -m1 '^SKIP' "$trace" || echo "the script skipped (exit $rc)")"
		;;
	*)
		diag "$t on $drv: exit status $rc; the end of its trace:"
		diag "$(tail -n 25 "$trace")"
		ktap_test_fail "$desc"
		;;
	esac
}

# vacuous TEST TRACE: why a run that exited 0 proved nothing (nothing when it proved something).
# rxe_sent_rcvd_bytes reads the PMA port counters with cat and no error check: without the files
# (a device with no process_mad) it compares two empty differences and passes. Its trace shows
# the values ("+ echo sent NEW ORIG"): they must be numbers, and the traffic must have moved them.
vacuous() {
	local t=$1 trace=$2 w new orig
	[ "$t" = rxe_sent_rcvd_bytes ] || return 0
	for w in sent rcvd; do
		read -r _ _ _ new orig < <(grep -m1 -E "^\+ echo $w( |\$)" "$trace")
		if ! [[ $new =~ ^[0-9]+$ && $orig =~ ^[0-9]+$ ]]; then
			echo "no $w counter value (no ports/1/counters/port_xmit_data or port_rcv_data?)"
			return 0
		fi
		[ "$new" -gt "$orig" ] || echo "the $w counter did not move ($orig -> $new)"
	done
}

# counter_figures TEST TRACE: the counter values rxe_sent_rcvd_bytes saw, for the diagnostics.
counter_figures() {
	[ "$1" = rxe_sent_rcvd_bytes ] || return 0
	grep -E "^\+ echo (sent|rcvd) " "$2" | awk '{ printf "%s port_%s_data (4-byte units) %s -> %s\n", $3,
		($3 == "sent" ? "xmit" : "rcv"), $5, $4 }'
}

# settle: waits until the rdma devices a selftest made are gone and no socket holds UDP 4791 in the
# initial namespace (rvrdma and rdma_rxe take turns there); prints what was left over, if anything.
settle() {
	local d left=()
	for d in /sys/class/infiniband/rxe* /sys/class/infiniband/"$DUT"*; do
		[ -e "$d" ] || continue
		left+=("device ${d##*/}")
		wait_for "$RVRDMA_WAIT" test ! -e "$d" >/dev/null || rdma link delete "${d##*/}" 2>/dev/null
	done
	if ss -Huln sport = :4791 | grep -q ':4791'; then
		left+=("a UDP 4791 socket")
		wait_for "$RVRDMA_WAIT" eval "! ss -Huln sport = :4791 | grep -q ':4791'" >/dev/null
	fi
	[ ${#left[@]} -eq 0 ] || echo "left over: ${left[*]}"
}

main "$@"
