/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's spilling: pick sealed, unpinned primaries least recently used first, write them
 * to disk in one batch (plasma/spill.h), free their memory and mark them SPILLED; read them back
 * on demand; spill on a tick while usage is past the threshold, in the background when the
 * store can be posted to (a worker thread waits for the disk). Design: store.h (DESIGN).
 */
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/store_int.h"

static const char comp[] = "plasma";

#define PICK_MIN_SCAN 4096u /* index slots a victim search looks at, at least */

struct victim {
	uint32_t stamp; /* the entry's lru_stamp: older first */
	uint32_t index; /* entry slot */
	uint64_t alloc; /* its placement id: made earlier first among equal stamps */
};

/* Least recently used first, and in the order they were made among equals: a batch's file
 * then holds them in that order, and restoring them in it reads the file in order (read-ahead,
 * plasma/spill.h). */
static int by_stamp(const void *a, const void *b)
{
	const struct victim *x = a, *y = b;

	if (x->stamp != y->stamp)
		return x->stamp < y->stamp ? -1 : 1;
	if (x->alloc != y->alloc)
		return x->alloc < y->alloc ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Sealed, primary, unpinned, and its memory would really go: its own block, or a chunk that
 * its owner no longer creates in. */
static bool spillable(struct ferry__plasma_store *s, uint32_t i, struct ferry__plasma_object *o)
{
	uint32_t chunk;

	if (s->shadow[i].spilling ||
	    ferry__plasma_index_read(&s->ix, i, o) != FERRY__PLASMA_SEALED ||
	    !(o->flags & FERRY__PLASMA_F_PRIMARY) || ferry__plasma_index_pinned(&s->ix, i))
		return false;
	if (s->shadow[i].gen == o->gen && s->shadow[i].block != FERRY__STORE_NO_BLOCK)
		return true;
	chunk = s->ix.ext[i].chunk;
	return chunk && chunk <= s->max_chunks &&
	       s->chunks[chunk - 1].state == FERRY__STORE_CHUNK_RETIRED;
}

/* Candidates from the scan window: *@v grown as needed. Returns 0 or -ENOMEM. */
static int add_candidate(struct victim **v, uint32_t *n, uint32_t *cap, struct victim c)
{
	if (*n == *cap) {
		uint32_t grown_cap = FERRY_MAX(2 * *cap, 256u);
		struct victim *grown = ferry__realloc(*v, grown_cap * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		*v = grown;
		*cap = grown_cap;
	}
	(*v)[(*n)++] = c;
	return 0;
}

/*
 * The oldest spillable entries adding up to @want bytes into *@out (allocated). Returns how
 * many, or -ENOMEM. Not a scan of the whole index each time: the scan starts where the last
 * one stopped and ends once it has looked at PICK_MIN_SCAN slots and found twice @want in
 * candidates (or every live entry, or went all the way round), so the cost follows the bytes
 * to spill. Victims are
 * the least recently used of that window: exact LRU for small tables, an approximation (as
 * Redis samples) for large ones.
 */
static int64_t pick(struct ferry__plasma_store *s, uint64_t want, struct victim **out)
{
	uint32_t slots = s->ix.mask + 1, n = 0, k = 0, cap = 0, scanned;
	uint32_t live = atomic_load(&s->ix.hdr->live_objects); /* no more candidates than this */
	struct ferry__plasma_object o;
	struct victim *v = NULL;
	uint64_t sum = 0, found = 0;

	for (scanned = 0; scanned < slots && n < live; scanned++) {
		uint32_t i = (s->spill_cursor + scanned) & s->ix.mask;

		if (scanned >= PICK_MIN_SCAN && found / 2 >= want)
			break;
		if (!spillable(s, i, &o))
			continue;
		if (add_candidate(&v, &n, &cap,
				  (struct victim){atomic_load(&s->ix.ext[i].lru_stamp), i,
						  ferry__plasma_index_alloc(&s->ix, i)}) < 0) {
			ferry__free(v);
			return -ENOMEM;
		}
		found += o.data_size + o.metadata_size;
	}
	s->spill_cursor = (s->spill_cursor + scanned) & s->ix.mask;
	if (!n) {
		*out = NULL;
		return 0;
	}
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
		  const struct ferry__plasma_spill_item *item, uint32_t next, uint64_t *freed)
{
	struct ferry__plasma_object n = {.gen = 0};
	struct ferry__store_spilled *rec;
	struct ferry__plasma_object o;

	ferry__plasma_index_read(&s->ix, index, &o);
	/* The record first: once the memory is freed, failing is no longer an option. */
	if (ferry__hashmap_put(&s->spilled, &index, (void **)&rec) < 0)
		goto err_drop;
	if (next != UINT32_MAX)
		ferry__plasma_index_read(&s->ix, next, &n);
	*rec = (struct ferry__store_spilled){item->offset, item->size, item->file,
					     o.gen,	   next,       n.gen};
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
	ferry__plasma_spill_drop(s->spill, item->file, item->offset, item->size, false);
	return 0;
}

/* Victims for @bytes (at least a batch) and their items: *@victims, *@items (allocated).
 * Returns how many (0: none, nothing allocated) or -ENOMEM. */
static int64_t choose(struct ferry__plasma_store *s, uint64_t bytes, uint32_t **victims,
		      struct ferry__plasma_spill_item **items)
{
	struct victim *v;
	int64_t n;

	/* A new clock value, as for eviction: uses from now on look newer than every victim. */
	atomic_fetch_add_explicit(&s->ix.hdr->lru_clock, 1, memory_order_relaxed);
	n = pick(s, FERRY_MAX(bytes, s->spill_batch_bytes), &v);
	if (n <= 0) {
		if (n == 0)
			ferry__free(v);
		return n;
	}
	*items = ferry__calloc((size_t)n, sizeof(**items));
	*victims = ferry__calloc((size_t)n, sizeof(**victims));
	if (!*items || !*victims) {
		ferry__free(*items);
		ferry__free(*victims);
		ferry__free(v);
		return -ENOMEM;
	}
	for (int64_t k = 0; k < n; k++) {
		struct ferry__plasma_object o;

		ferry__plasma_index_read(&s->ix, v[k].index, &o);
		(*items)[k] = (struct ferry__plasma_spill_item){
			.data = o.data, .size = o.data_size + o.metadata_size};
		(*victims)[k] = v[k].index;
	}
	ferry__free(v);
	return n;
}

/* The batch of @victims is written (@r: how it went): commit each. Returns how many spilled. */
static int commit_all(struct ferry__plasma_store *s, int r, const uint32_t *victims,
		      const struct ferry__plasma_spill_item *items, uint32_t n, uint64_t *got)
{
	int spilled = 0;

	for (uint32_t k = 0; r == 0 && k < n; k++)
		spilled += commit(s, victims[k], &items[k], k + 1 < n ? victims[k + 1] : UINT32_MAX,
				  got);
	FLOG_DEBUG(comp, "store: spilled %d objects, %" PRIu64 " arena bytes freed", spilled, *got);
	return spilled;
}

int ferry__plasma_store_spill(struct ferry__plasma_store *s, uint64_t bytes, uint64_t *freed)
{
	struct ferry__plasma_spill_item *items = NULL;
	uint32_t *victims = NULL;
	uint64_t got = 0;
	int64_t n;
	int r, spilled;

	if (freed)
		*freed = 0;
	if (!s->spill)
		return 0;
	n = choose(s, bytes, &victims, &items);
	if (n <= 0)
		return (int)n;
	r = ferry__plasma_spill_write(s->spill, items, (uint32_t)n);
	spilled = commit_all(s, r, victims, items, (uint32_t)n, &got);
	ferry__free(items);
	ferry__free(victims);
	if (freed)
		*freed = got;
	return r < 0 ? r : spilled;
}

/* ---- in the background ---- */

static void *spiller_main(void *arg);

static void on_spilled(void *arg, int status)
{
	if (status == 0)
		ferry__store_spill_settle(arg);
}

static void restore_poll(struct ferry__plasma_store *s);

static void on_restores_read(void *arg, int status)
{
	if (status == 0)
		restore_poll(arg);
}

static int spiller_start(struct ferry__plasma_store *s)
{
	struct ferry__store_spiller *bg = &s->bg;
	int r;

	if (bg->started)
		return 0;
	if (!bg->rtail)
		bg->rtail = &bg->rtodo;
	if (pthread_mutex_init(&bg->lock, NULL))
		return -ENOMEM;
	if (pthread_cond_init(&bg->cond, NULL)) {
		pthread_mutex_destroy(&bg->lock);
		return -ENOMEM;
	}
	r = pthread_create(&bg->thread, NULL, spiller_main, s);
	if (r) {
		pthread_cond_destroy(&bg->cond);
		pthread_mutex_destroy(&bg->lock);
		FLOG_WARN(comp, "store: no spill thread (%s): spilling in the store's thread",
			  ferry_strerror(-r));
		return -r;
	}
	bg->started = true;
	return 0;
}

static void restore_run(struct ferry__store_restore *rs, struct io_uring *ring);

/* The worker's own ring for restores, made at the first one (NULL: a ring per read). */
static struct io_uring *worker_ring(struct io_uring *ring, bool *have)
{
	if (!*have)
		*have = io_uring_queue_init(64, ring, 0) == 0;
	return *have ? ring : NULL;
}

static void *spiller_main(void *arg)
{
	struct ferry__plasma_store *s = arg;
	struct ferry__store_spiller *bg = &s->bg;
	struct io_uring ring;
	bool have_ring = false;

	pthread_setname_np(pthread_self(), "ferry-spill");
	pthread_mutex_lock(&bg->lock);
	for (;;) {
		struct ferry__plasma_spill_batch *b;
		struct ferry__store_restore *rs;

		while (!bg->todo && !bg->rtodo && !bg->stop)
			pthread_cond_wait(&bg->cond, &bg->lock);
		if (bg->todo) {
			b = bg->todo;
			bg->todo = NULL;
			pthread_mutex_unlock(&bg->lock);
			ferry__plasma_spill_batch_run(b, NULL);
			pthread_mutex_lock(&bg->lock);
			atomic_store(&bg->done, true);
			pthread_cond_broadcast(&bg->cond);
			/* If the post fails, the store's next tick takes the batch back. */
			s->post(s->post_arg, on_spilled, s);
			continue;
		}
		if (!bg->rtodo || bg->stop)
			break; /* restores not read yet stay queued */
		rs = bg->rtodo;
		bg->rtodo = rs->next;
		if (!bg->rtodo)
			bg->rtail = &bg->rtodo;
		pthread_mutex_unlock(&bg->lock);
		restore_run(rs, worker_ring(&ring, &have_ring));
		pthread_mutex_lock(&bg->lock);
		rs->next = bg->rdone;
		bg->rdone = rs;
		/* If the post fails, the store's next tick publishes it. */
		s->post(s->post_arg, on_restores_read, s);
	}
	pthread_mutex_unlock(&bg->lock);
	if (have_ring)
		io_uring_queue_exit(&ring);
	return NULL;
}

/* Hand a batch of at least @bytes to the worker. Returns the number of victims (0: nothing to
 * spill) or -errno (nothing was started). */
static int spill_background(struct ferry__plasma_store *s, uint64_t bytes)
{
	struct ferry__store_spiller *bg = &s->bg;
	struct ferry__plasma_spill_item *items = NULL;
	uint32_t *victims = NULL;
	int64_t n;
	int r = spiller_start(s);

	if (r < 0)
		return r;
	n = choose(s, bytes, &victims, &items);
	if (n <= 0)
		return (int)n;
	r = ferry__plasma_spill_batch_new(s->spill, items, (uint32_t)n, &bg->batch);
	if (r < 0) {
		ferry__free(items);
		ferry__free(victims);
		return r;
	}
	for (int64_t k = 0; k < n; k++)
		s->shadow[victims[k]].spilling = true;
	bg->items = items;
	bg->victims = victims;
	bg->n = (uint32_t)n;
	atomic_store(&bg->done, false);
	pthread_mutex_lock(&bg->lock);
	bg->todo = bg->batch;
	pthread_cond_signal(&bg->cond);
	pthread_mutex_unlock(&bg->lock);
	return (int)n;
}

/* Take back the batch in flight if it is written (@wait: wait until it is). */
static bool take_back(struct ferry__plasma_store *s, bool wait)
{
	struct ferry__store_spiller *bg = &s->bg;
	uint64_t got = 0;
	int r;

	if (!bg->batch)
		return false;
	if (wait && !atomic_load(&bg->done)) {
		pthread_mutex_lock(&bg->lock);
		while (!atomic_load(&bg->done))
			pthread_cond_wait(&bg->cond, &bg->lock);
		pthread_mutex_unlock(&bg->lock);
	}
	if (!atomic_load(&bg->done))
		return false;
	r = ferry__plasma_spill_batch_finish(s->spill, bg->batch);
	bg->batch = NULL;
	for (uint32_t k = 0; k < bg->n; k++)
		s->shadow[bg->victims[k]].spilling = false;
	commit_all(s, r, bg->victims, bg->items, bg->n, &got);
	ferry__free(bg->items);
	ferry__free(bg->victims);
	bg->items = NULL;
	bg->victims = NULL;
	bg->n = 0;
	/* Victims deleted meanwhile were deferred: they can go now. */
	ferry__plasma_store_collect(s);
	return true;
}

bool ferry__store_spill_settle(struct ferry__plasma_store *s)
{
	return take_back(s, true);
}

void ferry__store_spill_stop(struct ferry__plasma_store *s)
{
	struct ferry__store_spiller *bg = &s->bg;

	if (!bg->started)
		return;
	pthread_mutex_lock(&bg->lock);
	bg->stop = true;
	pthread_cond_broadcast(&bg->cond);
	pthread_mutex_unlock(&bg->lock);
	pthread_join(bg->thread, NULL);
	pthread_cond_destroy(&bg->cond);
	pthread_mutex_destroy(&bg->lock);
	bg->started = false;
	bg->stop = false;
}

void ferry__plasma_store_quiesce(struct ferry__plasma_store *s)
{
	ferry__store_spill_stop(s);
}

/* Drop entry @index's spill record; @restored: its bytes are back in memory. */
static void forget(struct ferry__plasma_store *s, uint32_t index, bool restored)
{
	struct ferry__store_spilled rec;

	if (ferry__hashmap_remove(&s->spilled, &index, &rec) < 0)
		return;
	ferry__plasma_spill_drop(s->spill, rec.file, rec.offset, rec.size, restored);
	s->spilled_bytes -= FERRY_MIN(rec.size, s->spilled_bytes);
}

void ferry__store_spill_forget(struct ferry__plasma_store *s, uint32_t index)
{
	forget(s, index, false);
}

#define AHEAD_BYTES (64ull << 20) /* read-ahead bytes, at most (and 1/8 of the arena) */
#define AHEAD_GAP (1ull << 20)	  /* dropped bytes between two that are read over */

/*
 * The objects after @rec in its file (its batch's order) to restore with it, since a batch
 * written together is mostly read back together: still spilled at the generation recorded,
 * not being restored already, close behind each other, and in free memory (nothing is evicted
 * or spilled for them).
 */
static void plan_ahead(struct ferry__plasma_store *s, const struct ferry__store_spilled *rec,
		       struct ferry__store_plan *p)
{
	const struct ferry__store_spilled *cur = rec;
	uint64_t budget = FERRY_MIN(AHEAD_BYTES, s->arena.size / 8), used = 0;

	while (p->n <= FERRY__STORE_AHEAD_MAX && cur->next != UINT32_MAX) {
		uint32_t index = cur->next;
		struct ferry__store_spilled *q = ferry__hashmap_get(&s->spilled, &index);
		uint64_t prev_end = cur->offset + cur->size, *block = &p->blocks[p->n];

		if (!q || q->gen != cur->next_gen || q->file != rec->file || q->offset < prev_end ||
		    q->offset - prev_end > AHEAD_GAP || used + q->size > budget ||
		    s->shadow[index].restoring ||
		    ferry__plasma_allocator_alloc(s->alloc, FERRY_MAX(q->size, 1u), block) < 0)
			break;
		p->objs[p->n] = (struct ferry__plasma_spill_read){q->offset, q->size,
								  s->arena.base + *block};
		p->index[p->n] = index;
		p->gen[p->n++] = q->gen;
		used += q->size;
		cur = q;
	}
}

/* Plan the restore of entry @index at @gen into @p (its blocks allocated); *@file: where.
 * Returns 0, -ENOENT (not spilled at @gen), -EINPROGRESS (a restore of it is in flight), or
 * what make_room returns. */
static int plan(struct ferry__plasma_store *s, uint32_t index, uint32_t gen,
		struct ferry__store_plan *p, uint32_t *file)
{
	struct ferry__store_spilled rec, *rp = ferry__hashmap_get(&s->spilled, &index);
	struct ferry__plasma_object o;
	int r;

	if (!rp || rp->gen != gen ||
	    ferry__plasma_index_read(&s->ix, index, &o) != FERRY__PLASMA_SPILLED || o.gen != gen)
		return -ENOENT;
	if (s->shadow[index].restoring)
		return -EINPROGRESS;
	rec = *rp; /* make_room may spill others: the map may move */
	r = ferry__store_make_room(s, FERRY_MAX(rec.size, 1u), 0, &p->blocks[0]);
	if (r < 0)
		return r;
	p->objs[0] = (struct ferry__plasma_spill_read){rec.offset, rec.size,
						       s->arena.base + p->blocks[0]};
	p->index[0] = index;
	p->gen[0] = gen;
	p->n = 1;
	plan_ahead(s, &rec, p);
	*file = rec.file;
	return 0;
}

/* Give back the blocks of objects @from and later of @p; @p then holds @from of them. */
static void unplan(struct ferry__plasma_store *s, struct ferry__store_plan *p, uint32_t from)
{
	while (p->n > from)
		ferry__plasma_allocator_free(s->alloc, p->blocks[--p->n]);
}

/* Read @p; if that fails, the first object alone (the damage may lie ahead), and the others'
 * blocks go back. Returns 0 or the -errno of the first object's read. */
static int read_plan(struct ferry__plasma_store *s, uint32_t file, struct ferry__store_plan *p)
{
	int r = ferry__plasma_spill_readv(s->spill, file, p->objs, p->n);

	if (r < 0 && p->n > 1) {
		unplan(s, p, 1);
		r = ferry__plasma_spill_readv(s->spill, file, p->objs, 1);
	}
	return r;
}

/* Object k of @p is in its block: publish it there (SEALED) and drop its spill record.
 * Returns 0, or -ENOENT (it changed meanwhile: the block goes back). */
static int publish(struct ferry__plasma_store *s, const struct ferry__store_plan *p, uint32_t k)
{
	uint32_t index = p->index[k];
	int r = ferry__plasma_index_restore(&s->ix, index, p->gen[k], p->blocks[k]);

	if (r < 0) {
		ferry__plasma_allocator_free(s->alloc, p->blocks[k]);
		return r;
	}
	s->shadow[index].block = p->blocks[k];
	s->shadow[index].gen = p->gen[k];
	forget(s, index, true);
	s->restored_objects++;
	s->restored_bytes += p->objs[k].size;
	return 0;
}

int ferry__plasma_store_restore(struct ferry__plasma_store *s, uint32_t index, uint32_t gen)
{
	struct ferry__store_plan p;
	uint32_t file;
	int r;

	index &= s->ix.mask;
	r = plan(s, index, gen, &p, &file);
	if (r < 0)
		return r;
	r = read_plan(s, file, &p);
	if (r < 0) {
		unplan(s, &p, 0);
		return r;
	}
	r = publish(s, &p, 0);
	/* The one asked for is the caller's to announce; the others are news to the server. */
	for (uint32_t k = 1; k < p.n; k++)
		if (publish(s, &p, k) == 0 && s->on_restored)
			s->on_restored(s->hook_arg, p.index[k], p.gen[k]);
	return r;
}

/* ---- restores in the background ---- */

/* On the worker: read the plan, or the first object alone if that fails. */
static void restore_run(struct ferry__store_restore *rs, struct io_uring *ring)
{
	int r = ferry__plasma_spill_read_run(rs->job, ring, rs->plan.n);

	rs->read = rs->plan.n;
	if (r < 0 && rs->plan.n > 1) {
		r = ferry__plasma_spill_read_run(rs->job, ring, 1);
		rs->read = 1;
	}
	if (r < 0)
		rs->read = 0;
}

/* Back on the store's thread: publish what was read, give back the rest, and tell. */
static void restore_end(struct ferry__plasma_store *s, struct ferry__store_restore *rs)
{
	struct ferry__store_plan *p = &rs->plan;
	int r = ferry__plasma_spill_read_finish(s->spill, rs->job);
	uint32_t n = p->n;

	for (uint32_t k = 0; k < n; k++)
		s->shadow[p->index[k]].restoring = false;
	for (uint32_t k = 0; k < n; k++) {
		int status = -ENOENT;

		if (r == 0 && k < rs->read)
			status = publish(s, p, k);
		else if (k == 0 && r < 0)
			status = r;
		if (!(r == 0 && k < rs->read))
			ferry__plasma_allocator_free(s->alloc, p->blocks[k]);
		if (s->on_restore_done)
			s->on_restore_done(s->hook_arg, p->index[k], p->gen[k], status);
	}
	s->bg.restores--;
	ferry__free(rs);
}

/* Publish the restores the worker read; hand those it did not read to a worker again (one
 * that a quiesce stopped). */
static void restore_poll(struct ferry__plasma_store *s)
{
	struct ferry__store_spiller *bg = &s->bg;
	struct ferry__store_restore *rs, *next;
	bool started = bg->started;

	if (!bg->restores)
		return;
	if (started)
		pthread_mutex_lock(&bg->lock);
	rs = bg->rdone;
	bg->rdone = NULL;
	if (started)
		pthread_mutex_unlock(&bg->lock);
	for (; rs; rs = next) {
		next = rs->next;
		restore_end(s, rs);
	}
	/* rtodo is the worker's too once it runs: read it only when none does. */
	if (!started && bg->rtodo && spiller_start(s) == 0) {
		pthread_mutex_lock(&bg->lock);
		pthread_cond_signal(&bg->cond);
		pthread_mutex_unlock(&bg->lock);
	}
}

/* Queue @rs for the worker (started if need be). Returns 0 or -errno (not queued). */
static int restore_queue(struct ferry__plasma_store *s, struct ferry__store_restore *rs)
{
	struct ferry__store_spiller *bg = &s->bg;
	int r = spiller_start(s);

	if (r < 0)
		return r;
	for (uint32_t k = 0; k < rs->plan.n; k++)
		s->shadow[rs->plan.index[k]].restoring = true;
	bg->restores++;
	pthread_mutex_lock(&bg->lock);
	rs->next = NULL;
	*bg->rtail = rs;
	bg->rtail = &rs->next;
	pthread_cond_signal(&bg->cond);
	pthread_mutex_unlock(&bg->lock);
	return 0;
}

int ferry__plasma_store_restore_begin(struct ferry__plasma_store *s, uint32_t index, uint32_t gen)
{
	struct ferry__store_restore *rs;
	uint32_t file;
	int r;

	if (!s->post || !s->spill)
		return ferry__plasma_store_restore(s, index, gen);
	index &= s->ix.mask;
	rs = ferry__calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	r = plan(s, index, gen, &rs->plan, &file);
	if (r < 0)
		goto err_free;
	r = ferry__plasma_spill_read_new(s->spill, file, rs->plan.objs, rs->plan.n, &rs->job);
	if (r < 0)
		goto err_unplan;
	r = restore_queue(s, rs);
	if (r < 0)
		goto err_job;
	return -EINPROGRESS;

err_job:
	/* No worker thread: read it here, as without a loop to post to. */
	ferry__plasma_spill_read_free(rs->job);
	unplan(s, &rs->plan, 0);
	ferry__free(rs);
	return ferry__plasma_store_restore(s, index, gen);
err_unplan:
	unplan(s, &rs->plan, 0);
err_free:
	ferry__free(rs);
	return r;
}

static void discard_list(struct ferry__store_restore *rs)
{
	struct ferry__store_restore *next;

	for (; rs; rs = next) {
		next = rs->next;
		ferry__plasma_spill_read_free(rs->job);
		ferry__free(rs);
	}
}

void ferry__store_restore_discard(struct ferry__plasma_store *s)
{
	discard_list(s->bg.rtodo);
	discard_list(s->bg.rdone);
	s->bg.rtodo = s->bg.rdone = NULL;
	s->bg.rtail = &s->bg.rtodo;
	s->bg.restores = 0;
}

int ferry__plasma_store_tick(struct ferry__plasma_store *s)
{
	struct ferry__plasma_alloc_stats a;
	uint64_t limit, target, seals;
	int r;

	ferry__plasma_store_collect(s);
	restore_poll(s);
	if (!s->spill || s->spill_threshold_pct >= 100)
		return 0;
	take_back(s, false);
	if (s->bg.batch)
		return 0; /* one batch in flight at a time */
	ferry__plasma_allocator_stats(s->alloc, &a);
	limit = a.capacity_bytes / 100 * s->spill_threshold_pct;
	seals = atomic_load_explicit(&s->ix.hdr->seal_seq, memory_order_relaxed);
	if (a.allocated_bytes <= limit ||
	    (a.allocated_bytes == s->idle_allocated && seals == s->idle_seals))
		return 0;
	target = a.capacity_bytes / 100 *
		 (s->spill_threshold_pct - FERRY_MIN(5u, s->spill_threshold_pct));
	r = -EAGAIN;
	if (s->post)
		r = spill_background(s, a.allocated_bytes - target);
	if (r < 0 && r != -ENOSPC) /* no thread: wait for the disk here */
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
