/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where tasks run (node/rt_sched.c, issue 24) on a cluster `ferry start` runs: a GCS and two
 * ferry-node processes of one CPU each on loopback, a driver joined to one of them. A task
 * with hard NODE_AFFINITY runs on the node named (it returns the ID of its node), reached in
 * one hop: the driver's node answers "retry at", the other queues the placed request and
 * forwards nothing (the nodes' counters at stop say so). Soft affinity to a full node, or to a
 * dead one, runs on the driver's node; hard affinity to a dead or unknown node fails with
 * -EHOSTUNREACH naming it. With a scheduler (ferry-sched): tasks spill from a busy node to an
 * idle one, run where their 4 MiB input is, and SPREAD uses both nodes. Later leases of such a
 * class ask the input's node directly (no hop through the driver's node), and a burst of
 * short SPREAD tasks is shared evenly. A task no node can run
 * waits (a warning in the node's log, an error record of its job in the GCS) instead of
 * failing, and runs once a node that can joins. A node's load report carries the mean run
 * time of its tasks, as the owners measured them. The job is tests/unit/runtime/job_owner.c
 * (where, big).
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB; FERRY_SCHED_BIN
 * (ferry-sched) for the tests that need a scheduler.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/runtime/run_dir.h"
#include "tests/integration/runtime/where.h"
#include "tests/integration/procs.h"

#define GET_MS 30000

static char run_dir[256];
static bool stopped = true;
static pid_t sched_pid; /* a ferry-sched this test started, or 0 */

/* A failed assertion exits: the cluster's daemons must not outlive the test. */
static void stop_cluster(void)
{
	if (sched_pid > 0) {
		kill(sched_pid, SIGTERM);
		waitpid(sched_pid, NULL, 0);
		sched_pid = 0;
	}
	if (stopped)
		return;
	stopped = true;
	(void)itest_ferry_cli(run_dir, "stop --timeout 5");
}

/* At the test process's exit, after stop_cluster (atexit runs in reverse): the run directory
 * and its session logs go (node_counters read them before). */
static void remove_run_dir(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
	if (run_dir[0] && system(cmd) != 0)
		fprintf(stderr, "%s not removed\n", run_dir);
}

/* The GCS's address and the token's path, from the run directory. */
static void cluster_address(char *addr, size_t size)
{
	char path[512], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cluster", run_dir);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	addr[0] = 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "address ", 8)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(addr, size, "%s", line + 8);
		}
	fclose(f);
	ftest_assert_true(addr[0] != 0);
}

/* One more node of one CPU (and @extra options) joins the cluster. */
static void add_node(const char *extra)
{
	char args[1024], addr[256];

	cluster_address(addr, sizeof(addr));
	snprintf(args, sizeof(args),
		 "start --address %s --token-file %s/token --ip 127.0.0.1 --memory 64M "
		 "--num-cpus 1 --timeout 20 %s",
		 addr, run_dir, extra);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, args), 0);
}

/* @nodes nodes of one CPU each, the first started with @head_extra (the others with
 * @node_extra); the driver joins (through this host's first). */
static void start_cluster_with(int nodes, const char *head_extra, const char *node_extra)
{
	char args[512];

	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};

	if (!o.code_path)
		ftest_skip("FERRY_TEST_JOB not set (run through meson test)");
	/* Not in ftest_tmpdir(): a failed assertion removes that before stop_cluster runs. */
	snprintf(run_dir, sizeof(run_dir), "/tmp/ferry-placement-%d", (int)getpid());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	/* The nodes log their placement counters at info (node_counters). */
	setenv("FERRY_LOG", getenv("FTEST_NODE_LOG") ? getenv("FTEST_NODE_LOG") : "node=info", 1);
	stopped = false;
	if (!getenv("FTEST_KEEP_RUN_DIR")) /* to read the daemons' logs after */
		atexit(remove_run_dir);
	atexit(stop_cluster);
	snprintf(args, sizeof(args),
		 "start --head --port 0 --ip 127.0.0.1 --memory 64M --num-cpus 1 --timeout 20 %s",
		 head_extra);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, args), 0);
	for (int i = 1; i < nodes; i++)
		add_node(node_extra);
	ftest_assert_ok(ferry_init(&o));
}

static void start_cluster(int nodes)
{
	start_cluster_with(nodes, "", "");
}

/* Node @index's ID (its node.id file). */
static struct ferry_node_id node_id(int index)
{
	return run_dir_node(run_dir, index, NULL);
}

/* The node that is not the driver's (of a two-node cluster), and its index. */
static struct ferry_node_id other_node(int *index)
{
	for (int i = 1; i <= 2; i++) {
		struct ferry_node_id id = node_id(i);

		if (!ferry_node_id_eq(&id, &ferry__rt.node)) {
			if (index)
				*index = i;
			return id;
		}
	}
	ftest__fail(__FILE__, __LINE__, "the driver's node is both nodes");
}

/* The node a where() ran on; it must have succeeded. */
static struct ferry_node_id ran_on(struct ferry_ref *r)
{
	return ran_on_within(r, GET_MS);
}

static struct ferry_task_opts affinity(const struct ferry_node_id *node, bool soft)
{
	return (struct ferry_task_opts){.strategy = FERRY_SCHED_NODE_AFFINITY,
					.affinity_node = *node,
					.affinity_soft = soft};
}

/* Node @index's counters at its stop: "N here, N placed here, N forwarded". */
static void node_counters(int index, unsigned *here, unsigned *placed, unsigned *forwarded)
{
	char path[512], line[1024];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/session_latest/logs/node-%d.log", run_dir, index);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "lease requests: ");

		if (p && sscanf(p, "lease requests: %u here, %u placed here, %u forwarded", here,
				placed, forwarded) == 3)
			found = true;
	}
	fclose(f);
	ftest_assert_true(found);
	ftest_log("node-%d: %u here, %u placed here, %u forwarded", index, *here, *placed,
		  *forwarded);
}

FTEST(hard_affinity_runs_on_the_named_node_in_one_hop)
{
	struct ferry_ref there[6], here[2];
	struct ferry_node_id other, self;
	struct ferry_task_opts o;
	unsigned h, p, fw;
	int oi;

	start_cluster(2);
	self = ferry__rt.node;
	other = other_node(&oi);
	o = affinity(&other, false);
	for (int i = 0; i < 6; i++)
		there[i] = where(0, &o);
	o = affinity(&self, false);
	for (int i = 0; i < 2; i++)
		here[i] = where(0, &o);
	for (int i = 0; i < 6; i++) {
		struct ferry_node_id n = ran_on(&there[i]);

		ftest_assert_true(ferry_node_id_eq(&n, &other));
	}
	for (int i = 0; i < 2; i++) {
		struct ferry_node_id n = ran_on(&here[i]);

		ftest_assert_true(ferry_node_id_eq(&n, &self));
	}
	ferry_shutdown();
	stop_cluster();
	/* One hop: the driver's node forwarded, the other only queued what was placed on it. */
	node_counters(3 - oi, &h, &p, &fw);
	ftest_assert_uint_ge(fw, 1);
	ftest_assert_uint_ge(h, 1);
	node_counters(oi, &h, &p, &fw);
	ftest_assert_uint_eq(fw, 0);
	ftest_assert_uint_ge(p, 1);
}

FTEST(hard_affinity_to_an_unknown_node_fails_naming_it)
{
	struct ferry_node_id nobody;
	struct ferry_task_opts o;
	struct ferry_ref r;
	struct ferry_view v;
	char hex[40];

	start_cluster(1);
	ferry_node_id_random(&nobody);
	ferry_node_id_to_hex(&nobody, hex, sizeof(hex));
	o = affinity(&nobody, false);
	r = where(0, &o);
	ftest_assert_errno(ferry_get(&r, GET_MS, &v), -EHOSTUNREACH);
	ftest_log("error: %s", v.error);
	ftest_assert_ptr_notnull(strstr(v.error, hex));
	ftest_assert_ptr_notnull(strstr(v.error, "not alive"));
	ferry_ref_drop(&r);
	/* A strategy that does not exist, or affinity to no node, is the caller's error. */
	o = (struct ferry_task_opts){.strategy = FERRY_SCHED_NODE_AFFINITY};
	ftest_assert_errno(ferry_submit("where", NULL, 0, &o, &r), -EINVAL);
	o = (struct ferry_task_opts){.strategy = (enum ferry_sched_strategy)7};
	ftest_assert_errno(ferry_submit("where", NULL, 0, &o, &r), -EINVAL);
	ferry_shutdown();
	stop_cluster();
}

/* A ferry-sched of the cluster registered in the GCS, started here if needed (run_dir.h). */
static void need_scheduler(void)
{
	run_dir_need_scheduler(run_dir, &sched_pid, stop_cluster);
}

/* A node with no CPU free sends a task's lease up: some of 8 tasks of 200 ms, submitted on a
 * node of one CPU, run on the other, each reached in one hop. */
FTEST(tasks_spill_to_a_node_with_free_resources)
{
	struct ferry_node_id other, self;
	struct ferry_ref r[8];
	unsigned elsewhere = 0, h, p, fw;
	int oi;

	start_cluster(2);
	need_scheduler();
	self = ferry__rt.node;
	other = other_node(&oi);
	for (int i = 0; i < 8; i++)
		r[i] = where(200, NULL);
	for (int i = 0; i < 8; i++) {
		struct ferry_node_id n = ran_on(&r[i]);

		ftest_assert_true(ferry_node_id_eq(&n, &self) || ferry_node_id_eq(&n, &other));
		elsewhere += ferry_node_id_eq(&n, &other);
	}
	ftest_log("%u of 8 ran on the other node", elsewhere);
	ftest_assert_uint_ge(elsewhere, 1);
	ferry_shutdown();
	stop_cluster();
	node_counters(oi, &h, &p, &fw);
	ftest_assert_uint_eq(fw, 0);
	ftest_assert_uint_ge(p, 1);
}

FTEST(spread_tasks_use_every_node)
{
	struct ferry_task_opts o = {.strategy = FERRY_SCHED_SPREAD};
	struct ferry_node_id other, self;
	struct ferry_ref r[6];
	unsigned on_self = 0, on_other = 0;

	start_cluster(2);
	need_scheduler();
	self = ferry__rt.node;
	other = other_node(NULL);
	for (int i = 0; i < 6; i++)
		r[i] = where(200, &o);
	for (int i = 0; i < 6; i++) {
		struct ferry_node_id n = ran_on(&r[i]);

		on_self += ferry_node_id_eq(&n, &self);
		on_other += ferry_node_id_eq(&n, &other);
	}
	ftest_log("%u here, %u on the other node", on_self, on_other);
	ftest_assert_uint_eq(on_self + on_other, 6);
	ftest_assert_uint_ge(on_self, 1);
	ftest_assert_uint_ge(on_other, 1);
	ferry_shutdown();
	stop_cluster();
}

/* A 4 MiB return made on node A; 20 tasks taking it, submitted from B: >= 95% run on A. */
FTEST(tasks_run_where_their_input_is)
{
	struct ferry_node_id a;
	struct ferry_task_opts on_a;
	struct ferry_ref input, r[20];
	struct ferry_view v;
	int64_t mib = 4, zero = 0;
	struct ferry_arg big = {.data = &mib, .len = sizeof(mib)};
	struct ferry_arg args[2] = {{.data = &zero, .len = sizeof(zero)}, {.ref = &input}};
	unsigned on = 0;

	start_cluster(2);
	need_scheduler();
	a = other_node(NULL);
	on_a = affinity(&a, false);
	ftest_assert_ok(ferry_submit("big", &big, 1, &on_a, &input));
	ftest_assert_ok(ferry_get(&input, GET_MS, &v)); /* made, in A's store */
	ftest_assert_uint_eq(v.len, 4u << 20);
	ferry_release(&v);
	for (int i = 0; i < 20; i++)
		ftest_assert_ok(ferry_submit("where", args, 2, NULL, &r[i]));
	for (int i = 0; i < 20; i++) {
		struct ferry_node_id n = ran_on(&r[i]);

		on += ferry_node_id_eq(&n, &a);
	}
	ftest_log("%u of 20 ran on the input's node", on);
	ftest_assert_uint_ge(on, 19);
	ferry_ref_drop(&input);
	ferry_shutdown();
	stop_cluster();
}

/*
 * Once the driver has a socket to A (the affinity lease that made the input opened it), each
 * new lease of a class whose input is on A asks A's local scheduler directly: the driver's
 * node forwards only the affinity request, and A runs the others as its own ("here"). The
 * pause lets each round's lease go back (idle), so that every round asks anew.
 */
FTEST(a_lease_for_an_input_elsewhere_asks_its_node_directly)
{
	struct ferry_node_id a;
	struct ferry_task_opts on_a;
	struct ferry_ref input, r;
	struct ferry_view v;
	int64_t mib = 4, zero = 0;
	struct ferry_arg big = {.data = &mib, .len = sizeof(mib)};
	struct ferry_arg args[2] = {{.data = &zero, .len = sizeof(zero)}, {.ref = &input}};
	unsigned h, p, fw;
	int ai;

	start_cluster(2);
	a = other_node(&ai);
	on_a = affinity(&a, false);
	ftest_assert_ok(ferry_submit("big", &big, 1, &on_a, &input));
	ftest_assert_ok(ferry_get(&input, GET_MS, &v));
	ferry_release(&v);
	usleep(100 * 1000); /* A's one CPU: its lease for big goes back (idle) first */
	for (int i = 0; i < 4; i++) {
		struct ferry_node_id n;

		ftest_assert_ok(ferry_submit("where", args, 2, NULL, &r));
		n = ran_on(&r);
		ftest_assert_true(ferry_node_id_eq(&n, &a));
		usleep(100 * 1000);
	}
	ferry_ref_drop(&input);
	ferry_shutdown();
	stop_cluster();
	node_counters(3 - ai, &h, &p, &fw);
	ftest_assert_uint_eq(fw, 1);
	node_counters(ai, &h, &p, &fw);
	ftest_assert_uint_ge(h, 4);
	ftest_assert_uint_eq(fw, 0);
}

/* Whether @node's last load report shows @cpu CPUs free (in 1/FERRY_GCS_RESOURCE_UNIT). */
static bool cpu_free_is(const struct ferry_node_id *node, int64_t cpu)
{
	struct ferry_gcs_node_load *loads = NULL;
	int n = ferry_gcs_node_load_list(ferry__rt.gcs, &loads);
	bool yes = false;

	for (int i = 0; i < n; i++) {
		if (!ferry_node_id_eq(&loads[i].id, node))
			continue;
		for (uint32_t k = 0; k < loads[i].nresources; k++)
			if (!strcmp(loads[i].resources[k].name, "CPU"))
				yes = loads[i].resources[k].available == cpu;
	}
	ferry_gcs_free(loads);
	return yes;
}

static bool node_alive(const struct ferry_node_id *node)
{
	struct ferry_gcs_node_info *nodes = NULL;
	int n = ferry_gcs_node_list(ferry__rt.gcs, &nodes);
	bool alive = false;

	for (int i = 0; i < n; i++)
		alive |= ferry_node_id_eq(&nodes[i].id, node) &&
			 nodes[i].state == FERRY_GCS_NODE_ALIVE;
	ferry_gcs_free(nodes);
	return alive;
}

FTEST(soft_affinity_to_a_full_or_dead_node_runs_elsewhere)
{
	struct ferry_node_id other, self, n;
	struct ferry_ref busy, r;
	struct ferry_task_opts hard, soft;
	struct ferry_view v;
	char path[512], hex[40];
	pid_t pid = 0;
	FILE *f;
	int oi, i;

	start_cluster(2);
	self = ferry__rt.node;
	other = other_node(&oi);
	hard = affinity(&other, false);
	soft = affinity(&other, true);
	/* Full: its one CPU runs a long task, and its load report says so. */
	busy = where(3000, &hard);
	for (i = 0; i < 200 && !cpu_free_is(&other, 0); i++)
		usleep(50 * 1000);
	ftest_assert_true(cpu_free_is(&other, 0));
	r = where(0, &soft);
	n = ran_on(&r);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	n = ran_on(&busy);
	ftest_assert_true(ferry_node_id_eq(&n, &other));
	/* Dead: SIGKILLed, and declared dead by the GCS. */
	snprintf(path, sizeof(path), "%s/node-%d/node.pid", run_dir, oi);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	ftest_assert_int_eq(fscanf(f, "%d", &pid), 1);
	fclose(f);
	ftest_assert_ok(kill(pid, SIGKILL));
	for (i = 0; i < 300 && node_alive(&other); i++)
		usleep(50 * 1000);
	ftest_assert_false(node_alive(&other));
	r = where(0, &soft);
	n = ran_on(&r);
	ftest_assert_true(ferry_node_id_eq(&n, &self));
	r = where(0, &hard);
	ftest_assert_errno(ferry_get(&r, GET_MS, &v), -EHOSTUNREACH);
	ferry_node_id_to_hex(&other, hex, sizeof(hex));
	ftest_log("error: %s", v.error);
	ftest_assert_ptr_notnull(strstr(v.error, hex));
	ferry_ref_drop(&r);
	ferry_shutdown();
	stop_cluster();
}

/* @node's mean task time in its last load report (0: none yet). */
static uint64_t mean_task_us(const struct ferry_node_id *node)
{
	struct ferry_gcs_node_load *loads = NULL;
	int n = ferry_gcs_node_load_list(ferry__rt.gcs, &loads);
	uint64_t us = 0;

	for (int i = 0; i < n; i++)
		if (ferry_node_id_eq(&loads[i].id, node))
			us = loads[i].mean_task_us;
	ferry_gcs_free(loads);
	return us;
}

/* What the scheduler reads of a node: its mean task time, from the owners' LeaseReturns. */
FTEST(the_load_report_carries_the_mean_task_time)
{
	struct ferry_ref r[3];
	uint64_t us = 0;

	start_cluster(1);
	for (int i = 0; i < 3; i++)
		r[i] = where(100, NULL);
	for (int i = 0; i < 3; i++)
		(void)ran_on(&r[i]);
	/* The lease goes back after 10 ms idle; the node reports with its next heartbeat. */
	for (int i = 0; i < 200 && !(us = mean_task_us(&ferry__rt.node)); i++)
		usleep(50 * 1000);
	ftest_log("mean task time %llu us", (unsigned long long)us);
	ftest_assert_uint_ge(us, 100 * 1000); /* each slept 100 ms */
	ferry_shutdown();
	stop_cluster();
}

/* The error records of our job, as the GCS's errors channel delivers them. */
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t err_cond = PTHREAD_COND_INITIALIZER;
static unsigned infeasible_records;

static void on_error(void *arg, const struct ferry_gcs_event *ev)
{
	struct ferry_gcs_error_info e;

	(void)arg;
	if (ferry_gcs_event_error(ev, &e) < 0 || strcmp(e.type, "infeasible"))
		return;
	pthread_mutex_lock(&err_lock);
	infeasible_records++;
	pthread_cond_broadcast(&err_cond);
	pthread_mutex_unlock(&err_lock);
}

FTEST(an_infeasible_task_waits_with_a_warning_and_an_error_record)
{
	struct ferry_task_opts o = {.resources = "gadget=1"};
	struct ferry_ref r;
	struct ferry_view v;
	char path[512];

	start_cluster(1);
	ftest_assert_ok(ferry_gcs_subscribe(ferry__rt.gcs, FERRY_GCS_CH_ERRORS, &ferry__rt.job,
					    sizeof(ferry__rt.job), on_error, NULL));
	r = where(0, &o);
	/* It waits: no error, no result. */
	ftest_assert_errno(ferry_get(&r, 1500, &v), -ETIMEDOUT);
	ftest_assert_uint_ge(itest_counter_wait(&err_lock, &err_cond, &infeasible_records, 1), 1);
	ferry_ref_drop(&r);
	ferry_shutdown();
	stop_cluster();
	snprintf(path, sizeof(path), "%s/session_latest/logs/node-1.log", run_dir);
	ftest_assert_true(itest_log_has(path, "is infeasible: "));
}

/* With a scheduler: it answers -ENOSPC, the request waits at the node, and a node that has
 * what it asks for joins: the task runs there. */
FTEST(an_infeasible_task_runs_once_a_node_that_can_joins)
{
	struct ferry_task_opts o = {.resources = "gadget=1"};
	struct ferry_node_id joined, n;
	struct ferry_ref r;
	struct ferry_view v;

	start_cluster(1);
	need_scheduler();
	r = where(0, &o);
	ftest_assert_errno(ferry_get(&r, 1000, &v), -ETIMEDOUT);
	add_node("--resources gadget=1");
	joined = node_id(2);
	n = ran_on(&r);
	ftest_assert_true(ferry_node_id_eq(&n, &joined));
	ferry_shutdown();
	stop_cluster();
}

/* The scheduler tree as an operator starts it: the head node in group A with A's scheduler
 * (and the global one), the other node in group B with B's. A node of one CPU with no CPU
 * free sends a lease up to A's scheduler, which has no room either and forwards it to the
 * global level, which sends it down to B's: some of 8 tasks of 200 ms run on B's node. */
FTEST(tasks_spill_through_the_group_schedulers)
{
	struct ferry_node_id other, self;
	struct ferry_ref r[8];
	unsigned elsewhere = 0;

	start_cluster_with(2, "--group A --sched-group A", "--group B --sched-group B");
	need_scheduler();
	/* The groups' summaries reach the global level (its report links read the instances
	 * every second, then report every 200 ms); before, tasks may only stay where they are.
	 * A loaded (sanitizer) run may take longer: up to 5 rounds of 8, until one spills. */
	usleep(2000 * 1000);
	self = ferry__rt.node;
	other = other_node(NULL);
	for (int round = 0; round < 5 && !elsewhere; round++) {
		for (int i = 0; i < 8; i++)
			r[i] = where(200, NULL);
		for (int i = 0; i < 8; i++) {
			struct ferry_node_id n = ran_on(&r[i]);

			ftest_assert_true(ferry_node_id_eq(&n, &self) ||
					  ferry_node_id_eq(&n, &other));
			elsewhere += ferry_node_id_eq(&n, &other);
		}
		ftest_log("round %d: %u of 8 ran in the other group", round + 1, elsewhere);
	}
	ftest_assert_uint_ge(elsewhere, 1);
	ferry_shutdown();
	stop_cluster();
}
