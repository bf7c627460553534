/* SPDX-License-Identifier: Apache-2.0 */
/* Socket plumbing: resolution, listening sockets, tuning (see net.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdbool.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/net.h"

#define NET_LOG "net"

int ferry__net_resolve(const char *host, uint16_t port, struct sockaddr_storage *addr,
		       socklen_t *len)
{
	struct addrinfo hints, *res = NULL;
	char service[8];
	int ret;

	if (!host || !*host) {
		FLOG_ERROR(NET_LOG, "empty host name");
		return -EINVAL;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(service, sizeof(service), "%u", port);
	ret = getaddrinfo(host, service, &hints, &res);
	if (ret != 0 || !res) {
		FLOG_ERROR(NET_LOG, "cannot resolve '%s': %s", host, gai_strerror(ret));
		return -EHOSTUNREACH;
	}
	memcpy(addr, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int ferry__net_unix_addr(const char *path, struct sockaddr_storage *addr, socklen_t *len)
{
	struct sockaddr_un *un = (struct sockaddr_un *)addr;
	size_t n = path ? strlen(path) : 0;

	if (n == 0) {
		FLOG_ERROR(NET_LOG, "empty Unix socket path");
		return -EINVAL;
	}
	if (n >= sizeof(un->sun_path)) {
		FLOG_ERROR(NET_LOG, "Unix socket path of %zu bytes is too long (max %zu): %s", n,
			   sizeof(un->sun_path) - 1, path);
		return -ENAMETOOLONG;
	}
	memset(addr, 0, sizeof(*addr));
	un->sun_family = AF_UNIX;
	memcpy(un->sun_path, path, n + 1);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	return 0;
}

int ferry__net_socket(int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		fd = -errno;
		FLOG_ERROR(NET_LOG, "socket: %s", ferry_strerror(fd));
	}
	return fd;
}

/* A Unix path that exists: replace it only if nobody accepts on it (a dead server's). */
static int remove_stale_unix(const struct sockaddr *addr, socklen_t len)
{
	const struct sockaddr_un *un = (const struct sockaddr_un *)addr;
	struct stat st;
	int fd, ret;

	if (lstat(un->sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
		return -EADDRINUSE;
	fd = ferry__net_socket(AF_UNIX);
	if (fd < 0)
		return fd;
	ret = connect(fd, addr, len) == 0 ? 0 : -errno;
	close(fd);
	if (ret != -ECONNREFUSED)
		return -EADDRINUSE;
	FLOG_INFO(NET_LOG, "replacing stale socket %s", un->sun_path);
	return unlink(un->sun_path) == 0 ? 0 : -errno;
}

/* @quiet_in_use: the caller retries -EADDRINUSE and logs it itself. */
static int do_listen(const struct sockaddr *addr, socklen_t len, int backlog, bool quiet_in_use)
{
	char name[128];
	int fd, one = 1, ret;

	fd = ferry__net_socket(addr->sa_family);
	if (fd < 0)
		return fd;
	if (addr->sa_family != AF_UNIX &&
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		FLOG_WARN(NET_LOG, "SO_REUSEADDR: %s", ferry_strerror(-errno));
	ret = bind(fd, addr, len) == 0 ? 0 : -errno;
	if (ret == -EADDRINUSE && addr->sa_family == AF_UNIX && remove_stale_unix(addr, len) == 0)
		ret = bind(fd, addr, len) == 0 ? 0 : -errno;
	if (ret == 0 && listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0)
		ret = -errno;
	if (ret < 0) {
		ferry__net_describe(addr, len, name, sizeof(name));
		if (ret != -EADDRINUSE || !quiet_in_use)
			FLOG_ERROR(NET_LOG, "listen on %s: %s", name, ferry_strerror(ret));
		close(fd);
		return ret;
	}
	return fd;
}

int ferry__net_listen(const struct sockaddr *addr, socklen_t len, int backlog)
{
	return do_listen(addr, len, backlog, false);
}

#define BIND_RETRY_STEP_MS 20

static uint64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int ferry__net_listen_retry(const struct sockaddr *addr, socklen_t len, int backlog,
			    unsigned retry_ms)
{
	struct timespec step = {0, BIND_RETRY_STEP_MS * 1000000L};
	uint64_t start = monotonic_ms(), waited = 0;
	bool can_retry = addr->sa_family != AF_UNIX; /* a Unix path is replaced, not waited for */
	char name[128];
	int fd;

	ferry__net_describe(addr, len, name, sizeof(name));
	for (;;) {
		bool retry = can_retry && waited < retry_ms;

		fd = do_listen(addr, len, backlog, retry);
		if (fd != -EADDRINUSE || !retry)
			break;
		if (waited == 0)
			FLOG_WARN(NET_LOG, "%s is in use; retrying the bind for up to %u ms", name,
				  retry_ms);
		nanosleep(&step, NULL);
		waited = monotonic_ms() - start;
	}
	if (fd >= 0 && waited)
		FLOG_WARN(NET_LOG, "bound %s after retrying for %llu ms", name,
			  (unsigned long long)waited);
	return fd;
}

int ferry__net_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -EAFNOSUPPORT;
}

void ferry__net_tune(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int one = 1;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
		return;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		FLOG_WARN(NET_LOG, "TCP_NODELAY: %s", ferry_strerror(-errno));
}

void ferry__net_describe(const struct sockaddr *addr, socklen_t len, char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "?";

	(void)len;
	switch (addr->sa_family) {
	case AF_INET: {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, size, "%s:%u", host, ntohs(in->sin_port));
		break;
	}
	case AF_INET6: {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, size, "[%s]:%u", host, ntohs(in6->sin6_port));
		break;
	}
	case AF_UNIX:
		snprintf(buf, size, "%s", ((const struct sockaddr_un *)addr)->sun_path);
		break;
	default:
		snprintf(buf, size, "(family %d)", addr->sa_family);
		break;
	}
}

long ferry__net_raise_fd_limit(const char *who, unsigned long want)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		int err = -errno;

		FLOG_WARN(NET_LOG, "%s: cannot read the open-file limit: %s", who,
			  ferry_strerror(err));
		return err;
	}
	was = rl.rlim_cur;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			int err = -errno;

			FLOG_WARN(NET_LOG,
				  "%s: cannot raise the open-file limit from %llu to %llu: %s", who,
				  (unsigned long long)was, (unsigned long long)rl.rlim_max,
				  ferry_strerror(err));
			return err;
		}
		FLOG_INFO(NET_LOG, "%s: open-file limit raised from %llu to %llu", who,
			  (unsigned long long)was, (unsigned long long)rl.rlim_cur);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)want)
		FLOG_WARN(NET_LOG,
			  "%s: the open-file limit is %llu, under the %lu this daemon may need "
			  "(connections past it are refused); raise the hard limit (ulimit -Hn, "
			  "systemd LimitNOFILE=)",
			  who, (unsigned long long)rl.rlim_cur, want);
	return rl.rlim_cur > (rlim_t)LONG_MAX ? LONG_MAX : (long)rl.rlim_cur;
}
