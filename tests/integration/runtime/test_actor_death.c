/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Actors placed by strategy and restarted on another node (issue 24), on a cluster `ferry
 * start` runs: a GCS and two ferry-node processes on loopback, a driver joined to one of them
 * (A). NODE_AFFINITY actors land on their node (hard and soft), SPREAD ones on both nodes (with
 * a ferry-sched), in placement-group bundles on their bundles' nodes, and a compiled graph
 * reaches an actor on B. Node B SIGKILLed with actors on it and calls in flight there: an actor with a
 * restart left starts again on A (its constructor rerun with the same argument), its call in
 * flight runs again there (max_task_retries), its later calls go to the new instance and its
 * name finds it there (a named handle taken before the death too); one without restarts is DEAD: its call in flight fails with -EPIPE and
 * its later calls with -ESRCH, both naming B, and the GCS records it DEAD of its node's death.
 * An actor with hard affinity to the dead B is DEAD with -EHOSTUNREACH naming B. B cut off
 * instead (stopped, its sockets open): once the GCS declares it dead, its actor restarts on A.
 * A detached actor placed on B outlives its creator there. The job is tests/unit/runtime/job_owner.c (Spot).
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB, FERRY_SCHED_BIN.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "common/loop.h"
#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/runtime/cluster2.h"

#define GET_MS 30000

/* A Spot actor (job_owner.c) starting at @start, placed by @o. */
static struct ferry_actor *spot(int64_t start, const struct ferry_actor_opts *o)
{
	struct ferry_arg a = {.data = &start, .len = sizeof(start)};
	struct ferry_actor *h = NULL;

	ftest_assert_ok(ferry_actor_create("Spot", &a, 1, o, &h));
	return h;
}

/* Call Spot.where(@ms); its ref. */
static struct ferry_ref where_call(struct ferry_actor *h, int64_t ms)
{
	struct ferry_arg a = {.data = &ms, .len = sizeof(ms)};
	struct ferry_ref r;

	ftest_assert_ok(ferry_actor_call(h, "where", &a, 1, 1, &r));
	return r;
}

/* The node Spot.where ran on (it must succeed); @r is dropped. */
static struct ferry_node_id got_node(struct ferry_ref *r)
{
	return ran_on_within(r, GET_MS);
}

static struct ferry_node_id actor_node(struct ferry_actor *h)
{
	struct ferry_ref r = where_call(h, 0);

	return got_node(&r);
}

/* Spot.next()'s value (it must succeed). */
static int64_t next_of(struct ferry_actor *h)
{
	struct ferry_ref r;
	struct ferry_view v;
	int64_t n = -1;
	int ret;

	ftest_assert_ok(ferry_actor_call(h, "next", NULL, 0, 1, &r));
	ret = ferry_get(&r, GET_MS, &v);
	if (ret < 0)
		ftest_log("next: %s: %s", ferry_strerror(ret), v.error);
	ftest_assert_ok(ret);
	ftest_assert_uint_eq(v.len, sizeof(n));
	memcpy(&n, v.data, sizeof(n));
	ferry_release(&v);
	ferry_ref_drop(&r);
	return n;
}

/* @r fails with @status and an error that names node @node (its first 12 hex digits: the
 * short form errors use). */
static void fails_naming(struct ferry_ref *r, int status, const struct ferry_node_id *node)
{
	char hex[FERRY_ID_HEX_MAX];
	struct ferry_view v;
	int ret = ferry_get(r, GET_MS, &v);

	ferry_node_id_to_hex(node, hex, sizeof(hex));
	hex[12] = 0;
	ftest_log("%s: %s", ferry_strerror(ret), v.error);
	ftest_assert_errno(ret, status);
	ftest_assert_ptr_notnull(strstr(v.error, hex));
	ferry_ref_drop(r);
}

/* The GCS's actors table has @h DEAD, its node died, the message naming node @node. */
static void dead_naming(struct ferry_actor *h, const struct ferry_node_id *node)
{
	struct ferry_gcs_actor_info *info = NULL;
	struct ferry_actor_id id;
	char hex[FERRY_ID_HEX_MAX];
	int state = -1;

	ftest_assert_ok(ferry_actor_id(h, &id));
	ferry_node_id_to_hex(node, hex, sizeof(hex));
	hex[12] = 0;
	/* The owner's update is asynchronous: a bounded wait for it, not a timing assert. */
	for (int i = 0; i < 100 && state != FERRY_GCS_ACTOR_DEAD; i++) {
		ferry_gcs_free(info);
		info = NULL;
		ftest_assert_ok(ferry_gcs_actor_get(ferry__rt.gcs, &id, &info));
		state = info->state;
		if (state != FERRY_GCS_ACTOR_DEAD)
			usleep(50 * 1000);
	}
	ftest_log("in the GCS: cause %d: %s", (int)info->death_cause,
		  info->death_message ? info->death_message : "(none)");
	ftest_assert_int_eq(state, FERRY_GCS_ACTOR_DEAD);
	ftest_assert_int_eq(info->death_cause, FERRY_GCS_EXIT_NODE_DIED);
	ftest_assert_ptr_notnull(info->death_message);
	ftest_assert_ptr_notnull(strstr(info->death_message, hex));
	ferry_gcs_free(info);
}

/* A compiled graph of one node, @h's where, reaches @h's worker on its node (@node) of this
 * host: beside that node's socket, not ours. */
static void graph_on(struct ferry_actor *h, const struct ferry_node_id *node)
{
	struct ferry_graph_result res;
	struct ferry_graph *g = NULL;
	struct ferry_node_id n;
	int64_t ms = 0;
	uint64_t exec;

	ftest_assert_ok(ferry_graph_create(&g));
	ftest_assert_int_ge(ferry_graph_bind(g, h, "Spot.where", &FERRY_GRAPH_INPUT(0), 1), 0);
	ftest_assert_ok(ferry_graph_compile(g, GET_MS));
	ftest_assert_ok(ferry_graph_execute(g, &FERRY_GRAPH_CONST(&ms, sizeof(ms)), 1, &exec));
	ftest_assert_ok(ferry_graph_get(g, exec, GET_MS, &res));
	ftest_assert_uint_eq(res.len, sizeof(n));
	memcpy(&n, res.data, sizeof(n));
	ferry_graph_result_release(&res);
	ftest_assert_true(ferry_node_id_eq(&n, node));
	ferry_graph_destroy(g);
}

/* NODE_AFFINITY, hard and soft, to either node: the actor's lease goes through the driver's
 * node's local scheduler ("retry at" the other node) and its worker runs there. Bad options
 * are refused with -EINVAL. */
FTEST(actors_follow_node_affinity)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_actor_opts o = {.strategy = FERRY_SCHED_NODE_AFFINITY}, bad = {0};
	struct ferry_actor *h[3];
	int64_t start = 0;
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};
	struct ferry_node_id self, b, n;
	pid_t bpid;

	cluster2_start("ferry-actor-death", 2, 4);
	self = ferry__rt.node;
	/* Misuse: NODE_AFFINITY without a node, a strategy that does not exist. */
	ftest_assert_errno(ferry_actor_create("Spot", &arg, 1, &o, &h[0]), -EINVAL);
	bad.strategy = (enum ferry_sched_strategy)7;
	ftest_assert_errno(ferry_actor_create("Spot", &arg, 1, &bad, &h[0]), -EINVAL);
	b = cluster2_node_b(&soft, &bpid);
	o.affinity_node = b;
	h[0] = spot(0, &o);
	o.affinity_soft = true;
	h[1] = spot(0, &o);
	o.affinity_node = self;
	o.affinity_soft = false;
	h[2] = spot(0, &o);
	n = actor_node(h[0]);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	n = actor_node(h[1]);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	n = actor_node(h[2]);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	/* Its state lives in the worker there: the calls see one another. */
	ftest_assert_int_eq(next_of(h[0]), 1);
	ftest_assert_int_eq(next_of(h[0]), 2);
	graph_on(h[0], &b);
	for (int i = 0; i < 3; i++)
		ferry_actor_drop(h[i]);
	ferry_shutdown();
	cluster2_stop();
}

/* SPREAD: the scheduler places each actor's lease; two of one CPU on two idle nodes of two
 * CPUs go one to each (the emptiest node, the first's amounts taken off at its commit). */
FTEST(spread_actors_use_both_nodes)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_actor_opts o = {.strategy = FERRY_SCHED_SPREAD};
	struct ferry_actor *h[2];
	struct ferry_node_id n[2];
	pid_t bpid;

	cluster2_start("ferry-actor-death", 2, 2);
	(void)cluster2_node_b(&soft, &bpid);
	cluster2_need_scheduler();
	for (int i = 0; i < 2; i++)
		h[i] = spot(0, &o);
	for (int i = 0; i < 2; i++)
		n[i] = actor_node(h[i]);
	ftest_assert_false(ferry_node_id_eq(&n[0], &n[1]));
	for (int i = 0; i < 2; i++)
		ferry_actor_drop(h[i]);
	ferry_shutdown();
	cluster2_stop();
}

/* A placement group of two bundles, STRICT_SPREAD over the two nodes: an actor in each bundle
 * runs on that bundle's node, one of them not the driver's (its lease asked of that node). */
FTEST(actors_in_bundles_run_on_their_nodes)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_pg_bundle bundles[2] = {{.num_cpus = 1}, {.num_cpus = 1}};
	struct ferry_pg_opts po = {
		.strategy = FERRY_PG_STRICT_SPREAD, .bundles = bundles, .nbundles = 2};
	struct ferry_node_id self, b, n[2];
	struct ferry_actor *h[2];
	struct ferry_pg *pg;
	pid_t bpid;

	cluster2_start("ferry-actor-death", 2, 2);
	self = ferry__rt.node;
	b = cluster2_node_b(&soft, &bpid);
	ftest_assert_ok(ferry_pg_create(&po, &pg));
	ftest_assert_ok(ferry_pg_wait(pg, GET_MS));
	for (int i = 0; i < 2; i++) {
		struct ferry_actor_opts o = {.pg = pg, .pg_bundle = i};

		h[i] = spot(0, &o);
		n[i] = actor_node(h[i]);
	}
	ftest_assert_false(ferry_node_id_eq(&n[0], &n[1]));
	ftest_assert_true(ferry_node_id_eq(&n[0], &b) || ferry_node_id_eq(&n[1], &b));
	ftest_assert_true(ferry_node_id_eq(&n[0], &self) || ferry_node_id_eq(&n[1], &self));
	for (int i = 0; i < 2; i++)
		ferry_actor_drop(h[i]);
	ftest_assert_ok(ferry_pg_remove(pg));
	ferry_shutdown();
	cluster2_stop();
}

/* Node B SIGKILLed under two actors with a call in flight each: the one with a restart and a
 * task retry left goes on on A, the other is DEAD naming B; hard affinity to B then fails. */
FTEST(an_actor_on_a_killed_node_restarts_elsewhere)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_actor_opts keep = {.strategy = FERRY_SCHED_NODE_AFFINITY,
					.affinity_soft = true,
					.max_restarts = 1,
					.max_task_retries = 1,
					.name = "spot-keep"};
	struct ferry_actor_opts once = {.strategy = FERRY_SCHED_NODE_AFFINITY,
					.affinity_soft = true};
	struct ferry_actor_opts hard = {.strategy = FERRY_SCHED_NODE_AFFINITY};
	struct ferry_actor *y, *x, *named, *before, *z;
	struct ferry_node_id self, b, n;
	struct ferry_ref ry, rx, r;
	unsigned left = 1;
	uint64_t killed_ms;
	pid_t bpid;

	cluster2_start("ferry-actor-death", 2, 4);
	self = ferry__rt.node;
	b = cluster2_node_b(&soft, &bpid);
	keep.affinity_node = once.affinity_node = hard.affinity_node = b;
	y = spot(10, &keep);
	x = spot(0, &once);
	n = actor_node(y);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	n = actor_node(x);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	ftest_assert_int_eq(next_of(y), 11);
	ftest_assert_ok(ferry_actor_get_named("spot-keep", &before)); /* its own record */
	ftest_assert_int_eq(next_of(before), 12);
	/* Calls in flight (each sleeps 3 s there) when B dies. */
	ry = where_call(y, 3000);
	rx = where_call(x, 3000);
	usleep(300 * 1000); /* let them reach B: without it the test passes too, it tests less */
	killed_ms = ferry__loop_now_ms();
	ftest_assert_ok(kill(bpid, SIGKILL));
	/* y's call ran again on its new instance, on A. */
	n = got_node(&ry);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	/* A figure for the log, not an assert: from the kill to the retried call's answer. */
	ftest_log("the call in flight answered on A %llu ms after B's SIGKILL",
		  (unsigned long long)(ferry__loop_now_ms() - killed_ms));
	/* Its constructor ran again with its argument: its state began again at 10. */
	ftest_assert_int_eq(next_of(y), 11);
	n = actor_node(y);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	/* Its name finds the new instance. */
	ftest_assert_ok(ferry_actor_get_named("spot-keep", &named));
	n = actor_node(named);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	ftest_assert_int_eq(next_of(named), 12);
	ferry_actor_drop(named);
	/* A named handle from before the death finds the new instance too (the GCS again). */
	ftest_assert_int_eq(next_of(before), 13);
	n = actor_node(before);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	ferry_actor_drop(before);
	/* x had no restart: its call in flight failed, and so does every later one. */
	fails_naming(&rx, -EPIPE, &b);
	r = where_call(x, 0);
	fails_naming(&r, -ESRCH, &b);
	dead_naming(x, &b);
	/* B's workers ended with it (PR_SET_PDEATHSIG): a bounded wait absorbs scheduling. */
	for (int i = 0; i < 100 && (left = cluster2_workers_of(bpid)); i++)
		usleep(50 * 1000);
	ftest_assert_uint_eq(left, 0);
	/* Hard affinity to the dead node: the actor is DEAD with -EHOSTUNREACH naming it. */
	z = spot(0, &hard);
	r = where_call(z, 0);
	fails_naming(&r, -EHOSTUNREACH, &b);
	ferry_actor_drop(z);
	ferry_actor_drop(x);
	ferry_actor_drop(y);
	ferry_shutdown();
	cluster2_stop();
}

/* B stopped with its workers (SIGSTOP of its process group: a host cut off, whose sockets stay
 * open): once the GCS declares B dead, the driver hears it (node_watch.c) and the actor there
 * restarts on A, its call in flight run again there; so does one whose constructor was running
 * on B. Without that, the calls would wait for B for ever (the get's 30 s fails the test). */
FTEST(an_actor_on_a_cut_off_node_restarts_elsewhere)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_actor_opts o = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				     .affinity_soft = true,
				     .max_restarts = 1,
				     .max_task_retries = 1};
	int64_t zargs[2] = {30, 2000}; /* its constructor takes 2 s */
	struct ferry_arg za[2] = {{.data = &zargs[0], .len = sizeof(zargs[0])},
				  {.data = &zargs[1], .len = sizeof(zargs[1])}};
	struct ferry_node_id self, b, n;
	struct ferry_actor *y, *z;
	struct ferry_ref r, rz;
	pid_t bpid;

	cluster2_start("ferry-actor-death", 2, 4);
	self = ferry__rt.node;
	b = cluster2_node_b(&soft, &bpid);
	o.affinity_node = b;
	y = spot(10, &o);
	n = actor_node(y);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	r = where_call(y, 2000);
	/* z's constructor runs on B when B stops: its call waits for it (PENDING). */
	ftest_assert_ok(ferry_actor_create("Spot", za, 2, &o, &z));
	rz = where_call(z, 0);
	usleep(300 * 1000); /* let them reach B: without it the test passes too, it tests less */
	cluster2_frozen = getpgid(bpid);
	ftest_assert_true(cluster2_frozen > 1 && cluster2_frozen != getpgid(0));
	ftest_assert_ok(kill(-cluster2_frozen, SIGSTOP));
	n = got_node(&r);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	ftest_assert_int_eq(next_of(y), 11);
	n = got_node(&rz);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	ftest_assert_int_eq(next_of(z), 31);
	ferry_actor_drop(z);
	ferry_actor_drop(y);
	ferry_shutdown();
	cluster2_stop();
}

/* A detached actor placed on B (hard affinity) outlives its creator: the LeaseDetach goes to
 * the node that granted its lease, B, which keeps the lease when the driver leaves. The same
 * process joins again as another driver: the name finds the actor on B, its state kept. */
FTEST(a_detached_actor_on_another_node_outlives_its_creator)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_actor_opts o = {
		.strategy = FERRY_SCHED_NODE_AFFINITY, .name = "spot-detached", .detached = 1};
	struct ferry_init_opts again = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_node_id b, n;
	struct ferry_actor *h;
	pid_t bpid;

	cluster2_start("ferry-actor-death", 2, 4);
	b = cluster2_node_b(&soft, &bpid);
	o.affinity_node = b;
	h = spot(20, &o);
	n = actor_node(h);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	ftest_assert_int_eq(next_of(h), 21);
	ferry_actor_drop(h); /* detached: it stays */
	ferry_shutdown();
	ftest_assert_ok(ferry_init(&again));
	ftest_assert_ok(ferry_actor_get_named("spot-detached", &h));
	n = actor_node(h);
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	ftest_assert_int_eq(next_of(h), 22);
	ftest_assert_ok(ferry_actor_kill(h, 1));
	ferry_actor_drop(h);
	ferry_shutdown();
	cluster2_stop();
}
