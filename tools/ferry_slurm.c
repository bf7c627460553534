/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ferry start --slurm` inside a Slurm allocation (a batch script, salloc): the head on this
 * host, then one ferry-node on each other host of the job, started by one srun step that runs
 * `ferry start --address HEAD --block` once per host; start returns once the GCS lists every
 * host's node alive. The step's srun is recorded in the run directory, so `ferry stop` ends it
 * (srun forwards the SIGTERM; each --block process stops its node). When the job ends or is
 * cancelled, Slurm signals the step's processes itself.
 *
 * DESIGN
 * - Only Slurm's own tools: scontrol expands the node list, sbcast copies the cluster token to
 *   every host's local disk (no shared filesystem assumed, mode kept: -p), srun starts the step.
 *   --overlap: the step shares the hosts' CPUs with the job's other steps (the driver's).
 * - The run directory is the job's own (common/util.h ferry__run_dir_default): two jobs of one
 *   user on a host never share a cluster, and the batch script's `ferry stop` and driver find it
 *   with no flags.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/common.h>

#include "common/util.h"
#include "tools/ferry_cli.h"

int ferry__cli_slurm_hosts(char (*hosts)[FERRY_CLI_HOST_MAX], unsigned max)
{
	const char *list = getenv("SLURM_JOB_NODELIST");
	char scontrol[PATH_MAX], cmd[PATH_MAX + 64], line[FERRY_CLI_HOST_MAX + 2];
	unsigned n = 0;
	FILE *f;
	int status;

	if (!getenv("SLURM_JOB_ID") || !list || !*list) {
		ferry__cli_fail("--slurm: not inside a Slurm allocation (no SLURM_JOB_ID and "
				"SLURM_JOB_NODELIST: run it from an sbatch script or salloc)");
		return -EINVAL;
	}
	if (ferry__cli_find_program("scontrol", "FERRY_SCONTROL", scontrol, sizeof(scontrol)) < 0)
		return -ENOENT;
	/* The list comes from Slurm, and goes through the environment, never through a shell. */
	snprintf(cmd, sizeof(cmd), "'%s' show hostnames", scontrol);
	f = popen(cmd, "r");
	if (!f) {
		ferry__cli_fail("--slurm: cannot run scontrol: %s", ferry_strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		size_t len = strcspn(line, "\n");

		line[len] = '\0';
		if (!len)
			continue;
		if (n == max || len >= FERRY_CLI_HOST_MAX) {
			pclose(f);
			ferry__cli_fail("--slurm: more than %u hosts, or a host name too long",
					max);
			return -E2BIG;
		}
		memcpy(hosts[n++], line, len + 1);
	}
	status = pclose(f);
	if (status != 0 || n == 0) {
		ferry__cli_fail("--slurm: `scontrol show hostnames` for %s failed (exit %d)", list,
				WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -EIO;
	}
	return (int)n;
}

/* Run @argv (argv[0] a path) to its end; 0 if it exited 0, else -EIO (said why). */
static int run_tool(const char *const *argv)
{
	pid_t pid = fork();
	int status = 0;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* execv's prototype predates const; it does not write the strings. */
		execv(argv[0], ((union {
				       const char *const *c;
				       char *const *m;
			       }){.c = argv})
				       .m);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	ferry__cli_fail("%s failed (exit %d)", argv[0],
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return -EIO;
}

int ferry__cli_slurm_bcast(const char *src, const char *dst)
{
	char sbcast[PATH_MAX];

	if (ferry__cli_find_program("sbcast", "FERRY_SBCAST", sbcast, sizeof(sbcast)) < 0)
		return -ENOENT;
	/* -f: replace a copy a failed start left; -p: keep its 0600. */
	return run_tool((const char *const[]){sbcast, "-f", "-p", src, dst, NULL});
}

int ferry__cli_slurm_launch(char (*hosts)[FERRY_CLI_HOST_MAX], unsigned n,
			    const char *const *ferry_args, const char *logs, pid_t *out)
{
	char srun[PATH_MAX], nodes[32], tasks[32], *list;
	const char *argv[64];
	struct ferry__cli_daemon d;
	unsigned k = 0;
	size_t len = 0;
	int ret;

	if (ferry__cli_find_program("srun", "FERRY_SRUN", srun, sizeof(srun)) < 0)
		return -ENOENT;
	list = malloc((size_t)n * FERRY_CLI_HOST_MAX + 1);
	if (!list)
		return -ENOMEM;
	list[0] = '\0';
	for (unsigned i = 0; i < n; i++)
		len += (size_t)sprintf(list + len, "%s%s", i ? "," : "", hosts[i]);
	snprintf(nodes, sizeof(nodes), "--nodes=%u", n);
	snprintf(tasks, sizeof(tasks), "--ntasks=%u", n);
	argv[k++] = srun;
	argv[k++] = nodes;
	argv[k++] = tasks;
	argv[k++] = "--ntasks-per-node=1";
	argv[k++] = "--nodelist";
	argv[k++] = list;
	argv[k++] = "--overlap";
	argv[k++] = "--kill-on-bad-exit=0"; /* one host's failure is said, the others run on */
	argv[k++] = "--job-name=ferry-nodes";
	for (const char *const *a = ferry_args; *a && k + 1 < FERRY_ARRAY_SIZE(argv); a++)
		argv[k++] = *a;
	argv[k] = NULL;
	ferry__cli_daemon_paths(&d, "srun", ferry__cli_run_dir, "slurm-step", logs, "slurm-nodes");
	ret = ferry__cli_daemon_spawn(&d, argv);
	free(list);
	if (ret < 0)
		return ret;
	printf("started srun        pid %-7d a ferry-node on each of %u other host%s (log %s)\n",
	       (int)d.pid, n, n == 1 ? "" : "s", d.log_path);
	*out = d.pid;
	return 0;
}
