/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server's liveness and load side: heartbeats and load reports, both answered from
 * memory without the state, the WAL or the nodes channel.
 *
 * DESIGN
 * - A heartbeat refreshes the node's last sign of life (server.c's last_seen) and nothing else:
 *   no log record, no table write, no publication. At N nodes and 10 heartbeats a second that
 *   was 20·N log records and up to 10·N² deliveries a second; now it is N hash updates.
 * - A load report is a heartbeat that also replaces the node's latest load, kept here as the
 *   GcsRecord the node sent (validated first), and published on FERRY_GCS_CH_NODE_LOAD
 *   keyed by node: only that channel's subscribers (schedulers) get it; one that falls too far
 *   behind is resynced with a snapshot of the latest reports, never the backlog. Versions grow
 *   per node; an older or equal one (a resend after a reconnect) is dropped. A subscriber's
 *   snapshot is every stored report.
 * - A heartbeat's reply carries the cluster's size (GcsBeatInfo: the nodes alive, a membership
 *   version), so a node sizes its beat (gcs/liveness.h) without following the nodes channel:
 *   a join reaches every node as the changed count in its next reply, at no delivery cost.
 *   The count is last_seen's size: every node registered and not dead (server.c keeps it).
 * - Loads are not durable: a restarted GCS has none, and says so in each heartbeat's answer (0),
 *   so nodes report again. A node declared dead loses its report, published as a removal.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"
#include "gcs/records.h"
#include "gcs/server_int.h"
#include "gcs/values.h"

#define COMP "gcs"

/* What the loads map holds per node. */
struct load_entry {
	uint64_t version; /* of the report held */
	uint8_t *rec;	  /* its NODE_LOAD record, as the node sent it (ferry__malloc) */
	size_t size;	  /* its bytes */
};

void ferry__gcs_srv_load_init(struct ferry__gcs_server *srv)
{
	ferry__hashmap_init(&srv->loads, sizeof(struct ferry_node_id), sizeof(struct load_entry));
}

void ferry__gcs_srv_load_fini(struct ferry__gcs_server *srv)
{
	size_t cursor = 0;
	void *key, *value;

	while (ferry__hashmap_next(&srv->loads, &cursor, &key, &value))
		ferry__free(((struct load_entry *)value)->rec);
	ferry__hashmap_fini(&srv->loads);
}

/* The node may heartbeat: registered and not dead. */
static bool node_alive(struct ferry__gcs_server *srv, const struct ferry_node_id *id)
{
	const struct ferry__gcs_node *n =
		ferry__gcs_node_get(ferry__gcs_state_tables(srv->state), id);

	return n && n->state != FERRY_GCS_NODE_DEAD;
}

int ferry__gcs_srv_heartbeat(struct ferry__gcs_server *srv, const struct ferry_node_id *id)
{
	if (!node_alive(srv, id))
		return -ENOENT;
	ferry__gcs_srv_node_seen(srv, id);
	srv->heartbeats++;
	return ferry__hashmap_get(&srv->loads, id->bytes) ? 1 : 0;
}

void ferry__gcs_srv_beat_reply(struct ferry__gcs_sconn *c, uint64_t seq, int status)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__wire_gcs_beat_info info = {0};
	size_t alive = ferry__hashmap_count(&srv->last_seen);

	if (status < 0) {
		ferry__gcs_srv_reply(c, seq, status, NULL, 0, 0);
		return;
	}
	info.alive_nodes = alive > UINT32_MAX ? UINT32_MAX : (uint32_t)alive;
	info.membership_version = srv->membership_version;
	if (ferry__wire_gcs_beat_info_build(&srv->beat_fb, &info) < 0) {
		ferry__gcs_srv_reply(c, seq, status, NULL, 0, 0);
		return;
	}
	ferry__gcs_srv_reply(c, seq, status, ferry__fb_builder_data(&srv->beat_fb),
			     ferry__fb_builder_size(&srv->beat_fb), 0);
}

int ferry__gcs_srv_node_load(struct ferry__gcs_server *srv, const struct ferry_gcs_node_load *l,
			     const void *rec, size_t size)
{
	struct load_entry *e;
	uint8_t *copy;
	void *v;
	int ret;

	if (!node_alive(srv, &l->id))
		return -ENOENT;
	if (ferry__gcs_load_check(l) < 0)
		return -EINVAL;
	ferry__gcs_srv_node_seen(srv, &l->id);
	e = ferry__hashmap_get(&srv->loads, l->id.bytes);
	if (e && l->version <= e->version)
		return 0;
	copy = ferry__malloc(size);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, rec, size);
	ret = ferry__hashmap_put(&srv->loads, l->id.bytes, &v);
	if (ret < 0) {
		ferry__free(copy);
		return ret;
	}
	e = v;
	ferry__free(e->rec);
	*e = (struct load_entry){l->version, copy, size};
	srv->load_reports++;
	ret = ferry__ps_publish(srv->ps, FERRY_GCS_CH_NODE_LOAD, l->id.bytes, sizeof(l->id.bytes),
				copy, size, NULL);
	if (ret < 0) /* held anyway: the next snapshot carries it */
		FLOG_WARN(COMP, "publishing a load report failed: %s", ferry_strerror(-ret));
	return 1;
}

void ferry__gcs_srv_load_forget(struct ferry__gcs_server *srv, const struct ferry_node_id *id)
{
	struct load_entry e;

	if (ferry__hashmap_remove(&srv->loads, id->bytes, &e) < 0)
		return;
	ferry__free(e.rec);
	(void)ferry__ps_publish(srv->ps, FERRY_GCS_CH_NODE_LOAD, id->bytes, sizeof(id->bytes), NULL,
				0, NULL);
}

int ferry__gcs_srv_load_snapshot(struct ferry__gcs_server *srv, struct ferry__ps_snap *snap,
				 const void *key, size_t key_size)
{
	struct load_entry *e;
	size_t cursor = 0;
	void *k, *v;
	int ret = 0;

	if (key_size) {
		e = key_size == sizeof(struct ferry_node_id) ? ferry__hashmap_get(&srv->loads, key)
							     : NULL;
		return e ? ferry__ps_snap_add(snap, key, key_size, e->rec, e->size) : 0;
	}
	while (ret == 0 && ferry__hashmap_next(&srv->loads, &cursor, &k, &v)) {
		e = v;
		ret = ferry__ps_snap_add(snap, k, sizeof(struct ferry_node_id), e->rec, e->size);
	}
	return ret;
}

int ferry__gcs_srv_load_list(struct ferry__gcs_server *srv, struct ferry__gcs_buf *out)
{
	struct ferry__gcs_value *list = ferry__calloc(srv->loads.count + 1, sizeof(*list));
	size_t cursor = 0, n = 0;
	void *k, *v;
	int ret;

	if (!list)
		return -ENOMEM;
	while (n < srv->loads.count && ferry__hashmap_next(&srv->loads, &cursor, &k, &v)) {
		struct load_entry *e = v;

		list[n++] = (struct ferry__gcs_value){{e->rec, e->size}, true};
	}
	ret = ferry__gcs_values_encode(list, n, out); /* a GcsValueList, like every listing */
	ferry__free(list);
	return ret < 0 ? ret : (int)n;
}
