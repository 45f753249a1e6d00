#!/usr/bin/env bash
# Completion queues through rdma-core's rxe provider (pyverbs): creation with rxe's capacities
# (the mmapped ring has roundup_pow_of_two(cqe + 1) slots), the size and comp_vector limits,
# polling an empty CQ, arming notifications, resizing up and down, many CQs at once, extended CQs;
# then the device and the module go away cleanly (every mmap entry released).
. "$(dirname "$0")/lib.sh"

PY_POINTS=12
ktap_print_header
ktap_set_plan $((PY_POINTS + 4))
k0=$(klog_mark "11-cq: begin")
dut_setup 1

link_add "${DUT}0" veth0 || fail_rest "rdma link add ${DUT}0 type $RVRDMA_LINK_TYPE netdev veth0: $LINK_OUT"
run_points "$PY_POINTS" cq_test.py "$PY" "$RVRDMA_TESTS_DIR/cq_test.py" "${DUT}0"
check "no kernel checker report during the CQ tests" klog_clean_since "$k0"
check "rdma link delete ${DUT}0" link_del "${DUT}0"
if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
	check "rmmod rvrdma after the CQ tests" dut_unload
else
	ktap_test_skip "rmmod: not applicable to $RVRDMA_LINK_TYPE"
fi
ktap_finished
