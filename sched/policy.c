/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The placement decision of a scheduler level (sched/policy.h): children kept in bucket lists by
 * free share per resource kind and by queued wait, so that a decision probes a bounded number
 * of them whatever the level's size.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "sched/policy.h"

#define FREE_BUCKETS 101 /* free share 0..100 % */
#define WAIT_BUCKETS 64	 /* 0, then 1 + log2(wait ns) */
#define NOT_LISTED UINT8_MAX
#define LOCAL_MAX 32 /* distinct input holders weighed per decision */

/*
 * Children in buckets: one doubly-linked list per bucket through per-child arrays, and a bitmap
 * of the non-empty buckets, so the next non-empty bucket in either direction is a bit scan.
 */
struct blist {
	uint32_t *prev;	    /* per child */
	uint32_t *next;	    /* per child */
	uint8_t *bucket;    /* per child: its bucket, or NOT_LISTED */
	uint32_t head[128]; /* per bucket: first child, or NO_CHILD */
	uint32_t tail[128]; /* per bucket: last child */
	uint64_t bits[2];   /* non-empty buckets */
	uint32_t members;   /* children listed */
};

#define HOT_KINDS 4 /* the standard kinds, kept in the child's hot record */

/*
 * What a decision reads of a child, in one small record (the standard kinds' amounts, its
 * queue), so that probing 10,000 children's worth of buckets touches a few cache lines per child
 * probed; the full report (every custom kind) sits apart, allocated only for a child that has
 * reported custom kinds (at 10,000 children a full report each would be 22 MB, and reading it
 * on every report was most of the cost of a report at that size).
 */
struct hot_amounts {
	int64_t avail_max; /* as struct ferry__sched_load's */
	int64_t avail;
	int64_t total;
	int64_t total_max;
};

/*
 * What a CPU-only decision reads of a child it probes: one cache line. At 10,000 children the
 * level's hot records are 640 KB and stay in a core's L2; with every standard kind in them (three
 * lines each) they did not, and a decision at 10,000 children ran at ~0.7x its rate at 1,000.
 */
struct child {
	struct hot_amounts cpu; /* kind FERRY__SCHED_CPU */
	uint64_t mean_task_ns;	/* 0: unknown */
	uint64_t bandwidth;	/* bytes/s to it, 0: the level's default */
	uint32_t queue_len;	/* tasks waiting there */
	bool alive;		/* reported and not dead */
	uint8_t std_kinds;	/* the standard kinds it has (bit k: total > 0) */
	bool custom;		/* it has custom kinds too (cold's kinds says which) */
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct child) == 64, "a child's hot record is one cache line");

/* The rest of a child: read per report, and per decision only for tasks that ask for more
 * than CPU. */
struct child_cold {
	struct hot_amounts k[HOT_KINDS - 1]; /* the other standard kinds (1..HOT_KINDS-1) */
	uint64_t version;		     /* of its last report */
	uint64_t kinds[2]; /* kinds it has (total > 0): the only ones touched per commit */
	struct ferry__sched_load *full; /* its last report, minus commits: NULL until it reports
					   * a custom kind (ferry__malloc) */
};

static bool has_kind(const uint64_t *kinds, uint32_t k);

static bool has_kind(const uint64_t *kinds, uint32_t k)
{
	return kinds[k / 64] >> (k % 64) & 1;
}

struct ferry__sched_level {
	struct ferry__sched_level_opts opts; /* defaults filled in */
	struct child *children;		     /* by child number, 64-byte aligned in children_mem */
	void *children_mem;		     /* its allocation (ferry__malloc) */
	struct child_cold *cold;	     /* by child number */
	uint32_t nchildren;		     /* added */
	uint32_t capacity;		     /* of children and of every blist's arrays */
	struct blist
		*by_free[FERRY__SCHED_KINDS]; /* per kind: children that have some, by free share */
	struct blist by_wait;		      /* live children by queued wait */
	int64_t max_total[FERRY__SCHED_KINDS]; /* the most one node has, over the level */
	uint32_t at_max[FERRY__SCHED_KINDS];   /* children whose total_max is max_total */
	uint32_t *node_child;		       /* node number -> child */
	uint32_t nnodes;		       /* length of node_child */
};

static void blist_init(struct blist *b)
{
	memset(b, 0, sizeof(*b));
	for (int i = 0; i < 128; i++)
		b->head[i] = b->tail[i] = FERRY__SCHED_NO_CHILD;
}

static void blist_fini(struct blist *b)
{
	ferry__free(b->prev);
	ferry__free(b->next);
	ferry__free(b->bucket);
}

static int blist_grow(struct blist *b, uint32_t old, uint32_t cap)
{
	uint32_t *prev = ferry__realloc(b->prev, cap * sizeof(*prev));
	if (!prev)
		return -ENOMEM;
	b->prev = prev;
	uint32_t *next = ferry__realloc(b->next, cap * sizeof(*next));
	if (!next)
		return -ENOMEM;
	b->next = next;
	uint8_t *bucket = ferry__realloc(b->bucket, cap);
	if (!bucket)
		return -ENOMEM;
	b->bucket = bucket;
	memset(bucket + old, NOT_LISTED, cap - old);
	return 0;
}

static void blist_remove(struct blist *b, uint32_t c)
{
	uint8_t k = b->bucket[c];

	if (k == NOT_LISTED)
		return;
	if (b->prev[c] != FERRY__SCHED_NO_CHILD)
		b->next[b->prev[c]] = b->next[c];
	else
		b->head[k] = b->next[c];
	if (b->next[c] != FERRY__SCHED_NO_CHILD)
		b->prev[b->next[c]] = b->prev[c];
	else
		b->tail[k] = b->prev[c];
	if (b->head[k] == FERRY__SCHED_NO_CHILD)
		b->bits[k / 64] &= ~(1ull << (k % 64));
	b->bucket[c] = NOT_LISTED;
	b->members--;
}

/* Append @c to bucket @k (its tail: children just chosen go behind their equals). */
static void blist_put(struct blist *b, uint32_t c, uint8_t k)
{
	blist_remove(b, c);
	b->bucket[c] = k;
	b->next[c] = FERRY__SCHED_NO_CHILD;
	b->prev[c] = b->tail[k];
	if (b->tail[k] != FERRY__SCHED_NO_CHILD)
		b->next[b->tail[k]] = c;
	else
		b->head[k] = c;
	b->tail[k] = c;
	b->bits[k / 64] |= 1ull << (k % 64);
	b->members++;
}

/* The first non-empty bucket at or above @from (up) or at or below it (down), or -1. */
static int blist_scan(const struct blist *b, int from, bool up)
{
	for (int k = from; k >= 0 && k < 128;) {
		uint64_t w = b->bits[k / 64];
		if (up) {
			w &= ~0ull << (k % 64);
			if (w)
				return (k / 64) * 64 + __builtin_ctzll(w);
			k = (k / 64 + 1) * 64;
		} else {
			w &= ~0ull >> (63 - k % 64);
			if (w)
				return (k / 64) * 64 + 63 - __builtin_clzll(w);
			k = (k / 64) * 64 - 1;
		}
	}
	return -1;
}

int ferry__sched_level_create(const struct ferry__sched_level_opts *opts,
			      struct ferry__sched_level **out)
{
	struct ferry__sched_level *l;
	struct ferry__sched_level_opts o = opts ? *opts : (struct ferry__sched_level_opts){0};

	if (o.pack_threshold < 0 || o.pack_threshold > 1) {
		FLOG_WARN("sched", "pack threshold %g is outside 0..1", o.pack_threshold);
		return -EINVAL;
	}
	if (o.pack_threshold == 0)
		o.pack_threshold = 0.5;
	if (!o.bandwidth_bytes_per_s)
		o.bandwidth_bytes_per_s = 1250000000ull;
	if (!o.mean_task_ns)
		o.mean_task_ns = 1000000;
	l = ferry__calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->opts = o;
	blist_init(&l->by_wait);
	*out = l;
	return 0;
}

void ferry__sched_level_destroy(struct ferry__sched_level *l)
{
	if (!l)
		return;
	for (int k = 0; k < FERRY__SCHED_KINDS; k++) {
		if (l->by_free[k])
			blist_fini(l->by_free[k]);
		ferry__free(l->by_free[k]);
	}
	blist_fini(&l->by_wait);
	for (uint32_t i = 0; i < l->nchildren; i++)
		ferry__free(l->cold[i].full);
	ferry__free(l->children_mem);
	ferry__free(l->cold);
	ferry__free(l->node_child);
	ferry__free(l);
}

int ferry__sched_child_add(struct ferry__sched_level *l, uint32_t *child)
{
	if (l->nchildren == l->capacity) {
		uint32_t cap = l->capacity ? l->capacity * 2 : 64;
		/* By hand, not realloc: the records must sit on cache-line boundaries. */
		void *mem = ferry__malloc(cap * sizeof(struct child) + 63);
		if (!mem)
			return -ENOMEM;
		struct child *c = (struct child *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
		if (l->nchildren)
			memcpy(c, l->children, l->nchildren * sizeof(*c));
		ferry__free(l->children_mem);
		l->children_mem = mem;
		l->children = c;
		struct child_cold *cold = ferry__realloc(l->cold, cap * sizeof(*cold));
		if (!cold)
			return -ENOMEM;
		l->cold = cold;
		if (blist_grow(&l->by_wait, l->capacity, cap) < 0)
			return -ENOMEM;
		for (int k = 0; k < FERRY__SCHED_KINDS; k++)
			if (l->by_free[k] && blist_grow(l->by_free[k], l->capacity, cap) < 0)
				return -ENOMEM;
		l->capacity = cap;
	}
	memset(&l->children[l->nchildren], 0, sizeof(l->children[0]));
	memset(&l->cold[l->nchildren], 0, sizeof(l->cold[0]));
	*child = l->nchildren++;
	return 0;
}

uint32_t ferry__sched_level_children(const struct ferry__sched_level *l)
{
	return l->nchildren;
}

int ferry__sched_child_load(const struct ferry__sched_level *l, uint32_t child,
			    struct ferry__sched_load *out)
{
	if (child >= l->nchildren)
		return -EINVAL;
	const struct child *ch = &l->children[child];
	const struct child_cold *cd = &l->cold[child];
	if (cd->full)
		*out = *cd->full;
	else
		memset(out, 0, sizeof(*out));
	for (uint32_t k = 0; k < HOT_KINDS; k++) {
		const struct hot_amounts *a = k ? &cd->k[k - 1] : &ch->cpu;
		out->avail_max[k] = a->avail_max;
		out->total_max[k] = a->total_max;
		out->avail[k] = a->avail;
		out->total[k] = a->total;
	}
	out->queue_len = ch->queue_len;
	out->version = cd->version;
	out->mean_task_ns = ch->mean_task_ns;
	out->bandwidth_bytes_per_s = ch->bandwidth;
	return 0;
}

static uint64_t mean_ns(const struct ferry__sched_level *l, const struct child *c)
{
	return c->mean_task_ns ? c->mean_task_ns : l->opts.mean_task_ns;
}

/*
 * @c's amounts of kind @k: in the hot record for the standard kinds, in the full report else
 * (none: 0). The *_ref forms are for changing them, only for a kind @c has (total > 0), which a
 * custom kind has only in a full report.
 */
#define AMOUNT(l, c, k, field)                             \
	((k) == 0	     ? (l)->children[c].cpu.field  \
	 : (k) < HOT_KINDS   ? (l)->cold[c].k[(k)-1].field \
	 : (l)->cold[c].full ? (l)->cold[c].full->field[k] \
			     : 0)
static int64_t avail_of(const struct ferry__sched_level *l, uint32_t c, uint32_t k)
{
	return AMOUNT(l, c, k, avail);
}
static int64_t avail_max_of(const struct ferry__sched_level *l, uint32_t c, uint32_t k)
{
	return AMOUNT(l, c, k, avail_max);
}
static int64_t total_of(const struct ferry__sched_level *l, uint32_t c, uint32_t k)
{
	return AMOUNT(l, c, k, total);
}
static int64_t total_max_of(const struct ferry__sched_level *l, uint32_t c, uint32_t k)
{
	return AMOUNT(l, c, k, total_max);
}
static int64_t *avail_ref(struct ferry__sched_level *l, uint32_t c, uint32_t k)
{
	return !k	       ? &l->children[c].cpu.avail
	       : k < HOT_KINDS ? &l->cold[c].k[k - 1].avail
			       : &l->cold[c].full->avail[k];
}
static int64_t *avail_max_ref(struct ferry__sched_level *l, uint32_t c, uint32_t k)
{
	return !k	       ? &l->children[c].cpu.avail_max
	       : k < HOT_KINDS ? &l->cold[c].k[k - 1].avail_max
			       : &l->cold[c].full->avail_max[k];
}

/*
 * What a task that cannot start now waits for under @c: the tasks queued there and itself,
 * each a mean task time, over how many tasks of its size run there at once (8 slots drain a
 * queue of 8 in one task time, not eight).
 */
static uint64_t queued_wait(const struct ferry__sched_level *l, uint32_t c,
			    const struct ferry__sched_task *t)
{
	const struct child *ch = &l->children[c];
	int64_t slots = INT64_MAX;

	for (uint32_t i = 0; i < t->ndemand; i++) {
		int64_t n = total_of(l, c, t->demand[i].kind) / t->demand[i].amount;
		if (n < slots)
			slots = n;
	}
	if (slots < 1 || slots == INT64_MAX)
		slots = 1;
	return ((uint64_t)ch->queue_len + 1) * mean_ns(l, ch) / (uint64_t)slots;
}

/* The standard kinds of a report, into @c's hot record. */
static void take_hot(struct ferry__sched_level *l, uint32_t c, const struct ferry__sched_load *ld)
{
	struct child *ch = &l->children[c];
	struct child_cold *cd = &l->cold[c];

	for (uint32_t k = 0; k < HOT_KINDS; k++) {
		struct hot_amounts *a = k ? &cd->k[k - 1] : &ch->cpu;
		a->avail_max = ld->avail_max[k];
		a->total_max = ld->total_max[k];
		a->avail = ld->avail[k];
		a->total = ld->total[k];
	}
	ch->queue_len = ld->queue_len;
	cd->version = ld->version;
	ch->mean_task_ns = ld->mean_task_ns;
	ch->bandwidth = ld->bandwidth_bytes_per_s;
}

static uint8_t wait_bucket(uint64_t wait_ns)
{
	return wait_ns ? (uint8_t)(64 - __builtin_clzll(wait_ns)) % WAIT_BUCKETS : 0;
}

static uint8_t free_bucket(int64_t avail, int64_t total)
{
	if (avail <= 0)
		return 0;
	if (avail >= total)
		return 100;
	return (uint8_t)((double)avail * 100 / (double)total);
}

static struct blist *kind_index(struct ferry__sched_level *l, uint32_t k)
{
	if (!l->by_free[k]) {
		struct blist *b = ferry__malloc(sizeof(*b));
		if (!b)
			return NULL;
		blist_init(b);
		if (l->capacity && blist_grow(b, 0, l->capacity) < 0) {
			blist_fini(b);
			ferry__free(b);
			return NULL;
		}
		l->by_free[k] = b;
	}
	return l->by_free[k];
}

/* Put @c in the buckets its load says (or in none, dead). */
static int relist(struct ferry__sched_level *l, uint32_t c)
{
	struct child *ch = &l->children[c];
	/* The custom kinds' bits are read only for a child that has some: the cold record is a
	 * cache miss at 10,000 children, and this runs on every commit. */
	const uint64_t *kinds = ch->custom ? l->cold[c].kinds : NULL;
	uint32_t nkinds = ch->custom ? FERRY__SCHED_KINDS : HOT_KINDS;

	if (!ch->alive) {
		blist_remove(&l->by_wait, c);
		for (uint32_t k = 0; k < nkinds; k++)
			if ((k < HOT_KINDS ? ch->std_kinds >> k & 1 : has_kind(kinds, k)) &&
			    l->by_free[k])
				blist_remove(l->by_free[k], c);
		return 0;
	}
	blist_put(&l->by_wait, c, wait_bucket((uint64_t)ch->queue_len * mean_ns(l, ch)));
	for (uint32_t k = 0; k < nkinds; k++) {
		if (!(k < HOT_KINDS ? ch->std_kinds >> k & 1 : has_kind(kinds, k)))
			continue;
		struct blist *b = kind_index(l, k);
		if (!b)
			return -ENOMEM;
		blist_put(b, c, free_bucket(avail_of(l, c, k), total_of(l, c, k)));
	}
	return 0;
}

/* Keep max_total[k] (the most one node of the level has) as @c's total_max goes @old -> @now. */
static void track_max(struct ferry__sched_level *l, uint32_t k, int64_t old, int64_t now)
{
	if (old == now)
		return;
	if (now > l->max_total[k]) {
		l->max_total[k] = now;
		l->at_max[k] = 1;
		return;
	}
	if (now == l->max_total[k])
		l->at_max[k]++;
	if (old == l->max_total[k] && --l->at_max[k] == 0) {
		/* The last child at the maximum went down: rare (totals change when nodes come and
		 * go), so one pass over the level here keeps every decision free of it. */
		l->max_total[k] = 0;
		for (uint32_t i = 0; i < l->nchildren; i++) {
			int64_t v = l->children[i].alive ? total_max_of(l, i, k) : 0;
			if (v > l->max_total[k]) {
				l->max_total[k] = v;
				l->at_max[k] = 1;
			} else if (v == l->max_total[k] && v > 0) {
				l->at_max[k]++;
			}
		}
	}
}

static int check_load(const struct ferry__sched_load *load)
{
	for (int k = 0; k < FERRY__SCHED_KINDS; k++) {
		if (load->total[k] < 0 || load->avail[k] < 0 || load->total_max[k] < 0 ||
		    load->avail_max[k] < 0 || load->avail[k] > load->total[k] ||
		    load->avail_max[k] > load->total_max[k] || load->total_max[k] > load->total[k])
			return -EINVAL;
	}
	return 0;
}

int ferry__sched_child_report(struct ferry__sched_level *l, uint32_t child,
			      const struct ferry__sched_load *load)
{
	struct child *ch;
	struct child_cold *cd;

	if (child >= l->nchildren || check_load(load) < 0) {
		FLOG_WARN("sched", "load report for child %u refused: %s", child,
			  child >= l->nchildren ? "no such child" : "amounts out of range");
		return -EINVAL;
	}
	ch = &l->children[child];
	cd = &l->cold[child];
	if (ch->alive && load->version <= cd->version)
		return 0;
	if (!ch->alive && cd->version)
		return -ESRCH; /* dead: a late report does not bring it back */
	uint64_t kinds[2] = {0, 0};
	for (uint32_t k = 0; k < FERRY__SCHED_KINDS; k++)
		if (load->total[k] > 0)
			kinds[k / 64] |= 1ull << (k % 64);
	/* The full report (2 KiB) is kept only for a child with custom kinds: at 10,000 children,
	 * copying it, or reading the old one, on every report cost more than the decisions
	 * between reports. A child without them has none to compare either. */
	bool custom = (kinds[0] >> HOT_KINDS) || kinds[1];
	if (custom && !cd->full && !(cd->full = ferry__malloc(sizeof(*cd->full))))
		return -ENOMEM;
	uint32_t nkinds = cd->full ? FERRY__SCHED_KINDS : HOT_KINDS;
	for (uint32_t k = 0; k < nkinds; k++) {
		track_max(l, k, ch->alive ? total_max_of(l, child, k) : 0, load->total_max[k]);
		/* A kind it no longer has leaves that kind's buckets. */
		if (has_kind(cd->kinds, k) && load->total[k] <= 0 && l->by_free[k])
			blist_remove(l->by_free[k], child);
	}
	cd->kinds[0] = kinds[0];
	cd->kinds[1] = kinds[1];
	ch->std_kinds = (uint8_t)(kinds[0] & ((1u << HOT_KINDS) - 1));
	ch->custom = custom;
	if (cd->full)
		*cd->full = *load;
	take_hot(l, child, load);
	if (!cd->version)
		cd->version = 1; /* a reported child is known from now on */
	ch->alive = true;
	return relist(l, child);
}

int ferry__sched_child_dead(struct ferry__sched_level *l, uint32_t child)
{
	struct child *ch;

	if (child >= l->nchildren)
		return -EINVAL;
	ch = &l->children[child];
	if (ch->alive)
		for (uint32_t k = 0; k < FERRY__SCHED_KINDS; k++)
			track_max(l, k, total_max_of(l, child, k), 0);
	ch->alive = false;
	l->cold[child].version = l->cold[child].version ? l->cold[child].version : 1;
	return relist(l, child);
}

int ferry__sched_child_revive(struct ferry__sched_level *l, uint32_t child)
{
	if (child >= l->nchildren)
		return -EINVAL;
	if (!l->children[child].alive)
		l->cold[child].version = 0;
	return 0;
}

int ferry__sched_level_map_node(struct ferry__sched_level *l, uint32_t node, uint32_t child)
{
	if (child >= l->nchildren || node == FERRY__SCHED_NO_CHILD)
		return -EINVAL;
	if (node >= l->nnodes) {
		uint32_t n = l->nnodes ? l->nnodes : 64;
		while (n <= node)
			n = n > UINT32_MAX / 2 ? UINT32_MAX : n * 2;
		uint32_t *m = ferry__realloc(l->node_child, (size_t)n * sizeof(*m));
		if (!m)
			return -ENOMEM;
		for (uint32_t i = l->nnodes; i < n; i++)
			m[i] = FERRY__SCHED_NO_CHILD;
		l->node_child = m;
		l->nnodes = n;
	}
	l->node_child[node] = child;
	return 0;
}

static int check_task(const struct ferry__sched_task *t)
{
	if (t->ndemand > FERRY__SCHED_DEMAND_MAX || (t->ninputs && !t->inputs) ||
	    t->strategy > FERRY__SCHED_NODE_AFFINITY)
		return -EINVAL;
	for (uint32_t i = 0; i < t->ndemand; i++) {
		if (t->demand[i].kind >= FERRY__SCHED_KINDS || t->demand[i].amount <= 0)
			return -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (t->demand[j].kind == t->demand[i].kind)
				return -EINVAL;
	}
	for (uint32_t i = 0; i < t->ninputs; i++)
		if (t->inputs[i].nlocations && !t->inputs[i].locations)
			return -EINVAL;
	return 0;
}

static bool fits_now(const struct ferry__sched_level *l, uint32_t c,
		     const struct ferry__sched_task *t)
{
	for (uint32_t i = 0; i < t->ndemand; i++) {
		uint32_t k = t->demand[i].kind;
		int64_t have = avail_max_of(l, c, k);
		if (have < t->demand[i].amount)
			return false;
	}
	return true;
}

/* A task a group sent up never goes back down to it: that would be a ping-pong. */
static bool excluded(const struct ferry__sched_task *t, uint32_t c)
{
	return t->exclude && t->excluded_child == c;
}

static bool feasible(const struct ferry__sched_level *l, uint32_t c,
		     const struct ferry__sched_task *t)
{
	if (!l->children[c].alive || excluded(t, c))
		return false;
	for (uint32_t i = 0; i < t->ndemand; i++) {
		uint32_t k = t->demand[i].kind;
		int64_t have = total_max_of(l, c, k);
		if (have < t->demand[i].amount)
			return false;
	}
	return true;
}

/* The children holding the task's inputs, with the bytes each holds. */
struct holders {
	uint32_t n;			/* distinct children */
	uint64_t total_bytes;		/* of the inputs weighed */
	uint64_t subtree_bytes;		/* of those with a copy under this level */
	uint32_t child[LOCAL_MAX];	/* holder */
	uint64_t bytes[LOCAL_MAX];	/* input bytes under it */
	uint32_t last_input[LOCAL_MAX]; /* the input last counted for it (a copy counts once) */
};

static void find_holders(const struct ferry__sched_level *l, const struct ferry__sched_task *t,
			 struct holders *h)
{
	uint32_t ninputs =
		t->ninputs < FERRY__SCHED_INPUTS_MAX ? t->ninputs : FERRY__SCHED_INPUTS_MAX;

	h->n = 0;
	h->total_bytes = 0;
	h->subtree_bytes = 0;
	for (uint32_t i = 0; i < ninputs; i++) {
		const struct ferry__sched_input *in = &t->inputs[i];
		bool under = false;

		h->total_bytes += in->size_bytes;
		for (uint32_t j = 0; j < in->nlocations; j++) {
			uint32_t node = in->locations[j], c, k;

			if (node >= l->nnodes || (c = l->node_child[node]) == FERRY__SCHED_NO_CHILD)
				continue;
			if (!under) {
				h->subtree_bytes += in->size_bytes;
				under = true;
			}
			for (k = 0; k < h->n && h->child[k] != c; k++)
				;
			if (k == h->n) {
				if (h->n == LOCAL_MAX)
					continue;
				h->child[k] = c;
				h->bytes[k] = 0;
				h->last_input[k] = UINT32_MAX;
				h->n++;
			}
			if (h->last_input[k] != i) {
				h->bytes[k] += in->size_bytes;
				h->last_input[k] = i;
			}
		}
	}
}

static uint64_t local_bytes(const struct holders *h, uint32_t c)
{
	for (uint32_t k = 0; k < h->n; k++)
		if (h->child[k] == c)
			return h->bytes[k];
	return 0;
}

/* The best choice so far, and how to weigh another. */
struct choice {
	struct ferry__sched_decision d; /* child NO_CHILD until one is found */
	bool fits;			/* it runs now */
};

static void consider(const struct ferry__sched_level *l, const struct holders *h,
		     const struct ferry__sched_task *t, uint32_t c, struct choice *best)
{
	const struct child *ch = &l->children[c];
	bool fits = fits_now(l, c, t);
	uint64_t local = local_bytes(h, c);
	uint64_t bw = ch->bandwidth ? ch->bandwidth : l->opts.bandwidth_bytes_per_s;
	uint64_t est = (fits ? 0 : queued_wait(l, c, t)) +
		       (uint64_t)((double)(h->total_bytes - local) * 1e9 / (double)bw);

	if (best->d.child != FERRY__SCHED_NO_CHILD) {
		/* Ties keep the earlier choice (the packing order), unless this one runs now
		 * where that one queues or holds more of the input. */
		if (est > best->d.est_wait_ns)
			return;
		if (est == best->d.est_wait_ns && (best->fits || !fits) &&
		    local <= best->d.local_bytes)
			return;
	}
	best->d.child = c;
	best->d.verdict = fits ? FERRY__SCHED_RUNS_NOW : FERRY__SCHED_QUEUES;
	best->d.est_wait_ns = est;
	best->d.local_bytes = local;
	best->fits = fits;
}

/* The demanded kind the fewest children have (its index is the shortest to probe). */
static int rarest_kind(const struct ferry__sched_level *l, const struct ferry__sched_task *t)
{
	int best = -1;

	for (uint32_t i = 0; i < t->ndemand; i++) {
		const struct blist *b = l->by_free[t->demand[i].kind];
		if (!b || !b->members)
			return -1;
		if (best < 0 || b->members < l->by_free[best]->members)
			best = (int)t->demand[i].kind;
	}
	if (best < 0 && l->by_free[FERRY__SCHED_CPU] && l->by_free[FERRY__SCHED_CPU]->members)
		best = FERRY__SCHED_CPU;
	return best;
}

/* @c's free share of @kind, in percent, after taking @t. */
static int64_t share_after(const struct ferry__sched_level *l, uint32_t c,
			   const struct ferry__sched_task *t, uint32_t kind)
{
	int64_t avail = avail_of(l, c, kind), total = total_of(l, c, kind);

	for (uint32_t i = 0; i < t->ndemand; i++)
		if (t->demand[i].kind == kind)
			avail -= t->demand[i].amount;
	return total > 0 ? (int64_t)((double)avail * 100 / (double)total) : 0;
}

/*
 * A child that fits @t now, from the buckets of @kind: the fullest that still has @lo_pct free
 * after taking it (packing up to the threshold), else the emptiest (@spread: the emptiest of
 * all). NO_CHILD if none in the probes allowed.
 */
static uint32_t pick_free(const struct ferry__sched_level *l, const struct ferry__sched_task *t,
			  uint32_t kind, int lo_pct, bool spread, bool demanded, uint32_t *probes)
{
	const struct blist *b = l->by_free[kind];
	/* Bucket 0 holds children with none of the kind free: nothing that asks for it fits. */
	int floor_bucket = demanded ? 1 : 0;
	int passes = spread ? 1 : 2;

	/* Pass 0 packs: upwards from the threshold's bucket, the first child that keeps lo_pct free
	 * after the task. Pass 1 spreads over the rest, emptiest first; a child pass 0 saw and
	 * passed over (it would cross the threshold) is among them. */
	for (int pass = 0; pass < passes; pass++) {
		bool up = !spread && pass == 0;
		int from = spread || pass == 1 ? 100 : lo_pct;

		for (int k = blist_scan(b, from, up); k >= floor_bucket && k <= 100;
		     k = blist_scan(b, up ? k + 1 : k - 1, up)) {
			for (uint32_t c = b->head[k]; c != FERRY__SCHED_NO_CHILD; c = b->next[c]) {
				if (++*probes > FERRY__SCHED_PROBES)
					return FERRY__SCHED_NO_CHILD;
				if (!fits_now(l, c, t) || excluded(t, c))
					continue;
				if (!up || share_after(l, c, t, kind) >= lo_pct)
					return c;
				/* It would cross the threshold, and so would its bucket's others (the
				 * same share free): try the next bucket up. */
				break;
			}
			if (!up && k == floor_bucket)
				break;
		}
	}
	return FERRY__SCHED_NO_CHILD;
}

/* Nothing fits now: the child with the shortest queued wait that could ever run @t. */
static uint32_t pick_queue(const struct ferry__sched_level *l, const struct ferry__sched_task *t,
			   const struct blist *kind, uint32_t *probes)
{
	/* Few children have the kind asked for: weigh every one of them. */
	const struct blist *b = kind && kind->members <= FERRY__SCHED_PROBES ? kind : &l->by_wait;
	uint32_t best = FERRY__SCHED_NO_CHILD, looked = 0;
	uint64_t best_wait = UINT64_MAX;

	for (int k = blist_scan(b, 0, true); k >= 0; k = blist_scan(b, k + 1, true)) {
		for (uint32_t c = b->head[k]; c != FERRY__SCHED_NO_CHILD; c = b->next[c]) {
			if (looked >= FERRY__SCHED_PROBES && best != FERRY__SCHED_NO_CHILD)
				return best;
			++*probes;
			++looked;
			if (feasible(l, c, t) && queued_wait(l, c, t) < best_wait) {
				best = c;
				best_wait = queued_wait(l, c, t);
			}
		}
		/* By wait, the first bucket with a feasible child holds the shortest queues. */
		if (b == &l->by_wait && best != FERRY__SCHED_NO_CHILD)
			return best;
	}
	return best;
}

static int decide_affinity(const struct ferry__sched_level *l, const struct ferry__sched_task *t,
			   const struct holders *h, struct choice *best)
{
	uint32_t node = t->affinity_node;
	uint32_t c = node < l->nnodes ? l->node_child[node] : FERRY__SCHED_NO_CHILD;

	if (c != FERRY__SCHED_NO_CHILD && feasible(l, c, t) &&
	    (!t->affinity_soft || fits_now(l, c, t))) {
		consider(l, h, t, c, best);
		return 0;
	}
	return t->affinity_soft ? 1 : -EHOSTUNREACH;
}

int ferry__sched_decide(struct ferry__sched_level *l, const struct ferry__sched_task *task,
			struct ferry__sched_decision *out)
{
	struct holders h;
	struct choice best = {.d = {.child = FERRY__SCHED_NO_CHILD}};
	int kind, ret;

	if (check_task(task) < 0)
		return -EINVAL;
	for (uint32_t i = 0; i < task->ndemand; i++)
		if (l->max_total[task->demand[i].kind] < task->demand[i].amount)
			return -ENOSPC;
	if (!l->by_wait.members)
		return -ENOSPC;
	find_holders(l, task, &h);
	if (task->strategy == FERRY__SCHED_NODE_AFFINITY) {
		ret = decide_affinity(l, task, &h, &best);
		if (ret <= 0) {
			best.d.input_bytes = h.total_bytes;
			best.d.subtree_bytes = h.subtree_bytes;
			if (ret == 0)
				*out = best.d;
			return ret;
		}
	}
	kind = rarest_kind(l, task);
	if (task->strategy != FERRY__SCHED_SPREAD)
		for (uint32_t k = 0; k < h.n; k++)
			if (feasible(l, h.child[k], task))
				consider(l, &h, task, h.child[k], &best);
	best.d.probes = h.n;

	int lo_pct = (int)(100.0 * (1.0 - l->opts.pack_threshold) + 0.999999);
	uint32_t c = kind >= 0 ? pick_free(l, task, (uint32_t)kind, lo_pct,
					   task->strategy == FERRY__SCHED_SPREAD, task->ndemand > 0,
					   &best.d.probes)
			       : FERRY__SCHED_NO_CHILD;
	if (c == FERRY__SCHED_NO_CHILD)
		c = pick_queue(l, task, kind >= 0 ? l->by_free[kind] : NULL, &best.d.probes);
	if (c != FERRY__SCHED_NO_CHILD) {
		uint32_t probes = best.d.probes;
		consider(l, &h, task, c, &best);
		best.d.probes = probes;
	}
	if (best.d.child == FERRY__SCHED_NO_CHILD)
		return -ENOSPC; /* every child that could run it is dead */
	best.d.input_bytes = h.total_bytes;
	best.d.subtree_bytes = h.subtree_bytes;
	*out = best.d;
	return 0;
}

bool ferry__sched_forward_up(const struct ferry__sched_decision *d)
{
	uint64_t outside = d->input_bytes - d->subtree_bytes;

	return d->verdict == FERRY__SCHED_QUEUES ||
	       (outside >= FERRY__SCHED_LOCALITY_MIN_BYTES && outside > d->input_bytes / 2);
}

void ferry__sched_commit(struct ferry__sched_level *l, const struct ferry__sched_task *task,
			 const struct ferry__sched_decision *d)
{
	if (d->child >= l->nchildren || !l->children[d->child].alive)
		return;
	if (d->verdict == FERRY__SCHED_RUNS_NOW && fits_now(l, d->child, task)) {
		for (uint32_t i = 0; i < task->ndemand; i++) {
			uint32_t k = task->demand[i].kind;
			int64_t a = task->demand[i].amount;
			int64_t *avail = avail_ref(l, d->child, k),
				*max = avail_max_ref(l, d->child, k);
			*avail = *avail > a ? *avail - a : 0;
			*max = *max > a ? *max - a : 0;
		}
	} else {
		l->children[d->child].queue_len++;
	}
	(void)relist(l, d->child); /* totals did not change: no index is created, nothing fails */
}

void ferry__sched_level_summary(const struct ferry__sched_level *l, uint64_t version,
				struct ferry__sched_load *out)
{
	double weighted = 0; /* queue x task time, summed */
	uint64_t queued = 0;

	memset(out, 0, sizeof(*out));
	out->version = version;
	for (uint32_t i = 0; i < l->nchildren; i++) {
		const struct child *c = &l->children[i];
		if (!c->alive)
			continue;
		for (uint32_t k = 0; k < FERRY__SCHED_KINDS; k++) {
			if (!has_kind(l->cold[i].kinds, k))
				continue;
			int64_t max = total_max_of(l, i, k), avail_max = avail_max_of(l, i, k);
			out->total[k] += total_of(l, i, k);
			out->avail[k] += avail_of(l, i, k);
			if (max > out->total_max[k])
				out->total_max[k] = max;
			if (avail_max > out->avail_max[k])
				out->avail_max[k] = avail_max;
		}
		queued += c->queue_len;
		weighted += (double)c->queue_len * (double)mean_ns(l, c);
	}
	out->queue_len = queued > UINT32_MAX ? UINT32_MAX : (uint32_t)queued;
	out->mean_task_ns = queued ? (uint64_t)(weighted / (double)queued) : 0;
}
