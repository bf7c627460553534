/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry: the operator's command. `ferry start --head` runs a GCS and a node on this host in the
 * background, `ferry start --address HOST:PORT` adds a node that joins an existing cluster,
 * `ferry status` lists the cluster's nodes as the GCS sees them, `ferry stop` stops everything
 * this host started.
 *
 * DESIGN
 * - Run directory: $FERRY_RUN_DIR, default /tmp/ferry-$UID (mode 0700). It holds `token` (made
 *   by --head when no --token-file is given, mode 0600), `cluster` (the GCS address and the token
 *   file's path, so status and further nodes need no flags), `gcs.pid` / `gcs.out` / `gcs.log`,
 *   and one `node-N/` per node (pid, out, log, store socket, spill directory). `node-N` is
 *   claimed with mkdir, so several nodes on one host never share a store, socket or port (each
 *   node listens on a free port).
 * - Daemons are started with a double fork and setsid (no controlling terminal, parent init),
 *   stdout to `*.out` (the ready line) and stderr to `*.log`. start waits for the ready line
 *   with a deadline, watching that the process is still alive; a daemon that dies prints the
 *   end of its log.
 * - stop signals nodes first, then the GCS: SIGTERM, wait up to --timeout, then SIGKILL. A pid
 *   is signalled only while /proc says it is still the program we started (pids get reused).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/config.h>
#include <ferry/gcs.h>

#include "common/loop.h"
#include "common/util.h"
#include "node/node.h"
#include "transport/objmgr.h"

#define DEFAULT_PORT 6380
#define DEFAULT_TIMEOUT_S 30
#define TOKEN_MAX 4096
#define MAX_NODES 64 /* node-N slots per run directory */

static const char usage_text[] =
	"usage: ferry start --head [--port P] [--token-file F] [NODE OPTIONS]\n"
	"       ferry start --address HOST:PORT [--token-file F] [NODE OPTIONS]\n"
	"       ferry status [--address HOST:PORT] [--token-file F]\n"
	"       ferry stop\n"
	"NODE OPTIONS: [--memory SIZE] [--transport rdma|tcp|auto] [--ip ADDR]\n"
	"              [--spin-us US] (busy poll for latency: ferry-node --spin-us)\n"
	"common: [--timeout SECONDS] (start/status/stop deadline, default 30)\n"
	"Run files (pids, logs, token, stores) live in $FERRY_RUN_DIR, default /tmp/ferry-$UID.\n";

struct opts {
	bool head;		/* start --head */
	uint16_t port;		/* GCS port (--head) */
	const char *address;	/* GCS HOST:PORT to join or ask */
	const char *token_file; /* cluster token file */
	const char *memory;	/* node store size, passed through */
	const char *transport;	/* rdma, tcp, auto */
	const char *ip;		/* address to listen on and advertise */
	const char *spin_us;	/* object manager busy-poll window, passed through */
	unsigned timeout_s;	/* deadlines */
};

struct daemon {
	const char *name;	 /* "ferry-gcs", "ferry-node": the program it must still be */
	char pid_path[PATH_MAX]; /* where its pid is recorded */
	char out_path[PATH_MAX]; /* its stdout: the ready line */
	char log_path[PATH_MAX]; /* its stderr */
	pid_t pid;		 /* once started */
};

static char run_dir[PATH_MAX - 64];

static void fail_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_msg(const char *fmt, ...)
{
	va_list ap;

	fputs("ferry: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- run directory and small files ---- */

/* Find the run directory; @create: make it (start) rather than accept its absence. */
static int run_dir_init(bool create)
{
	const char *env = getenv("FERRY_RUN_DIR");
	struct stat st;

	if (env && *env)
		snprintf(run_dir, sizeof(run_dir), "%s", env);
	else
		snprintf(run_dir, sizeof(run_dir), "/tmp/ferry-%u", (unsigned)getuid());
	if (!create && access(run_dir, F_OK) < 0 && errno == ENOENT)
		return 0; /* status and stop cope with nothing there */
	if (mkdir(run_dir, 0700) < 0 && errno != EEXIST) {
		fail_msg("cannot create run directory %s: %s", run_dir, strerror(errno));
		return -errno;
	}
	if (stat(run_dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
		fail_msg("run directory %s is not a directory of yours", run_dir);
		return -EPERM;
	}
	return 0;
}

static int write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	size_t len = strlen(text);

	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len) {
		close(fd);
		return -EIO;
	}
	return close(fd) < 0 ? -errno : 0;
}

/* The file's first @size - 1 bytes, NUL-terminated. Returns the length or -errno. */
static ssize_t read_file(const char *path, char *buf, size_t size)
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

static pid_t read_pid(const char *path)
{
	char buf[32];

	if (read_file(path, buf, sizeof(buf)) <= 0)
		return 0;
	return (pid_t)strtol(buf, NULL, 10);
}

/* Is @pid alive (not a zombie) and still running @name? */
static bool pid_is(pid_t pid, const char *name)
{
	char path[64], buf[512];
	const char *base, *state;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	state = strrchr(buf, ')');
	if (!state || state[1] != ' ' || state[2] == 'Z' || state[2] == 'X')
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if (read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	base = strrchr(buf, '/');
	return strcmp(base ? base + 1 : buf, name) == 0;
}

/* A 32-byte random token as hex, in run_dir/token (0600). */
static int make_token(char *path, size_t size)
{
	unsigned char raw[32];
	char hex[2 * sizeof(raw) + 2];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		fail_msg("getrandom: %s", strerror(errno));
		return -EIO;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	strcat(hex, "\n");
	snprintf(path, size, "%s/token", run_dir);
	unlink(path);
	if (write_file(path, hex, 0600) < 0) {
		fail_msg("cannot write %s: %s", path, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* The cluster file: "address HOST:PORT\ntoken PATH\n". */
static int cluster_read(char *addr, size_t addr_size, char *token, size_t token_size)
{
	char path[PATH_MAX], buf[2 * PATH_MAX], *line, *save = NULL;

	snprintf(path, sizeof(path), "%s/cluster", run_dir);
	if (read_file(path, buf, sizeof(buf)) <= 0)
		return -ENOENT;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "address ", 8))
			snprintf(addr, addr_size, "%s", line + 8);
		else if (!strncmp(line, "token ", 6))
			snprintf(token, token_size, "%s", line + 6);
	}
	return *addr && *token ? 0 : -EINVAL;
}

static int cluster_write(const char *addr, const char *token_path)
{
	char path[PATH_MAX], buf[2 * PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/cluster", run_dir);
	snprintf(buf, sizeof(buf), "address %s\ntoken %s\n", addr, token_path);
	return write_file(path, buf, 0600);
}

/* ---- starting daemons ---- */

static void daemon_paths(struct daemon *d, const char *name, const char *dir, const char *stem)
{
	memset(d, 0, sizeof(*d));
	d->name = name;
	snprintf(d->pid_path, sizeof(d->pid_path), "%s/%s.pid", dir, stem);
	snprintf(d->out_path, sizeof(d->out_path), "%s/%s.out", dir, stem);
	snprintf(d->log_path, sizeof(d->log_path), "%s/%s.log", dir, stem);
}

/* In the daemon (grandchild): redirect and exec; on failure report errno on @err_fd. */
static void __attribute__((noreturn))
exec_daemon(const struct daemon *d, const char *const argv[], int err_fd)
{
	int out = open(d->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int log = open(d->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
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

/*
 * Start @argv as a daemon: double fork, setsid, cwd /. Writes d->pid and its pid file.
 * Returns 0 or -errno (exec failures included: the exec's errno comes back over a CLOEXEC
 * pipe that closes silently on success).
 */
static int daemon_spawn(struct daemon *d, const char *const argv[])
{
	int pfd[2], status = 0, e = 0;
	pid_t child, pid = 0;
	char buf[32];

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	child = fork();
	if (child < 0) {
		e = errno;
		goto err_close_pipe;
	}
	if (child == 0) {
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
		fail_msg("cannot run %s: %s", argv[0], strerror(e));
		return -e;
	}
	close(pfd[0]);
	snprintf(buf, sizeof(buf), "%d\n", (int)pid);
	return write_file(d->pid_path, buf, 0600);
err_close_pipe:
	close(pfd[0]);
	close(pfd[1]);
	return -e;
}

static void print_log_tail(const char *path)
{
	char buf[4096];
	ssize_t n = read_file(path, buf, sizeof(buf));
	const char *start = buf;

	if (n <= 0)
		return;
	/* The last ~10 lines: enough to show why it exited. */
	for (int lines = 0, i = (int)n - 2; i >= 0; i--)
		if (buf[i] == '\n' && ++lines == 10) {
			start = buf + i + 1;
			break;
		}
	fprintf(stderr, "--- last lines of %s ---\n%s", path, start);
}

/* Wait until d->out_path holds a full line containing @marker; copy it to @line. */
static int daemon_wait_ready(const struct daemon *d, const char *marker, unsigned timeout_s,
			     char *line, size_t size)
{
	uint64_t deadline = ferry__now_ms() + (uint64_t)timeout_s * 1000u;
	char buf[1024];
	size_t len;

	for (;;) {
		char *nl, *hit;

		if (read_file(d->out_path, buf, sizeof(buf)) > 0 && (hit = strstr(buf, marker)) &&
		    (nl = strchr(hit, '\n'))) {
			char *begin = hit;

			while (begin > buf && begin[-1] != '\n')
				begin--;
			*nl = '\0';
			len = FERRY_MIN((size_t)(nl - begin), size - 1);
			memcpy(line, begin, len);
			line[len] = '\0';
			return 0;
		}
		if (!pid_is(d->pid, d->name)) {
			fail_msg("%s (pid %d) exited before it was ready", d->name, (int)d->pid);
			print_log_tail(d->log_path);
			return -ECHILD;
		}
		if (ferry__now_ms() >= deadline) {
			fail_msg("%s (pid %d) not ready after %u s", d->name, (int)d->pid,
				 timeout_s);
			print_log_tail(d->log_path);
			return -ETIMEDOUT;
		}
		usleep(20 * 1000);
	}
}

/* SIGTERM, wait up to @timeout_s, SIGKILL. Returns 1 if it had to kill, 0, or -ESRCH. */
static int daemon_stop(pid_t pid, const char *name, unsigned timeout_s)
{
	uint64_t deadline = ferry__now_ms() + (uint64_t)timeout_s * 1000u;

	if (!pid_is(pid, name))
		return -ESRCH;
	kill(pid, SIGTERM);
	while (pid_is(pid, name)) {
		if (ferry__now_ms() >= deadline) {
			kill(pid, SIGKILL);
			for (int i = 0; i < 200 && pid_is(pid, name); i++)
				usleep(10 * 1000);
			return 1;
		}
		usleep(10 * 1000);
	}
	return 0;
}

/* Where a sibling program is: $FERRY_<NAME>_BIN, next to this program, one level up (the build
 * tree keeps tools/ apart), ../node, then $PATH. */
static int find_program(const char *name, const char *env, char *out, size_t size)
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
	fail_msg("cannot find %s (set %s)", name, env);
	return -ENOENT;
}

/* ---- stop ---- */

/* Stop the daemon whose files are @dir/@stem.*, then remove them. */
static int stop_one(const char *dir, const char *stem, const char *name, unsigned timeout_s)
{
	struct daemon d;
	pid_t pid;
	int ret;

	daemon_paths(&d, name, dir, stem);
	pid = read_pid(d.pid_path);
	if (!pid)
		return -ENOENT;
	ret = daemon_stop(pid, name, timeout_s);
	if (ret == 1)
		printf("killed  %-10s pid %d (no exit %u s after SIGTERM)\n", name, (int)pid,
		       timeout_s);
	else if (ret == 0)
		printf("stopped %-10s pid %d\n", name, (int)pid);
	else
		printf("%-10s pid %d was not running\n", name, (int)pid);
	unlink(d.pid_path);
	unlink(d.out_path);
	unlink(d.log_path);
	return pid_is(pid, name) ? -EBUSY : 0;
}

/* Remove what a node left in its directory (socket, empty spill dir), then the directory. */
static void remove_node_dir(const char *dir)
{
	char path[PATH_MAX];

	static const char *const files[] = {"store.sock", "node.pid", "node.out", "node.log"};

	for (size_t i = 0; i < FERRY_ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/spill", dir);
	rmdir(path);
	if (rmdir(dir) < 0 && errno != ENOENT)
		fail_msg("left %s in place: %s", dir, strerror(errno));
}

/* Stop every node, then the GCS, and remove the run files. */
static int stop_all(unsigned timeout_s)
{
	char dir[PATH_MAX - 32], path[PATH_MAX];
	int failed = 0, stopped = 0, ret;

	for (unsigned i = 1; i <= MAX_NODES; i++) {
		snprintf(dir, sizeof(dir), "%s/node-%u", run_dir, i);
		if (access(dir, F_OK) < 0)
			continue;
		ret = stop_one(dir, "node", "ferry-node", timeout_s);
		failed |= ret == -EBUSY;
		stopped += ret == 0;
		if (ret != -EBUSY)
			remove_node_dir(dir);
	}
	ret = stop_one(run_dir, "gcs", "ferry-gcs", timeout_s);
	failed |= ret == -EBUSY;
	stopped += ret == 0;
	for (const char *const *f = (const char *const[]){"cluster", "token", NULL}; *f; f++) {
		snprintf(path, sizeof(path), "%s/%s", run_dir, *f);
		unlink(path); /* token: only ever the generated one lives here */
	}
	if (failed) {
		fail_msg("some processes could not be stopped; run files kept in %s", run_dir);
		return -EBUSY;
	}
	rmdir(run_dir); /* fails harmlessly if someone put other files there */
	if (!stopped)
		printf("nothing was running from %s\n", run_dir);
	return 0;
}

static int cmd_stop(const struct opts *o)
{
	return stop_all(o->timeout_s);
}

/* ---- start ---- */

/* The address other hosts should use: --ip, else the first non-loopback IPv4, else loopback. */
static void advertised_ip(const struct opts *o, char *buf, size_t size)
{
	struct ifaddrs *ifs, *i;

	snprintf(buf, size, "%s", o->ip && strcmp(o->ip, "0.0.0.0") ? o->ip : "127.0.0.1");
	if ((o->ip && strcmp(o->ip, "0.0.0.0")) || getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i; i = i->ifa_next) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)(void *)i->ifa_addr;

		if (sin && sin->sin_family == AF_INET && ntohl(sin->sin_addr.s_addr) >> 24 != 127) {
			inet_ntop(AF_INET, &sin->sin_addr, buf, (socklen_t)size);
			break;
		}
	}
	freeifaddrs(ifs);
}

static int start_gcs(const struct opts *o, const char *token_path, char *addr, size_t size)
{
	char bin[PATH_MAX], port[16], line[256], ip[64];
	struct daemon d;
	unsigned got;
	int ret;

	daemon_paths(&d, "ferry-gcs", run_dir, "gcs");
	if (pid_is(read_pid(d.pid_path), d.name)) {
		fail_msg("a GCS started from %s is running already (pid %d): ferry stop first",
			 run_dir, (int)read_pid(d.pid_path));
		return -EEXIST;
	}
	ret = find_program("ferry-gcs", "FERRY_GCS_BIN", bin, sizeof(bin));
	if (ret < 0)
		return ret;
	snprintf(port, sizeof(port), "%u", o->port);
	const char *argv[] = {bin,
			      "--port",
			      port,
			      "--token-file",
			      token_path,
			      "--host",
			      o->ip ? o->ip : "0.0.0.0",
			      NULL};
	ret = daemon_spawn(&d, argv);
	if (ret == 0)
		ret = daemon_wait_ready(&d, "listening on port", o->timeout_s, line, sizeof(line));
	if (ret < 0)
		return ret;
	if (sscanf(line, "ferry-gcs listening on port %u", &got) != 1)
		got = o->port;
	advertised_ip(o, ip, sizeof(ip));
	snprintf(addr, size, "%s:%u", ip, got);
	printf("started ferry-gcs   pid %-7d port %u (log %s)\n", (int)d.pid, got, d.log_path);
	return 0;
}

/* Claim the first free node-N directory. */
static int claim_node_dir(char *dir, size_t size, unsigned *index)
{
	for (unsigned i = 1; i <= MAX_NODES; i++) {
		snprintf(dir, size, "%s/node-%u", run_dir, i);
		if (mkdir(dir, 0700) == 0) {
			*index = i;
			return 0;
		}
		if (errno != EEXIST)
			break;
	}
	fail_msg("no free node slot in %s (at most %d nodes per host)", run_dir, MAX_NODES);
	return -ENOSPC;
}

static int start_node(const struct opts *o, const char *gcs_addr, const char *token_path)
{
	char bin[PATH_MAX], dir[PATH_MAX - 32], sock[PATH_MAX], spill[PATH_MAX], line[512];
	const char *argv[24];
	struct daemon d;
	unsigned index, n = 0;
	int ret;

	ret = find_program("ferry-node", "FERRY_NODE_BIN", bin, sizeof(bin));
	if (ret < 0)
		return ret;
	ret = claim_node_dir(dir, sizeof(dir), &index);
	if (ret < 0)
		return ret;
	daemon_paths(&d, "ferry-node", dir, "node");
	snprintf(sock, sizeof(sock), "%s/store.sock", dir);
	snprintf(spill, sizeof(spill), "%s/spill", dir);
	argv[n++] = bin;
	argv[n++] = "--gcs";
	argv[n++] = gcs_addr;
	argv[n++] = "--token-file";
	argv[n++] = token_path;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--spill-dir";
	argv[n++] = spill;
	argv[n++] = "--port";
	argv[n++] = "0"; /* a free port: several nodes may share this host */
	if (o->memory) {
		argv[n++] = "--memory";
		argv[n++] = o->memory;
	}
	if (o->transport) {
		argv[n++] = "--transport";
		argv[n++] = o->transport;
	}
	if (o->ip) {
		argv[n++] = "--ip";
		argv[n++] = o->ip;
	}
	if (o->spin_us) {
		argv[n++] = "--spin-us";
		argv[n++] = o->spin_us;
	}
	argv[n] = NULL;
	ret = daemon_spawn(&d, argv);
	if (ret == 0)
		ret = daemon_wait_ready(&d, "ready", o->timeout_s, line, sizeof(line));
	if (ret < 0) {
		if (d.pid > 0)
			daemon_stop(d.pid, d.name, o->timeout_s);
		unlink(d.pid_path);
		remove_node_dir(dir);
		return ret;
	}
	printf("started ferry-node  pid %-7d node-%u: %s (log %s)\n", (int)d.pid, index, line,
	       d.log_path);
	return 0;
}

/* A token file path made absolute (daemons run in /) and checked readable. */
static int token_path_abs(const char *given, char *out)
{
	if (!realpath(given, out) || access(out, R_OK) < 0) {
		fail_msg("token file %s: %s", given, strerror(errno));
		return -ENOENT;
	}
	return 0;
}

static int cmd_start(const struct opts *o)
{
	char token[PATH_MAX], addr[256] = "", old_token[PATH_MAX] = "";
	int ret;

	if (o->head == !!o->address) {
		fail_msg("start needs exactly one of --head or --address HOST:PORT");
		return -EINVAL;
	}
	if (o->token_file)
		ret = token_path_abs(o->token_file, token);
	else if (o->head)
		ret = make_token(token, sizeof(token));
	else if (cluster_read(addr, sizeof(addr), old_token, sizeof(old_token)) == 0)
		ret = token_path_abs(old_token, token);
	else {
		fail_msg("--address needs --token-file (the head's token file, copied here)");
		return -EINVAL;
	}
	if (ret < 0)
		return ret;
	if (o->head)
		ret = start_gcs(o, token, addr, sizeof(addr));
	else
		snprintf(addr, sizeof(addr), "%s", o->address);
	if (ret < 0)
		return ret;
	ret = cluster_write(addr, token);
	if (ret == 0)
		ret = start_node(o, addr, token);
	if (ret < 0 && o->head) {
		/* A head without its node is no cluster: undo it, so a retry starts clean. */
		fprintf(stderr, "ferry: stopping the GCS again\n");
		stop_all(o->timeout_s);
	}
	if (ret < 0)
		return ret;
	if (o->head)
		printf("cluster address %s\n"
		       "on other hosts: copy %s there and run\n"
		       "  ferry start --address %s --token-file TOKEN_FILE\n",
		       addr, token, addr);
	return 0;
}

/* ---- status ---- */

static const char *state_name(enum ferry_gcs_node_state s)
{
	switch (s) {
	case FERRY_GCS_NODE_ALIVE:
		return "alive";
	case FERRY_GCS_NODE_DRAINING:
		return "draining";
	case FERRY_GCS_NODE_DEAD:
		return "dead";
	}
	return "?";
}

/* One node's row: its advertised address (ip:tcp port) and the transports it serves (with the
 * RDMA port, which differs from the TCP one). */
static void print_node(const struct ferry_gcs_node_info *n)
{
	const char *text = n->address ? n->address : "";
	struct ferry__node_addr a;
	char id[2 * sizeof(n->id) + 1], where[128] = "", tp[48] = "";
	size_t len;

	ferry_id_to_hex(&n->id, sizeof(n->id), id, sizeof(id));
	if (ferry__node_addr_parse(text, strlen(text), &a) == 0) {
		snprintf(where, sizeof(where), strchr(a.ip, ':') ? "[%s]:%u" : "%s:%u", a.ip,
			 a.tcp_port ? a.tcp_port : a.rdma_port);
		if (a.rdma_port)
			snprintf(tp, sizeof(tp), "rdma:%u,", a.rdma_port);
		len = strlen(tp);
		snprintf(tp + len, sizeof(tp) - len, "%s%s", a.tcp_port ? "tcp," : "",
			 a.shm_path[0] ? "shm," : "");
		if (*tp)
			tp[strlen(tp) - 1] = '\0';
	} else {
		snprintf(where, sizeof(where), "%.100s", text);
	}
	printf("%-12.12s  %-8s  %-22s  %-18s  %8.1f MiB\n", id, state_name(n->state), where,
	       *tp ? tp : "-", (double)n->store_capacity_bytes / (1 << 20));
}

/* A warning under the list for each live node that advertises loopback while live nodes on
 * other hosts do not: those hosts cannot pull from it (node_addr.c warns in its log too). */
static void print_clashes(const struct ferry_gcs_node_info *nodes, int count)
{
	struct ferry__node_addr a, b;
	char id[2 * sizeof(nodes[0].id) + 1];

	for (int i = 0; i < count; i++) {
		const char *ta = nodes[i].address ? nodes[i].address : "";
		bool clash = false;

		if (nodes[i].state == FERRY_GCS_NODE_DEAD ||
		    ferry__node_addr_parse(ta, strlen(ta), &a) < 0)
			continue;
		for (int j = 0; j < count && !clash; j++) {
			const char *tb = nodes[j].address ? nodes[j].address : "";

			clash = j != i && nodes[j].state != FERRY_GCS_NODE_DEAD &&
				ferry__node_addr_parse(tb, strlen(tb), &b) == 0 &&
				ferry__node_addr_clash(&a, &b) == 1;
		}
		if (!clash)
			continue;
		ferry_id_to_hex(&nodes[i].id, sizeof(nodes[i].id), id, sizeof(id));
		printf("warning: node %.12s advertises the loopback address %s while nodes on "
		       "other "
		       "hosts do not:\n  they cannot pull from it. Restart it with --ip "
		       "ADDRESS|INTERFACE\n",
		       id, a.ip);
	}
}

static int read_token(const char *path, char *buf, size_t *len)
{
	ssize_t n = read_file(path, buf, TOKEN_MAX);

	if (n > 0 && buf[n - 1] == '\n')
		n--;
	if (n <= 0) {
		fail_msg("token file %s is empty or unreadable", path);
		return -EINVAL;
	}
	*len = (size_t)n;
	return 0;
}

static int cmd_status(const struct opts *o)
{
	char addr[256] = "", token_path[PATH_MAX] = "", token[TOKEN_MAX];
	struct ferry_gcs_client_opts co = {0};
	struct ferry_gcs_node_info *nodes = NULL;
	struct ferry_gcs_client *c = NULL;
	const char *addrs[1];
	int ret, alive = 0;

	cluster_read(addr, sizeof(addr), token_path, sizeof(token_path));
	if (o->address)
		snprintf(addr, sizeof(addr), "%s", o->address);
	if (o->token_file)
		snprintf(token_path, sizeof(token_path), "%s", o->token_file);
	if (!*addr || !*token_path) {
		fail_msg("no cluster started from %s: give --address HOST:PORT --token-file F",
			 run_dir);
		return -EINVAL;
	}
	ret = read_token(token_path, token, &co.token_len);
	if (ret < 0)
		return ret;
	addrs[0] = addr;
	co.addresses = addrs;
	co.naddresses = 1;
	co.token = token;
	co.timeout_ms = o->timeout_s * 1000u;
	ret = ferry_gcs_client_connect(&co, &c);
	if (ret < 0) {
		fail_msg("cannot reach the GCS at %s: %s", addr, ferry_strerror(ret));
		return ret;
	}
	ret = ferry_gcs_node_list(c, &nodes);
	ferry_gcs_client_destroy(c);
	if (ret < 0) {
		fail_msg("listing nodes at %s failed: %s", addr, ferry_strerror(ret));
		return ret;
	}
	printf("GCS %s\n%-12s  %-8s  %-22s  %-18s  %12s\n", addr, "NODE", "STATE", "ADDRESS",
	       "TRANSPORTS", "STORE");
	for (int i = 0; i < ret; i++) {
		print_node(&nodes[i]);
		alive += nodes[i].state == FERRY_GCS_NODE_ALIVE;
	}
	printf("%d node%s, %d alive\n", ret, ret == 1 ? "" : "s", alive);
	print_clashes(nodes, ret);
	ferry_gcs_free(nodes);
	return 0;
}

/* ---- command line ---- */

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{"head", no_argument, NULL, 'H'},
		{"port", required_argument, NULL, 'p'},
		{"address", required_argument, NULL, 'a'},
		{"token-file", required_argument, NULL, 't'},
		{"memory", required_argument, NULL, 'm'},
		{"transport", required_argument, NULL, 'T'},
		{"ip", required_argument, NULL, 'i'},
		{"spin-us", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	uint64_t size;
	uint32_t v;
	int c;

	o->port = DEFAULT_PORT;
	o->timeout_s = DEFAULT_TIMEOUT_S;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'H':
			o->head = true;
			break;
		case 'p':
		case 'w':
			if (ferry__parse_u32(optarg, c == 'p' ? 65535 : 3600, &v) < 0 ||
			    (c == 'w' && v == 0)) {
				fail_msg("bad --%s value: %s", c == 'p' ? "port" : "timeout",
					 optarg);
				return -EINVAL;
			}
			if (c == 'p')
				o->port = (uint16_t)v;
			else
				o->timeout_s = (unsigned)v;
			break;
		case 'a':
			if (!strchr(optarg, ':')) {
				fail_msg("--address wants HOST:PORT, got %s", optarg);
				return -EINVAL;
			}
			o->address = optarg;
			break;
		case 't':
			o->token_file = optarg;
			break;
		case 'm':
			if (ferry_parse_size(optarg, &size) < 0 || size == 0) {
				fail_msg("bad --memory size: %s (e.g. 512M, 4G)", optarg);
				return -EINVAL;
			}
			o->memory = optarg;
			break;
		case 'T':
			if (strcmp(optarg, "rdma") && strcmp(optarg, "tcp") &&
			    strcmp(optarg, "auto")) {
				fail_msg("--transport is rdma, tcp or auto, not %s", optarg);
				return -EINVAL;
			}
			o->transport = optarg;
			break;
		case 'i':
			o->ip = optarg;
			break;
		case 's':
			if (ferry__parse_u32(optarg, FERRY_LOOP_MAX_SPIN_US, &v) < 0) {
				fail_msg("bad --spin-us value: %s (0..1000000)", optarg);
				return -EINVAL;
			}
			o->spin_us = optarg;
			break;
		default:
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fail_msg("unexpected argument: %s", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {0};
	const char *cmd = argc > 1 ? argv[1] : "";
	int ret;

	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (strcmp(cmd, "start") && strcmp(cmd, "status") && strcmp(cmd, "stop")) {
		if (*cmd)
			fail_msg("unknown command: %s", cmd);
		fputs(usage_text, stderr);
		return 2;
	}
	if (parse_opts(argc - 1, argv + 1, &o) < 0) {
		fputs(usage_text, stderr);
		return 2;
	}
	if ((strcmp(cmd, "start") && (o.head || o.memory || o.transport || o.ip || o.spin_us)) ||
	    (!strcmp(cmd, "stop") && (o.address || o.token_file))) {
		fail_msg("option not valid for %s", cmd);
		fputs(usage_text, stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (run_dir_init(!strcmp(cmd, "start")) < 0)
		return 1;
	if (!strcmp(cmd, "start"))
		ret = cmd_start(&o);
	else if (!strcmp(cmd, "status"))
		ret = cmd_status(&o);
	else
		ret = cmd_stop(&o);
	fflush(stdout);
	return ret < 0 ? 1 : 0;
}
