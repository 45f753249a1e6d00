# shellcheck shell=bash
# What in a kernel log fails a test run, and how to cut a log by kernel time. Sourced by
# tests/vm/run-all.sh, tests/vm/lib.sh (in the guest) and scripts/test (on the host, for the QEMU
# console log): one list of patterns for all three. Definitions only.

# A checker's report anywhere in a kernel log line (extended regex): oopses, WARN/BUG, KASAN,
# KFENCE, UBSAN, lockdep ("WARNING: possible ..." and "INFO: lockdep is turned off"), atomic-sleep
# ("BUG: sleeping function called from invalid context"), debugobjects (ODEBUG), list debugging,
# refcount_t, Rust panics, lockups and stalls, a netdev that cannot be freed, and an rvrdma device
# removed with objects still counted (a leak on some verb's failure or destroy path).
KLOG_BAD='Oops|WARNING:|BUG:|kernel BUG|KASAN|KFENCE|UBSAN|ODEBUG:|list_(add|del) corruption'
KLOG_BAD+='|possible (circular|recursive) locking|lockdep|sleeping function called from invalid context'
KLOG_BAD+='|refcount_t:|Call Trace|rust_panic|panicked|general protection fault'
KLOG_BAD+='|soft lockup|hard LOCKUP|hung_task|blocked for more than|detected stalls? on CPU'
KLOG_BAD+='|unregister_netdevice: waiting for|objects still counted at removal'

# Lines KLOG_BAD matches that only announce a checker at boot (extended regex).
KLOG_BENIGN='RCU lockdep checking is enabled|ODEBUG: selftest passed'

# A kernel log line's stamp as dmesg and the console print it: "[   12.345678] ".
KLOG_STAMP='^\[ *[0-9]+\.[0-9]+\] '

# warn_alloc's first line ("<comm>: vmalloc error: ..." or "<comm>: page allocation failure: ..."):
# the kernel announcing, with a stack dump, an allocation that failed and that its caller
# handles. Not a checker report: memory can run out, and 69-fault-injection makes it.
KLOG_WARN_ALLOC=': (vmalloc error|page allocation failure): '

# klog_reports: the lines of stdin that are checker reports (warn_alloc records, their first
# line through the end of their stack dump, left out).
klog_reports() {
	awk -v re="$KLOG_WARN_ALLOC" '
		skip && (/<\/TASK>/ || ++n > 200) { skip = 0; next }
		skip { next }
		$0 ~ re { skip = 1; n = 0; next }
		{ print }' | grep -E -- "$KLOG_BAD" | grep -vE -- "$KLOG_BENIGN"
}

# klog_window FROM [TO]: the kernel log lines of stdin stamped FROM <= t <= TO (seconds; no TO:
# to the end). A line without a stamp (the rest of a multi-line record) goes with the line
# before it.
klog_window() {
	awk -v from="$1" -v to="${2:-}" '
		match($0, /^\[ *[0-9]+\.[0-9]+\]/) { t = substr($0, 2, RLENGTH - 2) + 0; seen = 1 }
		seen && t >= from + 0 && (to == "" || t <= to + 0)'
}

# klog_mark TEXT: writes TEXT to the kernel log and prints the kernel time it got (the printk
# clock, which is not /proc/uptime's: under TCG the two drift apart). Falls back to /proc/uptime
# if the marker cannot be found again. Guest only (root, /dev/kmsg).
klog_mark() {
	local tag="rvrdma-mark $$ $EPOCHREALTIME" ts=
	if echo "$tag $*" >/dev/kmsg 2>/dev/null; then
		ts=$(dmesg 2>/dev/null | grep -F -- "$tag" | tail -1 | sed -n 's/^\[ *\([0-9]*\.[0-9]*\)\].*/\1/p')
	fi
	[ -n "$ts" ] || ts=$(cut -d' ' -f1 /proc/uptime)
	echo "$ts"
}

# KLOG_STACK_LEFT_MIN: the fewest bytes of its stack a task may leave unused. With
# CONFIG_DEBUG_STACK_USAGE the kernel logs each new low as a task exits ("<comm> (<pid>) used
# greatest stack depth: N bytes left"). A quarter of x86-64's 16 KiB: a deeper caller, another
# kernel configuration or another compiler's frames must still fit.
KLOG_STACK_LEFT_MIN=4096

# klog_stack_least: "BYTES COMM" of the lowest such record in the kernel log on stdin; nothing
# if the kernel logs none.
klog_stack_least() {
	sed -nE 's/.*\] (.*) \([0-9]+\) used greatest stack depth: ([0-9]+) bytes left$/\2 \1/p' |
		sort -n | head -1
}
