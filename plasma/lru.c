/* SPDX-License-Identifier: Apache-2.0 */
/* The store's CLOCK list of evictable entries: a doubly linked list threaded through an array
 * indexed by entry slot, so push/remove/move are O(1) and allocate nothing. */
#include <errno.h>

#include "common/alloc.h"
#include "plasma/lru.h"

#define NONE FERRY__PLASMA_LRU_NONE

int ferry__plasma_lru_init(struct ferry__plasma_lru *l, uint32_t capacity)
{
	*l = (struct ferry__plasma_lru){.capacity = capacity, .oldest = NONE, .newest = NONE};
	l->nodes = ferry__calloc(capacity ? capacity : 1, sizeof(*l->nodes));
	return l->nodes ? 0 : -ENOMEM;
}

void ferry__plasma_lru_fini(struct ferry__plasma_lru *l)
{
	ferry__free(l->nodes);
	l->nodes = NULL;
	l->count = 0;
}

void ferry__plasma_lru_remove(struct ferry__plasma_lru *l, uint32_t index)
{
	struct ferry__plasma_lru_node *n;

	if (!ferry__plasma_lru_listed(l, index))
		return;
	n = &l->nodes[index];
	if (n->prev != NONE)
		l->nodes[n->prev].next = n->next;
	else
		l->oldest = n->next;
	if (n->next != NONE)
		l->nodes[n->next].prev = n->prev;
	else
		l->newest = n->prev;
	n->listed = 0;
	l->count--;
}

void ferry__plasma_lru_push(struct ferry__plasma_lru *l, uint32_t index, uint32_t stamp)
{
	struct ferry__plasma_lru_node *n;

	if (index >= l->capacity)
		return;
	ferry__plasma_lru_remove(l, index);
	n = &l->nodes[index];
	*n = (struct ferry__plasma_lru_node){l->newest, NONE, stamp, 1};
	if (l->newest != NONE)
		l->nodes[l->newest].next = index;
	else
		l->oldest = index;
	l->newest = index;
	l->count++;
}
