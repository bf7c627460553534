/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request deduplication (see dedup.h): a hash map from client ID to its window, the windows in
 * a ring in order of creation for the bound on clients. The ring grows by doubling until it
 * reaches the bound; only then are windows dropped, oldest first.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "gcs/dedup.h"

struct dedup_slot {
	uint64_t seq;	/* the request */
	int32_t status; /* its result */
	bool used;	/* holds a result */
};

struct ferry__gcs_dedup_window {
	uint8_t client[FERRY__GCS_CLIENT_ID_SIZE];	  /* whose */
	struct dedup_slot slots[FERRY__GCS_DEDUP_WINDOW]; /* seq % window */
};

void ferry__gcs_dedup_init(struct ferry__gcs_dedup *d, size_t max)
{
	memset(d, 0, sizeof(*d));
	ferry__hashmap_init(&d->map, FERRY__GCS_CLIENT_ID_SIZE,
			    sizeof(struct ferry__gcs_dedup_window *));
	d->max = max ? max : FERRY__GCS_DEDUP_DEFAULT_MAX;
}

void ferry__gcs_dedup_fini(struct ferry__gcs_dedup *d)
{
	for (size_t i = 0; i < d->count; i++)
		ferry__free(d->ring[(d->head + i) % d->cap]);
	ferry__hashmap_fini(&d->map);
	ferry__free(d->ring);
	d->ring = NULL;
	d->last = NULL;
	d->cap = d->count = d->head = 0;
}

/* Every request is looked up, then remembered: both for the same client, and a pipelining
 * client's requests arrive back to back. The last window used answers those without hashing
 * the 16-byte client ID (two hash lookups per write were ~3% of the loop thread). */
static struct ferry__gcs_dedup_window *window_of(const struct ferry__gcs_dedup *d,
						 const uint8_t *client)
{
	struct ferry__gcs_dedup_window **w;

	if (d->last && memcmp(d->last->client, client, FERRY__GCS_CLIENT_ID_SIZE) == 0)
		return d->last;
	w = ferry__hashmap_get(&d->map, client);

	return w ? *w : NULL;
}

int ferry__gcs_dedup_find(const struct ferry__gcs_dedup *d, const uint8_t *client, uint64_t seq,
			  int32_t *status)
{
	const struct ferry__gcs_dedup_window *w = window_of(d, client);
	const struct dedup_slot *s;

	if (!w)
		return 0;
	s = &w->slots[seq % FERRY__GCS_DEDUP_WINDOW];
	if (!s->used || s->seq != seq)
		return 0;
	*status = s->status;
	return 1;
}

/* Room for one more window in the ring: grow below the bound, drop the oldest at it. */
static int make_room(struct ferry__gcs_dedup *d)
{
	struct ferry__gcs_dedup_window **ring, *old;
	size_t cap;

	if (d->count < d->cap)
		return 0;
	if (d->cap < d->max) {
		cap = d->cap ? d->cap * 2 : 16;
		cap = cap > d->max ? d->max : cap;
		ring = ferry__realloc(d->ring, cap * sizeof(*ring));
		if (!ring)
			return -ENOMEM;
		d->ring = ring;
		d->cap = cap;
		return 0;
	}
	old = d->ring[d->head];
	if (d->last == old)
		d->last = NULL;
	(void)ferry__hashmap_remove(&d->map, old->client, NULL);
	ferry__free(old);
	d->head = (d->head + 1) % d->cap;
	d->count--;
	return 0;
}

/* A new client's window, linked in. NULL on -ENOMEM (nothing changed but maybe an eviction). */
static struct ferry__gcs_dedup_window *window_new(struct ferry__gcs_dedup *d, const uint8_t *client)
{
	struct ferry__gcs_dedup_window *w;
	void *slot;

	if (make_room(d) < 0)
		return NULL;
	w = ferry__calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	memcpy(w->client, client, sizeof(w->client));
	if (ferry__hashmap_put(&d->map, client, &slot) < 0) {
		ferry__free(w);
		return NULL;
	}
	memcpy(slot, &w, sizeof(w));
	d->ring[(d->head + d->count) % d->cap] = w;
	d->count++;
	return w;
}

int ferry__gcs_dedup_remember(struct ferry__gcs_dedup *d, const uint8_t *client, uint64_t seq,
			      int32_t status)
{
	struct ferry__gcs_dedup_window *w = window_of(d, client);
	struct dedup_slot *s;

	if (!w && !(w = window_new(d, client)))
		return -ENOMEM;
	d->last = w;
	s = &w->slots[seq % FERRY__GCS_DEDUP_WINDOW];
	if (s->used && s->seq == seq)
		return 0;
	*s = (struct dedup_slot){seq, status, true};
	return 0;
}

int ferry__gcs_dedup_next(const struct ferry__gcs_dedup *d, size_t *cursor,
			  struct ferry__gcs_dedup_key *key, int32_t *status)
{
	for (; *cursor < d->count * FERRY__GCS_DEDUP_WINDOW; (*cursor)++) {
		size_t i = *cursor / FERRY__GCS_DEDUP_WINDOW, j = *cursor % FERRY__GCS_DEDUP_WINDOW;
		const struct ferry__gcs_dedup_window *w = d->ring[(d->head + i) % d->cap];

		if (!w->slots[j].used)
			continue;
		memcpy(key->client, w->client, sizeof(key->client));
		key->seq = w->slots[j].seq;
		*status = w->slots[j].status;
		(*cursor)++;
		return 1;
	}
	return 0;
}
