/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Object owners in the store: the index entry keeps the worker or driver a creator named
 * (chunk creates with no round trip and creates through the store alike), the listing reports
 * it, a client's connect-time owner is its default, a per-call owner wins, and a nil owner (or
 * none) means the node owns the object.
 */
#include "client_test.h"
#include "plasma/client_arena.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static struct ferry_worker_id wid(uint8_t b)
{
	struct ferry_worker_id w;

	memset(w.bytes, b, sizeof(w.bytes));
	w.bytes[0] = 0x77;
	return w;
}

static bool same_owner(const struct ferry_worker_id *a, const struct ferry_worker_id *b)
{
	return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

FTEST(index_entry_keeps_the_owner_of_each_create)
{
	struct ferry__plasma_store *s = small_store(4 * MIB, 64, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_worker_id w1 = wid(1), w2 = wid(2), nil = {0}, got;
	struct ferry_object_id a = oid(1), b = oid(2), c = oid(3);
	struct ferry__plasma_object oa, ob, oc, g;
	uint32_t slot;
	struct view v;

	ftest_assert_ok(ferry__plasma_store_client_add(s, 100, &slot));
	ftest_assert_ok(ferry__plasma_store_chunk_grant(s, slot, 64 * KIB));
	ftest_assert_ok(ferry__plasma_index_create_owned(ix, slot, &a, 100, 0,
							 FERRY__PLASMA_F_PRIMARY, &w1, &oa));
	ftest_assert_ok(ferry__plasma_store_object_create_owned(s, slot, &b, 200 * KIB, 0,
								FERRY__PLASMA_F_PRIMARY, &w2, &ob));
	ftest_assert_ok(ferry__plasma_index_create_local(ix, slot, &c, 10, 0,
							 FERRY__PLASMA_F_PRIMARY, &oc));
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, slot, &oa), 0);
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, slot, &ob), 0);
	ftest_assert_int_eq(ferry__plasma_index_seal(ix, slot, &oc), 0);
	/* Another process's mapping reads the same owners. */
	view_attach(s, &v);
	ftest_assert_ok(ferry__plasma_index_get(&v.ix, slot, &a, &g));
	got = ferry__plasma_index_owner_id(&v.ix, g.index);
	ftest_assert_true(same_owner(&got, &w1));
	ftest_assert_int_eq(ferry__plasma_index_release(&v.ix, slot, &g), 0);
	got = ferry__plasma_index_owner_id(&v.ix, ob.index);
	ftest_assert_true(same_owner(&got, &w2));
	got = ferry__plasma_index_owner_id(&v.ix, oc.index);
	ftest_assert_true(same_owner(&got, &nil));
	view_detach(&v);
	/* A slot reused by another object takes that object's owner, not the last one's. */
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &a), 0);
	ftest_assert_ok(ferry__plasma_store_object_create_owned(
		s, slot, &a, 10, 0, FERRY__PLASMA_F_PRIMARY, NULL, &oa));
	got = ferry__plasma_index_owner_id(ix, oa.index);
	ftest_assert_true(same_owner(&got, &nil));
	ferry__plasma_store_destroy(s);
}

/* The owner the store lists for object @n, which must be listed. */
static struct ferry_worker_id listed_owner(struct ferry_plasma_client *c, uint32_t n)
{
	struct ferry_object_id id = oid(n);
	struct ferry_plasma_object_info *objs;
	struct ferry_worker_id w = {0};
	bool found = false;
	size_t count;

	ftest_assert_ok(ferry_plasma_client_list(c, false, &objs, &count));
	for (size_t k = 0; k < count; k++) {
		if (ferry_object_id_cmp(&objs[k].id, &id) == 0) {
			w = objs[k].owner;
			found = true;
		}
	}
	ferry_plasma_list_free(objs);
	ftest_assert_true(found);
	return w;
}

static void put_owned(struct ferry_plasma_client *c, uint32_t n, uint64_t size,
		      const struct ferry_worker_id *owner)
{
	struct ferry_object_id id = oid(n);
	void *buf;

	ftest_assert_ok(
		ferry_plasma_client_create_owned(c, &id, size, &n, sizeof(n), 0, owner, &buf));
	fill_pattern(buf, size, n);
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
}

FTEST(list_reports_the_owner_of_small_and_large_puts)
{
	struct ferry__plasma_server_opts o = {.memory_bytes = 64 * MIB, .max_objects = 4096};
	struct ferry_worker_id w1 = wid(1), w2 = wid(2), w3 = wid(3), nil = {0}, got;
	struct ferry_object_id id4 = oid(4);
	struct ferry_plasma_client *c;
	struct ferry_plasma_view v;
	struct test_store t;

	store_spawn(&t, o);
	c = client_connect(&t);	       /* connected with no owner */
	put_owned(c, 1, 100, &w1);     /* in the chunk: the index entry carries it */
	put_owned(c, 2, 3 * MIB, &w2); /* through the store: PlasmaCreate carries it */
	put_owned(c, 3, 100, NULL);    /* the client's own: none, so the node's */
	ftest_assert_ok(ferry_plasma_client_put_owned(c, &id4, "x", 1, NULL, 0, 0, &w3));
	got = listed_owner(c, 1);
	ftest_assert_true(same_owner(&got, &w1));
	got = listed_owner(c, 2);
	ftest_assert_true(same_owner(&got, &w2));
	got = listed_owner(c, 3);
	ftest_assert_true(same_owner(&got, &nil));
	got = listed_owner(c, 4);
	ftest_assert_true(same_owner(&got, &w3));
	/* A view tells its object's owner with no round trip (the object manager's publish). */
	ftest_assert_ok(ferry_plasma_client_get(c, &id4, 1, 0, &v));
	ftest_assert_ok(ferry__plasma_client_view_owner(c, &v, &got));
	ftest_assert_true(same_owner(&got, &w3));
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
	client_check(c, 1, 100, 0);
	client_check(c, 2, 3 * MIB, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(the_connect_owner_is_the_default_and_a_nil_owner_is_the_node)
{
	struct ferry__plasma_server_opts o = {.memory_bytes = 64 * MIB, .max_objects = 4096};
	struct ferry_worker_id me = wid(9), other = wid(8), nil = {0}, got;
	struct ferry_plasma_connect_opts co = {.owner = me};
	struct ferry_object_id id1 = oid(1), id2 = oid(2);
	struct ferry_plasma_client *c = NULL;
	struct test_store t;
	void *buf;

	store_spawn(&t, o);
	ftest_assert_ok(ferry_plasma_client_connect(t.path, &co, &c));
	/* The unchanged calls name the client's owner, small and large. */
	ftest_assert_ok(ferry_plasma_client_put(c, &id1, "abc", 3, NULL, 0));
	ftest_assert_ok(ferry_plasma_client_create(c, &id2, 2 * MIB, NULL, 0, &buf));
	ftest_assert_ok(ferry_plasma_client_seal(c, &id2));
	got = listed_owner(c, 1);
	ftest_assert_true(same_owner(&got, &me));
	got = listed_owner(c, 2);
	ftest_assert_true(same_owner(&got, &me));
	/* A task's return: owned by its submitter, not by the worker that made it. */
	put_owned(c, 3, 100, &other);
	got = listed_owner(c, 3);
	ftest_assert_true(same_owner(&got, &other));
	/* Nil, explicitly: the node owns it, whatever the client's owner. */
	put_owned(c, 4, 100, &nil);
	put_owned(c, 5, 2 * MIB, &nil);
	got = listed_owner(c, 4);
	ftest_assert_true(same_owner(&got, &nil));
	got = listed_owner(c, 5);
	ftest_assert_true(same_owner(&got, &nil));
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}
