/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The slow transport cases (suite slow): a 1 GiB object moved byte-exact between two nodes,
 * over TCP and over shm. Needs ~2.3 GiB of shared memory per case; skipped with the reason
 * when the machine has less available.
 */
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "tests/harness/ftest.h"
#include "tests/integration/transport/transport_util.h"

static void move_1gib(bool no_shm, unsigned want_transport)
{
	const uint64_t size = 1ull << 30;
	struct ferry__objmgr_result res;
	struct ferry_object_id id;
	struct ferry__node *a, *b;
	struct tt_cluster t;
	struct sysinfo si;

	if (sysinfo(&si) == 0 && (uint64_t)si.freeram * si.mem_unit < (3ull << 30))
		ftest_skip("less than 3 GiB of free memory for two 1.1 GiB stores");
	t = tt_cluster_start(2, 1100, no_shm, 60000);
	a = t.node[0], b = t.node[1];
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, size, 42);
	ftest_assert_ok(ferry__node_sync(a));
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res));
	ftest_assert_uint_eq(res.transport, want_transport);
	ftest_log("1 GiB over %s in %llu ms", no_shm ? "tcp" : "shm",
		  (unsigned long long)res.micros / 1000);
	tt_check(ferry__node_socket(b), &id, size, 42);
	tt_cluster_stop(&t);
}

FTEST(one_gib_over_tcp)
{
	move_1gib(true, FERRY_GCS_TRANSPORT_TCP);
}

FTEST(one_gib_over_shm)
{
	move_1gib(false, FERRY_GCS_TRANSPORT_SHM);
}
