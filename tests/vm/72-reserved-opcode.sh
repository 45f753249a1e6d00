#!/usr/bin/env bash
# Seed 001 over the wire (IBA Table 17-7, "Unsupported or Reserved Opcode"; see
# tests/vm/reserved_opcode.py): an RC QP pair rvr0 (rvA) <-> rvr1 (rvB), then crafted packets
# with a valid ICRC from rvA to rvr1's QP. A reserved RC opcode ahead of the expected PSN draws a
# sequence NAK and the QP stays in RTS; a manufacturer-specific opcode at the expected PSN is
# dropped; a reserved RC opcode at the expected PSN draws an Invalid Request NAK: the QP enters
# Error, its receives are flushed and QP_REQ_ERR is raised, and the requester's next Write
# fails. The receive path queues no packet of an opcode it does not know: it decodes it where
# it arrives and hands its BTH to the QP. rvrdma only: rdma_rxe drops an unknown opcode
# (rxe_recv.c), and the counter checked is rvrdma's.
. "$(dirname "$0")/lib.sh"

POINTS=4

main() {
	[ "$RVRDMA_LINK_TYPE" = rvrdma ] || skip_all "rdma_rxe drops unknown opcodes: needs RVRDMA_LINK_TYPE=rvrdma"
	ktap_print_header
	ktap_set_plan $((POINTS + 2))
	local t0
	t0=$(klog_mark "72-reserved-opcode start")
	dut_setup 1
	pair_up
	run_points "$POINTS" "reserved_opcode.py" timeout 600 \
		"$PY" "$RVRDMA_TESTS_DIR/reserved_opcode.py" "${DUT}0" "$GA" "${DUT}1" "$GB" \
		"$NS_A" 10.77.0.1 10.77.0.2
	check "no kernel report during the reserved-opcode run" klog_clean_since "$t0"
	ktap_finished
}

main "$@"
