/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection server: listen on TCP or a Unix path, accept with one multishot accept, and
 * hold each new connection until its Handshake passed before the user sees it.
 *
 * DESIGN
 * Loop thread only. An accepted socket becomes a connection owned by the server (conn->server
 * set, no user callbacks) and joins the server's list of handshaking connections, with a
 * deadline. Its first frame must be a Handshake; the check is ferry__wire_check_handshake()
 * against the server's token and FERRY_WIRE_PROTOCOL_VERSION (or the user's check). Passed: a
 * HandshakeReply with status 0 is queued, the connection leaves the list, gets the server's
 * connection callbacks and goes to on_accept. Refused: a HandshakeReply carrying the error is
 * flushed, then the connection closes and on_refused reports why; the server keeps serving.
 * A connection that passed may still be refused by the user's admit hook (a server at its
 * client limit), the same way.
 * Before the Handshake passed, a connection's frames are capped at handshake_max_bytes (a
 * larger header is refused before anything is allocated for it) and at most max_handshaking
 * connections wait at once: a new one past that closes the oldest (-EBUSY). Warnings about a
 * peer are rate-limited per host (common/log.h), so a flood logs a few lines and a count.
 * Closing the server cancels the accept, closes the handshaking connections and frees the server
 * once the accept completed and the list is empty (connections report to it until then).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn_int.h"
#include "common/log.h"
#include "common/net.h"
#include "common/util.h"

#define ACCEPT_RETRY_MS 100u

struct ferry__conn_server {
	struct ferry__loop *loop;	     /* the loop it lives on */
	struct ferry__conn_server_opts opts; /* copy; opts.token points to token below */
	int fd;				     /* listening socket */
	uint16_t port;			     /* bound TCP port, 0 for Unix */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* Unix path to remove, or "" */
	char name[80];						/* for logs */
	struct ferry__loop_req accept_req;			/* the multishot accept */
	struct ferry__loop_timer timer;	 /* accept retry after an error; deferred free */
	struct ferry__conn *handshaking; /* connections waiting for their Handshake, newest first */
	unsigned handshaking_count;	 /* entries in that list */
	bool closing;			 /* ferry__conn_server_close() or loop destroy */
	uint8_t token[];		 /* copy of the cluster token */
};

static void on_accept(struct ferry__loop_req *req, int result);

static void try_free(struct ferry__conn_server *server)
{
	if (!server->closing || ferry__loop_req_pending(&server->accept_req) ||
	    server->handshaking || ferry__loop_timer_active(&server->timer))
		return;
	close(server->fd);
	FLOG_DEBUG(CONN_LOG, "server %s closed", server->name);
	ferry__free(server);
}

static void begin_close(struct ferry__conn_server *server)
{
	struct ferry__conn *conn;

	if (server->closing)
		return;
	server->closing = true;
	if (server->path[0])
		unlink(server->path);
	if (ferry__loop_req_pending(&server->accept_req))
		(void)ferry__loop_cancel(&server->accept_req);
	for (conn = server->handshaking; conn; conn = conn->srv_next)
		ferry__conn_abort(conn, -ECANCELED);
}

static void on_timer(struct ferry__loop_timer *timer, int status)
{
	struct ferry__conn_server *server = timer->data;
	int ret;

	if (status == 0 && !server->closing) {
		ret = ferry__loop_accept(server->loop, &server->accept_req, server->fd, on_accept);
		if (ret == 0)
			return;
		FLOG_ERROR(CONN_LOG, "server %s: cannot accept: %s", server->name,
			   ferry_strerror(ret));
	}
	begin_close(server);
	try_free(server);
}

void ferry__conn_server_close(struct ferry__conn_server *server)
{
	if (!server || server->closing)
		return;
	begin_close(server);
	/* Free from the loop, not inside this call (it may run in a callback of the server). */
	if (ferry__loop_timer_start(server->loop, &server->timer, 0, 0, on_timer) < 0)
		try_free(server);
}

static int send_reply(struct ferry__conn_server *server, struct ferry__conn *conn, int status)
{
	struct ferry__wire_handshake_reply reply = {
		.status = status,
		.server_id = server->opts.server_id,
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.server_kind = server->opts.server_kind,
	};
	struct ferry__fb_builder b;
	int ret;

	ferry__fb_builder_init(&b);
	ret = ferry__wire_handshake_reply_build(&b, &reply);
	if (ret == 0)
		ret = ferry__conn_send(conn, FERRY__WIRE_MSG_HANDSHAKE_REPLY,
				       ferry__fb_builder_data(&b), ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	return ret;
}

static void unlink_handshaking(struct ferry__conn_server *server, struct ferry__conn *conn)
{
	if (conn->srv_prev)
		conn->srv_prev->srv_next = conn->srv_next;
	else
		server->handshaking = conn->srv_next;
	if (conn->srv_next)
		conn->srv_next->srv_prev = conn->srv_prev;
	conn->srv_prev = conn->srv_next = NULL;
	conn->server = NULL;
	server->handshaking_count--;
}

/* Hand a connection to the user: callbacks from the options, then on_accept. */
static void deliver(struct ferry__conn_server *server, struct ferry__conn *conn,
		    const void *handshake, size_t len)
{
	ferry__conn_set_callbacks(conn, server->opts.conn.cb, server->opts.conn.data);
	server->opts.on_accept(server, conn, handshake, len);
	if (!conn->cb || !conn->cb->on_message || !conn->cb->on_close) {
		FLOG_ERROR(CONN_LOG, "server %s: on_accept left %s without callbacks; closing it",
			   server->name, conn->peer);
		conn->cb = NULL;
		ferry__conn_abort(conn, -EINVAL);
	}
}

void ferry__conn_server_handshake(struct ferry__conn *conn, uint16_t type, const void *payload,
				  size_t len)
{
	struct ferry__conn_server *server = conn->server;
	int ret;

	if (type != FERRY__WIRE_MSG_HANDSHAKE) {
		FLOG_PEER_WARN(CONN_LOG, conn->peer, "server %s: %s sent %s before its Handshake",
			       server->name, conn->peer, ferry__wire_message_name(type));
		ret = -EPROTO;
	} else if (server->opts.check_handshake) {
		ret = server->opts.check_handshake(server, payload, len);
	} else {
		ret = ferry__wire_check_handshake(payload, len, server->token,
						  server->opts.token_len,
						  FERRY_WIRE_PROTOCOL_VERSION);
	}
	if (ret == 0 && server->opts.admit) {
		ret = server->opts.admit(server, conn);
		if (ret < 0) { /* logged by the hook */
			(void)send_reply(server, conn, ret);
			ferry__conn_flush_close(conn, ret);
			return;
		}
	}
	if (ret == 0)
		ret = send_reply(server, conn, 0);
	if (ret < 0) {
		FLOG_PEER_WARN(CONN_LOG, conn->peer, "server %s: refusing %s: %s", server->name,
			       conn->peer, ferry_strerror(ret));
		(void)send_reply(server, conn, ret);
		ferry__conn_flush_close(conn, ret);
		return;
	}
	ferry__conn_accepted(conn);
	/* Authenticated: from here on frames may be as large as the connection allows. */
	conn->parser.max_length = conn->max_message;
	unlink_handshaking(server, conn);
	deliver(server, conn, payload, len);
}

void ferry__conn_server_forget(struct ferry__conn *conn)
{
	struct ferry__conn_server *server = conn->server;
	int err = conn->close_err;

	unlink_handshaking(server, conn);
	/* -ECANCELED: the loop is being destroyed, not a refusal. */
	if (!server->closing && err != -ECANCELED && server->opts.on_refused)
		server->opts.on_refused(server, err ? err : -ECONNRESET);
	try_free(server);
}

/*
 * Unauthenticated connections are capped in number: at the cap, the oldest one is closed to make
 * room. Refusing the newest instead would let a flood of idle connections lock every legitimate
 * client out until the handshake deadline; a real client sends its Handshake at once, so it is
 * never the oldest for long.
 */
static void make_room(struct ferry__conn_server *server)
{
	unsigned max = server->opts.max_handshaking ? server->opts.max_handshaking
						    : FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING;
	struct ferry__conn *oldest = server->handshaking;
	unsigned live = 0;

	for (struct ferry__conn *c = server->handshaking; c; c = c->srv_next) {
		if (c->state < CONN_FLUSHING) {
			live++;
			oldest = c;
		}
	}
	if (live < max || !oldest)
		return;
	FLOG_PEER_WARN(CONN_LOG, oldest->peer,
		       "server %s: %u connections without a handshake; closing the oldest (%s)",
		       server->name, live, oldest->peer);
	ferry__conn_abort(oldest, -EBUSY);
}

static void new_connection(struct ferry__conn_server *server, int fd)
{
	bool handshake = !(server->opts.flags & FERRY_CONN_SERVER_NO_HANDSHAKE);
	struct ferry__conn *conn;
	int ret;

	ferry__net_tune(fd);
	ret = ferry__conn_new(server->loop, &server->opts.conn, fd, &conn);
	if (ret < 0) {
		FLOG_WARN(CONN_LOG, "server %s: dropping a connection: %s", server->name,
			  ferry_strerror(ret));
		close(fd);
		if (server->opts.on_refused)
			server->opts.on_refused(server, ret);
		return;
	}
	ferry__conn_set_limits(conn, &server->opts.conn, true);
	if (!handshake) {
		ferry__conn_begin(conn, false);
		deliver(server, conn, NULL, 0);
		return;
	}
	make_room(server);
	conn->cb = NULL;
	conn->server = server;
	conn->timeout_ms =
		server->opts.handshake_timeout_ms ? server->opts.handshake_timeout_ms : 10000u;
	/* Before the token is checked, a frame may only be as large as a Handshake needs. */
	conn->parser.max_length = server->opts.handshake_max_bytes
					  ? server->opts.handshake_max_bytes
					  : FERRY_CONN_SERVER_DEFAULT_HANDSHAKE_MAX_BYTES;
	if (conn->parser.max_length > conn->max_message)
		conn->parser.max_length = conn->max_message;
	conn->srv_next = server->handshaking;
	if (server->handshaking)
		server->handshaking->srv_prev = conn;
	server->handshaking = conn;
	server->handshaking_count++;
	ferry__conn_begin(conn, true);
}

static void on_accept(struct ferry__loop_req *req, int result)
{
	struct ferry__conn_server *server = req->data;

	if (ferry__loop_req_pending(req)) {
		if (server->closing)
			close(result);
		else
			new_connection(server, result);
		return;
	}
	if (!server->closing && result != -ECANCELED) {
		/* EMFILE, ENOBUFS...: back off instead of spinning, keep serving. */
		FLOG_WARN(CONN_LOG, "server %s: accept: %s; retrying in %u ms", server->name,
			  ferry_strerror(result), ACCEPT_RETRY_MS);
		if (ferry__loop_timer_start(server->loop, &server->timer, ACCEPT_RETRY_MS, 0,
					    on_timer) == 0)
			return;
	}
	begin_close(server);
	try_free(server);
}

static int server_start(struct ferry__loop *loop, const struct sockaddr_storage *addr,
			socklen_t len, const struct ferry__conn_server_opts *opts,
			struct ferry__conn_server **out)
{
	struct ferry__conn_server *server;
	int ret;

	server = ferry__calloc(1, sizeof(*server) + opts->token_len);
	if (!server)
		return -ENOMEM;
	server->loop = loop;
	server->opts = *opts;
	if (opts->token_len)
		memcpy(server->token, opts->token, opts->token_len);
	server->opts.token = server->token;
	server->accept_req.data = server->timer.data = server;
	ferry__net_describe((const struct sockaddr *)addr, len, server->name, sizeof(server->name));
	server->fd = ferry__net_listen_retry((const struct sockaddr *)addr, len, opts->backlog,
					     opts->bind_retry_ms);
	if (server->fd < 0) {
		ret = server->fd;
		goto err_free_server;
	}
	if (addr->ss_family != AF_UNIX) {
		struct sockaddr_storage bound;
		socklen_t bound_len = sizeof(bound);

		/* Name it by the port actually bound (port 0 asks the kernel for one). */
		if (getsockname(server->fd, (struct sockaddr *)&bound, &bound_len) == 0)
			ferry__net_describe((struct sockaddr *)&bound, bound_len, server->name,
					    sizeof(server->name));
	}
	ret = ferry__loop_accept(loop, &server->accept_req, server->fd, on_accept);
	if (ret < 0)
		goto err_close_fd;
	*out = server;
	return 0;

err_close_fd:
	close(server->fd);
	if (addr->ss_family == AF_UNIX)
		unlink(((const struct sockaddr_un *)addr)->sun_path);
err_free_server:
	ferry__free(server);
	return ret;
}

static int check_server_opts(const struct ferry__conn_server_opts *opts)
{
	const struct ferry__conn_callbacks *cb = opts ? opts->conn.cb : NULL;

	if (!opts || !opts->on_accept || (cb && (!cb->on_message || !cb->on_close)) ||
	    (opts->token_len && !opts->token)) {
		FLOG_ERROR(CONN_LOG, "server options need on_accept, complete connection callbacks "
				     "and a token buffer");
		return -EINVAL;
	}
	return 0;
}

int ferry__conn_server_listen_tcp(struct ferry__loop *loop, const char *host, uint16_t port,
				  const struct ferry__conn_server_opts *opts,
				  struct ferry__conn_server **out)
{
	struct sockaddr_storage addr;
	socklen_t len;
	int ret = check_server_opts(opts);

	if (ret == 0)
		ret = ferry__net_resolve(host, port, &addr, &len);
	if (ret == 0)
		ret = server_start(loop, &addr, len, opts, out);
	if (ret == 0) {
		ret = ferry__net_local_port((*out)->fd);
		(*out)->port = ret > 0 ? (uint16_t)ret : 0;
		ret = 0;
	}
	return ret;
}

int ferry__conn_server_listen_unix(struct ferry__loop *loop, const char *path,
				   const struct ferry__conn_server_opts *opts,
				   struct ferry__conn_server **out)
{
	struct sockaddr_storage addr;
	socklen_t len;
	int ret = check_server_opts(opts);

	if (ret == 0)
		ret = ferry__net_unix_addr(path, &addr, &len);
	if (ret == 0)
		ret = server_start(loop, &addr, len, opts, out);
	if (ret == 0)
		memcpy((*out)->path, path, strlen(path) + 1);
	return ret;
}

uint16_t ferry__conn_server_port(const struct ferry__conn_server *server)
{
	return server->port;
}

void *ferry__conn_server_data(const struct ferry__conn_server *server)
{
	return server->opts.data;
}

unsigned ferry__conn_server_fd_room(unsigned max_handshaking)
{
	rlim_t reserve =
		FERRY_CONN_SERVER_FD_RESERVE +
		(max_handshaking ? max_handshaking : FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING);
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT_MAX;
	if (rl.rlim_cur < 2 * reserve)
		return rl.rlim_cur / 2 ? (unsigned)(rl.rlim_cur / 2) : 1;
	return rl.rlim_cur - reserve > UINT_MAX ? UINT_MAX : (unsigned)(rl.rlim_cur - reserve);
}

void ferry__conn_client_cap_init(struct ferry__conn_client_cap *cap, unsigned configured,
				 unsigned max_handshaking, const char *comp)
{
	unsigned room = ferry__conn_server_fd_room(max_handshaking);

	*cap = (struct ferry__conn_client_cap){.max = configured ? configured : room};
	if (cap->max > room)
		FLOG_WARN(comp,
			  "--max-clients %u is past the %u clients the open-file limit leaves room "
			  "for: new connections may fail with EMFILE before the limit; raise the "
			  "hard limit (ulimit -Hn, systemd LimitNOFILE=)",
			  cap->max, room);
}

/* At the limit, one line per this at most: a flood of refusals is counted in the next line. */
#define CLIENT_CAP_LOG_MS 10000u

int ferry__conn_client_cap_admit(struct ferry__conn_client_cap *cap, const char *peer,
				 const char *comp)
{
	uint64_t now;

	if (cap->clients < cap->max)
		return 0;
	cap->refused++;
	now = ferry__now_ms();
	if (cap->logged_ms && now - cap->logged_ms < CLIENT_CAP_LOG_MS)
		return -EUSERS;
	FLOG_WARN(comp,
		  "%u clients connected, the limit (--max-clients %u): refusing new connections "
		  "(%s the latest; %llu refused since the last such line)",
		  cap->clients, cap->max, peer, (unsigned long long)cap->refused);
	cap->logged_ms = now;
	cap->refused = 0;
	return -EUSERS;
}
