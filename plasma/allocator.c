/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLSF allocator with out-of-band metadata. Blocks are descriptors in a growable pool, linked
 * in address order (for coalescing) and, when free, into one of FL_COUNT x SL_COUNT segregated
 * free lists whose non-empty ones are marked in two bitmap levels. A hash map finds the
 * descriptor of an allocated block from its offset. Sizes are counted in 64-byte units.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/allocator.h"

#define UNIT_SHIFT 6
#define SL_BITS 4
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 64
#define NONE UINT32_MAX

static const char comp[] = "plasma";

struct block {
	uint64_t offset;    /* first byte, from the arena start */
	uint64_t units;	    /* length in units */
	uint32_t prev_phys; /* block just below, or NONE */
	uint32_t next_phys; /* block just above, or NONE */
	uint32_t prev_free; /* free list links while free */
	uint32_t next_free; /* ... and the spare-descriptor list while unused */
	bool free;	    /* in a free list */
};

struct ferry__plasma_allocator {
	struct block *blocks;		    /* descriptor pool, indexed by uint32_t */
	uint32_t pool_size;		    /* descriptors in the pool */
	uint32_t spare;			    /* first unused descriptor, or NONE */
	uint32_t first;			    /* the block at the start (never merged away) */
	struct ferry__hashmap used;	    /* allocated offset -> descriptor index */
	uint64_t fl_map;		    /* bit f: some sl_map[f] bit is set */
	uint32_t sl_map[FL_COUNT];	    /* bit s: heads[f][s] is non-empty */
	uint32_t heads[FL_COUNT][SL_COUNT]; /* free list heads, or NONE */
	uint64_t start;			    /* first byte managed */
	uint64_t units;			    /* units managed */
	uint64_t free_units;		    /* units in free blocks */
	uint64_t free_blocks;		    /* free blocks */
	uint64_t used_blocks;		    /* allocated blocks */
};

static int log2_floor(uint64_t x)
{
	return 63 - __builtin_clzll(x);
}

/* The class holding blocks of @units: small sizes one class each, then 16 per power of 2. */
static void class_of(uint64_t units, uint32_t *fl, uint32_t *sl)
{
	int f;

	if (units < SL_COUNT) {
		*fl = 0;
		*sl = (uint32_t)units;
		return;
	}
	f = log2_floor(units);
	*fl = (uint32_t)(f - SL_BITS + 1);
	*sl = (uint32_t)(units >> (f - SL_BITS)) & (SL_COUNT - 1);
}

/* Round @units up to its class's upper bound, so that every block of the class found for the
 * result is large enough. */
static uint64_t round_to_class(uint64_t units)
{
	uint64_t step;

	if (units < SL_COUNT)
		return units;
	step = 1ull << (log2_floor(units) - SL_BITS);
	return (units + step - 1) & ~(step - 1);
}

static void insert_free(struct ferry__plasma_allocator *a, uint32_t i)
{
	struct block *b = &a->blocks[i];
	uint32_t fl, sl;

	class_of(b->units, &fl, &sl);
	b->free = true;
	b->prev_free = NONE;
	b->next_free = a->heads[fl][sl];
	if (b->next_free != NONE)
		a->blocks[b->next_free].prev_free = i;
	a->heads[fl][sl] = i;
	a->sl_map[fl] |= 1u << sl;
	a->fl_map |= 1ull << fl;
	a->free_units += b->units;
	a->free_blocks++;
}

static void remove_free(struct ferry__plasma_allocator *a, uint32_t i)
{
	struct block *b = &a->blocks[i];
	uint32_t fl, sl;

	class_of(b->units, &fl, &sl);
	if (b->prev_free != NONE)
		a->blocks[b->prev_free].next_free = b->next_free;
	else
		a->heads[fl][sl] = b->next_free;
	if (b->next_free != NONE)
		a->blocks[b->next_free].prev_free = b->prev_free;
	if (a->heads[fl][sl] == NONE) {
		a->sl_map[fl] &= ~(1u << sl);
		if (!a->sl_map[fl])
			a->fl_map &= ~(1ull << fl);
	}
	b->free = false;
	a->free_units -= b->units;
	a->free_blocks--;
}

/* A free block of at least @units, or NONE. */
static uint32_t find_free(const struct ferry__plasma_allocator *a, uint64_t units)
{
	uint32_t fl, sl, bits;
	uint64_t fl_bits;

	class_of(round_to_class(units), &fl, &sl);
	if (fl < FL_COUNT) {
		bits = a->sl_map[fl] & (~0u << sl);
		if (!bits) {
			fl_bits = fl + 1 < FL_COUNT ? a->fl_map & (~0ull << (fl + 1)) : 0;
			if (fl_bits) {
				fl = (uint32_t)__builtin_ctzll(fl_bits);
				bits = a->sl_map[fl];
			}
		}
		if (bits)
			return a->heads[fl][__builtin_ctz(bits)];
	}
	/* Near full: blocks of the request's own class may still be large enough. */
	class_of(units, &fl, &sl);
	for (uint32_t i = a->heads[fl][sl]; i != NONE; i = a->blocks[i].next_free)
		if (a->blocks[i].units >= units)
			return i;
	return NONE;
}

static int grow_pool(struct ferry__plasma_allocator *a)
{
	uint32_t n = a->pool_size ? a->pool_size * 2 : 64;
	struct block *blocks;

	if (a->pool_size >= NONE / 2)
		return -ENOMEM;
	blocks = ferry__realloc(a->blocks, (size_t)n * sizeof(*blocks));
	if (!blocks)
		return -ENOMEM;
	for (uint32_t i = a->pool_size; i < n; i++)
		blocks[i].next_free = i + 1 < n ? i + 1 : a->spare;
	a->spare = a->pool_size;
	a->blocks = blocks;
	a->pool_size = n;
	return 0;
}

static uint32_t take_spare(struct ferry__plasma_allocator *a)
{
	uint32_t i = a->spare;

	a->spare = a->blocks[i].next_free;
	return i;
}

static void put_spare(struct ferry__plasma_allocator *a, uint32_t i)
{
	a->blocks[i].free = false;
	a->blocks[i].next_free = a->spare;
	a->spare = i;
}

int ferry__plasma_allocator_create(uint64_t start, uint64_t size,
				   struct ferry__plasma_allocator **out)
{
	struct ferry__plasma_allocator *a;
	uint32_t i;

	if (!size || (start | size) % FERRY__PLASMA_ALLOC_UNIT) {
		FLOG_ERROR(comp, "allocator: range [%" PRIu64 ", +%" PRIu64 ") not %u-byte aligned",
			   start, size, FERRY__PLASMA_ALLOC_UNIT);
		return -EINVAL;
	}
	a = ferry__calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->spare = NONE;
	for (i = 0; i < FL_COUNT; i++)
		for (uint32_t s = 0; s < SL_COUNT; s++)
			a->heads[i][s] = NONE;
	ferry__hashmap_init(&a->used, sizeof(uint64_t), sizeof(uint32_t));
	if (grow_pool(a) < 0) {
		ferry__free(a);
		return -ENOMEM;
	}
	a->start = start;
	a->units = size >> UNIT_SHIFT;
	i = take_spare(a);
	a->blocks[i] = (struct block){start, a->units, NONE, NONE, NONE, NONE, false};
	a->first = i;
	insert_free(a, i);
	*out = a;
	return 0;
}

void ferry__plasma_allocator_destroy(struct ferry__plasma_allocator *a)
{
	if (!a)
		return;
	ferry__hashmap_fini(&a->used);
	ferry__free(a->blocks);
	ferry__free(a);
}

/* Cut block @i down to @units; the tail becomes a new free block. A spare must exist. */
static void split(struct ferry__plasma_allocator *a, uint32_t i, uint64_t units)
{
	uint32_t n = take_spare(a);
	struct block *b = &a->blocks[i];

	a->blocks[n] = (struct block){b->offset + (units << UNIT_SHIFT),
				      b->units - units,
				      i,
				      b->next_phys,
				      NONE,
				      NONE,
				      false};
	if (b->next_phys != NONE)
		a->blocks[b->next_phys].prev_phys = n;
	b->next_phys = n;
	b->units = units;
	insert_free(a, n);
}

int ferry__plasma_allocator_alloc(struct ferry__plasma_allocator *a, uint64_t size,
				  uint64_t *offset)
{
	uint64_t units;
	uint32_t i;
	void *slot;
	int r;

	if (size == 0)
		return -EINVAL;
	if (size > a->units << UNIT_SHIFT)
		return -E2BIG;
	units = (size + FERRY__PLASMA_ALLOC_UNIT - 1) >> UNIT_SHIFT;
	i = find_free(a, units);
	if (i == NONE)
		return -ENOSPC;
	/* Everything that can fail comes first, so that a failure changes nothing. */
	if (a->blocks[i].units > units && a->spare == NONE) {
		r = grow_pool(a);
		if (r < 0)
			return r;
	}
	r = ferry__hashmap_put(&a->used, &a->blocks[i].offset, &slot);
	if (r < 0)
		return r;
	*(uint32_t *)slot = i;
	remove_free(a, i);
	if (a->blocks[i].units > units)
		split(a, i, units);
	a->used_blocks++;
	*offset = a->blocks[i].offset;
	return 0;
}

/* Merge free block @hi into @lo, its lower neighbour; @hi's descriptor becomes spare. */
static void merge(struct ferry__plasma_allocator *a, uint32_t lo, uint32_t hi)
{
	struct block *l = &a->blocks[lo], *h = &a->blocks[hi];

	l->units += h->units;
	l->next_phys = h->next_phys;
	if (h->next_phys != NONE)
		a->blocks[h->next_phys].prev_phys = lo;
	put_spare(a, hi);
}

int ferry__plasma_allocator_free(struct ferry__plasma_allocator *a, uint64_t offset)
{
	uint32_t i, next, prev;

	if (ferry__hashmap_remove(&a->used, &offset, &i) < 0) {
		FLOG_ERROR(comp, "allocator: free of %" PRIu64 ", not an allocated block", offset);
		return -EINVAL;
	}
	a->used_blocks--;
	next = a->blocks[i].next_phys;
	if (next != NONE && a->blocks[next].free) {
		remove_free(a, next);
		merge(a, i, next);
	}
	prev = a->blocks[i].prev_phys;
	if (prev != NONE && a->blocks[prev].free) {
		remove_free(a, prev);
		merge(a, prev, i);
		i = prev;
	}
	insert_free(a, i);
	return 0;
}

int ferry__plasma_allocator_block_size(const struct ferry__plasma_allocator *a, uint64_t offset,
				       uint64_t *size)
{
	const uint32_t *i = ferry__hashmap_get(&a->used, &offset);

	if (!i)
		return -EINVAL;
	*size = a->blocks[*i].units << UNIT_SHIFT;
	return 0;
}

void ferry__plasma_allocator_stats(const struct ferry__plasma_allocator *a,
				   struct ferry__plasma_alloc_stats *out)
{
	uint64_t largest = 0;

	if (a->fl_map) {
		uint32_t fl = (uint32_t)log2_floor(a->fl_map);
		uint32_t sl = (uint32_t)log2_floor(a->sl_map[fl]);

		for (uint32_t i = a->heads[fl][sl]; i != NONE; i = a->blocks[i].next_free)
			largest = FERRY_MAX(largest, a->blocks[i].units);
	}
	*out = (struct ferry__plasma_alloc_stats){
		.capacity_bytes = a->units << UNIT_SHIFT,
		.allocated_bytes = (a->units - a->free_units) << UNIT_SHIFT,
		.allocated_blocks = a->used_blocks,
		.free_bytes = a->free_units << UNIT_SHIFT,
		.free_blocks = a->free_blocks,
		.largest_free_bytes = largest << UNIT_SHIFT,
	};
}

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			FLOG_ERROR(comp, "allocator check: " __VA_ARGS__); \
			return -EUCLEAN;                                   \
		}                                                          \
	} while (0)

/* Walk the blocks in address order: they tile the range and no two free ones touch. */
static int check_tiling(const struct ferry__plasma_allocator *a, uint64_t *free_units,
			uint64_t *free_blocks, uint64_t *used_blocks)
{
	uint32_t i = a->first, prev = NONE;
	uint64_t expect = a->start;

	for (; i != NONE; prev = i, i = a->blocks[i].next_phys) {
		const struct block *b = &a->blocks[i];
		const uint32_t *mapped = ferry__hashmap_get(&a->used, &b->offset);

		CHECK(b->offset == expect, "gap or overlap at %" PRIu64, expect);
		CHECK(b->prev_phys == prev, "bad lower link at %" PRIu64, b->offset);
		CHECK(b->free != (mapped && *mapped == i), "block %" PRIu64 " free/used mismatch",
		      b->offset);
		CHECK(!(b->free && prev != NONE && a->blocks[prev].free),
		      "free neighbours at %" PRIu64, b->offset);
		expect += b->units << UNIT_SHIFT;
		*free_units += b->free ? b->units : 0;
		*free_blocks += b->free;
		*used_blocks += !b->free;
	}
	CHECK(expect == a->start + (a->units << UNIT_SHIFT), "blocks end at %" PRIu64, expect);
	return 0;
}

static int check_lists(const struct ferry__plasma_allocator *a, uint64_t *listed)
{
	for (uint32_t fl = 0; fl < FL_COUNT; fl++) {
		CHECK(!!(a->fl_map & (1ull << fl)) == !!a->sl_map[fl], "fl bitmap at %u", fl);
		for (uint32_t sl = 0; sl < SL_COUNT; sl++) {
			uint32_t prev = NONE;

			CHECK(!!(a->sl_map[fl] & (1u << sl)) == (a->heads[fl][sl] != NONE),
			      "sl bitmap at %u/%u", fl, sl);
			for (uint32_t i = a->heads[fl][sl]; i != NONE; i = a->blocks[i].next_free) {
				uint32_t f, s;

				class_of(a->blocks[i].units, &f, &s);
				CHECK(a->blocks[i].free && f == fl && s == sl,
				      "block %" PRIu64 " in the wrong list", a->blocks[i].offset);
				CHECK(a->blocks[i].prev_free == prev, "bad free link");
				prev = i;
				(*listed)++;
			}
		}
	}
	return 0;
}

int ferry__plasma_allocator_check(const struct ferry__plasma_allocator *a)
{
	uint64_t free_units = 0, free_blocks = 0, used_blocks = 0, listed = 0;
	int r;

	r = check_tiling(a, &free_units, &free_blocks, &used_blocks);
	if (r < 0)
		return r;
	r = check_lists(a, &listed);
	if (r < 0)
		return r;
	CHECK(free_units == a->free_units, "free units %" PRIu64 " vs %" PRIu64, free_units,
	      a->free_units);
	CHECK(free_blocks == a->free_blocks && listed == free_blocks, "free block counts");
	CHECK(used_blocks == a->used_blocks && used_blocks == ferry__hashmap_count(&a->used),
	      "used block counts");
	return 0;
}
