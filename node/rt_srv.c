/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's runtime socket: drivers and the node's own workers connect to it (schema/runtime.fbs),
 * say who they are with RuntimeConnect, then ask for and give back worker leases; workers answer
 * WorkerAssign there. This file is the socket and its peers; rt_pool.c starts and reaps the
 * worker processes, rt_lease.c grants and reclaims leases.
 *
 * DESIGN
 * - One thread: everything runs on the node's loop (ferry-node-loop): the listener, every
 *   connection, the workers' pidfds (a POLLIN each: a worker's death is seen at once and reaped
 *   with waitid(P_PIDFD), no SIGCHLD handler), the tick timer, and the GCS calls (async). Nothing
 *   here blocks the loop; the only blocking wait is the stopping thread's, for the reaping. An
 *   owner that closes holding leases stays in the peers (conn NULL) while its pidfd is polled
 *   for DYING_WAIT_MS, then its end (died or closed) is decided in the poll's callback.
 * - Who may connect: the path is the store socket's with ".rt" appended. The first frame must be
 *   RuntimeConnect (<= 8 KiB until it is accepted) within 10 s, from a process of the node's uid
 *   (or root) whose pid is the one SO_PEERCRED reports. A worker must also be a child this node
 *   started, with the ID and the random secret the node put in its environment. A refusal is
 *   answered (RuntimeConnectReply with status and reason), logged, and the connection closed
 *   once that reply is out (or after a second).
 * - Bounds: at most RT_MAX_PEERS drivers and CLIs connected, RT_MAX_TCP_PEERS of them over TCP
 *   (past either a RuntimeConnect is refused -EUSERS, one line per 10 s); the node's own
 *   workers count apart, so a flood of drivers cannot lock the pool out. RT_MAX_CONNECTING
 *   connections before their RuntimeConnect (a new one closes the oldest of those); each may queue
 *   RT_MAX_QUEUED_BYTES unsent before its requests wait (conn.h backpressure), and a peer that
 *   never reads is closed after the conn's stall timeout; at most RT_MAX_QUEUED_REQUESTS lease
 *   requests wait per node, RT_MAX_PEER_REQUESTS of them one connection's (past it -ENOSPC).
 * - Stop (ferry__node_rt_shutdown, from the stopping thread while the loop runs): on the loop the
 *   listener and every connection close, the queue is dropped, and every worker gets SIGTERM; the
 *   tick sends SIGKILL to those alive after RT_KILL_GRACE_MS; the stopping thread waits until all
 *   are reaped. The state is freed after the loop is destroyed (ferry__node_rt_free).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/wire.h"
#include "node/node_int.h"
#include "node/rt_code.h"
#include "node/rt_int.h"

#define COMP "node"
#define TICK_MS 100u
#define DYING_WAIT_MS 50 /* a closed owner that held leases: its end is awaited this long */
/* A refused peer is closed once its reply is out, or after this. */
#define REFUSED_LINGER_MS 1000u
/* At most one line per this about connections refused for the caps (with a count). */
#define FULL_LOG_MS 10000u

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len);
static void on_close(struct ferry__conn *conn, int err);

static const struct ferry__conn_callbacks peer_callbacks = {
	.on_message = on_message,
	.on_close = on_close,
};

/* ---- sending ---- */

static void to_wire_id(struct ferry__wire_unique_id *out, const void *id)
{
	memcpy(out->bytes, id, sizeof(out->bytes));
}

int ferry__rt_peer_send_built(struct rt_peer *p, uint16_t type, int built)
{
	struct ferry__fb_builder *fb = &p->rt->fb;
	int r = built;

	if (!p->conn)
		return -ENOTCONN;
	if (r == 0)
		r = ferry__conn_send(p->conn, type, ferry__fb_builder_data(fb),
				     ferry__fb_builder_size(fb));
	/* -ENOTCONN: the connection is closing already (its on_close cleans up). */
	if (r < 0 && r != -ENOTCONN) {
		FLOG_ERROR(COMP, "runtime: cannot send %s to pid %d: %s",
			   ferry__wire_message_name(type), p->pid, ferry_strerror(r));
		ferry__rt_peer_close(p, NULL);
	}
	return r;
}

void ferry__rt_peer_send_grant(struct rt_peer *p, uint64_t request_id, int status,
			       const char *message, const struct rt_worker *w)
{
	struct ferry__wire_lease_grant g = {.request_id = request_id, .status = status};

	g.message = message;
	if (w) {
		g.lease_id = w->lease_id;
		to_wire_id(&g.worker_id, &w->id);
		g.worker_path = w->listen_path;
		g.worker_port = w->listen_port;
	}
	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_LEASE_GRANT,
					ferry__wire_lease_grant_build(&p->rt->fb, &g));
}

void ferry__rt_peer_send_retry_at(struct rt_peer *p, uint64_t request_id,
				  const struct ferry_node_id *node, const char *address,
				  const char *message)
{
	struct ferry__wire_lease_grant g = {.request_id = request_id, .status = -EXDEV};

	g.message = message;
	memcpy(g.retry_node.bytes, node->bytes, sizeof(g.retry_node.bytes));
	g.retry_address = address;
	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_LEASE_GRANT,
					ferry__wire_lease_grant_build(&p->rt->fb, &g));
}

void ferry__rt_peer_send_revoked(struct rt_peer *p, const struct rt_worker *w, int status,
				 int term_signal, int exit_status, const char *message)
{
	struct ferry__wire_lease_revoked m = {
		.lease_id = w->lease_id,
		.status = status,
		.term_signal = term_signal,
		.exit_status = exit_status,
		.message = message,
	};

	to_wire_id(&m.worker_id, &w->id);
	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_LEASE_REVOKED,
					ferry__wire_lease_revoked_build(&p->rt->fb, &m));
}

void ferry__rt_peer_send_lease_blocked(struct rt_peer *p, uint64_t lease_id,
				       const struct ferry__rt_blocked *b)
{
	struct ferry__wire_lease_blocked m = {
		.lease_id = lease_id, .blocked = b->blocked, .wait_id = b->wait_id};

	memcpy(m.task_id.bytes, b->task.bytes, sizeof(m.task_id.bytes));

	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_LEASE_BLOCKED,
					ferry__wire_lease_blocked_build(&p->rt->fb, &m));
}

void ferry__rt_peer_send_bundle_reply(struct rt_peer *p, uint64_t request_id, int status,
				      const char *message)
{
	struct ferry__wire_bundle_reply m = {
		.request_id = request_id, .status = status, .message = message};

	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_BUNDLE_REPLY,
					ferry__wire_bundle_reply_build(&p->rt->fb, &m));
}

int ferry__rt_peer_send_assign(struct rt_peer *p, const struct rt_req *req)
{
	struct ferry__wire_worker_assign m = {
		.code_path = ferry__rt_code_path(req),
		.code_hash = req->code_hash,
		.code_hash_count = req->code_hash_len,
	};

	to_wire_id(&m.job, &req->job);
	return ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_WORKER_ASSIGN,
					 ferry__wire_worker_assign_build(&p->rt->fb, &m));
}

static void send_connect_reply(struct rt_peer *p, int status, const char *message)
{
	struct ferry__node *node = p->rt->node;
	struct ferry__wire_runtime_connect_reply m = {.status = status, .message = message};

	to_wire_id(&m.node_id, &node->id);
	m.store_socket = node->socket_path;
	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY,
					ferry__wire_runtime_connect_reply_build(&p->rt->fb, &m));
}

/* ---- peers ---- */

void ferry__rt_peer_close(struct rt_peer *p, const char *why)
{
	/* Rate-limited per peer: a local process can open connections and send junk at will. A
	 * peer that never said RuntimeConnect has no pid of its own yet: its socket's names it. */
	if (why)
		FLOG_PEER_WARN(COMP, p->conn ? ferry__conn_peer(p->conn) : "a runtime peer",
			       "runtime: closing %s: %s",
			       p->kind == FERRY__WIRE_PEER_KIND_WORKER ? "a worker" : "a peer",
			       why);
	if (p->conn)
		ferry__conn_close(p->conn);
}

/* Answer a RuntimeConnect with a refusal; the connection closes once the answer is out. */
static void answer_refusal(struct rt_peer *p, int status, const char *why)
{
	p->refused_ms = ferry__loop_now_ms();
	send_connect_reply(p, status, why);
	if (p->conn)
		ferry__conn_flush(p->conn);
}

/* Refuse a RuntimeConnect: answer why, log it, close once the answer is out. */
static void refuse(struct rt_peer *p, int status, const char *why)
{
	FLOG_WARN(COMP, "runtime: refused a connection (pid %d): %s", p->pid, why);
	answer_refusal(p, status, why);
}

/*
 * A driver or CLI past RT_MAX_PEERS connected (RT_MAX_TCP_PEERS over TCP) is refused -EUSERS
 * in its RuntimeConnectReply. The node's own workers are not counted (check_worker vouched for
 * them), so a token holder that opens connections as drivers cannot keep the pool from
 * starting workers, nor, from other hosts, lock local drivers out. One line per FULL_LOG_MS.
 */
static int admit(struct rt_peer *p)
{
	struct ferry__node_rt *rt = p->rt;
	bool full = rt->ndrivers >= RT_MAX_PEERS || (p->tcp && rt->ntcp >= RT_MAX_TCP_PEERS);
	char why[128], who[96];
	uint64_t now;

	if (!full) {
		p->counted = true;
		rt->ndrivers++;
		rt->ntcp += p->tcp;
		return 0;
	}
	if (p->tcp && rt->ntcp >= RT_MAX_TCP_PEERS)
		snprintf(why, sizeof(why), "%u peers connected over TCP, the most the node takes",
			 rt->ntcp);
	else
		snprintf(why, sizeof(why), "%u drivers connected, the most the node takes",
			 rt->ndrivers);
	answer_refusal(p, -EUSERS, why);
	rt->full_refused++;
	now = ferry__loop_now_ms();
	if (rt->full_logged_ms && now - rt->full_logged_ms < FULL_LOG_MS)
		return -EUSERS;
	if (p->tcp && p->conn)
		snprintf(who, sizeof(who), "at %s", ferry__conn_peer(p->conn));
	else
		snprintf(who, sizeof(who), "pid %d", p->pid);
	FLOG_WARN(COMP,
		  "runtime: refusing a %s (%s): %s (%llu refused since the last such line; the "
		  "node's own workers are still admitted)",
		  p->kind == FERRY__WIRE_PEER_KIND_CLI ? "CLI" : "driver", who, why,
		  (unsigned long long)rt->full_refused);
	rt->full_logged_ms = now;
	rt->full_refused = 0;
	return -EUSERS;
}

/* The peer's credentials: its uid must be the node's (or root), its pid the one it names. */
static int check_cred(struct rt_peer *p, const struct ferry__rt_connect *c, char *why, size_t size)
{
	struct ferry__conn_cred cred;
	int r;

	/* TCP (rt_tcp.c): the cluster token's handshake vouched for it; its pid is on another
	 * host, or unverifiable, so it is not kept (a closed remote owner is not "died"). Workers
	 * are this node's children and come on the Unix socket only. */
	if (p->tcp && c->kind == FERRY__WIRE_PEER_KIND_WORKER) {
		snprintf(why, size, "a worker over TCP");
		return -EACCES;
	}
	if (p->tcp)
		return 0;
	r = ferry__conn_peer_cred(p->conn, &cred);
	if (r < 0) {
		snprintf(why, size, "no peer credentials: %s", ferry_strerror(r));
		return -EACCES;
	}
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = cred.pidfd; /* kept: its death tells a killed owner from one that closed */
	p->pid = cred.pid;
	if (cred.uid != geteuid() && cred.uid != 0) {
		snprintf(why, size, "uid %u is not the node's (%u)", cred.uid, geteuid());
		return -EACCES;
	}
	if (cred.pid && c->pid != cred.pid) {
		snprintf(why, size, "it says pid %d, the socket says %d", c->pid, cred.pid);
		return -EACCES;
	}
	return 0;
}

/* A worker's RuntimeConnect: one this node started, its secret, its pid, not connected yet. */
static int check_worker(struct rt_peer *p, const struct ferry__rt_connect *c, char *why,
			size_t size)
{
	struct rt_worker *w = ferry__rt_pool_find(p->rt, &c->id);

	if (!w) {
		snprintf(why, size, "worker id is not one this node started");
		return -EACCES;
	}
	if (!c->secret ||
	    !ferry__wire_bytes_equal(c->secret, c->secret_len, w->secret, sizeof(w->secret))) {
		snprintf(why, size, "worker %d: wrong secret", (int)w->pid);
		return -EACCES;
	}
	if (p->pid != w->pid) {
		snprintf(why, size, "pid %d is not the node's child %d", p->pid, (int)w->pid);
		return -EACCES;
	}
	/* Its second connection, same process and socket: the line its tasks submit on. */
	if (w->peer && !w->owner_peer && !w->signal_sent && c->listen_path &&
	    !strcmp(c->listen_path, w->listen_path))
		return 1;
	if (w->peer || w->signal_sent || w->state != W_STARTING) {
		snprintf(why, size, "worker %d is already connected or ending", (int)w->pid);
		return -EALREADY;
	}
	return 0;
}

static void handle_connect(struct rt_peer *p, const struct ferry__rt_connect *c)
{
	char why[160];
	int r;

	p->kind = c->kind;
	p->id = c->id;
	r = check_cred(p, c, why, sizeof(why)); /* first: the log lines then name the pid */
	if (r == 0 && c->protocol_version != FERRY_WIRE_PROTOCOL_VERSION) {
		snprintf(why, sizeof(why), "protocol version %u, the node speaks %u",
			 c->protocol_version, FERRY_WIRE_PROTOCOL_VERSION);
		r = -EPROTO;
	}
	if (r == 0 && c->kind == FERRY__WIRE_PEER_KIND_WORKER)
		r = check_worker(p, c, why, sizeof(why));
	if (r < 0) {
		refuse(p, r, why);
		return;
	}
	if (c->kind != FERRY__WIRE_PEER_KIND_WORKER && admit(p) < 0)
		return;
	p->connected = true;
	ferry__conn_set_frame_max(p->conn, 0);
	send_connect_reply(p, 0, NULL);
	if (r == 1) { /* an owner line: a peer like a driver's, tied to its worker */
		p->owner_of = ferry__rt_pool_find(p->rt, &c->id);
		p->owner_of->owner_peer = p;
	} else if (c->kind == FERRY__WIRE_PEER_KIND_WORKER) {
		p->worker = ferry__rt_pool_find(p->rt, &c->id);
		p->worker->listen_port = c->listen_port;
		ferry__rt_pool_registered(p->worker, p, c->listen_path);
	}
}

static void dispatch(struct rt_peer *p, const struct ferry__rt_msg *m)
{
	bool query = m->type == FERRY__WIRE_MSG_NODE_INFO || m->type == FERRY__WIRE_MSG_TIMELINE ||
		     m->type == FERRY__WIRE_MSG_PLASMA_STATS ||
		     m->type == FERRY__WIRE_MSG_PLASMA_LIST;

	/* An operator's tool only reads (rt_admin.c): nothing it sends changes the node. */
	if (p->kind == FERRY__WIRE_PEER_KIND_CLI && !query) {
		ferry__rt_peer_close(p, "a Cli peer sent a message that is not a query");
		return;
	}
	if (query) {
		ferry__rt_admin_query(p, m);
		return;
	}
	switch (m->type) {
	case FERRY__WIRE_MSG_LEASE_REQUEST:
		ferry__rt_lease_request(p, &m->lease);
		break;
	case FERRY__WIRE_MSG_LEASE_RETURN:
		ferry__rt_lease_task_times(p->rt, m->ret.tasks, m->ret.busy_us);
		ferry__rt_lease_return(p, m->ret.lease_id, m->ret.busy, m->ret.tasks);
		break;
	case FERRY__WIRE_MSG_LEASE_DETACH:
		ferry__rt_lease_detach(p, &m->detach);
		break;
	case FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY:
		if (p->kind != FERRY__WIRE_PEER_KIND_WORKER)
			ferry__rt_peer_close(p, "WorkerAssignReply from a driver");
		else
			ferry__rt_lease_assign_reply(p, &m->assign_reply);
		break;
	case FERRY__WIRE_MSG_WORKER_BLOCKED:
		ferry__rt_lease_blocked(p, &m->blocked);
		break;
	case FERRY__WIRE_MSG_BUNDLE_PREPARE:
	case FERRY__WIRE_MSG_BUNDLE_COMMIT:
	case FERRY__WIRE_MSG_BUNDLE_CANCEL:
	case FERRY__WIRE_MSG_BUNDLE_RETURN:
		ferry__rt_bundle_message(p, m->type, &m->bundle);
		break;
	case FERRY__WIRE_MSG_OBJECTS_FREE:
		ferry__rt_objects_free(p, m);
		break;
	default:
		ferry__rt_peer_close(p, "RuntimeConnect sent twice");
	}
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct rt_peer *p = ferry__conn_data(conn);
	struct ferry__rt_msg m;
	char why[160];
	int r;

	if (!p->conn || p->refused_ms)
		return;
	r = ferry__rt_decode(type, payload, len, &m, why, sizeof(why));
	if (!p->connected) {
		if (type != FERRY__WIRE_MSG_RUNTIME_CONNECT)
			refuse(p, -EPROTO, "the first frame is not RuntimeConnect");
		else if (r < 0)
			refuse(p, r, why);
		else
			handle_connect(p, &m.connect);
		return;
	}
	/* A request with a bad field is answered; anything malformed ends the connection. */
	if (r < 0 && r != -EPROTO && type == FERRY__WIRE_MSG_LEASE_REQUEST) {
		FLOG_WARN(COMP, "runtime: a lease request of pid %d refused: %s", p->pid, why);
		ferry__rt_peer_send_grant(p, m.lease.request_id, r, why, NULL);
	} else if (r < 0) {
		ferry__rt_peer_close(p, why);
	} else {
		dispatch(p, &m);
	}
}

/* Named for tests/tsan.supp: TSan does not see a pidfd's creation (conn_cred.c). */
static void close_pidfd(struct rt_peer *p)
{
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
}

/* @p's connection is closed and whether its process died is known: end it. */
static void peer_gone(struct rt_peer *p)
{
	struct ferry__node_rt *rt = p->rt;

	ferry__rt_lease_peer_gone(p);
	ferry__rt_bundle_peer_gone(p);
	if (p->died && p->kind == FERRY__WIRE_PEER_KIND_DRIVER)
		ferry__rt_owner_gone(rt, &p->id, true);
	close_pidfd(p);
	if (p->counted) {
		rt->ndrivers--;
		rt->ntcp -= p->tcp;
	}
	if (p->owner_of)
		p->owner_of->owner_peer = NULL;
	if (p->worker) {
		p->worker->peer = NULL;
		/* A worker without its line to the node cannot be assigned or revoked: end it. */
		if (!p->worker->signal_sent && !rt->stopping)
			ferry__rt_pool_signal(p->worker, SIGKILL, FERRY_GCS_EXIT_ERROR,
					      "it closed its connection to the node");
	}
	if (p->prev)
		p->prev->next = p->next;
	else
		rt->peers = p->next;
	if (p->next)
		p->next->prev = p->prev;
	rt->npeers--;
	ferry__free(p);
	ferry__rt_lease_serve(rt);
}

static void on_dying_timeout(struct ferry__loop_timer *timer, int status)
{
	struct rt_peer *p = timer->data;

	if (status < 0) /* the loop is going: the poll ends with -ECANCELED too */
		return;
	p->dying_timed_out = true;
	/* Its callback decides. A full queue: try again in a moment. */
	if (ferry__loop_cancel(&p->dying_poll) == -EAGAIN)
		(void)ferry__loop_timer_start(p->rt->loop, timer, 1, 0, on_dying_timeout);
}

static void on_dying_poll(struct ferry__loop_req *req, int result)
{
	struct rt_peer *p = req->data;

	(void)ferry__loop_timer_stop(&p->dying_timer);
	if (result > 0)
		p->died = result & POLLIN;
	else if (p->dying_timed_out) /* alive after the moment: it closed, it did not die */
		p->died = false;
	else /* the loop is going, or the poll failed: look once more without waiting */
		p->died = ferry__rt_peer_exited(p, 0);
	peer_gone(p);
}

/* Wait for @p's end on the loop (its pidfd readable, or DYING_WAIT_MS): true if armed. */
static bool await_end(struct rt_peer *p)
{
	struct ferry__loop *loop = p->rt->loop;

	if (p->pidfd < 0)
		return false;
	p->dying_poll.data = p;
	p->dying_timer.data = p;
	if (ferry__loop_poll(loop, &p->dying_poll, p->pidfd, POLLIN, false, on_dying_poll) < 0)
		return false;
	if (ferry__loop_timer_start(loop, &p->dying_timer, DYING_WAIT_MS, 0, on_dying_timeout) < 0)
		(void)ferry__loop_cancel(&p->dying_poll); /* the loop is going */
	return true;
}

static void on_close(struct ferry__conn *conn, int err)
{
	struct rt_peer *p = ferry__conn_data(conn);

	(void)err;
	if (!p) /* closed by ferry__rt_accept before it had a peer (full, or no memory) */
		return;
	p->conn = NULL;
	/* A killed process's sockets close a moment before it ends (its pidfd turns readable
	 * after). An owner that closes still holding leases did not shut down (that returns them
	 * first): give its end that moment, or its workers would go back to the pool still
	 * running its tasks. The loop serves everyone else meanwhile. */
	p->died = p->connected && ferry__rt_peer_exited(p, 0);
	if (p->connected && !p->died && ferry__rt_lease_held(p) && await_end(p))
		return;
	peer_gone(p);
}

/* At most RT_MAX_CONNECTING connections wait for their RuntimeConnect, or for their refusal to
 * go out: a new one past it closes the oldest, so that a flood of silent (or refused)
 * connections cannot lock drivers and workers out nor hold memory without bound. */
static void make_room(struct ferry__node_rt *rt)
{
	struct rt_peer *oldest = NULL;
	unsigned n = 0;

	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		if (p->conn && !p->connected) {
			n++;
			oldest = p; /* the list is newest first */
		}
	}
	if (n >= RT_MAX_CONNECTING && oldest)
		ferry__rt_peer_close(oldest, "too many connections without RuntimeConnect; the "
					     "oldest");
}

static void on_accept(struct ferry__conn_server *server, struct ferry__conn *conn,
		      const void *handshake, size_t len)
{
	(void)handshake;
	(void)len;
	ferry__rt_accept(ferry__conn_server_data(server), conn, false);
}

void ferry__rt_accept(struct ferry__node_rt *rt, struct ferry__conn *conn, bool tcp)
{
	/* Drivers, those waiting for RuntimeConnect and two per worker (admit, make_room): only
	 * connections already closing can take the list past it, and only for a moment. */
	uint32_t most = RT_MAX_PEERS + RT_MAX_CONNECTING + 2 * rt->nworkers;
	struct rt_peer *p;

	if (rt->npeers >= most || rt->stopping) {
		if (!rt->stopping)
			FLOG_PEER_WARN(COMP, ferry__conn_peer(conn),
				       "runtime: %u connections, the most the node takes now: "
				       "closing %s",
				       rt->npeers, ferry__conn_peer(conn));
		ferry__conn_close(conn);
		return;
	}
	make_room(rt);
	p = ferry__calloc(1, sizeof(*p));
	if (!p) {
		FLOG_ERROR(COMP, "runtime: no memory for a new connection");
		ferry__conn_close(conn);
		return;
	}
	p->rt = rt;
	p->conn = conn;
	p->pidfd = -1;
	p->tcp = tcp;
	p->accepted_ms = ferry__loop_now_ms();
	p->next = rt->peers;
	if (rt->peers)
		rt->peers->prev = p;
	rt->peers = p;
	rt->npeers++;
	ferry__conn_set_callbacks(conn, &peer_callbacks, p);
	ferry__conn_set_frame_max(conn, FERRY__RT_CONNECT_MAX_BYTES);
}

/* ---- tick ---- */

static void close_late(struct ferry__node_rt *rt, uint64_t now)
{
	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		if (!p->conn)
			continue;
		if (p->refused_ms && (now - p->refused_ms >= REFUSED_LINGER_MS ||
				      !ferry__conn_queued_bytes(p->conn)))
			ferry__conn_close(p->conn);
		else if (!p->connected && !p->refused_ms &&
			 now - p->accepted_ms >= RT_CONNECT_TIMEOUT_MS)
			ferry__rt_peer_close(p, "no RuntimeConnect within 10 s");
	}
}

static void on_tick(struct ferry__loop_timer *timer, int status)
{
	struct ferry__node_rt *rt = timer->data;
	uint64_t now = ferry__loop_now_ms();

	if (status < 0)
		return;
	close_late(rt, now);
	ferry__rt_bundle_tick(rt, now);
	ferry__rt_pool_tick(rt, now);
}

/* ---- start / stop ---- */

static int listen_runtime(struct ferry__node_rt *rt)
{
	struct ferry__conn_server_opts so = {
		.conn = {.cb = &peer_callbacks,
			 .max_message_bytes = FERRY__RT_FRAME_MAX_BYTES,
			 .max_queued_bytes = RT_MAX_QUEUED_BYTES},
		.on_accept = on_accept,
		.data = rt,
		.server_kind = FERRY__WIRE_PEER_KIND_NODE,
		.flags = FERRY_CONN_SERVER_NO_HANDSHAKE,
	};
	int r;

	memcpy(so.server_id.bytes, rt->node->id.bytes, sizeof(so.server_id.bytes));
	r = ferry__conn_server_listen_unix(rt->loop, rt->path, &so, &rt->server);
	rt->listening = r == 0;
	rt->node->rt_ready = r == 0;
	if (r < 0)
		FLOG_ERROR(COMP, "runtime: cannot listen on %s: %s", rt->path, ferry_strerror(r));
	return r;
}

static int start_on_loop(void *arg)
{
	struct ferry__node_rt *rt = arg;
	int r = listen_runtime(rt);

	if (r == 0)
		r = ferry__rt_pool_start(rt);
	if (r == 0)
		r = ferry__rt_sched_init(rt);
	if (r == 0)
		r = ferry__loop_timer_start(rt->loop, &rt->tick, TICK_MS, TICK_MS, on_tick);
	return r;
}

/* The runtime socket's path: the store socket's with ".rt" appended (the rule drivers use). */
static int runtime_path(struct ferry__node *node, char *out, size_t size)
{
	int n = snprintf(out, size, "%s.rt", node->socket_path);

	if (n < 0 || (size_t)n >= size) {
		FLOG_ERROR(COMP, "runtime socket %s.rt: longer than a Unix socket path (%zu)",
			   node->socket_path, size - 1);
		return -ENAMETOOLONG;
	}
	return 0;
}

int ferry__node_rt_start(struct ferry__node *node)
{
	struct ferry__node_rt *rt = ferry__calloc(1, sizeof(*rt));
	int r;

	if (!rt)
		return -ENOMEM;
	rt->node = node;
	rt->loop = node->loop;
	rt->tick.data = rt;
	rt->avail = node->total;
	rt->started_ms = ferry__loop_now_ms();
	ferry__fb_builder_init(&rt->fb);
	ferry__cond_init_monotonic(&rt->reaped);
	node->rt = rt;
	r = runtime_path(node, rt->path, sizeof(rt->path));
	if (r == 0)
		r = ferry__loop_call(node->loop, start_on_loop, rt);
	return r;
}

static int shutdown_on_loop(void *arg)
{
	struct ferry__node_rt *rt = arg;
	struct rt_req *req;

	rt->stopping = true;
	ferry__node_rt_close_tcp(rt->node);
	ferry__rt_sched_stop(rt);
	ferry__conn_server_close(rt->server);
	rt->server = NULL;
	for (struct rt_peer *p = rt->peers; p; p = p->next)
		if (p->conn)
			ferry__conn_close(p->conn);
	while ((req = rt->queue)) {
		rt->queue = req->next;
		ferry__rt_req_free(req);
	}
	rt->queue_tail = NULL;
	rt->queued = 0;
	ferry__rt_pool_kill_all(rt, SIGTERM);
	return 0;
}

void ferry__node_rt_shutdown(struct ferry__node *node)
{
	struct ferry__node_rt *rt = node->rt;
	struct timespec deadline;

	if (!rt || !node->loop_started)
		return;
	if (ferry__loop_call(node->loop, shutdown_on_loop, rt) < 0)
		return;
	/* The tick escalates to SIGKILL after RT_KILL_GRACE_MS; this guard only ends a hang. */
	deadline = ferry__deadline_in_us(4 * RT_KILL_GRACE_MS * 1000ull);
	pthread_mutex_lock(&node->lock);
	while (rt->alive && pthread_cond_timedwait(&rt->reaped, &node->lock, &deadline) == 0)
		;
	if (rt->alive)
		FLOG_ERROR(COMP, "runtime: %u workers not reaped at stop", rt->alive);
	pthread_mutex_unlock(&node->lock);
}

void ferry__node_rt_loop_gone(struct ferry__node *node)
{
	if (node->rt)
		ferry__rt_code_stop(node->rt);
}

void ferry__node_rt_free(struct ferry__node *node)
{
	struct ferry__node_rt *rt = node->rt;
	struct rt_worker *w;
	struct rt_req *req;

	if (!rt)
		return;
	/* The loop is gone: whatever it did not reap (a stop that gave up) is killed here. */
	while ((w = rt->workers)) {
		rt->workers = w->next;
		if (w->pidfd >= 0) {
			kill(w->pid, SIGKILL);
			waitid(P_PIDFD, (id_t)w->pidfd, &(siginfo_t){0}, WEXITED);
			close(w->pidfd);
		}
		ferry__free(w);
	}
	while ((req = rt->queue)) {
		rt->queue = req->next;
		ferry__rt_req_free(req);
	}
	ferry__rt_code_free(rt);
	ferry__rt_bundle_free_all(rt);
	ferry__rt_sched_fini(rt);
	ferry__rt_admin_free(rt);
	if (rt->listening)
		unlink(rt->path); /* the listener removes it at close; a loop destroyed first does not */
	ferry__fb_builder_fini(&rt->fb);
	pthread_cond_destroy(&rt->reaped);
	ferry__free(rt);
	node->rt = NULL;
}

const char *ferry__node_runtime_socket(const struct ferry__node *node)
{
	return node->rt ? node->rt->path : NULL;
}
