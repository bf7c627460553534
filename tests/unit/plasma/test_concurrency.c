/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Several processes on one store: readers pin and check objects while the store evicts,
 * deletes and reuses their memory (a freed-while-pinned object would show poison or another
 * object's bytes); exact pin counts across processes; a killed client's pins, half-written
 * objects and chunk are taken back; a process that dies holding the writer lock; concurrent
 * creates of the same IDs from several processes stay unique.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plasma_test.h"

#define KIB (1ull << 10)

/* One-byte messages between the test and its children. */
struct chan {
	int fd[2]; /* pipe: read end, write end */
};

static void chan_open(struct chan *c)
{
	ftest_assert_int_eq(pipe(c->fd), 0);
}

static void chan_send(struct chan *c, int n)
{
	for (int i = 0; i < n; i++)
		if (write(c->fd[1], "x", 1) != 1)
			FTEST__FAIL("pipe write failed");
}

static void chan_recv(struct chan *c, int n)
{
	char b;

	for (int i = 0; i < n; i++)
		if (read(c->fd[0], &b, 1) != 1)
			FTEST__FAIL("pipe read failed");
}

/* Messages received without blocking. */
static int chan_poll(struct chan *c)
{
	int flags = fcntl(c->fd[0], F_GETFL), n = 0;
	char b;

	fcntl(c->fd[0], F_SETFL, flags | O_NONBLOCK);
	while (read(c->fd[0], &b, 1) == 1)
		n++;
	fcntl(c->fd[0], F_SETFL, flags);
	return n;
}

/* Children report failure through their exit status; ftest asserts in a child exit(1). */
static pid_t spawn(void (*fn)(void *arg, int k), void *arg, int k)
{
	pid_t pid = fork();

	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		fn(arg, k);
		_exit(0);
	}
	return pid;
}

static void expect_exit(pid_t pid, int code)
{
	int status;

	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), code);
}

/* ---- readers against eviction and deletion ---- */

enum { OBJECTS = 64, OBJ_SIZE = 2048, READERS = 3, ITERS = 30000, HELD = 4 };

struct churn {
	struct ferry__plasma_store *s;	    /* store (the parent's) */
	uint32_t slots[READERS];	    /* each reader's client slot */
	struct chan ready, go, pinned, end; /* phase changes */
};

static void reader(void *arg, int k)
{
	struct churn *t = arg;
	struct ferry__plasma_object g, held[HELD * READERS];
	unsigned seed = 1234u + (unsigned)k;
	uint32_t slot = t->slots[k];
	struct ferry_object_id id;
	struct view v;
	int got = 0;

	view_attach(t->s, &v);
	for (int i = 0; i < ITERS; i++) {
		uint32_t n = (uint32_t)rand_r(&seed) % OBJECTS;
		int r;

		id = oid(n);
		r = ferry__plasma_index_get(&v.ix, slot, &id, &g);
		if (r == -ENOENT || r == -EINPROGRESS || r == -EAGAIN)
			continue;
		ftest_assert_ok(r);
		ftest_assert_true(object_intact(&g, n));
		if (i % 7 == 0)
			sched_yield(); /* hold the pin while the store runs */
		ftest_assert_true(object_intact(&g, n));
		ftest_assert_int_ge(ferry__plasma_index_release(&v.ix, slot, &g), 0);
		got++;
	}
	ftest_log("reader %d: %d of %d gets pinned an object", k, got, ITERS);
	ftest_assert_int_gt(got, 0);
	chan_send(&t->ready, 1);
	/* Exact counts: reader k pins each of objects 0..HELD-1 k + 1 times. */
	chan_recv(&t->go, 1);
	for (uint32_t n = 0; n < HELD; n++) {
		id = oid(n);
		for (int p = 0; p <= k; p++)
			ftest_assert_ok(
				ferry__plasma_index_get(&v.ix, slot, &id, &held[n * READERS + p]));
	}
	chan_send(&t->pinned, 1);
	chan_recv(&t->end, 1);
	for (uint32_t n = 0; n < HELD; n++)
		for (int p = 0; p <= k; p++) {
			ftest_assert_true(object_intact(&held[n * READERS + p], n));
			ftest_assert_int_ge(
				ferry__plasma_index_release(&v.ix, slot, &held[n * READERS + p]),
				0);
		}
	view_detach(&v);
}

/* One random store action: delete, evict, recreate, or collect. */
static void churn_step(struct ferry__plasma_store *s, unsigned *seed)
{
	uint32_t n = (uint32_t)rand_r(seed) % OBJECTS;
	struct ferry_object_id id = oid(n);
	struct ferry__plasma_object o;
	int r;

	/* Mostly creates, so that most gets find their object: 1/8 delete, 1/8 evict, 1/2
	 * create (which evicts when the arena is full), 1/4 collect. */
	switch (rand_r(seed) % 8) {
	case 0:
		r = ferry__plasma_store_object_delete(s, &id);
		ftest_assert_true(r == 0 || r == 1 || r == -ENOENT);
		break;
	case 1:
		ferry__plasma_store_evict(s, (uint64_t)(rand_r(seed) % 2 + 1) * OBJ_SIZE, NULL);
		break;
	case 2:
	case 3:
	case 4:
	case 5:
		r = ferry__plasma_store_object_create(s, FERRY__PLASMA_STORE_SLOT, &id, OBJ_SIZE, 0,
						      0, &o);
		if (r == -EEXIST || r == -ENOSPC)
			break;
		ftest_assert_ok(r);
		fill_object(&o, n);
		ftest_assert_int_ge(ferry__plasma_index_seal(ferry__plasma_store_index(s),
							     FERRY__PLASMA_STORE_SLOT, &o),
				    0);
		break;
	default: /* 6, 7 */
		ferry__plasma_store_collect(s);
	}
}

/* Objects 0..HELD-1 present and sealed (recreated if the churn removed them). */
static void ensure_held_objects(struct ferry__plasma_store *s)
{
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id;

	for (uint32_t n = 0; n < HELD; n++) {
		id = oid(n);
		while (!ferry__plasma_index_contains(ix, &id)) {
			ferry__plasma_store_collect(s);
			if (ferry__plasma_store_object_delete(s, &id) == -ENOENT)
				put_object(s, FERRY__PLASMA_STORE_SLOT, n, OBJ_SIZE,
					   FERRY__PLASMA_F_PRIMARY, NULL);
		}
	}
}

FTEST(concurrent_pins_never_see_freed_memory_and_counts_are_exact)
{
	/* Room for about half the objects: creates evict, and freed memory is reused at once. */
	struct churn t = {
		.s = small_store(OBJECTS / 2 * OBJ_SIZE, 256, FERRY__PLASMA_STORE_POISON)};
	struct ferry__plasma_index *ix = ferry__plasma_store_index(t.s);
	struct ferry_plasma_stats st;
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	pid_t pids[READERS];
	unsigned seed = 99;
	int ready = 0, steps = 0;

	chan_open(&t.ready);
	chan_open(&t.go);
	chan_open(&t.pinned);
	chan_open(&t.end);
	for (int k = 0; k < READERS; k++)
		ftest_assert_ok(ferry__plasma_store_client_add(t.s, 1000 + k, &t.slots[k]));
	for (uint32_t n = 0; n < OBJECTS; n++) /* the later ones evict the earlier ones */
		put_object(t.s, FERRY__PLASMA_STORE_SLOT, n, OBJ_SIZE, 0, NULL);
	for (int k = 0; k < READERS; k++)
		pids[k] = spawn(reader, &t, k);
	while (ready < READERS) {
		churn_step(t.s, &seed);
		if (++steps % 64)
			continue;
		ready += chan_poll(&t.ready);
		for (int k = 0; k < READERS; k++) /* a reader that failed ends the test */
			ftest_assert_int_eq(waitpid(pids[k], NULL, WNOHANG), 0);
	}
	ftest_log("%d store actions during the readers' run", steps);
	ensure_held_objects(t.s);
	chan_send(&t.go, READERS);
	chan_recv(&t.pinned, READERS);
	for (uint32_t n = 0; n < HELD; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_index_find(ix, &id, &o), FERRY__PLASMA_SEALED);
		ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, o.index),
				     READERS * (READERS + 1) / 2);
		ftest_assert_errno(ferry__plasma_index_try_evict(ix, o.index, o.gen), -EBUSY);
		ftest_assert_int_eq(ferry__plasma_store_object_delete(t.s, &id), 1);
	}
	ftest_assert_int_eq(ferry__plasma_store_collect(t.s), 0);
	chan_send(&t.end, READERS);
	for (int k = 0; k < READERS; k++)
		expect_exit(pids[k], 0);
	ftest_assert_int_ge(ferry__plasma_store_collect(t.s), HELD);
	for (uint32_t i = 0; i <= ix->mask; i++)
		ftest_assert_false(ferry__plasma_index_pinned(ix, i));
	for (int k = 0; k < READERS; k++)
		ftest_assert_uint_eq(
			atomic_load(&ferry__plasma_index_client(ix, t.slots[k])->records_used), 0);
	ferry__plasma_store_stats(t.s, &st);
	ftest_assert_uint_eq(st.deferred_deletes, 0);
	ftest_assert_uint_eq(st.allocated_bytes, st.objects * OBJ_SIZE);
	ftest_log("%llu objects evicted", (unsigned long long)st.evicted_objects);
	ferry__plasma_store_destroy(t.s);
}

/* ---- a client killed while holding pins and half-written objects ---- */

struct victim {
	struct ferry__plasma_store *s; /* store */
	uint32_t slot;		       /* the victim's slot */
	struct chan ready;	       /* it has done its work */
};

static void victim(void *arg, int k)
{
	struct victim *t = arg;
	struct ferry__plasma_object g, o;
	struct ferry_object_id id;
	struct view v;

	(void)k;
	view_attach(t->s, &v);
	id = oid(1);
	for (int i = 0; i < 3; i++)
		ftest_assert_ok(ferry__plasma_index_get(&v.ix, t->slot, &id, &g));
	id = oid(2);
	ftest_assert_ok(ferry__plasma_index_get(&v.ix, t->slot, &id, &g));
	id = oid(11); /* half written, never sealed */
	ftest_assert_ok(ferry__plasma_index_create_local(&v.ix, t->slot, &id, 1000, 0,
							 FERRY__PLASMA_F_PRIMARY, &o));
	memset(o.data, 1, 500);
	id = oid(12); /* sealed: must outlive its creator */
	ftest_assert_ok(ferry__plasma_index_create_local(&v.ix, t->slot, &id, 1000, 0,
							 FERRY__PLASMA_F_PRIMARY, &o));
	fill_object(&o, 12);
	ftest_assert_int_eq(ferry__plasma_index_seal(&v.ix, t->slot, &o), 0);
	chan_send(&t->ready, 1);
	for (;;)
		pause();
}

FTEST(killed_client_loses_pins_and_half_written_objects)
{
	struct victim t = {.s = small_store(1 << 20, 64, FERRY__PLASMA_STORE_POISON)};
	struct ferry__plasma_index *ix = ferry__plasma_store_index(t.s);
	struct ferry__plasma_object o1, o2, creating, g;
	struct ferry_plasma_stats st;
	struct ferry_object_id id;
	int status;
	pid_t pid;

	chan_open(&t.ready);
	put_object(t.s, 0, 1, 4096, FERRY__PLASMA_F_PRIMARY, &o1);
	put_object(t.s, 0, 2, 4096, FERRY__PLASMA_F_PRIMARY, &o2);
	put_object(t.s, 0, 3, 4096, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_ok(ferry__plasma_store_client_add(t.s, 1, &t.slot));
	ftest_assert_ok(ferry__plasma_store_chunk_grant(t.s, t.slot, 16 * KIB));
	id = oid(10); /* the store made it for the victim, which never seals it */
	ftest_assert_ok(ferry__plasma_store_object_create(t.s, t.slot, &id, 8192, 0, 0, &creating));
	pid = spawn(victim, &t, 0);
	chan_recv(&t.ready, 1);
	ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, o1.index), 3);
	ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, o2.index), 1);
	id = oid(2);
	ftest_assert_int_eq(ferry__plasma_store_object_delete(t.s, &id), 1);
	ftest_assert_errno(ferry__plasma_index_try_evict(ix, o1.index, o1.gen), -EBUSY);

	kill(pid, SIGKILL);
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFSIGNALED(status));
	ftest_assert_ok(ferry__plasma_store_client_remove(t.s, t.slot));

	ftest_assert_false(ferry__plasma_index_pinned(ix, o1.index));
	ftest_assert_uint_eq(ferry__plasma_index_pin_count(ix, o1.index), 0);
	for (uint32_t n = 1; n <= 12; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id),
				    n == 1 || n == 3 || n == 12);
	}
	id = oid(12);
	ftest_assert_int_eq(ferry__plasma_index_find(ix, &id, &g), FERRY__PLASMA_SEALED);
	ftest_assert_uint_eq(g.owner, FERRY__PLASMA_STORE_SLOT);
	ftest_assert_true(object_intact(&g, 12));
	ftest_assert_uint_eq(creating.data[0], FERRY__PLASMA_POISON_BYTE);
	ferry__plasma_store_stats(t.s, &st);
	ftest_assert_uint_eq(st.objects, 3);
	ftest_assert_uint_eq(st.deferred_deletes, 0);
	ftest_assert_uint_eq(st.chunks, 1); /* retired; object 12 still lives in it */
	ftest_assert_uint_eq(st.allocated_bytes, 2 * 4096 + 16 * KIB);
	ftest_assert_int_eq(ferry__plasma_store_object_delete(t.s, &id), 0);
	ferry__plasma_store_stats(t.s, &st);
	ftest_assert_uint_eq(st.chunks, 0);
	ftest_assert_uint_eq(st.allocated_bytes, 2 * 4096);
	ftest_assert_uint_eq(st.clients, 1);
	ferry__plasma_store_destroy(t.s);
}

/* ---- a process that dies inside the writer lock ---- */

struct locker {
	struct ferry__plasma_store *s; /* store */
	uint32_t slot;		       /* the dying client's slot */
};

/* Take the lock and leave a half-made claim behind, as a crash inside insert would. */
static void die_holding_lock(void *arg, int k)
{
	struct locker *t = arg;
	struct ferry__plasma_entry *e;
	struct view v;
	uint32_t i = 0;

	(void)k;
	view_attach(t->s, &v);
	ftest_assert_int_eq(pthread_mutex_lock(&v.ix.hdr->writer_lock), 0);
	while (atomic_load(&v.ix.entries[i].word) != 0)
		i++;
	e = &v.ix.entries[i];
	atomic_fetch_add(&v.ix.hdr->used_slots, 1);
	atomic_fetch_add(&v.ix.hdr->live_objects, 1);
	atomic_store(&e->word, ferry__plasma_word(FERRY__PLASMA_CLAIMED, 0, t->slot, 1));
	atomic_store(&e->id_lo, 0x1234); /* part of an ID */
	_exit(0);
}

FTEST(writer_lock_holder_death_is_recovered)
{
	struct locker t = {.s = small_store(1 << 20, 64, 0)};
	struct ferry__plasma_index *ix = ferry__plasma_store_index(t.s);
	struct ferry_plasma_stats st;
	struct ferry_object_id id;

	for (uint32_t n = 0; n < 10; n++)
		put_object(t.s, 0, n, 64, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_ok(ferry__plasma_store_client_add(t.s, 1, &t.slot));
	expect_exit(spawn(die_holding_lock, &t, 0), 0);
	ferry__plasma_store_stats(t.s, &st);
	ftest_assert_uint_eq(st.objects, 11); /* the half claim counts until reclaimed */
	for (uint32_t n = 10; n < 20; n++)    /* the lock is recovered (EOWNERDEAD) */
		put_object(t.s, 0, n, 64, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_ok(ferry__plasma_store_client_remove(t.s, t.slot));
	ferry__plasma_store_stats(t.s, &st);
	ftest_assert_uint_eq(st.objects, 20);
	for (uint32_t n = 0; n < 20; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_index_contains(ix, &id), 1);
	}
	ferry__plasma_store_destroy(t.s);
}

/* ---- creates of the same IDs from several processes ---- */

enum { CREATORS = 3, CONTENDED = 200 };

struct creators {
	struct ferry__plasma_store *s; /* store */
	uint32_t slots[CREATORS];      /* creator slots */
	struct chan go;		       /* start together */
	struct chan won[CREATORS];     /* each creator's results: one byte per ID */
};

static void creator(void *arg, int k)
{
	struct creators *t = arg;
	uint8_t won[CONTENDED] = {0};
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	struct view v;

	view_attach(t->s, &v);
	chan_recv(&t->go, 1);
	for (uint32_t i = 0; i < CONTENDED; i++) {
		/* Each creator walks all the IDs in its own order (steps coprime with 200). */
		static const uint32_t step[CREATORS] = {1, 3, 7};
		uint32_t n = (i * step[k] + 17u * (uint32_t)k) % CONTENDED;
		int r;

		id = oid(n);
		r = ferry__plasma_index_create_local(&v.ix, t->slots[k], &id, 100, 0,
						     FERRY__PLASMA_F_PRIMARY, &o);

		won[n] = r == 0;
		if (r == -EEXIST)
			continue;
		ftest_assert_ok(r);
		fill_object(&o, n);
		ftest_assert_int_ge(ferry__plasma_index_seal(&v.ix, t->slots[k], &o), 0);
	}
	if (write(t->won[k].fd[1], won, sizeof(won)) != sizeof(won))
		_exit(2);
}

FTEST(concurrent_creates_of_one_id_make_one_object)
{
	struct creators t = {.s = small_store(1 << 20, 1024, 0)};
	struct ferry__plasma_index *ix = ferry__plasma_store_index(t.s);
	uint8_t won[CREATORS][CONTENDED];
	struct ferry__plasma_object g;
	struct ferry_object_id id;
	pid_t pids[CREATORS];

	chan_open(&t.go);
	for (int k = 0; k < CREATORS; k++) {
		chan_open(&t.won[k]);
		ftest_assert_ok(ferry__plasma_store_client_add(t.s, 1 + k, &t.slots[k]));
		ftest_assert_ok(ferry__plasma_store_chunk_grant(t.s, t.slots[k], 128 * KIB));
	}
	for (int k = 0; k < CREATORS; k++)
		pids[k] = spawn(creator, &t, k);
	chan_send(&t.go, CREATORS);
	for (int k = 0; k < CREATORS; k++) {
		ftest_assert_int_eq(read(t.won[k].fd[0], won[k], CONTENDED), CONTENDED);
		expect_exit(pids[k], 0);
	}
	for (uint32_t n = 0; n < CONTENDED; n++) {
		int winners = 0, winner = -1;

		for (int k = 0; k < CREATORS; k++) {
			if (won[k][n]) {
				winners++;
				winner = k;
			}
		}
		ftest_assert_int_eq(winners, 1);
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_index_find(ix, &id, &g), FERRY__PLASMA_SEALED);
		ftest_assert_uint_eq(g.owner, t.slots[winner]);
		ftest_assert_true(object_intact(&g, n));
	}
	ftest_assert_ok(ferry__plasma_index_recount(ix, -1));
	ftest_assert_uint_eq(atomic_load(&ix->hdr->live_objects), CONTENDED);
	ferry__plasma_store_destroy(t.s);
}
