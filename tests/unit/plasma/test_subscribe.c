/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Subscriptions (ferry_plasma_client_subscribe) against a store in a child process: seals and
 * removals made by several client processes reach every subscriber in order with their sizes
 * and copy kind, event masks filter, a subscriber that does not read loses events (counted,
 * never buffered without bound) and then gets the rest, the store going away ends the
 * subscription, and the allocation fault injector through subscribe and read.
 */
#include <poll.h>
#include <sys/wait.h>

#include "client_test.h"
#include "common/alloc.h"

#define MIB (1ull << 20)
#define PROCS 4
#define PER_PROC 25

static struct ferry__plasma_server_opts opts(uint64_t memory, uint32_t max_objects)
{
	return (struct ferry__plasma_server_opts){.memory_bytes = memory,
						  .max_objects = max_objects};
}

static struct ferry_plasma_subscription *subscribe(struct ferry_plasma_client *c, unsigned events,
						   uint32_t max_pending)
{
	struct ferry_plasma_subscribe_opts o = {.events = events, .max_pending = max_pending};
	struct ferry_plasma_subscription *s = NULL;

	ftest_assert_ok(ferry_plasma_client_subscribe(c, &o, &s));
	return s;
}

static uint32_t num_of(const struct ferry_object_id *id)
{
	uint32_t n;

	memcpy(&n, id->bytes, sizeof(n));
	return n;
}

/* Read exactly @n events (waiting as long as it takes), none lost. */
static void read_n(struct ferry_plasma_subscription *s, struct ferry_plasma_event *ev, size_t n)
{
	size_t got = 0;

	while (got < n) {
		uint64_t missed;
		int r = ferry_plasma_subscription_read(s, ev + got, n - got, -1, &missed);

		ftest_assert_int_gt(r, 0);
		ftest_assert_uint_eq(missed, 0);
		got += (size_t)r;
	}
}

/* A client process forked before the test allocates anything (a child forked later would
 * inherit, and valgrind report, the parent's handles): it puts what it is told. */
struct putter {
	pid_t pid; /* the process */
	int cmd;   /* we write object numbers here */
	int ack;   /* it answers each with one byte */
};

static struct putter putter_start(const struct test_store *t)
{
	int cmd[2], ack[2];
	struct putter p;

	ftest_assert_int_eq(pipe(cmd), 0);
	ftest_assert_int_eq(pipe(ack), 0);
	p.pid = fork();
	ftest_assert_int_ge(p.pid, 0);
	if (p.pid == 0) {
		struct ferry_plasma_client *c;
		uint32_t n[2];
		char b = 1;

		ferry__alloc_fail_after(-1);
		close(cmd[1]);
		close(ack[0]);
		c = client_connect(t);
		while (read(cmd[0], n, sizeof(n)) == (ssize_t)sizeof(n)) {
			for (uint32_t k = n[0]; k < n[0] + n[1]; k++)
				client_put(c, k, 8);
			if (write(ack[1], &b, 1) != 1)
				_exit(2);
		}
		ferry_plasma_client_disconnect(c);
		_exit(0);
	}
	close(cmd[0]);
	close(ack[1]);
	p.cmd = cmd[1];
	p.ack = ack[0];
	return p;
}

/* Put objects @first .. @first + @count - 1 (8 bytes each) from the putter; wait for it. */
static void putter_put(struct putter *p, uint32_t first, uint32_t count)
{
	uint32_t n[2] = {first, count};
	char b;

	ftest_assert_int_eq(write(p->cmd, n, sizeof(n)), (int)sizeof(n));
	ftest_assert_int_eq(read(p->ack, &b, 1), 1);
}

static void putter_stop(struct putter *p)
{
	int status;

	close(p->cmd);
	close(p->ack);
	ftest_assert_int_eq(waitpid(p->pid, &status, 0), p->pid);
	ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static uint64_t size_of(uint32_t n)
{
	return n % 5 == 0 ? 2 * MIB : 100 + n; /* the socket path and the shared-memory path */
}

static void put_some(const struct test_store *t, int k)
{
	struct ferry_plasma_client *c = client_connect(t);

	for (uint32_t i = 0; i < PER_PROC; i++) {
		uint32_t n = (uint32_t)k * PER_PROC + i;

		client_put(c, n, size_of(n));
	}
	ferry_plasma_client_disconnect(c);
}

/* PROCS processes that put their objects at once when told (forked before the test allocates
 * anything). Returns the write end of their "go" pipe. */
static int fork_children(const struct test_store *t, pid_t *pids)
{
	int go[2];

	ftest_assert_int_eq(pipe(go), 0);
	for (int k = 0; k < PROCS; k++) {
		pids[k] = fork();
		ftest_assert_int_ge(pids[k], 0);
		if (pids[k] == 0) {
			char b;

			close(go[1]);
			if (read(go[0], &b, 1) != 1)
				_exit(2);
			put_some(t, k);
			_exit(0);
		}
	}
	close(go[0]);
	return go[1];
}

static void run_children(int go, const pid_t *pids)
{
	char b[PROCS] = {0};
	int status;

	ftest_assert_int_eq(write(go, b, PROCS), PROCS);
	close(go);
	for (int k = 0; k < PROCS; k++) {
		ftest_assert_int_eq(waitpid(pids[k], &status, 0), pids[k]);
		ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

FTEST(subscribers_see_seals_and_removals_of_other_processes)
{
	struct ferry_plasma_event ev[PROCS * PER_PROC];
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_subscription *all, *gone;
	struct ferry_object_id id = oid(1000);
	bool seen[PROCS * PER_PROC] = {0};
	uint32_t last[PROCS];
	void *d;

	pid_t pids[PROCS];
	int go;

	store_spawn(&t, opts(64 * MIB, 4096));
	go = fork_children(&t, pids);
	c = client_connect(&t);
	all = subscribe(c, 0, 0);
	gone = subscribe(c, 1u << FERRY_PLASMA_EVENT_DELETED | 1u << FERRY_PLASMA_EVENT_EVICTED, 0);
	run_children(go, pids);
	read_n(all, ev, PROCS * PER_PROC);
	for (int k = 0; k < PROCS; k++)
		last[k] = UINT32_MAX;
	for (size_t i = 0; i < PROCS * PER_PROC; i++) {
		uint32_t n = num_of(&ev[i].id), k = n / PER_PROC;

		ftest_assert_uint_lt(n, PROCS * PER_PROC);
		ftest_assert_false(seen[n]);
		seen[n] = true;
		ftest_assert_int_eq(ev[i].kind, FERRY_PLASMA_EVENT_SEALED);
		ftest_assert_uint_eq(ev[i].data_size, size_of(n));
		ftest_assert_uint_eq(ev[i].metadata_size, 4);
		ftest_assert_true(ev[i].primary);
		/* Each process's seals in its order. */
		ftest_assert_true(last[k] == UINT32_MAX || last[k] < n);
		last[k] = n;
	}
	/* A delete and an eviction, then a seal the removal-only subscriber does not want. */
	id = oid(3);
	ftest_assert_ok(ferry_plasma_client_delete(c, &id, 1, NULL));
	id = oid(1000);
	ftest_assert_ok(ferry_plasma_client_create_ex(c, &id, 64, NULL, 0,
						      FERRY_PLASMA_CREATE_SECONDARY, &d));
	ftest_assert_ok(ferry_plasma_client_seal(c, &id));
	ftest_assert_int_eq(ferry_plasma_client_evict(c, 1, NULL), 1);
	read_n(all, ev, 3);
	ftest_assert_int_eq(ev[0].kind, FERRY_PLASMA_EVENT_DELETED);
	ftest_assert_uint_eq(num_of(&ev[0].id), 3);
	ftest_assert_uint_eq(ev[0].data_size, size_of(3));
	ftest_assert_int_eq(ev[1].kind, FERRY_PLASMA_EVENT_SEALED);
	ftest_assert_false(ev[1].primary);
	ftest_assert_int_eq(ev[2].kind, FERRY_PLASMA_EVENT_EVICTED);
	ftest_assert_uint_eq(num_of(&ev[2].id), 1000);
	read_n(gone, ev, 2);
	ftest_assert_int_eq(ev[0].kind, FERRY_PLASMA_EVENT_DELETED);
	ftest_assert_int_eq(ev[1].kind, FERRY_PLASMA_EVENT_EVICTED);
	ftest_assert_int_eq(ferry_plasma_subscription_read(gone, ev, 1, 0, NULL), 0);
	ferry_plasma_subscription_close(gone);
	ferry_plasma_subscription_close(all);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(removals_of_objects_sealed_before_the_subscription_are_reported)
{
	struct ferry_plasma_event ev[1];
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_subscription *s;
	struct ferry_object_id id = oid(1);
	struct pollfd pfd;

	store_spawn(&t, opts(16 * MIB, 4096));
	c = client_connect(&t);
	client_put(c, 1, 10);
	s = subscribe(c, 0, 0);
	ftest_assert_ok(ferry_plasma_client_delete(c, &id, 1, NULL));
	pfd = (struct pollfd){.fd = ferry_plasma_subscription_fd(s), .events = POLLIN};
	ftest_assert_int_eq(poll(&pfd, 1, -1), 1);
	ftest_assert_int_eq(ferry_plasma_subscription_read(s, ev, 1, 0, NULL), 1);
	ftest_assert_int_eq(ev[0].kind, FERRY_PLASMA_EVENT_DELETED);
	ftest_assert_uint_eq(num_of(&ev[0].id), 1);
	ferry_plasma_subscription_close(s);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

/* Enough events to overflow what the kernel and the store hold for a reader that sleeps. */
#define FLOOD 20000u

FTEST(a_slow_subscriber_is_told_what_it_missed)
{
	static struct ferry_plasma_event ev[512];
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_subscription *s;
	uint64_t missed, lost = 0, got = 0;
	struct putter p;
	uint32_t next = 0;

	store_spawn(&t, opts(64 * MIB, 32768));
	p = putter_start(&t);
	c = client_connect(&t);
	s = subscribe(c, 0, 16);
	/* Another process puts while we do not read. */
	putter_put(&p, 0, FLOOD + 1);
	putter_stop(&p);
	/* Read until every event is accounted for: the IDs only go up. */
	while (got + lost < FLOOD + 1) {
		int r = ferry_plasma_subscription_read(s, ev, 512, -1, &missed);

		ftest_assert_int_ge(r, 0);
		lost += missed;
		for (int i = 0; i < r; i++) {
			uint32_t n = num_of(&ev[i].id);

			ftest_assert_uint_ge(n, next);
			next = n + 1;
			got++;
		}
	}
	ftest_assert_uint_gt(lost, 0);
	ftest_assert_uint_eq(got + lost, FLOOD + 1);
	ftest_assert_int_eq(ferry_plasma_subscription_read(s, ev, 1, 0, &missed), 0);
	ftest_assert_uint_eq(missed, 0);
	/* Caught up: nothing is lost any more. */
	client_put(c, FLOOD + 1, 8);
	ftest_assert_int_eq(ferry_plasma_subscription_read(s, ev, 512, -1, &missed), 1);
	ftest_assert_uint_eq(missed, 0);
	ftest_assert_uint_eq(num_of(&ev[0].id), FLOOD + 1);
	ferry_plasma_subscription_close(s);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}

FTEST(the_store_going_away_ends_the_subscription)
{
	struct ferry_plasma_event ev[1];
	struct test_store t;
	struct ferry_plasma_client *c;
	struct ferry_plasma_subscription *s;

	store_spawn(&t, opts(16 * MIB, 4096));
	c = client_connect(&t);
	s = subscribe(c, 0, 0);
	ftest_assert_int_eq(ferry_plasma_subscription_read(s, ev, 1, 0, NULL), 0);
	ftest_assert_errno(ferry_plasma_subscription_read(NULL, ev, 1, 0, NULL), -EINVAL);
	store_stop(&t);
	ftest_assert_errno(ferry_plasma_subscription_read(s, ev, 1, -1, NULL), -ECONNRESET);
	ftest_assert_errno(ferry_plasma_subscription_read(s, ev, 1, 0, NULL), -ECONNRESET);
	ferry_plasma_subscription_close(s);
	ferry_plasma_subscription_close(NULL);
	ferry_plasma_client_disconnect(c);
}

FTEST(allocation_failures_in_subscribe_and_read_are_clean)
{
	struct ferry_plasma_event ev[4];
	struct test_store t;
	struct ferry_plasma_client *c;
	struct putter p;
	long live, k;
	int failures = 0;

	store_spawn(&t, opts(16 * MIB, 4096));
	p = putter_start(&t);
	c = client_connect(&t);
	live = ferry__alloc_live();
	for (k = 0;; k++) {
		struct ferry_plasma_subscription *s = NULL;
		uint64_t missed = 0;
		bool fired;
		int r;

		ferry__alloc_fail_after(k);
		r = ferry_plasma_client_subscribe(c, NULL, &s);
		if (r == 0) {
			putter_put(&p, (uint32_t)k, 1);
			r = ferry_plasma_subscription_read(s, ev, 4, -1, &missed);
			/* A batch without memory to hold it is reported as missed. */
			ftest_assert_true(r == 1 || (r == 0 && missed == 1));
			ferry_plasma_subscription_close(s);
		}
		fired = !ferry__alloc_fail_pending();
		ferry__alloc_fail_after(-1);
		ftest_assert_int_eq(ferry__alloc_live(), live);
		if (!fired) {
			ftest_assert_int_eq(r, 1);
			break;
		}
		failures++;
		ftest_assert_true(r >= 0 || r == -ENOMEM);
	}
	ftest_assert_int_ge(failures, 3);
	putter_stop(&p);
	ferry_plasma_client_disconnect(c);
	store_stop(&t);
}
