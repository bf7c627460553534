/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the ferry-sched integration tests: start and stop ferry-sched processes
 * (path in FERRY_SCHED_BIN) against a ferry-gcs started with gcs_procs.h.
 */
#ifndef FERRY_TESTS_SCHED_PROCS_H
#define FERRY_TESTS_SCHED_PROCS_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

struct sched_proc {
	pid_t pid;     /* ferry-sched */
	uint16_t port; /* its port */
};

/* Start ferry-sched against the GCS on @gcs_port, with @extra arguments (NULL-terminated, at
 * most 6); it must come up. */
static inline struct sched_proc sched_start_with(uint16_t gcs_port, const char *token_path,
						 const char *const *extra)
{
	const char *bin = getenv("FERRY_SCHED_BIN");
	char gcs[64], line[160];
	struct sched_proc p = {0};
	const char *argv[16] = {bin,	     "--gcs",  gcs, "--token-file", token_path, "--ip",
				"127.0.0.1", "--port", "0"};
	int n = 9;

	if (!bin)
		ftest_skip("FERRY_SCHED_BIN not set");
	snprintf(gcs, sizeof(gcs), "127.0.0.1:%u", gcs_port);
	for (; extra && *extra && n < 15; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	p.pid = itest_spawn(argv, line, sizeof(line));
	ftest_assert_int_eq(sscanf(line, "ferry-sched listening on port %hu", &p.port), 1);
	return p;
}

static inline struct sched_proc sched_start(uint16_t gcs_port, const char *token_path)
{
	return sched_start_with(gcs_port, token_path, NULL);
}

/* Stop it with @sig and reap it (SIGTERM: a clean exit, 0). */
static inline void sched_stop(struct sched_proc *p, int sig)
{
	int status;

	kill(p->pid, sig);
	ftest_assert_int_eq(waitpid(p->pid, &status, 0), p->pid);
	if (sig == SIGTERM)
		ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#endif
