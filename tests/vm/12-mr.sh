#!/usr/bin/env bash
# Memory regions through stock rdma-core (pyverbs): user MRs of 1 B .. 64 MiB with various access
# flags register, lkey == rkey != 0 and unique, ib_core's access rule (remote write/atomic needs
# local write) gives EINVAL, on-demand paging is refused, dereg works, the device stays healthy,
# and the MR KUnit suite passed at module load.
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 10

d=${DUT}0
dut_setup 1
link_add "$d" veth0 || fail_rest "rdma link add $d type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"
wait_for "$RVRDMA_WAIT" port_is "$d" ACTIVE >/dev/null || fail_rest "$d did not become ACTIVE"

# RVRDMA_MR_MAX: largest MR size (bytes); the debug kernel under TCG pins 64 MiB too slowly.
run_points 7 mr_reg.py "$PY" "$RVRDMA_TESTS_DIR/mr_reg.py" "$d" "${RVRDMA_MR_MAX:-$((64 << 20))}"

check "ibv_devinfo -d $d still works" ibv_devinfo -d "$d"
if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
	# Every load of the module ran the suite (at least the one above), and each said ok.
	kunit_mr_ok() {
		local log good bad
		log=$(dmesg) || return 1
		good=$(grep -cE '^\[[^]]*\] ok [0-9]+ rvrdma_mr$' <<<"$log")
		bad=$(grep -cE '^\[[^]]*\] (not ok [0-9]+ rvrdma_mr( |$)|ok [0-9]+ rvrdma_mr #)' <<<"$log")
		echo "rvrdma_mr: $good report(s) ok, $bad not ok or skipped"
		[ "$good" -gt 0 ] && [ "$bad" -eq 0 ]
	}
	check "KUnit suite rvrdma_mr passed at module load" kunit_mr_ok
else
	ktap_test_skip "KUnit suite rvrdma_mr (rvrdma only)"
fi
ktap_finished
