/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TCP pulls on the object manager's loop, over the TCP engine (transport/tcp.h): one endpoint
 * per peer node, shared by every pull from it. A probe asks for the first bytes inline (small
 * objects end there); the rest of a large object comes as one engine data transfer received
 * straight into the create buffer (no user-space copy).
 *
 * DESIGN
 * - A pull thread hands fetches to the loop (ferry__loop_post; several at once when a large
 *   object is split over sources) and sleeps until the loop marked each done; after that the
 *   loop never touches it again. A fetch made before its endpoint is
 *   up waits on the peer and starts at on_connect. The fast path (objmgr_fast.c) posts an
 *   async probe instead: nobody waits, its on_done runs on the loop from a post.
 * - Peers, the fetches on them, connect, drop and deadlines are objmgr_peer.c's (shared with
 *   RDMA); this file gives it the TCP parts (peer_ops) and keeps the request FIFO.
 * - Every request gets exactly one reply, in order: the peer keeps its requests in a FIFO and
 *   matches each reply to the head (the xfer ids must agree, else the endpoint is dropped).
 * - A stream: ferry__tcp_expect() first, then the request. The fetch is done only when the
 *   expect's callback came: until then the engine may still write into the buffer, which the
 *   pull thread aborts on failure. A failure before that (refusal, deadline) cancels the
 *   expect and records the status; the callback then finishes the fetch.
 * - Deadline: a fetch not done by timeout_ms fails with -ETIMEDOUT and its endpoint is
 *   destroyed (a stalled peer holds up everything on it); an endpoint the engine closes fails
 *   its fetches with its reason (-ECONNRESET, -ETIMEDOUT).
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"

static void req_unref(struct ferry__objmgr_req *r)
{
	if (--r->refs == 0)
		ferry__free(r);
}

static struct ferry__objmgr_fetch *fetch_of(struct ferry__objmgr_step *s)
{
	return FERRY_CONTAINER_OF(s, struct ferry__objmgr_fetch, base);
}

static struct ferry__objmgr_tcp_peer *peer_of(struct ferry__objmgr_peer *p)
{
	return FERRY_CONTAINER_OF(p, struct ferry__objmgr_tcp_peer, base);
}

/* The fetch leaves its peer: replies to its requests are dropped; a stream's expect keeps it
 * until its callback. */
static void fetch_detach(struct ferry__objmgr_step *s)
{
	struct ferry__objmgr_fetch *f = fetch_of(s);

	for (struct ferry__objmgr_req *r = peer_of(s->peer)->head; r; r = r->next)
		if (r->fetch == f && r != f->stream_req)
			r->fetch = NULL;
}

static void fetch_done_posted(void *arg, int status)
{
	struct ferry__objmgr_fetch *f = arg;

	(void)status; /* at loop destroy too: on_done must still release the fetch */
	f->on_done(f);
}

/* Hand the fetch back to its pull thread (or, async, to its on_done). */
static void fetch_finish(struct ferry__objmgr_fetch *f, int status)
{
	struct ferry__objmgr *om = f->om;

	ferry__objmgr_step_end(&f->base);
	if (f->on_done) {
		/* From a post: on_done calls the waiters back and frees @f, better done outside
		 * the engine callback and the peer walk (peer_drop) that got us here. Should the
		 * post fail (no memory), at once: none of those callers touches @f after this. */
		f->h.status = status;
		f->h.done = true;
		if (ferry__loop_post(om->loop, fetch_done_posted, f) < 0)
			f->on_done(f);
		return;
	}
	ferry__objmgr_handoff_done(om, &f->h, status);
}

/* Decide the fetch's status; with an expect outstanding, finish at its callback. */
static void fetch_fail(struct ferry__objmgr_fetch *f, int status)
{
	struct ferry__objmgr_req *r = f->stream_req;

	if (f->failed)
		return;
	if (!r) {
		fetch_finish(f, status);
		return;
	}
	f->failed = true;
	f->h.status = status;
	(void)ferry__loop_timer_stop(&f->base.deadline);
	if (f->base.peer && peer_of(f->base.peer)->ep)
		(void)ferry__tcp_cancel_expect(peer_of(f->base.peer)->ep, r->xfer);
}

static void step_fail(struct ferry__objmgr_step *s, int status)
{
	fetch_fail(fetch_of(s), status);
}

/*
 * The endpoint is gone or going, its fetches failed and detached (objmgr_peer.c): drop the
 * request FIFO, destroy the endpoint (its expects complete inside that call).
 */
static void peer_close(struct ferry__objmgr_peer *base)
{
	struct ferry__objmgr_tcp_peer *peer = peer_of(base);
	struct ferry__tcp_ep *ep = peer->ep;
	struct ferry__objmgr_req *r;

	while ((r = peer->head)) {
		peer->head = r->next;
		r->peer = NULL;
		req_unref(r);
	}
	peer->tail = NULL;
	peer->ep = NULL;
	if (ep)
		ferry__tcp_ep_destroy(ep);
}

static int send_req(struct ferry__objmgr_fetch *f, struct ferry__objmgr_req *r, bool stream)
{
	struct ferry__objmgr_tcp_peer *peer = peer_of(f->base.peer);
	struct ferry__wire_pull_request m = {0};
	int ret;

	m.xfer = r->xfer;
	m.object_id = f->id;
	m.offset = r->offset;
	m.len = r->len;
	m.want_inline = !stream;
	m.stream = stream;
	ret = ferry__wire_pull_request_build(&f->om->fb, &m);
	if (ret == 0)
		ret = ferry__objmgr_send(peer->ep, &f->om->fb, FERRY__WIRE_MSG_PULL_REQUEST);
	if (ret < 0)
		return ret;
	r->peer = peer;
	r->fetch = f;
	r->refs++;
	if (peer->tail)
		peer->tail->next = r;
	else
		peer->head = r;
	peer->tail = r;
	return 0;
}

static void expect_done(void *arg, int status)
{
	struct ferry__objmgr_req *r = arg;
	struct ferry__objmgr_fetch *f = r->fetch;

	r->fetch = NULL; /* a reply still to come for it finds nobody */
	if (f && f->stream_req == r) {
		f->stream_req = NULL;
		if (f->failed)
			fetch_finish(f, f->h.status);
		else
			fetch_finish(f, status == 0			      ? 0
					: status == -ETIMEDOUT		      ? -ETIMEDOUT
					: status == -ECANCELED && f->om->shut ? -ECANCELED
									      : -ECONNRESET);
	}
	req_unref(r);
}

/* Send the fetch's request: a probe, or expect + stream request. */
static int fetch_go(struct ferry__objmgr_step *s)
{
	struct ferry__objmgr_fetch *f = fetch_of(s);
	struct ferry__objmgr_tcp_peer *peer = peer_of(s->peer);
	struct ferry__objmgr_req *r = ferry__calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	r->xfer = ++peer->next_xfer;
	r->offset = f->dst ? f->next : 0;
	r->len = f->dst ? f->end - f->next : FERRY__OBJMGR_INLINE_BYTES;
	r->stream = f->dst != NULL;
	if (!f->dst) {
		ret = send_req(f, r, false);
		if (ret < 0)
			ferry__free(r);
		return ret;
	}
	r->refs = 1; /* the expect's */
	r->fetch = f;
	ret = ferry__tcp_expect(peer->ep, r->xfer, f->dst + f->next, r->len, expect_done, r);
	if (ret < 0) {
		ferry__free(r);
		return ret;
	}
	f->stream_req = r;
	ret = send_req(f, r, true);
	if (ret < 0)
		fetch_fail(f, ret); /* the expect's callback finishes it */
	return 0;
}

/* A probe's reply: the object's size, metadata and first bytes. */
static int take_probe(struct ferry__objmgr_fetch *f, struct ferry__wire_pull_reply_view v,
		      const struct ferry__objmgr_req *r)
{
	uint32_t mlen = ferry__wire_pull_reply_metadata_count(v);
	uint32_t n = ferry__wire_pull_reply_data_count(v);
	uint64_t size = ferry__wire_pull_reply_data_size(v);

	if (n != (size < r->len ? size : r->len))
		return -EPROTO;
	f->data_size = size;
	f->metadata_size = mlen;
	f->first_size = n;
	if (mlen && !(f->metadata = ferry__malloc(mlen)))
		return -ENOMEM;
	if (n && !(f->first = ferry__malloc(n)))
		return -ENOMEM;
	if (mlen)
		memcpy(f->metadata, ferry__wire_pull_reply_metadata_data(v), mlen);
	if (n)
		memcpy(f->first, ferry__wire_pull_reply_data_data(v), n);
	return 0;
}

static void take_reply(struct ferry__objmgr_fetch *f, struct ferry__wire_pull_reply_view v,
		       const struct ferry__objmgr_req *r)
{
	int32_t status = ferry__wire_pull_reply_status(v);

	if (status < 0) {
		/* -EBUSY: the source restores it from spill; ask again (objmgr_wait.c). */
		fetch_fail(f, status == -ENOENT || status == -EINVAL || status == -EBUSY
				      ? status
				      : -ECONNRESET);
	} else if (!r->stream) {
		status = take_probe(f, v, r);
		fetch_finish(f, status);
	} else if (ferry__wire_pull_reply_data_size(v) != f->object_size) {
		fetch_fail(f, -EPROTO); /* another object under the same id */
	}
	/* a stream's success: its expect callback finishes the fetch */
}

static void peer_message(struct ferry__tcp_ep *ep, const void *buf, size_t len, void *arg)
{
	struct ferry__objmgr_tcp_peer *peer = arg;
	struct ferry__wire_pull_reply_view v;
	struct ferry__objmgr_req *r = peer->head;
	const void *payload;
	size_t plen;
	uint16_t type;

	(void)ep;
	if (ferry__objmgr_unwrap(buf, len, &type, &payload, &plen) < 0 ||
	    type != FERRY__WIRE_MSG_PULL_REPLY || !r) {
		FLOG_WARN(COMP, "%s: unexpected or malformed message", peer->base.key);
		ferry__objmgr_peer_drop(&peer->base, -EPROTO);
		return;
	}
	v = ferry__wire_pull_reply_root_verified(payload);
	if (ferry__wire_pull_reply_xfer(v) != r->xfer) {
		FLOG_WARN(COMP, "%s: a reply out of order", peer->base.key);
		ferry__objmgr_peer_drop(&peer->base, -EPROTO);
		return;
	}
	peer->head = r->next;
	if (!peer->head)
		peer->tail = NULL;
	r->peer = NULL;
	if (r->fetch)
		take_reply(r->fetch, v, r);
	req_unref(r);
}

static void peer_closed(struct ferry__tcp_ep *ep, int reason, void *arg)
{
	(void)ep;
	ferry__objmgr_peer_closed(&((struct ferry__objmgr_tcp_peer *)arg)->base, reason);
}

static void peer_connected(struct ferry__tcp_ep *ep, int status, void *arg)
{
	(void)ep;
	ferry__objmgr_peer_connected(&((struct ferry__objmgr_tcp_peer *)arg)->base, status);
}

static const struct ferry__tcp_ep_cbs peer_cbs = {
	.on_connect = peer_connected,
	.on_message = peer_message,
	.on_close = peer_closed,
};

static int peer_connect(struct ferry__objmgr_peer *base, const char *ip, uint16_t port)
{
	struct ferry__objmgr *om = FERRY_CONTAINER_OF(base->set, struct ferry__objmgr, peers);
	struct ferry__objmgr_tcp_peer *peer = peer_of(base);

	return ferry__tcp_connect(om->tcp, ip, port, om->opts.timeout_ms, &peer_cbs, peer,
				  &peer->ep);
}

/* A peer that cannot connect fails its fetches with -ECONNRESET (or -ETIMEDOUT). */
static const struct ferry__objmgr_peer_ops peer_ops = {
	.peer_size = sizeof(struct ferry__objmgr_tcp_peer),
	.peer_offset = offsetof(struct ferry__objmgr_tcp_peer, base),
	.name = "",
	.over = "",
	.connect_error = -ECONNRESET,
	.connect = peer_connect,
	.close = peer_close,
	.go = fetch_go,
	.fail = step_fail,
	.detach = fetch_detach,
};

static void fetch_start(void *arg, int status)
{
	struct ferry__objmgr_fetch *f = arg;
	struct ferry__objmgr *om = f->om;
	struct ferry__objmgr_peer *peer;
	char key[FERRY__OBJMGR_PEER_KEY];
	int ret = status < 0 ? status : om->shut ? -ECANCELED : 0;

	snprintf(key, sizeof(key), "%s:%u", f->ip, f->port);
	if (ret == 0)
		ret = ferry__objmgr_peer_get(&om->peers, key, f->ip, f->port, &peer);
	if (ret < 0) {
		fetch_finish(f, ret == -ECANCELED ? ret : -ECONNRESET);
		return;
	}
	ferry__objmgr_step_attach(&f->base, peer, f->ip, f->port);
}

int ferry__objmgr_fetch_start_async(struct ferry__objmgr *om, struct ferry__objmgr_fetch *f)
{
	f->om = om;
	return ferry__loop_post(om->loop, fetch_start, f);
}

void ferry__objmgr_fetch_run_many(struct ferry__objmgr *om, struct ferry__objmgr_fetch *f,
				  unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		f[i].om = om;
	ferry__objmgr_handoff_run(om, f, sizeof(*f), offsetof(struct ferry__objmgr_fetch, h), n,
				  fetch_start);
}

void ferry__objmgr_tcp_init(struct ferry__objmgr *om)
{
	ferry__objmgr_peer_set_init(&om->peers, &peer_ops, om->loop, om->opts.timeout_ms);
}

void ferry__objmgr_tcp_shutdown(struct ferry__objmgr *om)
{
	om->shut = true;
	ferry__objmgr_peer_drop_all(&om->peers, -ECANCELED);
	/* Endpoints accepted from pullers, the listener, and what the engine still holds. */
	ferry__tcp_ctx_destroy(om->tcp);
	om->tcp = NULL;
	om->listener = NULL;
}

void ferry__objmgr_tcp_free(struct ferry__objmgr *om)
{
	assert(!om->peers.list && !om->tcp);
	ferry__fb_builder_fini(&om->fb);
	ferry__fb_builder_fini(&om->serve_fb);
}
