/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-worker: the process a node starts to run its tasks (runtime/worker.c). It takes no
 * options: the node passes everything through the environment.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <ferry/common.h>

#include "common/log.h"
#include "common/version.h"
#include "runtime/worker.h"

/* A worker ends with its node, as on a host that died: otherwise an owner's tasks here run on
 * and its sockets stay open, so it never learns the node is gone. The signal is armed after
 * the spawn, so a node that died in between is caught by its pid: we have been reparented. */
static int die_with_node(void)
{
	const char *s = getenv("FERRY_NODE_PID");
	char *end;
	long pid;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
		int r = -errno;

		fprintf(stderr, "ferry-worker: PR_SET_PDEATHSIG: %s\n", ferry_strerror(r));
		return r;
	}
	if (!s) /* not started by a node (a test's or a user's worker): nothing to check */
		return 0;
	pid = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || pid <= 0) {
		fprintf(stderr, "ferry-worker: FERRY_NODE_PID '%s' is not a pid\n", s);
		return -EINVAL;
	}
	if (getppid() != (pid_t)pid) {
		fprintf(stderr, "ferry-worker: node %ld ended before this worker started\n", pid);
		return -ESRCH;
	}
	return 0;
}

static void usage(FILE *to)
{
	fputs("usage: ferry-worker (started by ferry-node, configured by its environment:\n"
	      "         FERRY_NODE_RUNTIME_SOCKET  the node's runtime socket\n"
	      "         FERRY_NODE_STORE_SOCKET    the node's store socket\n"
	      "         FERRY_WORKER_ID            this worker's ID, 32 hex digits\n"
	      "         FERRY_WORKER_SECRET        the secret the node gave it, hex\n"
	      "         FERRY_NODE_PID             the node's pid: the worker ends with it)\n"
	      "       ferry-worker --help | --version\n",
	      to);
}

int main(int argc, char **argv)
{
	struct ferry__worker_opts opts;
	char err[256];
	sigset_t set;

	if (argc > 1) {
		if (ferry__is_help_flag(argv[1]) || ferry__is_version_flag(argv[1])) {
			if (ferry__is_help_flag(argv[1]))
				usage(stdout);
			else
				ferry__version_print("ferry-worker");
			return 0;
		}
		usage(stderr);
		return 2;
	}
	if (ferry__worker_opts_from_env(&opts, err, sizeof(err)) < 0) {
		fprintf(stderr, "ferry-worker: %s\n", err);
		return 2;
	}
	if (die_with_node() < 0)
		return 1;
	/* Before any thread exists (the store client's), so that every thread blocks them and
	 * they reach the loop's signalfd. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	return ferry__worker_run(&opts);
}
