/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-node restarted on a fixed --port: the object manager's TCP listener retries a bind that
 * finds the port in use for a bounded time and logs it, so a node started right after the one
 * it replaces was SIGKILLed (and not reaped yet) comes up. Real ferry-gcs and ferry-node
 * processes (FERRY_GCS_BIN, FERRY_NODE_BIN); one round has a process of ours hold the port
 * for a second, so that the port is certainly still taken when the node binds.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftest.h"
#include "tests/integration/procs.h"

#define ROUNDS 3

static pid_t gcs_pid, node_pid;

static void stop_all(void)
{
	if (node_pid > 0)
		kill(node_pid, SIGKILL);
	if (gcs_pid > 0)
		kill(gcs_pid, SIGKILL);
}

/* Run @argv with stderr to @log; returns its pid once its first stdout line (into @line) has
 * @ready. */
static pid_t spawn(char *cmd, const char *log, const char *ready, char line[512])
{
	char *argv[32], *save = NULL;
	int out[2], logfd, n = 0;
	pid_t pid;
	FILE *f;

	for (char *o = strtok_r(cmd, " ", &save); o && n < 31; o = strtok_r(NULL, " ", &save))
		argv[n++] = o; /* the test's paths have no spaces */
	argv[n] = NULL;
	ftest_assert_int_eq(pipe(out), 0);
	logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	ftest_assert_int_ge(logfd, 0);
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(logfd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(out[1]);
	close(logfd);
	f = fdopen(out[0], "r");
	if (!f || !fgets(line, 512, f) || !strstr(line, ready))
		FTEST__FAIL("%s did not start (see %s)", argv[0], log);
	fclose(f);
	return pid;
}

static int listen_on(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	bool bound;

	ftest_assert_int_ge(fd, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* A killed node's io_uring lets go of its sockets a moment after the process is gone. */
	for (int i = 0;
	     (bound = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0) == false && i < 500; i++)
		usleep(10 * 1000);
	ftest_assert_true(bound);
	ftest_assert_int_eq(listen(fd, 4), 0);
	ftest_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	return fd;
}

static uint16_t port_of(int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);

	ftest_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	return ntohs(a.sin_port);
}

/* A child that holds @port listening for @ms, then exits (the parent reaps it later). */
static pid_t hold_port(uint16_t port, int ms)
{
	int fd = listen_on(port);
	pid_t pid = fork();

	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		usleep((useconds_t)ms * 1000);
		_exit(0);
	}
	close(fd); /* the child's copy holds it */
	return pid;
}

static pid_t start_node(const char *gcs_addr, const char *token, uint16_t port, int round)
{
	char cmd[1024], log[256], line[512];

	snprintf(log, sizeof(log), "%s/node.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "%s --gcs %s --token-file %s --ip 127.0.0.1 --port %u --memory 64M "
		 "--transport tcp --socket %s/store-%d.sock",
		 getenv("FERRY_NODE_BIN"), gcs_addr, token, port, ftest_tmpdir(), round);
	return spawn(cmd, log, "ferry-node ready", line);
}

/*
 * Rounds: a node on the fixed port is SIGKILLed and the next started at once, before the
 * killed one is reaped; in the last round a process of ours holds the port for a second
 * after the kill, so the bind certainly finds it in use and must wait.
 */
FTEST(a_node_restarted_on_its_port_binds_after_the_killed_one)
{
	char token[256], gcs_addr[64], log[256], line[512], cmd[1024];
	unsigned gport;
	uint16_t port;
	pid_t holder = 0, old;
	int fd, status;

	if (!getenv("FERRY_GCS_BIN") || !getenv("FERRY_NODE_BIN"))
		ftest_skip("FERRY_GCS_BIN / FERRY_NODE_BIN not set (run through meson test)");
	atexit(stop_all);
	snprintf(token, sizeof(token), "%s/token", ftest_tmpdir());
	fd = open(token, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ftest_assert_int_eq(write(fd, "rebind-token\n", 13), 13);
	close(fd);
	snprintf(log, sizeof(log), "%s/gcs.log", ftest_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s --port 0 --host 127.0.0.1 --token-file %s",
		 getenv("FERRY_GCS_BIN"), token);
	gcs_pid = spawn(cmd, log, "listening on port", line);
	ftest_assert_int_eq(sscanf(strstr(line, "port"), "port %u", &gport), 1);
	snprintf(gcs_addr, sizeof(gcs_addr), "127.0.0.1:%u", gport);
	fd = listen_on(0); /* a free port for the nodes */
	port = port_of(fd);
	close(fd);
	node_pid = start_node(gcs_addr, token, port, 0);
	for (int round = 1; round <= ROUNDS; round++) {
		old = node_pid;
		ftest_assert_int_eq(kill(old, SIGKILL), 0);
		if (round == ROUNDS) {
			ftest_assert_int_eq(waitpid(old, &status, 0), old);
			holder = hold_port(port, 1000);
		}
		node_pid = start_node(gcs_addr, token, port, round);
		if (round < ROUNDS)
			ftest_assert_int_eq(waitpid(old, &status, 0), old);
	}
	ftest_assert_int_eq(waitpid(holder, &status, 0), holder);
	snprintf(log, sizeof(log), "%s/node.log", ftest_tmpdir());
	ftest_assert_true(itest_log_has(log, "retrying the bind"));
	ftest_assert_int_eq(kill(node_pid, SIGTERM), 0);
	ftest_assert_int_eq(waitpid(node_pid, &status, 0), node_pid);
	node_pid = 0;
}
