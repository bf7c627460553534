/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the TCP engine's frame decoder and receive path: the input is the byte
 * stream a peer sends on an established endpoint (headers, payloads, garbage). An endpoint
 * adopted over a socketpair expects three transfers into buffers fenced by canaries; the input
 * is written to the other end, which is then closed, and the loop runs until the endpoint
 * closes. A canary that changed (a write outside a buffer), a transfer callback that ran twice
 * or after on_close, or a missing on_close aborts. Each input runs twice: on a loop that sleeps
 * (every receive armed in the ring) and on one that busy-polls with polled receive (the control
 * socket read by ferry__tcp_poll). Every message handed over must be a whole frame whose header
 * says its length. Every 8-byte window of the input also goes through the header decoder (and
 * the DataChunk struct decoder after a data header), every window through the handshake
 * decoders.
 *
 * Built with FUZZ_TCP_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_tcp_replay DIR|FILE...        run each input, fail on a leak or an empty corpus
 *   fuzz_tcp_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD tcp-corpus)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/common.h>

#include "common/alloc.h"
#include "common/loop.h"
#include "fuzz_replay.h"
#include "transport/tcp_int.h"

#define MAX_INPUT (64u << 10) /* fits a socketpair's buffer: written before the loop runs */
#define FENCE 64
#define CANARY 0xA5

static const struct {
	uint64_t id;
	size_t len;
} expects[] = {{1, 4096}, {2, 100}, {7, 1}};

struct run {
	struct ferry__loop *loop; /* per input */
	uint8_t *area[3];	  /* FENCE + buffer + FENCE per expect */
	int calls[3];		  /* transfer callbacks */
	int closes;		  /* on_close calls */
};

static struct run *cur;
static volatile uint8_t sink; /* keeps the message reads */

static void on_xfer(void *arg, int status)
{
	int *calls = arg;

	(void)status;
	if (++*calls > 1 || cur->closes)
		abort();
}

static void on_message(struct ferry__tcp_ep *ep, const void *buf, size_t len, void *arg)
{
	struct ferry__tcp_hdr h;

	(void)ep;
	(void)arg;
	/* A whole control frame, its header checked by the engine. */
	if (len < FERRY__TCP_HDR_SIZE || ferry__tcp_hdr_decode(buf, UINT32_MAX, &h) ||
	    h.kind != FERRY__TCP_MSG || h.len != len - FERRY__TCP_HDR_SIZE)
		abort();
	for (size_t i = 0; i < len; i++) /* the whole message must be readable */
		sink ^= ((const uint8_t *)buf)[i];
}

static void on_connect(struct ferry__tcp_ep *ep, int status, void *arg)
{
	(void)ep;
	(void)status;
	(void)arg;
	abort(); /* adopted endpoints are never reported */
}

static void on_close(struct ferry__tcp_ep *ep, int reason, void *arg)
{
	(void)ep;
	(void)reason;
	(void)arg;
	cur->closes++;
	ferry__loop_stop(cur->loop);
}

static const struct ferry__tcp_ep_cbs cbs = {on_connect, on_message, on_close};

static void decode_windows(const uint8_t *data, size_t size)
{
	struct ferry__tcp_hello hello;
	struct ferry__tcp_hdr h;

	for (size_t i = 0; i + FERRY__TCP_HDR_SIZE <= size; i++) {
		if (ferry__tcp_hdr_decode(data + i, 1u << 16, &h) == 0 &&
		    h.kind == FERRY__TCP_DATA && i + FERRY__TCP_DATA_HDR_SIZE <= size)
			(void)ferry__tcp_data_struct_decode(data + i + FERRY__TCP_HDR_SIZE, &h);
	}
	for (size_t i = 0; i < size && i < 64; i++) {
		(void)ferry__tcp_hello_parse(data + i, size - i, &hello);
		(void)ferry__tcp_ack_parse(data + i, size - i);
	}
}

static void check_fences(const struct run *r)
{
	for (size_t k = 0; k < 3; k++)
		for (size_t i = 0; i < FENCE; i++)
			if (r->area[k][i] != CANARY ||
			    r->area[k][FENCE + expects[k].len + i] != CANARY)
				abort();
}

static void feed(int fd, const uint8_t *data, size_t size)
{
	while (size) {
		ssize_t n = send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n <= 0)
			break; /* the endpoint already closed its end */
		data += n;
		size -= (size_t)n;
	}
	shutdown(fd, SHUT_WR);
}

static int poll_tcp(void *arg, bool sleeping)
{
	return ferry__tcp_poll(arg, sleeping);
}

static void run_input(struct run *r, const uint8_t *data, size_t size, bool polled)
{
	struct ferry__loop_opts lo = {.spin_us = polled ? 1000 : 0};
	struct ferry__tcp_ctx_opts o = {0};
	struct ferry__tcp_ctx *ctx = NULL;
	struct ferry__tcp_ep *ep = NULL;
	int sv[2];

	if (ferry__loop_create(&lo, &r->loop) < 0)
		abort();
	o.loop = r->loop;
	o.max_msg = 1u << 16;
	o.poll_us = lo.spin_us;
	if (ferry__tcp_ctx_create(&o, &ctx) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
	    ferry__tcp_ep_adopt(ctx, &sv[0], 1, &cbs, NULL, &ep) < 0)
		abort();
	if (polled)
		ferry__loop_set_poller(r->loop, poll_tcp, ctx);
	for (size_t k = 0; k < 3; k++)
		if (ferry__tcp_expect(ep, expects[k].id, r->area[k] + FENCE, expects[k].len,
				      on_xfer, &r->calls[k]) < 0)
			abort();
	feed(sv[1], data, size);
	ferry__loop_run(r->loop);
	if (r->closes != 1)
		abort();
	for (size_t k = 0; k < 3; k++)
		if (r->calls[k] != 1)
			abort();
	ferry__tcp_ep_destroy(ep);
	ferry__tcp_ctx_destroy(ctx);
	ferry__loop_destroy(r->loop);
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;

	if (!quiet) {
		ferry_log_configure("off");
		quiet = true;
	}
	if (size > MAX_INPUT)
		size = MAX_INPUT;
	decode_windows(data, size);
	for (int polled = 0; polled < 2; polled++) {
		struct run r = {0};

		for (size_t k = 0; k < 3; k++) {
			r.area[k] = malloc(expects[k].len + 2 * FENCE);
			if (!r.area[k])
				abort();
			memset(r.area[k], CANARY, expects[k].len + 2 * FENCE);
		}
		cur = &r;
		run_input(&r, data, size, polled);
		check_fences(&r);
		cur = NULL;
		for (size_t k = 0; k < 3; k++)
			free(r.area[k]);
	}
	return 0;
}

#ifdef FUZZ_TCP_REPLAY

/* ---- seeds ---- */

struct seed {
	uint8_t buf[16384]; /* the stream */
	size_t len;	    /* bytes in it */
};

/* A frame of @kind: DATA {@a = xfer, @b = offset} + @len bytes, else a header of that kind's
 * type and a @len-byte payload. */
static void put_frame(struct seed *s, uint8_t kind, uint32_t len, uint64_t a, uint64_t b)
{
	uint16_t type = kind == FERRY__TCP_HELLO ? FERRY__WIRE_MSG_TRANSFER_HANDSHAKE
			: kind == FERRY__TCP_ACK ? FERRY__WIRE_MSG_TRANSFER_HANDSHAKE_REPLY
						 : FERRY__WIRE_MSG_PULL_DONE;

	if (kind == FERRY__TCP_DATA) {
		ferry__tcp_data_hdr_encode(s->buf + s->len, a, b, len);
		s->len += FERRY__TCP_DATA_HDR_SIZE;
	} else {
		ferry__frame_header_encode(s->buf + s->len, type, len);
		s->len += FERRY__TCP_HDR_SIZE;
	}
	for (uint32_t i = 0; i < len; i++)
		s->buf[s->len++] = (uint8_t)(i * 7 + a);
}

/* Append a whole frame (from the handshake encoders). */
static void put_bytes(struct seed *s, uint8_t *frame, size_t size)
{
	memcpy(s->buf + s->len, frame, size);
	s->len += size;
	ferry__free(frame);
}

static int write_seed(const char *dir, const char *name, const struct seed *s)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(s->buf, 1, s->len, f) != s->len) {
		perror(path);
		if (f)
			fclose(f);
		return 1;
	}
	return fclose(f) ? 1 : 0;
}

int fuzz_make_corpus(const char *dir)
{
	struct seed s;
	uint8_t *frame;
	size_t size;
	int bad = 0;

	/* every transfer completed in pieces, with messages between them */
	memset(&s, 0, sizeof(s));
	put_frame(&s, FERRY__TCP_MSG, 5, 0, 0);
	put_frame(&s, FERRY__TCP_DATA, 1000, 1, 0);
	put_frame(&s, FERRY__TCP_DATA, 3096, 1, 1000);
	put_frame(&s, FERRY__TCP_MSG, 0, 0, 0);
	put_frame(&s, FERRY__TCP_DATA, 100, 2, 0);
	put_frame(&s, FERRY__TCP_DATA, 1, 7, 0);
	bad |= write_seed(dir, "seed-complete", &s);
	/* a transfer nobody expects, drained, then a good one */
	memset(&s, 0, sizeof(s));
	put_frame(&s, FERRY__TCP_DATA, 5000, 99, 0);
	put_frame(&s, FERRY__TCP_DATA, 100, 2, 0);
	bad |= write_seed(dir, "seed-unexpected", &s);
	/* data past the end of the expected buffer */
	memset(&s, 0, sizeof(s));
	put_frame(&s, FERRY__TCP_DATA, 60, 2, 50);
	bad |= write_seed(dir, "seed-overrun", &s);
	/* a frame cut short */
	memset(&s, 0, sizeof(s));
	put_frame(&s, FERRY__TCP_DATA, 4096, 1, 0);
	s.len -= 2000;
	bad |= write_seed(dir, "seed-truncated", &s);
	/* handshake frames where data belongs */
	memset(&s, 0, sizeof(s));
	if (ferry__tcp_hello_frame("token", 5, 1, 0, 1, &frame, &size) == 0)
		put_bytes(&s, frame, size);
	bad |= write_seed(dir, "seed-hello", &s);
	memset(&s, 0, sizeof(s));
	put_frame(&s, FERRY__TCP_MSG, 3, 0, 0);
	if (ferry__tcp_ack_frame(0, &frame, &size) == 0)
		put_bytes(&s, frame, size);
	bad |= write_seed(dir, "seed-ack", &s);
	/* an offset that overflows with the length */
	memset(&s, 0, sizeof(s));
	put_frame(&s, FERRY__TCP_DATA, 10, 2, UINT64_MAX - 4);
	bad |= write_seed(dir, "seed-overflow", &s);
	/* a peer of wire protocol 2: its 24-byte 0xFC header */
	memset(&s, 0, sizeof(s));
	s.buf[0] = 0xFC;
	s.buf[1] = 1;
	s.buf[2] = 2;
	s.buf[4] = 10;
	s.len = 34;
	bad |= write_seed(dir, "seed-old-framing", &s);
	return bad;
}

#endif
