/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Socket plumbing for stream connections: address resolution, listening sockets (TCP and Unix),
 * and per-socket tuning. Everything here is synchronous and cheap except name resolution.
 *
 * Thread model: thread-safe (no shared state).
 */
#ifndef FERRY_COMMON_NET_H
#define FERRY_COMMON_NET_H

#include <stdint.h>
#include <sys/socket.h>

/*
 * ferry__net_resolve() - @host ("127.0.0.1", "::1", or a name) and @port into *@addr.
 * Numeric hosts never block; a name goes through getaddrinfo(3), which may block on DNS.
 * Returns 0, -EINVAL (NULL/empty host) or -EHOSTUNREACH (cannot resolve; logged).
 */
int ferry__net_resolve(const char *host, uint16_t port, struct sockaddr_storage *addr,
		       socklen_t *len);

/* ferry__net_unix_addr() - a sockaddr_un for @path. Returns 0, or -ENAMETOOLONG / -EINVAL. */
int ferry__net_unix_addr(const char *path, struct sockaddr_storage *addr, socklen_t *len);

/* ferry__net_socket() - a blocking SOCK_STREAM | SOCK_CLOEXEC socket of @family, or -errno.
 * io_uring needs no O_NONBLOCK: it polls internally instead of blocking. */
int ferry__net_socket(int family);

/*
 * ferry__net_listen() - a listening socket bound to @addr, or -errno (logged). TCP gets
 * SO_REUSEADDR. A Unix path left by a dead server (connect refused) is replaced; a live one
 * gives -EADDRINUSE. @backlog 0 means SOMAXCONN.
 */
int ferry__net_listen(const struct sockaddr *addr, socklen_t len, int backlog);
/*
 * ferry__net_listen_retry() - ferry__net_listen() that retries a TCP bind finding the address in
 * use for up to @retry_ms (0 = once), saying so in the log. A daemon restarted right after a
 * SIGKILL needs it: the dead process's io_uring releases its listening socket asynchronously,
 * some milliseconds after the process is gone. Blocks the calling thread while it retries.
 */
int ferry__net_listen_retry(const struct sockaddr *addr, socklen_t len, int backlog,
			    unsigned retry_ms);

/* ferry__net_local_port() - the port @fd is bound to, or -errno. */
int ferry__net_local_port(int fd);

/* ferry__net_tune() - per-connection options: TCP_NODELAY on TCP (control messages are small
 * and latency bound). Failures are logged and ignored. */
void ferry__net_tune(int fd);

/* ferry__net_describe() - "127.0.0.1:4000", "[::1]:4000" or the Unix path, into @buf. */
void ferry__net_describe(const struct sockaddr *addr, socklen_t len, char *buf, size_t size);

#endif
