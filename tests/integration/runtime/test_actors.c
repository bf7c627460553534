/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Actors through the public API, on real worker processes that load job_actors.c's library:
 * a Counter's calls run in the order made and keep its state; the GCS's actors table follows
 * its life (ALIVE on a node and worker, RESTARTING, DEAD with why); unknown classes and methods
 * fail naming them and the node; a SIGKILL of the actor's worker (kill -9 from here) fails the
 * call in flight with the method, node and signal, then the actor restarts on a new worker with
 * its constructor rerun and later calls succeed; with no restart left every call fails at once;
 * ferry_actor_kill runs the destructor and frees the worker; a named actor is found and called
 * from a second process (actor_client) of another job on a cluster `ferry start` runs.
 * Environment (meson.build): FERRY_WORKER_EXE, FERRY_TEST_JOB (the library), FERRY_CLI_BIN,
 * FERRY_NODE_BIN, FERRY_ACTOR_CLIENT.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "common/alloc.h"
#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

#define GET_MS 30000

static void init_job(const char *address)
{
	ftest_runtime_init(address, 2);
}

static struct ferry_actor *counter(int64_t start, const char *marker,
				   const struct ferry_actor_opts *opts)
{
	struct ferry_arg args[2] = {{.data = &start, .len = sizeof(start)},
				    {.data = marker, .len = marker ? strlen(marker) : 0}};
	struct ferry_actor *a = NULL;

	ftest_assert_ok(ferry_actor_create("Counter", args, marker ? 2 : 1, opts, &a));
	return a;
}

static void call1(struct ferry_actor *a, const char *method, int64_t x, struct ferry_ref *out)
{
	struct ferry_arg arg = {.data = &x, .len = sizeof(x)};

	ftest_assert_ok(ferry_actor_call(a, method, &arg, 1, 1, out));
}

static int get_int64(struct ferry_ref *r, int64_t *x, char *error, size_t size)
{
	return ftest_get_int64(r, GET_MS, x, error, size);
}

static int64_t call_int64(struct ferry_actor *a, const char *method, int64_t x)
{
	struct ferry_ref r;
	int64_t y = 0;
	char error[256];

	call1(a, method, x, &r);
	ftest_assert_ok(get_int64(&r, &y, error, sizeof(error)));
	return y;
}

/* The actor's record in the GCS (ferry_gcs_free). */
static struct ferry_gcs_actor_info *record(struct ferry_actor *a)
{
	struct ferry_gcs_actor_info *info = NULL;
	struct ferry_actor_id id;

	ftest_assert_ok(ferry_actor_id(a, &id));
	ftest_assert_ok(ferry_gcs_actor_get(ferry__rt.gcs, &id, &info));
	return info;
}

/* Wait (10 s at most: a guard against a hang) until the GCS has @a in @state. */
static struct ferry_gcs_actor_info *record_in(struct ferry_actor *a, enum ferry_gcs_actor_state s)
{
	for (int i = 0; i < 1000; i++) {
		struct ferry_gcs_actor_info *info = record(a);

		if (info->state == s)
			return info;
		ferry_gcs_free(info);
		usleep(10000);
	}
	FTEST__FAIL("the actor never reached state %d in the GCS", s);
}

FTEST(counter_calls_run_in_order_and_the_gcs_has_it_alive)
{
	struct ferry_ref r[50];
	struct ferry_gcs_actor_info *info;
	struct ferry_actor *a;

	init_job(NULL);
	a = counter(10, NULL, NULL);
	/* Made before the actor is alive: they wait for it, then run in order. */
	for (int i = 0; i < 50; i++)
		call1(a, "inc", i, &r[i]);
	for (int i = 0, sum = 10; i < 50; i++) {
		int64_t x = 0;

		sum += i;
		ftest_assert_ok(get_int64(&r[i], &x, NULL, 0));
		ftest_assert_int_eq(x, sum);
	}
	info = record_in(a, FERRY_GCS_ACTOR_ALIVE);
	ftest_assert_str_eq(info->class_name, "Counter");
	ftest_assert_true(ferry_worker_id_eq(&info->owner, &ferry__rt.self));
	ftest_assert_false(ferry_id_is_nil(info->worker.bytes, sizeof(info->worker.bytes)));
	ftest_assert_true(ferry_node_id_eq(&info->node, &ferry__rt.node));
	ferry_gcs_free(info);
	ferry_actor_drop(a);
	ferry_shutdown();
}

/* A call whose argument is a pending ref (another call's return) holds back the calls made
 * after it; a constructor's pending ref argument holds back the actor's creation. */
FTEST(ref_arguments_wait_and_keep_the_order)
{
	struct ferry_ref r1, r2, r3;
	struct ferry_actor *a, *b;
	struct ferry_arg arg;
	int64_t x = 0;

	init_job(NULL);
	a = counter(10, NULL, NULL);
	call1(a, "inc", 1, &r1);
	arg = (struct ferry_arg){.ref = &r1};
	ftest_assert_ok(ferry_actor_call(a, "inc", &arg, 1, 1, &r2)); /* + r1's value */
	call1(a, "inc", 1, &r3);
	arg = (struct ferry_arg){.ref = &r2};
	ftest_assert_ok(ferry_actor_create("Counter", &arg, 1, NULL, &b));
	ftest_assert_ok(get_int64(&r3, &x, NULL, 0));
	ftest_assert_int_eq(x, 23);
	ftest_assert_int_eq(call_int64(b, "inc", 0), 22);
	ftest_assert_ok(get_int64(&r2, &x, NULL, 0));
	ftest_assert_int_eq(x, 22);
	ftest_assert_ok(get_int64(&r1, &x, NULL, 0));
	ftest_assert_int_eq(x, 11);
	ferry_actor_drop(b);
	ferry_actor_drop(a);
	ferry_shutdown();
}

FTEST(unknown_class_and_method_say_which_and_where)
{
	struct ferry_gcs_actor_info *info;
	struct ferry_actor *a, *b;
	struct ferry_ref r;
	char error[256];
	int64_t x;

	init_job(NULL);
	ftest_assert_ok(ferry_actor_create("NoSuchClass", NULL, 0, NULL, &a));
	call1(a, "inc", 1, &r);
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -ESRCH);
	ftest_assert_true(strstr(error, "no actor class 'NoSuchClass' on node ") != NULL);
	info = record_in(a, FERRY_GCS_ACTOR_DEAD);
	ftest_assert_int_eq(info->death_cause, FERRY_GCS_EXIT_ERROR);
	ferry_gcs_free(info);
	ferry_actor_drop(a);

	b = counter(1, NULL, NULL);
	call1(b, "no_such_method", 1, &r);
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -ENOENT);
	ftest_assert_true(strstr(error, "no method 'Counter.no_such_method' of actor class "
					"Counter on node ") != NULL);
	/* A method's own error, and the actor lives on. */
	ftest_assert_ok(ferry_actor_call(b, "fail", NULL, 0, 1, &r));
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -EREMOTEIO);
	ftest_assert_true(strstr(error, "function Counter.fail on node ") != NULL);
	ftest_assert_true(strstr(error, "fail was called") != NULL);
	ftest_assert_int_eq(call_int64(b, "inc", 1), 2);
	/* A constructor that fails: the actor is dead, its calls say why. */
	ftest_assert_ok(ferry_actor_create("Broken", NULL, 0, NULL, &a));
	ftest_assert_ok(ferry_actor_call(a, "x", NULL, 0, 1, &r));
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -ESRCH);
	ftest_assert_true(strstr(error, "Broken cannot be built") != NULL);
	ftest_assert_errno(ferry_actor_create("Bad.name", NULL, 0, NULL, &a), -EINVAL);
	ferry_actor_drop(a);
	ferry_actor_drop(b);
	ferry_shutdown();
}

static pid_t worker_pid(struct ferry_actor *a)
{
	return (pid_t)call_int64(a, "pid", 0);
}

FTEST(a_sigkilled_actor_restarts_with_its_constructor_rerun)
{
	struct ferry_actor_opts o = {.max_restarts = 1};
	struct ferry_gcs_actor_info *info;
	struct ferry_ref nap, r;
	struct ferry_actor *a;
	char error[256];
	pid_t pid, pid2;
	int64_t x;

	init_job(NULL);
	a = counter(100, NULL, &o);
	ftest_assert_int_eq(call_int64(a, "inc", 5), 105);
	pid = worker_pid(a);
	call1(a, "nap", 5000, &nap); /* in flight when the worker dies */
	usleep(100000);
	ftest_assert_ok(kill(pid, SIGKILL));
	ftest_assert_errno(get_int64(&nap, &x, error, sizeof(error)), -EPIPE);
	ftest_assert_true(strstr(error, "function Counter.nap on node ") != NULL);
	ftest_assert_true(strstr(error, "killed by signal 9 (SIGKILL)") != NULL);
	/* Restarted on another worker, its constructor rerun with its original arguments. */
	ftest_assert_int_eq(call_int64(a, "inc", 1), 101);
	pid2 = worker_pid(a);
	ftest_assert_int_ne(pid2, pid);
	info = record_in(a, FERRY_GCS_ACTOR_ALIVE);
	ftest_assert_uint_eq(info->num_restarts, 1);
	ferry_gcs_free(info);
	/* Killed again: no restart left, every call fails at once and says why. */
	ftest_assert_ok(kill(pid2, SIGKILL));
	info = record_in(a, FERRY_GCS_ACTOR_DEAD);
	ftest_assert_int_eq(info->death_cause, FERRY_GCS_EXIT_OUT_OF_RESTARTS);
	ftest_assert_true(strstr(info->death_message, "SIGKILL") != NULL);
	ferry_gcs_free(info);
	call1(a, "inc", 1, &r);
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -ESRCH);
	ftest_assert_true(strstr(error, "no restarts left") != NULL);
	ferry_actor_drop(a);
	ferry_shutdown();
}

FTEST(with_max_restarts_0_a_killed_actor_s_calls_fail)
{
	struct ferry_actor *a;
	struct ferry_ref r;
	char error[256];
	int64_t x;

	init_job(NULL);
	a = counter(0, NULL, NULL);
	ftest_assert_ok(kill(worker_pid(a), SIGKILL));
	for (int i = 0; i < 3; i++) { /* before and after the actor knows: both fail */
		call1(a, "inc", 1, &r);
		ftest_assert_int_lt(get_int64(&r, &x, error, sizeof(error)), 0);
		ftest_assert_true(strstr(error, "Counter.inc") != NULL);
	}
	ferry_gcs_free(record_in(a, FERRY_GCS_ACTOR_DEAD));
	call1(a, "inc", 1, &r);
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -ESRCH);
	ftest_assert_true(strstr(error, "killed by signal 9 (SIGKILL)") != NULL);
	ferry_actor_drop(a);
	ferry_shutdown();
}

FTEST(kill_runs_the_destructor_and_frees_the_worker)
{
	struct ferry_gcs_actor_info *info;
	struct ferry_actor *a, *b;
	char marker[256], fini[300];
	struct ferry_ref r;
	char error[256];
	int64_t x;
	pid_t pid;

	snprintf(marker, sizeof(marker), "%s/counter", ftest_tmpdir());
	snprintf(fini, sizeof(fini), "%s.fini", marker);
	init_job(NULL);
	a = counter(7, marker, NULL);
	pid = worker_pid(a);
	ftest_assert_ok(ferry_actor_kill(a, 1));
	info = record_in(a, FERRY_GCS_ACTOR_DEAD);
	ftest_assert_int_eq(info->death_cause, FERRY_GCS_EXIT_KILLED);
	ferry_gcs_free(info);
	ftest_assert_int_eq(access(fini, F_OK), 0); /* the destructor ran */
	ftest_assert_int_eq(kill(pid, 0), 0);	    /* in a worker that lives on */
	call1(a, "inc", 1, &r);
	ftest_assert_errno(get_int64(&r, &x, error, sizeof(error)), -ESRCH);
	ftest_assert_true(strstr(error, "killed by its owner") != NULL);
	/* The worker is free: tasks and actors may have it again (2 workers, 2 actors). */
	b = counter(1, NULL, NULL);
	ftest_assert_int_eq(call_int64(b, "inc", 1), 2);
	ferry_actor_drop(b);
	ferry_actor_drop(a);
	ferry_shutdown();
}

FTEST(kill_with_restart_reruns_the_constructor)
{
	struct ferry_actor_opts o = {.max_restarts = 2};
	struct ferry_actor *a;

	init_job(NULL);
	a = counter(40, NULL, &o);
	ftest_assert_int_eq(call_int64(a, "inc", 2), 42);
	ftest_assert_ok(ferry_actor_kill(a, 0));
	ftest_assert_int_eq(call_int64(a, "inc", 2), 42);
	ferry_actor_drop(a);
	ferry_shutdown();
}

/* Each allocation of a call failing in turn (SQLite's countdown): the call fails with -ENOMEM
 * and leaves no object behind, or the failure fired on the runtime's loop and shows as the
 * call's error value (or as its socket's loss: the actor then restarts), never a crash; the
 * actor still answers after. */
FTEST(calls_under_allocation_failures_leave_nothing)
{
	struct ferry_actor_opts o = {.max_restarts = -1};
	int64_t one = 1, x = 0;
	struct ferry_arg arg = {.data = &one, .len = sizeof(one)};
	struct ferry_actor *a;
	struct ferry_ref r;
	int ret = -ENOMEM;

	init_job(NULL);
	a = counter(0, NULL, &o);
	ftest_assert_int_eq(call_int64(a, "inc", 1), 1); /* warm: alive, its socket open */
	for (long n = 0; ret < 0 && n < 100; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry_actor_call(a, "inc", &arg, 1, 1, &r);
		ferry__alloc_fail_after(-1);
		if (ret == 0)
			break;
		ftest_assert_errno(ret, -ENOMEM);
		pthread_mutex_lock(&ferry__rt.lock);
		ftest_assert_uint_eq(ferry__hashmap_count(&ferry__rt.objects), 0);
		pthread_mutex_unlock(&ferry__rt.lock);
	}
	ftest_assert_ok(ret);
	ret = get_int64(&r, &x, NULL, 0);
	if (ret < 0)
		ftest_assert_true(ret == -ENOMEM || ret == -EPIPE);
	ftest_assert_int_ge(call_int64(a, "inc", 1), 1);
	ferry_actor_drop(a);
	ferry_shutdown();
}

/* ---- a named actor, from a second process ---- */

static char run_dir[256];

__attribute__((format(printf, 1, 2))) static int cli(const char *fmt, ...)
{
	const char *bin = getenv("FERRY_CLI_BIN");
	char args[512], cmd[1024], out[8192];
	va_list ap;
	int code;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "FERRY_RUN_DIR='%s' '%s' %s 2>&1", run_dir, bin, args);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ ferry %s -> %d\n%s", args, code, out);
	return code;
}

/* A driver that creates and kills many actors keeps no record of the dead ones: each goes once
 * it is dead and its handle dropped (killed alive on its worker, killed through the API, or
 * dropped before its worker came). The count is the runtime's own. */
FTEST(dead_and_dropped_actors_leave_no_record)
{
	enum { N = 200 };
	unsigned left = 0;

	init_job(NULL);
	for (int i = 0; i < N; i++) {
		struct ferry_actor *a = counter(i, NULL, NULL);

		if (i % 2 == 0)
			ftest_assert_int_eq(call_int64(a, "inc", 1), i + 1);
		if (i % 4 == 0)
			ftest_assert_ok(ferry_actor_kill(a, 1));
		ferry_actor_drop(a); /* the owner's handle: kills the others */
	}
	ftest_log("%u records after the loop", ferry__rt_actor_records());
	for (int i = 0; i < 1200 && (left = ferry__rt_actor_records()) > 0; i++)
		usleep(50 * 1000);
	ftest_log("%u records left", left);
	ftest_assert_uint_eq(left, 0);
	ferry_shutdown();
}

/* Handles looked up by name and dropped leave no record (nor socket) behind, and the actor
 * lives on for its owner; the owner's drop then ends it and its record. */
static unsigned records_settled(unsigned want)
{
	unsigned n = 0;

	for (int i = 0; i < 1200 && (n = ferry__rt_actor_records()) != want; i++)
		usleep(50 * 1000);
	return n;
}

FTEST(named_handles_dropped_leave_no_record)
{
	struct ferry_actor_opts o = {.name = "looked-up"};
	struct ferry_actor *a, *b;

	init_job(NULL);
	a = counter(0, NULL, &o);
	ftest_assert_int_eq(call_int64(a, "inc", 1), 1);
	for (int i = 0; i < 50; i++) {
		ftest_assert_ok(ferry_actor_get_named("looked-up", &b));
		ftest_assert_int_eq(call_int64(b, "inc", 1), i + 2);
		ferry_actor_drop(b);
	}
	ftest_assert_uint_eq(records_settled(1), 1);
	ftest_assert_int_eq(call_int64(a, "inc", 1), 52); /* its state: it lived on */
	ferry_actor_drop(a);
	ftest_assert_uint_eq(records_settled(0), 0);
	ferry_shutdown();
}

FTEST(a_named_actor_is_found_and_called_from_another_process)
{
	const char *client = getenv("FERRY_ACTOR_CLIENT");
	struct ferry_actor_opts o = {.name = "shared-counter"};
	struct ferry_actor *a, *b;
	char cmd[1024], out[4096];
	int code;

	if (!client || !getenv("FERRY_CLI_BIN") || !getenv("FERRY_NODE_BIN"))
		ftest_skip("FERRY_ACTOR_CLIENT / FERRY_CLI_BIN / FERRY_NODE_BIN not set");
	snprintf(run_dir, sizeof(run_dir), "%s/run", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	ftest_assert_int_eq(cli("start --head --port 0 --ip 127.0.0.1 --memory 64M --timeout 20"),
			    0);
	init_job("auto");
	a = counter(1000, NULL, &o);
	ftest_assert_int_eq(call_int64(a, "inc", 1), 1001);
	ftest_assert_errno(ferry_actor_create("Counter", NULL, 0, &o, &b), -EEXIST);
	ftest_assert_errno(ferry_actor_get_named("no-such-actor", &b), -ENOENT);
	/* The client joins as the driver of another job, finds it by name, adds 10 twice. */
	snprintf(cmd, sizeof(cmd), "FERRY_RUN_DIR='%s' '%s' shared-counter 10 2 2>&1", run_dir,
		 client);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ actor_client -> %d\n%s", code, out);
	ftest_assert_int_eq(code, 0);
	ftest_assert_ptr_notnull(strstr(out, "shared-counter: 1011\n"));
	ftest_assert_ptr_notnull(strstr(out, "shared-counter: 1021\n"));
	ftest_assert_int_eq(call_int64(a, "inc", 1), 1022);
	/* From this process too, by name (a second handle on the same actor). */
	ftest_assert_ok(ferry_actor_get_named("shared-counter", &b));
	ftest_assert_int_eq(call_int64(b, "inc", 1), 1023);
	ftest_assert_errno(ferry_actor_kill(b, 1), -EPERM);
	ferry_actor_drop(b);
	ferry_actor_drop(a);
	ferry_shutdown();
	cli("stop --timeout 5");
}
