/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared object index, first half: region layout, lock-free lookup, and the client
 * operations (pin/release through pin masks and records, create in a chunk, seal). The
 * protocol and its memory ordering are described in index.h (DESIGN); index_write.c has the
 * writer lock, inserts and the store's transitions.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "plasma/index_int.h"

#define GET_ATTEMPTS 64 /* lookups retried while an entry changes under us */
#define MAX_OBJECTS_LIMIT (1u << 28)
#define MAX_RECORDS_LIMIT (1u << 20)
#define MAX_CHUNKS_LIMIT (1u << 20)
#define HEADER_BYTES 4096u

static const char comp[] = "plasma";

struct layout {
	uint32_t slots;	  /* table slots */
	uint32_t records; /* pin records per client */
	uint64_t entries; /* section offsets */
	uint64_t ext;	  /* ... */
	uint64_t clients; /* ... */
	uint64_t stride;  /* bytes per client slot */
	uint64_t chunks;  /* ... */
	uint64_t total;	  /* region bytes */
};

static uint32_t pow2_at_least(uint64_t x)
{
	uint32_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

static int compute_layout(const struct ferry__plasma_index_params *p, struct layout *l)
{
	if (!p->arena_size || !p->max_objects || p->max_objects > MAX_OBJECTS_LIMIT ||
	    !p->max_clients || p->max_clients > FERRY__PLASMA_MAX_CLIENTS || !p->pin_records ||
	    p->pin_records > MAX_RECORDS_LIMIT || !p->max_chunks ||
	    p->max_chunks > MAX_CHUNKS_LIMIT) {
		FLOG_ERROR(comp,
			   "index: parameters out of range (objects %u, clients %u, pin "
			   "records %u, chunks %u)",
			   p->max_objects, p->max_clients, p->pin_records, p->max_chunks);
		return -EINVAL;
	}
	/* Half full at most: linear probing stays short, and tombstones have room. */
	l->slots = pow2_at_least(FERRY_MAX(16u, 2ull * p->max_objects));
	l->records = pow2_at_least(FERRY_MAX(4u, p->pin_records));
	l->entries = HEADER_BYTES;
	l->ext = l->entries + (uint64_t)l->slots * sizeof(struct ferry__plasma_entry);
	l->clients = FERRY_ALIGN_UP(
		l->ext + (uint64_t)l->slots * sizeof(struct ferry__plasma_entry_ext), 64u);
	l->stride = sizeof(struct ferry__plasma_client) +
		    (uint64_t)l->records * sizeof(struct ferry__plasma_pin_record);
	l->chunks = l->clients + l->stride * p->max_clients;
	l->total = FERRY_ALIGN_UP(l->chunks + 4ull * p->max_chunks, 4096u);
	return 0;
}

_Static_assert(sizeof(struct ferry__plasma_header) <= HEADER_BYTES, "header fits its page");

int ferry__plasma_index_region_size(const struct ferry__plasma_index_params *p, uint64_t *size)
{
	struct layout l;
	int r = compute_layout(p, &l);

	if (r == 0)
		*size = l.total;
	return r;
}

static int init_writer_lock(pthread_mutex_t *m)
{
	pthread_mutexattr_t attr;
	int r;

	r = pthread_mutexattr_init(&attr);
	if (r)
		return -r;
	r = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	if (!r)
		r = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	if (!r)
		r = pthread_mutex_init(m, &attr);
	pthread_mutexattr_destroy(&attr);
	return -r;
}

int ferry__plasma_index_format(void *region, uint64_t size,
			       const struct ferry__plasma_index_params *p, int store_pid)
{
	struct ferry__plasma_header *h = region;
	struct ferry__plasma_client *store;
	struct ferry_object_id seed;
	struct layout l;
	uint64_t seq;
	int r;

	r = compute_layout(p, &l);
	if (r < 0)
		return r;
	if (size < l.total) {
		FLOG_ERROR(comp, "index: region of %" PRIu64 " bytes, %" PRIu64 " needed", size,
			   l.total);
		return -EINVAL;
	}
	memset(region, 0, l.total);
	*h = (struct ferry__plasma_header){
		.version = FERRY__PLASMA_LAYOUT_VERSION,
		.header_size = sizeof(*h),
		.region_size = l.total,
		.arena_size = p->arena_size,
		.table_slots = l.slots,
		.max_objects = p->max_objects,
		.max_used_slots = l.slots / 8 * 7,
		.max_clients = p->max_clients,
		.pin_records = l.records,
		.max_chunks = p->max_chunks,
		.entries_offset = l.entries,
		.ext_offset = l.ext,
		.clients_offset = l.clients,
		.client_stride = l.stride,
		.chunks_offset = l.chunks,
		.store_pid = store_pid,
	};
	r = init_writer_lock(&h->writer_lock);
	if (r < 0)
		return r;
	/* Placement ids start at random: a store started again (on the same address, with the
	 * directory still listing the old one's places) must not hand out ids the old one gave,
	 * which a puller reading ahead would take for the places it read (objmgr_rdma.c). Half the
	 * range: 2^63 ids to go before a wrap. */
	ferry_object_id_random(&seed);
	memcpy(&seq, seed.bytes, sizeof(seq));
	atomic_store(&h->alloc_seq, seq >> 1);
	store = (struct ferry__plasma_client *)(void *)((uint8_t *)region + l.clients);
	store->pid = store_pid;
	atomic_store(&store->state, FERRY__PLASMA_CLIENT_LIVE);
	/* The magic goes last: a region that attaches is completely formatted. */
	atomic_thread_fence(memory_order_release);
	h->magic = FERRY__PLASMA_MAGIC;
	return 0;
}

int ferry__plasma_index_open(struct ferry__plasma_index *ix, void *region, uint64_t region_size,
			     void *arena, uint64_t arena_size)
{
	struct ferry__plasma_header *h = region;
	struct ferry__plasma_index_params p;
	struct layout l;

	if (region_size < HEADER_BYTES || h->magic != FERRY__PLASMA_MAGIC ||
	    h->version != FERRY__PLASMA_LAYOUT_VERSION || h->header_size != sizeof(*h)) {
		FLOG_ERROR(comp, "index: not a plasma control region of this version");
		return -EPROTO;
	}
	atomic_thread_fence(memory_order_acquire);
	p = (struct ferry__plasma_index_params){h->arena_size, h->max_objects, h->max_clients,
						h->pin_records, h->max_chunks};
	if (compute_layout(&p, &l) < 0 || l.total != h->region_size || l.total > region_size ||
	    l.slots != h->table_slots || l.records != h->pin_records ||
	    l.entries != h->entries_offset || l.ext != h->ext_offset ||
	    l.clients != h->clients_offset || l.stride != h->client_stride ||
	    l.chunks != h->chunks_offset || h->arena_size > arena_size) {
		FLOG_ERROR(comp, "index: control region layout does not match its header or "
				 "the mapped sizes");
		return -EPROTO;
	}
	*ix = (struct ferry__plasma_index){
		.hdr = h,
		.entries = (struct ferry__plasma_entry *)(void *)((uint8_t *)region + l.entries),
		.ext = (struct ferry__plasma_entry_ext *)(void *)((uint8_t *)region + l.ext),
		.clients = (uint8_t *)region + l.clients,
		.chunk_live = (_Atomic uint32_t *)(void *)((uint8_t *)region + l.chunks),
		.arena = arena,
		.arena_size = h->arena_size,
		.client_stride = l.stride,
		.mask = l.slots - 1,
		.record_mask = l.records - 1,
		.max_clients = h->max_clients,
		.max_chunks = h->max_chunks,
	};
	return 0;
}

/* ---- IDs and probing ---- */

/* The slot holding @id in a visible state, with its word in *@word; -1 if none. A FREE slot
 * ends the search: no live entry's probe path crosses one (index_write.c, sweep()). */
static int64_t probe(const struct ferry__plasma_index *ix, const struct packed_id *p, uint32_t home,
		     uint64_t *word)
{
	for (uint32_t n = 0; n <= ix->mask; n++) {
		uint32_t i = (home + n) & ix->mask;
		const struct ferry__plasma_entry *e = &ix->entries[i];
		/* Acquire: the fields published with CREATING are visible once we see it. */
		uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
		unsigned st = ferry__plasma_word_state(w);

		if (st == FERRY__PLASMA_FREE)
			return -1;
		if (visible(st) && id_matches(e, p)) {
			*word = w;
			return i;
		}
	}
	return -1;
}

/* The bytes an entry names lie inside the arena (a scribbling client could break that). */
static bool in_arena(const struct ferry__plasma_index *ix, const struct ferry__plasma_entry *e)
{
	uint64_t size = e->data_size + e->metadata_size;

	return e->offset <= ix->arena_size && size >= e->data_size &&
	       size <= ix->arena_size - e->offset;
}

/* ---- pin records (written only by their client) ---- */

static struct ferry__plasma_pin_record *record_add(const struct ferry__plasma_index *ix,
						   struct ferry__plasma_client *c, uint32_t index,
						   uint32_t gen)
{
	uint32_t used = atomic_load_explicit(&c->records_used, memory_order_relaxed);
	uint32_t i = record_home(ix, index);
	struct ferry__plasma_pin_record *r;

	if (used >= (ix->record_mask + 1) / 4 * 3)
		return NULL;
	while (atomic_load_explicit(&c->records[i].entry, memory_order_relaxed))
		i = (i + 1) & ix->record_mask;
	r = &c->records[i];
	atomic_store_explicit(&r->gen, gen, memory_order_relaxed);
	atomic_store_explicit(&r->count, 0, memory_order_relaxed);
	atomic_store_explicit(&r->entry, index + 1, memory_order_relaxed);
	atomic_store_explicit(&c->records_used, used + 1, memory_order_relaxed);
	return r;
}

/* Remove by shifting later records of the cluster back (no tombstones). */
static void record_remove(const struct ferry__plasma_index *ix, struct ferry__plasma_client *c,
			  struct ferry__plasma_pin_record *r)
{
	uint32_t mask = ix->record_mask, i = (uint32_t)(r - c->records), j = i;

	for (;;) {
		uint32_t key, k;

		j = (j + 1) & mask;
		key = atomic_load_explicit(&c->records[j].entry, memory_order_relaxed);
		if (key == 0)
			break;
		k = record_home(ix, key - 1);
		/* The record at j may fill the hole at i only if its home is not in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		atomic_store_explicit(
			&c->records[i].gen,
			atomic_load_explicit(&c->records[j].gen, memory_order_relaxed),
			memory_order_relaxed);
		atomic_store_explicit(
			&c->records[i].count,
			atomic_load_explicit(&c->records[j].count, memory_order_relaxed),
			memory_order_relaxed);
		atomic_store_explicit(&c->records[i].entry, key, memory_order_relaxed);
		i = j;
	}
	atomic_store_explicit(&c->records[i].entry, 0, memory_order_relaxed);
	atomic_store_explicit(&c->records[i].count, 0, memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->records_used, 1, memory_order_relaxed);
}

/* ---- client operations ---- */

/* First pin of entry @i by @slot: set our bit, then check that the entry did not change.
 * Returns 0 (pinned), -EAGAIN (it changed: look up again) or -ENOSPC (records full). */
static int first_pin(struct ferry__plasma_index *ix, struct ferry__plasma_client *c, uint32_t slot,
		     uint32_t i, uint64_t w, const struct packed_id *p)
{
	struct ferry__plasma_entry *e = &ix->entries[i];
	uint64_t bit = 1ull << (slot & 63);
	struct ferry__plasma_pin_record *r;

	r = record_add(ix, c, i, ferry__plasma_word_gen(w));
	if (!r)
		return -ENOSPC;
	/* seq_cst store then seq_cst load, against the store's CAS then mask load (index.h). */
	atomic_fetch_or(pin_word(e, slot), bit);
	if (atomic_load(&e->word) != w || !id_matches(e, p)) {
		atomic_fetch_and(pin_word(e, slot), ~bit);
		record_remove(ix, c, r);
		return -EAGAIN;
	}
	atomic_store_explicit(&r->count, 1, memory_order_relaxed);
	stamp(ix, i);
	return 0;
}

int ferry__plasma_index_get(struct ferry__plasma_index *ix, uint32_t slot,
			    const struct ferry_object_id *id, struct ferry__plasma_object *out)
{
	struct packed_id p = pack_id(id);
	uint32_t home = home_of(ix, id);
	struct ferry__plasma_client *c;

	if (!slot_ok(ix, slot))
		return -EINVAL;
	c = ferry__plasma_index_client(ix, slot);
	for (int attempt = 0; attempt < GET_ATTEMPTS; attempt++) {
		struct ferry__plasma_pin_record *r;
		uint64_t w;
		int64_t i = probe(ix, &p, home, &w);
		int ret;

		if (i < 0)
			return -ENOENT;
		r = record_find(ix, c, (uint32_t)i);
		if (r && atomic_load_explicit(&r->count, memory_order_relaxed) &&
		    atomic_load_explicit(&r->gen, memory_order_relaxed) ==
			    ferry__plasma_word_gen(w) &&
		    ferry__plasma_word_state(w) != FERRY__PLASMA_DELETING) {
			/* Already pinned by us: the entry cannot change; no shared write. */
			atomic_fetch_add_explicit(&r->count, 1, memory_order_relaxed);
			fill(ix, (uint32_t)i, w, out);
			return 0;
		}
		switch (ferry__plasma_word_state(w)) {
		case FERRY__PLASMA_SEALED:
			break;
		case FERRY__PLASMA_CREATING:
			return -EINPROGRESS;
		case FERRY__PLASMA_EVICTING:
			sched_yield(); /* the store decides within microseconds */
			continue;
		case FERRY__PLASMA_SPILLED:
			return -ENODATA;
		default:
			return -ENOENT;
		}
		ret = first_pin(ix, c, slot, (uint32_t)i, w, &p);
		if (ret == -EAGAIN)
			continue;
		if (ret < 0)
			return ret;
		if (!in_arena(ix, &ix->entries[i])) {
			FLOG_ERROR(comp, "index: entry %" PRId64 " names bytes outside the arena",
				   i);
			atomic_fetch_and(pin_word(&ix->entries[i], slot), ~(1ull << (slot & 63)));
			record_remove(ix, c, record_find(ix, c, (uint32_t)i));
			return -EPROTO;
		}
		fill(ix, (uint32_t)i, w, out);
		return 0;
	}
	return -EAGAIN;
}

int ferry__plasma_index_release(struct ferry__plasma_index *ix, uint32_t slot,
				const struct ferry__plasma_object *obj)
{
	struct ferry__plasma_pin_record *r;
	struct ferry__plasma_client *c;
	struct ferry__plasma_entry *e;
	uint32_t count;

	if (!slot_ok(ix, slot))
		return -EINVAL;
	c = ferry__plasma_index_client(ix, slot);
	r = obj->index <= ix->mask ? record_find(ix, c, obj->index) : NULL;
	count = r ? atomic_load_explicit(&r->count, memory_order_relaxed) : 0;
	if (!count || atomic_load_explicit(&r->gen, memory_order_relaxed) != obj->gen) {
		FLOG_ERROR(comp, "index: release of entry %u gen %u, not pinned by slot %u",
			   obj->index, obj->gen, slot);
		return -ENOENT;
	}
	if (count > 1) {
		atomic_store_explicit(&r->count, count - 1, memory_order_relaxed);
		return 0;
	}
	record_remove(ix, c, r);
	e = &ix->entries[obj->index];
	stamp(ix, obj->index);
	/* seq_cst clear then load: of two last releasers, at least one sees the mask empty. */
	atomic_fetch_and(pin_word(e, slot), ~(1ull << (slot & 63)));
	if (ferry__plasma_word_state(atomic_load(&e->word)) == FERRY__PLASMA_DELETING &&
	    !ferry__plasma_index_pinned(ix, obj->index))
		return 1;
	return 0;
}

/* Whether a sealed entry in word @w may take a new pin: 0, or get()'s error. */
static int pinnable(uint64_t w)
{
	switch (ferry__plasma_word_state(w)) {
	case FERRY__PLASMA_SEALED:
		return 0;
	case FERRY__PLASMA_CREATING:
		return -EINPROGRESS;
	case FERRY__PLASMA_EVICTING:
		return -EAGAIN;
	case FERRY__PLASMA_SPILLED:
		return -ENODATA;
	default:
		return -ENOENT;
	}
}

int ferry__plasma_index_pin_bit(struct ferry__plasma_index *ix, uint32_t slot,
				const struct ferry_object_id *id, struct ferry__plasma_object *out)
{
	struct packed_id p = pack_id(id);
	uint64_t bit = 1ull << (slot & 63);

	if (!slot_ok(ix, slot))
		return -EINVAL;
	for (int attempt = 0; attempt < GET_ATTEMPTS; attempt++) {
		uint64_t w;
		int64_t i = probe(ix, &p, home_of(ix, id), &w);
		struct ferry__plasma_entry *e;
		int r = i < 0 ? -ENOENT : pinnable(w);

		if (r == -EAGAIN)
			continue; /* being evicted: pinned or gone in a moment */
		if (r < 0)
			return r;
		e = &ix->entries[i];
		/* As first_pin(), without a record: seq_cst set, then re-read the entry. */
		atomic_fetch_or(pin_word(e, slot), bit);
		if (atomic_load(&e->word) != w || !id_matches(e, &p)) {
			atomic_fetch_and(pin_word(e, slot), ~bit);
			continue;
		}
		stamp(ix, (uint32_t)i);
		fill(ix, (uint32_t)i, w, out);
		return 0;
	}
	return -EAGAIN;
}

int ferry__plasma_index_unpin_bit(struct ferry__plasma_index *ix, uint32_t slot, uint32_t index)
{
	struct ferry__plasma_entry *e = &ix->entries[index & ix->mask];

	stamp(ix, index & ix->mask);
	/* seq_cst clear then load, as release() does. */
	atomic_fetch_and(pin_word(e, slot), ~(1ull << (slot & 63)));
	return ferry__plasma_word_state(atomic_load(&e->word)) == FERRY__PLASMA_DELETING &&
	       !ferry__plasma_index_pinned(ix, index);
}

int ferry__plasma_index_contains(const struct ferry__plasma_index *ix,
				 const struct ferry_object_id *id)
{
	struct packed_id p = pack_id(id);
	uint64_t w;

	if (probe(ix, &p, home_of(ix, id), &w) < 0)
		return 0;
	return ferry__plasma_word_state(w) == FERRY__PLASMA_SEALED ||
	       ferry__plasma_word_state(w) == FERRY__PLASMA_SPILLED;
}

int ferry__plasma_index_create_owned(struct ferry__plasma_index *ix, uint32_t slot,
				     const struct ferry_object_id *id, uint64_t data_size,
				     uint32_t metadata_size, unsigned flags,
				     const struct ferry_worker_id *owner_id,
				     struct ferry__plasma_object *out)
{
	struct ferry__plasma_client *c;
	uint64_t total, used;
	uint32_t chunk;
	int r;

	if (!slot_ok(ix, slot))
		return -EINVAL;
	c = ferry__plasma_index_client(ix, slot);
	total = data_size + metadata_size;
	if (total < data_size || total > ix->arena_size)
		return -E2BIG;
	total = FERRY_ALIGN_UP(FERRY_MAX(total, 1u), 64u);
	/* Acquire: the chunk's offset and size were written before the store published it. */
	chunk = atomic_load_explicit(&c->chunk, memory_order_acquire);
	used = atomic_load_explicit(&c->chunk_used, memory_order_relaxed);
	if (!chunk || chunk > ix->max_chunks || used > c->chunk_size ||
	    total > c->chunk_size - used)
		return -ENOBUFS;
	r = ferry__plasma_index_insert(ix,
				       &(struct ferry__plasma_insert){
					       .id = id,
					       .offset = c->chunk_offset + used,
					       .data_size = data_size,
					       .metadata_size = metadata_size,
					       .chunk = chunk,
					       .owner = (uint16_t)slot,
					       .flags = (uint8_t)(flags & FERRY__PLASMA_F_PRIMARY),
					       .owner_id = owner_id,
				       },
				       -1, out);
	if (r == 0)
		atomic_store_explicit(&c->chunk_used, used + total, memory_order_relaxed);
	return r;
}

int ferry__plasma_index_seal(struct ferry__plasma_index *ix, uint32_t slot,
			     const struct ferry__plasma_object *obj)
{
	struct ferry__plasma_entry *e;
	uint64_t w;

	if (obj->index > ix->mask)
		return -ENOENT;
	e = &ix->entries[obj->index];
	w = atomic_load(&e->word);
	for (;;) {
		unsigned st = ferry__plasma_word_state(w);

		if (ferry__plasma_word_gen(w) != obj->gen)
			return -ENOENT;
		if (st == FERRY__PLASMA_SEALED)
			return -EALREADY;
		if (st != FERRY__PLASMA_CREATING)
			return -ENOENT;
		if (ferry__plasma_word_owner(w) != slot)
			return -EPERM;
		/* seq_cst (a release at least): the bytes are visible to whoever sees SEALED. */
		if (atomic_compare_exchange_weak(
			    &e->word, &w, ferry__plasma_word_with_state(w, FERRY__PLASMA_SEALED)))
			break;
	}
	atomic_fetch_add_explicit(&ix->hdr->seal_seq, 1, memory_order_release);
	/* seq_cst loads after the seq_cst CAS, against the store's "count waiter, then look". */
	if (atomic_load(&ix->hdr->seal_getters) > 0)
		return 2;
	return atomic_load(&ix->hdr->seal_waiters) > 0;
}

/* ---- lookups for the store ---- */

int ferry__plasma_index_find(const struct ferry__plasma_index *ix, const struct ferry_object_id *id,
			     struct ferry__plasma_object *out)
{
	struct packed_id p = pack_id(id);
	uint64_t w;
	int64_t i = probe(ix, &p, home_of(ix, id), &w);

	if (i < 0)
		return -ENOENT;
	fill(ix, (uint32_t)i, w, out);
	return out->state;
}

int ferry__plasma_index_read(const struct ferry__plasma_index *ix, uint32_t index,
			     struct ferry__plasma_object *out)
{
	uint64_t w =
		atomic_load_explicit(&ix->entries[index & ix->mask].word, memory_order_acquire);

	fill(ix, index & ix->mask, w, out);
	return out->state;
}

void ferry__plasma_index_read_id(const struct ferry__plasma_index *ix, uint32_t index,
				 struct ferry_object_id *out)
{
	const struct ferry__plasma_entry *e = &ix->entries[index & ix->mask];
	uint64_t lo = atomic_load_explicit(&e->id_lo, memory_order_relaxed);
	uint64_t mid = atomic_load_explicit(&e->id_mid, memory_order_relaxed);
	uint32_t hi = atomic_load_explicit(&e->id_hi, memory_order_relaxed);

	memcpy(out->bytes, &lo, 8);
	memcpy(out->bytes + 8, &mid, 8);
	memcpy(out->bytes + 16, &hi, 4);
}

bool ferry__plasma_index_pinned(const struct ferry__plasma_index *ix, uint32_t index)
{
	const struct ferry__plasma_entry *e = &ix->entries[index & ix->mask];

	return (atomic_load(&e->pins[0]) | atomic_load(&e->pins[1])) != 0;
}
