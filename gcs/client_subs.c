/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's subscriptions: subscribe and unsubscribe (blocking and async, fanned out to
 * every shard a scope lives on), the client's list of subscriptions, and the delivery of
 * published batches to them.
 *
 * Thread model: the list belongs to the loop thread. A subscription joins it when its request
 * reaches the loop (so a reconnect resubscribes it before the reply), and leaves it when an
 * unsubscribe reaches the loop (so no later batch is delivered to it and no reconnect renews
 * it). An unsubscribe made from inside an event callback only marks the subscription dead: the
 * delivery walking the list frees it when it is done.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"
#include "gcs/client_int.h"

#define COMP "gcs-client"

/* ---- fan-out: one user callback for the requests of several shards ---- */

struct fan {
	atomic_uint left;     /* requests not answered yet */
	atomic_int status;    /* the first error, else 0 */
	ferry_gcs_done_fn cb; /* the user's callback */
	void *arg;	      /* for cb */
};

static void fan_one(struct fan *f, int status)
{
	int zero = 0;

	if (status < 0)
		atomic_compare_exchange_strong(&f->status, &zero, status);
	if (atomic_fetch_sub(&f->left, 1) != 1)
		return;
	f->cb(f->arg, atomic_load(&f->status), NULL);
	ferry__free(f);
}

static void fan_reply(void *arg, const struct ferry__gcs_reply *r)
{
	fan_one(arg, r->status);
}

/* The shards the scope (@channel, @key) lives on: object-location scopes on the object's shard
 * (whole channel: every shard), others on shard 0. 0 or -EINVAL (logged). */
static int scope_shards(const struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
			const void *key, size_t key_size, uint64_t *mask)
{
	bool objects = channel == FERRY_GCS_CH_OBJECT_LOCATIONS;

	if (!c || (unsigned)channel >= FERRY_GCS_CH_COUNT || key_size > 20 || (key_size && !key) ||
	    (objects && key_size && key_size != 20)) {
		FLOG_ERROR(COMP, "bad subscription scope (channel %d, %zu-byte key)", channel,
			   key_size);
		return -EINVAL;
	}
	if (!objects)
		*mask = 1;
	else if (key_size)
		*mask = 1ull << ferry_gcs_object_shard((const struct ferry_object_id *)key,
						       c->nshards);
	else
		*mask = c->nshards == 64 ? ~0ull : (1ull << c->nshards) - 1;
	return 0;
}

/* The GcsSubscribe (or, for an unsub scope, GcsUnsubscribe) of @sub to @shard (@sub taken). */
static int scope_send(struct ferry_gcs_client *c, unsigned shard, struct ferry__gcs_csub *sub,
		      struct fan *f)
{
	struct ferry__fb_builder b = {0};
	uint64_t seq = ferry__gcs_client_next_seq(c);
	uint16_t type;
	size_t len = 0;
	void *p;
	int ret;

	if (sub->unsub) {
		struct ferry__wire_gcs_unsubscribe m = {0};

		m.seq = seq;
		m.channel = sub->channel;
		m.key = sub->key_size ? sub->key : NULL;
		m.key_count = sub->key_size;
		type = FERRY__WIRE_MSG_GCS_UNSUBSCRIBE;
		ret = ferry__wire_gcs_unsubscribe_build(&b, &m);
	} else {
		struct ferry__wire_gcs_subscribe m = {0};

		m.seq = seq;
		m.channel = sub->channel;
		m.key = sub->key_size ? sub->key : NULL;
		m.key_count = sub->key_size;
		type = FERRY__WIRE_MSG_GCS_SUBSCRIBE;
		ret = ferry__wire_gcs_subscribe_build(&b, &m);
	}
	if (ret == 0 && (p = ferry__malloc(ferry__fb_builder_size(&b)))) {
		len = ferry__fb_builder_size(&b);
		memcpy(p, ferry__fb_builder_data(&b), len);
	} else {
		p = NULL;
		ret = ret < 0 ? ret : -ENOMEM;
	}
	ferry__fb_builder_fini(&b);
	if (!p) {
		ferry__free(sub);
		return ret;
	}
	return ferry__gcs_client_send(c, shard, type, p, len, seq, sub, fan_reply, f);
}

/* One request per shard of @mask, all answered into one call of @cb. */
static int scope_fan(struct ferry_gcs_client *c, uint64_t mask, const struct ferry__gcs_csub *tmpl,
		     ferry_gcs_done_fn cb, void *arg)
{
	struct fan *f = ferry__calloc(1, sizeof(*f));
	unsigned n = (unsigned)__builtin_popcountll(mask), sent = 0;
	int ret = 0;

	if (!f)
		return -ENOMEM;
	atomic_init(&f->left, n);
	atomic_init(&f->status, 0);
	f->cb = cb;
	f->arg = arg;
	for (unsigned i = 0; i < c->nshards; i++) {
		struct ferry__gcs_csub *sub;

		if (!(mask & (1ull << i)))
			continue;
		sub = ferry__malloc(sizeof(*sub));
		ret = sub ? 0 : -ENOMEM;
		if (sub) {
			*sub = *tmpl;
			sub->shard_mask = 1ull << i;
			ret = scope_send(c, i, sub, f);
		}
		if (ret < 0 && sent == 0) { /* nothing left: the callback will never run */
			ferry__free(f);
			return ret;
		}
		if (ret < 0) /* short of memory or closing after the first: counted as answered */
			fan_one(f, ret);
		sent++;
	}
	return 0;
}

static void scope_init(struct ferry__gcs_csub *s, enum ferry_gcs_channel channel, const void *key,
		       size_t key_size)
{
	memset(s, 0, sizeof(*s));
	s->channel = (uint8_t)channel;
	s->key_size = (uint8_t)key_size;
	if (key_size)
		memcpy(s->key, key, key_size);
}

int ferry_gcs_subscribe_async(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
			      const void *key, size_t key_size, ferry_gcs_event_fn fn, void *fn_arg,
			      ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_csub tmpl;
	uint64_t mask;
	int ret = scope_shards(c, channel, key, key_size, &mask);

	if (ret < 0 || !fn || !cb)
		return ret < 0 ? ret : -EINVAL;
	scope_init(&tmpl, channel, key, key_size);
	tmpl.fn = fn;
	tmpl.arg = fn_arg;
	return scope_fan(c, mask, &tmpl, cb, arg);
}

int ferry_gcs_subscribe(struct ferry_gcs_client *c, enum ferry_gcs_channel channel, const void *key,
			size_t key_size, ferry_gcs_event_fn fn, void *arg)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);
	int ret = FERRY__GCS_WAIT(c, w, NULL,
				  ferry_gcs_subscribe_async(c, channel, key, key_size, fn, arg,
							    ferry__gcs_sync_done, w));

	return ret < 0 ? ret : 0;
}

int ferry_gcs_unsubscribe_async(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
				const void *key, size_t key_size, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_csub tmpl;
	uint64_t mask;
	int ret = scope_shards(c, channel, key, key_size, &mask);

	if (ret < 0 || !cb)
		return ret < 0 ? ret : -EINVAL;
	scope_init(&tmpl, channel, key, key_size);
	tmpl.unsub = true;
	return scope_fan(c, mask, &tmpl, cb, arg);
}

int ferry_gcs_unsubscribe(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
			  const void *key, size_t key_size)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_unsubscribe_async(c, channel, key, key_size, ferry__gcs_sync_done, w));
}

/* ---- the list (loop thread) ---- */

/* Unlink @sub and free it, or only mark it dead while a delivery walks the list. A pending
 * subscribe request that still names it forgets it. */
static void sub_remove(struct ferry_gcs_client *c, struct ferry__gcs_csub **link)
{
	struct ferry__gcs_csub *sub = *link;

	for (unsigned i = 0; i < c->nshards; i++)
		for (struct creq *r = c->shards[i].head; r; r = r->next)
			if (r->sub == sub) {
				r->sub = NULL;
				r->sub_listed = false;
			}
	if (c->delivering) {
		sub->dead = true;
		return;
	}
	*link = sub->next;
	ferry__free(sub);
}

void ferry__gcs_client_sub_drop(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub)
{
	for (struct ferry__gcs_csub **p = &c->subs; *p; p = &(*p)->next) {
		if (*p == sub) {
			sub_remove(c, p);
			return;
		}
	}
}

unsigned ferry__gcs_client_subs_remove(struct ferry_gcs_client *c, unsigned shard,
				       const struct ferry__gcs_csub *scope)
{
	struct ferry__gcs_csub **p = &c->subs;
	unsigned n = 0;

	while (*p) {
		struct ferry__gcs_csub *sub = *p;

		if (!sub->dead && (sub->shard_mask & (1ull << shard)) &&
		    sub->channel == scope->channel && sub->key_size == scope->key_size &&
		    !memcmp(sub->key, scope->key, scope->key_size)) {
			n++;
			sub_remove(c, p);
			if (*p == sub) /* only marked */
				p = &sub->next;
			continue;
		}
		p = &sub->next;
	}
	return n;
}

void ferry__gcs_client_subs_free(struct ferry_gcs_client *c)
{
	struct ferry__gcs_csub *next;

	for (struct ferry__gcs_csub *s = c->subs; s; s = next) {
		next = s->next;
		ferry__free(s);
	}
	c->subs = NULL;
}

/* After a delivery: free what its callbacks unsubscribed. */
static void subs_sweep(struct ferry_gcs_client *c)
{
	struct ferry__gcs_csub **p = &c->subs;

	while (*p) {
		struct ferry__gcs_csub *sub = *p;

		if (sub->dead) {
			*p = sub->next;
			ferry__free(sub);
		} else {
			p = &sub->next;
		}
	}
}

static bool sub_matches(const struct ferry__gcs_csub *sub, unsigned shard,
			const struct ferry_gcs_event *ev)
{
	if (sub->dead || sub->channel != ev->channel || !(sub->shard_mask & (1ull << shard)))
		return false;
	if (!sub->key_size || !ev->key_size)
		return true;
	return sub->key_size == ev->key_size && !memcmp(sub->key, ev->key, ev->key_size);
}

void ferry__gcs_client_deliver(struct shard *s, const void *payload)
{
	struct ferry__wire_gcs_publish_view v = ferry__wire_gcs_publish_root_verified(payload);
	struct ferry_gcs_client *c = s->client;
	uint32_t n = ferry__wire_gcs_publish_items_count(v);
	uint32_t nwm = ferry__wire_gcs_publish_watermarks_count(v);

	c->delivering++;
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_gcs_pub_item_view it = ferry__wire_gcs_publish_items_at(v, i);
		struct ferry_gcs_event ev = {0};

		ev.channel = ferry__wire_gcs_pub_item_channel(it);
		ev.kind = ferry__wire_gcs_pub_item_kind(it);
		ev.key = ferry__wire_gcs_pub_item_key_data(it);
		ev.key_size = ferry__wire_gcs_pub_item_key_count(it);
		ev.seq = ferry__wire_gcs_pub_item_seq(it);
		ev.data = ferry__wire_gcs_pub_item_data_data(it);
		ev.size = ferry__wire_gcs_pub_item_data_count(it);
		ev.client = c;
		for (struct ferry__gcs_csub *sub = c->subs; sub; sub = sub->next)
			if (sub_matches(sub, s->index, &ev))
				sub->fn(sub->arg, &ev);
	}
	if (--c->delivering == 0)
		subs_sweep(c);
	s->epoch = ferry__wire_gcs_publish_epoch(v);
	for (uint32_t ch = 0; ch < nwm && ch < FERRY_GCS_CH_COUNT; ch++) {
		uint64_t wm = ferry__wire_gcs_publish_watermarks_at(v, ch);

		if (wm)
			s->watermarks[ch] = wm;
	}
}
