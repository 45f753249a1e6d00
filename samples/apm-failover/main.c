// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * apm_failover - Automatic Path Migration (APM) on an RC QP, end to end, with plain libibverbs.
 *
 * Two processes, one RC QP each, like ibv_rc_pingpong:
 *
 *   server:  apm_failover -d rvr1 -a 10.77.0.2 -A 10.77.1.2
 *   client:  apm_failover -d rvr0 -a 10.77.0.1 -A 10.77.1.1 \
 *                --cut-cmd "ip -n rvA link set veth0 down" --cut-after 1000 10.77.1.2
 *
 * -a is the local address of the primary path, -A the local address of the alternate path; each
 * names a RoCE v2 GID (and so a port) of the device. What happens:
 *
 *  1. Both sides open the device, find the GIDs of -a and -A, create a PD, an MR, a CQ with a
 *     completion channel, and an RC QP; a thread prints every async event with a timestamp.
 *  2. They exchange QPN, PSN, both GIDs, rkey and buffer address over TCP. The TCP connection
 *     must not run over the link that is going to be cut: the client connects to the server's
 *     ALTERNATE address (10.77.1.2 above) and keeps the connection for the final report.
 *  3. INIT -> RTR -> RTS on the primary path, then RTS -> RTS loading the alternate path with
 *     IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE (REARM). One message each way arms the path:
 *     ibv_query_qp() then reports IBV_MIG_ARMED on both sides.
 *  4. The client streams messages: even sequence numbers as Sends, odd ones as RDMA Writes into
 *     a ring on the server. Each message carries its sequence number and a pattern derived from
 *     it. The server checks that nothing is lost, duplicated, reordered or corrupted, and acks
 *     the number of messages verified with a small Send back (that is also the client's flow
 *     control: the Write ring is never overwritten before it was checked).
 *  5. Meanwhile the primary link dies (--cut-cmd, or by hand). The requester's retries run out;
 *     instead of failing, the QP migrates to the alternate path, the peer follows, both raise
 *     IBV_EVENT_PATH_MIG, and traffic resumes. The client prints how long the traffic stalled.
 *     (--migrate-after migrates on command instead, with no link cut.)
 *  6. When the port of the path left behind is ACTIVE again (--restore-cmd, or by hand), each
 *     side loads that path as its new alternate path and re-arms: protected again.
 *  7. Over TCP, the client reports how many messages it sent, and the server answers what it
 *     verified. Both print a summary; the exit status is 0 only if every message was verified,
 *     no completion failed, and, if a migration was expected, both sides migrated (and re-armed
 *     if they could).
 *
 * The files:
 *   apm.c, apm.h   the APM calls: the part to copy into your program (steps 3, 5, 6)
 *   log.c, log.h   timestamps and log lines (apm.c uses them too)
 *   verbs.c        device, PD, MR, CQ, QP, INIT -> RTR -> RTS, waiting for completions (1, 3)
 *   control.c      the TCP control channel (2, 6, 7)
 *   stream.c       the data stream: messages, the server's checks and acks, the client's posts (4)
 *   server.c       the server, start to end
 *   client.c       the client, start to end, and the thread that cuts and restores the link (5)
 *   report.c       what both print about the paths, and the final summaries (7)
 *   main.c         the command line
 *   sample.h       what the files above share
 *
 * Build: make (cc -std=c11 -Wall -Wextra -Werror *.c -libverbs -lpthread).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sample.h"

struct options opt = {
	.tcp_port = DEFAULT_TCP_PORT,
	.msg_size = DEFAULT_MSG_SIZE,
	.seconds = DEFAULT_SECONDS,
	.wait_s = DEFAULT_WAIT_S,
	.qp_timeout = QP_TIMEOUT,
	.retry_cnt = QP_RETRY_CNT,
	.cut_after_ms = DEFAULT_CUT_AFTER_MS,
	.migrate_after_ms = -1,
};

static void usage(const char *argv0)
{
	printf("usage: %s -d DEV -a ADDR -A ADDR [options]              (server)\n"
	       "       %s -d DEV -a ADDR -A ADDR [options] SERVER_ADDR  (client)\n"
	       "\n"
	       "  -d, --dev DEV          RDMA device (a two-port device for APM)\n"
	       "  -a, --addr ADDR        local IP of the primary path (a RoCE v2 GID of DEV)\n"
	       "  -A, --alt-addr ADDR    local IP of the alternate path\n"
	       "  -p, --port PORT        TCP port (default %d)\n"
	       "  -T, --wait SECS        bound on every wait (default %d)\n"
	       "      --qp-timeout N     local ACK timeout exponent, 4.096 us * 2^N (default %d)\n"
	       "      --retry-cnt N      transport retries per path (default %d)\n"
	       "client only (the server ignores them):\n"
	       "  -s, --size BYTES       message size (default %d)\n"
	       "  -t, --time SECS        stream duration (default %d)\n"
	       "  -n, --count N          stop after N messages (default: no limit)\n"
	       "      --cut-cmd CMD      run CMD (via system()) to cut the primary link...\n"
	       "      --cut-after MS     ... MS ms after the stream started (default %d)\n"
	       "      --restore-cmd CMD  then run CMD to bring the primary link back...\n"
	       "      --restore-after MS ... MS ms after the stream started\n"
	       "      --migrate-after MS migrate on command MS ms into the stream\n"
	       "\n"
	       "SERVER_ADDR should be the server's alternate-path address: the TCP control\n"
	       "connection must survive the cut of the primary link.\n",
	       argv0, argv0, DEFAULT_TCP_PORT, DEFAULT_WAIT_S, QP_TIMEOUT, QP_RETRY_CNT,
	       DEFAULT_MSG_SIZE, DEFAULT_SECONDS, DEFAULT_CUT_AFTER_MS);
}

static long num_arg(const char *s, long min, long max, const char *what)
{
	char *end;
	long v = strtol(s, &end, 0);

	if (*s == 0 || *end || v < min || v > max)
		die("%s: '%s' is not a number in [%ld, %ld]", what, s, min, max);
	return v;
}

int main(int argc, char **argv)
{
	enum { OPT_QP_TIMEOUT = 256, OPT_RETRY_CNT, OPT_CUT_CMD, OPT_CUT_AFTER, OPT_RESTORE_CMD,
	       OPT_RESTORE_AFTER, OPT_MIGRATE_AFTER };
	static const struct option longopts[] = {
		{ "dev", required_argument, NULL, 'd' },
		{ "addr", required_argument, NULL, 'a' },
		{ "alt-addr", required_argument, NULL, 'A' },
		{ "port", required_argument, NULL, 'p' },
		{ "size", required_argument, NULL, 's' },
		{ "time", required_argument, NULL, 't' },
		{ "count", required_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'T' },
		{ "qp-timeout", required_argument, NULL, OPT_QP_TIMEOUT },
		{ "retry-cnt", required_argument, NULL, OPT_RETRY_CNT },
		{ "cut-cmd", required_argument, NULL, OPT_CUT_CMD },
		{ "cut-after", required_argument, NULL, OPT_CUT_AFTER },
		{ "restore-cmd", required_argument, NULL, OPT_RESTORE_CMD },
		{ "restore-after", required_argument, NULL, OPT_RESTORE_AFTER },
		{ "migrate-after", required_argument, NULL, OPT_MIGRATE_AFTER },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int ch;

	setvbuf(stdout, NULL, _IOLBF, 0);  /* whole lines, also into a pipe or a file */
	srand48(getpid() * time(NULL));
	while ((ch = getopt_long(argc, argv, "d:a:A:p:s:t:n:T:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd': opt.dev_name = optarg; break;
		case 'a': opt.addr[0] = optarg; break;
		case 'A': opt.addr[1] = optarg; break;
		case 'p': opt.tcp_port = (int)num_arg(optarg, 1, 65535, "-p"); break;
		case 's': opt.msg_size = (uint32_t)num_arg(optarg, 16, 1 << 20, "-s"); break;
		case 't': opt.seconds = (int)num_arg(optarg, 1, 86400, "-t"); break;
		case 'n': opt.count = (uint64_t)num_arg(optarg, 1, 1L << 40, "-n"); break;
		case 'T': opt.wait_s = (int)num_arg(optarg, 1, 3600, "-T"); break;
		case OPT_QP_TIMEOUT: opt.qp_timeout = (int)num_arg(optarg, 1, 31, "--qp-timeout");
			break;
		case OPT_RETRY_CNT:
			opt.retry_cnt = (int)num_arg(optarg, 0, 7, "--retry-cnt");
			break;
		case OPT_CUT_CMD: opt.cut_cmd = optarg; break;
		case OPT_CUT_AFTER:
			opt.cut_after_ms = (int)num_arg(optarg, 0, 86400000, "--cut-after");
			break;
		case OPT_RESTORE_CMD: opt.restore_cmd = optarg; break;
		case OPT_MIGRATE_AFTER:
			opt.migrate_after_ms = (int)num_arg(optarg, 0, 86400000, "--migrate-after");
			break;
		case OPT_RESTORE_AFTER:
			opt.restore_after_ms = (int)num_arg(optarg, 0, 86400000, "--restore-after");
			break;
		case 'h': usage(argv[0]); return 0;
		default: usage(argv[0]); return 2;
		}
	}
	if (optind < argc)
		opt.server = argv[optind++];
	if (optind < argc || !opt.dev_name || !opt.addr[0] || !opt.addr[1]) {
		usage(argv[0]);
		return 2;
	}
	if (!opt.server)
		return run_server();

	/* Client: the stream and the outside world's timeline. */
	if (opt.msg_size % 4)
		die("-s: the message size must be a multiple of 4");
	if (opt.cut_cmd && opt.cut_after_ms >= opt.seconds * 1000)
		die("--cut-after %d ms is not within the %d s stream", opt.cut_after_ms,
		    opt.seconds);
	if (opt.restore_cmd && (!opt.cut_cmd || opt.restore_after_ms <= opt.cut_after_ms ||
				opt.restore_after_ms >= opt.seconds * 1000))
		die("--restore-cmd needs --cut-cmd and a --restore-after between the cut and the "
		    "end of the stream");
	if (opt.migrate_after_ms >= opt.seconds * 1000)
		die("--migrate-after %d ms is not within the %d s stream", opt.migrate_after_ms,
		    opt.seconds);
	return run_client();
}
