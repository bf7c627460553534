/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A two-node cluster for the node-death tests (test_node_death.c, test_actor_death.c) and the
 * rdma suite's tasks (tests/rdma/test_rdma_tasks.c), as a
 * user starts one: `ferry start --head` and `ferry start --address` on loopback, a driver
 * joined to one of them, then the nodes' IDs and pids, the ferry-workers a node started, and a
 * ferry-sched when a test needs one. One cluster per test process at a time; a failed
 * assertion exits, and atexit stops it.
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB; FERRY_SCHED_BIN
 * (ferry-sched) for the tests that need a scheduler.
 */
#ifndef FERRY_TESTS_INTEGRATION_RUNTIME_CLUSTER2_H
#define FERRY_TESTS_INTEGRATION_RUNTIME_CLUSTER2_H

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"
#include "tests/integration/runtime/run_dir.h"
#include "tests/integration/runtime/where.h"

static char cluster2_run_dir[256];
static bool cluster2_stopped = true;
static pid_t cluster2_frozen; /* a stopped node's process group (SIGKILLed at exit), or 0 */
static pid_t cluster2_sched;  /* a ferry-sched this test started, or 0 */

/* A failed assertion exits: the cluster's daemons must not outlive the test. */
static inline void cluster2_stop(void)
{
	if (cluster2_sched > 0) {
		(void)kill(cluster2_sched, SIGTERM);
		(void)waitpid(cluster2_sched, NULL, 0);
		cluster2_sched = 0;
	}
	if (cluster2_frozen > 1)
		(void)kill(-cluster2_frozen, SIGKILL);
	cluster2_frozen = 0;
	if (cluster2_stopped)
		return;
	cluster2_stopped = true;
	(void)itest_ferry_cli(cluster2_run_dir, "stop --timeout 5");
}

/* At the test process's exit, after cluster2_stop (atexit runs in reverse): the run directory
 * and its session logs go. */
static inline void cluster2_remove_run_dir(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cluster2_run_dir);
	if (cluster2_run_dir[0] && system(cmd) != 0)
		fprintf(stderr, "%s not removed\n", cluster2_run_dir);
}

/* Start the head and a second node with `ferry start` options @head_opts and @other_opts
 * (their addresses, resources, timeouts), run directory /tmp/@name-<pid>, and join the driver
 * (ferry_init "auto"). */
static inline void cluster2_start_opts(const char *name, const char *head_opts,
				       const char *other_opts)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};
	static bool registered;
	char args[1024], addr[256] = "";

	if (!o.code_path)
		ftest_skip("FERRY_TEST_JOB not set (run through meson test)");
	/* Not in ftest_tmpdir(): a failed assertion removes that before cluster2_stop runs. */
	snprintf(cluster2_run_dir, sizeof(cluster2_run_dir), "/tmp/%s-%d", name, (int)getpid());
	setenv("FERRY_RUN_DIR", cluster2_run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	cluster2_stopped = false;
	if (!registered) {
		if (!getenv("FTEST_KEEP_RUN_DIR")) /* to read the daemons' logs after */
			atexit(cluster2_remove_run_dir);
		atexit(cluster2_stop);
		registered = true;
	}
	snprintf(args, sizeof(args), "start --head --port 0 %s", head_opts);
	ftest_assert_int_eq(itest_ferry_cli(cluster2_run_dir, args), 0);
	itest_cluster_address(cluster2_run_dir, addr, sizeof(addr));
	snprintf(args, sizeof(args), "start --address %s --token-file %s/token %s", addr,
		 cluster2_run_dir, other_opts);
	ftest_assert_int_eq(itest_ferry_cli(cluster2_run_dir, args), 0);
	ftest_assert_ok(ferry_init(&o));
}

/* Two nodes on loopback: the head of @head_cpus CPUs, the other of @other_cpus, both with the
 * `ferry start` options @extra too ("" for none). */
static inline void cluster2_start_extra(const char *name, int head_cpus, int other_cpus,
					const char *extra)
{
	char head[256], other[256];

	snprintf(head, sizeof(head), "--ip 127.0.0.1 --memory 64M --num-cpus %d --timeout 20 %s",
		 head_cpus, extra);
	snprintf(other, sizeof(other), "--ip 127.0.0.1 --memory 64M --num-cpus %d --timeout 20 %s",
		 other_cpus, extra);
	cluster2_start_opts(name, head, other);
}

static inline void cluster2_start(const char *name, int head_cpus, int other_cpus)
{
	cluster2_start_extra(name, head_cpus, other_cpus, "");
}

/* Node @index's ID (node.id; 1 the head) and pid (node.pid). */
static inline struct ferry_node_id cluster2_node(int index, pid_t *pid)
{
	return run_dir_node(cluster2_run_dir, index, pid);
}

/* Lines in @path (0: none yet): a task that appends one per run (job_owner.c's big_tally)
 * counts its runs so. */
static inline unsigned cluster2_runs(const char *path)
{
	char line[16];
	unsigned n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	return n;
}

/* The node that is not @self (the driver's), and its pid. */
static inline struct ferry_node_id cluster2_other(const struct ferry_node_id *self, pid_t *pid)
{
	struct ferry_node_id a, b;
	pid_t apid, bpid;

	a = cluster2_node(1, &apid);
	b = cluster2_node(2, &bpid);
	if (ferry_node_id_eq(&b, self)) {
		*pid = apid;
		return a;
	}
	*pid = bpid;
	return b;
}

/* How many live processes the node of pid @node started as its workers (their environment
 * names it: FERRY_NODE_PID, node/rt_pool.c). */
static inline unsigned cluster2_workers_of(pid_t node)
{
	char want[32], path[300], env[8192];
	unsigned n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");

	ftest_assert_ptr_notnull(d);
	snprintf(want, sizeof(want), "FERRY_NODE_PID=%d", (int)node);
	while ((e = readdir(d))) {
		size_t len;
		FILE *f;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/environ", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		len = fread(env, 1, sizeof(env) - 1, f);
		fclose(f);
		env[len] = 0;
		for (size_t i = 0; i < len; i += strlen(env + i) + 1) {
			if (!strcmp(env + i, want)) {
				/* A zombie has no environment left: one found is alive. */
				n++;
				break;
			}
		}
	}
	closedir(d);
	return n;
}

/* The node that is not the driver's (B) and its pid; it has run a where() task with @soft
 * affinity to it (its worker started, the owner's connection to it opened): until the driver's
 * node has heard of B (its join, its first load report), soft affinity runs here. */
static inline struct ferry_node_id cluster2_node_b(struct ferry_task_opts *soft, pid_t *bpid)
{
	struct ferry_node_id self = ferry__rt.node, b, n;
	struct ferry_ref probe;
	int i;

	b = cluster2_other(&self, bpid);
	soft->affinity_node = b;
	for (i = 0; i < 100; i++) {
		probe = where(0, soft);
		n = ran_on_within(&probe, 30000);
		if (ferry_node_id_eq(&n, &b))
			break;
		usleep(50 * 1000);
	}
	ftest_assert_true(ferry_node_id_eq(&n, &b));
	ftest_assert_uint_ge(cluster2_workers_of(*bpid), 1);
	return b;
}

/* A ferry-sched of the cluster registered in the GCS (run_dir.h), started here if needed. */
static inline void cluster2_need_scheduler(void)
{
	run_dir_need_scheduler(cluster2_run_dir, &cluster2_sched, cluster2_stop);
}

#endif
