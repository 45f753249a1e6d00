#!/usr/bin/env bash
# On-demand paging (IBV_ACCESS_ON_DEMAND; see docs/odp.md and tests/vm/odp.py): two devices, each
# with an ODP MR over its own anonymous mapping, RC between them. Send, RDMA Write, RDMA Read and
# fetch-and-add, each compared byte for byte through the mappings, after the pages were taken
# away (madvise(MADV_DONTNEED), munmap + mmap at the same address) so that every transfer faults
# again and must see the process's current pages; a Send and a Write from pinned memory, sent by
# reference to its pages (tx_paged on) and copied from the packets' fragments into the faulted
# ODP target; ibv_advise_mr prefetches (mincore shows what was faulted in) and refuses a bad lkey
# or range; a write into a range unmapped for good is a remote access error. Last, the devices
# counted the faults they handled and the payloads read in fragments.
. "$(dirname "$0")/lib.sh"

POINTS=10

main() {
	ktap_print_header
	if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
		ktap_set_plan $((POINTS + 3))
	else
		ktap_set_plan $((POINTS + 1))
	fi
	dut_setup 1
	pair_up
	if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
		echo 1 >"/sys/class/infiniband/${DUT}0/tx_paged" || diag "cannot turn tx_paged on"
	fi
	run_points "$POINTS" "odp.py $RVRDMA_LINK_TYPE -> $RVRDMA_LINK_TYPE" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/odp.py" "${DUT}0" "$GA" "${DUT}1" "$GB"
	if [ "$RVRDMA_LINK_TYPE" = rvrdma ]; then
		local fa fb
		fa=$(link_stat "${DUT}0" odp_faults)
		fb=$(link_stat "${DUT}1" odp_faults)
		diag "odp_faults: ${DUT}0 $fa, ${DUT}1 $fb; odp_drops: $(link_stat "${DUT}0" odp_drops)," \
			"$(link_stat "${DUT}1" odp_drops)"
		if [ "${fa:-0}" -gt 0 ] && [ "${fb:-0}" -gt 0 ]; then
			ktap_test_pass "both devices faulted ODP memory in (odp_faults)"
		else
			ktap_test_fail "both devices faulted ODP memory in (odp_faults: $fa, $fb)"
		fi
		local rp
		rp=$(link_stat "${DUT}1" rx_paged_pkts)
		diag "tx_paged_pkts: ${DUT}0 $(link_stat "${DUT}0" tx_paged_pkts)"
		if [ "${rp:-0}" -gt 0 ]; then
			ktap_test_pass "${DUT}1 copied payloads from packet fragments into ODP memory (rx_paged_pkts $rp)"
		else
			ktap_test_fail "${DUT}1 copied payloads from packet fragments into ODP memory (rx_paged_pkts ${rp:-none})"
		fi
	fi
	ktap_finished
}

main "$@"
