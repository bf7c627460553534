/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ftest runner: registration, fork per test, timeouts, leak check, skip = 77.
 *
 * DESIGN: the parent forks one child per test; the child makes itself a process-group leader
 * so that everything a test starts (servers, peers) is killed with it afterwards. The child
 * reports through its exit status: 0 pass, 1 fail, 77 skip; a signal is a crash; SIGALRM
 * (from the child's own alarm) is a timeout.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/common.h>
#include <ferry/runtime.h>

#include "common/alloc.h"
#include "ftest.h"

#define MAX_TESTS 512
#define EXIT_SKIP 77

struct test {
	const char *name; /* function name */
	void (*fn)(void); /* the test */
	const char *file; /* source file */
};

static struct test tests[MAX_TESTS];
static int test_count;
static void remove_tree(const char *path);
static int no_fork;
static int leaks_allowed;
static char tmpdir[64];

void ftest__register(const char *name, void (*fn)(void), const char *file)
{
	if (test_count == MAX_TESTS) {
		fprintf(stderr, "ftest: more than %d tests in one binary\n", MAX_TESTS);
		exit(2);
	}
	tests[test_count++] = (struct test){name, fn, file};
}

void ftest__fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "  %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (tmpdir[0])
		remove_tree(tmpdir);
	exit(1);
}

void ftest_skip(const char *fmt, ...)
{
	va_list ap;

	printf("  skip reason: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	exit(EXIT_SKIP);
}

void ftest_log(const char *fmt, ...)
{
	va_list ap;

	printf("  ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

void ftest__write_all(const char *file, int line, int fd, const void *buf, size_t size)
{
	for (size_t done = 0; done < size;) {
		ssize_t n = write(fd, (const char *)buf + done, size - done);

		if (n <= 0)
			ftest__fail(file, line, "write of %zu bytes to fd %d: %zd after %zu (%s)",
				    size, fd, n, done,
				    n < 0 ? ferry_strerror(errno) : "nothing written");
		done += (size_t)n;
	}
}

void ftest_allow_leaks(void)
{
	leaks_allowed = 1;
}

static void remove_tree(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *de;

	if (dir) {
		while ((de = readdir(dir))) {
			char child[PATH_MAX];

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			snprintf(child, sizeof(child), "%s/%s", path, de->d_name);
			if (de->d_type == DT_DIR)
				remove_tree(child);
			else
				unlink(child);
		}
		closedir(dir);
	}
	rmdir(path);
}

/* The node's and the GCS's loop threads log while the test thread reads: the lines go in under
 * a lock, and a reader gets a copy taken under it. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_lines[8192], log_copy[8192];
static bool log_capturing;

static void log_capture(void *arg, enum ferry_log_level level, const char *component,
			const char *message)
{
	size_t used;

	(void)arg;
	(void)level;
	pthread_mutex_lock(&log_lock);
	used = strlen(log_lines);
	if (log_capturing) /* a line already on its way when capture stopped is dropped */
		snprintf(log_lines + used, sizeof(log_lines) - used, "%s: %s\n", component,
			 message);
	pthread_mutex_unlock(&log_lock);
}

void ftest_log_capture_start(void)
{
	pthread_mutex_lock(&log_lock);
	log_lines[0] = 0;
	log_capturing = true;
	pthread_mutex_unlock(&log_lock);
	ferry_log_set_handler(log_capture, NULL);
}

void ftest_log_capture_stop(void)
{
	ferry_log_set_handler(NULL, NULL);
	pthread_mutex_lock(&log_lock);
	log_capturing = false;
	pthread_mutex_unlock(&log_lock);
}

const char *ftest_log_captured(void)
{
	pthread_mutex_lock(&log_lock);
	memcpy(log_copy, log_lines, sizeof(log_copy));
	pthread_mutex_unlock(&log_lock);
	return log_copy;
}

const char *ftest_tmpdir(void)
{
	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/ftest-XXXXXX");
		if (!mkdtemp(tmpdir))
			FTEST__FAIL("mkdtemp: %s", ferry_strerror(errno));
	}
	return tmpdir;
}

/* Runs in the child (or in-process with --no-fork). Returns only on success. */
static void run_body(const struct test *t)
{
	long live_before = ferry__alloc_live();
	long live_after;

	t->fn();
	ferry__alloc_fail_after(-1);
	live_after = ferry__alloc_live();
	if (tmpdir[0])
		remove_tree(tmpdir);
	if (!leaks_allowed && live_after != live_before)
		FTEST__FAIL("leak: %ld Ferry allocations live before the test, %ld after",
			    live_before, live_after);
}

static int run_forked(const struct test *t, unsigned timeout_s, char *why, size_t why_size)
{
	int status;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		snprintf(why, why_size, "fork: %s", ferry_strerror(errno));
		return 1;
	}
	if (pid == 0) {
		setpgid(0, 0);
		alarm(timeout_s);
		run_body(t);
		fflush(stdout);
		exit(0);
	}
	setpgid(pid, pid); /* also from the parent: no race with the kill below */
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			snprintf(why, why_size, "waitpid: %s", ferry_strerror(errno));
			return 1;
		}
	}
	kill(-pid, SIGKILL); /* whatever the test left running */
	if (WIFEXITED(status)) {
		int code = WEXITSTATUS(status);

		if (code == 0 || code == EXIT_SKIP)
			return code;
		snprintf(why, why_size, "exit status %d", code);
		return 1;
	}
	if (WTERMSIG(status) == SIGALRM)
		snprintf(why, why_size, "timed out after %u s", timeout_s);
	else
		snprintf(why, why_size, "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	return 1;
}

static int selected(const char *name, int argc, char **argv, int first)
{
	if (first >= argc)
		return 1;
	for (int i = first; i < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned timeout_s = 30;
	int passed = 0, failed = 0, skipped = 0, first = 1;
	const char *env = getenv("FTEST_TIMEOUT");

	if (env && atoi(env) > 0)
		timeout_s = (unsigned)atoi(env);
	/* A slower build (ThreadSanitizer, ./dev test) stretches every test's hang guard. */
	env = getenv("FTEST_TIMEOUT_SCALE");
	if (env && atoi(env) > 0)
		timeout_s *= (unsigned)atoi(env);
	for (; first < argc && argv[first][0] == '-'; first++) {
		if (!strcmp(argv[first], "--no-fork")) {
			no_fork = 1;
		} else if (!strcmp(argv[first], "--list")) {
			for (int i = 0; i < test_count; i++)
				printf("%s\n", tests[i].name);
			return 0;
		} else if (!strcmp(argv[first], "--timeout") && first + 1 < argc) {
			timeout_s = (unsigned)atoi(argv[++first]);
		} else {
			fprintf(stderr, "usage: %s [--no-fork] [--list] [--timeout S] [test...]\n",
				argv[0]);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < test_count; i++) {
		const struct test *t = &tests[i];
		char why[256] = "";
		struct timespec t0, t1;
		int r;

		if (!selected(t->name, argc, argv, first))
			continue;
		printf("# %s\n", t->name);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (no_fork) {
			run_body(t);
			r = 0;
		} else {
			r = run_forked(t, timeout_s, why, sizeof(why));
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double secs =
			(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		if (r == 0) {
			passed++;
			printf("ok   %s (%.3f s)\n", t->name, secs);
		} else if (r == EXIT_SKIP) {
			skipped++;
			printf("SKIP %s\n", t->name);
		} else {
			failed++;
			printf("FAIL %s: %s\n", t->name, why);
		}
		fflush(stdout);
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	/* A test named on the command line that does not exist is a mistake, not a pass. */
	for (int i = first; i < argc; i++) {
		bool found = false;
		for (int j = 0; j < test_count && !found; j++)
			found = !strcmp(tests[j].name, argv[i]);
		if (!found) {
			printf("FAIL no test named %s (--list names them)\n", argv[i]);
			failed++;
		}
	}
	if (failed)
		return 1;
	return passed == 0 && skipped > 0 ? EXIT_SKIP : 0;
}

int ftest_count_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

int ftest_get_int64(struct ferry_ref *ref, int64_t timeout_ms, int64_t *x, char *error, size_t size)
{
	struct ferry_view v;
	int ret = ferry_get(ref, timeout_ms, &v);

	if (ret == 0) {
		ftest_assert_uint_eq(v.len, sizeof(*x));
		memcpy(x, v.data, sizeof(*x));
		ferry_release(&v);
	} else {
		ftest_log("get: %s: %s", ferry_strerror(ret), v.error);
		if (error)
			snprintf(error, size, "%s", v.error);
	}
	ferry_ref_drop(ref);
	return ret;
}

void ftest_runtime_init(const char *address, uint32_t num_workers)
{
	struct ferry_init_opts o = {.memory_bytes = 64u << 20, .num_workers = num_workers};
	const char *job = getenv("FERRY_TEST_JOB");

	if (!job || !*job || !getenv("FERRY_WORKER_EXE"))
		ftest_skip("FERRY_TEST_JOB / FERRY_WORKER_EXE not set (run through meson test)");
	unsetenv("FERRY_ADDRESS");
	o.code_path = job;
	o.address = address;
	ftest_assert_ok(ferry_init(&o));
}
