#!/usr/bin/env bash
# Memory regions through stock rdma-core (pyverbs): user MRs of 1 B .. 64 MiB with various access
# flags register, lkey == rkey != 0 and unique, ib_core's access rule (remote write/atomic needs
# local write) gives EINVAL, on-demand paging is refused, dereg works, the device stays healthy,
# and the MR KUnit suite passed at module load.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 9

d=${DUT}0
if ! ibv_devinfo -d "$d" >/dev/null 2>&1; then
	dut_setup 1
	link_add "$d" veth0 || fail_rest "rdma link add $d type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"
fi
wait_for "$RVRDMA_WAIT" port_is "$d" ACTIVE >/dev/null

# RVRDMA_MR_MAX: largest MR size (bytes); the debug kernel under TCG pins 64 MiB too slowly.
out=$($PY "$RVRDMA_TESTS_DIR/mr_reg.py" "$d" "${RVRDMA_MR_MAX:-$((64 << 20))}" 2>&1)
rc=$?
n=0
while IFS= read -r line; do
	case $line in
	"ok "*) ktap_test_pass "${line#ok }"; n=$((n + 1)) ;;
	"not ok "*) ktap_test_fail "${line#not ok }"; n=$((n + 1)) ;;
	*) [ -n "$line" ] && diag "$line" ;;
	esac
done <<<"$out"
[ "$rc" -ne 0 ] && diag "mr_reg.py exited with $rc"
while [ "$n" -lt 7 ]; do
	ktap_test_fail "not run: mr_reg.py stopped early (rc=$rc)"
	n=$((n + 1))
done

check "ibv_devinfo -d $d still works" ibv_devinfo -d "$d"
if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
	kunit_mr_ok() { dmesg | grep -E 'ok [0-9]+ rvrdma_mr$' | grep -v 'not ok' | grep -q .; }
	check "KUnit suite rvrdma_mr passed at module load" kunit_mr_ok || diag "$(dmesg | grep -A2 -E 'rvrdma_mr|not ok' | tail -40)"
else
	ktap_test_skip "KUnit suite rvrdma_mr (rvrdma only)"
fi
ktap_finished
