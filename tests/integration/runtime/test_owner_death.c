/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A driver SIGKILLed with a task running and an object in the store, on a cluster that
 * `ferry start --head` runs (daemons that outlive it): the node ends the worker that ran its
 * task and takes the lease back (a task that needs every CPU of the node then runs), deletes
 * its object from the store and the directory and records it dead in the GCS, so that another
 * driver's get of that object fails with -EOWNERDEAD and names the owner, never hangs; its
 * sockets leave the node's directory. A task that never returns: the caller's get and wait
 * time out, and its ferry_shutdown() ends the worker (the node's pool is whole again). The job
 * is tests/unit/runtime/job_owner.c.
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

static char run_dir[256];
static bool stopped = true;

/* A failed assertion exits: the cluster's daemons must not outlive the test. */
static void stop_cluster(void)
{
	char cmd[1024];

	if (stopped)
		return;
	stopped = true;
	snprintf(cmd, sizeof(cmd), "FERRY_RUN_DIR='%s' '%s' stop --timeout 5 >/dev/null 2>&1",
		 run_dir, getenv("FERRY_CLI_BIN"));
	if (system(cmd) != 0)
		fprintf(stderr, "ferry stop failed: daemons of %s may be left\n", run_dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "%s not removed\n", run_dir);
}

static void start_head(void)
{
	if (!getenv("FERRY_TEST_JOB"))
		ftest_skip("FERRY_TEST_JOB not set (run through meson test)");
	/* Not in ftest_tmpdir(): a failed assertion removes that before stop_cluster runs. */
	snprintf(run_dir, sizeof(run_dir), "/tmp/ferry-owner-death-%d", (int)getpid());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	stopped = false; /* from here: a half-started cluster is stopped too */
	atexit(stop_cluster);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, "start --head --port 0 --ip 127.0.0.1 "
						     "--memory 64M --num-cpus 2 --timeout 20"),
			    0);
}

/* The driver to kill: a put, a task left running (its marker file says so), its put's ref
 * written to @fd; then it waits for its end. */
static void doomed_driver(int fd, const char *marker)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_arg a = {.data = marker, .len = strlen(marker)};
	struct ferry_ref put, running;

	if (ferry_init(&o) < 0 || ferry_put("left behind", 11, &put) < 0 ||
	    ferry_submit("hang", &a, 1, NULL, &running) < 0)
		_exit(1);
	for (int i = 0; i < 400 && access(marker, F_OK) != 0; i++)
		usleep(50 * 1000);
	if (write(fd, &put, sizeof(put)) != (ssize_t)sizeof(put))
		_exit(1);
	for (;;)
		pause();
}

static pid_t read_pid(const char *path)
{
	FILE *f = fopen(path, "r");
	int pid = 0;

	ftest_assert_ptr_notnull(f);
	ftest_assert_int_eq(fscanf(f, "%d", &pid), 1);
	fclose(f);
	return (pid_t)pid;
}

/* Whether @id is in the store of the cluster's node, polled up to 10 s for @want. */
static int store_has(const struct ferry_object_id *id, int want)
{
	struct ferry_plasma_connect_opts po = {0};
	struct ferry_plasma_client *c;
	char sock[512];
	int has = -1;

	for (int n = 0; n < 64; n++) { /* the node-N slot `ferry start` took */
		snprintf(sock, sizeof(sock), "%s/node-%d/store.sock", run_dir, n);
		if (access(sock, F_OK) == 0)
			break;
	}
	ftest_assert_ok(ferry_plasma_client_connect(sock, &po, &c));
	for (int i = 0; i < 200; i++) {
		has = ferry_plasma_client_contains(c, id);
		if (has == want)
			break;
		usleep(50 * 1000);
	}
	ferry_plasma_client_disconnect(c);
	return has;
}

/* Whether the GCS directory lists a copy of @id as @want, polled up to 10 s for it. */
static bool directory_lists(const struct ferry_object_id *id, bool want)
{
	struct ferry_gcs_object_info info;
	bool has = !want;

	for (int i = 0; i < 200 && has != want; i++) {
		int ret = ferry_gcs_object_lookup(ferry__rt.gcs, id, &info);

		has = ret == 0 && info.state != FERRY_GCS_OBJECT_LOST && info.nlocations > 0;
		if (ret == 0)
			ferry_gcs_free(info.locations);
		if (has != want)
			usleep(50 * 1000);
	}
	return has == want;
}

FTEST(a_killed_driver_leaves_nothing_on_the_node)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_task_opts all_cpus = {.num_cpus = 2};
	int64_t two = 2, three = 3, sum = 0;
	struct ferry_arg args[2] = {{.data = &two, .len = sizeof(two)},
				    {.data = &three, .len = sizeof(three)}};
	char marker[512], path[512], owner_hex[FERRY_ID_HEX_MAX];
	struct ferry_ref put, r;
	struct ferry_view v;
	pid_t driver, worker;
	int fds[2], i;

	start_head();
	snprintf(marker, sizeof(marker), "%s/hang.pid", ftest_tmpdir());
	ftest_assert_ok(pipe(fds));
	driver = fork();
	ftest_assert_int_ge(driver, 0);
	if (driver == 0) {
		close(fds[0]);
		doomed_driver(fds[1], marker);
	}
	close(fds[1]);
	ftest_assert_int_eq(read(fds[0], &put, sizeof(put)), (ssize_t)sizeof(put));
	close(fds[0]);
	worker = read_pid(marker);
	ftest_assert_int_eq(store_has(&put.id, 1), 1);
	ftest_assert_ok(ferry_init(&o)); /* the second driver, which looks at what is left */
	ftest_assert_true(directory_lists(&put.id, true));
	ftest_assert_ok(kill(driver, SIGKILL));
	ftest_assert_int_eq(waitpid(driver, NULL, 0), driver);

	/* The worker running its task ends (the node reaps it: its pid goes). */
	for (i = 0; i < 200 && kill(worker, 0) == 0; i++)
		usleep(50 * 1000);
	ftest_assert_int_eq(kill(worker, 0), -1);
	/* Its object leaves the store. */
	ftest_assert_int_eq(store_has(&put.id, 0), 0);

	/* Nor in the directory. */
	ftest_assert_true(directory_lists(&put.id, false));
	/* A get of its object says its owner died, by name. */
	ferry_worker_id_to_hex(&put.owner, owner_hex, sizeof(owner_hex));
	ftest_assert_errno(ferry_get(&put, 20000, &v), -EOWNERDEAD);
	ftest_log("get: %s", v.error);
	ftest_assert_ptr_notnull(strstr(v.error, owner_hex));
	/* Its lease came back: a task that needs both of the node's CPUs runs. */
	ftest_assert_ok(ferry_submit("add", args, 2, &all_cpus, &r));
	ftest_assert_ok(ferry_get(&r, 30000, &v));
	ftest_assert_uint_eq(v.len, sizeof(sum));
	memcpy(&sum, v.data, sizeof(sum));
	ferry_release(&v);
	ferry_ref_drop(&r);
	ftest_assert_int_eq(sum, 5);
	ferry_shutdown();
	/* Nothing of it in the node's directory either (the killed worker's and the driver's
	 * sockets): `ferry stop` removes it only when it is empty. */
	ftest_assert_int_eq(itest_ferry_cli(run_dir, "stop --timeout 5"), 0);
	for (i = 0; i < 64; i++) {
		snprintf(path, sizeof(path), "%s/node-%d", run_dir, i);
		ftest_assert_int_ne(access(path, F_OK), 0);
	}
	stop_cluster(); /* removes the run directory */
}

/* The node ends the worker of a task that never returned once its driver shut down: the
 * worker's pid goes, and a task that needs every CPU of the node runs for the next driver. */
FTEST(a_task_that_never_returns_times_out_and_its_worker_is_not_leaked)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_task_opts all_cpus = {.num_cpus = 2};
	int64_t two = 2, three = 3, sum = 0;
	struct ferry_arg args[2] = {{.data = &two, .len = sizeof(two)},
				    {.data = &three, .len = sizeof(three)}};
	char marker[512];
	struct ferry_arg a = {.data = marker};
	struct ferry_ref hung, r;
	struct ferry_view v;
	pid_t worker;
	int ready, i;

	start_head();
	snprintf(marker, sizeof(marker), "%s/hang.pid", ftest_tmpdir());
	a.len = strlen(marker);
	ftest_assert_ok(ferry_init(&o));
	ftest_assert_ok(ferry_submit("hang", &a, 1, NULL, &hung));
	for (i = 0; i < 400 && access(marker, F_OK) != 0; i++)
		usleep(50 * 1000);
	worker = read_pid(marker);
	ftest_assert_errno(ferry_get(&hung, 300, &v), -ETIMEDOUT);
	ftest_assert_int_eq(ferry_wait(&hung, 1, 1, 300, &ready), 0);
	ftest_assert_int_eq(ready, 0);
	ferry_ref_drop(&hung);
	ferry_shutdown();
	for (i = 0; i < 200 && kill(worker, 0) == 0; i++)
		usleep(50 * 1000);
	ftest_assert_int_eq(kill(worker, 0), -1);
	ftest_assert_ok(ferry_init(&o));
	ftest_assert_ok(ferry_submit("add", args, 2, &all_cpus, &r));
	ftest_assert_ok(ferry_get(&r, 30000, &v));
	memcpy(&sum, v.data, sizeof(sum));
	ferry_release(&v);
	ferry_ref_drop(&r);
	ftest_assert_int_eq(sum, 5);
	ferry_shutdown();
	stop_cluster();
}
