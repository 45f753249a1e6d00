// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * UD multicast over RoCEv2 with raw verbs, every byte checked.
 *
 * On RoCEv2 a multicast group is an IP multicast address; its GID is the IPv4-mapped address
 * (::ffff:239.x.y.z). Receiving takes two steps: the host joins the IP group on the netdev
 * (the RDMA CM's rdma_join_multicast does it with IGMP; a raw-verbs program asks a socket to,
 * here IP_ADD_MEMBERSHIP), and each UD QP that wants the datagrams is attached to the GID
 * (ibv_attach_mcast). Sending needs no join: an AH whose destination GID is the group's, and
 * DestQP 0xFFFFFF.
 *
 * This program opens a sending and a receiving device (they may sit in different network
 * namespaces: the rdma subsystem's default "shared" mode shows every device everywhere), attaches
 * two QPs of the receiver, sends datagrams of random sizes up to the path MTU, and checks that
 * each attached QP got every one once, in order, intact, from the sender's QPN, with the packet's
 * IPv4 header (sender -> group) in the 40-byte GRH area. Then one QP detaches and only the other
 * receives. The caller joins the IP group in the receiver's namespace.
 *
 * usage: ud_multicast SEND_DEV SEND_GID_INDEX SEND_IPV4 RECV_DEV RECV_GID_INDEX GROUP [COUNT [SEED]]
 * Prints "ok: ..." / "FAILED: ..." lines; exits 0 only if every check passed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x11223344u
#define MULTICAST_QPN 0xFFFFFFu
#define GRH_LEN 40
#define MAX_MSGS 256
#define RECV_QPS 2

static int failures;

static bool check(bool ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "FAILED", what);
	failures += !ok;
	return ok;
}

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp[RECV_QPS];
	uint8_t *buf;
	size_t slot; /* bytes per message slot: MTU + GRH */
	unsigned int mtu;
	int gid_index;
};

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;

	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

/* A UD QP through INIT, RTR and RTS with our Q_Key. */
static struct ibv_qp *ud_qp(struct end *e, unsigned int depth)
{
	struct ibv_qp_init_attr init = {
		.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(e->pd, &init);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };

	if (!qp)
		return NULL;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return NULL;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return NULL;
	return qp;
}

static int end_open(struct end *e, const char *name, int gid_index, int nqps, unsigned int depth)
{
	struct ibv_port_attr port;

	e->ctx = open_dev(name);
	if (!e->ctx || ibv_query_port(e->ctx, 1, &port))
		return -1;
	e->mtu = 128u << port.active_mtu;
	e->gid_index = gid_index;
	e->slot = e->mtu + GRH_LEN;
	e->pd = ibv_alloc_pd(e->ctx);
	e->cq = e->pd ? ibv_create_cq(e->ctx, 4 * depth * nqps + 16, NULL, NULL, 0) : NULL;
	e->buf = calloc((size_t)nqps * depth, e->slot);
	if (!e->cq || !e->buf)
		return -1;
	e->mr = ibv_reg_mr(e->pd, e->buf, (size_t)nqps * depth * e->slot, IBV_ACCESS_LOCAL_WRITE);
	if (!e->mr)
		return -1;
	for (int q = 0; q < nqps; q++)
		if (!(e->qp[q] = ud_qp(e, depth)))
			return -1;
	return 0;
}

static uint8_t *slot_of(struct end *e, int q, unsigned int i, unsigned int depth)
{
	return e->buf + ((size_t)q * depth + i) * e->slot;
}

static int post_recvs(struct end *e, int q, unsigned int n, unsigned int depth)
{
	for (unsigned int i = 0; i < n; i++) {
		struct ibv_sge sge = { (uintptr_t)slot_of(e, q, i, depth), e->slot, e->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = ((uint64_t)q << 32) | i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		memset(slot_of(e, q, i, depth), 0xA5, e->slot);
		if (ibv_post_recv(e->qp[q], &wr, &bad))
			return -1;
	}
	return 0;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Polls until `want` completions or `secs` seconds; returns how many arrived. */
static unsigned int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, unsigned int want, double secs)
{
	unsigned int got = 0;
	double end = now() + secs;

	while (got < want && now() < end) {
		int n = ibv_poll_cq(cq, (int)(want - got), wc + got);

		if (n < 0)
			break;
		got += (unsigned int)n;
	}
	return got;
}

struct msgs {
	unsigned int n;
	unsigned int len[MAX_MSGS];
	uint8_t *data[MAX_MSGS];
};

static void make_msgs(struct msgs *m, unsigned int n, unsigned int mtu)
{
	const unsigned int sizes[] = { 1, 2, 64, mtu - 1, mtu };

	m->n = n;
	for (unsigned int i = 0; i < n; i++) {
		unsigned int r = (unsigned int)rand();

		m->len[i] = r % 2 ? sizes[r / 2 % 5] : 1 + r / 2 % mtu;
		free(m->data[i]);
		m->data[i] = malloc(m->len[i]);
		for (unsigned int k = 0; k < m->len[i]; k++)
			m->data[i][k] = (uint8_t)rand();
	}
}

/* Sends every message to the group, one after the other from slot 0; all must complete. */
static bool send_all(struct end *tx, struct ibv_ah *ah, const struct msgs *m)
{
	struct ibv_wc wc;

	for (unsigned int i = 0; i < m->n; i++) {
		struct ibv_sge sge = { (uintptr_t)tx->buf, m->len[i], tx->mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			*bad;

		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = MULTICAST_QPN;
		wr.wr.ud.remote_qkey = QKEY;
		memcpy(tx->buf, m->data[i], m->len[i]);
		if (ibv_post_send(tx->qp[0], &wr, &bad) || poll_n(tx->cq, &wc, 1, 10) != 1 ||
		    wc.status != IBV_WC_SUCCESS || wc.wr_id != i)
			return false;
	}
	return true;
}

/* QP `q` of `rx` received exactly the messages of `m`, in order, intact. */
static void check_received(struct end *rx, int q, const struct ibv_wc *wc, unsigned int nwc,
			   const struct msgs *m, unsigned int depth, uint32_t src_qpn,
			   const uint8_t src_ip[4], const uint8_t group_ip[4])
{
	char what[256], why[160] = "";
	unsigned int seen = 0;

	for (unsigned int k = 0; k < nwc; k++) {
		unsigned int i = (unsigned int)wc[k].wr_id;
		const uint8_t *s = slot_of(rx, q, i, depth), *ip = s + 20;

		if ((int)(wc[k].wr_id >> 32) != q)
			continue;
		if (!*why) {
			if (wc[k].status != IBV_WC_SUCCESS)
				snprintf(why, sizeof(why), "#%u: status %s", seen,
					 ibv_wc_status_str(wc[k].status));
			else if (i != seen || i >= m->n)
				snprintf(why, sizeof(why), "#%u: landed in slot %u", seen, i);
			else if (wc[k].byte_len != GRH_LEN + m->len[i])
				snprintf(why, sizeof(why), "#%u: byte_len %u, want %u", i,
					 wc[k].byte_len, GRH_LEN + m->len[i]);
			else if (wc[k].src_qp != src_qpn || !(wc[k].wc_flags & IBV_WC_GRH))
				snprintf(why, sizeof(why), "#%u: src_qp %#x, wc_flags %#x", i,
					 wc[k].src_qp, wc[k].wc_flags);
			else if (memcmp(ip + 12, src_ip, 4) || memcmp(ip + 16, group_ip, 4))
				snprintf(why, sizeof(why), "#%u: GRH area's IPv4 header is not "
					 "sender -> group", i);
			else if (memcmp(s + GRH_LEN, m->data[i], m->len[i]))
				snprintf(why, sizeof(why), "#%u: payload differs", i);
			else if (GRH_LEN + m->len[i] < rx->slot && s[GRH_LEN + m->len[i]] != 0xA5)
				snprintf(why, sizeof(why), "#%u: byte after the payload written", i);
		}
		seen++;
	}
	snprintf(what, sizeof(what), "QP %d received %u of %u datagrams", q, seen, m->n);
	if (check(seen == m->n, what)) {
		snprintf(what, sizeof(what), "QP %d: every datagram intact, in order, from QPN %#x "
			 "with its IPv4 header%s%s", q, src_qpn, *why ? ": " : "", why);
		check(!*why, what);
	}
}

int main(int argc, char **argv)
{
	struct end tx = { 0 }, rx = { 0 };
	struct msgs m = { 0 };
	struct ibv_wc wc[2 * MAX_MSGS + 2];
	uint8_t src_ip[4], group_ip[4];
	union ibv_gid mgid = { 0 };
	char what[160];
	unsigned int count, depth, mtu, n;

	if (argc < 7) {
		fprintf(stderr, "usage: %s SEND_DEV SEND_GID_INDEX SEND_IPV4 RECV_DEV RECV_GID_INDEX "
			"GROUP [COUNT [SEED]]\n", argv[0]);
		return 2;
	}
	count = argc > 7 ? (unsigned int)atoi(argv[7]) : 32;
	srand(argc > 8 ? (unsigned int)atoi(argv[8]) : (unsigned int)time(NULL));
	if (count == 0 || count > MAX_MSGS || inet_pton(AF_INET, argv[3], src_ip) != 1 ||
	    inet_pton(AF_INET, argv[6], group_ip) != 1) {
		fprintf(stderr, "bad COUNT (1..%d) or address\n", MAX_MSGS);
		return 2;
	}
	depth = count;
	if (!check(!end_open(&tx, argv[1], atoi(argv[2]), 1, depth) &&
		   !end_open(&rx, argv[4], atoi(argv[5]), RECV_QPS, depth),
		   "devices opened, UD QPs in RTS"))
		return 1;
	mtu = tx.mtu < rx.mtu ? tx.mtu : rx.mtu;
	mgid.raw[10] = mgid.raw[11] = 0xff;
	memcpy(&mgid.raw[12], group_ip, 4);
	for (int q = 0; q < RECV_QPS; q++)
		if (!check(!ibv_attach_mcast(rx.qp[q], &mgid, 0), "ibv_attach_mcast"))
			return 1;

	struct ibv_ah_attr ah_attr = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = mgid, .sgid_index = (uint8_t)tx.gid_index, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(tx.pd, &ah_attr);

	if (!check(ah != NULL, "an AH to the group's GID"))
		return 1;

	make_msgs(&m, count, mtu);
	for (int q = 0; q < RECV_QPS; q++)
		post_recvs(&rx, q, count, depth);
	snprintf(what, sizeof(what), "%u datagrams of 1..%u B sent to %s, all completed", count,
		 mtu, argv[6]);
	check(send_all(&tx, ah, &m), what);
	n = poll_n(rx.cq, wc, 2 * count, 15);
	for (int q = 0; q < RECV_QPS; q++)
		check_received(&rx, q, wc, n, &m, depth, tx.qp[0]->qp_num, src_ip, group_ip);
	check(poll_n(rx.cq, wc, 1, 0.5) == 0, "nothing received twice");

	/* After a detach only the other QP receives. */
	check(!ibv_detach_mcast(rx.qp[1], &mgid, 0), "ibv_detach_mcast of QP 1");
	make_msgs(&m, count < 8 ? count : 8, mtu);
	for (int q = 0; q < RECV_QPS; q++)
		post_recvs(&rx, q, m.n, depth);
	check(send_all(&tx, ah, &m), "more datagrams sent after QP 1 detached");
	n = poll_n(rx.cq, wc, m.n, 15);
	n += poll_n(rx.cq, wc + n, 1, 1.0);
	check_received(&rx, 0, wc, n, &m, depth, tx.qp[0]->qp_num, src_ip, group_ip);
	bool none = true;

	for (unsigned int k = 0; k < n; k++)
		none &= (wc[k].wr_id >> 32) != 1;
	check(none, "the detached QP received nothing");
	check(!ibv_detach_mcast(rx.qp[0], &mgid, 0), "ibv_detach_mcast of QP 0");
	printf("%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
