/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gets and waits that go through the store: objects not sealed yet, spilled ones, and pins a
 * client could not take itself. A get pins each object through the store's own client slot on
 * the client's behalf (released with PlasmaRelease, or when the client goes); a spilled object
 * is restored first, in the background when the store has a loop to post to: the get stays
 * pending until the restore is published (ferry__plasma_waits_restored), and fails with the
 * read's -errno if it fails. What is not there waits, without polling: the wait is counted in the
 * index's seal_waiters and seal_getters, so that every sealer tells the store at once
 * (PlasmaSeal notice; a sealer may hold its notice back briefly only while nobody waits), and
 * the store then looks at the waits for that ID. Counting, then looking again, closes the race with
 * a seal in between (the sealer's CAS-then-load against our add-then-load: index.h). The answer
 * goes out when everything is there, or at the timeout with -ETIMEDOUT for what is missing.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "plasma/client_arena.h"
#include "plasma/server_int.h"

#define PENDING 1

static const char comp[] = "plasma";

/* One more pin of the store's on @id: the count if it holds the bit, else the bit. */
static int store_pin(struct ferry__plasma_server *srv, const struct ferry_object_id *id,
		     struct ferry__plasma_object *out)
{
	struct ferry__plasma_held *h;
	int state = ferry__plasma_index_find(srv->ix, id, out), r;

	h = state >= 0 ? &srv->held[out->index] : NULL;
	if (h && h->count && h->gen == out->gen) {
		/* Pinned by us: the entry cannot go, but a deleted one takes no new pins. */
		if (state == FERRY__PLASMA_DELETING)
			return -ENOENT;
		h->count++;
		return 0;
	}
	r = ferry__plasma_index_pin_bit(srv->ix, FERRY__PLASMA_STORE_SLOT, id, out);
	if (r < 0)
		return r;
	srv->held[out->index] = (struct ferry__plasma_held){out->gen, 1};
	return 0;
}

int ferry__plasma_store_unpin(struct ferry__plasma_server *srv, uint32_t index, uint32_t gen)
{
	struct ferry__plasma_held *h = &srv->held[index & srv->ix->mask];

	if (!h->count || h->gen != gen)
		return 0; /* not ours (a bug: logged by the caller's accounting) */
	if (--h->count)
		return 0;
	return ferry__plasma_index_unpin_bit(srv->ix, FERRY__PLASMA_STORE_SLOT, index);
}

int ferry__plasma_pin_for(struct ferry__plasma_pclient *c, const struct ferry_object_id *id,
			  struct ferry__plasma_object *out)
{
	struct ferry__plasma_store_pin *p;
	int r = store_pin(c->srv, id, out);

	if (r < 0)
		return r;
	r = ferry__hashmap_put(&c->pins, id, (void **)&p);
	if (r < 0) {
		if (ferry__plasma_store_unpin(c->srv, out->index, out->gen) == 1)
			ferry__plasma_store_collect(c->srv->store);
		return r;
	}
	if (r == 1)
		*p = (struct ferry__plasma_store_pin){out->index, out->gen, 0};
	p->count++;
	return 0;
}

/* PENDING if @it is not there yet, else its final status (0: sealed, and pinned for a get). */
static int try_item(struct ferry__plasma_wait *w, struct ferry__plasma_wait_item *it)
{
	struct ferry__plasma_pclient *c = w->client;
	struct ferry__plasma_object o;
	int state = ferry__plasma_index_find(c->srv->ix, &it->id, &o), r;

	if (w->type == FERRY__WIRE_MSG_PLASMA_WAIT)
		return state == FERRY__PLASMA_SEALED || state == FERRY__PLASMA_SPILLED ? 0
										       : PENDING;
	it->restoring = false;
	if (state == FERRY__PLASMA_SPILLED) {
		/* In the background, it ends in ferry__plasma_waits_restored(). */
		r = ferry__plasma_store_restore_begin(c->srv->store, o.index, o.gen);
		it->restoring = r == -EINPROGRESS;
		if (it->restoring)
			return PENDING;
		if (r < 0 && r != -ENOENT)
			return r;
		if (r == 0) /* new memory: whoever holds the old place must learn the new one */
			ferry__plasma_events_moved(c->srv, o.index, o.gen);
	}
	r = ferry__plasma_pin_for(c, &it->id, &it->obj);
	/* Absent, being created, or changing: it may still come. */
	if (r == -ENOENT || r == -EINPROGRESS || r == -EAGAIN)
		return PENDING;
	return r;
}

static uint32_t ready(const struct ferry__plasma_wait *w)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < w->n; i++)
		n += w->items[i].status == 0;
	return n;
}

static bool done(const struct ferry__plasma_wait *w)
{
	return w->type == FERRY__WIRE_MSG_PLASMA_GET ? w->pending == 0 : ready(w) >= w->want;
}

/* Answer now: done, or out of time with no restore pending (one that is counts as there, as
 * a restore on the loop thread did). */
static bool answerable(const struct ferry__plasma_wait *w)
{
	if (done(w))
		return true;
	if (!w->expired)
		return false;
	for (uint32_t i = 0; i < w->n; i++)
		if (w->items[i].status == PENDING && w->items[i].restoring)
			return false;
	return true;
}

/* Not in the index at all, or on its way out: something must bring it here. */
static bool absent(const struct ferry__plasma_index *ix, const struct ferry_object_id *id)
{
	struct ferry__plasma_object o;
	int state = ferry__plasma_index_find(ix, id, &o);

	return state < 0 || state == FERRY__PLASMA_DELETING;
}

/* Try the pending items (those with @id, or all when @id is NULL). Parked, an item for an
 * absent object is a miss. */
static void resolve(struct ferry__plasma_wait *w, const struct ferry_object_id *id)
{
	struct ferry__plasma_pclient *c = w->client;

	for (uint32_t i = 0; i < w->n && !done(w); i++) {
		struct ferry__plasma_wait_item *it = &w->items[i];

		if (it->status != PENDING ||
		    (id && memcmp(id->bytes, it->id.bytes, sizeof(id->bytes)) != 0))
			continue;
		it->status = try_item(w, it);
		if (it->status != PENDING)
			w->pending--;
		else if (w->counted && c->srv->on_miss && !it->miss_episode &&
			 absent(c->srv->ix, &it->id))
			ferry__plasma_miss_note(c->srv, it);
	}
}

static void unlink_wait(struct ferry__plasma_wait *w)
{
	struct ferry__plasma_server *srv = w->client->srv;

	if (!w->counted)
		return;
	if (w->prev)
		w->prev->next = w->next;
	else
		srv->waits = w->next;
	if (w->next)
		w->next->prev = w->prev;
	atomic_fetch_sub(&srv->ix->hdr->seal_getters, 1);
	atomic_fetch_sub(&srv->ix->hdr->seal_waiters, 1);
	w->counted = false;
	for (uint32_t i = 0; i < w->n; i++)
		ferry__plasma_miss_done(srv, &w->items[i]);
	if (ferry__loop_timer_active(&w->timer))
		ferry__loop_timer_stop(&w->timer);
}

static void reply_get(struct ferry__plasma_wait *w)
{
	struct ferry__plasma_pclient *c = w->client;
	struct ferry__wire_plasma_get_reply m = {.seq = w->seq};
	struct ferry__wire_plasma_object *objs = ferry__calloc(w->n + 1, sizeof(*objs));

	if (!objs) {
		/* Nothing can be reported: give this get's pins back and say so. */
		for (uint32_t i = 0; i < w->n; i++)
			if (w->items[i].status == 0)
				ferry__plasma_unpin(c, &w->items[i].id, 1);
		m.status = -ENOMEM;
	}
	for (uint32_t i = 0; objs && i < w->n; i++) {
		const struct ferry__plasma_wait_item *it = &w->items[i];

		objs[i] = (struct ferry__wire_plasma_object){
			.object_id = it->id,
			.status = it->status == PENDING ? -ETIMEDOUT : it->status,
		};
		if (it->status == 0) {
			objs[i].offset = it->obj.offset;
			objs[i].data_size = it->obj.data_size;
			objs[i].metadata_size = it->obj.metadata_size;
			objs[i].index_slot = it->obj.index;
			objs[i].index_gen = it->obj.gen;
		}
	}
	m.objects = objs;
	m.objects_count = objs ? w->n : 0;
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_GET_REPLY,
			   ferry__wire_plasma_get_reply_build(&c->srv->fb, &m));
	ferry__free(objs);
}

static void reply_wait(struct ferry__plasma_wait *w)
{
	struct ferry__plasma_pclient *c = w->client;
	struct ferry__wire_plasma_wait_reply m = {.seq = w->seq};
	struct ferry_object_id *ids = ferry__calloc(w->n + 1, sizeof(*ids));

	if (!ids)
		m.status = -ENOMEM;
	for (uint32_t i = 0; ids && i < w->n; i++)
		if (w->items[i].status == 0)
			ids[m.ready_count++] = w->items[i].id;
	m.ready = ids;
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_WAIT_REPLY,
			   ferry__wire_plasma_wait_reply_build(&c->srv->fb, &m));
	ferry__free(ids);
}

/* Answer (what is still pending timed out) and free @w. */
static void finish(struct ferry__plasma_wait *w)
{
	unlink_wait(w);
	if (w->type == FERRY__WIRE_MSG_PLASMA_GET)
		reply_get(w);
	else
		reply_wait(w);
	ferry__free(w);
}

static void on_timeout(struct ferry__loop_timer *timer, int status)
{
	struct ferry__plasma_wait *w = timer->data;

	if (status != 0)
		return;
	w->expired = true;
	if (answerable(w))
		finish(w);
}

/* Count @w as a waiter, look again, and arm its timeout. */
static void park(struct ferry__plasma_wait *w, int64_t timeout_ms)
{
	struct ferry__plasma_server *srv = w->client->srv;

	w->next = srv->waits;
	if (srv->waits)
		srv->waits->prev = w;
	srv->waits = w;
	w->counted = true;
	atomic_fetch_add(&srv->ix->hdr->seal_waiters, 1);
	atomic_fetch_add(&srv->ix->hdr->seal_getters, 1);
	/* Count, then look: a sealer that did not see the count is seen here. */
	atomic_thread_fence(memory_order_seq_cst);
	resolve(w, NULL);
	if (answerable(w)) {
		finish(w);
		return;
	}
	w->timer.data = w;
	if (timeout_ms > 0 &&
	    ferry__loop_timer_start(srv->loop, &w->timer, (uint64_t)timeout_ms, 0, on_timeout) < 0)
		finish(w);
}

static void reply_nomem(struct ferry__plasma_pclient *c, uint16_t type, uint64_t seq)
{
	FLOG_WARN(comp, "server: no memory for a %s of pid %d", ferry__wire_message_name(type),
		  c->pid);
	if (type == FERRY__WIRE_MSG_PLASMA_GET) {
		struct ferry__wire_plasma_get_reply m = {.seq = seq, .status = -ENOMEM};

		ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_GET_REPLY,
				   ferry__wire_plasma_get_reply_build(&c->srv->fb, &m));
	} else {
		struct ferry__wire_plasma_wait_reply m = {.seq = seq, .status = -ENOMEM};

		ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_WAIT_REPLY,
				   ferry__wire_plasma_wait_reply_build(&c->srv->fb, &m));
	}
}

/* @ids NULL: they could not be read (no memory). */
static void start(struct ferry__plasma_pclient *c, uint16_t type, uint64_t seq,
		  const struct ferry_object_id *ids, uint32_t n, uint32_t want, int64_t timeout_ms)
{
	struct ferry__plasma_wait *w = NULL;

	if (ids)
		w = ferry__calloc(1, sizeof(*w) + (size_t)n * sizeof(w->items[0]));
	if (!w) {
		reply_nomem(c, type, seq);
		return;
	}
	*w = (struct ferry__plasma_wait){
		.client = c, .seq = seq, .type = type, .n = n, .pending = n, .want = want};
	for (uint32_t i = 0; i < n; i++)
		w->items[i] = (struct ferry__plasma_wait_item){.id = ids[i], .status = PENDING};
	w->expired = timeout_ms == 0;
	resolve(w, NULL);
	if (answerable(w))
		finish(w);
	else
		park(w, timeout_ms);
}

/* The IDs of a request into an array (the payload's are unaligned). NULL on -ENOMEM. */
static struct ferry_object_id *
ids_of(uint32_t n, struct ferry_object_id (*at)(const void *v, uint32_t i), const void *v)
{
	struct ferry_object_id *ids = ferry__calloc(n + 1, sizeof(*ids));

	for (uint32_t i = 0; ids && i < n; i++)
		ids[i] = at(v, i);
	return ids;
}

static struct ferry_object_id get_id_at(const void *v, uint32_t i)
{
	return ferry__wire_plasma_get_object_ids_at(*(const struct ferry__wire_plasma_get_view *)v,
						    i);
}

static struct ferry_object_id wait_id_at(const void *v, uint32_t i)
{
	return ferry__wire_plasma_wait_object_ids_at(
		*(const struct ferry__wire_plasma_wait_view *)v, i);
}

void ferry__plasma_on_get(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_get_view v = ferry__wire_plasma_get_root_verified(payload);
	uint32_t n = ferry__wire_plasma_get_object_ids_count(v);
	struct ferry_object_id *ids = ids_of(n, get_id_at, &v);

	start(c, FERRY__WIRE_MSG_PLASMA_GET, ferry__wire_plasma_get_seq(v), ids, n, 0,
	      ferry__wire_plasma_get_timeout_ms(v));
	ferry__free(ids);
}

void ferry__plasma_on_wait(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_wait_view v = ferry__wire_plasma_wait_root_verified(payload);
	uint32_t n = ferry__wire_plasma_wait_object_ids_count(v);
	uint32_t want = ferry__wire_plasma_wait_num_ready(v);
	struct ferry_object_id *ids = ids_of(n, wait_id_at, &v);

	start(c, FERRY__WIRE_MSG_PLASMA_WAIT, ferry__wire_plasma_wait_seq(v), ids, n,
	      want && want < n ? want : n, ferry__wire_plasma_wait_timeout_ms(v));
	ferry__free(ids);
}

void ferry__plasma_waits_sealed(struct ferry__plasma_server *srv, const struct ferry_object_id *id)
{
	struct ferry__plasma_wait *w = srv->waits, *next;

	for (; w; w = next) {
		next = w->next;
		resolve(w, id);
		if (answerable(w))
			finish(w);
	}
}

void ferry__plasma_waits_recheck(struct ferry__plasma_server *srv)
{
	ferry__plasma_waits_sealed(srv, NULL);
}

/* Fail the pending get items for @id with @status (its restore failed). */
static void fail_items(struct ferry__plasma_wait *w, const struct ferry_object_id *id, int status)
{
	if (w->type != FERRY__WIRE_MSG_PLASMA_GET)
		return;
	for (uint32_t i = 0; i < w->n; i++) {
		struct ferry__plasma_wait_item *it = &w->items[i];

		if (it->status == PENDING &&
		    memcmp(id->bytes, it->id.bytes, sizeof(id->bytes)) == 0) {
			it->status = status;
			it->restoring = false;
			w->pending--;
		}
	}
}

void ferry__plasma_waits_restored(struct ferry__plasma_server *srv, uint32_t index, uint32_t gen,
				  int status)
{
	struct ferry__plasma_wait *w = srv->waits, *next;
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	int state = ferry__plasma_index_read(srv->ix, index, &o);

	if (o.gen != gen || (state != FERRY__PLASMA_SEALED && state != FERRY__PLASMA_SPILLED)) {
		ferry__plasma_waits_recheck(srv); /* it went meanwhile: whoever waits looks again */
		return;
	}
	ferry__plasma_index_read_id(srv->ix, index, &id);
	if (status == 0 || status == -ENOENT) {
		ferry__plasma_waits_sealed(srv, &id);
		return;
	}
	for (; w; w = next) {
		next = w->next;
		fail_items(w, &id, status);
		if (answerable(w))
			finish(w);
	}
}

void ferry__plasma_waits_cancel(struct ferry__plasma_pclient *c)
{
	struct ferry__plasma_wait *w = c->srv->waits, *next;

	for (; w; w = next) {
		next = w->next;
		if (w->client != c)
			continue;
		unlink_wait(w);
		ferry__free(w);
	}
}

int ferry__plasma_server_get_on_loop(struct ferry__plasma_server *srv,
				     struct ferry_plasma_client *c,
				     const struct ferry_object_id *id,
				     struct ferry_plasma_view *view)
{
	struct ferry__plasma_object o;
	int r;

	if (!srv || !c || !id || !view)
		return -EINVAL;
	if (ferry__plasma_index_find(srv->ix, id, &o) == FERRY__PLASMA_SPILLED) {
		/* The read goes to the disk helper: ask again once it is published. */
		r = ferry__plasma_store_restore_begin(srv->store, o.index, o.gen);
		if (r == -EINPROGRESS)
			return -EBUSY;
		if (r < 0 && r != -ENOENT) { /* -ENOENT: not spilled at that generation now */
			FLOG_WARN(comp, "server: reading an object back for a peer failed: %s",
				  ferry_strerror(-r));
			return r;
		}
		if (r == 0) /* new memory: whoever holds the old place must learn the new one */
			ferry__plasma_events_moved(srv, o.index, o.gen);
	}
	/* Nothing else runs on this thread in between: the entry found sealed stays so. */
	r = ferry__plasma_client_get_nowait(c, id, view);
	return r == -EAGAIN ? -EBUSY : r;
}
