/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The location cache: the GCS object directory's locations of the objects this node pulls,
 * each followed by a keyed subscription, so that a pull usually starts without a GCS round
 * trip and a pull waiting for its object hears when it is put.
 *
 * DESIGN
 * - A pull thread's pull of an object not followed yet subscribes to that object's key
 *   (ferry__objmgr_locs_follow; async, so the pull's own look-up goes out at once beside it).
 *   The server starts the subscription with a keyed RESYNC + a snapshot of the record, then
 *   sends its every change in order; a reconnecting client gets RESYNC + snapshot again. So a
 *   node hears about the objects it pulls, not about every object of the cluster: at N nodes
 *   each pulling k objects, the GCS sends N * k records, where the whole channel sent N * all.
 * - Each event for a followed object wakes the pull waiting for it (objmgr_wait.c): a parked
 *   pull keeps its entry (every attempt uses it) and so its subscription, and a put on another
 *   node wakes it. An evicted one is woken by its backoff instead, and follows again at once.
 * - It is a hint, never the truth: an object absent here is looked up in the GCS as before,
 *   and a pull whose cached locations all fail looks the object up and tries the locations it
 *   has not tried (objmgr.c, pull_once). So an event still in flight (an object put a moment
 *   ago, a copy just deleted) costs a round trip or one failed attempt, never a wrong result.
 * - Bounded: at most MAX_FOLLOWED objects, FERRY__OBJMGR_CACHED_LOCATIONS locations each. A
 *   new one past the limit evicts the least recently used entry (a scan of the map, only at
 *   the limit) and unsubscribes it; a later pull follows it again. Only follow() creates
 *   entries, so an event for an object being unsubscribed changes nothing. MAX_FOLLOWED
 *   stays well below the GCS's subscriptions per connection (10000 by default), which the
 *   peers' keyed subscriptions (objmgr_nodes.c) share; a refused one is forgotten (looked up).
 * - follow_lock (pull threads only) orders the unsubscribe of an evicted object before a
 *   subscribe of the same key again. locs->lock guards the map, below it; nothing blocking is
 *   done under it, and it is a leaf lock (events run on the GCS client's thread and take it).
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"
#define MAX_FOLLOWED 4096u

enum { LOCS_OFF = 0, LOCS_STARTING = 1, LOCS_ON = 2 };

unsigned ferry__objmgr_locs_limit;

struct loc_entry {
	struct ferry__objmgr_sizes sizes;				/* the directory's */
	uint64_t used;							/* LRU tick */
	uint32_t nlocations;						/* used; 0: none known */
	struct ferry_node_id locations[FERRY__OBJMGR_CACHED_LOCATIONS]; /* copies */
	struct ferry_gcs_object_place places[FERRY__OBJMGR_CACHED_LOCATIONS]; /* theirs */
};

/* A keyed subscription's answer needs the object it was for. */
struct follow_ask {
	struct ferry__objmgr_locs *locs; /* whose */
	struct ferry_object_id id;	 /* the object */
};

/* A whole-channel RESYNC (not expected with keyed subscriptions): nothing known is kept. */
static void forget_all(struct ferry__objmgr_locs *l)
{
	size_t cursor = 0;
	void *key, *value;

	while (ferry__hashmap_next(&l->map, &cursor, &key, &value))
		((struct loc_entry *)value)->nlocations = 0;
}

/* One record of a followed object: replace what we hold for it (no locations, lost or
 * undecodable: none known, still followed). Objects not followed (any more) are ignored. */
static void take_record(struct ferry__objmgr_locs *l, const struct ferry_gcs_event *ev)
{
	struct ferry_gcs_object_info info;
	struct loc_entry *e = ferry__hashmap_get(&l->map, ev->key);
	uint32_t n;

	if (!e)
		return;
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

static void on_location_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct ferry__objmgr_locs *l = arg;
	bool keyed = ev->key_size == sizeof(struct ferry_object_id);

	atomic_fetch_add_explicit(&l->events, 1, memory_order_relaxed);
	pthread_mutex_lock(&l->lock);
	if (ev->kind == FERRY_GCS_EVENT_RESYNC && !keyed) {
		forget_all(l);
	} else if (keyed) {
		struct loc_entry *e = ferry__hashmap_get(&l->map, ev->key);

		if (ev->kind != FERRY_GCS_EVENT_RESYNC)
			take_record(l, ev);
		else if (e)
			e->nlocations = 0; /* its snapshot follows */
	}
	pthread_mutex_unlock(&l->lock);
	/* A pull waiting for this object goes again now (objmgr_wait.c): after the leaf lock. */
	if (keyed)
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
	ferry__hashmap_init(&l->map, sizeof(struct ferry_object_id), sizeof(struct loc_entry));
	atomic_store_explicit(&l->state, LOCS_ON, memory_order_release);
}

/* Take the least recently used entry out of the map into *@id. l->lock held, map not empty. */
static void evict_lru(struct ferry__objmgr_locs *l, struct ferry_object_id *id)
{
	uint64_t oldest = UINT64_MAX;
	size_t cursor = 0;
	void *key, *value;

	while (ferry__hashmap_next(&l->map, &cursor, &key, &value)) {
		if (((struct loc_entry *)value)->used < oldest) {
			oldest = ((struct loc_entry *)value)->used;
			memcpy(id, key, sizeof(*id));
		}
	}
	(void)ferry__hashmap_remove(&l->map, id, NULL);
}

static void on_unfollowed(void *arg, int status, void *result)
{
	(void)arg;
	(void)status; /* a failure leaves a subscription whose events are ignored: harmless */
	ferry_gcs_free(result);
}

/* Not followed after all: the next pull of it tries again. */
static void follow_failed(struct ferry__objmgr_locs *l, const struct ferry_object_id *id,
			  int status)
{
	char hex[2 * FERRY_OBJECT_ID_SIZE + 1];

	ferry_object_id_to_hex(id, hex, sizeof(hex));
	FLOG_WARN(COMP, "cannot follow the locations of %s (its pulls look it up): %s", hex,
		  ferry_strerror(-status));
	pthread_mutex_lock(&l->lock);
	(void)ferry__hashmap_remove(&l->map, id, NULL);
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
	struct loc_entry *e = ferry__hashmap_get(&l->map, id);
	bool evict = false;

	*added = false;
	if (e) {
		e->used = ++l->tick;
		return false;
	}
	if (ferry__hashmap_count(&l->map) >=
	    (ferry__objmgr_locs_limit ? ferry__objmgr_locs_limit : MAX_FOLLOWED)) {
		evict_lru(l, evicted);
		evict = true;
	}
	if (ferry__hashmap_put(&l->map, id, (void **)&e) >= 0) {
		*e = (struct loc_entry){.used = ++l->tick};
		*added = true;
	}
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

uint32_t ferry__objmgr_locs_get(struct ferry__objmgr *om, const struct ferry_object_id *id,
				struct ferry_node_id *out, struct ferry__objmgr_sizes *sizes,
				struct ferry_gcs_object_place *places)
{
	struct ferry__objmgr_locs *l = &om->locs;
	struct loc_entry *e;
	uint32_t n = 0;

	if (atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_ON)
		return 0;
	pthread_mutex_lock(&l->lock);
	e = ferry__hashmap_get(&l->map, id);
	if (e) {
		e->used = ++l->tick; /* a parked pull's attempts keep its entry, so its wake-ups */
		n = e->nlocations;
		memcpy(out, e->locations, n * sizeof(*out));
		if (places)
			memcpy(places, e->places, n * sizeof(*places));
		if (sizes && n) {
			*sizes = e->sizes;
			if (ferry__objmgr_sizes_hook)
				ferry__objmgr_sizes_hook(id, sizes);
		}
	}
	pthread_mutex_unlock(&l->lock);
	return n;
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

	if (atomic_load(&l->state) == LOCS_OFF)
		return;
	ferry__hashmap_fini(&l->map);
	pthread_mutex_destroy(&l->follow_lock);
	pthread_mutex_destroy(&l->lock);
}
