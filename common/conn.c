/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Framed connections: creation, send (queue, gather, zero-copy, fd passing), the client
 * handshake and the asynchronous close. The receive side is in conn_rx.c, the server side in
 * conn_server.c; the DESIGN below covers all three.
 *
 * DESIGN
 * Everything runs on the loop thread, driven by four kinds of completions: the connect, the one
 * receive kept pending while the connection is open, the one gathered send in flight (or one
 * zero-copy send awaiting its result), and zero-copy notifications (several may be pending).
 * A per-connection timer carries deadlines (connect handshake, server handshake, flush on
 * refusal), defers on_connect out of ferry__conn_open(), and kicks the close.
 *
 * Receive: recv (TCP) or recvmsg (Unix, for SCM_RIGHTS) straight into the frame parser's free
 * space, which is sized to the frame being received; frames are verified with
 * ferry__wire_verify() and delivered in place, zero copy. See loop.c for why no provided-buffer
 * ring.
 *
 * Send: messages queue in order. Small copied ones (up to CONN_PACK_MAX) are packed, header
 * and payload, into shared chunks of CONN_PACK_BYTES: one allocation and one iovec for dozens
 * of replies. A chunk may grow while a send of its first bytes is in flight (its buffer never
 * moves; the send covers only what was there when it was posted). Sending is deferred to one
 * kick per loop pass (a 0 ms timer: timers run just before the loop submits), so everything a
 * pass produced for a connection (every reply to a pipelined batch, a pub/sub batch) leaves in
 * one sendmsg. Queued nodes go out gathered, up to CONN_TX_IOV iovecs per sendmsg. A large TCP
 * payload goes alone with SENDMSG_ZC; the next send may start at its result, while the message
 * stays allocated until its notification. Partial writes resume where they stopped
 * (MSG_WAITALL makes them rare).
 *
 * fd passing: a message with fds goes alone in its sendmsg, from its first byte, so on the
 * receiving side the fds arrive in the read that holds the start of that frame (the kernel stops
 * a Unix stream read after a message that carried fds); the read's stream range is remembered,
 * and the fds are given to the last frame that starts inside it.
 *
 * Limits (accepted connections by default, see conn.h): a peer cannot make us hold more than
 * it is worth. Past max_queued_bytes unsent, rx_deliver() stops handing out frames (they stay
 * in the parser) and no receive is armed: the peer's requests wait in its own socket buffers
 * instead of as replies in our heap. The send completion that drains the queue below the cap
 * resumes delivery (ferry__conn_rx_resume). The check is per frame, so one read holding many
 * pipelined requests overshoots by one reply at most. A queue past the cap for stall_ms (the
 * peer does not read at all), or a send past twice the cap plus one message (pushed traffic
 * such as pub/sub), closes the connection. A frame begun and left for frame_ms closes it too.
 * After a connection that queued megabytes, the heap is trimmed so the memory really returns.
 *
 * Close: start_close() cancels what is in flight and arms the timer; every completion of a
 * closing connection calls conn_finalize(), which, once nothing is pending, hands the fd to an
 * async close, waits for it and for the zero-copy notifications (SO_LINGER 0 first, so a peer
 * that stopped reading cannot hold them), then releases queued messages, calls on_close and frees.
 * Public functions never finalize, so on_close never runs inside a call the user made.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn_int.h"
#include "common/log.h"
#include "common/net.h"

#define DEFAULT_ZC_MIN (64u << 10)
#define DEFAULT_TIMEOUT_MS 10000u
#define FLUSH_TIMEOUT_MS 1000u
#define TRIM_AFTER_BYTES (1u << 20) /* a connection that queued this much trims the heap */

static void on_timer(struct ferry__loop_timer *timer, int status);
static void tx_kick(struct ferry__conn *conn);
static void tx_schedule(struct ferry__conn *conn);

/* ---- close ---- */

static void start_close(struct ferry__conn *conn, int err)
{
	if (conn->state == CONN_CLOSING)
		return;
	conn->state = CONN_CLOSING;
	conn->close_err = err;
	/* A cancel that cannot be queued (ring full) is backed by shutdown(2). */
	if ((ferry__loop_req_pending(&conn->rx_req) &&
	     ferry__loop_cancel(&conn->rx_req) == -EAGAIN) ||
	    (ferry__loop_req_pending(&conn->tx_req) &&
	     ferry__loop_cancel(&conn->tx_req) == -EAGAIN) ||
	    (conn->tx_zc && ferry__loop_cancel(&conn->tx_zc->zc_req) == -EAGAIN))
		shutdown(conn->fd, SHUT_RDWR);
	if (ferry__loop_req_pending(&conn->connect_req))
		(void)ferry__loop_cancel(&conn->connect_req);
	(void)ferry__loop_timer_start(conn->loop, &conn->timer, 0, 0, on_timer);
}

/* Release a message that is out of the queue and whose zero-copy send (if any) is over. A sent
 * pack chunk is kept as the connection's spare: a pipelined client makes the server allocate
 * and free one 16 KiB chunk per batch, and glibc answers that pattern (many connections, a
 * thread arena) by growing and trimming its heap with madvise each time, which cost ~10% of the
 * GCS loop thread under 50 pipelining clients. One spare per connection bounds what is kept. */
static void tx_release(struct conn_tx *node, int status)
{
	struct ferry__conn *conn = node->conn;

	if (node->queued || ferry__loop_req_pending(&node->zc_req))
		return;
	ferry__conn_close_fds(node->fds, node->nfds);
	if (node->done_cb)
		node->done_cb(node->done_arg, status);
	if (node->packed && conn && !conn->tx_spare && conn->state != CONN_CLOSING) {
		conn->tx_spare = node;
		return;
	}
	ferry__free(node);
}

static void stop_timers(struct ferry__conn *conn)
{
	(void)ferry__loop_timer_stop(&conn->timer);
	(void)ferry__loop_timer_stop(&conn->tx_timer);
	(void)ferry__loop_timer_stop(&conn->stall_timer);
	(void)ferry__loop_timer_stop(&conn->frame_timer);
}

static void conn_release(struct ferry__conn *conn)
{
	int status = conn->close_err ? conn->close_err : -ECANCELED;
	struct conn_tx *node, *next;
	bool big;

	stop_timers(conn);
	for (node = conn->tx_head; node; node = next) {
		next = node->next;
		node->queued = false;
		tx_release(node, status);
	}
	ferry__free(conn->tx_spare);
	conn->tx_spare = NULL;
	for (unsigned i = 0; i < conn->nbatches; i++)
		ferry__conn_close_fds(conn->batches[i].fds, conn->batches[i].nfds);
	ferry__frame_parser_fini(&conn->parser);
	if (conn->server)
		ferry__conn_server_forget(conn);
	if (conn->cb)
		conn->cb->on_close(conn, conn->close_err);
	big = conn->tx_high >= TRIM_AFTER_BYTES;
	ferry__free(conn);
#ifdef __GLIBC__
	/* glibc keeps freed reply buffers in its heap (large ones too, once its mmap threshold
	 * has adapted upwards); a daemon's memory must come back after a peer that made it
	 * queue megabytes leaves. Only then: trimming walks the heap. */
	if (big)
		malloc_trim(0);
#endif
}

static void on_closed(struct ferry__loop_req *req, int result);

/* Progress a closing connection; true when it was freed (the caller must not touch it). */
static bool conn_finalize(struct ferry__conn *conn)
{
	struct linger abort_linger = {.l_onoff = 1, .l_linger = 0};

	if (conn->state != CONN_CLOSING || ferry__loop_req_pending(&conn->rx_req) ||
	    ferry__loop_req_pending(&conn->tx_req) || ferry__loop_req_pending(&conn->connect_req) ||
	    ferry__loop_req_pending(&conn->close_req) || conn->tx_zc)
		return false;
	if (conn->fd >= 0) {
		/* Reset instead of lingering: a peer that stopped reading would hold the pages
		 * of pending zero-copy sends, and their notifications, for minutes. */
		if (conn->zc_outstanding)
			(void)setsockopt(conn->fd, SOL_SOCKET, SO_LINGER, &abort_linger,
					 sizeof(abort_linger));
		if (ferry__loop_close(conn->loop, &conn->close_req, conn->fd, on_closed) < 0)
			close(conn->fd);
		conn->fd = -1;
		if (ferry__loop_req_pending(&conn->close_req))
			return false;
	}
	if (conn->zc_outstanding)
		return false;
	conn_release(conn);
	return true;
}

static void on_closed(struct ferry__loop_req *req, int result)
{
	struct ferry__conn *conn = req->data;

	if (result < 0 && result != -ECANCELED)
		FLOG_DEBUG(CONN_LOG, "%s: close: %s", conn->peer, ferry_strerror(result));
	conn_finalize(conn);
}

static void on_timer(struct ferry__loop_timer *timer, int status)
{
	struct ferry__conn *conn = timer->data;

	if (status < 0) {
		start_close(conn, status);
	} else if (conn->state == CONN_CLOSING) {
		/* the kick */
	} else if (conn->notify_connect) {
		conn->notify_connect = false;
		if (conn->cb && conn->cb->on_connect)
			conn->cb->on_connect(conn);
	} else if (conn->state == CONN_FLUSHING) {
		start_close(conn, conn->close_err);
	} else if (conn->state == CONN_HANDSHAKE || conn->state == CONN_CONNECTING) {
		FLOG_PEER_WARN(CONN_LOG, conn->peer, "%s: no handshake within %u ms, closing",
			       conn->peer, conn->timeout_ms);
		start_close(conn, -ETIMEDOUT);
	}
	conn_finalize(conn);
}

/* The queue stayed past max_queued_bytes for stall_ms: the peer does not read. */
static void on_stall_timer(struct ferry__loop_timer *timer, int status)
{
	struct ferry__conn *conn = timer->data;

	if (status == 0 && conn->state < CONN_CLOSING) {
		FLOG_PEER_WARN(CONN_LOG, conn->peer,
			       "%s: %zu bytes unsent for %u ms (the peer does not read); closing",
			       conn->peer, conn->tx_bytes, conn->stall_ms);
		status = -ETIMEDOUT;
	}
	start_close(conn, status);
	conn_finalize(conn);
}

static bool frame_pending(const struct ferry__conn *conn)
{
	return !conn->rx_paused && conn->state <= CONN_OPEN &&
	       ferry__frame_parser_pending(&conn->parser);
}

/* A frame was begun and nothing more came for frame_ms. The timer is armed lazily (see
 * ferry__conn_frame_deadline): it checks the last progress and re-arms for what is left. */
static void on_frame_timer(struct ferry__loop_timer *timer, int status)
{
	struct ferry__conn *conn = timer->data;
	uint64_t idle = ferry__loop_now_ms() - conn->rx_progress_ms;

	if (status == 0 && !frame_pending(conn))
		return;
	if (status == 0 && idle < conn->frame_ms) {
		(void)ferry__loop_timer_start(conn->loop, &conn->frame_timer, conn->frame_ms - idle,
					      0, on_frame_timer);
		return;
	}
	if (status == 0 && conn->state < CONN_CLOSING) {
		FLOG_PEER_WARN(CONN_LOG, conn->peer,
			       "%s: idle for %u ms in the middle of a frame (%zu bytes of it); "
			       "closing",
			       conn->peer, conn->frame_ms,
			       ferry__frame_parser_pending(&conn->parser));
		status = -ETIMEDOUT;
	}
	start_close(conn, status);
	conn_finalize(conn);
}

/* After a read: note the progress and make sure a deadline runs while a frame is half in.
 * Reads that end mid-frame are common under pipelining, so the timer is not restarted per
 * read: it is armed once and re-arms itself from rx_progress_ms when it fires. */
void ferry__conn_frame_deadline(struct ferry__conn *conn)
{
	if (!conn->frame_ms || !frame_pending(conn))
		return;
	conn->rx_progress_ms = ferry__loop_now_ms();
	if (!ferry__loop_timer_active(&conn->frame_timer))
		(void)ferry__loop_timer_start(conn->loop, &conn->frame_timer, conn->frame_ms, 0,
					      on_frame_timer);
}

void ferry__conn_abort(struct ferry__conn *conn, int err)
{
	start_close(conn, err);
}

bool ferry__conn_finalize(struct ferry__conn *conn)
{
	return conn_finalize(conn);
}

void ferry__conn_close(struct ferry__conn *conn)
{
	start_close(conn, 0);
}

/*
 * Stop delivering, send what is queued (a refusal), then close with @err. Closing with unread
 * input would make TCP reset the connection and could destroy the reply on its way, so the
 * close is graceful: after the last byte, shut down our side and drain the peer's until it
 * closes too, within FLUSH_TIMEOUT_MS.
 */
void ferry__conn_flush_close(struct ferry__conn *conn, int err)
{
	if (conn->state >= CONN_FLUSHING)
		return;
	conn->state = CONN_FLUSHING;
	conn->close_err = err;
	if (ferry__loop_timer_start(conn->loop, &conn->timer, FLUSH_TIMEOUT_MS, 0, on_timer) < 0) {
		start_close(conn, err);
		return;
	}
	if (!conn->tx_head && !conn->tx_busy)
		shutdown(conn->fd, SHUT_WR);
}

/* ---- send ---- */

static int tx_error(int err)
{
	return err == -EPIPE ? -ECONNRESET : err;
}

/* Bytes of node->header that go out: a packed chunk carries its frames' headers in data[]. */
static size_t tx_hdr(const struct conn_tx *node)
{
	return node->packed ? 0 : FERRY_FRAME_HEADER_SIZE;
}

static unsigned tx_iovs(const struct conn_tx *node, struct iovec *iov, unsigned n)
{
	size_t hdr = tx_hdr(node), off;

	if (node->done < hdr)
		iov[n++] = (struct iovec){(void *)(uintptr_t)(node->header + node->done),
					  hdr - node->done};
	off = node->done > hdr ? node->done - hdr : 0;
	if (off < node->len)
		iov[n++] =
			(struct iovec){(void *)(uintptr_t)(node->payload + off), node->len - off};
	return n;
}

static void tx_attach_fds(struct ferry__conn *conn, struct msghdr *m, const struct conn_tx *node)
{
	struct cmsghdr *cm;

	memset(&conn->tx_cmsg, 0, sizeof(conn->tx_cmsg));
	m->msg_control = conn->tx_cmsg.buf;
	m->msg_controllen = CMSG_SPACE(sizeof(int) * node->nfds);
	cm = CMSG_FIRSTHDR(m);
	if (!cm)
		return; /* cannot happen: the control buffer has room */
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * node->nfds);
	memcpy(CMSG_DATA(cm), node->fds, sizeof(int) * node->nfds);
}

static void on_tx(struct ferry__loop_req *req, int result);
static void on_zc_sent(struct ferry__loop_req *req, int result);
static void on_zc_done(struct ferry__loop_req *req, int result);

/* Gather queued messages from the head into one sendmsg; a message with fds goes alone. */
static int tx_send_gather(struct ferry__conn *conn)
{
	struct msghdr *m = &conn->tx_msg;
	struct conn_tx *node;
	unsigned n = 0;

	memset(m, 0, sizeof(*m));
	for (node = conn->tx_head; node && n + 2 <= CONN_TX_IOV; node = node->next) {
		if (node != conn->tx_head && ((node->zc && node->done == 0) || node->nfds))
			break;
		n = tx_iovs(node, conn->tx_iov, n);
		if (node->nfds)
			break;
	}
	m->msg_iov = conn->tx_iov;
	m->msg_iovlen = n;
	if (conn->tx_head->nfds)
		tx_attach_fds(conn, m, conn->tx_head);
	return ferry__loop_sendmsg(conn->loop, &conn->tx_req, conn->fd, m,
				   MSG_NOSIGNAL | MSG_WAITALL, on_tx);
}

static int tx_send_zc(struct ferry__conn *conn, struct conn_tx *node)
{
	int ret;

	node->zc_iov[0] = (struct iovec){node->header, FERRY_FRAME_HEADER_SIZE};
	node->zc_iov[1] = (struct iovec){(void *)(uintptr_t)node->payload, node->len};
	memset(&node->zc_msg, 0, sizeof(node->zc_msg));
	node->zc_msg.msg_iov = node->zc_iov;
	node->zc_msg.msg_iovlen = 2;
	ret = ferry__loop_sendmsg_zc(conn->loop, &node->zc_req, conn->fd, &node->zc_msg,
				     MSG_NOSIGNAL | MSG_WAITALL, on_zc_sent, on_zc_done);
	if (ret == 0) {
		conn->zc_outstanding++;
		conn->tx_zc = node;
	}
	return ret;
}

static void tx_kick(struct ferry__conn *conn)
{
	struct conn_tx *head = conn->tx_head;
	int ret;

	if (conn->tx_busy || !head || conn->state == CONN_CONNECTING || conn->state == CONN_CLOSING)
		return;
	if (head->zc && head->done == 0)
		ret = tx_send_zc(conn, head);
	else
		ret = tx_send_gather(conn);
	if (ret < 0)
		start_close(conn, ret);
	else
		conn->tx_busy = true;
}

/* @bytes of the queue were written: complete messages leave the queue. */
static void tx_advance(struct ferry__conn *conn, size_t bytes)
{
	struct conn_tx *node;

	while (bytes && (node = conn->tx_head)) {
		size_t left = tx_hdr(node) + node->len - node->done;
		size_t n = bytes < left ? bytes : left;

		node->done += n;
		bytes -= n;
		conn->tx_bytes -= n;
		/* The kernel took its own references with the first write. */
		ferry__conn_close_fds(node->fds, node->nfds);
		node->nfds = 0;
		if (n < left)
			break;
		conn->tx_head = node->next;
		if (!conn->tx_head) {
			conn->tx_tail = &conn->tx_head;
			conn->tx_last = NULL;
		}
		node->queued = false;
		tx_release(node, 0);
	}
	if (conn->tx_bytes < conn->tx_pause)
		(void)ferry__loop_timer_stop(&conn->stall_timer);
}

/* A send completed: if the queue drained below max_queued_bytes, deliver and read again. */
static void tx_maybe_resume(struct ferry__conn *conn)
{
	if (conn->rx_paused && conn->tx_bytes < conn->tx_pause && conn->state == CONN_OPEN)
		ferry__conn_rx_resume(conn);
}

/* After a send completed: go on, or end a flush with our half of the close. */
static void tx_next(struct ferry__conn *conn)
{
	if (conn->state == CONN_FLUSHING && !conn->tx_head && !conn->tx_busy)
		shutdown(conn->fd, SHUT_WR);
	else
		tx_schedule(conn);
}

static void on_tx_timer(struct ferry__loop_timer *timer, int status)
{
	struct ferry__conn *conn = timer->data;

	if (status < 0)
		return; /* the loop is being destroyed: the close path owns the connection */
	tx_kick(conn);
	conn_finalize(conn);
}

/* Kick the send at the end of this loop pass (see DESIGN), unless one is in flight: its
 * completion schedules the next. */
static void tx_schedule(struct ferry__conn *conn)
{
	if (conn->tx_busy || !conn->tx_head || ferry__loop_timer_active(&conn->tx_timer))
		return;
	if (ferry__loop_timer_start(conn->loop, &conn->tx_timer, 0, 0, on_tx_timer) < 0)
		tx_kick(conn); /* destroy began: the kick fails and closes */
}

static void on_tx(struct ferry__loop_req *req, int result)
{
	struct ferry__conn *conn = req->data;

	conn->tx_busy = false;
	if (conn->state != CONN_CLOSING) {
		if (result < 0) {
			FLOG_INFO(CONN_LOG, "%s: send: %s", conn->peer, ferry_strerror(result));
			start_close(conn, tx_error(result));
		} else {
			tx_advance(conn, (size_t)result);
			tx_next(conn);
			tx_maybe_resume(conn);
		}
	}
	conn_finalize(conn);
}

static void on_zc_sent(struct ferry__loop_req *req, int result)
{
	struct conn_tx *node = req->data;
	struct ferry__conn *conn = node->conn;

	conn->tx_busy = false;
	conn->tx_zc = NULL;
	if (conn->state == CONN_CLOSING)
		return;
	if (result == -EOPNOTSUPP || result == -EINVAL) {
		/* This socket cannot do zero copy: send everything the ordinary way. */
		FLOG_INFO(CONN_LOG, "%s: zero-copy send unsupported (%s); copying instead",
			  conn->peer, ferry_strerror(result));
		conn->zc_min = SIZE_MAX;
		for (struct conn_tx *n = conn->tx_head; n; n = n->next)
			n->zc = false;
		tx_kick(conn);
	} else if (result < 0) {
		FLOG_INFO(CONN_LOG, "%s: send: %s", conn->peer, ferry_strerror(result));
		start_close(conn, tx_error(result));
	} else {
		tx_advance(conn, (size_t)result);
		tx_next(conn);
		tx_maybe_resume(conn);
	}
}

static void on_zc_done(struct ferry__loop_req *req, int result)
{
	struct conn_tx *node = req->data;
	struct ferry__conn *conn = node->conn;

	(void)result; /* on_zc_sent saw it */
	conn->zc_outstanding--;
	if (conn->tx_zc == node) {
		/* Destroy skips the sent stage and delivers only this final callback. */
		conn->tx_zc = NULL;
		conn->tx_busy = false;
	}
	tx_release(node, 0);
	conn_finalize(conn);
}

static int dup_fds(int *dst, const int *fds, unsigned nfds)
{
	for (unsigned i = 0; i < nfds; i++) {
		dst[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (dst[i] < 0) {
			int ret = -errno;

			FLOG_ERROR(CONN_LOG, "cannot send fd %d: %s", fds[i], ferry_strerror(ret));
			ferry__conn_close_fds(dst, i);
			return ret;
		}
	}
	return 0;
}

static void tx_link(struct ferry__conn *conn, struct conn_tx *node)
{
	node->conn = conn;
	node->zc_req.data = node;
	node->queued = true;
	*conn->tx_tail = node;
	conn->tx_tail = &node->next;
	conn->tx_last = node;
}

/* Append a small frame to the newest chunk, or to a new one. 0 or -ENOMEM. */
static int tx_pack(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct conn_tx *node = conn->tx_last;
	size_t need = FERRY_FRAME_HEADER_SIZE + len;

	if (!node || !node->packed || CONN_PACK_BYTES - node->len < need) {
		node = conn->tx_spare ? conn->tx_spare
				      : ferry__malloc(sizeof(*node) + CONN_PACK_BYTES);
		if (!node)
			return -ENOMEM;
		conn->tx_spare = NULL;
		memset(node, 0, sizeof(*node));
		node->payload = node->data;
		node->packed = true;
		tx_link(conn, node);
	}
	ferry__frame_header_encode(node->data + node->len, type, (uint32_t)len);
	if (len)
		memcpy(node->data + node->len + FERRY_FRAME_HEADER_SIZE, payload, len);
	node->len += need;
	return 0;
}

static int conn_queue(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len,
		      bool copy, const int *fds, unsigned nfds, void (*done)(void *, int),
		      void *arg)
{
	struct conn_tx *node;
	int ret;

	if (conn->state >= CONN_FLUSHING)
		return -ENOTCONN;
	if (len > conn->max_message) {
		FLOG_ERROR(CONN_LOG, "%s: message of %zu bytes exceeds the limit of %u", conn->peer,
			   len, conn->max_message);
		return -EMSGSIZE;
	}
	if (conn->tx_max - conn->tx_bytes < FERRY_FRAME_HEADER_SIZE + len) {
		FLOG_PEER_WARN(CONN_LOG, conn->peer,
			       "%s: %zu bytes unsent and the peer does not read; closing",
			       conn->peer, conn->tx_bytes);
		start_close(conn, -ENOBUFS);
		return -ENOBUFS;
	}
	if (copy && !nfds && len <= CONN_PACK_MAX &&
	    (conn->family == AF_UNIX || len < conn->zc_min)) {
		ret = tx_pack(conn, type, payload, len);
		goto out;
	}
	node = ferry__malloc(sizeof(*node) + (copy ? len : 0));
	if (!node)
		return -ENOMEM;
	memset(node, 0, sizeof(*node));
	ret = dup_fds(node->fds, fds, nfds);
	if (ret < 0) {
		ferry__free(node);
		return ret;
	}
	if (copy && len)
		memcpy(node->data, payload, len);
	node->payload = copy ? node->data : payload;
	node->len = len;
	node->nfds = nfds;
	node->done_cb = done;
	node->done_arg = arg;
	node->zc = conn->family != AF_UNIX && len >= conn->zc_min && !nfds;
	ferry__frame_header_encode(node->header, type, (uint32_t)len);
	tx_link(conn, node);
out:
	if (ret == 0) {
		conn->tx_bytes += FERRY_FRAME_HEADER_SIZE + len;
		if (conn->tx_bytes > conn->tx_high)
			conn->tx_high = conn->tx_bytes;
		if (conn->tx_bytes >= conn->tx_pause && conn->stall_ms &&
		    !ferry__loop_timer_active(&conn->stall_timer))
			(void)ferry__loop_timer_start(conn->loop, &conn->stall_timer,
						      conn->stall_ms, 0, on_stall_timer);
		tx_schedule(conn);
	}
	return ret;
}

void ferry__conn_flush(struct ferry__conn *conn)
{
	if (conn->tx_busy || !conn->tx_head || conn->state == CONN_CLOSING)
		return;
	(void)ferry__loop_timer_stop(&conn->tx_timer);
	tx_kick(conn);
}

int ferry__conn_send(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	return conn_queue(conn, type, payload, len, true, NULL, 0, NULL, NULL);
}

int ferry__conn_send_fds(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len,
			 const int *fds, unsigned nfds)
{
	if (conn->family != AF_UNIX) {
		FLOG_ERROR(CONN_LOG, "%s: fd passing needs a Unix socket", conn->peer);
		return -EOPNOTSUPP;
	}
	if (nfds == 0 || nfds > FERRY_CONN_MAX_FDS) {
		FLOG_ERROR(CONN_LOG, "%s: %u fds in one message (1..%d)", conn->peer, nfds,
			   FERRY_CONN_MAX_FDS);
		return -EINVAL;
	}
	return conn_queue(conn, type, payload, len, true, fds, nfds, NULL, NULL);
}

int ferry__conn_send_borrowed(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len, void (*done)(void *arg, int status), void *arg)
{
	if (!done)
		return -EINVAL;
	return conn_queue(conn, type, payload, len, false, NULL, 0, done, arg);
}

/* ---- creation ---- */

/*
 * A name for logs, which is also the key of the per-peer log limit (log.h): an address for TCP;
 * for an unnamed Unix-socket peer, its process as the kernel saw it at connect (SO_PEERCRED),
 * so that one local process flooding a socket with connections shares one budget of lines.
 */
static void set_peer_name(struct ferry__conn *conn)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct ucred uc;
	socklen_t uclen = sizeof(uc);

	if (getpeername(conn->fd, (struct sockaddr *)&ss, &len) == 0 &&
	    (ss.ss_family != AF_UNIX || len > sizeof(sa_family_t) + 1))
		ferry__net_describe((struct sockaddr *)&ss, len, conn->peer, sizeof(conn->peer));
	else if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &uc, &uclen) == 0 && uc.pid > 0)
		snprintf(conn->peer, sizeof(conn->peer), "local pid %d uid %u", (int)uc.pid,
			 (unsigned)uc.uid);
	else
		snprintf(conn->peer, sizeof(conn->peer), "fd %d", conn->fd);
}

int ferry__conn_new(struct ferry__loop *loop, const struct ferry__conn_opts *opts, int fd,
		    struct ferry__conn **out)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct ferry__conn *conn;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		FLOG_ERROR(CONN_LOG, "fd %d is not a socket: %s", fd, ferry_strerror(-errno));
		return -ENOTSOCK;
	}
	conn = ferry__calloc(1, sizeof(*conn));
	if (!conn)
		return -ENOMEM;
	conn->loop = loop;
	conn->cb = opts->cb;
	conn->data = opts->data;
	conn->fd = fd;
	conn->family = ss.ss_family;
	conn->max_message =
		opts->max_message_bytes ? opts->max_message_bytes : FERRY_FRAME_MAX_LENGTH_DEFAULT;
	conn->zc_min = opts->zerocopy_min_bytes ? opts->zerocopy_min_bytes : DEFAULT_ZC_MIN;
	conn->timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms : DEFAULT_TIMEOUT_MS;
	conn->timer.data = conn;
	conn->tx_timer.data = conn;
	conn->stall_timer.data = conn->frame_timer.data = conn;
	ferry__conn_set_limits(conn, opts, false);
	conn->connect_req.data = conn->close_req.data = conn;
	conn->rx_req.data = conn->tx_req.data = conn;
	conn->tx_tail = &conn->tx_head;
	ferry__frame_parser_init(&conn->parser, conn->max_message);
	set_peer_name(conn);
	*out = conn;
	return 0;
}

/* Zero means none for a connection we opened, the server default for an accepted one; SIZE_MAX
 * / UINT_MAX mean none for both. */
void ferry__conn_set_limits(struct ferry__conn *conn, const struct ferry__conn_opts *opts,
			    bool server)
{
	size_t queued = opts->max_queued_bytes;
	unsigned stall = opts->stall_timeout_ms, frame = opts->frame_timeout_ms;

	if (!queued)
		queued = server ? FERRY_CONN_SERVER_DEFAULT_MAX_QUEUED_BYTES : SIZE_MAX;
	if (!stall)
		stall = server ? FERRY_CONN_SERVER_DEFAULT_STALL_TIMEOUT_MS : 0;
	if (!frame)
		frame = server ? FERRY_CONN_SERVER_DEFAULT_FRAME_TIMEOUT_MS : 0;
	conn->tx_pause = queued;
	/* Room for what a paused connection can still owe: the reply to the message that
	 * crossed the line, plus pushed traffic (pub/sub) until the stall deadline. */
	conn->tx_max = queued >= (SIZE_MAX - FERRY_FRAME_HEADER_SIZE - conn->max_message) / 2
			       ? SIZE_MAX
			       : 2 * queued + FERRY_FRAME_HEADER_SIZE + conn->max_message;
	conn->stall_ms = stall == UINT_MAX || queued == SIZE_MAX ? 0 : stall;
	conn->frame_ms = frame == UINT_MAX ? 0 : frame;
}

void ferry__conn_set_frame_max(struct ferry__conn *conn, uint32_t max)
{
	conn->parser.max_length = max && max < conn->max_message ? max : conn->max_message;
}

/* Free a connection that never started (no request was made, no callback is owed). */
static void conn_discard(struct ferry__conn *conn)
{
	struct conn_tx *node, *next;

	stop_timers(conn);
	for (node = conn->tx_head; node; node = next) {
		next = node->next;
		ferry__conn_close_fds(node->fds, node->nfds);
		ferry__free(node);
	}
	ferry__frame_parser_fini(&conn->parser);
	ferry__free(conn);
}

/* Start receiving (and sending what is queued). With @handshake, wait for it under a deadline. */
void ferry__conn_begin(struct ferry__conn *conn, bool handshake)
{
	int ret;

	conn->stream_up = true;
	conn->state = handshake ? CONN_HANDSHAKE : CONN_OPEN;
	ret = ferry__conn_rx_arm(conn);
	if (ret == 0 && handshake)
		ret = ferry__loop_timer_start(conn->loop, &conn->timer, conn->timeout_ms, 0,
					      on_timer);
	if (ret < 0) {
		start_close(conn, ret);
		return;
	}
	tx_kick(conn);
}

/* The server accepted the handshake. */
void ferry__conn_accepted(struct ferry__conn *conn)
{
	(void)ferry__loop_timer_stop(&conn->timer);
	conn->state = CONN_OPEN;
}

static int check_opts(const struct ferry__conn_opts *opts)
{
	if (!opts || !opts->cb || !opts->cb->on_message || !opts->cb->on_close) {
		FLOG_ERROR(CONN_LOG, "connection options without on_message and on_close");
		return -EINVAL;
	}
	return 0;
}

static int queue_handshake(struct ferry__conn *conn, const struct ferry__wire_handshake *hs)
{
	struct ferry__fb_builder b;
	int ret;

	ferry__fb_builder_init(&b);
	ret = ferry__wire_handshake_build(&b, hs);
	if (ret == 0)
		ret = ferry__conn_send(conn, FERRY__WIRE_MSG_HANDSHAKE, ferry__fb_builder_data(&b),
				       ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	conn->client_handshake = ret == 0;
	return ret;
}

static void on_connected(struct ferry__loop_req *req, int result)
{
	struct ferry__conn *conn = req->data;

	if (conn->state == CONN_CONNECTING) {
		if (result < 0) {
			FLOG_INFO(CONN_LOG, "connect to %s: %s", conn->peer,
				  ferry_strerror(result));
			start_close(conn, result);
		} else {
			ferry__net_tune(conn->fd);
			ferry__conn_begin(conn, conn->client_handshake);
			if (!conn->client_handshake && conn->state == CONN_OPEN &&
			    conn->cb->on_connect)
				conn->cb->on_connect(conn);
		}
	}
	conn_finalize(conn);
}

static int conn_connect(struct ferry__loop *loop, const struct sockaddr_storage *addr,
			socklen_t addr_len, const struct ferry__conn_opts *opts,
			struct ferry__conn **out)
{
	struct ferry__conn *conn;
	int fd, ret;

	fd = ferry__net_socket(addr->ss_family);
	if (fd < 0)
		return fd;
	ret = ferry__conn_new(loop, opts, fd, &conn);
	if (ret < 0)
		goto err_close_fd;
	conn->state = CONN_CONNECTING;
	memcpy(&conn->addr, addr, addr_len);
	conn->addr_len = addr_len;
	ferry__net_describe((const struct sockaddr *)addr, addr_len, conn->peer,
			    sizeof(conn->peer));
	if (opts->handshake && (ret = queue_handshake(conn, opts->handshake)) < 0)
		goto err_discard;
	ret = ferry__loop_connect(loop, &conn->connect_req, fd, (struct sockaddr *)&conn->addr,
				  addr_len, conn->timeout_ms, on_connected);
	if (ret < 0)
		goto err_discard;
	*out = conn;
	return 0;

err_discard:
	conn_discard(conn);
err_close_fd:
	close(fd);
	return ret;
}

int ferry__conn_connect_tcp(struct ferry__loop *loop, const char *host, uint16_t port,
			    const struct ferry__conn_opts *opts, struct ferry__conn **out)
{
	struct sockaddr_storage addr;
	socklen_t len;
	int ret = check_opts(opts);

	if (ret == 0)
		ret = ferry__net_resolve(host, port, &addr, &len);
	if (ret == 0)
		ret = conn_connect(loop, &addr, len, opts, out);
	return ret;
}

int ferry__conn_connect_unix(struct ferry__loop *loop, const char *path,
			     const struct ferry__conn_opts *opts, struct ferry__conn **out)
{
	struct sockaddr_storage addr;
	socklen_t len;
	int ret = check_opts(opts);

	if (ret == 0)
		ret = ferry__net_unix_addr(path, &addr, &len);
	if (ret == 0)
		ret = conn_connect(loop, &addr, len, opts, out);
	return ret;
}

int ferry__conn_open(struct ferry__loop *loop, int fd, const struct ferry__conn_opts *opts,
		     struct ferry__conn **out)
{
	struct ferry__conn *conn;
	int ret = check_opts(opts);

	if (ret == 0)
		ret = ferry__conn_new(loop, opts, fd, &conn);
	if (ret < 0)
		return ret;
	if (opts->handshake && (ret = queue_handshake(conn, opts->handshake)) < 0) {
		conn_discard(conn);
		return ret;
	}
	if (!conn->client_handshake) {
		/* on_connect from the loop, not from inside this call. */
		ret = ferry__loop_timer_start(loop, &conn->timer, 0, 0, on_timer);
		if (ret < 0) {
			conn_discard(conn);
			return ret;
		}
		conn->notify_connect = true;
	}
	ferry__net_tune(fd);
	ferry__conn_begin(conn, conn->client_handshake);
	*out = conn;
	return 0;
}

/* ---- accessors ---- */

void ferry__conn_set_callbacks(struct ferry__conn *conn, const struct ferry__conn_callbacks *cb,
			       void *data)
{
	conn->cb = cb;
	conn->data = data;
}

void *ferry__conn_data(const struct ferry__conn *conn)
{
	return conn->data;
}

struct ferry__loop *ferry__conn_loop(const struct ferry__conn *conn)
{
	return conn->loop;
}

const char *ferry__conn_peer(const struct ferry__conn *conn)
{
	return conn->peer;
}

size_t ferry__conn_queued_bytes(const struct ferry__conn *conn)
{
	return conn->tx_bytes;
}

int ferry__conn_local_addr(const struct ferry__conn *conn, struct sockaddr_storage *ss,
			   socklen_t *len)
{
	*len = sizeof(*ss);
	return getsockname(conn->fd, (struct sockaddr *)ss, len) == 0 ? 0 : -errno;
}

bool ferry__conn_rx_paused(const struct ferry__conn *conn)
{
	return conn->rx_paused;
}

enum ferry__conn_progress ferry__conn_progress(const struct ferry__conn *conn)
{
	if (conn->framed)
		return FERRY__CONN_FRAMED;
	return conn->stream_up ? FERRY__CONN_STREAM : FERRY__CONN_NO_STREAM;
}

bool ferry__conn_is_open(const struct ferry__conn *conn)
{
	return conn->state < CONN_FLUSHING;
}
