/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server: connections, requests and replies, node liveness. Pub/sub delivery is in
 * gcs/server_pubsub.c.
 *
 * DESIGN
 * - One loop thread owns everything: the listener, every connection, the state, the pub/sub
 *   engine. Connections are accepted only after the token handshake (common/conn.h refuses a
 *   wrong token with -EACCES and closes); every frame is verified by the connection layer, and
 *   a GcsRequest's record is decoded by the WAL's own decoder: anything malformed closes that
 *   connection with -EPROTO and the server carries on. At most max_clients connections are
 *   past their handshake at once (by default what the open-file limit leaves room for): one
 *   more is refused in its HandshakeReply (-EUSERS), so accept never meets EMFILE.
 * - Writes: decode, apply (the change callback publishes at once), then reply when durable.
 *   With a WAL, replies wait in a FIFO ordered by LSN; a flush runs once per loop pass (a 0 ms
 *   timer: group commit) and the durable callback releases the replies the log has caught up with.
 *   A connection that closes first leaves its entries behind with a NULL connection.
 * - Liveness: the last time each node registered, heartbeat or reported its load is kept here
 *   (monotonic clock, not in the WAL: after a restart every node in the reloaded table gets a
 *   full deadline from the restart). Heartbeats and load reports never reach the state
 *   (gcs/server_load.c); registration does, and is durable. A timer
 *   declares nodes past the deadline DEAD through an ordinary op, so the cascade (workers,
 *   object locations, lost objects) is logged and published like any other change.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/conn.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "gcs/liveness.h"
#include "gcs/server_int.h"

#define COMP "gcs"
/* A node whose connection its peer closed is dead after the configured deadline /
 * CLOSE_GRACE_DIV unheard, whatever the cluster's size: it is a reconnect's time. */
#define CLOSE_GRACE_DIV 5
/* A task events listing: the newest this many (a reply of a few MiB at most). */
#define TASK_EVENTS_LISTED 20000u

/* ---- replies ---- */

int ferry__gcs_srv_reply(struct ferry__gcs_sconn *c, uint64_t seq, int status, const void *value,
			 size_t size, uint64_t epoch)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__wire_gcs_reply r = {0};
	int ret;

	r.seq = seq;
	r.status = status;
	r.value = value;
	r.value_count = size;
	r.epoch = epoch;
	ret = ferry__wire_gcs_reply_build(&srv->fb, &r);
	if (ret == 0)
		ret = ferry__conn_send(c->conn, FERRY__WIRE_MSG_GCS_REPLY,
				       ferry__fb_builder_data(&srv->fb),
				       ferry__fb_builder_size(&srv->fb));
	if (ret < 0 && ret != -ENOTCONN) {
		FLOG_WARN(COMP, "reply to %s failed: %s", ferry__conn_peer(c->conn),
			  ferry_strerror(-ret));
		ferry__conn_close(c->conn);
	}
	return ret;
}

/* Send every held reply whose LSN is durable now. */
static void release_replies(struct ferry__gcs_server *srv)
{
	uint64_t durable = ferry__gcs_state_durable_lsn(srv->state);

	while (srv->held_head < srv->held_count && srv->held[srv->held_head].lsn <= durable) {
		struct held_reply *h = &srv->held[srv->held_head++];

		if (h->conn)
			ferry__gcs_srv_reply(h->conn, h->seq, h->status, NULL, 0, 0);
	}
	if (srv->held_head == srv->held_count)
		srv->held_head = srv->held_count = 0;
}

static int hold_reply(struct ferry__gcs_server *srv, struct ferry__gcs_sconn *c, uint64_t seq,
		      int status, uint64_t lsn)
{
	if (srv->held_count == srv->held_cap) {
		size_t cap = srv->held_cap ? srv->held_cap * 2 : 64;
		struct held_reply *n;

		if (srv->held_head > 0) { /* compact before growing */
			memmove(srv->held, srv->held + srv->held_head,
				(srv->held_count - srv->held_head) * sizeof(*n));
			srv->held_count -= srv->held_head;
			srv->held_head = 0;
			return hold_reply(srv, c, seq, status, lsn);
		}
		n = ferry__realloc(srv->held, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		srv->held = n;
		srv->held_cap = cap;
	}
	srv->held[srv->held_count++] = (struct held_reply){c, seq, lsn, status};
	return 0;
}

static void on_flush(struct ferry__loop_timer *timer, int status)
{
	struct ferry__gcs_server *srv = timer->data;
	int ret;

	if (status < 0)
		return;
	ret = ferry__gcs_state_flush(srv->state);
	if (ret < 0)
		FLOG_ERROR(COMP, "WAL flush failed: %s", ferry_strerror(-ret));
	release_replies(srv);
}

void ferry__gcs_srv_want_flush(struct ferry__gcs_server *srv)
{
	if (!srv->opts.wal_dir || ferry__loop_timer_active(&srv->flush))
		return;
	(void)ferry__loop_timer_start(srv->loop, &srv->flush, 0, 0, on_flush);
}

static void on_durable(void *arg, uint64_t lsn, int err)
{
	struct ferry__gcs_server *srv = arg;

	(void)lsn;
	if (err < 0) {
		FLOG_ERROR(COMP, "WAL failed: %s; stopping", ferry_strerror(-err));
		ferry__loop_stop(srv->loop);
		return;
	}
	release_replies(srv);
}

static void on_wal_event(struct ferry__loop_req *req, int result)
{
	struct ferry__gcs_server *srv = req->data;

	if (result < 0)
		return;
	ferry__gcs_state_process(srv->state);
	release_replies(srv);
}

/* ---- requests ---- */

void ferry__gcs_srv_node_seen(struct ferry__gcs_server *srv, const struct ferry_node_id *id)
{
	void *v;

	if (ferry__hashmap_put(&srv->last_seen, id->bytes, &v) >= 0)
		memcpy(v, &(uint64_t){ferry__now_ms()}, sizeof(uint64_t));
}

/* The node whose liveness this connection carries (its last register, heartbeat or load). */
static void note_node_conn(struct ferry__gcs_sconn *c, const struct ferry__gcs_op *op)
{
	if (op->type == FERRY__GCS_OP_NODE_REGISTER)
		c->node = op->node.id;
	else if (op->type == FERRY__GCS_OP_NODE_HEARTBEAT)
		c->node = op->heartbeat.id;
	else if (op->type == FERRY__GCS_OP_NODE_LOAD)
		c->node = op->load.id;
	else
		return;
	c->has_node = true;
}

/*
 * A node's connection closed by its peer (a killed process's kernel closes its sockets): the
 * node gets CLOSE_GRACE of its deadline to be heard from again on a new connection (a client
 * reconnects within 100 ms), then is declared dead by the usual scan, instead of a whole
 * deadline after its last beat. A host that vanishes without closing still takes the deadline.
 */
static void node_conn_lost(struct ferry__gcs_sconn *c)
{
	struct ferry__gcs_server *srv = c->srv;
	uint64_t grace = srv->opts.node_deadline_ms / CLOSE_GRACE_DIV, now = ferry__now_ms();
	uint64_t *seen = ferry__hashmap_get(&srv->last_seen, c->node.bytes);

	/* Overdue once now - seen > deadline: seen = now + grace - deadline. */
	if (seen && now + grace > srv->deadline_ms && *seen > now + grace - srv->deadline_ms)
		*seen = now + grace - srv->deadline_ms;
}

static int handle_request(struct ferry__gcs_sconn *c, const void *payload, size_t len)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__wire_gcs_request_view v = ferry__wire_gcs_request_root_verified(payload);
	uint64_t seq = ferry__wire_gcs_request_seq(v), lsn = 0;
	struct ferry__wire_unique_id client;
	struct ferry__gcs_op op;
	int ret;

	(void)len;
	ret = ferry__gcs_op_decode(ferry__wire_gcs_request_op_data(v),
				   ferry__wire_gcs_request_op_count(v), &op);
	if (ret == -ENOMEM)
		return ferry__gcs_srv_reply(c, seq, -ENOMEM, NULL, 0, 0) < 0 ? 0 : 0;
	if (ret < 0)
		return ret; /* malformed: the caller closes the connection */
	ferry__metric_add(op.type == FERRY__GCS_OP_NODE_HEARTBEAT ? FERRY__MC_gcs_heartbeats
			  : op.type == FERRY__GCS_OP_NODE_LOAD	  ? FERRY__MC_gcs_loads
			  : op.type == FERRY__GCS_OP_TASK_EVENT	  ? FERRY__MC_gcs_task_events
			  : op.type == FERRY__GCS_OP_LOG	  ? FERRY__MC_gcs_logs
								  : FERRY__MC_gcs_mutations,
			  1);
	if (op.type == FERRY__GCS_OP_REQUEST_DONE) {
		FLOG_WARN(COMP, "%s sent a server-internal record", ferry__conn_peer(c->conn));
		ret = -EINVAL;
	} else if (op.type == FERRY__GCS_OP_LOG) {
		/* Redis PUBLISH semantics: out to the subscribers, no table, no WAL, no dedup (a
		 * resend after a reconnect may deliver a line twice); the reply does not wait. */
		ret = ferry__gcs_srv_publish_log(srv, &op);
	} else if (op.type == FERRY__GCS_OP_NODE_HEARTBEAT) {
		/* Liveness lives in memory (server_load.c): no WAL, no table, no publication. */
		ret = ferry__gcs_srv_heartbeat(srv, &op.heartbeat.id);
	} else if (op.type == FERRY__GCS_OP_NODE_LOAD) {
		ret = ferry__gcs_srv_node_load(srv, &op.load, ferry__wire_gcs_request_op_data(v),
					       ferry__wire_gcs_request_op_count(v));
	} else if (op.type == FERRY__GCS_OP_TASK_EVENT) {
		/* What a task did, for operators (ferry list tasks), as Ray keeps task events: in
		 * memory (a bounded ring, the oldest dropped), never in the WAL, no publication. */
		ret = ferry__gcs_task_event_add(ferry__gcs_state_tables(srv->state),
						&op.task_event);
	} else {
		client = ferry__wire_gcs_request_client(v);
		ret = ferry__gcs_state_apply_request(srv->state, client.bytes, seq, &op, &lsn);
	}
	if (ret >= 0 && op.type == FERRY__GCS_OP_NODE_REGISTER)
		ferry__gcs_srv_node_seen(srv, &op.node.id);
	if (ret >= 0)
		note_node_conn(c, &op);
	ferry__gcs_op_release(&op);
	if (op.type == FERRY__GCS_OP_NODE_HEARTBEAT) {
		ferry__gcs_srv_beat_reply(c, seq, ret);
		return 0;
	}
	if (ret < 0 || ferry__gcs_state_durable_lsn(srv->state) >= lsn) {
		ferry__gcs_srv_reply(c, seq, ret, NULL, 0, 0);
		return 0;
	}
	if (hold_reply(srv, c, seq, ret, lsn) < 0) {
		/* Applied but we cannot remember to answer: the client's retry is harmless. */
		ferry__conn_close(c->conn);
		return 0;
	}
	ferry__gcs_srv_want_flush(srv);
	return 0;
}

static int handle_kv_get(struct ferry__gcs_sconn *c, const void *payload)
{
	struct ferry__wire_gcs_kv_get_view v = ferry__wire_gcs_kv_get_root_verified(payload);
	struct ferry__gcs_slice ns = {ferry__wire_gcs_kv_get_ns_data(v),
				      ferry__wire_gcs_kv_get_ns_count(v)};
	struct ferry__gcs_slice key = {ferry__wire_gcs_kv_get_key_data(v),
				       ferry__wire_gcs_kv_get_key_count(v)};
	struct ferry__gcs_slice value = {0};
	struct ferry__kv *kv = ferry__gcs_state_kv(c->srv->state);
	uint64_t seq = ferry__wire_gcs_kv_get_seq(v);
	int ret;

	switch (ferry__wire_gcs_kv_get_op(v)) {
	case 0:
		ret = ferry__kv_get(kv, ns, key, &value);
		break;
	case 1:
		ret = ferry__kv_exists(kv, ns, key);
		break;
	case 2:
		ferry__gcs_srv_kv_keys(c, seq, ns, key);
		return 0;
	case 3:
		return ferry__gcs_srv_kv_multi_get(c, seq, ns, key);
	default:
		ret = -EINVAL;
		break;
	}
	ferry__gcs_srv_reply(c, seq, ret, value.data, value.size, 0);
	return 0;
}

static void reply_record(struct ferry__gcs_sconn *c, uint64_t seq, int channel, const void *rec)
{
	struct ferry__gcs_server *srv = c->srv;
	int ret;

	if (!rec) {
		ferry__gcs_srv_reply(c, seq, -ENOENT, NULL, 0, 0);
		return;
	}
	srv->out.size = 0;
	ret = channel < 0 ? ferry__gcs_srv_table_record(FERRY__GCS_T_PGS, rec, &srv->out)
			  : ferry__gcs_record_encode(channel, rec, &srv->scratch, &srv->out);
	ferry__gcs_srv_reply(c, seq, ret, srv->out.data, ret < 0 ? 0 : srv->out.size, 0);
}

static void handle_lookup(struct ferry__gcs_sconn *c, const void *payload)
{
	struct ferry__wire_gcs_object_lookup_view v =
		ferry__wire_gcs_object_lookup_root_verified(payload);
	struct ferry_object_id id = ferry__wire_gcs_object_lookup_object_id(v);

	reply_record(c, ferry__wire_gcs_object_lookup_seq(v), FERRY_GCS_CH_OBJECT_LOCATIONS,
		     ferry__objdir_get(ferry__gcs_state_objdir(c->srv->state), &id));
}

static void handle_table_get(struct ferry__gcs_sconn *c, const void *payload)
{
	struct ferry__wire_gcs_table_get_view v = ferry__wire_gcs_table_get_root_verified(payload);
	struct ferry__wire_unique_id id = ferry__wire_gcs_table_get_id(v);
	struct ferry__gcs_tables *t = ferry__gcs_state_tables(c->srv->state);
	uint64_t seq = ferry__wire_gcs_table_get_seq(v);
	unsigned table = ferry__wire_gcs_table_get_table(v);
	const void *rec = NULL;
	int channel = -1;

	if (ferry__wire_gcs_table_get_list(v) && table < FERRY__GCS_T_COUNT) {
		ferry__gcs_srv_table_list(c, seq, (int)table);
		return;
	}
	if (ferry__wire_gcs_table_get_list(v) && table == FERRY__GCS_T_TASK_EVENTS) {
		ferry__gcs_srv_task_events(c, seq, TASK_EVENTS_LISTED);
		return;
	}
	if (ferry__wire_gcs_table_get_list(v) && table == FERRY__GCS_T_LOADS) {
		int ret;

		c->srv->out.size = 0;
		ret = ferry__gcs_srv_load_list(c->srv, &c->srv->out);
		ferry__gcs_srv_reply(c, seq, ret, c->srv->out.data, ret < 0 ? 0 : c->srv->out.size,
				     0);
		return;
	}
	switch (table) {
	case FERRY__GCS_T_NODES:
		rec = ferry__gcs_node_get(t, (const struct ferry_node_id *)id.bytes);
		channel = FERRY_GCS_CH_NODES;
		break;
	case FERRY__GCS_T_JOBS:
		rec = ferry__gcs_job_get(t, (const struct ferry_job_id *)id.bytes);
		channel = FERRY_GCS_CH_JOBS;
		break;
	case FERRY__GCS_T_WORKERS:
		rec = ferry__gcs_worker_get(t, (const struct ferry_worker_id *)id.bytes);
		channel = FERRY_GCS_CH_WORKERS;
		break;
	case FERRY__GCS_T_ACTORS:
		rec = ferry__gcs_actor_get(t, (const struct ferry_actor_id *)id.bytes);
		channel = FERRY_GCS_CH_ACTORS;
		break;
	case FERRY__GCS_T_PGS:
		rec = ferry__gcs_pg_get(t, (const struct ferry_placement_group_id *)id.bytes);
		break;
	default:
		ferry__gcs_srv_reply(c, seq, -EINVAL, NULL, 0, 0);
		return;
	}
	reply_record(c, seq, channel, rec);
}

int ferry__gcs_request_check(uint16_t type, const void *payload, size_t len)
{
	struct ferry__wire_gcs_kv_get_view kv;
	struct ferry__wire_gcs_request_view v;
	struct ferry__gcs_op op;
	int ret;

	ret = ferry__wire_verify(type, payload, len);
	if (ret < 0)
		return ret;
	switch (type) {
	case FERRY__WIRE_MSG_GCS_REQUEST:
		v = ferry__wire_gcs_request_root_verified(payload);
		ret = ferry__gcs_op_decode(ferry__wire_gcs_request_op_data(v),
					   ferry__wire_gcs_request_op_count(v), &op);
		if (ret == 0)
			ferry__gcs_op_release(&op);
		return ret == -ENOMEM ? 0 : ret;
	case FERRY__WIRE_MSG_GCS_KV_GET:
		kv = ferry__wire_gcs_kv_get_root_verified(payload);
		if (ferry__wire_gcs_kv_get_op(kv) != 3)
			return 0;
		return ferry__gcs_srv_key_list_check((struct ferry__gcs_slice){
			ferry__wire_gcs_kv_get_key_data(kv), ferry__wire_gcs_kv_get_key_count(kv)});
	case FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP:
	case FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP_BATCH:
	case FERRY__WIRE_MSG_GCS_TABLE_GET:
	case FERRY__WIRE_MSG_GCS_SUBSCRIBE:
	case FERRY__WIRE_MSG_GCS_UNSUBSCRIBE:
		return 0;
	default:
		FLOG_WARN(COMP, "message %s is not a GCS request", ferry__wire_message_name(type));
		return -EPROTO;
	}
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct ferry__gcs_sconn *c = ferry__conn_data(conn);
	struct ferry__gcs_server *srv = c->srv;
	int ret = 0;

	srv->in_message = true;
	switch (type) {
	case FERRY__WIRE_MSG_GCS_REQUEST:
		ret = handle_request(c, payload, len);
		break;
	case FERRY__WIRE_MSG_GCS_KV_GET:
		ferry__metric_add(FERRY__MC_gcs_reads, 1);
		ret = handle_kv_get(c, payload);
		break;
	case FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP:
		ferry__metric_add(FERRY__MC_gcs_lookups, 1);
		handle_lookup(c, payload);
		break;
	case FERRY__WIRE_MSG_GCS_TABLE_GET:
		ferry__metric_add(FERRY__MC_gcs_reads, 1);
		handle_table_get(c, payload);
		break;
	case FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP_BATCH:
		ferry__metric_add(FERRY__MC_gcs_lookups, 1);
		ferry__gcs_srv_lookup_batch(c, payload);
		break;
	case FERRY__WIRE_MSG_GCS_SUBSCRIBE:
		ferry__metric_add(FERRY__MC_gcs_subscribes, 1);
		ret = ferry__gcs_srv_subscribe(c, payload);
		break;
	case FERRY__WIRE_MSG_GCS_UNSUBSCRIBE:
		ret = ferry__gcs_srv_unsubscribe(c, payload);
		break;
	default:
		ret = -EPROTO;
		break;
	}
	srv->in_message = false;
	ferry__gcs_srv_drain_deferred(srv);
	if (ret == -EPROTO) {
		FLOG_WARN(COMP, "malformed %s from %s: closing", ferry__wire_message_name(type),
			  ferry__conn_peer(conn));
		ferry__conn_close(conn);
	}
}

/* ---- connections ---- */

static void on_close(struct ferry__conn *conn, int err)
{
	struct ferry__gcs_sconn *c = ferry__conn_data(conn);
	struct ferry__gcs_server *srv = c->srv;

	if (err < 0 && err != -ECONNRESET && err != -ECANCELED)
		FLOG_INFO(COMP, "connection %s closed: %s", ferry__conn_peer(conn),
			  ferry_strerror(-err));
	for (size_t i = srv->held_head; i < srv->held_count; i++)
		if (srv->held[i].conn == c)
			srv->held[i].conn = NULL;
	srv->cap.clients--;
	if (c->has_node && err == -ECONNRESET)
		node_conn_lost(c);
	ferry__ps_sub_destroy(c->sub);
	ferry__gcs_srv_drain_forget(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ferry__free(c);
}

static const struct ferry__conn_callbacks conn_cb = {
	.on_message = on_message,
	.on_close = on_close,
};

static void on_accept(struct ferry__conn_server *cs, struct ferry__conn *conn, const void *hs,
		      size_t len)
{
	struct ferry__gcs_server *srv = ferry__conn_server_data(cs);
	struct ferry__gcs_sconn *c = ferry__calloc(1, sizeof(*c));

	(void)hs;
	(void)len;
	if (!c) {
		FLOG_WARN(COMP, "out of memory accepting %s", ferry__conn_peer(conn));
		ferry__conn_close(conn);
		return;
	}
	c->srv = srv;
	c->conn = conn;
	srv->cap.clients++;
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	ferry__conn_set_callbacks(conn, &conn_cb, c);
}

/* Only for unregistered callbacks on a connection that closes before on_accept. */
static void on_close_early(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
}

static const struct ferry__conn_callbacks early_cb = {
	.on_message = on_message,
	.on_close = on_close_early,
};

/* A client past the limit is refused in its handshake (see struct ferry__conn_client_cap). */
static int admit(struct ferry__conn_server *cs, struct ferry__conn *conn)
{
	struct ferry__gcs_server *srv = ferry__conn_server_data(cs);

	return ferry__conn_client_cap_admit(&srv->cap, ferry__conn_peer(conn), COMP);
}

static void on_refused(struct ferry__conn_server *cs, int err)
{
	(void)cs;
	/* The connection layer logged why, rate-limited per peer; a flood must not add a line
	 * per connection here. */
	FLOG_INFO(COMP, "connection refused: %s", ferry_strerror(-err));
}

/* ---- liveness ---- */

/* Nodes alive or draining whose last sign of life is older than the deadline (at most @max);
 * *alive counts every node not dead. A node never heard from (this server restarted) gets its
 * first deadline from now. */
static size_t overdue_nodes(struct ferry__gcs_server *srv, struct ferry_node_id *out, size_t max,
			    size_t *alive)
{
	struct ferry__gcs_tables *t = ferry__gcs_state_tables(srv->state);
	uint64_t now = ferry__now_ms();
	const struct ferry__gcs_node *n;
	size_t cursor = 0, count = 0;

	*alive = 0;
	while ((n = ferry__gcs_tables_next(t, FERRY__GCS_T_NODES, &cursor))) {
		uint64_t *seen;

		if (n->state == FERRY_GCS_NODE_DEAD)
			continue;
		++*alive;
		seen = ferry__hashmap_get(&srv->last_seen, n->id.bytes);
		if (!seen)
			ferry__gcs_srv_node_seen(srv, &n->id);
		else if (count < max && now - *seen > srv->deadline_ms)
			out[count++] = n->id;
	}
	return count;
}

static void on_liveness(struct ferry__loop_timer *timer, int status);

/*
 * The deadline follows the cluster's size (gcs/liveness.h): it grows at once when nodes join,
 * and shrinks only after it has not been needed for a whole deadline, because nodes learn of
 * deaths (and shorten their interval) a little after this server does.
 */
static void size_deadline(struct ferry__gcs_server *srv, size_t alive, uint64_t now)
{
	uint32_t want = ferry__gcs_node_deadline_ms(srv->opts.node_deadline_ms, alive);

	if (want >= srv->deadline_ms)
		srv->deadline_held_ms = now;
	else if (now - srv->deadline_held_ms < srv->deadline_ms)
		return;
	if (want == srv->deadline_ms)
		return;
	FLOG_INFO(COMP, "%zu nodes: node deadline %u ms (was %u)", alive, want, srv->deadline_ms);
	srv->deadline_ms = want;
	/* The scan keeps to a tenth of the deadline: a sized deadline is scanned less often. */
	(void)ferry__loop_timer_start(srv->loop, &srv->liveness, want / 10, want / 10, on_liveness);
}

static void on_liveness(struct ferry__loop_timer *timer, int status)
{
	struct ferry__gcs_server *srv = timer->data;
	struct ferry_node_id dead[64];
	uint64_t now = ferry__now_ms();
	size_t n, alive;

	if (status < 0)
		return;
	n = overdue_nodes(srv, dead, 64, &alive);
	size_deadline(srv, alive, now);
	for (size_t i = 0; i < n; i++) {
		struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_STATE};
		int ret;

		op.node_state.id = dead[i];
		op.node_state.state = FERRY_GCS_NODE_DEAD;
		op.node_state.time_ms = ferry__wall_ms();
		ret = ferry__gcs_state_apply(srv->state, &op, NULL);
		if (ret < 0) {
			FLOG_WARN(COMP, "declaring a node dead failed: %s", ferry_strerror(-ret));
			continue;
		}
		FLOG_INFO(COMP, "node missed its %u ms deadline: dead", srv->deadline_ms);
		ferry__hashmap_remove(&srv->last_seen, dead[i].bytes, NULL);
	}
	if (n)
		ferry__gcs_srv_want_flush(srv);
	if (ferry__gcs_state_maybe_snapshot(srv->state) < 0)
		FLOG_WARN(COMP, "snapshot failed to start");
}

/* ---- setup ---- */

static int check_opts(const struct ferry__gcs_server_opts *o)
{
	if (!o || !o->token || !o->token_len) {
		FLOG_ERROR(COMP, "a cluster token is required");
		return -EINVAL;
	}
	if (o->shard_count > 1 && o->shard_index >= o->shard_count) {
		FLOG_ERROR(COMP, "shard %u of %u does not exist", o->shard_index, o->shard_count);
		return -EINVAL;
	}
	return 0;
}

static int open_state(struct ferry__gcs_server *srv)
{
	struct ferry__gcs_state_opts so = {0};

	so.wal_dir = srv->opts.wal_dir;
	so.objdir_shard_index = srv->opts.shard_index;
	so.objdir_shard_count = srv->opts.shard_count;
	so.durable = on_durable;
	so.changed = ferry__gcs_srv_changed;
	so.arg = srv;
	return ferry__gcs_state_open(&so, &srv->state);
}

/* Timer, listener, then the WAL poll: the only step that cannot be undone at once (its
 * cancellation completes later) comes last, so a failure unwinds synchronously. */
static int start_io(struct ferry__gcs_server *srv)
{
	struct ferry__conn_server_opts co = {0};
	int fd = ferry__gcs_state_event_fd(srv->state), ret;

	srv->liveness.data = srv;
	ret = ferry__loop_timer_start(srv->loop, &srv->liveness, srv->deadline_ms / 10,
				      srv->deadline_ms / 10, on_liveness);
	if (ret < 0)
		return ret;
	co.conn.cb = &early_cb;
	co.conn.max_message_bytes =
		srv->opts.max_message_bytes ? srv->opts.max_message_bytes : 4u << 20;
	co.conn.max_queued_bytes = srv->opts.max_queued_bytes;
	co.conn.stall_timeout_ms = srv->opts.stall_timeout_ms;
	co.conn.frame_timeout_ms = srv->opts.frame_timeout_ms;
	co.handshake_timeout_ms = srv->opts.handshake_timeout_ms;
	co.max_handshaking = srv->opts.max_handshaking;
	co.bind_retry_ms = srv->opts.bind_retry_ms;
	co.on_accept = on_accept;
	co.on_refused = on_refused;
	co.admit = admit;
	co.data = srv;
	co.token = srv->opts.token;
	co.token_len = srv->opts.token_len;
	co.server_kind = FERRY__WIRE_PEER_KIND_GCS;
	ferry_id_random(co.server_id.bytes, sizeof(co.server_id.bytes));
	ret = ferry__conn_server_listen_tcp(srv->loop,
					    srv->opts.host ? srv->opts.host : "127.0.0.1",
					    srv->opts.port, &co, &srv->listener);
	if (ret < 0) {
		FLOG_ERROR(COMP, "listen on port %u failed: %s", srv->opts.port,
			   ferry_strerror(-ret));
		goto err_stop_timer;
	}
	srv->wal_req.data = srv;
	if (fd >= 0) {
		ret = ferry__loop_poll(srv->loop, &srv->wal_req, fd, POLLIN, true, on_wal_event);
		if (ret < 0)
			goto err_close_listener;
	}
	return 0;

err_close_listener:
	ferry__conn_server_close(srv->listener);
	srv->listener = NULL;
err_stop_timer:
	ferry__loop_timer_stop(&srv->liveness);
	return ret;
}

int ferry__gcs_server_create(struct ferry__loop *loop, const struct ferry__gcs_server_opts *opts,
			     struct ferry__gcs_server **out)
{
	struct ferry__gcs_server *srv;
	int ret = check_opts(opts);

	if (ret < 0)
		return ret;
	srv = ferry__calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->loop = loop;
	srv->opts = *opts;
	/* opts.node_deadline_ms stays the configured (small-cluster) deadline, defaulted here. */
	if (!srv->opts.node_deadline_ms)
		srv->opts.node_deadline_ms = FERRY__GCS_DEFAULT_DEADLINE_MS;
	if (srv->opts.node_deadline_ms < 10)
		srv->opts.node_deadline_ms = 10;
	srv->deadline_ms = srv->opts.node_deadline_ms;
	ferry__conn_client_cap_init(&srv->cap, srv->opts.max_clients, srv->opts.max_handshaking,
				    COMP);
	srv->flush.data = srv;
	ferry__hashmap_init(&srv->last_seen, sizeof(struct ferry_node_id), sizeof(uint64_t));
	ferry__gcs_srv_load_init(srv);
	ret = ferry__gcs_srv_pubsub_init(srv);
	if (ret < 0)
		goto err_free;
	ret = open_state(srv);
	if (ret < 0)
		goto err_pubsub;
	ret = ferry__gcs_srv_peer_init(srv);
	if (ret < 0)
		goto err_io;
	ret = start_io(srv);
	if (ret < 0)
		goto err_io;
	ferry__gcs_srv_peer_start(srv);
	FLOG_INFO(COMP, "serving on port %u (shard %u/%u%s, at most %u clients)",
		  ferry__gcs_server_port(srv), opts->shard_index,
		  opts->shard_count ? opts->shard_count : 1,
		  opts->wal_dir ? ", with a WAL" : ", in memory", srv->cap.max);
	*out = srv;
	return 0;

err_io:
	ferry__gcs_state_close(srv->state);
err_pubsub:
	ferry__gcs_srv_pubsub_fini(srv);
err_free:
	ferry__gcs_srv_load_fini(srv);
	ferry__hashmap_fini(&srv->last_seen);
	ferry__free(srv);
	return ret;
}

uint16_t ferry__gcs_server_port(const struct ferry__gcs_server *srv)
{
	return srv->listener ? ferry__conn_server_port(srv->listener) : 0;
}

unsigned ferry__gcs_server_max_clients(const struct ferry__gcs_server *srv)
{
	return srv->cap.max;
}

void ferry__gcs_server_destroy(struct ferry__gcs_server *srv)
{
	if (!srv)
		return;
	(void)ferry__loop_timer_stop(&srv->flush);
	ferry__gcs_state_close(srv->state);
	ferry__gcs_srv_pubsub_fini(srv);
	ferry__gcs_srv_load_fini(srv);
	ferry__hashmap_fini(&srv->last_seen);
	ferry__free(srv->held);
	ferry__fb_builder_fini(&srv->fb);
	ferry__fb_builder_fini(&srv->beat_fb);
	ferry__gcs_buf_fini(&srv->scratch);
	ferry__gcs_buf_fini(&srv->out);
	ferry__free(srv);
}
