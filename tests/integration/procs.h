/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers every integration test needs: run a shell command and read its output, start a daemon
 * and read its ready line, write a token file. One copy here instead of one per test.
 */
#ifndef FERRY_TESTS_INTEGRATION_PROCS_H
#define FERRY_TESTS_INTEGRATION_PROCS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* popen(@cmd): what it writes to stdout into @out (NUL-terminated, cut at @size - 1 bytes); its
 * exit code, -1 if it did not exit. Redirections (2>&1, 2>FILE) are the caller's, in @cmd. */
int itest_popen_read(const char *cmd, char *out, size_t size);

/* The ferry CLI ($FERRY_CLI_BIN; the test skips without it and $FERRY_NODE_BIN) with @args
 * and FERRY_RUN_DIR=@run_dir; its output logged. Its exit code. */
int itest_ferry_cli(const char *run_dir, const char *args);

/* The GCS address ("host:port") of the cluster `ferry start --head` left in @run_dir (its
 * "cluster" file), into @out; fails the test when there is none. */
void itest_cluster_address(const char *run_dir, char *out, size_t size);

/* fork + exec @argv (NULL-terminated, at most 23 words) with stdout on a pipe; waits for its
 * first line, put in @line ("" when it closed stdout first). The child's pid. */
pid_t itest_spawn(const char *const *argv, char *line, size_t size);

/* Runs an example as a user does (its own local cluster: no FERRY_ADDRESS): the program in
 * $@bin_env with the job library in $@lib_env; its output (stdout and stderr) into @out, logged.
 * The test skips when either, or FERRY_WORKER_EXE, is not set, and fails unless it exits 0. */
void itest_run_example(const char *bin_env, const char *lib_env, char *out, size_t size);

/* Writes @token and a newline to <ftest_tmpdir>/token; that path (static storage). */
const char *itest_token_file(const char *token);

/*
 * The sanitizer this test was built with, found in one place: GCC defines __SANITIZE_*__,
 * clang answers __has_feature. Tests bound memory and count threads, and sanitizers change both.
 */
#if defined(__SANITIZE_THREAD__)
#define ITEST_UNDER_TSAN 1
#elif defined(__SANITIZE_ADDRESS__)
#define ITEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ITEST_UNDER_TSAN 1
#elif __has_feature(address_sanitizer)
#define ITEST_UNDER_ASAN 1
#endif
#endif
#ifndef ITEST_UNDER_TSAN
#define ITEST_UNDER_TSAN 0
#endif
#ifndef ITEST_UNDER_ASAN
#define ITEST_UNDER_ASAN 0
#endif

/* Sanitizers' memory is resident too. TSan's shadow and meta memory cost about four bytes per
 * heap byte a process touches (a GCS subscriber run grows 18 MiB plain, 66 MiB under TSan);
 * ASan keeps freed memory in quarantine (38-42 MiB for the same run), so under it RSS does not
 * come back after a peak either. The memory bounds of the integration tests are multiplied by
 * this. */
#define ITEST_RSS_SCALE (ITEST_UNDER_TSAN ? 4 : ITEST_UNDER_ASAN ? 2 : 1)
#define ITEST_RSS_RETURNS (!ITEST_UNDER_ASAN)

/* Under ASan, daemons this test starts from now on keep at most 16 MiB of freed memory in
 * quarantine (ASan's default is 256 MiB). A memory bound measures what the daemon holds; a
 * quarantine that fills with whatever the daemon freed meanwhile measures the publisher's
 * speed: the GCS subscriber run peaked at 38-42 MiB on a loaded machine and 77 MiB on a quiet
 * one (more published, and freed, before the drop). Call before starting the daemon. */
static inline void itest_asan_small_quarantine(void)
{
	char opts[1024];
	const char *cur = getenv("ASAN_OPTIONS");

	if (!ITEST_UNDER_ASAN)
		return;
	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=16", cur ? cur : "",
		 cur && *cur ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
}

/* TSan runs a background thread of its own in every process it instruments, started at the
 * process's first pthread_create: a bound on another process's threads adds this, and a test
 * that counts its own threads calls itest_sanitizer_thread_start() before its first count. */
#define ITEST_SANITIZER_THREADS (ITEST_UNDER_TSAN ? 1 : 0)
void itest_sanitizer_thread_start(void);

/* Whether the file @path has a line containing @what (false when it cannot be read). */
bool itest_log_has(const char *path, const char *what);

/* Wait until *@counter >= @want, under @lock, woken by @cond (which the writer of @counter
 * broadcasts): 10 s at most, a guard against a hang, not a speed check. Its last value. */
unsigned itest_counter_wait(pthread_mutex_t *lock, pthread_cond_t *cond, const unsigned *counter,
			    unsigned want);

/* The resident set of @pid in KiB (its VmRSS line), -1 when the line is missing. */
long itest_rss_kib(pid_t pid);

#endif
