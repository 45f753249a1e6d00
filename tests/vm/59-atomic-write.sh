#!/usr/bin/env bash
# IBA 1.5 ATOMIC WRITE from user space (rdma-core's ibv_qp_ex, ibv_wr_atomic_write; see
# tests/vm/atomic_write.py): rvrdma to rvrdma, rvrdma to rdma_rxe and rdma_rxe to rvrdma. Each
# direction: several writes complete as IBV_WC_ATOMIC_WRITE and the target MR, compared whole
# with a model, holds exactly those 8-byte words; a misaligned address gives
# IBV_WC_REM_INV_REQ_ERR and an MR without remote write IBV_WC_REM_ACCESS_ERR, memory unchanged.
# Plus the device capabilities (ATOMIC_WRITE, FLUSH_GLOBAL, not FLUSH_PERSISTENT) and MR
# registration with the flush access flags. FLUSH itself cannot be posted from rdma-core 44
# (ibv_wr_flush came later): the host tests (rust/core tests/sim/rules/atomic_write_flush.rs)
# cover it.
. "$(dirname "$0")/lib.sh"

POINTS=3

main() {
	if [ "$RVRDMA_LINK_TYPE" != rvrdma ]; then
		# The reference behaviour: rdma_rxe to rdma_rxe (its capabilities differ: it offers
		# FLUSH_PERSISTENT for persistent-memory MRs).
		ktap_print_header
		ktap_set_plan $((POINTS + 1))
		dut_setup 1
		pair_up
		run_points "$POINTS" "atomic_write.py $RVRDMA_LINK_TYPE -> $RVRDMA_LINK_TYPE" timeout 300 \
			"$PY" "$RVRDMA_TESTS_DIR/atomic_write.py" "${DUT}0" "$GA" "${DUT}1" "$GB"
		ktap_finished
		return
	fi
	ktap_print_header
	ktap_set_plan $((POINTS + 4 + 2 * (POINTS + 1)))
	dut_setup 1
	pair_up
	run_points $((POINTS + 3)) "atomic_write.py rvrdma -> rvrdma" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/atomic_write.py" "${DUT}0" "$GA" "${DUT}1" "$GB" --caps "${DUT}0"
	rxe_on_b
	run_points "$POINTS" "atomic_write.py rvrdma -> rxe" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/atomic_write.py" "${DUT}0" "$GA" rxe1 "$GX"
	run_points "$POINTS" "atomic_write.py rxe -> rvrdma" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/atomic_write.py" rxe1 "$GX" "${DUT}0" "$GA"
	ktap_finished
}

main "$@"
