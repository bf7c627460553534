/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node deaths for object directory shards other than 0. Only shard 0 holds the node table and
 * its heartbeats, so only it declares nodes dead; a shard > 0 given shard 0's address keeps a
 * connection to it on its own loop, subscribed to the nodes channel, and for every node it
 * learns is dead applies OBJ_NODE_DIED (logged like any op): that node's copies leave this
 * shard's directory too.
 *
 * DESIGN
 * - One framed connection with the cluster token, on the server's loop (no thread): subscribe to
 *   the whole nodes channel, then every GcsPublish item that is a node record in state DEAD (a
 *   delta or a snapshot item) becomes an op. Reapplying is harmless (a node with no copies left
 *   changes nothing), so a reconnect simply subscribes afresh and the snapshot carries every
 *   death missed meanwhile: no resume state to keep.
 * - A dropped connection is retried every PEER_RETRY_MS until the loop is destroyed (the
 *   connection and the timer end with it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "gcs/server_int.h"

#define COMP "gcs"
#define PEER_RETRY_MS 200

static void peer_connect(struct ferry__gcs_server *srv);

static void on_retry(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		peer_connect(t->data);
}

static void node_died(struct ferry__gcs_server *srv, const void *data, size_t size)
{
	struct ferry__gcs_op op, died = {.type = FERRY__GCS_OP_OBJ_NODE_DIED};
	int ret;

	if (ferry__gcs_op_decode(data, size, &op) < 0)
		return; /* logged by the decoder; shard 0 is trusted but not blindly */
	if (op.type == FERRY__GCS_OP_RESTORE_NODE && op.node.state == FERRY_GCS_NODE_DEAD) {
		died.node_id = op.node.id;
		ret = ferry__gcs_state_apply(srv->state, &died, NULL);
		if (ret > 0)
			FLOG_INFO(COMP, "a node died (shard 0): %d objects changed", ret);
		else if (ret < 0)
			FLOG_WARN(COMP, "dropping a dead node's copies failed: %s",
				  ferry_strerror(-ret));
		ferry__gcs_srv_want_flush(srv);
	}
	ferry__gcs_op_release(&op);
}

static void on_peer_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	struct ferry__gcs_server *srv = ferry__conn_data(conn);
	struct ferry__wire_gcs_publish_view v;

	(void)len;
	if (type != FERRY__WIRE_MSG_GCS_PUBLISH)
		return; /* the subscribe's reply */
	v = ferry__wire_gcs_publish_root_verified(payload);
	for (uint32_t i = 0; i < ferry__wire_gcs_publish_items_count(v); i++) {
		struct ferry__wire_gcs_pub_item_view it = ferry__wire_gcs_publish_items_at(v, i);

		if (ferry__wire_gcs_pub_item_channel(it) == FERRY_GCS_CH_NODES &&
		    ferry__wire_gcs_pub_item_kind(it) != FERRY_GCS_EVENT_RESYNC &&
		    ferry__wire_gcs_pub_item_data_count(it))
			node_died(srv, ferry__wire_gcs_pub_item_data_data(it),
				  ferry__wire_gcs_pub_item_data_count(it));
	}
}

static void on_peer_connect(struct ferry__conn *conn)
{
	struct ferry__gcs_server *srv = ferry__conn_data(conn);
	struct ferry__wire_gcs_subscribe m = {0};
	int ret;

	FLOG_INFO(COMP, "following node deaths on shard 0 (%s)", ferry__conn_peer(conn));
	m.seq = 1;
	m.channel = FERRY_GCS_CH_NODES;
	ret = ferry__wire_gcs_subscribe_build(&srv->fb, &m);
	if (ret == 0)
		ret = ferry__conn_send(conn, FERRY__WIRE_MSG_GCS_SUBSCRIBE,
				       ferry__fb_builder_data(&srv->fb),
				       ferry__fb_builder_size(&srv->fb));
	if (ret < 0)
		ferry__conn_close(conn);
}

static void on_peer_close(struct ferry__conn *conn, int err)
{
	struct ferry__gcs_server *srv = ferry__conn_data(conn);

	srv->peer = NULL;
	if (err == -ECANCELED)
		return; /* the loop is going away */
	FLOG_INFO(COMP, "shard 0 connection closed (%s); retrying", ferry_strerror(-err));
	(void)ferry__loop_timer_start(srv->loop, &srv->peer_retry, PEER_RETRY_MS, 0, on_retry);
}

static const struct ferry__conn_callbacks peer_cb = {
	.on_message = on_peer_message,
	.on_connect = on_peer_connect,
	.on_close = on_peer_close,
};

static void peer_connect(struct ferry__gcs_server *srv)
{
	struct ferry__wire_handshake hs = {0};
	struct ferry__conn_opts co = {0};
	int ret;

	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = srv->opts.token;
	hs.token_count = srv->opts.token_len;
	hs.peer_kind = FERRY__WIRE_PEER_KIND_GCS;
	hs.pid = (int32_t)getpid();
	hs.name = "gcs-shard";
	co.cb = &peer_cb;
	co.data = srv;
	co.handshake = &hs;
	ret = ferry__conn_connect_tcp(srv->loop, srv->peer_host, srv->peer_port, &co, &srv->peer);
	if (ret < 0) {
		srv->peer = NULL;
		(void)ferry__loop_timer_start(srv->loop, &srv->peer_retry, PEER_RETRY_MS, 0,
					      on_retry);
	}
}

int ferry__gcs_srv_peer_init(struct ferry__gcs_server *srv)
{
	const char *a = srv->opts.shard0_address;
	const char *colon = a ? strrchr(a, ':') : NULL;
	unsigned long port;
	char *end;

	srv->peer_retry.data = srv;
	if (!a || srv->opts.shard_index == 0)
		return 0;
	if (!colon || colon == a || (size_t)(colon - a) >= sizeof(srv->peer_host)) {
		FLOG_ERROR(COMP, "bad shard 0 address '%s' (want host:port)", a);
		return -EINVAL;
	}
	port = strtoul(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port == 0 || port > 65535) {
		FLOG_ERROR(COMP, "bad shard 0 address '%s' (want host:port)", a);
		return -EINVAL;
	}
	memcpy(srv->peer_host, a, (size_t)(colon - a));
	srv->peer_host[colon - a] = '\0';
	srv->peer_port = (uint16_t)port;
	return 0;
}

void ferry__gcs_srv_peer_start(struct ferry__gcs_server *srv)
{
	if (srv->peer_port)
		peer_connect(srv);
}
