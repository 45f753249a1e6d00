// SPDX-License-Identifier: GPL-2.0
/*
 * uverbs_cmd_post DEV GID_INDEX: a user QP's work requests come through its mmapped send queue;
 * the uverbs POST_SEND command can still carry work requests of its own, built by the kernel from
 * user input as they are (no check of addresses or flags). A driver must not post those as if a
 * kernel caller had (rdma_rxe treats the call as the QP's doorbell). This posts, through the
 * command, an inline UD Send whose SGE points at address 1, which no caller may name, and checks:
 * the call succeeds as a doorbell, no completion of that WR appears, and a Send posted the usual
 * way afterwards still completes successfully. A driver that copied the inline data from the
 * address would fault in the kernel (the test harness fails the run on that report).
 * Exits 0 when all holds, 1 with a message otherwise.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* libibverbs' private command helper (infiniband/driver.h is not installed). */
int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);

#define QKEY 0x11111111
#define BAD_WR_ID 0xbad
#define GOOD_WR_ID 0x600d

static int fail(const char *what, int err)
{
	fprintf(stderr, "FAIL: %s (%s)\n", what, strerror(err));
	return 1;
}

/* Polls `cq` for up to `ms` milliseconds; returns the number of completions (0 or 1) in `wc`. */
static int poll_for(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms)
			return 0;
	}
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return errno;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return errno;
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_wc wc;
	char msg[] = "inline, for real";
	int i, n, err;

	if (argc != 3) {
		fprintf(stderr, "usage: %s DEV GID_INDEX\n", argv[0]);
		return 2;
	}
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		return fail("no such device", ENODEV);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = sizeof(msg) - 1 },
	};
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &qa) : NULL;

	if (!qp)
		return fail("PD, CQ or UD QP", errno);
	err = to_rts(qp);
	if (err)
		return fail("UD QP to RTS", err);

	union ibv_gid gid;

	if (ibv_query_gid(ctx, 1, atoi(argv[2]), &gid))
		return fail("query GID", errno);
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = gid, .sgid_index = atoi(argv[2]), .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);

	if (!ah)
		return fail("AH to the QP's own GID", errno);

	struct ibv_sge bad_sge = { .addr = 1, .length = 16, .lkey = 0 };
	struct ibv_send_wr wr = {
		.wr_id = BAD_WR_ID, .sg_list = &bad_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = qp->qp_num, .remote_qkey = QKEY },
	}, *bad = NULL;

	err = ibv_cmd_post_send(qp, &wr, &bad);
	if (err)
		return fail("POST_SEND command with a WR: not taken as a doorbell", err);
	if (poll_for(cq, &wc, 500))
		return fail("a completion came for the command's WR: it was posted", EPROTO);

	struct ibv_sge good_sge = { .addr = (uintptr_t)msg, .length = sizeof(msg) - 1, .lkey = 0 };

	wr.wr_id = GOOD_WR_ID;
	wr.sg_list = &good_sge;
	if (ibv_post_send(qp, &wr, &bad))
		return fail("ibv_post_send after it", errno);
	if (!poll_for(cq, &wc, 5000))
		return fail("no completion of the usual Send after it", ETIMEDOUT);
	if (wc.wr_id != GOOD_WR_ID || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "FAIL: completion wr_id %#llx status %s\n",
			(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		return 1;
	}
	printf("ok: the command's WR was not posted; a usual Send completed\n");
	ibv_destroy_ah(ah);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
