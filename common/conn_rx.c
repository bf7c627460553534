/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The receive side of framed connections: recv/recvmsg into the frame parser, fds that came
 * along, verification, delivery, the client's handshake reply, draining while a refusal is
 * flushed. See the DESIGN block in conn.c.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/conn_int.h"
#include "common/log.h"

#define MAX_READ (1u << 30) /* one io_uring request carries at most 4 GiB; stay well below */

static void on_rx(struct ferry__loop_req *req, int result);

/* Collect the fds that came with a read of @n bytes (Unix sockets). */
static int rx_collect_fds(struct ferry__conn *conn, size_t n)
{
	struct conn_fd_batch *b = &conn->batches[conn->nbatches];
	unsigned got = 0;
	int fds[FERRY_CONN_MAX_FDS];

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&conn->rx_msg); cm;
	     cm = CMSG_NXTHDR(&conn->rx_msg, cm)) {
		unsigned k = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (unsigned i = 0; i < k && got < FERRY_CONN_MAX_FDS; i++)
			memcpy(&fds[got++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	}
	/* Consumed: a later look at this msghdr (after a plain recv) must not see them again. */
	conn->rx_msg.msg_controllen = 0;
	if ((conn->rx_msg.msg_flags & MSG_CTRUNC) || (got && conn->nbatches == CONN_FD_BATCHES)) {
		FLOG_WARN(CONN_LOG, "%s: peer sent more fds than a message may carry", conn->peer);
		ferry__conn_close_fds(fds, got);
		return -EPROTO;
	}
	if (!got)
		return 0;
	b->start = conn->rx_total;
	b->end = conn->rx_total + n;
	memcpy(b->fds, fds, sizeof(int) * got);
	b->nfds = got;
	conn->nbatches++;
	return 0;
}

static void drop_batch(struct ferry__conn *conn)
{
	conn->nbatches--;
	memmove(&conn->batches[0], &conn->batches[1], sizeof(conn->batches[0]) * conn->nbatches);
}

/* Give the frame at stream bytes [@start, @end) the fds of the read it is the last frame of. */
static void rx_attach_fds(struct ferry__conn *conn, uint64_t start, uint64_t end)
{
	while (conn->nbatches) {
		struct conn_fd_batch *b = &conn->batches[0];

		if (b->end <= start) {
			FLOG_WARN(CONN_LOG,
				  "%s: %u fds not attached to a message start; closing them",
				  conn->peer, b->nfds);
			ferry__conn_close_fds(b->fds, b->nfds);
			drop_batch(conn);
			continue;
		}
		if (b->start <= start && end >= b->end) {
			memcpy(conn->msg_fds, b->fds, sizeof(int) * b->nfds);
			conn->msg_nfds = b->nfds;
			drop_batch(conn);
		}
		return;
	}
}

static void rx_close_msg_fds(struct ferry__conn *conn)
{
	ferry__conn_close_fds(conn->msg_fds + conn->msg_fd_next,
			      conn->msg_nfds - conn->msg_fd_next);
	conn->msg_nfds = conn->msg_fd_next = 0;
}

static void client_handshake_reply(struct ferry__conn *conn, const struct ferry__frame *f)
{
	struct ferry__wire_handshake_reply_view v;
	int32_t status;

	if (f->type != FERRY__WIRE_MSG_HANDSHAKE_REPLY) {
		FLOG_WARN(CONN_LOG, "%s: expected a HandshakeReply, got %s", conn->peer,
			  ferry__wire_message_name(f->type));
		ferry__conn_abort(conn, -EPROTO);
		return;
	}
	v = ferry__wire_handshake_reply_root_verified(f->payload);
	status = ferry__wire_handshake_reply_status(v);
	if (status != 0) {
		if (status > 0 || status < -4095)
			status = -EPROTO;
		FLOG_WARN(CONN_LOG, "%s: handshake refused: %s", conn->peer,
			  ferry_strerror(status));
		ferry__conn_abort(conn, status);
		return;
	}
	(void)ferry__loop_timer_stop(&conn->timer);
	conn->state = CONN_OPEN;
	if (conn->cb->on_connect)
		conn->cb->on_connect(conn);
}

static void rx_dispatch(struct ferry__conn *conn, const struct ferry__frame *f)
{
	if (conn->state == CONN_OPEN)
		conn->cb->on_message(conn, f->type, f->payload, f->length);
	else if (conn->server)
		ferry__conn_server_handshake(conn, f->type, f->payload, f->length);
	else
		client_handshake_reply(conn, f);
}

/* Hand out every complete frame. Returns 0 or -EPROTO. */
static int rx_deliver(struct ferry__conn *conn)
{
	struct ferry__frame f;
	uint64_t start;
	int ret;

	while (conn->state == CONN_OPEN || conn->state == CONN_HANDSHAKE) {
		/* Backpressure: the replies to what is delivered would queue past the cap. The
		 * frames stay in the parser; ferry__conn_rx_resume() goes on from here. */
		if (conn->state == CONN_OPEN && conn->tx_bytes >= conn->tx_pause) {
			if (!conn->rx_paused)
				FLOG_DEBUG(CONN_LOG, "%s: %zu bytes unsent; reading held back",
					   conn->peer, conn->tx_bytes);
			conn->rx_paused = true;
			return 0;
		}
		ret = ferry__frame_parser_next(&conn->parser, &f);
		if (ret <= 0) {
			if (ret < 0)
				FLOG_WARN(CONN_LOG, "%s: bad frame header, closing", conn->peer);
			return ret;
		}
		start = conn->rx_frame_at;
		conn->rx_frame_at += FERRY_FRAME_HEADER_SIZE + (uint64_t)f.length;
		if (conn->nbatches)
			rx_attach_fds(conn, start, conn->rx_frame_at);
		if (ferry__wire_verify(f.type, f.payload, f.length) < 0) {
			FLOG_WARN(CONN_LOG, "%s: malformed %s message, closing", conn->peer,
				  ferry__wire_message_name(f.type));
			rx_close_msg_fds(conn);
			return -EPROTO;
		}
		conn->framed = true;
		rx_dispatch(conn, &f);
		rx_close_msg_fds(conn);
	}
	return 0;
}

static void rx_failed(struct ferry__conn *conn, int result)
{
	size_t partial = ferry__frame_parser_pending(&conn->parser);

	if (result == 0 && partial)
		FLOG_WARN(CONN_LOG, "%s: peer closed in the middle of a message (%zu bytes of it)",
			  conn->peer, partial);
	else if (result == 0)
		FLOG_DEBUG(CONN_LOG, "%s: peer closed", conn->peer);
	else if (result != -ECANCELED)
		FLOG_INFO(CONN_LOG, "%s: receive: %s", conn->peer, ferry_strerror(result));
	ferry__conn_abort(conn, result == 0 ? -ECONNRESET : result);
}

/* Close the fds that came with a read nobody will deliver. */
static void rx_discard_fds(struct ferry__conn *conn, int result)
{
	unsigned before = conn->nbatches;

	if (conn->family != AF_UNIX || result <= 0 || rx_collect_fds(conn, 0) < 0 ||
	    conn->nbatches == before)
		return;
	conn->nbatches--;
	ferry__conn_close_fds(conn->batches[conn->nbatches].fds,
			      conn->batches[conn->nbatches].nfds);
}

/* Flushing: read and throw away until the peer closes its side. The parser's buffer is free
 * scratch now that nothing is delivered. */
static void rx_drain_arm(struct ferry__conn *conn)
{
	struct ferry__frame_parser *p = &conn->parser;

	if (!p->cap || ferry__loop_recv(conn->loop, &conn->rx_req, conn->fd, p->buf,
					p->cap > MAX_READ ? MAX_READ : p->cap, 0, on_rx) < 0)
		ferry__conn_abort(conn, conn->close_err);
}

static void rx_drain(struct ferry__conn *conn, int result)
{
	rx_discard_fds(conn, result);
	if (result <= 0)
		ferry__conn_abort(conn, conn->close_err);
	else
		rx_drain_arm(conn);
}

static void rx_process(struct ferry__conn *conn, size_t n)
{
	int ret;

	ferry__frame_parser_commit(&conn->parser, n);
	ret = conn->family == AF_UNIX ? rx_collect_fds(conn, n) : 0;
	conn->rx_total += n;
	if (ret == 0)
		ret = rx_deliver(conn);
	if (ret == 0 && conn->state == CONN_FLUSHING)
		rx_drain_arm(conn);
	else if (ret == 0 && conn->state < CONN_FLUSHING && !conn->rx_paused)
		ret = ferry__conn_rx_arm(conn);
	if (ret < 0)
		ferry__conn_abort(conn, ret);
	else
		ferry__conn_frame_deadline(conn);
}

void ferry__conn_rx_resume(struct ferry__conn *conn)
{
	const char *scope = ferry__log_peer_scope(conn->peer);
	int ret;

	conn->rx_paused = false;
	FLOG_DEBUG(CONN_LOG, "%s: queue drained to %zu bytes; reading again", conn->peer,
		   conn->tx_bytes);
	ret = rx_deliver(conn);
	if (ret == 0 && conn->state == CONN_OPEN && !conn->rx_paused &&
	    !ferry__loop_req_pending(&conn->rx_req))
		ret = ferry__conn_rx_arm(conn);
	if (ret < 0)
		ferry__conn_abort(conn, ret);
	else
		ferry__conn_frame_deadline(conn);
	ferry__log_peer_scope(scope);
}

static void on_rx(struct ferry__loop_req *req, int result)
{
	struct ferry__conn *conn = req->data;
	/* Whatever the peer's bytes make anyone warn about is rate-limited per peer. */
	const char *scope = ferry__log_peer_scope(conn->peer);

	if (conn->state == CONN_CLOSING)
		rx_discard_fds(conn, result);
	else if (conn->state == CONN_FLUSHING)
		rx_drain(conn, result);
	else if (result <= 0)
		rx_failed(conn, result);
	else
		rx_process(conn, (size_t)result);
	ferry__log_peer_scope(scope);
	ferry__conn_finalize(conn);
}

int ferry__conn_rx_arm(struct ferry__conn *conn)
{
	uint8_t *space;
	size_t size;
	int ret;

	ret = ferry__frame_parser_space(&conn->parser, &space, &size);
	if (ret < 0)
		return ret;
	if (size > MAX_READ)
		size = MAX_READ;
	if (conn->family != AF_UNIX)
		return ferry__loop_recv(conn->loop, &conn->rx_req, conn->fd, space, size, 0, on_rx);
	conn->rx_iov = (struct iovec){space, size};
	memset(&conn->rx_msg, 0, sizeof(conn->rx_msg));
	conn->rx_msg.msg_iov = &conn->rx_iov;
	conn->rx_msg.msg_iovlen = 1;
	conn->rx_msg.msg_control = conn->rx_cmsg.buf;
	conn->rx_msg.msg_controllen = sizeof(conn->rx_cmsg.buf);
	return ferry__loop_recvmsg(conn->loop, &conn->rx_req, conn->fd, &conn->rx_msg,
				   MSG_CMSG_CLOEXEC, on_rx);
}

int ferry__conn_take_fd(struct ferry__conn *conn)
{
	if (conn->msg_fd_next >= conn->msg_nfds)
		return -ENOENT;
	return conn->msg_fds[conn->msg_fd_next++];
}
