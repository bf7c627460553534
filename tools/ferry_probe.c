/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Is a GCS there? One name lookup and one TCP connect, before the GCS client (which retries
 * for its whole timeout, as a node must while the GCS restarts) or a node is started against
 * the address: a name that does not resolve, a refused connection or a GCS of this host that
 * has exited is said at once, in one line. The probe's connection closes without a handshake,
 * which the GCS logs; a GCS this host started and that runs is not probed.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/common.h>

#include "common/util.h"
#include "tools/ferry_cli.h"

/* "host:port" or "[v6]:port" into @host and @port. */
static int split_address(const char *address, char *host, size_t size, char *port, size_t psize)
{
	const char *colon = strrchr(address, ':');
	const char *start = address, *end = colon;
	uint32_t p;

	if (!colon || ferry__parse_u32(colon + 1, 65535, &p) < 0 || p == 0)
		return -EINVAL;
	if (*start == '[' && end > start && end[-1] == ']') {
		start++;
		end--;
	}
	if (end == start || (size_t)(end - start) >= size)
		return -EINVAL;
	snprintf(host, size, "%.*s", (int)(end - start), start);
	snprintf(port, psize, "%u", p);
	return 0;
}

/* Connect to @ai within @timeout_ms. Returns 0 or -errno. */
static int try_connect(const struct addrinfo *ai, unsigned timeout_ms)
{
	struct pollfd pfd = {.events = POLLOUT};
	socklen_t len = sizeof(int);
	int fd, err = 0, ret;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		goto out;
	if (errno != EINPROGRESS) {
		err = errno;
		goto out;
	}
	pfd.fd = fd;
	do
		ret = poll(&pfd, 1, (int)timeout_ms);
	while (ret < 0 && errno == EINTR);
	if (ret == 0)
		err = ETIMEDOUT;
	else if (ret < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
out:
	close(fd);
	return -err;
}

static void say_unreachable(const char *address, int err, unsigned timeout_s)
{
	if (err == -ECONNREFUSED)
		ferry__cli_fail("cannot reach the GCS at %s: connection refused (nothing listens "
				"there)",
				address);
	else if (err == -ETIMEDOUT)
		ferry__cli_fail("cannot reach the GCS at %s: no answer within %u s (wrong address, "
				"or a firewall?)",
				address, timeout_s);
	else
		ferry__cli_fail("cannot reach the GCS at %s: %s", address, ferry_strerror(-err));
}

int ferry__cli_probe_gcs(const char *address, pid_t local_gcs_pid, unsigned timeout_s)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char host[256], port[8];
	int ret;

	if (split_address(address, host, sizeof(host), port, sizeof(port)) < 0) {
		ferry__cli_fail("bad GCS address %s (want HOST:PORT)", address);
		return -EINVAL;
	}
	if (local_gcs_pid > 0 && !ferry__cli_pid_is(local_gcs_pid, "ferry-gcs")) {
		ferry__cli_fail("the GCS this host started (pid %d, %s) is not running any more: "
				"`ferry stop` cleans up, then `ferry start --head`",
				(int)local_gcs_pid, address);
		return -ECONNREFUSED;
	}
	ret = getaddrinfo(host, port, &hints, &res);
	if (ret != 0 || !res) {
		ferry__cli_fail("cannot resolve host '%s': %s", host,
				ret == EAI_SYSTEM ? ferry_strerror(errno) : gai_strerror(ret));
		return -EHOSTUNREACH;
	}
	if (local_gcs_pid >
	    0) { /* ours and running: spare its log a connection that says nothing */
		freeaddrinfo(res);
		return 0;
	}
	ret = try_connect(res, timeout_s * 1000u);
	for (const struct addrinfo *ai = res->ai_next; ai && ret < 0 && ret != -ETIMEDOUT;
	     ai = ai->ai_next)
		ret = try_connect(ai, timeout_s * 1000u);
	freeaddrinfo(res);
	if (ret < 0)
		say_unreachable(address, ret, timeout_s);
	return ret;
}
