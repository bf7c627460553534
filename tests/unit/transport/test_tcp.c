/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP engine's data path on loopback: transfers of 0 B to 64 MiB byte-exact both ways,
 * striped over sockets with and without zero copy, control messages in order, many concurrent
 * transfers, several endpoints, cancel and destroy with transfers outstanding, frame codec. */
#include "tcp_test.h"

/* One transfer of @len bytes from @from to @to; both must be established. */
static void transfer(struct env *e, struct side *from, struct side *to, size_t len, uint64_t id)
{
	uint8_t *src = malloc(len ? len : 1), *dst = malloc(len + 64);
	struct done rx = {0}, tx = {0};
	int pending = 2;

	ftest_assert_ptr_notnull(src);
	ftest_assert_ptr_notnull(dst);
	fill(src, len, id);
	memset(dst, 0xEE, len + 64);
	rx.pending = tx.pending = &pending;
	ftest_assert_ok(ferry__tcp_expect(to->ep, id, dst, len, done_cb, &rx));
	if (len) /* a zero-length expect is complete at once (its callback still waits) */
		ftest_assert_errno(ferry__tcp_expect(to->ep, id, dst, len, done_cb, &rx), -EEXIST);
	ftest_assert_ok(ferry__tcp_send_data(from->ep, id, src, len, done_cb, &tx));
	ftest_assert_int_eq(rx.calls + tx.calls, 0); /* never from inside the call */
	run_until(e->loop, int_zero, &pending);
	ftest_assert_int_eq(rx.calls, 1);
	ftest_assert_int_eq(tx.calls, 1);
	ftest_assert_ok(rx.status);
	ftest_assert_ok(tx.status);
	ftest_assert_uint_eq(check_fill(dst, len, id), len);
	for (size_t i = len; i < len + 64; i++)
		ftest_assert_uint_eq(dst[i], 0xEE); /* nothing past the end */
	free(src);
	free(dst);
}

static void sizes_case(uint32_t conns, uint32_t zc_threshold, uint32_t flags)
{
	static const size_t sizes[] = {0, 1, 4096, 1u << 20, 64u << 20};
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct side client = {0};
	struct env e;

	o.conns_per_peer = conns;
	o.zc_threshold = zc_threshold;
	o.flags = flags;
	env_init(&e, &o);
	env_connect(&e, &client);
	ftest_assert_uint_eq(ferry__tcp_ep_socks(client.ep), conns);
	ftest_assert_uint_eq(ferry__tcp_ep_socks(e.server[0].ep), conns);
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(sizes); i++) {
		transfer(&e, &client, &e.server[0], sizes[i], 2 * i + 1);
		transfer(&e, &e.server[0], &client, sizes[i], 2 * i + 2);
	}
	ftest_assert_int_eq(client.closes + e.server[0].closes, 0);
	ferry__tcp_ep_destroy(client.ep);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(e.server[0].close_reason, -ECONNRESET);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

FTEST(sizes_both_ways_four_sockets_zero_copy)
{
	sizes_case(4, 0, FERRY__TCP_ZC_LOCAL);
}

FTEST(sizes_both_ways_one_socket)
{
	sizes_case(1, 0, FERRY__TCP_ZC_LOCAL);
}

/* zc_threshold above every chunk: the plain send path. */
FTEST(sizes_both_ways_copying_sends)
{
	sizes_case(3, FERRY__TCP_MAX_CHUNK, FERRY__TCP_ZC_LOCAL);
}

/* A peer on this host gets plain copies by default (zero copy would be copied anyway). */
FTEST(sizes_both_ways_local_peer_default)
{
	sizes_case(2, 0, 0);
}

/* Queue control messages 0..@n-1 (msg_len()'s sizes, numbered, patterned) on @ep, and each on
 * @also too when set. */
static void send_numbered(struct ferry__tcp_ep *ep, struct ferry__tcp_ep *also, uint64_t n)
{
	uint8_t *buf = malloc(8 + 3000);

	ftest_assert_ptr_notnull(buf);
	for (uint64_t i = 0; i < n; i++) {
		memcpy(buf, &i, 8);
		fill(buf + 8, msg_len(i) - 8, i);
		ftest_assert_ok(tt_send(ep, buf, msg_len(i)));
		if (also)
			ftest_assert_ok(tt_send(also, buf, msg_len(i)));
	}
	free(buf);
}

/*
 * Small control frames go out with a direct non-blocking send while nothing is in flight on the
 * socket (tcp_io.c, send_direct). Queue far more than the kernel's socket buffers hold before
 * the loop runs, so that a direct send stops part-way through a frame and the ring must send the
 * rest of it, then the queue: every message arrives whole and in order.
 */
FTEST(control_messages_past_a_full_socket)
{
	enum { N = 30000 };
	struct side client = {0};
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	send_numbered(client.ep, NULL, N);
	run_until_at_least(e.loop, &e.server[0].msgs, N);
	ftest_assert_int_eq(e.server[0].msgs, N);
	ftest_assert_int_eq(e.server[0].bad_msgs, 0);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

/* Thousands of control messages of varied sizes, both ways at once, while data flows. */
FTEST(control_messages_in_order_both_ways)
{
	enum { N = 2000 };
	struct side client = {0};
	static const uint8_t buf[(1u << 20) + 1];
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	send_numbered(client.ep, e.server[0].ep, N);
	transfer(&e, &client, &e.server[0], 3u << 20, 7);
	run_until_at_least(e.loop, &client.msgs, N);
	run_until_at_least(e.loop, &e.server[0].msgs, N);
	ftest_assert_int_eq(client.bad_msgs, 0);
	ftest_assert_int_eq(e.server[0].bad_msgs, 0);
	ftest_assert_errno(tt_send(client.ep, buf, (1u << 20) + 1), -EMSGSIZE);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

static void count_empty(struct side *s, const uint8_t *buf, size_t len)
{
	ftest_assert_ptr_notnull(buf);
	ftest_assert_uint_eq(len, 0);
	s->msgs++;
}

FTEST(empty_control_message)
{
	struct side client = {0};
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	e.server[0].on_msg = count_empty;
	ftest_assert_ok(tt_send(client.ep, NULL, 0));
	ftest_assert_ok(tt_send(client.ep, "", 0));
	run_until_at_least(e.loop, &e.server[0].msgs, 2);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

/* 64 transfers of assorted sizes in flight at once each way, with small chunks. */
FTEST(many_concurrent_transfers)
{
	enum { N = 64 };
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct done rx[2 * N] = {{0}}, tx[2 * N] = {{0}};
	uint8_t *src[2 * N], *dst[2 * N];
	struct side client = {0};
	int pending = 4 * N;
	struct env e;

	o.chunk_size = 64u << 10;
	o.zc_threshold = 32u << 10;
	env_init(&e, &o);
	env_connect(&e, &client);
	for (int i = 0; i < 2 * N; i++) {
		size_t len = (size_t)(i * 7919) % (300u << 10);
		struct side *from = i < N ? &client : &e.server[0];
		struct side *to = i < N ? &e.server[0] : &client;

		src[i] = malloc(len + 1);
		dst[i] = malloc(len + 1);
		fill(src[i], len, (uint64_t)i);
		rx[i].pending = tx[i].pending = &pending;
		ftest_assert_ok(
			ferry__tcp_expect(to->ep, (uint64_t)i, dst[i], len, done_cb, &rx[i]));
		ftest_assert_ok(
			ferry__tcp_send_data(from->ep, (uint64_t)i, src[i], len, done_cb, &tx[i]));
	}
	run_until(e.loop, int_zero, &pending);
	for (int i = 0; i < 2 * N; i++) {
		size_t len = (size_t)(i * 7919) % (300u << 10);

		ftest_assert_ok(rx[i].status);
		ftest_assert_ok(tx[i].status);
		ftest_assert_uint_eq(check_fill(dst[i], len, (uint64_t)i), len);
		free(src[i]);
		free(dst[i]);
	}
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

/* Three endpoints to one listener, each with its own transfers and messages. */
FTEST(several_endpoints)
{
	struct side clients[3] = {{0}};
	struct env e;

	env_init(&e, NULL);
	for (int i = 0; i < 3; i++)
		env_connect(&e, &clients[i]);
	ftest_assert_int_eq(e.accepted, 3);
	for (int i = 0; i < 3; i++) {
		transfer(&e, &clients[i], &e.server[i], (size_t)(i + 1) << 20, 100 + (uint64_t)i);
		transfer(&e, &e.server[i], &clients[i], 1000, 200 + (uint64_t)i);
	}
	ferry__tcp_ep_destroy(clients[1].ep);
	run_until(e.loop, int_nonzero, &e.server[1].closes);
	ftest_assert_int_eq(e.server[0].closes + e.server[2].closes, 0);
	transfer(&e, &clients[2], &e.server[2], 4096, 300);
	for (int i = 0; i < 3; i++) {
		if (i != 1)
			ferry__tcp_ep_destroy(clients[i].ep);
		ferry__tcp_ep_destroy(e.server[i].ep);
	}
	env_fini(&e);
}

/* Cancelled expects complete with -ECANCELED; their data is drained; the endpoint lives on. */
FTEST(cancel_expect_then_data_is_dropped)
{
	uint8_t *src = malloc(2u << 20), *dst = malloc(2u << 20);
	struct done rx = {0}, tx = {0};
	struct side client = {0};
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	fill(src, 2u << 20, 5);
	ftest_assert_ok(ferry__tcp_expect(e.server[0].ep, 5, dst, 2u << 20, done_cb, &rx));
	ftest_assert_errno(ferry__tcp_cancel_expect(e.server[0].ep, 6), -ENOENT);
	ftest_assert_ok(ferry__tcp_cancel_expect(e.server[0].ep, 5));
	ftest_assert_int_eq(rx.calls, 0);
	run_until(e.loop, int_nonzero, &rx.calls);
	ftest_assert_errno(rx.status, -ECANCELED);
	ftest_assert_errno(ferry__tcp_cancel_expect(e.server[0].ep, 5), -ENOENT);
	ftest_assert_ok(ferry__tcp_send_data(client.ep, 5, src, 2u << 20, done_cb, &tx));
	run_until(e.loop, int_nonzero, &tx.calls);
	ftest_assert_ok(tx.status);
	transfer(&e, &client, &e.server[0], 1u << 20, 9); /* the stream is still in sync */
	free(src);
	free(dst);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

/* Destroy with an expect outstanding: -ECANCELED from inside the call, no on_close. */
FTEST(destroy_with_outstanding_expect)
{
	uint8_t dst[100];
	struct done rx = {0};
	struct side client = {0};
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	ftest_assert_ok(ferry__tcp_expect(client.ep, 1, dst, sizeof(dst), done_cb, &rx));
	ferry__tcp_ep_destroy(client.ep);
	ftest_assert_int_eq(rx.calls, 1);
	ftest_assert_errno(rx.status, -ECANCELED);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_int_eq(client.closes, 0);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

/* Calls on a closed endpoint fail with -ENOTCONN and never call back. */
FTEST(calls_after_close)
{
	uint8_t b[4];
	struct done d = {0};
	struct side client = {0};
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	ferry__tcp_ep_destroy(e.server[0].ep);
	run_until(e.loop, int_nonzero, &client.closes);
	ftest_assert_errno(client.close_reason, -ECONNRESET);
	ftest_assert_errno(tt_send(client.ep, b, 4), -ENOTCONN);
	ftest_assert_errno(ferry__tcp_expect(client.ep, 1, b, 4, done_cb, &d), -ENOTCONN);
	ftest_assert_errno(ferry__tcp_send_data(client.ep, 1, b, 4, done_cb, &d), -ENOTCONN);
	ftest_assert_int_eq(d.calls, 0);
	ferry__tcp_ep_destroy(client.ep);
	env_fini(&e);
}

/* The context destroys what is left, with the loop still to run their completions. */
FTEST(ctx_destroy_with_endpoints_open)
{
	uint8_t dst[64];
	struct done rx = {0};
	struct side client = {0};
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	ftest_assert_ok(ferry__tcp_expect(e.server[0].ep, 1, dst, sizeof(dst), done_cb, &rx));
	ferry__tcp_ctx_destroy(e.ctx);
	ftest_assert_int_eq(rx.calls, 1);
	ftest_assert_errno(rx.status, -ECANCELED);
	ferry__loop_destroy(e.loop);
}

/* An endpoint over a Unix socketpair (no handshake): SEND_ZC falls back to copies. */
FTEST(adopted_socketpair_falls_back_to_copies)
{
	struct side a = {0}, b = {0};
	struct env e;
	int sv[2];

	env_init(&e, NULL);
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ftest_assert_ok(ferry__tcp_ep_adopt(e.ctx, &sv[0], 1, &side_cbs, &a, &a.ep));
	ftest_assert_ok(ferry__tcp_ep_adopt(e.ctx, &sv[1], 1, &side_cbs, &b, &b.ep));
	transfer(&e, &a, &b, 5u << 20, 1);
	transfer(&e, &b, &a, 100, 2);
	ferry__tcp_ep_destroy(a.ep);
	run_until(e.loop, int_nonzero, &b.closes);
	ferry__tcp_ep_destroy(b.ep);
	env_fini(&e);
}

FTEST(header_codec_round_trip_and_limits)
{
	uint8_t buf[FERRY__TCP_DATA_HDR_SIZE];
	struct ferry__tcp_hdr out;

	/* A data frame: the common header (DataChunk, 16 + 77 bytes), then the struct. */
	ferry__tcp_data_hdr_encode(buf, 1ull << 40, 5, 77);
	ftest_assert_uint_eq(buf[0], 0xFE);
	ftest_assert_uint_eq(buf[1], 1);
	ftest_assert_uint_eq(ferry__fb_load_u16(buf + 2), FERRY__WIRE_MSG_DATA_CHUNK);
	ftest_assert_uint_eq(ferry__fb_load_u32(buf + 4), 16 + 77);
	ftest_assert_ok(ferry__tcp_hdr_decode(buf, 100, &out));
	ftest_assert_uint_eq(out.kind, FERRY__TCP_DATA);
	ftest_assert_uint_eq(out.len, 77);
	ftest_assert_ok(ferry__tcp_data_struct_decode(buf + FERRY__TCP_HDR_SIZE, &out));
	ftest_assert_uint_eq(out.xfer, 1ull << 40);
	ftest_assert_uint_eq(out.offset, 5);
	ferry__tcp_data_hdr_encode(buf, 1, UINT64_MAX - 10, 77); /* offset + length overflows */
	ftest_assert_ok(ferry__tcp_hdr_decode(buf, 100, &out));
	ftest_assert_errno(ferry__tcp_data_struct_decode(buf + FERRY__TCP_HDR_SIZE, &out), -EPROTO);
	ferry__tcp_data_hdr_encode(buf, 1, 0, FERRY__TCP_MAX_CHUNK + 1);
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, 100, &out), -EPROTO);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_DATA_CHUNK,
				   15); /* shorter than the struct */
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, 100, &out), -EPROTO);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_PULL_REQUEST, 101); /* over max_msg */
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, 100, &out), -EPROTO);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_PULL_REQUEST, 100);
	ftest_assert_ok(ferry__tcp_hdr_decode(buf, 100, &out));
	ftest_assert_uint_eq(out.kind, FERRY__TCP_MSG);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_TRANSFER_HANDSHAKE,
				   FERRY__TCP_HELLO_MAX + 1);
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, UINT32_MAX, &out), -EPROTO);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_TRANSFER_HANDSHAKE_REPLY,
				   FERRY__TCP_ACK_MAX + 1);
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, UINT32_MAX, &out), -EPROTO);
	ferry__frame_header_encode(buf, 4242, 0); /* unknown type */
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, 100, &out), -EPROTO);
	ferry__frame_header_encode(buf, FERRY__WIRE_MSG_PULL_REQUEST, 0);
	buf[0] = 0xFC; /* the 24-byte header of wire protocol 2 */
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, 100, &out), -EPROTONOSUPPORT);
	buf[0] = 0xFE;
	buf[1] = 2;
	ftest_assert_errno(ferry__tcp_hdr_decode(buf, 100, &out), -EPROTONOSUPPORT);
}

/* The handshake tables: checks the old header's HELLO had, now on the table's fields. */
FTEST(handshake_codec_round_trip_and_limits)
{
	static uint8_t big[FERRY__TCP_TOKEN_MAX + 1];
	struct ferry__tcp_hello h;
	struct ferry__tcp_hdr hdr;
	uint8_t *f;
	size_t size;

	ftest_assert_ok(ferry__tcp_hello_frame("tok", 3, 77, 1, 2, &f, &size));
	ftest_assert_ok(ferry__tcp_hdr_decode(f, 0, &hdr));
	ftest_assert_uint_eq(hdr.kind, FERRY__TCP_HELLO);
	ftest_assert_uint_eq(hdr.len, size - FERRY__TCP_HDR_SIZE);
	ftest_assert_ok(ferry__tcp_hello_parse(f + FERRY__TCP_HDR_SIZE, hdr.len, &h));
	ftest_assert_uint_eq(h.version, FERRY_WIRE_PROTOCOL_VERSION);
	ftest_assert_mem_eq(h.token, "tok", 3);
	ftest_assert_uint_eq(h.token_len, 3);
	ftest_assert_uint_eq(h.nonce, 77);
	ftest_assert_uint_eq(h.index, 1);
	ftest_assert_uint_eq(h.count, 2);
	ferry__free(f);
	ftest_assert_ok(ferry__tcp_hello_frame("tok", 3, 77, 2, 2, &f, &size)); /* index >= count */
	ftest_assert_errno(ferry__tcp_hello_parse(f + 8, size - 8, &h), -EPROTO);
	ferry__free(f);
	ftest_assert_ok(ferry__tcp_hello_frame("tok", 3, 77, 0, 65, &f, &size)); /* > 64 sockets */
	ftest_assert_errno(ferry__tcp_hello_parse(f + 8, size - 8, &h), -EPROTO);
	ferry__free(f);
	ftest_assert_ok(ferry__tcp_hello_frame(big, sizeof(big), 77, 0, 1, &f, &size));
	ftest_assert_errno(ferry__tcp_hello_parse(f + 8, size - 8, &h), -EPROTO);
	ferry__free(f);
	ftest_assert_errno(ferry__tcp_hello_parse("junk", 4, &h), -EPROTO);
	ftest_assert_ok(ferry__tcp_ack_frame(-EACCES, &f, &size));
	ftest_assert_errno(ferry__tcp_ack_parse(f + 8, size - 8), -EACCES);
	ferry__free(f);
	ftest_assert_ok(ferry__tcp_ack_frame(5, &f, &size)); /* not an errno */
	ftest_assert_errno(ferry__tcp_ack_parse(f + 8, size - 8), -EPROTO);
	ferry__free(f);
}

FTEST(bad_arguments)
{
	struct ferry__tcp_ctx_opts o = {0};
	struct ferry__tcp_ctx *ctx = NULL;
	struct ferry__tcp_listener *l = NULL;
	struct ferry__tcp_ep *ep = NULL;
	struct ferry__tcp_ep_cbs none = {0};
	struct env e;

	ftest_assert_errno(ferry__tcp_ctx_create(&o, &ctx), -EINVAL);
	env_init(&e, NULL);
	o = env_opts(e.loop);
	o.conns_per_peer = FERRY__TCP_MAX_CONNS + 1;
	ftest_assert_errno(ferry__tcp_ctx_create(&o, &ctx), -EINVAL);
	o = env_opts(e.loop);
	o.poll_us = 100; /* polled receive on a loop that never spins: nothing would read */
	ftest_assert_errno(ferry__tcp_ctx_create(&o, &ctx), -EINVAL);
	ftest_assert_errno(ferry__tcp_listen(e.ctx, "127.0.0.1", 0, &none, NULL, &l), -EINVAL);
	ftest_assert_errno(ferry__tcp_listen(e.ctx, "", 0, &side_cbs, NULL, &l), -EINVAL);
	ftest_assert_errno(ferry__tcp_listen(e.ctx, "127.0.0.1", e.port, &side_cbs, NULL, &l),
			   -EADDRINUSE);
	ftest_assert_errno(ferry__tcp_connect(e.ctx, "127.0.0.1", 1, 0, &none, NULL, &ep), -EINVAL);
	ftest_assert_ptr_null(l);
	ftest_assert_ptr_null(ep);
	ferry__tcp_ctx_destroy(NULL);
	ferry__tcp_ep_destroy(NULL);
	ferry__tcp_listener_destroy(NULL);
	env_fini(&e);
}

static void destroy_self(struct side *s, const uint8_t *buf, size_t len)
{
	(void)buf;
	(void)len;
	s->msgs++;
	ferry__tcp_ep_destroy(s->ep);
	ferry__tcp_ep_destroy(s->ep); /* a second destroy of a destroyed endpoint: no-op */
}

struct self_xfer {
	struct ferry__tcp_ep *ep; /* destroyed from the callback */
	struct done d;		  /* the completion */
};

static void destroy_in_xfer_cb(void *arg, int status)
{
	struct self_xfer *s = arg;

	done_cb(&s->d, status);
	ferry__tcp_ep_destroy(s->ep);
}

/* Callbacks may destroy their own endpoint: from on_message and from a transfer callback
 * (whose sibling transfer then gets -ECANCELED). */
FTEST(destroy_from_inside_callbacks)
{
	struct side client = {0};
	struct self_xfer sx = {0};
	struct done other = {0}, tx = {0};
	uint8_t src[5000], dst[5000], dst2[10];
	struct env e;

	env_init(&e, NULL);
	env_connect(&e, &client);
	e.server[0].on_msg = destroy_self;
	ftest_assert_ok(tt_send(client.ep, "x", 1));
	run_until(e.loop, int_nonzero, &client.closes);
	ftest_assert_uint_eq(e.server[0].msgs, 1);
	ftest_assert_errno(client.close_reason, -ECONNRESET);
	ferry__tcp_ep_destroy(client.ep);

	memset(&client, 0, sizeof(client));
	env_connect(&e, &client);
	fill(src, sizeof(src), 4);
	sx.ep = e.server[1].ep;
	ftest_assert_ok(ferry__tcp_expect(sx.ep, 1, dst, sizeof(dst), destroy_in_xfer_cb, &sx));
	ftest_assert_ok(ferry__tcp_expect(sx.ep, 2, dst2, sizeof(dst2), done_cb, &other));
	ftest_assert_ok(ferry__tcp_send_data(client.ep, 1, src, sizeof(src), done_cb, &tx));
	run_until(e.loop, int_nonzero, &client.closes);
	ftest_assert_int_eq(sx.d.calls, 1);
	ftest_assert_ok(sx.d.status);
	ftest_assert_int_eq(other.calls, 1);
	ftest_assert_errno(other.status, -ECANCELED);
	ftest_assert_uint_eq(check_fill(dst, sizeof(dst), 4), sizeof(dst));
	ftest_assert_int_eq(e.server[1].closes, 0);
	ferry__tcp_ep_destroy(client.ep);
	env_fini(&e);
}

/* ---- polled receive (tcp.c, "Polled receive") ---- */

/* Transfers of every size both ways and control messages both ways at once, on loops that
 * busy-poll with the control sockets read by ferry__tcp_poll(): byte-exact and in order, and
 * the control sockets are polled (not armed in the ring) once traffic has run. */
FTEST(polled_receive_sizes_and_messages)
{
	static const size_t sizes[] = {0, 1, 4096, 1u << 20, 64u << 20};
	enum { N = 3000 };
	struct side client = {0};
	struct env e;

	env_init_mode(&e, true);
	env_connect(&e, &client);
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(sizes); i++) {
		transfer(&e, &client, &e.server[0], sizes[i], 2 * i + 1);
		transfer(&e, &e.server[0], &client, sizes[i], 2 * i + 2);
	}
	send_numbered(client.ep, e.server[0].ep, N);
	run_until_at_least(e.loop, &client.msgs, N);
	run_until_at_least(e.loop, &e.server[0].msgs, N);
	ftest_assert_true(client.ep->socks[0]->polled);
	/* More than the socket buffers hold at once: polled reads stop part-way through frames. */
	e.server[0].msgs = 0; /* numbered from 0 again */
	send_numbered(client.ep, NULL, 10 * N);
	run_until_at_least(e.loop, &e.server[0].msgs, 10 * N);
	ftest_assert_int_eq(client.bad_msgs + e.server[0].bad_msgs, 0);
	ftest_assert_true(e.server[0].ep->socks[0]->polled);
	ftest_assert_false(client.ep->socks[1]->polled); /* data sockets keep the ring */
	ferry__tcp_ep_destroy(client.ep);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(e.server[0].close_reason, -ECONNRESET);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

static bool time_passed(void *arg)
{
	return ferry__now_ns() >= *(const uint64_t *)arg;
}

/* Run @e's loop for @ms milliseconds. */
static void run_for(struct env *e, unsigned ms)
{
	uint64_t end = ferry__now_ns() + (uint64_t)ms * 1000000u;

	run_until(e->loop, time_passed, &end);
}

/* Numbered message @seq (msg_len()'s layout) from a raw peer, written in two parts with @e's
 * loop run for @gap_ms between them (0: in one write). */
static void raw_numbered(struct env *e, int fd, uint64_t seq, size_t split, unsigned gap_ms)
{
	size_t len = msg_len(seq), total = FERRY__TCP_HDR_SIZE + len;
	uint8_t *frame = malloc(total);

	ftest_assert_ptr_notnull(frame);
	raw_hdr(frame, FERRY__TCP_MSG, (uint32_t)len, 0, 0);
	memcpy(frame + FERRY__TCP_HDR_SIZE, &seq, 8);
	fill(frame + FERRY__TCP_HDR_SIZE + 8, len - 8, seq);
	if (!gap_ms || split >= total) {
		write_all(fd, frame, total);
	} else {
		write_all(fd, frame, split);
		run_for(e, gap_ms);
		write_all(fd, frame + split, total - split);
	}
	free(frame);
}

/*
 * A loop with a short spin window (300 us) sleeps between bursts: before it does, the polled
 * control socket goes back to an armed receive, which then wakes it for the next frame. Frames
 * split inside the header, inside the payload and across the two, with the loop run for 3 ms
 * between the parts, arrive whole and in order.
 */
/* The socket's receive is armed in the ring, not polled: the loop would sleep on it. */
static bool rx_armed(void *arg)
{
	struct tcp_sock *sock = arg;

	return !sock->polled && ferry__loop_req_pending(&sock->rx_req);
}

FTEST(polled_receive_hands_back_before_sleep)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct tcp_sock *sock;
	uint64_t seq = 0;
	struct env e;
	int fd;

	static const size_t splits[] = {0, 10, FERRY__TCP_HDR_SIZE, FERRY__TCP_HDR_SIZE + 5, 2000};

	o.poll_us = 300;
	env_init_spin(&e, &o, 300);
	fd = raw_peer(&e, TOKEN);
	sock = e.server[0].ep->socks[0];
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(splits); i++) {
		/* Idle past the window: the loop sleeps, the socket is armed in the ring. (Within
		 * the window it is polled; run_until's 1 ms checks cannot catch that moment.) Waited
		 * for, not timed: a starved loop (TSan) may notice the window's end late. */
		run_for(&e, 5);
		run_until(e.loop, rx_armed, sock);
		raw_numbered(&e, fd, seq++, splits[i], 3);
		raw_numbered(&e, fd, seq++, 0, 0); /* and one right behind it */
		run_until_at_least(e.loop, &e.server[0].msgs, seq);
	}
	ftest_assert_int_eq(e.server[0].msgs, seq);
	ftest_assert_int_eq(e.server[0].bad_msgs, 0);
	/* The peer goes away while its socket is polled or armed: -ECONNRESET either way. */
	close(fd);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(e.server[0].close_reason, -ECONNRESET);
	ftest_assert_false(sock->polled);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}
