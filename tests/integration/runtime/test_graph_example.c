/* SPDX-License-Identifier: Apache-2.0 */
/* examples/graph as a user runs it: its own local cluster, two Counter actors, the issue's
 * graph compiled once and executed: 32, then 8 executions in flight at once with other inputs.
 * Environment (meson.build): FERRY_GRAPH_BIN, FERRY_GRAPH_LIB, FERRY_WORKER_EXE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

FTEST(graph_example_prints_32_then_8_pipelined_executions)
{
	char out[8192], line[128];

	itest_run_example("FERRY_GRAPH_BIN", "FERRY_GRAPH_LIB", out, sizeof(out));
	ftest_assert_ptr_notnull(strstr(out, "b.inc(6) = 16; combine = 32\n"));
	for (int i = 0; i < 8; i++) { /* a: 10 + i + 4; b: 10 + 10 i */
		snprintf(line, sizeof(line), "execution %d: inc(%d).inc(4) + inc(%d) = %d\n", i + 2,
			 i, 10 * i, 24 + 11 * i);
		ftest_assert_ptr_notnull(strstr(out, line));
	}
}
