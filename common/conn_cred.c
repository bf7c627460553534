/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who is at the other end of a Unix connection, in the kernel's words: the credentials it
 * recorded when the peer connected, and a pidfd for the peer process. A server that must know
 * its peers (the plasma store, whose client slots outlive a connection until the process is
 * gone) asks here instead of trusting what the peer writes.
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/conn_int.h"
#include "common/log.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5; Debian 12's headers predate it */
#endif

/*
 * A pidfd for the peer: SO_PEERPIDFD names the very process that connected. Older kernels
 * have only pidfd_open() on SO_PEERCRED's pid, which names whoever has that pid now: if the
 * peer exited and its pid was reused since it connected, a stranger. Its socket then has no
 * writer left unless it passed it on, so the caller sees the connection close soon after.
 */
static int peer_pidfd(int fd, pid_t pid)
{
	int pidfd = -1;
	socklen_t len = sizeof(pidfd);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0)
		return pidfd;
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return pidfd >= 0 ? pidfd : -1;
}

int ferry__conn_peer_cred(const struct ferry__conn *conn, struct ferry__conn_cred *out)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (conn->fd < 0 || conn->family != AF_UNIX)
		return -EOPNOTSUPP;
	if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0) {
		int err = -errno;

		FLOG_WARN(CONN_LOG, "%s: no peer credentials: %s", conn->peer, ferry_strerror(err));
		return err;
	}
	/* pid 0: the peer is in a pid namespace that cannot see ours' (it has no number here). */
	out->pid = uc.pid;
	out->uid = uc.uid;
	out->gid = uc.gid;
	out->pidfd = uc.pid > 0 ? peer_pidfd(conn->fd, uc.pid) : -1;
	return 0;
}
