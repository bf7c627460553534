/* SPDX-License-Identifier: Apache-2.0 */
/* Object index, one process: insert, lookup, pin/release counts, seal rules, duplicates,
 * create in a client chunk, full tables, tombstone churn, region validation. */
#include <stdlib.h>

#include "common/alloc.h"
#include "plasma_test.h"

#define MIB (1ull << 20)

FTEST(get_and_release_count_pins_per_client)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry__plasma_object o, g1, g2, g3;
	struct ferry_object_id id = oid(1);
	uint32_t a, b;
	struct view v;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &a));
	ftest_assert_ok(ferry__plasma_store_client_add(s, 101, &b));
	put_object(s, a, 1, 1000, FERRY__PLASMA_F_PRIMARY, &o);
	view_attach(s, &v); /* the reader maps the regions at other addresses */
	ftest_assert_ok(ferry__plasma_index_get(&v.ix, b, &id, &g1));
	ftest_assert_ok(ferry__plasma_index_get(&v.ix, b, &id, &g2));
	ftest_assert_ok(ferry__plasma_index_get(ix, a, &id, &g3));
	ftest_assert_true(g1.data != o.data);
	ftest_assert_uint_eq(g1.offset, o.offset);
	ftest_assert_uint_eq(g1.data_size, 1000);
	ftest_assert_true(object_intact(&g1, 1));
	ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, o.index), 3);
	ftest_assert_true(ferry__plasma_index_pinned(ix, o.index));
	ftest_assert_int_eq(ferry__plasma_index_release(&v.ix, b, &g1), 0);
	ftest_assert_int_eq(ferry__plasma_index_release(ix, a, &g3), 0);
	ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, o.index), 1);
	ftest_assert_true(ferry__plasma_index_pinned(ix, o.index));
	ftest_assert_int_eq(ferry__plasma_index_release(&v.ix, b, &g2), 0);
	ftest_assert_false(ferry__plasma_index_pinned(ix, o.index));
	ftest_assert_errno(ferry__plasma_index_release(&v.ix, b, &g2), -ENOENT);
	view_detach(&v);
	ferry__plasma_store_destroy(s);
}

FTEST(get_reports_each_state)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(7), missing = oid(8);
	struct ferry__plasma_object o, g;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	ftest_assert_errno(ferry__plasma_index_get(ix, c, &missing, &g), -ENOENT);
	ftest_assert_ok(ferry__plasma_store_object_create(s, c, &id, 10, 5, 0, &o));
	ftest_assert_int_eq(o.state, FERRY__PLASMA_CREATING);
	ftest_assert_errno(ferry__plasma_index_get(ix, c, &id, &g), -EINPROGRESS);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, c, &o), 0);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 1);
	ftest_assert_int_eq(ferry__plasma_index_contains(ix, &missing), 0);
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g));
	ftest_assert_uint_eq(g.metadata_size, 5);
	ftest_assert_int_eq(g.state, FERRY__PLASMA_SEALED);
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g));
	ftest_assert_errno(ferry__plasma_index_get(ix, 99, &id, &g), -EINVAL);
	ferry__plasma_store_destroy(s);
}

FTEST(seal_rules)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(3);
	struct ferry__plasma_object o, stale;
	uint32_t a, b;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &a));
	ftest_assert_ok(ferry__plasma_store_client_add(s, 101, &b));
	ftest_assert_ok(ferry__plasma_store_object_create(s, a, &id, 64, 0, 0, &o));
	ftest_assert_errno(ferry__plasma_index_seal(ix, b, &o), -EPERM);
	stale = o;
	stale.gen++;
	ftest_assert_errno(ferry__plasma_index_seal(ix, a, &stale), -ENOENT);
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, a, &o), 0);
	ftest_assert_errno(ferry__plasma_index_seal(ix, a, &o), -EALREADY);
	/* A waiting store asks sealers to notify it. */
	atomic_store(&ix->hdr->seal_waiters, 1);
	id = oid(4);
	ftest_assert_ok(ferry__plasma_store_object_create(s, a, &id, 64, 0, 0, &o));
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, a, &o), 1);
	ferry__plasma_store_destroy(s);
}

FTEST(duplicates_are_refused_in_every_state)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(5);
	struct ferry__plasma_object o, g;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 64 << 10));
	ftest_assert_ok(ferry__plasma_store_object_create(s, c, &id, 64, 0, 0, &o));
	ftest_assert_errno(ferry__plasma_store_object_create(s, c, &id, 64, 0, 0, &g), -EEXIST);
	ftest_assert_errno(
		ferry__plasma_index_create_local(ix, c, &id, 64, 0, FERRY__PLASMA_F_PRIMARY, &g),
		-EEXIST);
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, c, &o), 0);
	ftest_assert_errno(ferry__plasma_store_object_create(s, c, &id, 64, 0, 0, &g), -EEXIST);
	/* Deleted while pinned: still there until the last release. */
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g));
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 1);
	ftest_assert_errno(
		ferry__plasma_index_create_local(ix, c, &id, 64, 0, FERRY__PLASMA_F_PRIMARY, &o),
		-EEXIST);
	ftest_assert_int_eq(ferry__plasma_index_release(ix, c, &g), 1);
	ftest_assert_int_eq(ferry__plasma_store_collect(s), 1);
	ftest_assert_ok(
		ferry__plasma_index_create_local(ix, c, &id, 64, 0, FERRY__PLASMA_F_PRIMARY, &o));
	ferry__plasma_store_destroy(s);
}

FTEST(create_local_in_chunk)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 256, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry__plasma_object o[20], g;
	struct ferry_plasma_stats st;
	struct ferry_object_id id;
	uint32_t c, reader;
	struct view v;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	ftest_assert_ok(ferry__plasma_store_client_add(s, 101, &reader));
	view_attach(s, &v);
	id = oid(0);
	ftest_assert_errno(ferry__plasma_index_create_local(&v.ix, c, &id, 10, 0,
							    FERRY__PLASMA_F_PRIMARY, &o[0]),
			   -ENOBUFS);
	ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 2048));
	for (uint32_t n = 0; n < 20; n++) {
		int r;

		id = oid(n);
		r = ferry__plasma_index_create_local(&v.ix, c, &id, 100, 28,
						     FERRY__PLASMA_F_PRIMARY, &o[n]);
		if (n == 16) { /* 16 x 128 bytes fill 2 KiB */
			ftest_assert_errno(r, -ENOBUFS);
			ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 2048));
			ftest_assert_ok(ferry__plasma_index_create_local(
				&v.ix, c, &id, 100, 28, FERRY__PLASMA_F_PRIMARY, &o[n]));
		} else {
			ftest_assert_ok(r);
		}
		ftest_assert_uint_eq(o[n].offset % 64, 0);
		ftest_assert_true(o[n].flags & FERRY__PLASMA_F_PRIMARY);
		fill_object(&o[n], n);
		ftest_assert_int_eq(ferry__plasma_index_seal(&v.ix, c, &o[n]), 0);
	}
	ferry__plasma_store_stats(s, &st);
	ftest_assert_uint_eq(st.chunks, 2); /* the first one is retired but holds objects */
	ftest_assert_uint_eq(st.objects, 20);
	for (uint32_t n = 0; n < 20; n++) {
		id = oid(n);
		ftest_assert_ok(ferry__plasma_index_get(ix, reader, &id, &g));
		ftest_assert_true(object_intact(&g, n));
		ftest_assert_ok(ferry__plasma_index_release(ix, reader, &g));
	}
	for (uint32_t n = 0; n < 16; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
	}
	ferry__plasma_store_stats(s, &st);
	ftest_assert_uint_eq(st.chunks, 1); /* drained and retired: freed */
	ftest_assert_uint_eq(st.allocated_bytes, 2048);
	view_detach(&v);
	ferry__plasma_store_destroy(s);
}

FTEST(create_local_rejects_oversize)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(1);
	struct ferry__plasma_object o;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	ftest_assert_ok(ferry__plasma_store_chunk_grant(s, c, 4096));
	ftest_assert_errno(ferry__plasma_index_create_local(ix, c, &id, UINT64_MAX, 1,
							    FERRY__PLASMA_F_PRIMARY, &o),
			   -E2BIG);
	ftest_assert_errno(ferry__plasma_index_create_local(ix, c, &id, 8 * MIB, 0,
							    FERRY__PLASMA_F_PRIMARY, &o),
			   -E2BIG);
	ftest_assert_errno(
		ferry__plasma_index_create_local(ix, c, &id, 4097, 0, FERRY__PLASMA_F_PRIMARY, &o),
		-ENOBUFS);
	ftest_assert_errno(
		ferry__plasma_index_create_local(ix, 42, &id, 1, 0, FERRY__PLASMA_F_PRIMARY, &o),
		-EINVAL);
	ferry__plasma_store_destroy(s);
}

FTEST(pin_records_full_gives_enospc)
{
	struct ferry__plasma_store_opts opts = {.memory_bytes = 4 * MIB,
						.max_objects = 64,
						.max_clients = 4,
						.pin_records = 4,
						.flags = FERRY__PLASMA_STORE_NO_PREFAULT};
	struct ferry__plasma_object g[4];
	struct ferry__plasma_store *s;
	struct ferry__plasma_index *ix;
	struct ferry_object_id id;
	uint32_t c;

	ftest_assert_ok(ferry__plasma_store_create(&opts, &s));
	ix = ferry__plasma_store_index(s);
	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &c));
	for (uint32_t n = 0; n < 4; n++)
		put_object(s, FERRY__PLASMA_STORE_SLOT, n, 64, FERRY__PLASMA_F_PRIMARY, NULL);
	for (uint32_t n = 0; n < 3; n++) {
		id = oid(n);
		ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g[n]));
	}
	id = oid(3);
	ftest_assert_errno(ferry__plasma_index_get(ix, c, &id, &g[3]), -ENOSPC);
	id = oid(0);
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g[3])); /* a repeat pin needs none */
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g[3]));
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g[1]));
	id = oid(3);
	ftest_assert_ok(ferry__plasma_index_get(ix, c, &id, &g[3]));
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g[0]));
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g[2]));
	ftest_assert_ok(ferry__plasma_index_release(ix, c, &g[3]));
	ftest_assert_uint_eq(atomic_load(&ferry__plasma_index_client(ix, c)->records_used), 0);
	ferry__plasma_store_destroy(s);
}

FTEST(table_full_then_tombstone_churn)
{
	enum { MAX = 100 };
	struct ferry__plasma_store *s = small_store(4 * MIB, MAX, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_plasma_stats st;
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	uint32_t live[MAX], next = 0;

	for (; next < MAX; next++) {
		put_object(s, FERRY__PLASMA_STORE_SLOT, next, 64, FERRY__PLASMA_F_PRIMARY, NULL);
		live[next] = next;
	}
	id = oid(next);
	ftest_assert_errno(ferry__plasma_store_object_create(s, 0, &id, 64, 0, 0, &o), -ENOSPC);
	/* Delete a random object, create a new one, many times over: tombstones must never fill
	 * the table, and every live object stays reachable. */
	srand(7);
	for (uint32_t round = 0; round < 50 * MAX; round++, next++) {
		uint32_t k = (uint32_t)rand() % MAX;

		id = oid(live[k]);
		ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
		ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 0);
		put_object(s, FERRY__PLASMA_STORE_SLOT, next, 64, FERRY__PLASMA_F_PRIMARY, NULL);
		live[k] = next;
	}
	for (uint32_t k = 0; k < MAX; k++) {
		id = oid(live[k]);
		ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 1);
	}
	ferry__plasma_store_stats(s, &st);
	ftest_log("%llu of %llu slots used after churn", (unsigned long long)st.table_slots_used,
		  (unsigned long long)st.table_slots);
	ftest_assert_uint_eq(st.objects, MAX);
	ftest_assert_uint_le(st.table_slots_used, st.table_slots / 8 * 7);
	ferry__plasma_store_destroy(s);
}

/* Random creates and deletes over a wide ID space: contains() agrees with a model. */
FTEST(lookups_survive_random_deletes)
{
	const uint32_t max = 1000;
	struct ferry__plasma_store *s = small_store(8 * MIB, max, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	static uint8_t live[20000];
	struct ferry_object_id id;
	uint32_t count = 0;

	srand(11);
	for (int step = 0; step < 20000; step++) {
		uint32_t n = (uint32_t)rand() % 20000;

		id = oid(n);
		if (live[n]) {
			ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
			live[n] = 0;
			count--;
		} else if (count < max) {
			put_object(s, FERRY__PLASMA_STORE_SLOT, n, 64, 0, NULL);
			live[n] = 1;
			count++;
		}
		if (step % 2000 == 0)
			for (uint32_t k = 0; k < 20000; k++) {
				id = oid(k);
				ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), live[k]);
			}
	}
	ferry__plasma_store_destroy(s);
}

FTEST(open_rejects_foreign_regions)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	const struct ferry__plasma_arena *c = ferry__plasma_store_control(s);
	const struct ferry__plasma_arena *a = ferry__plasma_store_arena(s);
	struct ferry__plasma_index ix;
	struct ferry__plasma_header *h = (struct ferry__plasma_header *)(void *)c->base;
	uint8_t *junk = calloc(1, 8192);

	ftest_assert_errno(ferry__plasma_index_open(&ix, junk, 8192, a->base, a->size), -EPROTO);
	ftest_assert_errno(ferry__plasma_index_open(&ix, c->base, 4096, a->base, a->size), -EPROTO);
	ftest_assert_errno(ferry__plasma_index_open(&ix, c->base, c->size, a->base, 4096), -EPROTO);
	h->version++;
	ftest_assert_errno(ferry__plasma_index_open(&ix, c->base, c->size, a->base, a->size),
			   -EPROTO);
	h->version--;
	h->table_slots *= 2;
	ftest_assert_errno(ferry__plasma_index_open(&ix, c->base, c->size, a->base, a->size),
			   -EPROTO);
	h->table_slots /= 2;
	ftest_assert_ok(ferry__plasma_index_open(&ix, c->base, c->size, a->base, a->size));
	free(junk);
	ferry__plasma_store_destroy(s);
}

FTEST(params_out_of_range)
{
	struct ferry__plasma_index_params p = {1 << 20, 100, 8, 64, 8};
	uint64_t size;

	ftest_assert_ok(ferry__plasma_index_region_size(&p, &size));
	p.max_clients = FERRY__PLASMA_MAX_CLIENTS + 1;
	ftest_assert_errno(ferry__plasma_index_region_size(&p, &size), -EINVAL);
	p.max_clients = 8;
	p.max_objects = 0;
	ftest_assert_errno(ferry__plasma_index_region_size(&p, &size), -EINVAL);
	p.max_objects = 100;
	p.arena_size = 0;
	ftest_assert_errno(ferry__plasma_index_region_size(&p, &size), -EINVAL);
}

FTEST(client_slots_run_out_and_come_back)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	uint32_t slots[7], extra;

	for (int i = 0; i < 7; i++) {
		ftest_assert_ok(ferry__plasma_store_client_add(s, 100 + i, &slots[i]));
		ftest_assert_uint_ne(slots[i], FERRY__PLASMA_STORE_SLOT);
	}
	ftest_assert_errno(ferry__plasma_store_client_add(s, 200, &extra), -EUSERS);
	ftest_assert_ok(ferry__plasma_store_client_remove(s, slots[3]));
	ftest_assert_ok(ferry__plasma_store_client_add(s, 200, &extra));
	ftest_assert_uint_eq(extra, slots[3]);
	ftest_assert_errno(ferry__plasma_store_client_remove(s, FERRY__PLASMA_STORE_SLOT), -EINVAL);
	ftest_assert_errno(ferry__plasma_store_client_remove(s, 8), -EINVAL);
	ferry__plasma_store_destroy(s);
}

/*
 * Placement ids: one per placement, the reader's copy of the entry says the creator's, and two
 * stores (a node's store started again) do not hand out the same ones: each starts at random.
 */
FTEST(placement_ids_are_unique_and_start_at_random)
{
	struct ferry__plasma_store *s1 = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_store *s2 = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix1 = ferry__plasma_store_index(s1);
	struct ferry__plasma_object a, b, c, g;
	struct ferry_object_id id = oid(2);
	uint64_t aa, ab, ac;
	struct view v;

	put_object(s1, 0, 1, 100, FERRY__PLASMA_F_PRIMARY, &a);
	put_object(s1, 0, 2, 100, FERRY__PLASMA_F_PRIMARY, &b);
	put_object(s2, 0, 1, 100, FERRY__PLASMA_F_PRIMARY, &c);
	aa = ferry__plasma_index_alloc(ix1, a.index);
	ab = ferry__plasma_index_alloc(ix1, b.index);
	ac = ferry__plasma_index_alloc(ferry__plasma_store_index(s2), c.index);
	ftest_assert_true(aa != 0 && ab != 0 && ac != 0);
	ftest_assert_true(aa != ab);
	ftest_assert_true(aa != ac); /* 2^-63 to fail by chance */
	view_attach(s1, &v);
	ftest_assert_ok(ferry__plasma_index_get(&v.ix, 0, &id, &g));
	ftest_assert_uint_eq(ferry__plasma_index_alloc(&v.ix, g.index), ab);
	ftest_assert_int_eq(ferry__plasma_index_release(&v.ix, 0, &g), 0);
	view_detach(&v);
	ferry__plasma_store_destroy(s2);
	ferry__plasma_store_destroy(s1);
}
