/* SPDX-License-Identifier: Apache-2.0 */
/* A group scheduler's links to every global instance (sched/uplink.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/wire.h"
#include "sched/client.h"
#include "sched/proto.h"
#include "sched/uplink.h"

#define COMP "sched-uplink"
#define LINKS_MAX 16
#define REFRESH_MS 1000u
#define HOST_MAX 256
/* Unsent bytes over which an instance misses a report (a few reports' worth). */
#define QUEUE_MAX (1u << 20)

struct link {
	struct ferry__sched_uplink *u; /* owner */
	char host[HOST_MAX];	       /* from the KV */
	uint16_t port;		       /* 0: slot free */
	struct ferry__conn *conn;      /* or NULL */
	bool up;		       /* handshake done */
	bool seen;		       /* in the last KV read */
};

struct lookup {
	struct ferry__sched_uplink *u; /* NULL: freed meanwhile */
};

struct ferry__sched_uplink {
	struct ferry__loop *loop;	  /* ours */
	struct ferry_gcs_client *gcs;	  /* borrowed */
	uint8_t token[256];		  /* the cluster token */
	size_t token_len;		  /* its bytes */
	struct ferry_node_id self;	  /* the group scheduler */
	struct link links[LINKS_MAX];	  /* one per instance */
	struct lookup *lookup;		  /* KV read in flight, or NULL */
	struct ferry__loop_timer refresh; /* the next KV read */
};

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	(void)type, (void)payload, (void)len;
	/* The level above never speaks first on this link. */
	FLOG_WARN(COMP, "%s: unexpected message on a report link, closing", ferry__conn_peer(conn));
	ferry__conn_close(conn);
}

static void on_connect(struct ferry__conn *conn)
{
	struct link *l = ferry__conn_data(conn);

	l->up = true;
	FLOG_DEBUG(COMP, "reporting to ferry-sched %s", ferry__conn_peer(conn));
}

static void on_close(struct ferry__conn *conn, int err)
{
	struct link *l = ferry__conn_data(conn);

	if (!l)
		return; /* left behind by ferry__sched_uplink_free() */
	if (err && err != -ECANCELED)
		FLOG_INFO(COMP, "ferry-sched %s: %s", ferry__conn_peer(conn), ferry_strerror(-err));
	l->conn = NULL;
	l->up = false;
}

static const struct ferry__conn_callbacks link_cb = {
	.on_message = on_message,
	.on_connect = on_connect,
	.on_close = on_close,
};

static void dial(struct ferry__sched_uplink *u, struct link *l)
{
	struct ferry__wire_handshake hs = {0};
	struct ferry__conn_opts co = {0};
	int ret;

	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = u->token;
	hs.token_count = u->token_len;
	hs.peer_kind = FERRY__WIRE_PEER_KIND_SCHEDULER;
	memcpy(hs.peer_id.bytes, u->self.bytes, sizeof(hs.peer_id.bytes));
	hs.pid = (int32_t)getpid();
	hs.name = "sched-group";
	co.cb = &link_cb;
	co.data = l;
	co.handshake = &hs;
	co.max_message_bytes = FERRY__SCHED_FRAME_MAX;
	co.connect_timeout_ms = REFRESH_MS;
	l->up = false;
	ret = ferry__conn_connect_tcp(u->loop, l->host, l->port, &co, &l->conn);
	if (ret < 0) {
		l->conn = NULL;
		FLOG_INFO(COMP, "ferry-sched %s:%u: %s", l->host, l->port, ferry_strerror(-ret));
	}
}

static void forget(struct link *l)
{
	if (l->conn) {
		ferry__conn_set_callbacks(l->conn, &link_cb, NULL);
		ferry__conn_close(l->conn);
	}
	memset(l, 0, sizeof(*l));
}

/* One instance read from the KV: its link, dialled when it has none. */
static void instance_seen(struct ferry__sched_uplink *u, const char *host, uint16_t port)
{
	struct link *free_slot = NULL;

	for (int i = 0; i < LINKS_MAX; i++) {
		struct link *l = &u->links[i];

		if (l->port == port && !strcmp(l->host, host)) {
			l->seen = true;
			if (!l->conn)
				dial(u, l);
			return;
		}
		if (!l->port && !free_slot)
			free_slot = l;
	}
	if (!free_slot)
		return;
	free_slot->u = u;
	free_slot->port = port;
	snprintf(free_slot->host, sizeof(free_slot->host), "%s", host);
	free_slot->seen = true;
	dial(u, free_slot);
}

static void start_refresh(struct ferry__sched_uplink *u);

static void on_values(void *arg, int status, void *result)
{
	struct lookup *lk = arg;
	struct ferry__sched_uplink *u = lk->u;
	struct ferry_gcs_bytes *values = result;
	char host[HOST_MAX];
	uint16_t port;

	ferry__free(lk);
	if (!u) {
		ferry_gcs_free(result);
		return;
	}
	u->lookup = NULL;
	for (int i = 0; i < LINKS_MAX; i++)
		u->links[i].seen = false;
	for (int i = 0; i < status; i++)
		if (values[i].data && ferry__sched_instance_parse(values[i].data, values[i].size,
								  host, sizeof(host), &port) == 0)
			instance_seen(u, host, port);
	/* An instance no longer registered left cleanly: its link goes (a failed read keeps them). */
	for (int i = 0; status >= 0 && i < LINKS_MAX; i++)
		if (u->links[i].port && !u->links[i].seen)
			forget(&u->links[i]);
	ferry_gcs_free(result);
}

static void on_keys(void *arg, int status, void *result)
{
	struct lookup *lk = arg;
	struct ferry__sched_uplink *u = lk->u;
	int ret = status;

	if (u && status > 0)
		ret = ferry_gcs_kv_multi_get_async(
			u->gcs, FERRY__SCHED_KV_NS, sizeof(FERRY__SCHED_KV_NS) - 1, result,
			(size_t)(status < LINKS_MAX ? status : LINKS_MAX), on_values, lk);
	ferry_gcs_free(result);
	if (u && status > 0 && ret == 0)
		return;
	ferry__free(lk);
	if (u)
		u->lookup = NULL;
}

static void on_refresh(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		start_refresh(t->data);
}

static void start_refresh(struct ferry__sched_uplink *u)
{
	struct lookup *lk = NULL;

	if (!u->lookup && (lk = ferry__malloc(sizeof(*lk)))) {
		lk->u = u;
		if (ferry_gcs_kv_keys_async(u->gcs, FERRY__SCHED_KV_NS,
					    sizeof(FERRY__SCHED_KV_NS) - 1, "", 0, on_keys,
					    lk) == 0)
			u->lookup = lk;
		else
			ferry__free(lk);
	}
	ferry__loop_timer_start(u->loop, &u->refresh, REFRESH_MS, 0, on_refresh);
}

int ferry__sched_uplink_new(struct ferry__loop *loop, struct ferry_gcs_client *gcs,
			    const void *token, size_t token_len, const struct ferry_node_id *self,
			    struct ferry__sched_uplink **out)
{
	struct ferry__sched_uplink *u;

	if (!loop || !gcs || !token || !token_len || token_len > sizeof(u->token) || !self || !out)
		return -EINVAL;
	u = ferry__calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->loop = loop;
	u->gcs = gcs;
	memcpy(u->token, token, token_len);
	u->token_len = token_len;
	u->self = *self;
	u->refresh.data = u;
	start_refresh(u);
	*out = u;
	return 0;
}

int ferry__sched_uplink_send(struct ferry__sched_uplink *u, uint16_t type, const void *payload,
			     size_t len)
{
	int sent = 0;

	for (int i = 0; i < LINKS_MAX; i++) {
		struct link *l = &u->links[i];

		if (!l->conn || !l->up || ferry__conn_queued_bytes(l->conn) > QUEUE_MAX)
			continue;
		if (ferry__conn_send(l->conn, type, payload, len) == 0)
			sent++;
	}
	return sent;
}

void ferry__sched_uplink_free(struct ferry__sched_uplink *u)
{
	if (!u)
		return;
	ferry__loop_timer_stop(&u->refresh);
	if (u->lookup)
		u->lookup->u = NULL;
	for (int i = 0; i < LINKS_MAX; i++)
		forget(&u->links[i]);
	ferry__free(u);
}
