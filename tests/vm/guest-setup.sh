#!/usr/bin/env bash
# Runs inside the guest for scripts/vm: sets up the demo topology (rvrdma loaded, rvA/rvB wired by
# veth0<->veth1 and veth2<->veth3, rvr0 on veth0 and rvr1 on veth1) unless RVRDMA_SETUP=0, then runs
# the command given, or an interactive shell.
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

setup() {
	# shellcheck source=tests/vm/lib.sh
	. "$(dirname "$0")/lib.sh" || return 1
	trap - EXIT
	local out
	topo_setup 2 || { echo "rvrdma: could not build the netns/veth topology" >&2; return 1; }
	out=$(dut_load 2>&1) || { echo "rvrdma: cannot load the $RVRDMA_LINK_TYPE driver: $out" >&2; return 1; }
	link_add "${DUT}0" veth0 || { echo "rvrdma: rdma link add ${DUT}0 netdev veth0: $LINK_OUT" >&2; return 1; }
	link_add "${DUT}1" veth1 || { echo "rvrdma: rdma link add ${DUT}1 netdev veth1: $LINK_OUT" >&2; return 1; }
	wait_for "$RVRDMA_WAIT" port_is "${DUT}0" ACTIVE >/dev/null
	wait_for "$RVRDMA_WAIT" port_is "${DUT}1" ACTIVE >/dev/null
	return 0
}

banner() {
	cat <<BANNER
rvrdma guest ($(uname -r)). Topology:
  netns rvA: veth0 10.77.0.1 fd77::1 (rdma ${DUT:-rvr}0)   veth2 10.77.1.1 fd77:1::1
  netns rvB: veth1 10.77.0.2 fd77::2 (rdma ${DUT:-rvr}1)   veth3 10.77.1.2 fd77:1::2
Try: ibv_devices; ibv_devinfo -v -d rvr0; rvA rdma link show (rvA/rvB: aliases for ip netns exec)
(run-all.sh rebuilds the topology for each test.) Exit the shell to power the guest off.
BANNER
}

setup_rc=0
if [ "${RVRDMA_SETUP:-1}" = 1 ]; then
	setup
	setup_rc=$?
fi

if [ $# -gt 0 ]; then
	if [ "$setup_rc" -ne 0 ]; then
		echo "rvrdma: guest setup failed; running the command anyway" >&2
	fi
	"$@"
	rc=$?
	[ "$setup_rc" -ne 0 ] && [ "$rc" -eq 0 ] && rc=1
	exit "$rc"
fi
[ "${RVRDMA_SETUP:-1}" = 1 ] && banner
[ "$setup_rc" -ne 0 ] && echo "rvrdma: guest setup failed (see above); the shell is yours anyway" >&2
# The shell starts in the repo; where the repo is not visible, say so and start where we are.
cd "${RVRDMA_TOP:-/}" || echo "rvrdma: cannot cd to ${RVRDMA_TOP:-/}; the shell starts in $PWD" >&2
exec bash --rcfile "$(dirname "$0")/guest-bashrc" -i
