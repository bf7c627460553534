/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker process's life (ferry-worker): its environment, its sockets, the node's messages
 * and the owners' tasks, on one loop.
 *
 * DESIGN
 * One thread, one ferry__loop. At start the worker serves its listen path (owners connect
 * there), then connects to the node's runtime socket and sends RuntimeConnect (kind Worker,
 * its ID and the secret the node gave it, its pid, the listen path); the node answers
 * RuntimeConnectReply, and once accepted the worker connects its plasma client (owner: its own
 * ID). The node then sends WorkerAssign (worker_assign.c) before the worker's first lease.
 * Owners holding a lease connect, send RuntimeConnect (kind Driver or Worker; frames capped at
 * 8 KiB until then) and PushTask frames; each task runs on the loop thread when its frame
 * arrives (worker_task.c), so a socket's tasks run in order, one task at a time in the whole
 * worker, and each is answered as it finishes; a task that waited in a get has the PushTasks
 * behind it bounced to their owner instead (worker.h, worker_owner.c). An owner on this host
 * offers a ring pair beside its socket (RingSetup, runtime/ring.h): the same frames then come
 * and go through shared memory too, in the same order, and reach the same on_message. A ref
 * argument's store get blocks the loop until the object is there: the node brings it, or
 * dies, which breaks the get.
 * A worker never outlives its node: when the node's socket closes the loop stops; SIGTERM and
 * SIGINT (blocked by main, read from a signalfd) stop it too. Then the loop is destroyed
 * (every connection closes), the listen path removed and the store disconnected.
 * Bad input from an owner (wrong first frame, a message that is not PushTask, a frame the
 * wire verifier refuses) closes that owner's socket with a log line; a PushTask that verifies
 * but makes no sense gets an error reply (worker_task.c).
 */
#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "runtime/dial.h"
#include "runtime/ring.h"
#include "runtime/worker.h"

#define COMP "worker"
#define STORE_WAIT_MS 5000u

/* An owner's connection. */
struct owner {
	struct ferry__worker *w;	    /* the worker */
	struct ferry__rt_ring *ring;	    /* beside the socket (runtime/ring.h), or NULL */
	struct ferry__worker_bounce bounce; /* what came behind a task that waited (worker.h) */
	bool greeted;			    /* its RuntimeConnect came */
};

/* ---- environment ---- */

static int env_path(const char *var, char *out, size_t size, char *err, size_t err_size)
{
	const char *v = getenv(var);

	if (!v || !v[0]) {
		snprintf(err, err_size, "%s is not set (ferry-worker is started by ferry-node)",
			 var);
		return -EINVAL;
	}
	if (strlen(v) >= size) {
		snprintf(err, err_size, "%s is longer than a Unix socket path may be (%zu bytes)",
			 var, size - 1);
		return -EINVAL;
	}
	memcpy(out, v, strlen(v) + 1);
	return 0;
}

/* The TCP endpoint's ip and token: both or neither (an older node sets neither). */
static int tcp_from_env(struct ferry__worker_opts *o, char *err, size_t err_size)
{
	const char *ip = getenv("FERRY_WORKER_IP"), *token = getenv("FERRY_WORKER_TOKEN");
	size_t n = token ? strlen(token) : 0;

	if ((!ip || !*ip) && !n)
		return 0;
	if (!ip || !*ip || strlen(ip) >= sizeof(o->ip) || !n || n % 2 || n / 2 > sizeof(o->token) ||
	    ferry_id_from_hex(token, o->token, n / 2) < 0) {
		snprintf(
			err, err_size,
			"FERRY_WORKER_IP and FERRY_WORKER_TOKEN (hex, up to %zu bytes) go together",
			sizeof(o->token));
		return -EINVAL;
	}
	snprintf(o->ip, sizeof(o->ip), "%s", ip);
	o->token_len = n / 2;
	return 0;
}

int ferry__worker_opts_from_env(struct ferry__worker_opts *o, char *err, size_t err_size)
{
	const char *id = getenv("FERRY_WORKER_ID"), *secret = getenv("FERRY_WORKER_SECRET");
	size_t n = secret ? strlen(secret) : 0;

	memset(o, 0, sizeof(*o));
	if (env_path("FERRY_NODE_RUNTIME_SOCKET", o->runtime_socket, sizeof(o->runtime_socket), err,
		     err_size) < 0 ||
	    env_path("FERRY_NODE_STORE_SOCKET", o->store_socket, sizeof(o->store_socket), err,
		     err_size) < 0)
		return -EINVAL;
	if (!id || ferry_worker_id_from_hex(id, &o->id) < 0 ||
	    ferry_id_is_nil(o->id.bytes, sizeof(o->id.bytes))) {
		snprintf(err, err_size, "FERRY_WORKER_ID is %s (want 32 hex digits, not all zero)",
			 id ? "not a worker ID" : "not set");
		return -EINVAL;
	}
	if (!n || n % 2 || n / 2 > sizeof(o->secret) ||
	    ferry_id_from_hex(secret, o->secret, n / 2) < 0) {
		snprintf(err, err_size, "FERRY_WORKER_SECRET is %s (want 2 to %zu hex digits)",
			 secret ? "not a secret" : "not set", 2 * sizeof(o->secret));
		return -EINVAL;
	}
	o->secret_len = n / 2;
	return tcp_from_env(o, err, err_size);
}

int ferry__worker_listen_path(const char *runtime_socket, const struct ferry_worker_id *id,
			      char *out, size_t size)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], hex[FERRY_ID_HEX_MAX];
	int n;

	snprintf(dir, sizeof(dir), "%s", runtime_socket);
	ferry_worker_id_to_hex(id, hex, sizeof(hex));
	n = snprintf(out, size, "%s/w-%s.sock", dirname(dir), hex);
	if (n < 0 || (size_t)n >= FERRY_MIN(size, sizeof(dir)))
		return -ENAMETOOLONG;
	return 0;
}

/* ---- state ---- */

void ferry__worker_init(struct ferry__worker *w, const struct ferry_worker_id *id)
{
	memset(w, 0, sizeof(*w));
	w->sig_fd = -1;
	w->id = *id;
	ferry_worker_id_to_hex(id, w->id_hex, sizeof(w->id_hex));
	snprintf(w->node_hex, sizeof(w->node_hex), "unknown");
	ferry__fb_builder_init(&w->fb);
}

void ferry__worker_fini(struct ferry__worker *w)
{
	ferry__fb_builder_fini(&w->fb);
}

static void stop(struct ferry__worker *w, int exit_code)
{
	if (w->stopping)
		return;
	w->stopping = true;
	w->exit_code = exit_code;
	ferry__loop_stop(w->loop);
}

static int send_built(struct ferry__worker *w, struct ferry__conn *conn, uint16_t type)
{
	return ferry__conn_send(conn, type, ferry__fb_builder_data(&w->fb),
				ferry__fb_builder_size(&w->fb));
}

/* ---- the node's socket ---- */

static int connect_store(struct ferry__worker *w)
{
	struct ferry_plasma_connect_opts po = {
		.name = "ferry-worker", .wait_ms = STORE_WAIT_MS, .owner = w->id};
	int ret = ferry_plasma_client_connect(w->opts->store_socket, &po, &w->store);

	if (ret < 0)
		FLOG_ERROR(COMP, "worker %s: cannot connect to the node's store %s: %s", w->id_hex,
			   w->opts->store_socket, ferry_strerror(ret));
	return ret;
}

static void on_connect_reply(struct ferry__worker *w, const void *payload)
{
	struct ferry__wire_runtime_connect_reply_view v =
		ferry__wire_runtime_connect_reply_root_verified(payload);
	struct ferry__wire_unique_id node = ferry__wire_runtime_connect_reply_node_id(v);
	int status = ferry__wire_runtime_connect_reply_status(v);
	const char *msg = ferry__wire_runtime_connect_reply_message(v);

	if (w->registered) {
		FLOG_WARN(COMP, "worker %s: a second RuntimeConnectReply from the node: ignored",
			  w->id_hex);
		return;
	}
	if (status < 0) {
		FLOG_ERROR(COMP, "worker %s: the node refused it: %s (%s)", w->id_hex,
			   msg ? msg : "no reason given", ferry_strerror(status));
		stop(w, 1);
		return;
	}
	memcpy(w->node_id.bytes, node.bytes, sizeof(node.bytes));
	ferry_node_id_to_hex(&w->node_id, w->node_hex, sizeof(w->node_hex));
	if (connect_store(w) < 0) {
		stop(w, 1);
		return;
	}
	w->registered = true;
	FLOG_INFO(COMP, "worker %s: registered with node %s, serving %s", w->id_hex, w->node_hex,
		  w->listen_path);
}

static void on_node_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	struct ferry__worker *w = ferry__conn_data(conn);
	int ret;

	switch (type) {
	case FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY:
		on_connect_reply(w, payload);
		return;
	case FERRY__WIRE_MSG_WORKER_ASSIGN:
		ret = ferry__worker_assign(w, payload, len);
		if (ret == 0)
			ret = send_built(w, conn, FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY);
		if (ret < 0)
			FLOG_ERROR(COMP, "worker %s: cannot answer WorkerAssign: %s", w->id_hex,
				   ferry_strerror(ret));
		return;
	default:
		FLOG_WARN(COMP, "worker %s: unexpected %s from the node: ignored", w->id_hex,
			  ferry__wire_message_name(type));
	}
}

static void on_node_close(struct ferry__conn *conn, int err)
{
	struct ferry__worker *w = ferry__conn_data(conn);

	w->node = NULL;
	if (w->stopping)
		return;
	if (!w->registered) {
		FLOG_ERROR(COMP,
			   "worker %s: the node's runtime socket %s closed before it accepted "
			   "this worker (%s)",
			   w->id_hex, w->opts->runtime_socket, ferry_strerror(err));
		stop(w, 1);
		return;
	}
	FLOG_INFO(COMP, "worker %s: the node closed its socket (%s): exiting", w->id_hex,
		  ferry_strerror(err));
	stop(w, 0);
}

static const struct ferry__conn_callbacks node_callbacks = {
	.on_message = on_node_message,
	.on_close = on_node_close,
};

static int connect_node(struct ferry__worker *w)
{
	struct ferry__conn_opts co = {.cb = &node_callbacks, .data = w};
	struct ferry__wire_runtime_connect m = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.kind = FERRY__WIRE_PEER_KIND_WORKER,
		.secret = w->opts->secret,
		.secret_count = w->opts->secret_len,
		.pid = (int32_t)getpid(),
		.listen_path = w->listen_path,
		.listen_port = w->tcp_server ? ferry__conn_server_port(w->tcp_server) : 0,
	};
	int ret;

	memcpy(m.id.bytes, w->id.bytes, sizeof(m.id.bytes));
	ret = ferry__wire_runtime_connect_build(&w->fb, &m);
	if (ret == 0)
		ret = ferry__conn_connect_unix(w->loop, w->opts->runtime_socket, &co, &w->node);
	if (ret == 0)
		ret = send_built(w, w->node, FERRY__WIRE_MSG_RUNTIME_CONNECT);
	if (ret < 0)
		FLOG_ERROR(COMP, "worker %s: cannot connect to the node's runtime socket %s: %s",
			   w->id_hex, w->opts->runtime_socket, ferry_strerror(ret));
	return ret;
}

/* ---- owners ---- */

int ferry__worker_check_connect(const void *payload, size_t len, char *why, size_t why_size)
{
	struct ferry__wire_runtime_connect_view v =
		ferry__wire_runtime_connect_root_verified(payload);
	uint32_t version = ferry__wire_runtime_connect_protocol_version(v);
	uint8_t kind = ferry__wire_runtime_connect_kind(v);

	(void)len;
	if (version != FERRY_WIRE_PROTOCOL_VERSION) {
		snprintf(why, why_size, "protocol version %u, this worker speaks %u", version,
			 FERRY_WIRE_PROTOCOL_VERSION);
		return -EPROTO;
	}
	if (kind != FERRY__WIRE_PEER_KIND_DRIVER && kind != FERRY__WIRE_PEER_KIND_WORKER) {
		snprintf(why, why_size, "peer kind %u: only drivers and workers push tasks", kind);
		return -EPROTO;
	}
	return 0;
}

/* The first frame: RuntimeConnect, or the socket closes. */
static void owner_greet(struct owner *o, struct ferry__conn *conn, uint16_t type,
			const void *payload, size_t len)
{
	char why[160];

	if (type != FERRY__WIRE_MSG_RUNTIME_CONNECT) {
		FLOG_WARN(COMP, "worker %s: owner %s sent %s before RuntimeConnect: closing",
			  o->w->id_hex, ferry__conn_peer(conn), ferry__wire_message_name(type));
		ferry__conn_close(conn);
		return;
	}
	if (ferry__worker_check_connect(payload, len, why, sizeof(why)) < 0) {
		FLOG_WARN(COMP, "worker %s: owner %s refused: %s", o->w->id_hex,
			  ferry__conn_peer(conn), why);
		ferry__conn_close(conn);
		return;
	}
	o->greeted = true;
	ferry__conn_set_frame_max(conn, 0);
}

int ferry__worker_owner_send(struct ferry__conn *conn, uint16_t type, const void *payload,
			     size_t len)
{
	struct owner *o = ferry__conn_data(conn);

	return ferry__rt_ring_send(o ? o->ring : NULL, conn, type, payload, len);
}

static void on_owner_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			     size_t len)
{
	struct owner *o = ferry__conn_data(conn);
	struct ferry__worker *w = o->w;
	uint16_t reply_type = FERRY__WIRE_MSG_PUSH_TASK_REPLY;
	int ret;

	if (!o->greeted) {
		owner_greet(o, conn, type, payload, len);
		return;
	}
	if (!ferry__rt_ring_on_socket(o->ring, conn, type))
		return;
	if (type == FERRY__WIRE_MSG_RING_SETUP) {
		(void)ferry__rt_ring_accept(w->loop, conn, payload, len, on_owner_message,
					    &o->ring);
		return;
	}
	if (ferry__worker_graph_is_message(type)) {
		if (ferry__worker_graph_message(w, conn, type, payload, len) < 0)
			ferry__conn_close(conn); /* logged: the peer broke the protocol */
		return;
	}
	if (ferry__worker_actor_is_message(type)) {
		ret = ferry__worker_actor_message(w, conn, type, payload, len, &reply_type);
	} else if (type == FERRY__WIRE_MSG_PUSH_TASK) {
		ret = ferry__worker_push_or_bounce(w, &o->bounce, conn, payload, len);
	} else if (type == FERRY__WIRE_MSG_TASKS_RECALLED) {
		ferry__worker_tasks_recalled(&o->bounce, payload);
		return;
	} else {
		FLOG_WARN(COMP, "worker %s: owner %s sent %s, not a PushTask: closing", w->id_hex,
			  ferry__conn_peer(conn), ferry__wire_message_name(type));
		ferry__conn_close(conn);
		return;
	}
	if (ret == 0)
		ret = ferry__rt_ring_send(o->ring, conn, reply_type, ferry__fb_builder_data(&w->fb),
					  ferry__fb_builder_size(&w->fb));
	if (ret < 0 && ret != -ENOTCONN) {
		FLOG_ERROR(COMP, "worker %s: cannot answer owner %s's task: %s: closing", w->id_hex,
			   ferry__conn_peer(conn), ferry_strerror(ret));
		ferry__conn_close(conn);
	}
}

static void on_owner_close(struct ferry__conn *conn, int err)
{
	struct owner *o = ferry__conn_data(conn);

	if (err && err != -ECONNRESET && err != -ECANCELED)
		FLOG_INFO(COMP, "worker %s: owner %s closed: %s", o->w->id_hex,
			  ferry__conn_peer(conn), ferry_strerror(err));
	ferry__worker_graph_conn_closed(o->w, conn);
	ferry__rt_ring_close(o->ring);
	ferry__worker_actor_conn_closed(o->w, conn);
	ferry__free(o);
}

static const struct ferry__conn_callbacks owner_callbacks = {
	.on_message = on_owner_message,
	.on_close = on_owner_close,
};

static void on_accept(struct ferry__conn_server *server, struct ferry__conn *conn,
		      const void *handshake, size_t len)
{
	struct ferry__worker *w = ferry__conn_server_data(server);
	struct owner *o = ferry__calloc(1, sizeof(*o));

	(void)handshake;
	(void)len;
	if (!o) {
		FLOG_ERROR(COMP, "worker %s: out of memory for a new owner: closing it", w->id_hex);
		ferry__conn_close(conn);
		return;
	}
	o->w = w;
	ferry__conn_set_callbacks(conn, &owner_callbacks, o);
	ferry__conn_set_frame_max(conn, FERRY__WORKER_CONNECT_MAX);
}

/* Closes the connection at once if it never got its callbacks (on_accept's allocation). */
static void on_early_close(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
}

static void on_early_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			     size_t len)
{
	(void)type;
	(void)payload;
	(void)len;
	ferry__conn_close(conn);
}

static const struct ferry__conn_callbacks early_callbacks = {
	.on_message = on_early_message,
	.on_close = on_early_close,
};

static int listen_owners(struct ferry__worker *w)
{
	struct ferry__conn_server_opts so = {
		.conn = {.cb = &early_callbacks, .max_message_bytes = FERRY__WORKER_FRAME_MAX},
		.on_accept = on_accept,
		.data = w,
		.server_kind = FERRY__WIRE_PEER_KIND_WORKER,
		.flags = FERRY_CONN_SERVER_NO_HANDSHAKE,
	};
	int ret;

	memcpy(so.server_id.bytes, w->id.bytes, sizeof(so.server_id.bytes));
	ret = ferry__conn_server_listen_unix(w->loop, w->listen_path, &so, &w->server);
	if (ret < 0)
		FLOG_ERROR(COMP, "worker %s: cannot listen on %s: %s", w->id_hex, w->listen_path,
			   ferry_strerror(ret));
	if (ret < 0 || !w->opts->ip[0])
		return ret;
	/* Owners on other hosts: the same server behind the cluster token's Handshake (its
	 * refusals are logged per peer, its waiting connections capped: common/conn.h). */
	so.flags = 0;
	so.token = w->opts->token;
	so.token_len = w->opts->token_len;
	ret = ferry__conn_server_listen_tcp(w->loop, w->opts->ip, 0, &so, &w->tcp_server);
	if (ret < 0)
		FLOG_ERROR(COMP, "worker %s: cannot listen on %s (TCP): %s", w->id_hex, w->opts->ip,
			   ferry_strerror(ret));
	return ret;
}

/* ---- signals ---- */

static void on_signal(struct ferry__loop_req *req, int result)
{
	struct ferry__worker *w = req->data;
	struct signalfd_siginfo si;

	if (result < 0)
		return;
	if (read(w->sig_fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		si.ssi_signo = 0;
	FLOG_INFO(COMP, "worker %s: %s: exiting", w->id_hex,
		  si.ssi_signo ? strsignal((int)si.ssi_signo) : "signal");
	stop(w, 0);
}

static int watch_signals(struct ferry__worker *w)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	w->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (w->sig_fd < 0)
		return -errno;
	w->sig_req.data = w;
	return ferry__loop_poll(w->loop, &w->sig_req, w->sig_fd, POLLIN, false, on_signal);
}

/* ---- the run ---- */

static int start(struct ferry__worker *w)
{
	int ret = ferry__worker_listen_path(w->opts->runtime_socket, &w->id, w->listen_path,
					    sizeof(w->listen_path));

	if (ret < 0) {
		FLOG_ERROR(COMP,
			   "worker %s: its socket beside %s would be longer than a Unix "
			   "socket path may be",
			   w->id_hex, w->opts->runtime_socket);
		return ret;
	}
	ret = ferry__loop_create(&(struct ferry__loop_opts){.spin_us = ferry__rt_ring_spin_us()},
				 &w->loop);
	if (ret < 0) {
		FLOG_ERROR(COMP, "worker %s: no event loop: %s", w->id_hex, ferry_strerror(ret));
		return ret;
	}
	ret = watch_signals(w);
	if (ret < 0)
		FLOG_ERROR(COMP, "worker %s: cannot watch signals: %s", w->id_hex,
			   ferry_strerror(ret));
	if (ret == 0)
		ret = ferry__rt_dial_setup(w->opts->token, w->opts->token_len);
	if (ret == 0)
		ret = listen_owners(w);
	if (ret == 0)
		ret = connect_node(w);
	return ret;
}

int ferry__worker_run(const struct ferry__worker_opts *o)
{
	struct ferry__worker w;
	int ret;

	ferry__worker_init(&w, &o->id);
	w.opts = o;
	ret = start(&w);
	if (ret == 0)
		ret = ferry__loop_run(w.loop);
	if (ret < 0)
		w.exit_code = 1;
	ferry__worker_owner_stop(); /* its leases back, its objects out of the store */
	w.stopping = true;	    /* the close callbacks destroy runs must not stop it again */
	/* Every connection and the server go with the loop; then the socket file. */
	ferry__loop_destroy(w.loop);
	ferry__worker_graph_fini(&w);
	ferry__worker_actor_fini(&w);
	if (w.server)
		unlink(w.listen_path);
	if (w.sig_fd >= 0)
		close(w.sig_fd);
	ferry_plasma_client_disconnect(w.store);
	ferry__worker_fini(&w);
	return w.exit_code;
}
