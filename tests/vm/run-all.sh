#!/usr/bin/env bash
# Runs rvrdma's in-guest tests (tests/vm/NN-*.sh, or the ones named as arguments) in this guest,
# each with a timeout, then checks the kernel log for oopses, WARNs, BUGs, KASAN, UBSAN, lockdep and
# Rust panics. Prints KTAP (each script's KTAP nested as a subtest), writes one log per test and the
# kernel log to $RVRDMA_RESULTS, and ends with "# rvrdma-guest-totals: pass=P fail=F skip=S".
# Exits non-zero if anything failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
results=${RVRDMA_RESULTS:-/tmp/rvrdma-results}
per_test_timeout=${RVRDMA_TEST_TIMEOUT:-300}
mkdir -p "$results"

# What in the kernel log fails the run.
# Boot banners of debug kernels that only say a checker is on.
KLOG_BENIGN='RCU lockdep checking is enabled'
BAD_KLOG='Oops|WARNING:|BUG:|KASAN|UBSAN|possible circular locking|lockdep|Call Trace|kernel BUG|rust_panic|panicked|general protection fault|soft lockup|hung_task|blocked for more than|refcount_t:'

tests=()
if [ $# -gt 0 ]; then
	for t in "$@"; do
		[[ $t == *.sh ]] || t=$t.sh
		case $t in
		/*) tests+=("$t") ;;
		*/*) tests+=("$PWD/$t") ;;
		*) tests+=("$here/$t") ;;
		esac
	done
else
	for t in "$here"/[0-9][0-9]-*.sh; do
		tests+=("$t")
	done
fi

pass=0 fail=0 skip=0 n=0
klog_bad=()

# diag_lines: stdin as KTAP diagnostics.
diag_lines() { sed 's/^/# /'; }

# klog_since LINE: the kernel log from line LINE on (1-based).
klog_since() { dmesg 2>/dev/null | tail -n "+$1"; }

# count_ktap LOG: sets t_plan t_pass t_fail t_skip from a test's top-level KTAP lines.
count_ktap() {
	local log=$1
	t_plan=$(sed -n 's/^1\.\.\([0-9]\+\).*/\1/p' "$log" | head -1)
	t_pass=$(grep -cE '^ok [0-9]+' "$log" | head -1)
	t_skip=$(grep -cE '^ok [0-9]+.*# *SKIP' "$log")
	t_fail=$(grep -cE '^not ok [0-9]+' "$log")
	t_pass=$((t_pass - t_skip))
}

echo "TAP version 13"
echo "1..$((${#tests[@]} + 2))"
echo "# kernel $(uname -r), link type ${RVRDMA_LINK_TYPE:-rvrdma}, results in $results"
for t in "${tests[@]}"; do
	n=$((n + 1))
	name=$(basename "$t" .sh)
	log=$results/$name.log
	# The same test named more than once (a stress run): one log each.
	[ -e "$log" ] && log=$results/$name.$n.log
	kl_start=$(($(dmesg 2>/dev/null | wc -l) + 1))
	echo "# ---- $name"
	start=$SECONDS
	timeout --kill-after=10 "$per_test_timeout" bash "$t" >"$log" 2>&1
	rc=$?
	secs=$((SECONDS - start))
	sed 's/^/    /' "$log"
	count_ktap "$log"
	why=
	if grep -qE '^1\.\.0 *# *SKIP' "$log"; then
		# The whole script does not apply (e.g. module tests against the built-in rxe).
		skip=$((skip + 1))
		echo "ok $n $name # SKIP $(sed -n 's/^1\.\.0 *# *SKIP *//p' "$log" | head -1)"
		continue
	fi
	pass=$((pass + t_pass))
	skip=$((skip + t_skip))
	fail=$((fail + t_fail))
	if [ -z "$t_plan" ]; then
		why="no KTAP plan"
		fail=$((fail + 1))
	elif [ $((t_pass + t_skip + t_fail)) -lt "$t_plan" ]; then
		why="$((t_plan - t_pass - t_skip - t_fail)) of $t_plan planned results missing"
		fail=$((fail + t_plan - t_pass - t_skip - t_fail))
	fi
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		why="${why:+$why, }timed out after ${per_test_timeout}s"
		[ -n "$t_plan" ] && [ $((t_pass + t_skip + t_fail)) -ge "$t_plan" ] && fail=$((fail + 1))
	elif [ "$rc" -ne 0 ] && [ "$t_fail" -eq 0 ] && [ -z "$why" ]; then
		why="exit status $rc"
		fail=$((fail + 1))
	fi
	hits=$(klog_since "$kl_start" | grep -E "$BAD_KLOG" | grep -vF "$KLOG_BENIGN")
	if [ -n "$hits" ]; then
		klog_bad+=("$name")
		echo "# kernel log during $name:"
		diag_lines <<<"$hits"
	fi
	if [ "$t_fail" -gt 0 ] || [ -n "$why" ]; then
		echo "not ok $n $name # ${why:-$t_fail failed} (${secs}s)"
	else
		echo "ok $n $name # ${secs}s"
	fi
done

# KUnit suites built into rvrdma.ko run at every insmod and print KTAP to the kernel log.
n=$((n + 1))
# Top-level KTAP result lines of rvrdma's suites: "[ts] ok N rvrdma_..." / "[ts] not ok N rvrdma_...".
kunit=$(dmesg 2>/dev/null | sed -n 's/^\[[^]]*\] \(\(not \)\{0,1\}ok\) [0-9]* \(rvrdma_[A-Za-z0-9_]*\).*/\3 \1/p' | sort | uniq -c)
if [ -z "$kunit" ] && [ "${RVRDMA_LINK_TYPE:-rvrdma}" != rvrdma ]; then
	echo "ok $n KUnit suites in the kernel log # SKIP rvrdma.ko not under test (RVRDMA_LINK_TYPE=$RVRDMA_LINK_TYPE)"
	skip=$((skip + 1))
elif [ -z "$kunit" ]; then
	echo "# no rvrdma KUnit suite reported in the kernel log"
	echo "not ok $n KUnit suites in the kernel log"
	fail=$((fail + 1))
elif grep -q ' not ok$' <<<"$kunit"; then
	echo "# KUnit results (count, suite, result):"
	diag_lines <<<"$kunit"
	echo "not ok $n KUnit suites in the kernel log"
	fail=$((fail + 1))
else
	echo "# KUnit results (count, suite, result):"
	diag_lines <<<"$kunit"
	echo "ok $n KUnit suites in the kernel log"
	pass=$((pass + 1))
fi

# The kernel log, all of it (boot included), checked once more: a report that came in late or
# outside any test still fails the run.
n=$((n + 1))
if [ -d /sys/kernel/debug ] && ! mountpoint -q /sys/kernel/debug; then
	mount -t debugfs none /sys/kernel/debug 2>/dev/null
fi
if [ -w /sys/kernel/debug/kmemleak ]; then
	echo scan >/sys/kernel/debug/kmemleak
	sleep 1
	echo scan >/sys/kernel/debug/kmemleak
	cat /sys/kernel/debug/kmemleak >"$results/kmemleak.txt"
	if grep -q 'rvrdma' "$results/kmemleak.txt"; then
		klog_bad+=("kmemleak: objects leaked by rvrdma, see kmemleak.txt")
	fi
fi
if ! dmesg >"$results/dmesg.txt" 2>&1; then
	klog_bad+=("the kernel log could not be read (dmesg failed)")
fi
hits=$(grep -E "$BAD_KLOG" "$results/dmesg.txt" | grep -vF "$KLOG_BENIGN")
if [ -n "$hits" ] || [ ${#klog_bad[@]} -gt 0 ]; then
	echo "# kernel log reports (full log in $results/dmesg.txt):"
	head -100 <<<"$hits" | diag_lines
	echo "not ok $n kernel log clean (no Oops/WARNING/BUG/KASAN/UBSAN/lockdep/panic)${klog_bad[*]:+ # during: ${klog_bad[*]}}"
	fail=$((fail + 1))
else
	echo "ok $n kernel log clean (no Oops/WARNING/BUG/KASAN/UBSAN/lockdep/panic)"
	pass=$((pass + 1))
fi

echo "# Totals: pass:$pass fail:$fail skip:$skip"
echo "pass=$pass fail=$fail skip=$skip" >"$results/totals"
echo "# rvrdma-guest-totals: pass=$pass fail=$fail skip=$skip"
[ "$fail" -eq 0 ]
