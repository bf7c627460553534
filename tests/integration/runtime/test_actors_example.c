/* SPDX-License-Identifier: Apache-2.0 */
/* examples/actors as a user runs it: its own local cluster, a pool of 4 actors constructed with
 * one model put once, 12 predictions spread over them round robin, every batch's score printed
 * with its actor's own count of predictions, and the total. Environment (meson.build):
 * FERRY_ACTORS_BIN, FERRY_ACTORS_LIB, FERRY_WORKER_EXE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

FTEST(actors_example_predicts_12_batches_on_4_actors)
{
	char out[8192], line[64];

	itest_run_example("FERRY_ACTORS_BIN", "FERRY_ACTORS_LIB", out, sizeof(out));
	for (int b = 0; b < 12; b++) {
		snprintf(line, sizeof(line), "batch %2d: score ", b);
		ftest_assert_ptr_notnull(strstr(out, line));
		/* Round robin, and each actor's own count of its predictions (its state). */
		snprintf(line, sizeof(line), "(actor %d, its prediction %d)\n", b % 4, b / 4 + 1);
		ftest_assert_ptr_notnull(strstr(out, line));
	}
	ftest_assert_ptr_notnull(
		strstr(out, "12 predictions over 4 actors, one model put once: total score "));
}
