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
	const char *bin = getenv("FERRY_GRAPH_BIN"), *lib = getenv("FERRY_GRAPH_LIB");
	char cmd[2048], out[8192], line[128];
	int code;

	if (!bin || !lib || !getenv("FERRY_WORKER_EXE"))
		ftest_skip("FERRY_GRAPH_BIN / FERRY_GRAPH_LIB / FERRY_WORKER_EXE not set");
	snprintf(cmd, sizeof(cmd), "env -u FERRY_ADDRESS '%s' '%s' 2>&1", bin, lib);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ graph -> %d\n%s", code, out);
	ftest_assert_int_eq(code, 0);
	ftest_assert_ptr_notnull(strstr(out, "b.inc(6) = 16; combine = 32\n"));
	for (int i = 0; i < 8; i++) { /* a: 10 + i + 4; b: 10 + 10 i */
		snprintf(line, sizeof(line), "execution %d: inc(%d).inc(4) + inc(%d) = %d\n", i + 2,
			 i, 10 * i, 24 + 11 * i);
		ftest_assert_ptr_notnull(strstr(out, line));
	}
}
