/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Actor options and failures through the public API, on real worker processes that load
 * job_actors.c's library: an actor with max_concurrency N runs N calls at once (job_actors.c's
 * Gate counts them), one beyond the cap is refused; ferry_actor_create with each of its
 * allocations failing in turn (the countdown) fails cleanly and leaves nothing behind: no
 * actor record short of DEAD in the GCS, no lease held (an actor that needs every CPU of the
 * node runs after). A detached actor outlives its creator (a driver that shuts down, and one
 * SIGKILLed), is found by name and called from another driver on a cluster `ferry start`
 * runs, and is ended by that driver's ferry_actor_kill, its lease back at the node.
 * Environment (meson.build): FERRY_WORKER_EXE, FERRY_TEST_JOB, FERRY_CLI_BIN, FERRY_NODE_BIN.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "common/alloc.h"
#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

#define GET_MS 30000

static int get_int64(struct ferry_ref *r, int64_t *x)
{
	return ftest_get_int64(r, GET_MS, x, NULL, 0);
}

static int call_int64(struct ferry_actor *a, const char *method, int64_t x, int64_t *out)
{
	struct ferry_arg arg = {.data = &x, .len = sizeof(x)};
	struct ferry_ref r;
	int ret = ferry_actor_call(a, method, &arg, 1, 1, &r);

	return ret < 0 ? ret : get_int64(&r, out);
}

FTEST(concurrent_calls_run_at_once)
{
	struct ferry_actor_opts o = {.max_concurrency = 4};
	int64_t four = 4, peak;
	struct ferry_arg arg = {.data = &four, .len = sizeof(four)};
	struct ferry_ref r[4];
	struct ferry_actor *a;

	ftest_runtime_init(NULL, 2);
	ftest_assert_ok(ferry_actor_create("Gate", NULL, 0, &o, &a));
	/* Each call waits until all four came in: one at a time, the first would time out. */
	for (int i = 0; i < 4; i++)
		ftest_assert_ok(ferry_actor_call(a, "meet", &arg, 1, 1, &r[i]));
	for (int i = 0; i < 4; i++) {
		ftest_assert_ok(get_int64(&r[i], &peak));
		ftest_assert_int_eq(peak, 4);
	}
	/* Later calls still run, and the kill ends the pool's threads (the worker goes back). */
	ftest_assert_ok(call_int64(a, "meet", 1, &peak));
	ftest_assert_ok(ferry_actor_kill(a, 1));
	ferry_actor_drop(a);
	ferry_shutdown();
}

FTEST(concurrency_over_the_cap_is_refused)
{
	struct ferry_actor_opts o = {.max_concurrency = FERRY_ACTOR_MAX_CONCURRENCY + 1};
	struct ferry_actor *a = NULL;

	ftest_runtime_init(NULL, 1);
	ftest_assert_errno(ferry_actor_create("Gate", NULL, 0, &o, &a), -EINVAL);
	ftest_assert_ptr_null(a);
	ferry_shutdown();
}

/* Records in the GCS's actors table that are not DEAD, but for @keep (may be NULL). */
static int live_records(const struct ferry_actor_id *keep)
{
	struct ferry_gcs_actor_info *list = NULL;
	int n = ferry_gcs_actor_list(ferry__rt.gcs, &list), live = 0;

	ftest_assert_int_ge(n, 0);
	for (int i = 0; i < n; i++) {
		if (list[i].state == FERRY_GCS_ACTOR_DEAD ||
		    (keep && ferry_actor_id_eq(&list[i].id, keep)))
			continue;
		ftest_log("actor record %d (%s) is in state %d", i,
			  list[i].name ? list[i].name : "unnamed", (int)list[i].state);
		live++;
	}
	ferry_gcs_free(list);
	return live;
}

static double node_cpus(void)
{
	struct ferry_gcs_node_info *nodes = NULL;
	int n = ferry_gcs_node_list(ferry__rt.gcs, &nodes);
	double cpus = n == 1 ? nodes[0].cpu : 0;

	ferry_gcs_free(nodes);
	return cpus;
}

/* Each allocation of a create failing in turn (SQLite's countdown; it counts every thread's,
 * the embedded cluster's too). A create that fails returns -ENOMEM (or the GCS client's error
 * when the failure hit its side) and leaves no record short of DEAD; the one that gets
 * through works; once it is gone an actor that needs every CPU of the node runs, so no
 * failure kept a lease. */
FTEST(create_under_allocation_failures_leaves_nothing)
{
	struct ferry_actor_opts o = {.name = "alloc-countdown", .max_restarts = -1};
	int64_t start = 5, x = 0;
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};
	struct ferry_actor_opts all = {0};
	struct ferry_actor_id id;
	struct ferry_actor *a = NULL;
	int ret = -ENOMEM;
	long n;

	ftest_runtime_init(NULL, 2);
	for (n = 0; ret < 0 && n < 400; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry_actor_create("Counter", &arg, 1, &o, &a);
		ferry__alloc_fail_after(-1);
		if (ret == 0)
			break;
		if (ret != -ENOMEM)
			ftest_log("countdown %ld: %s", n, ferry_strerror(ret));
		ftest_assert_true(ret == -ENOMEM || ret == -ECONNRESET || ret == -EIO ||
				  ret == -ETIMEDOUT);
		ftest_assert_int_eq(live_records(NULL), 0);
	}
	ftest_log("the create got through after %ld failures", n);
	ftest_assert_ok(ret);
	ftest_assert_ok(ferry_actor_id(a, &id));
	ftest_assert_int_eq(live_records(&id), 0);
	/* A failure on the runtime's loop after the create returned shows as a restart. */
	ret = call_int64(a, "inc", 1, &x);
	if (ret < 0)
		ftest_assert_true(ret == -EPIPE || ret == -ENOMEM);
	ftest_assert_ok(call_int64(a, "inc", 1, &x));
	ftest_assert_int_ge(x, 6);
	ferry_actor_drop(a);
	for (int i = 0; i < 200 && live_records(NULL) > 0; i++)
		usleep(50 * 1000);
	ftest_assert_int_eq(live_records(NULL), 0);
	/* Every CPU of the node is free again. */
	all.num_cpus = node_cpus();
	ftest_assert_true(all.num_cpus > 0);
	ftest_assert_ok(ferry_actor_create("Counter", &arg, 1, &all, &a));
	ftest_assert_ok(call_int64(a, "inc", 1, &x));
	ftest_assert_int_eq(x, 6);
	ferry_actor_drop(a);
	ferry_shutdown();
}

/* ---- detached: a cluster of daemons outlives the drivers ---- */

static char run_dir[128];
static bool stopped = true;

static void stop_cluster(void)
{
	char cmd[256];

	if (stopped)
		return;
	stopped = true;
	if (itest_ferry_cli(run_dir, "stop --timeout 5") != 0)
		fprintf(stderr, "ferry stop failed: daemons of %s may be left\n", run_dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "%s not removed\n", run_dir);
}

static void join_cluster(void)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};

	ftest_assert_ok(ferry_init(&o));
}

/* A child driver: creates detached Counter @name from 100, calls inc(1) (101), drops its
 * handle, then ends by @how: 0 ferry_shutdown and exit, 1 wait for a SIGKILL. Exit 0 or
 * the step that failed; writes one byte on @fd when the actor answered. */
static void creator(const char *name, int how, int fd)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_actor_opts ao = {.name = name, .detached = 1};
	int64_t start = 100, x = 0;
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};
	struct ferry_actor *a;

	if (ferry_init(&o) < 0)
		_exit(2);
	if (ferry_actor_create("Counter", &arg, 1, &ao, &a) < 0)
		_exit(3);
	if (call_int64(a, "inc", 1, &x) < 0 || x != 101)
		_exit(4);
	ferry_actor_drop(a); /* detached: it stays */
	if (write(fd, "k", 1) != 1)
		_exit(5);
	if (how == 1)
		for (;;)
			pause();
	ferry_shutdown();
	_exit(0);
}

static void run_creator(const char *name, int how)
{
	int fds[2], status = -1;
	char c;
	pid_t pid;

	ftest_assert_ok(pipe(fds));
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		creator(name, how, fds[1]);
	}
	close(fds[1]);
	ftest_assert_int_eq(read(fds[0], &c, 1), 1);
	close(fds[0]);
	if (how == 1)
		ftest_assert_ok(kill(pid, SIGKILL));
	ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	if (how == 0)
		ftest_assert_int_eq(WEXITSTATUS(status), 0);
}

/* From this driver: @name, left at 101 by its creator, takes one more. */
static struct ferry_actor *found_and_called(const char *name)
{
	struct ferry_actor *b = NULL;
	int64_t x = 0;

	ftest_assert_ok(ferry_actor_get_named(name, &b));
	ftest_assert_ok(call_int64(b, "inc", 1, &x));
	ftest_assert_int_eq(x, 102); /* its state lived on: 100, +1 by the creator, +1 here */
	return b;
}

/* The killed actor: calls fail, its name is free again. */
static void gone(struct ferry_actor *b, const char *name)
{
	struct ferry_actor *c = NULL;
	int64_t x;
	int ret = -ENOENT;

	ftest_assert_errno(call_int64(b, "inc", 1, &x), -ESRCH);
	for (int i = 0; i < 100 && (ret = ferry_actor_get_named(name, &c)) == 0; i++) {
		ferry_actor_drop(c);
		usleep(50 * 1000);
	}
	ftest_assert_errno(ret, -ENOENT);
}

FTEST(a_detached_actor_outlives_its_creator)
{
	struct ferry_actor_opts all = {.num_cpus = 2}; /* the cluster's every CPU */
	struct ferry_actor_opts no_name = {.detached = 1};
	struct ferry_actor *b, *d, *e;
	int64_t x = 0, start = 1;
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};

	if (!getenv("FERRY_CLI_BIN") || !getenv("FERRY_NODE_BIN") || !getenv("FERRY_TEST_JOB"))
		ftest_skip("FERRY_CLI_BIN / FERRY_NODE_BIN / FERRY_TEST_JOB not set");
	/* Not in ftest_tmpdir(): a failed assertion removes that before stop_cluster runs. */
	snprintf(run_dir, sizeof(run_dir), "/tmp/ferry-detached-%d", (int)getpid());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	stopped = false;
	atexit(stop_cluster);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, "start --head --port 0 --ip 127.0.0.1 "
						     "--memory 64M --num-cpus 2 --timeout 20"),
			    0);
	run_creator("detached-left", 0);   /* its creator shut down */
	run_creator("detached-killed", 1); /* its creator was SIGKILLed */

	join_cluster();
	ftest_assert_errno(ferry_actor_create("Counter", &arg, 1, &no_name, &b), -EINVAL);
	b = found_and_called("detached-left");
	d = found_and_called("detached-killed");
	ftest_assert_ok(ferry_actor_kill(b, 1));
	ftest_assert_ok(ferry_actor_kill(d, 1));
	gone(b, "detached-left");
	gone(d, "detached-killed");
	ferry_actor_drop(b);
	ferry_actor_drop(d);
	/* Both leases are back: an actor that needs every CPU of the node runs. */
	ftest_assert_ok(ferry_actor_create("Counter", &arg, 1, &all, &e));
	ftest_assert_ok(call_int64(e, "inc", 1, &x));
	ftest_assert_int_eq(x, 2);
	ferry_actor_drop(e);
	ferry_shutdown();
	stop_cluster();
}
