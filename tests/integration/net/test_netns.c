/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two hosts on one machine: two network namespaces joined by a veth pair (10.x addresses), a
 * GCS and a node in the first, a node in the second, each node with a boot id of its own (a
 * bind mount over /proc/sys/kernel/random/boot_id inside the namespace) so that they see two
 * hosts and pull over TCP, never shm. An object put on one node's store is got through the
 * other's, each node's registered address is its veth address (ready line and `ferry status`),
 * and a node that advertises loopback there is warned about; ferry-bench's two-host mode
 * across them. Needs root and iproute2 (skips otherwise). Programs: FERRY_GCS_BIN,
 * FERRY_NODE_BIN, FERRY_CLI_BIN, FERRY_BENCH_BIN (its test skips without it).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/plasma.h>

#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

#define TOKEN "netns-token"
#define NS_PREFIX "ferrytest-"
#define MAX_PROCS 8

/* What one test made, undone by cleanup() on every exit. */
static struct {
	char ns[2][32];	       /* the namespaces: "ferrytest-PID-a", "-b" */
	char veth[2][16];      /* the veth ends, one in each */
	char ip[2][16];	       /* their addresses */
	bool made[2];	       /* namespace created */
	pid_t pids[MAX_PROCS]; /* daemons started */
	int outs[MAX_PROCS];   /* their stdout pipes (kept open: no SIGPIPE) */
	int nprocs;	       /* how many */
} env;

/* A shell command, its output discarded unless it fails; the exit code. */
__attribute__((format(printf, 1, 2))) static int run(const char *fmt, ...)
{
	char cmd[1024], full[1100];
	va_list ap;
	int status;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
	status = system(full);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void cleanup(void)
{
	for (int i = 0; i < env.nprocs; i++)
		if (env.pids[i] > 0)
			kill(env.pids[i], SIGKILL);
	for (int i = 0; i < env.nprocs; i++)
		if (env.pids[i] > 0)
			waitpid(env.pids[i], NULL, 0);
	env.nprocs = 0;
	/* The veth pair goes with the namespaces. */
	for (int i = 0; i < 2; i++)
		if (env.made[i] && run("ip netns del %s", env.ns[i]) == 0)
			env.made[i] = false;
}

/* Namespaces of earlier runs whose test process is gone (killed by a timeout: no atexit). */
static void sweep_stale(void)
{
	DIR *d = opendir("/run/netns");
	struct dirent *e;
	int pid;

	while (d && (e = readdir(d)))
		if (sscanf(e->d_name, NS_PREFIX "%d-", &pid) == 1 && kill(pid, 0) < 0 &&
		    errno == ESRCH)
			run("ip netns del %s", e->d_name);
	if (d)
		closedir(d);
}

static const char *bin(const char *var)
{
	const char *b = getenv(var);

	if (!b)
		ftest_skip("%s not set", var);
	return b;
}

/* Two namespaces joined by veth, with 10.x addresses; skips without root or netns support. */
static void make_hosts(void)
{
	unsigned net = (unsigned)getpid() % 250 + 1;

	if (geteuid() != 0)
		ftest_skip("needs root to create network namespaces");
	if (run("ip -V") != 0)
		ftest_skip("iproute2 (ip) is not installed");
	sweep_stale();
	atexit(cleanup);
	for (int i = 0; i < 2; i++) {
		snprintf(env.ns[i], sizeof(env.ns[i]), NS_PREFIX "%d-%c", (int)getpid(), 'a' + i);
		snprintf(env.veth[i], sizeof(env.veth[i]), "fv%c%d", 'a' + i, (int)getpid());
		snprintf(env.ip[i], sizeof(env.ip[i]), "10.%u.77.%d", net, i + 1);
		if (run("ip netns add %s", env.ns[i]) != 0)
			ftest_skip("ip netns add failed: no network namespaces here");
		env.made[i] = true;
	}
	ftest_assert_int_eq(run("ip link add %s netns %s type veth peer name %s netns %s",
				env.veth[0], env.ns[0], env.veth[1], env.ns[1]),
			    0);
	for (int i = 0; i < 2; i++) {
		ftest_assert_int_eq(
			run("ip -n %s addr add %s/24 dev %s", env.ns[i], env.ip[i], env.veth[i]),
			0);
		ftest_assert_int_eq(run("ip -n %s link set %s up", env.ns[i], env.veth[i]), 0);
		ftest_assert_int_eq(run("ip -n %s link set lo up", env.ns[i]), 0);
	}
}

static const char *token_file(void)
{
	return itest_token_file(TOKEN);
}

/* A boot id for host @h, so that the nodes in the two namespaces are two hosts to each other. */
static const char *boot_file(int h)
{
	static char path[2][512];
	FILE *f;

	snprintf(path[h], sizeof(path[h]), "%s/boot-%d", ftest_tmpdir(), h);
	f = fopen(path[h], "w");
	ftest_assert_ptr_notnull(f);
	fprintf(f, "0e7f0000-0000-4000-8000-%012d\n", h + 1);
	fclose(f);
	return path[h];
}

/* Print a daemon's log (its stderr) into the test's output. */
static void show_log(const char *log)
{
	char text[8192];
	int fd = open(log, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;

	if (fd >= 0)
		close(fd);
	text[n > 0 ? n : 0] = '\0';
	ftest_log("%s:\n%s", log, text);
}

/*
 * Run @argv (NULL-terminated) in host @h's namespace as that host (its boot id), stderr to
 * @log; its first stdout line into @line (empty if it exited first).
 */
static void spawn(int h, const char *const *argv, const char *log, char *line, size_t size)
{
	const char *full[32] = {"ip",
				"netns",
				"exec",
				env.ns[h],
				"sh",
				"-c",
				"mount --bind \"$0\" /proc/sys/kernel/random/boot_id && "
				"exec \"$@\"",
				boot_file(h)};
	int out[2], n = 8, i = env.nprocs;
	FILE *f;

	for (; *argv; argv++)
		full[n++] = *argv;
	full[n] = NULL;
	ftest_assert_int_lt(i, MAX_PROCS);
	ftest_assert_ok(pipe(out));
	env.pids[i] = fork();
	ftest_assert_int_ge(env.pids[i], 0);
	if (env.pids[i] == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		char *cargv[32];

		for (int k = 0; k <= n; k++)
			cargv[k] = full[k] ? strdup(full[k]) : NULL;
		dup2(out[1], 1);
		dup2(fd, 2);
		close(out[0]);
		execvp("ip", cargv);
		_exit(127);
	}
	env.nprocs++;
	close(out[1]);
	env.outs[i] = out[0];
	f = fdopen(dup(out[0]), "r");
	ftest_assert_ptr_notnull(f);
	if (!fgets(line, (int)size, f))
		line[0] = '\0';
	fclose(f);
	line[strcspn(line, "\n")] = '\0';
	ftest_log("%s: %s", log, line);
	if (!line[0])
		show_log(log);
}

/* ferry-gcs in host 0's namespace on its veth address: the port. */
static unsigned start_gcs(void)
{
	const char *argv[] = {bin("FERRY_GCS_BIN"), "--host",	  env.ip[0], "--port", "0",
			      "--token-file",	    token_file(), NULL};
	char log[512], line[256];
	unsigned port = 0;

	snprintf(log, sizeof(log), "%s/gcs.log", ftest_tmpdir());
	spawn(0, argv, log, line, sizeof(line));
	ftest_assert_int_eq(sscanf(line, "ferry-gcs listening on port %u", &port), 1);
	return port;
}

/* A ferry-node in host @h's namespace (store socket NAME.sock, log NAME.log) with @ip as --ip
 * (NULL: none): its advertised address ("ip=...;tcp=...") into @address. */
static void start_node(int h, const char *name, unsigned gcs_port, const char *ip, char *address,
		       size_t size)
{
	char gcs[64], sock[512], log[512], line[1024], *a;
	const char *argv[20] = {bin("FERRY_NODE_BIN"),
				"--gcs",
				gcs,
				"--token-file",
				token_file(),
				"--socket",
				sock,
				"--memory",
				"64M",
				"--transport",
				"tcp",
				"--port",
				"0"};
	int n = 13;

	snprintf(gcs, sizeof(gcs), "%s:%u", env.ip[0], gcs_port);
	snprintf(sock, sizeof(sock), "%s/%s.sock", ftest_tmpdir(), name);
	snprintf(log, sizeof(log), "%s/%s.log", ftest_tmpdir(), name);
	if (ip) {
		argv[n++] = "--ip";
		argv[n++] = ip;
	}
	argv[n] = NULL;
	spawn(h, argv, log, line, sizeof(line));
	a = strstr(line, " address=");
	ftest_assert_ptr_notnull(a);
	a += strlen(" address=");
	a[strcspn(a, " ")] = '\0';
	snprintf(address, size, "%s", a);
}

/* The node's advertised address names @ip. */
static void assert_ip(const char *address, const char *ip)
{
	char want[64];

	snprintf(want, sizeof(want), "ip=%s;", ip);
	if (strncmp(address, want, strlen(want)))
		ftest__fail(__FILE__, __LINE__, "advertised %s, want %s...", address, want);
}

/* `ferry status` run in host 0's namespace: its output into @out. */
static void status(unsigned gcs_port, char *out, size_t size)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "ip netns exec %s env FERRY_RUN_DIR='%s' '%s' status --address %s:%u "
		 "--token-file '%s' 2>&1",
		 env.ns[0], ftest_tmpdir(), bin("FERRY_CLI_BIN"), env.ip[0], gcs_port,
		 token_file());
	itest_popen_read(cmd, out, size);
	ftest_log("$ ferry status\n%s", out);
}

static void put_object(const char *sock, const struct ferry_object_id *id, size_t size)
{
	struct ferry_plasma_connect_opts o = {.name = "netns-put", .wait_ms = 5000};
	struct ferry_plasma_client *c;
	void *buf;

	ftest_assert_ok(ferry_plasma_client_connect(sock, &o, &c));
	ftest_assert_ok(ferry_plasma_client_create(c, id, size, NULL, 0, &buf));
	for (size_t i = 0; i < size; i++)
		((unsigned char *)buf)[i] = (unsigned char)(i * 7 + 1);
	ftest_assert_ok(ferry_plasma_client_seal(c, id));
	ferry_plasma_client_disconnect(c);
}

/* Get @id through the store at @sock (the node pulls it from the other host). */
static void get_object(const char *sock, const struct ferry_object_id *id, size_t size)
{
	struct ferry_plasma_connect_opts o = {.name = "netns-get", .wait_ms = 5000};
	struct ferry_plasma_client *c;
	struct ferry_plasma_view v;
	const unsigned char *b;
	int ret;

	ftest_assert_ok(ferry_plasma_client_connect(sock, &o, &c));
	ret = ferry_plasma_client_get(c, id, 1, 10000, &v);
	if (ret < 0)
		ferry_plasma_client_disconnect(c);
	ftest_assert_ok(ret);
	ftest_assert_uint_eq(v.data_size, size);
	b = v.data;
	for (size_t i = 0; i < size; i++)
		if (b[i] != (unsigned char)(i * 7 + 1))
			ftest__fail(__FILE__, __LINE__, "byte %zu differs", i);
	ferry_plasma_client_release(c, &v);
	ferry_plasma_client_disconnect(c);
}

FTEST(pull_between_two_hosts)
{
	char addr_a[512], addr_b[512], sock[512], out[8192], row[64];
	struct ferry_object_id id;
	unsigned port;

	make_hosts();
	port = start_gcs();
	start_node(0, "a", port, NULL, addr_a, sizeof(addr_a));
	start_node(1, "b", port, NULL, addr_b, sizeof(addr_b));
	/* Both ways: each store gets what the other host's store holds (a node that advertised
	 * loopback would have its puller connect to itself). */
	memset(id.bytes, 0x5c, sizeof(id.bytes));
	snprintf(sock, sizeof(sock), "%s/a.sock", ftest_tmpdir());
	put_object(sock, &id, 1 << 20);
	snprintf(sock, sizeof(sock), "%s/b.sock", ftest_tmpdir());
	get_object(sock, &id, 1 << 20);
	id.bytes[0] = 0x5d;
	put_object(sock, &id, 4096);
	snprintf(sock, sizeof(sock), "%s/a.sock", ftest_tmpdir());
	get_object(sock, &id, 4096);
	assert_ip(addr_a, env.ip[0]);
	assert_ip(addr_b, env.ip[1]);
	/* What the GCS holds, as `ferry status` shows it. */
	status(port, out, sizeof(out));
	for (int i = 0; i < 2; i++) {
		snprintf(row, sizeof(row), " %s:", env.ip[i]);
		ftest_assert_ptr_notnull(strstr(out, row));
	}
	ftest_assert_ptr_notnull(strstr(out, "2 nodes, 2 alive"));
	ftest_assert_ptr_null(strstr(out, "warning"));
	ftest_assert_ptr_null(strstr(out, "127.0.0.1"));
}

FTEST(interface_name_and_loopback_warning)
{
	char addr[512], log[512], text[16384], out[8192];
	unsigned port;
	ssize_t n;
	int fd;

	make_hosts();
	port = start_gcs();
	start_node(0, "a", port, NULL, addr, sizeof(addr));
	assert_ip(addr, env.ip[0]);
	/* --ip names an interface: its address. */
	start_node(1, "b", port, env.veth[1], addr, sizeof(addr));
	assert_ip(addr, env.ip[1]);
	/* Loopback on host 1 while host 0's node is on 10.x: host 0 cannot pull from it. */
	start_node(1, "c", port, "127.0.0.1", addr, sizeof(addr));
	assert_ip(addr, "127.0.0.1");
	snprintf(log, sizeof(log), "%s/c.log", ftest_tmpdir());
	fd = open(log, O_RDONLY);
	ftest_assert_int_ge(fd, 0);
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	text[n > 0 ? n : 0] = '\0';
	ftest_log("c.log:\n%s", text);
	ftest_assert_ptr_notnull(strstr(text, "advertises the loopback address 127.0.0.1"));
	status(port, out, sizeof(out));
	ftest_assert_ptr_notnull(strstr(out, "3 nodes, 3 alive"));
	ftest_assert_ptr_notnull(strstr(out, "warning: node"));
	ftest_assert_ptr_notnull(strstr(out, "loopback address 127.0.0.1"));
}

/* Run @cmd in host @h's namespace as that host, to its end: its stdout into @out. */
static int run_in(int h, const char *cmd, char *out, size_t size)
{
	char full[4096];

	snprintf(full, sizeof(full),
		 "ip netns exec %s sh -c 'mount --bind %s /proc/sys/kernel/random/boot_id && "
		 "exec %s'",
		 env.ns[h], boot_file(h), cmd);
	return itest_popen_read(full, out, size);
}

FTEST(bench_two_hosts)
{
	const char *bench = bin("FERRY_BENCH_BIN");
	char log[512], line[1024], gcs[64], cmd[2048], out[16384], row[64];
	const char *argv[] = {bench,	"transport", "--server",     "--ip",	   env.veth[0],
			      "--port", "0",	     "--token-file", token_file(), "--transport",
			      "tcp",	"--spin-us", "50",	     NULL};
	unsigned port;

	if (access(bench, X_OK) < 0)
		ftest_skip("%s not built", bench);
	make_hosts();
	setenv("FERRY_BENCH_STORE_MIB", "640", 1); /* the server holds 8 x 64 MiB and more */
	snprintf(log, sizeof(log), "%s/server.log", ftest_tmpdir());
	spawn(0, argv, log, line, sizeof(line));
	ftest_assert_int_eq(
		sscanf(line, "ferry-bench transport server ready (commit %*s GCS %63s", gcs), 1);
	ftest_assert_ptr_notnull(strstr(line, " spin 50 us"));
	/* The client gives no --ip: its node must advertise its own veth address. */
	setenv("FERRY_BENCH_STORE_MIB", "64", 1);
	snprintf(log, sizeof(log), "%s/client.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "%s transport --client %s --token-file %s --transport tcp --spin-us 50 "
		 "--benchmark_filter=BM_transport_remote_pull/8/1/ --benchmark_min_time=0.01 "
		 "--benchmark_format=json 2>%s",
		 bench, gcs, token_file(), log);
	ftest_assert_int_eq(run_in(1, cmd, out, sizeof(out)), 0);
	show_log(log);
	ftest_log("client's JSON:\n%s", out);
	ftest_assert_ptr_notnull(strstr(out, "\"ferry_commit\""));
	ftest_assert_ptr_notnull(strstr(out, "\"label\": \"tcp commit="));
	/* The GCS of the server keeps the client's registration (it never expires nodes). */
	ftest_assert_int_eq(sscanf(strchr(gcs, ':') + 1, "%u", &port), 1);
	status(port, out, sizeof(out));
	for (int i = 0; i < 2; i++) {
		snprintf(row, sizeof(row), " %s:", env.ip[i]);
		ftest_assert_ptr_notnull(strstr(out, row));
	}
	ftest_assert_ptr_null(strstr(out, "127.0.0.1"));
}

/* A named actor created by a driver on host a is called by a driver on host b: the call goes
 * to the actor's worker on host a over TCP (its endpoint from the GCS workers table, the
 * cluster token's handshake), as host b has no socket of it. FERRY_ACTOR_CLIENT (creates and
 * calls), FERRY_TEST_JOB (the Counter class), FERRY_WORKER_EXE (the nodes' workers). */
FTEST(named_actor_called_across_hosts)
{
	const char *client = getenv("FERRY_ACTOR_CLIENT"), *job = getenv("FERRY_TEST_JOB");
	char addr_a[512], addr_b[512], cmd[2048], out[4096], log[512];
	unsigned port;
	int code;

	if (!client || !job || !getenv("FERRY_WORKER_EXE"))
		ftest_skip("FERRY_ACTOR_CLIENT / FERRY_TEST_JOB / FERRY_WORKER_EXE not set");
	make_hosts();
	port = start_gcs();
	start_node(0, "a", port, NULL, addr_a, sizeof(addr_a));
	start_node(1, "b", port, NULL, addr_b, sizeof(addr_b));
	ftest_assert_ptr_notnull(strstr(addr_a, ";rt=")); /* the runtime endpoint is advertised */
	snprintf(log, sizeof(log), "%s/create.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "env FERRY_ADDRESS=%s:%u FERRY_TOKEN_FILE=%s FERRY_TEST_JOB=%s %s remote-1 "
		 "create 100 2>%s",
		 env.ip[0], port, token_file(), job, client, log);
	code = run_in(0, cmd, out, sizeof(out));
	show_log(log);
	ftest_assert_int_eq(code, 0);
	snprintf(log, sizeof(log), "%s/call.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "env FERRY_ADDRESS=%s:%u FERRY_TOKEN_FILE=%s FERRY_LOG=debug %s remote-1 5 2 2>%s",
		 env.ip[0], port, token_file(), client, log);
	code = run_in(1, cmd, out, sizeof(out));
	show_log(log);
	ftest_log("host b's driver:\n%s", out);
	ftest_assert_int_eq(code, 0);
	ftest_assert_ptr_notnull(strstr(out, "remote-1: 105\n"));
	ftest_assert_ptr_notnull(strstr(out, "remote-1: 110\n"));
	/* It dialed host a's address over TCP (runtime/dial.c's line). */
	snprintf(cmd, sizeof(cmd), "dialing %s:", env.ip[0]);
	ftest_assert_true(itest_log_has(log, cmd));
}
