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
	if (ferry__tcp_send(s->ep, reply, sizeof(reply)) < 0)
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

		ftest_assert_ok(ferry__tcp_send(f->good->ep, &seq, sizeof(seq)));
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
	struct ferry__tcp_hdr h = {.kind = FERRY__TCP_MSG, .len = 8};

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
	ferry__tcp_hdr_encode(hdr, &h);
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
