/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The location cache: the GCS object directory's locations of the objects this node pulls,
 * each followed by a keyed subscription, so that a pull usually starts without a GCS round
 * trip and a pull waiting for its object hears when it is put.
 *
 * DESIGN
 * - A pull thread's pull of an object not followed yet subscribes to that object's key
 *   (ferry__objmgr_locs_follow, async). The server starts the subscription with a keyed RESYNC,
 *   the record if there is one, and SNAPSHOT_END, then sends its every change in order; a
 *   reconnecting client gets RESYNC ... SNAPSHOT_END again. So a node hears about the objects
 *   it pulls, not about every object of the cluster: at N nodes each pulling k objects, the
 *   GCS sends N * k records, where the whole channel sent N * all.
 * - The subscription is the lookup: the pull waits (ferry__objmgr_locs_await, known_cond, at
 *   most AWAIT_MS) for the snapshot's end, and then knows the locations, or that the directory
 *   lists none yet (an empty snapshot; the put comes later as a change). No GCS lookup beside
 *   it. Only when the cache cannot answer (no end in time, e.g. a server without the marker;
 *   the subscription refused; the entry evicted meanwhile) does the pull look the object up.
 * - Each event for a followed object wakes the pull waiting for it (objmgr_wait.c): a parked
 *   pull keeps its entry (every attempt uses it) and so its subscription, and a put on another
 *   node wakes it. An evicted one is woken by its backoff instead, and follows again at once.
 * - Still a hint in one way: an event in flight (a copy deleted a moment ago) can make a cached
 *   location fail; a pull whose cached locations all fail looks the object up and tries those
 *   it has not tried (objmgr.c, pull_located), so that costs one attempt, never a wrong result.
 * - Bounded: at most MAX_FOLLOWED objects, FERRY__OBJMGR_CACHED_LOCATIONS locations each. A
 *   new one past the limit evicts the least recently used entry (the tail of an intrusive LRU
 *   list: O(1)) and unsubscribes it; a later pull follows it again. Only follow() creates
 *   entries, so an event for an object being unsubscribed changes nothing. MAX_FOLLOWED
 *   stays well below the GCS's subscriptions per connection (10000 by default), which the
 *   peers' keyed subscriptions (objmgr_nodes.c) share; a refused one is forgotten (looked up).
 * - follow_lock (pull threads only) orders the unsubscribe of an evicted object before a
 *   subscribe of the same key again. locs->lock guards the map and the list, below it; nothing
 *   blocking is done under it but the await's wait on known_cond, and it is a leaf lock (events
 *   run on the GCS client's thread and take it).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"
#define MAX_FOLLOWED 4096u
#define AWAIT_MS 2000

enum { LOCS_OFF = 0, LOCS_STARTING = 1, LOCS_ON = 2 };

unsigned ferry__objmgr_locs_limit;

struct ferry__objmgr_loc {
	struct ferry_object_id id;	  /* the object (the map's key, for eviction) */
	struct ferry__objmgr_loc *newer;  /* LRU list, towards l->newest */
	struct ferry__objmgr_loc *older;  /* LRU list, towards l->oldest */
	bool known;			  /* the snapshot ended: nlocations is the directory's */
	struct ferry__objmgr_sizes sizes; /* the directory's */
	uint32_t nlocations;		  /* used; 0: none known */
	struct ferry_node_id locations[FERRY__OBJMGR_CACHED_LOCATIONS];	      /* copies */
	struct ferry_gcs_object_place places[FERRY__OBJMGR_CACHED_LOCATIONS]; /* theirs */
};

/* A keyed subscription's answer needs the object it was for. */
struct follow_ask {
	struct ferry__objmgr_locs *locs; /* whose */
	struct ferry_object_id id;	 /* the object */
};

static struct ferry__objmgr_loc *entry_get(struct ferry__objmgr_locs *l,
					   const struct ferry_object_id *id)
{
	struct ferry__objmgr_loc **e = ferry__hashmap_get(&l->map, id);

	return e ? *e : NULL;
}

/* ---- the LRU list (l->lock held) ---- */

static void lru_unlink(struct ferry__objmgr_locs *l, struct ferry__objmgr_loc *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		l->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		l->oldest = e->newer;
	e->newer = e->older = NULL;
}

static void lru_push_newest(struct ferry__objmgr_locs *l, struct ferry__objmgr_loc *e)
{
	e->newer = NULL;
	e->older = l->newest;
	if (l->newest)
		l->newest->newer = e;
	else
		l->oldest = e;
	l->newest = e;
}

static void lru_touch(struct ferry__objmgr_locs *l, struct ferry__objmgr_loc *e)
{
	if (l->newest == e)
		return;
	lru_unlink(l, e);
	lru_push_newest(l, e);
}

/* Forget @id (map and list). l->lock held. */
static void entry_remove(struct ferry__objmgr_locs *l, const struct ferry_object_id *id)
{
	struct ferry__objmgr_loc *e;

	if (ferry__hashmap_remove(&l->map, id, &e) < 0)
		return;
	lru_unlink(l, e);
	ferry__free(e);
}

/* ---- events (the GCS client's thread) ---- */

/* A whole-channel RESYNC (not expected with keyed subscriptions): nothing known is kept. */
static void forget_all(struct ferry__objmgr_locs *l)
{
	for (struct ferry__objmgr_loc *e = l->newest; e; e = e->older) {
		e->nlocations = 0;
		e->known = false;
	}
}

/* One record of a followed object: replace what we hold for it (no locations, lost or
 * undecodable: none known, still followed). */
static void take_record(struct ferry__objmgr_loc *e, const struct ferry_gcs_event *ev)
{
	struct ferry_gcs_object_info info;
	uint32_t n;

	e->nlocations = 0;
	if (!ev->size || ferry_gcs_event_object(ev, &info) < 0)
		return;
	n = info.nlocations < FERRY__OBJMGR_CACHED_LOCATIONS ? info.nlocations
							     : FERRY__OBJMGR_CACHED_LOCATIONS;
	if (n && info.state != FERRY_GCS_OBJECT_LOST) {
		e->sizes.data = info.size_bytes;
		e->sizes.metadata = info.metadata_bytes;
		e->sizes.owner = info.owner_worker;
		e->nlocations = n;
		memcpy(e->locations, info.locations, n * sizeof(e->locations[0]));
		for (uint32_t i = 0; i < n; i++)
			e->places[i] =
				info.places ? info.places[i] : (struct ferry_gcs_object_place){0};
	}
	ferry_gcs_free(info.locations);
}

/* A keyed event of a followed object (objects not followed any more are ignored). */
static void take_event(struct ferry__objmgr_locs *l, const struct ferry_gcs_event *ev)
{
	struct ferry__objmgr_loc *e = entry_get(l, (const struct ferry_object_id *)ev->key);

	if (!e)
		return;
	switch (ev->kind) {
	case FERRY_GCS_EVENT_RESYNC: /* its snapshot follows */
		e->nlocations = 0;
		e->known = false;
		break;
	case FERRY_GCS_EVENT_SNAPSHOT_END:
		e->known = true;
		pthread_cond_broadcast(&l->known_cond);
		break;
	case FERRY_GCS_EVENT_SNAPSHOT:
	case FERRY_GCS_EVENT_DELTA:
		take_record(e, ev);
		break;
	default: /* a kind from a newer server: nothing to take */
		break;
	}
}

static void on_location_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct ferry__objmgr_locs *l = arg;
	bool keyed = ev->key_size == sizeof(struct ferry_object_id);

	atomic_fetch_add_explicit(&l->events, 1, memory_order_relaxed);
	pthread_mutex_lock(&l->lock);
	if (ev->kind == FERRY_GCS_EVENT_RESYNC && !keyed)
		forget_all(l);
	else if (keyed)
		take_event(l, ev);
	pthread_mutex_unlock(&l->lock);
	/* A pull waiting for this object goes again now (objmgr_wait.c): after the leaf lock. A
	 * marker carries no record: only records can make a parked pull's next attempt differ. */
	if (keyed && (ev->kind == FERRY_GCS_EVENT_DELTA || ev->kind == FERRY_GCS_EVENT_SNAPSHOT))
		ferry__objmgr_wait_wake(FERRY_CONTAINER_OF(l, struct ferry__objmgr, locs),
					(const struct ferry_object_id *)ev->key);
}

void ferry__objmgr_locs_start(struct ferry__objmgr *om)
{
	struct ferry__objmgr_locs *l = &om->locs;
	int expected = LOCS_OFF;

	if (!om->opts.gcs || atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_OFF ||
	    !atomic_compare_exchange_strong(&l->state, &expected, LOCS_STARTING))
		return;
	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_init(&l->follow_lock, NULL);
	ferry__cond_init_monotonic(&l->known_cond);
	ferry__hashmap_init(&l->map, sizeof(struct ferry_object_id),
			    sizeof(struct ferry__objmgr_loc *));
	l->newest = l->oldest = NULL;
	atomic_store_explicit(&l->state, LOCS_ON, memory_order_release);
}

/* ---- following (pull threads) ---- */

static void on_unfollowed(void *arg, int status, void *result)
{
	(void)arg;
	(void)status; /* a failure leaves a subscription whose events are ignored: harmless */
	ferry_gcs_free(result);
}

/* Not followed after all: the next pull of it tries again, and one awaiting it looks it up. */
static void follow_failed(struct ferry__objmgr_locs *l, const struct ferry_object_id *id,
			  int status)
{
	char hex[2 * FERRY_OBJECT_ID_SIZE + 1];

	ferry_object_id_to_hex(id, hex, sizeof(hex));
	FLOG_WARN(COMP, "cannot follow the locations of %s (its pulls look it up): %s", hex,
		  ferry_strerror(-status));
	pthread_mutex_lock(&l->lock);
	entry_remove(l, id);
	pthread_cond_broadcast(&l->known_cond);
	pthread_mutex_unlock(&l->lock);
}

static void on_followed(void *arg, int status, void *result)
{
	struct follow_ask *ask = arg;

	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		follow_failed(ask->locs, &ask->id, status);
	ferry__free(ask);
}

/* A new entry for @id, evicting the LRU one into *@evicted past the limit (true then). Both
 * locks held. False in *@added: it was there (touched) or no memory. */
static bool add_entry(struct ferry__objmgr_locs *l, const struct ferry_object_id *id, bool *added,
		      struct ferry_object_id *evicted)
{
	struct ferry__objmgr_loc *e = entry_get(l, id), **slot;
	bool evict = false;

	*added = false;
	if (e) {
		lru_touch(l, e);
		return false;
	}
	e = ferry__calloc(1, sizeof(*e));
	if (!e)
		return false;
	if (ferry__hashmap_count(&l->map) >=
	    (ferry__objmgr_locs_limit ? ferry__objmgr_locs_limit : MAX_FOLLOWED)) {
		*evicted = l->oldest->id;
		entry_remove(l, evicted);
		evict = true;
	}
	if (ferry__hashmap_put(&l->map, id, (void **)&slot) < 0) {
		ferry__free(e);
		return evict;
	}
	e->id = *id;
	*slot = e;
	lru_push_newest(l, e);
	*added = true;
	return evict;
}

void ferry__objmgr_locs_follow(struct ferry__objmgr *om, const struct ferry_object_id *id)
{
	struct ferry__objmgr_locs *l = &om->locs;
	struct ferry_object_id evicted;
	struct follow_ask *ask;
	bool evict, added;
	int ret = -ENOMEM;

	ferry__objmgr_locs_start(om);
	if (atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_ON)
		return;
	pthread_mutex_lock(&l->follow_lock);
	pthread_mutex_lock(&l->lock);
	evict = add_entry(l, id, &added, &evicted);
	pthread_mutex_unlock(&l->lock);
	if (evict)
		(void)ferry_gcs_unsubscribe_async(om->opts.gcs, FERRY_GCS_CH_OBJECT_LOCATIONS,
						  evicted.bytes, sizeof(evicted.bytes),
						  on_unfollowed, NULL);
	if (added) {
		ask = ferry__malloc(sizeof(*ask));
		if (ask) {
			*ask = (struct follow_ask){l, *id};
			ret = ferry_gcs_subscribe_async(om->opts.gcs, FERRY_GCS_CH_OBJECT_LOCATIONS,
							id->bytes, sizeof(id->bytes),
							on_location_event, l, on_followed, ask);
			if (ret < 0)
				ferry__free(ask);
		}
		if (ret < 0)
			follow_failed(l, id, ret);
	}
	pthread_mutex_unlock(&l->follow_lock);
}

/* Copy out what @e holds (l->lock held): the count. */
static uint32_t entry_read(const struct ferry__objmgr_loc *e, const struct ferry_object_id *id,
			   struct ferry_node_id *out, struct ferry__objmgr_sizes *sizes,
			   struct ferry_gcs_object_place *places)
{
	uint32_t n = e->nlocations;

	memcpy(out, e->locations, n * sizeof(*out));
	if (places)
		memcpy(places, e->places, n * sizeof(*places));
	if (sizes && n) {
		*sizes = e->sizes;
		if (ferry__objmgr_sizes_hook)
			ferry__objmgr_sizes_hook(id, sizes);
	}
	return n;
}

uint32_t ferry__objmgr_locs_get(struct ferry__objmgr *om, const struct ferry_object_id *id,
				struct ferry_node_id *out, struct ferry__objmgr_sizes *sizes,
				struct ferry_gcs_object_place *places)
{
	struct ferry__objmgr_locs *l = &om->locs;
	struct ferry__objmgr_loc *e;
	uint32_t n = 0;

	if (atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_ON)
		return 0;
	pthread_mutex_lock(&l->lock);
	e = entry_get(l, id);
	if (e) {
		lru_touch(l, e); /* a parked pull's attempts keep its entry, so its wake-ups */
		n = entry_read(e, id, out, sizes, places);
	}
	pthread_mutex_unlock(&l->lock);
	return n;
}

int ferry__objmgr_locs_await(struct ferry__objmgr *om, const struct ferry_object_id *id,
			     struct ferry_node_id *out, struct ferry__objmgr_sizes *sizes)
{
	struct ferry__objmgr_locs *l = &om->locs;
	struct ferry__objmgr_loc *e;
	struct timespec until;
	int ret = 0;

	if (atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_ON)
		return -EAGAIN;
	until = ferry__deadline_in_us(AWAIT_MS * 1000u);
	pthread_mutex_lock(&l->lock);
	/* Looked up again each time: an eviction or a refusal frees the entry meanwhile. */
	while ((e = entry_get(l, id)) && !e->known && ret == 0)
		ret = pthread_cond_timedwait(&l->known_cond, &l->lock, &until);
	if (e && e->known) {
		lru_touch(l, e);
		ret = (int)entry_read(e, id, out, sizes, NULL);
	} else {
		ret = -EAGAIN;
	}
	pthread_mutex_unlock(&l->lock);
	return ret;
}

void ferry__objmgr_locs_stats(struct ferry__objmgr *om, struct ferry__objmgr_stats *out)
{
	struct ferry__objmgr_locs *l = &om->locs;

	out->location_events = atomic_load_explicit(&l->events, memory_order_relaxed);
	out->locations_followed = 0;
	if (atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_ON)
		return;
	pthread_mutex_lock(&l->lock);
	out->locations_followed = ferry__hashmap_count(&l->map);
	pthread_mutex_unlock(&l->lock);
}

void ferry__objmgr_locs_fini(struct ferry__objmgr *om)
{
	struct ferry__objmgr_locs *l = &om->locs;
	struct ferry__objmgr_loc *e;

	if (atomic_load(&l->state) == LOCS_OFF)
		return;
	while ((e = l->oldest)) {
		lru_unlink(l, e);
		ferry__free(e);
	}
	ferry__hashmap_fini(&l->map);
	pthread_cond_destroy(&l->known_cond);
	pthread_mutex_destroy(&l->follow_lock);
	pthread_mutex_destroy(&l->lock);
}
