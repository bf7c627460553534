/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry_init joining a cluster that `ferry start --head` runs on this host (a GCS and a node as
 * daemons, in the test's own FERRY_RUN_DIR): by "auto" and by the GCS's "host:port". The
 * driver's job is in the GCS's jobs table; put and get go through that node's store; and with
 * no cluster there, "auto" fails with -ENOENT and says why. Environment (meson.build):
 * FERRY_CLI_BIN, FERRY_NODE_BIN.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "runtime/rt.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

static char run_dir[256];

__attribute__((format(printf, 1, 2))) static int cli(const char *fmt, ...)
{
	const char *bin = getenv("FERRY_CLI_BIN");
	char args[512], cmd[1024], out[8192];
	va_list ap;
	int code;

	if (!bin || !getenv("FERRY_NODE_BIN"))
		ftest_skip("FERRY_CLI_BIN / FERRY_NODE_BIN not set (run through meson test)");
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "FERRY_RUN_DIR='%s' '%s' %s 2>&1", run_dir, bin, args);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ ferry %s -> %d\n%s", args, code, out);
	return code;
}

static void start_head(void)
{
	snprintf(run_dir, sizeof(run_dir), "%s/run", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	unsetenv("FERRY_ADDRESS");
	ftest_assert_int_eq(cli("start --head --port 0 --ip 127.0.0.1 --memory 64M --timeout 20"),
			    0);
}

/* The GCS address the run directory's cluster file names. */
static void gcs_address(char *out, size_t size)
{
	char path[512], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cluster", run_dir);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	out[0] = 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "address ", 8)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(out, size, "%s", line + 8);
		}
	fclose(f);
	ftest_assert_true(out[0] != 0);
}

static void put_get_and_job(void)
{
	struct ferry_gcs_job_info *jobs = NULL;
	struct ferry_ref r;
	struct ferry_view v;
	int n, found = 0;

	ftest_assert_ok(ferry_put("joined", 6, &r));
	ftest_assert_ok(ferry_get(&r, 5000, &v));
	ftest_assert_mem_eq(v.data, "joined", 6);
	ferry_release(&v);
	ferry_ref_drop(&r);
	n = ferry_gcs_job_list(ferry__rt.gcs, &jobs);
	ftest_assert_int_gt(n, 0);
	for (int i = 0; i < n; i++)
		found += ferry_job_id_eq(&jobs[i].id, &ferry__rt.job) &&
			 jobs[i].state == FERRY_GCS_JOB_RUNNING;
	ferry_gcs_free(jobs);
	ftest_assert_int_eq(found, 1);
}

FTEST(init_auto_joins_the_cluster_ferry_start_runs)
{
	struct ferry_init_opts o = {.address = "auto"};

	start_head();
	ftest_assert_ok(ferry_init(&o));
	ftest_assert_true(strstr(ferry__rt.store_socket, run_dir) == ferry__rt.store_socket);
	put_get_and_job();
	ferry_shutdown();
	cli("stop --timeout 5");
}

FTEST(init_by_gcs_address_joins_through_this_host_s_node)
{
	struct ferry_init_opts o = {0};
	char addr[256];

	start_head();
	gcs_address(addr, sizeof(addr));
	setenv("FERRY_ADDRESS", addr, 1); /* the environment's address, as a user sets it */
	ftest_assert_ok(ferry_init(&o));
	put_get_and_job();
	ferry_shutdown();
	cli("stop --timeout 5");
}

FTEST(init_auto_with_no_cluster_is_enoent)
{
	struct ferry_init_opts o = {.address = "auto"};

	snprintf(run_dir, sizeof(run_dir), "%s/none", ftest_tmpdir());
	setenv("FERRY_RUN_DIR", run_dir, 1);
	ftest_log_capture_start();
	ftest_assert_errno(ferry_init(&o), -ENOENT);
	ftest_log_capture_stop();
	ftest_assert_true(strstr(ftest_log_captured(), "no cluster started from") != NULL);
}
