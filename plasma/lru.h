/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction order for the store's secondary copies: a CLOCK (second chance) approximation of
 * LRU over entry indices. Clients do not tell the store when they use an object; they write
 * the header's lru_clock into the entry's lru_stamp on a first pin and a last release. The
 * evictor walks from the oldest end: an entry whose stamp changed since it was last looked at
 * gets a second chance (moved to the newest end); an unchanged, unpinned one is evicted.
 *
 * Thread model: store-private, single writer.
 */
#ifndef FERRY_PLASMA_LRU_H
#define FERRY_PLASMA_LRU_H

#include <stdbool.h>
#include <stdint.h>

#define FERRY__PLASMA_LRU_NONE UINT32_MAX

struct ferry__plasma_lru_node {
	uint32_t prev;	 /* towards the oldest; NONE at the oldest end */
	uint32_t next;	 /* towards the newest; NONE at the newest end */
	uint32_t seen;	 /* the entry's lru_stamp when last pushed or touched */
	uint32_t listed; /* 1 while in the list */
};

struct ferry__plasma_lru {
	struct ferry__plasma_lru_node *nodes; /* one per entry index */
	uint32_t capacity;		      /* entry indices */
	uint32_t oldest;		      /* head, or NONE */
	uint32_t newest;		      /* tail, or NONE */
	uint32_t count;			      /* listed entries */
};

/* ferry__plasma_lru_init() - an empty list for indices below @capacity. 0 or -ENOMEM. */
int ferry__plasma_lru_init(struct ferry__plasma_lru *l, uint32_t capacity);
void ferry__plasma_lru_fini(struct ferry__plasma_lru *l);

/* ferry__plasma_lru_push() - add @index at the newest end (or move it there), seen = @stamp. */
void ferry__plasma_lru_push(struct ferry__plasma_lru *l, uint32_t index, uint32_t stamp);

/* ferry__plasma_lru_remove() - take @index out; nothing if it is not listed. */
void ferry__plasma_lru_remove(struct ferry__plasma_lru *l, uint32_t index);

static inline bool ferry__plasma_lru_listed(const struct ferry__plasma_lru *l, uint32_t index)
{
	return index < l->capacity && l->nodes[index].listed;
}

#endif
