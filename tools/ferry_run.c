/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `ferry` command's run directory: its lock, small files written whole (temporary file +
 * rename), the cluster file, the token, per-session log directories, and which of the
 * processes it started still run. Layout in tools/ferry.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <ferry/common.h>

#include "common/util.h"
#include "tools/ferry_cli.h"

char ferry__cli_run_dir[PATH_MAX - 256];

void ferry__cli_fail(const char *fmt, ...)
{
	va_list ap;

	fputs("ferry: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* mkdir -p: the parents as a shell's mkdir -p makes them (0777 less the umask), @path itself
 * 0700, because it holds the cluster's token. */
static int mkdir_parents(const char *path)
{
	char buf[sizeof(ferry__cli_run_dir)];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = strchr(buf + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, 0700);
}

int ferry__cli_run_dir_init(bool create)
{
	struct stat st;

	ferry__run_dir_default(ferry__cli_run_dir, sizeof(ferry__cli_run_dir));
	if (!create && access(ferry__cli_run_dir, F_OK) < 0 && errno == ENOENT)
		return 0; /* status and stop cope with nothing there */
	if (mkdir_parents(ferry__cli_run_dir) < 0 && errno != EEXIST) {
		ferry__cli_fail("cannot create run directory %s: %s", ferry__cli_run_dir,
				ferry_strerror(errno));
		return -errno;
	}
	if (stat(ferry__cli_run_dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
		ferry__cli_fail("run directory %s is not a directory of yours", ferry__cli_run_dir);
		return -EPERM;
	}
	return 0;
}

int ferry__cli_run_lock(void)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/lock", ferry__cli_run_dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ferry__cli_fail("cannot open %s: %s", path, ferry_strerror(errno));
		return -errno;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "ferry: waiting for another ferry start or stop in %s\n",
			ferry__cli_run_dir);
		if (flock(fd, LOCK_EX) < 0) {
			ferry__cli_fail("lock %s: %s", path, ferry_strerror(errno));
			close(fd);
			return -EIO;
		}
	}
	return fd;
}

ssize_t ferry__cli_read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return n;
}

int ferry__cli_write_file(const char *path, const char *text, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(text);
	int fd, ret = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		ret = -EIO;
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret == 0 && rename(tmp, path) < 0)
		ret = -errno;
	if (ret < 0)
		unlink(tmp);
	return ret;
}

pid_t ferry__cli_read_pid(const char *path)
{
	char buf[32];

	if (ferry__cli_read_file(path, buf, sizeof(buf)) <= 0)
		return 0;
	return (pid_t)strtol(buf, NULL, 10);
}

bool ferry__cli_pid_is(pid_t pid, const char *name)
{
	char path[64], buf[512];
	const char *base, *state;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (ferry__cli_read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	state = strrchr(buf, ')');
	if (!state || state[1] != ' ' || state[2] == 'Z' || state[2] == 'X')
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if (ferry__cli_read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	base = strrchr(buf, '/');
	return strcmp(base ? base + 1 : buf, name) == 0;
}

/* ---- cluster file and token ---- */

/* The cluster file: "address HOST:PORT\ntoken PATH\nsession NAME\n". */
int ferry__cli_cluster_read(struct ferry__cli_cluster *c)
{
	char path[PATH_MAX], buf[2 * PATH_MAX], *line, *save = NULL;

	memset(c, 0, sizeof(*c));
	snprintf(path, sizeof(path), "%s/cluster", ferry__cli_run_dir);
	if (ferry__cli_read_file(path, buf, sizeof(buf)) <= 0)
		return -ENOENT;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "address ", 8))
			snprintf(c->address, sizeof(c->address), "%s", line + 8);
		else if (!strncmp(line, "token ", 6))
			snprintf(c->token, sizeof(c->token), "%s", line + 6);
		else if (!strncmp(line, "session ", 8))
			snprintf(c->session, sizeof(c->session), "%s", line + 8);
	}
	return *c->address && *c->token ? 0 : -EINVAL;
}

int ferry__cli_cluster_write(const struct ferry__cli_cluster *c)
{
	char path[PATH_MAX], buf[2 * PATH_MAX + 512];

	snprintf(path, sizeof(path), "%s/cluster", ferry__cli_run_dir);
	snprintf(buf, sizeof(buf), "address %s\ntoken %s\nsession %s\n", c->address, c->token,
		 c->session);
	return ferry__cli_write_file(path, buf, 0600);
}

/* A new random token in token.new-PID beside `token`; its path into @path. */
static int token_make(char *path, size_t size)
{
	unsigned char raw[32];
	char hex[2 * sizeof(raw) + 2];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		ferry__cli_fail("getrandom: %s", ferry_strerror(errno));
		return -EIO;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	strcat(hex, "\n");
	snprintf(path, size, "%s/token.new-%d", ferry__cli_run_dir, (int)getpid());
	if (ferry__cli_write_file(path, hex, 0600) < 0) {
		ferry__cli_fail("cannot write %s: %s", path, ferry_strerror(errno));
		return -EIO;
	}
	return 0;
}

/* @tmp_path becomes @final, the `token` there kept as swap->kept first. */
static int token_install(struct ferry__cli_token_swap *swap, const char *tmp_path,
			 const char *final)
{
	int err;

	snprintf(swap->kept, sizeof(swap->kept), "%s/token.old-%d", ferry__cli_run_dir,
		 (int)getpid());
	unlink(swap->kept);
	if (link(final, swap->kept) < 0) {
		err = errno;
		if (err != ENOENT) {
			ferry__cli_fail("cannot keep %s as %s: %s", final, swap->kept,
					ferry_strerror(err));
			return -err;
		}
		*swap->kept = '\0'; /* no token before this one */
	}
	if (rename(tmp_path, final) < 0) {
		err = errno;
		ferry__cli_fail("cannot rename %s to %s: %s", tmp_path, final, ferry_strerror(err));
		if (*swap->kept)
			unlink(swap->kept);
		return -err;
	}
	swap->swapped = true;
	return 0;
}

int ferry__cli_token_swap(struct ferry__cli_token_swap *swap, char *final, size_t size)
{
	char tmp[PATH_MAX];
	int ret;

	ret = token_make(tmp, sizeof(tmp));
	if (ret < 0)
		return ret;
	snprintf(final, size, "%s/token", ferry__cli_run_dir);
	ret = token_install(swap, tmp, final);
	if (ret < 0)
		unlink(tmp);
	return ret;
}

void ferry__cli_token_swap_undo(struct ferry__cli_token_swap *swap)
{
	char final[PATH_MAX];

	if (!swap->swapped)
		return;
	swap->swapped = false;
	snprintf(final, sizeof(final), "%s/token", ferry__cli_run_dir);
	if (!*swap->kept)
		unlink(final);
	else if (rename(swap->kept, final) < 0)
		ferry__cli_fail("cannot put the previous token %s back as %s: %s", swap->kept,
				final, ferry_strerror(errno));
}

void ferry__cli_token_swap_done(struct ferry__cli_token_swap *swap)
{
	if (swap->swapped && *swap->kept)
		unlink(swap->kept);
	swap->swapped = false;
}

/* ---- sessions ---- */

void ferry__cli_session_logs(const char *name, char *dir, size_t size)
{
	snprintf(dir, size, "%s/%s/logs", ferry__cli_run_dir, name);
}

/* Point session_latest at @name: a new link renamed over the old one. */
static void session_link(const char *name)
{
	char link[PATH_MAX - 32], tmp[PATH_MAX];

	snprintf(link, sizeof(link), "%s/session_latest", ferry__cli_run_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", link, (int)getpid());
	unlink(tmp);
	if (symlink(name, tmp) < 0 || rename(tmp, link) < 0) {
		ferry__cli_fail("cannot point %s at %s: %s", link, name, ferry_strerror(errno));
		unlink(tmp);
	}
}

int ferry__cli_session_create(char *name, size_t size)
{
	char dir[PATH_MAX], stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &tm);
	snprintf(name, size, "session_%s_%d", stamp, (int)getpid());
	snprintf(dir, sizeof(dir), "%s/%s", ferry__cli_run_dir, name);
	if (mkdir(dir, 0700) < 0) {
		ferry__cli_fail("cannot create %s: %s", dir, ferry_strerror(errno));
		return -errno;
	}
	ferry__cli_session_logs(name, dir, sizeof(dir));
	if (mkdir(dir, 0700) < 0) {
		ferry__cli_fail("cannot create %s: %s", dir, ferry_strerror(errno));
		return -errno;
	}
	session_link(name);
	return 0;
}

/* ---- what still runs ---- */

static pid_t node_pid(unsigned index, char *dir, size_t size)
{
	char path[PATH_MAX];

	snprintf(dir, size, "%s/node-%u", ferry__cli_run_dir, index);
	snprintf(path, sizeof(path), "%s/node.pid", dir);
	return ferry__cli_read_pid(path);
}

void ferry__cli_run_live(struct ferry__cli_live *live)
{
	char dir[PATH_MAX - 32], path[PATH_MAX];

	memset(live, 0, sizeof(*live));
	snprintf(path, sizeof(path), "%s/gcs.pid", ferry__cli_run_dir);
	live->gcs = ferry__cli_read_pid(path);
	live->gcs_alive = ferry__cli_pid_is(live->gcs, "ferry-gcs");
	for (unsigned i = 1; i <= FERRY_CLI_MAX_NODES; i++) {
		pid_t pid = node_pid(i, dir, sizeof(dir));

		if (!ferry__cli_pid_is(pid, "ferry-node"))
			continue;
		if (live->nodes_alive++ == 0) {
			live->first_node = i;
			live->first_node_pid = pid;
		}
	}
}

/* Whether @name is a file a node makes in its directory: its store and runtime sockets, its
 * pid and ID, its workers' and owners' sockets (w-ID.sock, o-ID.sock). */
static bool node_file(const char *name)
{
	static const char *const files[] = {"store.sock", "store.sock.rt", "node.pid", "node.id"};
	size_t len = strlen(name);

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (!strcmp(name, files[i]))
			return true;
	return (!strncmp(name, "w-", 2) || !strncmp(name, "o-", 2)) && len > 7 &&
	       !strcmp(name + len - 5, ".sock");
}

/* Unlink what @dir holds that @keep accepts (NULL: every plain file), then @dir itself if it is
 * empty then. A node killed with SIGKILL leaves all of these behind. */
static int remove_files(const char *dir, bool (*keep)(const char *name))
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d = opendir(dir);

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && (!keep || keep(e->d_name)) &&
		    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path))
			unlink(path);
	closedir(d);
	return rmdir(dir) < 0 && errno != ENOENT ? -errno : 0;
}

void ferry__cli_remove_node_dir(const char *dir)
{
	char path[PATH_MAX];
	int ret;

	/* A killed node's spilled objects and code cache are nobody's now. */
	snprintf(path, sizeof(path), "%s/spill", dir);
	(void)remove_files(path, NULL);
	snprintf(path, sizeof(path), "%s/store.sock.code", dir);
	(void)remove_files(path, NULL);
	ret = remove_files(dir, node_file);
	if (ret < 0)
		ferry__cli_fail("left %s in place: %s", dir, ferry_strerror(-ret));
}

void ferry__cli_reap_stale_nodes(void)
{
	char dir[PATH_MAX - 32];

	for (unsigned i = 1; i <= FERRY_CLI_MAX_NODES; i++) {
		pid_t pid = node_pid(i, dir, sizeof(dir));

		if (access(dir, F_OK) == 0 && !ferry__cli_pid_is(pid, "ferry-node"))
			ferry__cli_remove_node_dir(dir);
	}
}

void ferry__cli_reap_kept_tokens(void)
{
	/* What a start --head killed midway leaves: the token it replaced, kept to be put back,
	 * and the new one it had not yet renamed into place. Both are secrets. */
	static const char *const kinds[][2] = {
		{"token.old-", "replaced"},
		{"token.new-", "was installing"},
	};
	char path[PATH_MAX], *end;
	struct dirent *e;
	DIR *d = opendir(ferry__cli_run_dir);
	long pid;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t k = 0, len;

		while (k < 2 && strncmp(e->d_name, kinds[k][0], strlen(kinds[k][0])))
			k++;
		if (k == 2)
			continue;
		len = strlen(kinds[k][0]);
		pid = strtol(e->d_name + len, &end, 10);
		if (end == e->d_name + len || *end || pid <= 0 || pid > INT_MAX)
			continue;
		/* Only a start that is gone: one still running may be between its swap and its
		 * end (a pid taken again by another process keeps the file, harmlessly). */
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", ferry__cli_run_dir, e->d_name);
		if (unlink(path) == 0)
			printf("removed %s: the token that ferry start --head (pid %ld) %s, left "
			       "when that start was interrupted\n",
			       e->d_name, pid, kinds[k][1]);
	}
	closedir(d);
}
