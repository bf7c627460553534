/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's engine: a loop thread with one framed connection per shard, requests
 * matched to replies by seq, reconnection, resubscription and event delivery.
 *
 * DESIGN
 * - Threads: the loop is the client's own (a thread it starts) or the caller's
 *   (ferry__gcs_client_connect_on: no thread). Callers build a request (seq from an atomic
 *   counter) and post it to the loop with a completion callback (on the loop thread itself it is
 *   queued at once). Everything else (connections, the pending lists, subscriptions,
 *   watermarks) belongs to the loop thread.
 * - Completion: every request completes exactly once on the loop thread: its reply, -ETIMEDOUT
 *   from its deadline timer (CLOCK_MONOTONIC, started when it reaches the loop), or -ECANCELED
 *   at destroy. A blocking call is a request whose callback fills a waiter (mutex + condvar on
 *   CLOCK_MONOTONIC, refcounted: a caller that gives up first drops its reference and the late
 *   completion frees it): one path for both forms.
 * - Lifetime: c->refs counts the owner, each request posted but not yet run on the loop, and
 *   each open connection; the client is freed when the last goes (at once with an own loop,
 *   whose destroy runs them all; with a given loop, once the closes and posts have run).
 * - Reconnect: a connection that drops is retried every reconnect_ms. Once connected again,
 *   the client first resubscribes (resume from the epoch and per-channel watermark of the last
 *   batch it delivered: the server replays what was missed, or sends RESYNC + snapshot), then
 *   resends every request without a reply. Mutations carry the client's random ID and their
 *   seq; the server answers a resent one with its first result instead of applying it twice
 *   (also across a GCS restart on its WAL: see ferry__gcs_state_apply_request).
 * - Events are dispatched on the loop thread to every subscription whose channel and key match.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/net.h"
#include "common/util.h"
#include "common/wire.h"
#include "gcs/client_int.h"

#define COMP "gcs-client"

/* @ts = CLOCK_MONOTONIC @ms from now, for condvars set to that clock. */
static void timespec_in(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static void client_free(struct ferry_gcs_client *c)
{
	ferry__gcs_client_subs_free(c);
	ferry__fb_builder_fini(&c->fb);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	ferry__free(c);
}

static void client_unref(struct ferry_gcs_client *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		client_free(c);
}

/* ---- pending requests (loop) ---- */

static void pending_append(struct shard *s, struct creq *r)
{
	r->next = NULL;
	r->prev = s->tail;
	if (s->tail)
		s->tail->next = r;
	else
		s->head = r;
	s->tail = r;
}

static void pending_unlink(struct shard *s, struct creq *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		s->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		s->tail = r->prev;
	r->next = r->prev = NULL;
}

/* Loop thread (or destroy): the request is answered or failed; its callback learns it, the
 * request is freed. It is no longer pending. */
static void creq_complete(struct creq *r, int status, const void *value, size_t size,
			  uint64_t epoch)
{
	struct ferry__gcs_reply reply = {status, value, size, epoch};

	(void)ferry__loop_timer_stop(&r->deadline);
	if (r->sub && r->sub_listed) { /* a refused subscription must not linger */
		r->sub->req = NULL;
		if (status < 0)
			ferry__gcs_client_sub_drop(r->shard->client, r->sub);
	} else if (r->sub) { /* not in the list: never reached the loop, or an unsubscribe */
		ferry__free(r->sub);
	}
	if (r->removed && status == -ENOENT) /* the server had already forgotten it (reconnect) */
		reply.status = 0;
	r->fn(r->arg, &reply);
	ferry__free(r->payload);
	ferry__free(r);
}

/* ---- connections ---- */

static void shard_send(struct shard *s, struct creq *r)
{
	int ret = ferry__conn_send(s->conn, r->type, r->payload, r->len);

	/* -ENOTCONN: closing. Otherwise (-ENOMEM) close: the reconnect resends every pending
	 * request, so none waits for a reply to a message that never left. */
	if (ret < 0 && ret != -ENOTCONN) {
		FLOG_WARN(COMP, "send to shard %u failed: %s", s->index, ferry_strerror(-ret));
		ferry__conn_close(s->conn);
	}
}

static void resubscribe(struct shard *s)
{
	struct ferry_gcs_client *c = s->client;
	int ret;

	for (struct ferry__gcs_csub *sub = c->subs; sub; sub = sub->next) {
		struct ferry__wire_gcs_subscribe m = {0};

		if (sub->dead || !(sub->shard_mask & (1ull << s->index)))
			continue;
		m.channel = sub->channel;
		m.key = sub->key_size ? sub->key : NULL;
		m.key_count = sub->key_size;
		m.resume = s->epoch != 0;
		m.epoch = s->epoch;
		m.last_seq = s->watermarks[sub->channel];
		ret = ferry__wire_gcs_subscribe_build(&c->fb, &m);
		if (ret == 0)
			ret = ferry__conn_send(s->conn, FERRY__WIRE_MSG_GCS_SUBSCRIBE,
					       ferry__fb_builder_data(&c->fb),
					       ferry__fb_builder_size(&c->fb));
		if (ret < 0) { /* a subscription must not silently lapse: try the next connection */
			FLOG_WARN(COMP, "resubscribe on shard %u failed: %s", s->index,
				  ferry_strerror(-ret));
			ferry__conn_close(s->conn);
			return;
		}
	}
}

static void on_connect(struct ferry__conn *conn)
{
	struct shard *s = ferry__conn_data(conn);
	struct ferry_gcs_client *c = s->client;

	s->connected = true;
	if (s->ever_connected)
		FLOG_WARN(COMP, "reconnected to the GCS at %s:%u (shard %u)", s->host, s->port,
			  s->index);
	resubscribe(s);
	for (struct creq *r = s->head; r; r = r->next)
		shard_send(s, r);
	pthread_mutex_lock(&c->lock);
	s->ever_connected = true;
	if (ferry__conn_local_addr(conn, &s->local, &s->local_len) < 0)
		s->local_len = 0;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void start_connect(struct shard *s);

static void on_reconnect_timer(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		start_connect(t->data);
}

/* A shard refused our first handshake: what waits for it fails with that error (the caller of
 * a given loop has no connect call to learn it from). */
static void fail_pending(struct shard *s, int err)
{
	while (s->head) {
		struct creq *r = s->head;

		pending_unlink(s, r);
		creq_complete(r, err, NULL, 0, 0);
	}
}

static void on_close(struct ferry__conn *conn, int err)
{
	struct shard *s = ferry__conn_data(conn);
	struct ferry_gcs_client *c = s->client;
	bool refused = false, was_connected = s->connected;

	s->conn = NULL;
	s->connected = false;
	if (atomic_load(&c->closing)) {
		client_unref(c); /* the connection's reference: may free c */
		return;
	}
	/* A lost GCS is worth a warning (a daemon's log was silent about it at the default
	 * level); the attempts that follow fail quietly, and the reconnect says it is back. */
	if (was_connected)
		FLOG_WARN(COMP, "lost the GCS at %s:%u (shard %u): %s; reconnecting", s->host,
			  s->port, s->index, ferry_strerror(-err));
	else
		FLOG_INFO(COMP, "shard %u connection closed: %s", s->index, ferry_strerror(-err));
	if (err == -EUSERS && s->last_error != -EUSERS) /* once, not at every retry */
		FLOG_WARN(COMP,
			  "the GCS at %s:%u (shard %u) refused us: it holds as many clients as it "
			  "may (ferry-gcs --max-clients)%s",
			  s->host, s->port, s->index,
			  s->ever_connected ? "; retrying until one leaves" : "");
	pthread_mutex_lock(&c->lock);
	s->last_error = err;
	s->progress = ferry__conn_progress(conn);
	pthread_mutex_unlock(&c->lock);
	if (err == -EACCES || err == -EPROTO || err == -EUSERS) {
		pthread_mutex_lock(&c->lock);
		refused = !s->ever_connected;
		if (refused)
			c->connect_error = err;
		pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
	if (refused)
		fail_pending(s, err);
	ferry__loop_timer_start(c->loop, &s->reconnect, c->reconnect_ms, 0, on_reconnect_timer);
	client_unref(c);
}

static void handle_reply(struct shard *s, const void *payload)
{
	struct ferry__wire_gcs_reply_view v = ferry__wire_gcs_reply_root_verified(payload);
	uint64_t seq = ferry__wire_gcs_reply_seq(v);

	/* Oldest first: replies come in request order, so the match is nearly always the head. */
	for (struct creq *r = s->head; r; r = r->next) {
		if (r->seq != seq)
			continue;
		pending_unlink(s, r);
		creq_complete(r, ferry__wire_gcs_reply_status(v),
			      ferry__wire_gcs_reply_value_data(v),
			      ferry__wire_gcs_reply_value_count(v), ferry__wire_gcs_reply_epoch(v));
		return;
	}
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct shard *s = ferry__conn_data(conn);

	(void)len;
	if (type == FERRY__WIRE_MSG_GCS_REPLY)
		handle_reply(s, payload);
	else if (type == FERRY__WIRE_MSG_GCS_PUBLISH)
		ferry__gcs_client_deliver(s, payload);
	else
		FLOG_WARN(COMP, "unexpected %s from shard %u", ferry__wire_message_name(type),
			  s->index);
}

static const struct ferry__conn_callbacks conn_cb = {
	.on_message = on_message,
	.on_connect = on_connect,
	.on_close = on_close,
};

static void start_connect(struct shard *s)
{
	struct ferry_gcs_client *c = s->client;
	struct ferry__wire_handshake hs = {0};
	struct ferry__conn_opts co = {0};
	int ret;

	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = c->token;
	hs.token_count = c->token_len;
	hs.peer_kind = c->kind;
	hs.pid = (int32_t)getpid();
	hs.name = "gcs-client";
	co.cb = &conn_cb;
	co.data = s;
	co.handshake = &hs;
	co.connect_timeout_ms = c->timeout_ms;
	ret = ferry__conn_connect_tcp(c->loop, s->host, s->port, &co, &s->conn);
	if (ret == 0)
		atomic_fetch_add(&c->refs, 1); /* until on_close */
	if (ret < 0) {
		bool again;

		s->conn = NULL;
		pthread_mutex_lock(&c->lock);
		again = s->last_error == ret;
		s->last_error = ret; /* what a connect that runs out of time reports */
		pthread_mutex_unlock(&c->lock);
		if (!again) /* once per cause, not every reconnect_ms */
			FLOG_WARN(COMP, "connecting to shard %u (%s:%u) failed: %s; retrying",
				  s->index, s->host, s->port, ferry_strerror(-ret));
		ferry__loop_timer_start(c->loop, &s->reconnect, c->reconnect_ms, 0,
					on_reconnect_timer);
	}
}

/* ---- requests ---- */

static void on_deadline(struct ferry__loop_timer *t, int status)
{
	struct creq *r = t->data;

	(void)status; /* 0 at the deadline, -ECANCELED when the loop is destroyed */
	pending_unlink(r->shard, r);
	creq_complete(r, status < 0 ? -ECANCELED : -ETIMEDOUT, NULL, 0, 0);
}

/* Loop thread: @r joins its shard's pending list (sent now if connected) under its deadline. */
static void enqueue(struct creq *r)
{
	struct shard *s = r->shard;
	struct ferry_gcs_client *c = s->client;
	uint64_t now = ferry__loop_now_ms();

	if (atomic_load(&c->closing)) {
		creq_complete(r, -ECANCELED, NULL, 0, 0);
		return;
	}
	if (r->sub && r->sub->unsub) { /* forgotten at once: never delivered nor resubscribed */
		r->removed = ferry__gcs_client_subs_remove(c, s->index, r->sub) > 0;
	} else if (r->sub) { /* remembered at once, so a reconnect resubscribes it */
		if (ferry__gcs_client_sub_list(c, r->sub) < 0) {
			FLOG_ERROR(COMP, "no memory to list a subscription");
			creq_complete(r, -ENOMEM, NULL, 0, 0);
			return;
		}
		r->sub_listed = true;
		r->sub->req = r; /* an unsubscribe before the reply unlinks it from r */
	}
	r->deadline.data = r;
	if (ferry__loop_timer_start(c->loop, &r->deadline,
				    r->deadline_ms > now ? r->deadline_ms - now : 0, 0,
				    on_deadline) < 0) {
		creq_complete(r, -ECANCELED, NULL, 0, 0);
		return;
	}
	pending_append(s, r);
	if (s->connected)
		shard_send(s, r);
}

static void on_submit(void *arg, int status)
{
	struct creq *r = arg;
	struct ferry_gcs_client *c = r->shard->client;

	if (status < 0)
		creq_complete(r, status, NULL, 0, 0);
	else
		enqueue(r);
	client_unref(c); /* the post's reference */
}

bool ferry__gcs_client_on_loop(const struct ferry_gcs_client *c)
{
	/* Before a given loop's first pass the caller may be any thread, even while another runs
	 * the loop: it posts (the attaching thread guessed as the loop's raced with it). */
	return atomic_load(&c->loop_known) &&
	       pthread_equal(pthread_self(), atomic_load(&c->loop_tid));
}

void (*ferry__gcs_client_send_hook)(struct ferry_gcs_client *c, uint16_t type);

int ferry__gcs_client_send(struct ferry_gcs_client *c, unsigned shard, uint16_t type, void *payload,
			   size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			   ferry__gcs_reply_fn fn, void *arg)
{
	struct creq *r = NULL;
	int ret = -ECANCELED;

	if (ferry__gcs_client_send_hook)
		ferry__gcs_client_send_hook(c, type);
	if (atomic_load(&c->closing))
		goto err_free;
	ret = -ENOMEM;
	r = ferry__calloc(1, sizeof(*r));
	if (!r)
		goto err_free;
	r->shard = &c->shards[shard];
	r->fn = fn;
	r->arg = arg;
	r->sub = sub;
	r->seq = seq;
	r->type = type;
	r->payload = payload;
	r->len = len;
	r->deadline_ms = ferry__loop_now_ms() + c->timeout_ms;
	if (ferry__gcs_client_on_loop(c)) { /* no hop: the loop thread owns the lists */
		enqueue(r);
		return 0;
	}
	atomic_fetch_add(&c->refs, 1);
	ret = ferry__loop_post(c->loop, on_submit, r);
	if (ret == 0)
		return 0;
	atomic_fetch_sub(&c->refs, 1);
err_free:
	ferry__free(r);
	ferry__free(sub);
	ferry__free(payload);
	return ret;
}

/* ---- blocking calls: a request whose callback fills a waiter ---- */

/* A caller blocked on a request. */
struct waiter {
	atomic_int refs;	      /* the caller and the request */
	pthread_mutex_t lock;	      /* guards done and what follows */
	pthread_cond_t cond;	      /* signalled when done (CLOCK_MONOTONIC) */
	bool done;		      /* answered */
	struct ferry__gcs_result res; /* internal calls: the answer, value copied */
	void *result;		      /* public calls: the async form's result */
};

static struct waiter *waiter_new(void)
{
	struct waiter *w = ferry__calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	ferry__cond_init_monotonic(&w->cond);
	atomic_init(&w->refs, 2);
	return w;
}

static void waiter_unref(struct waiter *w)
{
	if (atomic_fetch_sub(&w->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	ferry__free(w->res.value);
	ferry_gcs_free(w->result);
	ferry__free(w);
}

static void waiter_wake(struct waiter *w)
{
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	waiter_unref(w);
}

/* A ferry__gcs_reply_fn: the reply, its value copied, into the waiter. */
static void waiter_reply(void *arg, const struct ferry__gcs_reply *reply)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->lock);
	w->res.status = reply->status;
	w->res.epoch = reply->epoch;
	if (reply->size && (w->res.value = ferry__malloc(reply->size)))
		memcpy(w->res.value, reply->value, reply->size);
	else if (reply->size)
		w->res.status = -ENOMEM;
	w->res.size = w->res.value ? reply->size : 0;
	waiter_wake(w);
}

void ferry__gcs_sync_done(void *arg, int status, void *result)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->lock);
	w->res.status = status;
	w->result = result;
	waiter_wake(w);
}

/* Wait for @w until @deadline (CLOCK_MONOTONIC), then drop the caller's reference. The request's
 * own deadline timer ends it at the same time; this one only guards a stalled loop. */
static int wait_result(struct waiter *w, const struct timespec *deadline,
		       struct ferry__gcs_result *res, void **result)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	while (!w->done && ret == 0)
		ret = pthread_cond_timedwait(&w->cond, &w->lock, deadline);
	if (w->done) {
		*res = w->res;
		w->res.value = NULL;
		if (result) {
			*result = w->result;
			w->result = NULL;
		}
		ret = res->status;
	} else {
		ret = -ETIMEDOUT;
		res->status = ret;
	}
	pthread_mutex_unlock(&w->lock);
	waiter_unref(w);
	return ret;
}

struct ferry__gcs_sync *ferry__gcs_sync_new(struct ferry_gcs_client *c)
{
	if (c && ferry__gcs_client_on_loop(c))
		return NULL;
	return (struct ferry__gcs_sync *)waiter_new();
}

int ferry__gcs_sync_wait(struct ferry_gcs_client *c, struct ferry__gcs_sync *sync, int submitted,
			 void **result)
{
	struct waiter *w = (struct waiter *)sync;
	struct ferry__gcs_result res = {0};
	struct timespec deadline;

	if (result)
		*result = NULL;
	if (!w) /* on the loop thread it would wait for itself */
		return c && ferry__gcs_client_on_loop(c) ? -EDEADLK : -ENOMEM;
	if (submitted < 0) { /* the callback will never run: its reference too */
		waiter_unref(w);
		waiter_unref(w);
		return submitted;
	}
	timespec_in(&deadline, c->timeout_ms);
	return wait_result(w, &deadline, &res, result);
}

/* Post @payload (taken) to the loop with a waiter; NULL and *@err on failure (payload and @sub
 * freed). */
static struct waiter *submit(struct ferry_gcs_client *c, unsigned shard, uint16_t type,
			     void *payload, size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			     int *err)
{
	struct waiter *w = NULL;
	int ret = -EDEADLK;

	if (!ferry__gcs_client_on_loop(c))
		w = waiter_new();
	if (!w) {
		ret = ferry__gcs_client_on_loop(c) ? -EDEADLK : -ENOMEM;
		ferry__free(sub);
		ferry__free(payload);
		*err = ret;
		return NULL;
	}
	ret = ferry__gcs_client_send(c, shard, type, payload, len, seq, sub, waiter_reply, w);
	if (ret == 0)
		return w;
	waiter_unref(w);
	waiter_unref(w);
	*err = ret;
	return NULL;
}

int ferry__gcs_client_call(struct ferry_gcs_client *c, unsigned shard, uint16_t type, void *payload,
			   size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			   struct ferry__gcs_result *res)
{
	struct timespec deadline;
	int ret = 0;
	struct waiter *w;

	timespec_in(&deadline, c->timeout_ms);
	w = submit(c, shard, type, payload, len, seq, sub, &ret);
	memset(res, 0, sizeof(*res));
	if (!w) {
		res->status = ret;
		return ret;
	}
	return wait_result(w, &deadline, res, NULL);
}

void ferry__gcs_client_call_many(struct ferry_gcs_client *c, struct ferry__gcs_call *calls,
				 size_t n)
{
	struct waiter **ws = ferry__calloc(n ? n : 1, sizeof(*ws));
	struct timespec deadline;

	/* Every request is posted before the first wait: they leave in one go (one loop wake-up,
	 * one send where they fit) and the server answers them in one pass. Short of memory for
	 * the waiters' array: one at a time, as ferry__gcs_client_apply_many() does without its
	 * own array; every built request is still sent. One deadline for the batch: n requests
	 * never wait n timeouts. */
	timespec_in(&deadline, c->timeout_ms);
	for (size_t i = 0; i < n; i++) {
		struct ferry__gcs_result res;

		if (!calls[i].payload) /* not built: its status is the build's error */
			continue;
		if (ws) {
			ws[i] = submit(c, calls[i].shard, calls[i].type, calls[i].payload,
				       calls[i].len, calls[i].seq, NULL, &calls[i].status);
		} else {
			calls[i].status = ferry__gcs_client_call(c, calls[i].shard, calls[i].type,
								 calls[i].payload, calls[i].len,
								 calls[i].seq, NULL, &res);
			ferry__free(res.value);
		}
		calls[i].payload = NULL;
	}
	if (!ws)
		return;
	for (size_t i = 0; i < n; i++) {
		struct ferry__gcs_result res = {0};

		if (!ws[i])
			continue;
		calls[i].status = wait_result(ws[i], &deadline, &res, NULL);
		ferry__free(res.value);
	}
	ferry__free(ws);
}

uint64_t ferry__gcs_client_next_seq(struct ferry_gcs_client *c)
{
	return atomic_fetch_add(&c->next_seq, 1);
}

unsigned ferry__gcs_client_nshards(const struct ferry_gcs_client *c)
{
	return c->nshards;
}

/* ---- setup and teardown ---- */

static int parse_address(const char *a, struct shard *s)
{
	const char *colon = a ? strrchr(a, ':') : NULL;
	char *end;
	unsigned long port;

	if (!colon || colon == a || (size_t)(colon - a) >= sizeof(s->host))
		return -EINVAL;
	port = strtoul(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port == 0 || port > 65535)
		return -EINVAL;
	memcpy(s->host, a, (size_t)(colon - a));
	s->host[colon - a] = '\0';
	s->port = (uint16_t)port;
	return 0;
}

static void *loop_main(void *arg)
{
	struct ferry_gcs_client *c = arg;

	atomic_store(&c->loop_tid, pthread_self());
	atomic_store(&c->loop_known, true);
	ferry__loop_thread_run(c->loop, "ferry-gcs-cli", COMP);
	return NULL;
}

/* Lock held. @err, unless it is -ETIMEDOUT and a shard that never answered had its attempts
 * refused or unrouted (nothing listens there): then that, of more use to whoever ran out of
 * time than "timed out". */
static int unreached_why(const struct ferry_gcs_client *c, int err)
{
	for (unsigned i = 0; err == -ETIMEDOUT && i < c->nshards; i++) {
		int e = c->shards[i].last_error;

		if (!c->shards[i].ever_connected &&
		    (e == -ECONNREFUSED || e == -EHOSTUNREACH || e == -ENETUNREACH))
			return e;
	}
	return err;
}

int ferry__gcs_client_unreached_why(struct ferry_gcs_client *c, int err)
{
	pthread_mutex_lock(&c->lock);
	err = unreached_why(c, err);
	pthread_mutex_unlock(&c->lock);
	return err;
}

/* Wait until every shard connected once, one refused us, or the timeout (CLOCK_MONOTONIC). */
static int wait_connected(struct ferry_gcs_client *c)
{
	struct timespec deadline;
	int ret = 0;

	timespec_in(&deadline, c->timeout_ms);
	pthread_mutex_lock(&c->lock);
	for (;;) {
		unsigned n = 0;

		for (unsigned i = 0; i < c->nshards; i++)
			n += c->shards[i].ever_connected;
		if (n == c->nshards || c->connect_error)
			break;
		if (pthread_cond_timedwait(&c->cond, &c->lock, &deadline) == ETIMEDOUT) {
			ret = -ETIMEDOUT;
			break;
		}
	}
	ret = unreached_why(c, ret);
	if (ret == 0)
		ret = c->connect_error;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* Loop thread: how far each shard's attempt in progress got (the handshake deadline of a
 * connection that came up runs past the connect's: it is still open when the wait ends). */
static int note_progress(void *arg)
{
	struct ferry_gcs_client *c = arg;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];

		if (s->conn && !s->connected)
			s->progress = ferry__conn_progress(s->conn);
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* A connect that failed against a server that took the TCP connection says whether that server
 * is a Ferry GCS at all: a bare "Protocol error" or "Timed out" does not tell a wrong port (an
 * HTTP server, a database) from a GCS that is slow or of another version. */
static void say_why_not_connected(struct ferry_gcs_client *c, int err)
{
	if (err != -EPROTO && err != -ETIMEDOUT)
		return;
	if (err == -ETIMEDOUT)
		(void)ferry__loop_call(c->loop, note_progress, c);
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->nshards; i++) {
		const struct shard *s = &c->shards[i];

		if (s->ever_connected || s->progress != FERRY__CONN_STREAM)
			continue;
		if (err == -EPROTO && s->last_error == -EPROTO)
			FLOG_ERROR(COMP,
				   "the server at %s:%u is not a Ferry GCS (its reply is not a "
				   "Ferry frame)",
				   s->host, s->port);
		else if (err == -ETIMEDOUT)
			FLOG_ERROR(COMP,
				   "the server at %s:%u accepted the connection but did not answer "
				   "the handshake in %u ms: not a Ferry GCS, or one too busy to "
				   "answer",
				   s->host, s->port, c->timeout_ms);
	}
	pthread_mutex_unlock(&c->lock);
}

static int client_init(struct ferry_gcs_client *c, const struct ferry_gcs_client_opts *o,
		       struct ferry__loop *loop)
{
	struct sockaddr_storage addr;
	socklen_t addr_len;
	int ret;

	c->nshards = (unsigned)o->naddresses;
	ferry__gcs_client_scopes_init(c);
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
	c->reconnect_ms = o->reconnect_ms ? o->reconnect_ms : 100;
	atomic_init(&c->next_seq, 1);
	atomic_init(&c->refs, 1);
	atomic_init(&c->closing, false);
	ferry_id_random(c->id.bytes, sizeof(c->id.bytes));
	pthread_mutex_init(&c->lock, NULL);
	ferry__cond_init_monotonic(&c->cond);
	memcpy(c->token, o->token, o->token_len);
	c->token_len = o->token_len;
	c->kind = (uint8_t)o->kind;
	for (unsigned i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];

		s->client = c;
		s->index = i;
		s->reconnect.data = s;
		ret = parse_address(o->addresses[i], s);
		if (ret < 0) {
			FLOG_ERROR(COMP, "bad shard address '%s' (want host:port)",
				   o->addresses[i] ? o->addresses[i] : "(null)");
			return ret;
		}
		/* A name that does not resolve now is a typo far more often than a DNS entry yet
		 * to come: refused at once (net.c logs the name), not retried until the timeout
		 * with a line per attempt and "timed out" at the end. */
		ret = ferry__net_resolve(s->host, s->port, &addr, &addr_len);
		if (ret < 0)
			return ret;
	}
	c->own_loop = loop == NULL;
	if (loop) { /* its thread is learnt on its first pass: until then, calls post */
		c->loop = loop;
		return 0;
	}
	return ferry__loop_create(NULL, &c->loop);
}

/* A given loop: learn its thread on its first pass (it may be run by another thread than the
 * one that attached us). Posts run in order, so every later callback of ours knows it. */
static void note_loop_thread(void *arg, int status)
{
	struct ferry_gcs_client *c = arg;

	if (status == 0) {
		atomic_store(&c->loop_tid, pthread_self());
		atomic_store(&c->loop_known, true);
	}
	client_unref(c);
}

/* The public kinds are the wire's PeerKind values; a GCS or a store is no client kind. */
_Static_assert((int)FERRY_GCS_CLIENT_DRIVER == (int)FERRY__WIRE_PEER_KIND_DRIVER &&
		       (int)FERRY_GCS_CLIENT_WORKER == (int)FERRY__WIRE_PEER_KIND_WORKER &&
		       (int)FERRY_GCS_CLIENT_NODE == (int)FERRY__WIRE_PEER_KIND_NODE &&
		       (int)FERRY_GCS_CLIENT_CLI == (int)FERRY__WIRE_PEER_KIND_CLI &&
		       (int)FERRY_GCS_CLIENT_SCHEDULER == (int)FERRY__WIRE_PEER_KIND_SCHEDULER,
	       "enum ferry_gcs_client_kind follows schema/common.fbs PeerKind");

static bool kind_ok(enum ferry_gcs_client_kind kind)
{
	switch (kind) {
	case FERRY_GCS_CLIENT_DRIVER:
	case FERRY_GCS_CLIENT_WORKER:
	case FERRY_GCS_CLIENT_NODE:
	case FERRY_GCS_CLIENT_CLI:
	case FERRY_GCS_CLIENT_SCHEDULER:
		return true;
	}
	return false;
}

static int client_new(const struct ferry_gcs_client_opts *opts, struct ferry__loop *loop,
		      struct ferry_gcs_client **out)
{
	struct ferry_gcs_client *c;
	int ret;

	if (!opts || !opts->addresses || !opts->naddresses || opts->naddresses > 64 ||
	    !opts->token || !opts->token_len || opts->token_len > FERRY__GCS_TOKEN_MAX) {
		FLOG_ERROR(COMP, "client options need 1-64 shard addresses and a token");
		return -EINVAL;
	}
	if (!kind_ok(opts->kind)) {
		FLOG_ERROR(COMP, "client options: unknown client kind %d", (int)opts->kind);
		return -EINVAL;
	}
	c = ferry__calloc(1, sizeof(*c) + opts->naddresses * sizeof(struct shard));
	if (!c)
		return -ENOMEM;
	ret = client_init(c, opts, loop);
	if (ret < 0) {
		client_free(c);
		return ret;
	}
	for (unsigned i = 0; i < c->nshards; i++)
		start_connect(&c->shards[i]);
	*out = c;
	return 0;
}

int ferry__gcs_client_connect_on(struct ferry__loop *loop, const struct ferry_gcs_client_opts *opts,
				 struct ferry_gcs_client **out)
{
	struct ferry_gcs_client *c;
	int ret;

	if (!loop)
		return -EINVAL;
	ret = client_new(opts, loop, &c);
	if (ret < 0)
		return ret;
	atomic_fetch_add(&c->refs, 1);
	if (ferry__loop_post(loop, note_loop_thread, c) < 0) {
		/* Cannot happen on a live loop; then the attaching thread is taken for its own. */
		atomic_fetch_sub(&c->refs, 1);
		atomic_store(&c->loop_tid, pthread_self());
		atomic_store(&c->loop_known, true);
	}
	*out = c;
	return 0;
}

int ferry_gcs_client_connect(const struct ferry_gcs_client_opts *opts,
			     struct ferry_gcs_client **out)
{
	struct ferry_gcs_client *c;
	int ret = client_new(opts, NULL, &c);

	if (ret < 0)
		return ret;
	ret = pthread_create(&c->thread, NULL, loop_main, c);
	if (ret) {
		ferry_gcs_client_destroy(c);
		return -ret;
	}
	c->thread_started = true;
	ret = wait_connected(c);
	if (ret < 0) {
		say_why_not_connected(c, ret);
		ferry_gcs_client_destroy(c);
		return ret;
	}
	*out = c;
	return 0;
}

/* The caller's loop keeps running: end what is ours on it now; the closes finish later. */
static void destroy_on_loop(struct ferry_gcs_client *c)
{
	for (unsigned i = 0; i < c->nshards; i++) {
		struct shard *s = &c->shards[i];

		(void)ferry__loop_timer_stop(&s->reconnect);
		fail_pending(s, -ECANCELED);
		if (s->conn)
			ferry__conn_close(s->conn); /* its on_close drops its reference */
	}
}

void ferry_gcs_client_destroy(struct ferry_gcs_client *c)
{
	if (!c)
		return;
	atomic_store(&c->closing, true);
	if (!c->own_loop) {
		destroy_on_loop(c);
		client_unref(c);
		return;
	}
	ferry__loop_stop(c->loop);
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	/* No loop thread now: this thread owns the loop. Destroy ends every connection, timer
	 * (each request's deadline: -ECANCELED) and unrun post; what is left is failed below. */
	ferry__loop_destroy(c->loop);
	for (unsigned i = 0; i < c->nshards; i++)
		fail_pending(&c->shards[i], -ECANCELED);
	client_unref(c);
}

int ferry__gcs_client_local_addr(struct ferry_gcs_client *c, unsigned shard,
				 struct sockaddr_storage *ss, socklen_t *len)
{
	int ret = -ENOTCONN;

	if (shard >= c->nshards)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	if (c->shards[shard].local_len) {
		*ss = c->shards[shard].local;
		*len = c->shards[shard].local_len;
		ret = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

void ferry_gcs_free(void *p)
{
	ferry__free(p);
}
