#!/usr/bin/env bash
# Address handles from pyverbs: 64 created with RoCE v2 GRHs and destroyed; one without a GRH is
# refused (RoCE addresses are IP addresses).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 1
dut_setup 1
link_add "${DUT}0" veth0 || fail_rest "rdma link add: $LINK_OUT"
wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 || fail_rest "GIDs did not appear"
g=$(sysfs_gid_index "${DUT}0" "$(gid_full 10.77.0.1)" "RoCE v2")
out=$($PY "$RVRDMA_TESTS_DIR/ah.py" "${DUT}0" "$g" 2>&1)
rc=$?
diag "$out"
result "AHs created, destroyed; no-GRH AH refused" "$rc" ""
ktap_finished
