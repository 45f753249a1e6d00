#!/usr/bin/env bash
# Completion queues through rdma-core's rxe provider (pyverbs): creation with rxe's capacities
# (the mmapped ring has roundup_pow_of_two(cqe + 1) slots), the size and comp_vector limits,
# polling an empty CQ, arming notifications, resizing up and down, many CQs at once, extended CQs;
# then the device and the module go away cleanly (every mmap entry released).
. "$(dirname "$0")/lib.sh"

PY_POINTS=12
ktap_print_header
ktap_set_plan $((PY_POINTS + 3))
dut_setup 1

link_add "${DUT}0" veth0 || fail_rest "rdma link add ${DUT}0 type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"

# The Python points, translated to KTAP ("ok DESC" / "not ok DESC", "# ..." diagnostics).
out=$("$PY" "$RVRDMA_TESTS_DIR/cq_test.py" "${DUT}0" 2>&1)
n=0
while IFS= read -r line; do
	case $line in
	"ok "*) ktap_test_pass "${line#ok }"; n=$((n + 1)) ;;
	"not ok "*) ktap_test_fail "${line#not ok }"; n=$((n + 1)) ;;
	*) diag "${line#\# }" ;;
	esac
done <<<"$out"
while [ "$n" -lt "$PY_POINTS" ]; do
	ktap_test_fail "cq_test.py point $((n + 1)) missing"
	n=$((n + 1))
done

check "no kernel warning or BUG during the CQ tests" eval "! dmesg | grep -E 'WARNING:|BUG:|Oops|refcount_t'"
check "rdma link delete ${DUT}0" link_del "${DUT}0"
if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
	check "rmmod rvrdma after the CQ tests" dut_unload
else
	ktap_test_pass "rmmod: not applicable to $RVRDMA_LINK_TYPE"
fi
ktap_finished
