#!/usr/bin/env bash
# R_Key violations between two rvrdma devices, seen from user space (seed 001, Table 17-7
# "R_Key Violation", class C; see tests/vm/rkey.py): an RDMA READ and an RDMA WRITE with an
# R_Key naming no MR, a wrong key byte, an MR of another PD, a range past the MR's end, a
# deregistered MR and an MR without the access right each give the requester
# IBV_WC_REM_ACCESS_ERR, the target IBV_EVENT_QP_ACCESS_ERR, and leave memory unchanged
# (compared byte by byte); two controls show a good R_Key moving the bytes. The counters then
# show no packet dropped for a P_Key mismatch.
. "$(dirname "$0")/lib.sh"

POINTS=39
ktap_print_header
ktap_set_plan $((POINTS + 2))
dut_setup 1
pair_up

# A missing completion or event makes the helper report that point as failed; the timeout only
# guards against a hang.
run_points "$POINTS" rkey.py timeout 300 "$PY" "$RVRDMA_TESTS_DIR/rkey.py" "${DUT}0" "$GA" "${DUT}1" "$GB"
check "no P_Key violation counted on either device (pkey_violations = 0)" \
	test "$(link_stat "${DUT}0" pkey_violations)" = 0 -a "$(link_stat "${DUT}1" pkey_violations)" = 0
ktap_finished
