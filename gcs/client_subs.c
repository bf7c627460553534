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

/* The scope index's key: a subscription's channel and key, zero-padded. Deliveries find the
 * subscriptions of an event's key and of its whole channel by two lookups: a node follows up
 * to thousands of objects (transport/objmgr_locs.c), and walking them all with a key compare
 * for every event and every unsubscribe cost its loop as much as the pull it served. */
struct csub_scope {
	uint8_t channel;
	uint8_t key_size;
	uint8_t key[20];
};

static struct csub_scope scope_key(uint8_t channel, const void *key, size_t key_size)
{
	struct csub_scope k;

	memset(&k, 0, sizeof(k));
	k.channel = channel;
	k.key_size = (uint8_t)key_size;
	if (key_size)
		memcpy(k.key, key, key_size);
	return k;
}

void ferry__gcs_client_scopes_init(struct ferry_gcs_client *c)
{
	ferry__hashmap_init(&c->scopes, sizeof(struct csub_scope),
			    sizeof(struct ferry__gcs_csub *));
}

int ferry__gcs_client_sub_list(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub)
{
	struct csub_scope k = scope_key(sub->channel, sub->key, sub->key_size);
	void *slot;
	int ret = ferry__hashmap_put(&c->scopes, &k, &slot);

	if (ret < 0)
		return ret;
	sub->same = *(struct ferry__gcs_csub **)slot;
	*(struct ferry__gcs_csub **)slot = sub;
	sub->next = c->subs;
	if (c->subs)
		c->subs->pprev = &sub->next;
	sub->pprev = &c->subs;
	c->subs = sub;
	return 0;
}

/* The first subscription of scope @k, or NULL. */
static struct ferry__gcs_csub *scope_first(const struct ferry_gcs_client *c,
					   const struct csub_scope *k)
{
	struct ferry__gcs_csub **slot = ferry__hashmap_get(&c->scopes, k);

	return slot ? *slot : NULL;
}

/* Take @sub out of the list and the index, and free it. */
static void sub_free(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub)
{
	struct csub_scope k = scope_key(sub->channel, sub->key, sub->key_size);
	struct ferry__gcs_csub **slot = ferry__hashmap_get(&c->scopes, &k);

	*sub->pprev = sub->next;
	if (sub->next)
		sub->next->pprev = sub->pprev;
	for (struct ferry__gcs_csub **pp = slot; pp && *pp; pp = &(*pp)->same)
		if (*pp == sub) {
			*pp = sub->same;
			break;
		}
	if (slot && !*slot)
		(void)ferry__hashmap_remove(&c->scopes, &k, NULL);
	ferry__free(sub);
}

/* Free @sub, or only mark it dead while a delivery walks the subscriptions. Its subscribe, if
 * still pending, forgets it (through sub->req, which creq_complete clears: no walk of every
 * shard's pending requests per unsubscribe). */
static void sub_remove(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub)
{
	if (sub->req) {
		sub->req->sub = NULL;
		sub->req->sub_listed = false;
		sub->req = NULL;
	}
	if (c->delivering) {
		sub->dead = true;
		sub->dead_next = c->dead;
		c->dead = sub;
		return;
	}
	sub_free(c, sub);
}

void ferry__gcs_client_sub_drop(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub)
{
	if (!sub->dead)
		sub_remove(c, sub);
}

unsigned ferry__gcs_client_subs_remove(struct ferry_gcs_client *c, unsigned shard,
				       const struct ferry__gcs_csub *scope)
{
	struct csub_scope k = scope_key(scope->channel, scope->key, scope->key_size);
	struct ferry__gcs_csub *sub = scope_first(c, &k), *next;
	unsigned n = 0;

	for (; sub; sub = next) {
		next = sub->same; /* before sub_remove frees it */
		if (!sub->dead && (sub->shard_mask & (1ull << shard))) {
			n++;
			sub_remove(c, sub);
		}
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
	c->dead = NULL;
	ferry__hashmap_fini(&c->scopes);
}

/* After a delivery: free what its callbacks unsubscribed. */
static void subs_sweep(struct ferry_gcs_client *c)
{
	while (c->dead) {
		struct ferry__gcs_csub *sub = c->dead;

		c->dead = sub->dead_next;
		sub_free(c, sub);
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

/* @ev to each matching subscription of the chain from @sub, following the client's list
 * (@by_scope false) or the scope index's chain (true). A callback that unsubscribes only marks
 * a subscription dead (c->delivering), so the walk's next link stays valid. */
static void deliver_chain(struct ferry__gcs_csub *sub, bool by_scope, unsigned shard,
			  const struct ferry_gcs_event *ev)
{
	for (; sub; sub = by_scope ? sub->same : sub->next)
		if (sub_matches(sub, shard, ev))
			sub->fn(sub->arg, ev);
}

/* The subscriptions @ev goes to: a keyed event to those of its key and those of its whole
 * channel (two lookups), an event without a key to every one of its channel. */
static void deliver_event(struct ferry_gcs_client *c, unsigned shard,
			  const struct ferry_gcs_event *ev)
{
	struct csub_scope k;

	if (!ev->key_size) {
		deliver_chain(c->subs, false, shard, ev);
		return;
	}
	if (ev->key_size <= sizeof(k.key)) { /* no subscription has a longer key */
		k = scope_key((uint8_t)ev->channel, ev->key, ev->key_size);
		deliver_chain(scope_first(c, &k), true, shard, ev);
	}
	k = scope_key((uint8_t)ev->channel, NULL, 0);
	deliver_chain(scope_first(c, &k), true, shard, ev);
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
		deliver_event(c, s->index, &ev);
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
