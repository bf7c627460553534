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
#include "common/wire.h"
#include "tests/harness/ftest.h"
#include "tests/integration/procs.h"

#define TOKEN "integration-token"

struct gcs_proc {
	pid_t pid;     /* the server */
	uint16_t port; /* where it listens */
};

static inline const char *token_file(void)
{
	return itest_token_file(TOKEN);
}

/* Start ferry-gcs with @extra arguments (NULL-terminated); its port line, or 0 if it exited. */
static inline struct gcs_proc gcs_try_start(uint16_t port, const char *const *extra)
{
	const char *bin = getenv("FERRY_GCS_BIN");
	const char *argv[16];
	char port_s[16], line[128];
	struct gcs_proc p = {0};
	int n = 0, status;

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
	p.pid = itest_spawn(argv, line, sizeof(line));
	if (sscanf(line, "ferry-gcs listening on port %hu", &p.port) != 1) {
		waitpid(p.pid, &status, 0);
		p.port = 0;
	}
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

/* A Handshake with the right token (a driver's), sent raw on @fd. */
static inline void raw_send_handshake(int fd)
{
	struct ferry__wire_handshake hs = {0};
	struct ferry__fb_builder b = {0};

	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = (const uint8_t *)TOKEN;
	hs.token_count = strlen(TOKEN);
	ftest_assert_ok(ferry__wire_handshake_build(&b, &hs));
	raw_send(fd, FERRY__WIRE_MSG_HANDSHAKE, ferry__fb_builder_data(&b),
		 ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
}

#endif
