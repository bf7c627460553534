/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A node dies (issue 24, fault tolerance), on a cluster `ferry start` runs: a GCS and two
 * ferry-node processes of one CPU each on loopback, a driver joined to one of them (A). Node B
 * is SIGKILLed with tasks running and queued there (soft NODE_AFFINITY to B), before the GCS
 * declares it dead: its workers end with it (no ferry-worker of B's is left), and every task
 * completes on A, with its right result. A task with hard affinity to B then fails with
 * -EHOSTUNREACH naming B. B stopped instead (cut off, its sockets open): once the GCS declares
 * it dead, the driver ends what it has there and its tasks complete on A. A task's 4 MiB return
 * whose only copy was in B's store is made again when B dies (lineage, runtime/lineage.c): a
 * get after the death has the same bytes, and the task ran twice; one pulled to A before is
 * read there, not made again; gets already waiting for such returns when B dies are woken
 * and have the bytes made again, or the error of the run that made them again. The job is tests/unit/runtime/job_owner.c (where).
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/runtime/cluster2.h"
#include "tests/integration/runtime/where.h"

#define GET_MS 30000
#define TASKS 8

/* @cpus: each node's CPUs, or 0 for the head's 1 and the other's 2. */
static void start_cluster(int cpus)
{
	cluster2_start("ferry-node-death", cpus ? cpus : 1, cpus ? cpus : 2);
}

/* The same, with pulls between the two nodes over TCP, as between hosts (--shm off): over
 * shm a node whose store client is already connected reads the other store's shared index,
 * which needs nothing of that store's process, so a stopped node's objects stay readable. */
static void start_cluster_no_shm(int cpus)
{
	cluster2_start_extra("ferry-node-death", cpus, cpus, "--shm off");
}

/* The node a where() ran on; it must have succeeded. */
static struct ferry_node_id ran_on(struct ferry_ref *r)
{
	return ran_on_within(r, GET_MS);
}

FTEST(tasks_on_a_killed_node_complete_elsewhere)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_task_opts hard = {.strategy = FERRY_SCHED_NODE_AFFINITY};
	struct ferry_node_id self, b, n;
	struct ferry_ref r[TASKS], probe;
	struct ferry_view v;
	unsigned on_self = 0, left = 1;
	pid_t bpid;
	char hex[40];
	int i;

	start_cluster(0);
	self = ferry__rt.node;
	b = cluster2_node_b(&soft, &bpid);
	hard.affinity_node = b;
	/* One CPU there: one task runs, the others queue behind it (pipelined to its worker or
	 * waiting for a lease), none done before the kill (each sleeps 2 s). */
	for (i = 0; i < TASKS; i++)
		r[i] = where(2000, &soft);
	usleep(300 * 1000); /* let them reach B: without it the test passes too, it tests less */
	ftest_assert_ok(kill(bpid, SIGKILL));
	for (i = 0; i < TASKS; i++) {
		n = ran_on(&r[i]);
		on_self += ferry_node_id_eq(&n, &self);
	}
	ftest_log("%u of %d ran on the driver's node after B died", on_self, TASKS);
	ftest_assert_uint_eq(on_self, TASKS);
	/* B's workers ended with it (PR_SET_PDEATHSIG); its SIGKILL reaches them at once, so a
	 * bounded wait only absorbs scheduling. */
	for (i = 0; i < 100 && (left = cluster2_workers_of(bpid)); i++)
		usleep(50 * 1000);
	ftest_assert_uint_eq(left, 0);
	/* Hard affinity to the dead node: -EHOSTUNREACH naming it (whether or not the GCS has
	 * declared it dead yet). */
	probe = where(0, &hard);
	ftest_assert_errno(ferry_get(&probe, GET_MS, &v), -EHOSTUNREACH);
	ferry_node_id_to_hex(&b, hex, sizeof(hex));
	ftest_log("error: %s", v.error);
	ftest_assert_ptr_notnull(strstr(v.error, hex));
	ferry_ref_drop(&probe);
	ferry_shutdown();
	cluster2_stop();
}

/* B stopped with its workers (SIGSTOP of its process group: a host cut off, whose sockets stay
 * open): the GCS declares it dead when its heartbeats stop, the driver hears it (node_watch.c)
 * and its tasks there run here. Without that, they would wait for B for ever (the get's 30 s
 * then fails the test). */
FTEST(tasks_on_a_cut_off_node_complete_elsewhere)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_node_id self, n;
	struct ferry_ref r[2];
	unsigned on_self = 0;
	pid_t bpid;

	start_cluster(0);
	self = ferry__rt.node;
	(void)cluster2_node_b(&soft, &bpid);
	cluster2_frozen = getpgid(bpid);
	ftest_assert_true(cluster2_frozen > 1 && cluster2_frozen != getpgid(0));
	for (int i = 0; i < 2; i++)
		r[i] = where(2000, &soft);
	usleep(300 * 1000); /* let them reach B: without it the test passes too, it tests less */
	ftest_assert_ok(kill(-cluster2_frozen, SIGSTOP));
	for (int i = 0; i < 2; i++) {
		n = ran_on(&r[i]);
		on_self += ferry_node_id_eq(&n, &self);
	}
	ftest_log("%u of 2 ran on the driver's node after B was cut off", on_self);
	ftest_assert_uint_eq(on_self, 2);
	ferry_shutdown();
	cluster2_stop();
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* big_tally's result in @v: its size and its bytes' hash as the function makes them. */
static void check_big(const struct ferry_view *v, size_t size)
{
	uint8_t *want = malloc(size);

	ftest_assert_ptr_notnull(want);
	for (size_t k = 0; k < size; k++)
		want[k] = (uint8_t)(k * 31 + 7);
	ftest_assert_uint_eq(v->len, size);
	ftest_assert_uint_eq(fnv1a(v->data, v->len), fnv1a(want, size));
	free(want);
}

static int get_logged(const struct ferry_ref *r, struct ferry_view *v)
{
	int ret = ferry_get(r, GET_MS, v);

	if (ret < 0)
		ftest_log("big_tally: %s: %s", ferry_strerror(ret), v->error);
	return ret;
}

/* Two 4 MiB returns made on B: one pulled to the driver's node (a get) before B dies, so a
 * copy lives on; the other only ever in B's store, and a third made there from it (echo). B
 * SIGKILLed: the second's task runs again (its run count goes to 2), then the third's, and gets
 * have the same bytes; the first is read from its copy, its task not run again. Four CPUs a
 * node: soft affinity finds room on B for all three at once (the probe's lease held). With
 * fewer, under load the echo could go to the driver's node when B's report shows it full, and
 * pull the second's return there: a copy that lives on, and nothing to make again. */
FTEST(a_return_lost_with_its_node_is_made_again)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	int64_t mib = 4;
	size_t size = (size_t)mib << 20;
	char path[2][300];
	struct ferry_arg args[2] = {{0}, {.data = &mib, .len = sizeof(mib)}};
	struct ferry_ref r[3];
	struct ferry_arg by_ref = {0};
	struct ferry_view v;
	pid_t bpid;
	int ready = 0;
	unsigned n = 0;
	int i;

	start_cluster(4);
	(void)cluster2_node_b(&soft, &bpid);
	for (i = 0; i < 2; i++) {
		snprintf(path[i], sizeof(path[i]), "%s/big_tally-%d.runs", cluster2_run_dir, i);
		unlink(path[i]);
		args[0].data = path[i];
		args[0].len = strlen(path[i]);
		ftest_assert_ok(ferry_submit("big_tally", args, 2, &soft, &r[i]));
	}
	/* A third made on B from the second (echo): lost too, made again after its argument. */
	by_ref.ref = &r[1];
	ftest_assert_ok(ferry_submit("echo", &by_ref, 1, &soft, &r[2]));
	ftest_assert_ok(get_logged(&r[0], &v)); /* pulled here */
	check_big(&v, size);
	ferry_release(&v);
	/* Ready, in B's store only: waited for, never got (a get would pull a copy here). */
	ftest_assert_int_eq(ferry_wait(&r[1], 1, 1, GET_MS, &ready), 1);
	ftest_assert_int_eq(ferry_wait(&r[2], 1, 1, GET_MS, &ready), 1);
	ftest_assert_uint_eq(cluster2_runs(path[0]), 1);
	ftest_assert_uint_eq(cluster2_runs(path[1]), 1);
	ftest_assert_ok(kill(bpid, SIGKILL));
	/* The driver hears of the death from the GCS and runs the task again: its second line. A
	 * bounded wait for that event, not a timing assert. */
	for (i = 0; i < 400 && (n = cluster2_runs(path[1])) < 2; i++)
		usleep(50 * 1000);
	ftest_assert_uint_eq(n, 2);
	ftest_assert_ok(get_logged(&r[1], &v));
	check_big(&v, size);
	ferry_release(&v);
	ftest_assert_uint_eq(cluster2_runs(path[1]), 2);
	ftest_assert_ok(get_logged(&r[2], &v));
	check_big(&v, size);
	ferry_release(&v);
	/* The death was handled for both at once: the pulled one was not made again. */
	ftest_assert_ok(get_logged(&r[0], &v));
	check_big(&v, size);
	ferry_release(&v);
	ftest_assert_uint_eq(cluster2_runs(path[0]), 1);
	for (i = 0; i < 3; i++)
		ferry_ref_drop(&r[i]);
	ferry_shutdown();
	cluster2_stop();
}

struct waiting_get {
	struct ferry_ref ref; /* in */
	struct ferry_view v;  /* out: the view */
	int ret;	      /* ... the get's */
	atomic_bool done;     /* ... it returned */
};

/* Whether @r's object is held on @node only, by the object directory (its record may lag the
 * task's answer a little: waited for, bounded). */
static bool only_on(const struct ferry_ref *r, const struct ferry_node_id *node)
{
	for (int i = 0; i < 200; i++) {
		struct ferry_gcs_object_info info = {0};
		int ret = ferry_gcs_object_lookup(ferry__rt.gcs, &r->id, &info);
		bool found = ret >= 0 && info.nlocations > 0;
		bool on =
			found && info.nlocations == 1 && ferry_node_id_eq(&info.locations[0], node);

		ferry_gcs_free(info.locations);
		if (found)
			return on;
		usleep(20 * 1000);
	}
	return false;
}

/* Whether the GCS holds @node alive. */
static bool node_alive(const struct ferry_node_id *node)
{
	struct ferry_gcs_node_info *nodes = NULL;
	int n = ferry_gcs_node_list(ferry__rt.gcs, &nodes);
	bool alive = false;

	ftest_assert_int_ge(n, 0);
	for (int i = 0; i < n; i++)
		if (ferry_node_id_eq(&nodes[i].id, node))
			alive = nodes[i].state == FERRY_GCS_NODE_ALIVE;
	ferry_gcs_free(nodes);
	return alive;
}

static void *get_thread(void *arg)
{
	struct waiting_get *g = arg;

	g->ret = ferry_get(&g->ref, GET_MS, &g->v);
	atomic_store(&g->done, true);
	return NULL;
}

/* Two 4 MiB returns made on B, only in B's store; B stopped (its sockets open, nothing
 * answers), so gets of them wait in the store for pulls that cannot come; then B is SIGKILLed.
 * The gets already waiting are woken when the driver hears of the death and makes the returns
 * again (lineage): one has the same bytes, its task ran twice; the other's task fails when run
 * again (max_runs 1), and its get has that error, not its 30 s deadline's -ETIMEDOUT (a get
 * that went on waiting in the store would see the first's new copy sealed there, never the
 * second's error). The nodes pull over TCP (start_cluster_no_shm): B must answer for its bytes
 * to move. */
FTEST(gets_waiting_when_their_node_dies_are_woken)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	int64_t mib = 4, max_runs = 1;
	char path[2][300];
	struct ferry_arg args[3] = {{0},
				    {.data = &mib, .len = sizeof(mib)},
				    {.data = &max_runs, .len = sizeof(max_runs)}};
	struct waiting_get g[2] = {{.ret = 1}, {.ret = 1}};
	struct ferry_node_id b;
	pthread_t thread[2];
	pid_t bpid;
	int ready = 0;

	start_cluster_no_shm(4);
	b = cluster2_node_b(&soft, &bpid);
	for (int i = 0; i < 2; i++) {
		/* Soft affinity may run it here when B's last report looked full (a loaded
		 * sanitizer run): then its return is not only on B, and its get would not wait.
		 * Such a try is dropped and made again, under a new tally. */
		for (int tries = 0;; tries++) {
			snprintf(path[i], sizeof(path[i]), "%s/big_tally-waiting-%d-%d.runs",
				 cluster2_run_dir, i, tries);
			unlink(path[i]);
			args[0].data = path[i];
			args[0].len = strlen(path[i]);
			ftest_assert_ok(
				ferry_submit("big_tally", args, 2 + (size_t)i, &soft, &g[i].ref));
			ftest_assert_int_eq(ferry_wait(&g[i].ref, 1, 1, GET_MS, &ready), 1);
			if (only_on(&g[i].ref, &b))
				break;
			ftest_log("return %d, try %d: not made on B only; again", i, tries + 1);
			ftest_assert_int_lt(tries, 20);
			ferry_ref_drop(&g[i].ref);
			usleep(200 * 1000);
		}
		ftest_assert_uint_eq(cluster2_runs(path[i]), 1);
	}
	cluster2_frozen = getpgid(bpid);
	ftest_assert_true(cluster2_frozen > 1 && cluster2_frozen != getpgid(0));
	ftest_assert_ok(kill(-cluster2_frozen, SIGSTOP));
	for (int i = 0; i < 2; i++)
		ftest_assert_int_eq(pthread_create(&thread[i], NULL, get_thread, &g[i]), 0);
	/* They wait: B holds the only copies and answers nothing. A pull cannot finish, so this
	 * checks state, not speed. */
	usleep(500 * 1000);
	/* Unless the GCS already declared B dead (B's beats can lag its deadline on a loaded
	 * sanitizer run before it was stopped): then the gets were woken, rightly. */
	if (atomic_load(&g[0].done) || atomic_load(&g[1].done)) {
		for (int i = 0; i < 2; i++)
			ftest_log("get %d ended while B was stopped: %s: %s", i,
				  ferry_strerror(g[i].ret), g[i].v.error);
		ftest_assert_false(node_alive(&b));
	}
	ftest_assert_ok(kill(-cluster2_frozen, SIGKILL));
	cluster2_frozen = 0;
	for (int i = 0; i < 2; i++) {
		ftest_assert_int_eq(pthread_join(thread[i], NULL), 0);
		ftest_log("get %d: %s: %s", i, ferry_strerror(g[i].ret), g[i].v.error);
	}
	ftest_assert_ok(g[0].ret);
	check_big(&g[0].v, (size_t)mib << 20);
	ferry_release(&g[0].v);
	ftest_assert_uint_eq(cluster2_runs(path[0]), 2);
	ftest_assert_true(g[1].ret < 0 && g[1].ret != -ETIMEDOUT);
	ftest_assert_ptr_notnull(strstr(g[1].v.error, "run 2 of at most 1"));
	ftest_assert_uint_eq(cluster2_runs(path[1]), 2);
	for (int i = 0; i < 2; i++)
		ferry_ref_drop(&g[i].ref);
	ferry_shutdown();
	cluster2_stop();
}
