#!/usr/bin/env bash
# UD and UC QPs from user space: rdma-core's ibv_ud_pingpong and ibv_uc_pingpong and perftest
# over UD, UC and through the RDMA CM (-R), between rvr0 (netns rvA) and rvr1 (rvB), and against
# rdma_rxe. These are smoke tests: they show that messages complete, not that their bytes
# arrived (the stock tools do not compare data; the data checks of UD are the core's host tests
# and, through the CM, 50-rdma-cm). perftest's report is checked: it comes only after every
# message completed with a good status. 54-perftest-rxe runs perftest against rdma_rxe.
. "$(dirname "$0")/lib.sh"

main() {
	ktap_print_header
	ktap_set_plan 9
	dut_setup 1
	pair_up
	# A UD message fits one packet: at most the path MTU (1024 on a 1500-byte veth).
	check "smoke: ibv_ud_pingpong 512 B x 100 completes, rvrdma <-> rvrdma" \
		pp_run ibv_ud_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 512 -n 100
	check "smoke: ibv_ud_pingpong 1024 B (the MTU) x 50 completes, server rvA" \
		pp_run ibv_ud_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -s 1024 -n 50
	check "smoke: ibv_uc_pingpong 4096 B x 100 completes, rvrdma <-> rvrdma" \
		pp_run ibv_uc_pingpong "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -s 4096 -n 100
	check "smoke: ibv_uc_pingpong 64 KiB x 20 (64 packets a message) completes, server rvA" \
		pp_run ibv_uc_pingpong "${DUT}0" 10.77.0.1 "${DUT}1" 10.77.0.2 -s 65536 -n 20
	check "smoke: ib_send_bw -c UD 1024 B x 500 completes, rvrdma <-> rvrdma" \
		pf_checked 1024 500 pf_run ib_send_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c UD -s 1024 -n 500
	check "smoke: ib_write_bw -c UC 64 KiB x 200 completes, rvrdma <-> rvrdma" \
		pf_checked 65536 200 pf_run ib_write_bw "${DUT}1" 10.77.0.2 "${DUT}0" 10.77.0.1 -c UC -s 65536 -n 200
	check "smoke: ib_send_bw -R (connected through the RDMA CM) 64 KiB x 200 completes" \
		pf_checked 65536 200 pf_cm_run ib_send_bw "${DUT}1" 10.77.0.2 "${DUT}0" -s 65536 -n 200

	rdma link delete "${DUT}1" && link_add rxe1 veth1 rxe || fail_rest "rxe1: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 || fail_rest "rxe1's GID did not appear"
	check "smoke: ibv_ud_pingpong 512 B x 100 completes, rdma_rxe server, rvrdma client" \
		pp_run ibv_ud_pingpong rxe1 10.77.0.2 "${DUT}0" 10.77.0.1 -s 512 -n 100
	check "smoke: ibv_uc_pingpong 4096 B x 100 completes, rvrdma server, rdma_rxe client" \
		pp_run ibv_uc_pingpong "${DUT}0" 10.77.0.1 rxe1 10.77.0.2 -s 4096 -n 100
	ktap_finished
}

main "$@"
