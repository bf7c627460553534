/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's engine: a loop thread with one framed connection per shard, requests
 * matched to replies by seq, reconnection, resubscription and event delivery.
 *
 * DESIGN
 * - Threads: callers build a request (seq from an atomic counter) and post it to the loop
 *   thread with a waiter (mutex + condvar, refcounted: a caller that times out drops its
 *   reference and the late reply frees it). Everything else (connections, the pending lists,
 *   subscriptions, watermarks) belongs to the loop thread.
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
#include "common/conn.h"
#include "common/log.h"
#include "common/wire.h"
#include "gcs/client_int.h"

#define COMP "gcs-client"

static uint64_t now_ms_rt(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void timespec_in(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* ---- waiters ---- */

static void waiter_unref(struct waiter *w)
{
	if (atomic_fetch_sub(&w->refs, 1) != 1)
		return;
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	ferry__free(w->res.value);
	ferry__free(w);
}

/* Loop thread: the request is answered (or failed); the waiter learns it, the request is freed. */
static void creq_complete(struct creq *r, int status, const void *value, size_t size,
			  uint64_t epoch)
{
	struct waiter *w = r->waiter;

	pthread_mutex_lock(&w->lock);
	w->res.status = status;
	w->res.epoch = epoch;
	if (size && (w->res.value = ferry__malloc(size)))
		memcpy(w->res.value, value, size);
	else if (size)
		w->res.status = -ENOMEM;
	w->res.size = w->res.value ? size : 0;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	waiter_unref(w);
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
		FLOG_WARN(COMP, "send to shard %u failed: %s", s->index, strerror(-ret));
		ferry__conn_close(s->conn);
	}
}

static void resubscribe(struct shard *s)
{
	struct ferry_gcs_client *c = s->client;
	int ret;

	for (struct ferry__gcs_csub *sub = c->subs; sub; sub = sub->next) {
		struct ferry__wire_gcs_subscribe m = {0};

		if (!(sub->shard_mask & (1ull << s->index)))
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
				  strerror(-ret));
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
		FLOG_INFO(COMP, "shard %u reconnected", s->index);
	resubscribe(s);
	for (struct creq *r = s->pending; r; r = r->next)
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

static void on_close(struct ferry__conn *conn, int err)
{
	struct shard *s = ferry__conn_data(conn);
	struct ferry_gcs_client *c = s->client;

	s->conn = NULL;
	s->connected = false;
	if (c->closing)
		return;
	FLOG_INFO(COMP, "shard %u connection closed: %s", s->index, strerror(-err));
	if (err == -EACCES || err == -EPROTO) {
		pthread_mutex_lock(&c->lock);
		if (!s->ever_connected)
			c->connect_error = err;
		pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
	ferry__loop_timer_start(c->loop, &s->reconnect, c->reconnect_ms, 0, on_reconnect_timer);
}

static void handle_reply(struct shard *s, const void *payload)
{
	struct ferry__wire_gcs_reply_view v = ferry__wire_gcs_reply_root_verified(payload);
	uint64_t seq = ferry__wire_gcs_reply_seq(v);

	for (struct creq **p = &s->pending; *p; p = &(*p)->next) {
		struct creq *r = *p;

		if (r->seq != seq)
			continue;
		*p = r->next;
		if (r->sub && ferry__wire_gcs_reply_status(v) < 0)
			ferry__gcs_client_sub_drop(s->client, r->sub);
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
	hs.peer_kind = FERRY__WIRE_PEER_KIND_DRIVER;
	hs.pid = (int32_t)getpid();
	hs.name = "gcs-client";
	co.cb = &conn_cb;
	co.data = s;
	co.handshake = &hs;
	co.connect_timeout_ms = c->timeout_ms;
	ret = ferry__conn_connect_tcp(c->loop, s->host, s->port, &co, &s->conn);
	if (ret < 0) {
		s->conn = NULL;
		FLOG_WARN(COMP, "connecting to shard %u failed: %s", s->index, strerror(-ret));
		ferry__loop_timer_start(c->loop, &s->reconnect, c->reconnect_ms, 0,
					on_reconnect_timer);
	}
}

/* ---- requests ---- */

static void on_submit(void *arg, int status)
{
	struct creq *r = arg;
	struct shard *s = r->shard;

	if (status < 0) {
		ferry__free(r->sub);
		creq_complete(r, status, NULL, 0, 0);
		return;
	}
	if (r->sub) { /* remembered at once, so a reconnect resubscribes it */
		r->sub->next = s->client->subs;
		s->client->subs = r->sub;
	}
	r->next = s->pending;
	s->pending = r;
	if (s->connected)
		shard_send(s, r);
}

/* Wait for @w until @deadline (CLOCK_REALTIME), then drop the caller's reference. */
static int wait_result(struct waiter *w, const struct timespec *deadline,
		       struct ferry__gcs_result *res)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	while (!w->done && ret == 0)
		ret = pthread_cond_timedwait(&w->cond, &w->lock, deadline);
	if (w->done) {
		*res = w->res;
		w->res.value = NULL;
		ret = res->status;
	} else {
		ret = -ETIMEDOUT;
		res->status = ret;
	}
	pthread_mutex_unlock(&w->lock);
	waiter_unref(w);
	return ret;
}

/* Post @payload (taken) to the loop with a waiter; NULL and *@err on failure (payload and @sub
 * freed). */
static struct waiter *submit(struct ferry_gcs_client *c, unsigned shard, uint16_t type,
			     void *payload, size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			     int *err)
{
	struct creq *r = ferry__calloc(1, sizeof(*r));
	struct waiter *w = ferry__calloc(1, sizeof(*w));
	int ret = -ENOMEM;

	if (!r || !w)
		goto err_free;
	r->sub = sub;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	atomic_init(&w->refs, 2);
	r->waiter = w;
	r->shard = &c->shards[shard];
	r->seq = seq;
	r->type = type;
	r->payload = payload;
	r->len = len;
	ret = ferry__loop_post(c->loop, on_submit, r);
	if (ret == 0)
		return w;
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
err_free:
	ferry__free(w);
	ferry__free(r);
	ferry__free(sub);
	ferry__free(payload);
	*err = ret;
	return NULL;
}

int ferry__gcs_client_call(struct ferry_gcs_client *c, unsigned shard, uint16_t type, void *payload,
			   size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
			   struct ferry__gcs_result *res)
{
	struct timespec deadline;
	int ret = 0;
	struct waiter *w = submit(c, shard, type, payload, len, seq, sub, &ret);

	memset(res, 0, sizeof(*res));
	if (!w) {
		res->status = ret;
		return ret;
	}
	timespec_in(&deadline, c->timeout_ms);
	return wait_result(w, &deadline, res);
}

void ferry__gcs_client_call_many(struct ferry_gcs_client *c, struct ferry__gcs_call *calls,
				 size_t n)
{
	struct waiter **ws = ferry__calloc(n ? n : 1, sizeof(*ws));
	struct timespec deadline;

	/* Every request is posted before the first wait: they leave in one go (one loop wake-up,
	 * one send where they fit) and the server answers them in one pass. Short of memory for
	 * the waiters' array: one at a time, as ferry__gcs_client_apply_many() does without its
	 * own array; every built request is still sent. */
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
	/* One deadline for the batch: n requests never wait n timeouts. */
	timespec_in(&deadline, c->timeout_ms);
	for (size_t i = 0; i < n; i++) {
		struct ferry__gcs_result res = {0};

		if (!ws[i])
			continue;
		calls[i].status = wait_result(ws[i], &deadline, &res);
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

	ferry__loop_thread_run(c->loop, "ferry-gcs-cli", COMP);
	return NULL;
}

/* Wait until every shard connected once, one refused us, or the timeout. */
static int wait_connected(struct ferry_gcs_client *c)
{
	uint64_t deadline = now_ms_rt() + c->timeout_ms;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		unsigned n = 0;

		for (unsigned i = 0; i < c->nshards; i++)
			n += c->shards[i].ever_connected;
		if (n == c->nshards || c->connect_error)
			break;
		if (now_ms_rt() >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		struct timespec ts;

		timespec_in(&ts, 20);
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	if (ret == 0)
		ret = c->connect_error;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static int client_init(struct ferry_gcs_client *c, const struct ferry_gcs_client_opts *o)
{
	int ret;

	c->nshards = (unsigned)o->naddresses;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
	c->reconnect_ms = o->reconnect_ms ? o->reconnect_ms : 100;
	atomic_init(&c->next_seq, 1);
	ferry_id_random(c->id.bytes, sizeof(c->id.bytes));
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	memcpy(c->token, o->token, o->token_len);
	c->token_len = o->token_len;
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
	}
	return ferry__loop_create(NULL, &c->loop);
}

int ferry_gcs_client_connect(const struct ferry_gcs_client_opts *opts,
			     struct ferry_gcs_client **out)
{
	struct ferry_gcs_client *c;
	int ret;

	if (!opts || !opts->addresses || !opts->naddresses || opts->naddresses > 64 ||
	    !opts->token || !opts->token_len || opts->token_len > FERRY__GCS_TOKEN_MAX) {
		FLOG_ERROR(COMP, "client options need 1-64 shard addresses and a token");
		return -EINVAL;
	}
	c = ferry__calloc(1, sizeof(*c) + opts->naddresses * sizeof(struct shard));
	if (!c)
		return -ENOMEM;
	ret = client_init(c, opts);
	if (ret < 0)
		goto err_free;
	for (unsigned i = 0; i < c->nshards; i++)
		start_connect(&c->shards[i]);
	ret = pthread_create(&c->thread, NULL, loop_main, c);
	if (ret) {
		ret = -ret;
		goto err_destroy_loop;
	}
	c->thread_started = true;
	ret = wait_connected(c);
	if (ret < 0) {
		ferry_gcs_client_destroy(c);
		return ret;
	}
	*out = c;
	return 0;

err_destroy_loop:
	c->closing = true;
	ferry__loop_destroy(c->loop);
err_free:
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	ferry__free(c);
	return ret;
}

void ferry_gcs_client_destroy(struct ferry_gcs_client *c)
{
	if (!c)
		return;
	ferry__loop_stop(c->loop);
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	/* No loop thread now: this thread owns the loop. Destroy ends every connection, timer and
	 * unrun post; requests still pending are failed below. */
	c->closing = true;
	ferry__loop_destroy(c->loop);
	for (unsigned i = 0; i < c->nshards; i++) {
		struct creq *r = c->shards[i].pending, *next;

		for (; r; r = next) {
			next = r->next;
			creq_complete(r, -ECANCELED, NULL, 0, 0);
		}
	}
	ferry__gcs_client_subs_free(c);
	ferry__fb_builder_fini(&c->fb);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	ferry__free(c);
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
