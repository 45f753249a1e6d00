#!/usr/bin/env bash
# Runs rvrdma's in-guest tests in this guest: the scripts listed in TEST_PROGS of tests/vm/Makefile
# (or the ones named as arguments), each with a timeout. Then checks that TEST_PROGS and the
# NN-*.sh files on disk agree, that every KUnit suite of rvrdma.ko declared in rust/ reported all
# its cases at each module load, and that the kernel log has no checker report (see klog.sh; each
# report is attributed to the test during which it came, by kernel time).
# Prints KTAP (each script's KTAP nested as a subtest) with each test's wall time, a time table,
# writes one log per test, the kernel log (kernel.log: followed from the start, so nothing the ring
# buffer drops is lost), the timings and the totals to $RVRDMA_RESULTS, and ends with
# "# rvrdma-guest-totals: pass=P fail=F skip=S xfail=X". Exits non-zero if anything failed. An
# expected failure (a point "ok ... # XFAIL" or "# TODO": a known gap, reported with its figures)
# counts as neither a pass nor a failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=${RVRDMA_TOP:-$(cd "$here/../.." && pwd)}
# shellcheck source=tests/vm/klog.sh
. "$here/klog.sh"
results=${RVRDMA_RESULTS:-/tmp/rvrdma-results}
# Each test's timeout: kselftest's settings file (RVRDMA_TEST_TIMEOUT overrides it).
per_test_timeout=${RVRDMA_TEST_TIMEOUT:-$(sed -n 's/^timeout=//p' "$here/settings" 2>/dev/null)}
per_test_timeout=${per_test_timeout:-600}
mkdir -p "$results"

pass=0 fail=0 skip=0 xfail=0 n=0
klog_bad=()
timings=()

# diag_lines: stdin as KTAP diagnostics.
diag_lines() { sed 's/^/# /'; }

# seconds_since T0: wall time since $EPOCHREALTIME value T0, to a tenth of a second.
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# ---- the kernel log --------------------------------------------------------------------------
# Markers written to /dev/kmsg must not be rate limited away.
[ -w /proc/sys/kernel/printk_devkmsg ] && echo on >/proc/sys/kernel/printk_devkmsg
klog_file=$results/kernel.log
stdbuf -oL dmesg --follow >"$klog_file" 2>/dev/null &
klog_pid=$!

# ---- the UDP hash secrets, set while the guest is idle ------------------------------------------
# The first UDP connect or lookup of each family sets a hash secret once (net_get_random_once),
# which flips a static key: a live text patch. Under TCG a vCPU that runs the patched code during
# the patch can trap on its int3 ("Oops: int3" in udp6_ehashfn has panicked a guest in
# 07-coexist), so the secrets are set here, before any test runs UDP on both CPUs.
python3 - <<'PY' 2>/dev/null
import socket
for fam, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    try:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            s.send(b"x")
    except OSError:
        pass
PY

# klog_text: the kernel log so far (the followed copy; dmesg if following failed).
klog_text() {
	if [ -s "$klog_file" ]; then cat "$klog_file"; else dmesg 2>/dev/null; fi
}

# klog_sync TEXT: waits (up to 10 s) until the followed copy has the marker TEXT.
klog_sync() {
	local i
	for ((i = 0; i < 100; i++)); do
		grep -qF -- "$1" "$klog_file" 2>/dev/null && return 0
		kill -0 "$klog_pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# ---- the expected tests ----------------------------------------------------------------------
listed=()
list_problems=()
if progs=$(make -s --no-print-directory -C "$here" list-test-progs 2>&1); then
	read -r -a listed <<<"$progs"
	[ ${#listed[@]} -gt 0 ] || list_problems+=("TEST_PROGS in tests/vm/Makefile is empty")
else
	list_problems+=("make list-test-progs in tests/vm failed: $progs")
fi
for p in "${listed[@]}"; do
	[ -f "$here/$p" ] || list_problems+=("$p is in TEST_PROGS but does not exist")
done
for f in "$here"/[0-9][0-9]-*.sh; do
	[ -e "$f" ] || continue
	b=$(basename "$f")
	[[ " ${listed[*]} " == *" $b "* ]] || list_problems+=("$b exists but is not in TEST_PROGS (it would never run)")
done

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
	for p in "${listed[@]}"; do
		tests+=("$here/$p")
	done
fi

# count_ktap LOG: sets t_plan t_pass t_fail t_skip t_xfail from a test's top-level KTAP lines.
# An expected failure (XFAIL, or TAP's TODO, on an "ok" or a "not ok" line) is neither a pass nor a
# failure.
count_ktap() {
	local log=$1
	t_plan=$(sed -n 's/^1\.\.\([0-9]\+\).*/\1/p' "$log" | head -1)
	t_xfail=$(grep -cE '^(not )?ok [0-9]+.*# *(XFAIL|TODO)' "$log")
	t_pass=$(grep -E '^ok [0-9]+' "$log" | grep -cvE '# *(XFAIL|TODO)')
	t_skip=$(grep -E '^ok [0-9]+.*# *SKIP' "$log" | grep -cvE '# *(XFAIL|TODO)')
	t_fail=$(grep -E '^not ok [0-9]+' "$log" | grep -cvE '# *(XFAIL|TODO)')
	t_pass=$((t_pass - t_skip))
}

echo "TAP version 13"
echo "1..$((${#tests[@]} + 4))"
echo "# kernel $(uname -r), link type ${RVRDMA_LINK_TYPE:-rvrdma}, results in $results"
for t in "${tests[@]}"; do
	n=$((n + 1))
	name=$(basename "$t" .sh)
	log=$results/$name.log
	# The same test named more than once (a stress run): one log each.
	[ -e "$log" ] && log=$results/$name.$n.log
	echo "# ---- $name"
	if [ ! -f "$t" ]; then
		echo "not ok $n $name # missing: $t does not exist"
		fail=$((fail + 1))
		timings+=("$name missing 0")
		continue
	fi
	k_begin=$(klog_mark "rvrdma run-all: begin $name ($n)")
	w0=$EPOCHREALTIME
	timeout --kill-after=10 "$per_test_timeout" bash "$t" >"$log" 2>&1
	rc=$?
	secs=$(seconds_since "$w0")
	k_end=$(klog_mark "rvrdma run-all: end $name ($n)")
	sed 's/^/    /' "$log"
	count_ktap "$log"
	klog_sync "rvrdma run-all: end $name ($n)"
	hits=$(klog_text | klog_window "$k_begin" "$k_end" | klog_reports)
	if [ -n "$hits" ]; then
		klog_bad+=("$name")
		echo "# kernel log during $name (kernel time $k_begin..$k_end):"
		head -100 <<<"$hits" | diag_lines
	fi
	why=
	if grep -qE '^1\.\.0 *# *SKIP' "$log"; then
		# The whole script does not apply (e.g. module tests against the built-in rxe): it must
		# say why.
		reason=$(sed -n 's/^1\.\.0 *# *SKIP *//p' "$log" | head -1)
		if [ -z "${reason// /}" ]; then
			echo "not ok $n $name # the whole script skipped without a reason (${secs}s)"
			fail=$((fail + 1))
			timings+=("$name fail $secs")
		else
			echo "ok $n $name # SKIP $reason (${secs}s)"
			skip=$((skip + 1))
			timings+=("$name skip $secs")
		fi
		continue
	fi
	pass=$((pass + t_pass))
	skip=$((skip + t_skip))
	fail=$((fail + t_fail))
	xfail=$((xfail + t_xfail))
	if [ -z "$t_plan" ]; then
		why="no KTAP plan"
		fail=$((fail + 1))
	elif [ $((t_pass + t_skip + t_fail + t_xfail)) -lt "$t_plan" ]; then
		why="$((t_plan - t_pass - t_skip - t_fail - t_xfail)) of $t_plan planned results missing"
		fail=$((fail + t_plan - t_pass - t_skip - t_fail - t_xfail))
	elif [ $((t_pass + t_skip + t_fail + t_xfail)) -gt "$t_plan" ]; then
		why="$((t_pass + t_skip + t_fail + t_xfail)) results for a plan of $t_plan"
		fail=$((fail + 1))
	fi
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		why="${why:+$why, }timed out after ${per_test_timeout}s"
		[ -n "$t_plan" ] && [ $((t_pass + t_skip + t_fail + t_xfail)) -ge "$t_plan" ] && fail=$((fail + 1))
	elif [ "$rc" -ne 0 ] && [ "$t_fail" -eq 0 ] && [ -z "$why" ]; then
		why="exit status $rc"
		fail=$((fail + 1))
	fi
	if [ "$t_fail" -gt 0 ] || [ -n "$why" ]; then
		echo "not ok $n $name # ${why:-$t_fail failed} (${secs}s)"
		timings+=("$name fail $secs")
	else
		xf=
		[ "$t_xfail" -gt 0 ] && xf=", $t_xfail expected failure(s) (XFAIL)"
		echo "ok $n $name # ${secs}s$xf"
		timings+=("$name ok $secs")
	fi
done

# ---- the kselftest path ------------------------------------------------------------------------
# `make -C tests/vm run_tests` (the kernel's lib.mk and kselftest runner, timeout from ./settings)
# runs the collection as any selftest: run the first listed test through it.
n=$((n + 1))
first=${listed[0]:-}
# The runner writes each test's output to /dev/stdout, which virtme-ng links to its own console
# channel: point it at the writer's stdout for the run, so that the output is captured here.
old_stdout=$(readlink /dev/stdout)
ln -sfn /proc/self/fd/1 /dev/stdout
w0=$EPOCHREALTIME
ksft_out=$(make -s --no-print-directory -C "$here" run_tests TEST_PROGS="$first" 2>&1)
ksft_rc=$?
[ -n "$old_stdout" ] && ln -sfn "$old_stdout" /dev/stdout
echo "$ksft_out" >"$results/kselftest.log"
if [ -n "$first" ] && [ "$ksft_rc" -eq 0 ] &&
	grep -qE "^ok 1 selftests: .*: $first( # SKIP.*)?\$" <<<"$ksft_out" &&
	grep -qE "^# (ok|not ok) [0-9]+ |^# 1\.\.0" <<<"$ksft_out"; then
	echo "ok $n make -C tests/vm run_tests (kselftest's runner) runs $first # $(seconds_since "$w0")s"
	pass=$((pass + 1))
else
	tail -20 <<<"$ksft_out" | diag_lines
	echo "not ok $n make -C tests/vm run_tests (kselftest's runner) runs ${first:-the first test} (exit $ksft_rc)"
	fail=$((fail + 1))
fi

# ---- TEST_PROGS and the scripts on disk agree --------------------------------------------------
n=$((n + 1))
if [ ${#list_problems[@]} -gt 0 ]; then
	printf '%s\n' "${list_problems[@]}" | diag_lines
	echo "not ok $n tests/vm/Makefile TEST_PROGS matches the NN-*.sh scripts"
	fail=$((fail + ${#list_problems[@]}))
else
	echo "ok $n tests/vm/Makefile TEST_PROGS matches the NN-*.sh scripts (${#listed[@]} tests)"
	pass=$((pass + 1))
fi

# ---- KUnit -----------------------------------------------------------------------------------
# kunit_declared: "SUITE CASES" for every KUnit suite declared in rvrdma's Rust sources
# (#[kunit_tests(SUITE)] on a module; its cases are the #[test] functions in that module).
kunit_declared() {
	find "$top/rust" -name '*.rs' -not -path '*/target/*' -print0 | sort -z |
		xargs -0 grep -l 'kunit_tests(' | while IFS= read -r f; do
		awk '
			# Without string and char literals and // comments, so that only code braces count.
			function code(s) {
				gsub(/"([^"\\]|\\.)*"/, "", s)
				gsub(/'\''([^'\''\\]|\\.)'\''/, "", s)
				sub(/\/\/.*/, "", s)
				return s
			}
			{ line = code($0) }
			suite == "" && match(line, /kunit_tests\([A-Za-z0-9_]+\)/) {
				suite = substr(line, RSTART + 12, RLENGTH - 13); depth = 0; opened = 0; cases = 0
				next
			}
			suite != "" {
				if (line ~ /^[ \t]*#\[test\]/)
					cases++
				o = gsub(/\{/, "{", line); c = gsub(/\}/, "}", line)
				depth += o - c
				if (o)
					opened = 1
				if (opened && depth <= 0) {
					print suite, cases
					suite = ""
				}
			}
			END { if (suite != "") print suite, cases }' "$f"
	done
}

# kunit_results DECLARED: reads a kernel log on stdin and checks the rvrdma_* KUnit reports in it
# against DECLARED ("SUITE CASES" lines). Each case counts once (failed if it failed at any module
# load, else passed if it passed at one, else skipped, with KUnit's reason). Prints nested KTAP
# lines, "# " diagnostics, and last "TOTALS pass fail skip" (each problem with the reports counts
# as one failure: a suite missing or not declared, a plan or a number of results that differs
# from the declared cases, a report cut short, a suite result "not ok").
kunit_results() {
	awk -v declared="$1" '
		function problem(s) { problems[++np] = s }
		function close_report(how) {
			if ((cur in want) && plan != want[cur])
				problem(cur ": report " reports[cur] " plans " plan " cases, the sources declare " want[cur])
			if (got != plan)
				problem(cur ": report " reports[cur] " has " got " case results for a plan of " plan)
			if (how != "")
				problem(cur ": report " reports[cur] " " how)
			cur = ""
		}
		BEGIN {
			while ((getline l < declared) > 0) {
				split(l, w, " ")
				want[w[1]] = w[2]
				suites[++ns] = w[1]
			}
			rank["fail"] = 3; rank["pass"] = 2; rank["skip"] = 1
		}
		{ sub(/^\[ *[0-9]+\.[0-9]+\] /, "") }
		/^    # Subtest: rvrdma_/ {
			if (cur != "")
				close_report("cut short (a new suite began)")
			cur = $3; reports[cur]++; plan = -1; got = 0
			if (!(cur in want) && !(cur in undeclared)) {
				undeclared[cur] = 1
				problem(cur ": reported but not declared in rust/ (kunit_tests)")
			}
			next
		}
		cur != "" && /^    1\.\.[0-9]+/ { plan = substr($1, 4) + 0; next }
		cur != "" && /^    (not )?ok [0-9]+ / {
			line = substr($0, 5)
			res = line ~ /^not / ? "fail" : "pass"
			sub(/^(not )?ok [0-9]+ /, "", line)
			name = line; reason = ""
			if (match(line, / # SKIP/)) {
				name = substr(line, 1, RSTART - 1)
				reason = substr(line, RSTART + RLENGTH)
				sub(/^ +/, "", reason)
				if (res == "pass")
					res = "skip"
			} else {
				sub(/ #.*$/, "", name)
			}
			got++
			k = cur "." name
			if (!(k in result)) {
				order[cur] = order[cur] " " name
				result[k] = res
			} else if (res == "fail" || (res == "pass" && result[k] == "skip")) {
				result[k] = res
			}
			if (res == "skip") {
				skips[k]++
				if (!(k in why))
					why[k] = reason
			}
			next
		}
		/^(not )?ok [0-9]+ rvrdma_/ {
			s = $1 == "not" ? $4 : $3
			if (s != cur) {
				if (cur != "")
					close_report("cut short (no suite result)")
				problem(s ": a suite result without its report")
				next
			}
			close_report($1 == "not" ? "says not ok" : "")
			next
		}
		END {
			if (cur != "")
				close_report("cut short (the log ends)")
			np_ = nf = nsk = 0; i = 0
			for (j = 1; j <= ns; j++) {
				s = suites[j]
				if (!(s in reports)) {
					problem(s ": declared in rust/ but never reported (did rvrdma.ko load?)")
					continue
				}
				printf "# %s: %d cases, %d report(s)\n", s, want[s], reports[s]
				nc = split(order[s], names, " ")
				for (c = 1; c <= nc; c++) {
					k = s "." names[c]; i++
					if (result[k] == "fail") {
						printf "    not ok %d %s\n", i, k; nf++
					} else if (result[k] == "skip") {
						r = why[k] == "" ? "(KUnit gave no reason)" : why[k]
						printf "    ok %d %s # SKIP %s\n", i, k, r; nsk++
					} else {
						if (k in skips)
							printf "# %s skipped at %d of %d loads: %s\n", k, skips[k], reports[s], why[k]
						printf "    ok %d %s\n", i, k; np_++
					}
				}
			}
			for (j = 1; j <= np; j++)
				printf "# KUnit problem: %s\n", problems[j]
			printf "TOTALS %d %d %d\n", np_, nf + np, nsk
		}'
}

n=$((n + 1))
kunit_decl=$results/kunit-declared.txt
kunit_declared >"$kunit_decl"
kunit_out=$(klog_text | kunit_results "$kunit_decl")
read -r _ kp kf ks < <(grep '^TOTALS ' <<<"$kunit_out")
if ! grep -q '^    ' <<<"$kunit_out" && [ "${RVRDMA_LINK_TYPE:-rvrdma}" != rvrdma ]; then
	echo "ok $n KUnit suites of rvrdma.ko # SKIP rvrdma.ko not under test (RVRDMA_LINK_TYPE=$RVRDMA_LINK_TYPE)"
	skip=$((skip + 1))
else
	echo "# declared KUnit suites (suite, cases): $(tr '\n' ' ' <"$kunit_decl")"
	[ -s "$kunit_decl" ] || { echo "# no KUnit suite declared in $top/rust"; kf=$((kf + 1)); }
	grep -v '^TOTALS ' <<<"$kunit_out"
	pass=$((pass + kp))
	fail=$((fail + kf))
	skip=$((skip + ks))
	if [ "$kf" -gt 0 ]; then
		echo "not ok $n KUnit suites of rvrdma.ko (pass $kp, fail $kf, skip $ks)"
	else
		echo "ok $n KUnit suites of rvrdma.ko (pass $kp, skip $ks)"
	fi
fi

# ---- the whole kernel log --------------------------------------------------------------------
# All of it (boot included), checked once more: a report that came in late or outside any test
# still fails the run.
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
last="rvrdma run-all: done"
klog_mark "$last" >/dev/null
klog_sync "$last" || klog_bad+=("the kernel log was not followed to the end (dmesg --follow stopped)")
kill "$klog_pid" 2>/dev/null
wait "$klog_pid" 2>/dev/null
if ! dmesg >"$results/dmesg.txt" 2>&1; then
	klog_bad+=("the kernel log could not be read (dmesg failed)")
fi
[ -s "$klog_file" ] || klog_bad+=("the followed kernel log $klog_file is empty")
hits=$(klog_text | klog_reports)
if [ -n "$hits" ] || [ ${#klog_bad[@]} -gt 0 ]; then
	echo "# kernel log reports (full log in $klog_file):"
	head -100 <<<"$hits" | diag_lines
	echo "not ok $n kernel log clean (no checker report)${klog_bad[*]:+ # during: ${klog_bad[*]}}"
	fail=$((fail + 1))
else
	echo "ok $n kernel log clean (no checker report)"
	pass=$((pass + 1))
fi

# ---- stack headroom --------------------------------------------------------------------------
# The deepest stack any task reached in the whole run (rvrdma's deepest is `rdma link add`
# creating the GSI QP under ib_register_device).
n=$((n + 1))
read -r least_left least_comm < <(klog_text | klog_stack_least)
if [ -z "${least_left:-}" ]; then
	echo "ok $n stack headroom # SKIP the kernel logs no stack depth (CONFIG_DEBUG_STACK_USAGE)"
	skip=$((skip + 1))
elif [ "$least_left" -lt "$KLOG_STACK_LEFT_MIN" ]; then
	echo "not ok $n stack headroom: $least_comm left $least_left bytes (< $KLOG_STACK_LEFT_MIN)"
	fail=$((fail + 1))
else
	echo "ok $n stack headroom: the least left, $least_left bytes, by $least_comm"
	pass=$((pass + 1))
fi

# ---- time per test ---------------------------------------------------------------------------
total=0
: >"$results/timings"
echo "# wall time per test:"
for l in "${timings[@]}"; do
	read -r tname tres tsecs <<<"$l"
	printf '#   %-24s %-7s %8s s\n' "$tname" "$tres" "$tsecs"
	printf '%s %s %s\n' "$tname" "$tres" "$tsecs" >>"$results/timings"
	total=$(awk -v a="$total" -v b="$tsecs" 'BEGIN { printf "%.1f", a + b }')
done
printf '#   %-24s %-7s %8s s\n' "total" "" "$total"
echo "total - $total" >>"$results/timings"

echo "# Totals: pass:$pass fail:$fail xfail:$xfail skip:$skip"
echo "pass=$pass fail=$fail skip=$skip xfail=$xfail" >"$results/totals"
echo "# rvrdma-guest-totals: pass=$pass fail=$fail skip=$skip xfail=$xfail"
[ "$fail" -eq 0 ]
