#!/usr/bin/env bash
# The limits and capability flags rvrdma advertises are true (tests/vm/limits.py): each limit
# `ibv_devinfo -v` shows is reached and one past it is refused with EINVAL (queue depths, SGEs,
# CQ size, SRQ depth and SGEs, Read/atomic depths, the P_Key table), and every capability flag set
# names the test that proves it. Then rvrdma's and rdma_rxe's `ibv_devinfo -v` side by side, and
# the same limit checks run on rdma_rxe for comparison (informative).
. "$(dirname "$0")/lib.sh"

POINTS=11

main() {
	ktap_print_header
	ktap_set_plan $((POINTS + 3))
	local t0
	t0=$(klog_mark "62-devinfo-limits start")
	dut_setup 1
	link_add "${DUT}0" veth0 || fail_rest "rdma link add ${DUT}0: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 || fail_rest "${DUT}0's GID did not appear"
	GA=$(sysfs_gid_index "${DUT}0" "$(gid_full 10.77.0.1)" "RoCE v2")
	run_points "$POINTS" "limits.py $RVRDMA_LINK_TYPE" timeout 300 \
		"$PY" "$RVRDMA_TESTS_DIR/limits.py" "${DUT}0" "$GA"
	if [ "$RVRDMA_LINK_TYPE" = rxe ]; then
		ktap_test_skip "side by side with rdma_rxe: the device under test is rdma_rxe"
	else
		rxe_on_b
		check "ibv_devinfo -v of ${DUT}0 and rxe1, side by side" side_by_side "${DUT}0" rxe1
		diag "$(cat "$TABLE")"
		diag "the same limit checks on rdma_rxe (informative):"
		diag "$(timeout 300 "$PY" "$RVRDMA_TESTS_DIR/limits.py" rxe1 "$GX" 2>&1 | sed 's/^/rdma_rxe: /')"
	fi
	check "no kernel report during the limit checks" klog_clean_since "$t0"
	ktap_finished
}

# devinfo_fields DEV: "name<TAB>value" for each device-level "name: value" line of ibv_devinfo -v
# (the port sections and GIDs left out).
devinfo_fields() {
	ibv_devinfo -v -d "$1" | awk '/^[[:space:]]*port:/ { exit }
		match($0, /^[[:space:]]*[a-z_]+:/) { k = substr($0, 1, RLENGTH - 1); gsub(/[[:space:]]/, "", k);
			v = substr($0, RLENGTH + 1); gsub(/^[[:space:]]+|[[:space:]]+$/, "", v);
			if (v != "") print k "\t" v }'
}

# side_by_side A B: both devices answer ibv_devinfo -v; prints every device field with both
# values, the differing ones marked, into $TABLE.
side_by_side() {
	local a b
	a=$(devinfo_fields "$1") && [ -n "$a" ] || { echo "ibv_devinfo -v -d $1 failed"; return 1; }
	b=$(devinfo_fields "$2") && [ -n "$b" ] || { echo "ibv_devinfo -v -d $2 failed"; return 1; }
	join -t $'\t' -a 1 -a 2 -e - -o 0,1.2,2.2 <(sort <<<"$a") <(sort <<<"$b") |
		awk -F'\t' -v A="$1" -v B="$2" 'BEGIN { printf "%-28s %-24s %-24s\n", "field", A, B }
			{ printf "%-28s %-24s %-24s%s\n", $1, $2, $3, ($2 == $3 ? "" : "  *") }' >"$TABLE"
}

TABLE=$(mktemp)
trap 'rm -f "$TABLE"; topo_cleanup' EXIT
main "$@"
