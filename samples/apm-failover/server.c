// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* The server, in order: accept the client, connect and arm the QP, verify the stream while
 * re-arming after a migration, then answer the client's count with its verdict. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sample.h"

int run_server(void)
{
	struct server s = { 0 };
	struct res *r = &s.r;
	struct conn_info wire, peer;
	struct ctl_msg done = { 0 }, m;
	struct path_state before, after;
	int64_t last_progress, end;
	bool done_seen = false, ok;
	char evs[256];
	int fd;

	role = "server";
	create_resources(r, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	events_start(r->ctx);

	fd = r->ctl_fd = tcp_accept();
	read_all(fd, &wire, sizeof(wire), "the client's QP information");
	peer = peer_info(&wire);
	print_peer(&peer);
	s.size = peer.msg_size;
	if (s.size < sizeof(struct msg_hdr) || s.size % 4 || s.size > (1u << 20))
		die("bad message size %u from the client", s.size);

	/* The buffer: the Write ring (remote writable), receive buffers, ack buffers. */
	register_buffer(r, (size_t)(WRITE_SLOTS + RECV_SLOTS) * s.size + ACK_SLOTS * ACK_BUF,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	s.ring = r->buf;
	s.recv = s.ring + (size_t)WRITE_SLOTS * s.size;
	s.acks = s.recv + (size_t)RECV_SLOTS * s.size;
	for (uint64_t i = 0; i < RECV_SLOTS; i++)
		post_recv(r, s.recv + i * s.size, s.size, i);

	/* RTS and armed before the client learns our QPN: its first packet finds us ready. */
	connect_and_rearm(r, &peer);
	wire = my_info(r, (uintptr_t)s.ring, r->mr->rkey);
	write_all(fd, &wire, sizeof(wire), "our QP information");

	/* The client's first message arms our alternate path; ack it once ARMED. */
	last_progress = now_us();
	while (s.next_seq == 0) {
		if (server_poll(&s, -1, 100))
			last_progress = now_us();
		else if (now_us() - last_progress > (int64_t)opt.wait_s * 1000000)
			die("no message from the client within %d s", opt.wait_s);
	}
	before = wait_armed(r->qp, opt.wait_s);
	print_path("ARMED", before);
	send_ack(&s);

	/* Verify the stream until the client says how many it sent (TCP) and all are in. */
	say("verifying the stream");
	last_progress = now_us();
	for (;;) {
		if (server_poll(&s, done_seen ? -1 : fd, 100))
			last_progress = now_us();
		rearm_when_back(&r->apm, peer.gid);
		if (!done_seen && poll_ctl(r, &m)) {
			if (m.type != CTL_DONE)
				die("unexpected control message %u", m.type);
			done = m;
			done_seen = true;
			last_progress = now_us();
			say("client: %" PRIu64 " messages sent", done.count);
		}
		/* The last message may be an RDMA Write: no Send follows to trigger its check. */
		if (done_seen && done.count % 2 == 0 && s.next_seq == done.count - 1)
			verify_writes(&s, done.count);
		if (done_seen && s.next_seq >= done.count)
			break;
		/* Once the client is done, whatever it sent has landed: wait briefly. */
		if (now_us() - last_progress > (done_seen ? 5 : (int64_t)opt.wait_s) * 1000000) {
			server_error(&s, "no progress for %d s (verified %" PRIu64 " messages)",
				     done_seen ? 5 : opt.wait_s, s.next_seq);
			verify_writes(&s, done.count);  /* report what is missing */
			break;
		}
	}

	/* Migration expected: give our PATH_MIG event a moment to be read. */
	if (done.expect_mig)
		wait_path_mig(5);
	after = query_path(r->qp);
	print_path("at the end", after);

	ok = done_seen && s.errors == 0 && s.next_seq == done.count &&
	     migration_ok(&r->apm, done.expect_mig, after);
	if (done_seen)
		send_ctl(fd, (struct ctl_msg){
			.type = CTL_RESULT,
			.count = s.sends + s.writes,
			.errors = (uint32_t)s.errors,
			.migrations = path_mig_events(),
			.mig_state = after.mig,
			.port = after.port,
			.ok = ok,
		});

	/* Let the client read the result before the QP goes away. */
	end = now_us() + 5000000;
	while (now_us() < end) {
		char c;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (poll(&pfd, 1, 100) > 0 && recv(fd, &c, 1, 0) <= 0)
			break;  /* client closed */
	}
	close(fd);
	events_stop();
	events_summary(evs, sizeof(evs));
	report_server(&s, &done, before, after, evs, ok);
	destroy_resources(r);
	return ok ? 0 : 1;
}
