/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The location cache: a mirror of the GCS object directory's locations, fed by a subscription
 * to the whole object-location channel, so that a pull usually starts without a GCS round trip.
 *
 * DESIGN
 * - The first pull subscribes (once; ferry_gcs_subscribe blocks, so not at create, where it
 *   would also slow every node's start for nodes that never pull). The server starts the
 *   subscription with RESYNC + a snapshot, then sends every change in order; a reconnecting
 *   client gets RESYNC + a snapshot again. Events run on the GCS client's thread.
 * - It is a hint, never the truth: an object absent here is looked up in the GCS as before,
 *   and a pull whose cached locations all fail looks the object up and tries the locations it
 *   has not tried (objmgr.c, pull_once). So an event still in flight (an object put a moment
 *   ago, a copy just deleted) costs a round trip or one failed attempt, never a wrong result.
 * - Bounded: at most MAX_ENTRIES objects, FERRY__OBJMGR_CACHED_LOCATIONS locations each;
 *   what does not fit is not cached (looked up). The whole channel reaches every node: fine
 *   for the clusters this runs on; a large cluster wants per-object subscriptions with an
 *   unsubscribe, which the GCS client does not offer yet.
 * - locs->lock guards the map; nothing blocking is done under it. It is a leaf lock.
 */
#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"
#define MAX_ENTRIES (1u << 20)

enum { LOCS_OFF = 0, LOCS_STARTING = 1, LOCS_ON = 2, LOCS_FAILED = 3 };

struct loc_entry {
	struct ferry__objmgr_sizes sizes;				      /* the directory's */
	uint32_t nlocations;						      /* used */
	struct ferry_node_id locations[FERRY__OBJMGR_CACHED_LOCATIONS];	      /* copies */
	struct ferry_gcs_object_place places[FERRY__OBJMGR_CACHED_LOCATIONS]; /* theirs */
};

static void forget_all(struct ferry__objmgr_locs *l)
{
	ferry__hashmap_fini(&l->map);
	ferry__hashmap_init(&l->map, sizeof(struct ferry_object_id), sizeof(struct loc_entry));
}

/* One record: replace what we hold for it (no locations, lost or undecodable: forget it). */
static void take_record(struct ferry__objmgr_locs *l, const struct ferry_gcs_event *ev)
{
	struct ferry_gcs_object_info info;
	struct loc_entry *e;
	uint32_t n;

	if (ev->key_size != sizeof(struct ferry_object_id))
		return;
	if (!ev->size || ferry_gcs_event_object(ev, &info) < 0) {
		(void)ferry__hashmap_remove(&l->map, ev->key, NULL);
		return;
	}
	n = info.nlocations < FERRY__OBJMGR_CACHED_LOCATIONS ? info.nlocations
							     : FERRY__OBJMGR_CACHED_LOCATIONS;
	if (!n || info.state == FERRY_GCS_OBJECT_LOST) {
		(void)ferry__hashmap_remove(&l->map, ev->key, NULL);
	} else if (ferry__hashmap_get(&l->map, ev->key) ||
		   ferry__hashmap_count(&l->map) < MAX_ENTRIES) {
		if (ferry__hashmap_put(&l->map, ev->key, (void **)&e) >= 0) {
			e->sizes.data = info.size_bytes;
			e->sizes.metadata = info.metadata_bytes;
			e->sizes.owner = info.owner_worker;
			e->nlocations = n;
			memcpy(e->locations, info.locations, n * sizeof(e->locations[0]));
			for (uint32_t i = 0; i < n; i++)
				e->places[i] = info.places ? info.places[i]
							   : (struct ferry_gcs_object_place){0};
		} else {
			(void)ferry__hashmap_remove(&l->map, ev->key, NULL);
		}
	}
	ferry_gcs_free(info.locations);
}

static void on_location_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct ferry__objmgr_locs *l = arg;

	pthread_mutex_lock(&l->lock);
	if (ev->kind == FERRY_GCS_EVENT_RESYNC) {
		if (ev->key_size == sizeof(struct ferry_object_id))
			(void)ferry__hashmap_remove(&l->map, ev->key, NULL);
		else
			forget_all(l);
	} else {
		take_record(l, ev);
	}
	pthread_mutex_unlock(&l->lock);
	/* A pull waiting for this object goes again now (objmgr_wait.c): after the leaf lock. */
	if (ev->key_size == sizeof(struct ferry_object_id))
		ferry__objmgr_wait_wake(FERRY_CONTAINER_OF(l, struct ferry__objmgr, locs),
					(const struct ferry_object_id *)ev->key);
}

void ferry__objmgr_locs_start(struct ferry__objmgr *om)
{
	struct ferry__objmgr_locs *l = &om->locs;
	int expected = LOCS_OFF, ret;

	if (!om->opts.gcs || atomic_load_explicit(&l->state, memory_order_acquire) != LOCS_OFF ||
	    !atomic_compare_exchange_strong(&l->state, &expected, LOCS_STARTING))
		return;
	pthread_mutex_init(&l->lock, NULL);
	ferry__hashmap_init(&l->map, sizeof(struct ferry_object_id), sizeof(struct loc_entry));
	ret = ferry_gcs_subscribe(om->opts.gcs, FERRY_GCS_CH_OBJECT_LOCATIONS, NULL, 0,
				  on_location_event, l);
	if (ret < 0)
		FLOG_WARN(COMP, "no location cache (every pull looks up the GCS): %s",
			  ferry_strerror(-ret));
	/* Failed: the map stays empty (only events fill it), so every pull looks up. */
	atomic_store_explicit(&l->state, ret < 0 ? LOCS_FAILED : LOCS_ON, memory_order_release);
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
		n = e->nlocations;
		memcpy(out, e->locations, n * sizeof(*out));
		if (places)
			memcpy(places, e->places, n * sizeof(*places));
		if (sizes) {
			*sizes = e->sizes;
			if (ferry__objmgr_sizes_hook)
				ferry__objmgr_sizes_hook(id, sizes);
		}
	}
	pthread_mutex_unlock(&l->lock);
	return n;
}

void ferry__objmgr_locs_fini(struct ferry__objmgr *om)
{
	struct ferry__objmgr_locs *l = &om->locs;

	if (atomic_load(&l->state) == LOCS_OFF)
		return;
	ferry__hashmap_fini(&l->map);
	pthread_mutex_destroy(&l->lock);
}
