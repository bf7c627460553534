/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TCP engine, part two: the receive state machine of each socket (header, then a payload read
 * straight into its destination), the send side (control frames in order on
 * socket 0, data chunks pulled by idle sockets, SEND_ZC for large ones) and the transfer calls.
 * The DESIGN block is in tcp.c.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/tcp_int.h"

#define MSG_BUF_KEEP (64u << 10) /* a larger control receive buffer is freed after use */

/* ---- transfers ---- */

static void xfer_finish(struct tcp_xfer *x)
{
	tcp_list_del(&x->link);
	x->cb(x->arg, x->status);
	ferry__free(x);
}

void ferry__tcp_run_ready(struct ferry__tcp_ep *ep)
{
	while (!tcp_list_empty(&ep->ready))
		xfer_finish(FERRY_CONTAINER_OF(ep->ready.next, struct tcp_xfer, link));
}

void ferry__tcp_xfer_decide(struct tcp_xfer *x, int status)
{
	struct ferry__tcp_ep *ep = x->ep;

	if (x->status != TCP_PENDING)
		return;
	x->status = status;
	(void)ferry__loop_timer_stop(&x->timer);
	if (x->in_table) {
		(void)ferry__hashmap_remove(&ep->expects, &x->id, NULL);
		x->in_table = false;
	}
	tcp_list_del(&x->link);
	if (x->inflight) {
		tcp_list_add_tail(&ep->draining, &x->link);
	} else {
		tcp_list_add_tail(&ep->ready, &x->link);
		ferry__tcp_ep_kick(ep);
	}
}

/* A kernel request that used @x's buffer ended. */
static void xfer_put(struct tcp_xfer *x)
{
	x->inflight--;
	if (x->inflight == 0 && x->status != TCP_PENDING) {
		tcp_list_del(&x->link);
		tcp_list_add_tail(&x->ep->ready, &x->link);
	}
}

static void on_xfer_timer(struct ferry__loop_timer *timer, int status)
{
	struct tcp_xfer *x = timer->data;
	struct ferry__tcp_ep *ep = x->ep;

	ep->busy++;
	if (status < 0) {
		ferry__tcp_xfer_decide(x, -ECANCELED);
	} else if (x->inflight) {
		/* The kernel is reading or writing its buffer: only a teardown gets it back. */
		FLOG_WARN(TCP_LOG, "%s: transfer %llu timed out with bytes in flight; closing",
			  ep->peer, (unsigned long long)x->id);
		ferry__tcp_xfer_decide(x, -ETIMEDOUT);
		ferry__tcp_ep_fail(ep, -ETIMEDOUT);
	} else {
		FLOG_INFO(TCP_LOG, "%s: transfer %llu timed out (%zu of %zu bytes)", ep->peer,
			  (unsigned long long)x->id, x->done, x->len);
		ferry__tcp_xfer_decide(x, -ETIMEDOUT);
	}
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

static struct tcp_xfer *xfer_new(struct ferry__tcp_ep *ep, uint64_t id, const void *buf, size_t len,
				 ferry__tcp_xfer_cb cb, void *arg)
{
	struct tcp_xfer *x = ferry__calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->ep = ep;
	x->id = id;
	x->buf = (uint8_t *)(uintptr_t)buf;
	x->len = len;
	x->status = TCP_PENDING;
	x->cb = cb;
	x->arg = arg;
	x->timer.data = x;
	tcp_list_init(&x->link);
	return x;
}

static int xfer_start(struct tcp_xfer *x)
{
	int ret = ferry__loop_timer_start(x->ep->ctx->loop, &x->timer, x->ep->ctx->op_timeout_ms, 0,
					  on_xfer_timer);

	if (ret == 0 && x->len == 0)
		ferry__tcp_xfer_decide(x, 0);
	return ret;
}

static int check_call(const struct ferry__tcp_ep *ep, ferry__tcp_xfer_cb cb, const void *buf,
		      size_t len)
{
	if (!cb || (!buf && len)) {
		FLOG_ERROR(TCP_LOG, "transfer without a callback or buffer");
		return -EINVAL;
	}
	return ep->state == EP_OPEN ? 0 : -ENOTCONN;
}

int ferry__tcp_expect(struct ferry__tcp_ep *ep, uint64_t xfer, void *buf, size_t len,
		      ferry__tcp_xfer_cb cb, void *arg)
{
	struct tcp_xfer *x;
	void **slot;
	int ret = check_call(ep, cb, buf, len);

	if (ret < 0)
		return ret;
	if (ferry__hashmap_get(&ep->expects, &xfer))
		return -EEXIST;
	x = xfer_new(ep, xfer, buf, len, cb, arg);
	if (!x)
		return -ENOMEM;
	x->rx = true;
	ret = ferry__hashmap_put(&ep->expects, &xfer, (void **)&slot);
	if (ret < 0)
		goto err_free;
	*slot = x;
	x->in_table = true;
	tcp_list_add_tail(&ep->rx_xfers, &x->link);
	ret = xfer_start(x);
	if (ret < 0)
		goto err_remove;
	return 0;

err_remove:
	tcp_list_del(&x->link);
	(void)ferry__hashmap_remove(&ep->expects, &xfer, NULL);
err_free:
	ferry__free(x);
	return ret;
}

int ferry__tcp_cancel_expect(struct ferry__tcp_ep *ep, uint64_t xfer)
{
	void **slot = ferry__hashmap_get(&ep->expects, &xfer);

	if (!slot)
		return -ENOENT;
	ferry__tcp_xfer_decide(*slot, -ECANCELED);
	return 0;
}

int ferry__tcp_send_data(struct ferry__tcp_ep *ep, uint64_t xfer, const void *buf, size_t len,
			 ferry__tcp_xfer_cb cb, void *arg)
{
	struct tcp_xfer *x;
	int ret = check_call(ep, cb, buf, len);

	if (ret < 0)
		return ret;
	x = xfer_new(ep, xfer, buf, len, cb, arg);
	if (!x)
		return -ENOMEM;
	tcp_list_add_tail(&ep->tx_xfers, &x->link);
	ret = xfer_start(x);
	if (ret < 0) {
		tcp_list_del(&x->link);
		ferry__free(x);
		return ret;
	}
	ferry__tcp_tx_kick_all(ep);
	return 0;
}

/* ---- send ---- */

static void tx_kick(struct tcp_sock *sock);
static void tx_drained(struct ferry__tcp_ep *ep, size_t bytes);

static int tx_error(int err)
{
	return err == -EPIPE ? -ECONNRESET : err;
}

static void tx_fail(struct tcp_sock *sock, int err)
{
	if (sock->ep) {
		if (sock->ep->state != EP_FAILED)
			FLOG_INFO(TCP_LOG, "%s: send: %s", sock->ep->peer, ferry_strerror(err));
		ferry__tcp_ep_fail(sock->ep, tx_error(err));
	} else {
		ferry__tcp_sock_shut(sock);
	}
}

static void on_msg_sent(struct ferry__loop_req *req, int result)
{
	struct tcp_sock *sock = req->data;
	struct ferry__tcp_ep *ep = sock->ep;
	struct tcp_msg *m = sock->msg_busy;

	if (ep)
		ep->busy++;
	sock->tx_busy = false;
	if (result < 0) {
		tx_fail(sock, result);
	} else if (m->done + (size_t)result < m->size) {
		m->done += (size_t)result;
		sock->msg_busy = NULL;
		tx_kick(sock); /* the rest, from the head of the queue */
	} else {
		sock->msg_head = m->next;
		if (!sock->msg_head)
			sock->msg_tail = &sock->msg_head;
		sock->msg_busy = NULL;
		if (ep && m->counted)
			tx_drained(ep, m->size);
		ferry__free(m);
		tx_kick(sock);
	}
	if (ep) {
		ep->busy--;
		ferry__tcp_ep_settle(ep);
	} else {
		ferry__tcp_handshake_tx_done(sock);
	}
}

/* ---- backpressure on control frames (tcp.h, max_queued_bytes) ---- */

static void on_stall(struct ferry__loop_timer *timer, int status)
{
	struct ferry__tcp_ep *ep = timer->data;

	if (status < 0 || ep->state != EP_OPEN)
		return; /* loop destroy: teardown owns the endpoint */
	ep->busy++;
	FLOG_PEER_WARN(TCP_LOG, ep->peer,
		       "%s: %zu bytes of replies unsent for %u ms (the peer does not read); "
		       "closing",
		       ep->peer, ep->tx_queued, ep->ctx->stall_timeout_ms);
	ferry__tcp_ep_fail(ep, -ETIMEDOUT);
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

static void tx_queued_add(struct ferry__tcp_ep *ep, size_t bytes)
{
	ep->tx_queued += bytes;
	if (ep->tx_queued >= ep->ctx->max_queued && ep->ctx->stall_timeout_ms &&
	    !ferry__loop_timer_active(&ep->stall))
		(void)ferry__loop_timer_start(ep->ctx->loop, &ep->stall, ep->ctx->stall_timeout_ms,
					      0, on_stall);
}

/* @bytes of control frames left: below the cap, read socket 0 again. */
static void tx_drained(struct ferry__tcp_ep *ep, size_t bytes)
{
	int ret;

	ep->tx_queued -= bytes;
	if (ep->tx_queued >= ep->ctx->max_queued)
		return;
	(void)ferry__loop_timer_stop(&ep->stall);
	if (!ep->rx_held || ep->state != EP_OPEN)
		return;
	ep->rx_held = false;
	FLOG_DEBUG(TCP_LOG, "%s: replies drained; reading requests again", ep->peer);
	ret = ferry__tcp_rx_arm_hdr(ep->socks[0]);
	if (ret < 0)
		ferry__tcp_ep_fail(ep, ret);
}

static int send_msg(struct tcp_sock *sock)
{
	struct tcp_msg *m = sock->msg_head;

	int ret = ferry__loop_send(sock->ctx->loop, &sock->tx_req, sock->fd, m->data + m->done,
				   m->size - m->done, MSG_NOSIGNAL | MSG_WAITALL, on_msg_sent);

	if (ret == 0) {
		sock->msg_busy = m;
		sock->tx_busy = true;
	}
	return ret;
}

int ferry__tcp_queue_frame(struct tcp_sock *sock, const void *frame, size_t size)
{
	struct tcp_msg *m = ferry__malloc(sizeof(*m) + size);

	if (!m)
		return -ENOMEM;
	m->next = NULL;
	m->size = size;
	m->done = 0;
	memcpy(m->data, frame, size);
	m->counted = sock->ep != NULL;
	if (m->counted)
		tx_queued_add(sock->ep, m->size);
	*sock->msg_tail = m;
	sock->msg_tail = &m->next;
	tx_kick(sock);
	return 0;
}

int ferry__tcp_send(struct ferry__tcp_ep *ep, const void *frame, size_t len)
{
	struct ferry__tcp_hdr h;
	int ret;

	if (ep->state != EP_OPEN)
		return -ENOTCONN;
	if (!frame || len < FERRY__TCP_HDR_SIZE)
		return -EINVAL;
	ret = ferry__tcp_hdr_decode(frame, ep->ctx->max_msg, &h);
	if (ret == 0 && h.kind == FERRY__TCP_MSG && h.len == len - FERRY__TCP_HDR_SIZE)
		return ferry__tcp_queue_frame(ep->socks[0], frame, len);
	if (len - FERRY__TCP_HDR_SIZE > ep->ctx->max_msg) {
		FLOG_ERROR(TCP_LOG, "%s: message of %zu bytes exceeds the limit of %u", ep->peer,
			   len - FERRY__TCP_HDR_SIZE, ep->ctx->max_msg);
		return -EMSGSIZE;
	}
	FLOG_ERROR(TCP_LOG, "%s: not a control message frame (type %u, %zu bytes)", ep->peer,
		   ferry__fb_load_u16((const uint8_t *)frame + 2), len);
	return -EINVAL;
}

static void chunk_release(struct tcp_chunk *c, int result)
{
	struct tcp_xfer *x = c->xfer;

	c->xfer = NULL;
	if (result >= 0 && x->status == TCP_PENDING) {
		x->done += c->len;
		if (x->done == x->len)
			ferry__tcp_xfer_decide(x, 0); /* inflight still counts c: deferred */
	}
	xfer_put(x);
}

static int chunk_submit(struct tcp_sock *sock, struct tcp_chunk *c);

static void chunk_end(struct tcp_chunk *c, int result)
{
	struct tcp_sock *sock = c->sock;
	struct ferry__tcp_ep *ep = sock->ep;

	ep->busy++;
	if (c->zc && c->sending) {
		/* The send stage failed as unsupported; the socket stayed busy until now. */
		c->sending = false;
		sock->tx_busy = false;
	}
	if ((result == -EOPNOTSUPP || result == -EINVAL) && c->zc && ep->state == EP_OPEN) {
		/* This socket cannot do zero copy (a Unix socket): copy from now on. */
		FLOG_INFO(TCP_LOG, "%s: zero-copy send unsupported; copying", ep->peer);
		ep->no_zc = true;
		c->zc = false;
		result = chunk_submit(sock, c);
		if (result == 0)
			goto out;
	}
	if (result < 0)
		tx_fail(sock, result);
	chunk_release(c, result);
	tx_kick(sock);
out:
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

static void on_chunk_plain(struct ferry__loop_req *req, int result)
{
	struct tcp_chunk *c = req->data;
	struct tcp_sock *sock = c->sock;
	size_t left = c->iov[0].iov_len + c->iov[1].iov_len;

	c->sending = false;
	sock->tx_busy = false;
	if (result >= 0 && (size_t)result < left && sock->ep->state == EP_OPEN) {
		/* A short write: resume after what went out. */
		size_t n = (size_t)result, h = FERRY_MIN(n, c->iov[0].iov_len);

		c->iov[0].iov_base = (uint8_t *)c->iov[0].iov_base + h;
		c->iov[0].iov_len -= h;
		c->iov[1].iov_base = (uint8_t *)c->iov[1].iov_base + (n - h);
		c->iov[1].iov_len -= n - h;
		if ((result = chunk_submit(sock, c)) == 0)
			return;
	} else if (result >= 0 && (size_t)result < left) {
		result = -ECONNRESET;
	}
	chunk_end(c, result);
}

static void on_chunk_sent(struct ferry__loop_req *req, int result)
{
	struct tcp_chunk *c = req->data;
	struct tcp_sock *sock = c->sock;
	struct ferry__tcp_ep *ep = sock->ep;

	if (result == -EOPNOTSUPP || result == -EINVAL)
		return; /* retried as a copy at the final callback: the socket stays busy */
	c->sending = false;
	sock->tx_busy = false;
	ep->busy++;
	if (result >= 0 && (size_t)result < FERRY__TCP_DATA_HDR_SIZE + c->len)
		result = -ECONNRESET; /* MSG_WAITALL: short only when the connection broke */
	if (result < 0)
		tx_fail(sock, result);
	else
		tx_kick(sock);
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

static void on_chunk_done(struct ferry__loop_req *req, int result)
{
	struct tcp_chunk *c = req->data;

	if (result >= 0 && (size_t)result < FERRY__TCP_DATA_HDR_SIZE + c->len)
		result = -ECONNRESET;
	chunk_end(c, result);
}

static int chunk_submit(struct tcp_sock *sock, struct tcp_chunk *c)
{
	struct ferry__loop *loop = sock->ctx->loop;
	int flags = MSG_NOSIGNAL | MSG_WAITALL, ret;

	if (c->zc)
		ret = ferry__loop_sendmsg_zc(loop, &c->req, sock->fd, &c->msg, flags, on_chunk_sent,
					     on_chunk_done);
	else
		ret = ferry__loop_sendmsg(loop, &c->req, sock->fd, &c->msg, flags, on_chunk_plain);
	if (ret == 0) {
		c->sending = true;
		sock->tx_busy = true;
	}
	return ret;
}

static struct tcp_xfer *next_tx_xfer(struct ferry__tcp_ep *ep)
{
	for (struct tcp_link *l = ep->tx_xfers.next; l != &ep->tx_xfers; l = l->next) {
		struct tcp_xfer *x = FERRY_CONTAINER_OF(l, struct tcp_xfer, link);

		if (x->next < x->len)
			return x;
	}
	return NULL;
}

/* Hand the next chunk of the oldest unfinished transfer to @sock's free slot @c. */
static int send_chunk(struct tcp_sock *sock, struct tcp_chunk *c, struct tcp_xfer *x)
{
	struct ferry__tcp_ctx *ctx = sock->ctx;
	size_t n = FERRY_MIN((size_t)ctx->chunk_size, x->len - x->next);
	int ret;

	ferry__tcp_data_hdr_encode(c->hdr, x->id, x->next, (uint32_t)n);
	c->iov[0] = (struct iovec){c->hdr, FERRY__TCP_DATA_HDR_SIZE};
	c->iov[1] = (struct iovec){x->buf + x->next, n};
	memset(&c->msg, 0, sizeof(c->msg));
	c->msg.msg_iov = c->iov;
	c->msg.msg_iovlen = 2;
	c->len = n;
	c->zc = n >= ctx->zc_threshold && !sock->ep->no_zc;
	ret = chunk_submit(sock, c);
	if (ret < 0)
		return ret;
	c->xfer = x;
	x->next += n;
	x->inflight++;
	return 0;
}

/*
 * Small control frames at the head of an open endpoint's queue, with nothing in flight on the
 * socket, go out at once with a non-blocking send(2) from the handler that queued them, instead
 * of as an SQE submitted at the end of the loop's pass whose completion is reaped a pass later:
 * a small pull's request and its reply each leave sooner. Order holds: nothing else is in flight
 * on the socket, and the frames go from the head of its queue. What the socket does not take
 * now (full, or an error, which the ring's send then reports through the usual path) goes
 * through the ring from where this stopped. Handshake frames (no endpoint yet) keep the ring,
 * whose completion moves the handshake on.
 */
#define DIRECT_SEND_MAX 4096u

static void send_direct(struct tcp_sock *sock)
{
	struct tcp_msg *m;
	size_t size;
	bool counted;
	ssize_t n;

	while ((m = sock->msg_head) && sock->ep && sock->ep->state == EP_OPEN &&
	       m->size - m->done <= DIRECT_SEND_MAX) {
		n = send(sock->fd, m->data + m->done, m->size - m->done,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n <= 0)
			return;
		m->done += (size_t)n;
		if (m->done < m->size)
			return;
		sock->msg_head = m->next;
		if (!sock->msg_head)
			sock->msg_tail = &sock->msg_head;
		size = m->size;
		counted = m->counted;
		ferry__free(m);
		/* Sent is sent, by either path: the backpressure count must see it. */
		if (counted)
			tx_drained(sock->ep, size);
	}
}

static void tx_kick(struct tcp_sock *sock)
{
	struct ferry__tcp_ep *ep = sock->ep;
	struct tcp_xfer *x;
	int ret = 0;

	if (sock->tx_busy || sock->fd < 0 || sock->shut ||
	    ferry__loop_req_pending(&sock->connect_req))
		return;
	send_direct(sock);
	if (sock->msg_head) {
		ret = send_msg(sock);
	} else if (ep && ep->state == EP_OPEN && (x = next_tx_xfer(ep))) {
		for (unsigned i = 0; i < TCP_CHUNK_SLOTS; i++) {
			if (!sock->chunks[i].xfer) {
				ret = send_chunk(sock, &sock->chunks[i], x);
				break;
			}
		}
	}
	if (ret < 0) {
		FLOG_WARN(TCP_LOG, "cannot submit a send: %s", ferry_strerror(ret));
		tx_fail(sock, ret);
	}
}

void ferry__tcp_tx_kick_all(struct ferry__tcp_ep *ep)
{
	unsigned n = ep->nsocks, start = ep->next_tx_sock++;

	for (unsigned i = 0; i < n && ep->state != EP_FAILED; i++)
		if (ep->socks[(start + i) % n])
			tx_kick(ep->socks[(start + i) % n]);
}

/* ---- receive ---- */

static void on_rx(struct ferry__loop_req *req, int result);

/* Where the rest of the current piece goes, and how much of it to read at once. */
static uint8_t *rx_dst(struct tcp_sock *sock, size_t *left)
{
	struct ferry__tcp_ep *ep = sock->ep;

	*left = sock->rx_want - sock->rx_got;
	switch (sock->rx_state) {
	case RX_HDR:
		return sock->hdr + sock->rx_got;
	case RX_DHDR:
		return sock->hdr + FERRY__TCP_HDR_SIZE + sock->rx_got;
	case RX_MSG:
		return ep->msg_buf + FERRY__TCP_HDR_SIZE + sock->rx_got;
	case RX_DATA:
		return sock->rx_xfer->buf + sock->rx_hdr.offset + sock->rx_got;
	case RX_HELLO:
		return sock->hello + sock->rx_got;
	case RX_DRAIN:
		*left = FERRY_MIN(*left, (size_t)TCP_SCRATCH_SIZE);
		return sock->ctx->scratch;
	default:
		return NULL;
	}
}

/* Arm the ring's receive of what is left of the current piece. */
static int rx_arm_ring(struct tcp_sock *sock)
{
	size_t left;
	uint8_t *dst = rx_dst(sock, &left);

	if (!dst)
		return -EINVAL;
	return ferry__loop_recv(sock->ctx->loop, &sock->rx_req, sock->fd, dst, left, MSG_WAITALL,
				on_rx);
}

/* Polled receive (tcp.c, DESIGN): an open endpoint's control socket, between frames or in a
 * control message, while the context polls. */
static bool rx_pollable(const struct tcp_sock *sock)
{
	return sock->ctx->poll_ns && sock->index == 0 && sock->ep && sock->ep->state == EP_OPEN &&
	       !sock->shut && sock->fd >= 0 &&
	       (sock->rx_state == RX_HDR || sock->rx_state == RX_MSG);
}

void ferry__tcp_sock_unpoll(struct tcp_sock *sock)
{
	if (!sock->polled)
		return;
	sock->polled = false;
	tcp_list_del(&sock->poll_link);
}

/* Receive what is left of the current piece: polled, or by the ring. */
static int rx_arm(struct tcp_sock *sock)
{
	if (!rx_pollable(sock))
		return rx_arm_ring(sock);
	if (!sock->polled) {
		sock->polled = true;
		tcp_list_add_tail(&sock->ctx->polled, &sock->poll_link);
	}
	sock->polled_since_ns = ferry__now_ns();
	return 0;
}

static int rx_piece(struct tcp_sock *sock, enum tcp_rx_state state, size_t want)
{
	sock->rx_state = state;
	sock->rx_got = 0;
	sock->rx_want = want;
	return rx_arm(sock);
}

int ferry__tcp_rx_resume(struct tcp_sock *sock)
{
	return rx_arm(sock);
}

int ferry__tcp_rx_arm_hdr(struct tcp_sock *sock)
{
	return rx_piece(sock, RX_HDR, FERRY__TCP_HDR_SIZE);
}

static void rx_closed(struct tcp_sock *sock, int result)
{
	struct ferry__tcp_ep *ep = sock->ep;
	bool mid = sock->rx_state != RX_HDR || sock->rx_got > 0;

	if (ep->state == EP_FAILED)
		return;
	if (result == 0 || result == -ECONNRESET || result == -EPIPE) {
		if (mid)
			FLOG_WARN(TCP_LOG, "%s: peer closed in the middle of a frame", ep->peer);
		else
			FLOG_INFO(TCP_LOG, "%s: peer closed the connection", ep->peer);
		result = -ECONNRESET;
	} else {
		FLOG_WARN(TCP_LOG, "%s: receive: %s", ep->peer, ferry_strerror(result));
	}
	ferry__tcp_ep_fail(ep, result);
}

static void protocol_error(struct ferry__tcp_ep *ep, const char *what)
{
	FLOG_ERROR(TCP_LOG, "%s: protocol error: %s; closing", ep->peer, what);
	ferry__tcp_ep_fail(ep, -EPROTO);
}

static int rx_complete(struct tcp_sock *sock, struct tcp_xfer *x);

/* A data frame's struct is in: receive its bytes into the transfer, or drop them. */
static int rx_data_hdr(struct tcp_sock *sock, struct ferry__tcp_hdr *h)
{
	struct ferry__tcp_ep *ep = sock->ep;
	void **slot;
	struct tcp_xfer *x;

	if (ferry__tcp_data_struct_decode(sock->hdr + FERRY__TCP_HDR_SIZE, h) < 0) {
		protocol_error(ep, "data offset overflows");
		return 0;
	}
	slot = ferry__hashmap_get(&ep->expects, &h->xfer);
	x = slot ? *slot : NULL;
	if (!x) {
		FLOG_DEBUG(TCP_LOG, "%s: dropping %u bytes of unexpected transfer %llu", ep->peer,
			   h->len, (unsigned long long)h->xfer);
		return h->len ? rx_piece(sock, RX_DRAIN, h->len) : ferry__tcp_rx_arm_hdr(sock);
	}
	if (h->offset > x->len || h->len > x->len - h->offset || h->len > x->len - x->done) {
		protocol_error(ep, "data beyond the expected buffer");
		return 0;
	}
	if (h->len == 0)
		return ferry__tcp_rx_arm_hdr(sock);
	sock->rx_xfer = x;
	x->inflight++;
	return rx_piece(sock, RX_DATA, h->len);
}

/*
 * Start reading the piece of @want bytes after a header. The frame was sent with its header in
 * one write, so the piece is almost always here already: read it now rather than arm a
 * receive, which completes at the loop's next pass. That pass was a round of io_uring_enter,
 * and in a busy poll a sched_yield that may hand the CPU away, on each direction of every small
 * pull. Whatever is missing (or an error, which the armed receive then reports through the
 * usual path) goes to the loop as before.
 */
static int rx_piece_now(struct tcp_sock *sock, enum tcp_rx_state state, size_t want)
{
	size_t left;
	uint8_t *dst;
	ssize_t n;

	sock->rx_state = state;
	sock->rx_got = 0;
	sock->rx_want = want;
	if (want) {
		dst = rx_dst(sock, &left);
		n = recv(sock->fd, dst, left, MSG_DONTWAIT);
		if (n > 0)
			sock->rx_got = (size_t)n;
		if (sock->rx_got < sock->rx_want)
			return rx_arm(sock);
	}
	return rx_complete(sock, NULL);
}

static int rx_msg_hdr(struct tcp_sock *sock, const struct ferry__tcp_hdr *h)
{
	struct ferry__tcp_ep *ep = sock->ep;
	size_t size = FERRY__TCP_HDR_SIZE + (size_t)h->len;

	if (sock->index != 0) {
		protocol_error(ep, "control message on a data socket");
		return 0;
	}
	if (size > ep->msg_cap) {
		uint8_t *buf = ferry__realloc(ep->msg_buf, size);

		if (!buf)
			return -ENOMEM;
		ep->msg_buf = buf;
		ep->msg_cap = size;
	}
	/* The callee gets the whole frame, as it would decode one from any engine. */
	memcpy(ep->msg_buf, sock->hdr, FERRY__TCP_HDR_SIZE);
	return rx_piece_now(sock, RX_MSG, h->len);
}

static void deliver_msg(struct tcp_sock *sock)
{
	struct ferry__tcp_ep *ep = sock->ep;

	if (ep->cbs.on_message && !ep->destroyed)
		ep->cbs.on_message(ep, ep->msg_buf, FERRY__TCP_HDR_SIZE + sock->rx_want, ep->arg);
	if (ep->msg_cap > MSG_BUF_KEEP) {
		ferry__free(ep->msg_buf);
		ep->msg_buf = NULL;
		ep->msg_cap = 0;
	}
}

/* A header is in: decide where its payload goes. 0 (done or failed) or -errno to fail. */
static int rx_header(struct tcp_sock *sock)
{
	struct ferry__tcp_ep *ep = sock->ep;
	struct ferry__tcp_hdr *h = &sock->rx_hdr;
	int ret = ferry__tcp_hdr_decode(sock->hdr, ep->ctx->max_msg, h);

	if (ret == -EPROTONOSUPPORT) {
		FLOG_ERROR(TCP_LOG,
			   "%s: frame of another protocol version (magic 0x%02x version %u), "
			   "this side speaks wire protocol %u; closing",
			   ep->peer, sock->hdr[0], sock->hdr[1], FERRY_WIRE_PROTOCOL_VERSION);
		ferry__tcp_ep_fail(ep, -EPROTO);
		return 0;
	}
	if (ret < 0) {
		protocol_error(ep, "bad frame header");
		return 0;
	}
	if (h->kind == FERRY__TCP_DATA)
		return rx_piece_now(sock, RX_DHDR, FERRY__WIRE_DATA_CHUNK_BYTES);
	if (h->kind != FERRY__TCP_MSG) {
		protocol_error(ep, "handshake frame on an established connection");
		return 0;
	}
	return rx_msg_hdr(sock, h);
}

/* The current piece is complete. Returns 0 or -errno to fail the endpoint. */
static int rx_complete(struct tcp_sock *sock, struct tcp_xfer *x)
{
	struct ferry__tcp_ep *ep = sock->ep;

	switch (sock->rx_state) {
	case RX_HDR:
		return rx_header(sock);
	case RX_DHDR:
		return rx_data_hdr(sock, &sock->rx_hdr);
	case RX_MSG:
		deliver_msg(sock);
		/* Backpressure: the next request waits until the replies drain (tx_drained). */
		if (ep->state == EP_OPEN && ep->tx_queued >= ep->ctx->max_queued) {
			FLOG_DEBUG(TCP_LOG, "%s: %zu bytes of replies unsent; holding requests",
				   ep->peer, ep->tx_queued);
			ep->rx_held = true;
			sock->rx_state = RX_HDR;
			sock->rx_got = 0;
			sock->rx_want = FERRY__TCP_HDR_SIZE;
			return 0;
		}
		break;
	case RX_DATA:
		if (x->status == TCP_PENDING) {
			x->done += sock->rx_want;
			if (x->done == x->len)
				ferry__tcp_xfer_decide(x, 0);
		}
		break;
	default:
		break;
	}
	if (ep->state != EP_OPEN)
		return 0;
	return ferry__tcp_rx_arm_hdr(sock);
}

static void rx_fail(struct ferry__tcp_ep *ep, int err)
{
	FLOG_WARN(TCP_LOG, "%s: cannot receive: %s", ep->peer, ferry_strerror(err));
	ferry__tcp_ep_fail(ep, err);
}

static void rx_step(struct tcp_sock *sock, int result)
{
	struct ferry__tcp_ep *ep = sock->ep;
	struct tcp_xfer *x = sock->rx_xfer;
	int ret;

	if (x) {
		sock->rx_xfer = NULL;
		xfer_put(x);
	}
	if (result <= 0) {
		rx_closed(sock, result);
		return;
	}
	sock->rx_got += (size_t)result;
	if (ep->state != EP_OPEN)
		return;
	if (sock->rx_got < sock->rx_want) {
		if (x && x->status == TCP_PENDING) {
			sock->rx_xfer = x;
			x->inflight++;
		} else if (x) {
			sock->rx_state = RX_DRAIN; /* cancelled meanwhile: drop the rest */
		}
		ret = rx_arm(sock);
	} else {
		ret = rx_complete(sock, x);
	}
	if (ret < 0 && ep->state == EP_OPEN)
		rx_fail(ep, ret);
}

/* A receive of @sock ended with @result (bytes or -errno): from the ring, or a polled read. */
static void rx_result(struct tcp_sock *sock, int result)
{
	struct ferry__tcp_ep *ep = sock->ep;
	const char *scope;

	if (!ep) {
		ferry__tcp_handshake_rx(sock, result);
		return;
	}
	ep->busy++;
	/* What the peer's bytes make anyone warn about is rate-limited per peer. */
	scope = ferry__log_peer_scope(ep->peer);
	if (ep->state == EP_CONNECTING)
		ferry__tcp_handshake_rx(sock, result);
	else
		rx_step(sock, result);
	ferry__log_peer_scope(scope);
	ep->busy--;
	ferry__tcp_ep_settle(ep);
}

static void on_rx(struct ferry__loop_req *req, int result)
{
	rx_result(req->data, result);
}

/* ---- polled receive ---- */

/* One polled socket's turn: read what is there and run it as on_rx() would. 1 if it had
 * something (or an error), 0 if nothing was there. */
static int poll_one(struct tcp_sock *sock)
{
	size_t left;
	uint8_t *dst = rx_dst(sock, &left);
	ssize_t n = recv(sock->fd, dst, left, MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	ferry__tcp_sock_unpoll(sock); /* rx_step() polls it again for what comes next */
	rx_result(sock, n < 0 ? -errno : (int)n);
	return 1;
}

/* Back to the ring: the loop is about to sleep, or the socket has been quiet a while. */
static void hand_back(struct tcp_sock *sock)
{
	struct ferry__tcp_ep *ep = sock->ep;
	int ret;

	ferry__tcp_sock_unpoll(sock);
	ret = rx_arm_ring(sock);
	if (ret < 0) {
		ep->busy++;
		rx_fail(ep, ret);
		ep->busy--;
		ferry__tcp_ep_settle(ep);
	}
}

int ferry__tcp_poll(struct ferry__tcp_ctx *ctx, bool sleeping)
{
	unsigned turns = 0;
	uint64_t now;
	int n = 0;

	if (!ctx || !ctx->poll_ns || tcp_list_empty(&ctx->polled))
		return 0;
	now = ferry__now_ns();
	for (struct tcp_link *l = ctx->polled.next; l != &ctx->polled; l = l->next)
		turns++;
	/* A turn may free sockets anywhere on the list (a message callback destroying an
	 * endpoint): each takes the head, after moving it to the tail, and nothing else. */
	while (turns-- && !tcp_list_empty(&ctx->polled)) {
		struct tcp_sock *sock =
			FERRY_CONTAINER_OF(ctx->polled.next, struct tcp_sock, poll_link);

		tcp_list_del(&sock->poll_link);
		tcp_list_add_tail(&ctx->polled, &sock->poll_link);
		if (sleeping || sock->polled_since_ns + ctx->poll_ns < now)
			hand_back(sock);
		else
			n += poll_one(sock);
	}
	return n;
}

/* ---- socket state ---- */

bool ferry__tcp_sock_closable(const struct tcp_sock *sock)
{
	for (unsigned i = 0; i < TCP_CHUNK_SLOTS; i++)
		if (sock->chunks[i].sending)
			return false;
	return !ferry__loop_req_pending(&sock->rx_req) && !ferry__loop_req_pending(&sock->tx_req) &&
	       !ferry__loop_req_pending(&sock->connect_req);
}

bool ferry__tcp_sock_quiet(const struct tcp_sock *sock)
{
	for (unsigned i = 0; i < TCP_CHUNK_SLOTS; i++)
		if (ferry__loop_req_pending(&sock->chunks[i].req))
			return false;
	return sock->fd < 0 && ferry__tcp_sock_closable(sock);
}

void ferry__tcp_sock_release(struct tcp_sock *sock)
{
	struct tcp_msg *m, *next;

	for (m = sock->msg_head; m; m = next) {
		next = m->next;
		ferry__free(m);
	}
	sock->msg_head = NULL;
	sock->msg_tail = &sock->msg_head;
	sock->msg_busy = NULL;
	ferry__free(sock->hello);
	sock->hello = NULL;
}
