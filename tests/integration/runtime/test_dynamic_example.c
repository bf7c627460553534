/* SPDX-License-Identifier: Apache-2.0 */
/* examples/dynamic as a user runs it: its own local cluster of 2 workers at start, a task tree
 * 5 levels deep summing 1..4096. Environment (meson.build): FERRY_DYNAMIC_BIN,
 * FERRY_DYNAMIC_LIB, FERRY_WORKER_EXE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

FTEST(dynamic_example_sums_1_to_4096)
{
	char out[8192];

	itest_run_example("FERRY_DYNAMIC_BIN", "FERRY_DYNAMIC_LIB", out, sizeof(out));
	/* 16 leaves of 256, 15 splits and 15 adds: 46 tasks, 5 levels, deeper than 2 workers. */
	ftest_assert_ptr_notnull(
		strstr(out, "sum of 1..4096 = 8390656 (46 tasks, 5 levels deep, 2 workers"));
}
