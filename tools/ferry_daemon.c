/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `ferry` command's daemons: start one detached (double fork, setsid), wait for its ready
 * line while saying what it is doing (a node pre-faulting its store shows its progress), stop
 * it (SIGTERM, then SIGKILL), and show the end of its log when it fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/common.h>

#include "common/util.h"
#include "tools/ferry_cli.h"

#define LOG_TAIL_BYTES 4096 /* the last lines of a log shown on failure: why it stopped */
#define LOG_TAIL_LINES 12

void ferry__cli_daemon_paths(struct ferry__cli_daemon *d, const char *name, const char *pid_dir,
			     const char *stem, const char *log_dir, const char *log_stem)
{
	memset(d, 0, sizeof(*d));
	d->name = name;
	snprintf(d->pid_path, sizeof(d->pid_path), "%s/%s.pid", pid_dir, stem);
	snprintf(d->out_path, sizeof(d->out_path), "%s/%s.out", log_dir, log_stem);
	snprintf(d->log_path, sizeof(d->log_path), "%s/%s.log", log_dir, log_stem);
}

/* In the daemon (grandchild): redirect and exec; on failure report errno on @err_fd. */
static void __attribute__((noreturn))
exec_daemon(const struct ferry__cli_daemon *d, const char *const argv[], int err_fd)
{
	int out = open(d->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int log = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	int null = open("/dev/null", O_RDONLY);
	int e;

	if (out < 0 || log < 0 || null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 ||
	    dup2(log, 2) < 0)
		goto report;
	for (int fd = 3; fd < 1024; fd++)
		if (fd != err_fd)
			close(fd); /* the daemon inherits only its three streams */
	/* execv's prototype predates const; it does not write the strings. */
	execv(argv[0], ((union {
			       const char *const *c;
			       char *const *m;
		       }){.c = argv})
			       .m);
report:
	e = errno;
	if (write(err_fd, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

/* SIGINT (a Ctrl-C), SIGTERM and SIGHUP: held from a start's first daemon on, so that the start
 * sees them in ferry__cli_daemon_wait_ready() and stops what it started, rather than dying
 * between its daemons' starts and leaving them running with no cluster file. */
static void stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
}

/* The held stop signal waiting to be read, or 0. */
static int stop_signal_pending(void)
{
	sigset_t set, pending;

	stop_signals(&set);
	if (sigpending(&pending) < 0)
		return 0;
	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(&set, sig) && sigismember(&pending, sig))
			return sig;
	return 0;
}

/*
 * ferry__cli_daemon_spawn() - start @argv as a daemon: double fork, setsid, cwd /. Writes
 * d->pid and its pid file. From then on this process holds SIGINT, SIGTERM and SIGHUP (the
 * daemon does not: its mask is cleared).
 * Returns 0 or -errno (exec failures included: the exec's errno comes back over a CLOEXEC
 * pipe that closes silently on success).
 */
int ferry__cli_daemon_spawn(struct ferry__cli_daemon *d, const char *const argv[])
{
	int pfd[2], status = 0, e = 0;
	pid_t child, pid = 0;
	sigset_t stop;
	char buf[32];

	stop_signals(&stop);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	child = fork();
	if (child < 0) {
		e = errno;
		goto err_close_pipe;
	}
	if (child == 0) {
		sigprocmask(SIG_UNBLOCK, &stop, NULL); /* setsid: no terminal's Ctrl-C reaches it */
		setsid();
		if (chdir("/") < 0)
			_exit(1);
		pid = fork();
		if (pid == 0)
			exec_daemon(d, argv, pfd[1]);
		_exit(write(pfd[1], &pid, sizeof(pid)) == sizeof(pid) && pid > 0 ? 0 : 1);
	}
	close(pfd[1]);
	waitpid(child, &status, 0);
	if (read(pfd[0], &pid, sizeof(pid)) != sizeof(pid) || pid <= 0) {
		close(pfd[0]);
		return -ECHILD;
	}
	d->pid = pid;
	if (read(pfd[0], &e, sizeof(e)) == sizeof(e)) {
		close(pfd[0]);
		ferry__cli_fail("cannot run %s: %s", argv[0], ferry_strerror(e));
		return -e;
	}
	close(pfd[0]);
	snprintf(buf, sizeof(buf), "%d\n", (int)pid);
	return ferry__cli_write_file(d->pid_path, buf, 0600);
err_close_pipe:
	close(pfd[0]);
	close(pfd[1]);
	return -e;
}

int ferry__cli_daemon_stop(pid_t pid, const char *name, unsigned timeout_s)
{
	uint64_t deadline = ferry__now_ms() + (uint64_t)timeout_s * 1000u;

	if (!ferry__cli_pid_is(pid, name))
		return -ESRCH;
	kill(pid, SIGTERM);
	while (ferry__cli_pid_is(pid, name)) {
		if (ferry__now_ms() >= deadline) {
			kill(pid, SIGKILL);
			for (int i = 0; i < 200 && ferry__cli_pid_is(pid, name); i++)
				usleep(10 * 1000);
			return 1;
		}
		usleep(10 * 1000);
	}
	return 0;
}

/* Where a sibling program is: $FERRY_<NAME>_BIN, next to this program, one level up (the build
 * tree keeps tools/ apart), ../node, then $PATH. */
int ferry__cli_find_program(const char *name, const char *env, char *out, size_t size)
{
	static const char *const rel[] = {"", "/..", "/../node", "/../bin"};
	char self[PATH_MAX / 2], *slash;
	ssize_t n;

	if (getenv(env) && *getenv(env)) {
		snprintf(out, size, "%s", getenv(env));
		return 0;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		for (size_t i = 0; i < FERRY_ARRAY_SIZE(rel); i++) {
			snprintf(out, size, "%s%s/%s", self, rel[i], name);
			if (access(out, X_OK) == 0)
				return 0;
		}
	}
	for (const char *p = getenv("PATH"); p && *p;) {
		const char *end = strchrnul(p, ':');

		snprintf(out, size, "%.*s/%s", (int)(end - p), p, name);
		if (end > p && access(out, X_OK) == 0)
			return 0;
		p = *end ? end + 1 : end;
	}
	ferry__cli_fail("cannot find %s (set %s)", name, env);
	return -ENOENT;
}

void ferry__cli_print_log_tail(const char *path)
{
	char buf[LOG_TAIL_BYTES + 1];
	const char *start = buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t end;
	ssize_t n;

	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	n = pread(fd, buf, LOG_TAIL_BYTES, end > LOG_TAIL_BYTES ? end - LOG_TAIL_BYTES : 0);
	close(fd);
	if (n <= 0) {
		fprintf(stderr, "(%s is empty)\n", path);
		return;
	}
	buf[n] = '\0';
	for (int lines = 0, i = (int)n - 2; i >= 0; i--)
		if (buf[i] == '\n' && ++lines == LOG_TAIL_LINES) {
			start = buf + i + 1;
			break;
		}
	if (start == buf && end > LOG_TAIL_BYTES)
		start = strchrnul(buf, '\n') + 1; /* not half a line */
	fprintf(stderr, "--- last lines of %s ---\n%s%s", path, start,
		buf[n - 1] == '\n' ? "" : "\n");
}

/* Bytes of shared memory @pid has faulted in (its store arena, while it pre-faults). */
static uint64_t shmem_resident(pid_t pid)
{
	char path[64], buf[4096], *p;
	uint64_t kib = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (ferry__cli_read_file(path, buf, sizeof(buf)) <= 0)
		return 0;
	if ((p = strstr(buf, "RssShmem:")))
		kib += strtoull(p + 9, NULL, 10);
	if ((p = strstr(buf, "HugetlbPages:")))
		kib += strtoull(p + 13, NULL, 10);
	return kib << 10;
}

static unsigned prefault_pct(const struct ferry__cli_daemon *d)
{
	uint64_t got = d->store_bytes ? shmem_resident(d->pid) : 0;

	return d->store_bytes ? (unsigned)FERRY_MIN(got * 100 / d->store_bytes, 100) : 0;
}

/* While a node pre-faults its store: on a terminal one line updated in place, else a line at
 * every quarter, so a start that takes seconds is never silent. */
static void show_progress(const struct ferry__cli_daemon *d, unsigned *shown)
{
	unsigned pct = prefault_pct(d);

	if (!d->store_bytes || pct >= 100 || pct <= *shown)
		return;
	if (isatty(STDOUT_FILENO)) {
		printf("\r  pre-faulting the store: %3u%%", pct);
		*shown = pct;
	} else if (pct / 25 > *shown / 25) {
		printf("  pre-faulting the store: %u%%\n", pct / 25 * 25);
		*shown = pct / 25 * 25;
	} else {
		return;
	}
	fflush(stdout);
}

/* A full line containing @marker in the file at @path, into @line. */
static bool find_line(const char *path, const char *marker, char *line, size_t size)
{
	char buf[1024], *begin, *nl;
	size_t len;

	if (ferry__cli_read_file(path, buf, sizeof(buf)) <= 0 || !(begin = strstr(buf, marker)) ||
	    !(nl = strchr(begin, '\n')))
		return false;
	while (begin > buf && begin[-1] != '\n')
		begin--;
	len = FERRY_MIN((size_t)(nl - begin), size - 1);
	memcpy(line, begin, len);
	line[len] = '\0';
	return true;
}

/* Why a daemon is not ready by its deadline, as far as this side can tell. */
static void say_not_ready(const struct ferry__cli_daemon *d, unsigned timeout_s)
{
	unsigned pct = prefault_pct(d);

	if (d->store_bytes && pct < 100)
		ferry__cli_fail("%s (pid %d) not ready after %u s: still pre-faulting its %.1f GiB "
				"store (%u%% done); give it a longer --timeout or a smaller "
				"--memory",
				d->name, (int)d->pid, timeout_s,
				(double)d->store_bytes / (1u << 30), pct);
	else
		ferry__cli_fail("%s (pid %d) not ready after %u s (see its log below)", d->name,
				(int)d->pid, timeout_s);
}

int ferry__cli_daemon_wait_ready(const struct ferry__cli_daemon *d, const char *marker,
				 unsigned timeout_s, char *line, size_t size)
{
	uint64_t deadline = ferry__now_ms() + (uint64_t)timeout_s * 1000u;
	unsigned shown = 0;
	int ret = 0, sig = 0;

	while (!find_line(d->out_path, marker, line, size)) {
		show_progress(d, &shown);
		if (!ferry__cli_pid_is(d->pid, d->name)) {
			ret = -ECHILD;
			break;
		}
		if ((sig = stop_signal_pending())) {
			ret = -EINTR;
			break;
		}
		if (ferry__now_ms() >= deadline) {
			ret = -ETIMEDOUT;
			break;
		}
		usleep(20 * 1000);
	}
	if (shown && isatty(STDOUT_FILENO))
		printf("\n");
	fflush(stdout);
	if (ret == -EINTR) {
		ferry__cli_fail("%s while %s (pid %d) was starting: stopping what this start "
				"started",
				strsignal(sig), d->name, (int)d->pid);
		return ret;
	}
	if (ret == -ECHILD)
		ferry__cli_fail("%s (pid %d) exited before it was ready", d->name, (int)d->pid);
	else if (ret == -ETIMEDOUT)
		say_not_ready(d, timeout_s);
	if (ret < 0)
		ferry__cli_print_log_tail(d->log_path);
	return ret;
}
