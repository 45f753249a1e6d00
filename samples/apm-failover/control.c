// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The TCP control channel: the server accepts, the client connects (over the alternate path's
 * link, so that cutting the primary link does not break it). Over it the two sides exchange what
 * connects the QPs (struct conn_info), then control messages (struct ctl_msg): each migration,
 * so that the peer may re-arm, and at the end the client's count and the server's verdict.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "sample.h"

void write_all(int fd, const void *buf, size_t len, const char *what)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("sending %s over TCP: %s", what, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

/* Reads exactly `len` bytes; the socket's SO_RCVTIMEO bounds the wait. */
void read_all(int fd, void *buf, size_t len, const char *what)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			die("receiving %s over TCP: connection closed by the peer", what);
		if (n < 0)
			die("receiving %s over TCP: %s", what,
			    errno == EAGAIN ? "timed out" : strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void set_timeout(int fd, int secs)
{
	struct timeval tv = { .tv_sec = secs };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int tcp_accept(void)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(opt.tcp_port),
				   .sin6_addr = IN6ADDR_ANY_INIT };
	struct pollfd pfd = { .events = POLLIN };
	int one = 1, lfd, fd;

	lfd = socket(AF_INET6, SOCK_STREAM, 0);  /* dual stack: IPv4 clients too */
	if (lfd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1))
		die("TCP port %d: %s", opt.tcp_port, strerror(errno));
	say("waiting for the client on TCP port %d", opt.tcp_port);
	pfd.fd = lfd;
	if (poll(&pfd, 1, opt.wait_s * 1000) <= 0)
		die("no client within %d s", opt.wait_s);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(lfd);
	set_timeout(fd, opt.wait_s);
	return fd;
}

/* Connects to the server, retrying while it is not listening yet (at most opt.wait_s). */
int tcp_connect(void)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	int64_t end = now_us() + (int64_t)opt.wait_s * 1000000;
	char port[16];
	int rc, fd;

	snprintf(port, sizeof(port), "%d", opt.tcp_port);
	rc = getaddrinfo(opt.server, port, &hints, &ai);
	if (rc)
		die("%s: %s", opt.server, gai_strerror(rc));
	for (;;) {
		fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket: %s", strerror(errno));
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		close(fd);
		if (now_us() > end)
			die("cannot connect to %s:%d: %s", opt.server, opt.tcp_port,
			    strerror(errno));
		usleep(100000);
	}
	freeaddrinfo(ai);
	set_timeout(fd, opt.wait_s);
	return fd;
}

/* ---- Connecting the QPs: what each side tells the other -------------------------------------- */

struct conn_info my_info(struct res *r, uint64_t addr, uint32_t rkey)
{
	struct conn_info ci = {
		.qpn = htonl(r->qp->qp_num),
		.psn = htonl(r->psn),
		.rkey = htonl(rkey),
		.msg_size = htonl(opt.msg_size),
		.addr = htobe64(addr),
		.gid = { r->apm.path[0].gid, r->apm.path[1].gid },
	};
	return ci;
}

struct conn_info peer_info(const struct conn_info *wire)
{
	struct conn_info ci = *wire;

	ci.qpn = ntohl(wire->qpn);
	ci.psn = ntohl(wire->psn);
	ci.rkey = ntohl(wire->rkey);
	ci.msg_size = ntohl(wire->msg_size);
	ci.addr = be64toh(wire->addr);
	return ci;
}

/* ---- Control messages ------------------------------------------------------------------------ */

/* Sends a control message (converted to network byte order here). */
void send_ctl(int fd, struct ctl_msg m)
{
	m.type = htonl(m.type);
	m.migrations = htonl(m.migrations);
	m.count = htobe64(m.count);
	m.expect_mig = htonl(m.expect_mig);
	m.errors = htonl(m.errors);
	m.mig_state = htonl(m.mig_state);
	m.port = htonl(m.port);
	m.ok = htonl(m.ok);
	write_all(fd, &m, sizeof(m), "a control message");
}

/* Receives one control message (waiting at most SO_RCVTIMEO). */
struct ctl_msg recv_ctl(int fd)
{
	struct ctl_msg m;

	read_all(fd, &m, sizeof(m), "a control message");
	m.type = ntohl(m.type);
	m.migrations = ntohl(m.migrations);
	m.count = be64toh(m.count);
	m.expect_mig = ntohl(m.expect_mig);
	m.errors = ntohl(m.errors);
	m.mig_state = ntohl(m.mig_state);
	m.port = ntohl(m.port);
	m.ok = ntohl(m.ok);
	return m;
}

/* Reads a control message if one is waiting. CTL_MIGRATED is handled here (returns false);
 * any other is returned in *m (returns true). */
bool poll_ctl(struct res *r, struct ctl_msg *m)
{
	struct pollfd pfd = { .fd = r->ctl_fd, .events = POLLIN };

	if (poll(&pfd, 1, 0) <= 0)
		return false;
	*m = recv_ctl(r->ctl_fd);
	if (m->type != CTL_MIGRATED)
		return true;
	r->apm.peer_migrations = m->migrations;
	say("the peer reports its migration #%u", m->migrations);
	return false;
}

/* apm.tell_peer: "my QP migrated" (while the connection is open). */
void tell_peer_migrated(void *res, unsigned migrations)
{
	struct res *r = res;

	if (r->ctl_fd >= 0)
		send_ctl(r->ctl_fd, (struct ctl_msg){ .type = CTL_MIGRATED,
						      .migrations = migrations });
}
