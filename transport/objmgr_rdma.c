/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA pulls and serving for the object manager (serving in objmgr_rdma_serve.c), over the RDMA engine (transport/rdma.h) on
 * the object manager's io_uring loop: the store's whole arena (this node's client mapping of
 * it) is registered once, remote-read only; a puller READs an object straight from the
 * server's arena into its own newly created object.
 *
 * DESIGN
 * - Driving. The engine is a readiness-driven state machine: its two fds (rdma_cm events and
 *   the CQ completion channel) are watched with multishot polls on the loop, and a timer covers
 *   its deadlines. drive() runs ferry__rdma_progress() until the engine has nothing due; it is
 *   called after every entry from outside the engine (a poll, the timer, a posted fetch).
 *   Calls made from inside engine callbacks only ask for one more round (no re-entry).
 * - Protocol (control messages are SEND/RECV: the same 8-byte prefix + FlatBuffer as TCP).
 *   The puller sends PullRequest{xfer, id, want_inline, len = inline limit}. The server pins
 *   the object and answers PullReply: with the whole object inline when data + metadata fit
 *   the limit (one round trip, pin released at once); else with data_size, metadata,
 *   rdma_addr and rkey, keeping the pin under (endpoint, xfer). The puller creates the object
 *   unsealed, READs [rdma_addr, +data_size) into it in pipelined chunks, over one or several
 *   endpoints (QPs) to the server, and sends PullDone{xfer}, which releases the pin.
 * - Pins never outlive their reason: PullDone, the endpoint's close (a puller that died or
 *   disconnected), or a pin deadline (a puller alive but silent) release them; the server
 *   holds at most MAX_PINS per endpoint and refuses more with -EBUSY. The server never writes
 *   remote memory: the region has no remote-write access.
 * - Pull steps (struct rfetch) are made by a pull thread, handed to the loop with
 *   ferry__loop_post(), and waited for; the loop never touches a step after marking it done.
 *   When the object directory's sizes (data and metadata) say the reply will pin the object,
 *   its copy is created while the probe is out (the store's round trip then overlaps the
 *   probe's); with the location cached, the loop runs the whole pull and a pull thread only
 *   creates the copy ("a large object's pull" below). The reply is the truth: a copy created
 *   from sizes it contradicts is aborted and made again from the reply.
 * - READ ahead of the reply. The directory also keeps where each copy lies in its store (the
 *   data's arena offset and the store's id of that placement, which no other placement ever
 *   gets: plasma/layout.h), and the endpoint knows the server's arena start. So with the
 *   endpoint up, a large pull whose copy the loop can create from the client's chunk posts
 *   the READ together with the probe. The READ may run before the server pins the object;
 *   the reply then says which placement the pin holds. The same placement at
 *   the same address: it held the object's bytes from its seal (before the directory listed
 *   it) through the pin, unchanged, so the bytes read are the object's. Another one (deleted
 *   and put again, spilled and read back, a stale record): the bytes are thrown away and READ
 *   again under the pin. Reading memory the object has left is harmless: the region is the
 *   server's arena, read-only to us, and nothing is kept unless the reply confirms it.
 *   The arena start and key come with the endpoint: the server's accept names them
 *   (transport/rdma_conn.c), so the first large pull on an endpoint READs ahead already.
 * - One READ and no message for a small object. For an object of up to FERRY_GCS_CHECK_MAX
 *   bytes the directory's place also holds a content check, the hash of its data + metadata
 *   that the source's store took at the seal. The puller READs data + metadata (stored
 *   together) from the place into its copy and hashes them: equal, the bytes are the
 *   object's, whatever that memory went through meanwhile, and the pull is done without the
 *   server's CPU (no PullRequest, reply, pin or PullDone: one READ's round trip instead of two
 *   SENDs'). Not equal (a stale place, wrong sizes in the directory): the copy is aborted and
 *   the source asked. Why a hash and not the reply's word, as for large objects: there is no
 *   reply to wait for, and a READ's bytes cannot be ordered against a version read in the same
 *   READ on real NICs, whose DMA reads may complete in any order; a hash over what arrived
 *   does not care. Not a defence against a store client that writes colliding bytes on
 *   purpose: such a client can already write the arena.
 * - Deadlines. A step that passes its deadline destroys its endpoint (posted READs cannot be recalled;
 *   destroying the QP stops them), which ends every READ on it with -ECANCELED before the
 *   puller aborts and frees its half-written object. Peers, the steps on them, connect, drop
 *   and deadlines are objmgr_peer.c's (shared with TCP); ferry__objmgr_rdma_peer_ops gives it the RDMA
 *   parts. drive() and the life cycle are in objmgr_rdma_life.c.
 */
#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_rdma_int.h"

#define COMP "objmgr"

/* ---- messages ---- */

int ferry__objmgr_rdma_send_built(struct ferry__rdma_ep *ep, struct ferry__fb_builder *b,
				  uint16_t type)
{
	size_t len;
	void *msg = ferry__objmgr_wrap(b, type, &len);

	return msg ? ferry__rdma_send(ep, msg, len) : -EINVAL;
}

static int send_done(struct ferry__objmgr_rdma *r, struct ferry__rdma_ep *ep, uint64_t xfer)
{
	struct ferry__wire_pull_done m = {.xfer = xfer};
	int ret = ferry__wire_pull_done_build(&r->fb, &m);

	return ret < 0 ? ret : ferry__objmgr_rdma_send_built(ep, &r->fb, FERRY__WIRE_MSG_PULL_DONE);
}

/* ---- pulling: steps on the loop ---- */

static struct rfetch *rfetch_of(struct ferry__objmgr_step *s)
{
	return FERRY_CONTAINER_OF(s, struct rfetch, base);
}

static struct rpeer *rpeer_of(struct ferry__objmgr_peer *p)
{
	return FERRY_CONTAINER_OF(p, struct rpeer, base);
}

static struct ferry__objmgr_rdma *rdma_of(struct ferry__objmgr_peer_set *set)
{
	return FERRY_CONTAINER_OF(set, struct ferry__objmgr_rdma, peers);
}

/* Hand the step back to its pull thread (or the fast path's end). */
static void fetch_finish(struct rfetch *f, int status)
{
	struct ferry__objmgr *om = f->om;

	ferry__objmgr_step_end(&f->base);
	if (f->on_done)
		f->on_done(f, status);
	else
		ferry__objmgr_handoff_done(om, &f->h, status);
}

/* Fail a step; a posted READ finishes it from its callback (which the caller forces by
 * destroying the endpoint). */
static void fetch_fail(struct ferry__objmgr_step *s, int status)
{
	struct rfetch *f = rfetch_of(s);

	if (f->reading) {
		if (!f->fail_status)
			f->fail_status = status;
		ferry__objmgr_step_detach(s);
		return;
	}
	fetch_finish(f, status);
}

/* Its steps are failed and detached (objmgr_peer.c): the endpoint goes. */
static void peer_close(struct ferry__objmgr_peer *base)
{
	struct rpeer *peer = rpeer_of(base);
	struct ferry__rdma_ep *ep = peer->ep;

	peer->ep = NULL;
	ferry__rdma_ep_destroy(ep); /* READs still posted call back with -ECANCELED now */
}

static void read_done(void *arg, int status)
{
	struct rfetch *f = arg;

	f->reading = false;
	if (f->fail_status)
		status = f->fail_status;
	else if (status == -ECANCELED && !f->om->rdma->shut)
		status = -ECONNRESET;
	else if (status == -EFAULT || status == -EIO)
		status = -ECONNRESET; /* the endpoint is torn down; another source may work */
	fetch_finish(f, status);
}

static int fetch_go(struct ferry__objmgr_step *s)
{
	struct rfetch *f = rfetch_of(s);
	struct ferry__objmgr_rdma *r = f->om->rdma;
	struct rpeer *peer = rpeer_of(s->peer);
	struct ferry__wire_pull_request m = {0};
	int ret;

	switch (f->step) {
	case STEP_PROBE:
		m.xfer = f->xfer = ++peer->next_xfer;
		m.object_id = f->id;
		m.len = INLINE_MAX;
		m.want_inline = true;
		ret = ferry__wire_pull_request_build(&r->fb, &m);
		return ret < 0 ? ret
			       : ferry__objmgr_rdma_send_built(peer->ep, &r->fb,
							       FERRY__WIRE_MSG_PULL_REQUEST);
	case STEP_READ:
		ret = ferry__rdma_read(peer->ep, f->dst, f->raddr, f->rkey, f->len,
				       f->om->opts.rdma_chunk_bytes, f->om->opts.rdma_depth,
				       read_done, f);
		f->reading = ret == 0;
		/* An endpoint that broke after the reply: the puller's errors say so as a reset. */
		return ret == -ENOTCONN ? -ECONNRESET : ret;
	case STEP_DONE:
		ret = send_done(r, peer->ep, f->xfer);
		fetch_finish(f, ret);
		return 0;
	}
	return -EINVAL;
}

/* A probe's reply: copy what the pull thread needs. */
static int take_probe(struct rfetch *f, struct ferry__wire_pull_reply_view v)
{
	uint32_t mlen = ferry__wire_pull_reply_metadata_count(v);
	uint32_t n = ferry__wire_pull_reply_data_count(v);

	f->data_size = ferry__wire_pull_reply_data_size(v);
	f->metadata_size = mlen;
	f->inline_all = n == f->data_size;
	if (n && !f->inline_all)
		return -EPROTO; /* a part inline: not what we asked for */
	f->raddr = ferry__wire_pull_reply_rdma_addr(v);
	f->rkey = ferry__wire_pull_reply_rdma_rkey(v);
	f->alloc = ferry__wire_pull_reply_alloc(v);
	if (!f->inline_all && (!f->raddr || f->raddr > UINT64_MAX - f->data_size))
		return -EPROTO;
	if (mlen && !(f->metadata = ferry__malloc(mlen)))
		return -ENOMEM;
	if (n && !(f->data = ferry__malloc(n)))
		return -ENOMEM;
	if (mlen)
		memcpy(f->metadata, ferry__wire_pull_reply_metadata_data(v), mlen);
	if (n)
		memcpy(f->data, ferry__wire_pull_reply_data_data(v), n);
	return 0;
}

static void peer_message(struct ferry__rdma_ep *ep, const void *buf, size_t len, void *arg)
{
	struct rpeer *peer = arg;
	struct ferry__wire_pull_reply_view v;
	const void *payload;
	size_t plen;
	uint16_t type;
	uint64_t xfer;
	int32_t status;

	if (ferry__objmgr_unwrap(buf, len, &type, &payload, &plen) < 0 ||
	    type != FERRY__WIRE_MSG_PULL_REPLY) {
		FLOG_WARN(COMP, "%s: unexpected or malformed message", peer->base.key);
		ferry__objmgr_peer_drop(&peer->base, -EPROTO);
		return;
	}
	v = ferry__wire_pull_reply_root_verified(payload);
	xfer = ferry__wire_pull_reply_xfer(v);
	status = ferry__wire_pull_reply_status(v);
	for (struct ferry__objmgr_step *s = peer->base.steps; s; s = s->next) {
		struct rfetch *f = rfetch_of(s);

		if (f->step != STEP_PROBE || !s->started || f->xfer != xfer)
			continue;
		/* -EMSGSIZE: the metadata does not fit a message here (TCP carries it). */
		if (status < 0) {
			fetch_finish(f, status == -ENOENT || status == -EBUSY ? status
					: status == -E2BIG		      ? -EMSGSIZE
									      : -ECONNRESET);
			return;
		}
		fetch_finish(f, take_probe(f, v));
		return;
	}
	/* Nobody waits for it (cannot happen while steps end only with their endpoint): a pin
	 * taken for it must not stay. */
	if (status == 0 && ferry__wire_pull_reply_rdma_addr(v))
		(void)send_done(rdma_of(peer->base.set), ep, xfer);
}

static void peer_closed(struct ferry__rdma_ep *ep, int reason, void *arg)
{
	(void)ep;
	ferry__objmgr_peer_closed(&((struct rpeer *)arg)->base, reason);
}

static void peer_connected(struct ferry__rdma_ep *ep, int status, void *arg)
{
	(void)ep;
	ferry__objmgr_peer_connected(&((struct rpeer *)arg)->base, status);
}

static const struct ferry__rdma_ep_cbs peer_cbs = {
	.on_connect = peer_connected,
	.on_message = peer_message,
	.on_close = peer_closed,
};

static int peer_connect(struct ferry__objmgr_peer *base, const char *ip, uint16_t port)
{
	struct ferry__objmgr_rdma *r = rdma_of(base->set);
	struct rpeer *peer = rpeer_of(base);

	peer->gen = ++r->next_gen;
	return ferry__rdma_connect(r->ctx, ip, port, r->om->opts.timeout_ms, &peer_cbs, peer,
				   &peer->ep);
}

/* Calls from the deadline timer are entries from outside the engine. */
static void peers_kick(struct ferry__objmgr_peer_set *set)
{
	ferry__objmgr_rdma_drive(rdma_of(set));
}

/* -EHOSTUNREACH: no RDMA path to it (the caller may try TCP). */
const struct ferry__objmgr_peer_ops ferry__objmgr_rdma_peer_ops = {
	.peer_size = sizeof(struct rpeer),
	.peer_offset = offsetof(struct rpeer, base),
	.name = "RDMA ",
	.over = "over RDMA ",
	.connect_error = -EHOSTUNREACH,
	.connect = peer_connect,
	.close = peer_close,
	.go = fetch_go,
	.fail = fetch_fail,
	.kick = peers_kick,
};

static struct rpeer *peer_find(struct ferry__objmgr_rdma *r, const char *ip, uint16_t port,
			       unsigned qp)
{
	char key[FERRY__OBJMGR_PEER_KEY];
	struct ferry__objmgr_peer *peer;

	snprintf(key, sizeof(key), "%s:%u#%u", ip, port, qp);
	peer = ferry__objmgr_peer_find(&r->peers, key);
	return peer ? rpeer_of(peer) : NULL;
}

static int peer_get(struct ferry__objmgr_rdma *r, const char *ip, uint16_t port, unsigned qp,
		    struct rpeer **out)
{
	char key[FERRY__OBJMGR_PEER_KEY];
	struct ferry__objmgr_peer *peer;
	int ret;

	snprintf(key, sizeof(key), "%s:%u#%u", ip, port, qp);
	ret = ferry__objmgr_peer_get(&r->peers, key, ip, port, &peer);
	if (ret == 0)
		*out = rpeer_of(peer);
	return ret;
}

void ferry__objmgr_rdma_fetch_start(void *arg, int status)
{
	struct rfetch *f = arg;
	struct ferry__objmgr_rdma *r = f->om->rdma;
	struct rpeer *peer = NULL;
	int ret = status < 0 ? status : r->shut ? -ECANCELED : 0;

	if (ret == 0 && (f->step == STEP_PROBE || f->qp > 0)) {
		ret = peer_get(r, f->ip, f->port, f->qp, &peer);
	} else if (ret == 0) {
		/* READ part 0 and PullDone must use the endpoint that took the pin: a new one
		 * means the server released it, and the bytes may no longer be the object's. */
		peer = peer_find(r, f->ip, f->port, 0);
		ret = peer && peer->gen == f->gen ? 0 : -ECONNRESET;
	}
	if (ret < 0) {
		fetch_finish(f, ret == -ECANCELED ? ret : -ECONNRESET);
		return;
	}
	if (f->step == STEP_PROBE)
		f->gen = peer->gen;
	ferry__objmgr_step_attach(&f->base, &peer->base, f->ip, f->port);
	ferry__objmgr_rdma_drive(r);
}

/* PullDone for pin @xfer over the endpoint to @ip:@port that took it, if it is still that one
 * (generation @gen): a new endpoint means the pin went with the old one. On the loop. */
void ferry__objmgr_rdma_done_on_pin(struct ferry__objmgr_rdma *r, const char *ip, uint16_t port,
				    uint64_t gen, uint64_t xfer)
{
	struct rpeer *peer = r->shut ? NULL : peer_find(r, ip, port, 0);

	if (peer && peer->base.up && peer->gen == gen)
		(void)send_done(r, peer->ep, xfer);
}

/* ---- the loop's fast path (objmgr_fast.c) ---- */

/*
 * The fast path's probe ended (on the loop). The whole object inline: finish there. A reply
 * with a pin (metadata made it larger than a message): PullDone at once over the endpoint that
 * took it (if that is gone, so is the pin), and a pull thread tries the location afresh; so it
 * does after the errors pull_from() answers with TCP to the same node. Other errors end the
 * location as a pull thread's attempt would.
 */
static void fast_probe_done(struct rfetch *f, int status)
{
	struct ferry__objmgr *om = f->om;

	if (status == 0 && !f->inline_all) {
		ferry__objmgr_rdma_done_on_pin(om->rdma, f->ip, f->port, f->gen, f->xfer);
		status = FERRY__OBJMGR_FAST_RETRY;
	} else if (status == -EMSGSIZE || status == -EHOSTUNREACH) {
		status = FERRY__OBJMGR_FAST_RETRY;
	}
	ferry__objmgr_fast_probed(om, f->owner, status, f->data, f->data_size, f->metadata,
				  f->metadata_size);
	ferry__free(f->metadata);
	ferry__free(f->data);
	ferry__free(f);
}

/* @f: the loop's probe of pull @p at @a's RDMA port, ending in @on_done. */
static void probe_init(struct rfetch *f, struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
		       const struct ferry__node_addr *a, void (*on_done)(struct rfetch *, int))
{
	f->om = om;
	f->step = STEP_PROBE;
	f->id = p->id;
	snprintf(f->ip, sizeof(f->ip), "%s", a->ip);
	f->port = a->rdma_port;
	f->on_done = on_done;
	f->owner = p;
}

static void small_begin(void *arg, int status);

/* The probe of a small object, or (small_begin) its one READ when the pull's place has a
 * content check: the pull (f->owner) holds the directory's sizes and place throughout. */
bool ferry__objmgr_rdma_fast_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
				   const struct ferry__node_addr *a)
{
	struct rfetch *f;
	bool one_sided = p->fast_place.alloc && p->fast_place.check;

	if (!om->rdma || !om->rdma->ctx)
		return false;
	f = ferry__calloc(1, sizeof(*f));
	if (!f)
		return false;
	probe_init(f, om, p, a, fast_probe_done);
	if (ferry__loop_post(om->loop, one_sided ? small_begin : ferry__objmgr_rdma_fetch_start,
			     f) < 0) {
		ferry__free(f);
		return false;
	}
	return true;
}

/* ---- a large object's pull, run by the loop ---- */

/*
 * An object the directory says a reply cannot carry (so the probe pins it), under SPLIT_MIN
 * (one QP), with its location cached: the loop sends the probe at once, while a pull thread
 * admits and creates the copy from the directory's sizes (the store's round trip may block,
 * which the loop never does). Whichever of the two ends second has the loop READ straight
 * into the copy; then the loop sends PullDone, seals and calls the waiters back. A pull
 * thread's pull hands off four times on its way (caller to pull thread, to the loop for the
 * probe, back, to the loop for the READ, back); this one hands off once each way, and the
 * probe does not wait for a pull thread to wake (each hand-off costs ~0.1 ms in the
 * soft-RoCE VM). A failed probe or create, sizes other than the directory's (a record written
 * without the metadata size), an inline reply, a failed READ or seal: the pin is released and
 * the pull goes to a pull thread as from the fast path (which aborts the copy first and goes
 * on from the attempt's result, or tries the location afresh). With the copy's place known
 * and the copy creatable from the client's chunk, the loop creates it itself and READs ahead
 * of the reply (big_begin, and DESIGN above): no pull thread at all.
 */
struct rbig {
	struct rfetch f;		     /* the probe, then the READ (first: on_done's) */
	struct rfetch ahead;		     /* the READ posted with the probe (read_ahead) */
	struct ferry__objmgr_sizes sizes;    /* the directory's: the copy is made with them */
	struct ferry_gcs_object_place place; /* the directory's, of this copy; 0/0: unknown */
	uint8_t *dst;			     /* the copy; NULL: none */
	int create_status;		     /* the pull thread's admit + create (0: admitted) */
	int probe_status;		     /* the probe's end */
	int ahead_status;		     /* the READ ahead's end */
	bool created;			     /* create_status is in */
	bool probed;			     /* probe_status is in */
	bool read_ahead;		     /* a READ went with the probe: wait for both */
	bool ahead_ended;		     /* ahead_status is in */
};

/* One more in counter @yes of om->stats if @kept, else in @no. */
static void count_either(struct ferry__objmgr *om, bool kept, uint64_t *yes, uint64_t *no)
{
	pthread_mutex_lock(&om->lock);
	(*(kept ? yes : no))++;
	pthread_mutex_unlock(&om->lock);
}

/* A copy created before the probe's reply came: kept (the reply confirmed the sizes it was made
 * with) or discarded. */
void ferry__objmgr_rdma_count_early(struct ferry__objmgr *om, bool kept)
{
	count_either(om, kept, &om->stats.early_copies, &om->stats.early_discarded);
}

/* Does probe @f's reply (status @status) pin an object of exactly @sizes? */
bool ferry__objmgr_rdma_reply_fits(const struct rfetch *f, int status,
				   const struct ferry__objmgr_sizes *sizes)
{
	return status == 0 && !f->inline_all && f->data_size == sizes->data &&
	       f->metadata_size == sizes->metadata;
}

/* Admit and create @id's copy from the directory's @sizes, its metadata left to be written
 * from the reply. A pull thread may wait for admission and the store; the loop (@on_loop)
 * never does: it is told no instead (-EAGAIN, or -ENOBUFS when only the store could make the
 * copy). 0 and *@dst (admitted), or the error (nothing admitted). */
int ferry__objmgr_rdma_create_early(struct ferry__objmgr *om, const struct ferry_object_id *id,
				    const struct ferry__objmgr_sizes *sizes, bool on_loop,
				    void **dst)
{
	uint64_t total = sizes->data + sizes->metadata;
	int ret = on_loop ? ferry__objmgr_try_admit(om, total)
			  : ferry__objmgr_admit(om, total); /* -ECANCELED when stopping */

	if (ret < 0)
		return ret;
	ret = on_loop ? ferry__plasma_client_create_small(
				om->store, id, sizes->data, NULL, sizes->metadata,
				FERRY_PLASMA_CREATE_SECONDARY, &sizes->owner, dst)
		      : ferry_plasma_client_create_owned(
				om->store, id, sizes->data, NULL, sizes->metadata,
				FERRY_PLASMA_CREATE_SECONDARY, &sizes->owner, dst);
	if (ret < 0)
		ferry__objmgr_unadmit(om, total);
	return ret;
}

/* The end: give admission back and finish or hand over (objmgr_fast.c). */
static void big_end(struct rbig *b, int status)
{
	struct ferry__objmgr *om = b->f.om;
	uint64_t total = b->sizes.data + b->sizes.metadata;

	if (b->create_status == 0)
		ferry__objmgr_unadmit(om, total);
	ferry__objmgr_fast_filled(om, b->f.owner, status, b->dst != NULL, total);
	ferry__free(b->f.metadata);
	ferry__free(b->f.data);
	ferry__free(b);
}

static void big_read_done(struct rfetch *f, int status)
{
	struct ferry__objmgr_rdma *r = f->om->rdma;
	uint64_t gen = f->gen, xfer = f->xfer;
	uint16_t port = f->port;
	char ip[sizeof(f->ip)];

	/* The READ went over the pin's own endpoint: success proves the bytes were the
	 * object's throughout, so PullDone need not be waited for, nor sent first: the waiters
	 * are called back before it (posting a SEND costs ~0.2 ms in the soft-RoCE VM). */
	memcpy(ip, f->ip, sizeof(ip));
	big_end((struct rbig *)f, status); /* frees f */
	ferry__objmgr_rdma_done_on_pin(r, ip, port, gen, xfer);
}

/* This source's attempt ends with @st: the pin released if the probe took one (over its own
 * endpoint, if that still stands), an early copy counted as discarded. */
static void big_fail(struct rbig *b, int st)
{
	struct rfetch *f = &b->f;

	if (b->probe_status == 0 && !f->inline_all)
		ferry__objmgr_rdma_done_on_pin(f->om->rdma, f->ip, f->port, f->gen, f->xfer);
	if (b->dst)
		ferry__objmgr_rdma_count_early(f->om, false);
	big_end(b, st);
}

/* The reply confirmed the sizes the copy was made with: it is kept, its metadata the reply's. */
static void big_keep_copy(struct rbig *b)
{
	struct rfetch *f = &b->f;

	ferry__objmgr_rdma_count_early(f->om, true);
	if (f->metadata_size)
		memcpy(b->dst + f->data_size, f->metadata, f->metadata_size);
}

/* Both the probe and the create ended: READ, or end. */
static void big_go(struct rbig *b)
{
	struct rfetch *f = &b->f;
	int st = b->probe_status;

	if (st == 0 && (b->create_status < 0 || !ferry__objmgr_rdma_reply_fits(f, st, &b->sizes))) {
		/* Afresh: the pull thread's own probe and create decide, with the reply's sizes for
		 * an early copy, or none after a failed create (it would only fail again early). */
		struct ferry__objmgr_sizes *sz = &f->owner->sizes;

		sz->data = b->create_status < 0 ? 0 : f->data_size;
		sz->metadata = b->create_status < 0 ? 0 : f->metadata_size; /* owner: kept */
		st = FERRY__OBJMGR_FAST_RETRY;
	} else if (st == -EMSGSIZE || st == -EHOSTUNREACH) {
		st = FERRY__OBJMGR_FAST_RETRY; /* pull_from() goes to TCP after these */
	}
	if (st != 0) {
		big_fail(b, st);
		return;
	}
	big_keep_copy(b);
	/* The same rfetch READs now, over the endpoint that took the pin (qp 0, its gen). */
	f->step = STEP_READ;
	f->qp = 0;
	f->dst = b->dst;
	f->len = f->data_size;
	f->base.started = false;
	f->on_done = big_read_done;
	ferry__objmgr_rdma_fetch_start(f, 0);
}

/*
 * Both the probe and the READ ahead ended. The bytes are the object's when the reply pins the
 * placement the READ read from (same address, key and placement id): from the pin on it holds
 * them, and before it that placement held them since the seal (a sealed object's bytes never
 * change, and a placement id never names other memory). Otherwise the READ goes again from
 * the reply's address (big_go), into the same copy.
 */
static void ahead_go(struct rbig *b)
{
	struct rfetch *f = &b->f;
	struct ferry__objmgr *om = f->om;
	bool kept = b->ahead_status == 0 &&
		    ferry__objmgr_rdma_reply_fits(f, b->probe_status, &b->sizes) &&
		    f->alloc == b->place.alloc && f->raddr == b->ahead.raddr &&
		    f->rkey == b->ahead.rkey;

	count_either(om, kept, &om->stats.read_ahead_kept, &om->stats.read_ahead_missed);
	if (b->ahead_status < 0 && b->probe_status == 0) {
		/* A failed READ (the endpoint is torn down, or its deadline passed): this source's
		 * attempt ends as after any failed READ; a READ again there could not work. */
		big_fail(b, b->ahead_status);
		return;
	}
	if (!kept) {
		big_go(b);
		return;
	}
	big_keep_copy(b);
	big_read_done(f, 0);
}

static void big_probed(struct rfetch *f, int status)
{
	struct rbig *b = (struct rbig *)f;

	b->probed = true;
	b->probe_status = status;
	if (b->read_ahead) {
		if (b->ahead_ended)
			ahead_go(b);
	} else if (b->created) {
		big_go(b);
	}
}

static void ahead_done(struct rfetch *f, int status)
{
	struct rbig *b = FERRY_CONTAINER_OF(f, struct rbig, ahead);

	b->ahead_ended = true;
	b->ahead_status = status;
	if (b->probed)
		ahead_go(b);
}

/*
 * Can @f's object be READ from the directory's place (@offset, @len bytes) now, on the loop?
 * The endpoint to its server is up, its accept named the server's arena and the place lies
 * inside it (a READ outside would fail and take the endpoint down), and the copy (@sizes) could
 * be made from the client's chunk without waiting: then the endpoint, the place's remote
 * address and key in *@raddr and *@rkey, the copy in *@dst, admitted. Else NULL, nothing made.
 * @status: the post's. The region is the endpoint's own (its handshake's terms), so a new
 * endpoint to the same server never reads with an old one's.
 */
static struct rpeer *read_now(struct ferry__objmgr *om, const struct rfetch *f, uint64_t offset,
			      uint64_t len, const struct ferry__objmgr_sizes *sizes, int status,
			      uint64_t *raddr, uint32_t *rkey, void **dst)
{
	struct ferry__objmgr_rdma *r = om->rdma;
	struct rpeer *peer = status < 0 || r->shut ? NULL : peer_find(r, f->ip, f->port, 0);
	uint64_t base, size;
	uint32_t key;

	if (!peer || !peer->base.up || !peer->ep ||
	    ferry__rdma_ep_peer_region(peer->ep, &base, &size, &key) < 0 || offset > size ||
	    len > size - offset ||
	    ferry__objmgr_rdma_create_early(om, &f->id, sizes, true, dst) < 0)
		return NULL;
	*raddr = base + offset;
	*rkey = key;
	return peer;
}

/*
 * A large pull whose place the directory has, on the loop: with the endpoint up and the copy
 * made from the chunk (read_now), the READ goes with the probe instead of after its reply,
 * which takes the probe's round trip (~0.9 ms of a 1 MiB pull in the soft-RoCE VM) off the
 * pull. Otherwise as without a place: a pull thread creates the copy while the probe is out.
 */
static void big_begin(void *arg, int status)
{
	struct rbig *b = arg;
	struct ferry__objmgr *om = b->f.om;
	uint64_t raddr;
	uint32_t rkey;
	void *dst;
	struct rpeer *peer = read_now(om, &b->f, b->place.offset, b->sizes.data, &b->sizes, status,
				      &raddr, &rkey, &dst);

	if (peer) {
		b->f.owner->big = NULL; /* no pull thread creates it */
		b->dst = dst;
		b->read_ahead = true;
		b->ahead = (struct rfetch){
			.om = om,
			.step = STEP_READ,
			.id = b->f.id,
			.port = b->f.port,
			.gen = peer->gen, /* qp 0: fetch_start checks it is still this endpoint */
			.dst = b->dst,
			.raddr = raddr,
			.rkey = rkey,
			.len = b->sizes.data,
			.on_done = ahead_done,
			.owner = b->f.owner,
		};
		memcpy(b->ahead.ip, b->f.ip, sizeof(b->ahead.ip));
		ferry__objmgr_rdma_fetch_start(&b->f, 0);
		ferry__objmgr_rdma_fetch_start(&b->ahead, 0);
		return;
	}
	pthread_mutex_lock(&om->lock);
	ferry__objmgr_enqueue(om, b->f.owner); /* p->big: it creates the copy */
	pthread_mutex_unlock(&om->lock);
	ferry__objmgr_rdma_fetch_start(&b->f, status);
}

static void big_created(void *arg, int status)
{
	struct rbig *b = arg;

	(void)status; /* the pull holds a fast_pulls count: the loop runs until it ends */
	b->created = true;
	if (b->probed)
		big_go(b);
}

bool ferry__objmgr_rdma_big_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
				  const struct ferry__node_addr *a)
{
	struct rbig *b;

	if (!om->rdma || !om->rdma->ctx || p->sizes.data >= SPLIT_MIN)
		return false;
	b = ferry__calloc(1, sizeof(*b));
	if (!b)
		return false;
	probe_init(&b->f, om, p, a, big_probed);
	b->sizes = p->sizes;
	b->place = p->fast_place;
	p->big = b;
	if (b->place.alloc) {
		/* The loop decides whether it can READ ahead (big_begin). */
		if (ferry__loop_post(om->loop, big_begin, b) < 0) {
			p->big = NULL;
			ferry__free(b);
			return false;
		}
		return true;
	}
	if (ferry__loop_post(om->loop, ferry__objmgr_rdma_fetch_start, &b->f) < 0) {
		p->big = NULL;
		ferry__free(b);
		return false;
	}
	ferry__objmgr_enqueue(om, p);
	return true;
}

void ferry__objmgr_rdma_big_create(struct ferry__objmgr *om, struct ferry__objmgr_pull *p)
{
	struct rbig *b = p->big;
	void *dst = NULL;
	bool told = false;
	int ret;

	p->big = NULL; /* the loop may hand the pull over to a pull thread later */
	ret = ferry__objmgr_rdma_create_early(om, &p->id, &b->sizes, false, &dst);
	b->dst = ret == 0 ? dst : NULL;
	b->create_status = ret;
	/* The loop runs until this pull ends (it holds a fast_pulls count), so only memory for
	 * the post can be short: try again. */
	while ((ret = ferry__loop_post(om->loop, big_created, b)) == -ENOMEM) {
		if (!told)
			FLOG_WARN(COMP, "no memory to hand a created copy to the loop: retrying");
		told = true;
		usleep(1000);
	}
	if (ret < 0)
		FLOG_ERROR(COMP, "cannot hand a created copy to the loop: %s",
			   ferry_strerror(-ret));
}

/* ---- a small object's pull: one READ, no message ---- */

/*
 * The READ ended. The bytes count when they hash to the directory's content check, which the
 * source's store computed from the object's own bytes at its seal: whatever happened to that
 * memory meanwhile (freed, reused, spilled and read back elsewhere), bytes that hash to it are
 * the object's (a 64-bit hash: a false match needs a collision, not a race). Bytes that do
 * not: the copy is aborted and a pull thread asks the source as without a place
 * (FERRY__OBJMGR_FAST_RETRY), whose answer decides, so a stale place or a wrong size in the
 * directory costs time, never a wrong result. A failed READ (the endpoint broke, or the
 * deadline passed and took it down) ends this source's attempt as any failed READ does: the
 * pull fails over, or ends with -ECONNRESET / -ETIMEDOUT.
 */
static void small_read_done(struct rfetch *f, int status)
{
	struct ferry__objmgr *om = f->om;
	bool kept =
		status == 0 && ferry__hash_content(f->dst, f->len) == f->owner->fast_place.check;

	count_either(om, kept, &om->stats.one_sided_kept, &om->stats.one_sided_missed);
	ferry__objmgr_unadmit(om, f->len); /* the READ covered the whole copy */
	ferry__objmgr_fast_filled(om, f->owner,
				  status < 0 ? status
				  : kept     ? 0
					     : FERRY__OBJMGR_FAST_RETRY,
				  true, f->len);
	ferry__free(f);
}

/*
 * A small object whose place and check the directory has, on the loop: with the endpoint up
 * (its accept named the server's arena and key) and the copy made from the client's chunk, one
 * READ of data + metadata (stored together at both ends) straight into the copy, and nothing
 * else: no PullRequest, no reply, no pin, so the server's CPU takes no part and the pull costs
 * one READ's round trip instead of two SENDs'. Otherwise (first pull to the node, chunk full,
 * admission short) the probe goes as without a place.
 */
static void small_begin(void *arg, int status)
{
	struct rfetch *f = arg;
	struct ferry__objmgr_rdma *r = f->om->rdma;
	const struct ferry__objmgr_pull *p = f->owner;
	uint64_t total = p->sizes.data + p->sizes.metadata;
	void *dst;
	struct rpeer *peer = read_now(f->om, f, p->fast_place.offset, total, &p->sizes, status,
				      &f->raddr, &f->rkey, &dst);

	if (!peer) {
		ferry__objmgr_rdma_fetch_start(f, status); /* the probe */
		return;
	}
	f->step = STEP_READ;
	f->gen = peer->gen;
	f->dst = dst;
	f->len = total;
	f->on_done = small_read_done;
	/* The endpoint read_now() found, in this loop turn: fetch_start() would look it up again.
	 * The attach may end f (a failed post). */
	ferry__objmgr_step_attach(&f->base, &peer->base, f->ip, f->port);
	/* rxe completes a READ inside its post, and a NIC within microseconds: look at the CQ now
	 * rather than on the loop's next pass (4-5 us of an 8 B pull in the soft-RoCE VM). */
	if (ferry__objmgr_rdma_engine_poll(r, false) == 0)
		ferry__objmgr_rdma_drive(r);
}
