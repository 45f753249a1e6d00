// SPDX-License-Identifier: GPL-2.0
/*
 * exhaust_fill: creates objects of one kind on an RDMA device until a create fails or COUNT are
 * made, then frees them; exhaust.py runs it once per kind and checks what it reports. In C
 * because the exhaustion test makes tens of thousands of each kind, and under TCG pyverbs'
 * per-object cost was most of the test's time.
 *
 * usage: exhaust_fill DEV KIND COUNT [GID_INDEX] [OTHER_DEV]
 *   KIND: pd, cq, mr, srq, ah, mw or qp. GID_INDEX (ah only): the port-1 GID the AHs route to.
 *   OTHER_DEV (pd only): while every PD is held, one PD is allocated and freed on OTHER_DEV.
 * Prints one line of KEY=VALUE words: "made=N errno=E create_s=S free_s=S", then "other=E"
 * (pd with OTHER_DEV) and "free_errno=E" (a free failed). errno 0: COUNT made without a failure;
 * other=0: the PD on OTHER_DEV was made. The helper's own PD and CQ (the parents of the other
 * kinds) are made before the count starts and count against no kind but their own. Exits 1 on
 * a usage or set-up error, else 0: the caller judges the numbers.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int i, n;

	list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	for (i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	return ctx;
}

/* What one kind needs to make an object; the parents are made once, up front. */
struct parents {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_ah_attr ah;
	char *page;
};

enum kind { PD, CQ, MR, SRQ, AH, MW, QP };
static const char *const kinds[] = { "pd", "cq", "mr", "srq", "ah", "mw", "qp" };

/* Makes one object of kind @k; NULL with errno set when the device refuses it. */
static void *make(enum kind k, struct parents *p)
{
	struct ibv_srq_init_attr srq = { .attr = { .max_wr = 1, .max_sge = 1 } };
	struct ibv_qp_init_attr qp = {
		.send_cq = p->cq,
		.recv_cq = p->cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	/* Some providers return NULL without setting errno: never report a stale one. */
	errno = 0;
	switch (k) {
	case PD:
		return ibv_alloc_pd(p->ctx);
	case CQ:
		return ibv_create_cq(p->ctx, 1, NULL, NULL, 0);
	case MR:
		return ibv_reg_mr(p->pd, p->page, 4096, IBV_ACCESS_LOCAL_WRITE);
	case SRQ:
		return ibv_create_srq(p->pd, &srq);
	case AH:
		return ibv_create_ah(p->pd, &p->ah);
	case MW:
		return ibv_alloc_mw(p->pd, IBV_MW_TYPE_2);
	case QP:
		return ibv_create_qp(p->pd, &qp);
	}
	return NULL;
}

/* Frees one object of kind @k; returns 0 or an errno. */
static int destroy(enum kind k, void *o)
{
	switch (k) {
	case PD:
		return ibv_dealloc_pd(o);
	case CQ:
		return ibv_destroy_cq(o);
	case MR:
		return ibv_dereg_mr(o);
	case SRQ:
		return ibv_destroy_srq(o);
	case AH:
		return ibv_destroy_ah(o);
	case MW:
		return ibv_dealloc_mw(o);
	case QP:
		return ibv_destroy_qp(o);
	}
	return EINVAL;
}

/* Allocates and frees one PD on @name: 0 or the errno of what failed. */
static int other_pd(const char *name)
{
	struct ibv_context *ctx = open_dev(name);
	struct ibv_pd *pd;
	int err;

	if (!ctx)
		return errno ? errno : ENODEV;
	errno = 0;
	pd = ibv_alloc_pd(ctx);
	err = pd ? ibv_dealloc_pd(pd) : (errno ? errno : EIO);
	ibv_close_device(ctx);
	return err;
}

int main(int argc, char **argv)
{
	struct parents p = { 0 };
	int i, made = 0, err = 0, other = -1, free_err = 0;
	long count;
	double t0, t1, t2;
	void **objs;
	enum kind k;

	if (argc < 4)
		goto usage;
	for (k = PD; k <= QP; k++)
		if (!strcmp(argv[2], kinds[k]))
			break;
	count = strtol(argv[3], NULL, 10);
	if (k > QP || count < 1)
		goto usage;
	p.ctx = open_dev(argv[1]);
	if (!p.ctx) {
		fprintf(stderr, "exhaust_fill: cannot open %s\n", argv[1]);
		return 1;
	}
	if (k != PD && k != CQ && !(p.pd = ibv_alloc_pd(p.ctx))) {
		perror("exhaust_fill: the parent PD");
		return 1;
	}
	if (k == QP && !(p.cq = ibv_create_cq(p.ctx, 4, NULL, NULL, 0))) {
		perror("exhaust_fill: the parent CQ");
		return 1;
	}
	if (k == MR && posix_memalign((void **)&p.page, 4096, 4096)) {
		fprintf(stderr, "exhaust_fill: no memory for the MRs' page\n");
		return 1;
	}
	if (k == AH) {
		if (argc < 5)
			goto usage;
		p.ah.is_global = 1;
		p.ah.port_num = 1;
		p.ah.grh.sgid_index = atoi(argv[4]);
		p.ah.grh.hop_limit = 1;
		if (ibv_query_gid(p.ctx, 1, p.ah.grh.sgid_index, &p.ah.grh.dgid)) {
			perror("exhaust_fill: ibv_query_gid");
			return 1;
		}
	}
	objs = calloc(count, sizeof(*objs));
	if (!objs) {
		fprintf(stderr, "exhaust_fill: no memory for %ld pointers\n", count);
		return 1;
	}

	t0 = now();
	while (made < count) {
		objs[made] = make(k, &p);
		if (!objs[made]) {
			err = errno ? errno : EIO;
			break;
		}
		made++;
	}
	t1 = now();
	if (k == PD && argc > 5)
		other = other_pd(argv[5]);
	for (i = made - 1; i >= 0; i--) {
		int e = destroy(k, objs[i]);

		if (e && !free_err)
			free_err = e;
	}
	t2 = now();

	printf("made=%d errno=%d create_s=%.1f free_s=%.1f", made, err, t1 - t0, t2 - t1);
	if (other >= 0)
		printf(" other=%d", other);
	if (free_err)
		printf(" free_errno=%d", free_err);
	printf("\n");
	if (p.cq)
		ibv_destroy_cq(p.cq);
	if (p.pd)
		ibv_dealloc_pd(p.pd);
	ibv_close_device(p.ctx);
	free(objs);
	free(p.page);
	return 0;

usage:
	fprintf(stderr, "usage: exhaust_fill DEV pd|cq|mr|srq|ah|mw|qp COUNT [GID_INDEX] [OTHER_DEV]\n");
	return 1;
}
