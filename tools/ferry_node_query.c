/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `ferry` command's line to one node (issue 25): its runtime endpoint on TCP (the rt= port
 * of its advertised address), the cluster token's Handshake, RuntimeConnect of kind Cli, then
 * one query at a time (NodeInfo, Timeline, PlasmaStats, PlasmaList; node/rt_admin.c answers).
 *
 * DESIGN: blocking, one socket, every wait under the command's one deadline (poll on
 * CLOCK_MONOTONIC): a node that accepts and never answers costs the command its timeout, not
 * a hang. Replies are verified before a field is read; an ErrorReply or a status < 0 becomes
 * the call's error.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ferry/id.h>

#include "common/frame.h"
#include "common/net.h"
#include "common/token.h"
#include "common/wire.h"
#include "tools/ferry_cli.h"
#include "tools/ferry_inspect.h"
#include "transport/objmgr.h"

/* Replies are at most a page of 1,000 objects or 10,000 timeline events. */
#define REPLY_MAX (8u << 20)

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* Wait for @events on the socket until the deadline: 0, -ETIMEDOUT, -errno. */
static int wait_fd(struct ferry__cli_node *c, short events)
{
	struct pollfd pfd = {.fd = c->fd, .events = events};
	uint64_t now = now_ms();
	int r;

	do {
		now = now_ms();
		if (now >= c->deadline_ms)
			return -ETIMEDOUT;
		r = poll(&pfd, 1, (int)(c->deadline_ms - now));
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r == 0 ? -ETIMEDOUT : 0;
}

static int send_all(struct ferry__cli_node *c, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		int r;

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if ((r = wait_fd(c, POLLOUT)) < 0)
			return r;
	}
	return 0;
}

/* Send what was just built into c->fb (@built: the build's result) as a frame of @type. */
static int send_built(struct ferry__cli_node *c, uint16_t type, int built)
{
	const uint8_t *frame;
	size_t size;
	int r = built;

	if (r == 0)
		r = ferry__frame_finish(&c->fb, type, &frame, &size);
	return r < 0 ? r : send_all(c, frame, size);
}

/* The next frame, verified: 0 and *@out; -EPROTO (malformed), -ECONNRESET (closed), ... */
static int recv_frame(struct ferry__cli_node *c, struct ferry__frame *out)
{
	for (;;) {
		uint8_t *space;
		size_t size;
		ssize_t n;
		int r = ferry__frame_parser_next(&c->parser, out);

		if (r < 0)
			return r;
		if (r == 1)
			return ferry__wire_verify(out->type, out->payload, out->length) < 0
				       ? -EPROTO
				       : 0;
		if ((r = ferry__frame_parser_space(&c->parser, &space, &size)) < 0)
			return r;
		n = recv(c->fd, space, size, MSG_DONTWAIT);
		if (n > 0) {
			ferry__frame_parser_commit(&c->parser, (size_t)n);
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if ((r = wait_fd(c, POLLIN)) < 0)
			return r;
	}
}

int ferry__cli_node_ask(struct ferry__cli_node *c, uint16_t type, int built, uint16_t reply_type,
			struct ferry__frame *reply)
{
	int r = send_built(c, type, built);

	if (r == 0)
		r = recv_frame(c, reply);
	if (r == 0 && reply->type == FERRY__WIRE_MSG_ERROR_REPLY) {
		struct ferry__wire_error_reply_view v =
			ferry__wire_error_reply_root_verified(reply->payload);

		r = ferry__wire_error_reply_code(v) < 0 ? ferry__wire_error_reply_code(v) : -EPROTO;
	} else if (r == 0 && reply->type != reply_type) {
		r = -EPROTO;
	}
	if (r < 0)
		snprintf(c->why, sizeof(c->why), "%s",
			 r == -ECONNRESET ? "the node closed the connection" : ferry_strerror(r));
	return r;
}

static int connect_tcp(struct ferry__cli_node *c, const struct ferry__node_addr *a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int r = ferry__net_resolve(a->ip, a->rt_port, &ss, &len);

	if (r < 0)
		return r;
	c->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		return -errno;
	if (connect(c->fd, (struct sockaddr *)&ss, len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	if ((r = wait_fd(c, POLLOUT)) < 0)
		return r;
	len = sizeof(r);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &r, &len) < 0)
		return -errno;
	return -r;
}

/* Handshake (the token), then RuntimeConnect as a Cli peer. */
static int introduce(struct ferry__cli_node *c, const char *token_path)
{
	uint8_t token[FERRY_TOKEN_MAX];
	struct ferry__wire_handshake hs = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
					   .peer_kind = FERRY__WIRE_PEER_KIND_CLI,
					   .pid = getpid(),
					   .name = "ferry"};
	struct ferry__wire_runtime_connect rc = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						 .kind = FERRY__WIRE_PEER_KIND_CLI,
						 .pid = getpid()};
	struct ferry__frame f;
	int len = ferry__token_read(token_path, token, sizeof(token));
	int r, status;

	if (len < 0) {
		snprintf(c->why, sizeof(c->why), "cannot read the token %s: %s", token_path,
			 ferry_strerror(len));
		return len;
	}
	hs.token = token;
	hs.token_count = (size_t)len;
	ferry_id_random(hs.peer_id.bytes, sizeof(hs.peer_id.bytes));
	memcpy(rc.id.bytes, hs.peer_id.bytes, sizeof(rc.id.bytes));
	r = ferry__cli_node_ask(c, FERRY__WIRE_MSG_HANDSHAKE,
				ferry__wire_handshake_build(&c->fb, &hs),
				FERRY__WIRE_MSG_HANDSHAKE_REPLY, &f);
	memset(token, 0, sizeof(token));
	if (r == -ECONNRESET) /* a wrong token is closed without a word */
		snprintf(c->why, sizeof(c->why),
			 "the node closed the connection at the handshake (a wrong token, or the "
			 "node is going away)");
	if (r < 0)
		return r;
	status = ferry__wire_handshake_reply_status(
		ferry__wire_handshake_reply_root_verified(f.payload));
	if (status < 0) {
		snprintf(c->why, sizeof(c->why), "the node refused the handshake: %s",
			 ferry_strerror(status));
		return status;
	}
	r = ferry__cli_node_ask(c, FERRY__WIRE_MSG_RUNTIME_CONNECT,
				ferry__wire_runtime_connect_build(&c->fb, &rc),
				FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY, &f);
	if (r < 0)
		return r;
	{
		struct ferry__wire_runtime_connect_reply_view v =
			ferry__wire_runtime_connect_reply_root_verified(f.payload);
		const char *msg = ferry__wire_runtime_connect_reply_message(v);

		status = ferry__wire_runtime_connect_reply_status(v);
		if (status < 0) {
			snprintf(c->why, sizeof(c->why), "the node refused: %.160s",
				 msg ? msg : ferry_strerror(status));
			return status;
		}
	}
	return 0;
}

int ferry__cli_node_open(struct ferry__cli_node *c, const char *address, const char *token_path,
			 unsigned timeout_s)
{
	struct ferry__node_addr a;
	int r;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->deadline_ms = now_ms() + (uint64_t)(timeout_s ? timeout_s : 30) * 1000u;
	ferry__frame_parser_init(&c->parser, REPLY_MAX);
	ferry__fb_builder_init(&c->fb);
	if (!address || ferry__node_addr_parse(address, strlen(address), &a) < 0) {
		snprintf(c->why, sizeof(c->why), "its address is not one ferry reads: %.100s",
			 address ? address : "(none)");
		return -EINVAL;
	}
	if (!a.rt_port) {
		snprintf(c->why, sizeof(c->why), "it advertises no runtime endpoint (rt=)");
		return -ENOTSUP;
	}
	r = connect_tcp(c, &a);
	if (r < 0) {
		snprintf(c->why, sizeof(c->why), "cannot connect to %s port %u: %s", a.ip,
			 a.rt_port, ferry_strerror(r));
		return r;
	}
	return introduce(c, token_path);
}

void ferry__cli_node_close(struct ferry__cli_node *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	ferry__frame_parser_fini(&c->parser);
	ferry__fb_builder_fini(&c->fb);
}
