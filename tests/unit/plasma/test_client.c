/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client API against a store in a child process: put/get/release byte-exact on both the
 * shared-memory path and the socket path, every documented error, gets that wait for a seal,
 * waits, deletes, eviction, a full store, spilling and restoring, listings, clean disconnects,
 * many threads on one client, and the allocation fault injector through connect/create/get.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "client_test.h"
#include "common/alloc.h"
#include "common/frame.h"
#include "plasma/client_arena.h"
#include "plasma/client_int.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static struct ferry__plasma_server_opts opts(uint64_t memory)
{
	return (struct ferry__plasma_server_opts){.memory_bytes = memory, .max_objects = 4096};
}

FTEST(put_get_release_round_trip)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(1), missing = oid(99);

	store_spawn(&t, opts(64 * MIB));
	c = client_connect(&t);
	client_put(c, 1, 100);	   /* in the chunk: no round trip */
	client_put(c, 2, 3 * MIB); /* through the store */
	client_put(c, 3, 0);	   /* empty */
	client_check(c, 1, 100, 0);
	client_check(c, 2, 3 * MIB, 0);
	client_check(c, 3, 0, 0);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &id), 1);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &missing), 0);
	ftest_assert_uint_eq(client_stats(c).objects, 3);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(another_client_reads_in_place)
{
	struct test_store t;
	struct ferry_plasma_client *a, *b;
	struct ferry_object_id id = oid(5);
	struct ferry_plasma_view v1, v2;

	store_spawn(&t, opts(64 * MIB));
	a = client_connect(&t);
	b = client_connect(&t);
	client_put(a, 5, 4096);
	ftest_assert_ok(ferry_plasma_client_get(b, &id, 1, 0, &v1));
	ftest_assert_ok(ferry_plasma_client_get(b, &id, 1, 0, &v2)); /* a second pin */
	ftest_assert_ptr_eq(v1.data, v2.data);
	ftest_assert_true(pattern_intact(v1.data, 4096, 5));
	ftest_assert_ok(ferry_plasma_client_release(b, &v1));
	ftest_assert_errno(ferry_plasma_client_release(b, &v1), -ENOENT); /* cleared */
	ftest_assert_ok(ferry_plasma_client_release(b, &v2));
	ferry_plasma_client_disconnect(b);
	ferry_plasma_client_disconnect(a);
	store_stop(&t);
}

FTEST(create_seal_abort_errors)
{
	struct test_store t;
	struct ferry_plasma_client *a, *b;
	struct ferry_object_id small = oid(1), large = oid(2), other = oid(3);
	void *d;

	store_spawn(&t, opts(16 * MIB));
	a = client_connect(&t);
	b = client_connect(&t);
	ftest_assert_ok(ferry_plasma_client_create(a, &small, 10, NULL, 0, &d));
	ftest_assert_ok(ferry_plasma_client_create(a, &large, 4 * MIB, NULL, 0, &d));
	ftest_assert_errno(ferry_plasma_client_create(a, &small, 10, NULL, 0, &d), -EEXIST);
	ftest_assert_errno(ferry_plasma_client_create(b, &large, 4 * MIB, NULL, 0, &d), -EEXIST);
	ftest_assert_errno(ferry_plasma_client_create(b, &small, 4 * MIB, NULL, 0, &d), -EEXIST);
	ftest_assert_errno(ferry_plasma_client_create(a, &other, 17 * MIB, NULL, 0, &d), -E2BIG);
	ftest_assert_errno(ferry_plasma_client_create(a, &other, UINT64_MAX, "m", 1, &d), -E2BIG);
	ftest_assert_errno(ferry_plasma_client_seal(a, &other), -ENOENT);
	ftest_assert_errno(ferry_plasma_client_abort(a, &other), -ENOENT);
	ftest_assert_errno(ferry_plasma_client_seal(b, &small), -EPERM);
	ftest_assert_errno(ferry_plasma_client_abort(b, &large), -EPERM);
	ftest_assert_ok(ferry_plasma_client_seal(a, &small));
	ftest_assert_errno(ferry_plasma_client_seal(a, &small), -EALREADY);
	ftest_assert_errno(ferry_plasma_client_abort(a, &small), -ENOENT);
	ftest_assert_ok(ferry_plasma_client_abort(a, &large));
	ftest_assert_int_eq(ferry_plasma_client_contains(b, &large), 0);
	ftest_assert_ok(ferry_plasma_client_create(b, &large, 100, NULL, 0, &d)); /* free again */
	ftest_assert_ok(ferry_plasma_client_seal(b, &large));
	ferry_plasma_client_disconnect(b);
	ferry_plasma_client_disconnect(a);
	store_stop(&t);
}

FTEST(get_times_out_for_missing_objects)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id ids[2] = {oid(1), oid(2)};
	struct ferry_plasma_view v[2];

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	client_put(c, 1, 64);
	for (int64_t timeout = 0; timeout <= 20; timeout += 20) {
		ftest_assert_errno(ferry_plasma_client_get(c, ids, 2, timeout, v), -ETIMEDOUT);
		ftest_assert_int_eq(v[0].status, 0);
		ftest_assert_true(pattern_intact(v[0].data, 64, 1));
		ftest_assert_errno(v[1].status, -ETIMEDOUT);
		ftest_assert_ptr_null(v[1].data);
		ftest_assert_ok(ferry_plasma_client_release(c, &v[0]));
		ftest_assert_errno(ferry_plasma_client_release(c, &v[1]), -ENOENT);
	}
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

struct waiter {
	struct ferry_plasma_client *c; /* client to get with */
	uint32_t n;		       /* object */
	uint64_t size;		       /* its size */
};

static void *wait_and_check(void *arg)
{
	struct waiter *w = arg;

	client_check(w->c, w->n, w->size, -1);
	return NULL;
}

/* The object exists (being created) before the get starts, so the get must wait for its seal:
 * no polling, the seal's notice wakes it. */
FTEST(get_waits_for_the_seal)
{
	static const uint64_t sizes[] = {100, 2 * MIB};
	struct test_store t;
	struct ferry_plasma_client *a, *b;

	store_spawn(&t, opts(16 * MIB));
	a = client_connect(&t);
	b = client_connect(&t);
	for (uint32_t n = 0; n < 2; n++) {
		struct waiter w = {b, n, sizes[n]};
		struct ferry_object_id id = oid(n);
		pthread_t th;
		void *d;

		ftest_assert_ok(ferry_plasma_client_create(a, &id, sizes[n], &n, sizeof(n), &d));
		ftest_assert_int_eq(pthread_create(&th, NULL, wait_and_check, &w), 0);
		fill_pattern(d, sizes[n], n);
		ftest_assert_ok(ferry_plasma_client_seal(a, &id));
		ftest_assert_int_eq(pthread_join(th, NULL), 0);
	}
	ferry_plasma_client_disconnect(b);
	ferry_plasma_client_disconnect(a);
	store_stop(&t);
}

FTEST(wait_counts_sealed_objects)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id ids[3] = {oid(1), oid(2), oid(3)};
	bool ready[3];

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	client_put(c, 1, 10);
	client_put(c, 3, 10);
	ftest_assert_int_eq(ferry_plasma_client_wait(c, ids, 3, 2, -1, ready), 2);
	ftest_assert_true(ready[0] && !ready[1] && ready[2]);
	ftest_assert_int_eq(ferry_plasma_client_wait(c, ids, 3, 0, 10, ready), 2);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(delete_waits_for_the_last_pin)
{
	struct test_store t;
	struct ferry_plasma_client *a, *b;
	struct ferry_object_id ids[3] = {oid(1), oid(2), oid(3)};
	struct ferry_plasma_view v;
	int st[3];
	void *d;

	store_spawn(&t, opts(16 * MIB));
	a = client_connect(&t);
	b = client_connect(&t);
	client_put(a, 1, MIB);
	ftest_assert_ok(ferry_plasma_client_create(a, &ids[2], 10, NULL, 0, &d));
	ftest_assert_ok(ferry_plasma_client_get(b, ids, 1, 0, &v));
	ftest_assert_errno(ferry_plasma_client_delete(a, ids, 3, st), -ENOENT);
	ftest_assert_int_eq(st[0], 0);
	ftest_assert_errno(st[1], -ENOENT);
	ftest_assert_errno(st[2], -EBUSY);
	ftest_assert_int_eq(ferry_plasma_client_contains(a, &ids[0]), 0);
	ftest_assert_true(pattern_intact(v.data, MIB, 1)); /* still readable by its pinner */
	ftest_assert_uint_eq(client_stats(a).deferred_deletes, 1);
	ftest_assert_ok(ferry_plasma_client_release(b, &v)); /* the last pin: freed now */
	ftest_assert_uint_eq(client_stats(a).deferred_deletes, 0);
	ferry_plasma_client_disconnect(b);
	ferry_plasma_client_disconnect(a);
	store_stop(&t);
}

FTEST(evict_frees_secondary_copies)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id id;
	uint64_t freed;
	void *d;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	for (uint32_t n = 0; n < 4; n++) {
		id = oid(n);
		ftest_assert_ok(ferry_plasma_client_create_ex(c, &id, MIB, NULL, 0,
							      FERRY_PLASMA_CREATE_SECONDARY, &d));
		ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	}
	client_put(c, 9, MIB); /* a primary: not evicted */
	ftest_assert_int_eq(ferry_plasma_client_evict(c, 2 * MIB, &freed), 2);
	ftest_assert_uint_eq(freed, 2 * MIB);
	ftest_assert_uint_eq(client_stats(c).evicted_objects, 2);
	ftest_assert_int_eq(ferry_plasma_client_evict(c, 64 * MIB, &freed), 2);
	id = oid(9);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &id), 1);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* The chunk (1 + index) entry @n lives in, or 0: made through the store. */
static uint32_t chunk_of(struct ferry_plasma_client *c, uint32_t n)
{
	struct ferry_object_id id = oid(n);
	struct ferry__plasma_object o;

	ftest_assert_int_gt(ferry__plasma_index_find(&c->ix, &id, &o), 0);
	return c->ix.ext[o.index].chunk;
}

/* Create secondary copy @n of @size bytes, filled with its pattern; @seal: seal it too. */
static void put_secondary(struct ferry_plasma_client *c, uint32_t n, uint64_t size, bool seal)
{
	struct ferry_object_id id = oid(n);
	void *d;

	ftest_assert_ok(ferry_plasma_client_create_ex(c, &id, size, &n, sizeof(n),
						      FERRY_PLASMA_CREATE_SECONDARY, &d));
	fill_pattern(d, size, n);
	if (seal)
		ftest_assert_ok(ferry_plasma_client_seal(c, &id));
}

/* Small secondaries are made in the client's chunk (no round trip) and stay evictable: the
 * seal notice lists them. A primary in the same chunk is not evicted. */
FTEST(small_secondaries_live_in_the_chunk_and_are_evicted)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	uint64_t freed;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	for (uint32_t n = 0; n < 3; n++)
		put_secondary(c, n, 1000, true);
	client_put(c, 9, 1000);
	for (uint32_t n = 0; n < 3; n++) {
		ftest_assert_uint_ne(chunk_of(c, n), 0);
		client_check(c, n, 1000, 0);
	}
	ftest_assert_uint_ne(chunk_of(c, 9), 0);
	ftest_assert_uint_eq(client_stats(c).evicted_objects, 0);
	/* Chunk memory comes back when the chunk drains, not per object: 0 bytes freed now. */
	ftest_assert_int_eq(ferry_plasma_client_evict(c, 64 * MIB, &freed), 3);
	ftest_assert_uint_eq(client_stats(c).evicted_objects, 3);
	for (uint32_t n = 0; n < 3; n++) {
		struct ferry_object_id id = oid(n);

		ftest_assert_int_eq(ferry_plasma_client_contains(c, &id), 0);
	}
	client_check(c, 9, 1000, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* Secondary @n (100 B, in the chunk) sealed in the index, its notice held back: the return
 * of seal_end (1: the first held). */
static int seal_later(struct ferry_plasma_client *c, uint32_t n)
{
	struct ferry_object_id id = oid(n);
	uint32_t gen;

	put_secondary(c, n, 100, false);
	ftest_assert_int_eq(ferry__plasma_client_seal_begin(c, &id, &gen), 1);
	return ferry__plasma_client_seal_end(c, &id, gen, true);
}

/* The object manager's loop holds pulled copies' seal notices back (one store wake-up per
 * burst): readers here see the copies at once through the index; the store hears of them at
 * a flush, after 64, or before this client's next request (in order: an evict sent after them
 * finds them sealed). With someone waiting in the store for a seal, begin says "now" (2). */
FTEST(held_back_seal_notices_reach_the_store_in_order)
{
	struct test_store t;
	struct ferry_plasma_client *c, *other;
	struct waiter w;
	pthread_t th;
	uint64_t freed;
	uint32_t gen;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	other = client_connect(&t);
	ftest_assert_int_eq(seal_later(c, 0), 1);
	ftest_assert_int_eq(seal_later(c, 1), 0);
	ftest_assert_int_eq(seal_later(c, 2), 0);
	for (uint32_t n = 0; n < 3; n++)
		client_check(other, n, 100, 0);
	/* Another client's evict finds none evictable yet; this client's goes after them. */
	ftest_assert_int_eq(ferry_plasma_client_evict(other, 64 * MIB, &freed), 0);
	ftest_assert_int_eq(ferry_plasma_client_evict(c, 64 * MIB, &freed), 3);

	ftest_assert_int_eq(seal_later(c, 3), 1);
	ftest_assert_int_eq(seal_later(c, 4), 0);
	ftest_assert_int_eq(ferry_plasma_client_evict(other, 64 * MIB, &freed), 0);
	ftest_assert_ok(ferry__plasma_client_flush(c, true));
	ftest_assert_int_eq(ferry_plasma_client_evict(other, 64 * MIB, &freed), 2);

	/* The 64th held notice sends them all (a chunk refill would have sent them too: 64
	 * small ones fit the chunk). */
	for (uint32_t n = 10; n < 10 + 63; n++)
		ftest_assert_int_eq(seal_later(c, n), n == 10);
	ftest_assert_int_eq(ferry_plasma_client_evict(other, 64 * MIB, &freed), 0);
	ftest_assert_int_eq(seal_later(c, 73), 0);
	ftest_assert_uint_eq(c->later_count, 0);
	ftest_assert_uint_eq(c->later_len, 0);
	ftest_assert_ok(ferry_plasma_client_stats(c, &(struct ferry_plasma_stats){0}));
	ftest_assert_int_eq(ferry_plasma_client_evict(other, 64 * MIB, &freed), 64);

	/* A getter waits in the store: the notice must go now. */
	w = (struct waiter){other, 100, 1000};
	ftest_assert_int_eq(pthread_create(&th, NULL, wait_and_check, &w), 0);
	while (atomic_load(&c->ix.hdr->seal_waiters) == 0)
		usleep(1000);
	put_secondary(c, 100, 1000, false);
	{
		struct ferry_object_id id = oid(100);

		ftest_assert_int_eq(ferry__plasma_client_seal_begin(c, &id, &gen), 2);
		ftest_assert_ok(ferry__plasma_client_seal_end(c, &id, gen, false));
	}
	ftest_assert_int_eq(pthread_join(th, NULL), 0);
	ferry_plasma_client_disconnect(other);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* Seals @n secondaries (ids from 1000) with their notices held back; done when all are. */
struct sealer {
	struct ferry_plasma_client *c;
	uint32_t n;
	atomic_int done;
};

static void *seal_all(void *arg)
{
	struct sealer *s = arg;

	for (uint32_t n = 0; n < s->n; n++) {
		struct ferry_object_id id = oid(1000 + n);
		uint32_t gen;

		if (ferry__plasma_client_seal_begin(s->c, &id, &gen) == 1)
			(void)ferry__plasma_client_seal_end(s->c, &id, gen, true);
	}
	atomic_store(&s->done, 1);
	return NULL;
}

/* The object manager's client sends seal notices from the node's loop thread, which also
 * serves the store: a notice must never wait for a socket only that thread drains. With the
 * store stopped and the socket's buffer small, every seal still returns; the notices the
 * socket did not take stay held, in order, and reach the store at the next flushes. */
FTEST(seal_notices_never_wait_for_a_store_that_does_not_read)
{
	struct test_store t;
	struct ferry_plasma_client *c, *other;
	struct sealer s = {.n = 1500};
	int small = 4096, r, done;
	uint64_t freed;
	pthread_t th;

	store_spawn(&t, opts(64 * MIB));
	c = client_connect(&t);
	other = client_connect(&t);
	ferry__plasma_client_notices_nonblocking(c);
	ftest_assert_int_eq(setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	for (uint32_t n = 0; n < s.n; n++)
		put_secondary(c, 1000 + n, 100, false);
	s.c = c;
	ftest_assert_int_eq(kill(t.pid, SIGSTOP), 0);
	ftest_assert_int_eq(pthread_create(&th, NULL, seal_all, &s), 0);
	for (int ms = 0; ms < 10000 && !atomic_load(&s.done); ms++)
		usleep(1000);
	done = atomic_load(&s.done);
	ftest_assert_int_eq(kill(t.pid, SIGCONT), 0);
	ftest_assert_int_eq(pthread_join(th, NULL), 0);
	ftest_assert_true(done);	       /* else a seal waited for the stopped store */
	ftest_assert_uint_gt(c->later_len, 0); /* the socket really was full */
	while ((r = ferry__plasma_client_flush(c, false)) == -EAGAIN)
		usleep(1000);
	ftest_assert_ok(r);
	ftest_assert_ok(ferry__plasma_client_flush(c, true));
	ftest_assert_int_eq(ferry_plasma_client_evict(other, 64 * MIB, &freed), (int)s.n);
	ferry_plasma_client_disconnect(other);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* Store memory filled with small secondaries spread over many chunks: a large primary still
 * fits, because evicting them drains the retired chunks and frees them. */
FTEST(small_secondaries_in_chunks_make_room_under_pressure)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	uint32_t n;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	for (n = 0; n < 3000; n++)
		put_secondary(c, n, 4000, true);
	ftest_assert_uint_gt(client_stats(c).allocated_bytes, 10 * MIB);
	client_put(c, 100000, 8 * MIB);
	client_check(c, 100000, 8 * MIB, 0);
	ftest_assert_uint_gt(client_stats(c).evicted_objects, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* Half-write a small secondary in the chunk, then die. */
static void die_mid_create(const struct test_store *t, uint32_t n)
{
	struct ferry_plasma_client *c = client_connect(t);
	struct ferry_object_id id = oid(n);
	void *d;

	ftest_assert_ok(ferry_plasma_client_create_ex(c, &id, 4000, NULL, 0,
						      FERRY_PLASMA_CREATE_SECONDARY, &d));
	ftest_assert_uint_ne(chunk_of(c, n), 0);
	memset(d, 0xab, 2000);
	_exit(0);
}

/* Seal a small secondary in shared memory only (no notice), then die. */
static void seal_silently_and_die(const struct test_store *t, uint32_t n)
{
	struct ferry_plasma_client *c = client_connect(t);
	struct ferry_object_id id = oid(n);
	struct ferry__plasma_object *o;

	put_secondary(c, n, 1000, false);
	o = ferry__hashmap_get(&c->creating, &id);
	ftest_assert_ptr_notnull(o);
	ftest_assert_int_ge(ferry__plasma_index_seal(&c->ix, c->slot, o), 0);
	_exit(0);
}

static void run_child(void (*fn)(const struct test_store *t, uint32_t n),
		      const struct test_store *t, uint32_t n)
{
	int status;
	pid_t pid = fork();

	ftest_assert_int_ge(pid, 0);
	if (pid == 0)
		fn(t, n);
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A client that dies mid-create of a small secondary leaves nothing behind (the ID is free
 * again, nothing is counted); one that dies between its seal and its notice leaves a sealed
 * copy that the store still lists for eviction. */
FTEST(a_client_dying_with_small_secondaries_in_its_chunk)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(1);
	uint64_t freed;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	run_child(die_mid_create, &t, 1);
	while (client_stats(c).clients != 2) /* the store and c: the child's slot is reclaimed */
		usleep(1000);
	ftest_assert_uint_eq(client_stats(c).objects, 0);
	ftest_assert_int_eq(ferry_plasma_client_contains(c, &id), 0);
	put_secondary(c, 1, 4000, true); /* the ID is free again */
	client_check(c, 1, 4000, 0);

	run_child(seal_silently_and_die, &t, 2);
	while (client_stats(c).clients != 2)
		usleep(1000);
	client_check(c, 2, 1000, 0);
	ftest_assert_int_eq(ferry_plasma_client_evict(c, 64 * MIB, &freed), 2);
	ftest_assert_uint_eq(client_stats(c).objects, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(a_full_store_without_spilling_gives_enospc)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(100);
	void *d;
	int r = 0;

	store_spawn(&t, opts(8 * MIB));
	c = client_connect(&t);
	for (uint32_t n = 0; r == 0; n++) {
		id = oid(n);
		r = ferry_plasma_client_create(c, &id, MIB, NULL, 0, &d);
		if (r == 0)
			ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	}
	ftest_assert_errno(r, -ENOSPC);
	ftest_assert_errno(ferry_plasma_client_create_ex(c, &id, MIB, NULL, 0,
							 FERRY_PLASMA_CREATE_NO_EVICT, &d),
			   -ENOSPC);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(spilled_objects_come_back_byte_exact)
{
	struct ferry__plasma_server_opts o = opts(8 * MIB);
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_stats st;

	o.spill_dir = ftest_tmpdir();
	store_spawn(&t, o);
	c = client_connect(&t);
	/* Three times the memory, small and large: spills as it goes. */
	for (uint32_t n = 0; n < 24; n++)
		client_put(c, n, n % 2 ? MIB : 1000 + n);
	for (uint32_t round = 0; round < 2; round++)
		for (uint32_t n = 0; n < 24; n++)
			client_check(c, n, n % 2 ? MIB : 1000 + n, 0);
	st = client_stats(c);
	ftest_assert_uint_gt(st.spilled_total_objects, 0);
	ftest_assert_uint_gt(st.restored_objects, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(list_shows_objects_in_id_order)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_object_info *objs;
	struct ferry_object_id id = oid(7);
	size_t n;
	void *d;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	for (uint32_t k = 0; k < 5; k++)
		client_put(c, k, 100 * k);
	ftest_assert_ok(ferry_plasma_client_create(c, &id, 10, NULL, 0, &d));
	ftest_assert_ok(ferry_plasma_client_list(c, false, &objs, &n));
	ftest_assert_uint_eq(n, 5);
	for (size_t k = 1; k < n; k++)
		ftest_assert_int_lt(ferry_object_id_cmp(&objs[k - 1].id, &objs[k].id), 0);
	for (size_t k = 0; k < n; k++) {
		ftest_assert_int_eq(objs[k].state, FERRY_PLASMA_OBJECT_SEALED);
		ftest_assert_true(objs[k].primary);
		ftest_assert_uint_eq(objs[k].metadata_size, 4);
	}
	ferry_plasma_list_free(objs);
	ftest_assert_ok(ferry_plasma_client_list(c, true, &objs, &n));
	ftest_assert_uint_eq(n, 6);
	ferry_plasma_list_free(objs);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(disconnect_gives_pins_and_unsealed_objects_back)
{
	struct test_store t;
	struct ferry_plasma_client *a, *b;
	struct ferry_object_id ids[3] = {oid(1), oid(2), oid(3)};
	struct ferry_plasma_view v;
	void *d;

	store_spawn(&t, opts(16 * MIB));
	a = client_connect(&t);
	b = client_connect(&t);
	client_put(b, 1, MIB);
	ftest_assert_ok(ferry_plasma_client_get(a, ids, 1, 0, &v));
	ftest_assert_ok(ferry_plasma_client_create(a, &ids[1], 10, NULL, 0, &d));
	ftest_assert_ok(ferry_plasma_client_create(a, &ids[2], 2 * MIB, NULL, 0, &d));
	ftest_assert_ok(ferry_plasma_client_delete(b, ids, 1, NULL));
	ferry_plasma_client_disconnect(a); /* holding a pin and two unsealed objects */
	ftest_assert_uint_eq(client_stats(b).objects, 0);
	ftest_assert_uint_eq(client_stats(b).clients, 2); /* the store and b */
	ferry_plasma_client_disconnect(b);
	store_stop(&t);
}

/* A live process whose connection the store closed (here: for a malformed request) loses its
 * pins at once, but its slot is not given to anyone else while the process runs. */
FTEST(a_cut_off_live_client_keeps_its_slot_out_of_use)
{
	uint8_t frame[FERRY_FRAME_HEADER_SIZE + 8];
	struct test_store t;
	struct ferry_plasma_client *a, *b, *c;
	struct ferry_object_id id = oid(1);
	struct ferry_plasma_view v;
	uint32_t slot_a;

	store_spawn(&t, opts(16 * MIB));
	a = client_connect(&t);
	slot_a = a->slot;
	client_put(a, 1, 1000);
	ftest_assert_ok(ferry_plasma_client_get(a, &id, 1, 0, &v));
	ferry__frame_header_encode(frame, FERRY__WIRE_MSG_PLASMA_CREATE, 8);
	memset(frame + FERRY_FRAME_HEADER_SIZE, 0xee, 8);
	ftest_assert_int_eq(write(a->fd, frame, sizeof(frame)), sizeof(frame));
	b = client_connect(&t);
	while (client_stats(b).clients != 2) /* the store and b: a's slot is dead */
		usleep(1000);
	ftest_assert_ok(ferry_plasma_client_delete(b, &id, 1, NULL));
	ftest_assert_uint_eq(client_stats(b).deferred_deletes, 0); /* a's pin went */
	c = client_connect(&t);
	ftest_assert_uint_ne(c->slot, slot_a);
	ftest_assert_uint_ne(b->slot, slot_a);
	ferry_plasma_client_disconnect(c);
	ferry_plasma_client_disconnect(b);
	ferry_plasma_client_disconnect(a); /* its socket is closed: just frees it */
	store_stop(&t);
}

FTEST(many_small_puts_refill_the_chunk)
{
	struct test_store t;
	struct ferry_plasma_client *c;

	store_spawn(&t, opts(16 * MIB));
	c = client_connect(&t);
	for (uint32_t n = 0; n < 2000; n++)
		client_put(c, n, 500);
	for (uint32_t n = 0; n < 2000; n += 7)
		client_check(c, n, 500, 0);
	ftest_assert_uint_eq(client_stats(c).objects, 2000);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

struct worker {
	struct ferry_plasma_client *c; /* shared client */
	uint32_t base;		       /* first object number */
};

static void *put_get_loop(void *arg)
{
	struct worker *w = arg;

	for (uint32_t n = w->base; n < w->base + 200; n++) {
		client_put(w->c, n, n % 3 ? 64 : 100 * KIB);
		client_check(w->c, n, n % 3 ? 64 : 100 * KIB, 0);
	}
	return NULL;
}

/* More pins than a client slot has records: the rest are held by the store, without a cap of
 * its own slot's records either. The listing takes two pages. */
FTEST(thousands_of_pins_through_the_store)
{
	enum { N = 5000 };
	struct ferry__plasma_server_opts o = opts(16 * MIB);
	static struct ferry_plasma_view v[N];
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_object_info *objs;
	struct ferry_object_id id;
	uint64_t pins = 0;
	size_t count;

	o.max_objects = 2 * N;
	store_spawn(&t, o);
	c = client_connect(&t);
	for (uint32_t n = 0; n < N; n++)
		client_put(c, n, 8);
	for (uint32_t n = 0; n < N; n++) {
		id = oid(n);
		ftest_assert_ok(ferry_plasma_client_get(c, &id, 1, 0, &v[n]));
		ftest_assert_true(pattern_intact(v[n].data, 8, n));
	}
	ftest_assert_ok(ferry_plasma_client_list(c, false, &objs, &count));
	ftest_assert_uint_eq(count, N);
	for (size_t k = 0; k < count; k++) {
		pins += objs[k].pin_count;
		if (k)
			ftest_assert_int_lt(memcmp(objs[k - 1].id.bytes, objs[k].id.bytes,
						   sizeof(objs[k].id.bytes)),
					    0);
	}
	ftest_assert_uint_eq(pins, N);
	ferry_plasma_list_free(objs);
	/* Deleted while pinned: each goes with its last release, store-held or not. */
	for (uint32_t n = 0; n < N; n++) {
		id = oid(n);
		ftest_assert_ok(ferry_plasma_client_delete(c, &id, 1, NULL));
	}
	ftest_assert_uint_eq(client_stats(c).deferred_deletes, N);
	for (uint32_t n = 0; n < N; n++)
		ftest_assert_ok(ferry_plasma_client_release(c, &v[n]));
	ftest_assert_uint_eq(client_stats(c).deferred_deletes, 0);
	ftest_assert_uint_eq(client_stats(c).objects, 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(threads_share_one_client)
{
	struct test_store t;
	struct ferry_plasma_client *c;
	struct worker w[4];
	pthread_t th[4], waiter_th;
	struct waiter late;

	store_spawn(&t, opts(64 * MIB));
	c = client_connect(&t);
	/* One thread blocks in a get meanwhile: the others' requests must not wait for it. */
	late = (struct waiter){c, 9999, 10};
	ftest_assert_int_eq(pthread_create(&waiter_th, NULL, wait_and_check, &late), 0);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){c, (uint32_t)i * 1000};
		ftest_assert_int_eq(pthread_create(&th[i], NULL, put_get_loop, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		ftest_assert_int_eq(pthread_join(th[i], NULL), 0);
	client_put(c, 9999, 10);
	ftest_assert_int_eq(pthread_join(waiter_th, NULL), 0);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* Objects of varied small sizes from several threads of one client with a tiny chunk: the
 * chunk fills and is replaced hundreds of times while other threads create in it. The store
 * retires the old chunk when it grants the next one; a create still reserving space in it then
 * must not see it freed under its object (regression: a live object's bytes were overwritten
 * by the next chunk's objects, and the store logged "names chunk ... it is not in"). */
struct chunk_churner {
	struct ferry_plasma_client *c; /* shared client */
	uint32_t base;		       /* first object number */
};

#define CHURN_OBJECTS 1500
#define CHURN_KEEP 24

static uint64_t churn_size(uint32_t n)
{
	return 64 + (n * 37u) % 3000u;
}

static void *chunk_churn(void *arg)
{
	struct chunk_churner *w = arg;

	for (uint32_t i = 0; i < CHURN_OBJECTS; i++) {
		uint32_t n = w->base + i;

		client_put(w->c, n, churn_size(n));
		if (i >= CHURN_KEEP) { /* a ring of live objects; the oldest goes */
			struct ferry_object_id old = oid(n - CHURN_KEEP);

			client_check(w->c, n - CHURN_KEEP, churn_size(n - CHURN_KEEP), 0);
			ftest_assert_ok(ferry_plasma_client_delete(w->c, &old, 1, NULL));
		}
	}
	for (uint32_t n = w->base + CHURN_OBJECTS - CHURN_KEEP; n < w->base + CHURN_OBJECTS; n++)
		client_check(w->c, n, churn_size(n), 0);
	return NULL;
}

FTEST(threads_creating_locally_while_the_chunk_is_replaced)
{
	struct ferry_plasma_connect_opts co = {.name = "churn", .chunk_bytes = 16 * KIB};
	struct chunk_churner w[4];
	struct ferry_plasma_client *c;
	struct test_store t;
	pthread_t th[4];

	store_spawn(&t, opts(32 * MIB));
	ftest_assert_ok(ferry_plasma_client_connect(t.path, &co, &c));
	/* A race: several rounds make a miss unlikely (without the fix, about half fail). */
	for (uint32_t round = 0; round < 6; round++) {
		for (uint32_t i = 0; i < 4; i++) {
			w[i] = (struct chunk_churner){c, round * 1000000 + i * 100000};
			ftest_assert_int_eq(pthread_create(&th[i], NULL, chunk_churn, &w[i]), 0);
		}
		for (int i = 0; i < 4; i++)
			ftest_assert_int_eq(pthread_join(th[i], NULL), 0);
	}
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* One pass of the API; every step may fail with -ENOMEM, and then must have cleaned up. */
static int api_pass(const struct test_store *t)
{
	struct ferry_object_id small = oid(1), large = oid(2);
	struct ferry_object_id ids[2] = {small, large};
	struct ferry_plasma_client *c;
	struct ferry_plasma_view v[2];
	void *d;
	int r;

	r = ferry_plasma_client_connect(t->path, NULL, &c);
	if (r < 0)
		return r;
	r = ferry_plasma_client_create(c, &small, 100, "meta", 4, &d);
	if (r == 0)
		r = ferry_plasma_client_seal(c, &small);
	if (r == 0)
		r = ferry_plasma_client_create(c, &large, 2 * MIB, NULL, 0, &d);
	if (r == 0)
		r = ferry_plasma_client_seal(c, &large);
	if (r == 0)
		r = ferry_plasma_client_get(c, ids, 2, 0, v);
	if (r == 0) {
		ferry_plasma_client_release(c, &v[0]);
		ferry_plasma_client_release(c, &v[1]);
	}
	if (r == 0)
		r = ferry_plasma_client_delete(c, ids, 2, NULL);
	ferry_plasma_client_disconnect(c);
	return r;
}

FTEST(allocation_failures_are_clean_through_the_api)
{
	struct test_store t;
	long live = ferry__alloc_live(), k;
	int r, failures = 0;

	store_spawn(&t, opts(16 * MIB));
	for (k = 0;; k++) {
		bool fired;

		ferry__alloc_fail_after(k);
		r = api_pass(&t);
		fired = !ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		ftest_assert_int_eq(ferry__alloc_live(), live);
		if (!fired)
			break;
		failures++;
		/* A failed create may leave its object (sealed or aborted by the store): any
		 * other error than these would be a bug. */
		ftest_assert_true(r == 0 || r == -ENOMEM || r == -EEXIST || r == -ENOENT);
		if (r < 0) {
			/* Start the next pass from an empty store. */
			struct ferry_plasma_client *c = client_connect(&t);
			struct ferry_object_id ids[2] = {oid(1), oid(2)};

			ferry_plasma_client_delete(c, ids, 2, NULL);
			ferry_plasma_client_disconnect(c);
		}
	}
	ftest_assert_ok(r);
	ftest_assert_int_gt(failures, 5);
	store_stop(&t);
}
