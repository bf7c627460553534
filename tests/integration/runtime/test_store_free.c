/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Released objects leave the stores (issue 24, Figure 8a on one cluster): on a cluster `ferry
 * start` runs (a GCS and two ferry-node processes with 256 MiB stores on loopback, the driver
 * on A), rounds that each make a large object on one node and read it on the other, then drop
 * every ref, must leave neither node holding them: no copy of the driver's left as a primary
 * (in memory or spilled), none pinned, and a create of most of each store succeeds without
 * spilling anything. Three ways: a task's return made on B and read on A (task and driver);
 * a ferry_put on A read by tasks on B; a put dropped while B's store is pulling it. And a
 * driver that shuts down still holding returns made on B leaves none there.
 * The job is tests/unit/runtime/job_owner.c (where, big, arg_len).
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"
#include "tests/integration/runtime/run_dir.h"
#include "tests/integration/runtime/where.h"

#define GET_MS 30000
#define ROUNDS 12     /* 12 x 48 MiB: more than a 256 MiB store holds */
#define OBJECT_MIB 48 /* each round's object */
#define STORE_BYTES (256ull << 20)
#define SETTLE_MS 10000 /* frees travel asynchronously: how long a store may take */
/* A get on B of an object dropped before B's pull found it waits this long (a store's get
 * waits for an object that may yet come). */
#define PULL_GET_MS 3000

static char run_dir[256];
static struct ferry_worker_id driver; /* the driver's ID (kept past ferry_shutdown) */
static bool stopped = true;

static void stop_cluster(void)
{
	if (stopped)
		return;
	stopped = true;
	(void)itest_ferry_cli(run_dir, "stop --timeout 5");
}

static void remove_run_dir(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
	if (run_dir[0] && system(cmd) != 0)
		fprintf(stderr, "%s not removed\n", run_dir);
}

/* Two nodes of 2 CPUs and 256 MiB stores; the driver joins one of them (A). */
static void start_cluster(void)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	char args[1024], addr[256];

	if (!o.code_path)
		ftest_skip("FERRY_TEST_JOB not set (run through meson test)");
	snprintf(run_dir, sizeof(run_dir), "/tmp/ferry-store-free-%d", (int)getpid());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	stopped = false;
	if (!getenv("FTEST_KEEP_RUN_DIR"))
		atexit(remove_run_dir);
	atexit(stop_cluster);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, "start --head --port 0 --ip 127.0.0.1 "
						     "--memory 256M --num-cpus 2 --timeout 20"),
			    0);
	itest_cluster_address(run_dir, addr, sizeof(addr));
	snprintf(args, sizeof(args),
		 "start --address %s --token-file %s/token --ip 127.0.0.1 --memory 256M "
		 "--num-cpus 2 --timeout 20",
		 addr, run_dir);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, args), 0);
	ftest_assert_ok(ferry_init(&o));
	driver = ferry__rt.self;
}

/* Node @index's ID (its node.id file). */
static struct ferry_node_id node_id(int index)
{
	return run_dir_node(run_dir, index, NULL);
}

/* A client of node @index's store. */
static struct ferry_plasma_client *store_of(int index)
{
	struct ferry_plasma_client *c;
	char path[512];

	snprintf(path, sizeof(path), "%s/node-%d/store.sock", run_dir, index);
	ftest_assert_ok(ferry_plasma_client_connect(path, NULL, &c));
	return c;
}

/* B: the node that is not the driver's, into *@index; hard affinity to it in @hard, once a
 * task with soft affinity ran there (the driver's node has heard of B). */
static struct ferry_node_id node_b(int *index, struct ferry_task_opts *hard)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_node_id b = node_id(1), n;
	struct ferry_ref probe;

	*index = 1;
	if (ferry_node_id_eq(&b, &ferry__rt.node)) {
		b = node_id(2);
		*index = 2;
	}
	soft.affinity_node = b;
	for (int i = 0; i < 100; i++) {
		probe = where(0, &soft);
		n = ran_on_within(&probe, GET_MS);
		if (ferry_node_id_eq(&n, &b))
			break;
		usleep(50 * 1000);
	}
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	*hard = (struct ferry_task_opts){.strategy = FERRY_SCHED_NODE_AFFINITY, .affinity_node = b};
	return b;
}

/* arg_len(@input) with @opts: it must say OBJECT_MIB MiB. */
static void read_on(const struct ferry_ref *input, const struct ferry_task_opts *opts)
{
	struct ferry_arg a = {.ref = input};
	struct ferry_ref r;
	int64_t len = 0;

	ftest_assert_ok(ferry_submit("arg_len", &a, 1, opts, &r));
	ftest_assert_ok(ftest_get_int64(&r, GET_MS, &len, NULL, 0));
	ftest_assert_int_eq(len, (int64_t)OBJECT_MIB << 20);
}

/* Copies of the driver's objects in @c's store that are not yet evictable: primaries (in
 * memory or spilled) and pinned secondaries. */
static size_t held(struct ferry_plasma_client *c)
{
	struct ferry_plasma_object_info *list = NULL;
	size_t n = 0, count = 0;

	ftest_assert_ok(ferry_plasma_client_list(c, true, &list, &count));
	for (size_t i = 0; i < count; i++)
		if (!memcmp(&list[i].owner, &driver, sizeof(list[i].owner)) &&
		    (list[i].primary || list[i].pin_count > 0))
			n++;
	ferry_plasma_list_free(list);
	return n;
}

/* Node @index's store holds nothing of the driver's it cannot evict (within SETTLE_MS), and a
 * create of three quarters of it succeeds without spilling. */
static void store_back(int index)
{
	struct ferry_plasma_client *c = store_of(index);
	struct ferry_plasma_stats before, after;
	struct ferry_object_id id;
	size_t left = 0;
	void *buf;

	for (int ms = 0; ms < SETTLE_MS; ms += 50) {
		left = held(c);
		if (!left)
			break;
		usleep(50 * 1000);
	}
	if (left)
		ftest_log("node-%d still holds %zu of the driver's objects", index, left);
	ftest_assert_uint_eq(left, 0);
	ftest_assert_ok(ferry_plasma_client_stats(c, &before));
	ftest_assert_uint_eq(before.spilled_objects, 0);
	ferry_object_id_random(&id);
	ftest_assert_ok(ferry_plasma_client_create(c, &id, STORE_BYTES / 4 * 3, NULL, 0, &buf));
	ftest_assert_ok(ferry_plasma_client_abort(c, &id));
	ftest_assert_ok(ferry_plasma_client_stats(c, &after));
	ftest_assert_uint_eq(after.spilled_total_objects, before.spilled_total_objects);
	ftest_log("node-%d: %llu of %llu bytes allocated, %llu secondaries evicted", index,
		  (unsigned long long)after.allocated_bytes,
		  (unsigned long long)after.capacity_bytes,
		  (unsigned long long)after.evicted_objects);
	ferry_plasma_client_disconnect(c);
}

static void big_on(const struct ferry_task_opts *opts, struct ferry_ref *out)
{
	int64_t mib = OBJECT_MIB;
	struct ferry_arg a = {.data = &mib, .len = sizeof(mib)};

	ftest_assert_ok(ferry_submit("big", &a, 1, opts, out));
}

FTEST(task_returns_read_elsewhere_leave_both_stores)
{
	struct ferry_task_opts on_b, on_a = {.strategy = FERRY_SCHED_NODE_AFFINITY};
	int b_index;
	int a_index;

	start_cluster();
	node_b(&b_index, &on_b);
	a_index = b_index == 1 ? 2 : 1;
	on_a.affinity_node = ferry__rt.node;
	for (int i = 0; i < ROUNDS; i++) {
		struct ferry_ref made;
		struct ferry_view v;

		big_on(&on_b, &made);
		read_on(&made, &on_a); /* a task on A pulls it */
		if (i % 2) {	       /* and the driver on A reads it too */
			ftest_assert_ok(ferry_get(&made, GET_MS, &v));
			ftest_assert_uint_eq(v.len, (size_t)OBJECT_MIB << 20);
			ferry_release(&v);
		}
		ferry_ref_drop(&made);
	}
	store_back(a_index);
	store_back(b_index);
	ferry_shutdown();
}

FTEST(puts_read_elsewhere_leave_both_stores)
{
	struct ferry_task_opts on_b;
	size_t size = (size_t)OBJECT_MIB << 20;
	char *data = malloc(size);
	int b_index;

	ftest_assert_ptr_notnull(data);
	memset(data, 3, size);
	start_cluster();
	node_b(&b_index, &on_b);
	for (int i = 0; i < ROUNDS; i++) {
		struct ferry_ref put;

		ftest_assert_ok(ferry_put(data, size, &put));
		read_on(&put, &on_b); /* B pulls it */
		ferry_ref_drop(&put);
	}
	free(data);
	store_back(b_index == 1 ? 2 : 1);
	store_back(b_index);
	ferry_shutdown();
}

struct pull {
	int index;		   /* the store that pulls */
	struct ferry_object_id id; /* what */
	int status;		   /* its get's */
};

/* A reader of B's own: a get of an object B does not hold starts a pull there. */
static void *pull_on_b(void *arg)
{
	struct pull *p = arg;
	struct ferry_plasma_client *c = store_of(p->index);
	struct ferry_plasma_view v;

	p->status = ferry_plasma_client_get(c, &p->id, 1, PULL_GET_MS, &v);
	if (p->status == 0)
		(void)ferry_plasma_client_release(c, &v);
	ferry_plasma_client_disconnect(c);
	return NULL;
}

FTEST(a_put_dropped_while_pulled_leaves_both_stores)
{
	struct ferry_task_opts on_b;
	size_t size = (size_t)OBJECT_MIB << 20;
	char *data = malloc(size);
	unsigned pulled = 0;
	int b_index;

	ftest_assert_ptr_notnull(data);
	memset(data, 5, size);
	start_cluster();
	node_b(&b_index, &on_b);
	for (int i = 0; i < ROUNDS; i++) {
		struct pull p = {.index = b_index};
		struct ferry_ref put;
		pthread_t t;

		ftest_assert_ok(ferry_put(data, size, &put));
		p.id = put.id;
		ftest_assert_int_eq(pthread_create(&t, NULL, pull_on_b, &p), 0);
		usleep((useconds_t)(i % 4) *
		       2000); /* dropped before, at and after the pull starts */
		ferry_ref_drop(&put);
		ftest_assert_int_eq(pthread_join(t, NULL), 0);
		pulled += p.status == 0;
	}
	ftest_log("%u of %d pulls finished before their object went", pulled, ROUNDS);
	free(data);
	store_back(b_index == 1 ? 2 : 1);
	store_back(b_index);
	ferry_shutdown();
}

FTEST(a_driver_shut_down_holding_refs_leaves_no_copies)
{
	struct ferry_task_opts on_b;
	struct ferry_ref made[3];
	int b_index, ready[3];

	start_cluster();
	node_b(&b_index, &on_b);
	for (int i = 0; i < 3; i++)
		big_on(&on_b, &made[i]);
	ftest_assert_int_eq(ferry_wait(made, 3, 3, GET_MS, ready), 3);
	/* Still held: ferry_shutdown frees them, on B too (B sees this process alive, so it does
	 * not take them for a dead owner's). */
	ferry_shutdown();
	store_back(b_index);
	store_back(b_index == 1 ? 2 : 1);
}
