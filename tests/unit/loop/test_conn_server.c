/* SPDX-License-Identifier: Apache-2.0 */
/* The connection server and clients over loopback TCP and Unix paths: handshake (good, wrong
 * token, malformed, missing, late), peers sending garbage while others keep working, connect
 * errors, fd passing, zero-copy large messages, destroy with everything open, and allocation
 * failures through the whole exchange. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/un.h>

#include "conn_test.h"

#define TOKEN "cluster-secret"

/* A server whose accepted connections echo, each with its own recorded peer. */
struct server {
	struct ferry__loop *loop;	/* shared */
	struct ferry__conn_server *srv; /* the server */
	struct peer peers[8];		/* accepted connections, in accept order */
	int accepted;			/* entries used in peers */
	int refused;			/* on_refused calls */
	int refused_err[8];		/* their errors */
	char names[8][32];		/* Handshake.name of each accepted */
	bool echo;			/* accepted peers echo */
};

static void srv_on_accept(struct ferry__conn_server *srv, struct ferry__conn *conn,
			  const void *handshake, size_t len)
{
	struct server *s = ferry__conn_server_data(srv);
	struct peer *p = &s->peers[s->accepted];
	struct ferry__wire_handshake_view hs;

	ftest_assert_int_lt(s->accepted, 8);
	if (handshake) {
		ftest_assert_ok(ferry__wire_handshake_root(handshake, len, &hs));
		snprintf(s->names[s->accepted], sizeof(s->names[0]), "%s",
			 ferry__wire_handshake_name(hs) ? ferry__wire_handshake_name(hs) : "");
	}
	s->accepted++;
	memset(p, 0, sizeof(*p));
	p->conn = conn;
	p->loop = s->loop;
	p->echo = s->echo;
	p->take_fds = true;
	ferry__conn_set_callbacks(conn, &peer_callbacks, p);
}

static void srv_on_refused(struct ferry__conn_server *srv, int err)
{
	struct server *s = ferry__conn_server_data(srv);

	ftest_assert_int_lt(s->refused, 8);
	s->refused_err[s->refused++] = err;
}

static struct ferry__conn_server_opts server_opts(struct server *s)
{
	return (struct ferry__conn_server_opts){
		.on_accept = srv_on_accept,
		.on_refused = srv_on_refused,
		.data = s,
		.token = TOKEN,
		.token_len = strlen(TOKEN),
		.server_kind = FERRY__WIRE_PEER_KIND_GCS,
		.conn = {.max_message_bytes = 8u << 20},
	};
}

static void server_start_tcp(struct server *s)
{
	struct ferry__conn_server_opts opts = server_opts(s);

	s->loop = new_loop();
	ftest_assert_ok(ferry__conn_server_listen_tcp(s->loop, "127.0.0.1", 0, &opts, &s->srv));
	ftest_assert_uint_gt(ferry__conn_server_port(s->srv), 0);
}

static struct ferry__wire_handshake handshake(const char *token, const char *name)
{
	return (struct ferry__wire_handshake){
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.token = (const uint8_t *)token,
		.token_count = strlen(token),
		.peer_kind = FERRY__WIRE_PEER_KIND_DRIVER,
		.pid = 42,
		.name = name,
	};
}

static void client_connect(struct server *s, struct peer *c, const char *token, const char *name)
{
	struct ferry__wire_handshake hs = handshake(token, name);
	struct ferry__conn_opts opts = peer_opts(c);

	c->loop = s->loop;
	opts.handshake = &hs;
	opts.max_message_bytes = 8u << 20;
	ftest_assert_ok(ferry__conn_connect_tcp(s->loop, "127.0.0.1",
						ferry__conn_server_port(s->srv), &opts, &c->conn));
}

static void server_stop(struct server *s)
{
	ferry__conn_server_close(s->srv);
	ferry__loop_destroy(s->loop);
}

static bool conn_closed(void *arg)
{
	return ((struct peer *)arg)->closes > 0;
}

static bool refused_one(void *arg)
{
	return ((struct server *)arg)->refused > 0;
}

FTEST(tcp_handshake_then_echo)
{
	struct server s = {.echo = true};
	struct peer c = {0};

	server_start_tcp(&s);
	client_connect(&s, &c, TOKEN, "driver-1");
	for (uint64_t i = 0; i < 100; i++)
		ftest_assert_ok(msg_send(c.conn, i, i * 50)); /* queued before connect */
	c.stop_after = 100;
	ftest_assert_ok(ferry__loop_run(s.loop));
	ftest_assert_int_eq(c.connects, 1);
	ftest_assert_int_eq(c.bad, 0);
	ftest_assert_int_eq(s.accepted, 1);
	ftest_assert_str_eq(s.names[0], "driver-1");
	/* fd passing needs a Unix socket. */
	ftest_assert_errno(ferry__conn_send_fds(c.conn, MSG_TYPE, "", 0, &c.close_err, 1),
			   -EOPNOTSUPP);
	ftest_assert_uint_eq(s.peers[0].received, 100);
	ftest_assert_int_eq(s.peers[0].bad, 0);
	ferry__conn_close(c.conn);
	run_until(s.loop, conn_closed, &s.peers[0]);
	ftest_assert_errno(s.peers[0].close_err, -ECONNRESET);
	ftest_assert_int_eq(c.closes, 1);
	ftest_assert_int_eq(c.close_err, 0);
	ftest_assert_int_eq(s.refused, 0);
	server_stop(&s);
}

/* A wrong token is refused with -EACCES on both sides; the server keeps serving. */
FTEST(wrong_token_is_refused_and_the_server_keeps_serving)
{
	struct server s = {.echo = true};
	struct peer bad = {.stop_on_close = true}, good = {0};

	server_start_tcp(&s);
	client_connect(&s, &bad, "not-the-token", "intruder");
	/* Pipelined messages the server will not read: its close must still let the refusal
	 * through (no reset that could destroy the reply). */
	for (uint64_t i = 0; i < 200; i++)
		ftest_assert_ok(msg_send(bad.conn, i, 5000));
	ftest_assert_ok(ferry__loop_run(s.loop));
	ftest_assert_errno(bad.close_err, -EACCES);
	ftest_assert_int_eq(bad.connects, 0);
	ftest_assert_uint_eq(bad.received, 0);
	run_until(s.loop, refused_one, &s);
	ftest_assert_errno(s.refused_err[0], -EACCES);
	ftest_assert_int_eq(s.accepted, 0);

	client_connect(&s, &good, TOKEN, "friend");
	ftest_assert_ok(msg_send(good.conn, 0, 10));
	good.stop_after = 1;
	ftest_assert_ok(ferry__loop_run(s.loop));
	ftest_assert_int_eq(good.connects, 1);
	ftest_assert_int_eq(s.accepted, 1);
	ferry__conn_close(good.conn);
	run_until(s.loop, conn_closed, &good);
	server_stop(&s);
}

static bool three_refused_one_more_accepted(void *arg)
{
	struct server *s = arg;

	return s->refused == 3 && s->accepted == 2;
}

static uint8_t *handshake_frame(const char *token, size_t *size)
{
	struct ferry__wire_handshake hs = handshake(token, "raw");

	return handshake_frame_of(&hs, size);
}

/*
 * Three raw peers misbehave before their handshake (junk bytes, a valid message that is not a
 * Handshake, a malformed Handshake); a fourth passes the handshake and then sends junk. Each is
 * closed with -EPROTO; a well-behaved client keeps exchanging messages throughout.
 */
FTEST(garbage_from_peers_is_eproto_and_others_keep_working)
{
	static const char junk[] = "\x16\x03\x01 this is not a frame";
	struct server s = {.echo = true};
	struct peer good = {0};
	size_t size, msg_size;
	uint8_t *hs = handshake_frame(TOKEN, &size), *msg = frame_of(0, 20, &msg_size);
	uint8_t broken[FERRY_FRAME_HEADER_SIZE + 12];
	int raw[4];
	char byte;

	server_start_tcp(&s);
	client_connect(&s, &good, TOKEN, "good");
	ftest_assert_ok(msg_send(good.conn, 0, 10));
	good.stop_after = 1;
	ftest_assert_ok(ferry__loop_run(s.loop));

	memset(broken, 0x5A, sizeof(broken));
	ferry__frame_header_encode(broken, FERRY__WIRE_MSG_HANDSHAKE, 12);
	for (int i = 0; i < 4; i++)
		raw[i] = raw_tcp_connect(ferry__conn_server_port(s.srv));
	write_all(raw[0], junk, sizeof(junk));
	write_all(raw[1], msg, msg_size);
	write_all(raw[2], broken, sizeof(broken));
	write_all(raw[3], hs, size);
	write_all(raw[3], junk, sizeof(junk));
	run_until(s.loop, three_refused_one_more_accepted, &s);
	for (int i = 0; i < 3; i++)
		ftest_assert_errno(s.refused_err[i], -EPROTO);
	/* The one that passed its handshake was accepted, then closed for its junk. */
	run_until(s.loop, conn_closed, &s.peers[1]);
	ftest_assert_errno(s.peers[1].close_err, -EPROTO);
	/* The good client still works. */
	ftest_assert_ok(msg_send(good.conn, 1, 10));
	good.stop_after = 2;
	ftest_assert_ok(ferry__loop_run(s.loop));
	ftest_assert_int_eq(good.bad, 0);
	ftest_assert_int_eq(good.closes, 0);
	/* The refused raw peers got a HandshakeReply (an error) or nothing, then EOF. */
	for (int i = 0; i < 4; i++) {
		while (read(raw[i], &byte, 1) > 0)
			;
		close(raw[i]);
	}
	ferry__free(hs);
	ferry__free(msg);
	ferry__conn_close(good.conn);
	run_until(s.loop, conn_closed, &good);
	server_stop(&s);
}

FTEST(missing_handshake_times_out)
{
	struct ferry__conn_server_opts opts;
	struct server s = {0};
	int raw;
	char byte;

	s.loop = new_loop();
	opts = server_opts(&s);
	opts.handshake_timeout_ms = 30;
	ftest_assert_ok(ferry__conn_server_listen_tcp(s.loop, "127.0.0.1", 0, &opts, &s.srv));
	raw = raw_tcp_connect(ferry__conn_server_port(s.srv));
	run_until(s.loop, refused_one, &s);
	ftest_assert_errno(s.refused_err[0], -ETIMEDOUT);
	ftest_assert_int_eq(read(raw, &byte, 1), 0);
	close(raw);
	server_stop(&s);
}

FTEST(connect_to_a_closed_port_is_refused)
{
	struct ferry__loop *loop = new_loop();
	struct peer c = {.loop = loop, .stop_on_close = true};
	struct ferry__conn_opts opts = peer_opts(&c);
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	/* A port that was just free: bind, read it back, close. */
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	ftest_assert_int_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	close(fd);
	ftest_assert_ok(
		ferry__conn_connect_tcp(loop, "127.0.0.1", ntohs(addr.sin_port), &opts, &c.conn));
	ftest_assert_ok(msg_send(c.conn, 0, 10)); /* queued, then dropped */
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(c.close_err, -ECONNREFUSED);
	ftest_assert_int_eq(c.connects, 0);
	ferry__loop_destroy(loop);
}

/* Backlog 0: one handshake completes, the next SYNs are dropped, the connect times out. */
FTEST(connect_timeout)
{
	struct ferry__loop *loop = new_loop();
	struct peer c = {.loop = loop, .stop_on_close = true};
	struct ferry__conn_opts opts = peer_opts(&c);
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t len = sizeof(addr);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), first;

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_eq(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	ftest_assert_int_eq(listen(lfd, 0), 0);
	ftest_assert_int_eq(getsockname(lfd, (struct sockaddr *)&addr, &len), 0);
	first = raw_tcp_connect(ntohs(addr.sin_port));
	opts.connect_timeout_ms = 50;
	ftest_assert_ok(
		ferry__conn_connect_tcp(loop, "127.0.0.1", ntohs(addr.sin_port), &opts, &c.conn));
	ftest_assert_ok(ferry__loop_run(loop));
	ftest_assert_errno(c.close_err, -ETIMEDOUT);
	ferry__loop_destroy(loop);
	close(first);
	close(lfd);
}

FTEST(connect_rejects_bad_input)
{
	struct ferry__loop *loop = new_loop();
	struct peer c = {.loop = loop};
	struct ferry__conn_opts opts = peer_opts(&c);
	struct ferry__conn *conn = NULL;
	char path[200];

	memset(path, 'p', sizeof(path) - 1);
	path[sizeof(path) - 1] = 0;
	ftest_assert_errno(ferry__conn_connect_tcp(loop, "", 1, &opts, &conn), -EINVAL);
	ftest_assert_errno(ferry__conn_connect_tcp(loop, "no.such.host.invalid", 1, &opts, &conn),
			   -EHOSTUNREACH);
	ftest_assert_errno(ferry__conn_connect_unix(loop, path, &opts, &conn), -ENAMETOOLONG);
	ftest_assert_ptr_null(conn);
	ferry__loop_destroy(loop);
	ftest_assert_int_eq(c.closes, 0);
}

/* ---- Unix servers and fd passing ---- */

static bool got_fds(void *arg)
{
	struct server *s = arg;

	return s->accepted == 1 && s->peers[0].received == 3;
}

FTEST(unix_server_with_fd_passing_and_stale_path)
{
	struct ferry__conn_server_opts opts;
	struct ferry__conn_server *second = NULL;
	struct server s = {0};
	struct peer c = {0};
	struct ferry__wire_handshake hs = handshake(TOKEN, "plasma-client");
	struct ferry__conn_opts copts = peer_opts(&c);
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	char path[sizeof(un.sun_path) - 20];
	int stale, pipefd[2];
	char byte;

	snprintf(path, sizeof(path), "%s/store.sock", ftest_tmpdir());
	/* A socket file left by a dead server: bound, never listening, closed. */
	memcpy(un.sun_path, path, strlen(path) + 1);
	stale = socket(AF_UNIX, SOCK_STREAM, 0);
	ftest_assert_int_eq(bind(stale, (struct sockaddr *)&un, sizeof(un)), 0);
	close(stale);

	s.loop = new_loop();
	opts = server_opts(&s);
	ftest_assert_ok(ferry__conn_server_listen_unix(s.loop, path, &opts, &s.srv));
	ftest_assert_uint_eq(ferry__conn_server_port(s.srv), 0);
	ftest_assert_errno(ferry__conn_server_listen_unix(s.loop, path, &opts, &second),
			   -EADDRINUSE);

	c.loop = s.loop;
	copts.handshake = &hs;
	ftest_assert_ok(ferry__conn_connect_unix(s.loop, path, &copts, &c.conn));
	ftest_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	for (uint64_t i = 0; i < 3; i++) {
		struct ferry__fb_builder fb = {0};

		msg_build(&fb, i, 30);
		if (i == 1)
			ftest_assert_ok(
				ferry__conn_send_fds(c.conn, MSG_TYPE, ferry__fb_builder_data(&fb),
						     ferry__fb_builder_size(&fb), pipefd, 1));
		else
			ftest_assert_ok(ferry__conn_send(c.conn, MSG_TYPE,
							 ferry__fb_builder_data(&fb),
							 ferry__fb_builder_size(&fb)));
		ferry__fb_builder_fini(&fb);
	}
	run_until(s.loop, got_fds, &s);
	ftest_assert_str_eq(s.names[0], "plasma-client");
	ftest_assert_int_eq(s.peers[0].bad, 0);
	ftest_assert_int_eq(s.peers[0].nfds, 1);
	ftest_assert_int_eq(s.peers[0].fd_msgs[0], 1);
	write_all(pipefd[1], "q", 1);
	ftest_assert_int_eq(read(s.peers[0].fds[0], &byte, 1), 1);
	ftest_assert_int_eq(byte, 'q');
	close(s.peers[0].fds[0]);
	close(pipefd[0]);
	close(pipefd[1]);
	ferry__conn_close(c.conn);
	run_until(s.loop, conn_closed, &s.peers[0]);
	server_stop(&s);
	ftest_assert_int_eq(access(path, F_OK), -1); /* the server removed its path */
}

/* ---- zero copy ---- */

static bool got_all(void *arg)
{
	struct server *s = arg;

	return s->accepted == 1 && s->peers[0].received == 14;
}

struct done {
	int calls;  /* done callbacks */
	int status; /* last status */
};

static void on_done(void *arg, int status)
{
	struct done *d = arg;

	d->calls++;
	d->status = status;
}

/* Large messages (zero-copy sends) interleaved with small ones arrive intact and in order. */
FTEST(tcp_large_zero_copy_messages_in_order)
{
	struct server s = {0};
	struct peer c = {0};
	struct ferry__fb_builder big = {0};
	struct done d = {0};

	server_start_tcp(&s);
	client_connect(&s, &c, TOKEN, "bulk");
	for (uint64_t i = 0; i < 12; i++)
		ftest_assert_ok(msg_send(c.conn, i, i % 3 == 0 ? (4u << 20) - 100 : 77));
	msg_build(&big, 12, 3u << 20);
	ftest_assert_ok(ferry__conn_send_borrowed(c.conn, MSG_TYPE, ferry__fb_builder_data(&big),
						  ferry__fb_builder_size(&big), on_done, &d));
	ftest_assert_ok(msg_send(c.conn, 13, 5));
	run_until(s.loop, got_all, &s);
	ftest_assert_int_eq(s.peers[0].bad, 0);
	ftest_assert_uint_eq(s.peers[0].received, 14);
	ferry__conn_close(c.conn);
	run_until(s.loop, conn_closed, &c);
	ftest_assert_int_eq(d.calls, 1);
	ftest_assert_int_eq(d.status, 0);
	ferry__fb_builder_fini(&big);
	server_stop(&s);
}

/* An injected SEND_ZC failure proves large messages take the zero-copy path. */
FTEST(large_messages_use_send_zc)
{
	struct server s = {0};
	struct peer c = {.stop_on_close = true};
	struct ferry__loop_fault fault = {
		.op = FERRY_LOOP_OP_SEND_ZC, .count = 1, .result = -ECONNRESET};

	server_start_tcp(&s);
	client_connect(&s, &c, TOKEN, "zc");
	ftest_assert_ok(msg_send(c.conn, 0, 200000));
	ftest_assert_ok(ferry__loop_inject(s.loop, &fault));
	ftest_assert_ok(ferry__loop_run(s.loop));
	ftest_assert_errno(c.close_err, -ECONNRESET);
	server_stop(&s);
}

/* ---- shutdown ---- */

static bool three_accepted(void *arg)
{
	struct server *s = arg;

	return s->accepted == 3;
}

/*
 * Destroy with a server, three connected clients with messages queued, a client still
 * connecting with a borrowed send, and a raw peer in its handshake: every connection's on_close
 * runs once with -ECANCELED, the borrowed payload is released once, nothing leaks (memory, fds).
 */
FTEST(destroy_with_connections_open)
{
	struct server s = {0};
	struct peer c[4] = {0};
	struct ferry__fb_builder fb = {0};
	struct done d = {0};
	int before = open_fd_count(), raw;

	server_start_tcp(&s);
	for (int i = 0; i < 3; i++)
		client_connect(&s, &c[i], TOKEN, "victim");
	run_until(s.loop, three_accepted, &s);
	raw = raw_tcp_connect(ferry__conn_server_port(s.srv));
	for (int i = 0; i < 3; i++)
		for (uint64_t k = 0; k < 50; k++)
			ftest_assert_ok(msg_send(c[i].conn, k, 1000));
	client_connect(&s, &c[3], TOKEN, "late");
	msg_build(&fb, 0, 100);
	ftest_assert_ok(ferry__conn_send_borrowed(c[3].conn, MSG_TYPE, ferry__fb_builder_data(&fb),
						  ferry__fb_builder_size(&fb), on_done, &d));
	ferry__loop_destroy(s.loop);
	for (int i = 0; i < 4; i++) {
		ftest_assert_int_eq(c[i].closes, 1);
		ftest_assert_errno(c[i].close_err, -ECANCELED);
	}
	for (int i = 0; i < 3; i++) {
		ftest_assert_int_eq(s.peers[i].closes, 1);
		ftest_assert_errno(s.peers[i].close_err, -ECANCELED);
	}
	ftest_assert_int_eq(d.calls, 1);
	ftest_assert_errno(d.status, -ECANCELED);
	ftest_assert_int_eq(s.refused, 0);
	close(raw);
	ftest_assert_int_eq(open_fd_count(), before);
	ferry__fb_builder_fini(&fb);
}

/* Closing the server closes connections still in their handshake; accepted ones live on. */
FTEST(server_close_keeps_accepted_connections)
{
	struct server s = {.echo = true};
	struct peer c = {0};
	int raw;
	char byte;

	server_start_tcp(&s);
	client_connect(&s, &c, TOKEN, "survivor");
	ftest_assert_ok(msg_send(c.conn, 0, 10));
	c.stop_after = 1;
	ftest_assert_ok(ferry__loop_run(s.loop));
	raw = raw_tcp_connect(ferry__conn_server_port(s.srv));
	ferry__conn_server_close(s.srv);
	ferry__conn_server_close(NULL);
	/* The raw peer sees EOF once its connection is closed. */
	while (1) {
		struct pollfd pfd = {.fd = raw, .events = POLLIN};

		ftest_assert_ok(msg_send(c.conn, c.received, 10));
		c.stop_after = c.received + 1;
		ftest_assert_ok(ferry__loop_run(s.loop));
		if (poll(&pfd, 1, 0) == 1)
			break;
	}
	ftest_assert_int_eq(read(raw, &byte, 1), 0);
	close(raw);
	ftest_assert_int_eq(c.bad, 0);
	ftest_assert_int_eq(s.refused, 0);
	ferry__conn_close(c.conn);
	run_until(s.loop, conn_closed, &s.peers[0]);
	ferry__loop_destroy(s.loop);
}

/* ---- allocation failures ---- */

FTEST(listen_and_connect_under_allocation_failure)
{
	for (long n = 0;; n++) {
		struct ferry__conn_server_opts opts;
		struct server s = {0};
		struct peer c = {0};
		struct ferry__wire_handshake hs = handshake(TOKEN, "oom");
		struct ferry__conn_opts copts = peer_opts(&c);
		int ret;
		bool fired;

		s.loop = new_loop();
		c.loop = s.loop;
		opts = server_opts(&s);
		copts.handshake = &hs;
		ferry__alloc_fail_after(n);
		ret = ferry__conn_server_listen_tcp(s.loop, "127.0.0.1", 0, &opts, &s.srv);
		if (ret == 0) {
			ret = ferry__conn_connect_tcp(s.loop, "127.0.0.1",
						      ferry__conn_server_port(s.srv), &copts,
						      &c.conn);
			if (ret < 0)
				ferry__conn_server_close(s.srv);
		}
		fired = !ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		if (ret < 0) {
			ftest_assert_errno(ret, -ENOMEM);
			ferry__loop_destroy(s.loop);
			continue;
		}
		ferry__conn_close(c.conn);
		run_until(s.loop, conn_closed, &c);
		server_stop(&s);
		if (!fired)
			break;
	}
}

static bool exchange_over(void *arg)
{
	struct server *s = arg;
	struct peer *c = &s->peers[7]; /* the client lives in the last slot */

	/* The server side is done once its connection closed, or was refused. */
	return c->closes > 0 && (s->refused > 0 || (s->accepted == 1 && s->peers[0].closes == 1));
}

static bool got_echoes_or_closed(void *arg)
{
	struct peer *c = arg;

	return c->received == c->stop_after || c->closes > 0;
}

/*
 * The whole exchange (server accept + handshake + echo of 5 messages + close) with each of its
 * allocations failing in turn: it ends every time, each side reporting an error or success,
 * and nothing leaks.
 */
FTEST(full_exchange_under_allocation_failure)
{
	for (long n = 0;; n++) {
		struct server s = {.echo = true};
		struct peer *c = &s.peers[7];
		struct ferry__fb_builder fb[5] = {0};
		bool fired;

		server_start_tcp(&s);
		for (uint64_t i = 0; i < 5; i++)
			msg_build(&fb[i], i, 500);
		memset(c, 0, sizeof(*c));
		client_connect(&s, c, TOKEN, "oom");
		ferry__alloc_fail_after(n);
		for (int i = 0; i < 5; i++) {
			int ret =
				ferry__conn_send(c->conn, MSG_TYPE, ferry__fb_builder_data(&fb[i]),
						 ferry__fb_builder_size(&fb[i]));

			ftest_assert_true(ret == 0 || ret == -ENOMEM);
			c->stop_after += ret == 0; /* echoes to wait for */
		}
		run_until(s.loop, got_echoes_or_closed, c);
		fired = !ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		if (c->conn)
			ferry__conn_close(c->conn);
		run_until(s.loop, exchange_over, &s);
		server_stop(&s);
		for (int i = 0; i < 5; i++)
			ferry__fb_builder_fini(&fb[i]);
		if (!fired) {
			ftest_assert_uint_eq(c->received, 5);
			break;
		}
	}
}
