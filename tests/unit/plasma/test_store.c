/* SPDX-License-Identifier: Apache-2.0 */
/* Store core, one process: memory accounting, deferred deletes, abort, size limits, LRU
 * eviction of secondaries, eviction on create, poison, chunks, client removal, OOM. */
#include "common/alloc.h"
#include "plasma_test.h"

#define MIB (1ull << 20)

static struct ferry_plasma_stats stats(struct ferry__plasma_store *s)
{
	struct ferry_plasma_stats st;

	ferry__plasma_store_stats(s, &st);
	return st;
}

FTEST(create_and_delete_give_memory_back)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry_object_id id = oid(1);
	struct ferry__plasma_object o;
	struct ferry_plasma_stats st;

	st = stats(s);
	ftest_assert_uint_eq(st.capacity_bytes, 4 * MIB);
	ftest_assert_uint_eq(st.allocated_bytes, 0);
	ftest_assert_uint_eq(st.clients, 1); /* the store's own slot */
	put_object(s, 0, 1, 1000, FERRY__PLASMA_F_PRIMARY, &o);
	st = stats(s);
	ftest_assert_uint_eq(st.allocated_bytes, 1024);
	ftest_assert_uint_eq(st.objects, 1);
	ftest_assert_uint_eq(st.free_blocks, 1);
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
	ftest_assert_errno(ferry__plasma_store_object_delete(s, &id), -ENOENT);
	st = stats(s);
	ftest_assert_uint_eq(st.allocated_bytes, 0);
	ftest_assert_uint_eq(st.objects, 0);
	ferry__plasma_store_destroy(s);
}

FTEST(delete_of_a_pinned_object_waits_for_the_last_release)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, FERRY__PLASMA_STORE_POISON);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(2);
	struct ferry__plasma_object g1, g2;
	uint32_t a, b;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &a));
	ftest_assert_ok(ferry__plasma_store_client_add(s, 101, &b));
	put_object(s, 0, 2, 4096, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_ok(ferry__plasma_index_get(ix, a, &id, &g1));
	ftest_assert_ok(ferry__plasma_index_get(ix, b, &id, &g2));
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 1);
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 1);
	ftest_assert_uint_eq(stats(s).deferred_deletes, 1);
	ftest_assert_errno(ferry__plasma_index_get(ix, a, &id, &g1), -ENOENT); /* no new pins */
	ftest_assert_int_eq(ferry__plasma_store_collect(s), 0);
	ftest_assert_true(object_intact(&g1, 2)); /* still readable by its pinners */
	ftest_assert_int_eq(ferry__plasma_index_release(ix, a, &g1), 0);
	ftest_assert_int_eq(ferry__plasma_store_collect(s), 0);
	ftest_assert_int_eq(ferry__plasma_index_release(ix, b, &g2), 1); /* last: tell the store */
	ftest_assert_int_eq(ferry__plasma_store_collect(s), 1);
	ftest_assert_uint_eq(g2.data[0], FERRY__PLASMA_POISON_BYTE);
	ftest_assert_uint_eq(stats(s).deferred_deletes, 0);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 0);
	ferry__plasma_store_destroy(s);
}

FTEST(delete_refuses_objects_being_created)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry_object_id id = oid(3);
	struct ferry__plasma_object o;

	ftest_assert_ok(ferry__plasma_store_object_create(s, 0, &id, 10, 0, 0, &o));
	ftest_assert_errno(ferry__plasma_store_object_delete(s, &id), -EBUSY);
	ferry__plasma_store_destroy(s);
}

FTEST(abort_rules)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(4);
	struct ferry__plasma_object o;
	uint32_t a, b;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &a));
	ftest_assert_ok(ferry__plasma_store_client_add(s, 101, &b));
	ftest_assert_ok(ferry__plasma_store_object_create(s, a, &id, 5000, 0, 0, &o));
	ftest_assert_errno(ferry__plasma_store_object_abort(s, b, &o), -EPERM);
	ftest_assert_ok(ferry__plasma_store_object_abort(s, a, &o));
	ftest_assert_errno(ferry__plasma_store_object_abort(s, a, &o), -ENOENT);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 0);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
	ftest_assert_ok(ferry__plasma_store_object_create(s, a, &id, 64, 0, 0, &o));
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, a, &o), 0);
	ftest_assert_errno(ferry__plasma_store_object_abort(s, a, &o), -ENOENT);
	ferry__plasma_store_destroy(s);
}

FTEST(size_limits)
{
	struct ferry__plasma_store *s = small_store(1 * MIB, 64, 0);
	struct ferry__plasma_object o;
	struct ferry_object_id id = oid(1);

	ftest_assert_errno(ferry__plasma_store_object_create(s, 0, &id, MIB + 1, 0, 0, &o), -E2BIG);
	ftest_assert_errno(ferry__plasma_store_object_create(s, 0, &id, UINT64_MAX, 10, 0, &o),
			   -E2BIG);
	ftest_assert_errno(ferry__plasma_store_object_create(s, 7, &id, 1, 0, 0, &o), -EINVAL);
	ftest_assert_ok(
		ferry__plasma_store_object_create(s, 0, &id, MIB, 0, FERRY__PLASMA_F_PRIMARY, &o));
	id = oid(2);
	/* Full of a primary: nothing to evict. */
	ftest_assert_errno(ferry__plasma_store_object_create(s, 0, &id, 1, 0, 0, &o), -ENOSPC);
	ferry__plasma_store_destroy(s);
}

FTEST(zero_sized_objects_work)
{
	struct ferry__plasma_store *s = small_store(1 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(1);
	struct ferry__plasma_object o, g;

	put_object(s, 0, 1, 0, FERRY__PLASMA_F_PRIMARY, &o);
	ftest_assert_ok(ferry__plasma_index_get(ix, 0, &id, &g));
	ftest_assert_uint_eq(g.data_size, 0);
	ftest_assert_ok(ferry__plasma_index_release(ix, 0, &g));
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 0);
	ferry__plasma_store_destroy(s);
}

/* Secondaries 0..3 in creation order; 0 is used afterwards, 2 is pinned, a primary sits in
 * between: eviction takes 1 first, then 3, then 0, and never 2 or the primary. */
FTEST(evict_takes_least_recently_used_unpinned_secondaries)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry__plasma_object g, pinned;
	struct ferry_object_id id;
	uint64_t freed;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	for (uint32_t n = 0; n < 4; n++) {
		put_object(s, 0, n, 4096, 0, NULL);
		if (n == 1)
			put_object(s, 0, 100, 4096, FERRY__PLASMA_F_PRIMARY, NULL);
	}
	id = oid(0);
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g));
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g));
	id = oid(2);
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &pinned));

	ftest_assert_int_eq(ferry__plasma_store_evict(s, 1, &freed), 1);
	ftest_assert_uint_eq(freed, 4096);
	id = oid(1);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
	ftest_assert_int_eq(ferry__plasma_store_evict(s, 1, NULL), 1);
	id = oid(3);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
	ftest_assert_int_eq(ferry__plasma_store_evict(s, 1 << 30, &freed), 1);
	id = oid(0);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
	ftest_assert_int_eq(ferry__plasma_store_evict(s, 1 << 30, &freed), 0);
	ftest_assert_uint_eq(freed, 0);
	id = oid(2);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 1);
	ftest_assert_true(object_intact(&pinned, 2));
	id = oid(100);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 1);
	ftest_assert_uint_eq(stats(s).evicted_objects, 3);
	ftest_assert_uint_eq(stats(s).evicted_bytes, 3 * 4096);
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &pinned));
	ftest_assert_int_eq(ferry__plasma_store_evict(s, 1, NULL), 1);
	ferry__plasma_store_destroy(s);
}

FTEST(create_evicts_secondaries_when_full)
{
	struct ferry__plasma_store *s = small_store(1 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id;

	for (uint32_t n = 0; n < 8; n++)
		put_object(s, 0, n, 128 << 10, 0, NULL);
	ftest_assert_uint_eq(stats(s).free_bytes, 0);
	put_object(s, 0, 8, 200 << 10, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_uint_eq(stats(s).evicted_objects, 2); /* two oldest make room for 200 KiB */
	for (uint32_t n = 0; n < 9; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), n >= 2);
	}
	ferry__plasma_store_destroy(s);
}

FTEST(evicted_memory_is_poisoned_and_reused)
{
	struct ferry__plasma_store *s = small_store(1 * MIB, 64, FERRY__PLASMA_STORE_POISON);
	struct ferry__plasma_object a, b;

	put_object(s, 0, 1, 1 << 20, 0, &a);
	ftest_assert_int_eq(ferry__plasma_store_evict(s, 1, NULL), 1);
	ftest_assert_uint_eq(a.data[0], FERRY__PLASMA_POISON_BYTE);
	ftest_assert_uint_eq(a.data[(1 << 20) - 1], FERRY__PLASMA_POISON_BYTE);
	put_object(s, 0, 2, 1 << 20, 0, &b);
	ftest_assert_uint_eq(b.offset, a.offset);
	ftest_assert_true(object_intact(&b, 2));
	ferry__plasma_store_destroy(s);
}

FTEST(chunk_grants_and_limits)
{
	struct ferry__plasma_store *s = small_store(1 * MIB, 64, 0);
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	ftest_assert_errno(ferry__plasma_store_chunk_grant(s, 0, 4096), -EINVAL);
	ftest_assert_errno(ferry__plasma_store_chunk_grant(s, 5, 4096), -EINVAL);
	ftest_assert_errno(ferry__plasma_store_chunk_grant(s, c, 0), -EINVAL);
	ftest_assert_errno(ferry__plasma_store_chunk_grant(s, c, 2 * MIB), -EINVAL);
	for (int i = 0; i < 20; i++) /* each grant retires an empty chunk: it is freed at once */
		ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 100));
	ftest_assert_uint_eq(stats(s).chunks, 1);
	ftest_assert_uint_eq(stats(s).chunk_bytes, 128);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 128);
	ftest_assert_errno(ferry__plasma_store_chunk_grant(s, c, MIB), -ENOSPC);
	ferry__plasma_store_destroy(s);
}

FTEST(chunk_counters_run_out)
{
	struct ferry__plasma_store *s = small_store(1 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	/* Keep one object alive in each chunk: 8 chunk counters, then no more. */
	for (uint32_t n = 0; n < 8; n++) {
		ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 1024));
		id = oid(n);
		ftest_assert_ok(ferry__plasma_index_create_local(ix, c, &id, 10, 0,
								 FERRY__PLASMA_F_PRIMARY, &o));
		ftest_assert_int_eq(ferry__plasma_index_seal(ix, c, &o), 0);
	}
	ftest_assert_errno(ferry__plasma_store_chunk_grant(s, c, 1024), -ENOSPC);
	id = oid(0);
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
	ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 1024));
	ferry__plasma_store_destroy(s);
}

/* In-process stand-in for a dead client (the real kill is in test_concurrency). */
FTEST(client_remove_gives_everything_back)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry__plasma_object g, creating, local;
	struct ferry_object_id id;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	put_object(s, 0, 1, 4096, FERRY__PLASMA_F_PRIMARY, NULL);
	put_object(s, 0, 2, 4096, FERRY__PLASMA_F_PRIMARY, NULL);
	put_object(s, c, 3, 4096, FERRY__PLASMA_F_PRIMARY, NULL); /* sealed: outlives c */
	id = oid(1);
	for (int i = 0; i < 3; i++)
		ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g));
	id = oid(2);
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g));
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 1);
	id = oid(4);
	ftest_assert_ok(ferry__plasma_store_object_create(s, c, &id, 4096, 0, 0, &creating));
	ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 8192));
	id = oid(5);
	ftest_assert_ok(ferry__plasma_index_create_local(ix, c, &id, 100, 0,
							 FERRY__PLASMA_F_PRIMARY, &local));

	ftest_assert_ok(ferry__plasma_store_client_remove(s, c));
	id = oid(1);
	ftest_assert_int_eq(ferry__plasma_index_find(ix, &id, &g), FERRY__PLASMA_SEALED);
	ftest_assert_false(ferry__plasma_index_pinned(ix, g.index));
	ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, g.index), 0);
	for (uint32_t n = 2; n <= 5; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), n == 3);
	}
	id = oid(3);
	ftest_assert_int_eq(ferry__plasma_index_find(ix, &id, &g), FERRY__PLASMA_SEALED);
	ftest_assert_uint_eq(g.owner, FERRY__PLASMA_STORE_SLOT);
	ftest_assert_uint_eq(stats(s).objects, 2);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 2 * 4096); /* block of 4 and chunk freed */
	ftest_assert_uint_eq(stats(s).chunks, 0);
	ftest_assert_uint_eq(stats(s).deferred_deletes, 0);
	ftest_assert_uint_eq(stats(s).clients, 1);
	ferry__plasma_store_destroy(s);
}

FTEST(store_create_survives_every_allocation_failure)
{
	struct ferry__plasma_store_opts o = {
		.memory_bytes = MIB, .max_objects = 64, .flags = FERRY__PLASMA_STORE_NO_PREFAULT};
	struct ferry__plasma_store *s;
	int n, r;

	for (n = 0;; n++) {
		s = NULL;
		ferry__alloc_fail_after(n);
		r = ferry__plasma_store_create(&o, &s);
		if (r == 0)
			break;
		ftest_assert_errno(r, -ENOMEM);
		ftest_assert_ptr_null(s);
	}
	ferry__alloc_fail_after(-1);
	ftest_log("store create makes %d allocations", n);
	ftest_assert_int_gt(n, 4);
	ferry__plasma_store_destroy(s);
}

/* Object creates whose allocator metadata cannot grow fail with -ENOMEM and change nothing. */
FTEST(object_create_under_metadata_oom)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 1000, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_plasma_stats before, after;
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	int failures = 0;

	for (uint32_t n = 0; n < 500; n++) {
		int r;

		id = oid(n);
		before = stats(s);
		ferry__alloc_fail_after(0);
		r = ferry__plasma_store_object_create(s, 0, &id, 100, 0, FERRY__PLASMA_F_PRIMARY,
						      &o);
		ferry__alloc_fail_after(-1);
		if (r == -ENOMEM) {
			failures++;
			after = stats(s);
			ftest_assert_mem_eq(&before, &after, sizeof(before));
			ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
			r = ferry__plasma_store_object_create(s, 0, &id, 100, 0,
							      FERRY__PLASMA_F_PRIMARY, &o);
		}
		ftest_assert_ok(r);
		ftest_assert_int_eq(ferry__plasma_index_seal(ix, 0, &o), 0);
	}
	ftest_assert_int_gt(failures, 3);
	ferry__plasma_store_destroy(s);
}
