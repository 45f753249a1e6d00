#!/usr/bin/env bash
# Affiliated async events seen from user space (pyverbs get_async_event), each forced by a real
# scenario (see tests/vm/events.py): COMM_EST, QP_ACCESS_ERR, QP_REQ_ERR, CQ_ERR (+ QP_FATAL, QP
# in Error; send and receive CQs), SQ_DRAINED, SRQ_LIMIT_REACHED, QP_LAST_WQE_REACHED. Port
# events: 04-port-events; PATH_MIG and PATH_MIG_ERR: 41-apm.
. "$(dirname "$0")/lib.sh"

scenarios=(comm_est access_err req_err cq_err rq_cq_err sq_drained srq)
ktap_print_header
ktap_set_plan ${#scenarios[@]}
dut_setup 1
pair_up
for s in "${scenarios[@]}"; do
	# A missing event leaves get_async_event waiting: the timeout turns that into a failure.
	out=$(timeout 60 $PY "$RVRDMA_TESTS_DIR/events.py" "${DUT}0" "$GA" "${DUT}1" "$GB" "$s" 2>&1)
	rc=$?
	diag "$out"
	result "async event scenario: $s" "$rc" ""
done
ktap_finished
