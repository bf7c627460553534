/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TCP engine, part one: the context, listeners, the connect and accept handshakes that group
 * sockets into endpoints, and the endpoint lifecycle (failure, teardown, freeing). Frames,
 * the receive and send paths and the transfer calls are in tcp_io.c.
 *
 * DESIGN
 *
 * Threads. Everything runs on the loop's thread: the public calls and every loop completion
 * (connect, recv, send, zero-copy send and its notification, timers).
 *
 * Wire. Every frame is the common 8-byte frame of every stream socket (tcp_int.h,
 * schema/transport.fbs): a control message (any MessageType but the engine's own; socket 0
 * only, so messages stay in order), DataChunk (a 16-byte {xfer, offset} struct, then the
 * bytes), TransferHandshake ("HELLO") and TransferHandshakeReply ("ACK"). A connecting endpoint
 * opens conns_per_peer sockets; each sends HELLO {protocol version, token, nonce, index,
 * count}. The listener checks the version and the token (constant time; a wrong one gets
 * ACK(EPROTO or EACCES), a log line and a close, and the listener keeps serving; a frame of
 * another framing, such as a protocol-2 peer's 24-byte 0xFC header, is logged and closed),
 * groups sockets by nonce, and once all `count` joined it sends ACK(0) on each and reports
 * the endpoint (on_connect). The connector reads one ACK per socket and leaves that socket's
 * receive unarmed until all are in, so no message can overtake its on_connect.
 *
 * Receive. Each socket keeps one recv pending, always for an exact piece with MSG_WAITALL: a
 * header into the socket, then the payload into its destination: a MSG into the endpoint's
 * message buffer (after a copy of its header: the callback gets the whole frame), a DATA
 * frame's struct into the socket, then its bytes straight into expect()'s buffer at its
 * offset (after checking
 * offset + length against that buffer), or, for a transfer nobody expects, into the context's
 * scratch buffer (drained and dropped). Short reads resume where they stopped.
 *
 * Polled receive (opts.poll_us, for a loop that busy-polls). An endpoint's control socket
 * (socket 0), between frames or inside a control message, is not armed in the ring: it goes on
 * the context's polled list, and ferry__tcp_poll(), the loop's poller, reads it with
 * recv(MSG_DONTWAIT) on every spin pass. Before the loop sleeps, and for a socket quiet for
 * poll_us while the loop spins on for others, the receive goes back to the ring, which wakes
 * the loop for the next frame. Data payloads keep the ring (straight into their buffers, with
 * MSG_WAITALL). Why: a spinning loop then takes a frame off the socket on its next spin pass,
 * skipping the ring's task-work round per frame (~0.3 us in a loopback ping-pong: 8.1 us with
 * epoll and recv, 8.4 us with an io_uring recv, 7.0-7.7 us with recv).
 *
 * Send. Socket 0 carries control frames in order (queued copies). Data is pulled: a socket
 * with no send stage running takes the next chunk of the oldest unfinished send_data() into
 * one of its TCP_CHUNK_SLOTS slots and sends header + payload with one sendmsg (SENDMSG_ZC
 * from zc_threshold up). The socket is free again at the send result; the slot, and the source
 * bytes, only at the zero-copy notification. A transfer completes when every chunk's slot came
 * back, so send_data's callback means the kernel no longer reads the source.
 *
 * Backpressure (opts.max_queued_bytes). Control frames queued on an endpoint are copies in
 * our heap; a peer that pipelines requests and never reads the replies would grow them
 * without bound. Past the cap, the control socket's next header is not read after a message
 * (ep->rx_held) until sent frames bring the queue below it; past it for stall_timeout_ms the
 * endpoint fails with -ETIMEDOUT. Data transfers send from the caller's buffer and are not
 * counted (their own deadline bounds them).
 *
 * Transfers. Each has a deadline timer and counts the kernel requests using its buffer
 * (inflight). Deciding a transfer's status (done, cancelled, timed out, endpoint failed) takes
 * it out of the expect table; its callback runs once inflight is 0, from a completion or the
 * endpoint's 0 ms "kick" timer (never from inside a submitting call). A deadline while bytes are
 * in flight tears the endpoint down: a pending recv into the buffer cannot be recalled.
 *
 * Failure. ferry__tcp_ep_fail() records the first reason, shuts every socket down (pending
 * receives return, blocked sends fail) and cancels their requests, and decides every transfer
 * (-ECONNRESET after a timeout teardown, else the reason). Settling, at the end of every entry
 * point, runs due callbacks, closes each socket once its receive/send/connect ended (SO_LINGER 0
 * first when zero-copy notifications are outstanding, so a peer that stopped reading cannot
 * hold them), calls on_close (or on_connect with the error) once every transfer got its
 * callback, and frees a destroyed endpoint once the kernel owes it nothing.
 *
 * Lifetime. Callbacks may destroy endpoints: entry points count ep->busy and nothing is freed
 * while it is non-zero. A destroyed endpoint, listener or pending socket whose requests are
 * still pending stays allocated until their completions arrive (a later run, or loop destroy);
 * the context is freed by the last of them if ferry__tcp_ctx_destroy() came first.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/net.h"
#include "common/util.h"
#include "transport/tcp_int.h"

#define DEFAULT_CONNS 4
#define DEFAULT_CHUNK (1u << 20)
#define DEFAULT_ZC (64u << 10)
#define DEFAULT_MAX_MSG (1u << 20)
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_OP_TIMEOUT_MS 30000

/* ---- context ---- */

static void ctx_free(struct ferry__tcp_ctx *ctx)
{
	ferry__free(ctx->token);
	ferry__free(ctx->scratch);
	ferry__free(ctx);
}

static void ctx_put(struct ferry__tcp_ctx *ctx)
{
	ctx->live--;
	if (ctx->destroyed && ctx->live == 0)
		ctx_free(ctx);
}

static int check_opts(const struct ferry__tcp_ctx_opts *o)
{
	if (!o || !o->loop) {
		FLOG_ERROR(TCP_LOG, "context options without a loop");
		return -EINVAL;
	}
	/* Polled sockets are read only by the poller of a spinning loop: on a loop that always
	 * sleeps their receives would never run. */
	if (o->poll_us && !ferry__loop_spin_us(o->loop)) {
		FLOG_ERROR(TCP_LOG, "polled receive (%u us) on a loop without a busy-poll window",
			   o->poll_us);
		return -EINVAL;
	}
	if ((o->flags & ~FERRY__TCP_ZC_LOCAL) || o->conns_per_peer > FERRY__TCP_MAX_CONNS ||
	    o->chunk_size > FERRY__TCP_MAX_CHUNK || o->token_size > FERRY__TCP_TOKEN_MAX ||
	    (o->token_size && !o->token)) {
		FLOG_ERROR(TCP_LOG,
			   "bad options: conns_per_peer %u (max %d), chunk_size %u (max %u), "
			   "token of %zu bytes (max %d), flags 0x%x",
			   o->conns_per_peer, FERRY__TCP_MAX_CONNS, o->chunk_size,
			   FERRY__TCP_MAX_CHUNK, o->token_size, FERRY__TCP_TOKEN_MAX, o->flags);
		return -EINVAL;
	}
	return 0;
}

int ferry__tcp_ctx_create(const struct ferry__tcp_ctx_opts *opts, struct ferry__tcp_ctx **out)
{
	struct ferry__tcp_ctx *ctx;
	int ret = check_opts(opts);

	if (ret < 0)
		return ret;
	ctx = ferry__calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->scratch = ferry__malloc(TCP_SCRATCH_SIZE);
	ctx->token = ferry__malloc(opts->token_size ? opts->token_size : 1);
	if (!ctx->scratch || !ctx->token) {
		ctx_free(ctx);
		return -ENOMEM;
	}
	if (opts->token_size)
		memcpy(ctx->token, opts->token, opts->token_size);
	ctx->token_size = opts->token_size;
	ctx->loop = opts->loop;
	ctx->conns_per_peer = opts->conns_per_peer ? opts->conns_per_peer : DEFAULT_CONNS;
	ctx->chunk_size = opts->chunk_size ? opts->chunk_size : DEFAULT_CHUNK;
	ctx->zc_threshold = opts->zc_threshold ? opts->zc_threshold : DEFAULT_ZC;
	ctx->max_msg = opts->max_msg ? opts->max_msg : DEFAULT_MAX_MSG;
	ctx->connect_timeout_ms =
		opts->connect_timeout_ms ? opts->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	ctx->op_timeout_ms = opts->op_timeout_ms ? opts->op_timeout_ms : DEFAULT_OP_TIMEOUT_MS;
	ctx->max_queued = opts->max_queued_bytes ? opts->max_queued_bytes : SIZE_MAX;
	ctx->stall_timeout_ms = opts->max_queued_bytes ? opts->stall_timeout_ms : 0;
	ctx->sock_buf_bytes = (int)FERRY_MIN(opts->sock_buf_bytes, (uint32_t)INT32_MAX);
	ctx->flags = opts->flags;
	ctx->poll_ns = (uint64_t)opts->poll_us * 1000u;
	tcp_list_init(&ctx->polled);
	tcp_list_init(&ctx->eps);
	tcp_list_init(&ctx->listeners);
	*out = ctx;
	return 0;
}

void ferry__tcp_ctx_destroy(struct ferry__tcp_ctx *ctx)
{
	struct tcp_link *l, *next;

	if (!ctx)
		return;
	for (l = ctx->listeners.next; l != &ctx->listeners; l = next) {
		struct ferry__tcp_listener *lis =
			FERRY_CONTAINER_OF(l, struct ferry__tcp_listener, link);

		next = l->next;
		if (!lis->destroyed)
			ferry__tcp_listener_destroy(lis);
	}
	/* From the head each time: a transfer callback run by one destroy may destroy others. */
	for (l = ctx->eps.next; l != &ctx->eps;) {
		struct ferry__tcp_ep *ep = FERRY_CONTAINER_OF(l, struct ferry__tcp_ep, link);

		if (ep->destroyed) {
			l = l->next;
			continue;
		}
		ferry__tcp_ep_destroy(ep);
		l = ctx->eps.next;
	}
	ctx->destroyed = true;
	if (ctx->live == 0)
		ctx_free(ctx);
}

/* ---- sockets ---- */

static void tune(const struct ferry__tcp_ctx *ctx, int fd)
{
	int size = ctx->sock_buf_bytes;

	ferry__net_tune(fd);
	if (size && (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)) < 0 ||
		     setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)) < 0))
		FLOG_WARN(TCP_LOG, "socket buffers of %d bytes: %s", size, ferry_strerror(-errno));
}

static struct tcp_sock *sock_new(struct ferry__tcp_ctx *ctx, int fd)
{
	struct tcp_sock *sock = ferry__calloc(1, sizeof(*sock));

	if (!sock)
		return NULL;
	sock->ctx = ctx;
	sock->fd = fd;
	sock->msg_tail = &sock->msg_head;
	sock->rx_req.data = sock->tx_req.data = sock->connect_req.data = sock;
	sock->timer.data = sock;
	for (unsigned i = 0; i < TCP_CHUNK_SLOTS; i++) {
		sock->chunks[i].sock = sock;
		sock->chunks[i].req.data = &sock->chunks[i];
	}
	tcp_list_init(&sock->link);
	tcp_list_init(&sock->poll_link);
	return sock;
}

void ferry__tcp_sock_shut(struct tcp_sock *sock)
{
	if (sock->fd < 0 || sock->shut)
		return;
	sock->shut = true;
	ferry__tcp_sock_unpoll(sock); /* its receive ends here, as a pending one would */
	(void)shutdown(sock->fd, SHUT_RDWR);
	(void)ferry__loop_cancel_fd(sock->ctx->loop, sock->fd);
}

/* Close the fd of a shut socket once no receive, send stage or connect is pending. */
static void sock_close_when_idle(struct tcp_sock *sock)
{
	struct linger abort_linger = {.l_onoff = 1, .l_linger = 0};

	if (sock->fd < 0 || !sock->shut || !ferry__tcp_sock_closable(sock))
		return;
	for (unsigned i = 0; i < TCP_CHUNK_SLOTS; i++)
		if (sock->chunks[i].xfer) {
			(void)setsockopt(sock->fd, SOL_SOCKET, SO_LINGER, &abort_linger,
					 sizeof(abort_linger));
			break;
		}
	close(sock->fd);
	sock->fd = -1;
}

static void sock_free(struct tcp_sock *sock)
{
	(void)ferry__loop_timer_stop(&sock->timer);
	ferry__tcp_sock_unpoll(sock);
	ferry__tcp_sock_release(sock);
	ferry__free(sock);
}

/* ---- endpoints ---- */

static void on_kick(struct ferry__loop_timer *timer, int status);
static void on_ep_timer(struct ferry__loop_timer *timer, int status);
static void listener_maybe_free(struct ferry__tcp_listener *l);

static struct ferry__tcp_ep *ep_new(struct ferry__tcp_ctx *ctx, unsigned nsocks,
				    const struct ferry__tcp_ep_cbs *cbs, void *arg)
{
	struct ferry__tcp_ep *ep = ferry__calloc(1, sizeof(*ep) + nsocks * sizeof(ep->socks[0]));

	if (!ep)
		return NULL;
	ep->ctx = ctx;
	ep->cbs = *cbs;
	ep->arg = arg;
	ep->nsocks = nsocks;
	ep->timer.data = ep->kick.data = ep;
	ep->stall.data = ep;
	ferry__hashmap_init(&ep->expects, sizeof(uint64_t), sizeof(void *));
	tcp_list_init(&ep->link);
	tcp_list_init(&ep->rx_xfers);
	tcp_list_init(&ep->tx_xfers);
	tcp_list_init(&ep->ready);
	tcp_list_init(&ep->draining);
	snprintf(ep->peer, sizeof(ep->peer), "?");
	ctx->live++;
	return ep;
}

/* Free an endpoint the kernel owes nothing (every socket quiet). */
static void ep_free(struct ferry__tcp_ep *ep)
{
	struct ferry__tcp_ctx *ctx = ep->ctx;
	struct ferry__tcp_listener *l = ep->listener;

	(void)ferry__loop_timer_stop(&ep->timer);
	(void)ferry__loop_timer_stop(&ep->kick);
	(void)ferry__loop_timer_stop(&ep->stall);
	for (unsigned i = 0; i < ep->nsocks; i++)
		if (ep->socks[i])
			sock_free(ep->socks[i]);
	ferry__hashmap_fini(&ep->expects);
	ferry__free(ep->msg_buf);
	tcp_list_del(&ep->link);
	ferry__free(ep);
	if (l)
		listener_maybe_free(l);
	ctx_put(ctx);
}

static bool ep_quiet(const struct ferry__tcp_ep *ep)
{
	for (unsigned i = 0; i < ep->nsocks; i++)
		if (ep->socks[i] && !ferry__tcp_sock_quiet(ep->socks[i]))
			return false;
	return true;
}

void ferry__tcp_ep_kick(struct ferry__tcp_ep *ep)
{
	if (!ferry__loop_timer_active(&ep->kick))
		(void)ferry__loop_timer_start(ep->ctx->loop, &ep->kick, 0, 0, on_kick);
}

static void on_kick(struct ferry__loop_timer *timer, int status)
{
	struct ferry__tcp_ep *ep = timer->data;

	(void)status; /* -ECANCELED at loop destroy: settling is still right */
	ferry__tcp_ep_settle(ep);
}

void ferry__tcp_ep_fail(struct ferry__tcp_ep *ep, int reason)
{
	int xfer_status = reason == -ETIMEDOUT ? -ECONNRESET : reason;

	if (ep->state == EP_FAILED)
		return;
	ep->state = EP_FAILED;
	ep->reason = reason;
	if (ep->listener)
		ep->destroyed = true; /* still forming: nobody was told about it */
	(void)ferry__loop_timer_stop(&ep->timer);
	(void)ferry__loop_timer_stop(&ep->stall);
	for (unsigned i = 0; i < ep->nsocks; i++)
		if (ep->socks[i])
			ferry__tcp_sock_shut(ep->socks[i]);
	while (!tcp_list_empty(&ep->rx_xfers))
		ferry__tcp_xfer_decide(FERRY_CONTAINER_OF(ep->rx_xfers.next, struct tcp_xfer, link),
				       xfer_status);
	while (!tcp_list_empty(&ep->tx_xfers))
		ferry__tcp_xfer_decide(FERRY_CONTAINER_OF(ep->tx_xfers.next, struct tcp_xfer, link),
				       xfer_status);
	ferry__tcp_ep_kick(ep);
}

/* The last callback of a failed endpoint, once every transfer got its own. */
static void ep_notify(struct ferry__tcp_ep *ep)
{
	if (ep->notified || !tcp_list_empty(&ep->ready) || !tcp_list_empty(&ep->draining))
		return;
	ep->notified = true;
	if (ep->destroyed)
		return;
	if (ep->reported) {
		if (ep->cbs.on_close)
			ep->cbs.on_close(ep, ep->reason, ep->arg);
	} else {
		ep->cbs.on_connect(ep, ep->reason, ep->arg);
	}
}

void ferry__tcp_ep_settle(struct ferry__tcp_ep *ep)
{
	if (ep->busy)
		return;
	ep->busy++;
	ferry__tcp_run_ready(ep);
	if (ep->state == EP_FAILED) {
		for (unsigned i = 0; i < ep->nsocks; i++)
			if (ep->socks[i])
				sock_close_when_idle(ep->socks[i]);
		ep_notify(ep);
	}
	ep->busy--;
	if (ep->destroyed && ep->state == EP_FAILED && ep->busy == 0 &&
	    tcp_list_empty(&ep->ready) && tcp_list_empty(&ep->draining) && ep_quiet(ep))
		ep_free(ep);
}

void ferry__tcp_ep_destroy(struct ferry__tcp_ep *ep)
{
	if (!ep || ep->destroyed)
		return;
	ep->destroyed = true;
	ep->notified = true;
	ep->busy++;
	ferry__tcp_ep_fail(ep, -ECANCELED);
	ferry__tcp_run_ready(ep);
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

void ferry__tcp_ep_set_arg(struct ferry__tcp_ep *ep, void *arg)
{
	ep->arg = arg;
}

void *ferry__tcp_ep_arg(const struct ferry__tcp_ep *ep)
{
	return ep->arg;
}

unsigned ferry__tcp_ep_socks(const struct ferry__tcp_ep *ep)
{
	return ep->nsocks;
}

/* Is the peer of connected socket @fd on this host (its address is one of ours)? */
static bool peer_is_local(int fd)
{
	struct sockaddr_storage me, peer;
	socklen_t me_len = sizeof(me), peer_len = sizeof(peer);

	if (getsockname(fd, (struct sockaddr *)&me, &me_len) < 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &peer_len) < 0)
		return false;
	if (me.ss_family == AF_INET && peer.ss_family == AF_INET)
		return ((struct sockaddr_in *)&me)->sin_addr.s_addr ==
		       ((struct sockaddr_in *)&peer)->sin_addr.s_addr;
	if (me.ss_family == AF_INET6 && peer.ss_family == AF_INET6)
		return !memcmp(&((struct sockaddr_in6 *)&me)->sin6_addr,
			       &((struct sockaddr_in6 *)&peer)->sin6_addr, sizeof(struct in6_addr));
	return me.ss_family == AF_UNIX;
}

/* Every socket has its ACK: receive normally, send what was queued, report. */
static void ep_established(struct ferry__tcp_ep *ep)
{
	int ret = 0;

	ep->state = EP_OPEN;
	(void)ferry__loop_timer_stop(&ep->timer);
	if (!(ep->ctx->flags & FERRY__TCP_ZC_LOCAL) && peer_is_local(ep->socks[0]->fd)) {
		FLOG_DEBUG(TCP_LOG, "%s: peer on this host: copying sends", ep->peer);
		ep->no_zc = true;
	}
	for (unsigned i = 0; i < ep->nsocks && ret == 0; i++)
		ret = ferry__tcp_rx_arm_hdr(ep->socks[i]);
	if (ret < 0) {
		ferry__tcp_ep_fail(ep, ret);
		return;
	}
	ep->listener = NULL; /* accepted: reported from now on, not silently dropped */
	ep->reported = true;
	ferry__tcp_tx_kick_all(ep);
	ep->cbs.on_connect(ep, 0, ep->arg);
}

static void on_ep_timer(struct ferry__loop_timer *timer, int status)
{
	struct ferry__tcp_ep *ep = timer->data;

	ep->busy++;
	if (status == 0)
		FLOG_WARN(TCP_LOG, "%s: no handshake within %u ms", ep->peer, ep->timeout_ms);
	ferry__tcp_ep_fail(ep, status < 0 ? status : -ETIMEDOUT);
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

/* ---- handshake ---- */

/* An accepted socket is done for (refused, bad, timed out, or its listener went away). */
static void pending_close(struct tcp_sock *sock)
{
	struct ferry__tcp_listener *l = sock->listener;
	struct ferry__tcp_ctx *ctx = sock->ctx;

	(void)ferry__loop_timer_stop(&sock->timer);
	ferry__tcp_sock_shut(sock);
	sock_close_when_idle(sock);
	if (!ferry__tcp_sock_quiet(sock))
		return;
	tcp_list_del(&sock->link);
	sock_free(sock);
	ctx->live--; /* the listener still counts: the context outlives this */
	listener_maybe_free(l);
}

/* Refuse an accepted socket with ACK(@err): closed once the refusal went out. */
static void refuse(struct tcp_sock *sock, int err)
{
	sock->refusing = true;
	if (ferry__tcp_queue_ack(sock, err) < 0 || !sock->tx_busy)
		pending_close(sock);
}

void ferry__tcp_handshake_tx_done(struct tcp_sock *sock)
{
	if (sock->refusing || sock->shut)
		pending_close(sock);
}

static struct ferry__tcp_ep *find_forming(struct ferry__tcp_listener *l, uint64_t nonce)
{
	for (struct tcp_link *k = l->forming.next; k != &l->forming; k = k->next) {
		struct ferry__tcp_ep *ep = FERRY_CONTAINER_OF(k, struct ferry__tcp_ep, link);

		if (ep->nonce == nonce && ep->state == EP_FORMING)
			return ep;
	}
	return NULL;
}

static struct ferry__tcp_ep *forming_new(struct ferry__tcp_listener *l, struct tcp_sock *sock,
					 uint64_t nonce, unsigned count)
{
	struct ferry__tcp_ep *ep = ep_new(l->ctx, count, &l->cbs, l->arg);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!ep)
		return NULL;
	ep->state = EP_FORMING;
	ep->listener = l;
	ep->nonce = nonce;
	ep->timeout_ms = l->ctx->connect_timeout_ms;
	if (getpeername(sock->fd, (struct sockaddr *)&ss, &len) == 0)
		ferry__net_describe((struct sockaddr *)&ss, len, ep->peer, sizeof(ep->peer));
	tcp_list_add_tail(&l->forming, &ep->link);
	(void)ferry__loop_timer_start(l->ctx->loop, &ep->timer, l->ctx->connect_timeout_ms, 0,
				      on_ep_timer);
	return ep;
}

/* All sockets of a forming endpoint are in: acknowledge each, then report it. */
static void forming_complete(struct ferry__tcp_ep *ep)
{
	int ret = 0;

	for (unsigned i = 0; i < ep->nsocks && ret == 0; i++)
		ret = ferry__tcp_queue_ack(ep->socks[i], 0);
	if (ret < 0 || ep->state != EP_FORMING) {
		ferry__tcp_ep_fail(ep, ret < 0 ? ret : -ECONNRESET);
		return;
	}
	tcp_list_del(&ep->link);
	tcp_list_add_tail(&ep->ctx->eps, &ep->link);
	FLOG_DEBUG(TCP_LOG, "%s: endpoint of %u sockets accepted", ep->peer, ep->nsocks);
	ep_established(ep);
}

/* A socket's HELLO passed the token check: add it to the endpoint of its nonce. */
static void join(struct tcp_sock *sock, const struct ferry__tcp_hello *h)
{
	struct ferry__tcp_listener *l = sock->listener;
	unsigned index = h->index, count = h->count;
	struct ferry__tcp_ep *ep = find_forming(l, h->nonce);

	if (!ep && !(ep = forming_new(l, sock, h->nonce, count))) {
		pending_close(sock);
		return;
	}
	if (ep->nsocks != count || ep->socks[index]) {
		FLOG_WARN(TCP_LOG, "%s: HELLO with index %u of %u does not fit its endpoint",
			  ep->peer, index, count);
		pending_close(sock);
		return;
	}
	(void)ferry__loop_timer_stop(&sock->timer);
	tcp_list_del(&sock->link);
	sock->listener = NULL;
	sock->ep = ep;
	sock->index = index;
	ferry__free(sock->hello);
	sock->hello = NULL;
	ep->socks[index] = sock;
	l->ctx->live--; /* the endpoint accounts for it now */
	if (++ep->joined < ep->nsocks)
		return;
	ep->busy++;
	forming_complete(ep);
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

/* An accepted socket's peer as text, for its (per-peer rate-limited) warnings. */
static void sock_peer(const struct tcp_sock *sock, char *peer, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	snprintf(peer, size, "?");
	if (getpeername(sock->fd, (struct sockaddr *)&ss, &len) == 0)
		ferry__net_describe((struct sockaddr *)&ss, len, peer, size);
}

/* An accepted socket's TransferHandshake is in: check it and join its endpoint. */
static void hello_check(struct tcp_sock *sock)
{
	struct ferry__tcp_ctx *ctx = sock->ctx;
	struct ferry__tcp_hello h;
	char peer[64];

	sock_peer(sock, peer, sizeof(peer));
	if (ferry__tcp_hello_parse(sock->hello, sock->rx_want, &h) < 0) {
		FLOG_PEER_WARN(TCP_LOG, peer, "closing a connection from %s: malformed handshake",
			       peer);
		refuse(sock, -EPROTO);
		return;
	}
	if (h.version != FERRY_WIRE_PROTOCOL_VERSION) {
		FLOG_PEER_WARN(TCP_LOG, peer,
			       "refusing a connection from %s: protocol version %u, this side "
			       "speaks %u",
			       peer, h.version, FERRY_WIRE_PROTOCOL_VERSION);
		refuse(sock, -EPROTO);
		return;
	}
	if (!ferry__tcp_token_equal(ctx, h.token, h.token_len)) {
		FLOG_PEER_WARN(TCP_LOG, peer, "refusing a connection from %s: wrong cluster token",
			       peer);
		refuse(sock, -EACCES);
		return;
	}
	join(sock, &h);
}

/* An accepted socket's handshake header or payload arrived completely. */
static void hello_step(struct tcp_sock *sock)
{
	char peer[64];
	int ret;

	if (sock->rx_state == RX_HDR) {
		ret = ferry__tcp_handshake_hdr(sock, FERRY__TCP_HELLO);
		if (ret < 0) {
			sock_peer(sock, peer, sizeof(peer));
			FLOG_PEER_WARN(TCP_LOG, peer, "closing a connection from %s: %s", peer,
				       ferry__tcp_handshake_why(ret));
			pending_close(sock);
		}
		if (ret != 0)
			return;
	}
	hello_check(sock);
}

/* A connecting socket's TransferHandshakeReply header or payload arrived completely. */
static void ack_step(struct tcp_sock *sock)
{
	struct ferry__tcp_ep *ep = sock->ep;
	int ret;

	if (sock->rx_state == RX_HDR) {
		ret = ferry__tcp_handshake_hdr(sock, FERRY__TCP_ACK);
		if (ret < 0) {
			FLOG_ERROR(TCP_LOG, "%s: the listener did not answer the handshake: %s",
				   ep->peer, ferry__tcp_handshake_why(ret));
			ferry__tcp_ep_fail(ep, ret == -ENOMEM ? ret : -EPROTO);
		}
		if (ret != 0)
			return;
	}
	ret = ferry__tcp_ack_parse(sock->hello, sock->rx_want);
	ferry__free(sock->hello);
	sock->hello = NULL;
	if (ret < 0) {
		FLOG_WARN(TCP_LOG, "%s: connection refused by the peer: %s", ep->peer,
			  ferry_strerror(ret));
		ferry__tcp_ep_fail(ep, ret == -EACCES ? -EACCES : -EPROTO);
		return;
	}
	sock->acked = true;
	if (++ep->joined == ep->nsocks)
		ep_established(ep);
}

void ferry__tcp_handshake_rx(struct tcp_sock *sock, int result)
{
	struct ferry__tcp_ep *ep = sock->ep;

	if (result <= 0) {
		if (ep && ep->state != EP_FAILED) {
			FLOG_WARN(TCP_LOG, "%s: handshake: %s", ep->peer,
				  result ? ferry_strerror(result) : "peer closed");
			ferry__tcp_ep_fail(ep, result && result != -EPIPE ? result : -ECONNRESET);
		} else if (!ep) {
			pending_close(sock);
		}
		return;
	}
	sock->rx_got += (size_t)result;
	if (sock->rx_got < sock->rx_want) {
		if (ferry__tcp_rx_resume(sock) < 0) {
			if (ep)
				ferry__tcp_ep_fail(ep, -EAGAIN);
			else
				pending_close(sock);
		}
		return;
	}
	if (ep)
		ack_step(sock);
	else
		hello_step(sock);
}

/* ---- listeners ---- */

static void listener_maybe_free(struct ferry__tcp_listener *l)
{
	struct ferry__tcp_ctx *ctx = l->ctx;

	if (!l->destroyed || l->busy || ferry__loop_req_pending(&l->accept_req) ||
	    !tcp_list_empty(&l->pending) || !tcp_list_empty(&l->forming))
		return;
	tcp_list_del(&l->link);
	ferry__free(l);
	ctx_put(ctx);
}

static void on_sock_timer(struct ferry__loop_timer *timer, int status)
{
	struct tcp_sock *sock = timer->data;
	char peer[64];

	if (status == 0) {
		sock_peer(sock, peer, sizeof(peer));
		FLOG_PEER_WARN(TCP_LOG, peer, "closing %s: no HELLO within %u ms", peer,
			       sock->ctx->connect_timeout_ms);
	}
	pending_close(sock);
}

static void accepted(struct ferry__tcp_listener *l, int fd)
{
	struct ferry__tcp_ctx *ctx = l->ctx;
	struct tcp_sock *sock = sock_new(ctx, fd);

	if (!sock) {
		FLOG_WARN(TCP_LOG, "no memory for an accepted connection; closing it");
		close(fd);
		return;
	}
	sock->listener = l;
	tcp_list_add_tail(&l->pending, &sock->link);
	ctx->live++;
	tune(ctx, fd);
	if (ferry__loop_timer_start(ctx->loop, &sock->timer, ctx->connect_timeout_ms, 0,
				    on_sock_timer) < 0 ||
	    ferry__tcp_rx_arm_hdr(sock) < 0)
		pending_close(sock);
}

static void on_accept(struct ferry__loop_req *req, int result)
{
	struct ferry__tcp_listener *l = req->data;

	if (result >= 0) {
		if (l->destroyed)
			close(result);
		else
			accepted(l, result);
	}
	if (ferry__loop_req_pending(req))
		return;
	if (!l->destroyed)
		FLOG_ERROR(TCP_LOG, "listener on port %u stopped accepting: %s", l->port,
			   ferry_strerror(result < 0 ? result : -EIO));
	listener_maybe_free(l);
}

/*
 * A daemon restarted on its fixed port finds it held for a moment by the process it replaces
 * (killed, not reaped yet): a fixed port is retried for this long (logged by common/net.c),
 * unless one of our own listeners holds it, which will not let go.
 */
#define BIND_RETRY_MS 5000u

static unsigned bind_retry_ms(struct ferry__tcp_ctx *ctx, uint16_t port)
{
	struct tcp_link *l;

	if (!port)
		return 0;
	for (l = ctx->listeners.next; l != &ctx->listeners; l = l->next) {
		struct ferry__tcp_listener *lis =
			FERRY_CONTAINER_OF(l, struct ferry__tcp_listener, link);

		if (lis->port == port && lis->fd >= 0)
			return 0;
	}
	return BIND_RETRY_MS;
}

int ferry__tcp_listen(struct ferry__tcp_ctx *ctx, const char *ip, uint16_t port,
		      const struct ferry__tcp_ep_cbs *cbs, void *arg,
		      struct ferry__tcp_listener **out)
{
	struct ferry__tcp_listener *l;
	struct sockaddr_storage addr;
	socklen_t len;
	int fd, ret;

	if (!cbs || !cbs->on_connect) {
		FLOG_ERROR(TCP_LOG, "listen without an on_connect callback");
		return -EINVAL;
	}
	ret = ferry__net_resolve(ip, port, &addr, &len);
	if (ret < 0)
		return ret == -EHOSTUNREACH ? -EINVAL : ret;
	fd = ferry__net_listen_retry((struct sockaddr *)&addr, len, 0, bind_retry_ms(ctx, port));
	if (fd < 0)
		return fd;
	l = ferry__calloc(1, sizeof(*l));
	if (!l) {
		ret = -ENOMEM;
		goto err_close_fd;
	}
	tune(ctx, fd); /* accepted sockets inherit the buffer sizes (and the window scale) */
	l->ctx = ctx;
	l->cbs = *cbs;
	l->arg = arg;
	l->fd = fd;
	l->port = (uint16_t)ferry__net_local_port(fd);
	l->accept_req.data = l;
	tcp_list_init(&l->pending);
	tcp_list_init(&l->forming);
	ret = ferry__loop_accept(ctx->loop, &l->accept_req, fd, on_accept);
	if (ret < 0)
		goto err_free;
	tcp_list_add_tail(&ctx->listeners, &l->link);
	ctx->live++;
	*out = l;
	return 0;

err_free:
	ferry__free(l);
err_close_fd:
	close(fd);
	return ret;
}

uint16_t ferry__tcp_listener_port(const struct ferry__tcp_listener *l)
{
	return l->port;
}

void ferry__tcp_listener_destroy(struct ferry__tcp_listener *l)
{
	struct tcp_link *k, *next;

	if (!l || l->destroyed)
		return;
	l->destroyed = true;
	l->busy = true;
	if (ferry__loop_req_pending(&l->accept_req))
		(void)ferry__loop_cancel(&l->accept_req);
	/* The accept holds its own reference to the socket: closing our fd is safe now. */
	close(l->fd);
	l->fd = -1;
	for (k = l->pending.next; k != &l->pending; k = next) {
		next = k->next;
		pending_close(FERRY_CONTAINER_OF(k, struct tcp_sock, link));
	}
	for (k = l->forming.next; k != &l->forming; k = next) {
		struct ferry__tcp_ep *ep = FERRY_CONTAINER_OF(k, struct ferry__tcp_ep, link);

		next = k->next;
		ferry__tcp_ep_fail(ep, -ECANCELED);
		ferry__tcp_ep_settle(ep);
	}
	l->busy = false;
	listener_maybe_free(l);
}

/* ---- connect ---- */

static void on_connected(struct ferry__loop_req *req, int result)
{
	struct tcp_sock *sock = req->data;
	struct ferry__tcp_ep *ep = sock->ep;

	ep->busy++;
	if (ep->state != EP_CONNECTING) {
		/* failed meanwhile */
	} else if (result < 0) {
		FLOG_INFO(TCP_LOG, "connect to %s: %s", ep->peer, ferry_strerror(result));
		ferry__tcp_ep_fail(ep, result);
	} else if ((result = ferry__tcp_rx_arm_hdr(sock)) < 0) {
		ferry__tcp_ep_fail(ep, result);
	} else {
		ferry__tcp_tx_kick_all(ep); /* the HELLO */
	}
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

static uint64_t random_nonce(void)
{
	uint64_t n;

	if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != (ssize_t)sizeof(n))
		n = ferry__now_ns() ^ ((uint64_t)getpid() << 32);
	return n;
}

/* Open socket @i of a connecting endpoint, start its connect and queue its HELLO. */
static int connect_one(struct ferry__tcp_ep *ep, unsigned i, unsigned timeout_ms)
{
	struct ferry__tcp_ctx *ctx = ep->ctx;
	struct tcp_sock *sock;
	uint8_t *hello;
	size_t size;
	int fd, ret;

	fd = ferry__net_socket(ep->addr.ss_family);
	if (fd < 0)
		return fd;
	sock = sock_new(ctx, fd);
	if (!sock) {
		close(fd);
		return -ENOMEM;
	}
	sock->ep = ep;
	sock->index = i;
	ep->socks[i] = sock;
	tune(ctx, fd);
	ret = ferry__loop_connect(ctx->loop, &sock->connect_req, fd, (struct sockaddr *)&ep->addr,
				  ep->addr_len, timeout_ms, on_connected);
	if (ret < 0)
		return ret;
	/* Queued while the connect is pending: it goes out once connected. */
	ret = ferry__tcp_hello_frame(ctx->token, ctx->token_size, ep->nonce, i, ep->nsocks, &hello,
				     &size);
	if (ret < 0)
		return ret;
	ret = ferry__tcp_queue_frame(sock, hello, size);
	ferry__free(hello);
	return ret;
}

static bool any_connect_pending(const struct ferry__tcp_ep *ep)
{
	for (unsigned i = 0; i < ep->nsocks; i++)
		if (ep->socks[i] && ferry__loop_req_pending(&ep->socks[i]->connect_req))
			return true;
	return false;
}

int ferry__tcp_connect(struct ferry__tcp_ctx *ctx, const char *ip, uint16_t port,
		       unsigned timeout_ms, const struct ferry__tcp_ep_cbs *cbs, void *arg,
		       struct ferry__tcp_ep **out)
{
	struct ferry__tcp_ep *ep;
	unsigned i;
	int ret;

	if (!cbs || !cbs->on_connect) {
		FLOG_ERROR(TCP_LOG, "connect without an on_connect callback");
		return -EINVAL;
	}
	ep = ep_new(ctx, ctx->conns_per_peer, cbs, arg);
	if (!ep)
		return -ENOMEM;
	ret = ferry__net_resolve(ip, port, &ep->addr, &ep->addr_len);
	if (ret < 0)
		goto err_free;
	ferry__net_describe((struct sockaddr *)&ep->addr, ep->addr_len, ep->peer, sizeof(ep->peer));
	ep->state = EP_CONNECTING;
	ep->nonce = random_nonce();
	timeout_ms = timeout_ms ? timeout_ms : ctx->connect_timeout_ms;
	ep->timeout_ms = timeout_ms;
	for (i = 0; i < ep->nsocks; i++) {
		ret = connect_one(ep, i, timeout_ms);
		if (ret < 0)
			break;
	}
	if (ret < 0 && !any_connect_pending(ep))
		goto err_free;
	tcp_list_add_tail(&ctx->eps, &ep->link);
	if (ret < 0)
		ferry__tcp_ep_fail(ep, ret); /* some connects are in flight: report later */
	else
		(void)ferry__loop_timer_start(ctx->loop, &ep->timer, timeout_ms, 0, on_ep_timer);
	*out = ep;
	return 0;

err_free:
	for (i = 0; i < ep->nsocks; i++)
		if (ep->socks[i])
			close(ep->socks[i]->fd);
	ep->destroyed = true;
	ep_free(ep);
	return ret;
}

/* ---- adopt (tests, fuzzing) ---- */

int ferry__tcp_ep_adopt(struct ferry__tcp_ctx *ctx, const int *fds, unsigned n,
			const struct ferry__tcp_ep_cbs *cbs, void *arg, struct ferry__tcp_ep **out)
{
	struct ferry__tcp_ep *ep;
	int ret = 0;

	if (!cbs || n == 0 || n > FERRY__TCP_MAX_CONNS)
		return -EINVAL;
	ep = ep_new(ctx, n, cbs, arg);
	if (!ep)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		ep->socks[i] = sock_new(ctx, fds[i]);
		if (!ep->socks[i]) {
			for (unsigned j = 0; j < i; j++)
				ep->socks[j]->fd = -1; /* the caller keeps the fds */
			ep_free(ep);
			return -ENOMEM;
		}
		ep->socks[i]->ep = ep;
		ep->socks[i]->index = i;
	}
	snprintf(ep->peer, sizeof(ep->peer), "fd %d", fds[0]);
	ep->state = EP_OPEN;
	ep->reported = true;
	tcp_list_add_tail(&ctx->eps, &ep->link);
	for (unsigned i = 0; i < n && ret == 0; i++)
		ret = ferry__tcp_rx_arm_hdr(ep->socks[i]);
	if (ret < 0)
		ferry__tcp_ep_fail(ep, ret);
	*out = ep;
	return 0;
}
