/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched's body (sched/server.h): the GCS's view of the cluster fed into a placement level,
 * and SchedPlace batches answered from it.
 *
 * DESIGN: one loop runs it all. The GCS client (on this loop) follows two channels: NODES
 * (joins with their addresses, deaths) and NODE_LOAD (each node's report; a removal when it
 * dies). Every node known gets a child of the level the first time it is seen, on either
 * channel; its number is the node's index in `nodes` and the node maps to itself for locality.
 * A node the nodes channel's snapshot no longer shows after a resync (a GCS restarted without
 * it) is dead; one that is alive again after its death gets a new child.
 * Until both snapshots ended, a request is answered -EAGAIN (the view is partial: a placement
 * then could pile everything on the first node seen); so is one no node could run while a
 * node that joined has not reported its load yet (it might). A request is decided and committed into
 * the level at once, so a burst between two reports spreads; the node's next report replaces
 * the committed estimate. Resource names become kinds: the standard four are 0..3, custom
 * names get 4.. in the order first seen in a report (a request naming a resource no node ever
 * reported is infeasible: -ENOSPC). Replies go out through the connection's queue, whose cap
 * (max_queued_bytes) holds back a client that does not read and cuts it off after the stall
 * timeout.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ferry/gcs.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/conn.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/net.h"
#include "common/wire.h"
#include "gcs/client.h"
#include "sched/client.h"
#include "sched/policy.h"
#include "sched/proto.h"
#include "sched/server.h"
#include "sched/server_int.h"

#define COMP "sched"
#define DEFAULT_MAX_QUEUED (4u << 20)
#define DEFAULT_STALL_MS 10000u
#define RESUBSCRIBE_MS 1000u

static void kv_register(struct ferry__sched_server *s);

/* ---- the view ---- */

int ferry__sched_srv_kind_of(struct ferry__sched_server *s, const char *name, bool add)
{
	static const char *const standard[] = {"CPU", "GPU", "memory", "object_store_memory"};

	for (int i = 0; i < 4; i++)
		if (!strcmp(name, standard[i]))
			return i;
	for (unsigned i = 0; i < s->ncustom; i++)
		if (!strcmp(name, s->custom[i]))
			return 4 + (int)i;
	if (!add || strlen(name) > FERRY__RES_NAME_MAX)
		return -ENOENT;
	if (s->ncustom == CUSTOM_KINDS) {
		FLOG_WARN(COMP,
			  "resource %s: more than %u custom resources in the cluster, ignored",
			  name, CUSTOM_KINDS);
		return -ENOSPC;
	}
	snprintf(s->custom[s->ncustom], sizeof(s->custom[0]), "%s", name);
	return 4 + (int)s->ncustom++;
}

/* A new child for node @id: a new entry of `nodes`, the map pointing at it (a node that came
 * back after it was taken for dead gets a fresh child: a dead child takes nothing, ever). */
static int node_new_child(struct ferry__sched_server *s, const struct ferry_node_id *id,
			  uint32_t *out)
{
	uint32_t *slot, child;
	int ret;

	if (s->nnodes == s->cap_nodes) {
		uint32_t cap = s->cap_nodes ? 2 * s->cap_nodes : 64;
		struct snode *n = ferry__realloc(s->nodes, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		s->nodes = n;
		s->cap_nodes = cap;
	}
	ret = ferry__sched_child_add(s->level, &child);
	if (ret == 0)
		ret = ferry__sched_level_map_node(s->level, child, child);
	if (ret < 0)
		return ret;
	ret = ferry__hashmap_put(&s->by_node, id->bytes, (void **)&slot);
	if (ret < 0)
		return ret; /* the child stays, empty and unreachable: it takes nothing */
	*slot = child;
	s->nodes[child] = (struct snode){.id = *id, .seen_gen = s->nodes_gen};
	s->nnodes = child + 1;
	*out = child;
	return 0;
}

/*
 * The node's index (its child number). @add: a node not known, or known dead, gets a new child
 * (a record saying it is alive: a node re-registering with a restarted GCS). 0, -ENOENT, -ENOMEM.
 */
int ferry__sched_srv_node_index(struct ferry__sched_server *s, const struct ferry_node_id *id,
				bool add, uint32_t *out)
{
	uint32_t *slot = ferry__hashmap_get(&s->by_node, id->bytes);

	if (slot && (!add || !s->nodes[*slot].dead)) {
		*out = *slot;
		return 0;
	}
	if (!add)
		return -ENOENT;
	return node_new_child(s, id, out);
}

static void node_dead(struct ferry__sched_server *s, uint32_t i)
{
	if (s->nodes[i].dead)
		return;
	s->nodes[i].dead = true;
	ferry__sched_child_dead(s->level, i);
	FLOG_INFO(COMP, "node %s died", s->nodes[i].address ? s->nodes[i].address : "?");
}

/* The end of a nodes-channel snapshot: a node it did not show is gone (a GCS that restarted
 * without it); if it comes back, it gets a new child. */
static void nodes_snapshot_end(struct ferry__sched_server *s)
{
	for (uint32_t i = 0; i < s->nnodes; i++) {
		uint32_t *slot = ferry__hashmap_get(&s->by_node, s->nodes[i].id.bytes);

		if (slot && *slot == i && s->nodes[i].seen_gen != s->nodes_gen)
			node_dead(s, i);
	}
}

static void on_node_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct sub *sub = arg;
	struct ferry__sched_server *s = sub->srv;
	struct ferry_gcs_node_info info;
	uint32_t i;

	if (ev->kind == FERRY_GCS_EVENT_SNAPSHOT_END) {
		nodes_snapshot_end(s);
		sub->ready = true;
		return;
	}
	if (ev->kind == FERRY_GCS_EVENT_RESYNC && ev->key_size == 0) {
		s->nodes_gen++;
		/* After the first: the client reconnected, perhaps to a GCS that restarted in
		 * memory and lost the KV. Registering again is idempotent. */
		if (s->registered && !s->stop_done) {
			s->registered = false;
			kv_register(s);
		}
		return;
	}
	if ((ev->kind != FERRY_GCS_EVENT_DELTA && ev->kind != FERRY_GCS_EVENT_SNAPSHOT) ||
	    ev->size == 0 || ferry_gcs_event_node(ev, &info) < 0)
		return;
	if (ferry__sched_srv_node_index(s, &info.id, info.state != FERRY_GCS_NODE_DEAD, &i) < 0)
		return;
	s->nodes[i].seen_gen = s->nodes_gen;
	if (info.address && (!s->nodes[i].address || strcmp(s->nodes[i].address, info.address))) {
		char *a = ferry__strdup(info.address);

		if (a) {
			ferry__free(s->nodes[i].address);
			s->nodes[i].address = a;
		}
	}
	if (info.state == FERRY_GCS_NODE_DEAD)
		node_dead(s, i);
}

static void load_convert(struct ferry__sched_server *s, const struct ferry_gcs_node_load *in,
			 struct ferry__sched_load *out)
{
	memset(out, 0, sizeof(*out));
	out->version = in->version;
	out->queue_len = in->queue_length;
	out->mean_task_ns = in->mean_task_us * 1000;
	for (uint32_t r = 0; r < in->nresources; r++) {
		int k = ferry__sched_srv_kind_of(s, in->resources[r].name, true);
		int64_t total = in->resources[r].total, avail = in->resources[r].available;

		if (k < 0 || total < 0 || avail < 0)
			continue;
		if (avail > total)
			avail = total;
		out->total[k] = out->total_max[k] = total;
		out->avail[k] = out->avail_max[k] = avail;
	}
}

void ferry__sched_srv_on_load_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct sub *sub = arg;
	struct ferry__sched_server *s = sub->srv;
	struct ferry_gcs_node_load load;
	struct ferry__sched_load sl;
	struct ferry_node_id id;
	uint32_t i;

	if (ev->kind == FERRY_GCS_EVENT_SNAPSHOT_END) {
		sub->ready = true;
		return;
	}
	if (ev->kind != FERRY_GCS_EVENT_DELTA && ev->kind != FERRY_GCS_EVENT_SNAPSHOT)
		return;
	if (ev->size == 0) { /* removed: the node died */
		if (ev->key && ev->key_size == sizeof(id.bytes)) {
			memcpy(id.bytes, ev->key, sizeof(id.bytes));
			if (ferry__sched_srv_node_index(s, &id, false, &i) == 0)
				node_dead(s, i);
		}
		return;
	}
	if (ferry_gcs_event_node_load(ev, &load) < 0)
		return;
	if ((ferry__sched_srv_node_index(s, &load.id, false, &i) == 0 ||
	     ferry__sched_srv_node_index(s, &load.id, true, &i) == 0) &&
	    !s->nodes[i].dead && !s->nodes[i].grouped && !s->nodes[i].group &&
	    (!s->group[0] || s->nodes[i].member)) {
		load_convert(s, &load, &sl);
		if (ferry__sched_child_report(s->level, i, &sl) == 0)
			s->nodes[i].reported = true;
	}
	ferry_gcs_free((void *)(uintptr_t)load.resources);
}

/* ---- KV registration ---- */

static void on_kv_put(void *arg, int status, void *result)
{
	struct ferry__sched_server *s = arg;

	ferry_gcs_free(result);
	if (status < 0)
		FLOG_WARN(COMP, "registering in the GCS KV: %s", ferry_strerror(-status));
	else
		FLOG_INFO(COMP, "instance %s registered as %s", s->id_hex, s->advertise);
}

static void kv_register(struct ferry__sched_server *s)
{
	char host[INET6_ADDRSTRLEN + 2] = "";
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int ret;

	if (s->registered)
		return;
	if (s->advertise_host) {
		snprintf(host, sizeof(host), "%s", s->advertise_host);
	} else if (ferry__gcs_client_local_addr(s->gcs, 0, &ss, &len) < 0 ||
		   ferry__net_ip_text((struct sockaddr *)&ss, host, sizeof(host)) < 0) {
		FLOG_WARN(COMP, "cannot tell this host's address to the GCS: not registered");
		return;
	}
	snprintf(s->advertise, sizeof(s->advertise), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
		 ferry__conn_server_port(s->listener));
	ret = ferry_gcs_kv_put_async(s->gcs, s->kv_ns, strlen(s->kv_ns), s->id_hex,
				     strlen(s->id_hex), s->advertise, strlen(s->advertise), true,
				     on_kv_put, s);
	if (ret == 0)
		s->registered = true;
}

/* ---- subscriptions ---- */

static void subscribe(struct sub *sub);

static void on_resubscribe(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		subscribe(t->data);
}

static void on_subscribed(void *arg, int status, void *result)
{
	struct sub *sub = arg;

	ferry_gcs_free(result);
	if (status < 0) {
		FLOG_WARN(COMP, "subscribing to the GCS's %s: %s, again in %u ms",
			  sub->channel == FERRY_GCS_CH_NODES ? "nodes" : "node load",
			  ferry_strerror(-status), RESUBSCRIBE_MS);
		ferry__loop_timer_start(sub->srv->loop, &sub->retry, RESUBSCRIBE_MS, 0,
					on_resubscribe);
		return;
	}
	if (sub->channel == FERRY_GCS_CH_NODES)
		kv_register(sub->srv);
}

static void subscribe(struct sub *sub)
{
	int ret = ferry_gcs_subscribe_async(
		sub->srv->gcs, sub->channel, NULL, 0,
		sub->channel == FERRY_GCS_CH_NODES ? on_node_event : ferry__sched_srv_on_load_event,
		sub, on_subscribed, sub);

	if (ret < 0)
		on_subscribed(sub, ret, NULL);
}

/* ---- requests ---- */

/*
 * Whether a live node has joined but its first load report has not come yet (it reports with
 * its first heartbeat after registering): until it does, "no node can run this" may be wrong,
 * and the asking node is told to try again rather than to keep the task as infeasible. Only
 * on -ENOSPC, rare: a pass over the nodes.
 */
static bool unreported(const struct ferry__sched_server *s)
{
	for (uint32_t i = 0; i < s->nnodes; i++)
		if ((!s->nodes[i].dead && !s->nodes[i].reported && !s->nodes[i].grouped &&
		     (!s->group[0] || s->nodes[i].member)) ||
		    (s->nodes[i].group && s->nodes[i].dead && ferry__sched_srv_current(s, i)))
			return true;
	return false;
}

static int task_of(struct ferry__sched_server *s, const struct ferry__sched_item *it,
		   struct ferry__sched_task *task, struct ferry__sched_input *inputs,
		   uint32_t *locations)
{
	uint32_t idx;

	task->ndemand = it->nres;
	for (uint32_t i = 0; i < it->nres; i++) {
		int k = ferry__sched_srv_kind_of(s, it->res_name[i], false);

		if (k < 0)
			return -ENOSPC; /* no node ever reported that resource */
		task->demand[i].kind = (uint32_t)k;
		task->demand[i].amount = it->res_amount[i];
	}
	for (uint32_t i = 0; i < it->ninputs; i++) {
		if (ferry__sched_srv_node_index(s, &it->inputs[i].node, false, &idx) < 0)
			continue;
		locations[task->ninputs] = idx;
		inputs[task->ninputs].size_bytes = it->inputs[i].bytes;
		inputs[task->ninputs].nlocations = 1;
		inputs[task->ninputs].locations = &locations[task->ninputs];
		task->ninputs++;
	}
	task->inputs = inputs;
	task->strategy = (enum ferry__sched_strategy)it->strategy;
	if (task->strategy == FERRY__SCHED_NODE_AFFINITY) {
		task->affinity_soft = it->soft;
		if (ferry__sched_srv_node_index(s, &it->affinity, false, &idx) == 0)
			task->affinity_node = idx;
		else if (it->soft)
			task->strategy = FERRY__SCHED_DEFAULT;
		else
			return -EHOSTUNREACH;
	}
	/* The group that sent it up: never back down to it. */
	if (it->from_group[0] && !s->group[0]) {
		struct ferry_node_id gid;

		ferry__sched_srv_group_id(it->from_group, &gid);
		if (ferry__sched_srv_node_index(s, &gid, false, &idx) == 0) {
			task->exclude = true;
			task->excluded_child = idx;
		}
	}
	return 0;
}

/* A group's task that it cannot run now goes up once, from a node's ask only (hops 0). */
static bool goes_up(const struct ferry__sched_server *s, const struct ferry__sched_item *it,
		    int ret, const struct ferry__sched_decision *d)
{
	if (!s->group[0] || it->hops > 0 || !s->up)
		return false;
	return ret == -ENOSPC || ret == -EHOSTUNREACH || ret == -EAGAIN ||
	       (ret == 0 && ferry__sched_forward_up(d));
}

/* 0 with *@r filled, FORWARDED, or -errno. */
static int place_one(struct ferry__sched_server *s, struct sconn *sc,
		     const struct ferry__sched_item *it, struct ferry__sched_result *r)
{
	struct ferry__sched_input inputs[FERRY__SCHED_ITEM_INPUTS_MAX];
	uint32_t locations[FERRY__SCHED_ITEM_INPUTS_MAX];
	struct ferry__sched_task task = {0};
	struct ferry__sched_decision d = {.child = FERRY__SCHED_NO_CHILD};
	struct snode *n;
	int ret;

	if (!s->subs[0].ready || !s->subs[1].ready)
		ret = -EAGAIN;
	else
		ret = task_of(s, it, &task, inputs, locations);
	if (ret == 0)
		ret = ferry__sched_decide(s->level, &task, &d);
	if (goes_up(s, it, ret, &d) &&
	    ferry__sched_srv_forward(s, sc, it, s->up, &task, ret == 0 ? &d : NULL) == 0)
		return FORWARDED;
	if (ret == -EHOSTUNREACH)
		return -EHOSTDOWN;
	if (ret == -ENOSPC && unreported(s))
		return -EAGAIN;
	if (ret < 0)
		return ret;
	n = &s->nodes[d.child];
	if (n->group) {
		/* Down to that group's scheduler: the third hop at most (node, group, global). */
		struct ferry__sched_client *down = ferry__sched_srv_group_client(s, n);

		if (it->hops + 1 >= FERRY__SCHED_HOPS_MAX || !down ||
		    ferry__sched_srv_forward(s, sc, it, down, &task, NULL) < 0)
			return -EAGAIN;
		ferry__sched_commit(s->level, &task, &d);
		return FORWARDED;
	}
	ferry__sched_commit(s->level, &task, &d);
	r->node = n->id;
	r->node_address = n->address ? n->address : "";
	r->hops = (uint8_t)(it->hops + 1);
	return 0;
}

static void on_place(struct ferry__sched_server *s, struct sconn *sc, const void *payload,
		     size_t len)
{
	struct ferry__conn *conn = sc->conn;
	int n = ferry__sched_place_count(payload, len), ret = 0, now = 0;

	for (int i = 0; i < n; i++) {
		struct ferry__sched_result *r = &s->results[now];

		memset(r, 0, sizeof(*r));
		ret = ferry__sched_place_item(payload, (uint32_t)i, &s->item);
		if (ret == -EPROTO)
			break;
		r->request_id = s->item.request_id;
		r->status = ret < 0 ? ret : place_one(s, sc, &s->item, r);
		ret = 0;
		if (r->status == FORWARDED)
			continue; /* answered when the other level answers */
		now++;
		if (r->status == 0)
			s->placed++;
		else
			s->refused++;
		ferry__metric_add(
			r->status == 0 ? FERRY__MC_sched_decisions : FERRY__MC_sched_refused, 1);
	}
	if (n < 0 || ret < 0) {
		FLOG_PEER_WARN(COMP, ferry__conn_peer(conn), "%s: malformed SchedPlace, closing",
			       ferry__conn_peer(conn));
		ferry__conn_close(conn);
		return;
	}
	if (now == 0 && n > 0)
		return;
	ret = ferry__sched_reply_build(&s->fb, s->results, (size_t)now);
	if (ret == 0)
		ret = ferry__conn_send(conn, FERRY__WIRE_MSG_SCHED_PLACE_REPLY,
				       ferry__fb_builder_data(&s->fb),
				       ferry__fb_builder_size(&s->fb));
	if (ret < 0) {
		/* Its requests are lost with it: the client resends them elsewhere. */
		FLOG_PEER_WARN(COMP, ferry__conn_peer(conn), "%s: reply not sent (%s), closing",
			       ferry__conn_peer(conn), ferry_strerror(-ret));
		ferry__conn_close(conn);
	}
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct sconn *sc = ferry__conn_data(conn);

	if (type == FERRY__WIRE_MSG_SCHED_PLACE) {
		on_place(sc->srv, sc, payload, len);
		return;
	}
	if (type == FERRY__WIRE_MSG_SCHED_GROUP_LOAD && !sc->srv->group[0] &&
	    ferry__sched_srv_group_load(sc->srv, ferry__conn_peer(conn), payload, len) == 0)
		return;
	FLOG_PEER_WARN(COMP, ferry__conn_peer(conn), "%s: unexpected or malformed %s, closing",
		       ferry__conn_peer(conn), ferry__wire_message_name(type));
	ferry__conn_close(conn);
}

/* At loop destroy the server may be gone: its destroy left sc->srv NULL then. */
static void on_close(struct ferry__conn *conn, int err)
{
	struct sconn *sc = ferry__conn_data(conn);

	if (err && err != -ECONNRESET && err != -ECANCELED)
		FLOG_DEBUG(COMP, "client %s closed: %s", ferry__conn_peer(conn),
			   ferry_strerror(-err));
	if (sc) {
		if (sc->srv) {
			if (sc->prev)
				sc->prev->next = sc->next;
			else
				sc->srv->clients = sc->next;
			if (sc->next)
				sc->next->prev = sc->prev;
			sc->srv->cap.clients--;
		}
		sc->conn = NULL;
		ferry__sched_srv_sconn_unref(sc);
	}
}

static const struct ferry__conn_callbacks conn_cb = {
	.on_message = on_message,
	.on_close = on_close,
};

static void on_accept(struct ferry__conn_server *server, struct ferry__conn *conn,
		      const void *handshake, size_t len)
{
	struct sconn *sc = ferry__malloc(sizeof(*sc));

	(void)handshake, (void)len;
	FLOG_DEBUG(COMP, "client %s", ferry__conn_peer(conn));
	if (!sc) {
		ferry__conn_set_callbacks(conn, &conn_cb, NULL);
		ferry__conn_close(conn);
		return;
	}
	*sc = (struct sconn){.srv = ferry__conn_server_data(server), .conn = conn, .refs = 1};
	sc->next = sc->srv->clients;
	if (sc->next)
		sc->next->prev = sc;
	sc->srv->clients = sc;
	sc->srv->cap.clients++;
	ferry__conn_set_callbacks(conn, &conn_cb, sc);
}

/* A client past the limit is refused in its handshake (see struct ferry__conn_client_cap). */
static int admit(struct ferry__conn_server *server, struct ferry__conn *conn)
{
	struct ferry__sched_server *s = ferry__conn_server_data(server);

	return ferry__conn_client_cap_admit(&s->cap, ferry__conn_peer(conn), COMP);
}

static void on_refused(struct ferry__conn_server *server, int err)
{
	(void)server;
	FLOG_DEBUG(COMP, "a connection was refused: %s", ferry_strerror(-err));
}

/* ---- life ---- */

static int listen_port(struct ferry__sched_server *s, const struct ferry__sched_server_opts *o)
{
	struct ferry__conn_server_opts so = {0};
	struct ferry_node_id id;

	ferry_id_random(id.bytes, sizeof(id.bytes));
	ferry_id_to_hex(id.bytes, sizeof(id.bytes), s->id_hex, sizeof(s->id_hex));
	s->self = id;
	so.conn.cb = &conn_cb;
	so.conn.data = s;
	so.conn.max_message_bytes = FERRY__SCHED_FRAME_MAX;
	so.conn.max_queued_bytes = o->max_queued_bytes ? o->max_queued_bytes : DEFAULT_MAX_QUEUED;
	so.conn.stall_timeout_ms = o->stall_timeout_ms ? o->stall_timeout_ms : DEFAULT_STALL_MS;
	so.on_accept = on_accept;
	so.on_refused = on_refused;
	so.admit = admit;
	ferry__conn_client_cap_init(&s->cap, o->max_clients, 0, COMP);
	so.data = s;
	so.token = o->token;
	so.token_len = o->token_len;
	so.server_kind = FERRY__WIRE_PEER_KIND_SCHEDULER;
	memcpy(so.server_id.bytes, id.bytes, sizeof(so.server_id.bytes));
	return ferry__conn_server_listen_tcp(s->loop, o->host ? o->host : "0.0.0.0", o->port, &so,
					     &s->listener);
}

int ferry__sched_server_create(struct ferry__loop *loop, const struct ferry__sched_server_opts *o,
			       struct ferry__sched_server **out)
{
	struct ferry_gcs_client_opts go = {0};
	struct ferry__sched_server *s;
	const char *addr;
	int ret;

	if (!loop || !o || !o->gcs_address || !o->token || !o->token_len ||
	    o->token_len > sizeof(s->listener_token) ||
	    (o->group && !ferry__sched_group_name_ok(o->group)) || !out)
		return -EINVAL;
	s = ferry__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	memcpy(s->listener_token, o->token, o->token_len);
	s->listener_token_len = o->token_len;
	if (o->group)
		snprintf(s->group, sizeof(s->group), "%s", o->group);
	snprintf(s->kv_ns, sizeof(s->kv_ns), "%s%s",
		 o->group ? FERRY__SCHED_GROUP_KV_PREFIX : FERRY__SCHED_KV_NS, s->group);
	ferry__hashmap_init(&s->by_node, sizeof(struct ferry_node_id), sizeof(uint32_t));
	ferry__fb_builder_init(&s->fb);
	if (o->advertise)
		s->advertise_host = o->advertise;
	else if (o->host && !ferry__net_ip_wildcard(o->host))
		s->advertise_host = o->host;
	ret = -ENOMEM;
	s->results = ferry__calloc(FERRY__SCHED_BATCH_MAX, sizeof(*s->results));
	if (!s->results)
		goto err_free;
	ret = ferry__sched_level_create(NULL, &s->level);
	if (ret < 0)
		goto err_free;
	ret = listen_port(s, o);
	if (ret < 0)
		goto err_level;
	addr = o->gcs_address;
	go.addresses = &addr;
	go.naddresses = 1;
	go.token = o->token;
	go.token_len = o->token_len;
	go.kind = FERRY_GCS_CLIENT_SCHEDULER;
	ret = ferry__gcs_client_connect_on(loop, &go, &s->gcs);
	if (ret < 0)
		goto err_listen;
	if (s->group[0]) {
		ret = ferry__sched_srv_group_start(s, o->token, o->token_len);
		if (ret < 0)
			goto err_group;
	} else {
		s->silent_timer.data = s;
		ferry__loop_timer_start(loop, &s->silent_timer, GROUP_SILENT_MS / 3, 0,
					ferry__sched_srv_on_silent_timer);
	}
	for (int i = 0; i < 2; i++) {
		s->subs[i].srv = s;
		s->subs[i].channel = i == 0 ? FERRY_GCS_CH_NODES : FERRY_GCS_CH_NODE_LOAD;
		s->subs[i].retry.data = &s->subs[i];
		/* A group follows its members' load key by key (member_add). */
		if (i == 0 || !s->group[0])
			subscribe(&s->subs[i]);
	}
	*out = s;
	return 0;
err_group:
	ferry__sched_client_free(s->up);
	ferry_gcs_client_destroy(s->gcs);
err_listen:
	ferry__conn_server_close(s->listener);
err_level:
	ferry__sched_level_destroy(s->level);
err_free:
	ferry__free(s->results);
	ferry__hashmap_fini(&s->by_node);
	ferry__fb_builder_fini(&s->fb);
	ferry__free(s);
	return ret;
}

uint16_t ferry__sched_server_port(const struct ferry__sched_server *s)
{
	return ferry__conn_server_port(s->listener);
}

const char *ferry__sched_server_id(const struct ferry__sched_server *s)
{
	return s->id_hex;
}

static void on_kv_delete(void *arg, int status, void *result)
{
	struct ferry__sched_server *s = arg;

	ferry_gcs_free(result);
	if (status < 0)
		FLOG_WARN(COMP, "leaving the GCS KV: %s", ferry_strerror(-status));
	s->stop_done(s->stop_arg);
}

void ferry__sched_server_stop(struct ferry__sched_server *s, void (*done)(void *arg), void *arg)
{
	int ret = -ENOENT;

	FLOG_INFO(COMP, "stopping: %llu tasks placed, %llu refused, %llu forwarded",
		  (unsigned long long)s->placed, (unsigned long long)s->refused,
		  (unsigned long long)s->forwarded);
	s->stop_done = done;
	s->stop_arg = arg;
	if (s->registered)
		ret = ferry_gcs_kv_delete_async(s->gcs, s->kv_ns, strlen(s->kv_ns), s->id_hex,
						strlen(s->id_hex), on_kv_delete, s);
	if (ret < 0)
		done(arg);
}

void ferry__sched_server_destroy(struct ferry__sched_server *s)
{
	if (!s)
		return;
	/* The clients borrow the GCS client: they go first (forwards in flight: -ECANCELED). */
	ferry__loop_timer_stop(&s->members_timer);
	ferry__loop_timer_stop(&s->report_timer);
	ferry__loop_timer_stop(&s->silent_timer);
	ferry__sched_client_free(s->up);
	ferry__sched_uplink_free(s->uplink);
	for (uint32_t i = 0; i < s->nnodes; i++)
		ferry__sched_client_free(s->nodes[i].down);
	ferry_gcs_client_destroy(s->gcs);
	for (int i = 0; i < 2; i++)
		ferry__loop_timer_stop(&s->subs[i].retry);
	ferry__conn_server_close(s->listener);
	for (uint32_t i = 0; i < s->nnodes; i++) {
		ferry__free(s->nodes[i].address);
		ferry__free(s->nodes[i].group);
	}
	ferry__free(s->nodes);
	ferry__sched_level_destroy(s->level);
	ferry__free(s->results);
	ferry__hashmap_fini(&s->by_node);
	ferry__fb_builder_fini(&s->fb);
	/* Accepted connections outlive the listener until the loop goes: they forget us. */
	for (struct sconn *sc = s->clients; sc; sc = sc->next)
		sc->srv = NULL;
	ferry__free(s);
}
