/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the GCS integration tests: start and stop ferry-gcs processes (path in
 * FERRY_GCS_BIN), connect clients to them, and speak raw frames to them.
 */
#ifndef FERRY_TESTS_GCS_PROCS_H
#define FERRY_TESTS_GCS_PROCS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "tests/harness/ftest.h"

#define TOKEN "integration-token"

struct gcs_proc {
	pid_t pid;     /* the server */
	uint16_t port; /* where it listens */
};

static inline const char *token_file(void)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/token", ftest_tmpdir());
	f = fopen(path, "w");
	ftest_assert_ptr_notnull(f);
	fputs(TOKEN "\n", f);
	fclose(f);
	return path;
}

/* Start ferry-gcs with @extra arguments (NULL-terminated); its port line, or 0 if it exited. */
static inline struct gcs_proc gcs_try_start(uint16_t port, const char *const *extra)
{
	const char *bin = getenv("FERRY_GCS_BIN");
	const char *argv[16];
	char port_s[16], line[128];
	struct gcs_proc p = {0};
	int out[2], n = 0, status;
	FILE *f;

	if (!bin)
		ftest_skip("FERRY_GCS_BIN not set");
	snprintf(port_s, sizeof(port_s), "%u", port);
	argv[n++] = bin;
	argv[n++] = "--port";
	argv[n++] = port_s;
	argv[n++] = "--token-file";
	argv[n++] = token_file();
	for (; extra && *extra; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	ftest_assert_ok(pipe(out));
	p.pid = fork();
	ftest_assert_int_ge(p.pid, 0);
	if (p.pid == 0) {
		char *cargv[16];

		for (int i = 0; i <= n; i++)
			cargv[i] = argv[i] ? strdup(argv[i]) : NULL;
		dup2(out[1], 1);
		close(out[0]);
		execv(bin, cargv);
		_exit(127);
	}
	close(out[1]);
	f = fdopen(out[0], "r");
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, "ferry-gcs listening on port %hu", &p.port) != 1) {
		waitpid(p.pid, &status, 0);
		p.port = 0;
	}
	fclose(f);
	return p;
}

/* Start it; on a fixed port, retry while the port is still held by the previous incarnation's
 * connections (a restarted server, or a client's reconnect racing for the port). */
static inline struct gcs_proc gcs_start(uint16_t port, const char *const *extra)
{
	struct gcs_proc p = gcs_try_start(port, extra);

	for (int i = 0; i < 100 && !p.port && port; i++) {
		usleep(50 * 1000);
		p = gcs_try_start(port, extra);
	}
	ftest_assert_uint_ne(p.port, 0);
	return p;
}

static inline void gcs_stop(struct gcs_proc *p, int sig)
{
	int status;

	kill(p->pid, sig);
	ftest_assert_int_eq(waitpid(p->pid, &status, 0), p->pid);
	if (sig == SIGTERM)
		ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static inline struct ferry_gcs_client *client_for(const struct gcs_proc *procs, size_t n,
						  const char *token)
{
	char addrs[4][64];
	const char *list[4];
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c = NULL;

	for (size_t i = 0; i < n; i++) {
		snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%u", procs[i].port);
		list[i] = addrs[i];
	}
	o.addresses = list;
	o.naddresses = n;
	o.token = token;
	o.token_len = strlen(token);
	o.timeout_ms = 5000;
	o.reconnect_ms = 50;
	ftest_assert_ok(ferry_gcs_client_connect(&o, &c));
	return c;
}

static inline int raw_connect(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_ok(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	return fd;
}

static inline void raw_send(int fd, uint16_t type, const void *payload, size_t len)
{
	uint8_t *frame;
	size_t size;

	ftest_assert_ok(ferry__frame_pack(type, payload, len, &frame, &size));
	ftest_assert_int_eq(write(fd, frame, size), (ssize_t)size);
	ferry__free(frame);
}

#endif
