/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the TCP engine tests: a loop and a context with a listener on loopback, endpoint
 * callbacks that record what they saw, transfer completions, patterned buffers, "run until",
 * and a raw peer that speaks the wire format by hand (to send garbage, stop mid-frame, stall).
 */
#ifndef FERRY_TEST_TCP_TEST_H
#define FERRY_TEST_TCP_TEST_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/loop.h"
#include "common/util.h"
#include "ftest.h"
#include "ftest_loop.h"
#include "transport/tcp.h"
#include "transport/tcp_int.h"

#define TOKEN "cluster-token"

/* What one endpoint's callbacks saw. */
struct side {
	struct ferry__tcp_ep *ep; /* the endpoint (accepted ones are set in on_connect) */
	int connects;		  /* on_connect calls */
	int connect_status;	  /* the last on_connect status */
	int closes;		  /* on_close calls */
	int close_reason;	  /* on_close's reason */
	int xfers_open;		  /* transfer callbacks not yet run when on_close came */
	uint64_t msgs;		  /* control messages received */
	int bad_msgs;		  /* messages out of order or corrupt */
	int *pending;		  /* transfers of this side not yet completed (checked at close) */
	void (*on_msg)(struct side *s, const uint8_t *buf, size_t len); /* extra handling */
	void *user;							/* for on_msg */
};

/* A test-side transfer completion. */
struct done {
	int calls;    /* callback runs */
	int status;   /* its status */
	int *pending; /* shared countdown, or NULL */
};

static inline void done_cb(void *arg, int status)
{
	struct done *d = arg;

	d->calls++;
	d->status = status;
	if (d->pending)
		(*d->pending)--;
}

static inline uint8_t pattern(uint64_t seed, size_t i)
{
	return (uint8_t)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

static inline void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(seed, i);
}

/* Index of the first byte that is not the pattern, or @len. */
static inline size_t check_fill(const uint8_t *buf, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pattern(seed, i))
			return i;
	return len;
}

/* Control message @seq: 8 bytes of seq then a pattern of (seq * 37) % 3000 bytes. */
static inline size_t msg_len(uint64_t seq)
{
	return 8 + (size_t)(seq * 37) % 3000;
}

/* The MessageType the tests' control messages travel as (the engine never reads payloads). */
#define TT_MSG_TYPE FERRY__WIRE_MSG_PULL_DONE

/* Send @len bytes as one control message (a frame of TT_MSG_TYPE). */
static inline int tt_send(struct ferry__tcp_ep *ep, const void *payload, size_t len)
{
	uint8_t *frame;
	size_t size;
	int ret = ferry__frame_pack(TT_MSG_TYPE, payload, len, &frame, &size);

	if (ret < 0)
		return ret;
	ret = ferry__tcp_send(ep, frame, size);
	ferry__free(frame);
	return ret;
}

static inline void side_on_message(struct ferry__tcp_ep *ep, const void *buf, size_t len, void *arg)
{
	struct side *s = arg;
	const uint8_t *p = buf;
	struct ferry__frame_header fh;
	uint64_t seq;

	ftest_assert_ptr_eq(ep, s->ep);
	/* The engine hands over whole frames: the header, checked, then the payload. */
	ftest_assert_uint_ge(len, FERRY_FRAME_HEADER_SIZE);
	ftest_assert_ok(ferry__frame_header_decode(p, UINT32_MAX, &fh));
	ftest_assert_uint_eq(fh.type, TT_MSG_TYPE);
	ftest_assert_uint_eq(fh.length, len - FERRY_FRAME_HEADER_SIZE);
	p += FERRY_FRAME_HEADER_SIZE;
	len -= FERRY_FRAME_HEADER_SIZE;
	if (s->on_msg) {
		s->on_msg(s, p, len);
		return;
	}
	if (len < 8) {
		s->bad_msgs++;
		return;
	}
	memcpy(&seq, p, 8);
	if (seq != s->msgs || len != msg_len(seq) || check_fill(p + 8, len - 8, seq) != len - 8)
		s->bad_msgs++;
	s->msgs++;
}

static inline void side_on_connect(struct ferry__tcp_ep *ep, int status, void *arg)
{
	struct side *s = arg;

	s->connects++;
	s->connect_status = status;
	if (!s->ep)
		s->ep = ep;
}

static inline void side_on_close(struct ferry__tcp_ep *ep, int reason, void *arg)
{
	struct side *s = arg;

	ftest_assert_ptr_eq(ep, s->ep);
	s->closes++;
	s->close_reason = reason;
	s->xfers_open = s->pending ? *s->pending : 0;
}

static const struct ferry__tcp_ep_cbs side_cbs = {
	.on_connect = side_on_connect,
	.on_message = side_on_message,
	.on_close = side_on_close,
};

/* A listener whose on_connect hands each new endpoint to the next free side. */
struct env {
	struct ferry__loop *loop;	 /* one loop for everything */
	struct ferry__tcp_ctx *ctx;	 /* one context: both ends */
	struct ferry__tcp_listener *lis; /* on 127.0.0.1 */
	struct side server[4];		 /* accepted endpoints, in order */
	int accepted;			 /* endpoints the listener reported */
	uint16_t port;			 /* listener port */
};

static inline void env_on_accept(struct ferry__tcp_ep *ep, int status, void *arg)
{
	struct env *e = arg;
	struct side *s;

	ftest_assert_int_eq(status, 0);
	ftest_assert_int_lt(e->accepted, 4);
	s = &e->server[e->accepted++];
	s->ep = ep;
	s->connects++;
	ferry__tcp_ep_set_arg(ep, s);
}

static const struct ferry__tcp_ep_cbs env_listen_cbs = {
	.on_connect = env_on_accept,
	.on_message = side_on_message,
	.on_close = side_on_close,
};

static inline struct ferry__tcp_ctx_opts env_opts(struct ferry__loop *loop)
{
	/* Zero copy on loopback too, so that its paths are the ones tested. */
	return (struct ferry__tcp_ctx_opts){.loop = loop,
					    .token = TOKEN,
					    .token_size = strlen(TOKEN),
					    .flags = FERRY__TCP_ZC_LOCAL};
}

static inline int env_poll(void *arg, bool sleeping)
{
	return ferry__tcp_poll(arg, sleeping);
}

/* The env on a loop that busy-polls for @spin_us after its last work (0: it always sleeps),
 * with the context's poller installed; opts->poll_us turns polled receive on. */
static inline void env_init_spin(struct env *e, const struct ferry__tcp_ctx_opts *opts,
				 unsigned spin_us)
{
	struct ferry__loop_opts lo = {.spin_us = spin_us};
	struct ferry__tcp_ctx_opts o;

	memset(e, 0, sizeof(*e));
	ftest_assert_ok(ferry__loop_create(&lo, &e->loop));
	o = opts ? *opts : env_opts(e->loop);
	o.loop = e->loop;
	ftest_assert_ok(ferry__tcp_ctx_create(&o, &e->ctx));
	if (spin_us)
		ferry__loop_set_poller(e->loop, env_poll, e->ctx);
	ftest_assert_ok(ferry__tcp_listen(e->ctx, "127.0.0.1", 0, &env_listen_cbs, e, &e->lis));
	e->port = ferry__tcp_listener_port(e->lis);
	ftest_assert_uint_gt(e->port, 0);
}

static inline void env_init(struct env *e, const struct ferry__tcp_ctx_opts *opts)
{
	env_init_spin(e, opts, 0);
}

/* The env on a loop that sleeps (@polled false: every receive armed in the ring), or on one
 * that busy-polls for 100 ms after its last work with polled receive on (tcp.c, "Polled
 * receive": the control socket read by ferry__tcp_poll while the loop spins). */
static inline void env_init_mode(struct env *e, bool polled)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);

	o.poll_us = polled ? 100000 : 0;
	env_init_spin(e, &o, polled ? 100000 : 0);
}

static inline void env_fini(struct env *e)
{
	ferry__tcp_ctx_destroy(e->ctx);
	ferry__loop_destroy(e->loop);
}

static inline bool int_zero(void *arg)
{
	return *(int *)arg == 0;
}

static inline bool int_nonzero(void *arg)
{
	return *(int *)arg != 0;
}

struct at_least {
	const void *v; /* an int or a uint64_t */
	bool wide;     /* v is a uint64_t */
	uint64_t n;    /* wait until *v >= n */
};

static inline bool reached(void *arg)
{
	struct at_least *a = arg;
	uint64_t v = a->wide ? *(const uint64_t *)a->v : (uint64_t) * (const int *)a->v;

	return v >= a->n;
}

/* Run until the int or uint64_t at @v is at least @n. */
#define run_until_at_least(loop, v, n)                                         \
	do {                                                                   \
		struct at_least at_ = {(v), sizeof(*(v)) == 8, (uint64_t)(n)}; \
		run_until((loop), reached, &at_);                              \
	} while (0)

/* Connect @client to the env's listener and run until both ends are up. */
static inline void env_connect(struct env *e, struct side *client)
{
	int before = e->accepted;

	ftest_assert_ok(ferry__tcp_connect(e->ctx, "127.0.0.1", e->port, 0, &side_cbs, client,
					   &client->ep));
	run_until(e->loop, int_nonzero, &client->connects);
	ftest_assert_int_eq(client->connect_status, 0);
	run_until_at_least(e->loop, &e->accepted, before + 1);
}

/* ---- a raw peer ---- */

static inline void write_all(int fd, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		ftest_assert_int_gt(n, 0);
		p += n;
		len -= (size_t)n;
	}
}

/*
 * The header of a frame of @kind in @out (FERRY__TCP_DATA_HDR_SIZE bytes of room): for DATA the
 * 8-byte header and the DataChunk struct {@xfer, @offset} before @len raw bytes, else the
 * 8-byte header of a @len-byte payload (MSG: TT_MSG_TYPE). Returns the bytes written.
 */
static inline size_t raw_hdr(uint8_t *out, uint8_t kind, uint32_t len, uint64_t xfer,
			     uint64_t offset)
{
	uint16_t type = kind == FERRY__TCP_HELLO ? FERRY__WIRE_MSG_TRANSFER_HANDSHAKE
			: kind == FERRY__TCP_ACK ? FERRY__WIRE_MSG_TRANSFER_HANDSHAKE_REPLY
						 : TT_MSG_TYPE;

	if (kind == FERRY__TCP_DATA) {
		ferry__tcp_data_hdr_encode(out, xfer, offset, len);
		return FERRY__TCP_DATA_HDR_SIZE;
	}
	ferry__frame_header_encode(out, type, len);
	return FERRY__TCP_HDR_SIZE;
}

static inline void raw_frame(int fd, uint8_t kind, uint32_t len, uint64_t xfer, uint64_t offset)
{
	uint8_t hdr[FERRY__TCP_DATA_HDR_SIZE];

	write_all(fd, hdr, raw_hdr(hdr, kind, len, xfer, offset));
}

/* A TransferHandshake for socket @index of @count of endpoint @nonce. */
static inline void raw_hello(int fd, const char *token, uint64_t nonce, unsigned index,
			     unsigned count)
{
	uint8_t *frame;
	size_t size;

	ftest_assert_ok(
		ferry__tcp_hello_frame(token, strlen(token), nonce, index, count, &frame, &size));
	write_all(fd, frame, size);
	ferry__free(frame);
}

/* Read one TransferHandshakeReply from @fd: its status. */
static inline int raw_read_ack(int fd)
{
	uint8_t hdr[FERRY__TCP_HDR_SIZE], payload[FERRY__TCP_ACK_MAX];
	struct ferry__tcp_hdr h;

	ftest_assert_int_eq(recv(fd, hdr, sizeof(hdr), MSG_WAITALL), (int)sizeof(hdr));
	ftest_assert_ok(ferry__tcp_hdr_decode(hdr, 1024, &h));
	ftest_assert_int_eq(h.kind, FERRY__TCP_ACK);
	ftest_assert_int_eq(recv(fd, payload, h.len, MSG_WAITALL), (int)h.len);
	return ferry__tcp_ack_parse(payload, h.len);
}

static inline int raw_connect(uint16_t port)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	return fd;
}

static inline bool fd_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

struct raw_wait {
	struct env *e; /* the env */
	int fd;	       /* raw socket */
	int accepted;  /* endpoints expected */
};

static inline bool raw_acked(void *arg)
{
	struct raw_wait *w = arg;

	return w->e->accepted >= w->accepted && fd_readable(w->fd);
}

/* A raw one-socket peer that passed the handshake: the env's next server side is its ep. */
static inline int raw_peer(struct env *e, const char *token)
{
	struct raw_wait w = {.e = e, .accepted = e->accepted + 1};

	w.fd = raw_connect(e->port);
	raw_hello(w.fd, token, 0x1234, 0, 1);
	run_until(e->loop, raw_acked, &w);
	ftest_assert_ok(raw_read_ack(w.fd));
	return w.fd;
}

#endif
