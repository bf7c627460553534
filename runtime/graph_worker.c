/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A compiled graph in a worker (include/ferry/runtime.h's graphs; schema/runtime.fbs the
 * protocol): the nodes of a graph that run on this worker's actor, the values they wait for,
 * and where each node's result goes. The driver's side is runtime/graph.c.
 *
 * DESIGN
 * Everything runs on the worker's loop thread, like its tasks and actor calls. A GraphInstall
 * (from the driver's own socket) records the local nodes: each keeps a window of
 * FERRY_GRAPH_MAX_INFLIGHT slots, one per execution in flight, indexed by seq, holding the
 * arguments that came (GraphData from the driver, from other workers, or from a local node).
 * A node runs execution seq once all its arguments are in and every earlier seq ran, so an
 * actor sees a graph's calls in execution order; the result (or the error that replaces it) is
 * sent along the node's edges at once: to a local node directly, to another worker on a socket
 * this worker opened to its listen path (one per graph and peer, opened at the first value),
 * to the driver on the socket that installed the graph. Both go through a same-host ring pair
 * beside the socket when the value fits a slot (runtime/ring.h: this worker offers one on its
 * peer sockets, and accepts the driver's in worker.c). Nodes only take arguments from nodes
 * of lower index (the driver binds them in order), so a local delivery never loops.
 * A graph lives until GraphDestroy, until the socket that installed it closes, or until the
 * actor ends (killed, its owner gone): then the worker closes the driver's socket too, which
 * is how the driver learns that its graph is broken.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "runtime/registry.h"
#include "runtime/ring.h"
#include "runtime/worker.h"

#define COMP "worker"
#define WINDOW FERRY_GRAPH_MAX_INFLIGHT
/* A node's result travels inline in one GraphData frame: half the frame cap leaves room. */
#define VALUE_MAX (FERRY__WORKER_FRAME_MAX / 2)

struct gval {
	void *data; /* ferry__malloc'd (NULL for zero bytes) */
	size_t len; /* bytes */
	bool set;   /* arrived for this slot's seq */
};

struct gslot {
	uint64_t seq;	   /* the execution it holds, when have > 0 */
	uint32_t have;	   /* arguments arrived */
	int status;	   /* the first error among them, or 0 */
	char *message;	   /* its message (ferry__malloc'd) or NULL */
	struct gval *vals; /* nargs */
};

struct garg {
	uint8_t kind;	/* FERRY_GRAPH_ARG_* */
	uint32_t index; /* input or node number */
	void *data;	/* CONST: the bytes (ferry__malloc'd) */
	size_t len;	/* their size */
};

struct gedge {
	uint32_t node; /* target node */
	uint32_t arg;  /* its argument */
	int32_t peer;  /* index in graph->peers; -1: local; -2: the driver */
};

struct gnode {
	uint32_t index;				  /* in the whole graph */
	char method[FERRY_FUNCTION_NAME_MAX + 1]; /* "Class.method" */
	ferry_task_fn fn;			  /* found at install */
	uint32_t nargs;				  /* its arguments */
	uint32_t ndynamic;			  /* those that are not constants */
	struct garg *args;			  /* nargs */
	struct gedge *edges;			  /* where its result goes */
	uint32_t nedges;			  /* how many */
	uint64_t next_seq;			  /* the execution it runs next */
	struct gslot slots[WINDOW];		  /* seq % WINDOW */
	struct gval *vals;			  /* WINDOW * nargs, the slots' */
};

struct gpeer {
	struct ferry__worker_graph *g; /* NULL once the graph is gone */
	struct ferry__conn *conn;      /* to the peer; NULL: not open (or closed) */
	struct ferry__rt_ring *ring;   /* beside conn (runtime/ring.h), or NULL */
	bool failed;		       /* its socket closed: values are dropped */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* its listen path */
};

struct ferry__worker_graph {
	struct ferry__worker_graph *next; /* the worker's list */
	struct ferry__wire_unique_id id;  /* its ID */
	struct ferry__conn *driver;	  /* the socket that installed it (NULL: fuzz) */
	struct gnode *nodes;		  /* the local ones */
	uint32_t nnodes;		  /* how many */
	uint32_t total;			  /* nodes in the whole graph */
	struct gnode **by_index;	  /* total: a local node, or NULL */
	struct gpeer **peers;		  /* other workers its values go to */
	uint32_t npeers;		  /* how many */
};

static struct ferry__fb_builder gfb;
static bool gfb_ready;

static struct ferry__fb_builder *builder(void)
{
	if (!gfb_ready) {
		ferry__fb_builder_init(&gfb);
		gfb_ready = true;
	}
	return &gfb;
}

bool ferry__worker_graph_is_message(uint16_t type)
{
	return type == FERRY__WIRE_MSG_GRAPH_INSTALL || type == FERRY__WIRE_MSG_GRAPH_DATA ||
	       type == FERRY__WIRE_MSG_GRAPH_DESTROY;
}

static uint32_t count_graphs(const struct ferry__worker *w)
{
	uint32_t n = 0;

	for (const struct ferry__worker_graph *g = w->graph; g; g = g->next)
		n++;
	return n;
}

static struct ferry__worker_graph *find(struct ferry__worker *w,
					const struct ferry__wire_unique_id *id)
{
	for (struct ferry__worker_graph *g = w->graph; g; g = g->next)
		if (!memcmp(g->id.bytes, id->bytes, sizeof(id->bytes)))
			return g;
	return NULL;
}

static void slot_clear(struct gnode *n, struct gslot *s)
{
	for (uint32_t i = 0; i < n->nargs; i++) {
		ferry__free(s->vals[i].data);
		s->vals[i] = (struct gval){0};
	}
	ferry__free(s->message);
	s->message = NULL;
	s->have = 0;
	s->status = 0;
}

static void node_fini(struct gnode *n)
{
	for (uint32_t k = 0; n->vals && k < WINDOW; k++)
		slot_clear(n, &n->slots[k]);
	for (uint32_t i = 0; n->args && i < n->nargs; i++)
		ferry__free(n->args[i].data);
	ferry__free(n->args);
	ferry__free(n->edges);
	ferry__free(n->vals);
}

/* Free @g (unlinked already). Its peer sockets close; their on_close frees the peer. */
static void graph_free(struct ferry__worker_graph *g)
{
	for (uint32_t i = 0; g->peers && i < g->npeers; i++) {
		struct gpeer *p = g->peers[i];

		if (!p)
			continue;
		p->g = NULL;
		if (p->conn)
			ferry__conn_close(p->conn);
		else
			ferry__free(p);
	}
	for (uint32_t i = 0; g->nodes && i < g->nnodes; i++)
		node_fini(&g->nodes[i]);
	ferry__free(g->peers);
	ferry__free(g->nodes);
	ferry__free(g->by_index);
	ferry__free(g);
}

static void unlink_graph(struct ferry__worker *w, struct ferry__worker_graph *g)
{
	for (struct ferry__worker_graph **pp = &w->graph; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			return;
		}
}

/* ---- peers: sockets to other workers ---- */

static void peer_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	struct gpeer *p = ferry__conn_data(conn);

	if (!ferry__rt_ring_on_socket(p->ring, conn, type))
		return;
	if (type == FERRY__WIRE_MSG_RING_SETUP_REPLY) {
		(void)ferry__rt_ring_setup_reply(&p->ring, payload, len);
		return;
	}
	FLOG_WARN(COMP, "a graph peer %s sent %s: closing", ferry__conn_peer(conn),
		  ferry__wire_message_name(type));
	ferry__conn_close(conn);
}

static void peer_on_close(struct ferry__conn *conn, int err)
{
	struct gpeer *p = ferry__conn_data(conn);

	ferry__rt_ring_close(p->ring);
	p->ring = NULL;
	if (!p->g) {
		ferry__free(p);
		return;
	}
	/* The peer died: the driver sees it on its own socket to that worker and fails the
	 * graph; until then values for it are dropped. */
	FLOG_INFO(COMP, "graph peer %s closed (%s)", p->path, ferry_strerror(err));
	p->conn = NULL;
	p->failed = true;
}

static const struct ferry__conn_callbacks peer_callbacks = {
	.on_message = peer_on_message,
	.on_close = peer_on_close,
};

static int peer_open(struct ferry__worker *w, struct gpeer *p)
{
	struct ferry__conn_opts co = {
		.cb = &peer_callbacks, .data = p, .max_message_bytes = FERRY__WORKER_FRAME_MAX};
	struct ferry__wire_runtime_connect m = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.kind = FERRY__WIRE_PEER_KIND_WORKER,
		.pid = (int32_t)getpid(),
	};
	int ret;

	if (!w->loop)
		return -ENOTCONN;
	memcpy(m.id.bytes, w->id.bytes, sizeof(m.id.bytes));
	ret = ferry__conn_connect_unix(w->loop, p->path, &co, &p->conn);
	if (ret < 0) {
		p->conn = NULL;
		return ret;
	}
	ret = ferry__wire_runtime_connect_build(builder(), &m);
	if (ret == 0)
		ret = ferry__conn_send(p->conn, FERRY__WIRE_MSG_RUNTIME_CONNECT,
				       ferry__fb_builder_data(builder()),
				       ferry__fb_builder_size(builder()));
	/* The peer is on this host (a Unix path): values go on a ring pair, as tasks do. */
	if (ret == 0 && ferry__rt_ring_enabled())
		(void)ferry__rt_ring_offer(w->loop, p->conn, peer_on_message, &p->ring);
	return ret; /* on failure the socket's close follows */
}

/* ---- values ---- */

static void deliver(struct ferry__worker *w, struct ferry__worker_graph *g, uint32_t node,
		    uint32_t arg, uint64_t seq, int status, const char *message, size_t mlen,
		    const void *data, size_t len);

static void send_value(struct ferry__worker *w, struct ferry__worker_graph *g,
		       const struct gedge *e, uint64_t seq, int status, const char *message,
		       const void *data, size_t len)
{
	struct ferry__wire_graph_data m = {.graph_id = g->id,
					   .seq = seq,
					   .node = e->node,
					   .arg = e->arg,
					   .status = status,
					   .message = status < 0 ? message : NULL,
					   .data = data,
					   .data_count = status < 0 ? 0 : len};
	struct ferry__rt_ring *ring = NULL;
	struct ferry__conn *conn = NULL;
	struct gpeer *p = NULL;
	int ret;

	if (e->peer >= 0) {
		p = g->peers[e->peer];
		if (p->failed)
			return;
		if (!p->conn && peer_open(w, p) < 0) {
			FLOG_WARN(COMP, "worker %s: cannot reach graph peer %s", w->id_hex,
				  p->path);
			p->failed = true;
			return;
		}
		conn = p->conn;
		ring = p->ring;
	} else {
		conn = g->driver;
	}
	if (!conn)
		return;
	ret = ferry__wire_graph_data_build(builder(), &m);
	if (ret == 0 && p) /* the driver's socket is an owner's: its ring is worker.c's */
		ret = ferry__rt_ring_send(ring, conn, FERRY__WIRE_MSG_GRAPH_DATA,
					  ferry__fb_builder_data(builder()),
					  ferry__fb_builder_size(builder()));
	else if (ret == 0)
		ret = ferry__worker_owner_send(conn, FERRY__WIRE_MSG_GRAPH_DATA,
					       ferry__fb_builder_data(builder()),
					       ferry__fb_builder_size(builder()));
	if (ret < 0)
		FLOG_WARN(COMP, "worker %s: a graph value was not sent: %s", w->id_hex,
			  ferry_strerror(ret));
}

/* The node's result (or error) for @seq along every edge. */
static void forward(struct ferry__worker *w, struct ferry__worker_graph *g, struct gnode *n,
		    uint64_t seq, int status, const char *message, const void *data, size_t len)
{
	size_t mlen = message ? strlen(message) : 0;

	for (uint32_t i = 0; i < n->nedges; i++) {
		const struct gedge *e = &n->edges[i];

		if (e->peer == -1)
			deliver(w, g, e->node, e->arg, seq, status, message, mlen, data, len);
		else
			send_value(w, g, e, seq, status, message, data, len);
	}
}

/* Call the node's method on slot @s's arguments. */
static int call(struct ferry__worker *w, struct gnode *n, struct gslot *s, void **out,
		size_t *out_len, char *msg, size_t msg_size)
{
	struct ferry__worker_buf args[FERRY_GRAPH_MAX_ARGS];

	for (uint32_t i = 0; i < n->nargs; i++) {
		const struct garg *a = &n->args[i];

		args[i].data = a->kind == FERRY_GRAPH_ARG_CONST ? a->data : s->vals[i].data;
		args[i].len = a->kind == FERRY_GRAPH_ARG_CONST ? a->len : s->vals[i].len;
	}
	return ferry__worker_call(w, n->fn, args, n->nargs, out, out_len, msg, msg_size);
}

/* Run every execution of @n whose arguments are all in, in seq order. */
static void fire(struct ferry__worker *w, struct ferry__worker_graph *g, struct gnode *n)
{
	char msg[1024], text[1280];

	for (;;) {
		struct gslot *s = &n->slots[n->next_seq % WINDOW];
		uint64_t seq = n->next_seq;
		void *out = NULL;
		size_t len = 0;
		int status = s->status;

		text[0] = 0;
		if (s->have < n->ndynamic || s->seq != seq)
			return;
		if (status < 0) {
			snprintf(text, sizeof(text), "%s", s->message ? s->message : "");
		} else {
			status = call(w, n, s, &out, &len, msg, sizeof(msg));
			if (status == 0 && len > VALUE_MAX) {
				snprintf(msg, sizeof(msg),
					 "its result is %zu bytes: graph values travel inline, "
					 "at most %u",
					 len, VALUE_MAX);
				status = -EMSGSIZE;
			}
			if (status < 0)
				snprintf(text, sizeof(text),
					 "graph node %" PRIu32 " (%s) on node %s, worker %s: %s",
					 n->index, n->method, w->node_hex, w->id_hex, msg);
		}
		slot_clear(n, s);
		n->next_seq++;
		forward(w, g, n, seq, status, text, out, len);
		ferry__free(out);
	}
}

/* A value (or an error) for argument @arg of node @node, execution @seq. Checked: it comes
 * from the network. */
static int accept_value(struct ferry__worker_graph *g, uint32_t node, uint32_t arg, uint64_t seq,
			int status, const char *message, size_t mlen, const void *data, size_t len,
			char *why, size_t why_size)
{
	struct gnode *n = node < g->total ? g->by_index[node] : NULL;
	struct gslot *s;
	struct gval *v;

	if (!n || arg >= n->nargs || n->args[arg].kind == FERRY_GRAPH_ARG_CONST) {
		snprintf(why, why_size, "node %" PRIu32 " argument %" PRIu32 " takes no value here",
			 node, arg);
		return -EPROTO;
	}
	if (seq < n->next_seq || seq - n->next_seq >= WINDOW) {
		snprintf(why, why_size,
			 "execution %" PRIu64 " of node %" PRIu32
			 " is outside its window (next %" PRIu64 ")",
			 seq, node, n->next_seq);
		return -EPROTO;
	}
	s = &n->slots[seq % WINDOW];
	v = &s->vals[arg];
	if ((s->have && s->seq != seq) || v->set) {
		snprintf(why, why_size,
			 "node %" PRIu32 " argument %" PRIu32 " of execution %" PRIu64
			 " came twice",
			 node, arg, seq);
		return -EPROTO;
	}
	if (status < 0) {
		if (!s->status) {
			s->status = status;
			s->message = ferry__malloc(mlen + 1);
			if (s->message) {
				memcpy(s->message, message ? message : "", mlen);
				s->message[mlen] = 0;
			}
		}
	} else if (len) {
		v->data = ferry__malloc(len);
		if (!v->data) {
			snprintf(why, why_size, "out of memory for a %zu-byte value", len);
			return -ENOMEM;
		}
		memcpy(v->data, data, len);
		v->len = len;
	}
	v->set = true;
	s->seq = seq;
	s->have++;
	return 0;
}

static void deliver(struct ferry__worker *w, struct ferry__worker_graph *g, uint32_t node,
		    uint32_t arg, uint64_t seq, int status, const char *message, size_t mlen,
		    const void *data, size_t len)
{
	char why[200];

	/* Local edges were checked at install: only memory can fail here. */
	if (accept_value(g, node, arg, seq, status, message, mlen, data, len, why, sizeof(why)) <
	    0) {
		FLOG_ERROR(COMP, "worker %s: graph value dropped: %s", w->id_hex, why);
		return;
	}
	fire(w, g, g->by_index[node]);
}

static int on_data(struct ferry__worker *w, struct ferry__wire_graph_data_view v)
{
	struct ferry__wire_unique_id gid = ferry__wire_graph_data_graph_id(v);
	struct ferry__worker_graph *g = find(w, &gid);
	uint32_t node = ferry__wire_graph_data_node(v);
	int status = ferry__wire_graph_data_status(v);
	char why[200];
	int ret;

	if (!g)
		return 0; /* destroyed while the value travelled: nothing waits for it */
	if (status > 0) {
		FLOG_WARN(COMP, "worker %s: GraphData with status %d (not 0 or -errno)", w->id_hex,
			  status);
		return -EPROTO;
	}
	ret = accept_value(g, node, ferry__wire_graph_data_arg(v), ferry__wire_graph_data_seq(v),
			   status, ferry__wire_graph_data_message(v),
			   ferry__wire_graph_data_message_len(v),
			   ferry__wire_graph_data_data_data(v),
			   ferry__wire_graph_data_data_count(v), why, sizeof(why));
	if (ret < 0) {
		FLOG_WARN(COMP, "worker %s: malformed GraphData: %s", w->id_hex, why);
		return ret;
	}
	fire(w, g, g->by_index[node]);
	return 0;
}

/* ---- install ---- */

static int install_arg(struct gnode *n, uint32_t i, struct ferry__wire_graph_arg_view a, char *why,
		       size_t why_size)
{
	struct garg *ga = &n->args[i];
	const uint8_t *data = ferry__wire_graph_arg_data_data(a);

	ga->kind = ferry__wire_graph_arg_kind(a);
	ga->index = ferry__wire_graph_arg_index(a);
	if (ga->kind > FERRY_GRAPH_ARG_NODE ||
	    (ga->kind == FERRY_GRAPH_ARG_NODE && ga->index >= n->index) ||
	    (ga->kind == FERRY_GRAPH_ARG_INPUT && ga->index >= FERRY_GRAPH_MAX_ARGS)) {
		snprintf(why, why_size,
			 "node %" PRIu32 " argument %" PRIu32 ": kind %u index %" PRIu32
			 " (a node takes only earlier nodes' results)",
			 n->index, i, ga->kind, ga->index);
		return -EINVAL;
	}
	if (ga->kind != FERRY_GRAPH_ARG_CONST) {
		n->ndynamic++;
		return 0;
	}
	ga->len = ferry__wire_graph_arg_data_count(a);
	if (ga->len) {
		ga->data = ferry__malloc(ga->len);
		if (!ga->data)
			return -ENOMEM;
		memcpy(ga->data, data, ga->len);
	}
	return 0;
}

static int find_peer(struct ferry__worker_graph *g, const char *path, uint32_t len)
{
	struct gpeer *p;

	for (uint32_t i = 0; i < g->npeers; i++)
		if (strlen(g->peers[i]->path) == len && !memcmp(g->peers[i]->path, path, len))
			return (int)i;
	if (g->npeers >= FERRY_GRAPH_MAX_NODES)
		return -EINVAL; /* more workers than a graph has nodes */
	p = ferry__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->g = g;
	memcpy(p->path, path, len);
	g->peers[g->npeers] = p;
	return (int)g->npeers++;
}

static int install_edge(struct ferry__worker_graph *g, struct gnode *n, uint32_t i,
			struct ferry__wire_graph_edge_view e, char *why, size_t why_size)
{
	struct gedge *ge = &n->edges[i];
	const char *path = ferry__wire_graph_edge_worker_path(e);
	uint32_t plen = ferry__wire_graph_edge_worker_path_len(e);
	int peer;

	ge->node = ferry__wire_graph_edge_node(e);
	ge->arg = ferry__wire_graph_edge_arg(e);
	if (ferry__wire_graph_edge_to_driver(e)) {
		ge->peer = -2;
		return 0;
	}
	if (ge->node >= g->total || ge->node <= n->index || ge->arg >= FERRY_GRAPH_MAX_ARGS ||
	    plen >= sizeof(g->peers[0]->path)) {
		snprintf(why, why_size,
			 "node %" PRIu32 " edge %" PRIu32 " to node %" PRIu32 " argument %" PRIu32
			 " is not a later node's argument",
			 n->index, i, ge->node, ge->arg);
		return -EINVAL;
	}
	if (!plen) {
		ge->peer = -1; /* checked once every local node is in (check_local) */
		return 0;
	}
	peer = find_peer(g, path, plen);
	if (peer == -EINVAL)
		snprintf(why, why_size, "edges to more than %d workers", FERRY_GRAPH_MAX_NODES);
	if (peer < 0)
		return peer;
	ge->peer = peer;
	return 0;
}

static int install_node(struct ferry__worker *w, struct ferry__worker_graph *g, struct gnode *n,
			struct ferry__wire_graph_node_view v, const char *cls, char *why,
			size_t why_size)
{
	const char *method = ferry__wire_graph_node_method(v);
	uint32_t mlen = ferry__wire_graph_node_method_len(v);
	size_t clen = strlen(cls);
	int ret;

	n->index = ferry__wire_graph_node_index(v);
	n->nargs = ferry__wire_graph_node_args_count(v);
	n->nedges = ferry__wire_graph_node_edges_count(v);
	if (n->index >= g->total || g->by_index[n->index] || n->nargs > FERRY_GRAPH_MAX_ARGS ||
	    n->nedges > 2u * FERRY_GRAPH_MAX_NODES * FERRY_GRAPH_MAX_ARGS) {
		snprintf(why, why_size, "node %" PRIu32 ": bad index, twice, or too many arguments",
			 n->index);
		return -EINVAL;
	}
	g->by_index[n->index] = n;
	/* Only the actor's own class's methods: "Class." then the method, as ActorCall. */
	if (mlen <= clen + 1 || memcmp(method, cls, clen) != 0 || method[clen] != '.' ||
	    !(n->fn = ferry__registry_find(method, mlen))) {
		snprintf(why, why_size, "no method '%.*s' of actor class %s on node %s (worker %s)",
			 (int)FERRY_MIN(mlen, 128u), method, cls, w->node_hex, w->id_hex);
		return -ENOENT;
	}
	memcpy(n->method, method, mlen);
	n->args = ferry__calloc(FERRY_MAX(n->nargs, 1u), sizeof(*n->args));
	n->edges = ferry__calloc(FERRY_MAX(n->nedges, 1u), sizeof(*n->edges));
	n->vals = ferry__calloc((size_t)WINDOW * FERRY_MAX(n->nargs, 1u), sizeof(*n->vals));
	if (!n->args || !n->edges || !n->vals)
		return -ENOMEM;
	for (uint32_t k = 0; k < WINDOW; k++)
		n->slots[k].vals = &n->vals[(size_t)k * n->nargs];
	for (uint32_t i = 0; i < n->nargs; i++) {
		ret = install_arg(n, i, ferry__wire_graph_node_args_at(v, i), why, why_size);
		if (ret < 0)
			return ret;
	}
	if (!n->ndynamic) {
		snprintf(why, why_size, "node %" PRIu32 " takes no input and no node's result",
			 n->index);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n->nedges; i++) {
		ret = install_edge(g, n, i, ferry__wire_graph_node_edges_at(v, i), why, why_size);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/* Local edges must reach a local node's argument that takes that node's result. */
static int check_local(struct ferry__worker_graph *g, char *why, size_t why_size)
{
	for (uint32_t i = 0; i < g->nnodes; i++) {
		struct gnode *n = &g->nodes[i];

		for (uint32_t k = 0; k < n->nedges; k++) {
			const struct gedge *e = &n->edges[k];
			const struct gnode *t = e->peer == -1 ? g->by_index[e->node] : NULL;

			if (e->peer != -1)
				continue;
			if (!t || e->arg >= t->nargs ||
			    t->args[e->arg].kind != FERRY_GRAPH_ARG_NODE ||
			    t->args[e->arg].index != n->index) {
				snprintf(why, why_size,
					 "node %" PRIu32 " edge to node %" PRIu32
					 " argument %" PRIu32
					 " on this worker: no such argument takes its result",
					 n->index, e->node, e->arg);
				return -EINVAL;
			}
		}
	}
	return 0;
}

static int install(struct ferry__worker *w, struct ferry__conn *conn,
		   struct ferry__wire_graph_install_view v, char *why, size_t why_size)
{
	struct ferry__wire_unique_id gid = ferry__wire_graph_install_graph_id(v);
	struct ferry__wire_unique_id aid = ferry__wire_graph_install_actor_id(v);
	uint32_t nnodes = ferry__wire_graph_install_nodes_count(v);
	struct ferry__worker_graph *g;
	struct ferry_actor_id actor;
	const char *cls;
	int ret;

	if (!ferry__worker_actor_current(w, &actor, &cls) ||
	    memcmp(actor.bytes, aid.bytes, sizeof(aid.bytes)) != 0) {
		snprintf(why, why_size, "worker %s (node %s) does not host that actor", w->id_hex,
			 w->node_hex);
		return -ESRCH;
	}
	if (find(w, &gid)) {
		snprintf(why, why_size, "graph installed twice");
		return -EEXIST;
	}
	g = ferry__calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->id = gid;
	g->driver = conn;
	g->total = ferry__wire_graph_install_num_nodes(v);
	if (!nnodes || nnodes > g->total || g->total > FERRY_GRAPH_MAX_NODES) {
		snprintf(why, why_size, "%" PRIu32 " nodes here of %" PRIu32 " (at most %d)",
			 nnodes, g->total, FERRY_GRAPH_MAX_NODES);
		ret = -EINVAL;
		goto err_free;
	}
	g->nodes = ferry__calloc(nnodes, sizeof(*g->nodes));
	g->by_index = ferry__calloc(g->total, sizeof(*g->by_index));
	g->peers = ferry__calloc(FERRY_GRAPH_MAX_NODES, sizeof(*g->peers));
	ret = g->nodes && g->by_index && g->peers ? 0 : -ENOMEM;
	for (uint32_t i = 0; ret == 0 && i < nnodes; i++) {
		g->nnodes = i + 1;
		ret = install_node(w, g, &g->nodes[i], ferry__wire_graph_install_nodes_at(v, i),
				   cls, why, why_size);
	}
	if (ret == 0)
		ret = check_local(g, why, why_size);
	if (ret < 0)
		goto err_free;
	g->next = w->graph;
	w->graph = g;
	FLOG_DEBUG(COMP, "worker %s: graph installed (%" PRIu32 " of its %" PRIu32 " nodes)",
		   w->id_hex, nnodes, g->total);
	return 0;
err_free:
	if (ret == -ENOMEM)
		snprintf(why, why_size, "worker %s: out of memory", w->id_hex);
	graph_free(g);
	return ret;
}

/* ---- messages ---- */

static int reply(struct ferry__conn *conn, uint16_t type)
{
	if (!conn)
		return 0;
	return ferry__worker_owner_send(conn, type, ferry__fb_builder_data(builder()),
					ferry__fb_builder_size(builder()));
}

int ferry__worker_graph_message(struct ferry__worker *w, struct ferry__conn *conn, uint16_t type,
				const void *payload, size_t len)
{
	char why[400] = "";
	int ret;

	(void)len;
	switch (type) {
	case FERRY__WIRE_MSG_GRAPH_INSTALL: {
		struct ferry__wire_graph_install_view v =
			ferry__wire_graph_install_root_verified(payload);
		struct ferry__wire_graph_install_reply m = {
			.graph_id = ferry__wire_graph_install_graph_id(v)};

		m.status = install(w, conn, v, why, sizeof(why));
		m.message = m.status < 0 ? why : NULL;
		m.graphs = count_graphs(w);
		if (m.status < 0)
			FLOG_WARN(COMP, "worker %s: graph refused: %s", w->id_hex, why);
		ret = ferry__wire_graph_install_reply_build(builder(), &m);
		return ret < 0 ? ret : reply(conn, FERRY__WIRE_MSG_GRAPH_INSTALL_REPLY);
	}
	case FERRY__WIRE_MSG_GRAPH_DATA:
		return on_data(w, ferry__wire_graph_data_root_verified(payload));
	case FERRY__WIRE_MSG_GRAPH_DESTROY: {
		struct ferry__wire_graph_destroy_view v =
			ferry__wire_graph_destroy_root_verified(payload);
		struct ferry__wire_graph_destroy_reply m = {
			.graph_id = ferry__wire_graph_destroy_graph_id(v)};
		struct ferry__worker_graph *g = find(w, &m.graph_id);

		if (g) {
			unlink_graph(w, g);
			graph_free(g);
		}
		m.status = g ? 0 : -ENOENT;
		m.graphs = count_graphs(w);
		ret = ferry__wire_graph_destroy_reply_build(builder(), &m);
		return ret < 0 ? ret : reply(conn, FERRY__WIRE_MSG_GRAPH_DESTROY_REPLY);
	}
	default:
		return -EINVAL;
	}
}

void ferry__worker_graph_conn_closed(struct ferry__worker *w, const struct ferry__conn *conn)
{
	struct ferry__worker_graph **pp = &w->graph;

	while (*pp) {
		struct ferry__worker_graph *g = *pp;

		if (g->driver != conn) {
			pp = &g->next;
			continue;
		}
		*pp = g->next;
		graph_free(g);
	}
}

void ferry__worker_graph_actor_gone(struct ferry__worker *w)
{
	while (w->graph) {
		struct ferry__worker_graph *g = w->graph;

		w->graph = g->next;
		/* The driver learns it from its socket closing (graph.c names the node). */
		if (g->driver)
			ferry__conn_close(g->driver);
		graph_free(g);
	}
}

void ferry__worker_graph_fini(struct ferry__worker *w)
{
	while (w->graph) {
		struct ferry__worker_graph *g = w->graph;

		w->graph = g->next;
		g->driver = NULL;
		graph_free(g);
	}
	if (gfb_ready)
		ferry__fb_builder_fini(&gfb);
	gfb_ready = false;
}
