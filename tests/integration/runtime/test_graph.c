/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled graphs through the public API, on real worker processes that load
 * examples/graph_lib.c's Counter: the issue's graph (a.inc(x).inc(4), b.inc(y), combine on b)
 * executed many times with different inputs, the actors' own state showing every call ran
 * there; a full window of executions in flight, gotten out of order; a method's error failing
 * its execution only; an actor's worker SIGKILLed with executions in flight, and an actor
 * killed through the API: every execution then fails naming the node and method, none hangs;
 * destroy and recreate leaving nothing on the workers; one thread executing while two get;
 * misuse refused with -errno.
 * Environment (meson.build): FERRY_WORKER_EXE, FERRY_TEST_JOB (libgraph_lib.so).
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

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

#define GET_MS 30000

struct pair {
	struct ferry_actor *a, *b;
};

static struct ferry_actor *counter(int64_t start)
{
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};
	struct ferry_actor_opts o = {.num_cpus = 0.5};
	struct ferry_actor *a = NULL;

	ftest_assert_ok(ferry_actor_create("Counter", &arg, 1, &o, &a));
	return a;
}

static int64_t call0(struct ferry_actor *a, const char *method)
{
	struct ferry_ref r;
	struct ferry_view v;
	int64_t x = 0;

	ftest_assert_ok(ferry_actor_call(a, method, NULL, 0, 1, &r));
	ftest_assert_ok(ferry_get(&r, GET_MS, &v));
	ftest_assert_uint_eq(v.len, sizeof(x));
	memcpy(&x, v.data, sizeof(x));
	ferry_release(&v);
	ferry_ref_drop(&r);
	return x;
}

/* The issue's graph: a.inc(in0).inc(4) (nodes 0, 1), b.inc(in1) (2), combine on b (3). */
static struct ferry_graph *issue_graph(struct pair *p)
{
	static const int64_t four = 4;
	struct ferry_graph *g;

	ftest_assert_ok(ferry_graph_create(&g));
	ftest_assert_int_eq(ferry_graph_bind(g, p->a, "Counter.inc",
					     (struct ferry_graph_arg[]){FERRY_GRAPH_INPUT(0)}, 1),
			    0);
	ftest_assert_int_eq(
		ferry_graph_bind(g, p->a, "Counter.inc",
				 (struct ferry_graph_arg[]){FERRY_GRAPH_NODE(0),
							    FERRY_GRAPH_CONST(&four, 8)},
				 2),
		1);
	ftest_assert_int_eq(ferry_graph_bind(g, p->b, "Counter.inc",
					     (struct ferry_graph_arg[]){FERRY_GRAPH_INPUT(1)}, 1),
			    2);
	ftest_assert_int_eq(ferry_graph_bind(g, p->b, "Counter.combine",
					     (struct ferry_graph_arg[]){FERRY_GRAPH_NODE(1),
									FERRY_GRAPH_NODE(2)},
					     2),
			    3);
	ftest_assert_ok(ferry_graph_compile(g, GET_MS));
	return g;
}

static uint64_t execute(struct ferry_graph *g, int64_t x, int64_t y)
{
	struct ferry_graph_arg in[2] = {FERRY_GRAPH_CONST(&x, 8), FERRY_GRAPH_CONST(&y, 8)};
	uint64_t exec = 0;

	ftest_assert_ok(ferry_graph_execute(g, in, 2, &exec));
	return exec;
}

/* Execution @exec's int64, or its error (text into @error). */
static int get(struct ferry_graph *g, uint64_t exec, int64_t *x, char *error, size_t size)
{
	struct ferry_graph_result r;
	int ret = ferry_graph_get(g, exec, GET_MS, &r);

	if (ret == 0) {
		ftest_assert_uint_eq(r.len, sizeof(*x));
		memcpy(x, r.data, sizeof(*x));
		ferry_graph_result_release(&r);
	} else if (error) {
		snprintf(error, size, "%s", r.error);
		ftest_log("get %llu: %s: %s", (unsigned long long)exec, ferry_strerror(ret),
			  r.error);
	}
	return ret;
}

/* a's inc(x) = 10 + x, then + 4; b's inc(y) = 10 + y; combined. */
static int64_t expected(int64_t x, int64_t y)
{
	return 10 + x + 4 + 10 + y;
}

FTEST(the_issue_graph_gives_32_and_runs_many_times_with_other_inputs)
{
	struct pair p;
	struct ferry_graph *g;
	int64_t x = 0;

	ftest_runtime_init(NULL, 2);
	p.a = counter(10);
	p.b = counter(10);
	g = issue_graph(&p);
	ftest_assert_ok(get(g, execute(g, 2, 6), &x, NULL, 0));
	ftest_assert_int_eq(x, 32);
	for (int i = 0; i < 200; i++) {
		ftest_assert_ok(get(g, execute(g, i, 3 * i), &x, NULL, 0));
		ftest_assert_int_eq(x, expected(i, 3 * i));
	}
	/* The calls ran on the actors themselves: two per execution on each. */
	ftest_assert_int_eq(call0(p.a, "calls"), 2 * 201);
	ftest_assert_int_eq(call0(p.b, "calls"), 2 * 201);
	ftest_assert_int_eq(ferry_graph_worker_graphs(g), 1);
	ferry_graph_destroy(g);
	ferry_actor_drop(p.a);
	ferry_actor_drop(p.b);
	ferry_shutdown();
}

FTEST(a_full_window_of_executions_in_flight_gotten_in_reverse)
{
	struct ferry_graph_arg in[2];
	uint64_t exec[FERRY_GRAPH_MAX_INFLIGHT], extra;
	struct ferry_graph_result r;
	struct pair p;
	struct ferry_graph *g;
	int64_t x = 0, one = 1;

	ftest_runtime_init(NULL, 2);
	p.a = counter(10);
	p.b = counter(10);
	g = issue_graph(&p);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < FERRY_GRAPH_MAX_INFLIGHT; i++)
			exec[i] = execute(g, i, round);
		in[0] = in[1] = FERRY_GRAPH_CONST(&one, 8);
		ftest_assert_errno(ferry_graph_execute(g, in, 2, &extra), -EAGAIN);
		for (int i = FERRY_GRAPH_MAX_INFLIGHT - 1; i >= 0; i--) {
			ftest_assert_ok(get(g, exec[i], &x, NULL, 0));
			ftest_assert_int_eq(x, expected(i, round));
		}
		ftest_assert_errno(ferry_graph_get(g, exec[0], 0, &r), -ENOENT); /* gotten */
	}
	ferry_graph_destroy(g);
	ferry_actor_drop(p.a);
	ferry_actor_drop(p.b);
	ferry_shutdown();
}

FTEST(a_method_error_fails_that_execution_only)
{
	struct pair p;
	struct ferry_graph *g;
	char error[512];
	uint64_t bad, good;
	int64_t x = 0;

	ftest_runtime_init(NULL, 2);
	p.a = counter(10);
	p.b = counter(10);
	g = issue_graph(&p);
	bad = execute(g, -1, 5); /* a's first inc refuses it: nodes 1 and 3 pass the error on */
	good = execute(g, 1, 5);
	ftest_assert_errno(get(g, bad, &x, error, sizeof(error)), -EREMOTEIO);
	ftest_assert_ptr_notnull(strstr(error, "graph node 0 (Counter.inc)"));
	ftest_assert_ptr_notnull(strstr(error, "a counter only goes up"));
	ftest_assert_ok(get(g, good, &x, NULL, 0));
	ftest_assert_int_eq(x, expected(1, 5));
	ferry_graph_destroy(g);
	ferry_actor_drop(p.a);
	ferry_actor_drop(p.b);
	ferry_shutdown();
}

/* Gets every execution of @exec[0..@n): each is a right result or -EPIPE naming a node and
 * its method; returns how many failed. Never waits past GET_MS. */
static int get_all(struct ferry_graph *g, const uint64_t *exec, int n)
{
	int failed = 0;

	for (int i = 0; i < n; i++) {
		char error[512];
		int64_t x;
		int ret = get(g, exec[i], &x, error, sizeof(error));

		if (ret == 0) {
			ftest_assert_int_eq(x, expected(i, i));
			continue;
		}
		ftest_assert_errno(ret, -EPIPE);
		ftest_assert_ptr_notnull(strstr(error, "graph node "));
		ftest_assert_ptr_notnull(strstr(error, "(Counter."));
		ftest_assert_ptr_notnull(strstr(error, "the graph is broken"));
		failed++;
	}
	return failed;
}

FTEST(a_sigkilled_actor_fails_executions_in_flight_and_later_ones)
{
	uint64_t exec[FERRY_GRAPH_MAX_INFLIGHT], later;
	struct pair p;
	struct ferry_graph *g;
	char error[512];
	int64_t x;
	pid_t pid;

	ftest_runtime_init(NULL, 2);
	p.a = counter(10);
	p.b = counter(10);
	pid = (pid_t)call0(p.b, "pid");
	g = issue_graph(&p);
	for (int i = 0; i < FERRY_GRAPH_MAX_INFLIGHT; i++)
		exec[i] = execute(g, i, i);
	ftest_assert_ok(kill(pid, SIGKILL));
	get_all(g, exec, FERRY_GRAPH_MAX_INFLIGHT);
	later = execute(g, 1, 1);
	ftest_assert_errno(get(g, later, &x, error, sizeof(error)), -EPIPE);
	/* b's worker: its first node is node 2, b.inc. */
	ftest_assert_ptr_notnull(strstr(error, "graph node 2 (Counter.inc)"));
	ferry_graph_destroy(g);
	ferry_actor_drop(p.a);
	ferry_actor_drop(p.b);
	ferry_shutdown();
}

FTEST(an_actor_killed_through_the_api_breaks_the_graph)
{
	struct pair p;
	struct ferry_graph *g;
	char error[512];
	int64_t x;
	int ret = 0;

	ftest_runtime_init(NULL, 2);
	p.a = counter(10);
	p.b = counter(10);
	g = issue_graph(&p);
	ftest_assert_ok(get(g, execute(g, 2, 6), &x, NULL, 0));
	ftest_assert_ok(ferry_actor_kill(p.a, 1));
	/* The kill is on its way on the actor's own socket: executions may still complete
	 * until the worker ends the actor; then it closes the graph's socket (it lives on). */
	for (int i = 0; i < 2000; i++) {
		ret = get(g, execute(g, 2, 6), &x, error, sizeof(error));
		if (ret < 0)
			break;
		ftest_assert_int_eq(x, 32);
		usleep(1000);
	}
	ftest_assert_errno(ret, -EPIPE);
	ftest_assert_ptr_notnull(strstr(error, "graph node 0 (Counter.inc)"));
	ftest_assert_errno(get(g, execute(g, 2, 6), &x, error, sizeof(error)), -EPIPE);
	ferry_graph_destroy(g);
	ferry_actor_drop(p.a);
	ferry_actor_drop(p.b);
	ferry_shutdown();
}

FTEST(destroy_and_recreate_leaves_nothing_on_the_workers)
{
	struct pair p;
	int64_t x = 0;

	ftest_runtime_init(NULL, 2);
	p.a = counter(10);
	p.b = counter(10);
	for (int i = 0; i < 20; i++) {
		struct ferry_graph *g = issue_graph(&p);

		/* The workers hold this graph only: the ones destroyed before are gone there. */
		ftest_assert_int_eq(ferry_graph_worker_graphs(g), 1);
		ftest_assert_ok(get(g, execute(g, i, i), &x, NULL, 0));
		ftest_assert_int_eq(x, expected(i, i));
		if (i % 2)
			execute(g, 1, 1); /* not gotten: destroy drops it */
		ferry_graph_destroy(g);
	}
	ferry_actor_drop(p.a);
	ferry_actor_drop(p.b);
	ferry_shutdown();
}

/* One thread executes (waiting out -EAGAIN), two others get the even and the odd ones. */
#define THREADED 600

struct threaded {
	struct ferry_graph *g; /* the graph */
	atomic_int produced;   /* executions made (their IDs are 0, 1, ...) */
	atomic_int wrong;      /* results that were not the expected one */
};

struct getter_arg {
	struct threaded *t; /* shared */
	int parity;	    /* 0: the even executions, 1: the odd ones */
};

static void *producer(void *arg)
{
	struct threaded *t = arg;

	for (int64_t i = 0; i < THREADED; i++) {
		struct ferry_graph_arg in[2] = {FERRY_GRAPH_CONST(&i, 8), FERRY_GRAPH_CONST(&i, 8)};
		uint64_t exec;
		int ret;

		/* A full window: wait for the getters (unless one of them failed). */
		while ((ret = ferry_graph_execute(t->g, in, 2, &exec)) == -EAGAIN &&
		       !atomic_load(&t->wrong))
			usleep(100);
		if (ret < 0 || exec != (uint64_t)i) {
			atomic_fetch_add(&t->wrong, 1);
			break;
		}
		atomic_store(&t->produced, (int)i + 1);
	}
	return NULL;
}

static void *getter(void *arg)
{
	const struct getter_arg *ga = arg;
	struct threaded *t = ga->t;
	int parity = ga->parity;

	for (int i = parity; i < THREADED; i += 2) {
		struct ferry_graph_result r;
		int64_t x = 0;

		while (atomic_load(&t->produced) <= i && !atomic_load(&t->wrong))
			usleep(100);
		if (atomic_load(&t->wrong) || ferry_graph_get(t->g, (uint64_t)i, GET_MS, &r) < 0) {
			atomic_fetch_add(&t->wrong, 1);
			return NULL;
		}
		if (r.len == sizeof(x))
			memcpy(&x, r.data, sizeof(x));
		if (x != expected(i, i))
			atomic_fetch_add(&t->wrong, 1);
		ferry_graph_result_release(&r);
	}
	return NULL;
}

FTEST(one_thread_executes_while_two_get)
{
	struct threaded t = {0};
	struct getter_arg even = {&t, 0}, odd = {&t, 1};
	pthread_t p, a, b;
	struct pair pr;

	ftest_runtime_init(NULL, 2);
	pr.a = counter(10);
	pr.b = counter(10);
	t.g = issue_graph(&pr);
	ftest_assert_int_eq(pthread_create(&p, NULL, producer, &t), 0);
	ftest_assert_int_eq(pthread_create(&a, NULL, getter, &even), 0);
	ftest_assert_int_eq(pthread_create(&b, NULL, getter, &odd), 0);
	pthread_join(p, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	ftest_assert_int_eq(atomic_load(&t.wrong), 0);
	ftest_assert_int_eq(atomic_load(&t.produced), THREADED);
	ferry_graph_destroy(t.g);
	ferry_actor_drop(pr.a);
	ferry_actor_drop(pr.b);
	ferry_shutdown();
}

FTEST(misuse_is_refused_with_errno)
{
	static const int64_t one = 1;
	struct ferry_graph_arg c = FERRY_GRAPH_CONST(&one, 8), in = FERRY_GRAPH_INPUT(0);
	struct ferry_graph_result r;
	struct ferry_graph *g;
	struct ferry_actor *a;
	uint64_t exec;

	ftest_assert_errno(ferry_graph_create(&g), -ENOTCONN);
	ftest_runtime_init(NULL, 2);
	a = counter(10);
	ftest_assert_ok(ferry_graph_create(&g));
	ftest_assert_errno(ferry_graph_bind(g, a, "Counter.inc", &c, 1), -EINVAL); /* no input */
	ftest_assert_errno(ferry_graph_bind(g, a, "Counter.inc",
					    (struct ferry_graph_arg[]){FERRY_GRAPH_NODE(0)}, 1),
			   -EINVAL);				   /* no node 0 yet */
	ftest_assert_errno(ferry_graph_compile(g, 1000), -EINVAL); /* empty */
	ftest_assert_int_eq(ferry_graph_bind(g, a, "Counter.inc", &in, 1), 0);
	ftest_assert_int_eq(ferry_graph_bind(g, a, "Counter.inc", &in, 1), 1);
	ftest_assert_errno(ferry_graph_execute(g, &c, 1, &exec), -EINVAL); /* not compiled */
	ftest_assert_errno(ferry_graph_compile(g, 1000), -EINVAL);	   /* node 0 unused */
	ferry_graph_destroy(g);
	/* A method the class does not have: the worker refuses the plan. */
	ftest_assert_ok(ferry_graph_create(&g));
	ftest_assert_int_eq(ferry_graph_bind(g, a, "Counter.nope", &in, 1), 0);
	ftest_assert_errno(ferry_graph_compile(g, GET_MS), -ENOENT);
	ftest_assert_errno(ferry_graph_execute(g, &c, 1, &exec), -EINVAL);
	ferry_graph_destroy(g);
	/* A graph that works; then wrong inputs and executions that do not exist. */
	ftest_assert_ok(ferry_graph_create(&g));
	ftest_assert_int_eq(ferry_graph_bind(g, a, "Counter.inc", &in, 1), 0);
	ftest_assert_ok(ferry_graph_compile(g, GET_MS));
	ftest_assert_errno(ferry_graph_compile(g, GET_MS), -EINVAL);
	ftest_assert_errno(ferry_graph_execute(g, (struct ferry_graph_arg[]){c, c}, 2, &exec),
			   -EINVAL); /* the graph takes 1 input */
	ftest_assert_errno(ferry_graph_execute(g, &in, 1, &exec), -EINVAL);
	ftest_assert_errno(ferry_graph_get(g, 12345, 0, &r), -ENOENT);
	ftest_assert_ok(ferry_graph_execute(g, &c, 1, &exec));
	ftest_assert_ok(ferry_graph_get(g, exec, GET_MS, &r));
	ferry_graph_result_release(&r);
	ferry_graph_destroy(g);
	ferry_graph_destroy(NULL);
	ferry_actor_drop(a);
	ferry_shutdown();
}
