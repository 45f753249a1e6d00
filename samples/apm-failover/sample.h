/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the files of the sample share besides apm.h: tunables, options, the verbs resources,
 * the wire formats of the data stream and of the TCP control channel. See main.c for the map.
 */
#ifndef APM_SAMPLE_H
#define APM_SAMPLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "apm.h"
#include "log.h"

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

/* ---- Options (main.c) ------------------------------------------------------------------------ */

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

extern struct options opt;

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

/* ---- Verbs resources (verbs.c) --------------------------------------------------------------- */

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
	struct apm apm;             /* the two paths, and what the migrations did to them */
	int ctl_fd;                 /* the TCP control connection */
};

void create_resources(struct res *r, int qp_access);
void register_buffer(struct res *r, size_t len, int access);
void destroy_resources(struct res *r);
void connect_and_rearm(struct res *r, const struct conn_info *peer);
void post_recv(struct res *r, uint8_t *buf, uint32_t len, uint64_t slot);
int poll_or_wait(struct res *r, struct ibv_wc *wc, int max, int fd, int timeout_ms);

/* ---- TCP control channel (control.c) --------------------------------------------------------- */

int tcp_accept(void);
int tcp_connect(void);
void write_all(int fd, const void *buf, size_t len, const char *what);
void read_all(int fd, void *buf, size_t len, const char *what);
struct conn_info my_info(struct res *r, uint64_t addr, uint32_t rkey);
struct conn_info peer_info(const struct conn_info *wire);
void send_ctl(int fd, struct ctl_msg m);
struct ctl_msg recv_ctl(int fd);
bool poll_ctl(struct res *r, struct ctl_msg *m);
void tell_peer_migrated(void *res, unsigned migrations);

/* ---- The data stream (stream.c) -------------------------------------------------------------- */

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

__attribute__((format(printf, 2, 3))) void server_error(struct server *s, const char *fmt, ...);
void send_ack(struct server *s);
void verify_writes(struct server *s, uint64_t limit);
int server_poll(struct server *s, int fd, int timeout_ms);
void post_message(struct client *c, uint64_t seq);
int client_poll(struct client *c, int timeout_ms);

/* ---- The two roles (server.c, client.c) ------------------------------------------------------ */

/* Client: when the cut command started, and when it returned, i.e. the primary link is down
 * (-1: not yet, or not by us). */
extern int64_t cut_start_us;
extern _Atomic int64_t cut_us;

int run_server(void);
int run_client(void);

/* ---- Report (report.c) ----------------------------------------------------------------------- */

void print_peer(const struct conn_info *p);
void print_path(const char *when, struct path_state ps);
void events_summary(char *buf, size_t len);
void report_server(const struct server *s, const struct ctl_msg *done, struct path_state before,
		   struct path_state after, const char *evs, bool ok);
void report_client(const struct client *c, const struct ctl_msg *result,
		   struct path_state before, struct path_state after, const char *evs, bool ok);

#endif
