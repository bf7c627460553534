/* SPDX-License-Identifier: Apache-2.0 */
/* ferry-nodesim (the gcs-scale bench's node simulator) against a real ferry-gcs at 50 nodes:
 * every node registers, and each killed node is seen declared dead by an observer. Counts only,
 * no timing: the figures are bench/compare gcs-scale's. */
#include <stdlib.h>

#include "gcs_procs.h"

/* The value of @key in a "NODESIM k=v ..." line; fails the test when absent. */
static double field(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(line, pat);
	ftest_assert_ptr_notnull(p);
	return strtod(p + strlen(pat), NULL);
}

/* Run the simulator against @gcs; its NODESIM line into @out. */
static void nodesim(const struct gcs_proc *gcs, const char *extra, char *out, size_t size)
{
	const char *bin = getenv("FERRY_NODESIM_BIN");
	char cmd[1024], *line;

	if (!bin)
		ftest_skip("FERRY_NODESIM_BIN not set");
	snprintf(cmd, sizeof(cmd),
		 "%s --gcs 127.0.0.1:%u --token-file %s --gcs-pid %d --settle-s 1 --steady-s 2 %s",
		 bin, gcs->port, token_file(), (int)gcs->pid, extra);
	ftest_assert_int_eq(itest_popen_read(cmd, out, size), 0);
	line = strstr(out, "NODESIM ");
	ftest_assert_ptr_notnull(line);
	memmove(out, line, strlen(line) + 1);
}

FTEST(nodesim_registers_all_and_sees_the_killed_dead)
{
	struct gcs_proc gcs = gcs_start(0, NULL);
	char out[4096];

	nodesim(&gcs, "--nodes 50 --kills 3", out, sizeof(out));
	ftest_assert_int_eq((int)field(out, "registered"), 50);
	ftest_assert_int_eq((int)field(out, "kills"), 3);
	ftest_assert_int_eq((int)field(out, "dead_seen"), 3);
	ftest_assert_int_eq((int)field(out, "dead_unseen"), 0);
	ftest_assert_true(field(out, "hb_per_s") > 0);
	ftest_assert_true(field(out, "deliveries_per_s") >= 0);
	ftest_assert_true(field(out, "gcs_rss_mib") > 0);
	gcs_stop(&gcs, SIGTERM);
}

FTEST(nodesim_refuses_bad_arguments)
{
	const char *bin = getenv("FERRY_NODESIM_BIN");
	char cmd[512], out[256];

	if (!bin)
		ftest_skip("FERRY_NODESIM_BIN not set");
	snprintf(cmd, sizeof(cmd), "%s --nodes 0 --gcs 127.0.0.1:1 --token-file %s 2>/dev/null",
		 bin, token_file());
	ftest_assert_int_eq(itest_popen_read(cmd, out, sizeof(out)), 2);
	snprintf(cmd, sizeof(cmd), "%s --gcs nowhere --token-file %s 2>/dev/null", bin,
		 token_file());
	ftest_assert_int_eq(itest_popen_read(cmd, out, sizeof(out)), 2);
}
