/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who the plasma store's clients are, and when their client slots come back: the kernel names
 * each client (never the pid its PlasmaConnect claims), one uid may hold only so many slots,
 * and the slot of a departed client is reused once its process is gone.
 *
 * DESIGN
 * Loop thread only (server.c). Identity: SO_PEERCRED's pid and uid as the kernel saw them at
 * connect (a client in another pid namespace gets its pid in ours), and a pidfd for the
 * process (SO_PEERPIDFD, else pidfd_open()), which a reused pid cannot fool. A client cannot
 * claim to be a process that lives forever (pid 1), so its slots cannot outlive it.
 *
 * Slots: a connection that closes gives its pins and unsealed objects back at once
 * (retire). The slot itself is reused at once after a goodbye (PlasmaDisconnect) or when the
 * process is gone; a live process whose connection closed may still write to the slot in
 * shared memory, so its slot is parked until the process exits (it still counts against its
 * uid). Parked slots are looked at on every tick and before every admission, as are connected
 * clients whose process is gone while their close is still on its way: nobody is refused for a
 * slot that a dead process holds.
 *
 * Caps: a uid holds at most max_clients_per_uid slots, connected or parked (default: half the
 * slots), so one user cannot lock out the others. Root and the store's own uid are not capped:
 * both can stop the store anyway, and the node's workers run as the store's uid and need every
 * slot. Without a pidfd (kernels before 5.3) the pid is watched through /proc, and a peer whose
 * pid namespace hides it from ours (pid 0) gets its slot back when its connection closes.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "plasma/server_int.h"

static const char comp[] = "plasma";

/* ---- identity ---- */

int ferry__plasma_identify(struct ferry__plasma_pclient *c)
{
	struct ferry__conn_cred cred;
	int r;

	if (c->pidfd >= 0) { /* a second PlasmaConnect after a goodbye */
		close(c->pidfd);
		c->pidfd = -1;
	}
	if (!c->conn) { /* a test or fuzz client: this process, which outlives it */
		c->pid = (int)getpid();
		c->uid = geteuid();
		return 0;
	}
	r = ferry__conn_peer_cred(c->conn, &cred);
	if (r < 0)
		return r;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->pidfd = cred.pidfd;
	return 0;
}

/* Has the process exited (a zombie counts: it runs no code any more)? */
static bool process_gone(int pid, int pidfd)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};
	char path[64], buf[512], *s;
	ssize_t n;
	int fd;

	if (pidfd >= 0) /* readable once the process exited */
		return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	s = strrchr(buf, ')'); /* the state follows the command name, which may hold anything */
	return s && s[1] == ' ' && (s[2] == 'Z' || s[2] == 'X');
}

/* ---- parked slots ---- */

static void park(struct ferry__plasma_server *srv, struct ferry__plasma_parked p)
{
	struct ferry__plasma_parked *grown =
		ferry__realloc(srv->parked, (srv->nparked + 1) * sizeof(*grown));

	if (!grown) {
		FLOG_ERROR(comp, "server: client slot %u leaked (no memory to track it)", p.slot);
		if (p.pidfd >= 0)
			close(p.pidfd);
		return;
	}
	srv->parked = grown;
	srv->parked[srv->nparked++] = p;
}

/* One step for a parked slot. Returns true when it is done with (its pidfd then closed). */
static bool unpark(struct ferry__plasma_server *srv, struct ferry__plasma_parked *p)
{
	int r = 0;

	if (!p->retired) {
		r = ferry__plasma_store_client_retire(srv->store, p->slot);
		p->retired = r == 0;
	}
	if (p->retired && (p->clean || process_gone(p->pid, p->pidfd)))
		r = ferry__plasma_store_client_remove(srv->store, p->slot);
	else if (p->retired)
		return false; /* its process still runs */
	if (r != -EAGAIN) {
		if (!(p->retired || r < 0))
			return false;
		if (p->pidfd >= 0)
			close(p->pidfd);
		return true;
	}
	FLOG_WARN(comp, "server: client slot %u: writer lock busy, reclaim retried later", p->slot);
	return false;
}

void ferry__plasma_slot_release(struct ferry__plasma_pclient *c, bool clean)
{
	struct ferry__plasma_parked p = {
		.slot = c->slot, .pid = c->pid, .pidfd = c->pidfd, .uid = c->uid, .clean = clean};

	c->pidfd = -1; /* the parked slot owns it now */
	if (!unpark(c->srv, &p))
		park(c->srv, p);
}

void ferry__plasma_parked_sweep(struct ferry__plasma_server *srv)
{
	for (uint32_t i = 0; i < srv->nparked;) {
		if (unpark(srv, &srv->parked[i]))
			srv->parked[i] = srv->parked[--srv->nparked];
		else
			i++;
	}
}

void ferry__plasma_parked_fini(struct ferry__plasma_server *srv)
{
	for (uint32_t i = 0; i < srv->nparked; i++)
		if (srv->parked[i].pidfd >= 0)
			close(srv->parked[i].pidfd);
	ferry__free(srv->parked);
	srv->parked = NULL;
	srv->nparked = 0;
}

/* ---- admission ---- */

/* Connected clients whose process died before the store saw their connection close: their
 * slots come back now rather than when the close arrives. */
static void sweep_dead_clients(struct ferry__plasma_server *srv)
{
	for (struct ferry__plasma_pclient *c = srv->clients; c; c = c->next) {
		/* Without a pid or pidfd the process cannot be watched: its close will come. */
		if (!c->conn || c->closing || c->slot == FERRY__PLASMA_NO_SLOT ||
		    (c->pidfd < 0 && c->pid <= 0) || !process_gone(c->pid, c->pidfd))
			continue;
		FLOG_INFO(comp, "server: client pid %d (slot %u) gone before its connection closed",
			  c->pid, c->slot);
		ferry__plasma_client_leave(c, false);
		c->closing = true;
		ferry__conn_close(c->conn);
	}
}

/* Slots taken, connected (but for @self's) or parked: all of them, and @self's uid's. */
static void count_slots(const struct ferry__plasma_server *srv,
			const struct ferry__plasma_pclient *self, uint32_t *all, uint32_t *uid)
{
	*all = *uid = 0;
	for (const struct ferry__plasma_pclient *c = srv->clients; c; c = c->next) {
		if (c == self || c->slot == FERRY__PLASMA_NO_SLOT)
			continue;
		*all += 1;
		*uid += c->uid == self->uid;
	}
	for (uint32_t i = 0; i < srv->nparked; i++)
		*uid += srv->parked[i].uid == self->uid;
	*all += srv->nparked;
}

/* Slots @uid may hold (UINT32_MAX: no cap). */
static uint32_t uid_cap(const struct ferry__plasma_server *srv, unsigned uid)
{
	if (uid == 0 || uid == srv->own_uid)
		return UINT32_MAX;
	return srv->max_per_uid;
}

int ferry__plasma_admit(struct ferry__plasma_pclient *c, uint32_t *slot)
{
	struct ferry__plasma_server *srv = c->srv;
	uint32_t cap = uid_cap(srv, c->uid), all, held;

	ferry__plasma_parked_sweep(srv);
	count_slots(srv, c, &all, &held);
	/* Processes that died before their close arrived are looked for only when they would
	 * make us refuse (a poll per client). */
	if (held >= cap || all + 1 >= srv->ix->max_clients) {
		sweep_dead_clients(srv);
		count_slots(srv, c, &all, &held);
	}
	if (held >= cap) {
		FLOG_WARN(comp,
			  "server: uid %u holds %u client slots, its cap (max_clients_per_uid)",
			  c->uid, held);
		return -EUSERS;
	}
	return ferry__plasma_store_client_add(srv->store, c->pid, slot);
}
