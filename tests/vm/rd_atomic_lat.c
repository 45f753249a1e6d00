// SPDX-License-Identifier: GPL-2.0
/*
 * rd_atomic_lat DEV_A GID_INDEX_A DEV_B GID_INDEX_B [BATCHES]: signaled RDMA Reads and Fetch &
 * Adds from A into B's memory over one RC QP pair, each posted as soon as the one before it
 * completed, as a latency client does (ib_read_lat, a lock taken by compare-and-swap). On
 * rvrdma such a doorbell leaves its request to a work item that waits for it on another CPU
 * (qp/linger.rs), else sends it itself; the caller counts which (tx_linger_handoffs). A client
 * must post within microseconds of its completion to meet that work item, hence C.
 *
 * In batches of 16 Reads and 16 Fetch & Adds, alternating, each to its own target, then one
 * RDMA Write (that work item also takes the WQE a client posts next, whatever it is, from the
 * send ring before its doorbell): each completion's status, opcode, length and wr_id; after
 * each batch every Read's bytes against B's source (and the bytes after its target, which must
 * be untouched), every Fetch & Add's returned value against the counter's value before it, and
 * the Write's bytes in B (and the bytes after them); at the end, B's counter against the sum
 * of all adds.
 * Prints the mean round trip ("# mean round trip: N us"). Exits 0 when all holds, 1 with a
 * message otherwise.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MR_SIZE (256 << 10)
#define SRC (64 << 10)		/* B: Read sources in [0, SRC), the counter at SRC */
#define STRIDE 8192		/* A: Read i of a batch lands at STRIDE i, a guard after it */
#define RESULT_AT (128 << 10)	/* A: Fetch & Add i of a batch returns at RESULT_AT + 8 i */
#define BATCH 16
#define WRITE_FROM (160 << 10)	/* A: the batch's RDMA Write's source */
#define WRITE_AT (192 << 10)	/* B: where it lands, a guard after it */
#define NWR (2 * BATCH + 1)	/* WRs a batch: the Reads and adds, then the Write */
#define GUARD 64		/* bytes after each Read's target that must stay as they were */
#define GUARD_BYTE 0x5a
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		IBV_ACCESS_REMOTE_ATOMIC)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	union ibv_gid gid;
	int gid_index;
};

static uint64_t rng_state;

/* xorshift64*: a reproducible stream from the printed seed. */
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "FAIL: %s (%s)\n", what, strerror(err));
	return 1;
}

static int open_side(struct side *s, struct ibv_device **list, int n, const char *name,
		     int gid_index)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			s->ctx = ibv_open_device(list[i]);
	if (!s->ctx)
		return ENODEV;
	s->gid_index = gid_index;
	s->buf = calloc(1, MR_SIZE);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = s->pd ? ibv_create_cq(s->ctx, 16, NULL, NULL, 0) : NULL;
	s->mr = s->cq && s->buf ? ibv_reg_mr(s->pd, s->buf, MR_SIZE, ACCESS) : NULL;
	qa.send_cq = s->cq;
	qa.recv_cq = s->cq;
	s->qp = s->mr ? ibv_create_qp(s->pd, &qa) : NULL;
	if (!s->qp || ibv_query_gid(s->ctx, 1, gid_index, &s->gid))
		return errno ? errno : ENOMEM;
	return 0;
}

/* Reset -> Init -> RTR -> RTS towards `peer`. */
static int connect_qp(struct side *s, const struct side *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = ACCESS,
	};

	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = s->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return errno;
	return 0;
}

/* Posts each WR once the one before it completed, busy-polling. */
static int post_each(struct side *a, struct ibv_send_wr *wrs, int n)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	struct timespec t0, t;
	int i, got, err;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		err = ibv_post_send(a->qp, &wrs[i], &bad);
		if (err)
			return fail("ibv_post_send", err);
		while (!(got = ibv_poll_cq(a->cq, 1, &wc))) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 60)
				return fail("no completion within 60 s", ETIMEDOUT);
		}
		if (got < 0)
			return fail("ibv_poll_cq", EIO);
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wrs[i].wr_id) {
			fprintf(stderr, "FAIL: wr_id %llu: completion of wr_id %llu, status %s\n",
				(unsigned long long)wrs[i].wr_id, (unsigned long long)wc.wr_id,
				ibv_wc_status_str(wc.status));
			return 1;
		}
		if (wrs[i].opcode == IBV_WR_RDMA_READ ?
		    wc.opcode != IBV_WC_RDMA_READ || wc.byte_len != wrs[i].sg_list->length :
		    wrs[i].opcode == IBV_WR_RDMA_WRITE ? wc.opcode != IBV_WC_RDMA_WRITE :
		    wc.opcode != IBV_WC_FETCH_ADD || wc.byte_len != 8) {
			fprintf(stderr, "FAIL: wr_id %llu: completion opcode %d, byte_len %u\n",
				(unsigned long long)wrs[i].wr_id, wc.opcode, wc.byte_len);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct side a = { 0 }, b = { 0 };
	struct ibv_send_wr wrs[NWR];
	struct ibv_sge sges[NWR];
	uint64_t seed, counter, adds[BATCH];
	uint32_t offs[BATCH], sizes[BATCH], wlen;
	static const uint32_t size_choice[] = { 1, 8, 64, 1000, 4096 };
	struct ibv_device **list;
	int n, err, r, i, batches;

	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: %s DEV_A GID_INDEX_A DEV_B GID_INDEX_B [BATCHES]\n", argv[0]);
		return 2;
	}
	batches = argc == 6 ? atoi(argv[5]) : 60;
	if (batches <= 0) {
		fprintf(stderr, "BATCHES must be positive\n");
		return 2;
	}
	seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
	rng_state = seed | 1;
	printf("# seed %llu\n", (unsigned long long)(seed | 1));
	list = ibv_get_device_list(&n);
	if (!list)
		return fail("device list", errno);
	err = open_side(&a, list, n, argv[1], atoi(argv[2]));
	if (err)
		return fail("device A: PD, CQ, MR or RC QP", err);
	err = open_side(&b, list, n, argv[3], atoi(argv[4]));
	if (err)
		return fail("device B: PD, CQ, MR or RC QP", err);
	err = connect_qp(&a, &b);
	if (!err)
		err = connect_qp(&b, &a);
	if (err)
		return fail("connecting the QPs", err);
	for (i = 0; i < SRC; i++)
		b.buf[i] = (uint8_t)rnd();
	counter = rnd();
	memcpy(b.buf + SRC, &counter, 8);

	struct timespec t0, t1;
	double in_flight = 0;

	for (r = 0; r < batches; r++) {
		memset(a.buf + RESULT_AT, 0xa5, BATCH * 8);
		for (i = 0; i < BATCH; i++) {
			struct ibv_send_wr *rd = &wrs[2 * i], *add = &wrs[2 * i + 1];

			sizes[i] = size_choice[rnd() % 5];
			offs[i] = (uint32_t)(rnd() % (SRC - sizes[i] + 1));
			/* The target starts as the complement of what should land there. */
			for (uint32_t k = 0; k < sizes[i]; k++)
				a.buf[i * STRIDE + k] = (uint8_t)~b.buf[offs[i] + k];
			memset(a.buf + i * STRIDE + sizes[i], GUARD_BYTE, GUARD);
			sges[2 * i] = (struct ibv_sge){
				.addr = (uintptr_t)(a.buf + i * STRIDE), .length = sizes[i],
				.lkey = a.mr->lkey,
			};
			*rd = (struct ibv_send_wr){
				.wr_id = 2 * i, .sg_list = &sges[2 * i], .num_sge = 1,
				.opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = { .remote_addr = (uintptr_t)(b.buf + offs[i]),
					     .rkey = b.mr->rkey },
			};
			adds[i] = rnd();
			sges[2 * i + 1] = (struct ibv_sge){
				.addr = (uintptr_t)(a.buf + RESULT_AT + 8 * i), .length = 8,
				.lkey = a.mr->lkey,
			};
			*add = (struct ibv_send_wr){
				.wr_id = 2 * i + 1, .sg_list = &sges[2 * i + 1], .num_sge = 1,
				.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .send_flags = IBV_SEND_SIGNALED,
				.wr.atomic = { .remote_addr = (uintptr_t)(b.buf + SRC),
					       .compare_add = adds[i], .rkey = b.mr->rkey },
			};
		}
		wlen = size_choice[rnd() % 5];
		for (uint32_t k = 0; k < wlen; k++) {
			a.buf[WRITE_FROM + k] = (uint8_t)rnd();
			b.buf[WRITE_AT + k] = (uint8_t)~a.buf[WRITE_FROM + k];
		}
		memset(b.buf + WRITE_AT + wlen, GUARD_BYTE, GUARD);
		sges[2 * BATCH] = (struct ibv_sge){
			.addr = (uintptr_t)(a.buf + WRITE_FROM), .length = wlen, .lkey = a.mr->lkey,
		};
		wrs[2 * BATCH] = (struct ibv_send_wr){
			.wr_id = 2 * BATCH, .sg_list = &sges[2 * BATCH], .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = (uintptr_t)(b.buf + WRITE_AT),
				     .rkey = b.mr->rkey },
		};
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (post_each(&a, wrs, NWR))
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		in_flight += (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
		for (i = 0; i < BATCH; i++) {
			uint64_t got;

			for (uint32_t k = 0; k < sizes[i]; k++)
				if (a.buf[i * STRIDE + k] != b.buf[offs[i] + k]) {
					fprintf(stderr, "FAIL: batch %d: Read %d (%u bytes from B+%u) "
						"differs at byte %u: %#x, want %#x\n", r, i, sizes[i],
						offs[i], k, a.buf[i * STRIDE + k], b.buf[offs[i] + k]);
					return 1;
				}
			for (uint32_t k = 0; k < GUARD; k++)
				if (a.buf[i * STRIDE + sizes[i] + k] != GUARD_BYTE) {
					fprintf(stderr, "FAIL: batch %d: Read %d (%u bytes) wrote past its "
						"end, at byte %u\n", r, i, sizes[i], sizes[i] + k);
					return 1;
				}
			memcpy(&got, a.buf + RESULT_AT + 8 * i, 8);
			if (got != counter) {
				fprintf(stderr, "FAIL: batch %d: Fetch & Add %d returned %#llx, want "
					"%#llx\n", r, i, (unsigned long long)got,
					(unsigned long long)counter);
				return 1;
			}
			counter += adds[i];
		}
		for (uint32_t k = 0; k < wlen; k++)
			if (b.buf[WRITE_AT + k] != a.buf[WRITE_FROM + k]) {
				fprintf(stderr, "FAIL: batch %d: the Write (%u bytes) differs in B at "
					"byte %u: %#x, want %#x\n", r, wlen, k, b.buf[WRITE_AT + k],
					a.buf[WRITE_FROM + k]);
				return 1;
			}
		for (uint32_t k = 0; k < GUARD; k++)
			if (b.buf[WRITE_AT + wlen + k] != GUARD_BYTE) {
				fprintf(stderr, "FAIL: batch %d: the Write (%u bytes) wrote past its end "
					"in B, at byte %u\n", r, wlen, wlen + k);
				return 1;
			}
	}
	if (memcmp(b.buf + SRC, &counter, 8)) {
		fprintf(stderr, "FAIL: B's counter after the last batch is not the sum of the adds\n");
		return 1;
	}
	printf("# mean round trip: %.0f us\n", in_flight / (batches * NWR));
	printf("ok: %d signaled RDMA Reads and Fetch & Adds and %d RDMA Writes, each posted once "
	       "the one before completed: every Read's and Write's bytes and every atomic's "
	       "result are right\n", batches * BATCH * 2, batches);
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(b.mr);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(b.cq);
	ibv_dealloc_pd(a.pd);
	ibv_dealloc_pd(b.pd);
	ibv_close_device(a.ctx);
	ibv_close_device(b.ctx);
	ibv_free_device_list(list);
	return 0;
}
