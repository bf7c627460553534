/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager over RDMA, as it runs: a real ferry-gcs, nodes serving on the soft-RoCE
 * address (embedded, or ferry-node processes for the kill cases). Objects of 0 B to 64 MiB move
 * byte-exact by RDMA READ from the source's registered arena; concurrent pulls move once; an
 * absent object is -ENOENT; a full store -ENOSPC with nothing left behind; a source killed
 * mid-READ ends in -ECONNRESET (or success if it finished first) with no half object; a puller
 * killed mid-READ does not leave its pin on the source. Where no RDMA device exists, each case
 * skips with the reason (run the suite through tools/softroce-vm).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plasma/store.h"
#include "tests/harness/ftest.h"
#include "tests/integration/transport/transport_util.h"
#include "tests/rdma/rdma_util.h"
#include "transport/objmgr_int.h"

static struct ferry__node *rdma_node(uint16_t gcs_port, unsigned memory_mib)
{
	return tt_node_start_ex(gcs_port, memory_mib, true, 0, FERRY__NODE_TRANSPORT_RDMA, rt_ip());
}

/* The GCS and @nodes nodes as rdma_node() starts them; tt_cluster_add() adds more alike. */
static struct tt_cluster rdma_cluster(unsigned nodes, unsigned memory_mib)
{
	return tt_cluster_start_ex(nodes, memory_mib, true, 0, FERRY__NODE_TRANSPORT_RDMA, rt_ip());
}

FTEST(sizes_over_rdma)
{
	struct tt_cluster t;
	struct ferry__node *a, *b;
	struct ferry__objmgr_stats sa, sb;

	rt_require_device();
	t = rdma_cluster(2, 160);
	a = t.node[0], b = t.node[1];
	ftest_assert_true(ferry__objmgr_transports(ferry__node_objmgr(a)) &
			  FERRY_GCS_TRANSPORT_RDMA);
	ftest_assert_ptr_notnull(strstr(ferry__node_address(a), "rdma="));
	tt_move_sizes(t.gcs.port, a, b, FERRY_GCS_TRANSPORT_RDMA);
	/* Each pull asked A once, or (1 B and 4 KiB, when B's location cache had them by then)
	 * was one READ that A never heard of; none was READ in vain. */
	ferry__objmgr_get_stats(ferry__node_objmgr(a), &sa);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &sb);
	ftest_assert_uint_eq(sa.requests_served + sb.one_sided_kept, 5);
	ftest_assert_uint_eq(sa.requests_refused, 0);
	ftest_assert_uint_eq(sb.one_sided_missed, 0);
	tt_cluster_stop(&t);
}

/* Put @size bytes of pattern 5 with @meta bytes of metadata (each 'm') as @id at @socket. */
static void put_with_metadata(const char *socket, const struct ferry_object_id *id, uint64_t size,
			      uint32_t meta)
{
	struct ferry_plasma_client *c = NULL;
	uint8_t *data, *md = malloc(meta);

	ftest_assert_ptr_notnull(md);
	memset(md, 'm', meta);
	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_create(c, id, size, md, meta, (void **)&data));
	for (uint64_t i = 0; i < size; i++)
		data[i] = tt_byte(5, i);
	ftest_assert_ok(ferry_plasma_client_seal(c, id));
	ferry_plasma_client_disconnect(c);
	free(md);
}

/* @id at @socket has @size bytes of pattern 5 and @meta bytes of metadata 'm'. */
static void check_with_metadata(const char *socket, const struct ferry_object_id *id, uint64_t size,
				uint32_t meta)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_view v;
	uint64_t bad = 0;

	ftest_assert_ok(ferry_plasma_client_connect(socket, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_get(c, id, 1, 0, &v));
	ftest_assert_uint_eq(v.data_size, size);
	ftest_assert_uint_eq(v.metadata_size, meta);
	for (uint64_t i = 0; i < size; i++)
		bad += ((const uint8_t *)v.data)[i] != tt_byte(5, i);
	for (uint32_t i = 0; i < meta; i++)
		bad += ((const uint8_t *)v.metadata)[i] != 'm';
	ftest_assert_uint_eq(bad, 0);
	ferry_plasma_client_release(c, &v);
	ferry_plasma_client_disconnect(c);
}

/* Delete @id on @a: its store frees it within 20 s, which it cannot while a pin holds it. */
static void freed_once_deleted(struct ferry__node *a, const struct ferry_object_id *id)
{
	struct ferry_plasma_connect_opts co = {.name = "test"};
	struct ferry_plasma_client *pa;

	ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(a), &co, &pa));
	ftest_assert_ok(ferry_plasma_client_delete(pa, id, 1, NULL));
	for (int i = 0; i < 2000 && tt_present(ferry__node_socket(a), id); i++)
		usleep(10000);
	ftest_assert_int_eq(tt_present(ferry__node_socket(a), id), 0);
	ferry_plasma_client_disconnect(pa);
}

/* The directory's record of an object as one written without the metadata size says it. */
static void metadata_unknown(const struct ferry_object_id *id, struct ferry__objmgr_sizes *s)
{
	(void)id;
	s->metadata = 0;
}

/*
 * The loop's fast path over RDMA, with the location cached. Up to 64 KiB (data + metadata),
 * the directory has the copy's place and content check: the pull is one READ, no message
 * (one_sided_kept; the source serves no request), ended on the loop (pulls_fast). Larger: the
 * loop probes and READs ahead while creating the copy (early_copies), one probe. Records that
 * lack the metadata size (stale): a small object's READ is short, so its bytes do not hash to
 * the check (one_sided_missed) and a pull thread's probe reads it; an object whose metadata
 * makes it larger than the check covers (no check) gets a pinned reply on the fast path, which
 * sends PullDone at once (the source can free the object after a delete) and hands over, and
 * the pull thread's own probe reads it; a large object's early copy has the wrong size and is
 * discarded, and the pull thread, from the reply's sizes, makes one that is kept.
 */
FTEST(small_pulls_end_on_the_loop)
{
	static const struct {
		uint64_t size, meta;
		bool stale, fast;
		unsigned served, kept, discarded, one_sided, missed;
	} cases[] = {
		{1, 3, false, true, 0, 0, 0, 1, 0},
		{4096, 3, false, true, 0, 0, 0, 1, 0},
		{60000, 3, false, true, 0, 0, 0, 1, 0},
		{200000, 3, false, true, 1, 1, 0, 0, 0},
		{65000, 1000, false, true, 1, 1, 0, 0, 0},
		{1000, 3, true, false, 1, 0, 0, 0, 1},
		{65000, 1000, true, false, 2, 0, 0, 0, 0},
		{200000, 1000, true, false, 2, 1, 1, 0, 0},
	};
	struct tt_pulled pl;
	struct ferry_gcs_client *c;
	struct ferry__node *a, *b;
	struct ferry_object_id id;
	struct tt_cluster t;

	rt_require_device();
	t = rdma_cluster(2, 64);
	a = t.node[0], b = t.node[1];
	c = tt_cluster_client(&t);
	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), c);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		ftest_log("%llu bytes + %llu of metadata%s", (unsigned long long)cases[k].size,
			  (unsigned long long)cases[k].meta,
			  cases[k].stale ? ", stale record" : "");
		ferry__objmgr_sizes_hook = cases[k].stale ? metadata_unknown : NULL;
		ferry_object_id_random(&id);
		if (cases[k].meta == 3)
			tt_put(ferry__node_socket(a), &id, cases[k].size, 9);
		else
			put_with_metadata(ferry__node_socket(a), &id, cases[k].size,
					  (uint32_t)cases[k].meta);
		pl = tt_pull_cached(c, a, b, &id);
		ftest_assert_uint_eq(pl.res.transport, FERRY_GCS_TRANSPORT_RDMA);
		ftest_assert_uint_eq(pl.res.bytes, cases[k].size + cases[k].meta);
		ftest_assert_uint_eq(pl.b1.pulls_fast, pl.b0.pulls_fast + cases[k].fast);
		if (cases[k].meta == 3)
			tt_check(ferry__node_socket(b), &id, cases[k].size, 9);
		else
			check_with_metadata(ferry__node_socket(b), &id, cases[k].size,
					    (uint32_t)cases[k].meta);
		tt_wait_location(c, &id, 2); /* the node recorded the copy */
		ftest_assert_uint_eq(pl.b1.early_copies, pl.b0.early_copies + cases[k].kept);
		ftest_assert_uint_eq(pl.b1.early_discarded,
				     pl.b0.early_discarded + cases[k].discarded);
		ftest_assert_uint_eq(pl.a1.requests_served,
				     pl.a0.requests_served + cases[k].served);
		ftest_assert_uint_eq(pl.b1.fast_handovers, pl.b0.fast_handovers + !cases[k].fast);
		ftest_assert_uint_eq(pl.b1.one_sided_kept,
				     pl.b0.one_sided_kept + cases[k].one_sided);
		ftest_assert_uint_eq(pl.b1.one_sided_missed,
				     pl.b0.one_sided_missed + cases[k].missed);
		freed_once_deleted(a, &id); /* every pin went */
	}
	ferry__objmgr_sizes_hook = NULL;
	tt_cluster_stop(&t);
}

/* A new 1 MiB object on the store at @socket, its bytes from @seed: its ID into *@id. */
static void put_new_mib(const char *socket, struct ferry_object_id *id, uint64_t seed)
{
	ferry_object_id_random(id);
	tt_put(socket, id, 1u << 20, seed);
}

/*
 * Node A on the soft-RoCE address and a puller B added with a 3 s deadline (for the lost READ
 * cases), @memory_mib of store each; B's location cache warm and its endpoint to A up. Into
 * @t (by pointer: the tests keep it on their stack).
 */
static void puller_pair(struct tt_cluster *t, unsigned memory_mib, struct ferry__node **a,
			struct ferry__node **b, struct ferry_gcs_client **c)
{
	*t = rdma_cluster(1, memory_mib);
	*a = t->node[0];
	*b = tt_cluster_add(t, memory_mib, 3000);
	*c = tt_cluster_client(t);
	tt_warm_cache(ferry__node_objmgr(*b), ferry__node_socket(*a), *c);
}

/* The place the next fast-path pull uses in place of the directory's (read_ahead test). */
static struct ferry_gcs_object_place forced_place;

static void force_place(const struct ferry_object_id *id, struct ferry_gcs_object_place *place)
{
	(void)id;
	*place = forced_place;
}

/* The place the location cache holds for @id's only copy. */
static struct ferry_gcs_object_place cached_place(struct ferry__objmgr *om,
						  const struct ferry_object_id *id)
{
	struct ferry_gcs_object_place places[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];

	tt_wait_cached(om, id, 1, locs);
	ftest_assert_uint_eq(ferry__objmgr_locs_get(om, id, locs, NULL, places), 1);
	return places[0];
}

/* A counter of @n's object manager, at @offset in its stats. */
static uint64_t stat_at(struct ferry__node *n, size_t offset)
{
	struct ferry__objmgr_stats st = tt_stats(n);
	uint64_t v;

	memcpy(&v, (const char *)&st + offset, sizeof(v));
	return v;
}

/*
 * B's next READ hits @fault (the injected failure, or a completion that never comes): the pull
 * of @id (its place cached, no other location) ends with @err, counted once in the stats
 * counter at @missed; nothing left admitted, no copy.
 */
static void read_fault_ends_pull(struct ferry__node *b, const struct ferry_object_id *id, int fault,
				 int err, size_t missed)
{
	struct ferry__objmgr *om = ferry__node_objmgr(b);
	uint64_t before;

	(void)cached_place(om, id);
	before = stat_at(b, missed);
	ftest_assert_ok(ferry__objmgr_rdma_inject_fault(om, fault, 0));
	ftest_assert_errno(ferry__objmgr_pull_wait(om, id, NULL), err);
	ftest_assert_uint_eq(stat_at(b, missed), before + 1);
	ftest_assert_uint_eq(tt_stats(b).bytes_in_flight, 0);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), id), 0);
}

/*
 * A large pull whose place the directory has READs with the probe, not after its reply, once
 * the endpoint is up (its accept told the puller the source's arena). The reply names the placement
 * the bytes were read from: kept (one READ, read_ahead_kept). A stale place, which points at
 * another object's bytes (another placement id), or at another object's offset under this
 * object's id: the READ ahead is thrown away and the object READ again from the reply's address
 * (read_ahead_missed), byte-exact; every pin is released.
 */
FTEST(large_pulls_read_ahead_of_the_reply)
{
	struct ferry_object_id w, x, y, z, other, u, v, l, n;
	struct ferry_gcs_object_place px, pother;
	struct ferry_gcs_client *c;
	struct ferry__node *a, *b;
	struct ferry__objmgr *om;
	struct tt_pulled pl;
	struct tt_cluster t;

	rt_require_device();
	puller_pair(&t, 128, &a, &b, &c); /* B's chunk (arena / 16) holds a 1 MiB copy */
	om = ferry__node_objmgr(b);
	put_new_mib(ferry__node_socket(a), &w, 51);
	put_new_mib(ferry__node_socket(a), &x, 52);
	put_new_mib(ferry__node_socket(a), &y, 53);
	put_new_mib(ferry__node_socket(a), &z, 54);
	put_new_mib(ferry__node_socket(a), &other, 55);
	put_new_mib(ferry__node_socket(a), &u, 56);
	put_new_mib(ferry__node_socket(a), &v, 57);
	put_new_mib(ferry__node_socket(a), &l, 58);
	put_new_mib(ferry__node_socket(a), &n, 59);
	px = cached_place(om, &x);
	pother = cached_place(om, &other);
	ftest_assert_true(px.alloc != 0 && pother.alloc != 0 && px.alloc != pother.alloc);
	ftest_assert_true(px.offset != pother.offset);

	/* The endpoint's accept named the arena: the first large pull on it READs ahead. */
	pl = tt_pull_cached(c, a, b, &w);
	ftest_assert_uint_eq(pl.b1.read_ahead_kept, 1);
	ftest_assert_uint_eq(pl.b1.read_ahead_missed, 0);
	tt_check(ferry__node_socket(b), &w, 1u << 20, 51);

	pl = tt_pull_cached(c, a, b, &x);
	ftest_assert_uint_eq(pl.res.transport, FERRY_GCS_TRANSPORT_RDMA);
	ftest_assert_uint_eq(pl.b1.read_ahead_kept, pl.b0.read_ahead_kept + 1);
	ftest_assert_uint_eq(pl.b1.read_ahead_missed, pl.b0.read_ahead_missed);
	ftest_assert_uint_eq(pl.b1.early_copies, pl.b0.early_copies + 1);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 1);
	tt_check(ferry__node_socket(b), &x, 1u << 20, 52);
	freed_once_deleted(a, &x);

	/* Another object's bytes and placement: the reply names y's. */
	forced_place = pother;
	ferry__objmgr_place_hook = force_place;
	pl = tt_pull_cached(c, a, b, &y);
	ftest_assert_uint_eq(pl.b1.read_ahead_missed, pl.b0.read_ahead_missed + 1);
	ftest_assert_uint_eq(pl.b1.read_ahead_kept, pl.b0.read_ahead_kept);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 1);
	tt_check(ferry__node_socket(b), &y, 1u << 20, 53);
	freed_once_deleted(a, &y);

	/* z's placement id at another object's offset: the reply's address differs. */
	forced_place = cached_place(om, &z);
	forced_place.offset = pother.offset;
	pl = tt_pull_cached(c, a, b, &z);
	ftest_assert_uint_eq(pl.b1.read_ahead_missed, pl.b0.read_ahead_missed + 1);
	ftest_assert_uint_eq(pl.b1.read_ahead_kept, pl.b0.read_ahead_kept);
	tt_check(ferry__node_socket(b), &z, 1u << 20, 54);
	freed_once_deleted(a, &z);
	ferry__objmgr_place_hook = NULL;
	tt_check(ferry__node_socket(a), &other, 1u << 20, 55); /* only read, never written */
	/* A READ ahead that fails ends this source's attempt as any failed READ does: with no
	 * other location, -ECONNRESET; no copy or admission left, the pin released. */
	read_fault_ends_pull(b, &u, FERRY__RDMA_FAULT_FAIL_READ, -ECONNRESET,
			     offsetof(struct ferry__objmgr_stats, read_ahead_missed));
	freed_once_deleted(a, &u);
	/* One whose completion never comes: the deadline ends it (the endpoint goes, so the READ
	 * stops) with -ETIMEDOUT, nothing left behind; then the next pull works. */
	pl = tt_pull_cached(c, a, b, &l); /* an endpoint that knows the arena again */
	tt_check(ferry__node_socket(b), &l, 1u << 20, 58);
	read_fault_ends_pull(b, &v, FERRY__RDMA_FAULT_DROP_READ, -ETIMEDOUT,
			     offsetof(struct ferry__objmgr_stats, read_ahead_missed));
	pl = tt_pull_cached(c, a, b, &n);
	tt_check(ferry__node_socket(b), &n, 1u << 20, 59);
	tt_cluster_stop(&t);
}

/* A new object of @size bytes from @seed on the store at @socket: its ID into *@id. */
static void put_new(const char *socket, struct ferry_object_id *id, uint64_t size, uint64_t seed)
{
	ferry_object_id_random(id);
	tt_put(socket, id, size, seed);
}

/*
 * A small object whose place and content check the directory has is pulled with one READ and
 * no message: the source serves no request. Bytes that do not hash to the check (a stale place
 * pointing at another object's bytes, of another size or the same) are thrown away and the
 * source asked (one request), byte-exact; the other object is only read. A place outside the
 * source's arena is not READ at all. A READ that fails
 * ends the attempt (-ECONNRESET), one whose completion never comes at the deadline
 * (-ETIMEDOUT), with nothing left behind; later pulls work, one READ again.
 */
FTEST(small_pulls_read_one_sided)
{
	struct ferry_object_id x, y, z, other, f, d, n, g;
	struct ferry_gcs_object_place px, py, pz, pother, pg;
	struct ferry_gcs_client *c;
	struct ferry__node *a, *b;
	struct ferry__objmgr *om;
	struct tt_pulled pl;
	struct tt_cluster t;

	rt_require_device();
	puller_pair(&t, 64, &a, &b, &c);
	om = ferry__node_objmgr(b);
	put_new(ferry__node_socket(a), &x, 8, 61);
	put_new(ferry__node_socket(a), &y, 4096, 62);
	put_new(ferry__node_socket(a), &z, 8, 63);
	put_new(ferry__node_socket(a), &other, 8, 64);
	put_new(ferry__node_socket(a), &f, 100, 65);
	put_new(ferry__node_socket(a), &d, 100, 66);
	put_new(ferry__node_socket(a), &n, 100, 67);
	put_new(ferry__node_socket(a), &g, 8, 68);
	px = cached_place(om, &x);
	py = cached_place(om, &y);
	pz = cached_place(om, &z);
	pother = cached_place(om, &other);
	pg = cached_place(om, &g);
	ftest_assert_true(px.check && py.check && pz.check && pother.check && pg.check);
	ftest_assert_true(pz.check != pother.check);

	pl = tt_pull_cached(c, a, b, &x);
	ftest_assert_uint_eq(pl.res.transport, FERRY_GCS_TRANSPORT_RDMA);
	ftest_assert_uint_eq(pl.res.bytes, 8 + 3); /* tt_put() adds 3 bytes of metadata */
	ftest_assert_uint_eq(pl.b1.one_sided_kept, pl.b0.one_sided_kept + 1);
	ftest_assert_uint_eq(pl.b1.one_sided_missed, pl.b0.one_sided_missed);
	ftest_assert_uint_eq(pl.b1.pulls_fast, pl.b0.pulls_fast + 1);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served);
	tt_check(ferry__node_socket(b), &x, 8, 61);
	tt_wait_location(c, &x, 2);
	/* The copy is listed with its own place and the same check (same bytes). */
	{
		struct ferry_gcs_object_info info;

		ftest_assert_ok(ferry_gcs_object_lookup(c, &x, &info));
		ftest_assert_ptr_notnull(info.places);
		for (uint32_t i = 0; i < info.nlocations; i++)
			ftest_assert_uint_eq(info.places[i].check, px.check);
		ferry_gcs_free(info.locations);
	}

	/* Stale places: y's check over other's bytes (4 KiB read where 8 B lie), then z's over
	 * another 8-byte object's. */
	ferry__objmgr_place_hook = force_place;
	forced_place = (struct ferry_gcs_object_place){pother.offset, pother.alloc, py.check};
	pl = tt_pull_cached(c, a, b, &y);
	ftest_assert_uint_eq(pl.b1.one_sided_missed, pl.b0.one_sided_missed + 1);
	ftest_assert_uint_eq(pl.b1.one_sided_kept, pl.b0.one_sided_kept);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 1);
	tt_check(ferry__node_socket(b), &y, 4096, 62);
	forced_place = (struct ferry_gcs_object_place){pother.offset, pother.alloc, pz.check};
	pl = tt_pull_cached(c, a, b, &z);
	ftest_assert_uint_eq(pl.b1.one_sided_missed, pl.b0.one_sided_missed + 1);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 1);
	tt_check(ferry__node_socket(b), &z, 8, 63);
	/* A place past the end of A's arena is not READ (that would fail and take the endpoint
	 * down): the source is asked; the endpoint stays, so the next pull is one READ. */
	forced_place = (struct ferry_gcs_object_place){1ull << 40, pother.alloc, pg.check};
	pl = tt_pull_cached(c, a, b, &g);
	ftest_assert_uint_eq(pl.b1.one_sided_missed, pl.b0.one_sided_missed);
	ftest_assert_uint_eq(pl.b1.one_sided_kept, pl.b0.one_sided_kept);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 1);
	tt_check(ferry__node_socket(b), &g, 8, 68);
	ferry__objmgr_place_hook = NULL;
	pl = tt_pull_cached(c, a, b, &other);
	ftest_assert_uint_eq(pl.b1.one_sided_kept, pl.b0.one_sided_kept + 1);
	tt_check(ferry__node_socket(a), &other, 8, 64); /* only read, never written */

	/* A READ that fails (its endpoint torn down) ends the attempt as any failed READ does:
	 * with no other location, -ECONNRESET; no copy or admission left. */
	read_fault_ends_pull(b, &f, FERRY__RDMA_FAULT_FAIL_READ, -ECONNRESET,
			     offsetof(struct ferry__objmgr_stats, one_sided_missed));

	/* One whose completion never comes: the deadline takes the endpoint down, which ends the
	 * READ: -ETIMEDOUT, nothing left. The next pull works, one READ again once the endpoint
	 * is back up. */
	pl = tt_pull_cached(c, a, b, &n); /* a new endpoint (a probe: it was down) */
	tt_check(ferry__node_socket(b), &n, 100, 67);
	read_fault_ends_pull(b, &d, FERRY__RDMA_FAULT_DROP_READ, -ETIMEDOUT,
			     offsetof(struct ferry__objmgr_stats, one_sided_missed));
	pl = tt_pull_cached(c, a, b, &f);
	tt_check(ferry__node_socket(b), &f, 100, 65);
	pl = tt_pull_cached(c, a, b, &d);
	ftest_assert_uint_eq(pl.b1.one_sided_kept, pl.b0.one_sided_kept + 1);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served);
	tt_check(ferry__node_socket(b), &d, 100, 66);
	tt_cluster_stop(&t);
}

FTEST(concurrent_pulls_read_once)
{
	struct tt_cluster t;
	struct ferry__node *a, *b;
	struct ferry__objmgr_stats sa, sb;
	struct ferry_object_id id;

	rt_require_device();
	t = rdma_cluster(2, 64);
	a = t.node[0], b = t.node[1];
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 8u << 20, 3);
	ftest_assert_ok(ferry__node_sync(a));
	tt_pull_concurrently(ferry__node_objmgr(b), &id, 6);
	tt_check(ferry__node_socket(b), &id, 8u << 20, 3);
	ferry__objmgr_get_stats(ferry__node_objmgr(a), &sa);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &sb);
	/* One probe served; 8 MiB read once (over two QPs), whatever joined or found it local. */
	ftest_assert_uint_eq(sa.requests_served, 1);
	ftest_assert_uint_eq(sb.pulls_ok, sb.pulls_started);
	ftest_assert_uint_eq(sb.bytes_pulled, (8u << 20) + 3);
	tt_cluster_stop(&t);
}

FTEST(absent_and_full)
{
	struct tt_cluster t;
	struct ferry__node *a, *b;
	struct ferry_gcs_client *c;
	struct ferry__objmgr_stats st;
	struct ferry_object_id absent, big;
	struct ferry_worker_id owner;

	rt_require_device();
	t = rdma_cluster(1, 96);
	a = t.node[0];
	b = tt_cluster_add(&t, 16, 0);
	c = tt_cluster_client(&t);
	/* Listed at A but not there: the probe is refused with -ENOENT, nothing created. */
	ferry_object_id_random(&absent);
	memset(&owner, 7, sizeof(owner));
	ftest_assert_ok(ferry_gcs_object_add(c, &absent, &owner, ferry__node_id(a), 1 << 20));
	ftest_assert_int_eq(ferry_gcs_object_add_location(c, &absent, ferry__node_id(a), 1 << 20),
			    1);
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &absent, NULL), -ENOENT);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &absent), 0);
	/* Larger than B's whole store. */
	ferry_object_id_random(&big);
	tt_put(ferry__node_socket(a), &big, 48u << 20, 4);
	ftest_assert_ok(ferry__node_sync(a));
	ftest_assert_int_lt(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &big, NULL), 0);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &big), 0);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &st);
	ftest_assert_uint_eq(st.bytes_in_flight, 0);
	/* The probe that was refused by B's store still released A's pin: A can delete it now
	 * and it is gone at once (a pinned object's delete is deferred). */
	{
		struct ferry_plasma_client *pc;
		struct ferry_plasma_connect_opts co = {.name = "test"};

		ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(a), &co, &pc));
		for (int i = 0; i < 200 && tt_present(ferry__node_socket(a), &big); i++) {
			(void)ferry_plasma_client_delete(pc, &big, 1, NULL);
			usleep(10000);
		}
		ftest_assert_int_eq(tt_present(ferry__node_socket(a), &big), 0);
		ferry_plasma_client_disconnect(pc);
	}
	/* A large pull the loop runs, into a store kept full by a primary: the pull thread's
	 * create fails, the pin is released, the retry through a pull thread ends in the same
	 * error, and nothing is left behind. */
	{
		struct ferry_plasma_client *pb;
		struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
		struct ferry__objmgr *om = ferry__node_objmgr(b);
		struct ferry__objmgr_stats s0, s1;
		struct ferry_object_id fill, mid;
		void *d = NULL;
		int ret = -1;

		tt_warm_cache(om, ferry__node_socket(a), c);
		ferry_object_id_random(&fill);
		ftest_assert_ok(ferry_plasma_client_connect(ferry__node_socket(b), NULL, &pb));
		for (uint64_t mib = 16; mib >= 8 && ret < 0; mib--)
			ret = ferry_plasma_client_create(pb, &fill, mib << 20, NULL, 0, &d);
		ftest_assert_ok(ret);
		ftest_assert_ok(ferry_plasma_client_seal(pb, &fill));
		ferry_object_id_random(&mid);
		tt_put(ferry__node_socket(a), &mid, 3u << 20, 5);
		tt_wait_cached(om, &mid, 1, locs);
		ferry__objmgr_get_stats(om, &s0);
		ftest_assert_int_lt(ferry__objmgr_pull_wait(om, &mid, NULL), 0);
		ferry__objmgr_get_stats(om, &s1);
		ftest_assert_uint_eq(s1.fast_handovers, s0.fast_handovers + 1);
		ftest_assert_uint_eq(s1.bytes_in_flight, 0);
		ftest_assert_int_eq(tt_present(ferry__node_socket(b), &mid), 0);
		freed_once_deleted(a, &mid);
		ferry_plasma_client_disconnect(pb);
	}
	tt_cluster_stop(&t);
}

FTEST(source_killed_mid_read)
{
	struct tt_proc gcs, a;
	struct ferry__node *b;
	struct ferry_gcs_client *c;
	struct ferry__objmgr_result res;
	struct ferry__objmgr_stats st;
	struct tt_killer k;
	struct ferry_object_id id;
	int ret;

	rt_require_device();
	gcs = tt_gcs_start();
	a = tt_node_proc_start_ex(gcs.port, "160M", "a", "rdma", rt_ip());
	b = rdma_node(gcs.port, 160);
	c = tt_gcs_client(gcs.port);
	ferry_object_id_random(&id);
	tt_put(a.socket, &id, 64u << 20, 11);
	tt_wait_location(c, &id, 1);
	/* Into the READs: 64 MiB take seconds on soft-RoCE. */
	k = (struct tt_killer){.watch = ferry__node_objmgr(b), .victim = a.pid, .delay_ms = 100};
	tt_killer_start(&k);
	ret = ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res);
	tt_killer_join(&k);
	tt_check_killed_pull(ret, b, &id, 64u << 20, 11);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &st);
	ftest_assert_uint_eq(st.bytes_in_flight, 0);
	ferry_gcs_client_destroy(c);
	ferry__node_stop(b);
	tt_proc_signal(&gcs, SIGTERM);
}

/* The puller dies while READing: the source releases its pin at the endpoint's close (long
 * before the pin deadline of twice the 30 s pull timeout). */
FTEST(puller_killed_mid_read_releases_pin)
{
	struct tt_proc gcs, b;
	struct ferry__node *a;
	struct ferry_plasma_client *pb;
	struct ferry_plasma_connect_opts co = {.name = "test"};
	struct ferry_plasma_view v;
	struct tt_killer k;
	struct ferry_object_id id;

	rt_require_device();
	gcs = tt_gcs_start();
	a = rdma_node(gcs.port, 160);
	b = tt_node_proc_start_ex(gcs.port, "160M", "b", "rdma", rt_ip());
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 64u << 20, 12);
	ftest_assert_ok(ferry__node_sync(a));
	k = (struct tt_killer){
		.watch = ferry__node_objmgr(a), .served = true, .victim = b.pid, .delay_ms = 100};
	tt_killer_start(&k);
	/* A get on B's store misses and starts the pull; it ends when B dies. */
	ftest_assert_ok(ferry_plasma_client_connect(b.socket, &co, &pb));
	(void)ferry_plasma_client_get(pb, &id, 1, 60000, &v);
	tt_killer_join(&k);
	ferry_plasma_client_disconnect(pb);
	freed_once_deleted(a, &id);
	ferry__node_stop(a);
	tt_proc_signal(&gcs, SIGTERM);
}

/* A 3 MiB object on @a1 and @a2 (pattern @seed); B's first READ fails (injected): the pull
 * fails over to the other location and ends over RDMA with the right bytes. */
static void read_fails_over(struct ferry_gcs_client *c, struct ferry__node *a1,
			    struct ferry__node *a2, struct ferry__node *b, uint64_t seed)
{
	struct ferry__objmgr_result res;
	struct ferry_object_id id;

	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a1), &id, 3u << 20, seed);
	tt_put(ferry__node_socket(a2), &id, 3u << 20, seed);
	ftest_assert_ok(ferry__node_sync(a1));
	ftest_assert_ok(ferry__node_sync(a2));
	tt_wait_location(c, &id, 2);
	ftest_assert_ok(ferry__objmgr_rdma_inject_fault(ferry__node_objmgr(b),
							FERRY__RDMA_FAULT_FAIL_READ, 0));
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res));
	ftest_assert_uint_eq(res.attempts, 2);
	ftest_assert_uint_eq(res.transport, FERRY_GCS_TRANSPORT_RDMA);
	tt_check(ferry__node_socket(b), &id, 3u << 20, seed);
}

/* A READ that completes in error (injected) ends the attempt at that source: the pull goes on
 * at the next location and the copy is whole. */
FTEST(read_error_fails_over)
{
	struct tt_cluster t;
	struct ferry__node *a1, *a2, *b;

	rt_require_device();
	t = rdma_cluster(3, 32);
	a1 = t.node[0], a2 = t.node[1], b = t.node[2];
	read_fails_over(tt_cluster_client(&t), a1, a2, b, 31);
	tt_cluster_stop(&t);
}

/*
 * Nodes whose loops busy-poll (--spin-us): the loop polls the CQ while it spins and arms the
 * completion event only before it sleeps. Every size moves; a pull after the loops have slept
 * (the windows long past) is woken by the armed event, small and large; a failed READ fails
 * over to the other location.
 */
FTEST(busy_polling_loops_poll_then_arm)
{
	static const uint64_t sizes[] = {1024, 1u << 20};
	struct tt_cluster t;
	struct ferry__node *a, *a2, *b;
	struct ferry__objmgr_result res;
	struct ferry_object_id id;

	rt_require_device();
	tt_node_spin_us = 1000;
	t = rdma_cluster(2, 160);
	a = t.node[0], b = t.node[1];
	tt_move_sizes(t.gcs.port, a, b, FERRY_GCS_TRANSPORT_RDMA);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		ferry_object_id_random(&id);
		tt_put(ferry__node_socket(a), &id, sizes[i], 40 + (unsigned)i);
		ftest_assert_ok(ferry__node_sync(a));
		usleep(200 * 1000); /* both loops asleep, their CQ events armed */
		ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res));
		ftest_assert_uint_eq(res.transport, FERRY_GCS_TRANSPORT_RDMA);
		tt_check(ferry__node_socket(b), &id, sizes[i], 40 + (unsigned)i);
	}
	a2 = tt_cluster_add(&t, 32, 0);
	read_fails_over(tt_cluster_client(&t), a, a2, b, 42);
	tt_node_spin_us = 0;
	tt_cluster_stop(&t);
}

/* A READ whose completion never comes (injected): the deadline ends the pull with -ETIMEDOUT,
 * the half object is gone, and the next pull from the same source works on a new endpoint. */
FTEST(lost_completion_times_out)
{
	struct tt_cluster t;
	struct ferry__node *a, *b;
	struct ferry__objmgr_stats st;
	struct ferry_object_id id, id2;

	rt_require_device();
	t = rdma_cluster(1, 32);
	a = t.node[0];
	b = tt_cluster_add(&t, 32, 3000);
	ferry_object_id_random(&id);
	ferry_object_id_random(&id2);
	tt_put(ferry__node_socket(a), &id, 1u << 20, 32);
	tt_put(ferry__node_socket(a), &id2, 1u << 20, 33);
	ftest_assert_ok(ferry__node_sync(a));
	ftest_assert_ok(ferry__objmgr_rdma_inject_fault(ferry__node_objmgr(b),
							FERRY__RDMA_FAULT_DROP_READ, 0));
	ftest_assert_errno(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, NULL), -ETIMEDOUT);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &id), 0);
	ferry__objmgr_get_stats(ferry__node_objmgr(b), &st);
	ftest_assert_uint_eq(st.bytes_in_flight, 0);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id2, NULL));
	tt_check(ferry__node_socket(b), &id2, 1u << 20, 33);
	tt_cluster_stop(&t);
}

/*
 * Large pulls the loop runs (the location cached) when things fail. A failed READ: the pin is
 * released, a pull thread aborts the copy and fails over to the other location. A READ whose
 * completion never comes: the deadline ends the pull with -ETIMEDOUT, no copy is left and the
 * admission is given back, and the next pull from the same source works on a new endpoint.
 */
FTEST(large_pulls_on_the_loop_fail_over_and_time_out)
{
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry__objmgr_stats s0, s1;
	struct ferry__node *a1, *a2, *b;
	struct ferry__objmgr_result res;
	struct ferry_object_id x, y, z;
	struct ferry_gcs_client *c;
	struct ferry__objmgr *om;
	struct tt_cluster t;

	rt_require_device();
	t = rdma_cluster(2, 32);
	a1 = t.node[0], a2 = t.node[1];
	b = tt_cluster_add(&t, 32, 3000);
	om = ferry__node_objmgr(b);
	c = tt_cluster_client(&t);
	/* A node learns a peer's address at its first pull from it, and the loop runs a pull
	 * only when it knows every cached location's: b pulls once from each source first. */
	tt_warm_cache(om, ferry__node_socket(a1), c);
	tt_warm_cache(om, ferry__node_socket(a2), c);
	put_new_mib(ferry__node_socket(a1), &x, 41);
	tt_put(ferry__node_socket(a2), &x, 1u << 20, 41); /* the same object at a second node */
	put_new_mib(ferry__node_socket(a1), &y, 42);
	put_new_mib(ferry__node_socket(a1), &z, 43);
	tt_wait_cached(om, &x, 2, locs);
	tt_wait_cached(om, &y, 1, locs);
	tt_wait_cached(om, &z, 1, locs);

	ferry__objmgr_get_stats(om, &s0);
	ftest_assert_ok(ferry__objmgr_rdma_inject_fault(om, FERRY__RDMA_FAULT_FAIL_READ, 0));
	ftest_assert_ok(ferry__objmgr_pull_wait(om, &x, &res));
	ferry__objmgr_get_stats(om, &s1);
	ftest_assert_uint_eq(res.attempts, 2);
	ftest_assert_uint_eq(res.transport, FERRY_GCS_TRANSPORT_RDMA);
	ftest_assert_uint_eq(s1.early_copies, s0.early_copies + 2); /* the loop's, the thread's */
	ftest_assert_uint_eq(s1.fast_handovers, s0.fast_handovers + 1);
	ftest_assert_uint_eq(s1.pulls_fast, s0.pulls_fast);
	tt_check(ferry__node_socket(b), &x, 1u << 20, 41);

	ftest_assert_ok(ferry__objmgr_rdma_inject_fault(om, FERRY__RDMA_FAULT_DROP_READ, 0));
	ftest_assert_errno(ferry__objmgr_pull_wait(om, &y, NULL), -ETIMEDOUT);
	ftest_assert_int_eq(tt_present(ferry__node_socket(b), &y), 0);
	ferry__objmgr_get_stats(om, &s1);
	ftest_assert_uint_eq(s1.bytes_in_flight, 0);
	ftest_assert_uint_eq(s1.fast_handovers, s0.fast_handovers + 2);

	ftest_assert_ok(ferry__objmgr_pull_wait(om, &z, &res));
	ferry__objmgr_get_stats(om, &s0);
	ftest_assert_uint_eq(s0.pulls_fast, s1.pulls_fast + 1); /* on the loop again */
	tt_check(ferry__node_socket(b), &z, 1u << 20, 43);
	tt_cluster_stop(&t);
}

/* A node asked for RDMA on an address no device serves refuses to start; auto starts without
 * RDMA and says so in its transports. (Runs anywhere: 127.0.0.1 is never an RDMA device.) */
FTEST(transport_choice_without_device)
{
	struct tt_proc gcs = tt_gcs_start();
	struct ferry__node_opts o = {0};
	struct ferry__node *node = NULL, *autonode;
	char addr[64];

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", gcs.port);
	o.gcs_address = addr;
	o.token = TT_TOKEN;
	o.token_len = strlen(TT_TOKEN);
	o.memory_bytes = 16u << 20;
	o.transport = FERRY__NODE_TRANSPORT_RDMA;
	o.ip = "127.0.0.1";
	o.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT;
	ftest_assert_errno(ferry__node_start(&o, &node), -ENODEV);
	ftest_assert_ptr_null(node);
	autonode = tt_node_start_ex(gcs.port, 16, false, 0, FERRY__NODE_TRANSPORT_AUTO, NULL);
	ftest_assert_uint_eq(ferry__objmgr_transports(ferry__node_objmgr(autonode)),
			     FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM);
	ftest_assert_ptr_null(strstr(ferry__node_address(autonode), "rdma="));
	ferry__node_stop(autonode);
	tt_proc_signal(&gcs, SIGTERM);
}
