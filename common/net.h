/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Socket plumbing for stream connections: address resolution, listening sockets (TCP and Unix),
 * per-socket tuning, and this host's interface addresses (which one a node advertises).
 * Everything here is synchronous and cheap except name resolution.
 *
 * Thread model: thread-safe (no shared state).
 */
#ifndef FERRY_COMMON_NET_H
#define FERRY_COMMON_NET_H

#include <stdbool.h>
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

/*
 * ferry__net_raise_fd_limit() - raise this process's open-file limit (RLIMIT_NOFILE) from its
 * soft value to its hard one, as a daemon serving many connections must: many systems start
 * processes at 1,024, which a GCS reaches at about a thousand nodes and drivers, and then every
 * accept fails (EMFILE) until someone leaves. @want: the descriptors @who expects to need; a hard
 * limit below it is logged as a warning saying how to raise it. Returns the soft limit now in
 * force, or -errno (logged).
 */
long ferry__net_raise_fd_limit(const char *who, unsigned long want);

/* ferry__net_tune() - per-connection options: TCP_NODELAY on TCP (control messages are small
 * and latency bound). Failures are logged and ignored. */
void ferry__net_tune(int fd);

/* ferry__net_describe() - "127.0.0.1:4000", "[::1]:4000" or the Unix path, into @buf. */
void ferry__net_describe(const struct sockaddr *addr, socklen_t len, char *buf, size_t size);

/* ---- addresses of this host ---- */

#define FERRY__NET_IP_MAX 48 /* a numeric IPv4/IPv6 address and its NUL */

/* One address of a network interface (ferry__net_ifaces()). */
struct ferry__net_iface {
	char name[16];		    /* the interface (IFNAMSIZ) */
	char ip[FERRY__NET_IP_MAX]; /* one of its addresses, numeric */
	int family;		    /* AF_INET or AF_INET6 */
	bool up;		    /* IFF_UP and IFF_RUNNING */
	bool loopback;		    /* IFF_LOOPBACK */
	bool rdma;		    /* an RDMA device sits on it (IPoIB, RoCE, soft-RoCE) */
};

/*
 * ferry__net_ifaces() - this host's interface addresses (IPv4, then IPv6 without link-local
 * ones, which need a scope to be reached) into @out[0..@max), in the kernel's order within each
 * family. RDMA devices are looked up under @sysfs ("/sys"; tests give a fake tree). Returns
 * how many (at most @max), or -errno (logged).
 */
int ferry__net_ifaces(const char *sysfs, struct ferry__net_iface *out, size_t max);

/* ferry__net_iface_named() - the first address of interface @name among @ifs[0..@n) (IPv4
 * before IPv6, as ferry__net_ifaces() orders them): what `--ip ib0` means. NULL if none. */
const struct ferry__net_iface *ferry__net_iface_named(const struct ferry__net_iface *ifs, size_t n,
						      const char *name);

/*
 * ferry__net_if_rdma() - whether an RDMA device serves interface @name, as @sysfs shows it: an
 * InfiniBand link (IPoIB, type 32), a NIC whose device has an infiniband/ entry (RoCE, iWARP),
 * or a software device whose parent is @name (rdma_rxe, siw).
 */
bool ferry__net_if_rdma(const char *sysfs, const char *name);

/* ferry__net_rdma_devices() - whether @sysfs lists any RDMA device (class/infiniband). */
bool ferry__net_rdma_devices(const char *sysfs);

/*
 * ferry__net_rdma_addr() - what perftest's `-d DEV -i PORT -x GID` name, as an address Ferry
 * can bind (rdma_cm picks the device by address): GID @gid (< 0: the first one that carries an
 * address) of @port (0: 1) of RDMA device @dev under @sysfs. A RoCE v2 GID is the address
 * itself (IPv4-mapped, or IPv6): it goes to @ip. Otherwise (RoCE v1, InfiniBand) the interface
 * the GID belongs to goes to @iface (the GID table's ndevs/, or the IPoIB interface of the
 * device), and the caller takes that interface's address. Returns 0, -ENODEV (no such device
 * or port), -ENOENT (no such GID, or an empty one), -EADDRNOTAVAIL (no address and no
 * interface), -EINVAL (a name with '/'); logged.
 */
int ferry__net_rdma_addr(const char *sysfs, const char *dev, unsigned port, int gid, char *ip,
			 size_t ip_size, char *iface, size_t iface_size);

/* ferry__net_ip_text() - the numeric host of @addr (IPv4-mapped IPv6 as IPv4) into @buf.
 * 0, or -EAFNOSUPPORT (not IP) / -ENOSPC. */
int ferry__net_ip_text(const struct sockaddr *addr, char *buf, size_t size);

/* Numeric address predicates: a valid IPv4/IPv6 literal; loopback (127/8, ::1, their mapped
 * forms); the wildcard (0.0.0.0, ::). The latter two are false for what is not a literal. */
bool ferry__net_ip_valid(const char *ip);
bool ferry__net_ip_loopback(const char *ip);
bool ferry__net_ip_wildcard(const char *ip);

#endif
