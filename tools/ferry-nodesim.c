/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-nodesim: N simulated nodes against a real ferry-gcs, for bench/compare gcs-scale. Each
 * simulated node is one TCP connection with the cluster token handshake; it registers and
 * subscribes as ferry-node does (the node-deaths channel, and a keyed nodes subscription per
 * peer it would pull from: --peers, 8 by default), then heartbeats at the interval the GCS's
 * beat replies size (their alive count). --subscribers N more follow the whole nodes channel
 * as the CLI or a scheduler would.
 * After a steady window (the GCS's CPU read from its /proc ticks) a few nodes are killed and the
 * time until an observer sees each one's DEAD event is measured. Ends with one line:
 * "NODESIM key=value ..." (the figures; bench/compare parses it).
 *
 * DESIGN
 * - One process, one thread, the project's io_uring loop and framed connections
 *   (common/conn): 10,000 nodes are 10,000 sockets, not threads. Messages are built with the
 *   project's own encoders (gcs/ops.h ops inside a GcsRequest, the generated wire
 *   builders), so a new op needs one send function here, nothing else.
 * - Connects run at most --connect-batch at a time (below ferry-gcs's --max-handshaking, which
 *   closes the oldest handshaking connection past it): the next starts when a handshake is
 *   done, so registrations pipeline as when nodes start together. A node is up (heartbeating)
 *   once its registration is answered.
 * - Heartbeats: one 10 ms tick walks one bucket of nodes (index mod interval / 10), so each
 *   node beats every interval, spread evenly. The interval is node.c's: --heartbeat-ms, longer
 *   in a large cluster (gcs/liveness.h, from the nodes up), unless --fixed-interval 1. As in
 *   node.c (beat_busy) a node has at most one heartbeat in flight: a beat due while one is
 *   outstanding is skipped and counted, which is how an overloaded GCS shows.
 * - Load reports: a node's first beat and each beat after its load changed (--load-change-ms;
 *   never by default: an idle cluster) is a NODE_LOAD report instead of a heartbeat, as
 *   node.c's beat(); one more connection, not a node, subscribes to the load channel as a
 *   scheduler would.
 * - Node IDs are a random 12-byte prefix and the node's index, so an event's key names the
 *   simulated node without a table. Observers (the first --observers nodes, never killed)
 *   decode nodes-channel items and record the first DEAD they see for each node; the others
 *   only count what they receive.
 * - Phases, each on the same tick: connect, settle, steady (measure), kill (one node every
 *   --kill-gap-ms), drain (until every killed node was seen dead, or a timeout), report.
 */
#include "common/net.h"
#include "tools/nodesim.h"

/* ---- sending ---- */

static uint64_t next_seq(struct sim_node *n, enum req_kind kind)
{
	return ++n->next_seq << 2 | kind;
}

/* Send @op as a GcsRequest from @n. Returns the payload's bytes, or -errno. */
static int send_op(struct sim_node *n, const struct ferry__gcs_op *op, enum req_kind kind)
{
	struct sim *sim = n->sim;
	struct ferry__gcs_writer w = {&sim->rec, 0};
	struct ferry__wire_gcs_request m = {0};
	int ret;

	sim->rec.size = 0;
	ferry__gcs_op_encode(op, &w);
	if (w.err)
		return w.err;
	m.seq = next_seq(n, kind);
	m.op = sim->rec.data;
	m.op_count = sim->rec.size;
	m.client = n->client;
	ret = ferry__wire_gcs_request_build(&sim->fb, &m);
	if (ret == 0)
		ret = ferry__conn_send(n->conn, FERRY__WIRE_MSG_GCS_REQUEST,
				       ferry__fb_builder_data(&sim->fb),
				       ferry__fb_builder_size(&sim->fb));
	return ret < 0 ? ret : (int)ferry__fb_builder_size(&sim->fb);
}

/* What node.c's register_node() sends (through ferry_gcs_node_register). */
static int send_register(struct sim_node *n)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_REGISTER};
	char address[64];

	snprintf(address, sizeof(address), "127.0.0.1:%u", 20000u + (unsigned)(n - n->sim->nodes));
	op.node.id = n->id;
	op.node.address = address;
	op.node.total.memory_bytes = 1 << 30;
	op.node.store_capacity_bytes = 1 << 30;
	op.node.transports = FERRY_GCS_TRANSPORT_TCP;
	op.node.state = FERRY_GCS_NODE_ALIVE;
	op.node.start_ms = ferry__wall_ms();
	op.node.last_heartbeat_ms = op.node.start_ms;
	return send_op(n, &op, REQ_REGISTER);
}

/* What node.c's heartbeat thread sends (ferry_gcs_node_heartbeat). */
static int send_heartbeat(struct sim_node *n)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_HEARTBEAT};

	op.heartbeat.id = n->id;
	op.heartbeat.time_ms = ferry__wall_ms();
	op.heartbeat.avail_memory_bytes = 1 << 30;
	return send_op(n, &op, REQ_HEARTBEAT);
}

/*
 * A load report (ferry_gcs_node_report_load): what node.c's beat() sends when the load
 * changed, or the GCS asked for it. An idle node's resources: 4 CPUs, 16 GiB of memory and a
 * 1 GiB store, all free; a busy one's free CPUs change with every report.
 */
static int send_load(struct sim_node *n)
{
	struct ferry_gcs_resource_load res[] = {
		{"CPU", 4ll * FERRY_GCS_RESOURCE_UNIT, 4ll * FERRY_GCS_RESOURCE_UNIT},
		{"memory", 16ll << 30, 16ll << 30},
		{"object_store_memory", 1ll << 30, 1ll << 30},
	};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_LOAD};

	res[0].available = (int64_t)(n->load_version % 5) * FERRY_GCS_RESOURCE_UNIT;
	op.load.id = n->id;
	op.load.version = ++n->load_version;
	op.load.nresources = FERRY_ARRAY_SIZE(res);
	op.load.resources = res;
	return send_op(n, &op, REQ_HEARTBEAT);
}

/* A beat: a load report when one is due, else a heartbeat. Returns the
 * bytes sent, or -errno. */
static int beat(struct sim_node *n, uint64_t now)
{
	struct sim *sim = n->sim;
	int ret;

	if (sim->o.load_change_ms && now - n->load_at_ns >= sim->o.load_change_ms * 1000000ull) {
		n->load_at_ns = now;
		n->load_due = true;
	}
	if (n->load_due) {
		ret = send_load(n);
		if (ret >= 0) {
			n->load_due = false;
			sim->c.load_sent++;
			sim->c.load_bytes += (uint64_t)ret;
		}
		return ret;
	}
	return send_heartbeat(n);
}

/* A subscription to @channel, to the whole channel or (@peer set) to that node's key only; the
 * scheduler's is to load. */
static int send_subscribe_ch(struct sim_node *n, int channel, const struct ferry_node_id *peer)
{
	struct ferry__wire_gcs_subscribe m = {0};
	struct sim *sim = n->sim;
	int ret;

	m.seq = next_seq(n, REQ_SUBSCRIBE);
	m.channel = (uint8_t)channel;
	if (peer) {
		m.key = peer->bytes;
		m.key_count = sizeof(peer->bytes);
	}
	if (n->scheduler)
		m.channel = FERRY_GCS_CH_NODE_LOAD;
	ret = ferry__wire_gcs_subscribe_build(&sim->fb, &m);
	if (ret == 0)
		ret = ferry__conn_send(n->conn, FERRY__WIRE_MSG_GCS_SUBSCRIBE,
				       ferry__fb_builder_data(&sim->fb),
				       ferry__fb_builder_size(&sim->fb));
	return ret;
}

static int send_subscribe_to(struct sim_node *n, const struct ferry_node_id *peer)
{
	return send_subscribe_ch(n, FERRY_GCS_CH_NODES, peer);
}

static int send_subscribe(struct sim_node *n)
{
	return send_subscribe_to(n, NULL);
}

/* --peers K: the node's K next nodes (by index), each one key, as the object manager looks up
 * a peer when it first pulls from it and then follows only that peer's record. */
static int send_peer_subscribes(struct sim_node *n)
{
	struct sim *sim = n->sim;
	uint32_t self = (uint32_t)(n - sim->nodes);
	int ret = 0;

	for (uint32_t k = 1; k <= sim->o.peers && k < sim->o.nodes && ret >= 0; k++)
		ret = send_subscribe_to(n, &sim->nodes[(self + k) % sim->o.nodes].id);
	return ret;
}

/* ---- receiving ---- */

static void rtt_add(struct sim *sim, uint64_t ns)
{
	uint64_t b = ns / 1000u / RTT_BUCKET_US;

	sim->rtt[b < RTT_BUCKETS ? b : RTT_BUCKETS - 1]++;
	sim->rtt_n++;
}

static void join_done(struct sim_node *n, bool ok);
static void connect_next(struct sim *sim);

/* A heartbeat reply's GcsBeatInfo: the cluster's size, which node.c sizes its beat by. */
static void beat_info(struct sim *sim, struct ferry__wire_gcs_reply_view v)
{
	struct ferry__wire_gcs_beat_info_view info;

	if (ferry__wire_gcs_reply_value_count(v) &&
	    ferry__wire_gcs_beat_info_root(ferry__wire_gcs_reply_value_data(v),
					   ferry__wire_gcs_reply_value_count(v), &info) == 0)
		sim->gcs_alive = ferry__wire_gcs_beat_info_alive_nodes(info);
}

static void on_reply(struct sim_node *n, const void *payload)
{
	struct ferry__wire_gcs_reply_view v = ferry__wire_gcs_reply_root_verified(payload);
	uint64_t seq = ferry__wire_gcs_reply_seq(v);
	int32_t status = ferry__wire_gcs_reply_status(v);
	struct sim *sim = n->sim;

	switch (seq & 3) {
	case REQ_REGISTER:
		if (status < 0)
			FLOG_WARN(COMP, "registration refused: %s", ferry_strerror(-status));
		join_done(n, status >= 0);
		break;
	case REQ_SUBSCRIBE:
		if (status < 0)
			FLOG_WARN(COMP, "subscription refused: %s", ferry_strerror(-status));
		break;
	case REQ_HEARTBEAT:
		if (n->hb_sent_ns) {
			rtt_add(sim, ferry__now_ns() - n->hb_sent_ns);
			n->hb_sent_ns = 0;
		}
		sim->c.hb_acked++;
		sim->c.hb_refused += status < 0;
		beat_info(sim, v);
		n->load_due |= status == 0; /* the GCS holds no load of ours */
		break;
	}
}

/* The simulated node named by @key (a node ID of ours), or NULL. */
static struct sim_node *node_by_key(struct sim *sim, const uint8_t *key, size_t size)
{
	uint32_t idx;

	if (size != sizeof(struct ferry_node_id) || memcmp(key, sim->id_prefix, ID_PREFIX_BYTES))
		return NULL;
	memcpy(&idx, key + ID_PREFIX_BYTES, sizeof(idx));
	return idx < sim->o.nodes ? &sim->nodes[idx] : NULL;
}

/* An observer's nodes or deaths channel delta: note a DEAD event for one of ours. */
static void observe(struct sim *sim, struct ferry__wire_gcs_pub_item_view it)
{
	struct ferry__gcs_op op;
	struct sim_node *dead;

	if ((ferry__wire_gcs_pub_item_channel(it) != FERRY_GCS_CH_NODES &&
	     ferry__wire_gcs_pub_item_channel(it) != FERRY_GCS_CH_NODE_DEATHS) ||
	    !ferry__wire_gcs_pub_item_data_count(it))
		return;
	if (ferry__gcs_op_decode(ferry__wire_gcs_pub_item_data_data(it),
				 ferry__wire_gcs_pub_item_data_count(it), &op) < 0)
		return;
	if (op.type == FERRY__GCS_OP_RESTORE_NODE && op.node.state == FERRY_GCS_NODE_DEAD) {
		dead = node_by_key(sim, op.node.id.bytes, sizeof(op.node.id.bytes));
		if (dead && !dead->dead_seen_ns) {
			dead->dead_seen_ns = ferry__now_ns();
			if (dead->state != NODE_KILLED) {
				sim->false_dead++;
				sim->false_dead_joining += sim->phase <= PH_SETTLE;
			}
		}
	}
	ferry__gcs_op_release(&op);
}

static void on_publish(struct sim_node *n, const void *payload, size_t len)
{
	struct ferry__wire_gcs_publish_view v = ferry__wire_gcs_publish_root_verified(payload);
	uint32_t items = ferry__wire_gcs_publish_items_count(v);
	struct sim *sim = n->sim;

	if (n->scheduler) {
		sim->c.load_rx += items;
		sim->c.load_rx_bytes += len;
		return;
	}
	sim->c.deliveries += items;
	sim->c.publish_bytes += len;
	if ((uint32_t)(n - sim->nodes) >= sim->o.observers)
		return;
	for (uint32_t i = 0; i < items; i++)
		observe(sim, ferry__wire_gcs_publish_items_at(v, i));
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct sim_node *n = ferry__conn_data(conn);

	if (type == FERRY__WIRE_MSG_GCS_REPLY)
		on_reply(n, payload);
	else if (type == FERRY__WIRE_MSG_GCS_PUBLISH)
		on_publish(n, payload, len);
}

static void on_connect(struct ferry__conn *conn)
{
	struct sim_node *n = ferry__conn_data(conn);
	struct sim *sim = n->sim;
	int ret;

	if (n->scheduler) {
		ret = send_subscribe(n);
		if (ret < 0)
			ferry__conn_close(conn);
		return;
	}
	/* The handshake is done: the next connect may start (registrations pipeline, as nodes
	 * that start together register together). */
	n->connected = true;
	sim->handshaking--;
	sim->registering++;
	if (sim->phase == PH_JOIN)
		connect_next(sim);
	/* node.c registers, then its object manager follows deaths and looks its peers up. */
	ret = send_register(n);
	if (ret >= 0)
		ret = send_subscribe_ch(n, FERRY_GCS_CH_NODE_DEATHS, NULL);
	if (ret >= 0 && (uint32_t)(n - sim->nodes) < sim->o.subscribers)
		ret = send_subscribe(n);
	if (ret >= 0 && sim->o.peers)
		ret = send_peer_subscribes(n);
	if (ret < 0) {
		FLOG_WARN(COMP, "node %u: send failed: %s", (unsigned)(n - n->sim->nodes),
			  ferry_strerror(-ret));
		ferry__conn_close(conn);
	}
}

static void on_close(struct ferry__conn *conn, int err)
{
	struct sim_node *n = ferry__conn_data(conn);
	struct sim *sim = n->sim;

	n->conn = NULL;
	if (n->state == NODE_KILLED || sim->phase == PH_DONE) /* ours: at the end, or a kill */
		return;
	if (n->scheduler) {
		FLOG_WARN(COMP, "the load subscriber's connection closed: %s",
			  ferry_strerror(-err));
		return;
	}
	if (n->state == NODE_JOINING) {
		FLOG_WARN(COMP, "node %u: could not join: %s", (unsigned)(n - sim->nodes),
			  ferry_strerror(-err));
		join_done(n, false);
	}
	if (n->state == NODE_UP)
		sim->up--;
	if (sim->lost++ < 5) /* the first few say why; the report counts them all */
		FLOG_WARN(COMP, "node %u: connection closed: %s", (unsigned)(n - sim->nodes),
			  ferry_strerror(-err));
	n->state = NODE_LOST;
}

static const struct ferry__conn_callbacks node_cb = {
	.on_message = on_message,
	.on_connect = on_connect,
	.on_close = on_close,
};

/* ---- joining ---- */

static int connect_one(struct sim *sim, struct sim_node *n)
{
	struct ferry__wire_handshake hs = {0};
	struct ferry__conn_opts co = {0};

	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = (const uint8_t *)sim->o.token;
	hs.token_count = sim->o.token_len;
	hs.peer_kind = FERRY__WIRE_PEER_KIND_DRIVER; /* what a node's GCS client says */
	hs.pid = (int32_t)getpid();
	hs.name = "nodesim";
	co.cb = &node_cb;
	co.handshake = &hs;
	co.connect_timeout_ms = sim->o.connect_timeout_s * 1000u;
	co.data = n;
	return ferry__conn_connect_tcp(sim->loop, sim->o.host, sim->o.port, &co, &n->conn);
}

static void connect_next(struct sim *sim)
{
	while (sim->handshaking < sim->o.connect_batch && sim->next_connect < sim->o.nodes) {
		struct sim_node *n = &sim->nodes[sim->next_connect++];
		int ret;

		n->state = NODE_JOINING;
		sim->handshaking++;
		ret = connect_one(sim, n);
		if (ret < 0) {
			FLOG_WARN(COMP, "connect failed: %s", ferry_strerror(-ret));
			n->conn = NULL;
			sim->handshaking--;
			n->state = NODE_LOST;
			sim->lost++;
		}
	}
}

/* @n's registration was answered (@ok), or its connection closed while joining. */
static void join_done(struct sim_node *n, bool ok)
{
	struct sim *sim = n->sim;

	if (n->state != NODE_JOINING)
		return;
	if (n->connected) {
		sim->registering--;
	} else {
		sim->handshaking--;
		if (sim->phase == PH_JOIN)
			connect_next(sim);
	}
	if (ok) {
		n->state = NODE_UP;
		sim->up++;
		sim->registered++;
	}
}

/* ---- the tick ---- */

/* Ticks per heartbeat round: node.c's interval for the alive count its last beat reply gave
 * (before any: the nodes up). */
uint32_t round_ticks(const struct sim *sim)
{
	uint32_t alive = sim->gcs_alive ? sim->gcs_alive : sim->up;
	uint32_t ms = sim->o.fixed_interval
			      ? sim->o.heartbeat_ms
			      : ferry__gcs_beat_interval_ms(sim->o.heartbeat_ms, alive);

	return ms / TICK_MS ? ms / TICK_MS : 1;
}

static void heartbeat_bucket(struct sim *sim)
{
	uint32_t buckets = round_ticks(sim);
	uint64_t now = ferry__now_ns();

	for (uint32_t i = (uint32_t)(sim->tick_count % buckets); i < sim->o.nodes; i += buckets) {
		struct sim_node *n = &sim->nodes[i];
		int ret;

		if (n->state != NODE_UP)
			continue;
		if (n->hb_sent_ns) {
			sim->c.hb_skipped++;
			continue;
		}
		ret = beat(n, now);
		if (ret < 0) {
			ferry__conn_close(n->conn);
			continue;
		}
		n->hb_sent_ns = now;
		sim->c.hb_sent++;
		sim->c.hb_bytes += (uint64_t)ret;
	}
}

static void enter(struct sim *sim, enum phase ph)
{
	sim->phase = ph;
	sim->phase_ns = ferry__now_ns();
}

static uint64_t phase_ms(const struct sim *sim)
{
	return (ferry__now_ns() - sim->phase_ns) / 1000000u;
}

static void steady_begin(struct sim *sim)
{
	sim->c0 = sim->c;
	memset(sim->rtt, 0, RTT_BUCKETS * sizeof(*sim->rtt));
	sim->rtt_n = 0;
	sim->gcs_ticks0 = sim->o.gcs_pid ? proc_cpu_ticks(sim->o.gcs_pid) : 0;
	sim->self_us0 = self_cpu_us();
	enter(sim, PH_STEADY);
}

static void steady_end(struct sim *sim)
{
	sim->c1 = sim->c;
	sim->steady_ns = ferry__now_ns() - sim->phase_ns;
	sim->gcs_ticks1 = sim->o.gcs_pid ? proc_cpu_ticks(sim->o.gcs_pid) : 0;
	sim->gcs_rss_kib = sim->o.gcs_pid ? proc_rss_kib(sim->o.gcs_pid) : -1;
	sim->self_us1 = self_cpu_us();
	enter(sim, PH_KILL);
}

/* Kill the next victim: spread over the indexes, never an observer. */
static void kill_one(struct sim *sim)
{
	uint32_t span = sim->o.nodes - sim->o.observers;
	uint32_t start = sim->o.observers + (uint32_t)((uint64_t)sim->killed * span / sim->o.kills);

	for (uint32_t k = 0; k < span; k++) {
		struct sim_node *n =
			&sim->nodes[sim->o.observers + (start - sim->o.observers + k) % span];

		if (n->state != NODE_UP || n->dead_seen_ns) /* not one declared dead already */
			continue;
		/* Abrupt: the socket closes and the heartbeats stop, as when a host dies. */
		n->state = NODE_KILLED;
		n->kill_ns = ferry__now_ns();
		sim->up--;
		ferry__conn_close(n->conn);
		break;
	}
	sim->killed++;
}

static bool all_dead_seen(const struct sim *sim)
{
	for (uint32_t i = 0; i < sim->o.nodes; i++)
		if (sim->nodes[i].state == NODE_KILLED && !sim->nodes[i].dead_seen_ns)
			return false;
	return true;
}

/* Walk every bucket due by the clock: a tick that fires late (the loop busy, or the process
 * waiting for a CPU) catches up, so the heartbeat rate holds; at most one round at a time. */
static void beat_due(struct sim *sim)
{
	uint64_t due = (ferry__now_ns() - sim->start_ns) / (TICK_MS * 1000000ull);
	uint64_t round = round_ticks(sim);

	if (due > sim->tick_count + round)
		sim->tick_count = due - round;
	while (sim->tick_count < due) {
		sim->tick_count++;
		heartbeat_bucket(sim);
	}
}

static void on_tick(struct ferry__loop_timer *t, int status)
{
	struct sim *sim = t->data;

	if (status < 0)
		return;
	beat_due(sim);
	switch (sim->phase) {
	case PH_JOIN:
		if (!sim->handshaking && !sim->registering && sim->next_connect == sim->o.nodes) {
			sim->join_ns = ferry__now_ns() - sim->phase_ns;
			enter(sim, PH_SETTLE);
		} else if (phase_ms(sim) > sim->o.connect_timeout_s * 1000ull) {
			FLOG_WARN(COMP, "joining: %u of %u up after %u s: going on with them",
				  sim->up, sim->o.nodes, sim->o.connect_timeout_s);
			sim->join_ns = ferry__now_ns() - sim->phase_ns;
			sim->status = -ETIMEDOUT;
			enter(sim, PH_SETTLE);
		}
		break;
	case PH_SETTLE:
		if (phase_ms(sim) >= sim->o.settle_s * 1000ull)
			steady_begin(sim);
		break;
	case PH_STEADY:
		if (phase_ms(sim) >= sim->o.steady_s * 1000ull)
			steady_end(sim);
		break;
	case PH_KILL:
		if (sim->killed >= sim->o.kills || sim->o.nodes <= sim->o.observers)
			enter(sim, PH_DRAIN);
		else if (phase_ms(sim) >= (uint64_t)sim->killed * sim->o.kill_gap_ms)
			kill_one(sim);
		break;
	case PH_DRAIN:
		if (all_dead_seen(sim) || phase_ms(sim) >= sim->o.drain_s * 1000ull) {
			enter(sim, PH_DONE);
			ferry__loop_stop(sim->loop);
		}
		break;
	case PH_DONE:
		break;
	}
}

static int sim_init(struct sim *sim)
{
	struct ferry__loop_opts lo = {.queue_depth = 4096};
	int ret;

	/* One more: the scheduler that subscribes to load reports (a tree with them). */
	sim->nodes = ferry__calloc(sim->o.nodes + 1u, sizeof(*sim->nodes));
	sim->rtt = ferry__calloc(RTT_BUCKETS, sizeof(*sim->rtt));
	if (!sim->nodes || !sim->rtt)
		return -ENOMEM;
	ferry_id_random(sim->id_prefix, sizeof(sim->id_prefix));
	for (uint32_t i = 0; i < sim->o.nodes; i++) {
		struct sim_node *n = &sim->nodes[i];

		n->sim = sim;
		memcpy(n->id.bytes, sim->id_prefix, ID_PREFIX_BYTES);
		memcpy(n->id.bytes + ID_PREFIX_BYTES, &i, sizeof(i));
		ferry_id_random(n->client.bytes, sizeof(n->client.bytes));
		n->load_due = true; /* node.c's first beat reports its load */
	}
	sim->nodes[sim->o.nodes].sim = sim;
	sim->nodes[sim->o.nodes].scheduler = true;
	ret = ferry__loop_create(&lo, &sim->loop);
	if (ret < 0)
		return ret;
	sim->tick.data = sim;
	sim->start_ns = ferry__now_ns();
	return ferry__loop_timer_start(sim->loop, &sim->tick, TICK_MS, TICK_MS, on_tick);
}

static void sim_fini(struct sim *sim)
{
	for (uint32_t i = 0; sim->loop && i <= sim->o.nodes; i++)
		if (sim->nodes[i].conn)
			ferry__conn_close(sim->nodes[i].conn);
	ferry__loop_destroy(sim->loop);
	ferry__gcs_buf_fini(&sim->rec);
	ferry__fb_builder_fini(&sim->fb);
	ferry__free(sim->nodes);
	ferry__free(sim->rtt);
}

int main(int argc, char **argv)
{
	static struct sim sim = {
		.o = {.nodes = 1000,
		      .heartbeat_ms = 100,
		      .connect_batch = 32,
		      .connect_timeout_s = 120,
		      .settle_s = 3,
		      .steady_s = 10,
		      .kills = 20,
		      .kill_gap_ms = 137,
		      .drain_s = 10,
		      .peers = 8,
		      .observers = 2},
	};
	int ret;

	for (int i = 1; i < argc; i++)
		if (ferry__is_help_flag(argv[i])) {
			usage(stdout);
			return 0;
		}
	if (parse_args(argc, argv, &sim.o) < 0) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	(void)ferry__net_raise_fd_limit("ferry-nodesim", (unsigned long)sim.o.nodes + 64ul);
	ret = sim_init(&sim);
	if (ret == 0) {
		enter(&sim, PH_JOIN);
		ret = connect_one(&sim, &sim.nodes[sim.o.nodes]);
		connect_next(&sim);
		ret = ferry__loop_run(sim.loop);
	}
	if (ret == 0)
		report(&sim);
	else
		FLOG_ERROR(COMP, "exiting: %s", ferry_strerror(-ret));
	sim_fini(&sim);
	return ret < 0 ? 1 : 0;
}
