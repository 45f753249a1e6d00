// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * apm.c - Automatic Path Migration (APM) on an RC QP, with plain libibverbs. COPY THIS FILE.
 *
 * Everything APM needs beyond an ordinary RoCE RC connection is here; the rest of the sample
 * (the TCP control channel, the data stream and its checks, the report) is scaffolding. To add
 * APM to your program, copy apm.c and apm.h (and log.c/log.h, or map say(), die() and now_us()
 * to your own logging), then:
 *
 *  1. For each of the two paths, find the port and GID index of your local address on it:
 *     find_gid(). Connect the QP (INIT -> RTR -> RTS) on the primary path as usual, with
 *     path_to(&path[0], &peer_gid[0]) as the ah_attr.
 *  2. In RTS, load the alternate path and set it to REARM: load_alt_path() (the same attributes
 *     may also ride on the RTR -> RTS transition). The first packets each way arm it:
 *     ibv_query_qp() then says IBV_MIG_ARMED (wait_armed()).
 *  3. Read the async events: events_start() starts a thread that prints and counts them. If the
 *     primary path dies, the requester's retries run out and, instead of failing, the QP moves
 *     to the alternate path; the peer follows. Both raise IBV_EVENT_PATH_MIG. A migration
 *     request that does not match the alternate path raises IBV_EVENT_PATH_MIG_ERR instead.
 *  4. Now the QP is unprotected. Call rearm_when_back() from the thread that owns the QP, now
 *     and then: once the path left behind is usable again AND the peer has migrated too (tell
 *     each other, via apm.tell_peer and apm.peer_migrations; here over TCP), it loads that path
 *     as the new alternate path and re-arms. Protected again, in the other direction.
 *  5. To move traffic off a path on purpose (maintenance): migrate_now() while ARMED.
 *
 * The QP is modified by one thread only (the one that calls rearm_when_back()); the event
 * thread only reads events and counts them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apm.h"
#include "log.h"

/* ---- Paths: which port and GID index carry an address ---------------------------------------- */

int addr_to_gid(const char *addr, union ibv_gid *gid)
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

const char *gid_str(const union ibv_gid *gid, char *buf, size_t len)
{
	return inet_ntop(AF_INET6, gid->raw, buf, len);
}

/* Searches every port of the device (one ioctl for the whole GID table; the same search over
 * sysfs: /sys/class/infiniband/DEV/ports/P/gids/N and gid_attrs/types/N == "RoCE v2"). The port
 * of a path is the port that holds its GID. */
int find_gid(struct ibv_context *ctx, struct local_path *lp)
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

struct ibv_ah_attr path_to(const struct local_path *lp, const union ibv_gid *dgid)
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

const char *mig_state_str(enum ibv_mig_state s)
{
	switch (s) {
	case IBV_MIG_MIGRATED: return "MIGRATED";
	case IBV_MIG_REARM: return "REARM";
	case IBV_MIG_ARMED: return "ARMED";
	}
	return "?";
}

/* ---- Async events: a thread that prints and counts them -------------------------------------- */

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
		case IBV_EVENT_PATH_MIG:      /* the QP now runs on its (former) alternate path */
		case IBV_EVENT_PATH_MIG_ERR:  /* a migration request did not match the alternate path */
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
		/* The QP is not modified here: track_migrations() picks the count up. */
		if (ev.event_type == IBV_EVENT_PATH_MIG &&
		    atomic_load(&events.first_path_mig_us) < 0)
			atomic_store(&events.first_path_mig_us, t);
		/* Every event must be acknowledged, or destroying its QP/CQ blocks forever. */
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

void events_start(struct ibv_context *ctx)
{
	int flags = fcntl(ctx->async_fd, F_GETFL);

	events.ctx = ctx;
	if (fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK))
		die("fcntl(async_fd): %s", strerror(errno));
	if (pthread_create(&events.thread, NULL, event_thread, NULL))
		die("pthread_create");
}

void events_stop(void)
{
	atomic_store(&events.stop, true);
	pthread_join(events.thread, NULL);
}

unsigned event_count(enum ibv_event_type type)
{
	return (unsigned)type < MAX_EVENT_TYPE ? atomic_load(&events.count[type]) : 0;
}

unsigned path_mig_events(void)
{
	return atomic_load(&events.count[IBV_EVENT_PATH_MIG]);
}

int64_t first_path_mig_us(void)
{
	return atomic_load(&events.first_path_mig_us);
}

bool wait_path_mig(int secs)
{
	int64_t end = now_us() + (int64_t)secs * 1000000;

	while (!path_mig_events() && now_us() < end)
		usleep(10000);
	return path_mig_events() > 0;
}

/* ---- Loading, arming, migrating, re-arming --------------------------------------------------- */

/*
 * The heart of APM: load an alternate path and arm it (RTS -> RTS; the same attributes may also
 * ride on the RTR -> RTS transition). `lp` is the local end of the new alternate path, `dgid`
 * the peer's GID on it. After a migration, call it again with the old primary path (once its
 * link is back) to be protected again.
 */
void load_alt_path(struct apm *a, const struct local_path *lp, const union ibv_gid *dgid)
{
	struct ibv_qp_attr attr = {
		.alt_ah_attr = path_to(lp, dgid),
		.alt_port_num = lp->port,
		.alt_pkey_index = 0,
		.alt_timeout = a->alt_timeout,
		.path_mig_state = IBV_MIG_REARM,
	};

	if (ibv_modify_qp(a->qp, &attr, IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE))
		die("modify QP (RTS -> RTS) to load the alternate path on port %u and REARM: %s%s",
		    lp->port, strerror(errno),
		    errno == EINVAL ? " (a RoCE alternate path needs an APM-capable device and a "
				      "kernel that allows it)" : "");
}

void track_migrations(struct apm *a)
{
	unsigned n = path_mig_events();

	if (n == a->migrations)
		return;
	a->in_use ^= (int)((n - a->migrations) & 1);  /* each migration swaps the two paths */
	a->migrations = n;
	a->rearm_pending = true;
	if (a->tell_peer)
		a->tell_peer(a->tell_peer_arg, n);
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
 * migration on command it does at once. So the peer says when it migrated (the sample does it
 * over TCP, CTL_MIGRATED), the role the connection manager plays on InfiniBand (LAP/APR).
 */
void rearm_when_back(struct apm *a, const union ibv_gid peer_gid[2])
{
	struct ibv_port_attr pattr;
	struct local_path *old;

	track_migrations(a);
	if (!a->rearm_pending || a->peer_migrations < a->migrations ||
	    now_us() < a->next_check_us)
		return;
	a->next_check_us = now_us() + 100000;  /* not back yet? look again in 100 ms */
	old = &a->path[!a->in_use];
	if (ibv_query_port(a->ctx, old->port, &pattr) || pattr.state != IBV_PORT_ACTIVE ||
	    find_gid(a->ctx, old))
		return;
	load_alt_path(a, old, &peer_gid[!a->in_use]);
	a->rearm_pending = false;
	say("port %u is ACTIVE and the peer migrated too: loaded %s (GID index %d) as the new "
	    "alternate path, REARM", old->port, old->addr, old->gid_index);
}

/* Migration on command (RTS -> RTS, PATH_MIG_STATE = MIGRATED), e.g. to drain a link for
 * maintenance: the QP switches to its ARMED alternate path at once; the peer follows. */
void migrate_now(struct apm *a)
{
	struct ibv_qp_attr attr = { .path_mig_state = IBV_MIG_MIGRATED };

	say("migrating on command (ibv_modify_qp PATH_MIG_STATE = MIGRATED)");
	if (ibv_modify_qp(a->qp, &attr, IBV_QP_PATH_MIG_STATE))
		die("modify QP to migrate: %s", strerror(errno));
}

/* ---- Where the QP is: ibv_query_qp() --------------------------------------------------------- */

struct path_state query_path(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	struct path_state ps = { 0 };

	if (ibv_query_qp(qp, &attr,
			 IBV_QP_STATE | IBV_QP_PATH_MIG_STATE | IBV_QP_PORT | IBV_QP_AV |
			 IBV_QP_ALT_PATH, &init))
		die("ibv_query_qp: %s", strerror(errno));
	ps.qp_state = attr.qp_state;
	ps.mig = attr.path_mig_state;
	ps.port = attr.ah_attr.port_num;
	ps.alt_port = attr.alt_port_num;
	return ps;
}

/* REARM turns into ARMED when a packet from the peer (MigReq=0) arrives: exchange a message
 * each way before waiting here. */
struct path_state wait_armed(struct ibv_qp *qp, int secs)
{
	int64_t end = now_us() + (int64_t)secs * 1000000;
	struct path_state ps;

	while ((ps = query_path(qp)).mig != IBV_MIG_ARMED) {
		if (now_us() > end)
			die("the alternate path is not ARMED after %d s (path_mig_state %s)",
			    secs, mig_state_str(ps.mig));
		usleep(1000);
	}
	return ps;
}

/*
 * When a migration was expected: PATH_MIG was seen, and the QP is in RTS on the path the
 * events say it should be; if the path left behind was loaded again, that one is ARMED.
 */
bool migration_ok(struct apm *a, bool expect_mig, struct path_state after)
{
	track_migrations(a);
	if (!expect_mig)
		return true;
	if (!path_mig_events() || after.qp_state != IBV_QPS_RTS ||
	    after.port != a->path[a->in_use].port)
		return false;
	return a->rearm_pending ? after.mig == IBV_MIG_MIGRATED
				: after.mig == IBV_MIG_ARMED &&
				  after.alt_port == a->path[!a->in_use].port;
}
