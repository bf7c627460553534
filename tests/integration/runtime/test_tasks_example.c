/* SPDX-License-Identifier: Apache-2.0 */
/* examples/tasks as a user runs it: its own local cluster, 12 tasks over one model put once,
 * every batch's score printed and the total. Environment (meson.build): FERRY_TASKS_BIN,
 * FERRY_TASKS_LIB, FERRY_WORKER_EXE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

FTEST(tasks_example_scores_12_batches)
{
	char out[8192], line[32];

	itest_run_example("FERRY_TASKS_BIN", "FERRY_TASKS_LIB", out, sizeof(out));
	for (int b = 0; b < 12; b++) {
		snprintf(line, sizeof(line), "batch %2d: score ", b);
		ftest_assert_ptr_notnull(strstr(out, line));
	}
	ftest_assert_ptr_notnull(strstr(out, "12 tasks, one model put once: total score "));
}
