/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the runtime tests read from a run directory `ferry start` made (a node's ID and pid) and
 * the scheduler they need, in one place for the cluster helpers of cluster2.h,
 * test_placement.c and test_store_free.c. Functions only: each test keeps its own run
 * directory.
 */
#ifndef FERRY_TESTS_INTEGRATION_RUNTIME_RUN_DIR_H
#define FERRY_TESTS_INTEGRATION_RUNTIME_RUN_DIR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

/* Node @index's ID (@run_dir/node-@index/node.id; 1 the head) and, when @pid is not NULL,
 * its pid (node.pid). */
static inline struct ferry_node_id run_dir_node(const char *run_dir, int index, pid_t *pid)
{
	struct ferry_node_id id;
	char path[512], hex[64] = "";
	FILE *f;
	int p;

	snprintf(path, sizeof(path), "%s/node-%d/node.id", run_dir, index);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	ftest_assert_ptr_notnull(fgets(hex, sizeof(hex), f));
	fclose(f);
	hex[strcspn(hex, "\n")] = 0;
	ftest_assert_ok(ferry_node_id_from_hex(hex, &id));
	if (!pid)
		return id;
	snprintf(path, sizeof(path), "%s/node-%d/node.pid", run_dir, index);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	ftest_assert_int_eq(fscanf(f, "%d", &p), 1);
	fclose(f);
	*pid = p;
	return id;
}

/* The ferry-sched instances registered in the GCS (ferry:sched). */
static inline int run_dir_sched_instances(void)
{
	struct ferry_gcs_bytes *keys = NULL;
	int n = ferry_gcs_kv_keys(ferry__rt.gcs, "ferry:sched", 11, "", 0, &keys);

	ferry_gcs_free(keys);
	return n;
}

/* A ferry-sched of the cluster of @run_dir registered in the GCS: the one `ferry start --head`
 * started, else one started here ($FERRY_SCHED_BIN; its pid into *@spawned), else the test
 * skips (it needs one) after ferry_shutdown() and @stop. */
static inline void run_dir_need_scheduler(const char *run_dir, pid_t *spawned, void (*stop)(void))
{
	const char *bin = getenv("FERRY_SCHED_BIN");
	char addr[256], token[512], line[256];
	int n = run_dir_sched_instances();

	if (n <= 0 && bin) {
		itest_cluster_address(run_dir, addr, sizeof(addr));
		snprintf(token, sizeof(token), "%s/token", run_dir);
		*spawned =
			itest_spawn((const char *const[]){bin, "--gcs", addr, "--token-file", token,
							  "--ip", "127.0.0.1", "--port", "0", NULL},
				    line, sizeof(line));
		ftest_log("ferry-sched: %s", line);
	}
	for (int i = 0; i < 200 && n <= 0 && (bin || i < 20); i++) {
		usleep(50 * 1000);
		n = run_dir_sched_instances();
	}
	if (n <= 0) {
		ferry_shutdown();
		stop();
		ftest_skip("no ferry-sched registered in the GCS, and FERRY_SCHED_BIN not set");
	}
	/* A scheduler that has just registered may not have the nodes' load reports yet (it
	 * answers -EAGAIN, and the node keeps the request): give it their next reports. Not a
	 * timing assert: without it the tests could only fail, not pass wrongly. */
	usleep(1000 * 1000);
}

#endif
