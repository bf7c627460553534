/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placement groups (ferry_pg_*, runtime/pg.c, node/rt_bundle.c) on clusters that `ferry start`
 * runs on this host, one or two nodes on loopback: PACK places two bundles on one node and its
 * tasks run there, one at a time in a bundle of 1 CPU (counted in a file the tasks write, not
 * by timing); a task outside the group waits for the CPUs the group holds and runs once the
 * group is removed; STRICT_SPREAD puts two bundles on two nodes (each bundle's tasks run on its
 * node, one of them not the driver's), and three stay PENDING
 * (-ETIMEDOUT) until removed; a driver that dies frees its group; a node that dies under a
 * group has its bundles placed again on the nodes left. The GCS's record follows
 * (PENDING, CREATED with the bundles' nodes, REMOVED). The job is
 * tests/unit/runtime/job_owner.c (in_bundle).
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

#include "common/util.h"
#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"
#include "transport/objmgr.h"

#define WAIT_MS 20000 /* a hang guard for what must come, far above an honest wait */
#define QUIET_MS 300  /* how long what must wait is watched for a wrong early start */

static char run_dir[256];
static bool stopped = true;

/* A failed assertion exits: the cluster's daemons must not outlive the test. */
static void stop_cluster(void)
{
	if (stopped)
		return;
	stopped = true;
	ferry_shutdown();
	if (itest_ferry_cli(run_dir, "stop --timeout 5") != 0)
		fprintf(stderr, "ferry stop failed: daemons of %s may be left\n", run_dir);
}

static void join(void)
{
	struct ferry_init_opts o = {.address = "auto", .code_path = getenv("FERRY_TEST_JOB")};

	ftest_assert_ok(ferry_init(&o));
}

/* A head (GCS and node) and @extra more nodes, each of 2 CPUs. */
static void start_cluster(int extra)
{
	char addr[256], args[512];

	if (!getenv("FERRY_TEST_JOB"))
		ftest_skip("FERRY_TEST_JOB not set (run through meson test)");
	snprintf(run_dir, sizeof(run_dir), "%s/run", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	stopped = false;
	atexit(stop_cluster);
	ftest_assert_int_eq(itest_ferry_cli(run_dir, "start --head --port 0 --ip 127.0.0.1 "
						     "--memory 64M --num-cpus 2 --timeout 20"),
			    0);
	itest_cluster_address(run_dir, addr, sizeof(addr));
	snprintf(args, sizeof(args),
		 "start --address %s --ip 127.0.0.1 --memory 64M --num-cpus 2 --timeout 20", addr);
	for (int i = 0; i < extra; i++)
		ftest_assert_int_eq(itest_ferry_cli(run_dir, args), 0);
}

/* The GCS's record of @pg: its state, and its bundles' nodes into @nodes (up to @n). */
static enum ferry_gcs_pg_state pg_record(const struct ferry_pg *pg, struct ferry_node_id *nodes,
					 uint32_t n)
{
	struct ferry_gcs_pg_info *info = NULL;
	enum ferry_gcs_pg_state state;

	ftest_assert_ok(ferry_gcs_pg_get(ferry__rt.gcs, ferry_pg_id(pg), &info));
	state = info->state;
	for (uint32_t i = 0; i < n && i < info->nbundles; i++)
		nodes[i] = info->bundles[i].node;
	ferry_gcs_free(info);
	return state;
}

static struct ferry_pg *create(enum ferry_pg_strategy strategy, uint32_t nbundles, double cpus)
{
	struct ferry_pg_bundle b[8] = {{0}};
	struct ferry_pg_opts o = {.strategy = strategy, .bundles = b, .nbundles = nbundles};
	struct ferry_pg *pg = NULL;

	for (uint32_t i = 0; i < nbundles; i++)
		b[i].num_cpus = cpus;
	ftest_assert_ok(ferry_pg_create(&o, &pg));
	return pg;
}

/* Runs @n in_bundle tasks of @ms each with @opts, logging to @path; waits for them. */
static void run_in(const struct ferry_task_opts *opts, const char *path, int n, int64_t ms)
{
	struct ferry_arg a[2] = {{.data = path, .len = strlen(path)},
				 {.data = &ms, .len = sizeof(ms)}};
	struct ferry_ref r[64];
	struct ferry_view v;

	ftest_assert_int_le(n, 64);
	for (int i = 0; i < n; i++)
		ftest_assert_ok(ferry_submit("in_bundle", a, 2, opts, &r[i]));
	for (int i = 0; i < n; i++) {
		ftest_assert_ok(ferry_get(&r[i], WAIT_MS, &v));
		ferry_release(&v);
		ferry_ref_drop(&r[i]);
	}
}

/* The file in_bundle writes: the most tasks that ran at once, and whether each ran on the
 * node of store socket @store (NULL: on one node, whose socket goes to @store_out). */
static int most_at_once(const char *path, const char *store, char *store_out, size_t size)
{
	char line[512];
	int now = 0, most = 0, runs = 0;
	FILE *f = fopen(path, "r");

	ftest_assert_ptr_notnull(f);
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (line[0] == '+') {
			if (!store) {
				snprintf(store_out, size, "%s", line + 2);
				store = store_out;
			}
			ftest_assert_str_eq(line + 2, store);
			runs++;
			most = ++now > most ? now : most;
		} else {
			now--;
		}
	}
	fclose(f);
	ftest_log("%d runs, at most %d at once", runs, most);
	return most;
}

FTEST(pack_holds_its_tasks_in_a_bundle_and_removal_frees_the_node)
{
	struct ferry_task_opts in0 = {.pg_bundle = 0}, big = {.num_cpus = 2};
	struct ferry_node_id nodes[2];
	struct ferry_ref blocked;
	struct ferry_view v;
	struct ferry_pg *pg;
	char path[512];
	int64_t ms = 20;

	start_cluster(0);
	join();
	pg = create(FERRY_PG_PACK, 2, 1);
	ftest_assert_ok(ferry_pg_wait(pg, WAIT_MS));
	ftest_assert_int_eq(pg_record(pg, nodes, 2), FERRY_GCS_PG_CREATED);
	ftest_assert_mem_eq(nodes[0].bytes, ferry__rt.node.bytes, sizeof(nodes[0].bytes));
	ftest_assert_mem_eq(nodes[1].bytes, ferry__rt.node.bytes, sizeof(nodes[1].bytes));
	/* Bundle 0 holds 1 CPU: its tasks run one at a time, on its node. More tasks than a
	 * lease pipelines (16), so that the owner asks for a second lease, which must wait. */
	snprintf(path, sizeof(path), "%s/runs", ftest_tmpdir());
	in0.pg = pg;
	run_in(&in0, path, 40, ms);
	ftest_assert_int_eq(most_at_once(path, ferry__rt.store_socket, NULL, 0), 1);
	/* The group holds both CPUs: a task of 2 runs only once it is removed. */
	ftest_assert_ok(ferry_submit("in_bundle",
				     (struct ferry_arg[]){{.data = path, .len = strlen(path)},
							  {.data = &ms, .len = sizeof(ms)}},
				     2, &big, &blocked));
	ftest_assert_errno(ferry_get(&blocked, QUIET_MS, &v), -ETIMEDOUT);
	ftest_assert_ok(ferry_pg_remove(pg));
	ftest_assert_ok(ferry_get(&blocked, WAIT_MS, &v));
	ferry_release(&v);
	ferry_ref_drop(&blocked);
	stop_cluster();
}

FTEST(strict_spread_takes_a_node_per_bundle_or_stays_pending)
{
	struct ferry_node_id nodes[3];
	struct ferry_pg *two, *three;
	char path[2][512], store[2][512];
	struct ferry_placement_group_id id;

	start_cluster(1);
	join();
	two = create(FERRY_PG_STRICT_SPREAD, 2, 1);
	ftest_assert_ok(ferry_pg_wait(two, WAIT_MS));
	ftest_assert_int_eq(pg_record(two, nodes, 2), FERRY_GCS_PG_CREATED);
	ftest_assert_false(ferry_id_is_nil(nodes[0].bytes, sizeof(nodes[0].bytes)));
	ftest_assert_false(ferry_id_is_nil(nodes[1].bytes, sizeof(nodes[1].bytes)));
	ftest_assert_true(memcmp(nodes[0].bytes, nodes[1].bytes, sizeof(nodes[0].bytes)) != 0);
	/* Each bundle's tasks run on its node: one of them not the driver's own. */
	for (int i = 0; i < 2; i++) {
		struct ferry_task_opts in = {.pg = two, .pg_bundle = i};

		snprintf(path[i], sizeof(path[i]), "%s/runs-%d", ftest_tmpdir(), i);
		run_in(&in, path[i], 2, 50);
		ftest_assert_int_eq(most_at_once(path[i], NULL, store[i], sizeof(store[i])), 1);
		if (!memcmp(nodes[i].bytes, ferry__rt.node.bytes, sizeof(nodes[i].bytes)))
			ftest_assert_str_eq(store[i], ferry__rt.store_socket);
	}
	ftest_assert_true(strcmp(store[0], store[1]) != 0); /* two nodes */
	/* Three bundles, two nodes: pending (with a warning), and removable. */
	three = create(FERRY_PG_STRICT_SPREAD, 3, 1);
	ftest_assert_errno(ferry_pg_wait(three, 1000), -ETIMEDOUT);
	ftest_assert_int_eq(pg_record(three, nodes, 0), FERRY_GCS_PG_PENDING);
	id = *ferry_pg_id(three);
	ftest_assert_ok(ferry_pg_remove(three));
	{
		struct ferry_gcs_pg_info *info = NULL;

		ftest_assert_ok(ferry_gcs_pg_get(ferry__rt.gcs, &id, &info));
		ftest_assert_int_eq(info->state, FERRY_GCS_PG_REMOVED);
		ferry_gcs_free(info);
	}
	ftest_assert_ok(ferry_pg_remove(two));
	stop_cluster();
}

FTEST(a_dead_owner_frees_its_group)
{
	struct ferry_task_opts big = {.num_cpus = 2};
	struct ferry_ref blocked;
	struct ferry_view v;
	char path[512], ok = 0;
	int64_t ms = 0;
	int fds[2], status;
	pid_t child;

	start_cluster(0);
	ftest_assert_int_eq(pipe(fds), 0);
	child = fork();
	ftest_assert_int_ge(child, 0);
	if (child == 0) { /* a second driver holding both CPUs in a group, until killed */
		struct ferry_init_opts o = {.address = "auto"};
		struct ferry_pg_bundle b = {.num_cpus = 2};
		struct ferry_pg_opts po = {.bundles = &b, .nbundles = 1};
		struct ferry_pg *pg;

		close(fds[0]);
		stopped = true; /* the parent's cluster is not this process's to stop */
		if (ferry_init(&o) < 0 || ferry_pg_create(&po, &pg) < 0 ||
		    ferry_pg_wait(pg, WAIT_MS) < 0 || write(fds[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	ftest_assert_int_eq(read(fds[0], &ok, 1), 1);
	close(fds[0]);
	join(); /* after the fork: a runtime's threads do not cross one */
	snprintf(path, sizeof(path), "%s/runs", ftest_tmpdir());
	ftest_assert_ok(ferry_submit("in_bundle",
				     (struct ferry_arg[]){{.data = path, .len = strlen(path)},
							  {.data = &ms, .len = sizeof(ms)}},
				     2, &big, &blocked));
	ftest_assert_errno(ferry_get(&blocked, QUIET_MS, &v), -ETIMEDOUT);
	kill(child, SIGKILL);
	ftest_assert_int_eq(waitpid(child, &status, 0), child);
	ftest_assert_ok(ferry_get(&blocked, WAIT_MS, &v));
	ferry_release(&v);
	ferry_ref_drop(&blocked);
	stop_cluster();
}

/* The pid of the node @id of the cluster (its node-N directory holds its store socket, whose
 * path the GCS's nodes table gives in the node's address). */
static pid_t node_pid(const struct ferry_node_id *id)
{
	struct ferry_gcs_node_info *nodes = NULL;
	struct ferry__node_addr a = {0};
	char path[600];
	int n = ferry_gcs_node_list(ferry__rt.gcs, &nodes), pid = 0;
	FILE *f;

	ftest_assert_int_gt(n, 0);
	for (int i = 0; i < n; i++)
		if (!memcmp(nodes[i].id.bytes, id->bytes, sizeof(id->bytes)))
			ftest_assert_ok(ferry__node_addr_parse(nodes[i].address,
							       strlen(nodes[i].address), &a));
	ferry_gcs_free(nodes);
	ftest_assert_true(a.shm_path[0] != 0);
	*strrchr(a.shm_path, '/') = 0;
	snprintf(path, sizeof(path), "%s/node.pid", a.shm_path);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	ftest_assert_int_eq(fscanf(f, "%d", &pid), 1);
	fclose(f);
	return (pid_t)pid;
}

FTEST(a_dead_node_s_bundles_are_placed_again)
{
	struct ferry_node_id nodes[2], dead;
	struct ferry_pg *pg;
	char path[512];
	uint64_t deadline;
	bool moved = false;

	start_cluster(2);
	join();
	pg = create(FERRY_PG_STRICT_SPREAD, 2, 1);
	ftest_assert_ok(ferry_pg_wait(pg, WAIT_MS));
	ftest_assert_int_eq(pg_record(pg, nodes, 2), FERRY_GCS_PG_CREATED);
	/* A bundle's node that is not the driver's own dies. */
	dead = memcmp(nodes[0].bytes, ferry__rt.node.bytes, sizeof(dead.bytes)) ? nodes[0]
										: nodes[1];
	ftest_assert_int_eq(kill(node_pid(&dead), SIGKILL), 0);
	deadline = ferry__now_ms() + WAIT_MS;
	while (!moved) {
		ftest_assert_true(ferry__now_ms() < deadline);
		usleep(50 * 1000);
		moved = pg_record(pg, nodes, 2) == FERRY_GCS_PG_CREATED &&
			memcmp(nodes[0].bytes, dead.bytes, sizeof(dead.bytes)) &&
			memcmp(nodes[1].bytes, dead.bytes, sizeof(dead.bytes));
	}
	ftest_assert_ok(ferry_pg_wait(pg, WAIT_MS));
	ftest_assert_true(memcmp(nodes[0].bytes, nodes[1].bytes, sizeof(nodes[0].bytes)) != 0);
	/* Both bundles serve tasks again. */
	for (int i = 0; i < 2; i++) {
		struct ferry_task_opts in = {.pg = pg, .pg_bundle = i};

		snprintf(path, sizeof(path), "%s/runs-%d", ftest_tmpdir(), i);
		run_in(&in, path, 1, 0);
	}
	ftest_assert_ok(ferry_pg_remove(pg));
	stop_cluster();
}

FTEST(misuse_is_refused_with_einval)
{
	struct ferry_pg_bundle none = {0}, bad = {.num_cpus = 1, .resources = "tpu"},
			       neg = {.num_cpus = -1}, ok = {.num_cpus = 0.5};
	struct ferry_pg_opts o = {.bundles = &ok, .nbundles = 1};
	struct ferry_task_opts t = {0};
	struct ferry_ref r;
	struct ferry_pg *pg = NULL;

	ftest_assert_errno(ferry_pg_create(&o, &pg), -ENOTCONN); /* before ferry_init */
	start_cluster(0);
	join();
	ftest_assert_errno(ferry_pg_create(NULL, &pg), -EINVAL);
	ftest_assert_errno(ferry_pg_create(&o, NULL), -EINVAL);
	o.nbundles = 0;
	ftest_assert_errno(ferry_pg_create(&o, &pg), -EINVAL);
	o.nbundles = FERRY_PG_MAX_BUNDLES + 1;
	ftest_assert_errno(ferry_pg_create(&o, &pg), -EINVAL);
	o.nbundles = 1;
	o.strategy = (enum ferry_pg_strategy)7;
	ftest_assert_errno(ferry_pg_create(&o, &pg), -EINVAL);
	o.strategy = FERRY_PG_PACK;
	o.bundles = &none; /* a bundle of nothing */
	ftest_assert_errno(ferry_pg_create(&o, &pg), -EINVAL);
	o.bundles = &bad; /* not name=amount */
	ftest_assert_errno(ferry_pg_create(&o, &pg), -EINVAL);
	o.bundles = &neg;
	ftest_assert_errno(ferry_pg_create(&o, &pg), -EINVAL);
	ftest_assert_ptr_null(pg);
	o.bundles = &ok;
	ftest_assert_ok(ferry_pg_create(&o, &pg));
	ftest_assert_errno(ferry_pg_wait(NULL, 0), -EINVAL);
	/* A bundle index the group does not have. */
	t.pg = pg;
	t.pg_bundle = 1;
	ftest_assert_errno(ferry_submit("in_bundle", NULL, 0, &t, &r), -EINVAL);
	t.pg_bundle = -2;
	ftest_assert_errno(ferry_submit("in_bundle", NULL, 0, &t, &r), -EINVAL);
	ftest_assert_ok(ferry_pg_wait(pg, WAIT_MS));
	ftest_assert_ok(ferry_pg_remove(pg));
	ftest_assert_ok(ferry_pg_remove(NULL));
	stop_cluster();
}
