/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node addresses as the GCS node record carries them ("ip=...;tcp=...;shm=...;host=..."):
 * a strict parser (the text comes from the network), the formatter, and the host's boot id.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/objmgr.h"

#define COMP "objmgr"

static int parse_port(const char *v, size_t len, uint16_t *out)
{
	unsigned n = 0;

	if (len == 0 || len > 5 || v[0] == '0')
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EINVAL;
		n = n * 10 + (unsigned)(v[i] - '0');
	}
	if (n > 65535)
		return -EINVAL;
	*out = (uint16_t)n;
	return 0;
}

static int parse_ip(const char *v, size_t len, char *out, size_t size)
{
	unsigned char bin[16];

	if (len == 0 || len >= size)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) /* inet_pton would stop at a NUL and accept a prefix */
		if (!strchr("0123456789abcdefABCDEF.:", v[i]) || v[i] == '\0')
			return -EINVAL;
	memcpy(out, v, len);
	out[len] = '\0';
	if (inet_pton(AF_INET, out, bin) == 1 || inet_pton(AF_INET6, out, bin) == 1)
		return 0;
	return -EINVAL;
}

static int parse_text(const char *v, size_t len, char *out, size_t size, bool path)
{
	if (len == 0 || len >= size || (path && v[0] != '/'))
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)v[i];
		bool ok = path ? (ch > 0x20 && ch < 0x7f)
			       : ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
				  (ch >= 'A' && ch <= 'F') || ch == '-');

		if (!ok)
			return -EINVAL;
	}
	memcpy(out, v, len);
	out[len] = '\0';
	return 0;
}

/* The run id: 1..16 hex digits, not all zero. */
static int parse_run(const char *v, size_t len, uint64_t *out)
{
	uint64_t n = 0;

	if (len == 0 || len > 16)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		char ch = v[i];
		unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
			     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
						      : 16;

		if (d > 15)
			return -EINVAL;
		n = n << 4 | d;
	}
	if (!n)
		return -EINVAL;
	*out = n;
	return 0;
}

/* One key=value pair; @seen has a bit per key so that none repeats. */
static int parse_pair(const char *p, size_t len, struct ferry__node_addr *a, unsigned *seen)
{
	const char *eq = memchr(p, '=', len);
	size_t klen, vlen;
	const char *v;
	unsigned bit;
	int ret;

	if (!eq)
		return -EINVAL;
	klen = (size_t)(eq - p);
	v = eq + 1;
	vlen = len - klen - 1;
	if (klen == 2 && !memcmp(p, "ip", 2)) {
		bit = 1;
		ret = parse_ip(v, vlen, a->ip, sizeof(a->ip));
	} else if (klen == 3 && !memcmp(p, "tcp", 3)) {
		bit = 2;
		ret = parse_port(v, vlen, &a->tcp_port);
	} else if (klen == 4 && !memcmp(p, "rdma", 4)) {
		bit = 4;
		ret = parse_port(v, vlen, &a->rdma_port);
	} else if (klen == 3 && !memcmp(p, "shm", 3)) {
		bit = 8;
		ret = parse_text(v, vlen, a->shm_path, sizeof(a->shm_path), true);
	} else if (klen == 4 && !memcmp(p, "host", 4)) {
		bit = 16;
		ret = parse_text(v, vlen, a->host, sizeof(a->host), false);
	} else if (klen == 3 && !memcmp(p, "run", 3)) {
		bit = 32;
		ret = parse_run(v, vlen, &a->run);
	} else if (klen == 2 && !memcmp(p, "rt", 2)) {
		bit = 64;
		ret = parse_port(v, vlen, &a->rt_port);
	} else {
		return -EINVAL;
	}
	if (ret < 0 || (*seen & bit))
		return -EINVAL;
	*seen |= bit;
	return 0;
}

int ferry__node_addr_parse(const char *text, size_t len, struct ferry__node_addr *out)
{
	struct ferry__node_addr a;
	unsigned seen = 0;
	size_t pos = 0;

	if (!text || !out || len == 0 || len >= FERRY__NODE_ADDR_MAX)
		return -EINVAL;
	memset(&a, 0, sizeof(a));
	while (pos < len) {
		const char *semi = memchr(text + pos, ';', len - pos);
		size_t end = semi ? (size_t)(semi - text) : len;

		if (parse_pair(text + pos, end - pos, &a, &seen) < 0) {
			FLOG_DEBUG(COMP, "bad node address %.*s", (int)len, text);
			return -EINVAL;
		}
		pos = end + 1;
		if (semi && pos == len) /* a trailing ';' */
			return -EINVAL;
	}
	if (!(seen & 1) || !(seen & 16) || (!ferry__node_addr_transports(&a) && !a.rt_port)) {
		FLOG_DEBUG(COMP, "incomplete node address %.*s", (int)len, text);
		return -EINVAL;
	}
	*out = a;
	return 0;
}

unsigned ferry__node_addr_transports(const struct ferry__node_addr *a)
{
	return (a->tcp_port ? FERRY_GCS_TRANSPORT_TCP : 0) |
	       (a->rdma_port ? FERRY_GCS_TRANSPORT_RDMA : 0) |
	       (a->shm_path[0] ? FERRY_GCS_TRANSPORT_SHM : 0);
}

int ferry__node_addr_format(const struct ferry__node_addr *a, char *buf, size_t size)
{
	size_t n = 0;
	int w;

	w = snprintf(buf, size, "ip=%s", a->ip);
	if (w < 0 || (size_t)w >= size)
		return -ENOSPC;
	n = (size_t)w;
	if (a->tcp_port) {
		w = snprintf(buf + n, size - n, ";tcp=%u", a->tcp_port);
		if (w < 0 || (size_t)w >= size - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	if (a->rdma_port) {
		w = snprintf(buf + n, size - n, ";rdma=%u", a->rdma_port);
		if (w < 0 || (size_t)w >= size - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	if (a->rt_port) {
		w = snprintf(buf + n, size - n, ";rt=%u", a->rt_port);
		if (w < 0 || (size_t)w >= size - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	if (a->shm_path[0]) {
		w = snprintf(buf + n, size - n, ";shm=%s", a->shm_path);
		if (w < 0 || (size_t)w >= size - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	w = snprintf(buf + n, size - n, ";host=%s", a->host);
	if (w < 0 || (size_t)w >= size - n)
		return -ENOSPC;
	n += (size_t)w;
	if (a->run) {
		w = snprintf(buf + n, size - n, ";run=%016llx", (unsigned long long)a->run);
		if (w < 0 || (size_t)w >= size - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	/* What we advertise must parse back: catches a path with ';' or a bad ip early. */
	{
		struct ferry__node_addr check;

		if (ferry__node_addr_parse(buf, n, &check) < 0)
			return -EINVAL;
	}
	return (int)n;
}

int ferry__host_boot_id(char *buf, size_t size)
{
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return n > 0 ? 0 : -EIO;
}
