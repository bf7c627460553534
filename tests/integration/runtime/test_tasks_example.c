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
	const char *bin = getenv("FERRY_TASKS_BIN"), *lib = getenv("FERRY_TASKS_LIB");
	char cmd[2048], out[8192], line[32];
	int code;

	if (!bin || !lib || !getenv("FERRY_WORKER_EXE"))
		ftest_skip("FERRY_TASKS_BIN / FERRY_TASKS_LIB / FERRY_WORKER_EXE not set");
	snprintf(cmd, sizeof(cmd), "env -u FERRY_ADDRESS '%s' '%s' 2>&1", bin, lib);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ tasks -> %d\n%s", code, out);
	ftest_assert_int_eq(code, 0);
	for (int b = 0; b < 12; b++) {
		snprintf(line, sizeof(line), "batch %2d: score ", b);
		ftest_assert_ptr_notnull(strstr(out, line));
	}
	ftest_assert_ptr_notnull(strstr(out, "12 tasks, one model put once: total score "));
}
