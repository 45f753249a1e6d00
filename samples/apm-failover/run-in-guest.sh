#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
# Runs the APM failover sample inside the rvrdma test guest, end to end:
#
#   make -C samples/apm-failover                                  # on the host
#   scripts/vm -- bash samples/apm-failover/run-in-guest.sh [ARGS...]
#
# Builds two two-port devices on a fresh topology (tests/vm/lib.sh, two veth pairs):
#   rvA: rvr0 port 1 on veth0 (10.77.0.1), port 2 on veth2 (10.77.1.1)
#   rvB: rvr1 port 1 on veth1 (10.77.0.2), port 2 on veth3 (10.77.1.2)
# starts the server in rvB and the client in rvA (TCP over the 10.77.1.x link), has the client
# cut the primary link (veth0 down) 1 s into a 6 s stream and bring it back at 3 s (both sides
# then load port 1 as the new alternate path and re-arm), and prints both outputs. ARGS go to
# both programs (e.g. -s 4096, --qp-timeout 12, --retry-cnt 3; the server ignores the client's
# stream options). Exits with the client's status, or else the server's (0: every message
# verified, both sides migrated and re-armed).
# Environment: APM_SECONDS (6), APM_CUT_CMD (ip -n rvA link set veth0 down; empty: no cut),
# APM_CUT_AFTER (ms, 1000), APM_RESTORE_CMD (ip -n rvA link set veth0 up; empty: the link stays
# down), APM_RESTORE_AFTER (ms, 3000).
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/../../tests/vm/lib.sh"

bin=$here/apm_failover
# The outside world, run by the client: the cut, and the repair.
cut=()
if [ -n "${APM_CUT_CMD-ip -n $NS_A link set veth0 down}" ]; then
	cut=(--cut-cmd "${APM_CUT_CMD-ip -n $NS_A link set veth0 down}"
		--cut-after "${APM_CUT_AFTER:-1000}")
	if [ -n "${APM_RESTORE_CMD-ip -n $NS_A link set veth0 up}" ]; then
		cut+=(--restore-cmd "${APM_RESTORE_CMD-ip -n $NS_A link set veth0 up}"
			--restore-after "${APM_RESTORE_AFTER:-3000}")
	fi
fi
port=18600

fail() {
	echo "run-in-guest: $*" >&2
	exit 2
}

[ -x "$bin" ] || fail "$bin not found: build it on the host with 'make -C samples/apm-failover'"
topo_setup 2 || fail "could not build the netns/veth topology"
out=$(dut_load 2>&1) || fail "cannot load rvrdma: $out"

# A second 'rdma link add' with the same name adds port 2 (before anybody opens the device).
for l in rvr0:veth0 rvr0:veth2 rvr1:veth1 rvr1:veth3; do
	link_add "${l%:*}" "${l#*:}" || fail "rdma link add ${l%:*} netdev ${l#*:}: $LINK_OUT"
done
for d in rvr0:10.77.0.1:1 rvr0:10.77.1.1:2 rvr1:10.77.0.2:1 rvr1:10.77.1.2:2; do
	IFS=: read -r dev addr p <<<"$d"
	wait_for "$RVRDMA_WAIT" has_gid "$dev" "$addr" "$p" >/dev/null ||
		fail "no RoCE v2 GID for $addr on $dev port $p"
done
echo "== devices"
in_a rdma link show
in_b rdma link show

sout=$(mktemp) cout=$(mktemp)
in_b timeout 300 "$bin" -d rvr1 -a 10.77.0.2 -A 10.77.1.2 -p "$port" "$@" >"$sout" 2>&1 &
spid=$!
wait_for 30 eval "in_b ss -ltn | grep -q ':$port '" >/dev/null || {
	cat "$sout"
	fail "the server does not listen on TCP port $port"
}
in_a timeout 300 "$bin" -d rvr0 -a 10.77.0.1 -A 10.77.1.1 -p "$port" -t "${APM_SECONDS:-6}" \
	"${cut[@]}" "$@" 10.77.1.2 >"$cout" 2>&1
crc=$?
wait "$spid"
src=$?

echo "== server (rvB: rvr1)"
cat "$sout"
echo "== client (rvA: rvr0)"
cat "$cout"
echo "== rdma statistic (a few counters)"
for l in rvr0/1 rvr1/1; do
	rdma statistic show link "$l" | awk '{
		printf "%s", $2
		for (i = 3; i < NF; i += 2)
			if ($i ~ /^(transport_timeouts|retransmitted_pkts|retry_exceeded_err|path_migrations|path_mig_errors)$/)
				printf " %s %s", $i, $(i + 1)
		print ""
	}'
done
echo "== exit status: client $crc, server $src"
if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
	echo "== kernel log (last 40 lines)"
	dmesg | tail -n 40
fi
rm -f "$sout" "$cout"
[ "$crc" -ne 0 ] && exit "$crc"
exit "$src"
