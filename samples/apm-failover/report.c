// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* What the sample prints about the peer and the paths, and the summary each side prints at the
 * end (tests/vm/42-apm-sample.sh and run-in-guest.sh read these lines: keep their wording). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>

#include "sample.h"

void print_peer(const struct conn_info *p)
{
	char g0[INET6_ADDRSTRLEN], g1[INET6_ADDRSTRLEN];

	say("peer: QP 0x%x, PSN 0x%x, primary GID %s, alternate GID %s", p->qpn, p->psn,
	    gid_str(&p->gid[0], g0, sizeof(g0)), gid_str(&p->gid[1], g1, sizeof(g1)));
}

void print_path(const char *when, struct path_state ps)
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

/* "PORT_ERR x1, PATH_MIG x1" */
void events_summary(char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < MAX_EVENT_TYPE; i++) {
		unsigned c = event_count((enum ibv_event_type)i);

		if (c && n < len)
			n += snprintf(buf + n, len - n, "%s%s x%u", n ? ", " : "",
				      ibv_event_type_str((enum ibv_event_type)i), c);
	}
	if (!n)
		snprintf(buf, len, "none");
}

void report_server(const struct server *s, const struct ctl_msg *done, struct path_state before,
		   struct path_state after, const char *evs, bool ok)
{
	say("=== summary (server) ===");
	say("messages verified: %" PRIu64 " of %" PRIu64 " (%" PRIu64 " Sends, %" PRIu64
	    " RDMA Writes), data errors: %" PRIu64, s->sends + s->writes, done->count, s->sends,
	    s->writes, s->errors);
	print_before_after(before, after);
	say("async events: %s", evs);
	say("result: %s", ok ? "PASS" : "FAIL");
}

void report_client(const struct client *c, const struct ctl_msg *m, struct path_state before,
		   struct path_state after, const char *evs, bool ok)
{
	int64_t t_cut, t_mig;

	say("=== summary (client) ===");
	say("messages sent: %" PRIu64 " (%" PRIu64 " Sends, %" PRIu64 " RDMA Writes, %u bytes "
	    "each), completed OK: %" PRIu64 ", completion errors: %" PRIu64, c->posted, c->sends,
	    c->writes, opt.msg_size, c->sends + c->writes, c->errors);
	say("server: verified %" PRIu64 ", data errors %u, PATH_MIG events %u, %s on port %u: %s",
	    m->count, m->errors, m->migrations, mig_state_str(m->mig_state), m->port,
	    m->ok ? "PASS" : "FAIL");
	print_before_after(before, after);
	t_cut = atomic_load(&cut_us);
	t_mig = first_path_mig_us();
	if (t_cut >= 0) {
		say("failover: the cut command ran %.0f ms; from its end (link down) to the first "
		    "completion: %.0f ms, to PATH_MIG: %s%.0f ms",
		    (t_cut - cut_start_us) / 1000.0, (c->gap_to_us - t_cut) / 1000.0,
		    t_mig < 0 ? "none, " : "", t_mig < 0 ? 0.0 : (t_mig - t_cut) / 1000.0);
		say("failover: traffic stalled %.0f ms in all; retry budget (retry_cnt + 1) x "
		    "4.096 us x 2^timeout = %d x %.1f ms = %.0f ms",
		    (c->gap_to_us - c->gap_from_us) / 1000.0, opt.retry_cnt + 1,
		    4.096e-3 * (double)(1ull << opt.qp_timeout), (opt.retry_cnt + 1) * 4.096e-3 *
		    (double)(1ull << opt.qp_timeout));
	} else {
		say("longest stall between completions: %.0f ms (at %.3f s)",
		    (c->gap_to_us - c->gap_from_us) / 1000.0, c->gap_from_us / 1e6);
	}
	say("async events: %s", evs);
	say("result: %s", ok ? "PASS" : "FAIL");
}
