#!/usr/bin/env bash
# perftest over UD and UC, and through the RDMA CM (-R), between rvrdma (rvr0 in rvA) and
# rdma_rxe (rxe1 in rvB), each side once the client. 51-ud-uc runs the same programs
# rvrdma <-> rvrdma.
#
# These are completion checks, not data checks: perftest's bandwidth tests compare no data
# (this perftest has no validation option). What is checked is that both sides exit 0 and report
# the planned message count (for ib_send_bw the receiver's report too): perftest reports only
# after every message completed, and fails on a completion with an error status.
. "$(dirname "$0")/lib.sh"

main() {
	ktap_print_header
	ktap_set_plan 7
	dut_setup 1
	link_add "${DUT}0" veth0 && link_add rxe1 veth1 rxe || fail_rest "rdma link add: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 ||
		fail_rest "GIDs did not appear"
	# A UD message fits one packet: at most the path MTU (1024 on a 1500-byte veth).
	check "ib_send_bw -c UD 1024 B x 200 completes, rvrdma client -> rdma_rxe server" \
		pf_checked 1024 200 pf_run ib_send_bw rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -c UD -s 1024 -n 200
	check "ib_send_bw -c UD 1024 B x 200 completes, rdma_rxe client -> rvrdma server" \
		pf_checked 1024 200 pf_run ib_send_bw "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -c UD -s 1024 -n 200
	check "ib_write_bw -c UC 64 KiB x 100 completes, rvrdma client -> rdma_rxe server" \
		pf_checked 65536 100 pf_run ib_write_bw rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -c UC -s 65536 -n 100
	check "ib_send_bw -c UC 16 KiB x 100 completes, rdma_rxe client -> rvrdma server" \
		pf_checked 16384 100 pf_run ib_send_bw "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -c UC -s 16384 -n 100
	check "ib_send_bw -R (RC through the RDMA CM) 64 KiB x 100, rvrdma client -> rdma_rxe server" \
		pf_checked 65536 100 pf_cm_run ib_send_bw rxe1 10.77.0.2 "${DUT}0" -s 65536 -n 100
	check "ib_send_bw -R 64 KiB x 100, rdma_rxe client -> rvrdma server" \
		pf_checked 65536 100 pf_cm_run ib_send_bw "${DUT}0" 10.77.0.1 rxe1 -s 65536 -n 100
	check "ib_send_bw -R -c UD (UD QPs found through the CM) 1024 B x 200, rvrdma client -> rdma_rxe server" \
		pf_checked 1024 200 pf_cm_run ib_send_bw rxe1 10.77.0.2 "${DUT}0" -c UD -s 1024 -n 200
	ktap_finished
}

main "$@"
