/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server's pub/sub side: every change the state reports is encoded once (the record in
 * the gcs/ops.h encoding) and published on its channel; subscribers are connections, and their
 * batches go out as one GcsPublish each.
 *
 * DESIGN
 * - Publishing happens inside apply (the change callback); delivery does not: the engine's
 *   ready callback arms one drain per loop pass (a 0 ms timer: timers run before the loop
 *   submits, and unlike a post it needs no eventfd write), so a burst of changes goes out as
 *   one batch per subscriber.
 * - Flow control: a subscriber whose socket holds more than max_buffered_bytes unsent is not
 *   drained; its engine queue then grows until the engine's own bound turns it into a resync
 *   (snapshot + deltas). Held-back drains are retried by a short one-shot timer.
 * - Snapshots come from the live tables through the engine's snapshot callback, encoded the
 *   same way as deltas, so a client applies both with one decoder.
 * - Membership: a node's change to DRAINING or DEAD is published on the nodes channel and
 *   again on the node-deaths channel, which every node follows; joins go to the nodes channel
 *   only (its few whole-channel subscribers), and reach nodes as the count in their beat
 *   replies. The deaths channel's snapshot is empty: a snapshot of every death to each of N
 *   subscribers would be O(N x deaths); a node learns a peer's state from its keyed
 *   subscription to that peer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"
#include "gcs/server_int.h"

#define COMP "gcs"
#define DRAIN_RETRY_MS 5

int ferry__gcs_record_encode(int channel, const void *record, struct ferry__gcs_buf *scratch,
			     struct ferry__gcs_buf *out)
{
	struct ferry__gcs_writer w = {out, 0};
	struct ferry__gcs_op op = {0};
	int ret = 0;

	_Static_assert(FERRY_GCS_CH_NODES == (int)FERRY__GCS_T_NODES &&
			       FERRY_GCS_CH_ACTORS == (int)FERRY__GCS_T_ACTORS,
		       "the keyed channels are numbered as their tables");
	switch (channel) {
	case FERRY_GCS_CH_NODES:
	case FERRY_GCS_CH_JOBS:
	case FERRY_GCS_CH_WORKERS:
	case FERRY_GCS_CH_ACTORS:
		ferry__gcs_restore_op(&op, (enum ferry__gcs_table)channel, record);
		break;
	case FERRY_GCS_CH_ERRORS:
		op.type = FERRY__GCS_OP_ERROR;
		op.error = *(const struct ferry__gcs_error *)record;
		break;
	case FERRY_GCS_CH_OBJECT_LOCATIONS:
		ret = ferry__gcs_object_op(record, scratch, &op);
		break;
	default:
		return -EINVAL;
	}
	if (ret == 0)
		ferry__gcs_op_encode(&op, &w);
	return ret < 0 ? ret : w.err;
}

/* A node's record changed: the membership version moves; a node gone (dead, or removed) leaves
 * the alive count (last_seen) and its load report goes. */
static void node_changed(struct ferry__gcs_server *srv, const struct ferry__gcs_change *c,
			 const struct ferry__gcs_node *node)
{
	srv->membership_version++;
	if (node && node->state != FERRY_GCS_NODE_DEAD)
		return;
	if (c->key_size == sizeof(struct ferry_node_id))
		(void)ferry__hashmap_remove(&srv->last_seen, c->key, NULL);
	if (node)
		ferry__gcs_srv_load_forget(srv, &node->id);
}

void ferry__gcs_srv_changed(void *arg, const struct ferry__gcs_change *c)
{
	struct ferry__gcs_server *srv = arg;

	const struct ferry__gcs_node *node = c->channel == FERRY_GCS_CH_NODES ? c->record : NULL;
	int ret = 0;

	if (c->channel == FERRY_GCS_CH_NODES)
		node_changed(srv, c, node);
	srv->out.size = 0;
	if (c->record)
		ret = ferry__gcs_record_encode(c->channel, c->record, &srv->scratch, &srv->out);
	if (ret == 0)
		ret = ferry__ps_publish(srv->ps, c->channel, c->key, c->key_size, srv->out.data,
					srv->out.size, NULL);
	/* Deaths and drains go to everyone on their own channel too: N deliveries each, where a
	 * join (to the nodes channel's few subscribers) reaches nodes as the count in their
	 * beat replies instead (server_load.c). */
	if (ret == 0 && node && node->state != FERRY_GCS_NODE_ALIVE)
		ret = ferry__ps_publish(srv->ps, FERRY_GCS_CH_NODE_DEATHS, c->key, c->key_size,
					srv->out.data, srv->out.size, NULL);
	/* A change that cannot be published is not lost for subscribers for good: the next
	 * resync (reconnect, slow subscriber) carries the current state. */
	if (ret < 0)
		FLOG_WARN(COMP, "publishing a change on channel %d failed: %s", c->channel,
			  ferry_strerror(-ret));
}

int ferry__gcs_srv_publish_log(struct ferry__gcs_server *srv, const struct ferry__gcs_op *op)
{
	struct ferry__gcs_writer w = {&srv->out, 0};

	srv->out.size = 0;
	ferry__gcs_op_encode(op, &w);
	if (w.err < 0)
		return w.err;
	return ferry__ps_publish(srv->ps, FERRY_GCS_CH_LOGS, op->log.job.bytes,
				 sizeof(op->log.job.bytes), srv->out.data, srv->out.size, NULL);
}

/* ---- snapshots ---- */

static int snap_one(struct ferry__gcs_server *srv, struct ferry__ps_snap *snap, int channel,
		    const void *key, size_t key_size, const void *rec)
{
	int ret;

	if (!rec)
		return 0;
	srv->out.size = 0;
	ret = ferry__gcs_record_encode(channel, rec, &srv->scratch, &srv->out);
	if (ret < 0)
		return ret;
	return ferry__ps_snap_add(snap, key, key_size, srv->out.data, srv->out.size);
}

static const void *keyed_get(struct ferry__gcs_server *srv, int channel, const void *key)
{
	struct ferry__gcs_tables *t = ferry__gcs_state_tables(srv->state);

	switch (channel) {
	case FERRY_GCS_CH_NODES:
		return ferry__gcs_node_get(t, key);
	case FERRY_GCS_CH_JOBS:
		return ferry__gcs_job_get(t, key);
	case FERRY_GCS_CH_WORKERS:
		return ferry__gcs_worker_get(t, key);
	case FERRY_GCS_CH_ACTORS:
		return ferry__gcs_actor_get(t, key);
	case FERRY_GCS_CH_OBJECT_LOCATIONS:
		return ferry__objdir_get(ferry__gcs_state_objdir(srv->state), key);
	default:
		return NULL;
	}
}

static int snap_channel(struct ferry__gcs_server *srv, struct ferry__ps_snap *snap, int channel)
{
	static const int tables[] = {
		[FERRY_GCS_CH_NODES] = FERRY__GCS_T_NODES,
		[FERRY_GCS_CH_JOBS] = FERRY__GCS_T_JOBS,
		[FERRY_GCS_CH_WORKERS] = FERRY__GCS_T_WORKERS,
		[FERRY_GCS_CH_ACTORS] = FERRY__GCS_T_ACTORS,
	};
	size_t cursor = 0;
	const void *rec;
	int ret = 0;

	if (channel == FERRY_GCS_CH_OBJECT_LOCATIONS) {
		struct ferry__objdir *od = ferry__gcs_state_objdir(srv->state);
		const struct ferry__objdir_entry *e;

		while (ret == 0 && (e = ferry__objdir_next(od, &cursor)))
			ret = snap_one(srv, snap, channel, e->id.bytes, sizeof(e->id.bytes), e);
		return ret;
	}
	if (channel > FERRY_GCS_CH_ACTORS)
		return 0; /* errors, logs and deaths are streams: no state to snapshot */
	while (ret == 0 && (rec = ferry__gcs_tables_next(ferry__gcs_state_tables(srv->state),
							 tables[channel], &cursor)))
		ret = snap_one(srv, snap, channel, rec, FERRY_UNIQUE_ID_SIZE, rec);
	return ret;
}

static int on_snapshot(void *arg, struct ferry__ps_snap *snap, enum ferry_gcs_channel channel,
		       const void *key, size_t key_size)
{
	struct ferry__gcs_server *srv = arg;

	if (channel == FERRY_GCS_CH_NODE_LOAD)
		return ferry__gcs_srv_load_snapshot(srv, snap, key, key_size);
	if (!key_size)
		return snap_channel(srv, snap, channel);
	return snap_one(srv, snap, channel, key, key_size, keyed_get(srv, channel, key));
}

/* ---- delivery ---- */

static int send_batch(struct ferry__gcs_sconn *c, const struct ferry__ps_batch *b)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__wire_gcs_publish p = {0};
	struct ferry__wire_gcs_pub_item *items;
	int ret;

	items = ferry__calloc(b->count ? b->count : 1, sizeof(*items));
	if (!items)
		return -ENOMEM;
	for (size_t i = 0; i < b->count; i++) {
		const struct ferry__ps_msg *m = b->msgs[i];

		items[i] = (struct ferry__wire_gcs_pub_item){
			m->kind, m->channel, m->key, m->key_size, m->seq, m->data, m->size};
	}
	p.epoch = b->epoch;
	p.items = items;
	p.items_count = b->count;
	p.watermarks = b->watermarks;
	p.watermarks_count = FERRY_GCS_CH_COUNT;
	ret = ferry__wire_gcs_publish_build(&srv->fb, &p);
	if (ret == 0)
		ret = ferry__conn_send(c->conn, FERRY__WIRE_MSG_GCS_PUBLISH,
				       ferry__fb_builder_data(&srv->fb),
				       ferry__fb_builder_size(&srv->fb));
	if (ret == 0)
		ferry__metric_add(FERRY__MC_gcs_deliveries, b->count);
	ferry__free(items);
	return ret;
}

/* Drain one subscriber. Returns 1 when it was held back and needs a retry. */
static int drain_one(struct ferry__gcs_sconn *c)
{
	struct ferry__gcs_server *srv = c->srv;
	size_t limit = srv->opts.max_buffered_bytes ? srv->opts.max_buffered_bytes : 8u << 20;
	struct ferry__ps_batch batch;
	int ret;

	if (!c->sub || !ferry__ps_pending(c->sub))
		return 0;
	if (ferry__conn_queued_bytes(c->conn) > limit)
		return 1;
	ret = ferry__ps_drain(c->sub, &batch);
	if (ret < 0)
		return 1;
	ret = send_batch(c, &batch);
	ferry__ps_batch_release(&batch);
	if (ret == 0) /* drains run from a timer: send in this pass, not the next */
		ferry__conn_flush(c->conn);
	/* A batch that could not be sent is gone: closing makes the client resume, which replays
	 * it from the history or resyncs. */
	if (ret < 0 && ret != -ENOTCONN) {
		FLOG_WARN(COMP, "publishing to %s failed: %s", ferry__conn_peer(c->conn),
			  ferry_strerror(-ret));
		ferry__conn_close(c->conn);
	}
	return 0;
}

static void dlist_put(struct ferry__gcs_sconn **list, struct ferry__gcs_sconn *c)
{
	c->dlist = list;
	c->dprev = NULL;
	c->dnext = *list;
	if (*list)
		(*list)->dprev = c;
	*list = c;
}

void ferry__gcs_srv_drain_forget(struct ferry__gcs_sconn *c)
{
	if (!c->dlist)
		return;
	if (c->dprev)
		c->dprev->dnext = c->dnext;
	else
		*c->dlist = c->dnext;
	if (c->dnext)
		c->dnext->dprev = c->dprev;
	c->dlist = NULL;
	c->dprev = c->dnext = NULL;
}

static void on_drain_timer(struct ferry__loop_timer *t, int status);

/* Drain every subscriber on srv->drain; those held back by a full socket go to drain_held for
 * the retry timer. Cost: the subscribers with something to send, not every connection (with
 * 10,000 connected nodes, a walk of all of them per published pass was the GCS's N²). */
static void drain_all(struct ferry__gcs_server *srv)
{
	struct ferry__gcs_sconn *c;

	while ((c = srv->drain)) {
		ferry__gcs_srv_drain_forget(c);
		if (drain_one(c) > 0)
			dlist_put(&srv->drain_held, c);
	}
	if (srv->drain_held && !ferry__loop_timer_active(&srv->drain_retry))
		ferry__loop_timer_start(srv->loop, &srv->drain_retry, DRAIN_RETRY_MS, 0,
					on_drain_timer);
}

static void on_drain_timer(struct ferry__loop_timer *t, int status)
{
	struct ferry__gcs_server *srv = t->data;
	struct ferry__gcs_sconn *c;

	if (status != 0)
		return;
	if (t == &srv->drain_retry) {
		while ((c = srv->drain_held)) {
			ferry__gcs_srv_drain_forget(c);
			dlist_put(&srv->drain, c);
		}
	}
	drain_all(srv);
}

static void arm_drain(struct ferry__gcs_server *srv)
{
	if (!ferry__loop_timer_active(&srv->drain_now))
		ferry__loop_timer_start(srv->loop, &srv->drain_now, 0, 0, on_drain_timer);
}

/* A publish inside a request is drained after that request's reply is queued: 0 ms timers fire
 * in the order they were started, so the publisher's reply goes out before the fan-out to the
 * subscribers, as Redis writes the publishing client's reply first. A pipelining publisher
 * waits on those replies, and waking it first keeps one subscriber send (or a hundred) off its
 * round trip; subscribers still get the batch in the same loop pass. */
static void on_ready(void *arg, struct ferry__ps_sub *sub)
{
	struct ferry__gcs_sconn *c = arg;
	struct ferry__gcs_server *srv = c->srv;

	(void)sub;
	if (!c->dlist)
		dlist_put(&srv->drain, c);
	if (srv->in_message)
		srv->drain_wanted = true;
	else
		arm_drain(srv);
}

void ferry__gcs_srv_drain_deferred(struct ferry__gcs_server *srv)
{
	if (!srv->drain_wanted)
		return;
	srv->drain_wanted = false;
	arm_drain(srv);
}

/* ---- subscriptions ---- */

static int sub_get(struct ferry__gcs_sconn *c, struct ferry__ps_sub **out)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__ps_sub_opts so = {0};
	int ret;

	if (!c->sub) {
		so.max_subscriptions = srv->opts.max_subscriptions;
		so.max_buffered_bytes = srv->opts.max_buffered_bytes;
		so.ready = on_ready;
		so.arg = c;
		ret = ferry__ps_sub_create(srv->ps, &so, &c->sub);
		if (ret < 0)
			return ret;
	}
	*out = c->sub;
	return 0;
}

/* A connection at its subscription limit: its subscribes get -ENOSPC, the log one line per
 * connection (a peer that floods past the limit must not flood the log as well). */
static void sub_limit_log(struct ferry__gcs_sconn *c)
{
	struct ferry__ps_sub_stats st;

	if (c->sub_limit_logged)
		return;
	c->sub_limit_logged = true;
	ferry__ps_sub_stats(c->sub, &st);
	FLOG_WARN(COMP,
		  "%s holds %zu subscriptions, its limit (--max-subscriptions): its further "
		  "subscribes are refused",
		  ferry__conn_peer(c->conn), st.subscriptions);
}

int ferry__gcs_srv_subscribe(struct ferry__gcs_sconn *c, const void *payload)
{
	struct ferry__wire_gcs_subscribe_view v = ferry__wire_gcs_subscribe_root_verified(payload);
	uint64_t seq = ferry__wire_gcs_subscribe_seq(v);
	unsigned channel = ferry__wire_gcs_subscribe_channel(v);
	const uint8_t *key = ferry__wire_gcs_subscribe_key_data(v);
	size_t key_size = ferry__wire_gcs_subscribe_key_count(v);
	bool resume = ferry__wire_gcs_subscribe_resume(v);
	struct ferry__ps_sub *sub;
	int ret;

	if (channel >= FERRY_GCS_CH_COUNT || key_size > FERRY__PS_KEY_MAX) {
		FLOG_WARN(COMP, "subscribe to channel %u with a %zu-byte key refused", channel,
			  key_size);
		return -EPROTO;
	}
	ret = sub_get(c, &sub);
	if (ret == 0)
		ret = ferry__ps_subscribe(sub, channel, key, key_size,
					  resume ? 0 : FERRY__PS_WANT_SNAPSHOT);
	if (ret == -ENOSPC)
		sub_limit_log(c);
	if (ret >= 0 && resume)
		ret = ferry__ps_resume(sub, channel, ferry__wire_gcs_subscribe_epoch(v),
				       ferry__wire_gcs_subscribe_last_seq(v));
	ferry__gcs_srv_reply(c, seq, ret < 0 ? ret : 0, NULL, 0, ferry__ps_epoch(c->srv->ps));
	if (ret >= 0)
		on_ready(c, sub);
	return 0;
}

int ferry__gcs_srv_unsubscribe(struct ferry__gcs_sconn *c, const void *payload)
{
	struct ferry__wire_gcs_unsubscribe_view v =
		ferry__wire_gcs_unsubscribe_root_verified(payload);
	unsigned channel = ferry__wire_gcs_unsubscribe_channel(v);
	size_t key_size = ferry__wire_gcs_unsubscribe_key_count(v);
	int ret = -ENOENT;

	if (channel >= FERRY_GCS_CH_COUNT || key_size > FERRY__PS_KEY_MAX) {
		FLOG_WARN(COMP, "unsubscribe from channel %u with a %zu-byte key refused", channel,
			  key_size);
		return -EPROTO;
	}
	if (c->sub)
		ret = ferry__ps_unsubscribe(c->sub, channel,
					    ferry__wire_gcs_unsubscribe_key_data(v), key_size);
	ferry__gcs_srv_reply(c, ferry__wire_gcs_unsubscribe_seq(v), ret, NULL, 0, 0);
	return 0;
}

int ferry__gcs_srv_pubsub_init(struct ferry__gcs_server *srv)
{
	struct ferry__ps_opts po = {0};

	po.max_subscriptions = srv->opts.max_subscriptions ? srv->opts.max_subscriptions
							   : FERRY__GCS_DEFAULT_MAX_SUBSCRIPTIONS;
	po.max_buffered_bytes = srv->opts.max_buffered_bytes;
	po.snapshot = on_snapshot;
	po.snapshot_arg = srv;
	srv->drain_retry.data = srv;
	srv->drain_now.data = srv;
	return ferry__ps_create(&po, &srv->ps);
}

void ferry__gcs_srv_pubsub_fini(struct ferry__gcs_server *srv)
{
	(void)ferry__loop_timer_stop(&srv->drain_retry);
	(void)ferry__loop_timer_stop(&srv->drain_now);
	for (struct ferry__gcs_sconn *c = srv->conns; c; c = c->next) {
		ferry__ps_sub_destroy(c->sub);
		c->sub = NULL;
	}
	ferry__ps_destroy(srv->ps);
	srv->ps = NULL;
}
