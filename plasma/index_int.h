/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the two halves of the object index (index.c: layout, lookups and client
 * operations; index_write.c: the writer lock, inserts, the store's transitions, client slots). */
#ifndef FERRY_PLASMA_INDEX_INT_H
#define FERRY_PLASMA_INDEX_INT_H

#include <string.h>

#include "common/hash.h"
#include "common/log.h"
#include "plasma/index.h"

#define FERRY__PLASMA_LOG "plasma"

/* An ObjectID as the entry stores it. */
struct packed_id {
	uint64_t lo;  /* bytes 0-7 */
	uint64_t mid; /* bytes 8-15 */
	uint32_t hi;  /* bytes 16-19 */
};

static inline struct packed_id pack_id(const struct ferry_object_id *id)
{
	struct packed_id p;

	memcpy(&p.lo, id->bytes, 8);
	memcpy(&p.mid, id->bytes + 8, 8);
	memcpy(&p.hi, id->bytes + 16, 4);
	return p;
}

/* Relaxed: a filter only. A match is confirmed after the entry is pinned (or, for the store
 * and the lock holder, the entry cannot change under them). */
static inline bool id_matches(const struct ferry__plasma_entry *e, const struct packed_id *p)
{
	return atomic_load_explicit(&e->id_lo, memory_order_relaxed) == p->lo &&
	       atomic_load_explicit(&e->id_mid, memory_order_relaxed) == p->mid &&
	       atomic_load_explicit(&e->id_hi, memory_order_relaxed) == p->hi;
}

static inline uint32_t home_of(const struct ferry__plasma_index *ix,
			       const struct ferry_object_id *id)
{
	return (uint32_t)ferry_id_hash(id->bytes, sizeof(id->bytes)) & ix->mask;
}

/* Holds an ID that lookups find and inserts collide with: CREATING..SPILLED. */
static inline bool visible(unsigned state)
{
	return state >= FERRY__PLASMA_CREATING && state <= FERRY__PLASMA_SPILLED;
}

static inline void fill(const struct ferry__plasma_index *ix, uint32_t i, uint64_t w,
			struct ferry__plasma_object *out)
{
	const struct ferry__plasma_entry *e = &ix->entries[i];

	*out = (struct ferry__plasma_object){
		.data = ix->arena + e->offset,
		.offset = e->offset,
		.data_size = e->data_size,
		.metadata_size = e->metadata_size,
		.index = i,
		.gen = ferry__plasma_word_gen(w),
		.owner = (uint16_t)ferry__plasma_word_owner(w),
		.flags = (uint8_t)ferry__plasma_word_flags(w),
		.state = (uint8_t)ferry__plasma_word_state(w),
	};
}

/* Pin records: an open-addressing table per client slot, keyed by entry index + 1, written
 * only by that client (the store reads them for figures, tolerating races). */
static inline uint32_t record_home(const struct ferry__plasma_index *ix, uint32_t index)
{
	return (uint32_t)ferry__hash64(index) & ix->record_mask;
}

static inline struct ferry__plasma_pin_record *
record_find(const struct ferry__plasma_index *ix, struct ferry__plasma_client *c, uint32_t index)
{
	uint32_t i = record_home(ix, index);

	for (uint32_t n = 0; n <= ix->record_mask; n++, i = (i + 1) & ix->record_mask) {
		uint32_t key = atomic_load_explicit(&c->records[i].entry, memory_order_relaxed);

		if (key == 0)
			return NULL;
		if (key == index + 1)
			return &c->records[i];
	}
	return NULL;
}

static inline _Atomic uint64_t *pin_word(struct ferry__plasma_entry *e, uint32_t slot)
{
	return &e->pins[slot >> 6];
}

static inline void stamp(struct ferry__plasma_index *ix, uint32_t i)
{
	atomic_store_explicit(&ix->ext[i].lru_stamp,
			      atomic_load_explicit(&ix->hdr->lru_clock, memory_order_relaxed),
			      memory_order_relaxed);
}

static inline bool slot_ok(const struct ferry__plasma_index *ix, uint32_t slot)
{
	if (slot < ix->max_clients)
		return true;
	FLOG_ERROR(FERRY__PLASMA_LOG, "index: client slot %u out of range", slot);
	return false;
}

/* ferry__plasma_index_lock() - take the writer lock, waiting at most @timeout_ms (negative:
 * no limit; 0: try once). A dead holder's lock is recovered (EOWNERDEAD: marked consistent,
 * logged). Returns 0, or -EAGAIN when it is held (or timed out), or another -errno. */
int ferry__plasma_index_lock(struct ferry__plasma_index *ix, int timeout_ms);
void ferry__plasma_index_unlock(struct ferry__plasma_index *ix);

#endif
