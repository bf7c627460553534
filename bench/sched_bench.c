/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched-bench: the scheduler's rows of `bench/compare sched` on real nodes, as a driver of
 * a running cluster (FERRY_ADDRESS or "auto"; compare starts one with `ferry start` on
 * loopback). Each mode prints `SCHED key=value ...` lines. It reads the nodes table and its own
 * node from the runtime's internals (runtime/rt.h): the public API has no call for either yet.
 *
 *   ferry-sched-bench JOB.so locality SIZE TASKS  Ray's OSDI'18 Figure 8a: TASKS times, an
 *       input of SIZE bytes made on another node (hard NODE_AFFINITY), then a task that reads
 *       it, submitted from this node and timed from submit to its result; the input is
 *       dropped before the next. With FERRY_SCHED_LOCALITY=off in the environment the driver
 *       does not say where inputs are: the baseline. Each timed task starts from the same
 *       state, its class's lease given back (COLD_US): an input made in less than the
 *       runtime's idle lease time (FERRY__RT_LEASE_IDLE_MS) would otherwise find the lease
 *       of the task before, a larger one not, and the sizes would compare lease states, not
 *       placement.
 *   ferry-sched-bench JOB.so spread TASKS [US]     TASKS tasks with SPREAD, each taking US
 *       microseconds (0), submitted at once: how many ran on each node (the most over the
 *       least), after an unmeasured round of TASKS / 10 that gets the class its leases on the
 *       nodes (a new job's first leases wait for workers to start with its code).
 *   ferry-sched-bench JOB.so async TASKS STRATEGY  TASKS tasks submitted at once (STRATEGY
 *       default or spread), then every result got: tasks per second, and the nodes used.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"

#define GET_MS 120000
/* Well past the runtime's idle lease time: the class's lease has gone back. */
#define COLD_US (FERRY__RT_LEASE_IDLE_MS * 2500)
#define MAX_NODES 64

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, int ret)
{
	fprintf(stderr, "ferry-sched-bench: %s: %s\n", what, ferry_strerror(ret));
	exit(1);
}

/* The node a sched_where task's result names. */
static struct ferry_node_id node_of(const struct ferry_ref *ref)
{
	struct ferry_node_id n;
	struct ferry_view v;
	int ret = ferry_get(ref, GET_MS, &v);

	if (ret < 0) {
		fprintf(stderr, "ferry-sched-bench: get: %s %s\n", ferry_strerror(ret), v.error);
		exit(1);
	}
	if (v.len != sizeof(n.bytes)) {
		fprintf(stderr, "ferry-sched-bench: a result of %zu bytes, not a node ID\n", v.len);
		exit(1);
	}
	memcpy(n.bytes, v.data, sizeof(n.bytes));
	ferry_release(&v);
	return n;
}

struct tally {
	struct ferry_node_id node[MAX_NODES];
	uint64_t count[MAX_NODES];
	size_t n;
};

static void count(struct tally *t, const struct ferry_node_id *node)
{
	size_t i = 0;

	while (i < t->n && !ferry_node_id_eq(&t->node[i], node))
		i++;
	if (i == t->n && t->n < MAX_NODES)
		t->node[t->n++] = *node;
	if (i < t->n)
		t->count[i]++;
}

static uint64_t busy_us; /* > 0: the tasks of burst() take this long (sched_busy) */

static struct ferry_ref submit_where(const struct ferry_ref *input,
				     const struct ferry_task_opts *opts)
{
	if (busy_us && !input) {
		struct ferry_arg a = {.data = &busy_us, .len = sizeof(busy_us)};
		struct ferry_ref r;
		int ret = ferry_submit("sched_busy", &a, 1, opts, &r);

		if (ret < 0)
			die("submit sched_busy", ret);
		return r;
	}
	struct ferry_arg arg = {.ref = input};
	struct ferry_ref r;
	int ret = ferry_submit("sched_where", &arg, input ? 1 : 0, opts, &r);

	if (ret < 0)
		die("submit sched_where", ret);
	return r;
}

/* The cluster's live nodes (the GCS's nodes table, through the runtime's own client) and this
 * driver's node into @self. */
static void find_nodes(struct tally *nodes, struct ferry_node_id *self)
{
	struct ferry_gcs_node_info *list = NULL;
	int n = ferry_gcs_node_list(ferry__rt.gcs, &list);

	if (n < 0)
		die("listing the nodes", n);
	memset(nodes, 0, sizeof(*nodes));
	for (int i = 0; i < n; i++)
		if (list[i].state == FERRY_GCS_NODE_ALIVE)
			count(nodes, &list[i].id);
	ferry_gcs_free(list);
	*self = ferry__rt.node;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int locality(uint64_t size, unsigned tasks)
{
	struct ferry_node_id self, other;
	struct tally nodes;
	double *lat = calloc(tasks, sizeof(double)), sum = 0;
	unsigned on_input = 0;
	bool found = false;

	if (!lat)
		die("calloc", -ENOMEM);
	find_nodes(&nodes, &self);
	for (size_t i = 0; i < nodes.n && !found; i++)
		if (!ferry_node_id_eq(&nodes.node[i], &self)) {
			other = nodes.node[i];
			found = true;
		}
	if (!found) {
		fprintf(stderr, "ferry-sched-bench: locality needs two nodes; %zu found\n",
			nodes.n);
		return 1;
	}
	for (unsigned t = 0; t < tasks; t++) {
		struct ferry_task_opts on_a = {.strategy = FERRY_SCHED_NODE_AFFINITY,
					       .affinity_node = other};
		struct ferry_arg arg = {.data = &size, .len = sizeof(size)};
		struct ferry_ref input, where;
		struct ferry_node_id ran;
		int ready, ret = ferry_submit("sched_make", &arg, 1, &on_a, &input);

		if (ret < 0)
			die("submit sched_make", ret);
		/* Ready in its owner's table: the bytes stay on the other node. */
		ret = ferry_wait(&input, 1, 1, GET_MS, &ready);
		if (ret != 1)
			die("wait for the input", ret < 0 ? ret : -ETIMEDOUT);
		nanosleep(&(struct timespec){.tv_nsec = COLD_US * 1000L}, NULL);
		double t0 = now_us();
		where = submit_where(&input, &(struct ferry_task_opts){0});
		ran = node_of(&where);
		lat[t] = now_us() - t0;
		sum += lat[t];
		on_input += ferry_node_id_eq(&ran, &other);
		ferry_ref_drop(&where);
		ferry_ref_drop(&input);
	}
	qsort(lat, tasks, sizeof(double), cmp_double);
	const char *mode = getenv("FERRY_SCHED_LOCALITY");
	printf("SCHED mode=locality locality=%s size=%llu tasks=%u mean_us=%.1f p50_us=%.1f "
	       "p99_us=%.1f on_input_node=%.4f\n",
	       mode && !strcmp(mode, "off") ? "off" : "on", (unsigned long long)size, tasks,
	       sum / tasks, lat[tasks / 2], lat[(uint64_t)tasks * 99 / 100],
	       (double)on_input / tasks);
	free(lat);
	return 0;
}

/* @tasks tasks of @opts at once, then every result: tasks/s, and where they ran. */
static int burst(unsigned tasks, const struct ferry_task_opts *opts, const char *mode)
{
	struct ferry_ref *r = calloc(tasks, sizeof(*r));
	struct tally where = {0};
	uint64_t most = 0, least = UINT64_MAX;

	if (!r)
		die("calloc", -ENOMEM);
	double t0 = now_us();
	for (unsigned i = 0; i < tasks; i++)
		r[i] = submit_where(NULL, opts);
	for (unsigned i = 0; i < tasks; i++) {
		struct ferry_node_id n = node_of(&r[i]);
		count(&where, &n);
		ferry_ref_drop(&r[i]);
	}
	double secs = (now_us() - t0) / 1e6;
	struct ferry_gcs_node_info *nodes = NULL;
	int n = ferry_gcs_node_list(ferry__rt.gcs, &nodes), alive = 0;

	for (int i = 0; i < n; i++)
		alive += nodes[i].state == FERRY_GCS_NODE_ALIVE;
	ferry_gcs_free(nodes);
	for (size_t i = 0; i < where.n; i++) {
		most = where.count[i] > most ? where.count[i] : most;
		least = where.count[i] < least ? where.count[i] : least;
	}
	/* A live node that ran none is the least: 0, and the imbalance is infinite (a row that
	 * counted only the nodes used would hide it). */
	if ((int)where.n < alive)
		least = 0;
	printf("SCHED mode=%s tasks=%u tasks_per_s=%.0f nodes=%zu cluster_nodes=%d most=%llu "
	       "least=%llu imbalance=%.4f\n",
	       mode, tasks, tasks / secs, where.n, alive, (unsigned long long)most,
	       (unsigned long long)least, least ? (double)most / (double)least : INFINITY);
	free(r);
	return 0;
}

static unsigned number(const char *s, unsigned long long max)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (!*s || *end || v < 1 || v > max) {
		fprintf(stderr, "ferry-sched-bench: '%s' is not a number from 1 to %llu\n", s, max);
		exit(2);
	}
	return (unsigned)v;
}

int main(int argc, char **argv)
{
	struct ferry_init_opts o = {.address = getenv("FERRY_ADDRESS") ? NULL : "auto"};
	int ret;

	if (argc < 3) {
		fprintf(stderr,
			"usage: ferry-sched-bench JOB.so locality SIZE TASKS | spread TASKS [US] "
			"| async TASKS default|spread\n");
		return 2;
	}
	o.code_path = argv[1];
	ret = ferry_init(&o);
	if (ret < 0)
		die("ferry_init", ret);
	if (!strcmp(argv[2], "locality") && argc == 5) {
		uint64_t size = 0;
		if (sscanf(argv[3], "%llu", (unsigned long long *)&size) != 1 || !size)
			return 2;
		ret = locality(size, number(argv[4], 1000000));
	} else if (!strcmp(argv[2], "spread") && (argc == 4 || argc == 5)) {
		struct ferry_task_opts spread = {.strategy = FERRY_SCHED_SPREAD};
		unsigned n = number(argv[3], 10000000);

		busy_us = argc == 5 ? number(argv[4], 10000000) : 0;
		ret = burst(n / 10 + 1, &spread, "spread_warmup");
		if (ret == 0)
			ret = burst(n, &spread, "spread");
	} else if (!strcmp(argv[2], "async") && argc == 5 &&
		   (!strcmp(argv[4], "default") || !strcmp(argv[4], "spread"))) {
		struct ferry_task_opts opts = {.strategy = strcmp(argv[4], "spread")
								   ? FERRY_SCHED_DEFAULT
								   : FERRY_SCHED_SPREAD};
		ret = burst(number(argv[3], 10000000), &opts,
			    opts.strategy ? "async_spread" : "async_default");
	} else {
		fprintf(stderr, "ferry-sched-bench: unknown mode or arguments\n");
		ret = 2;
	}
	ferry_shutdown();
	return ret;
}
