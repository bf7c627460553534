/* SPDX-License-Identifier: Apache-2.0 */
/* The TCP engine against a peer that pipelines requests and never reads the replies (the node's
 * pull listener faces it): its control frames queue up to the cap, then its requests wait, and
 * after the stall deadline it is dropped; another peer is served all along. */
#include <fcntl.h>
#include <poll.h>

#include "tcp_test.h"

#define CAP (64u << 10)	  /* max_queued_bytes */
#define REPLY (32u << 10) /* each request is answered with this many bytes */
#define REQUESTS 2000

static size_t max_queued; /* the most control bytes seen queued on a server endpoint */
static uint8_t reply[REPLY];

static void reply_big(struct side *s, const uint8_t *buf, size_t len)
{
	(void)buf;
	(void)len;
	s->msgs++;
	if (tt_send(s->ep, reply, sizeof(reply)) < 0)
		return;
	if (s->ep->tx_queued > max_queued)
		max_queued = s->ep->tx_queued;
}

static void count_reply(struct side *s, const uint8_t *buf, size_t len)
{
	(void)buf;
	if (len == REPLY)
		s->msgs++;
	else
		s->bad_msgs++;
}

struct flood {
	struct env *e;	    /* its env */
	int fd;		    /* the raw peer, non-blocking */
	uint8_t *buf;	    /* REQUESTS frames */
	size_t len, done;   /* their bytes, written */
	struct side *good;  /* a peer served meanwhile */
	uint64_t good_sent; /* its requests */
};

static bool flood_dropped(void *arg)
{
	struct flood *f = arg;
	ssize_t n;

	if (f->done < f->len) {
		n = send(f->fd, f->buf + f->done, f->len - f->done, MSG_NOSIGNAL);
		if (n > 0)
			f->done += (size_t)n;
	}
	if (f->good->msgs == f->good_sent && f->good_sent < 20) {
		uint64_t seq = f->good_sent++;

		ftest_assert_ok(tt_send(f->good->ep, &seq, sizeof(seq)));
	}
	return f->e->server[0].closes > 0 && f->good->msgs == 20;
}

FTEST(peer_that_never_reads_replies_is_held_back_then_dropped)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct side good = {.on_msg = count_reply};
	struct flood f = {.good = &good};
	struct env e;
	uint8_t hdr[FERRY__TCP_HDR_SIZE];

	o.max_queued_bytes = CAP;
	o.stall_timeout_ms = 300;
	env_init(&e, &o);
	f.e = &e;
	f.fd = raw_peer(&e, TOKEN);
	e.server[0].on_msg = reply_big;
	ftest_assert_ok(fcntl(f.fd, F_SETFL, O_NONBLOCK));
	f.len = (size_t)REQUESTS * (FERRY__TCP_HDR_SIZE + 8);
	f.buf = calloc(1, f.len);
	ftest_assert_ptr_notnull(f.buf);
	raw_hdr(hdr, FERRY__TCP_MSG, 8, 0, 0);
	for (size_t i = 0; i < REQUESTS; i++)
		memcpy(f.buf + i * (FERRY__TCP_HDR_SIZE + 8), hdr, sizeof(hdr));
	env_connect(&e, &good);
	e.server[1].on_msg = reply_big;
	run_until(e.loop, flood_dropped, &f);
	ftest_assert_errno(e.server[0].close_reason, -ETIMEDOUT);
	ftest_assert_uint_lt(e.server[0].msgs, REQUESTS);
	ftest_assert_uint_le(max_queued, CAP + REPLY + FERRY__TCP_HDR_SIZE);
	ftest_assert_uint_eq(good.msgs, 20);
	ftest_assert_int_eq(good.bad_msgs, 0);
	ftest_assert_int_eq(good.closes, 0);
	close(f.fd);
	free(f.buf);
	ferry__tcp_ep_destroy(good.ep);
	env_fini(&e);
}

/* Small frames leave by a direct send() (tcp_io.c, send_direct) rather than the ring: they must
 * leave the backpressure count as well. They did not, so an endpoint's count only grew, and
 * after max_queued_bytes of small frames (100k small pulls at the node's 8 MiB cap) it stopped
 * reading: every later pull on a long-lived connection timed out. A ping-pong of small frames
 * many times the cap: both ends keep reading, and nothing stays counted once it is done. */
#define PINGS 3000 /* x (24 + 64) bytes each way: 4x the cap */

static uint8_t ping[64];

static void pong(struct side *s, const uint8_t *buf, size_t len)
{
	(void)buf;
	s->msgs++;
	if (len != sizeof(ping))
		s->bad_msgs++;
	else
		ftest_assert_ok(tt_send(s->ep, ping, sizeof(ping)));
}

static void count_small(struct side *s, const uint8_t *buf, size_t len)
{
	(void)buf;
	s->msgs++;
	if (len != sizeof(ping))
		s->bad_msgs++;
}

struct pingpong {
	struct env *e;
	struct side *client;
	uint64_t sent;
};

static bool pinged(void *arg)
{
	struct pingpong *p = arg;

	if (p->client->msgs == p->sent && p->sent < PINGS) {
		p->sent++;
		ftest_assert_ok(tt_send(p->client->ep, ping, sizeof(ping)));
	}
	return p->client->msgs == PINGS || p->client->closes || p->e->server[0].closes;
}

FTEST(small_frames_past_the_cap_keep_flowing)
{
	struct ferry__tcp_ctx_opts o = env_opts(NULL);
	struct side client = {.on_msg = count_small};
	struct pingpong p = {.client = &client};
	struct env e;

	o.max_queued_bytes = CAP;
	o.stall_timeout_ms = 300;
	env_init(&e, &o);
	p.e = &e;
	env_connect(&e, &client);
	e.server[0].on_msg = pong;
	run_until(e.loop, pinged, &p);
	ftest_assert_uint_eq(client.msgs, PINGS);
	ftest_assert_int_eq(client.bad_msgs, 0);
	ftest_assert_int_eq(client.closes, 0);
	ftest_assert_int_eq(e.server[0].closes, 0);
	ftest_assert_uint_eq(e.server[0].msgs, PINGS);
	ftest_assert_uint_eq(client.ep->tx_queued, 0);
	ftest_assert_uint_eq(e.server[0].ep->tx_queued, 0);
	ferry__tcp_ep_destroy(client.ep);
	env_fini(&e);
}
