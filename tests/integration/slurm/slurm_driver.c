/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver the Slurm test (slurm_check.py) gives examples/slurm/ferry.sbatch: it joins the
 * job's cluster with no address, as a user's driver does, runs where() tasks
 * (tests/unit/runtime/job_owner.c, the library in $FERRY_TEST_JOB) with SPREAD, N at a time,
 * until N nodes have run one or 50 rounds went by, and prints "ran on K of N nodes". Exit 0
 * when K == N.
 *   slurm_driver N [SLEEP_S]   (SLEEP_S: then sleeps, for the test's scancel case)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#define MAX_NODES 64
#define ROUNDS 50

int main(int argc, char **argv)
{
	struct ferry_init_opts o = {.code_path = getenv("FERRY_TEST_JOB")};
	struct ferry_task_opts spread = {.strategy = FERRY_SCHED_SPREAD};
	struct ferry_node_id seen[MAX_NODES];
	unsigned k = 0, alive = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
	int ret;

	if (alive == 0 || alive > MAX_NODES) {
		fprintf(stderr, "usage: slurm_driver N [SLEEP_S]  (N: 1..%d nodes)\n", MAX_NODES);
		return 2;
	}
	ret = ferry_init(&o);
	if (ret < 0) {
		fprintf(stderr, "slurm_driver: ferry_init: %s\n", ferry_strerror(ret));
		return 1;
	}
	/* Each round a task per node, each sleeping 200 ms so that SPREAD has them all at once. */
	for (int round = 0; round < ROUNDS && k < alive; round++) {
		struct ferry_ref r[MAX_NODES];
		int64_t ms = 200;
		struct ferry_arg a = {.data = &ms, .len = sizeof(ms)};

		for (unsigned i = 0; i < alive; i++)
			if (ferry_submit("where", &a, 1, &spread, &r[i]) < 0)
				return 1;
		for (unsigned i = 0; i < alive; i++) {
			struct ferry_view v;
			unsigned j;

			ret = ferry_get(&r[i], 60000, &v);
			if (ret < 0 || v.len != sizeof(struct ferry_node_id)) {
				fprintf(stderr, "slurm_driver: where: %s\n", ferry_strerror(ret));
				return 1;
			}
			for (j = 0; j < k && memcmp(&seen[j], v.data, v.len); j++)
				;
			if (j == k && k < MAX_NODES)
				memcpy(&seen[k++], v.data, v.len);
			ferry_release(&v);
			ferry_ref_drop(&r[i]);
		}
	}
	printf("ran on %u of %u nodes\n", k, alive);
	fflush(stdout);
	ferry_shutdown();
	if (argc > 2)
		sleep((unsigned)atoi(argv[2]));
	return k == alive ? 0 : 1;
}
