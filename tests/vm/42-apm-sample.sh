#!/usr/bin/env bash
# The APM failover sample (samples/apm-failover), run as a user would: two processes in two
# netns over two-port devices, the primary link cut 1 s into a 6 s stream of Sends and RDMA
# Writes and restored at 3 s (the variable is not `out`: check() has a local of that name). The sample itself checks every message (none lost, duplicated or
# corrupted), the PATH_MIG events on both sides and the re-arm; its exit status is the verdict.
. "$(dirname "$0")/lib.sh"

sample=$RVRDMA_TOP/samples/apm-failover
ktap_print_header
ktap_set_plan 3
[ -x "$sample/apm_failover" ] || fail_rest "$sample/apm_failover is not built (make -C samples/apm-failover)"
sample_out=$(bash "$sample/run-in-guest.sh" 2>&1)
rc=$?
diag "$sample_out"
result "apm_failover: every message verified across the link cut (exit status $rc)" "$rc" ""
check "both sides saw the migration (PATH_MIG)" eval \
	'grep -q " server\] async event: path migrated" <<<"$sample_out" &&
	grep -q " client\] async event: path migrated" <<<"$sample_out"'
check "the failover time was measured" eval 'grep -q "failover: .*first completion" <<<"$sample_out"'
ktap_finished
