/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Automatic Path Migration on an RC QP with plain libibverbs: the part to copy. See apm.c.
 */
#ifndef APM_SAMPLE_APM_H
#define APM_SAMPLE_APM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* ---- Paths ----------------------------------------------------------------------------------- */

/* One end of a path on this device: the port and the GID index that carry a local address. */
struct local_path {
	const char *addr;
	union ibv_gid gid;
	uint8_t port;
	int gid_index;
};

/* An IPv4 address as a RoCE v2 GID (IPv4-mapped IPv6, ::ffff:a.b.c.d), or an IPv6 address;
 * 0, or -1 if `addr` is neither. */
int addr_to_gid(const char *addr, union ibv_gid *gid);
const char *gid_str(const union ibv_gid *gid, char *buf, size_t len);

/* Finds the port and GID index of `lp->addr`'s RoCE v2 GID; 0, or -1 if there is none. */
int find_gid(struct ibv_context *ctx, struct local_path *lp);

/* An address vector from our local path `lp` to the peer GID `dgid` (RoCE: always global). */
struct ibv_ah_attr path_to(const struct local_path *lp, const union ibv_gid *dgid);

const char *mig_state_str(enum ibv_mig_state s);

/* ---- Async events ---------------------------------------------------------------------------- */

#define MAX_EVENT_TYPE 32

/* A thread that prints every async event of `ctx` and counts them by type. */
void events_start(struct ibv_context *ctx);
void events_stop(void);
unsigned event_count(enum ibv_event_type type);
unsigned path_mig_events(void);
/* When the first PATH_MIG event was read (now_us()), -1 if none yet. */
int64_t first_path_mig_us(void);
/* Waits up to `secs` for a first PATH_MIG event; true if one was seen. */
bool wait_path_mig(int secs);

/* ---- The QP's two paths ---------------------------------------------------------------------- */

struct apm {
	struct ibv_context *ctx;
	struct ibv_qp *qp;
	struct local_path path[2];  /* [0] primary, [1] alternate, as given by -a and -A */
	uint8_t alt_timeout;        /* the local ACK timeout to use on the alternate path */
	int in_use;                 /* which of them the QP uses now (flips at each migration) */
	unsigned migrations;        /* PATH_MIG events seen by track_migrations() */
	unsigned peer_migrations;   /* ... and by the peer (the application tells us) */
	bool rearm_pending;         /* migrated; the path left behind is not loaded again yet */
	int64_t next_check_us;
	/* Called once for each new migration, to tell the peer (it may re-arm now). */
	void (*tell_peer)(void *arg, unsigned migrations);
	void *tell_peer_arg;
};

/* RTS -> RTS: load `lp` (our end) and `dgid` (the peer's) as the alternate path, and REARM. */
void load_alt_path(struct apm *a, const struct local_path *lp, const union ibv_gid *dgid);
/* Follows the PATH_MIG events: which path the QP uses now; tells the peer of each migration. */
void track_migrations(struct apm *a);
/* After a migration, once the path left behind is back and the peer migrated too: re-arm.
 * `peer_gid`: the peer's GIDs, [0] on its primary path, [1] on its alternate path. */
void rearm_when_back(struct apm *a, const union ibv_gid peer_gid[2]);
/* Migration on command: switch to the ARMED alternate path now. */
void migrate_now(struct apm *a);

/* What ibv_query_qp() says about the paths. */
struct path_state {
	enum ibv_qp_state qp_state;
	enum ibv_mig_state mig;
	uint8_t port;
	uint8_t alt_port;
};

struct path_state query_path(struct ibv_qp *qp);
/* Polls ibv_query_qp() until the alternate path is ARMED (at most `secs`). */
struct path_state wait_armed(struct ibv_qp *qp, int secs);
/* If a migration was expected: did it happen, and is the QP where the events say it is? */
bool migration_ok(struct apm *a, bool expect_mig, struct path_state after);

#endif
