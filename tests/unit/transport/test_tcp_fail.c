/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP engine's failure paths with real sockets: wrong token, refused and unanswered
 * connects, peers that close mid-frame, send garbage, overrun the buffer, stall, stop reading,
 * die (a forked process) or freeze; deadlines; and an allocation countdown through connect,
 * messages and a transfer with nothing leaked. */
#include <signal.h>
#include <sys/wait.h>

#include "tcp_test.h"

/* A wrong token: -EACCES on the connecting side, a log line, and the listener serves on. */
FTEST(wrong_token_is_refused_and_listener_keeps_serving)
{
	struct ferry__tcp_ctx_opts o;
	struct ferry__tcp_ctx *bad = NULL;
	struct side intruder = {0}, client = {0};
	struct env e;

	env_init(&e, NULL);
	o = env_opts(e.loop);
	o.token = "not-the-token";
	o.token_size = 13;
	ftest_assert_ok(ferry__tcp_ctx_create(&o, &bad));
	ftest_assert_ok(ferry__tcp_connect(bad, "127.0.0.1", e.port, 0, &side_cbs, &intruder,
					   &intruder.ep));
	run_until(e.loop, int_nonzero, &intruder.connects);
	ftest_assert_errno(intruder.connect_status, -EACCES);
	ftest_assert_int_eq(intruder.closes, 0);
	ftest_assert_int_eq(e.accepted, 0);
	ferry__tcp_ep_destroy(intruder.ep);
	env_connect(&e, &client);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	ferry__tcp_ctx_destroy(bad);
	env_fini(&e);
}

FTEST(connect_refused)
{
	struct side client = {0};
	struct env e;
	uint16_t port;

	env_init(&e, NULL);
	port = e.port;
	ferry__tcp_listener_destroy(e.lis);
	ftest_assert_ok(
		ferry__tcp_connect(e.ctx, "127.0.0.1", port, 0, &side_cbs, &client, &client.ep));
	run_until(e.loop, int_nonzero, &client.connects);
	ftest_assert_errno(client.connect_status, -ECONNREFUSED);
	ferry__tcp_ep_destroy(client.ep);
	env_fini(&e);
}

/* A listener that never accepts: the kernel completes the TCP connect, nobody answers HELLO. */
FTEST(peer_never_answers_the_handshake)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t len = sizeof(addr);
	struct side client = {0};
	struct env e;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	ftest_assert_int_eq(listen(fd, 16), 0);
	ftest_assert_int_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	env_init(&e, NULL);
	ftest_assert_ok(ferry__tcp_connect(e.ctx, "127.0.0.1", ntohs(addr.sin_port), 200, &side_cbs,
					   &client, &client.ep));
	run_until(e.loop, int_nonzero, &client.connects);
	ftest_assert_errno(client.connect_status, -ETIMEDOUT);
	ferry__tcp_ep_destroy(client.ep);
	env_fini(&e);
	close(fd);
}

static bool fd_eof(void *arg)
{
	char c;

	return fd_readable(*(int *)arg) && recv(*(int *)arg, &c, 1, MSG_DONTWAIT) == 0;
}

/* Accepted sockets that send nothing, or not a HELLO, are closed; good peers still get in. */
FTEST(listener_closes_silent_and_foreign_connections)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct side client = {0};
	struct env e;
	int silent, foreign;

	o.connect_timeout_ms = 100;
	env_init(&e, &o);
	silent = raw_connect(e.port);
	foreign = raw_connect(e.port);
	write_all(foreign, "GET / HTTP/1.1\r\nHost: ferry\r\n\r\n", 24);
	run_until(e.loop, fd_eof, &foreign);
	run_until(e.loop, fd_eof, &silent);
	env_connect(&e, &client);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	close(silent);
	close(foreign);
}

static bool readable(void *arg)
{
	return fd_readable(*(int *)arg);
}

/*
 * A peer of wire protocol 2 (its 24-byte 0xFC HELLO header and token) is closed with a log
 * line naming the protocol version; the listener keeps serving: a new peer still gets in.
 */
FTEST(old_protocol_peer_is_refused_and_the_listener_keeps_serving)
{
	uint8_t hello[24 + sizeof(TOKEN) - 1] = {0xFC, 1, 3, 0, sizeof(TOKEN) - 1};
	struct side client = {0};
	struct env e;
	int old;

	hello[8] = 0x34; /* nonce */
	hello[20] = 1;	 /* socket count 1 (index 0) */
	memcpy(hello + 24, TOKEN, sizeof(TOKEN) - 1);
	ftest_log_capture_start();
	env_init(&e, NULL);
	old = raw_connect(e.port);
	write_all(old, hello, sizeof(hello));
	run_until(e.loop, fd_eof, &old);
	ftest_assert_int_eq(e.accepted, 0);
	ftest_assert_true(strstr(ftest_log_captured(), "another protocol version") != NULL);
	env_connect(&e, &client);
	ftest_assert_ok(tt_send(client.ep, "x", 1));
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	ftest_log_capture_stop();
	close(old);
}

/* A TransferHandshake of another protocol version is refused with -EPROTO and a log line. */
FTEST(handshake_of_another_version_is_refused)
{
	struct ferry__wire_transfer_handshake m = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION + 1,
		.token = (const uint8_t *)TOKEN,
		.token_count = sizeof(TOKEN) - 1,
		.socket_count = 1,
	};
	struct ferry__fb_builder b = {0};
	const uint8_t *frame;
	size_t size;
	struct env e;
	int fd;

	ftest_log_capture_start();
	env_init(&e, NULL);
	fd = raw_connect(e.port);
	ftest_assert_ok(ferry__wire_transfer_handshake_build(&b, &m));
	ftest_assert_ok(ferry__frame_finish(&b, FERRY__WIRE_MSG_TRANSFER_HANDSHAKE, &frame, &size));
	write_all(fd, frame, size);
	run_until(e.loop, readable, &fd);
	ftest_assert_errno(raw_read_ack(fd), -EPROTO);
	run_until(e.loop, fd_eof, &fd);
	ftest_assert_int_eq(e.accepted, 0);
	ftest_assert_true(strstr(ftest_log_captured(), "protocol version") != NULL);
	env_fini(&e);
	ftest_log_capture_stop();
	ferry__fb_builder_fini(&b);
	close(fd);
}

/* Expect @len bytes as transfer 1 on the raw peer's endpoint. */
static void expect_on(struct env *e, struct side *s, uint8_t *buf, size_t len, struct done *d,
		      int *pending)
{
	d->pending = pending;
	s->pending = pending;
	ftest_assert_ok(ferry__tcp_expect(s->ep, 1, buf, len, done_cb, d));
	(void)e;
}

/* A peer that closes halfway through a data frame: -ECONNRESET for the transfer, then on_close
 * once, after it. */
static void peer_closes_mid_frame_case(bool polled)
{
	uint8_t buf[1000], junk[500];
	struct done rx = {0};
	int pending = 1, fd;
	struct env e;

	env_init_mode(&e, polled);
	fd = raw_peer(&e, TOKEN);
	expect_on(&e, &e.server[0], buf, sizeof(buf), &rx, &pending);
	raw_frame(fd, FERRY__TCP_DATA, 1000, 1, 0);
	memset(junk, 1, sizeof(junk));
	write_all(fd, junk, sizeof(junk));
	close(fd);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_int_eq(rx.calls, 1);
	ftest_assert_errno(rx.status, -ECONNRESET);
	ftest_assert_int_eq(e.server[0].closes, 1);
	ftest_assert_errno(e.server[0].close_reason, -ECONNRESET);
	ftest_assert_int_eq(e.server[0].xfers_open, 0);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

FTEST(peer_closes_mid_frame)
{
	peer_closes_mid_frame_case(false);
	peer_closes_mid_frame_case(true);
}

static void garbage_mode(const uint8_t *bytes, size_t len, size_t buf_len, bool polled)
{
	uint8_t *area = malloc(buf_len + 128);
	struct done rx = {0};
	int pending = 1, fd;
	struct env e;

	memset(area, 0x5A, buf_len + 128);
	env_init_mode(&e, polled);
	fd = raw_peer(&e, TOKEN);
	expect_on(&e, &e.server[0], area + 64, buf_len, &rx, &pending);
	write_all(fd, bytes, len);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(rx.status, -EPROTO);
	ftest_assert_errno(e.server[0].close_reason, -EPROTO);
	ftest_assert_int_eq(e.server[0].xfers_open, 0);
	for (size_t i = 0; i < 64; i++) { /* never a write outside the buffer */
		ftest_assert_uint_eq(area[i], 0x5A);
		ftest_assert_uint_eq(area[64 + buf_len + i], 0x5A);
	}
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	close(fd);
	free(area);
}

/* Every garbage case on both kinds of receive. */
static void garbage_case(const uint8_t *bytes, size_t len, size_t buf_len)
{
	garbage_mode(bytes, len, buf_len, false);
	garbage_mode(bytes, len, buf_len, true);
}

FTEST(garbage_is_eproto)
{
	static const uint8_t junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";

	garbage_case(junk, sizeof(junk), 100);
}

FTEST(data_beyond_the_expected_buffer_is_eproto)
{
	uint8_t frame[FERRY__TCP_DATA_HDR_SIZE + 100];

	memset(frame, 0xC3, sizeof(frame));
	raw_hdr(frame, FERRY__TCP_DATA, 100, 1, 50); /* 50 + 100 > 100 */
	garbage_case(frame, sizeof(frame), 100);
}

FTEST(more_data_than_expected_in_total_is_eproto)
{
	uint8_t frames[2 * (FERRY__TCP_DATA_HDR_SIZE + 60)];

	memset(frames, 0xC3, sizeof(frames));
	raw_hdr(frames, FERRY__TCP_DATA, 60, 1, 0);
	raw_hdr(frames + FERRY__TCP_DATA_HDR_SIZE + 60, FERRY__TCP_DATA, 60, 1, 40); /* overlaps */
	garbage_case(frames, sizeof(frames), 100);
}

FTEST(data_offset_overflow_is_eproto)
{
	uint8_t frame[FERRY__TCP_DATA_HDR_SIZE + 10];

	memset(frame, 0xC3, sizeof(frame));
	raw_hdr(frame, FERRY__TCP_DATA, 10, 1, UINT64_MAX - 5);
	garbage_case(frame, sizeof(frame), 100);
}

FTEST(oversize_control_message_is_eproto)
{
	uint8_t hdr[FERRY__TCP_HDR_SIZE];

	raw_hdr(hdr, FERRY__TCP_MSG, (1u << 20) + 1, 0, 0);
	garbage_case(hdr, sizeof(hdr), 10);
}

FTEST(handshake_frame_after_handshake_is_eproto)
{
	uint8_t hdr[FERRY__TCP_HDR_SIZE];

	raw_hdr(hdr, FERRY__TCP_ACK, 0, 0, 0);
	garbage_case(hdr, sizeof(hdr), 10);
}

/* A frame of wire protocol 2 (the 24-byte 0xFC header of a control message) on an
 * established endpoint: the endpoint fails with -EPROTO. */
FTEST(old_framing_after_handshake_is_eproto)
{
	static const uint8_t old[24] = {0xFC, 1, 1, 0, 0, 0, 0, 0};

	garbage_case(old, sizeof(old), 10);
}

/* Data of a transfer nobody expects is read and dropped; the next frame lands fine. */
FTEST(unexpected_transfer_is_drained)
{
	size_t big = 200000;
	uint8_t *junk = malloc(big), buf[10], good[10];
	struct done rx = {0};
	int pending = 1, fd;
	struct env e;

	memset(junk, 7, big);
	fill(good, sizeof(good), 3);
	env_init(&e, NULL);
	fd = raw_peer(&e, TOKEN);
	expect_on(&e, &e.server[0], buf, sizeof(buf), &rx, &pending);
	raw_frame(fd, FERRY__TCP_DATA, (uint32_t)big, 99, 0);
	write_all(fd, junk, big);
	raw_frame(fd, FERRY__TCP_DATA, sizeof(good), 1, 0);
	write_all(fd, good, sizeof(good));
	run_until(e.loop, int_zero, &pending);
	ftest_assert_ok(rx.status);
	ftest_assert_mem_eq(buf, good, sizeof(good));
	ftest_assert_int_eq(e.server[0].closes, 0);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	close(fd);
	free(junk);
}

/* A deadline with nothing in flight fails only that transfer. */
FTEST(expect_deadline_without_bytes_in_flight)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct side client = {0};
	uint8_t buf[64], src[64];
	struct done rx = {0}, tx = {0}, rx2 = {0};
	int pending = 2;
	struct env e;

	o.op_timeout_ms = 100;
	env_init(&e, &o);
	env_connect(&e, &client);
	ftest_assert_ok(ferry__tcp_expect(e.server[0].ep, 1, buf, sizeof(buf), done_cb, &rx));
	run_until(e.loop, int_nonzero, &rx.calls);
	ftest_assert_errno(rx.status, -ETIMEDOUT);
	fill(src, sizeof(src), 2);
	rx2.pending = tx.pending = &pending;
	ftest_assert_ok(ferry__tcp_expect(e.server[0].ep, 1, buf, sizeof(buf), done_cb, &rx2));
	ftest_assert_ok(ferry__tcp_send_data(client.ep, 1, src, sizeof(src), done_cb, &tx));
	run_until(e.loop, int_zero, &pending);
	ftest_assert_ok(rx2.status);
	ftest_assert_mem_eq(buf, src, sizeof(src));
	ftest_assert_int_eq(e.server[0].closes + client.closes, 0);
	ferry__tcp_ep_destroy(client.ep);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
}

/* A peer that stalls in the middle of a frame: the deadline tears the endpoint down. */
FTEST(expect_deadline_with_bytes_in_flight_tears_down)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	uint8_t buf[1000], part[10] = {0};
	struct done rx = {0};
	int pending = 1, fd;
	struct env e;

	o.op_timeout_ms = 100;
	env_init(&e, &o);
	fd = raw_peer(&e, TOKEN);
	expect_on(&e, &e.server[0], buf, sizeof(buf), &rx, &pending);
	raw_frame(fd, FERRY__TCP_DATA, sizeof(buf), 1, 0);
	write_all(fd, part, sizeof(part));
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(rx.status, -ETIMEDOUT);
	ftest_assert_errno(e.server[0].close_reason, -ETIMEDOUT);
	ftest_assert_int_eq(e.server[0].xfers_open, 0);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	close(fd);
}

/* A peer that stops reading: the sender's deadline fires with zero-copy sends outstanding;
 * the teardown gets their buffers back (the callback means the kernel let go). */
FTEST(send_deadline_when_the_peer_stops_reading)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	size_t len = 64u << 20;
	uint8_t *src = malloc(len);
	struct done tx = {0};
	int pending = 1, fd;
	struct env e;

	o.op_timeout_ms = 300;
	env_init(&e, &o);
	fd = raw_peer(&e, TOKEN);
	memset(src, 1, len);
	tx.pending = e.server[0].pending = &pending;
	ftest_assert_ok(ferry__tcp_send_data(e.server[0].ep, 1, src, len, done_cb, &tx));
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_int_eq(tx.calls, 1);
	ftest_assert_errno(tx.status, -ETIMEDOUT);
	ftest_assert_errno(e.server[0].close_reason, -ETIMEDOUT);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	close(fd);
	free(src);
}

/* ---- a forked peer ---- */

enum child_mode { CHILD_DIES_MID_TRANSFER, CHILD_FREEZES };

struct child {
	struct ferry__loop *loop;	/* its own loop */
	struct ferry__loop_timer timer; /* the kill */
	enum child_mode mode;		/* what it does */
	uint8_t *src;			/* what it sends */
	struct done tx;			/* its send */
};

static void child_die(struct ferry__loop_timer *t, int status)
{
	(void)t;
	(void)status;
	raise(SIGKILL);
}

static void child_on_connect(struct ferry__tcp_ep *ep, int status, void *arg)
{
	struct child *c = arg;

	(void)ep;
	if (status != 0)
		_exit(2);
	if (c->mode == CHILD_FREEZES)
		raise(SIGSTOP);
}

static void child_on_message(struct ferry__tcp_ep *ep, const void *buf, size_t len, void *arg)
{
	struct child *c = arg;

	(void)buf;
	(void)len;
	if (ferry__tcp_send_data(ep, 1, c->src, 32u << 20, done_cb, &c->tx) < 0)
		_exit(3);
	if (ferry__loop_timer_start(c->loop, &c->timer, 5, 0, child_die) < 0)
		_exit(4);
}

static void child_on_close(struct ferry__tcp_ep *ep, int reason, void *arg)
{
	(void)ep;
	(void)reason;
	(void)arg;
	_exit(5);
}

static const struct ferry__tcp_ep_cbs child_cbs = {child_on_connect, child_on_message,
						   child_on_close};

static pid_t fork_child(uint16_t port, enum child_mode mode)
{
	struct child c = {.mode = mode};
	struct ferry__tcp_ctx_opts o;
	struct ferry__tcp_ctx *ctx = NULL;
	struct ferry__tcp_ep *ep = NULL;
	pid_t pid = fork();

	ftest_assert_int_ge(pid, 0);
	if (pid > 0)
		return pid;
	c.src = malloc(32u << 20);
	if (!c.src || ferry__loop_create(NULL, &c.loop) < 0)
		_exit(1);
	memset(c.src, 9, 32u << 20);
	o = env_opts(c.loop);
	o.chunk_size = 256u << 10;
	if (ferry__tcp_ctx_create(&o, &ctx) < 0 ||
	    ferry__tcp_connect(ctx, "127.0.0.1", port, 0, &child_cbs, &c, &ep) < 0)
		_exit(1);
	ferry__loop_run(c.loop);
	_exit(6);
}

/* A forked peer is killed while it streams a transfer: -ECONNRESET, then on_close once. */
FTEST(forked_peer_dies_mid_transfer)
{
	size_t len = 64u << 20;
	uint8_t *dst = malloc(len);
	struct done rx = {0};
	int pending = 1, status;
	struct env e;
	pid_t pid;

	env_init(&e, NULL);
	pid = fork_child(e.port, CHILD_DIES_MID_TRANSFER);
	run_until_at_least(e.loop, &e.accepted, 1);
	expect_on(&e, &e.server[0], dst, len, &rx, &pending); /* more than the child sends */
	ftest_assert_ok(tt_send(e.server[0].ep, "go", 2));
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(rx.status, -ECONNRESET);
	ftest_assert_errno(e.server[0].close_reason, -ECONNRESET);
	ftest_assert_int_eq(e.server[0].xfers_open, 0);
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	free(dst);
}

static bool child_stopped(void *arg)
{
	int status;
	pid_t pid = *(pid_t *)arg, ret = waitpid(pid, &status, WNOHANG | WUNTRACED);

	ftest_assert_true(ret == 0 || (ret == pid && WIFSTOPPED(status)));
	return ret == pid;
}

/* A forked peer that freezes (SIGSTOP) while we send to it: the deadline ends the transfer. */
FTEST(forked_peer_freezes_and_the_deadline_fires)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	size_t len = 64u << 20;
	uint8_t *src = malloc(len);
	struct done tx = {0};
	int pending = 1, status;
	struct env e;
	pid_t pid;

	o.op_timeout_ms = 300;
	env_init(&e, &o);
	memset(src, 3, len);
	pid = fork_child(e.port, CHILD_FREEZES);
	run_until(e.loop, child_stopped, &pid); /* our ACKs go out from the loop */
	ftest_assert_int_eq(e.accepted, 1);
	tx.pending = e.server[0].pending = &pending;
	ftest_assert_ok(ferry__tcp_send_data(e.server[0].ep, 1, src, len, done_cb, &tx));
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(tx.status, -ETIMEDOUT);
	ftest_assert_errno(e.server[0].close_reason, -ETIMEDOUT);
	ftest_assert_int_eq(kill(pid, SIGKILL), 0);
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	free(src);
}

/* ---- allocation countdown ---- */

struct ac {
	struct env *e;	     /* the env */
	struct side client;  /* connecting side */
	uint8_t src[300000]; /* sent */
	uint8_t dst[300000]; /* received */
	struct done rx, tx;  /* the transfer */
	int finished;	     /* something ended the scenario */
	bool said_hi;	     /* the client sent its first message */
};

static void ac_client_msg(struct side *s, const uint8_t *buf, size_t len)
{
	struct ac *a = s->user;

	(void)buf;
	(void)len;
	if (ferry__tcp_send_data(s->ep, 1, a->src, sizeof(a->src), done_cb, &a->tx) < 0)
		a->finished = 1;
}

static void ac_server_msg(struct side *s, const uint8_t *buf, size_t len)
{
	struct ac *a = s->user;

	(void)buf;
	(void)len;
	if (ferry__tcp_expect(s->ep, 1, a->dst, sizeof(a->dst), done_cb, &a->rx) < 0 ||
	    tt_send(s->ep, "go", 2) < 0)
		a->finished = 1;
}

static bool ac_done(void *arg)
{
	struct ac *a = arg;
	struct side *srv = &a->e->server[0];

	if (a->client.connects && a->client.connect_status == 0 && !a->said_hi) {
		a->said_hi = true;
		if (tt_send(a->client.ep, "hi", 2) < 0)
			a->finished = 1;
	}
	if (a->e->accepted && !srv->on_msg) {
		srv->on_msg = ac_server_msg;
		srv->user = a;
	}
	return a->finished || (a->client.connects && a->client.connect_status) ||
	       a->client.closes || srv->closes || (a->rx.calls && a->tx.calls);
}

/* Fail the Nth allocation for every N through connect, handshake, messages and a transfer:
 * each run ends in success or a clean error, and nothing leaks. */
FTEST(allocation_countdown_through_connect_and_transfer)
{
	bool completed = false;

	for (long n = 0; n < 200 && !completed; n++) {
		struct ac *a = calloc(1, sizeof(*a));
		struct ferry__tcp_ctx_opts o = env_opts(NULL);
		struct env e;
		long live;

		o.chunk_size = 64u << 10;
		a->e = &e;
		live = ferry__alloc_live();
		env_init(&e, &o);
		a->client.on_msg = ac_client_msg;
		a->client.user = a;
		fill(a->src, sizeof(a->src), 1);
		ferry__alloc_fail_after(n);
		if (ferry__tcp_connect(e.ctx, "127.0.0.1", e.port, 0, &side_cbs, &a->client,
				       &a->client.ep) < 0)
			a->finished = 1;
		else
			run_until(e.loop, ac_done, a);
		completed = ferry__alloc_fail_pending() && a->rx.calls && a->tx.calls;
		ferry__alloc_fail_after(-1);
		if (completed) {
			ftest_assert_ok(a->rx.status);
			ftest_assert_ok(a->tx.status);
			ftest_assert_uint_eq(check_fill(a->dst, sizeof(a->dst), 1), sizeof(a->dst));
			ftest_log("completed without a failure at allocation %ld", n);
		}
		ferry__tcp_ep_destroy(a->client.ep);
		for (int i = 0; i < e.accepted; i++)
			ferry__tcp_ep_destroy(e.server[i].ep);
		env_fini(&e);
		ftest_assert_int_eq(ferry__alloc_live(), live);
		free(a);
	}
	ftest_assert_true(completed);
}

static bool past(void *arg)
{
	return ferry__loop_now_ms() >= *(uint64_t *)arg;
}

/* An endpoint whose other sockets never come: dropped at the deadline, or when the listener
 * is destroyed; never reported. */
FTEST(incomplete_endpoint_is_dropped)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	uint64_t until;
	struct env e;
	int a, b;

	o.connect_timeout_ms = 100;
	env_init(&e, &o);
	a = raw_connect(e.port);
	raw_hello(a, TOKEN, 77, 0, 2);
	run_until(e.loop, fd_eof, &a);
	ftest_assert_int_eq(e.accepted, 0);
	env_fini(&e);
	env_init(&e, NULL);
	b = raw_connect(e.port);
	raw_hello(b, TOKEN, 78, 1, 3);
	until = ferry__loop_now_ms() + 50;
	run_until(e.loop, past, &until); /* it joined its endpoint by now */
	ferry__tcp_listener_destroy(e.lis);
	run_until(e.loop, fd_eof, &b);
	ftest_assert_int_eq(e.accepted, 0);
	env_fini(&e);
	close(a);
	close(b);
}

/* A two-socket raw peer; returns the fds after both ACKs. */
static void raw_group(struct env *e, int fds[2])
{
	struct raw_wait w = {.e = e, .accepted = e->accepted + 1};

	for (unsigned i = 0; i < 2; i++) {
		fds[i] = raw_connect(e->port);
		raw_hello(fds[i], TOKEN, 99, i, 2);
	}
	for (unsigned i = 0; i < 2; i++) {
		w.fd = fds[i];
		run_until(e->loop, raw_acked, &w);
	}
	for (unsigned i = 0; i < 2; i++)
		ftest_assert_ok(raw_read_ack(fds[i]));
}

/* Control messages travel on socket 0 only: one on a data socket is -EPROTO. */
FTEST(control_message_on_a_data_socket_is_eproto)
{
	struct env e;
	int fds[2];

	env_init(&e, NULL);
	raw_group(&e, fds);
	ftest_assert_uint_eq(ferry__tcp_ep_socks(e.server[0].ep), 2);
	raw_frame(fds[0], FERRY__TCP_MSG, 3, 0, 0);
	write_all(fds[0], "abc", 3);
	raw_frame(fds[1], FERRY__TCP_MSG, 0, 0, 0);
	run_until(e.loop, int_nonzero, &e.server[0].closes);
	ftest_assert_errno(e.server[0].close_reason, -EPROTO);
	ferry__tcp_ep_destroy(e.server[0].ep);
	env_fini(&e);
	close(fds[0]);
	close(fds[1]);
}
