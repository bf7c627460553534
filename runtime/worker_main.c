/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-worker: the process a node starts to run its tasks (runtime/worker.c). It takes no
 * options: the node passes everything through the environment.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/version.h"
#include "runtime/worker.h"

static void usage(FILE *to)
{
	fputs("usage: ferry-worker (started by ferry-node, configured by its environment:\n"
	      "         FERRY_NODE_RUNTIME_SOCKET  the node's runtime socket\n"
	      "         FERRY_NODE_STORE_SOCKET    the node's store socket\n"
	      "         FERRY_WORKER_ID            this worker's ID, 32 hex digits\n"
	      "         FERRY_WORKER_SECRET        the secret the node gave it, hex)\n"
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
	/* Before any thread exists (the store client's), so that every thread blocks them and
	 * they reach the loop's signalfd. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	return ferry__worker_run(&opts);
}
