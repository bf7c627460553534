/* SPDX-License-Identifier: Apache-2.0 */
/* What a peer can make a server hold: a client that pipelines requests and never reads replies
 * (backpressure, then dropped), connections that never send their handshake or announce a huge
 * one, a frame left half sent, and a flood of bad connections in the log. Deadlines are set
 * small here; the defaults are in common/conn.h. */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>

#include "common/log.h"
#include "conn_test.h"

#define TOKEN "cluster-secret"
#define REPLY_TEXT 60000u      /* each request is answered with this many bytes */
#define QUEUE_CAP (256u << 10) /* the server's max_queued_bytes */
#define REQUESTS 2000

/* A server that answers every request with a large reply and records the worst queue. */
struct server {
	struct ferry__loop *loop;	/* shared */
	struct ferry__conn_server *srv; /* the server */
	struct peer peers[4];		/* accepted connections, in accept order */
	int accepted;			/* entries used in peers */
	int refused;			/* on_refused calls */
	int refused_by_err[4];		/* -EPROTO, -EBUSY, -ETIMEDOUT, other */
};

static size_t max_queued; /* most unsent bytes seen on a server connection */

static void big_on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct peer *p = ferry__conn_data(conn);
	int64_t seq = msg_check(type, payload, len);

	ftest_assert_int_ge(seq, 0);
	p->received++;
	if (msg_send(conn, (uint64_t)seq, REPLY_TEXT) < 0)
		return; /* closing: the queue was over its hard bound */
	if (ferry__conn_queued_bytes(conn) > max_queued)
		max_queued = ferry__conn_queued_bytes(conn);
}

static const struct ferry__conn_callbacks big_callbacks = {
	.on_message = big_on_message,
	.on_connect = peer_on_connect,
	.on_close = peer_on_close,
};

static void srv_on_accept(struct ferry__conn_server *srv, struct ferry__conn *conn,
			  const void *handshake, size_t len)
{
	struct server *s = ferry__conn_server_data(srv);
	struct peer *p = &s->peers[s->accepted];

	(void)handshake;
	(void)len;
	ftest_assert_int_lt(s->accepted, 4);
	s->accepted++;
	memset(p, 0, sizeof(*p));
	p->conn = conn;
	ferry__conn_set_callbacks(conn, &big_callbacks, p);
}

static void srv_on_refused(struct ferry__conn_server *srv, int err)
{
	struct server *s = ferry__conn_server_data(srv);

	s->refused++;
	s->refused_by_err[err == -EPROTO ? 0 : err == -EBUSY ? 1 : err == -ETIMEDOUT ? 2 : 3]++;
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
		.conn = {.max_message_bytes = 8u << 20,
			 .max_queued_bytes = QUEUE_CAP,
			 .stall_timeout_ms = 300},
	};
}

static void server_start(struct server *s, struct ferry__conn_server_opts *opts)
{
	s->loop = new_loop();
	ftest_assert_ok(ferry__conn_server_listen_tcp(s->loop, "127.0.0.1", 0, opts, &s->srv));
}

static void server_stop(struct server *s)
{
	ferry__conn_server_close(s->srv);
	ferry__loop_destroy(s->loop);
}

static uint8_t *handshake_frame(size_t *size)
{
	struct ferry__wire_handshake hs = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.token = (const uint8_t *)TOKEN,
		.token_count = strlen(TOKEN),
		.peer_kind = FERRY__WIRE_PEER_KIND_DRIVER,
		.name = "raw",
	};

	return handshake_frame_of(&hs, size);
}

static void client_connect(struct server *s, struct peer *c)
{
	struct ferry__wire_handshake hs = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.token = (const uint8_t *)TOKEN,
		.token_count = strlen(TOKEN),
		.peer_kind = FERRY__WIRE_PEER_KIND_DRIVER,
		.name = "good",
	};
	struct ferry__conn_opts opts = peer_opts(c);

	c->loop = s->loop;
	opts.handshake = &hs;
	opts.max_message_bytes = 8u << 20;
	ftest_assert_ok(ferry__conn_connect_tcp(s->loop, "127.0.0.1",
						ferry__conn_server_port(s->srv), &opts, &c->conn));
}

/* run_until() that also gives up after @ms, so a missing limit fails an assert instead of
 * hanging until the harness's timeout. */
struct bounded {
	bool (*cond)(void *arg); /* the condition */
	void *arg;		 /* its argument */
	uint64_t deadline;	 /* ferry__now_ms() after which we give up */
};

static bool bounded_cond(void *arg)
{
	struct bounded *b = arg;

	return b->cond(b->arg) || ferry__now_ms() > b->deadline;
}

static void run_until_or(struct ferry__loop *loop, bool (*cond)(void *), void *arg, unsigned ms)
{
	struct bounded b = {cond, arg, ferry__now_ms() + ms};

	run_until(loop, bounded_cond, &b);
}

/* A raw client that writes a long pipelined stream without blocking the loop, never reading. */
struct pipeliner {
	struct server *s;   /* its server */
	int fd;		    /* the raw socket */
	uint8_t *buf;	    /* handshake + REQUESTS request frames */
	size_t len, done;   /* its bytes, written so far */
	struct peer *good;  /* a well-behaved client served meanwhile */
	uint64_t good_sent; /* requests the good client sent */
};

static bool pipeliner_dropped(void *arg)
{
	struct pipeliner *pl = arg;
	ssize_t n;

	if (pl->done < pl->len) {
		n = write(pl->fd, pl->buf + pl->done, pl->len - pl->done);
		if (n > 0)
			pl->done += (size_t)n;
	}
	/* The good client keeps one request in flight and gets every reply. */
	if (pl->good->conn && pl->good->received == pl->good_sent && pl->good_sent < 50)
		ftest_assert_ok(msg_send(pl->good->conn, pl->good_sent++, 10));
	return pl->s->accepted >= 2 && pl->s->peers[0].closes > 0 && pl->good_sent == 50 &&
	       pl->good->received == 50;
}

static void pipeliner_start(struct pipeliner *pl, uint16_t port)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
	int small = 4096;
	size_t hs_size, frame_size;
	uint8_t *hs = handshake_frame(&hs_size), *frame;

	pl->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ftest_assert_int_ge(pl->fd, 0);
	/* A small receive buffer: the kernel must not absorb the replies for the server. */
	ftest_assert_int_eq(setsockopt(pl->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_eq(connect(pl->fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	ftest_assert_int_eq(fcntl(pl->fd, F_SETFL, O_NONBLOCK), 0);
	frame = frame_of(1, 10, &frame_size); /* seqs from 1: a 0 is left out of the buffer */
	pl->len = hs_size + REQUESTS * frame_size;
	pl->buf = malloc(pl->len);
	ftest_assert_ptr_notnull(pl->buf);
	memcpy(pl->buf, hs, hs_size);
	ferry__free(hs);
	ferry__free(frame);
	for (int i = 0; i < REQUESTS; i++) {
		frame = frame_of((uint64_t)i + 1, 10, &frame_size);
		memcpy(pl->buf + hs_size + (size_t)i * frame_size, frame, frame_size);
		ferry__free(frame);
	}
}

/*
 * A client pipelines 2000 requests whose replies are 60 KB each and never reads: the server
 * stops reading its requests once QUEUE_CAP bytes are unsent (instead of queueing 120 MB of
 * replies), drops it when it is still stuck after the stall deadline, and serves another client
 * normally all along.
 */
FTEST(client_that_never_reads_is_held_back_then_dropped)
{
	struct ferry__conn_server_opts opts;
	struct server s = {0};
	struct peer good = {0};
	struct pipeliner pl = {.s = &s, .good = &good};

	opts = server_opts(&s);
	server_start(&s, &opts);
	pipeliner_start(&pl, ferry__conn_server_port(s.srv));
	client_connect(&s, &good);
	run_until_or(s.loop, pipeliner_dropped, &pl, 10000);
	ftest_assert_int_eq(s.peers[0].closes, 1);
	ftest_assert_errno(s.peers[0].close_err, -ETIMEDOUT);
	/* Held back: far fewer requests were taken than sent. */
	ftest_assert_uint_lt(s.peers[0].received, REQUESTS);
	/* The queue never grew past the cap by more than the one reply that crossed it. */
	ftest_assert_uint_le(max_queued, QUEUE_CAP + REPLY_TEXT + 1024);
	ftest_assert_uint_eq(good.received, 50);
	ftest_assert_int_eq(good.bad, 0);
	ftest_assert_int_eq(good.closes, 0);
	ferry__conn_close(good.conn);
	close(pl.fd);
	free(pl.buf);
	server_stop(&s);
}

/* A reader that is slow, not stuck, gets every reply: backpressure pauses, then resumes. */
struct slow_reader {
	struct server *s; /* its server */
	int fd;		  /* raw socket, non-blocking */
	size_t got;	  /* reply bytes read */
	size_t want;	  /* all of them */
};

static bool slow_reader_done(void *arg)
{
	struct slow_reader *r = arg;
	char buf[16384];
	ssize_t n = read(r->fd, buf, sizeof(buf));

	if (n > 0)
		r->got += (size_t)n;
	return r->got >= r->want;
}

FTEST(slow_reader_gets_every_reply)
{
	struct ferry__conn_server_opts opts;
	struct server s = {0};
	struct pipeliner pl = {.s = &s};
	struct slow_reader r = {.s = &s};
	size_t frame_size, hs_size;
	uint8_t *frame = frame_of(1, REPLY_TEXT, &frame_size), *hs = handshake_frame(&hs_size);

	opts = server_opts(&s);
	opts.conn.stall_timeout_ms = 60000;
	server_start(&s, &opts);
	pipeliner_start(&pl, ferry__conn_server_port(s.srv));
	/* 60 requests, so that replies (3.6 MB) are many times the cap. */
	pl.len = hs_size + (pl.len - hs_size) / REQUESTS * 60;
	ftest_assert_int_eq(fcntl(pl.fd, F_SETFL, 0), 0);
	write_all(pl.fd, pl.buf, pl.len);
	ftest_assert_int_eq(fcntl(pl.fd, F_SETFL, O_NONBLOCK), 0);
	r.fd = pl.fd;
	/* The HandshakeReply, then 60 replies of frame_size bytes each. */
	r.want = 60 * frame_size;
	run_until(s.loop, slow_reader_done, &r);
	ftest_assert_uint_eq(s.peers[0].received, 60);
	ftest_assert_int_eq(s.peers[0].closes, 0);
	ftest_assert_uint_le(max_queued, QUEUE_CAP + REPLY_TEXT + 1024);
	ferry__free(frame);
	ferry__free(hs);
	close(pl.fd);
	free(pl.buf);
	server_stop(&s);
}

static bool huge_refused(void *arg)
{
	return ((struct server *)arg)->refused_by_err[0] == 4;
}

static bool idle_pushed_out(void *arg)
{
	return ((struct server *)arg)->refused_by_err[1] >= 40 - 8;
}

/*
 * Before its handshake a connection may only announce a frame as large as a Handshake needs
 * (refused at once, nothing allocated for it), and at most max_handshaking connections wait for
 * theirs: 40 idle connections push the oldest out, and a real client still gets in.
 */
FTEST(handshake_floods_are_bounded_and_a_client_still_connects)
{
	struct ferry__conn_server_opts opts;
	struct server s = {0};
	struct peer good = {.stop_after = 1};
	uint8_t header[FERRY_FRAME_HEADER_SIZE];
	int huge[4], idle[40];

	opts = server_opts(&s);
	opts.max_handshaking = 8;
	opts.handshake_timeout_ms = 60000; /* only the caps can end them */
	server_start(&s, &opts);
	ferry__frame_header_encode(header, FERRY__WIRE_MSG_HANDSHAKE, 4u << 20);
	for (int i = 0; i < 4; i++) {
		huge[i] = raw_tcp_connect(ferry__conn_server_port(s.srv));
		write_all(huge[i], header, sizeof(header));
	}
	run_until_or(s.loop, huge_refused, &s, 5000);
	ftest_assert_int_eq(s.refused_by_err[0], 4); /* -EPROTO at the header */
	for (int i = 0; i < 40; i++)
		idle[i] = raw_tcp_connect(ferry__conn_server_port(s.srv));
	run_until_or(s.loop, idle_pushed_out, &s, 5000);
	ftest_assert_int_ge(s.refused_by_err[1], 40 - 8); /* -EBUSY: at most 8 may wait */
	good.loop = s.loop;
	client_connect(&s, &good);
	ftest_assert_ok(msg_send(good.conn, 0, 10));
	ftest_assert_ok(ferry__loop_run(s.loop)); /* until the good client's reply */
	ftest_assert_int_eq(good.connects, 1);
	ftest_assert_uint_eq(good.received, 1);
	for (int i = 0; i < 4; i++)
		close(huge[i]);
	for (int i = 0; i < 40; i++)
		close(idle[i]);
	ferry__conn_close(good.conn);
	server_stop(&s);
}

static bool first_closed(void *arg)
{
	return ((struct server *)arg)->peers[0].closes > 0;
}

static void on_wait_timer(struct ferry__loop_timer *t, int status)
{
	(void)status;
	ferry__loop_stop(t->loop);
}

/* A frame begun and never finished is closed after frame_timeout_ms; a connection idle between
 * frames is not (no handshake here, like the store's Unix socket). */
FTEST(stall_in_the_middle_of_a_frame_is_closed)
{
	struct ferry__conn_server_opts opts;
	struct ferry__loop_timer wait = {0};
	struct server s = {0};
	size_t size;
	uint8_t *frame = frame_of(0, 1000, &size);
	int half, whole;

	opts = server_opts(&s);
	opts.flags = FERRY_CONN_SERVER_NO_HANDSHAKE;
	opts.conn.frame_timeout_ms = 100;
	server_start(&s, &opts);
	half = raw_tcp_connect(ferry__conn_server_port(s.srv));
	write_all(half, frame, size / 2);
	whole = raw_tcp_connect(ferry__conn_server_port(s.srv));
	write_all(whole, frame, size);
	run_until_or(s.loop, first_closed, &s, 5000);
	ftest_assert_int_eq(s.peers[0].closes, 1);
	ftest_assert_errno(s.peers[0].close_err, -ETIMEDOUT);
	ftest_assert_int_eq(s.accepted, 2);
	/* The other one, idle after a whole frame, stays open well past the deadline. */
	ftest_assert_ok(ferry__loop_timer_start(s.loop, &wait, 300, 0, on_wait_timer));
	ftest_assert_ok(ferry__loop_run(s.loop));
	ftest_assert_int_eq(s.peers[1].closes, 0);
	ftest_assert_uint_eq(s.peers[1].received, 1);
	close(half);
	close(whole);
	ferry__free(frame);
	server_stop(&s);
}

/* ---- a flood of bad connections in the log ---- */

struct log_count {
	int lines;	 /* warnings logged */
	int with_count;	 /* of which carry "suppressed N" */
	long suppressed; /* the N they reported, summed */
};

static void count_line(void *arg, enum ferry_log_level level, const char *component,
		       const char *msg)
{
	struct log_count *c = arg;
	const char *p = strstr(msg, "(suppressed ");

	(void)component;
	if (level < FERRY_LOG_WARN)
		return;
	c->lines++;
	if (p) {
		c->with_count++;
		c->suppressed += strtol(p + strlen("(suppressed "), NULL, 10);
	}
}

struct flood {
	struct server *s; /* its server */
	int want;	  /* refusals to wait for */
};

static bool refused_enough(void *arg)
{
	struct flood *f = arg;

	return f->s->refused >= f->want;
}

static void bad_connection(struct flood *f)
{
	static const char junk[] = "\x16\x03\x01 not a frame at all";
	int fd = raw_tcp_connect(ferry__conn_server_port(f->s->srv));

	write_all(fd, junk, sizeof(junk));
	close(fd);
	f->want++;
	run_until_or(f->s->loop, refused_enough, f, 5000);
}

/* 200 connections that each send junk: a handful of warnings per window instead of two per
 * connection, and the next line after the window counts what was left out. */
FTEST(flood_of_bad_connections_logs_a_bounded_number_of_lines)
{
	struct ferry__conn_server_opts opts;
	struct log_count count = {0};
	struct ferry__loop_timer wait = {0};
	struct server s = {0};
	struct flood f = {.s = &s};
	uint64_t start = ferry__now_ms(), windows;

	ferry__log_peer_limit(5, 500);
	ferry_log_set_handler(count_line, &count);
	opts = server_opts(&s);
	server_start(&s, &opts);
	for (int i = 0; i < 200; i++)
		bad_connection(&f);
	ftest_assert_int_eq(s.refused, 200);
	windows = (ferry__now_ms() - start) / 500 + 1;
	ftest_assert_uint_le((uint64_t)count.lines, 5 * windows);
	/* After the window, the next line about that host says how many were dropped. */
	ftest_assert_ok(ferry__loop_timer_start(s.loop, &wait, 600, 0, on_wait_timer));
	ftest_assert_ok(ferry__loop_run(s.loop));
	bad_connection(&f);
	ftest_assert_int_ge(count.with_count, 1);
	ftest_assert_int_gt(count.suppressed, 200);
	ferry_log_set_handler(NULL, NULL);
	server_stop(&s);
}
