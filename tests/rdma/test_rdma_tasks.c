/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tasks across two nodes over RDMA (issue 24): `ferry start` runs a GCS and two ferry-node
 * processes that serve RDMA, each on its own soft-RoCE address (rxe0's and rxe1's in
 * tools/softroce-vm), with shm off (`--shm off`: the two stores share a host here, and a pull
 * between them must take the network, as between hosts). A driver joins. A 4 MiB return made
 * on B by a task pinned there is the argument of a task pinned to A, submitted before the first
 * has run: A's worker waits for it, it is pulled by RDMA, echoed, and the driver gets the same
 * bytes. Then B is SIGKILLed holding the only copy of another return: the driver hears of the
 * death from the GCS, the task runs again on A (lineage) and a get has the same bytes.
 * Where no RDMA device exists, each case skips with the reason.
 * Environment (meson.build): FERRY_CLI_BIN, FERRY_NODE_BIN, FERRY_TEST_JOB.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/runtime/cluster2.h"
#include "tests/rdma/rdma_util.h"

/* Soft-RoCE under TCG is 10-50x slower than hardware: deadlines are hang guards. */
#define GET_MS 300000
#define MIB 4

/* The second node's address: $FERRY_RDMA_IP2; else, with $FERRY_RDMA_IP set (a host with one
 * device), that one; else rxe1's in the VM. */
static const char *second_ip(void)
{
	const char *ip = getenv("FERRY_RDMA_IP2");

	if (ip && *ip)
		return ip;
	ip = getenv("FERRY_RDMA_IP");
	return ip && *ip ? ip : "10.77.0.2";
}

static void start_cluster(void)
{
	char head[256], other[256];

	rt_require_device();
	snprintf(head, sizeof(head),
		 "--ip %s --transport rdma --shm off --memory 128M --num-cpus 2 --timeout 300",
		 rt_ip());
	snprintf(other, sizeof(other),
		 "--ip %s --transport rdma --shm off --memory 128M --num-cpus 2 --timeout 300",
		 second_ip());
	cluster2_start_opts("ferry-rdma-tasks", head, other);
}

/* big_tally's bytes (tests/unit/runtime/job_owner.c): byte i is i * 31 + 7. */
static void check_big(const struct ferry_ref *r)
{
	struct ferry_view v;
	size_t bad = 0;
	int ret = ferry_get(r, GET_MS, &v);

	if (ret < 0)
		ftest_log("get: %s: %s", ferry_strerror(ret), v.error);
	ftest_assert_ok(ret);
	ftest_assert_uint_eq(v.len, (size_t)MIB << 20);
	for (size_t i = 0; i < v.len; i++)
		bad += ((const uint8_t *)v.data)[i] != (uint8_t)(i * 31 + 7);
	ftest_assert_uint_eq(bad, 0);
	ferry_release(&v);
}

/* big_tally(@path, MIB) with @o: its ref. */
static struct ferry_ref tally(const char *path, const struct ferry_task_opts *o)
{
	int64_t mib = MIB;
	struct ferry_arg args[2] = {{.data = path, .len = strlen(path)},
				    {.data = &mib, .len = sizeof(mib)}};
	struct ferry_ref r;

	ftest_assert_ok(ferry_submit("big_tally", args, 2, o, &r));
	return r;
}

FTEST(an_argument_made_on_one_node_is_pulled_by_rdma_to_the_other)
{
	struct ferry_task_opts on_b = {.strategy = FERRY_SCHED_NODE_AFFINITY};
	struct ferry_task_opts on_a = {.strategy = FERRY_SCHED_NODE_AFFINITY};
	struct ferry_arg by_ref = {0};
	struct ferry_ref made, echoed;
	char path[300];
	pid_t bpid;

	start_cluster();
	on_b.affinity_node = cluster2_other(&ferry__rt.node, &bpid);
	on_a.affinity_node = ferry__rt.node;
	snprintf(path, sizeof(path), "%s/made.runs", cluster2_run_dir);
	made = tally(path, &on_b);
	/* Submitted at once: the argument is pending when A's worker is leased. */
	by_ref.ref = &made;
	ftest_assert_ok(ferry_submit("echo", &by_ref, 1, &on_a, &echoed));
	check_big(&echoed);
	check_big(&made);
	ftest_assert_uint_eq(cluster2_runs(path), 1);
	ferry_ref_drop(&echoed);
	ferry_ref_drop(&made);
	ferry_shutdown();
	cluster2_stop();
}

FTEST(a_return_lost_with_its_node_is_made_again_on_the_other)
{
	struct ferry_task_opts soft = {.strategy = FERRY_SCHED_NODE_AFFINITY,
				       .affinity_soft = true};
	struct ferry_ref r;
	char path[300];
	unsigned n = 0;
	int ready = 0;
	pid_t bpid;

	start_cluster();
	(void)cluster2_node_b(&soft, &bpid); /* B has run one: soft affinity finds it */
	snprintf(path, sizeof(path), "%s/lost.runs", cluster2_run_dir);
	r = tally(path, &soft);
	/* Ready in B's store only: waited for, never got (a get would pull a copy here). */
	ftest_assert_int_eq(ferry_wait(&r, 1, 1, GET_MS, &ready), 1);
	ftest_assert_uint_eq(cluster2_runs(path), 1);
	ftest_assert_ok(kill(bpid, SIGKILL));
	/* A bounded wait for the GCS to declare B dead and the driver to run the task again. */
	for (int i = 0; i < 1200 && (n = cluster2_runs(path)) < 2; i++)
		usleep(100 * 1000);
	ftest_assert_uint_eq(n, 2);
	check_big(&r);
	ferry_ref_drop(&r);
	ferry_shutdown();
	cluster2_stop();
}
