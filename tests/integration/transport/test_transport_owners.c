/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Object owners across nodes: a put that names its owner on node A's store socket reaches the
 * GCS object directory as that owner (not node A), small and large objects alike; a client with
 * no owner, or a nil one, leaves the node as owner; a copy pulled to node B (over TCP, over
 * shm, and by the loop's fast path) keeps the directory's owner in B's store.
 */
#include <string.h>

#include "plasma/client_arena.h"
#include "tests/harness/ftest.h"
#include "tests/integration/transport/transport_util.h"
#include "transport/objmgr_int.h"

#define MIB (1ull << 20)

static struct ferry_worker_id wid(uint8_t b)
{
	struct ferry_worker_id w;

	memset(w.bytes, b, sizeof(w.bytes));
	w.bytes[0] = 0x42;
	return w;
}

static bool same_owner(const struct ferry_worker_id *a, const struct ferry_worker_id *b)
{
	return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* The node's own id as a worker id: what the directory records for a node-owned object. */
static struct ferry_worker_id node_as_owner(struct ferry__node *n)
{
	struct ferry_worker_id w;

	memcpy(w.bytes, ferry__node_id(n)->bytes, sizeof(w.bytes));
	return w;
}

/* Put @size bytes as @id on @socket owned by @owner (NULL: the client's, none). */
static void put_owned(const char *socket, const struct ferry_object_id *id, uint64_t size,
		      const struct ferry_worker_id *owner)
{
	struct ferry_plasma_client *c = NULL;
	void *buf;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_create_owned(c, id, size, "md", 2, 0, owner, &buf));
	memset(buf, 0x5a, size);
	ftest_assert_ok(ferry_plasma_client_seal(c, id));
	ferry_plasma_client_disconnect(c);
}

/* The directory's owner of @id, with @node among its locations. */
static struct ferry_gcs_object_info
lookup(struct ferry_gcs_client *g, const struct ferry_object_id *id, const struct ferry__node *node)
{
	struct ferry_gcs_object_info info;
	bool at_node = false;

	ftest_assert_ok(ferry_gcs_object_lookup(g, id, &info));
	for (uint32_t i = 0; i < info.nlocations; i++)
		at_node |= ferry_node_id_eq(&info.locations[i], ferry__node_id(node));
	ferry_gcs_free(info.locations);
	info.locations = NULL;
	info.places = NULL;
	ftest_assert_true(at_node);
	return info;
}

/* The owner @socket's store lists for @id, which must be there. */
static struct ferry_worker_id store_owner(const char *socket, const struct ferry_object_id *id)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_object_info *objs;
	struct ferry_worker_id w = {0};
	bool found = false;
	size_t n;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_list(c, false, &objs, &n));
	for (size_t k = 0; k < n; k++) {
		if (ferry_object_id_cmp(&objs[k].id, id) == 0) {
			w = objs[k].owner;
			found = true;
		}
	}
	ferry_plasma_list_free(objs);
	ferry_plasma_client_disconnect(c);
	ftest_assert_true(found);
	return w;
}

FTEST(a_put_names_its_owner_in_the_directory)
{
	struct tt_cluster t = tt_cluster_start(1, 64, true, 0);
	struct ferry_gcs_client *g = tt_cluster_client(&t);
	struct ferry__node *a = t.node[0];
	struct ferry_worker_id w1 = wid(1), w2 = wid(2), nil = {0}, node = node_as_owner(a);
	struct ferry_object_id small, large, plain, niled;
	struct ferry_gcs_object_info info;

	ferry_object_id_random(&small);
	ferry_object_id_random(&large);
	ferry_object_id_random(&plain);
	ferry_object_id_random(&niled);
	put_owned(ferry__node_socket(a), &small, 100, &w1);
	put_owned(ferry__node_socket(a), &large, 4 * MIB, &w2);
	put_owned(ferry__node_socket(a), &plain, 100, NULL);
	put_owned(ferry__node_socket(a), &niled, 4 * MIB, &nil);
	ftest_assert_ok(ferry__node_sync(a));
	info = lookup(g, &small, a);
	ftest_assert_true(same_owner(&info.owner_worker, &w1));
	ftest_assert_true(ferry_node_id_eq(&info.owner_node, ferry__node_id(a)));
	info = lookup(g, &large, a);
	ftest_assert_true(same_owner(&info.owner_worker, &w2));
	/* No owner, or a nil one: the node owns it (the GCS refuses a nil owner). */
	info = lookup(g, &plain, a);
	ftest_assert_true(same_owner(&info.owner_worker, &node));
	info = lookup(g, &niled, a);
	ftest_assert_true(same_owner(&info.owner_worker, &node));
	tt_cluster_stop(&t);
}

FTEST(a_client_connected_with_an_owner_names_it_by_default)
{
	struct tt_cluster t = tt_cluster_start(1, 64, true, 0);
	struct ferry_gcs_client *g = tt_cluster_client(&t);
	struct ferry__node *a = t.node[0];
	struct ferry_plasma_connect_opts co = {.owner = wid(7)};
	struct ferry_plasma_client *c = NULL;
	struct ferry_gcs_object_info info;
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(a), &co, &c));
	ftest_assert_ok(ferry_plasma_client_put(c, &id, "hello", 5, NULL, 0));
	ferry_plasma_client_disconnect(c);
	ftest_assert_ok(ferry__node_sync(a));
	info = lookup(g, &id, a);
	ftest_assert_true(same_owner(&info.owner_worker, &co.owner));
	tt_cluster_stop(&t);
}

/* Put a small and a large object owned by @w on node 0, pull both to node 1, which must list
 * them with @w; the directory keeps @w with both locations. */
static void pulled_copies_keep_the_owner(bool no_shm)
{
	struct tt_cluster t = tt_cluster_start(2, 64, no_shm, 0);
	struct ferry_gcs_client *g = tt_cluster_client(&t);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_worker_id w = wid(3), got;
	struct ferry_object_id ids[2];
	const uint64_t sizes[2] = {100, 4 * MIB};
	struct ferry_gcs_object_info info;

	for (int k = 0; k < 2; k++) {
		ferry_object_id_random(&ids[k]);
		put_owned(ferry__node_socket(a), &ids[k], sizes[k], &w);
	}
	ftest_assert_ok(ferry__node_sync(a));
	for (int k = 0; k < 2; k++)
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &ids[k], NULL));
	ftest_assert_ok(ferry__node_sync(b));
	for (int k = 0; k < 2; k++) {
		got = store_owner(ferry__node_socket(b), &ids[k]);
		ftest_assert_true(same_owner(&got, &w));
		info = lookup(g, &ids[k], b);
		ftest_assert_true(same_owner(&info.owner_worker, &w));
		ftest_assert_uint_eq(info.nlocations, 2);
	}
	tt_cluster_stop(&t);
}

FTEST(a_copy_pulled_over_tcp_keeps_the_owner)
{
	pulled_copies_keep_the_owner(true);
}

FTEST(a_copy_pulled_over_shm_keeps_the_owner)
{
	pulled_copies_keep_the_owner(false);
}

FTEST(a_copy_pulled_by_the_fast_path_keeps_the_owner)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry_gcs_client *g = tt_cluster_client(&t);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_worker_id w = wid(4), got;
	struct ferry_object_id id;
	struct tt_pulled p;

	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), g);
	ferry_object_id_random(&id);
	put_owned(ferry__node_socket(a), &id, 100, &w);
	ftest_assert_ok(ferry__node_sync(a));
	p = tt_pull_cached(g, a, b, &id);
	ftest_assert_ok(p.res.status);
	ftest_assert_uint_eq(p.b1.pulls_fast, p.b0.pulls_fast + 1);
	got = store_owner(ferry__node_socket(b), &id);
	ftest_assert_true(same_owner(&got, &w));
	tt_cluster_stop(&t);
}
