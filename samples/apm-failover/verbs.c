// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The verbs resources of an ordinary RoCE RC connection: device, PD, MR, CQ with a completion
 * channel, the QP and its INIT -> RTR -> RTS transitions, receives, and waiting for completions.
 * Nothing here is specific to APM except where connect_and_rearm() calls into apm.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

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
void create_resources(struct res *r, int qp_access)
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
	struct local_path *path = r->apm.path;
	char g[INET6_ADDRSTRLEN];
	int flags;

	r->ctl_fd = -1;
	r->ctx = open_device(opt.dev_name);
	for (int i = 0; i < 2; i++) {
		path[i].addr = opt.addr[i];
		if (find_gid(r->ctx, &path[i]))
			die("no RoCE v2 GID for %s on %s (is the address on the device's netdev?)",
			    opt.addr[i], opt.dev_name);
		say("%s path: %s port %u, GID index %d (%s)", i ? "alternate" : "primary",
		    opt.dev_name, path[i].port, path[i].gid_index,
		    gid_str(&path[i].gid, g, sizeof(g)));
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
	attr.port_num = path[0].port;
	if (ibv_modify_qp(r->qp, &attr,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT: %s", strerror(errno));
	r->psn = (uint32_t)lrand48() & 0xffffff;

	/* What apm.c needs to load, track and re-arm the alternate path. */
	r->apm.ctx = r->ctx;
	r->apm.qp = r->qp;
	r->apm.alt_timeout = (uint8_t)opt.qp_timeout;
	r->apm.tell_peer = tell_peer_migrated;
	r->apm.tell_peer_arg = r;
}

void register_buffer(struct res *r, size_t len, int access)
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

void destroy_resources(struct res *r)
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
		.ah_attr = path_to(&r->apm.path[0], &peer->gid[0]),
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

/* Both QPs connected on the primary path, then the alternate path loaded and REARMed. */
void connect_and_rearm(struct res *r, const struct conn_info *peer)
{
	connect_qp(r, peer);
	print_path("after RTS", query_path(r->qp));
	load_alt_path(&r->apm, &r->apm.path[1], &peer->gid[1]);
	print_path("alternate path loaded", query_path(r->qp));
}

void post_recv(struct res *r, uint8_t *buf, uint32_t len, uint64_t slot)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, r->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_TAG | slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(r->qp, &wr, &bad))
		die("ibv_post_recv: %s", strerror(errno));
}

/*
 * Returns up to `max` completions. If the CQ is empty, arms it and sleeps on the completion
 * channel (and on `fd`, if >= 0) for at most `timeout_ms`. Re-polling after ibv_req_notify_cq()
 * closes the race with a completion that arrived just before the CQ was armed.
 */
int poll_or_wait(struct res *r, struct ibv_wc *wc, int max, int fd, int timeout_ms)
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
