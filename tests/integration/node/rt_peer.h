/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A blocking peer of the node's runtime socket for tests: connect, send a frame built with the
 * generated codec, read one frame with a deadline. Shared by the fake worker (fake_worker.c)
 * and the node's runtime test, so both speak exactly the framing the node reads.
 */
#ifndef FERRY_TESTS_NODE_RT_PEER_H
#define FERRY_TESTS_NODE_RT_PEER_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/util.h"
#include "common/wire.h"

/* A frame read: type and payload (ferry__malloc'd; rtp_frame_free). */
struct rtp_frame {
	uint16_t type;
	uint32_t len;
	uint8_t *payload;
};

static inline void rtp_frame_free(struct rtp_frame *f)
{
	ferry__free(f->payload);
	f->payload = NULL;
}

/* A connected Unix stream socket to @path, or -errno. */
static inline int rtp_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static inline int rtp_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Send what @b holds (built with @built: a _build() result) as a frame of @type. */
static inline int rtp_send(int fd, struct ferry__fb_builder *b, uint16_t type, int built)
{
	const uint8_t *frame;
	size_t size;
	int r = built;

	if (r == 0)
		r = ferry__frame_finish(b, type, &frame, &size);
	return r < 0 ? r : rtp_write_all(fd, frame, size);
}

/* Read exactly @len bytes by @deadline_ms (ferry__now_ms()): 0, -ETIMEDOUT, -ECONNRESET. */
static inline int rtp_read_all(int fd, void *buf, size_t len, uint64_t deadline_ms)
{
	uint8_t *p = buf;

	while (len) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		uint64_t now = ferry__now_ms();
		ssize_t n;

		if (now >= deadline_ms)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)(deadline_ms - now)) == 0)
			return -ETIMEDOUT;
		n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The next frame within @timeout_ms, verified. 0, -ETIMEDOUT, -ECONNRESET, -EPROTO. */
static inline int rtp_recv(int fd, struct rtp_frame *f, unsigned timeout_ms)
{
	uint64_t deadline = ferry__now_ms() + timeout_ms;
	uint8_t hdr[FERRY_FRAME_HEADER_SIZE];
	struct ferry__frame_header h;
	int r;

	f->payload = NULL;
	r = rtp_read_all(fd, hdr, sizeof(hdr), deadline);
	if (r < 0)
		return r;
	if (ferry__frame_header_decode(hdr, 64u << 20, &h) < 0)
		return -EPROTO;
	f->type = h.type;
	f->len = h.length;
	f->payload = ferry__malloc(h.length ? h.length : 1);
	if (!f->payload)
		return -ENOMEM;
	r = rtp_read_all(fd, f->payload, h.length, deadline);
	if (r == 0 && ferry__wire_verify(h.type, f->payload, h.length) < 0)
		r = -EPROTO;
	if (r < 0)
		rtp_frame_free(f);
	return r;
}

/* The fake worker's path (built beside the test binaries) into @out: 0, or -errno (-ENOENT:
 * not there or not executable, -ENAMETOOLONG). */
static inline int rtp_fake_worker_path(char *out, size_t size)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0)
		return -errno;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	if (snprintf(out, size, "%s/fake_worker", self) >= (int)size)
		return -ENAMETOOLONG;
	return access(out, X_OK) < 0 ? -errno : 0;
}

#endif
