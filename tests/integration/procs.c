/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the integration tests (see procs.h). Failures assert: a test that cannot
 * start its processes has nothing to check.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

void itest_run_example(const char *bin_env, const char *lib_env, char *out, size_t size)
{
	const char *bin = getenv(bin_env), *lib = getenv(lib_env);
	char cmd[2048];
	int code;

	if (!bin || !lib || !getenv("FERRY_WORKER_EXE"))
		ftest_skip("%s / %s / FERRY_WORKER_EXE not set", bin_env, lib_env);
	snprintf(cmd, sizeof(cmd), "env -u FERRY_ADDRESS '%s' '%s' 2>&1", bin, lib);
	code = itest_popen_read(cmd, out, size);
	ftest_log("$ %s %s -> %d\n%s", bin, lib, code, out);
	ftest_assert_int_eq(code, 0);
}

int itest_popen_read(const char *cmd, char *out, size_t size)
{
	size_t n = 0;
	FILE *p;
	int status;

	p = popen(cmd, "r");
	ftest_assert_ptr_notnull(p);
	while (n + 1 < size && fgets(out + n, (int)(size - n), p))
		n += strlen(out + n);
	out[n] = '\0';
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void itest_cluster_address(const char *run_dir, char *out, size_t size)
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

int itest_ferry_cli(const char *run_dir, const char *args)
{
	const char *bin = getenv("FERRY_CLI_BIN");
	char cmd[1024], out[8192];
	int code;

	if (!bin || !getenv("FERRY_NODE_BIN"))
		ftest_skip("FERRY_CLI_BIN / FERRY_NODE_BIN not set (run through meson test)");
	snprintf(cmd, sizeof(cmd), "FERRY_RUN_DIR='%s' '%s' %s 2>&1", run_dir, bin, args);
	code = itest_popen_read(cmd, out, sizeof(out));
	ftest_log("$ ferry %s -> %d\n%s", args, code, out);
	return code;
}

pid_t itest_spawn(const char *const *argv, char *line, size_t size)
{
	int out[2];
	pid_t pid;
	FILE *f;

	ftest_assert_ok(pipe(out));
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* execv wants char *const[]: copies, so that @argv may stay const. */
		char *cargv[24];
		int n = 0;

		for (; argv[n] && n < 23; n++)
			cargv[n] = strdup(argv[n]);
		cargv[n] = NULL;
		dup2(out[1], 1);
		close(out[0]);
		execv(cargv[0], cargv);
		_exit(127);
	}
	close(out[1]);
	f = fdopen(out[0], "r");
	if (!fgets(line, (int)size, f))
		line[0] = '\0';
	fclose(f);
	return pid;
}

const char *itest_token_file(const char *token)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/token", ftest_tmpdir());
	f = fopen(path, "w");
	ftest_assert_ptr_notnull(f);
	fputs(token, f);
	fputc('\n', f);
	fclose(f);
	return path;
}

long itest_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	ftest_assert_ptr_notnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static void *no_op(void *arg)
{
	return arg;
}

void itest_sanitizer_thread_start(void)
{
	static bool started;
	pthread_t t;

	if (!started && pthread_create(&t, NULL, no_op, NULL) == 0) {
		pthread_join(t, NULL);
		started = true;
	}
}

bool itest_log_has(const char *path, const char *what)
{
	char line[1024];
	FILE *f = fopen(path, "r");
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

unsigned itest_counter_wait(pthread_mutex_t *lock, pthread_cond_t *cond, const unsigned *counter,
			    unsigned want)
{
	struct timespec ts;
	unsigned got;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(lock);
	while (*counter < want && pthread_cond_timedwait(cond, lock, &ts) == 0)
		;
	got = *counter;
	pthread_mutex_unlock(lock);
	return got;
}
