// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The data stream that shows nothing is lost: the client posts messages, even sequence numbers
 * as Sends and odd ones as RDMA Writes into a ring on the server, each with its sequence number
 * and a pattern derived from it. The server checks every one (nothing lost, duplicated,
 * reordered or corrupted) and acks the number verified with a small Send back, which is also the
 * client's flow control: the Write ring is never overwritten before it was checked.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sample.h"

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

/* ---- Server: verify, ack --------------------------------------------------------------------- */

void server_error(struct server *s, const char *fmt, ...)
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
void send_ack(struct server *s)
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
void verify_writes(struct server *s, uint64_t limit)
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
int server_poll(struct server *s, int fd, int timeout_ms)
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

/* ---- Client: post, complete, measure the stall ----------------------------------------------- */

/* Message `seq`: an even one is a Send, an odd one an RDMA Write into the server's ring. */
void post_message(struct client *c, uint64_t seq)
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

int client_poll(struct client *c, int timeout_ms)
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
