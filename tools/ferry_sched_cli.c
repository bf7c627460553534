/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `ferry` command's global schedulers: `start --head` runs one ferry-sched beside the GCS,
 * `start --sched` one more on this host (any host: it joins through the cluster file's GCS), and
 * `stop` stops them all. Their pids live in sched-N.pid of the run directory.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ferry/common.h>

#include "tools/ferry_cli.h"

uint16_t ferry__cli_metrics_base;

int ferry__cli_sched_start(const char *gcs_address, const char *token_path, const char *ip,
			   const char *group, const char *logs, unsigned timeout_s)
{
	char bin[PATH_MAX], stem[32], line[256];
	struct ferry__cli_daemon d;
	unsigned slot, port;
	int ret;

	ret = ferry__cli_find_program("ferry-sched", "FERRY_SCHED_BIN", bin, sizeof(bin));
	if (ret < 0)
		return ret;
	for (slot = 1; slot <= FERRY_CLI_MAX_SCHEDS; slot++) {
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/sched-%u.pid", ferry__cli_run_dir, slot);
		if (!ferry__cli_pid_is(ferry__cli_read_pid(path), "ferry-sched"))
			break;
	}
	if (slot > FERRY_CLI_MAX_SCHEDS) {
		ferry__cli_fail("%u ferry-sched already run from %s", FERRY_CLI_MAX_SCHEDS,
				ferry__cli_run_dir);
		return -EBUSY;
	}
	snprintf(stem, sizeof(stem), "sched-%u", slot);
	ferry__cli_daemon_paths(&d, "ferry-sched", ferry__cli_run_dir, stem, logs, stem);
	char mport[8];
	const char *argv[12] = {bin,	    "--gcs", gcs_address,	 "--token-file",
				token_path, "--ip",  ip ? ip : "0.0.0.0"};
	unsigned n = 7;

	if (group) {
		argv[n++] = "--group";
		argv[n++] = group;
	}
	if (ferry__cli_metrics_base) { /* scheduler K on base + K */
		snprintf(mport, sizeof(mport), "%u", ferry__cli_metrics_base + slot);
		argv[n++] = "--metrics-port";
		argv[n++] = mport;
	}
	argv[n] = NULL;
	ret = ferry__cli_daemon_spawn(&d, argv);
	if (ret == 0)
		ret = ferry__cli_daemon_wait_ready(&d, "listening on port", timeout_s, line,
						   sizeof(line));
	if (ret < 0)
		return ret;
	if (sscanf(line, "ferry-sched listening on port %u", &port) != 1)
		port = 0;
	printf("started ferry-sched%s%s pid %-7d port %u (log %s)\n", group ? " --group " : "",
	       group ? group : "", (int)d.pid, port, d.log_path);
	if (ferry__cli_metrics_base) { /* a URL to use, as the GCS's line gives: not 0.0.0.0 */
		char url_ip[64];

		ferry__cli_advertised_ip(ip ? ip : "0.0.0.0", url_ip, sizeof(url_ip));
		printf("  metrics: http://%s:%u/metrics\n", url_ip, ferry__cli_metrics_base + slot);
	}
	return 0;
}

int ferry__cli_sched_stop_all(unsigned timeout_s, int *stopped)
{
	int failed = 0;

	for (unsigned slot = 1; slot <= FERRY_CLI_MAX_SCHEDS; slot++) {
		char path[PATH_MAX];
		pid_t pid;
		int ret;

		snprintf(path, sizeof(path), "%s/sched-%u.pid", ferry__cli_run_dir, slot);
		pid = ferry__cli_read_pid(path);
		if (!pid)
			continue;
		ret = ferry__cli_daemon_stop(pid, "ferry-sched", timeout_s);
		if (ret >= 0) {
			printf("stopped ferry-sched pid %d\n", (int)pid);
			++*stopped;
		}
		if (ferry__cli_pid_is(pid, "ferry-sched"))
			failed = -EBUSY;
		else
			unlink(path);
	}
	return failed;
}
