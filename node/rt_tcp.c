/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's runtime endpoint on TCP, for owners on other hosts (and FERRY_RT_TRANSPORT=tcp):
 * the same peers and messages as the Unix runtime socket (rt_srv.c), behind the cluster token's
 * Handshake instead of SO_PEERCRED. Its port is advertised in the node's address (rt=P).
 *
 * DESIGN
 * - It listens before the node registers (the address carries the port), when the runtime's
 *   state does not exist yet: a connection accepted before ferry__node_rt_start ran on the
 *   loop is closed (nobody knows the port then but a scanner).
 * - The handshake is common/conn_server.c's: a wrong token or none in time closes the
 *   connection with one rate-limited line per peer, and at most max_handshaking connections
 *   wait for theirs (a new one closes the oldest), so a flood holds a bounded amount of memory.
 *   Past it, rt_srv.c's own bounds apply (RT_MAX_TCP_PEERS of its RT_MAX_PEERS drivers,
 *   RT_MAX_CONNECTING).
 * - Everything runs on the node's loop.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/conn.h"
#include "common/log.h"
#include "common/wire.h"
#include "node/node_int.h"
#include "node/rt_int.h"
#include "transport/objmgr.h"

#define COMP "node"

static void on_accept(struct ferry__conn_server *server, struct ferry__conn *conn,
		      const void *handshake, size_t len)
{
	struct ferry__node *node = ferry__conn_server_data(server);

	(void)handshake;
	(void)len;
	if (!node->rt_ready) {
		ferry__conn_close(conn);
		return;
	}
	ferry__rt_accept(node->rt, conn, true);
}

static void on_unused_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len)
{
	(void)type;
	(void)payload;
	(void)len;
	ferry__conn_close(conn); /* never called: on_accept sets the peer's callbacks */
}

static void on_unused_close(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
}

static const struct ferry__conn_callbacks unused_callbacks = {
	.on_message = on_unused_message,
	.on_close = on_unused_close,
};

static int listen_on_loop(void *arg)
{
	struct ferry__node *node = arg;
	struct ferry__conn_server_opts so = {
		.conn = {.cb = &unused_callbacks,
			 .max_message_bytes = FERRY__RT_FRAME_MAX_BYTES,
			 .max_queued_bytes = RT_MAX_QUEUED_BYTES},
		.on_accept = on_accept,
		.data = node,
		.token = node->token,
		.token_len = node->opts.token_len,
		.server_kind = FERRY__WIRE_PEER_KIND_NODE,
	};
	int r;

	memcpy(so.server_id.bytes, node->id.bytes, sizeof(so.server_id.bytes));
	r = ferry__conn_server_listen_tcp(node->loop, node->ip, 0, &so, &node->rt_tcp);
	if (r < 0)
		FLOG_ERROR(COMP, "runtime: cannot listen on %s (TCP): %s", node->ip,
			   ferry_strerror(r));
	return r;
}

int ferry__node_rt_listen_tcp(struct ferry__node *node)
{
	struct ferry__node_addr a;
	int r = ferry__loop_call(node->loop, listen_on_loop, node);

	if (r < 0)
		return r;
	r = ferry__node_addr_parse(node->address, strlen(node->address), &a);
	if (r == 0) {
		a.rt_port = ferry__conn_server_port(node->rt_tcp);
		r = ferry__node_addr_format(&a, node->address, sizeof(node->address));
	}
	if (r < 0)
		FLOG_ERROR(COMP, "runtime: the address %s cannot carry the runtime port: %s",
			   node->address, ferry_strerror(r));
	return r < 0 ? r : 0;
}

void ferry__node_rt_close_tcp(struct ferry__node *node)
{
	node->rt_ready = false;
	ferry__conn_server_close(node->rt_tcp);
	node->rt_tcp = NULL;
}

const char *ferry__node_rt_worker_address(const struct ferry__node *node, const char *path,
					  uint16_t port, char *buf, size_t size)
{
	struct ferry__node_addr a;

	if (port && ferry__node_addr_parse(node->address, strlen(node->address), &a) == 0) {
		a.tcp_port = 0;
		a.rdma_port = 0;
		a.rt_port = port;
		snprintf(a.shm_path, sizeof(a.shm_path), "%s", path);
		if (ferry__node_addr_format(&a, buf, size) > 0)
			return buf;
	}
	snprintf(buf, size, "%s", path);
	return buf;
}
