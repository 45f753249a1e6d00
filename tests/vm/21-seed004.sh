#!/usr/bin/env bash
# The Initialized-state rules of seed 004 seen from user space: Post Send in Init fails at once
# (its WR never runs, not even once the QP reaches RTS), Post Receive is accepted, and inbound
# packets are dropped (the peer's Send is never acknowledged; rvrdma counts the drops).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 2
dut_setup 1
pair_up
before=$(link_stat "${DUT}1" qp_dropped)
out=$($PY "$RVRDMA_TESTS_DIR/seed004.py" "${DUT}0" "$GA" "${DUT}1" "$GB" 2>&1)
rc=$?
diag "$out"
what="seed 004: Post Send refused in Init (the WR never runs), Post Receive accepted,"
result "$what inbound packets dropped" "$rc" ""
after=$(link_stat "${DUT}1" qp_dropped)
check "the dropped packets are counted (qp_dropped $before -> $after)" test "$after" -gt "$before"
ktap_finished
