/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Restores of spilled objects in the background (issue 22): the server's loop never reads a
 * spill file itself. A test hook holds the disk helper inside the read (it sends a byte and
 * waits for one back), so each test knows the restore is in flight without timing: gets of it
 * stay pending while the loop keeps serving others, two gets cause one read, a failed read
 * fails the get and leaves the object spilled, a delete or the store's stop meanwhile leaves
 * nothing behind.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "client_test.h"
#include "common/loop.h"
#include "plasma/server_int.h"
#include "plasma/spill.h"

#define MIB (1ull << 20)
#define OBJECTS 12u /* of MIB each, in an 8 MiB store: the first ones spill */

struct fixture {
	struct ferry__plasma_server *srv;
	struct ferry_plasma_client *c;
	struct ferry__plasma_spill *sp;
	char path[256];
	char dir[256];
	int hold[2]; /* [0] the test's end, [1] the disk helper's */
};

static void setup(struct fixture *f)
{
	struct ferry__plasma_server_opts o = {
		.socket_path = f->path,
		.memory_bytes = 8 * MIB,
		.max_objects = 1024,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT,
		.spill_dir = f->dir,
		.spill_threshold_pct = 100, /* spilled by creates only: nothing moves on a tick */
	};

	snprintf(f->path, sizeof(f->path), "%s/s.sock", ftest_tmpdir());
	snprintf(f->dir, sizeof(f->dir), "%s/spill", ftest_tmpdir());
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->hold), 0);
	ftest_assert_ok(ferry__plasma_server_start_new(&o, &f->srv));
	f->sp = ferry__plasma_store_spill_area(ferry__plasma_server_store(f->srv));
	ftest_assert_ok(ferry_plasma_client_connect(f->path, NULL, &f->c));
	for (uint32_t n = 0; n < OBJECTS; n++)
		client_put(f->c, n, MIB);
	ftest_assert_uint_gt(client_stats(f->c).spilled_objects, 1);
}

static void teardown(struct fixture *f)
{
	if (f->c)
		ferry_plasma_client_disconnect(f->c);
	ferry__plasma_server_destroy(f->srv);
	close(f->hold[0]);
	close(f->hold[1]);
}

/* A read of the index on the store's loop thread, which writes it: the test's own thread
 * would race with a restore being published (the index is read lock-free by clients in other
 * processes, which TSan does not see). */
struct probe {
	struct fixture *f;
	struct ferry_object_id id;
};

static int probe_on_loop(void *arg)
{
	struct probe *p = arg;
	struct ferry__plasma_object o;

	return ferry__plasma_index_find(p->f->srv->ix, &p->id, &o);
}

static int state_of(struct fixture *f, uint32_t n)
{
	struct probe p = {.f = f, .id = oid(n)};

	return ferry__loop_call(f->srv->loop, probe_on_loop, &p);
}

/* The @k-th object (from 0) found in @state. */
static uint32_t find(struct fixture *f, int state, uint32_t k)
{
	for (uint32_t n = 0; n < OBJECTS; n++)
		if (state_of(f, n) == state && k-- == 0)
			return n;
	FTEST__FAIL("no such object");
	return 0;
}

/* The next restore waits in its read until released (after the caller's next request). */
static void hold_next_read(struct fixture *f)
{
	ferry__plasma_spill_inject_read_hold(f->sp, f->hold[1]);
}

static void wait_in_read(struct fixture *f)
{
	char b;

	ftest_assert_int_eq(read(f->hold[0], &b, 1), 1);
}

static void release_read(struct fixture *f)
{
	char b = 1;

	ftest_assert_int_eq(write(f->hold[0], &b, 1), 1);
}

/* A get in a thread of its own, through a client of its own. */
struct getter {
	struct fixture *f;
	uint32_t n;	    /* object */
	int64_t timeout_ms; /* of the get */
	int status;	    /* out: the view's status (1: no answer: the store went) */
	pthread_t thread;
};

static void *getter_main(void *arg)
{
	struct getter *g = arg;
	struct ferry_object_id id = oid(g->n);
	struct ferry_plasma_client *c;
	struct ferry_plasma_view v = {0};
	int r;

	g->status = 1;
	if (ferry_plasma_client_connect(g->f->path, NULL, &c) < 0)
		return NULL;
	r = ferry_plasma_client_get(c, &id, 1, g->timeout_ms, &v);
	if (r == 0 || r == -ETIMEDOUT)
		g->status = v.status;
	if (v.status == 0) {
		if (!pattern_intact(v.data, MIB, g->n))
			g->status = -EBADMSG;
		ferry_plasma_client_release(c, &v);
	}
	ferry_plasma_client_disconnect(c);
	return NULL;
}

static void getter_start(struct getter *g, struct fixture *f, uint32_t n, int64_t timeout_ms)
{
	*g = (struct getter){.f = f, .n = n, .timeout_ms = timeout_ms};
	ftest_assert_int_eq(pthread_create(&g->thread, NULL, getter_main, g), 0);
}

static int getter_join(struct getter *g)
{
	ftest_assert_int_eq(pthread_join(g->thread, NULL), 0);
	return g->status;
}

/* Parked gets, as the index counts them. */
static void wait_getters(struct fixture *f, uint32_t n)
{
	while (atomic_load(&f->srv->ix->hdr->seal_getters) < n)
		usleep(1000);
}

/* While the disk helper reads one object back, the loop answers another client; a second get
 * of the object joins the first restore (one read), and both complete once it is published. */
FTEST(gets_of_a_spilled_object_wait_for_one_background_read)
{
	struct fixture f;
	struct ferry__plasma_spill_stats st;
	struct getter a, b;
	uint32_t x, kept;

	setup(&f);
	x = find(&f, FERRY__PLASMA_SPILLED, 0);
	hold_next_read(&f);
	getter_start(&a, &f, x, -1);
	wait_in_read(&f);
	/* The loop is free: another client's get, through the store, is answered (one in memory
	 * now: making room for the restore spilled others). */
	kept = find(&f, FERRY__PLASMA_SEALED, 0);
	client_check(f.c, kept, MIB, 0);
	ftest_assert_int_eq(state_of(&f, x), FERRY__PLASMA_SPILLED);
	getter_start(&b, &f, x, -1);
	wait_getters(&f, 2);
	release_read(&f);
	ftest_assert_int_eq(getter_join(&a), 0);
	ftest_assert_int_eq(getter_join(&b), 0);
	ferry_plasma_client_disconnect(f.c);
	f.c = NULL;
	ferry__plasma_server_stop(f.srv); /* the loop's thread is gone: its figures are ours */
	ferry__plasma_spill_stats(f.sp, &st);
	/* One read of the object asked for (the rest read along, ahead, once). */
	ftest_assert_uint_eq(st.read_bytes - st.ahead_bytes, MIB + sizeof(uint32_t));
	teardown(&f);
}

/* A get of a spilled object with no time to wait still gets it (spilled counts as there). */
FTEST(a_get_with_no_timeout_waits_for_the_restore_it_starts)
{
	struct fixture f;

	setup(&f);
	client_check(f.c, find(&f, FERRY__PLASMA_SPILLED, 0), MIB, 0);
	teardown(&f);
}

/* A read that fails fails the gets waiting for it with its -errno; the object stays spilled
 * and a later get reads it back. */
FTEST(a_failed_restore_fails_its_gets_and_the_object_stays_spilled)
{
	struct fixture f;
	struct getter a;
	uint32_t x;

	setup(&f);
	x = find(&f, FERRY__PLASMA_SPILLED, 0);
	ferry__plasma_spill_inject(f.sp, 0, -EIO);
	hold_next_read(&f);
	getter_start(&a, &f, x, -1);
	wait_in_read(&f);
	release_read(&f);
	ftest_assert_int_eq(getter_join(&a), -EIO);
	ftest_assert_int_eq(state_of(&f, x), FERRY__PLASMA_SPILLED);
	client_check(f.c, x, MIB, -1);
	ftest_assert_int_eq(state_of(&f, x), FERRY__PLASMA_SEALED);
	teardown(&f);
}

/* Deleted while it is read back: the block goes back, the get waits for an object that is
 * gone (and times out), nothing leaks. */
FTEST(a_delete_while_restoring_leaves_nothing_behind)
{
	struct fixture f;
	struct ferry_object_id id;
	struct getter a;
	uint64_t allocated;
	uint32_t x;

	setup(&f);
	x = find(&f, FERRY__PLASMA_SPILLED, 0);
	id = oid(x);
	allocated = client_stats(f.c).allocated_bytes;
	hold_next_read(&f);
	getter_start(&a, &f, x, 200);
	wait_in_read(&f);
	ftest_assert_ok(ferry_plasma_client_delete(f.c, &id, 1, NULL));
	ftest_assert_int_eq(ferry_plasma_client_contains(f.c, &id), 0);
	release_read(&f);
	ftest_assert_int_eq(getter_join(&a), -ETIMEDOUT);
	/* The restore's blocks went back (make_room may have spilled others to find them). */
	ftest_assert_uint_le(client_stats(f.c).allocated_bytes, allocated);
	ftest_assert_int_eq(ferry_plasma_client_contains(f.c, &id), 0);
	teardown(&f);
}

/* The store stops with one restore being read and another queued behind it: both are
 * dropped, nothing leaks (ASan), the getters see the store go. */
FTEST(a_stop_while_restoring_leaves_nothing_behind)
{
	struct fixture f;
	struct getter a, b;
	uint32_t x, y;

	setup(&f);
	x = find(&f, FERRY__PLASMA_SPILLED, 0);
	y = find(&f, FERRY__PLASMA_SPILLED, 1);
	hold_next_read(&f);
	getter_start(&a, &f, x, -1);
	wait_in_read(&f);
	getter_start(&b, &f, y, -1);
	wait_getters(&f, 2);
	release_read(&f);
	ferry_plasma_client_disconnect(f.c);
	ferry__plasma_server_destroy(f.srv);
	getter_join(&a);
	getter_join(&b);
	close(f.hold[0]);
	close(f.hold[1]);
}

/* The loop-side get (the object manager's, for a peer's pull): -EBUSY while the restore is
 * read, then the object. Run on the server's loop. */
struct on_loop {
	struct fixture *f;
	struct ferry_plasma_client *c; /* in this process */
	uint32_t x;		       /* the spilled object */
	int first;		       /* get_on_loop's first answer */
	uint32_t busy;		       /* -EBUSY answers */
	atomic_int result;	       /* the last answer (1: none yet) */
};

static void loop_get(void *arg, int status)
{
	struct on_loop *l = arg;
	struct ferry_object_id id = oid(l->x);
	struct ferry_plasma_view v;
	int r;

	if (status)
		return;
	r = ferry__plasma_server_get_on_loop(l->f->srv, l->c, &id, &v);
	if (l->first == 1)
		l->first = r;
	if (r == -EBUSY) {
		l->busy++;
		ftest_assert_ok(ferry__loop_post(l->f->srv->loop, loop_get, l)); /* ask again */
		return;
	}
	if (r == 0) {
		if (!pattern_intact(v.data, MIB, l->x))
			r = -EBADMSG;
		ferry_plasma_client_release(l->c, &v);
	}
	atomic_store(&l->result, r);
}

FTEST(get_on_loop_says_ebusy_until_the_restore_is_published)
{
	struct fixture f;
	struct on_loop l = {.f = &f, .first = 1, .result = 1};

	setup(&f);
	l.c = f.c;
	l.x = find(&f, FERRY__PLASMA_SPILLED, 0);
	hold_next_read(&f);
	ftest_assert_ok(ferry__loop_post(f.srv->loop, loop_get, &l));
	wait_in_read(&f);
	ftest_assert_int_eq(atomic_load(&l.result), 1);
	release_read(&f);
	while (atomic_load(&l.result) == 1)
		usleep(1000);
	ftest_assert_int_eq(l.first, -EBUSY);
	ftest_assert_int_eq(atomic_load(&l.result), 0);
	ftest_assert_int_eq(state_of(&f, l.x), FERRY__PLASMA_SEALED);
	teardown(&f);
}
