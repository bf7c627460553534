/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager's node table: the address of each peer it pulls from, learned when a pull
 * first needs it, instead of every node's record from the whole membership channel.
 *
 * DESIGN
 * - A pull needing peers it does not know asks for all of them at once (want_peers): one keyed
 *   GCS subscription per unknown peer, sent async so that they go out back to back on the
 *   client's connection, then waits (nodes_cond, up to NODE_WAIT_MS) for their snapshots,
 *   which carry the records; a snapshot's end (SNAPSHOT_END) answers for a peer the GCS has
 *   no record of, so that wait ends at once then too. The same subscriptions then bring each
 *   peer's changes (a restart with a new address, drain, death). At N nodes each pulling from
 *   k peers the GCS delivers N * k records at start, not N * N.
 * - Every node also follows FERRY_GCS_CH_NODE_DEATHS (deaths and drains of all nodes); it only
 *   matters here for peers already in the table.
 * - om->node_asks holds each peer asked for: PEER_ASKED while its subscription's snapshot is
 *   awaited, PEER_ANSWERED once it ended (the subscription stays live), PEER_DEAD once its
 *   record said dead (terminal: IDs never come back), so a pull from a dead peer fails at once
 *   (-EHOSTUNREACH), and its subscription is dropped. A subscription refused by the GCS drops
 *   the entry (the next pull asks again). om->nodes holds the addresses of the live peers.
 * - Events and the subscriptions' answers run on the GCS client's thread; pulls on the pull
 *   threads. om->lock guards both maps; no GCS call is made under it.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"
#define NODE_WAIT_MS 2000

enum { PEER_ASKED = 1, PEER_DEAD = 2, PEER_ANSWERED = 3 };

/* A keyed subscription's answer needs the peer it was for. */
struct peer_ask {
	struct ferry__objmgr *om; /* whose */
	struct ferry_node_id id;  /* the peer */
};

/* A record of @info: the address of a live peer, or its death. om->lock held. True when a
 * peer this object manager follows just died: its subscription can go. */
static bool apply_record(struct ferry__objmgr *om, const struct ferry_gcs_node_info *info,
			 bool from_deaths)
{
	struct ferry__node_addr addr, *slot;
	uint8_t *peer = ferry__hashmap_get(&om->node_asks, &info->id);

	if (info->state == FERRY_GCS_NODE_DEAD) {
		bool followed = peer && *peer != PEER_DEAD;

		(void)ferry__hashmap_remove(&om->nodes, &info->id, NULL);
		if (peer)
			*peer = PEER_DEAD;
		return followed;
	}
	if (from_deaths || !info->address)
		return false; /* a drain: the peer still serves what it holds */
	if (ferry__node_addr_parse(info->address, strlen(info->address), &addr) < 0) {
		FLOG_WARN(COMP, "node with an unusable address: %s", info->address);
		return false;
	}
	int r = ferry__hashmap_put(&om->nodes, &info->id, (void **)&slot);

	if (r == 0 && slot->run != addr.run)
		FLOG_WARN(COMP, "node at %s restarted (now %s): its old connections go",
			  slot->shm_path[0] ? slot->shm_path : slot->ip, info->address);
	if (r >= 0)
		*slot = addr;
	return false;
}

static void on_unsubscribed(void *arg, int status, void *result)
{
	(void)arg;
	(void)status; /* a failure leaves a subscription that never delivers again: harmless */
	ferry_gcs_free(result);
}

/* A peer's snapshot ended: what the GCS has of it is in the table now. A peer with no record
 * (no address) so fails its pulls at once instead of after NODE_WAIT_MS; its registration,
 * should it come, arrives as a change. */
static void snapshot_ended(struct ferry__objmgr *om, const struct ferry_gcs_event *ev)
{
	uint8_t *peer;

	if (ev->channel != FERRY_GCS_CH_NODES || ev->key_size != sizeof(struct ferry_node_id))
		return;
	pthread_mutex_lock(&om->lock);
	peer = ferry__hashmap_get(&om->node_asks, ev->key);
	if (peer && *peer == PEER_ASKED) {
		*peer = PEER_ANSWERED;
		pthread_cond_broadcast(&om->nodes_cond);
	}
	pthread_mutex_unlock(&om->lock);
}

static void on_node_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct ferry__objmgr *om = arg;
	struct ferry_gcs_node_info info;
	bool died;

	if (ev->kind == FERRY_GCS_EVENT_SNAPSHOT_END) {
		snapshot_ended(om, ev);
		return;
	}
	if (ev->kind != FERRY_GCS_EVENT_SNAPSHOT && ev->kind != FERRY_GCS_EVENT_DELTA)
		return; /* RESYNC: nodes are never renamed, keep what we know; the snapshot refreshes
			 * it. Kinds from a newer server carry nothing for us. */
	if (ferry_gcs_event_node(ev, &info) < 0)
		return;
	pthread_mutex_lock(&om->lock);
	died = apply_record(om, &info, ev->channel == FERRY_GCS_CH_NODE_DEATHS);
	pthread_cond_broadcast(&om->nodes_cond);
	pthread_mutex_unlock(&om->lock);
	/* A dead node never changes again (IDs never come back): its keyed subscription goes, so
	 * the GCS keeps none for the dead. The dead mark stays, for pulls to fail at once. */
	if (died)
		(void)ferry_gcs_unsubscribe_async(ev->client, FERRY_GCS_CH_NODES, info.id.bytes,
						  sizeof(info.id.bytes), on_unsubscribed, NULL);
}

int ferry__objmgr_nodes_start(struct ferry__objmgr *om)
{
	if (!om->opts.gcs)
		return 0;
	return ferry_gcs_subscribe(om->opts.gcs, FERRY_GCS_CH_NODE_DEATHS, NULL, 0, on_node_event,
				   om);
}

static void on_peer_subscribed(void *arg, int status, void *result)
{
	struct peer_ask *ask = arg;
	struct ferry__objmgr *om = ask->om;

	ferry_gcs_free(result);
	if (status < 0) {
		FLOG_WARN(COMP, "cannot follow a peer's record: %s", ferry_strerror(-status));
		pthread_mutex_lock(&om->lock);
		uint8_t *peer = ferry__hashmap_get(&om->node_asks, &ask->id);

		if (peer && *peer != PEER_DEAD)
			(void)ferry__hashmap_remove(&om->node_asks, &ask->id, NULL);
		pthread_cond_broadcast(&om->nodes_cond);
		pthread_mutex_unlock(&om->lock);
	}
	ferry__free(ask);
}

/* Subscribe to @id's record (its snapshot is the lookup). Not under om->lock. */
static void ask_peer(struct ferry__objmgr *om, const struct ferry_node_id *id)
{
	struct peer_ask *ask = ferry__malloc(sizeof(*ask));
	int ret = -ENOMEM;

	if (ask) {
		*ask = (struct peer_ask){om, *id};
		ret = ferry_gcs_subscribe_async(om->opts.gcs, FERRY_GCS_CH_NODES, id->bytes,
						sizeof(id->bytes), on_node_event, om,
						on_peer_subscribed, ask);
		if (ret == 0)
			return;
		ferry__free(ask);
	}
	FLOG_WARN(COMP, "cannot look a peer up: %s", ferry_strerror(-ret));
	pthread_mutex_lock(&om->lock);
	(void)ferry__hashmap_remove(&om->node_asks, id, NULL);
	pthread_mutex_unlock(&om->lock);
}

void ferry__objmgr_want_peers(struct ferry__objmgr *om, const struct ferry_node_id *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n && om->opts.gcs; i++) {
		bool ask = false;
		uint8_t *peer;

		if (ferry_node_id_eq(&ids[i], &om->opts.node_id))
			continue;
		pthread_mutex_lock(&om->lock);
		if (!ferry__hashmap_get(&om->node_asks, &ids[i]) &&
		    ferry__hashmap_put(&om->node_asks, &ids[i], (void **)&peer) >= 0) {
			*peer = PEER_ASKED;
			ask = true;
		}
		pthread_mutex_unlock(&om->lock);
		if (ask)
			ask_peer(om, &ids[i]);
	}
}

int ferry__objmgr_node_address(struct ferry__objmgr *om, const struct ferry_node_id *node,
			       struct ferry__node_addr *out)
{
	struct timespec until;
	struct ferry__node_addr *a;
	uint8_t *peer;
	int ret = 0;

	until = ferry__deadline_in_us(NODE_WAIT_MS * 1000u);
	pthread_mutex_lock(&om->lock);
	for (;;) {
		a = ferry__hashmap_get(&om->nodes, node);
		peer = ferry__hashmap_get(&om->node_asks, node);
		/* Without a GCS (tests) nothing is asked: wait for the table as before. */
		if (a || om->stopping || ret != 0 ||
		    (om->opts.gcs && (!peer || *peer != PEER_ASKED)))
			break;
		ret = pthread_cond_timedwait(&om->nodes_cond, &om->lock, &until);
	}
	if (a)
		*out = *a;
	pthread_mutex_unlock(&om->lock);
	return a ? 0 : -EHOSTUNREACH;
}
