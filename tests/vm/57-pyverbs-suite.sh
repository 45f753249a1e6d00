#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it in /usr/share/doc/rdma-core/tests),
# run whole against rvrdma (rvr0 on veth0, in rvA) and then against rdma_rxe (rxe1 on veth1, in
# rvB), side by side. Nothing of the suite is kept in this repository: it is copied to a temporary
# directory (and its gzipped files unpacked) at run time.
#
# The suite opens one device (--dev) and connects two QPs of it to each other, through the device's
# own GID (--gid: the RoCE v2 GID of the netdev's IPv4 address), so each device runs it alone in
# its own namespace. tests/vm/pyverbs_suite.py runs it as its run_tests.py does and records each
# test's result, time and skip reason or the key line of its traceback.
#
# Test points: the suite ran on each device; every test of pyverbs-pass.txt (those that pass on
# rvrdma today) passes on rvrdma; and the goal, rvrdma with no failure or error and at least as many
# passing tests as rdma_rxe, which is an expected failure (XFAIL, with the figures) until it is met.
# The diagnostics show both runs side by side: the counts, the skips by reason, each failure and
# error with the key line of its traceback, what rdma_rxe passes and rvrdma does not, the slowest
# tests. Under TCG one run takes about 50 s; a test is interrupted after $RVRDMA_PYVERBS_PER_TEST
# seconds (120) and counts as an error.
. "$(dirname "$0")/lib.sh"

SUITE_SRC=/usr/share/doc/rdma-core/tests
RUNNER=$RVRDMA_TESTS_DIR/pyverbs_suite.py
PASS_LIST=$RVRDMA_TESTS_DIR/pyverbs-pass.txt
# Seconds one test may take before it counts as an error (the suite has no limit of its own).
PER_TEST=${RVRDMA_PYVERBS_PER_TEST:-120}
# Tests left out of both runs, by test id (printed at every run).
EXCLUDE=()

main() {
	ktap_print_header
	ktap_set_plan 4
	[ -f "$SUITE_SRC/run_tests.py" ] ||
		fail_rest "rdma-core's test suite is not at $SUITE_SRC (python3-pyverbs; scripts/install-deps installs it)"
	[ -r "$PASS_LIST" ] || fail_rest "no baseline list $PASS_LIST"
	dut_setup 1
	stage || fail_rest "cannot stage the suite in a temporary directory"
	link_add "${DUT}0" veth0 && link_add rxe1 veth1 rxe || fail_rest "rdma link add: $LINK_OUT"
	wait_for "$RVRDMA_WAIT" has_gid "${DUT}0" 10.77.0.1 && wait_for "$RVRDMA_WAIT" has_gid rxe1 10.77.0.2 ||
		fail_rest "GIDs did not appear"
	local ga gb
	ga=$(sysfs_gid_index "${DUT}0" "$(gid_full 10.77.0.1)" "RoCE v2")
	gb=$(sysfs_gid_index rxe1 "$(gid_full 10.77.0.2)" "RoCE v2")
	[ ${#EXCLUDE[@]} -gt 0 ] && diag "left out of both runs: ${EXCLUDE[*]}"

	local want
	want=$(cd "$STAGE" && $PY tests/run_tests.py --list-tests 2>/dev/null | grep -c '^tests\.')
	want=$((want - ${#EXCLUDE[@]}))
	suite_point "$RVRDMA_LINK_TYPE" "$NS_A" "${DUT}0" "$ga" "$STAGE/dut.rec" "$want"
	suite_point rxe "$NS_B" rxe1 "$gb" "$STAGE/rxe.rec" "$want"

	compare
	baseline
	goal
	ktap_finished
}

# stage: $STAGE/tests is the suite, unpacked.
stage() {
	STAGE=$(mktemp -d /tmp/rvrdma-pyverbs-XXXXXX) || return 1
	# The records and full outputs (tracebacks) go to the results directory, when there is one.
	trap 'keep_records; rm -rf "$STAGE"; topo_cleanup' EXIT
	cp -r "$SUITE_SRC" "$STAGE/tests" || return 1
	find "$STAGE/tests" -name '*.gz' -exec gunzip {} + || return 1
}

# suite_point TYPE NETNS DEV GID RECORDS WANT: runs the suite on DEV (in NETNS) into RECORDS; the
# point passes when it ran to its end with WANT tests (whatever their results).
suite_point() {
	local type=$1 ns=$2 dev=$3 gid=$4 rec=$5 want=$6 rc t0 ran secs x desc args=()
	desc="the suite ran on $(label "$type") ($dev, --gid $gid)"
	for x in "${EXCLUDE[@]}"; do
		args+=(--exclude "$x")
	done
	t0=$EPOCHREALTIME
	(cd "$STAGE" && ip netns exec "$ns" $PY "$RUNNER" tests "$rec" --per-test "$PER_TEST" "${args[@]}" \
		-- --dev "$dev" --gid "$gid") >"$rec.log" 2>&1
	rc=$?
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
	ran=$(sed -n 's/^done\t//p' "$rec" 2>/dev/null)
	diag "$(label "$type"): $ran tests in ${secs}s"
	# The suite falls back to the first device and any GID when it did not get the options.
	if ! grep -qF "the suite's options: {'dev': '$dev', 'pci_dev': None, 'port': 1, 'gid': $gid," "$rec.log"; then
		diag "the suite did not run with --dev $dev --gid $gid: $(grep -m1 "the suite's options" "$rec.log")"
		[ "$rc" -eq 0 ] && rc=1
	fi
	if [ "$rc" -eq 0 ] && [ "${ran:-0}" -eq "$want" ] && [ "$want" -gt 0 ]; then
		ktap_test_pass "$desc"
	else
		diag "exit status $rc, ${ran:-no} tests run of $want listed; the end of its output:"
		diag "$(tail -n 30 "$rec.log")"
		ktap_test_fail "$desc"
	fi
}

keep_records() {
	[ -n "${RVRDMA_RESULTS:-}" ] && [ -d "$RVRDMA_RESULTS" ] || return 0
	local f
	for f in "$STAGE"/*.rec "$STAGE"/*.rec.log; do
		[ -f "$f" ] && cp "$f" "$RVRDMA_RESULTS/57-pyverbs-${f##*/}"
	done
}

label() { [ "$1" = rxe ] && echo rdma_rxe || echo "$1"; }

# count KIND RECORDS
count() { grep -c "^$1"$'\t' "$2" 2>/dev/null; }

# compare: the side-by-side diagnostics.
compare() {
	local a=$STAGE/dut.rec b=$STAGE/rxe.rec la lb k
	la=$(label "$RVRDMA_LINK_TYPE") lb=$(label rxe)
	diag "$(printf '%-12s %10s %10s' '' "$la" "$lb")"
	for k in ok fail error skip xfail xpass; do
		diag "$(printf '%-12s %10s %10s' "$k" "$(count $k "$a")" "$(count $k "$b")")"
	done
	diag "skips by reason ($la / $lb):"
	# The device's name, in a reason, reads DEV (the same reason on both).
	awk -F'\t' -v da="${DUT}0" -v db=rxe1 '
		$1 == "skip" {
			w = $4; gsub(da, "DEV", w); gsub(db, "DEV", w)
			n[w, FILENAME == ARGV[1] ? 1 : 2]++; r[w] = 1
		}
		END { for (x in r) printf "%4d / %-4d %s\n", n[x, 1], n[x, 2], x }' "$a" "$b" | sort -k4 | diag_stdin
	for k in "$a:$la" "$b:$lb"; do
		diag "failures and errors on ${k#*:}:"
		awk -F'\t' '$1 == "fail" || $1 == "error" { printf "  %s %s: %s\n", $1, $2, $4 }' "${k%%:*}" | diag_stdin
	done
	diag "skipped on $la, passing on $lb:"
	awk -F'\t' 'FILENAME == ARGV[1] && $1 == "skip" { why[$2] = $4; next }
		FILENAME == ARGV[2] && $1 == "ok" && ($2 in why) { printf "  %s: %s\n", $2, why[$2] }' "$a" "$b" | diag_stdin
	diag "passing on $lb, not on $la (besides the skips above):"
	awk -F'\t' 'FILENAME == ARGV[1] && $1 != "start" { res[$2] = $1; next }
		FILENAME == ARGV[2] && $1 == "ok" && res[$2] != "ok" && res[$2] != "skip" {
			printf "  %s: %s on %s\n", $2, res[$2] == "" ? "not run" : res[$2], "'"$la"'" }' "$a" "$b" | diag_stdin
	for k in "$a:$la" "$b:$lb"; do
		diag "slowest tests on ${k#*:} (s):"
		awk -F'\t' '$1 != "start" && $1 != "done" { print $3, $2 }' "${k%%:*}" | sort -rn | head -8 | sed 's/^/  /' | diag_stdin
	done
}

diag_stdin() {
	local line
	while IFS= read -r line; do
		printf '# %s\n' "$line"
	done
}

# baseline: every test of pyverbs-pass.txt passes on the device under test.
baseline() {
	local a=$STAGE/dut.rec n bad
	n=$(grep -cvE '^(#|$)' "$PASS_LIST")
	bad=$(awk -F'\t' 'FILENAME == ARGV[1] { if ($1 != "start") { res[$2] = $1; why[$2] = $4 }; next }
		/^(#|$)/ { next }
		res[$1] != "ok" { printf "%s: %s %s\n", $1, res[$1] == "" ? "not run" : res[$1], why[$1] }' "$a" "$PASS_LIST")
	if [ -z "$bad" ] && [ "$n" -gt 0 ]; then
		ktap_test_pass "the $n tests of pyverbs-pass.txt pass on $(label "$RVRDMA_LINK_TYPE")"
	else
		diag "not passing any more (of $n):"
		diag "$bad"
		ktap_test_fail "the $n tests of pyverbs-pass.txt pass on $(label "$RVRDMA_LINK_TYPE")"
	fi
}

# goal: no failure or error on the device under test, and at least as many passing tests as rdma_rxe.
# Until then an expected failure, with the figures.
goal() {
	local a=$STAGE/dut.rec b=$STAGE/rxe.rec ok fl er okb desc
	ok=$(count ok "$a") fl=$(count fail "$a") er=$(count error "$a") okb=$(count ok "$b")
	desc="$(label "$RVRDMA_LINK_TYPE"): no failures or errors and at least as many passing tests as rdma_rxe"
	desc+=" ($ok ok, $fl failed, $er errors; rdma_rxe $okb ok)"
	if [ "$fl" -eq 0 ] && [ "$er" -eq 0 ] && [ "$ok" -ge "$okb" ] && [ "$okb" -gt 0 ]; then
		ktap_test_pass "$desc"
	else
		ktap_test_xfail "$desc"
	fi
}

main "$@"
