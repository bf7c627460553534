/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server's hooks for the node daemon (on_sealed, on_removed, on_miss) against a store in a
 * child process whose hooks write one record per call into a pipe that the test reads, in
 * order: seals made in shared memory and through the socket by other processes, a seal whose
 * notice never came (its client died), deletes and evictions (spills and restores are not
 * removals), one miss per episode however many clients wait or poll, and the owner each sealed
 * object was created with.
 */
#include <sys/wait.h>

#include "client_test.h"
#include "common/hash.h"
#include "plasma/client_arena.h"
#include "plasma/client_int.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)

enum { REC_SEALED = 1, REC_REMOVED, REC_MISS, REC_MOVED, REC_OWNER };

static bool owner_recs; /* the store also writes a REC_OWNER after each REC_SEALED */

struct rec {
	uint8_t kind;		      /* REC_* */
	bool primary;		      /* sealed: primary copy */
	uint32_t metadata_size;	      /* sealed */
	uint64_t data_size;	      /* sealed */
	uint64_t offset;	      /* sealed: where the data lies */
	uint64_t alloc;		      /* sealed: the placement's id */
	uint64_t check;		      /* sealed: the content check (small objects) */
	struct ferry_object_id id;    /* the object */
	struct ferry_worker_id owner; /* sealed: its owner */
};

static int rec_fd = -1; /* the store process writes records here */

static void put_rec(uint8_t kind, const struct ferry_object_id *id, uint64_t data_size,
		    uint32_t metadata_size, bool primary, const struct ferry__plasma_place *place)
{
	struct rec r;

	memset(&r, 0, sizeof(r)); /* padding too: it goes through a pipe */
	r.kind = kind;
	r.primary = primary;
	r.metadata_size = metadata_size;
	r.data_size = data_size;
	if (place) {
		r.offset = place->offset;
		r.alloc = place->alloc;
		r.check = place->check;
	}
	r.id = *id;
	/* One write of less than PIPE_BUF: atomic. The test checks what arrives. */
	if (write(rec_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(5);
}

static void on_sealed(void *arg, const struct ferry_object_id *id, uint64_t data_size,
		      uint32_t metadata_size, bool primary, const struct ferry_worker_id *owner,
		      const struct ferry__plasma_place *place)
{
	(void)arg;
	put_rec(REC_SEALED, id, data_size, metadata_size, primary, place);
	/* The record is out: the owner follows in one more (REC_OWNER) for the owner test. */
	if (owner_recs) {
		struct rec r;

		memset(&r, 0, sizeof(r));
		r.kind = REC_OWNER;
		r.id = *id;
		r.owner = *owner;
		if (write(rec_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(5);
	}
}

static void on_moved(void *arg, const struct ferry_object_id *id, uint64_t data_size,
		     uint32_t metadata_size, const struct ferry__plasma_place *place)
{
	(void)arg;
	put_rec(REC_MOVED, id, data_size, metadata_size, true, place);
}

static void on_removed(void *arg, const struct ferry_object_id *id)
{
	(void)arg;
	put_rec(REC_REMOVED, id, 0, 0, false, NULL);
}

static void on_miss(void *arg, const struct ferry_object_id *id)
{
	(void)arg;
	put_rec(REC_MISS, id, 0, 0, false, NULL);
}

/* A store with hooks; the test reads their records from the returned fd. */
static int spawn_hooked(struct test_store *t, uint64_t memory, const char *spill_dir)
{
	struct ferry__plasma_server_opts o = {
		.memory_bytes = memory,
		.max_objects = 4096,
		.spill_dir = spill_dir,
		.on_sealed = on_sealed,
		.on_removed = on_removed,
		.on_moved = on_moved,
		.on_miss = on_miss,
		.miss_quiet_ms = 600000, /* no episode ends by time in these tests */
		.content_checks = true,	 /* as a node that serves RDMA */
	};
	int p[2];

	ftest_assert_int_eq(pipe(p), 0);
	rec_fd = p[1];
	store_spawn(t, o);
	close(p[1]);
	return p[0];
}

static struct rec next_rec(int fd)
{
	struct rec r;

	ftest_assert_int_eq(read(fd, &r, sizeof(r)), (int)sizeof(r));
	return r;
}

static struct rec expect(int fd, int kind, uint32_t n)
{
	struct rec r = next_rec(fd);
	struct ferry_object_id id = oid(n);

	ftest_assert_int_eq(r.kind, kind);
	ftest_assert_mem_eq(r.id.bytes, id.bytes, sizeof(id.bytes));
	return r;
}

static struct rec expect_sealed(int fd, uint32_t n, uint64_t size, uint32_t meta, bool primary)
{
	struct rec r = next_rec(fd);
	struct ferry_object_id id = oid(n);

	ftest_assert_int_eq(r.kind, REC_SEALED);
	ftest_assert_mem_eq(r.id.bytes, id.bytes, sizeof(id.bytes));
	ftest_assert_uint_eq(r.data_size, size);
	ftest_assert_uint_eq(r.metadata_size, meta);
	ftest_assert_int_eq(r.primary, primary);
	return r;
}

/* The place the hook reported for object @n is where a reader's view finds it, with the hash of
 * the bytes found there for a small object (none for a large one). */
static void expect_place(const struct test_store *t, uint32_t n, const struct rec *r)
{
	struct ferry_plasma_client *c = client_connect(t);
	struct ferry_object_id id = oid(n);
	struct ferry_plasma_view v;
	uint64_t offset, alloc;

	ftest_assert_ok(ferry_plasma_client_get(c, &id, 1, 0, &v));
	ftest_assert_ok(ferry__plasma_client_view_place(c, &v, &offset, &alloc));
	ftest_assert_uint_eq(offset, r->offset);
	ftest_assert_uint_eq(alloc, r->alloc);
	ftest_assert_true(alloc != 0);
	ftest_assert_true(v.metadata_size == 0 ||
			  (const uint8_t *)v.metadata == (const uint8_t *)v.data + v.data_size);
	if (v.data_size + v.metadata_size <= FERRY__PLASMA_CHECK_MAX)
		ftest_assert_uint_eq(r->check,
				     ferry__hash_content(v.data, v.data_size + v.metadata_size));
	else
		ftest_assert_uint_eq(r->check, 0);
	ftest_assert_ok(ferry_plasma_client_release(c, &v));
	ftest_assert_errno(ferry__plasma_client_view_place(c, &v, &offset, &alloc), -EINVAL);
	ferry_plasma_client_disconnect(c);
}

/* Run @fn in a child process (it must exit 0) and wait for it. */
static void in_child(void (*fn)(const struct test_store *t, uint32_t n), const struct test_store *t,
		     uint32_t n)
{
	int status;
	pid_t pid = fork();

	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		fn(t, n);
		_exit(0);
	}
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void put_small_large_secondary(const struct test_store *t, uint32_t n)
{
	struct ferry_plasma_client *c = client_connect(t);
	struct ferry_object_id id = oid(n + 2);
	void *d;

	client_put(c, n, 100);	       /* in the client's chunk: shared memory only */
	client_put(c, n + 1, 2 * MIB); /* created through the socket */
	ftest_assert_ok(ferry_plasma_client_create_ex(c, &id, 300, NULL, 0,
						      FERRY_PLASMA_CREATE_SECONDARY, &d));
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	ferry_plasma_client_disconnect(c);
}

FTEST(sealed_hook_sees_every_seal_of_another_process)
{
	struct test_store t;
	int fd = spawn_hooked(&t, 32 * MIB, NULL);

	struct rec r[3];

	in_child(put_small_large_secondary, &t, 10);
	r[0] = expect_sealed(fd, 10, 100, 4, true);
	r[1] = expect_sealed(fd, 11, 2 * MIB, 4, true);
	r[2] = expect_sealed(fd, 12, 300, 0, false);
	for (uint32_t k = 0; k < 3; k++) {
		expect_place(&t, 10 + k, &r[k]);
		ftest_assert_true(r[k].alloc != r[(k + 1) % 3].alloc);
	}
	store_stop(&t);
	close(fd);
}

/* Seal in shared memory without the notice, then die: only the closed connection tells. */
static void seal_silently_and_die(const struct test_store *t, uint32_t n)
{
	struct ferry_plasma_client *c = client_connect(t);
	struct ferry_object_id id = oid(n);
	struct ferry__plasma_object *o;
	void *d;

	ftest_assert_ok(ferry_plasma_client_create(c, &id, 64, NULL, 0, &d));
	o = ferry__hashmap_get(&c->creating, &id);
	ftest_assert_ptr_notnull(o);
	ftest_assert_int_eq(ferry__plasma_index_seal(&c->ix, c->slot, o), 1); /* "tell the store" */
	_exit(0);
}

FTEST(a_seal_whose_notice_never_came_is_reported_when_its_client_goes)
{
	struct test_store t;
	int fd = spawn_hooked(&t, 16 * MIB, NULL);

	in_child(seal_silently_and_die, &t, 7);
	expect_sealed(fd, 7, 64, 0, true);
	store_stop(&t);
	close(fd);
}

/*
 * A spill is not a removal; the read back is a move (on_moved: the new place, a new placement
 * id, where a reader's view finds it).
 */
FTEST(removed_hook_for_deletes_and_evictions_not_spills)
{
	struct test_store t;
	int fd = spawn_hooked(&t, 16 * MIB, ftest_tmpdir());
	struct rec sealed3, moved3;
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(2);
	struct ferry_plasma_stats st;
	uint64_t freed;
	int status;
	void *d;

	c = client_connect(&t);
	client_put(c, 1, 1000);
	ftest_assert_ok(ferry_plasma_client_create_ex(c, &id, MIB, NULL, 0,
						      FERRY_PLASMA_CREATE_SECONDARY, &d));
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	client_put(c, 3, 4 * MIB);
	expect(fd, REC_SEALED, 1);
	expect(fd, REC_SEALED, 2);
	sealed3 = expect(fd, REC_SEALED, 3);
	id = oid(1);
	ftest_assert_ok(ferry_plasma_client_delete(c, &id, 1, &status));
	ftest_assert_ok(status);
	expect(fd, REC_REMOVED, 1);
	/* The secondary goes first, then primaries are spilled: only the eviction is a removal. */
	ftest_assert_int_ge(ferry_plasma_client_evict(c, 5 * MIB, &freed), 2);
	st = client_stats(c);
	ftest_assert_uint_ge(st.spilled_objects, 1);
	expect(fd, REC_REMOVED, 2);
	client_check(c, 3, 4 * MIB, 0); /* restored */
	moved3 = expect(fd, REC_MOVED, 3);
	ftest_assert_uint_eq(moved3.data_size, 4 * MIB);
	ftest_assert_true(moved3.alloc != sealed3.alloc);
	expect_place(&t, 3, &moved3);
	id = oid(3);
	ftest_assert_ok(ferry_plasma_client_delete(c, &id, 1, &status));
	expect(fd, REC_REMOVED, 3);
	client_put(c, 4, 10); /* a marker: nothing came in between */
	expect(fd, REC_SEALED, 4);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
	close(fd);
}

/* Wait up to 300 ms for object @n (not there: times out). */
static void wait_for_absent(const struct test_store *t, uint32_t n)
{
	struct ferry_plasma_client *c = client_connect(t);
	struct ferry_object_id id = oid(n);
	struct ferry_plasma_view v;

	ftest_assert_errno(ferry_plasma_client_get(c, &id, 1, 300, &v), -ETIMEDOUT);
	ferry_plasma_client_disconnect(c);
}

static void put_one(const struct test_store *t, uint32_t n)
{
	struct ferry_plasma_client *c = client_connect(t);

	client_put(c, n, 5000);
	ferry_plasma_client_disconnect(c);
}

FTEST(miss_hook_once_per_episode)
{
	struct test_store t;
	int fd = spawn_hooked(&t, 16 * MIB, NULL);
	struct ferry_plasma_client *c;
	struct ferry_object_id x = oid(1), y = oid(2);
	struct ferry_plasma_view v;
	pid_t pids[3];
	int status;

	/* Three processes wait for x at once, then this one polls for it. */
	for (int k = 0; k < 3; k++) {
		pids[k] = fork();
		ftest_assert_int_ge(pids[k], 0);
		if (pids[k] == 0) {
			wait_for_absent(&t, 1);
			_exit(0);
		}
	}
	for (int k = 0; k < 3; k++) {
		ftest_assert_int_eq(waitpid(pids[k], &status, 0), pids[k]);
		ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	c = client_connect(&t);
	for (int k = 0; k < 3; k++)
		ftest_assert_errno(ferry_plasma_client_get(c, &x, 1, 20, &v), -ETIMEDOUT);
	/* A get that does not wait is no miss. */
	ftest_assert_errno(ferry_plasma_client_get(c, &y, 1, 0, &v), -ETIMEDOUT);
	client_put(c, 100, 10);
	expect(fd, REC_MISS, 1);
	expect(fd, REC_SEALED, 100);
	/* x arrives, goes, and is waited for again: a new episode. (The child is forked holding
	 * no client of ours: valgrind would call the copy lost.) */
	ferry_plasma_client_disconnect(c);
	in_child(put_one, &t, 1);
	c = client_connect(&t);
	expect(fd, REC_SEALED, 1);
	ftest_assert_ok(ferry_plasma_client_delete(c, &x, 1, &status));
	expect(fd, REC_REMOVED, 1);
	ftest_assert_errno(ferry_plasma_client_get(c, &x, 1, 20, &v), -ETIMEDOUT);
	expect(fd, REC_MISS, 1);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
	close(fd);
}

/* A get parked for x is answered when another process puts it; its miss was reported. */
FTEST(a_waiting_get_reports_its_miss_and_gets_the_object)
{
	struct test_store t;
	int fd = spawn_hooked(&t, 16 * MIB, NULL);
	struct ferry_plasma_client *c;
	pid_t pid;
	int status;

	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		c = client_connect(&t);
		client_check(c, 5, 5000, -1);
		ferry_plasma_client_disconnect(c);
		_exit(0);
	}
	expect(fd, REC_MISS, 5); /* it waits: now put it */
	in_child(put_one, &t, 5);
	expect(fd, REC_SEALED, 5);
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	store_stop(&t);
	close(fd);
}

/* The sealed hook names the owner each creator gave (nil: the node), chunk creates and creates
 * through the socket alike, primaries and copies. */
FTEST(sealed_hook_names_the_owner)
{
	struct ferry_worker_id me, other, nil = {0};
	struct ferry_plasma_connect_opts co = {0};
	struct ferry_plasma_client *c = NULL;
	struct ferry_object_id id;
	struct test_store t;
	struct rec r;
	int fd;
	void *d;

	memset(me.bytes, 0x11, sizeof(me.bytes));
	memset(other.bytes, 0x22, sizeof(other.bytes));
	co.owner = me;
	owner_recs = true; /* the store child inherits it */
	fd = spawn_hooked(&t, 16 * MIB, NULL);
	ftest_assert_ok(ferry_plasma_client_connect(t.path, &co, &c));
	client_put(c, 1, 100);	   /* chunk, the client's owner */
	client_put(c, 2, 2 * MIB); /* socket, the client's owner */
	id = oid(3);
	ftest_assert_ok(ferry_plasma_client_create_owned(
		c, &id, 100, NULL, 0, FERRY_PLASMA_CREATE_SECONDARY, &other, &d));
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	id = oid(4);
	ftest_assert_ok(ferry_plasma_client_put_owned(c, &id, "x", 1, NULL, 0, 0, &nil));
	for (uint32_t n = 1; n <= 4; n++) {
		const struct ferry_worker_id *want = n <= 2 ? &me : n == 3 ? &other : &nil;

		expect(fd, REC_SEALED, n);
		r = expect(fd, REC_OWNER, n);
		ftest_assert_mem_eq(r.owner.bytes, want->bytes, sizeof(want->bytes));
	}
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
	close(fd);
}
