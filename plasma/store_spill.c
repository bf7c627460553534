/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's spilling: pick sealed, unpinned primaries least recently used first, write them
 * to disk in one batch (plasma/spill.h), free their memory and mark them SPILLED; read them back
 * on demand; spill on a tick while usage is past the threshold. Design: store.h (DESIGN).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/store_int.h"

static const char comp[] = "plasma";

struct victim {
	uint32_t stamp; /* the entry's lru_stamp: older first */
	uint32_t index; /* entry slot */
};

static int by_stamp(const void *a, const void *b)
{
	const struct victim *x = a, *y = b;

	if (x->stamp != y->stamp)
		return x->stamp < y->stamp ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Sealed, primary, unpinned, and its memory would really go: its own block, or a chunk that
 * its owner no longer creates in. */
static bool spillable(struct ferry__plasma_store *s, uint32_t i, struct ferry__plasma_object *o)
{
	uint32_t chunk;

	if (ferry__plasma_index_read(&s->ix, i, o) != FERRY__PLASMA_SEALED ||
	    !(o->flags & FERRY__PLASMA_F_PRIMARY) || ferry__plasma_index_pinned(&s->ix, i))
		return false;
	if (s->shadow[i].gen == o->gen && s->shadow[i].block != FERRY__STORE_NO_BLOCK)
		return true;
	chunk = s->ix.ext[i].chunk;
	return chunk && chunk <= s->max_chunks &&
	       s->chunks[chunk - 1].state == FERRY__STORE_CHUNK_RETIRED;
}

/* The oldest spillable entries adding up to @want bytes into *@out (allocated). Returns how
 * many, or -ENOMEM. */
static int64_t pick(struct ferry__plasma_store *s, uint64_t want, struct victim **out)
{
	uint32_t live = atomic_load(&s->ix.hdr->live_objects), n = 0, k = 0;
	struct ferry__plasma_object o;
	struct victim *v;
	uint64_t sum = 0;

	v = ferry__calloc(FERRY_MAX(live, 1u), sizeof(*v));
	if (!v)
		return -ENOMEM;
	/* Bounded by the count seen first: clients may add entries while we scan. */
	for (uint32_t i = 0; i <= s->ix.mask && n < live; i++)
		if (spillable(s, i, &o))
			v[n++] = (struct victim){atomic_load(&s->ix.ext[i].lru_stamp), i};
	qsort(v, n, sizeof(*v), by_stamp);
	while (k < n && sum < want) {
		ferry__plasma_index_read(&s->ix, v[k++].index, &o);
		sum += o.data_size + o.metadata_size;
	}
	*out = v;
	return k;
}

/* The bytes of entry @index are on disk at @item: record that, then take the object out of
 * memory unless a pin raced us. Returns 1 if it is now SPILLED, 0 if it stays. */
static int commit(struct ferry__plasma_store *s, uint32_t index,
		  const struct ferry__plasma_spill_item *item, uint64_t *freed)
{
	struct ferry__store_spilled *rec;
	struct ferry__plasma_object o;

	ferry__plasma_index_read(&s->ix, index, &o);
	/* The record first: once the memory is freed, failing is no longer an option. */
	if (ferry__hashmap_put(&s->spilled, &index, (void **)&rec) < 0)
		goto err_drop;
	*rec = (struct ferry__store_spilled){item->offset, item->size, item->file, o.gen};
	if (ferry__plasma_index_try_evict(&s->ix, index, o.gen) < 0) {
		ferry__hashmap_remove(&s->spilled, &index, NULL);
		goto err_drop;
	}
	/* Its block or chunk share goes; the record stays (release_bytes reaches it last). */
	*freed += ferry__store_release_bytes(s, index);
	ferry__plasma_index_set_state(&s->ix, index, o.gen, FERRY__PLASMA_EVICTING,
				      FERRY__PLASMA_SPILLED);
	s->spilled_bytes += item->size;
	s->spilled_total_objects++;
	s->spilled_total_bytes += item->size;
	return 1;

err_drop:
	ferry__plasma_spill_drop(s->spill, item->file, item->offset, item->size);
	return 0;
}

int ferry__plasma_store_spill(struct ferry__plasma_store *s, uint64_t bytes, uint64_t *freed)
{
	struct ferry__plasma_spill_item *items;
	uint64_t got = 0;
	struct victim *v;
	int64_t n;
	int r, spilled = 0;

	if (freed)
		*freed = 0;
	if (!s->spill)
		return 0;
	/* A new clock value, as for eviction: uses from now on look newer than every victim. */
	atomic_fetch_add_explicit(&s->ix.hdr->lru_clock, 1, memory_order_relaxed);
	n = pick(s, FERRY_MAX(bytes, s->spill_batch_bytes), &v);
	if (n <= 0) {
		if (n == 0)
			ferry__free(v);
		return (int)n;
	}
	items = ferry__calloc((size_t)n, sizeof(*items));
	r = -ENOMEM;
	if (!items)
		goto out_free_victims;
	for (int64_t k = 0; k < n; k++) {
		struct ferry__plasma_object o;

		ferry__plasma_index_read(&s->ix, v[k].index, &o);
		items[k] = (struct ferry__plasma_spill_item){.data = o.data,
							     .size = o.data_size + o.metadata_size};
	}
	r = ferry__plasma_spill_write(s->spill, items, (uint32_t)n);
	for (int64_t k = 0; r == 0 && k < n; k++)
		spilled += commit(s, v[k].index, &items[k], &got);
	FLOG_DEBUG(comp, "store: spilled %d objects, %" PRIu64 " arena bytes freed", spilled, got);
	ferry__free(items);
out_free_victims:
	ferry__free(v);
	if (freed)
		*freed = got;
	return r < 0 ? r : spilled;
}

void ferry__store_spill_forget(struct ferry__plasma_store *s, uint32_t index)
{
	struct ferry__store_spilled rec;

	if (ferry__hashmap_remove(&s->spilled, &index, &rec) < 0)
		return;
	ferry__plasma_spill_drop(s->spill, rec.file, rec.offset, rec.size);
	s->spilled_bytes -= FERRY_MIN(rec.size, s->spilled_bytes);
}

int ferry__plasma_store_restore(struct ferry__plasma_store *s, uint32_t index, uint32_t gen)
{
	struct ferry__store_spilled rec, *p;
	struct ferry__plasma_object o;
	uint64_t offset;
	int r;

	index &= s->ix.mask;
	p = ferry__hashmap_get(&s->spilled, &index);
	if (!p || p->gen != gen ||
	    ferry__plasma_index_read(&s->ix, index, &o) != FERRY__PLASMA_SPILLED || o.gen != gen)
		return -ENOENT;
	rec = *p; /* make_room may spill others: the map may move */
	r = ferry__store_make_room(s, FERRY_MAX(rec.size, 1u), 0, &offset);
	if (r < 0)
		return r;
	r = ferry__plasma_spill_read(s->spill, rec.file, rec.offset, s->arena.base + offset,
				     rec.size);
	if (r == 0)
		r = ferry__plasma_index_restore(&s->ix, index, gen, offset);
	if (r < 0) {
		ferry__plasma_allocator_free(s->alloc, offset);
		return r;
	}
	s->shadow[index].block = offset;
	s->shadow[index].gen = gen;
	ferry__store_spill_forget(s, index);
	s->restored_objects++;
	s->restored_bytes += rec.size;
	return 0;
}

int ferry__plasma_store_tick(struct ferry__plasma_store *s)
{
	struct ferry__plasma_alloc_stats a;
	uint64_t limit, target, seals;
	int r;

	ferry__plasma_store_collect(s);
	if (!s->spill || s->spill_threshold_pct >= 100)
		return 0;
	ferry__plasma_allocator_stats(s->alloc, &a);
	limit = a.capacity_bytes / 100 * s->spill_threshold_pct;
	seals = atomic_load_explicit(&s->ix.hdr->seal_seq, memory_order_relaxed);
	if (a.allocated_bytes <= limit ||
	    (a.allocated_bytes == s->idle_allocated && seals == s->idle_seals))
		return 0;
	target = a.capacity_bytes / 100 *
		 (s->spill_threshold_pct - FERRY_MIN(5u, s->spill_threshold_pct));
	r = ferry__plasma_store_spill(s, a.allocated_bytes - target, NULL);
	/* Nothing could go: do not scan again until something is allocated or sealed. */
	s->idle_allocated = r == 0 ? a.allocated_bytes : 0;
	s->idle_seals = seals;
	return r;
}

struct ferry__plasma_spill *ferry__plasma_store_spill_area(struct ferry__plasma_store *s)
{
	return s->spill;
}
