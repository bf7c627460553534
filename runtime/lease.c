/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Leases and the push of tasks to workers (Ray's direct task transport), on the runtime's
 * loop thread: the node's runtime socket (RuntimeConnect, LeaseRequest / LeaseGrant /
 * LeaseReturn / LeaseRevoked) and one socket per leased worker (RuntimeConnect, then PushTask
 * / PushTaskReply). schema/runtime.fbs is the protocol.
 *
 * DESIGN
 * - Everything here runs on the loop thread; other threads reach it through posts
 *   (submit.c). Tasks are grouped in classes (job + resources, struct ferry__rt_class_key).
 *   A class with queued tasks asks the node for a lease (one request in flight at a time,
 *   SPREAD one a queued task at once; up to MAX_LEASES leases; the node holding its inputs
 *   when we have its socket), pushes up to depth() tasks to each leased worker without
 *   waiting (a worker runs its socket's tasks in order), and gives a lease back
 *   FERRY__RT_LEASE_IDLE_MS after its last reply when nothing of its class is queued.
 * - A given-back worker's socket is parked, not closed (up to PARKED_MAX, for PARK_MS): the
 *   node grants an owner the worker it last leased to it when that one is idle
 *   (node/rt_lease.c: find_idle), and the lease (any class of the job) then skips the dial,
 *   RuntimeConnect and ring setup, three wake-ups of the worker on the way to the first task
 *   (Ray keeps its worker clients the same way).
 *   Only a lease none of whose tasks waited is parked: a worker that numbered a wait bounces
 *   its socket's pushes until the recall (below), which a new lease would not know to send.
 * - Each worker socket gets a ring pair beside it (runtime/ring.h): pushes and replies that fit
 *   a slot go through shared memory, in order with what takes the socket.
 * - A task that waits in a get (LeaseBlocked from the node) may wait for a task pushed behind
 *   it. Its lease gets no pushes until the wait ends; what was pushed behind the waiting task
 *   comes back to the front of the queue, no retry spent, and goes to another lease (the node
 *   lent the waiting worker's CPU); TasksRecalled tells the worker, which bounces those
 *   PushTasks when it reads them (take_back, on_bounce; runtime.fbs).
 * - A worker that dies: its socket closes. Tasks in flight there are retried (requeued at the
 *   front) while they have retries left; the others wait up to REVOKE_WAIT_MS for the node's
 *   LeaseRevoked, whose signal or exit status goes into their error ("worker died: killed by
 *   signal 9 (SIGKILL)").
 * - Shutdown (ferry__rt_sub_stop, through ferry__loop_call): tasks not finished end with
 *   -ECANCELED, leases go back, sockets close; init.c then runs the loop until every socket's
 *   on_close came (struct sub.open_conns).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/util.h"
#include "runtime/dial.h"
#include "runtime/ring.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"
#define PIPELINE 16	      /* tasks in flight per leased worker, at most */
#define PIPELINE_WORK_US 2000 /* ... about this much work: see depth() */
#define MAX_LEASES 8	      /* leases per class */
#define REVOKE_WAIT_MS 1000   /* how long a dead worker's tasks wait for the reason */
#define PARK_MS 2000	      /* a given-back worker's socket is kept this long (park) */
#define PARKED_MAX 16	      /* ... this many at most (the oldest goes first) */
/* A SPREAD node this many tasks of a burst ahead of the class's least waits for the others:
 * SPREAD_AHEAD_MIN, or 1/SPREAD_AHEAD_DIV of the least (counts stay within ~5%; a node busy
 * with a long task holds the others back only that far). */
#define SPREAD_AHEAD_MIN 8
#define SPREAD_AHEAD_DIV 20
#define FRAME_MAX (64u << 20) /* runtime.fbs: the receiver's frame cap */

struct cls;

/* A LeaseRequest in flight. A class has one at a time, SPREAD up to MAX_LEASES (pump()). */
struct lease_ask {
	uint64_t id;		  /* its request ID, or 0: this slot is free */
	struct ferry__conn *node; /* sent there */
	bool placed;		  /* following a "retry at" */
};

struct lease {
	struct lease *next;		       /* the class's leases */
	struct cls *cls;		       /* its class; NULL: parked (sub.parked) */
	uint64_t lease_id;		       /* the node's */
	struct ferry__conn *node;	       /* the node that granted it (NULL: closed) */
	struct ferry_worker_id worker;	       /* the leased worker */
	struct ferry__conn *conn;	       /* to the worker, NULL once closed */
	struct ferry__rt_ring *ring;	       /* beside conn (runtime/ring.h), or NULL */
	struct ferry__rt_task *inflight;       /* pushed, not answered (oldest first) */
	struct ferry__rt_task **inflight_tail; /* append here */
	uint32_t ninflight;		       /* how many */
	struct ferry__loop_timer idle;	       /* FERRY__RT_LEASE_IDLE_MS */
	struct ferry__loop_timer revoke;       /* REVOKE_WAIT_MS */
	bool revoked;			       /* LeaseRevoked came */
	bool blocked;			       /* its task waits (LeaseBlocked): no pushes */
	uint64_t recalled;		       /* the last wait whose tasks came back */
	bool closing;			       /* given back or revoked: no more pushes */
	uint32_t tasks_done;		       /* replies to its pushes */
	uint64_t pushed;		       /* tasks of this burst pushed to it (SPREAD) */
	uint64_t busy_us;		       /* ... the time their tasks ran */
	uint64_t last_reply_us;		       /* when the last reply came */
	char why[160];			       /* the worker's death, for errors */
};

struct cls {
	struct cls *next;			      /* all classes */
	struct ferry__rt_class_key key;		      /* what it asks for */
	struct ferry__rt_task *queue;		      /* ready, not pushed */
	struct ferry__rt_task **queue_tail;	      /* append here */
	size_t queued;				      /* how many */
	struct lease *leases;			      /* granted */
	size_t nleases;				      /* how many */
	struct lease_ask asks[MAX_LEASES];	      /* LeaseRequests in flight */
	uint32_t tasks_done;			      /* replies so far, for depth() */
	uint64_t busy_us;			      /* ... and their tasks' run time */
	char first_name[FERRY_FUNCTION_NAME_MAX + 1]; /* for errors before any task ran */
};

struct ferry__rt_sub {
	struct ferry__conn *node;	   /* the node's runtime socket */
	struct ferry__rt_endpoint node_ep; /* where it is (runtime/dial.h) */
	struct ferry_node_id node_id;	   /* from RuntimeConnectReply */
	struct cls *classes;		   /* every class seen */
	uint64_t next_request;		   /* LeaseRequest ids */
	unsigned open_conns;		   /* sockets whose on_close has not come */
	struct lease *parked;		   /* given back, sockets kept (newest first) */
	unsigned nparked;		   /* how many */
	bool stopping;			   /* shutdown began */
	struct ferry__fb_builder fb;	   /* messages are built here */
};

static struct ferry__rt_sub sub;
static uint64_t leases_dialled, leases_reused; /* ferry__rt_lease_counts() */

static void pump(struct cls *c);
static void lease_gone(struct lease *l);
static int node_connect(void);

/* ---- sending ---- */

int ferry__rt_send_connect(struct ferry__conn *conn)
{
	struct ferry__wire_runtime_connect m = {0};
	int ret;

	m.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	m.kind = FERRY__WIRE_PEER_KIND_DRIVER;
	memcpy(m.id.bytes, ferry__rt.self.bytes, sizeof(m.id.bytes));
	memcpy(m.job.bytes, ferry__rt.job.bytes, sizeof(m.job.bytes));
	m.pid = (int32_t)getpid();
	if (ferry__rt.worker && conn == sub.node) { /* a worker's owner line (runtime.fbs) */
		m.kind = FERRY__WIRE_PEER_KIND_WORKER;
		m.secret = ferry__rt.worker->secret;
		m.secret_count = ferry__rt.worker->secret_len;
		m.listen_path = ferry__rt.worker->listen_path;
	}
	ret = ferry__wire_runtime_connect_build(&sub.fb, &m);
	if (ret < 0)
		return ret;
	return ferry__conn_send(conn, FERRY__WIRE_MSG_RUNTIME_CONNECT,
				ferry__fb_builder_data(&sub.fb), ferry__fb_builder_size(&sub.fb));
}

/* "a=1.5,b=2" into @res from @n on; returns the new count (bad parts are skipped, logged). */
static size_t parse_custom(const char *spec, char names[][FERRY__RT_CUSTOM_MAX],
			   struct ferry__wire_runtime_resource *res, size_t n, size_t max)
{
	char copy[FERRY__RT_CUSTOM_MAX], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", spec);
	for (char *p = strtok_r(copy, ",", &save); p && n < max; p = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(p, '='), *end = NULL;
		double amount = eq ? strtod(eq + 1, &end) : 0;

		if (!eq || eq == p || !end || *end || amount < 0) {
			FLOG_WARN(COMP, "task resource \"%s\": not name=amount, ignored", p);
			continue;
		}
		*eq = 0;
		snprintf(names[n], FERRY__RT_CUSTOM_MAX, "%s", p);
		res[n].name = names[n];
		res[n].amount = amount;
		n++;
	}
	return n;
}

static int ask_on(struct ferry__conn *node, const struct ferry__rt_class_key *key, bool placed,
		  uint64_t *request_id);

/*
 * The node holding most of a DEFAULT class's input bytes when that is not ours and we have its
 * socket (an earlier placement there opened it), else NULL. Our node would only send such a
 * request up (node/rt_sched.c: inputs clearly elsewhere, the same 1 MiB rule as set_locality),
 * and the scheduler would place it by its inputs: asking that node's local scheduler directly
 * saves two hops. Not placed: when it is busy it still asks the scheduler.
 */
static struct ferry__conn *input_node(const struct cls *c)
{
	if (c->key.strategy != FERRY_SCHED_DEFAULT || !c->key.locality_bytes ||
	    ferry_node_id_eq(&c->key.locality, &ferry__rt.node))
		return NULL;
	return ferry__rt_nodes_find(&c->key.locality);
}

/* Ask our node, which decides where (node/rt_sched.c), or the node holding the class's inputs
 * (input_node); a class of a placement group's bundle asks that bundle's node (pg.c), placed
 * there already. */
static int send_lease_request(struct cls *c, struct lease_ask *a)
{
	struct ferry__rt_pg_node *via = ferry__rt_pg_lease_node(&c->key);
	struct ferry__conn *conn = via ? ferry__rt_pg_node_conn(via) : input_node(c);

	if (via && !conn)
		return -ECONNREFUSED;
	if (!conn && node_connect() < 0)
		return -ECONNREFUSED;
	a->node = conn ? conn : sub.node;
	a->placed = via != NULL;
	return ask_on(a->node, &c->key, a->placed, &a->id);
}

/* @c's LeaseRequests in flight, and a free slot into *@free (NULL when none is). */
static size_t asks_in_flight(struct cls *c, struct lease_ask **free)
{
	size_t n = 0;

	*free = NULL;
	for (size_t i = 0; i < MAX_LEASES; i++) {
		if (c->asks[i].id)
			n++;
		else if (!*free)
			*free = &c->asks[i];
	}
	return n;
}

/* An actor's lease is asked as a task class's is (send_lease_request): of its bundle's node,
 * else of ours, which places it (spillback: "retry at", ferry__rt_lease_ask_at). */
int ferry__rt_lease_ask(const struct ferry__rt_class_key *key, struct ferry__conn **node,
			uint64_t *request_id)
{
	struct ferry__rt_pg_node *via = ferry__rt_pg_lease_node(key);

	*node = via ? ferry__rt_pg_node_conn(via) : NULL;
	if (via)
		return *node ? ask_on(*node, key, true, request_id) : -ECONNREFUSED;
	if (node_connect() < 0)
		return -ECONNREFUSED;
	*node = sub.node;
	return ask_on(sub.node, key, false, request_id);
}

static const struct ferry__conn_callbacks node_cb;

int ferry__rt_lease_ask_at(const struct ferry__rt_class_key *key, const struct ferry_node_id *id,
			   const char *address, struct ferry__conn **node, uint64_t *request_id)
{
	struct ferry__conn *conn = NULL;
	int ret;

	if (!id) { /* our own node, placed: not forwarded again */
		if (node_connect() < 0)
			return -ECONNREFUSED;
		*node = sub.node;
		return ask_on(sub.node, key, true, request_id);
	}
	ret = ferry__rt_nodes_get(id, address, &node_cb, &conn);
	if (ret == 1) {
		sub.open_conns++;
		ret = ferry__rt_send_connect(conn);
	}
	if (ret >= 0) {
		*node = conn;
		ret = ask_on(conn, key, true, request_id);
	}
	return ret < 0 ? ret : 0;
}

static int ask_on(struct ferry__conn *node, const struct ferry__rt_class_key *key, bool placed,
		  uint64_t *request_id)
{
	struct ferry__wire_lease_input in = {0};
	enum { MAXRES = 16 };
	struct ferry__wire_runtime_resource res[MAXRES] = {{0}};
	static char names[MAXRES][FERRY__RT_CUSTOM_MAX];
	struct ferry__wire_lease_request m = {0};
	size_t n = 0;
	int ret;

	res[n].name = "CPU", res[n++].amount = key->cpus;
	if (key->gpus > 0)
		res[n].name = "GPU", res[n++].amount = key->gpus;
	if (key->memory_bytes > 0)
		res[n].name = "memory", res[n++].amount = key->memory_bytes;
	if (key->custom)
		n = parse_custom(key->custom, names, res, n, MAXRES);
	m.request_id = ++sub.next_request;
	memcpy(m.job.bytes, ferry__rt.job.bytes, sizeof(m.job.bytes));
	m.code_path = ferry__rt.code_path[0] ? ferry__rt.code_path : NULL;
	if (m.code_path) {
		m.code_hash = ferry__rt.code_hash;
		m.code_hash_count = sizeof(ferry__rt.code_hash);
	}
	m.resources = res;
	m.resources_count = n;
	memcpy(m.pg_id.bytes, key->pg, sizeof(m.pg_id.bytes));
	m.bundle_index = key->pg_bundle;
	m.placed = placed;
	m.strategy = key->strategy;
	memcpy(m.affinity_node.bytes, key->affinity.bytes, sizeof(m.affinity_node.bytes));
	m.affinity_soft = key->affinity_soft;
	if (key->locality_bytes) {
		memcpy(in.node_id.bytes, key->locality.bytes, sizeof(in.node_id.bytes));
		in.bytes = key->locality_bytes;
		m.inputs = &in;
		m.inputs_count = 1;
	}
	ret = ferry__wire_lease_request_build(&sub.fb, &m);
	if (ret >= 0)
		ret = ferry__conn_send(node, FERRY__WIRE_MSG_LEASE_REQUEST,
				       ferry__fb_builder_data(&sub.fb),
				       ferry__fb_builder_size(&sub.fb));
	if (ret >= 0)
		*request_id = m.request_id;
	return ret;
}

int ferry__rt_lease_send_detach(struct ferry__conn *node, uint64_t lease_id,
				const struct ferry_actor_id *actor)
{
	struct ferry__wire_lease_detach m = {.lease_id = lease_id};
	int ret;

	memcpy(m.actor_id.bytes, actor->bytes, sizeof(m.actor_id.bytes));
	ret = node ? ferry__wire_lease_detach_build(&sub.fb, &m) : -ENOTCONN;
	if (ret >= 0)
		ret = ferry__conn_send(node, FERRY__WIRE_MSG_LEASE_DETACH,
				       ferry__fb_builder_data(&sub.fb),
				       ferry__fb_builder_size(&sub.fb));
	return ret < 0 ? ret : 0;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void give_back_on(struct ferry__conn *node, uint64_t lease_id, bool busy,
			 const struct lease *l)
{
	struct ferry__wire_lease_return m = {.lease_id = lease_id, .busy = busy};

	if (l) { /* the node's mean task time (runtime.fbs LeaseReturn) */
		m.tasks = l->tasks_done;
		m.busy_us = l->busy_us;
	}
	if (!node || ferry__wire_lease_return_build(&sub.fb, &m) < 0)
		return;
	(void)ferry__conn_send(node, FERRY__WIRE_MSG_LEASE_RETURN, ferry__fb_builder_data(&sub.fb),
			       ferry__fb_builder_size(&sub.fb));
}

static void send_lease_return(struct lease *l)
{
	give_back_on(l->node, l->lease_id, l->ninflight > 0, l);
}

void ferry__rt_lease_give_back(struct ferry__conn *node, uint64_t lease_id, bool busy)
{
	give_back_on(node, lease_id, busy, NULL);
}

/* ---- classes ---- */

static struct cls *class_of(const struct ferry__rt_class_key *key)
{
	struct cls *c;

	for (c = sub.classes; c; c = c->next)
		if (!memcmp(&c->key, key, sizeof(*key)))
			return c;
	c = ferry__calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->key = *key;
	c->queue_tail = &c->queue;
	c->next = sub.classes;
	sub.classes = c;
	return c;
}

static struct ferry__rt_task *class_pop(struct cls *c)
{
	struct ferry__rt_task *t = c->queue;

	if (!t)
		return NULL;
	c->queue = t->next;
	if (!c->queue)
		c->queue_tail = &c->queue;
	c->queued--;
	t->next = NULL;
	return t;
}

/* Every queued task of @c fails with @status: its lease cannot be had. */
static void class_fail(struct cls *c, int status, const char *what)
{
	struct ferry__rt_task *t;
	char text[400];

	while ((t = class_pop(c))) {
		ferry__rt_task_error_text(t, &sub.node_id, what, text, sizeof(text));
		ferry__rt_task_fail(t, status, text);
	}
}

void ferry__rt_lease_enqueue(struct ferry__rt_task *t, bool front)
{
	struct cls *c = sub.stopping ? NULL : class_of(&t->key);

	if (!c) {
		ferry__rt_task_fail(t, sub.stopping ? -ECANCELED : -ENOMEM,
				    sub.stopping ? "the driver shut down" : "out of memory");
		return;
	}
	if (front) {
		t->next = c->queue;
		c->queue = t;
		if (!t->next)
			c->queue_tail = &t->next;
	} else {
		t->next = NULL;
		*c->queue_tail = t;
		c->queue_tail = &t->next;
	}
	/* SPREAD balances each burst: a class with nothing queued or in flight starts anew. */
	if (!c->queued && c->key.strategy == FERRY_SCHED_SPREAD) {
		bool busy = false;

		for (struct lease *l = c->leases; l; l = l->next)
			busy = busy || l->ninflight;
		for (struct lease *l = c->leases; l && !busy; l = l->next)
			l->pushed = 0;
	}
	c->queued++;
	if (!c->first_name[0])
		snprintf(c->first_name, sizeof(c->first_name), "%s", t->name);
	pump(c);
}

/* ---- the node's runtime socket ---- */

static void node_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len);
static void node_on_close(struct ferry__conn *conn, int err);

static const struct ferry__conn_callbacks node_cb = {
	.on_message = node_on_message,
	.on_close = node_on_close,
};

static int node_connect(void)
{
	struct ferry__conn_opts o = {.cb = &node_cb, .max_message_bytes = FRAME_MAX};
	struct ferry__rt_endpoint ep = {0};
	int ret;

	if (sub.node)
		return 0;
	/* A worker's owner line is a child's, on its node's Unix socket only (rt_srv.c). */
	if (ferry__rt.worker || ferry__rt_node_endpoint(ferry__rt.node_address, &sub.node_ep) < 0)
		if (snprintf(sub.node_ep.path, sizeof(sub.node_ep.path), "%.*s.rt",
			     (int)sizeof(sub.node_ep.path) - 4, ferry__rt.store_socket) < 0)
			return -EINVAL;
	ep = sub.node_ep;
	if (ferry__rt.worker)
		ep.port = 0;
	ret = ferry__rt_dial(ferry__rt.loop, &ep, &o, &sub.node);
	if (ret < 0) {
		FLOG_ERROR(COMP, "the node's runtime socket %s: %s", ep.path, ferry_strerror(ret));
		return ret;
	}
	sub.open_conns++;
	ret = ferry__rt_send_connect(sub.node);
	if (ret < 0)
		ferry__conn_close(sub.node);
	return ret;
}

static void fail_all_queued(int status, const char *what)
{
	for (struct cls *c = sub.classes; c; c = c->next) {
		memset(c->asks, 0, sizeof(c->asks));
		class_fail(c, status, what);
	}
}

static void on_connect_reply(const void *payload)
{
	struct ferry__wire_runtime_connect_reply_view v =
		ferry__wire_runtime_connect_reply_root_verified(payload);
	struct ferry__wire_unique_id id = ferry__wire_runtime_connect_reply_node_id(v);
	int status = ferry__wire_runtime_connect_reply_status(v);
	const char *m = ferry__wire_runtime_connect_reply_message(v);

	memcpy(sub.node_id.bytes, id.bytes, sizeof(id.bytes));
	if (status < 0) {
		FLOG_ERROR(COMP, "the node refused the driver: %s", m ? m : ferry_strerror(status));
		fail_all_queued(status, m ? m : "the node refused the driver");
		ferry__conn_close(sub.node);
	}
}

/* Another node refused us: what was asked there fails (its close follows). */
static void remote_connect_reply(struct ferry__conn *conn, const void *payload)
{
	struct ferry__wire_runtime_connect_reply_view v =
		ferry__wire_runtime_connect_reply_root_verified(payload);
	int status = ferry__wire_runtime_connect_reply_status(v);
	const char *m = ferry__wire_runtime_connect_reply_message(v);

	if (status >= 0)
		return;
	FLOG_ERROR(COMP, "a node its lease was placed on refused the driver: %s",
		   m ? m : ferry_strerror(status));
	ferry__conn_close(conn);
}

/* The class that sent @node request @request_id, and that request into *@ask. */
static struct cls *class_by_request(struct ferry__conn *node, uint64_t request_id,
				    struct lease_ask **ask)
{
	for (struct cls *c = sub.classes; c; c = c->next)
		for (size_t i = 0; request_id && i < MAX_LEASES; i++)
			if (c->asks[i].id == request_id && c->asks[i].node == node) {
				*ask = &c->asks[i];
				return c;
			}
	return NULL;
}

/* Lease IDs are per node: @node's lease @lease_id. */
static struct lease *lease_by_id(struct ferry__conn *node, uint64_t lease_id, struct cls **cls_out)
{
	for (struct cls *c = sub.classes; c; c = c->next)
		for (struct lease *l = c->leases; l; l = l->next)
			if (l->lease_id == lease_id && l->node == node) {
				*cls_out = c;
				return l;
			}
	return NULL;
}

static int lease_open(struct cls *c, struct ferry__conn *node, uint64_t lease_id,
		      const struct ferry__wire_unique_id *wid, const char *path, uint16_t port);

/*
 * "Retry at" (LeaseGrant -EXDEV): the request was placed on another node; it goes there with
 * placed set, over a connection kept per node (nodes.c). A placed request is never forwarded
 * again, so a second "retry at" is the node's protocol error, not a reason to travel on.
 */
static void retry_at(struct cls *c, struct lease_ask *a, struct ferry__wire_lease_grant_view v)
{
	struct ferry__wire_unique_id wid = ferry__wire_lease_grant_retry_node(v);
	const char *address = ferry__wire_lease_grant_retry_address(v);
	struct ferry__conn *conn = NULL;
	struct ferry_node_id node;
	char hex[40], what[400];
	int ret;

	memcpy(node.bytes, wid.bytes, sizeof(node.bytes));
	ferry_node_id_to_hex(&node, hex, sizeof(hex));
	if (a->placed) {
		a->id = 0;
		class_fail(c, -EPROTO, "a node forwarded a lease request that was placed on it");
		return;
	}
	ret = ferry__rt_nodes_get(&node, address, &node_cb, &conn);
	if (ret == 1) {
		sub.open_conns++;
		ret = ferry__rt_send_connect(conn);
	}
	if (ret >= 0) {
		a->node = conn;
		a->placed = true;
		ret = ask_on(conn, &c->key, true, &a->id);
	}
	if (ret < 0) {
		a->id = 0;
		snprintf(what, sizeof(what),
			 "its lease was placed on node %s (%s), not reachable: %s", hex,
			 address ? address : "no address", ferry_strerror(ret));
		FLOG_WARN(COMP, "%s", what);
		/* A node that died before ours heard: only hard affinity needs that node; the
		 * rest runs on ours (placed: not forwarded to the dead one again). */
		if (!(c->key.strategy == FERRY_SCHED_NODE_AFFINITY && !c->key.affinity_soft) &&
		    node_connect() >= 0) {
			a->node = sub.node;
			if (ask_on(sub.node, &c->key, true, &a->id) >= 0)
				return;
			a->id = 0;
		}
		class_fail(c, -EHOSTUNREACH, what);
		return;
	}
	FLOG_DEBUG(COMP, "lease request %" PRIu64 " placed on node %s", a->id, hex);
}

static void on_grant(struct ferry__conn *node, const void *payload)
{
	struct ferry__wire_lease_grant_view v = ferry__wire_lease_grant_root_verified(payload);
	struct lease_ask *a = NULL;
	struct cls *c = class_by_request(node, ferry__wire_lease_grant_request_id(v), &a);
	int status = ferry__wire_lease_grant_status(v);
	struct ferry__wire_unique_id wid = ferry__wire_lease_grant_worker_id(v);
	const char *m = ferry__wire_lease_grant_message(v);
	const char *path = ferry__wire_lease_grant_worker_path(v);
	uint16_t port = ferry__wire_lease_grant_worker_port(v);
	struct lease tmp = {.lease_id = ferry__wire_lease_grant_lease_id(v)};

	tmp.node = node;
	if (!c && ferry__rt_actor_grant(node, payload))
		return;
	if (!c) { /* a class that gave up (shutdown): the worker goes back */
		if (status == 0)
			send_lease_return(&tmp);
		return;
	}
	if (status == -EXDEV) {
		retry_at(c, a, v);
		return;
	}
	a->id = 0;
	if (status < 0) {
		FLOG_WARN(COMP, "lease refused: %s", m ? m : ferry_strerror(status));
		class_fail(c, status, m ? m : ferry_strerror(status));
		return;
	}
	if (!path || lease_open(c, node, tmp.lease_id, &wid, path, port) < 0) {
		send_lease_return(&tmp);
		class_fail(c, -ECONNREFUSED, "cannot connect to the leased worker");
		return;
	}
	pump(c);
}

static void on_revoked(struct ferry__conn *node, const void *payload)
{
	struct ferry__wire_lease_revoked_view v = ferry__wire_lease_revoked_root_verified(payload);
	int sig = ferry__wire_lease_revoked_term_signal(v);
	int code = ferry__wire_lease_revoked_exit_status(v);
	const char *m = ferry__wire_lease_revoked_message(v);
	struct cls *c = NULL;
	struct lease *l = lease_by_id(node, ferry__wire_lease_revoked_lease_id(v), &c);
	char why[sizeof(l->why)];

	if (sig > 0)
		snprintf(why, sizeof(why), "worker died: killed by signal %d (SIG%s)", sig,
			 sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
	else if (m && *m)
		snprintf(why, sizeof(why), "worker died: %s", m);
	else
		snprintf(why, sizeof(why), "worker died: exited with status %d", code);
	if (!l) {
		ferry__rt_actor_revoked(node, ferry__wire_lease_revoked_lease_id(v), why);
		return;
	}
	l->revoked = true;
	l->closing = true;
	memcpy(l->why, why, sizeof(why));
	if (l->conn)
		ferry__conn_close(l->conn); /* lease_gone() follows from its on_close */
	else
		lease_gone(l);
}

/*
 * The worker bounces what came behind task @after (all that is in flight when @after is not:
 * its reply came, and every task in flight came after it) until our TasksRecalled of wait
 * @wait_id: those tasks go first in the class's queue again, in their order, no retry spent.
 */
static void take_back(struct lease *l, const struct ferry_task_id *after, uint64_t wait_id)
{
	struct ferry__wire_tasks_recalled m = {.wait_id = wait_id};
	struct ferry__rt_task **pp = &l->inflight, *rest, *last = NULL;
	struct cls *c = l->cls;
	size_t n = 0;
	int ret;

	l->recalled = wait_id;
	if (!l->conn || sub.stopping)
		return; /* its tasks end with the socket */
	for (struct ferry__rt_task *t = l->inflight; after && t; t = t->next)
		if (ferry_task_id_eq(&t->id, after)) {
			pp = &t->next;
			break;
		}
	rest = *pp;
	*pp = NULL;
	l->inflight_tail = pp;
	for (struct ferry__rt_task *t = rest; t; t = t->next, n++)
		last = t;
	if (rest) {
		last->next = c->queue;
		if (!c->queue)
			c->queue_tail = &last->next;
		c->queue = rest;
		c->queued += n;
		l->ninflight -= (uint32_t)n;
	}
	ret = ferry__wire_tasks_recalled_build(&sub.fb, &m);
	if (ret >= 0)
		ret = ferry__rt_ring_send(l->ring, l->conn, FERRY__WIRE_MSG_TASKS_RECALLED,
					  ferry__fb_builder_data(&sub.fb),
					  ferry__fb_builder_size(&sub.fb));
	if (ret < 0) { /* the worker would bounce whatever comes next: this lease is done */
		FLOG_WARN(COMP, "cannot send TasksRecalled to a leased worker: %s: closing it",
			  ferry_strerror(ret));
		l->closing = true;
		ferry__conn_close(l->conn);
	}
	FLOG_DEBUG(COMP,
		   "lease %" PRIu64 ": its task waits (wait %" PRIu64 "), %zu task%s behind "
		   "it taken back",
		   l->lease_id, wait_id, n, n == 1 ? "" : "s");
}

/* A lease's task waits (or runs again): no pushes to it meanwhile; what it holds behind the
 * waiting task comes back (a wait not recalled yet) and goes elsewhere. */
static void on_blocked(struct ferry__conn *node, const void *payload)
{
	struct ferry__wire_lease_blocked_view v = ferry__wire_lease_blocked_root_verified(payload);
	struct ferry__wire_unique_id tid = ferry__wire_lease_blocked_task_id(v);
	uint64_t wait_id = ferry__wire_lease_blocked_wait_id(v);
	struct ferry_task_id after;
	struct cls *c = NULL;
	struct lease *l = lease_by_id(node, ferry__wire_lease_blocked_lease_id(v), &c);

	if (!l)
		return; /* ended meanwhile, or an actor's (its calls wait in order, as Ray's do) */
	l->blocked = ferry__wire_lease_blocked_blocked(v);
	memcpy(after.bytes, tid.bytes, sizeof(after.bytes));
	if (l->blocked && wait_id > l->recalled)
		take_back(l, &after, wait_id);
	pump(c);
}

static void node_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	(void)len;
	switch (type) {
	case FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY:
		if (conn == sub.node)
			on_connect_reply(payload);
		else
			remote_connect_reply(conn, payload);
		break;
	case FERRY__WIRE_MSG_LEASE_GRANT:
		on_grant(conn, payload);
		break;
	case FERRY__WIRE_MSG_LEASE_REVOKED:
		on_revoked(conn, payload);
		break;
	case FERRY__WIRE_MSG_LEASE_BLOCKED:
		on_blocked(conn, payload);
		break;
	default:
		FLOG_WARN(COMP, "the node sent an unexpected %s", ferry__wire_message_name(type));
		break;
	}
}

/* A LeaseGrant, LeaseRevoked or LeaseBlocked that came on a placement group node's socket
 * (pg.c keeps those). */
void ferry__rt_lease_node_message(struct ferry__rt_pg_node *via, uint16_t type, const void *payload)
{
	struct ferry__conn *conn = ferry__rt_pg_node_conn(via);

	if (!conn)
		return;
	if (type == FERRY__WIRE_MSG_LEASE_GRANT)
		on_grant(conn, payload);
	else if (type == FERRY__WIRE_MSG_LEASE_REVOKED)
		on_revoked(conn, payload);
	else if (type == FERRY__WIRE_MSG_LEASE_BLOCKED)
		on_blocked(conn, payload);
}

/* Another node's runtime socket closed (it died, issue 24): what was asked or leased there is
 * over. A request placed there is asked again of our node, which places it anew (soft affinity
 * and spillback: elsewhere; hard affinity: fails, retry_at); a dead worker's tasks that wait
 * for a LeaseRevoked that cannot come any more go at once. */
static void remote_closed(struct ferry__conn *conn, int err)
{
	sub.open_conns--;
	ferry__rt_actor_conn_gone(conn, true);
	for (struct cls *c = sub.classes; c; c = c->next) {
		struct lease *l, *next;

		for (l = c->leases; l; l = next) {
			next = l->next;
			if (l->node != conn)
				continue;
			l->node = NULL; /* its worker's socket tells the rest */
			if (!l->why[0])
				snprintf(l->why, sizeof(l->why), "its node closed: %s",
					 ferry_strerror(err ? err : -ECONNRESET));
			if (!l->conn)
				lease_gone(l); /* waited for the revoke */
		}
		bool lost = false;

		for (size_t i = 0; i < MAX_LEASES; i++)
			if (c->asks[i].id && c->asks[i].node == conn) {
				c->asks[i].id = 0;
				lost = true;
			}
		if (lost) {
			FLOG_INFO(COMP, "a lease request's node closed (%s): asked again",
				  ferry_strerror(err ? err : -ECONNRESET));
			pump(c);
		}
	}
}

void ferry__rt_lease_node_dead(const struct ferry_node_id *id)
{
	struct ferry__conn *node = ferry__rt_nodes_find(id);
	char hex[40];

	ferry__rt_nodes_mark_dead(id);
	ferry_node_id_to_hex(id, hex, sizeof(hex));
	if (node)
		FLOG_WARN(COMP, "node %s is dead: its leases end, their tasks go elsewhere", hex);
	for (struct cls *c = sub.classes; node && c; c = c->next)
		for (struct lease *l = c->leases; l; l = l->next)
			if (l->node == node) {
				snprintf(l->why, sizeof(l->why), "node %s died", hex);
				/* No more pushes, the lost returns' reruns included. */
				l->closing = true;
				if (l->conn)
					ferry__conn_close(l->conn); /* worker_on_close: retries */
			}
	ferry__rt_actor_node_dead(id);
	if (node)
		ferry__conn_close(node); /* remote_closed: requests asked again */
	ferry__rt_lineage_node_dead(id);
}

void ferry__rt_lease_conn_gone(const struct ferry__conn *conn)
{
	ferry__rt_actor_conn_gone(conn, false);
	for (struct cls *c = sub.classes; c; c = c->next) {
		for (struct lease *l = c->leases; l; l = l->next)
			if (l->node == conn)
				l->node = NULL;
		for (size_t i = 0; i < MAX_LEASES; i++)
			if (c->asks[i].node ==
			    conn) { /* its answer cannot come: asked again at need */
				c->asks[i].node = NULL;
				c->asks[i].id = 0;
			}
	}
}

static void node_on_close(struct ferry__conn *conn, int err)
{
	if (ferry__rt_nodes_forget(conn)) {
		remote_closed(conn, err);
		return;
	}
	/* Its leases give nothing back there any more (the connection is freed after this). */
	ferry__rt_lease_conn_gone(conn);
	sub.node = NULL;
	sub.open_conns--;
	/* In a worker this is its node stopping (the worker exits when its main line closes too):
	 * no news for the user. A driver has lost its node. */
	if (err && !sub.stopping && ferry__rt.worker)
		FLOG_DEBUG(COMP, "the node's runtime socket closed: %s", ferry_strerror(err));
	else if (err && !sub.stopping)
		FLOG_ERROR(COMP, "the node's runtime socket closed: %s", ferry_strerror(err));
	fail_all_queued(err ? err : -ECONNRESET, "the node closed the driver's connection");
	ferry__rt_actor_node_gone();
}

/* ---- leased workers ---- */

static void worker_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len);
static void worker_on_close(struct ferry__conn *conn, int err);

static const struct ferry__conn_callbacks worker_cb = {
	.on_message = worker_on_message,
	.on_close = worker_on_close,
};

void ferry__rt_worker_endpoint(const char *path, uint16_t port, struct ferry__rt_endpoint *out)
{
	ferry__rt_worker_endpoint_at(&sub.node_ep, path, port, out);
}

void ferry__rt_worker_endpoint_at(const struct ferry__rt_endpoint *node, const char *path,
				  uint16_t port, struct ferry__rt_endpoint *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->path, sizeof(out->path), "%s", path ? path : "");
	snprintf(out->host, sizeof(out->host), "%s", node->host);
	if (port && node->ip[0]) { /* the worker listens on its node's ip */
		snprintf(out->ip, sizeof(out->ip), "%s", node->ip);
		out->port = port;
	}
}

/* Take @l off its class's leases. */
static void class_unlink(struct cls *c, struct lease *l)
{
	for (struct lease **pp = &c->leases; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			c->nleases--;
			break;
		}
}

/* Take parked @l off the parked list (its timer stopped). */
static void unlink_parked(struct lease *l)
{
	for (struct lease **pp = &sub.parked; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	if (!l->closing)
		sub.nparked--;
	(void)ferry__loop_timer_stop(&l->idle);
}

/* Close parked @l's socket. It stays listed (closing, not counted) until worker_on_close
 * frees it, or ferry__rt_sub_fini if the loop ends first. */
static void drop_parked(struct lease *l)
{
	if (l->closing)
		return;
	(void)ferry__loop_timer_stop(&l->idle);
	l->closing = true;
	sub.nparked--;
	ferry__conn_close(l->conn);
}

/* The parked lease of worker @wid, taken off the parked list, or NULL. */
static struct lease *unpark(const struct ferry__wire_unique_id *wid)
{
	for (struct lease *l = sub.parked; l; l = l->next)
		if (!l->closing && !memcmp(l->worker.bytes, wid->bytes, sizeof(l->worker.bytes))) {
			unlink_parked(l);
			return l;
		}
	return NULL;
}

static void park_due(struct ferry__loop_timer *timer, int status)
{
	if (status >= 0)
		drop_parked(timer->data);
}

/* Given back: keep its socket for the worker's next lease, or close it. */
static void park(struct lease *l)
{
	struct cls *c = l->cls;

	if (l->recalled || l->blocked || l->ninflight || !l->conn || sub.stopping ||
	    ferry__loop_timer_start(ferry__rt.loop, &l->idle, PARK_MS, 0, park_due) < 0) {
		l->closing = true;
		ferry__conn_close(l->conn); /* lease_gone() follows */
		return;
	}
	class_unlink(c, l);
	l->cls = NULL; /* parked */
	l->node = NULL;
	l->next = sub.parked;
	sub.parked = l;
	if (++sub.nparked > PARKED_MAX) { /* the oldest goes */
		struct lease *oldest = NULL;

		for (struct lease *p = sub.parked; p; p = p->next)
			if (!p->closing)
				oldest = p;
		drop_parked(oldest);
	}
	pump(c);
}

/* A new socket to the leased worker into @l (RuntimeConnect sent, a ring offered). */
static int lease_dial(struct lease *l, struct ferry__conn *node, const char *path, uint16_t port)
{
	struct ferry__conn_opts o = {.cb = &worker_cb, .max_message_bytes = FRAME_MAX, .data = l};
	struct ferry__rt_endpoint node_ep, ep;
	int ret;

	/* The worker listens where the node that granted it does: ours, or one placed on. */
	if (node == sub.node || ferry__rt_nodes_endpoint(node, &node_ep) < 0)
		node_ep = sub.node_ep;
	ferry__rt_worker_endpoint_at(&node_ep, path, port, &ep);
	ret = ferry__rt_dial(ferry__rt.loop, &ep, &o, &l->conn);
	if (ret < 0) {
		FLOG_ERROR(COMP, "leased worker %s: %s", path, ferry_strerror(ret));
		return ret;
	}
	sub.open_conns++;
	__atomic_fetch_add(&leases_dialled, 1, __ATOMIC_RELAXED);
	(void)ferry__rt_send_connect(l->conn);	  /* a failure shows as the socket's close */
	if (ferry__rt_ring_enabled() && ret == 0) /* rings are shared memory: Unix only */
		(void)ferry__rt_ring_offer(ferry__rt.loop, l->conn, worker_on_message, &l->ring);
	return 0;
}

static int lease_open(struct cls *c, struct ferry__conn *node, uint64_t lease_id,
		      const struct ferry__wire_unique_id *wid, const char *path, uint16_t port)
{
	struct lease *l = unpark(wid);
	int ret;

	if (l) { /* its socket is open and greeted, its ring set up */
		struct ferry__conn *conn = l->conn;
		struct ferry__rt_ring *ring = l->ring;

		memset(l, 0, sizeof(*l));
		l->conn = conn;
		l->ring = ring;
		__atomic_fetch_add(&leases_reused, 1, __ATOMIC_RELAXED);
	} else if (!(l = ferry__calloc(1, sizeof(*l)))) {
		return -ENOMEM;
	} else if ((ret = lease_dial(l, node, path, port)) < 0) {
		ferry__free(l);
		return ret;
	}
	l->cls = c;
	l->node = node;
	l->lease_id = lease_id;
	memcpy(l->worker.bytes, wid->bytes, sizeof(l->worker.bytes));
	l->inflight_tail = &l->inflight;
	l->idle.data = l;
	l->revoke.data = l;
	l->next = c->leases;
	c->leases = l;
	c->nleases++;
	return 0;
}

static void idle_due(struct ferry__loop_timer *timer, int status)
{
	struct lease *l = timer->data;

	if (status < 0 || l->ninflight || l->cls->queued || !l->conn)
		return;
	send_lease_return(l);
	park(l);
}

static int push_one(struct lease *l, struct ferry__rt_task *t)
{
	int ret = ferry__rt_task_build(t, &sub.fb);

	if (ret >= 0)
		ret = ferry__rt_ring_send(l->ring, l->conn, FERRY__WIRE_MSG_PUSH_TASK,
					  ferry__fb_builder_data(&sub.fb),
					  ferry__fb_builder_size(&sub.fb));
	if (ret < 0)
		return ret;
	t->next = NULL;
	t->pushed_us = now_us();
	ferry__rt_tev_record(t, FERRY_GCS_TASK_SCHEDULED, NULL, &l->worker);
	l->pushed++;
	*l->inflight_tail = t;
	l->inflight_tail = &t->next;
	l->ninflight++;
	return 0;
}

/*
 * Tasks in flight per lease for @c: enough to hide the push/reply round trip behind about
 * PIPELINE_WORK_US of work, no more, so that the rest wait in the class's queue, where a new
 * lease (maybe on another node) can take them. Tiny tasks fill the pipeline; tasks of 2 ms
 * or more go one at a time; one at a time until the first reply says how long they take.
 */
static uint32_t depth(const struct cls *c)
{
	uint64_t mean;

	if (!c->tasks_done)
		return 1;
	mean = c->busy_us / c->tasks_done;
	if (mean * PIPELINE <= PIPELINE_WORK_US)
		return PIPELINE;
	return mean >= PIPELINE_WORK_US ? 1 : (uint32_t)(PIPELINE_WORK_US / mean);
}

static bool usable(const struct lease *l)
{
	return l->conn && !l->closing && !l->blocked;
}

static void push_or_fail(struct lease *l, struct ferry__rt_task *t)
{
	int ret = push_one(l, t);

	if (ret < 0) {
		char text[400];

		ferry__rt_task_error_text(t, &sub.node_id, ferry_strerror(ret), text, sizeof(text));
		ferry__rt_task_fail(t, ret, text);
	}
}

/* The tasks @c pushed to the leases of @l's node so far. */
static uint64_t node_pushed(const struct cls *c, const struct lease *l)
{
	uint64_t n = 0;

	for (const struct lease *o = c->leases; o; o = o->next)
		n += o->node == l->node ? o->pushed : 0;
	return n;
}

/*
 * SPREAD: the scheduler spread the class's leases over the nodes; its tasks are spread over
 * the nodes holding them, one in flight per lease, each to an idle lease of the node that has
 * had the fewest of this burst, so that every node runs as many (a lease that pipelined
 * whatever came would take nearly all of them). A node whose tasks end sooner (short tasks
 * on our own node, through shared memory) would still take more: one too far ahead of the
 * least waits (SPREAD_AHEAD_MIN); a reply pumps again. O(leases^2) a task, leases <=
 * MAX_LEASES.
 */
static void pump_spread(struct cls *c)
{
	while (c->queued) {
		struct lease *best = NULL;
		uint64_t best_n = 0, least = UINT64_MAX;

		for (struct lease *l = c->leases; l; l = l->next) {
			uint64_t n;

			if (!usable(l))
				continue;
			n = node_pushed(c, l);
			least = n < least ? n : least;
			if (l->ninflight)
				continue;
			if (!best || n < best_n) {
				best = l;
				best_n = n;
			}
		}
		if (!best || best_n >= least + FERRY_MAX((uint64_t)SPREAD_AHEAD_MIN,
							 least / SPREAD_AHEAD_DIV))
			return;
		push_or_fail(best, class_pop(c));
	}
}

/* Give @c's queued tasks to its leases, ask for another lease if they are not enough. */
static void pump(struct cls *c)
{
	bool spread = c->key.strategy == FERRY_SCHED_SPREAD;
	uint32_t most = spread ? 1 : depth(c);
	size_t open = 0;

	if (spread)
		pump_spread(c);
	for (struct lease *l = c->leases; l; l = l->next) {
		if (!usable(l))
			continue;
		open++;
		while (!spread && c->queued && l->ninflight < most)
			push_or_fail(l, class_pop(c));
		if (l->ninflight)
			(void)ferry__loop_timer_stop(&l->idle);
		else if (!c->queued)
			(void)ferry__loop_timer_start(ferry__rt.loop, &l->idle,
						      FERRY__RT_LEASE_IDLE_MS, 0, idle_due);
	}
	/* Blocked leases do not count against the cap: their CPU is lent to the next one.
	 * SPREAD asks for its leases at once, not one after the other: the scheduler places each
	 * on the emptiest node, and a burst of short tasks no longer ends on the first node's
	 * lease before the others come. No more asks than queued tasks. */
	for (;;) {
		struct lease_ask *a;
		size_t asking = asks_in_flight(c, &a);

		if (!c->queued || sub.stopping || !a || asking >= (spread ? MAX_LEASES : 1) ||
		    asking >= c->queued || open + asking >= MAX_LEASES)
			return;
		if (send_lease_request(c, a) < 0) {
			a->id = 0;
			class_fail(c, -ECONNREFUSED, "cannot reach the node's runtime socket");
			return;
		}
	}
}

static struct ferry__rt_task *inflight_take(struct lease *l, const struct ferry_task_id *id)
{
	return ferry__rt_task_take(&l->inflight, &l->inflight_tail, &l->ninflight, id);
}

/* A task the worker did not run (runtime.fbs: PushTaskReply.bounced_wait). Taken back
 * already when its wait was recalled (a later copy of it may be in flight: left alone). Else
 * the node did not pass that wait on: the waiting task's reply came before this one, so every
 * task in flight came after it and is bounced too: all come back now. */
static void on_bounce(struct lease *l, uint64_t wait_id)
{
	if (wait_id <= l->recalled)
		return;
	FLOG_DEBUG(COMP, "lease %" PRIu64 ": a task bounced before its wait %" PRIu64 " was known",
		   l->lease_id, wait_id);
	take_back(l, NULL, wait_id);
	pump(l->cls);
}

/* A worker runs its socket's tasks in order: @t started at its push or at the reply before
 * it, whichever came later, and ended now. */
static void count_task_time(struct lease *l, const struct ferry__rt_task *t)
{
	uint64_t now = now_us();
	uint64_t start = t->pushed_us > l->last_reply_us ? t->pushed_us : l->last_reply_us;

	l->busy_us += now > start ? now - start : 0;
	l->tasks_done++;
	l->last_reply_us = now;
	l->cls->busy_us += now > start ? now - start : 0;
	l->cls->tasks_done++;
}

static void on_push_reply(struct lease *l, const void *payload)
{
	struct ferry_task_id id;
	struct ferry__wire_push_task_reply_view v = ferry__rt_push_reply_view(payload, &id);
	uint64_t bounced = ferry__wire_push_task_reply_bounced_wait(v);
	struct ferry__rt_task *t;

	if (bounced) {
		on_bounce(l, bounced);
		return;
	}
	t = inflight_take(l, &id);
	if (!t) {
		FLOG_WARN(COMP, "a worker answered a task it was not given");
		return;
	}
	count_task_time(l, t);
	if (ferry__rt_task_reply(t, v) == 1)
		ferry__rt_lease_enqueue(t, true); /* retry_exceptions */
	else
		pump(l->cls);
}

static void worker_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len)
{
	struct lease *l = ferry__conn_data(conn);

	if (!ferry__rt_ring_on_socket(l->ring, conn, type))
		return;
	if (!l->cls && type != FERRY__WIRE_MSG_RING_SETUP_REPLY) { /* parked */
		FLOG_WARN(COMP, "worker %s sent %s with no lease: closing its socket",
			  ferry__conn_peer(conn), ferry__wire_message_name(type));
		/* Closing, so no lease takes it before its on_close frees it (unpark). */
		drop_parked(l);
		return;
	}
	if (type == FERRY__WIRE_MSG_RING_SETUP_REPLY) {
		(void)ferry__rt_ring_setup_reply(&l->ring, payload, len);
	} else if (type == FERRY__WIRE_MSG_PUSH_TASK_REPLY) {
		on_push_reply(l, payload);
	} else { /* a worker greets an owner without a reply (runtime/worker.c) */
		FLOG_WARN(COMP, "a worker sent an unexpected %s", ferry__wire_message_name(type));
	}
}

/* The lease is over: its tasks in flight are retried or fail with why it ended; freed. */
static void lease_gone(struct lease *l)
{
	struct cls *c = l->cls;
	struct ferry__rt_task *t;

	(void)ferry__loop_timer_stop(&l->idle);
	(void)ferry__loop_timer_stop(&l->revoke);
	while ((t = l->inflight)) {
		char text[400];

		l->inflight = t->next;
		if (t->retries_left > 0 && !sub.stopping) {
			t->retries_left--;
			t->attempt++;
			ferry__rt_lease_enqueue(t, true);
			continue;
		}
		ferry__rt_task_error_text(t, &sub.node_id, l->why[0] ? l->why : "worker died", text,
					  sizeof(text));
		ferry__rt_task_fail(t, sub.stopping ? -ECANCELED : -EPIPE, text);
	}
	class_unlink(c, l);
	ferry__free(l);
	pump(c);
}

static void revoke_due(struct ferry__loop_timer *timer, int status)
{
	(void)status;
	lease_gone(timer->data);
}

/* Tasks with retries left go again at once; the rest wait for the node to say why. */
static void worker_on_close(struct ferry__conn *conn, int err)
{
	struct lease *l = ferry__conn_data(conn);
	struct ferry__rt_task *t, *keep = NULL, **keep_tail = &keep;

	ferry__rt_ring_close(l->ring);
	l->ring = NULL;
	l->conn = NULL;
	sub.open_conns--;
	if (!l->cls) { /* parked; closed by us (drop_parked) or by the worker's end */
		unlink_parked(l);
		ferry__free(l);
		return;
	}
	/* No node (it died first): no LeaseRevoked will come. */
	if (!l->ninflight || l->revoked || sub.stopping || err == -ECANCELED || !l->node) {
		lease_gone(l);
		return;
	}
	while ((t = l->inflight)) {
		l->inflight = t->next;
		l->ninflight--;
		if (t->retries_left > 0) {
			t->retries_left--;
			t->attempt++;
			ferry__rt_lease_enqueue(t, true);
		} else {
			t->next = NULL;
			*keep_tail = t;
			keep_tail = &t->next;
			l->ninflight++;
		}
	}
	l->inflight = keep;
	l->inflight_tail = keep ? keep_tail : &l->inflight;
	if (!keep ||
	    ferry__loop_timer_start(ferry__rt.loop, &l->revoke, REVOKE_WAIT_MS, 0, revoke_due) < 0)
		lease_gone(l);
}

int ferry__rt_sub_connect(void *arg)
{
	(void)arg;
	return node_connect();
}

int ferry__rt_sub_send_blocked(bool blocked, const struct ferry_task_id *task, uint64_t wait_id)
{
	struct ferry__wire_worker_blocked m = {.blocked = blocked, .wait_id = wait_id};
	int ret = node_connect();

	if (task)
		memcpy(m.task_id.bytes, task->bytes, sizeof(m.task_id.bytes));
	if (ret >= 0)
		ret = ferry__wire_worker_blocked_build(&sub.fb, &m);
	if (ret >= 0)
		ret = ferry__conn_send(sub.node, FERRY__WIRE_MSG_WORKER_BLOCKED,
				       ferry__fb_builder_data(&sub.fb),
				       ferry__fb_builder_size(&sub.fb));
	return ret < 0 ? ret : 0;
}

/* ---- life ---- */

int ferry__rt_sub_init(void)
{
	memset(&sub, 0, sizeof(sub));
	ferry__fb_builder_init(&sub.fb);
	ferry__rt_actor_init();
	ferry__rt_pg_init();
	ferry__rt.sub = &sub;
	return 0;
}

/* Loop thread (ferry__loop_call): end what is queued, give leases back, close sockets. */
int ferry__rt_sub_stop(void *arg)
{
	(void)arg;
	sub.stopping = true;
	ferry__rt_submit_cancel();
	ferry__rt_actor_stop();
	ferry__rt_pg_stop();
	fail_all_queued(-ECANCELED, "the driver shut down");
	for (struct cls *c = sub.classes; c; c = c->next)
		for (struct lease *l = c->leases; l; l = l->next) {
			send_lease_return(l);
			l->closing = true;
			if (l->conn)
				ferry__conn_close(l->conn);
		}
	for (struct lease *l = sub.parked; l; l = l->next)
		drop_parked(l);
	if (sub.node)
		ferry__conn_flush(sub.node);
	ferry__rt_nodes_flush();
	return 0;
}

/* Loop thread: the LeaseReturns are written (or the socket is gone): close it. */
int ferry__rt_sub_close_node(void *arg)
{
	(void)arg;
	if (((sub.node && ferry__conn_queued_bytes(sub.node)) || ferry__rt_nodes_queued_bytes()) &&
	    arg == NULL)
		return 1; /* still writing: ask again */
	if (sub.node)
		ferry__conn_close(sub.node);
	ferry__rt_nodes_close_all();
	return 0;
}

/* Loop thread: sockets whose on_close has not come yet. */
int ferry__rt_sub_open_conns(void *arg)
{
	(void)arg;
	return (int)(sub.open_conns + ferry__rt_actor_open_conns() + ferry__rt_pg_open_conns());
}

void ferry__rt_lease_counts(uint64_t *dialled, uint64_t *reused)
{
	*dialled = __atomic_load_n(&leases_dialled, __ATOMIC_RELAXED);
	*reused = __atomic_load_n(&leases_reused, __ATOMIC_RELAXED);
}

const struct ferry_node_id *ferry__rt_sub_node_id(void)
{
	return &sub.node_id;
}

void ferry__rt_sub_fini(void)
{
	while (sub.classes) {
		struct cls *c = sub.classes;

		sub.classes = c->next;
		while (c->leases) { /* only if the loop ended before their on_close */
			struct lease *l = c->leases;

			c->leases = l->next;
			ferry__free(l);
		}
		ferry__free(c);
	}
	while (sub.parked) {
		struct lease *l = sub.parked;

		sub.parked = l->next;
		ferry__free(l);
	}
	ferry__rt_nodes_fini();
	ferry__fb_builder_fini(&sub.fb);
	ferry__rt_actor_fini();
	ferry__rt_pg_fini();
	ferry__rt_intern_fini(); /* no class key is read after this */
	ferry__rt.sub = NULL;
}
