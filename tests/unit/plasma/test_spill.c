/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Spilling, through the store core: primaries written to disk and read back byte-exact
 * (small ones fused into one file, large ones in pieces), creates that spill to make room,
 * pinned objects left alone, deletes of spilled objects, the threshold tick, and every way the
 * disk can fail: the spill limit, a real full file system (tmpfs, where mounting is allowed),
 * write and read errors. A failed spill never loses an object.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "plasma/spill.h"
#include "plasma_test.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

static struct ferry__plasma_store_opts spill_opts(uint64_t memory, const char *dir,
						  uint64_t max_bytes, uint32_t threshold)
{
	return (struct ferry__plasma_store_opts){
		.memory_bytes = memory,
		.max_objects = 1024,
		.max_clients = 8,
		.pin_records = 64,
		.max_chunks = 8,
		.flags = FERRY__PLASMA_STORE_NO_PREFAULT | FERRY__PLASMA_STORE_POISON,
		.spill_dir = dir,
		.spill_max_bytes = max_bytes,
		.spill_threshold_pct = threshold,
		.spill_batch_bytes = 64,
	};
}

static struct ferry__plasma_store *spill_store(uint64_t memory, const char *dir, uint64_t max_bytes,
					       uint32_t threshold)
{
	struct ferry__plasma_store_opts o = spill_opts(memory, dir, max_bytes, threshold);
	struct ferry__plasma_store *s = NULL;

	ftest_assert_ok(ferry__plasma_store_create(&o, &s));
	return s;
}

static struct ferry_plasma_stats stats(struct ferry__plasma_store *s)
{
	struct ferry_plasma_stats st;

	ferry__plasma_store_stats(s, &st);
	return st;
}

static int state_of(struct ferry__plasma_store *s, uint32_t n, struct ferry__plasma_object *o)
{
	struct ferry_object_id id = oid(n);

	return ferry__plasma_index_find(ferry__plasma_store_index(s), &id, o);
}

static int count_spilled(struct ferry__plasma_store *s, uint32_t objects)
{
	struct ferry__plasma_object o;
	int n = 0;

	for (uint32_t k = 0; k < objects; k++)
		n += state_of(s, k, &o) == FERRY__PLASMA_SPILLED;
	return n;
}

/* Object @n is back in memory (restoring it if spilled) and holds its pattern. */
static void check_object(struct ferry__plasma_store *s, uint32_t n)
{
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id id = oid(n);
	struct ferry__plasma_object o;

	if (state_of(s, n, &o) == FERRY__PLASMA_SPILLED) {
		ftest_assert_errno(ferry__plasma_index_get(ix, 0, &id, &o), -ENODATA);
		ftest_assert_ok(ferry__plasma_store_restore(s, o.index, o.gen));
	}
	ftest_assert_ok(ferry__plasma_index_get(ix, 0, &id, &o));
	ftest_assert_true(object_intact(&o, n));
	ftest_assert_ok(ferry__plasma_index_release(ix, 0, &o));
}

FTEST(spill_and_restore_are_byte_exact)
{
	static const uint64_t sizes[] = {0, 1, 100, 4096, 65 * KIB, 300 * KIB, 9 * MIB + 3};
	struct ferry__plasma_store *s = spill_store(16 * MIB, ftest_tmpdir(), 0, 0);
	uint64_t freed, alloc[FERRY_ARRAY_SIZE(sizes)];
	struct ferry__plasma_object o;

	for (uint32_t n = 0; n < FERRY_ARRAY_SIZE(sizes); n++) {
		put_object(s, 0, n, sizes[n], FERRY__PLASMA_F_PRIMARY, NULL);
		state_of(s, n, &o);
		alloc[n] = ferry__plasma_index_alloc(ferry__plasma_store_index(s), o.index);
		for (uint32_t k = 0; k < n; k++) /* every placement has its own id */
			ftest_assert_true(alloc[n] != 0 && alloc[n] != alloc[k]);
	}
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, &freed), 7);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 0);
	ftest_assert_uint_eq(stats(s).spilled_objects, 7);
	ftest_assert_uint_eq(stats(s).spill_files, 1); /* one batch, one file */
	for (uint32_t n = 0; n < FERRY_ARRAY_SIZE(sizes); n++) {
		struct ferry_object_id id = oid(n);

		ftest_assert_int_eq(state_of(s, n, &o), FERRY__PLASMA_SPILLED);
		ftest_assert_int_eq(ferry__plasma_index_contains(ferry__plasma_store_index(s), &id),
				    1);
	}
	for (uint32_t n = FERRY_ARRAY_SIZE(sizes); n-- > 0;)
		check_object(s, n);
	/* Read back to new memory under the same entry and generation: a new placement id, so a
	 * peer that READ the old offset cannot take those bytes for the object's. */
	for (uint32_t n = 0; n < FERRY_ARRAY_SIZE(sizes); n++) {
		uint64_t now;

		state_of(s, n, &o);
		now = ferry__plasma_index_alloc(ferry__plasma_store_index(s), o.index);
		for (uint32_t k = 0; k < FERRY_ARRAY_SIZE(sizes); k++)
			ftest_assert_true(now != 0 && now != alloc[k]);
	}
	ftest_assert_uint_eq(stats(s).restored_objects, 7);
	ftest_assert_uint_eq(stats(s).spilled_objects, 0);
	ftest_assert_uint_eq(stats(s).spill_files, 0); /* its last object came back */
	ferry__plasma_store_destroy(s);
}

FTEST(a_full_store_spills_to_create)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry__plasma_object o;

	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	/* Full of primaries: without spilling this is -ENOSPC (test_store.c size_limits). */
	put_object(s, 0, 4, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(count_spilled(s, 5), 1);
	ftest_assert_int_eq(state_of(s, 4, &o), FERRY__PLASMA_SEALED);
	/* Bringing them all back in turn spills others; every byte survives. */
	for (uint32_t round = 0; round < 2; round++)
		for (uint32_t n = 0; n < 5; n++)
			check_object(s, n);
	ftest_assert_uint_ge(stats(s).spilled_total_objects, 5);
	ferry__plasma_store_destroy(s);
}

FTEST(pinned_and_unsealed_objects_stay_in_memory)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id pinned = oid(0), creating = oid(1);
	struct ferry__plasma_object g, c;

	put_object(s, 0, 0, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_ok(ferry__plasma_store_object_create(s, 0, &creating, MIB, 0,
							  FERRY__PLASMA_F_PRIMARY, &c));
	put_object(s, 0, 2, MIB, 0, NULL); /* a secondary: evicted, never spilled */
	ftest_assert_ok(ferry__plasma_index_get(ix, 0, &pinned, &g));
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, NULL), 0);
	ftest_assert_int_eq(state_of(s, 0, &g), FERRY__PLASMA_SEALED);
	ftest_assert_ok(ferry__plasma_index_release(ix, 0, &g));
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, NULL), 1);
	ftest_assert_int_eq(state_of(s, 0, &g), FERRY__PLASMA_SPILLED);
	ftest_assert_int_eq(state_of(s, 1, &c), FERRY__PLASMA_CREATING);
	ftest_assert_int_eq(state_of(s, 2, &g), FERRY__PLASMA_SEALED);
	ferry__plasma_store_destroy(s);
}

FTEST(deleting_spilled_objects_frees_their_files)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry_object_id id;

	for (uint32_t n = 0; n < 3; n++)
		put_object(s, 0, n, 256 * KIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, NULL), 3);
	ftest_assert_uint_eq(stats(s).spill_disk_bytes, 3 * 256 * KIB);
	for (uint32_t n = 0; n < 3; n++) {
		id = oid(n);
		ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
	}
	ftest_assert_uint_eq(stats(s).spill_files, 0);
	ftest_assert_uint_eq(stats(s).spill_disk_bytes, 0);
	ftest_assert_uint_eq(stats(s).objects, 0);
	/* The IDs are free again. */
	put_object(s, 0, 1, 100, FERRY__PLASMA_F_PRIMARY, NULL);
	check_object(s, 1);
	ferry__plasma_store_destroy(s);
}

FTEST(a_spilled_id_is_still_taken)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry_object_id id = oid(0);
	struct ferry__plasma_object o;

	put_object(s, 0, 0, 4096, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 1, NULL), 1);
	ftest_assert_errno(ferry__plasma_store_object_create(s, 0, &id, 10, 0, 0, &o), -EEXIST);
	ferry__plasma_store_destroy(s);
}

FTEST(the_tick_spills_past_the_threshold)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 50);

	put_object(s, 0, 0, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_tick(s), 0); /* 25%: below */
	for (uint32_t n = 1; n < 3; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_gt(ferry__plasma_store_tick(s), 0); /* 75%: spill down to 45% */
	ftest_assert_uint_le(stats(s).allocated_bytes, 45 * 4 * MIB / 100);
	for (uint32_t n = 0; n < 3; n++)
		check_object(s, n);
	ferry__plasma_store_destroy(s);
}

/* ---- in the background ---- */

/* A stand-in for the server's loop: the spill worker's post is kept, and the test runs it as
 * the store's thread would, when it chooses. */
static struct {
	pthread_mutex_t lock;	 /* everything here */
	pthread_cond_t cond;	 /* a post came */
	void (*fn)(void *, int); /* the posted call */
	void *arg;		 /* its argument */
	int posts;		 /* posted, not run yet */
} loop = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0};

static int fake_post(void *arg, void (*fn)(void *fn_arg, int status), void *fn_arg)
{
	(void)arg;
	pthread_mutex_lock(&loop.lock);
	loop.fn = fn;
	loop.arg = fn_arg;
	loop.posts++;
	pthread_cond_broadcast(&loop.cond);
	pthread_mutex_unlock(&loop.lock);
	return 0;
}

/* Wait for the worker's post and run it. */
static void run_post(void)
{
	pthread_mutex_lock(&loop.lock);
	while (!loop.posts)
		pthread_cond_wait(&loop.cond, &loop.lock);
	loop.posts = 0;
	pthread_mutex_unlock(&loop.lock);
	loop.fn(loop.arg, 0);
}

static struct ferry__plasma_store *background_store(uint64_t memory, const char *dir)
{
	struct ferry__plasma_store_opts o = spill_opts(memory, dir, 0, 10);
	struct ferry__plasma_store *s = NULL;

	o.post = fake_post;

	ftest_assert_ok(ferry__plasma_store_create(&o, &s));
	return s;
}

FTEST(the_tick_spills_in_the_background)
{
	struct ferry__plasma_store *s = background_store(4 * MIB, ftest_tmpdir());
	struct ferry__plasma_index *ix = ferry__plasma_store_index(s);
	struct ferry_object_id deleted = oid(0), pinned = oid(1);
	struct ferry__plasma_object o, p;

	for (uint32_t n = 0; n < 3; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	/* The batch goes to the worker; nothing is taken back until the "loop" runs the post. */
	ftest_assert_int_eq(ferry__plasma_store_tick(s), 3);
	ftest_assert_uint_eq(stats(s).allocated_bytes, 3 * MIB);
	/* Meanwhile: a victim is deleted (its bytes stay: the worker reads them) and another
	 * pinned (it stays in memory). */
	ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &deleted), 1);
	ftest_assert_int_eq(state_of(s, 0, &o), FERRY__PLASMA_DELETING);
	ftest_assert_true(object_intact(&o, 0));
	ftest_assert_ok(ferry__plasma_index_get(ix, 0, &pinned, &p));
	ftest_assert_int_eq(ferry__plasma_store_tick(s), 0); /* one batch at a time */
	run_post();
	ftest_assert_errno(state_of(s, 0, &o), -ENOENT);
	ftest_assert_int_eq(state_of(s, 1, &o), FERRY__PLASMA_SEALED);
	ftest_assert_int_eq(state_of(s, 2, &o), FERRY__PLASMA_SPILLED);
	ftest_assert_uint_eq(stats(s).deferred_deletes, 0);
	ftest_assert_uint_eq(stats(s).allocated_bytes, MIB);
	ftest_assert_ok(ferry__plasma_index_release(ix, 0, &p));
	check_object(s, 1);
	check_object(s, 2);
	ferry__plasma_store_destroy(s);
}

FTEST(a_create_waits_for_the_background_batch_and_destroy_takes_it_back)
{
	struct ferry__plasma_store *s = background_store(4 * MIB, ftest_tmpdir());
	struct ferry__plasma_object o;

	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_tick(s), 4);
	/* Full, and every candidate is in flight: the create waits for the batch. */
	put_object(s, 0, 4, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(count_spilled(s, 4), 4);
	ftest_assert_int_eq(state_of(s, 4, &o), FERRY__PLASMA_SEALED);
	/* Restoring the others spills the least recently used: object 4 now (made before the
	 * restores, never read since); which one goes is the victim order's business. */
	for (uint32_t n = 0; n < 5; n++)
		check_object(s, n);
	/* Another batch in flight when the store goes: nothing leaks. */
	ftest_assert_int_gt(ferry__plasma_store_tick(s), 0);
	ferry__plasma_store_destroy(s);
}

FTEST(the_spill_limit_gives_enospc_and_loses_nothing)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 2 * MIB, 0);
	struct ferry_object_id id = oid(9);
	struct ferry__plasma_object o;

	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	/* Room for one more spill of 1 MiB... */
	put_object(s, 0, 4, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	put_object(s, 0, 5, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	/* ...then the limit: full after eviction and spilling. */
	ftest_assert_errno(
		ferry__plasma_store_object_create(s, 0, &id, MIB, 0, FERRY__PLASMA_F_PRIMARY, &o),
		-ENOSPC);
	ftest_assert_int_eq(count_spilled(s, 6), 2);
	/* Nothing was lost: make room by deleting what is in memory, then read the rest back. */
	for (uint32_t n = 0, deleted = 0; n < 6; n++) {
		if (state_of(s, n, &o) != FERRY__PLASMA_SEALED)
			continue;
		check_object(s, n);
		if (deleted++ < 2) {
			id = oid(n);
			ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
		}
	}
	for (uint32_t n = 0; n < 6; n++)
		if (state_of(s, n, &o) > 0)
			check_object(s, n);
	ftest_assert_int_eq(count_spilled(s, 6), 0);
	ferry__plasma_store_destroy(s);
}

FTEST(write_and_read_errors_keep_objects_safe)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry__plasma_spill *sp = ferry__plasma_store_spill_area(s);
	struct ferry_object_id id = oid(9);
	struct ferry__plasma_object o;
	uint32_t victim;

	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ferry__plasma_spill_inject(sp, -EIO, 0);
	ftest_assert_errno(
		ferry__plasma_store_object_create(s, 0, &id, MIB, 0, FERRY__PLASMA_F_PRIMARY, &o),
		-ENOSPC);
	for (uint32_t n = 0; n < 4; n++)
		ftest_assert_int_eq(state_of(s, n, &o), FERRY__PLASMA_SEALED);
	ftest_assert_int_eq(ferry__plasma_store_spill(s, MIB, NULL), 1);
	for (victim = 0; state_of(s, victim, &o) != FERRY__PLASMA_SPILLED; victim++)
		ftest_assert_uint_lt(victim, 3);
	ferry__plasma_spill_inject(sp, 0, -EIO);
	ftest_assert_errno(ferry__plasma_store_restore(s, o.index, o.gen), -EIO);
	ftest_assert_int_eq(state_of(s, victim, &o), FERRY__PLASMA_SPILLED);
	ftest_assert_uint_eq(stats(s).free_bytes, MIB); /* the failed restore gave its block back */
	check_object(s, victim);
	ferry__plasma_store_destroy(s);
}

FTEST(allocation_failures_while_spilling_are_clean)
{
	struct ferry__plasma_store *s = spill_store(4 * MIB, ftest_tmpdir(), 0, 0);

	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	/* Fail each allocation of a spill in turn, until one runs without failing. */
	for (long k = 0;; k++) {
		int r, fired;

		ferry__alloc_fail_after(k);
		r = ferry__plasma_store_spill(s, MIB, NULL);
		fired = !ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		ftest_assert_true(r >= 0 || r == -ENOMEM);
		if (!fired)
			break;
	}
	ftest_assert_int_ge(count_spilled(s, 4), 1);
	for (uint32_t n = 0; n < 4; n++)
		check_object(s, n);
	ferry__plasma_store_destroy(s);
}

/* A real full disk: a 1 MiB tmpfs in a private mount namespace (needs CAP_SYS_ADMIN). */
FTEST(a_full_disk_gives_enospc_and_loses_nothing)
{
	char dir[512];
	struct ferry__plasma_store *s;
	struct ferry_object_id id = oid(9);
	struct ferry__plasma_object o;

	snprintf(dir, sizeof(dir), "%s/small", ftest_tmpdir());
	ftest_assert_int_eq(mkdir(dir, 0700), 0);
	if (unshare(CLONE_NEWNS) != 0 ||
	    mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0)
		ftest_skip("cannot mount a small tmpfs here (%s)", ferry_strerror(errno));
	s = spill_store(4 * MIB, dir, 0, 0);
	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_errno(ferry__plasma_store_object_create(s, 0, &id, 2 * MIB, 0,
							     FERRY__PLASMA_F_PRIMARY, &o),
			   -ENOSPC);
	for (uint32_t n = 0; n < 4; n++)
		check_object(s, n);
	ferry__plasma_store_destroy(s);
	umount(dir);
}

/* Objects of BIG_BYTES (plasma/spill.c) or more start on a 4 KiB boundary in the file, so one
 * at an aligned arena address goes to disk and back with no copy; unaligned ones and the small
 * ones around them are staged. Every mix comes back byte-exact. */
FTEST(big_objects_go_to_disk_and_back_with_no_copy)
{
	/* Blocks follow each other from the arena's start: objects 0 and 3 are page aligned (3
	 * after 128 + 3968 bytes), the rest not; in the file, 1 and 2 share a staged piece that
	 * ends where 3 starts. */
	static const uint64_t sizes[] = {MIB,  100,	    3968,	 MIB + 100,
					 3000, 2 * MIB + 5, 70 * KIB + 1};
	struct ferry__plasma_store *s = spill_store(16 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry__plasma_spill_stats st;

	for (uint32_t n = 0; n < FERRY_ARRAY_SIZE(sizes); n++)
		put_object(s, 0, n, sizes[n], FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, NULL), 7);
	ferry__plasma_spill_stats(ferry__plasma_store_spill_area(s), &st);
	ftest_assert_uint_eq(st.written_bytes,
			     4 * MIB + 100 + 3968 + 100 + 3000 + 5 + 70 * KIB + 1);
	ftest_assert_uint_ge(st.uncopied_bytes, 2 * MIB); /* objects 0 and 3 */
	ftest_assert_uint_lt(st.uncopied_bytes, st.written_bytes);
	/* Back into the same layout: 1 to 4 come with 0 (2 MiB, an eighth of the arena), in one
	 * pass with the same pieces; 5 and 6 each alone. */
	check_object(s, 0);
	for (uint32_t n = 1; n < 5; n++) {
		struct ferry__plasma_object o;

		ftest_assert_int_eq(state_of(s, n, &o), FERRY__PLASMA_SEALED);
	}
	for (uint32_t n = 1; n < FERRY_ARRAY_SIZE(sizes); n++)
		check_object(s, n);
	ftest_assert_uint_eq(stats(s).spill_files, 0);
	ferry__plasma_store_destroy(s);
}

static uint32_t restored_seen[16]; /* on_restored's entries, in call order */
static uint32_t restored_count;

static void count_restored(void *arg, uint32_t index, uint32_t gen)
{
	struct ferry__plasma_store **s = arg;
	struct ferry__plasma_object o;

	ftest_assert_int_eq(ferry__plasma_index_read(ferry__plasma_store_index(*s), index, &o),
			    FERRY__PLASMA_SEALED);
	ftest_assert_uint_eq(o.gen, gen);
	if (restored_count < FERRY_ARRAY_SIZE(restored_seen))
		restored_seen[restored_count] = index;
	restored_count++;
}

/* A batch holds its objects in the order they were made; restoring one reads the ones after
 * it in one pass and publishes them too (in free memory only, up to an eighth of it), and
 * on_restored names each of those; any other order still reads every byte right. */
FTEST(restoring_one_brings_the_objects_after_it_in_its_batch)
{
	struct ferry__plasma_store_opts o = spill_opts(32 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry__plasma_store *s = NULL;
	struct ferry__plasma_spill_stats st;
	struct ferry__plasma_object obj;

	o.on_restored = count_restored;
	o.hook_arg = &s;
	ftest_assert_ok(ferry__plasma_store_create(&o, &s));
	for (uint32_t n = 0; n < 12; n++)
		put_object(s, 0, n, MIB + n * 4097, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, NULL), 12);
	check_object(s, 0); /* 32 MiB / 8: the next three fit in 4 MiB, not four */
	ftest_assert_uint_eq(restored_count, 3);
	for (uint32_t n = 1; n < 4; n++) {
		ftest_assert_int_eq(state_of(s, n, &obj), FERRY__PLASMA_SEALED);
		ftest_assert_uint_eq(restored_seen[n - 1], obj.index);
	}
	ftest_assert_int_eq(state_of(s, 4, &obj), FERRY__PLASMA_SPILLED);
	ferry__plasma_spill_stats(ferry__plasma_store_spill_area(s), &st);
	ftest_assert_uint_eq(st.ahead_bytes, 3 * MIB + (1 + 2 + 3) * 4097);
	for (uint32_t n = 12; n-- > 1;) /* backwards: each one alone, same bytes */
		check_object(s, n);
	ftest_assert_uint_eq(stats(s).restored_objects, 12);
	ftest_assert_uint_eq(stats(s).spill_files, 0);
	ferry__plasma_store_destroy(s);
}

/* A spill file that lost its tail (damaged disk, someone else's truncate): the restores of
 * what is gone fail with -EIO and leave their objects spilled; the rest still restore, and
 * deleting the lost ones gives the file back. */
FTEST(a_truncated_spill_file_fails_restores_with_eio)
{
	struct ferry__plasma_store *s = spill_store(8 * MIB, ftest_tmpdir(), 0, 0);
	struct ferry__plasma_spill *sp = ferry__plasma_store_spill_area(s);
	struct ferry__plasma_object o;
	int fd;

	for (uint32_t n = 0; n < 4; n++)
		put_object(s, 0, n, MIB, FERRY__PLASMA_F_PRIMARY, NULL);
	ftest_assert_int_eq(ferry__plasma_store_spill(s, 64 * MIB, NULL), 4);
	fd = ferry__plasma_spill_file_fd(sp, 0);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(ftruncate(fd, 3 * MIB / 2), 0);
	check_object(s, 0); /* first in the file: whole */
	for (uint32_t n = 1; n < 4; n++) {
		ftest_assert_int_eq(state_of(s, n, &o), FERRY__PLASMA_SPILLED);
		ftest_assert_errno(ferry__plasma_store_restore(s, o.index, o.gen), -EIO);
		ftest_assert_int_eq(state_of(s, n, &o), FERRY__PLASMA_SPILLED);
	}
	for (uint32_t n = 1; n < 4; n++) {
		struct ferry_object_id id = oid(n);

		ftest_assert_int_eq(ferry__plasma_store_object_delete(s, &id), 0);
	}
	ftest_assert_uint_eq(stats(s).spill_files, 0);
	ftest_assert_uint_eq(stats(s).free_bytes, 7 * MIB); /* failed restores gave blocks back */
	ferry__plasma_store_destroy(s);
}
