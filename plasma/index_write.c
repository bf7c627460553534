/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared object index, second half: the writer lock, claims of free slots, tombstone
 * cleanup, the store's state transitions (evict, delete, abort, free), client slots and dead
 * client reclaim. Protocol and memory ordering: index.h (DESIGN).
 */
#include <assert.h>
#include <errno.h>
#include <time.h>

#include "common/util.h"
#include "plasma/index_int.h"

static const char comp[] = FERRY__PLASMA_LOG;

/* ---- the writer lock and inserts ---- */

int ferry__plasma_index_lock(struct ferry__plasma_index *ix, int timeout_ms)
{
	pthread_mutex_t *m = &ix->hdr->writer_lock;
	struct timespec ts;
	int r;

	if (timeout_ms < 0) {
		r = pthread_mutex_lock(m);
	} else if (timeout_ms == 0) {
		r = pthread_mutex_trylock(m);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		r = pthread_mutex_timedlock(m, &ts);
	}
	if (r == EOWNERDEAD) {
		/* The holder died inside a claim: it left at most one CLAIMED entry (reclaim
		 * makes it a tombstone) and counters off by one (the store recounts). */
		FLOG_WARN(comp, "index: writer lock holder died; lock recovered");
		pthread_mutex_consistent(m);
		return 0;
	}
	if (r == EBUSY || r == ETIMEDOUT || r == EDEADLK)
		return -EAGAIN;
	return -r;
}

void ferry__plasma_index_unlock(struct ferry__plasma_index *ix)
{
	pthread_mutex_unlock(&ix->hdr->writer_lock);
}

/*
 * Turn the tombstones just before FREE slot @free_pos back into FREE slots, walking back.
 * Safe for lock-free readers: a live entry at p with home h keeps [h, p) non-free, so a
 * tombstone followed by a FREE slot lies on no live entry's path. Writer lock held.
 */
static void cleanup_before(struct ferry__plasma_index *ix, uint32_t free_pos)
{
	uint32_t j = (free_pos - 1) & ix->mask;

	while (j != free_pos) {
		_Atomic uint64_t *word = &ix->entries[j].word;
		uint64_t w = atomic_load_explicit(word, memory_order_relaxed);

		if (ferry__plasma_word_state(w) != FERRY__PLASMA_TOMB)
			break;
		atomic_store_explicit(word, ferry__plasma_word_with_state(w, FERRY__PLASMA_FREE),
				      memory_order_release);
		atomic_fetch_sub_explicit(&ix->hdr->used_slots, 1, memory_order_relaxed);
		j = (j - 1) & ix->mask;
	}
}

/* The home slot of the ID stored in non-free entry @e. Stable: an ID is written only when a
 * slot is claimed, under the writer lock, which the caller holds. */
static uint32_t entry_home(const struct ferry__plasma_index *ix,
			   const struct ferry__plasma_entry *e)
{
	struct ferry_object_id id;
	uint64_t lo = atomic_load_explicit(&e->id_lo, memory_order_relaxed);
	uint64_t mid = atomic_load_explicit(&e->id_mid, memory_order_relaxed);
	uint32_t hi = atomic_load_explicit(&e->id_hi, memory_order_relaxed);

	memcpy(id.bytes, &lo, 8);
	memcpy(id.bytes + 8, &mid, 8);
	memcpy(id.bytes + 16, &hi, 4);
	return home_of(ix, &id);
}

/* Offset (from FREE slot @start) of the first slot of the cluster holding offset @d. */
static uint32_t cluster_start(const struct ferry__plasma_index *ix, uint32_t start, uint32_t d)
{
	while (d > 1 && ferry__plasma_word_state(
				atomic_load_explicit(&ix->entries[(start + d - 1) & ix->mask].word,
						     memory_order_relaxed)) != FERRY__PLASMA_FREE)
		d--;
	return d;
}

/*
 * Free every tombstone that lies on no entry's probe path. Slots are visited backwards from a
 * FREE one, as offsets from it; min_home is the smallest home offset of the entries after the
 * current slot in its cluster (clusters are bounded by FREE slots, and an entry's path never
 * leaves its cluster). A tombstone before every such home is on nobody's path. A CLAIMED entry
 * (left by a dead holder) may hold a partial ID: it is taken to start at its cluster's start.
 * O(table): runs only when the table is nearly full. Writer lock held.
 */
static void sweep(struct ferry__plasma_index *ix)
{
	uint32_t n = ix->mask + 1, start = 0, min_home = UINT32_MAX;

	while (start < n && ferry__plasma_word_state(atomic_load_explicit(&ix->entries[start].word,
									  memory_order_relaxed)) !=
				    FERRY__PLASMA_FREE)
		start++;
	if (start == n)
		return;
	for (uint32_t d = n - 1; d > 0; d--) {
		struct ferry__plasma_entry *e = &ix->entries[(start + d) & ix->mask];
		uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
		unsigned st = ferry__plasma_word_state(w);

		if (st == FERRY__PLASMA_FREE) {
			min_home = UINT32_MAX;
		} else if (st == FERRY__PLASMA_TOMB) {
			if (min_home > d) {
				atomic_store_explicit(
					&e->word,
					ferry__plasma_word_with_state(w, FERRY__PLASMA_FREE),
					memory_order_release);
				atomic_fetch_sub_explicit(&ix->hdr->used_slots, 1,
							  memory_order_relaxed);
			}
		} else {
			uint32_t home = st == FERRY__PLASMA_CLAIMED
						? cluster_start(ix, start, d)
						: ((entry_home(ix, e) - start) & ix->mask);

			min_home = FERRY_MIN(min_home, home);
		}
	}
}

/* Where @id would go: the first tombstone on its path, else the FREE slot that ends it.
 * Returns 0, or -EEXIST if it is present. Writer lock held. */
static int scan(const struct ferry__plasma_index *ix, const struct ferry_object_id *id,
		uint32_t *pos)
{
	struct packed_id p = pack_id(id);
	uint32_t home = home_of(ix, id);
	int64_t tomb = -1;

	for (uint32_t n = 0; n <= ix->mask; n++) {
		uint32_t i = (home + n) & ix->mask;
		unsigned st = ferry__plasma_word_state(
			atomic_load_explicit(&ix->entries[i].word, memory_order_relaxed));

		if (st == FERRY__PLASMA_FREE) {
			*pos = tomb >= 0 ? (uint32_t)tomb : i;
			return 0;
		}
		if (st == FERRY__PLASMA_TOMB && tomb < 0)
			tomb = i;
		if (visible(st) && id_matches(&ix->entries[i], &p))
			return -EEXIST;
	}
	if (tomb < 0)
		return -ENOSPC;
	*pos = (uint32_t)tomb;
	return 0;
}

static bool needs_free_slot(const struct ferry__plasma_index *ix, uint32_t pos)
{
	return ferry__plasma_word_state(atomic_load_explicit(
		       &ix->entries[pos].word, memory_order_relaxed)) == FERRY__PLASMA_FREE &&
	       atomic_load_explicit(&ix->hdr->used_slots, memory_order_relaxed) >=
		       ix->hdr->max_used_slots;
}

static int find_insert_pos(struct ferry__plasma_index *ix, const struct ferry_object_id *id,
			   uint32_t *pos)
{
	int r;

	if (atomic_load_explicit(&ix->hdr->live_objects, memory_order_relaxed) >=
	    ix->hdr->max_objects)
		return -ENOSPC;
	r = scan(ix, id, pos);
	if (r < 0 || !needs_free_slot(ix, *pos))
		return r;
	sweep(ix);
	r = scan(ix, id, pos);
	if (r == 0 && needs_free_slot(ix, *pos))
		return -ENOSPC;
	return r;
}

/* Fill slot @i for @in: CLAIMED while the fields are written, then published CREATING. */
static void claim(struct ferry__plasma_index *ix, uint32_t i, const struct ferry__plasma_insert *in,
		  struct ferry__plasma_object *out)
{
	struct ferry__plasma_entry *e = &ix->entries[i];
	uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
	uint32_t gen = ferry__plasma_word_gen(w) + 1;
	struct packed_id p = pack_id(in->id);

	if (ferry__plasma_word_state(w) == FERRY__PLASMA_FREE)
		atomic_fetch_add_explicit(&ix->hdr->used_slots, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&ix->hdr->live_objects, 1, memory_order_relaxed);
	if (in->chunk)
		atomic_fetch_add_explicit(&ix->chunk_live[in->chunk - 1], 1, memory_order_relaxed);
	atomic_store_explicit(&e->word,
			      ferry__plasma_word(FERRY__PLASMA_CLAIMED, in->flags, in->owner, gen),
			      memory_order_relaxed);
	/* A reader that reads the new ID also sees CLAIMED (or later) when it re-reads. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&e->id_lo, p.lo, memory_order_relaxed);
	atomic_store_explicit(&e->id_mid, p.mid, memory_order_relaxed);
	atomic_store_explicit(&e->id_hi, p.hi, memory_order_relaxed);
	e->metadata_size = in->metadata_size;
	e->offset = in->offset;
	e->data_size = in->data_size;
	ix->ext[i].chunk = in->chunk;
	ix->ext[i].owner_id = in->owner_id ? *in->owner_id : (struct ferry_worker_id){0};
	ix->ext[i].alloc =
		atomic_fetch_add_explicit(&ix->hdr->alloc_seq, 1, memory_order_relaxed) + 1;
	stamp(ix, i);
	w = ferry__plasma_word(FERRY__PLASMA_CREATING, in->flags, in->owner, gen);
	atomic_store_explicit(&e->word, w, memory_order_release);
	fill(ix, i, w, out);
}

int ferry__plasma_index_insert(struct ferry__plasma_index *ix,
			       const struct ferry__plasma_insert *in, int timeout_ms,
			       struct ferry__plasma_object *out)
{
	uint32_t pos;
	int r;

	if (in->chunk > ix->max_chunks || in->owner >= ix->max_clients ||
	    in->offset > ix->arena_size ||
	    in->data_size + in->metadata_size > ix->arena_size - in->offset) {
		FLOG_ERROR(comp, "index: insert of a bad entry (chunk %u, owner %u)", in->chunk,
			   in->owner);
		return -EINVAL;
	}
	r = ferry__plasma_index_lock(ix, timeout_ms);
	if (r < 0)
		return r;
	r = find_insert_pos(ix, in->id, &pos);
	if (r == 0)
		claim(ix, pos, in, out);
	ferry__plasma_index_unlock(ix);
	return r;
}

/* ---- store operations ---- */

/* CAS entry @index at generation @gen from @from to @to; *@word gets the word seen. */
static int transition(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen, unsigned from,
		      unsigned to, uint64_t *word)
{
	_Atomic uint64_t *wp = &ix->entries[index & ix->mask].word;
	uint64_t w = atomic_load(wp);

	do {
		*word = w;
		if (ferry__plasma_word_gen(w) != gen || ferry__plasma_word_state(w) != from)
			return -ENOENT;
	} while (!atomic_compare_exchange_weak(wp, &w, ferry__plasma_word_with_state(w, to)));
	*word = w;
	return 0;
}

int ferry__plasma_index_try_evict(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen)
{
	uint64_t w;
	int r = transition(ix, index, gen, FERRY__PLASMA_SEALED, FERRY__PLASMA_EVICTING, &w);

	if (r < 0)
		return r;
	if (ferry__plasma_index_pinned(ix, index)) {
		/* Nobody else writes an EVICTING word: put SEALED back as it was. */
		atomic_store(&ix->entries[index & ix->mask].word, w);
		return -EBUSY;
	}
	return 0;
}

int ferry__plasma_index_delete(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen)
{
	uint64_t w;
	int r = transition(ix, index, gen, FERRY__PLASMA_SEALED, FERRY__PLASMA_DELETING, &w);

	if (r == 0)
		return ferry__plasma_index_pinned(ix, index) ? 1 : 0;
	if (ferry__plasma_word_gen(w) != gen)
		return -ENOENT;
	switch (ferry__plasma_word_state(w)) {
	case FERRY__PLASMA_CLAIMED:
	case FERRY__PLASMA_CREATING:
	case FERRY__PLASMA_EVICTING:
		return -EBUSY;
	case FERRY__PLASMA_DELETING:
		return -EALREADY;
	default:
		return -ENOENT;
	}
}

int ferry__plasma_index_set_state(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen,
				  unsigned from, unsigned to)
{
	uint64_t w;

	return transition(ix, index, gen, from, to, &w);
}

int ferry__plasma_index_restore(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen,
				uint64_t offset)
{
	struct ferry__plasma_entry *e = &ix->entries[index & ix->mask];
	uint64_t w = atomic_load(&e->word), size = e->data_size + e->metadata_size;

	if (ferry__plasma_word_gen(w) != gen ||
	    ferry__plasma_word_state(w) != FERRY__PLASMA_SPILLED)
		return -ENOENT;
	if (offset > ix->arena_size || size > ix->arena_size - offset)
		return -EINVAL;
	e->offset = offset;
	/* New memory: a new placement (published with the state by transition()'s CAS). */
	ix->ext[index & ix->mask].alloc =
		atomic_fetch_add_explicit(&ix->hdr->alloc_seq, 1, memory_order_relaxed) + 1;
	return transition(ix, index, gen, FERRY__PLASMA_SPILLED, FERRY__PLASMA_SEALED, &w);
}

int ferry__plasma_index_abort(struct ferry__plasma_index *ix, uint32_t index, uint32_t gen,
			      uint32_t slot)
{
	uint64_t w = atomic_load(&ix->entries[index & ix->mask].word);

	if (ferry__plasma_word_gen(w) == gen &&
	    ferry__plasma_word_state(w) == FERRY__PLASMA_CREATING &&
	    ferry__plasma_word_owner(w) != slot)
		return -EPERM;
	/* Races only with the owner's seal: then the object is sealed and not ours to abort. */
	return transition(ix, index, gen, FERRY__PLASMA_CREATING, FERRY__PLASMA_DELETING, &w);
}

void ferry__plasma_index_free_slot(struct ferry__plasma_index *ix, uint32_t index)
{
	_Atomic uint64_t *wp = &ix->entries[index & ix->mask].word;
	uint64_t w = atomic_load_explicit(wp, memory_order_relaxed);
	uint32_t next = (index + 1) & ix->mask;

	assert(ferry__plasma_word_state(w) >= FERRY__PLASMA_DELETING ||
	       ferry__plasma_word_state(w) == FERRY__PLASMA_CLAIMED);
	atomic_store_explicit(wp, ferry__plasma_word_with_state(w, FERRY__PLASMA_TOMB),
			      memory_order_release);
	atomic_fetch_sub_explicit(&ix->hdr->live_objects, 1, memory_order_relaxed);
	/* Best effort: if a client holds the lock, the next sweep frees these tombstones. */
	if (ferry__plasma_index_lock(ix, 0) == 0) {
		if (ferry__plasma_word_state(atomic_load_explicit(
			    &ix->entries[next].word, memory_order_relaxed)) == FERRY__PLASMA_FREE)
			cleanup_before(ix, next);
		ferry__plasma_index_unlock(ix);
	}
}

uint64_t ferry__plasma_index_pin_count(const struct ferry__plasma_index *ix, uint32_t index)
{
	uint64_t total = 0;

	index &= ix->mask;
	for (uint32_t s = 0; s < ix->max_clients; s++) {
		struct ferry__plasma_client *c = ferry__plasma_index_client(ix, s);
		struct ferry__plasma_pin_record *r = record_find(ix, c, index);

		if (r)
			total += atomic_load_explicit(&r->count, memory_order_relaxed);
	}
	return total;
}

/* ---- client slots ---- */

static void wipe_slot(struct ferry__plasma_index *ix, struct ferry__plasma_client *c)
{
	memset((uint8_t *)c + offsetof(struct ferry__plasma_client, chunk_offset), 0,
	       ix->client_stride - offsetof(struct ferry__plasma_client, chunk_offset));
	atomic_store(&c->chunk, 0);
	atomic_store(&c->records_used, 0);
	atomic_store(&c->chunk_used, 0);
}

int ferry__plasma_index_client_open(struct ferry__plasma_index *ix, int pid, uint32_t *slot)
{
	for (uint32_t s = FERRY__PLASMA_STORE_SLOT + 1; s < ix->max_clients; s++) {
		struct ferry__plasma_client *c = ferry__plasma_index_client(ix, s);

		if (atomic_load(&c->state) != FERRY__PLASMA_CLIENT_FREE)
			continue;
		wipe_slot(ix, c);
		c->pid = pid;
		atomic_store(&c->state, FERRY__PLASMA_CLIENT_LIVE);
		*slot = s;
		return 0;
	}
	FLOG_WARN(comp, "index: all %u client slots are taken", ix->max_clients - 1);
	return -EUSERS;
}

void ferry__plasma_index_client_close(struct ferry__plasma_index *ix, uint32_t slot)
{
	struct ferry__plasma_client *c;

	if (slot == FERRY__PLASMA_STORE_SLOT || !slot_ok(ix, slot))
		return;
	c = ferry__plasma_index_client(ix, slot);
	wipe_slot(ix, c);
	c->pid = 0;
	atomic_store(&c->state, FERRY__PLASMA_CLIENT_FREE);
}

/* Writer lock held. */
static void recount_locked(struct ferry__plasma_index *ix)
{
	uint32_t used = 0, live = 0;

	for (uint32_t k = 0; k < ix->max_chunks; k++)
		atomic_store_explicit(&ix->chunk_live[k], 0, memory_order_relaxed);
	for (uint32_t i = 0; i <= ix->mask; i++) {
		unsigned st = ferry__plasma_word_state(
			atomic_load_explicit(&ix->entries[i].word, memory_order_relaxed));
		uint32_t chunk = ix->ext[i].chunk;

		used += st != FERRY__PLASMA_FREE;
		live += st >= FERRY__PLASMA_CLAIMED;
		/* A CLAIMED entry's chunk field may be stale: it only becomes a tombstone. */
		if (visible(st) && chunk && chunk <= ix->max_chunks)
			atomic_fetch_add_explicit(&ix->chunk_live[chunk - 1], 1,
						  memory_order_relaxed);
	}
	atomic_store(&ix->hdr->used_slots, used);
	atomic_store(&ix->hdr->live_objects, live);
}

int ferry__plasma_index_recount(struct ferry__plasma_index *ix, int timeout_ms)
{
	int r = ferry__plasma_index_lock(ix, timeout_ms);

	if (r < 0)
		return r;
	recount_locked(ix);
	ferry__plasma_index_unlock(ix);
	return 0;
}

/* Give entry @i's pins, half-made entry or ownership of dead client @slot back. Lock held. */
static void reclaim_entry(struct ferry__plasma_index *ix, uint32_t i, uint32_t slot)
{
	struct ferry__plasma_entry *e = &ix->entries[i];
	uint64_t bit = 1ull << (slot & 63), w;

	if (atomic_load_explicit(pin_word(e, slot), memory_order_relaxed) & bit)
		atomic_fetch_and(pin_word(e, slot), ~bit);
	w = atomic_load(&e->word);
	do {
		unsigned st = ferry__plasma_word_state(w);

		if (ferry__plasma_word_owner(w) != slot || st < FERRY__PLASMA_CLAIMED ||
		    st == FERRY__PLASMA_CREATING)
			return;
		if (st == FERRY__PLASMA_CLAIMED) {
			/* Died inside a claim: the fields are not valid. Counts come from the
			 * recount that follows. */
			atomic_store(&e->word,
				     ferry__plasma_word_with_state(w, FERRY__PLASMA_TOMB));
			return;
		}
		/* Sealed objects outlive their creator: the store owns them now. */
	} while (!atomic_compare_exchange_weak(
		&e->word, &w,
		ferry__plasma_word(ferry__plasma_word_state(w), ferry__plasma_word_flags(w),
				   FERRY__PLASMA_STORE_SLOT, ferry__plasma_word_gen(w))));
}

int ferry__plasma_index_client_reclaim(struct ferry__plasma_index *ix, uint32_t slot,
				       int timeout_ms)
{
	struct ferry__plasma_client *c;
	int r;

	if (slot == FERRY__PLASMA_STORE_SLOT || !slot_ok(ix, slot))
		return -EINVAL;
	c = ferry__plasma_index_client(ix, slot);
	atomic_store(&c->state, FERRY__PLASMA_CLIENT_DEAD);
	r = ferry__plasma_index_lock(ix, timeout_ms);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i <= ix->mask; i++)
		reclaim_entry(ix, i, slot);
	sweep(ix);
	recount_locked(ix);
	ferry__plasma_index_unlock(ix);
	return 0;
}
