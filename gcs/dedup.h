/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request deduplication for the GCS state: the results of recent requests per (client ID,
 * request seq), so a client that resends after a reconnect or a GCS restart gets the first result
 * back instead of applying its write twice. Each client has a window of the last
 * FERRY__GCS_DEDUP_WINDOW seqs (a slot per seq modulo the window: a lookup is one array index,
 * and one client's traffic never pushes out another's results); past @max clients the oldest
 * client's window is dropped. A client resends only requests it has no answer for, so a window
 * of a few hundred seqs covers far more than its requests in flight.
 *
 * Thread model: not thread-safe; the GCS state's owner serialises access.
 */
#ifndef FERRY_GCS_DEDUP_H
#define FERRY_GCS_DEDUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hashmap.h"

#define FERRY__GCS_CLIENT_ID_SIZE 16
#define FERRY__GCS_DEDUP_WINDOW 256	  /* seqs remembered per client */
#define FERRY__GCS_DEDUP_DEFAULT_MAX 4096 /* clients remembered */

/* A remembered request, as ferry__gcs_dedup_next() reports it. */
struct ferry__gcs_dedup_key {
	uint8_t client[FERRY__GCS_CLIENT_ID_SIZE]; /* the client's random ID */
	uint64_t seq;				   /* its request seq */
};

struct ferry__gcs_dedup_window;

struct ferry__gcs_dedup {
	struct ferry__hashmap map;	       /* client ID -> struct ferry__gcs_dedup_window * */
	struct ferry__gcs_dedup_window **ring; /* windows, oldest client first */
	size_t cap;			       /* ring slots allocated */
	size_t head;			       /* oldest window */
	size_t count;			       /* windows */
	size_t max;			       /* bound on windows */
	struct ferry__gcs_dedup_window *last;  /* the window used last, or NULL (a cache) */
};

/* Empty; allocates nothing. @max clients, 0 = FERRY__GCS_DEDUP_DEFAULT_MAX. */
void ferry__gcs_dedup_init(struct ferry__gcs_dedup *d, size_t max);
void ferry__gcs_dedup_fini(struct ferry__gcs_dedup *d);

/* ferry__gcs_dedup_find() - 1 and *@status if (@client, @seq) was applied, else 0. */
int ferry__gcs_dedup_find(const struct ferry__gcs_dedup *d, const uint8_t *client, uint64_t seq,
			  int32_t *status);

/* ferry__gcs_dedup_remember() - record a result (it takes the slot of an older seq of that
 * client). 0, or -ENOMEM with nothing changed. A known request is kept as it was: 0. */
int ferry__gcs_dedup_remember(struct ferry__gcs_dedup *d, const uint8_t *client, uint64_t seq,
			      int32_t status);

/* ferry__gcs_dedup_next() - every entry, oldest client first: start with *@cursor = 0; 1 per
 * entry, 0 at the end. Remembering them in this order rebuilds the same table. */
int ferry__gcs_dedup_next(const struct ferry__gcs_dedup *d, size_t *cursor,
			  struct ferry__gcs_dedup_key *key, int32_t *status);

#endif
