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
 * Build: make (cc -std=c11 -Wall -Wextra -Werror apm_failover.c -libverbs -lpthread).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* ---- Tunables -------------------------------------------------------------------------------- */

#define DEFAULT_TCP_PORT 18600
#define DEFAULT_MSG_SIZE 2048   /* two packets per message at MTU 1024 */
#define DEFAULT_SECONDS 5
#define DEFAULT_CUT_AFTER_MS 1000
#define DEFAULT_WAIT_S 60       /* bound on every wait (TCP, arming, a stalled stream) */
#define QP_TIMEOUT 14           /* local ACK timeout: 4.096 us * 2^14 = 67 ms */
#define QP_RETRY_CNT 7          /* retries before the path is declared dead */
#define QP_RNR_RETRY 7          /* 7 = retry forever on RNR NAKs */
#define PATH_MTU IBV_MTU_1024

#define WINDOW 32               /* client: messages posted but not yet verified by the server */
#define WRITE_SLOTS 64          /* server: RDMA Write targets, a ring (must be >= WINDOW) */
#define RECV_SLOTS 32           /* server: receive buffers for the client's Sends */
#define ACK_EVERY 4             /* server: one ack per ACK_EVERY verified Sends */
#define ACK_SLOTS 8             /* server: ack messages in flight at most */
#define ACK_RECVS 16            /* client: receive buffers for acks (> ACK_SLOTS) */
#define ACK_BUF 64              /* bytes per ack buffer */
#define CQ_DEPTH 256

#define MSG_MAGIC 0x41504d31u   /* "APM1" */
#define ACK_MAGIC 0x41434b31u   /* "ACK1" */

/* wr_id of a receive: the buffer slot, tagged so that it cannot be confused with a sequence. */
#define RECV_TAG ((uint64_t)1 << 63)

/* ---- Messages -------------------------------------------------------------------------------- */

/* Every data message (Send or RDMA Write) starts with this header, then a pattern of 32-bit
 * words derived from the sequence number. All multi-byte fields are little-endian on the wire. */
struct msg_hdr {
	uint64_t seq;
	uint32_t magic;
	uint32_t size;
};

/* The server's ack: the number of messages verified so far (all of 0 .. verified-1). */
struct ack_msg {
	uint32_t magic;
	uint32_t pad;
	uint64_t verified;
};

/* What each side tells the other over TCP to connect the QPs (network byte order). */
struct conn_info {
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;          /* server: the Write ring's rkey */
	uint32_t msg_size;      /* client: the message size it will use */
	uint64_t addr;          /* server: the Write ring's address */
	union ibv_gid gid[2];   /* [0] primary path, [1] alternate path */
};

/* Control messages over TCP once the QPs are connected; one struct for all (network order). */
enum ctl_type {
	CTL_MIGRATED = 1,       /* "my QP migrated": the peer may re-arm now (rearm_when_back) */
	CTL_DONE,               /* client -> server: the stream is over */
	CTL_RESULT,             /* server -> client: what the server verified */
};

struct ctl_msg {
	uint32_t type;
	uint32_t migrations;    /* MIGRATED, RESULT: PATH_MIG events seen by the sender so far */
	uint64_t count;         /* DONE: messages sent; RESULT: messages verified */
	uint32_t expect_mig;    /* DONE: a migration was expected (link cut, or by command) */
	uint32_t errors;        /* RESULT: data errors */
	uint32_t mig_state;     /* RESULT: the server QP's path_mig_state at the end ... */
	uint32_t port;          /* ... and its primary port */
	uint32_t ok;            /* RESULT: the server's verdict */
	uint32_t pad;
};

/* ---- Options --------------------------------------------------------------------------------- */

struct options {
	const char *dev_name;
	const char *addr[2];    /* local address of the primary [0] and alternate [1] path */
	const char *server;     /* client only: the server's TCP address */
	int tcp_port;
	uint32_t msg_size;
	int seconds;
	uint64_t count;         /* 0: no limit */
	int wait_s;
	int qp_timeout;
	int retry_cnt;
	const char *cut_cmd;
	int cut_after_ms;
	const char *restore_cmd;
	int restore_after_ms;
	int migrate_after_ms;   /* -1: never */
};

static struct options opt = {
	.tcp_port = DEFAULT_TCP_PORT,
	.msg_size = DEFAULT_MSG_SIZE,
	.seconds = DEFAULT_SECONDS,
	.wait_s = DEFAULT_WAIT_S,
	.qp_timeout = QP_TIMEOUT,
	.retry_cnt = QP_RETRY_CNT,
	.cut_after_ms = DEFAULT_CUT_AFTER_MS,
	.migrate_after_ms = -1,
};

/* ---- Time and logging ------------------------------------------------------------------------ */

/* Microseconds on the monotonic clock. Log lines show it in seconds: on one machine (two netns)
 * the client's and the server's lines line up with each other and roughly with dmesg. */
static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const char *role = "client";

/* printf with a timestamp (CLOCK_MONOTONIC, in seconds) and the role. */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int64_t t = now_us();

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	printf("[%5" PRId64 ".%03" PRId64 " %s] %s\n", t / 1000000, t / 1000 % 1000, role, line);
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	say("error: %s", line);
	exit(2);
}

static const char *mig_state_str(enum ibv_mig_state s)
{
	switch (s) {
	case IBV_MIG_MIGRATED: return "MIGRATED";
	case IBV_MIG_REARM: return "REARM";
	case IBV_MIG_ARMED: return "ARMED";
	}
	return "?";
}

/* ---- Async events: a thread that prints and counts them -------------------------------------- */

#define MAX_EVENT_TYPE 32

/* When the cut command returned, i.e. the primary link is down (-1: not yet, or not by us). */
static _Atomic int64_t cut_us = -1;

static struct {
	struct ibv_context *ctx;
	pthread_t thread;
	atomic_bool stop;
	_Atomic unsigned count[MAX_EVENT_TYPE];
	_Atomic int64_t first_path_mig_us;  /* -1 until the first PATH_MIG */
} events = { .first_path_mig_us = -1 };

static void *event_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&events.stop)) {
		struct pollfd pfd = { .fd = events.ctx->async_fd, .events = POLLIN };
		struct ibv_async_event ev;
		char what[64] = "";
		int64_t t;

		/* Short timeout: the thread notices `stop` within 100 ms. */
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		if (ibv_get_async_event(events.ctx, &ev))
			continue;  /* async_fd is non-blocking: EAGAIN */
		t = now_us();
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			snprintf(what, sizeof(what), " on QP 0x%x", ev.element.qp->qp_num);
			break;
		case IBV_EVENT_PORT_ACTIVE:
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_LID_CHANGE:
		case IBV_EVENT_PKEY_CHANGE:
		case IBV_EVENT_GID_CHANGE:
		case IBV_EVENT_SM_CHANGE:
		case IBV_EVENT_CLIENT_REREGISTER:
			snprintf(what, sizeof(what), " on port %d", ev.element.port_num);
			break;
		default:
			break;
		}
		say("async event: %s%s", ibv_event_type_str(ev.event_type), what);
		if ((unsigned)ev.event_type < MAX_EVENT_TYPE)
			atomic_fetch_add(&events.count[ev.event_type], 1);
		if (ev.event_type == IBV_EVENT_PATH_MIG &&
		    atomic_load(&events.first_path_mig_us) < 0)
			atomic_store(&events.first_path_mig_us, t);
		/* Every event must be acknowledged, or destroying its QP/CQ blocks forever. */
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

static void events_start(struct ibv_context *ctx)
{
	int flags = fcntl(ctx->async_fd, F_GETFL);

	events.ctx = ctx;
	if (fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK))
		die("fcntl(async_fd): %s", strerror(errno));
	if (pthread_create(&events.thread, NULL, event_thread, NULL))
		die("pthread_create");
}

static void events_stop(void)
{
	atomic_store(&events.stop, true);
	pthread_join(events.thread, NULL);
}

static unsigned path_mig_events(void)
{
	return atomic_load(&events.count[IBV_EVENT_PATH_MIG]);
}

/* Waits up to `secs` for a first PATH_MIG event; true if one was seen. */
static bool wait_path_mig(int secs)
{
	int64_t end = now_us() + (int64_t)secs * 1000000;

	while (!path_mig_events() && now_us() < end)
		usleep(10000);
	return path_mig_events() > 0;
}

/* "PORT_ERR x1, PATH_MIG x1" */
static void events_summary(char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < MAX_EVENT_TYPE; i++) {
		unsigned c = atomic_load(&events.count[i]);

		if (c && n < len)
			n += snprintf(buf + n, len - n, "%s%s x%u", n ? ", " : "",
				      ibv_event_type_str((enum ibv_event_type)i), c);
	}
	if (!n)
		snprintf(buf, len, "none");
}

/* ---- GIDs ------------------------------------------------------------------------------------ */

/* An IPv4 address as a RoCE v2 GID (IPv4-mapped IPv6, ::ffff:a.b.c.d), or an IPv6 address. */
static int addr_to_gid(const char *addr, union ibv_gid *gid)
{
	struct in_addr v4;

	memset(gid, 0, sizeof(*gid));
	if (inet_pton(AF_INET, addr, &v4) == 1) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &v4, 4);
		return 0;
	}
	return inet_pton(AF_INET6, addr, gid->raw) == 1 ? 0 : -1;
}

static const char *gid_str(const union ibv_gid *gid, char *buf, size_t len)
{
	return inet_ntop(AF_INET6, gid->raw, buf, len);
}

/* One end of a path on this device: the port and the GID index that carry a local address. */
struct local_path {
	const char *addr;
	union ibv_gid gid;
	uint8_t port;
	int gid_index;
};

/* Finds the RoCE v2 GID of `lp->addr` on any port of the device (one ioctl for the whole GID
 * table; the same search over sysfs: /sys/class/infiniband/DEV/ports/P/gids/N and
 * gid_attrs/types/N == "RoCE v2"). Returns 0, or -1 if the address has no such GID. */
static int find_gid(struct ibv_context *ctx, struct local_path *lp)
{
	struct ibv_device_attr dattr;
	struct ibv_gid_entry *ent;
	size_t total = 0;
	ssize_t n;

	if (addr_to_gid(lp->addr, &lp->gid))
		die("'%s' is not an IPv4 or IPv6 address", lp->addr);
	if (ibv_query_device(ctx, &dattr))
		die("ibv_query_device: %s", strerror(errno));
	for (uint8_t p = 1; p <= dattr.phys_port_cnt; p++) {
		struct ibv_port_attr pattr;

		if (ibv_query_port(ctx, p, &pattr))
			die("ibv_query_port %u: %s", p, strerror(errno));
		total += pattr.gid_tbl_len;
	}
	ent = calloc(total, sizeof(*ent));
	if (!ent)
		die("out of memory");
	n = ibv_query_gid_table(ctx, ent, total, 0);
	if (n < 0)
		die("ibv_query_gid_table: %s", strerror((int)-n));
	for (ssize_t i = 0; i < n; i++) {
		if (ent[i].gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    !memcmp(ent[i].gid.raw, lp->gid.raw, sizeof(lp->gid.raw))) {
			lp->port = (uint8_t)ent[i].port_num;
			lp->gid_index = (int)ent[i].gid_index;
			free(ent);
			return 0;
		}
	}
	free(ent);
	return -1;
}

/* ---- TCP control connection ------------------------------------------------------------------ */

static void write_all(int fd, const void *buf, size_t len, const char *what)
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
static void read_all(int fd, void *buf, size_t len, const char *what)
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

static int tcp_accept(void)
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
static int tcp_connect(void)
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

/* Sends a control message (converted to network byte order here). */
static void send_ctl(int fd, struct ctl_msg m)
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
static struct ctl_msg recv_ctl(int fd)
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

/* ---- Verbs resources ------------------------------------------------------------------------- */

struct res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t buf_len;
	uint32_t psn;
	struct local_path path[2];  /* [0] primary, [1] alternate, as given by -a and -A */
	int in_use;                 /* which of them the QP uses now (flips at each migration) */
	int ctl_fd;                 /* the TCP control connection */
	unsigned migrations;        /* PATH_MIG events seen by track_migrations() */
	unsigned peer_migrations;   /* ... and by the peer (CTL_MIGRATED) */
	bool rearm_pending;         /* migrated; the path left behind is not loaded again yet */
	int64_t next_check_us;
};

static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; list[i]; i++) {
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			ctx = ibv_open_device(list[i]);
			if (!ctx)
				die("ibv_open_device %s: %s", name, strerror(errno));
			break;
		}
	}
	ibv_free_device_list(list);
	if (!ctx)
		die("no RDMA device named %s", name);
	return ctx;
}

/* Device, GIDs, PD, CQ with a completion channel, and an RC QP in INIT on the primary port. */
static void create_resources(struct res *r, int qp_access)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = WINDOW + ACK_SLOTS,
			.max_recv_wr = RECV_SLOTS,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.qp_access_flags = qp_access,
	};
	char g[INET6_ADDRSTRLEN];
	int flags;

	r->ctl_fd = -1;
	r->ctx = open_device(opt.dev_name);
	for (int i = 0; i < 2; i++) {
		r->path[i].addr = opt.addr[i];
		if (find_gid(r->ctx, &r->path[i]))
			die("no RoCE v2 GID for %s on %s (is the address on the device's netdev?)",
			    opt.addr[i], opt.dev_name);
		say("%s path: %s port %u, GID index %d (%s)", i ? "alternate" : "primary",
		    opt.dev_name, r->path[i].port, r->path[i].gid_index,
		    gid_str(&r->path[i].gid, g, sizeof(g)));
	}
	r->pd = ibv_alloc_pd(r->ctx);
	if (!r->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	r->channel = ibv_create_comp_channel(r->ctx);
	if (!r->channel)
		die("ibv_create_comp_channel: %s", strerror(errno));
	flags = fcntl(r->channel->fd, F_GETFL);
	if (fcntl(r->channel->fd, F_SETFL, flags | O_NONBLOCK))
		die("fcntl(channel): %s", strerror(errno));
	r->cq = ibv_create_cq(r->ctx, CQ_DEPTH, NULL, r->channel, 0);
	if (!r->cq)
		die("ibv_create_cq: %s", strerror(errno));
	init.send_cq = r->cq;
	init.recv_cq = r->cq;
	r->qp = ibv_create_qp(r->pd, &init);
	if (!r->qp)
		die("ibv_create_qp: %s", strerror(errno));
	attr.port_num = r->path[0].port;
	if (ibv_modify_qp(r->qp, &attr,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT: %s", strerror(errno));
	r->psn = (uint32_t)lrand48() & 0xffffff;
}

static void register_buffer(struct res *r, size_t len, int access)
{
	r->buf_len = len;
	r->buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	if (!r->buf)
		die("out of memory");
	memset(r->buf, 0, len);
	r->mr = ibv_reg_mr(r->pd, r->buf, len, access);
	if (!r->mr)
		die("ibv_reg_mr: %s", strerror(errno));
}

static void destroy_resources(struct res *r)
{
	if (r->qp)
		ibv_destroy_qp(r->qp);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	free(r->buf);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->channel)
		ibv_destroy_comp_channel(r->channel);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->ctx)
		ibv_close_device(r->ctx);
}

/* An address vector from our local path `lp` to the peer GID `dgid` (RoCE: always global). */
static struct ibv_ah_attr path_to(const struct local_path *lp, const union ibv_gid *dgid)
{
	struct ibv_ah_attr ah = {
		.is_global = 1,
		.port_num = lp->port,
		.grh = {
			.dgid = *dgid,
			.sgid_index = (uint8_t)lp->gid_index,
			.hop_limit = 64,
		},
	};
	return ah;
}

/* INIT -> RTR -> RTS on the primary path. */
static void connect_qp(struct res *r, const struct conn_info *peer)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = PATH_MTU,
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = path_to(&r->path[0], &peer->gid[0]),
	};

	if (ibv_modify_qp(r->qp, &attr,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR: %s", strerror(errno));

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = r->psn;
	attr.timeout = (uint8_t)opt.qp_timeout;
	attr.retry_cnt = (uint8_t)opt.retry_cnt;
	attr.rnr_retry = QP_RNR_RETRY;
	attr.max_rd_atomic = 1;
	if (ibv_modify_qp(r->qp, &attr,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS: %s", strerror(errno));
}

/*
 * The heart of APM: load an alternate path and arm it (RTS -> RTS; the same attributes may also
 * ride on the RTR -> RTS transition). `lp` is the local end of the new alternate path, `dgid`
 * the peer's GID on it. After a migration, call it again with the old primary path (once its
 * link is back) to be protected again.
 */
static void load_alt_path(struct res *r, const struct local_path *lp, const union ibv_gid *dgid)
{
	struct ibv_qp_attr attr = {
		.alt_ah_attr = path_to(lp, dgid),
		.alt_port_num = lp->port,
		.alt_pkey_index = 0,
		.alt_timeout = (uint8_t)opt.qp_timeout,
		.path_mig_state = IBV_MIG_REARM,
	};

	if (ibv_modify_qp(r->qp, &attr, IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE))
		die("modify QP (RTS -> RTS) to load the alternate path on port %u and REARM: %s%s",
		    lp->port, strerror(errno),
		    errno == EINVAL ? " (a RoCE alternate path needs an APM-capable device and a "
				      "kernel that allows it)" : "");
}

/* Follows the PATH_MIG events: which path the QP uses now, and whether to re-arm; tells the
 * peer about each migration. */
static void track_migrations(struct res *r)
{
	unsigned n = path_mig_events();

	if (n == r->migrations)
		return;
	r->in_use ^= (int)((n - r->migrations) & 1);  /* each migration swaps the two paths */
	r->migrations = n;
	r->rearm_pending = true;
	if (r->ctl_fd >= 0)
		send_ctl(r->ctl_fd, (struct ctl_msg){ .type = CTL_MIGRATED, .migrations = n });
}

/* Reads a control message if one is waiting. CTL_MIGRATED is handled here (returns false);
 * any other is returned in *m (returns true). */
static bool poll_ctl(struct res *r, struct ctl_msg *m)
{
	struct pollfd pfd = { .fd = r->ctl_fd, .events = POLLIN };

	if (poll(&pfd, 1, 0) <= 0)
		return false;
	*m = recv_ctl(r->ctl_fd);
	if (m->type != CTL_MIGRATED)
		return true;
	r->peer_migrations = m->migrations;
	say("the peer reports its migration #%u", m->migrations);
	return false;
}

/*
 * After a migration the QP runs on the old alternate path, unprotected. Once the path it left is
 * usable again (its port ACTIVE, its address a GID again; the index may have changed), load it
 * as the new alternate path and REARM; the next packets both ways arm it, and a later failure
 * migrates back. Called from the main loop: the QP is modified by one thread only.
 *
 * But never before the peer has migrated too. A QP in REARM sends MigReq=0 over its new
 * primary path; a peer still ARMED on the old one sees those packets arrive on its *alternate*
 * path without a migration request and drops them: the peer never migrates and our retries run
 * out. When the cut made both sides migrate this cannot happen in practice, but after a
 * migration on command it does at once. The peer says so over TCP (CTL_MIGRATED), the role the
 * connection manager plays on InfiniBand (LAP/APR).
 */
static void rearm_when_back(struct res *r, const struct conn_info *peer)
{
	struct ibv_port_attr pattr;
	struct local_path *old;

	track_migrations(r);
	if (!r->rearm_pending || r->peer_migrations < r->migrations ||
	    now_us() < r->next_check_us)
		return;
	r->next_check_us = now_us() + 100000;  /* not back yet? look again in 100 ms */
	old = &r->path[!r->in_use];
	if (ibv_query_port(r->ctx, old->port, &pattr) || pattr.state != IBV_PORT_ACTIVE ||
	    find_gid(r->ctx, old))
		return;
	load_alt_path(r, old, &peer->gid[!r->in_use]);
	r->rearm_pending = false;
	say("port %u is ACTIVE and the peer migrated too: loaded %s (GID index %d) as the new "
	    "alternate path, REARM", old->port, old->addr, old->gid_index);
}

/* Migration on command (RTS -> RTS, PATH_MIG_STATE = MIGRATED), e.g. to drain a link for
 * maintenance: the QP switches to its ARMED alternate path at once; the peer follows. */
static void migrate_now(struct res *r)
{
	struct ibv_qp_attr attr = { .path_mig_state = IBV_MIG_MIGRATED };

	say("migrating on command (ibv_modify_qp PATH_MIG_STATE = MIGRATED)");
	if (ibv_modify_qp(r->qp, &attr, IBV_QP_PATH_MIG_STATE))
		die("modify QP to migrate: %s", strerror(errno));
}

struct path_state {
	enum ibv_qp_state qp_state;
	enum ibv_mig_state mig;
	uint8_t port;
	uint8_t alt_port;
};

static struct path_state query_path(struct res *r)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct path_state ps = { 0 };

	if (ibv_query_qp(r->qp, &attr,
			 IBV_QP_STATE | IBV_QP_PATH_MIG_STATE | IBV_QP_PORT | IBV_QP_AV |
			 IBV_QP_ALT_PATH, &init))
		die("ibv_query_qp: %s", strerror(errno));
	ps.qp_state = attr.qp_state;
	ps.mig = attr.path_mig_state;
	ps.port = attr.ah_attr.port_num;
	ps.alt_port = attr.alt_port_num;
	return ps;
}

static void print_path(const char *when, struct path_state ps)
{
	say("%s: path_mig_state %s, primary port %u, alternate port %u", when,
	    mig_state_str(ps.mig), ps.port, ps.alt_port);
}

static void print_before_after(struct path_state before, struct path_state after)
{
	say("path before: %s, primary port %u, alternate port %u; after: %s, primary port %u, "
	    "alternate port %u", mig_state_str(before.mig), before.port, before.alt_port,
	    mig_state_str(after.mig), after.port, after.alt_port);
}

/*
 * When a migration was expected: PATH_MIG was seen, and the QP is in RTS on the path the
 * events say it should be; if the path left behind was loaded again, that one is ARMED.
 */
static bool migration_ok(struct res *r, bool expect_mig, struct path_state after)
{
	track_migrations(r);
	if (!expect_mig)
		return true;
	if (!path_mig_events() || after.qp_state != IBV_QPS_RTS ||
	    after.port != r->path[r->in_use].port)
		return false;
	return r->rearm_pending ? after.mig == IBV_MIG_MIGRATED
				: after.mig == IBV_MIG_ARMED &&
				  after.alt_port == r->path[!r->in_use].port;
}

/* Polls query_qp until the alternate path is ARMED (at most opt.wait_s). */
static struct path_state wait_armed(struct res *r)
{
	int64_t end = now_us() + (int64_t)opt.wait_s * 1000000;
	struct path_state ps;

	while ((ps = query_path(r)).mig != IBV_MIG_ARMED) {
		if (now_us() > end)
			die("the alternate path is not ARMED after %d s (path_mig_state %s)",
			    opt.wait_s, mig_state_str(ps.mig));
		usleep(1000);
	}
	return ps;
}

/*
 * Returns up to `max` completions. If the CQ is empty, arms it and sleeps on the completion
 * channel (and on `fd`, if >= 0) for at most `timeout_ms`. Re-polling after ibv_req_notify_cq()
 * closes the race with a completion that arrived just before the CQ was armed.
 */
static int poll_or_wait(struct res *r, struct ibv_wc *wc, int max, int fd, int timeout_ms)
{
	struct pollfd pfd[2] = {
		{ .fd = r->channel->fd, .events = POLLIN },
		{ .fd = fd, .events = POLLIN },  /* a negative fd is ignored by poll() */
	};
	int n = ibv_poll_cq(r->cq, max, wc);

	if (n)
		return n;
	if (ibv_req_notify_cq(r->cq, 0))
		die("ibv_req_notify_cq: %s", strerror(errno));
	n = ibv_poll_cq(r->cq, max, wc);
	if (n)
		return n;
	if (poll(pfd, 2, timeout_ms) > 0 && (pfd[0].revents & POLLIN)) {
		struct ibv_cq *cq;
		void *cq_ctx;

		if (!ibv_get_cq_event(r->channel, &cq, &cq_ctx))
			ibv_ack_cq_events(cq, 1);
	}
	return ibv_poll_cq(r->cq, max, wc);
}

/* ---- Data pattern ---------------------------------------------------------------------------- */

static uint32_t pattern_word(uint64_t seq, uint32_t i)
{
	return (uint32_t)(seq * 2654435761u) ^ (i * 0x01000193u);
}

static void fill_msg(uint8_t *buf, uint64_t seq, uint32_t size)
{
	struct msg_hdr h = { htole64(seq), htole32(MSG_MAGIC), htole32(size) };

	memcpy(buf, &h, sizeof(h));
	for (uint32_t i = 0; i < (size - sizeof(h)) / 4; i++) {
		uint32_t w = htole32(pattern_word(seq, i));

		memcpy(buf + sizeof(h) + 4 * i, &w, 4);
	}
}

/* Checks a message's header and pattern. Returns NULL if it is message `seq`, else why not. */
static const char *check_msg(const uint8_t *buf, uint64_t seq, uint32_t size, char *why,
			     size_t len)
{
	struct msg_hdr h;

	memcpy(&h, buf, sizeof(h));
	if (le32toh(h.magic) != MSG_MAGIC || le32toh(h.size) != size) {
		snprintf(why, len, "bad header (magic 0x%x, size %u)", le32toh(h.magic),
			 le32toh(h.size));
		return why;
	}
	if (le64toh(h.seq) != seq) {
		snprintf(why, len, "holds message %" PRIu64, (uint64_t)le64toh(h.seq));
		return why;
	}
	for (uint32_t i = 0; i < (size - sizeof(h)) / 4; i++) {
		uint32_t w;

		memcpy(&w, buf + sizeof(h) + 4 * i, 4);
		if (le32toh(w) != pattern_word(seq, i)) {
			snprintf(why, len, "corrupted at byte %zu", sizeof(h) + 4 * i);
			return why;
		}
	}
	return NULL;
}

/* ---- Connecting the QPs ---------------------------------------------------------------------- */

static struct conn_info my_info(struct res *r, uint64_t addr, uint32_t rkey)
{
	struct conn_info ci = {
		.qpn = htonl(r->qp->qp_num),
		.psn = htonl(r->psn),
		.rkey = htonl(rkey),
		.msg_size = htonl(opt.msg_size),
		.addr = htobe64(addr),
		.gid = { r->path[0].gid, r->path[1].gid },
	};
	return ci;
}

static struct conn_info peer_info(const struct conn_info *wire)
{
	struct conn_info ci = *wire;

	ci.qpn = ntohl(wire->qpn);
	ci.psn = ntohl(wire->psn);
	ci.rkey = ntohl(wire->rkey);
	ci.msg_size = ntohl(wire->msg_size);
	ci.addr = be64toh(wire->addr);
	return ci;
}

static void print_peer(const struct conn_info *p)
{
	char g0[INET6_ADDRSTRLEN], g1[INET6_ADDRSTRLEN];

	say("peer: QP 0x%x, PSN 0x%x, primary GID %s, alternate GID %s", p->qpn, p->psn,
	    gid_str(&p->gid[0], g0, sizeof(g0)), gid_str(&p->gid[1], g1, sizeof(g1)));
}

/* Both QPs connected on the primary path, then the alternate path loaded and REARMed. */
static void connect_and_rearm(struct res *r, const struct conn_info *peer)
{
	connect_qp(r, peer);
	print_path("after RTS", query_path(r));
	load_alt_path(r, &r->path[1], &peer->gid[1]);
	print_path("alternate path loaded", query_path(r));
}

/* ---- Server ---------------------------------------------------------------------------------- */

/* Server buffer layout: [Write ring: WRITE_SLOTS msgs][receive buffers: RECV_SLOTS msgs][acks] */
struct server {
	struct res r;
	uint32_t size;
	uint8_t *ring, *recv, *acks;
	uint64_t next_seq;        /* every message before it is verified */
	uint64_t errors;
	uint64_t sends, writes;   /* verified, by kind */
	unsigned sends_since_ack;
	unsigned acks_in_flight;
	unsigned ack_slot;
	bool ack_pending;
};

static void post_recv(struct res *r, uint8_t *buf, uint32_t len, uint64_t slot)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, r->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_TAG | slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(r->qp, &wr, &bad))
		die("ibv_post_recv: %s", strerror(errno));
}

static void server_error(struct server *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void server_error(struct server *s, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (++s->errors <= 10)
		say("DATA ERROR: %s", line);
}

/* Sends the cumulative ack "next_seq messages verified" unless ACK_SLOTS are in flight. */
static void send_ack(struct server *s)
{
	uint8_t *buf = s->acks + (size_t)s->ack_slot * ACK_BUF;
	struct ack_msg a = { htole32(ACK_MAGIC), 0, htole64(s->next_seq) };
	struct ibv_sge sge = { (uintptr_t)buf, sizeof(a), s->r.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = s->next_seq, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (s->acks_in_flight >= ACK_SLOTS) {
		s->ack_pending = true;  /* sent when an ack completes */
		return;
	}
	memcpy(buf, &a, sizeof(a));
	if (ibv_post_send(s->r.qp, &wr, &bad))
		die("ibv_post_send (ack): %s", strerror(errno));
	s->ack_slot = (s->ack_slot + 1) % ACK_SLOTS;
	s->acks_in_flight++;
	s->ack_pending = false;
	s->sends_since_ack = 0;
}

/* Verifies the RDMA Writes (odd sequence numbers) before message `limit`. */
static void verify_writes(struct server *s, uint64_t limit)
{
	char why[96];

	while (s->next_seq < limit) {
		uint64_t seq = s->next_seq;

		if (seq % 2 == 0) {
			server_error(s, "Send %" PRIu64 " is missing", seq);
		} else if (check_msg(s->ring + (seq % WRITE_SLOTS) * s->size, seq, s->size, why,
				     sizeof(why))) {
			server_error(s, "RDMA Write %" PRIu64 ": slot %" PRIu64 " %s", seq,
				     seq % WRITE_SLOTS, why);
		} else {
			s->writes++;
		}
		s->next_seq++;
	}
}

/*
 * A Send arrived. RC delivers in order, so every RDMA Write posted before this Send has already
 * been placed in the ring: check them, then the Send itself.
 */
static void on_send_received(struct server *s, const struct ibv_wc *wc)
{
	uint64_t slot = wc->wr_id & ~RECV_TAG;
	uint8_t *buf = s->recv + slot * s->size;
	struct msg_hdr h;
	uint64_t seq;
	char why[96];

	memcpy(&h, buf, sizeof(h));
	seq = le64toh(h.seq);
	if (wc->byte_len != s->size || le32toh(h.magic) != MSG_MAGIC) {
		server_error(s, "a Send of %u bytes with magic 0x%x", wc->byte_len,
			     le32toh(h.magic));
	} else if (seq < s->next_seq) {
		server_error(s, "Send %" PRIu64 " is a duplicate (expected %" PRIu64 ")", seq,
			     s->next_seq);
	} else {
		verify_writes(s, seq);
		if (check_msg(buf, seq, s->size, why, sizeof(why)))
			server_error(s, "Send %" PRIu64 ": %s", seq, why);
		else
			s->sends++;
		s->next_seq = seq + 1;
	}
	post_recv(&s->r, buf, s->size, slot);  /* the buffer is free again */
	if (++s->sends_since_ack >= ACK_EVERY)
		send_ack(s);
}

/* Handles completions; returns how many. */
static int server_poll(struct server *s, int fd, int timeout_ms)
{
	struct ibv_wc wc[16];
	int n = poll_or_wait(&s->r, wc, 16, fd, timeout_ms);

	if (n < 0)
		die("ibv_poll_cq");
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS) {
			server_error(s, "%s completion failed: %s (wr_id 0x%" PRIx64 ")",
				     wc[i].opcode & IBV_WC_RECV ? "receive" : "ack",
				     ibv_wc_status_str(wc[i].status), wc[i].wr_id);
		} else if (wc[i].opcode & IBV_WC_RECV) {
			on_send_received(s, &wc[i]);
		} else {
			s->acks_in_flight--;
			if (s->ack_pending)
				send_ack(s);
		}
	}
	return n;
}

static int run_server(void)
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
	before = wait_armed(r);
	print_path("ARMED", before);
	send_ack(&s);

	/* Verify the stream until the client says how many it sent (TCP) and all are in. */
	say("verifying the stream");
	last_progress = now_us();
	for (;;) {
		if (server_poll(&s, done_seen ? -1 : fd, 100))
			last_progress = now_us();
		rearm_when_back(r, &peer);
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
	after = query_path(r);
	print_path("at the end", after);

	ok = done_seen && s.errors == 0 && s.next_seq == done.count &&
	     migration_ok(r, done.expect_mig, after);
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

	say("=== summary (server) ===");
	say("messages verified: %" PRIu64 " of %" PRIu64 " (%" PRIu64 " Sends, %" PRIu64
	    " RDMA Writes), data errors: %" PRIu64, s.sends + s.writes, done.count, s.sends,
	    s.writes, s.errors);
	print_before_after(before, after);
	say("async events: %s", evs);
	say("result: %s", ok ? "PASS" : "FAIL");
	destroy_resources(r);
	return ok ? 0 : 1;
}

/* ---- Client ---------------------------------------------------------------------------------- */

/* Client buffer layout: [source buffers: WINDOW msgs][ack receive buffers: ACK_RECVS] */
struct client {
	struct res r;
	struct conn_info peer;
	uint8_t *src, *ackbuf;
	uint64_t posted, completed, errors;
	uint64_t sends, writes;
	uint64_t acked;           /* the server's latest "verified" count */
	/* Failover measurement: the longest gap between two successful send completions. */
	int64_t last_ok_us;
	int64_t gap_from_us, gap_to_us;
};

static int64_t cut_start_us = -1;  /* when the cut command started */

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

/* Message `seq`: an even one is a Send, an odd one an RDMA Write into the server's ring. */
static void post_message(struct client *c, uint64_t seq)
{
	uint32_t size = opt.msg_size;
	uint8_t *buf = c->src + (seq % WINDOW) * size;
	struct ibv_sge sge = { (uintptr_t)buf, size, c->r.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	fill_msg(buf, seq, size);
	if (seq % 2 == 0) {
		wr.opcode = IBV_WR_SEND;
	} else {
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = c->peer.addr + (seq % WRITE_SLOTS) * size;
		wr.wr.rdma.rkey = c->peer.rkey;
	}
	if (ibv_post_send(c->r.qp, &wr, &bad))
		die("ibv_post_send %" PRIu64 ": %s", seq, strerror(errno));
	c->posted++;
}

static int client_poll(struct client *c, int timeout_ms)
{
	struct ibv_wc wc[16];
	int n = poll_or_wait(&c->r, wc, 16, c->r.ctl_fd, timeout_ms);

	if (n < 0)
		die("ibv_poll_cq");
	for (int i = 0; i < n; i++) {
		int64_t t = now_us();

		if (wc[i].status != IBV_WC_SUCCESS) {
			if (++c->errors <= 10)
				say("COMPLETION ERROR: %s %s (wr_id %" PRIu64 ", vendor_err 0x%x)",
				    wc[i].opcode & IBV_WC_RECV ? "receive" : "message",
				    ibv_wc_status_str(wc[i].status), wc[i].wr_id & ~RECV_TAG,
				    wc[i].vendor_err);
			if (!(wc[i].opcode & IBV_WC_RECV))
				c->completed++;
		} else if (wc[i].opcode & IBV_WC_RECV) {
			/* An ack from the server. */
			uint64_t slot = wc[i].wr_id & ~RECV_TAG;
			uint8_t *buf = c->ackbuf + slot * ACK_BUF;
			struct ack_msg a;

			memcpy(&a, buf, sizeof(a));
			if (le32toh(a.magic) != ACK_MAGIC || le64toh(a.verified) < c->acked) {
				if (++c->errors <= 10)
					say("bad ack (magic 0x%x, verified %" PRIu64
					    " after %" PRIu64 ")", le32toh(a.magic),
					    (uint64_t)le64toh(a.verified), c->acked);
			} else {
				c->acked = le64toh(a.verified);
			}
			post_recv(&c->r, buf, ACK_BUF, slot);
		} else {
			/* The send queue completes in order. */
			if (wc[i].wr_id != c->completed && ++c->errors <= 10)
				say("completion for message %" PRIu64 ", expected %" PRIu64,
				    wc[i].wr_id, c->completed);
			c->completed++;
			if (wc[i].opcode == IBV_WC_SEND)
				c->sends++;
			else
				c->writes++;
			/* After a cut, only the stall that ends after it counts. */
			if (atomic_load(&cut_us) >= 0 && c->gap_to_us < atomic_load(&cut_us))
				c->gap_from_us = c->gap_to_us = 0;
			if (c->last_ok_us && t - c->last_ok_us > c->gap_to_us - c->gap_from_us) {
				c->gap_from_us = c->last_ok_us;
				c->gap_to_us = t;
			}
			c->last_ok_us = t;
		}
	}
	return n;
}

static int run_client(void)
{
	struct client c = { 0 };
	struct res *r = &c.r;
	struct conn_info wire;
	struct ctl_msg m;
	struct path_state before, after;
	pthread_t cutter;
	int64_t stream_start, stream_end, last_progress, t_cut, t_mig;
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
	before = wait_armed(r);
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
			migrate_now(r);
			migrated_by_command = true;
		}
		if (poll_ctl(r, &m))
			die("unexpected control message %u", m.type);
		rearm_when_back(r, &c.peer);
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
	after = query_path(r);
	print_path("at the end", after);
	events_stop();
	events_summary(evs, sizeof(evs));
	ok = c.errors == 0 && c.completed == c.posted && m.ok && m.count == c.posted &&
	     migration_ok(r, expect_mig, after);

	say("=== summary (client) ===");
	say("messages sent: %" PRIu64 " (%" PRIu64 " Sends, %" PRIu64 " RDMA Writes, %u bytes "
	    "each), completed OK: %" PRIu64 ", completion errors: %" PRIu64, c.posted, c.sends,
	    c.writes, opt.msg_size, c.sends + c.writes, c.errors);
	say("server: verified %" PRIu64 ", data errors %u, PATH_MIG events %u, %s on port %u: %s",
	    m.count, m.errors, m.migrations, mig_state_str(m.mig_state), m.port,
	    m.ok ? "PASS" : "FAIL");
	print_before_after(before, after);
	t_cut = atomic_load(&cut_us);
	t_mig = atomic_load(&events.first_path_mig_us);
	if (t_cut >= 0) {
		say("failover: the cut command ran %.0f ms; from its end (link down) to the first "
		    "completion: %.0f ms, to PATH_MIG: %s%.0f ms",
		    (t_cut - cut_start_us) / 1000.0, (c.gap_to_us - t_cut) / 1000.0,
		    t_mig < 0 ? "none, " : "", t_mig < 0 ? 0.0 : (t_mig - t_cut) / 1000.0);
		say("failover: traffic stalled %.0f ms in all; retry budget (retry_cnt + 1) x "
		    "4.096 us x 2^timeout = %d x %.1f ms = %.0f ms",
		    (c.gap_to_us - c.gap_from_us) / 1000.0, opt.retry_cnt + 1,
		    4.096e-3 * (double)(1ull << opt.qp_timeout), (opt.retry_cnt + 1) * 4.096e-3 *
		    (double)(1ull << opt.qp_timeout));
	} else {
		say("longest stall between completions: %.0f ms (at %.3f s)",
		    (c.gap_to_us - c.gap_from_us) / 1000.0, c.gap_from_us / 1e6);
	}
	say("async events: %s", evs);
	say("result: %s", ok ? "PASS" : "FAIL");
	destroy_resources(r);
	return ok ? 0 : 1;
}

/* ---- main ------------------------------------------------------------------------------------ */

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
