// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The client, in order: connect to the server, connect and arm the QP, stream while the
 * "outside world" (a thread running --cut-cmd and --restore-cmd) cuts the primary link and
 * brings it back, re-arm after the migration, then report its count and read the verdict. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sample.h"

int64_t cut_start_us = -1;
_Atomic int64_t cut_us = -1;

/* Runs `cmd` via system() at time `at`; returns when it started, and in *end when it ended. */
static int64_t run_at(int64_t at, const char *what, const char *cmd, int64_t *end)
{
	int64_t t, start;
	int rc;

	while ((t = now_us()) < at)
		usleep((useconds_t)(at - t < 100000 ? at - t : 100000));
	start = now_us();
	say("%s: %s", what, cmd);
	rc = system(cmd);
	*end = now_us();
	say("... done in %.0f ms (exit status %d)", (*end - start) / 1000.0,
	    WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
	return start;
}

/* The "outside world": cuts the primary link during the stream, and maybe restores it. */
static void *cut_thread(void *arg)
{
	int64_t stream_start = *(int64_t *)arg, end;

	cut_start_us = run_at(stream_start + opt.cut_after_ms * 1000LL, "cutting the primary link",
			      opt.cut_cmd, &end);
	atomic_store(&cut_us, end);
	if (opt.restore_cmd)
		run_at(stream_start + opt.restore_after_ms * 1000LL, "restoring the primary link",
		       opt.restore_cmd, &end);
	return NULL;
}

int run_client(void)
{
	struct client c = { 0 };
	struct res *r = &c.r;
	struct conn_info wire;
	struct ctl_msg m;
	struct path_state before, after;
	pthread_t cutter;
	int64_t stream_start, stream_end, last_progress;
	bool cut_started = false, migrated_by_command = false, stop = false, expect_mig, ok;
	char evs[256];
	int fd;

	create_resources(r, IBV_ACCESS_LOCAL_WRITE);
	register_buffer(r, (size_t)WINDOW * opt.msg_size + ACK_RECVS * ACK_BUF,
			IBV_ACCESS_LOCAL_WRITE);
	c.src = r->buf;
	c.ackbuf = c.src + (size_t)WINDOW * opt.msg_size;
	for (uint64_t i = 0; i < ACK_RECVS; i++)
		post_recv(r, c.ackbuf + i * ACK_BUF, ACK_BUF, i);
	events_start(r->ctx);

	/* TCP: over the alternate link (the server's -A address), so the cut does not touch it. */
	fd = r->ctl_fd = tcp_connect();
	say("connected to %s:%d over TCP", opt.server, opt.tcp_port);
	wire = my_info(r, 0, 0);
	write_all(fd, &wire, sizeof(wire), "our QP information");
	read_all(fd, &wire, sizeof(wire), "the server's QP information");
	c.peer = peer_info(&wire);
	print_peer(&c.peer);
	{
		union ibv_gid tcp_gid;

		if (!addr_to_gid(opt.server, &tcp_gid) &&
		    !memcmp(&tcp_gid, &c.peer.gid[0], sizeof(tcp_gid)))
			say("warning: the TCP connection runs over the primary path's link; "
			    "cutting it will break the final report");
	}
	connect_and_rearm(r, &c.peer);

	/* Message 0 and the server's ack: one exchange each way arms both alternate paths. */
	post_message(&c, 0);
	last_progress = now_us();
	while (c.completed < 1 || c.acked < 1) {
		if (client_poll(&c, 100))
			last_progress = now_us();
		if (c.errors)
			die("the first message failed");
		if (now_us() - last_progress > (int64_t)opt.wait_s * 1000000)
			die("no ack for the first message within %d s", opt.wait_s);
	}
	before = wait_armed(r->qp, opt.wait_s);
	print_path("ARMED", before);

	/* Stream, and cut the primary link from another thread while doing so. */
	stream_start = now_us();
	stream_end = stream_start + (int64_t)opt.seconds * 1000000;
	if (opt.cut_cmd) {
		if (pthread_create(&cutter, NULL, cut_thread, &stream_start))
			die("pthread_create");
		cut_started = true;
	}
	say("streaming for %d s: Sends and RDMA Writes of %u bytes, at most %d in flight",
	    opt.seconds, opt.msg_size, WINDOW);
	last_progress = now_us();
	c.last_ok_us = last_progress;
	c.gap_from_us = c.gap_to_us = 0;
	for (;;) {
		if (now_us() >= stream_end || (opt.count && c.posted >= opt.count) || c.errors)
			stop = true;
		/* Post while the window allows: at most WINDOW messages not yet verified by the
		 * server (so the Write ring is never overwritten unchecked), and not yet completed
		 * here (so a source buffer is never rewritten while in flight). */
		while (!stop && c.posted - c.completed < WINDOW && c.posted < c.acked + WINDOW)
			post_message(&c, c.posted);
		if (stop && c.completed == c.posted)
			break;
		if (opt.migrate_after_ms >= 0 && !migrated_by_command &&
		    now_us() >= stream_start + opt.migrate_after_ms * 1000LL) {
			migrate_now(&r->apm);
			migrated_by_command = true;
		}
		if (poll_ctl(r, &m))
			die("unexpected control message %u", m.type);
		rearm_when_back(&r->apm, c.peer.gid);
		if (client_poll(&c, 100))
			last_progress = now_us();
		else if (now_us() - last_progress > (int64_t)opt.wait_s * 1000000) {
			c.errors++;
			say("no completion for %d s (%" PRIu64 " of %" PRIu64 " completed)",
			    opt.wait_s, c.completed, c.posted);
			break;
		}
	}
	if (cut_started)
		pthread_join(cutter, NULL);
	say("stream done: %" PRIu64 " messages posted, %" PRIu64 " completed", c.posted,
	    c.completed);

	/* Report to the server over TCP and read its verdict. */
	expect_mig = cut_started || migrated_by_command || path_mig_events() > 0;
	send_ctl(fd, (struct ctl_msg){ .type = CTL_DONE, .count = c.posted,
				       .expect_mig = expect_mig });
	while ((m = recv_ctl(fd)).type == CTL_MIGRATED)
		;  /* a late one; the result follows */
	if (m.type != CTL_RESULT)
		die("unexpected control message %u", m.type);
	close(fd);
	r->ctl_fd = -1;
	if (expect_mig)
		wait_path_mig(5);
	after = query_path(r->qp);
	print_path("at the end", after);
	events_stop();
	events_summary(evs, sizeof(evs));
	ok = c.errors == 0 && c.completed == c.posted && m.ok && m.count == c.posted &&
	     migration_ok(&r->apm, expect_mig, after);
	report_client(&c, &m, before, after, evs, ok);
	destroy_resources(r);
	return ok ? 0 : 1;
}
