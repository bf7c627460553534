/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the connection tests: numbered test messages (ErrorReply with a patterned text
 * whose length the test chooses), a peer that records everything its callbacks saw, raw socket
 * helpers and "run until".
 */
#ifndef FERRY_TEST_CONN_TEST_H
#define FERRY_TEST_CONN_TEST_H

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/frame.h"
#include "common/util.h"
#include "common/wire.h"
#include "ftest.h"
#include "ftest_loop.h"

#define MSG_TYPE FERRY__WIRE_MSG_ERROR_REPLY

static inline char msg_char(uint64_t seq, size_t i)
{
	return (char)('a' + (seq * 7 + i) % 26);
}

/* Message @seq: an ErrorReply whose text is @text_len patterned bytes. */
static inline void msg_build(struct ferry__fb_builder *b, uint64_t seq, size_t text_len)
{
	char *text = malloc(text_len + 1);
	struct ferry__wire_error_reply r = {.code = -1, .request_seq = seq, .request_type = 7};

	ftest_assert_ptr_notnull(text);
	for (size_t i = 0; i < text_len; i++)
		text[i] = msg_char(seq, i);
	text[text_len] = 0;
	r.message = text;
	ftest_assert_ok(ferry__wire_error_reply_build(b, &r));
	free(text);
}

/* Queue message @seq on @conn; returns what ferry__conn_send() returned. */
static inline int msg_send(struct ferry__conn *conn, uint64_t seq, size_t text_len)
{
	struct ferry__fb_builder b = {0};
	int ret;

	msg_build(&b, seq, text_len);
	ret = ferry__conn_send(conn, MSG_TYPE, ferry__fb_builder_data(&b),
			       ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	return ret;
}

/* The seq of a received test message, after checking its text; -1 if it is not one. */
static inline int64_t msg_check(uint16_t type, const void *payload, size_t len)
{
	struct ferry__wire_error_reply_view v;
	const char *text;
	uint64_t seq;
	uint32_t n;

	if (type != MSG_TYPE || ferry__wire_error_reply_root(payload, len, &v))
		return -1;
	seq = ferry__wire_error_reply_request_seq(v);
	text = ferry__wire_error_reply_message(v);
	n = ferry__wire_error_reply_message_len(v);
	for (uint32_t i = 0; i < n; i++)
		if (text[i] != msg_char(seq, i))
			return -1;
	return (int64_t)seq;
}

/* What one connection's callbacks saw. */
struct peer {
	struct ferry__conn *conn; /* NULL once closed */
	struct ferry__loop *loop; /* to stop */
	int connects;		  /* on_connect calls */
	int closes;		  /* on_close calls */
	int close_err;		  /* on_close's err */
	uint64_t received;	  /* test messages received, in order */
	int bad;		  /* messages out of order or corrupt */
	int fds[16];		  /* fds taken from messages */
	int nfds;		  /* entries in fds */
	int fd_msgs[16];	  /* seq of the message each fd came with */
	bool take_fds;		  /* take fds from messages */
	bool echo;		  /* send each message back */
	uint64_t stop_after;	  /* stop the loop once this many arrived (0: never) */
	bool stop_on_close;	  /* stop the loop in on_close */
	int *closes_left;	  /* shared countdown of closes that stops the loop at 0 */
};

static inline void peer_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
				   size_t len)
{
	struct peer *p = ferry__conn_data(conn);
	int64_t seq = msg_check(type, payload, len);
	int fd;

	if (seq != (int64_t)p->received)
		p->bad++;
	while (p->take_fds && (fd = ferry__conn_take_fd(conn)) >= 0) {
		ftest_assert_int_lt(p->nfds, 16);
		p->fd_msgs[p->nfds] = (int)seq;
		p->fds[p->nfds++] = fd;
	}
	p->received++;
	/* An echo that cannot be queued (allocation failure tests) closes the connection. */
	if (p->echo && ferry__conn_send(conn, type, payload, len) < 0)
		ferry__conn_close(conn);
	if (p->stop_after && p->received == p->stop_after)
		ferry__loop_stop(p->loop);
}

static inline void peer_on_connect(struct ferry__conn *conn)
{
	struct peer *p = ferry__conn_data(conn);

	p->connects++;
}

static inline void peer_on_close(struct ferry__conn *conn, int err)
{
	struct peer *p = ferry__conn_data(conn);

	ftest_assert_ptr_eq(conn, p->conn);
	p->closes++;
	p->close_err = err;
	p->conn = NULL;
	if (p->stop_on_close || (p->closes_left && --*p->closes_left == 0))
		ferry__loop_stop(p->loop);
}

static const struct ferry__conn_callbacks peer_callbacks = {
	.on_message = peer_on_message,
	.on_connect = peer_on_connect,
	.on_close = peer_on_close,
};

static inline struct ferry__conn_opts peer_opts(struct peer *p)
{
	return (struct ferry__conn_opts){.cb = &peer_callbacks, .data = p};
}

static inline struct ferry__loop *new_loop(void)
{
	struct ferry__loop *loop = NULL;

	ftest_assert_ok(ferry__loop_create(NULL, &loop));
	return loop;
}

/* A complete frame around message @seq, for raw sockets. Free with ferry__free. */
static inline uint8_t *frame_of(uint64_t seq, size_t text_len, size_t *size)
{
	struct ferry__fb_builder b = {0};
	uint8_t *frame;

	msg_build(&b, seq, text_len);
	ftest_assert_ok(ferry__frame_pack(MSG_TYPE, ferry__fb_builder_data(&b),
					  ferry__fb_builder_size(&b), &frame, size));
	ferry__fb_builder_fini(&b);
	return frame;
}

/* @hs built and framed as a Handshake, as a raw peer writes it (ferry__free it). */
static inline uint8_t *handshake_frame_of(const struct ferry__wire_handshake *hs, size_t *size)
{
	struct ferry__fb_builder b = {0};
	uint8_t *frame;

	ftest_assert_ok(ferry__wire_handshake_build(&b, hs));
	ftest_assert_ok(ferry__frame_pack(FERRY__WIRE_MSG_HANDSHAKE, ferry__fb_builder_data(&b),
					  ferry__fb_builder_size(&b), &frame, size));
	ferry__fb_builder_fini(&b);
	return frame;
}

static inline void write_all(int fd, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		ssize_t n = write(fd, p, len);

		ftest_assert_int_gt(n, 0);
		p += n;
		len -= (size_t)n;
	}
}

/* Open file descriptors of this process (to prove none leaked). */
static inline int open_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	ftest_assert_ptr_notnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static inline int raw_tcp_connect(uint16_t port)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	return fd;
}

#endif
