/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver the Slurm test (slurm_check.py) gives examples/slurm/ferry.sbatch: it joins the
 * job's cluster with FERRY_ADDRESS=auto, as a user's driver does, and runs a where() task
 * (tests/unit/runtime/job_owner.c, the library in $FERRY_TEST_JOB) with hard NODE_AFFINITY on
 * every node the GCS lists alive; each must report the node it was sent to. It prints "ran on K
 * of N nodes" (N: the nodes asked for) and exits 0 when K == N and N is what it was told.
 * The node list comes from the runtime's GCS client (runtime/rt.h): the public API has no call
 * for it yet.
 *   slurm_driver N [SLEEP_S]   (SLEEP_S: then sleeps, for the test's scancel case)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"

int main(int argc, char **argv)
{
	struct ferry_init_opts o = {.code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_gcs_node_info *nodes = NULL;
	int want = argc > 1 ? atoi(argv[1]) : 0, n, ret;
	unsigned k = 0, alive = 0;

	if (want <= 0) {
		fprintf(stderr, "usage: slurm_driver N [SLEEP_S]\n");
		return 2;
	}
	ret = ferry_init(&o);
	if (ret < 0) {
		fprintf(stderr, "slurm_driver: ferry_init: %s\n", ferry_strerror(ret));
		return 1;
	}
	n = ferry_gcs_node_list(ferry__rt.gcs, &nodes);
	for (int i = 0; i < n; i++) {
		struct ferry_task_opts on = {.strategy = FERRY_SCHED_NODE_AFFINITY,
					     .affinity_node = nodes[i].id};
		int64_t ms = 0;
		struct ferry_arg a = {.data = &ms, .len = sizeof(ms)};
		struct ferry_view v;
		struct ferry_ref r;

		if (nodes[i].state != FERRY_GCS_NODE_ALIVE)
			continue;
		alive++;
		ret = ferry_submit("where", &a, 1, &on, &r);
		if (ret == 0)
			ret = ferry_get(&r, 120000, &v);
		if (ret < 0) {
			fprintf(stderr, "slurm_driver: where on %s: %s\n", nodes[i].address,
				ferry_strerror(ret));
			continue;
		}
		k += v.len == sizeof(nodes[i].id) && !memcmp(v.data, &nodes[i].id, v.len);
		ferry_release(&v);
		ferry_ref_drop(&r);
	}
	ferry_gcs_free(nodes);
	printf("ran on %u of %u nodes\n", k, alive);
	fflush(stdout);
	ferry_shutdown();
	if (argc > 2)
		sleep((unsigned)atoi(argv[2]));
	return k == alive && alive == (unsigned)want ? 0 : 1;
}
