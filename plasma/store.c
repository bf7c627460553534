/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store core: owns the arena and control regions, the allocator, the per-entry shadow
 * (which block an entry's bytes are in), client chunks, the deferred-delete list and the
 * eviction order. Everything here runs on the store's single thread (store.h DESIGN).
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/store_int.h"

#define LOCK_TIMEOUT_MS 100 /* a client stuck in the writer lock must not stall the store */
#define DEFAULT_CLIENTS 64u
#define DEFAULT_PIN_RECORDS 1024u
#define OBJECT_PER_BYTES (64u << 10)
#define MIN_DEFAULT_OBJECTS 4096u
#define MAX_DEFAULT_OBJECTS (1u << 20)
#define NO_BLOCK FERRY__STORE_NO_BLOCK
#define DEFAULT_SPILL_THRESHOLD 80u
#define DEFAULT_SPILL_BATCH (64ull << 20)

static const char comp[] = "plasma";

static void resolve(const struct ferry__plasma_store_opts *in, uint64_t arena_size,
		    struct ferry__plasma_index_params *p)
{
	uint64_t objects = arena_size / OBJECT_PER_BYTES;

	p->arena_size = arena_size;
	p->max_objects = in->max_objects
				 ? in->max_objects
				 : (uint32_t)FERRY_MIN(FERRY_MAX(objects, MIN_DEFAULT_OBJECTS),
						       MAX_DEFAULT_OBJECTS);
	p->max_clients = in->max_clients ? in->max_clients : DEFAULT_CLIENTS;
	p->pin_records = in->pin_records ? in->pin_records : DEFAULT_PIN_RECORDS;
	p->max_chunks = in->max_chunks ? in->max_chunks : 4 * p->max_clients;
}

static int create_regions(struct ferry__plasma_store *s, const struct ferry__plasma_store_opts *o,
			  struct ferry__plasma_index_params *p)
{
	unsigned region_flags =
		((o->flags & FERRY__PLASMA_STORE_NO_PREFAULT) ? FERRY__ARENA_NO_PREFAULT : 0) |
		((o->flags & FERRY__PLASMA_STORE_SHM_FILE) ? FERRY__ARENA_SHM_FILE : 0);
	struct ferry__plasma_arena_opts ao = {o->memory_bytes, o->hugepages, region_flags,
					      "ferry-plasma"};
	uint64_t control_size;
	int r;

	r = ferry__plasma_arena_create(&ao, &s->arena);
	if (r < 0)
		return r;
	resolve(o, s->arena.size, p);
	r = ferry__plasma_index_region_size(p, &control_size);
	if (r < 0)
		goto err_destroy_arena;
	ao = (struct ferry__plasma_arena_opts){control_size, FERRY_PLASMA_HUGEPAGES_OFF,
					       region_flags, "ferry-plasma-index"};
	r = ferry__plasma_arena_create(&ao, &s->control);
	if (r < 0)
		goto err_destroy_arena;
	r = ferry__plasma_index_format(s->control.base, s->control.size, p, (int)getpid());
	if (r < 0)
		goto err_destroy_control;
	r = ferry__plasma_index_open(&s->ix, s->control.base, s->control.size, s->arena.base,
				     s->arena.size);
	if (r < 0)
		goto err_destroy_control;
	return 0;

err_destroy_control:
	ferry__plasma_arena_destroy(&s->control);
err_destroy_arena:
	ferry__plasma_arena_destroy(&s->arena);
	return r;
}

static int spill_setup(struct ferry__plasma_store *s, const struct ferry__plasma_store_opts *o)
{
	struct ferry__plasma_spill_opts so = {o->spill_dir, o->spill_max_bytes};
	int r;

	ferry__hashmap_init(&s->spilled, sizeof(uint32_t), sizeof(struct ferry__store_spilled));
	s->spill_threshold_pct = o->spill_threshold_pct ? FERRY_MIN(o->spill_threshold_pct, 100u)
							: DEFAULT_SPILL_THRESHOLD;
	s->spill_batch_bytes = o->spill_batch_bytes
				       ? o->spill_batch_bytes
				       : FERRY_MIN(DEFAULT_SPILL_BATCH, s->arena.size / 8);
	if (!o->spill_dir)
		return 0;
	r = ferry__plasma_spill_create(&so, &s->spill);
	if (r == 0)
		FLOG_INFO(comp, "store: spilling primaries to %s past %u%% usage", o->spill_dir,
			  s->spill_threshold_pct);
	return r;
}

int ferry__plasma_store_create(const struct ferry__plasma_store_opts *opts,
			       struct ferry__plasma_store **out)
{
	struct ferry__plasma_store_opts o = opts ? *opts : (struct ferry__plasma_store_opts){0};
	struct ferry__plasma_index_params p;
	struct ferry__plasma_store *s;
	uint32_t slots;
	int r;

	s = ferry__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->flags = o.flags;
	s->on_removed = o.on_removed;
	s->on_restored = o.on_restored;
	s->on_restore_done = o.on_restore_done;
	s->hook_arg = o.hook_arg;
	s->post = o.post;
	s->post_arg = o.post_arg;
	r = create_regions(s, &o, &p);
	if (r < 0)
		goto err_free_store;
	slots = s->ix.mask + 1;
	s->max_chunks = p.max_chunks;
	r = ferry__plasma_allocator_create(0, s->arena.size, &s->alloc);
	if (r < 0)
		goto err_destroy_regions;
	r = ferry__plasma_lru_init(&s->lru, slots);
	if (r < 0)
		goto err_destroy_alloc;
	r = -ENOMEM;
	s->shadow = ferry__calloc(slots, sizeof(*s->shadow));
	if (!s->shadow)
		goto err_fini_lru;
	s->chunks = ferry__calloc(p.max_chunks, sizeof(*s->chunks));
	if (!s->chunks)
		goto err_free_shadow;
	s->deferred = ferry__calloc(slots, sizeof(*s->deferred));
	if (!s->deferred)
		goto err_free_chunks;
	r = spill_setup(s, &o);
	if (r < 0)
		goto err_free_deferred;
	FLOG_INFO(comp,
		  "store: %" PRIu64 " MiB arena, %u objects, %u client slots, %" PRIu64
		  " KiB index",
		  s->arena.size >> 20, p.max_objects, p.max_clients, s->control.size >> 10);
	*out = s;
	return 0;

err_free_deferred:
	ferry__free(s->deferred);
err_free_chunks:
	ferry__free(s->chunks);
err_free_shadow:
	ferry__free(s->shadow);
err_fini_lru:
	ferry__plasma_lru_fini(&s->lru);
err_destroy_alloc:
	ferry__plasma_allocator_destroy(s->alloc);
err_destroy_regions:
	ferry__plasma_arena_destroy(&s->control);
	ferry__plasma_arena_destroy(&s->arena);
err_free_store:
	ferry__free(s);
	return r;
}

void ferry__plasma_store_destroy(struct ferry__plasma_store *s)
{
	if (!s)
		return;
	ferry__store_spill_stop(s);
	ferry__store_spill_settle(s);
	ferry__store_restore_discard(s);
	ferry__plasma_spill_destroy(s->spill);
	ferry__hashmap_fini(&s->spilled);
	ferry__free(s->deferred);
	ferry__free(s->chunks);
	ferry__free(s->shadow);
	ferry__plasma_lru_fini(&s->lru);
	ferry__plasma_allocator_destroy(s->alloc);
	ferry__plasma_arena_destroy(&s->control);
	ferry__plasma_arena_destroy(&s->arena);
	ferry__free(s);
}

struct ferry__plasma_index *ferry__plasma_store_index(struct ferry__plasma_store *s)
{
	return &s->ix;
}

const struct ferry__plasma_arena *ferry__plasma_store_arena(const struct ferry__plasma_store *s)
{
	return &s->arena;
}

const struct ferry__plasma_arena *ferry__plasma_store_control(const struct ferry__plasma_store *s)
{
	return &s->control;
}

/* ---- memory ---- */

static void poison(struct ferry__plasma_store *s, uint64_t offset, uint64_t size)
{
	if ((s->flags & FERRY__PLASMA_STORE_POISON) && offset <= s->arena.size &&
	    size <= s->arena.size - offset)
		memset(s->arena.base + offset, FERRY__PLASMA_POISON_BYTE, size);
}

static void free_chunk(struct ferry__plasma_store *s, uint32_t k)
{
	struct ferry__store_chunk *c = &s->chunks[k];

	ferry__plasma_allocator_free(s->alloc, c->offset);
	s->chunk_count--;
	s->chunk_bytes -= c->size;
	*c = (struct ferry__store_chunk){0};
}

static void retire_chunk(struct ferry__plasma_store *s, uint32_t k)
{
	s->chunks[k].state = FERRY__STORE_CHUNK_RETIRED;
	if (atomic_load(&s->ix.chunk_live[k]) == 0)
		free_chunk(s, k);
}

/* One object in chunk @k is gone. The entry's chunk field and offset come from shared memory,
 * so they are checked against the store's own record of the chunk. */
static void chunk_object_gone(struct ferry__plasma_store *s, uint32_t k,
			      const struct ferry__plasma_object *o)
{
	struct ferry__store_chunk *c = k < s->max_chunks ? &s->chunks[k] : NULL;

	if (!c || c->state == FERRY__STORE_CHUNK_FREE || o->offset < c->offset ||
	    o->offset - c->offset >= c->size) {
		FLOG_ERROR(comp, "store: entry %u names chunk %u it is not in; leaking it",
			   o->index, k + 1);
		return;
	}
	if (atomic_fetch_sub(&s->ix.chunk_live[k], 1) == 1 &&
	    c->state == FERRY__STORE_CHUNK_RETIRED)
		free_chunk(s, k);
}

static void undefer(struct ferry__plasma_store *s, uint32_t index)
{
	uint32_t pos = s->shadow[index].deferred_pos;
	uint32_t last;

	if (!pos)
		return;
	last = s->deferred[--s->deferred_count];
	s->deferred[pos - 1] = last;
	s->shadow[last].deferred_pos = pos;
	s->shadow[index].deferred_pos = 0;
}

uint64_t ferry__store_release_bytes(struct ferry__plasma_store *s, uint32_t index)
{
	struct ferry__store_shadow *sh = &s->shadow[index];
	struct ferry__plasma_object o;
	uint64_t freed = 0;

	ferry__plasma_index_read(&s->ix, index, &o);
	if (sh->gen == o.gen && sh->block != NO_BLOCK) {
		if (ferry__plasma_allocator_block_size(s->alloc, sh->block, &freed) == 0) {
			poison(s, sh->block, freed);
			ferry__plasma_allocator_free(s->alloc, sh->block);
		}
		sh->block = NO_BLOCK;
	} else if (s->ix.ext[index].chunk) {
		poison(s, o.offset, FERRY_ALIGN_UP(o.data_size + o.metadata_size, 64u));
		chunk_object_gone(s, s->ix.ext[index].chunk - 1, &o);
		s->ix.ext[index].chunk = 0;
	} else {
		ferry__store_spill_forget(s, index);
	}
	return freed;
}

/* Free the memory of entry @index (DELETING, EVICTING, or aborted) and make it a tombstone.
 * Returns the allocator bytes freed (0 for chunk-backed and spilled objects). */
uint64_t ferry__store_finalize(struct ferry__plasma_store *s, uint32_t index)
{
	struct ferry__store_shadow *sh = &s->shadow[index];
	uint64_t freed;

	assert(!sh->spilling); /* a background spill still reads its bytes */
	freed = ferry__store_release_bytes(s, index);

	undefer(s, index);
	*sh = (struct ferry__store_shadow){.block = NO_BLOCK};
	ferry__plasma_lru_remove(&s->lru, index);
	ferry__plasma_index_free_slot(&s->ix, index);
	return freed;
}

/* finalize() for a sealed entry leaving the store: tell the hook first. */
static uint64_t drop(struct ferry__plasma_store *s, uint32_t index, bool evicted)
{
	struct ferry__plasma_object o;

	if (s->on_removed) {
		ferry__plasma_index_read(&s->ix, index, &o);
		s->on_removed(s->hook_arg, index, o.gen, evicted);
	}
	return ferry__store_finalize(s, index);
}

/* ---- eviction ---- */

static bool evictable_now(struct ferry__plasma_store *s, uint32_t i, struct ferry__plasma_object *o)
{
	uint32_t stamp = atomic_load_explicit(&s->ix.ext[i].lru_stamp, memory_order_relaxed);

	if (stamp != s->lru.nodes[i].seen ||
	    ferry__plasma_index_read(&s->ix, i, o) != FERRY__PLASMA_SEALED ||
	    ferry__plasma_index_pinned(&s->ix, i)) {
		/* Used since we last looked, in use, or not sealed yet: a second chance. */
		ferry__plasma_lru_push(&s->lru, i, stamp);
		return false;
	}
	return true;
}

int ferry__plasma_store_evict(struct ferry__plasma_store *s, uint64_t bytes, uint64_t *freed)
{
	uint64_t got = 0, budget = 2ull * s->lru.count;
	int evicted = 0;

	/* A new clock value: stamps written from now on differ from every "seen" so far. */
	atomic_fetch_add_explicit(&s->ix.hdr->lru_clock, 1, memory_order_relaxed);
	while (got < bytes && s->lru.count && budget--) {
		uint32_t i = s->lru.oldest;
		struct ferry__plasma_object o;
		uint64_t n;

		if (!evictable_now(s, i, &o))
			continue;
		if (ferry__plasma_index_try_evict(&s->ix, i, o.gen) < 0) {
			ferry__plasma_lru_push(&s->lru, i, s->lru.nodes[i].seen);
			continue;
		}
		n = drop(s, i, true);
		got += n;
		evicted++;
		s->evicted_objects++;
		s->evicted_bytes += n;
	}
	if (freed)
		*freed = got;
	return evicted;
}

int ferry__store_make_room(struct ferry__plasma_store *s, uint64_t size, unsigned flags,
			   uint64_t *offset)
{
	int r;

	for (;;) {
		r = ferry__plasma_allocator_alloc(s->alloc, size, offset);
		if (r != -ENOSPC || (flags & FERRY__PLASMA_CREATE_NO_EVICT))
			return r;
		if (ferry__plasma_store_evict(s, size, NULL) > 0)
			continue;
		/* Each spill turns its victims into SPILLED entries for good, so this ends. */
		r = ferry__plasma_store_spill(s, size, NULL);
		if (r == -ENOMEM)
			return r;
		/* The victims may all be in the background batch: wait for it. */
		if (r <= 0 && !ferry__store_spill_settle(s))
			return -ENOSPC;
	}
}

/* ---- objects ---- */

static bool live_slot(struct ferry__plasma_store *s, uint32_t slot)
{
	if (slot < s->ix.max_clients &&
	    atomic_load(&ferry__plasma_index_client(&s->ix, slot)->state) ==
		    FERRY__PLASMA_CLIENT_LIVE)
		return true;
	FLOG_ERROR(comp, "store: client slot %u is not live", slot);
	return false;
}

int ferry__plasma_store_object_create_owned(struct ferry__plasma_store *s, uint32_t slot,
					    const struct ferry_object_id *id, uint64_t data_size,
					    uint32_t metadata_size, unsigned flags,
					    const struct ferry_worker_id *owner_id,
					    struct ferry__plasma_object *out)
{
	uint64_t total = data_size + metadata_size, offset;
	int r;

	if (!live_slot(s, slot))
		return -EINVAL;
	if (total < data_size || total > s->arena.size)
		return -E2BIG;
	r = ferry__store_make_room(s, FERRY_MAX(total, 1u), flags, &offset);
	if (r < 0)
		return r;
	r = ferry__plasma_index_insert(&s->ix,
				       &(struct ferry__plasma_insert){
					       .id = id,
					       .offset = offset,
					       .data_size = data_size,
					       .metadata_size = metadata_size,
					       .owner = (uint16_t)slot,
					       .flags = (uint8_t)(flags & FERRY__PLASMA_F_PRIMARY),
					       .owner_id = owner_id,
				       },
				       LOCK_TIMEOUT_MS, out);
	if (r < 0) {
		ferry__plasma_allocator_free(s->alloc, offset);
		return r;
	}
	s->shadow[out->index] = (struct ferry__store_shadow){.block = offset, .gen = out->gen};
	if (!(flags & FERRY__PLASMA_F_PRIMARY)) {
		ferry__plasma_lru_push(&s->lru, out->index,
				       atomic_load(&s->ix.ext[out->index].lru_stamp));
		/* Tick, so that a use right after this create is seen as a use. */
		atomic_fetch_add_explicit(&s->ix.hdr->lru_clock, 1, memory_order_relaxed);
	}
	return 0;
}

/* List sealed secondary entry @index for eviction unless it is listed already. */
static void list_secondary(struct ferry__plasma_store *s, uint32_t index)
{
	struct ferry__plasma_object o;

	if (ferry__plasma_lru_listed(&s->lru, index) ||
	    ferry__plasma_index_read(&s->ix, index, &o) != FERRY__PLASMA_SEALED ||
	    (o.flags & FERRY__PLASMA_F_PRIMARY))
		return;
	ferry__plasma_lru_push(&s->lru, index, atomic_load(&s->ix.ext[index].lru_stamp));
}

void ferry__plasma_store_object_sealed(struct ferry__plasma_store *s,
				       const struct ferry__plasma_object *obj)
{
	if (obj->index <= s->ix.mask)
		list_secondary(s, obj->index);
}

int ferry__plasma_store_object_abort(struct ferry__plasma_store *s, uint32_t slot,
				     const struct ferry__plasma_object *obj)
{
	int r = ferry__plasma_index_abort(&s->ix, obj->index, obj->gen, slot);

	if (r < 0)
		return r;
	ferry__store_finalize(s, obj->index);
	return 0;
}

int ferry__plasma_store_object_delete(struct ferry__plasma_store *s,
				      const struct ferry_object_id *id)
{
	struct ferry__plasma_object o;
	int r = ferry__plasma_index_find(&s->ix, id, &o);

	if (r < 0)
		return r;
	if (o.state == FERRY__PLASMA_SPILLED) {
		/* No pins on a spilled object: it goes at once. */
		if (ferry__plasma_index_set_state(&s->ix, o.index, o.gen, FERRY__PLASMA_SPILLED,
						  FERRY__PLASMA_DELETING) < 0)
			return -ENOENT;
		drop(s, o.index, false);
		return 0;
	}
	r = ferry__plasma_index_delete(&s->ix, o.index, o.gen);
	if (r == -EALREADY)
		return 1;
	if (r == 0 && !s->shadow[o.index].spilling) {
		drop(s, o.index, false);
		return 0;
	}
	if (r < 0)
		return r;
	/* Pinned, or a background spill reads it: freed by collect() later. */
	if (!s->shadow[o.index].deferred_pos) {
		s->deferred[s->deferred_count++] = o.index;
		s->shadow[o.index].deferred_pos = s->deferred_count;
	}
	return 1;
	return r;
}

int ferry__plasma_store_collect(struct ferry__plasma_store *s)
{
	int freed = 0;

	/* Walk backwards: finalize() moves the last element into the freed position. */
	for (uint32_t k = s->deferred_count; k-- > 0;) {
		uint32_t i = s->deferred[k];

		if (!ferry__plasma_index_pinned(&s->ix, i) && !s->shadow[i].spilling) {
			drop(s, i, false);
			freed++;
		}
	}
	return freed;
}

/* ---- clients and chunks ---- */

int ferry__plasma_store_client_add(struct ferry__plasma_store *s, int pid, uint32_t *slot)
{
	return ferry__plasma_index_client_open(&s->ix, pid, slot);
}

int ferry__plasma_store_client_retire(struct ferry__plasma_store *s, uint32_t slot)
{
	int r;

	if (slot == FERRY__PLASMA_STORE_SLOT || slot >= s->ix.max_clients)
		return -EINVAL;
	r = ferry__plasma_index_client_reclaim(&s->ix, slot, LOCK_TIMEOUT_MS);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i <= s->ix.mask; i++) {
		struct ferry__plasma_object o;

		if (ferry__plasma_index_read(&s->ix, i, &o) == FERRY__PLASMA_CREATING &&
		    o.owner == slot && ferry__plasma_index_abort(&s->ix, i, o.gen, slot) == 0)
			ferry__store_finalize(s, i);
		/* A secondary it sealed in its chunk but died before telling us of. */
		else
			list_secondary(s, i);
	}
	for (uint32_t k = 0; k < s->max_chunks; k++)
		if (s->chunks[k].state == FERRY__STORE_CHUNK_ACTIVE && s->chunks[k].owner == slot)
			retire_chunk(s, k);
	ferry__plasma_store_collect(s);
	return 0;
}

int ferry__plasma_store_client_remove(struct ferry__plasma_store *s, uint32_t slot)
{
	int r = ferry__plasma_store_client_retire(s, slot);

	if (r == 0)
		ferry__plasma_index_client_close(&s->ix, slot);
	return r;
}

int ferry__plasma_store_chunk_grant(struct ferry__plasma_store *s, uint32_t slot, uint64_t size)
{
	struct ferry__plasma_client *c;
	uint32_t k, old;
	uint64_t offset;
	int r;

	if (!live_slot(s, slot) || slot == FERRY__PLASMA_STORE_SLOT || !size ||
	    size > s->arena.size)
		return -EINVAL;
	for (k = 0; k < s->max_chunks && s->chunks[k].state != FERRY__STORE_CHUNK_FREE; k++)
		;
	if (k == s->max_chunks) {
		FLOG_WARN(comp, "store: all %u chunk counters in use", s->max_chunks);
		return -ENOSPC;
	}
	size = FERRY_ALIGN_UP(size, 64u);
	r = ferry__store_make_room(s, size, 0, &offset);
	if (r < 0)
		return r;
	s->chunks[k] = (struct ferry__store_chunk){offset, size, slot, FERRY__STORE_CHUNK_ACTIVE};
	s->chunk_count++;
	s->chunk_bytes += size;
	atomic_store(&s->ix.chunk_live[k], 0);
	c = ferry__plasma_index_client(&s->ix, slot);
	old = atomic_load(&c->chunk);
	c->chunk_offset = offset;
	c->chunk_size = size;
	atomic_store(&c->chunk_used, 0);
	/* Release: the client reads offset and size after it sees the new chunk number. */
	atomic_store_explicit(&c->chunk, k + 1, memory_order_release);
	if (old && old <= s->max_chunks && s->chunks[old - 1].state == FERRY__STORE_CHUNK_ACTIVE &&
	    s->chunks[old - 1].owner == slot)
		retire_chunk(s, old - 1);
	return 0;
}

void ferry__plasma_store_stats(struct ferry__plasma_store *s, struct ferry_plasma_stats *out)
{
	struct ferry__plasma_spill_stats sp = {0};
	struct ferry__plasma_alloc_stats a;
	uint64_t clients = 0;

	ferry__plasma_allocator_stats(s->alloc, &a);
	if (s->spill)
		ferry__plasma_spill_stats(s->spill, &sp);
	for (uint32_t k = 0; k < s->ix.max_clients; k++)
		clients += atomic_load(&ferry__plasma_index_client(&s->ix, k)->state) ==
			   FERRY__PLASMA_CLIENT_LIVE;
	*out = (struct ferry_plasma_stats){
		.capacity_bytes = a.capacity_bytes,
		.allocated_bytes = a.allocated_bytes,
		.free_bytes = a.free_bytes,
		.largest_free_bytes = a.largest_free_bytes,
		.free_blocks = a.free_blocks,
		.objects = atomic_load(&s->ix.hdr->live_objects),
		.max_objects = s->ix.hdr->max_objects,
		.table_slots_used = atomic_load(&s->ix.hdr->used_slots),
		.table_slots = s->ix.mask + 1ull,
		.clients = clients,
		.chunks = s->chunk_count,
		.chunk_bytes = s->chunk_bytes,
		.deferred_deletes = s->deferred_count,
		.evicted_objects = s->evicted_objects,
		.evicted_bytes = s->evicted_bytes,
		.spilled_objects = ferry__hashmap_count(&s->spilled),
		.spilled_bytes = s->spilled_bytes,
		.spilled_total_objects = s->spilled_total_objects,
		.spilled_total_bytes = s->spilled_total_bytes,
		.restored_objects = s->restored_objects,
		.restored_bytes = s->restored_bytes,
		.spill_files = sp.files,
		.spill_disk_bytes = sp.disk_bytes,
		.page_size_bytes = s->arena.page_size,
		.pages = s->arena.pages,
	};
}
