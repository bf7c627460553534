/* SPDX-License-Identifier: Apache-2.0 */
/* Arena allocator: against a reference model (a map of used 64-byte units) under random churn,
 * exact -ENOSPC, coalescing, fragmentation figures, bad input, and metadata OOM. */
#include <stdlib.h>

#include "common/alloc.h"
#include "plasma/allocator.h"
#include "ftest.h"

#define UNIT FERRY__PLASMA_ALLOC_UNIT

/* The model: one byte per unit, 1 = allocated, and each live allocation's offset and size. */
struct model {
	uint8_t *used;	   /* per unit */
	uint64_t units;	   /* of the range */
	uint64_t *offsets; /* live allocations */
	uint64_t *sizes;   /* their sizes in units */
	size_t live;	   /* how many */
};

static void model_init(struct model *m, uint64_t units, size_t max_live)
{
	m->used = calloc(units, 1);
	m->units = units;
	m->offsets = calloc(max_live, sizeof(uint64_t));
	m->sizes = calloc(max_live, sizeof(uint64_t));
	m->live = 0;
	ftest_assert_true(m->used && m->offsets && m->sizes);
}

static void model_fini(struct model *m)
{
	free(m->used);
	free(m->offsets);
	free(m->sizes);
}

/* Free runs: count, largest, total units. */
static void model_runs(const struct model *m, uint64_t *runs, uint64_t *largest, uint64_t *free)
{
	uint64_t run = 0;

	*runs = *largest = *free = 0;
	for (uint64_t u = 0; u <= m->units; u++) {
		if (u < m->units && !m->used[u]) {
			run++;
			continue;
		}
		if (run) {
			(*runs)++;
			*free += run;
			*largest = run > *largest ? run : *largest;
		}
		run = 0;
	}
}

static void check_against_model(struct ferry__plasma_allocator *a, const struct model *m)
{
	struct ferry__plasma_alloc_stats st;
	uint64_t runs, largest, free;

	model_runs(m, &runs, &largest, &free);
	ferry__plasma_allocator_stats(a, &st);
	ftest_assert_uint_eq(st.free_bytes, free * UNIT);
	ftest_assert_uint_eq(st.free_blocks, runs);
	ftest_assert_uint_eq(st.largest_free_bytes, largest * UNIT);
	ftest_assert_uint_eq(st.allocated_blocks, m->live);
	ftest_assert_uint_eq(st.allocated_bytes + st.free_bytes, st.capacity_bytes);
	ftest_assert_ok(ferry__plasma_allocator_check(a));
}

/* Sizes spread over five orders of magnitude, not always unit multiples. */
static uint64_t random_size(void)
{
	int bits = rand() % 17;

	return 1 + (uint64_t)rand() % (1ull << bits) * (rand() % 2 ? 1 : 3);
}

static void model_alloc(struct ferry__plasma_allocator *a, struct model *m, uint64_t size)
{
	uint64_t units = (size + UNIT - 1) / UNIT, off, runs, largest, free;
	int r = ferry__plasma_allocator_alloc(a, size, &off);

	if (r == -ENOSPC) {
		/* Exact: fails only when no free run is long enough. */
		model_runs(m, &runs, &largest, &free);
		ftest_assert_uint_lt(largest, units);
		return;
	}
	ftest_assert_ok(r);
	ftest_assert_uint_eq(off % UNIT, 0);
	ftest_assert_uint_le(off / UNIT + units, m->units);
	for (uint64_t u = off / UNIT; u < off / UNIT + units; u++) {
		ftest_assert_uint_eq(m->used[u], 0); /* no overlap with a live block */
		m->used[u] = 1;
	}
	m->offsets[m->live] = off;
	m->sizes[m->live++] = units;
}

static void model_free(struct ferry__plasma_allocator *a, struct model *m, size_t k)
{
	uint64_t off = m->offsets[k], size;

	ftest_assert_ok(ferry__plasma_allocator_block_size(a, off, &size));
	ftest_assert_uint_eq(size, m->sizes[k] * UNIT);
	ftest_assert_ok(ferry__plasma_allocator_free(a, off));
	for (uint64_t u = off / UNIT; u < off / UNIT + m->sizes[k]; u++)
		m->used[u] = 0;
	m->offsets[k] = m->offsets[--m->live];
	m->sizes[k] = m->sizes[m->live];
}

FTEST(random_churn_matches_model)
{
	enum { STEPS = 40000, MAX_LIVE = 2048 };
	const uint64_t capacity = 4ull << 20;
	struct ferry__plasma_allocator *a;
	struct model m;

	srand(42);
	model_init(&m, capacity / UNIT, MAX_LIVE);
	ftest_assert_ok(ferry__plasma_allocator_create(0, capacity, &a));
	for (int step = 0; step < STEPS; step++) {
		/* Phases that fill up and drain, so the store is often near full. */
		int fill = (step / 5000) % 2 ? 40 : 70;

		if (m.live < MAX_LIVE && (m.live == 0 || rand() % 100 < fill))
			model_alloc(a, &m, random_size());
		else
			model_free(a, &m, (size_t)rand() % m.live);
		if (step % 1000 == 0)
			check_against_model(a, &m);
	}
	while (m.live)
		model_free(a, &m, 0);
	check_against_model(a, &m);
	ftest_log("coalesced back to one free block of %llu bytes", (unsigned long long)capacity);
	ferry__plasma_allocator_destroy(a);
	model_fini(&m);
}

FTEST(blocks_are_aligned_distinct_and_coalesce)
{
	struct ferry__plasma_allocator *a;
	struct ferry__plasma_alloc_stats st;
	uint64_t off[3];

	ftest_assert_ok(ferry__plasma_allocator_create(4096, 1 << 20, &a));
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, 1, &off[0]));
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, 65, &off[1]));
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, 64, &off[2]));
	ftest_assert_uint_eq(off[0], 4096); /* the range starts at 4096 */
	ftest_assert_uint_eq(off[1], 4096 + 64);
	ftest_assert_uint_eq(off[2], 4096 + 192);
	ftest_assert_ok(ferry__plasma_allocator_free(a, off[1]));
	ferry__plasma_allocator_stats(a, &st);
	ftest_assert_uint_eq(st.free_blocks, 2);
	ftest_assert_uint_eq(st.allocated_bytes, 128);
	ftest_assert_ok(ferry__plasma_allocator_free(a, off[0]));
	ftest_assert_ok(ferry__plasma_allocator_free(a, off[2]));
	ferry__plasma_allocator_stats(a, &st);
	ftest_assert_uint_eq(st.free_blocks, 1);
	ftest_assert_uint_eq(st.largest_free_bytes, 1 << 20);
	ftest_assert_ok(ferry__plasma_allocator_check(a));
	ferry__plasma_allocator_destroy(a);
}

/* Fill with single units, free every other one: lots of free bytes, no room for two units. */
FTEST(fragmentation_figures_and_exact_enospc)
{
	const uint64_t units = 1024;
	struct ferry__plasma_allocator *a;
	struct ferry__plasma_alloc_stats st;
	uint64_t off;

	ftest_assert_ok(ferry__plasma_allocator_create(0, units * UNIT, &a));
	for (uint64_t i = 0; i < units; i++) {
		ftest_assert_ok(ferry__plasma_allocator_alloc(a, UNIT, &off));
		ftest_assert_uint_eq(off, i * UNIT);
	}
	ftest_assert_errno(ferry__plasma_allocator_alloc(a, 1, &off), -ENOSPC);
	for (uint64_t i = 0; i < units; i += 2)
		ftest_assert_ok(ferry__plasma_allocator_free(a, i * UNIT));
	ferry__plasma_allocator_stats(a, &st);
	ftest_assert_uint_eq(st.free_bytes, units / 2 * UNIT);
	ftest_assert_uint_eq(st.free_blocks, units / 2);
	ftest_assert_uint_eq(st.largest_free_bytes, UNIT);
	ftest_assert_errno(ferry__plasma_allocator_alloc(a, UNIT + 1, &off), -ENOSPC);
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, UNIT, &off));
	ftest_assert_ok(ferry__plasma_allocator_check(a));
	ferry__plasma_allocator_destroy(a);
}

/* A block of 17 units lives in the class [16, 18); a request for 17 rounds up past it, and
 * the fallback scan must still find it. */
FTEST(near_full_search_finds_a_fitting_block_in_its_own_class)
{
	struct ferry__plasma_allocator *a;
	uint64_t big, off;

	ftest_assert_ok(ferry__plasma_allocator_create(0, 17 * UNIT, &a));
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, 17 * UNIT, &big));
	ftest_assert_ok(ferry__plasma_allocator_free(a, big));
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, 17 * UNIT, &off));
	ftest_assert_uint_eq(off, 0);
	ferry__plasma_allocator_destroy(a);
}

FTEST(bad_input)
{
	struct ferry__plasma_allocator *a = NULL;
	uint64_t off, size;

	ftest_assert_errno(ferry__plasma_allocator_create(0, 100, &a), -EINVAL);
	ftest_assert_errno(ferry__plasma_allocator_create(32, 4096, &a), -EINVAL);
	ftest_assert_errno(ferry__plasma_allocator_create(0, 0, &a), -EINVAL);
	ftest_assert_ptr_null(a);
	ftest_assert_ok(ferry__plasma_allocator_create(0, 4096, &a));
	ftest_assert_errno(ferry__plasma_allocator_alloc(a, 0, &off), -EINVAL);
	ftest_assert_errno(ferry__plasma_allocator_alloc(a, 4097, &off), -E2BIG);
	ftest_assert_errno(ferry__plasma_allocator_free(a, 0), -EINVAL);
	ftest_assert_ok(ferry__plasma_allocator_alloc(a, 100, &off));
	ftest_assert_errno(ferry__plasma_allocator_free(a, off + 64), -EINVAL);
	ftest_assert_errno(ferry__plasma_allocator_block_size(a, off + 64, &size), -EINVAL);
	ftest_assert_ok(ferry__plasma_allocator_free(a, off));
	ftest_assert_errno(ferry__plasma_allocator_free(a, off), -EINVAL); /* double free */
	ftest_assert_ok(ferry__plasma_allocator_check(a));
	ferry__plasma_allocator_destroy(a);
	ferry__plasma_allocator_destroy(NULL);
}

FTEST(create_survives_every_allocation_failure)
{
	struct ferry__plasma_allocator *a;
	int n, r;

	for (n = 0;; n++) {
		a = NULL;
		ferry__alloc_fail_after(n);
		r = ferry__plasma_allocator_create(0, 1 << 20, &a);
		if (r == 0)
			break;
		ftest_assert_errno(r, -ENOMEM);
		ftest_assert_ptr_null(a);
	}
	ferry__alloc_fail_after(-1);
	ftest_assert_int_gt(n, 0);
	ferry__plasma_allocator_destroy(a);
}

/* Fail the metadata allocation at every point of a long run: a failed alloc returns -ENOMEM
 * and leaves the allocator exactly as it was, and the same request then succeeds. */
FTEST(metadata_oom_leaves_allocator_unchanged)
{
	struct ferry__plasma_allocator *a;
	struct ferry__plasma_alloc_stats before, after;
	uint64_t offs[600], off;
	int failures = 0;

	ftest_assert_ok(ferry__plasma_allocator_create(0, 8 << 20, &a));
	for (int i = 0; i < 600; i++) {
		uint64_t size = 64 + (uint64_t)(i % 7) * 200;
		int r;

		ferry__plasma_allocator_stats(a, &before);
		ferry__alloc_fail_after(0);
		r = ferry__plasma_allocator_alloc(a, size, &off);
		ferry__alloc_fail_after(-1);
		if (r == -ENOMEM) {
			failures++;
			ferry__plasma_allocator_stats(a, &after);
			ftest_assert_mem_eq(&before, &after, sizeof(before));
			ftest_assert_ok(ferry__plasma_allocator_check(a));
			r = ferry__plasma_allocator_alloc(a, size, &off);
		}
		ftest_assert_ok(r);
		offs[i] = off;
	}
	/* The pool and the map grow by doubling: a handful of growth points in 600 allocations. */
	ftest_log("%d allocations needed metadata growth", failures);
	ftest_assert_int_gt(failures, 3);
	for (int i = 0; i < 600; i++)
		ftest_assert_ok(ferry__plasma_allocator_free(a, offs[i]));
	ferry__plasma_allocator_stats(a, &after);
	ftest_assert_uint_eq(after.free_blocks, 1);
	ftest_assert_ok(ferry__plasma_allocator_check(a));
	ferry__plasma_allocator_destroy(a);
}
