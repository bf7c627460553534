/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Actors on the caller's side (include/ferry/runtime.h): create, call, kill, named lookup, and
 * the actor's life in the GCS's actors table (PENDING, ALIVE on node and worker, RESTARTING,
 * DEAD with why). The worker's side is worker_actor.c; schema/runtime.fbs the protocol.
 *
 * DESIGN
 * - The owner (the process that created the actor) asks for a lease of the actor's resources
 *   as a task class does (lease.c): its node places it by the actor's strategy, perhaps on
 *   another node ("retry at", then asked there, placed), and the owner keeps it for the
 *   actor's life, remembering the node connection that granted it (lease_node: LeaseReturn,
 *   LeaseDetach and LeaseRevoked go to and come from there). The actor's worker is dedicated
 *   to it. It connects to the worker, sends ActorCreate (the constructor and its arguments,
 *   kept for restarts) and then pushes calls (ActorCall) straight to it, pipelined: the
 *   worker runs one socket's frames in order, so calls run in the order made.
 * - Calls wait in the actor's queue while it is PENDING or RESTARTING, and while the call at
 *   its head waits for a ref argument (a later call never overtakes an earlier one).
 * - The worker dies (its socket closes): the calls in flight fail with -EPIPE and the reason
 *   the node's LeaseRevoked gives (waited for up to REVOKE_WAIT_MS); then the actor restarts
 *   on a new lease (the constructor rerun with its original arguments) while restarts are
 *   left, else it is DEAD and every call fails at once with -ESRCH. Calls in flight with a
 *   run left (max_task_retries) go back to the front of the queue instead. A node that dies
 *   (its connection closes, or the GCS says so: ferry__rt_actor_conn_gone, _node_dead) is
 *   the reason, named, and the restart is placed anew.
 * - Detached actors (Ray's lifetime="detached"): the owner sends LeaseDetach with each grant,
 *   so the node keeps the lease when the owner's connection closes, and ActorCreate says so,
 *   so the worker keeps the actor when the owner's socket closes; the GCS record has no
 *   owner. The owner's shutdown leaves such an actor ALIVE (leave()). Any handle may kill it:
 *   the killer records it DEAD; the worker tells the owner if it still runs (an ActorKillReply
 *   it did not ask for: it gives the lease back), else exits so the node takes the lease back.
 * - A handle from ferry_actor_get_named() (a caller that is not the owner) connects to the
 *   worker the GCS names: on this host a worker's socket is a function of its ID
 *   (ferry__worker_listen_path). When that socket closes it asks the GCS again (asynchronously,
 *   the answer posted to the loop) until the actor is ALIVE elsewhere or DEAD.
 * - Threads: the public calls (actor_api.c) run on the caller's thread and post their work
 *   here; everything about an actor is the loop thread's, but for its incoming calls and its
 *   blocked flag (ferry__rt.lock).
 * - Records: one per handle. A record whose handle was dropped (a release posted after any
 *   kill of that handle) is freed once the actor is DEAD and nothing names it any more: no
 *   socket whose on_close is to come, no GCS lookup or lease request in flight, no timer, no
 *   call on its way; a sweep (a post-queue kick, run at the top of a loop pass, never inside
 *   the callbacks that got it there) looks. A named handle's record (the actor lives on, its
 *   owner's) is let go once its calls are answered: its socket closes, it counts as DEAD here
 *   alone. What is left (an owned detached actor's) is freed at shutdown
 *   (ferry__rt_actor_fini), after the loop stopped.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/postq.h"
#include "runtime/actor.h"
#include "runtime/dial.h"
#include "runtime/ring.h"
#include "runtime/rt.h"
#include "runtime/task.h"
#include "runtime/worker.h"
#include "transport/objmgr.h"

#define COMP "runtime"
#define PIPELINE 1024	      /* calls in flight per actor */
#define REVOKE_WAIT_MS 1000   /* how long a dead worker's calls wait for the reason */
#define RESOLVE_MS 20	      /* a named handle asks the GCS again after this */
#define RESOLVE_TRIES 500     /* ... this many times (10 s) before the actor counts as lost */
#define FRAME_MAX (64u << 20) /* runtime.fbs: the receiver's frame cap */
#define BUSY_RETRIES 8	      /* leases asked again when the worker still hosts an actor */

static struct ferry__rt_actor *actors; /* the loop's list (freed at fini) */
static unsigned open_conns;	       /* sockets whose on_close has not come */
static bool stopping;		       /* shutdown began (loop thread) */
static struct ferry__fb_builder fb;
static bool fb_ready;
/* Under ferry__rt.lock: */
static unsigned nblocked;	    /* actors whose head call waits for an argument */
static bool repump_posted;	    /* a post to look at them again is on its way */
static bool posts_closed;	    /* shutdown: GCS answers are not posted any more */
static struct ferry__postq sweep_q; /* kicked: free the released dead records */
static atomic_uint records;	    /* allocated, not freed (ferry__rt_actor_records) */

static void pump(struct ferry__rt_actor *a);
static void worker_died(struct ferry__rt_actor *a);

static void let_go(struct ferry__rt_actor *a);

/* A record that may be done with: have the sweep look (after this pass's callbacks). */
static void sweep_soon(struct ferry__rt_actor *a)
{
	if (a->released && a->state == FERRY_GCS_ACTOR_DEAD && !stopping)
		(void)ferry__postq_kick(&sweep_q);
}

/* ---- GCS (answers on the GCS client's thread: only logged) ---- */

static void gcs_done(void *arg, int status, void *result)
{
	(void)arg;
	if (status < 0 && status != -ECANCELED)
		FLOG_WARN(COMP, "the GCS's actors table: %s", ferry_strerror(status));
	ferry_gcs_free(result);
}

static void gcs_update(struct ferry__rt_actor *a, enum ferry_gcs_actor_state state,
		       enum ferry_gcs_exit cause, const char *message)
{
	int ret;

	if (!a->owned || !ferry__rt.gcs)
		return;
	if (state == FERRY_GCS_ACTOR_RESTARTING && !a->gcs_alive)
		return; /* PENDING -> RESTARTING is not a transition: it stays PENDING */
	ret = ferry_gcs_actor_update_async(ferry__rt.gcs, &a->id, state, &a->node, &a->worker,
					   cause, message, gcs_done, NULL);
	if (ret < 0)
		FLOG_WARN(COMP, "cannot update the actors table: %s", ferry_strerror(ret));
	a->gcs_alive = state == FERRY_GCS_ACTOR_ALIVE;
}

/* ---- helpers ---- */

static const char *node_hex(const struct ferry__rt_actor *a, char *buf, size_t size)
{
	const struct ferry_node_id *n = ferry_id_is_nil(a->node.bytes, sizeof(a->node.bytes))
						? ferry__rt_sub_node_id()
						: &a->node;

	snprintf(buf, size, "?");
	if (!ferry_id_is_nil(n->bytes, sizeof(n->bytes)))
		ferry_node_id_to_hex(n, buf, size);
	return buf;
}

static void fail_call(struct ferry__rt_actor *a, struct ferry__rt_task *t, int status,
		      const char *what)
{
	char text[600];

	ferry__rt_task_error_text(t, &a->node, what, text, sizeof(text));
	ferry__rt_task_fail(t, status, text);
}

static void fail_list(struct ferry__rt_actor *a, struct ferry__rt_task *list, int status,
		      const char *what)
{
	while (list) {
		struct ferry__rt_task *t = list;

		list = t->next;
		fail_call(a, t, status, what);
	}
}

static void set_blocked(struct ferry__rt_actor *a, bool blocked)
{
	if (a->blocked == blocked)
		return;
	a->blocked = blocked;
	if (blocked)
		nblocked++;
	else
		nblocked--;
}

/* Every call not in flight fails: the actor is dead. */
static void fail_queued(struct ferry__rt_actor *a)
{
	struct ferry__rt_task *list = a->queue;

	a->queue = NULL;
	a->queue_tail = &a->queue;
	pthread_mutex_lock(&ferry__rt.lock);
	set_blocked(a, false);
	pthread_mutex_unlock(&ferry__rt.lock);
	fail_list(a, list, a->dead_status, a->why);
}

static void fail_inflight(struct ferry__rt_actor *a, int status, const char *what)
{
	struct ferry__rt_task *list = a->inflight;

	a->inflight = NULL;
	a->inflight_tail = &a->inflight;
	a->ninflight = 0;
	fail_list(a, list, status, what);
}

/* Close the worker's socket on purpose: its on_close then ignores it. */
static void drop_conn(struct ferry__rt_actor *a)
{
	struct ferry__conn *c = a->conn;

	a->conn = NULL;
	a->creating = a->killing = false;
	ferry__rt_ring_close(a->ring);
	a->ring = NULL;
	if (c)
		ferry__conn_close(c);
}

static void give_back(struct ferry__rt_actor *a)
{
	if (a->lease_id && !a->revoked)
		ferry__rt_lease_give_back(a->lease_node, a->lease_id, a->ninflight > 0);
	a->lease_id = 0;
}

/* The actor is DEAD: @status and @why for every call from now on. */
static void die(struct ferry__rt_actor *a, int status, enum ferry_gcs_exit cause, const char *why)
{
	if (a->state == FERRY_GCS_ACTOR_DEAD)
		return;
	a->state = FERRY_GCS_ACTOR_DEAD;
	a->dead_status = status;
	if (why != a->why)
		snprintf(a->why, sizeof(a->why), "%s", why);
	FLOG_INFO(COMP, "actor %s is dead: %s", a->cls, why);
	gcs_update(a, FERRY_GCS_ACTOR_DEAD, cause, why);
	(void)ferry__loop_timer_stop(&a->revoke);
	(void)ferry__loop_timer_stop(&a->resolve);
	give_back(a);
	drop_conn(a);
	fail_inflight(a, status, why);
	fail_queued(a);
	sweep_soon(a);
}

/* Shutdown, a detached actor's owner: it lives on (ALIVE in the GCS), its lease stays with the
 * node (LeaseDetach); only this process's side of it ends. */
static void leave(struct ferry__rt_actor *a)
{
	a->state = FERRY_GCS_ACTOR_DEAD;
	a->dead_status = -ECANCELED;
	snprintf(a->why, sizeof(a->why), "the driver shut down (actor %s lives on)", a->cls);
	(void)ferry__loop_timer_stop(&a->revoke);
	a->lease_id = 0; /* not given back: the node keeps it for the actor */
	drop_conn(a);
	fail_inflight(a, -ECANCELED, a->why);
	fail_queued(a);
}

/* ---- the owner's side: lease, create, restart ---- */

static void ask_lease(struct ferry__rt_actor *a)
{
	char text[200];
	int ret;

	if (stopping) {
		die(a, -ESRCH, FERRY_GCS_EXIT_OWNER_DIED, "its owner shut down");
		return;
	}
	ret = ferry__rt_lease_ask(&a->key, &a->lease_node, &a->request_id);
	a->request_placed = !ferry_id_is_nil(a->key.pg, sizeof(a->key.pg));
	if (ret < 0) {
		snprintf(text, sizeof(text), "actor %s: no lease from the node: %s", a->cls,
			 ferry_strerror(ret));
		die(a, ret, FERRY_GCS_EXIT_ERROR, text);
	}
}

/* Lease a worker once the constructor's arguments are ready (a pending one parks the actor
 * until an object becomes ready: repump). */
static void create_when_ready(struct ferry__rt_actor *a)
{
	char msg[300], text[480];
	int ret;

	pthread_mutex_lock(&ferry__rt.lock);
	ret = ferry__rt_task_args_ready(a->ctor, msg, sizeof(msg));
	set_blocked(a, ret == 0);
	pthread_mutex_unlock(&ferry__rt.lock);
	a->ctor_waits = ret == 0;
	if (ret > 0) {
		ask_lease(a);
	} else if (ret < 0) {
		snprintf(text, sizeof(text), "actor %s: its constructor's %s", a->cls, msg);
		die(a, -ESRCH, FERRY_GCS_EXIT_ERROR, text);
	}
}

/* Restart if restarts are left (after a death or a kill with restart); else DEAD. */
static void restart_or_die(struct ferry__rt_actor *a, int status, enum ferry_gcs_exit cause,
			   const char *why)
{
	char text[sizeof(a->why)];

	if (a->max_restarts >= 0 && a->restarts >= (uint32_t)a->max_restarts) {
		snprintf(text, sizeof(text), "actor %s is dead: %s%s", a->cls, why,
			 a->max_restarts > 0 ? " (no restarts left)" : "");
		die(a, status, a->max_restarts > 0 ? FERRY_GCS_EXIT_OUT_OF_RESTARTS : cause, text);
		return;
	}
	a->restarts++;
	a->state = FERRY_GCS_ACTOR_RESTARTING;
	FLOG_INFO(COMP, "actor %s restarts (%u so far): %s", a->cls, a->restarts, why);
	gcs_update(a, FERRY_GCS_ACTOR_RESTARTING, FERRY_GCS_EXIT_NONE, NULL);
	memset(&a->worker, 0, sizeof(a->worker));
	a->revoked = a->node_lost = false;
	ask_lease(a);
}

static void worker_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len);
static void worker_on_close(struct ferry__conn *conn, int err);

static const struct ferry__conn_callbacks worker_cb = {
	.on_message = worker_on_message,
	.on_close = worker_on_close,
};

static int open_endpoint(struct ferry__rt_actor *a, const struct ferry__rt_endpoint *ep)
{
	struct ferry__conn_opts o = {.cb = &worker_cb, .data = a, .max_message_bytes = FRAME_MAX};
	const char *path = ep->path[0] ? ep->path : ep->ip;
	bool tcp;
	int ret;

	ret = ferry__rt_dial(ferry__rt.loop, ep, &o, &a->conn);
	tcp = ret == 1;
	if (ret < 0) {
		a->conn = NULL;
		FLOG_ERROR(COMP, "actor %s's worker %s: %s", a->cls, path, ferry_strerror(ret));
		return ret;
	}
	open_conns++;
	a->conns++;
	ret = ferry__rt_send_connect(a->conn);
	if (ret < 0)
		drop_conn(a);
	else if (ferry__rt_ring_enabled() && !tcp) /* rings are shared memory: one host */
		(void)ferry__rt_ring_offer(ferry__rt.loop, a->conn, worker_on_message, &a->ring);
	return ret;
}

/* The worker listens where the node that granted it does: ours, or one placed on. */
static int open_worker(struct ferry__rt_actor *a, const char *path, uint16_t port)
{
	struct ferry__rt_endpoint node_ep, ep;

	if (a->lease_node && ferry__rt_nodes_endpoint(a->lease_node, &node_ep) == 0)
		ferry__rt_worker_endpoint_at(&node_ep, path, port, &ep);
	else
		ferry__rt_worker_endpoint(path, port, &ep);
	return open_endpoint(a, &ep);
}

static int send_built(struct ferry__rt_actor *a, uint16_t type)
{
	return ferry__rt_ring_send(a->ring, a->conn, type, ferry__fb_builder_data(&fb),
				   ferry__fb_builder_size(&fb));
}

/*
 * "Retry at" (LeaseGrant -EXDEV): the node placed the actor's lease on another node; asked
 * there, placed (never forwarded again), as lease.c's retry_at does for a task class. A node
 * that cannot be reached (it died before ours heard) leaves the actor to our node, unless its
 * affinity is hard: then it is DEAD with -EHOSTUNREACH naming that node.
 */
static void retry_at(struct ferry__rt_actor *a, struct ferry__wire_lease_grant_view v)
{
	struct ferry__wire_unique_id wid = ferry__wire_lease_grant_retry_node(v);
	const char *address = ferry__wire_lease_grant_retry_address(v);
	struct ferry_node_id node;
	char hex[40], text[400];
	int ret;

	memcpy(node.bytes, wid.bytes, sizeof(node.bytes));
	ferry_node_id_to_hex(&node, hex, sizeof(hex));
	if (a->request_placed) {
		die(a, -EPROTO, FERRY_GCS_EXIT_ERROR,
		    "a node forwarded an actor's lease request that was placed on it");
		return;
	}
	a->request_placed = true;
	ret = ferry__rt_lease_ask_at(&a->key, &node, address, &a->lease_node, &a->request_id);
	if (ret == 0) {
		FLOG_DEBUG(COMP, "actor %s: its lease placed on node %s", a->cls, hex);
		return;
	}
	snprintf(text, sizeof(text),
		 "actor %s: its lease was placed on node %s (%s), not reachable: %s", a->cls, hex,
		 address ? address : "no address", ferry_strerror(ret));
	FLOG_WARN(COMP, "%s", text);
	if (!(a->key.strategy == FERRY_SCHED_NODE_AFFINITY && !a->key.affinity_soft) &&
	    ferry__rt_lease_ask_at(&a->key, NULL, NULL, &a->lease_node, &a->request_id) == 0)
		return;
	a->request_id = 0;
	die(a, -EHOSTUNREACH, FERRY_GCS_EXIT_NODE_DIED, text);
}

bool ferry__rt_actor_grant(struct ferry__conn *node, const void *payload)
{
	struct ferry__wire_lease_grant_view v = ferry__wire_lease_grant_root_verified(payload);
	uint64_t request_id = ferry__wire_lease_grant_request_id(v);
	int status = ferry__wire_lease_grant_status(v);
	uint64_t lease_id = ferry__wire_lease_grant_lease_id(v);
	struct ferry__wire_unique_id wid = ferry__wire_lease_grant_worker_id(v);
	const char *path = ferry__wire_lease_grant_worker_path(v);
	uint16_t port = ferry__wire_lease_grant_worker_port(v);
	const char *message = ferry__wire_lease_grant_message(v);
	struct ferry__rt_actor *a;
	char text[400];
	int ret;

	for (a = actors; a; a = a->next)
		if (a->owned && a->request_id && a->request_id == request_id &&
		    a->lease_node == node)
			break;
	if (!a)
		return false;
	a->request_id = 0;
	if (status == -EXDEV) {
		retry_at(a, v);
		return true;
	}
	if (status < 0) {
		snprintf(text, sizeof(text), "actor %s: the node refused its lease: %s", a->cls,
			 message ? message : ferry_strerror(status));
		die(a, status, FERRY_GCS_EXIT_ERROR, text);
		return true;
	}
	a->lease_id = lease_id;
	if (a->state == FERRY_GCS_ACTOR_DEAD || stopping) {
		give_back(a);
		sweep_soon(a);
		return true;
	}
	memcpy(a->worker.bytes, wid.bytes, sizeof(a->worker.bytes));
	a->ctor->attempt = a->restarts;
	ret = path ? 0 : -EINVAL;
	if (ret == 0 && a->detached) /* before ActorCreate: the lease must outlive us first */
		ret = ferry__rt_lease_send_detach(a->lease_node, lease_id, &a->id);
	if (ret == 0)
		ret = open_worker(a, path, port);
	if (ret == 0)
		ret = ferry__rt_task_build_actor(a->ctor, &fb, FERRY__WIRE_MSG_ACTOR_CREATE, &a->id,
						 a->max_concurrency, a->detached);
	if (ret == 0)
		ret = send_built(a, FERRY__WIRE_MSG_ACTOR_CREATE);
	if (ret < 0) {
		snprintf(text, sizeof(text), "cannot reach its worker: %s", ferry_strerror(ret));
		drop_conn(a);
		give_back(a);
		restart_or_die(a, -EPIPE, FERRY_GCS_EXIT_ERROR, text);
		return true;
	}
	a->creating = true;
	return true;
}

void ferry__rt_actor_revoked(struct ferry__conn *node, uint64_t lease_id, const char *why)
{
	struct ferry__rt_actor *a;

	for (a = actors; a; a = a->next)
		if (a->owned && a->lease_id && a->lease_id == lease_id && a->lease_node == node)
			break;
	if (!a)
		return;
	a->revoked = true;
	snprintf(a->why, sizeof(a->why), "%s", why);
	if (a->conn)
		return; /* its on_close follows (the worker's socket closes as it dies) */
	if (ferry__loop_timer_active(&a->revoke)) {
		(void)ferry__loop_timer_stop(&a->revoke);
		worker_died(a);
	}
}

/* The constructor answered. */
static void on_created(struct ferry__rt_actor *a, struct ferry__wire_push_task_reply_view r)
{
	int status = ferry__wire_push_task_reply_status(r);
	struct ferry__wire_unique_id nid = ferry__wire_push_task_reply_node_id(r);
	const char *m = ferry__wire_push_task_reply_message(r);
	char text[sizeof(a->why)], hex[FERRY_ID_HEX_MAX];

	a->creating = false;
	memcpy(a->node.bytes, nid.bytes, sizeof(a->node.bytes));
	if (status == -EBUSY && a->busy_retries++ < BUSY_RETRIES) {
		/* The node leased a worker whose last actor's owner just left: the worker drops
		 * that actor when it sees the owner's socket close. Another lease, soon free. */
		drop_conn(a);
		give_back(a);
		ask_lease(a);
		return;
	}
	if (status < 0) {
		snprintf(text, sizeof(text),
			 "the constructor of actor %s failed on node %.12s: %.*s", a->cls,
			 node_hex(a, hex, sizeof(hex)),
			 m ? (int)ferry__wire_push_task_reply_message_len(r) : 0, m ? m : "");
		die(a, -ESRCH, FERRY_GCS_EXIT_ERROR, text);
		return;
	}
	if (a->killing)
		return; /* ActorKillReply follows */
	a->state = FERRY_GCS_ACTOR_ALIVE;
	a->why[0] = 0;
	gcs_update(a, FERRY_GCS_ACTOR_ALIVE, FERRY_GCS_EXIT_NONE, NULL);
	pump(a);
}

/* The actor was killed by @by (its worker answered ActorKill, or is gone after one). */
static void on_killed(struct ferry__rt_actor *a, const char *by)
{
	bool restart = a->kill_restart;

	drop_conn(a);
	give_back(a);
	fail_inflight(a, -ESRCH, "the actor was killed");
	if (restart) {
		restart_or_die(a, -ESRCH, FERRY_GCS_EXIT_KILLED, "killed by its owner");
		return;
	}
	snprintf(a->why, sizeof(a->why), "actor %s was killed by %s", a->cls, by);
	if (!a->owned && ferry__rt.gcs) /* its owner may be gone: the killer records it */
		(void)ferry_gcs_actor_update_async(ferry__rt.gcs, &a->id, FERRY_GCS_ACTOR_DEAD,
						   NULL, NULL, FERRY_GCS_EXIT_KILLED, a->why,
						   gcs_done, NULL);
	die(a, -ESRCH, FERRY_GCS_EXIT_KILLED, a->why);
}

/* An owned actor's calls in flight at its worker's death that have a run left
 * (max_task_retries) go back to the front of its queue, in their order, for the restarted
 * actor: same task IDs, so the same return IDs. */
static void requeue_retries(struct ferry__rt_actor *a)
{
	struct ferry__rt_task *list = a->inflight, *keep = NULL, **keep_tail = &keep;
	struct ferry__rt_task **fail_tail = &a->inflight;

	a->inflight = NULL;
	a->ninflight = 0;
	while (list) {
		struct ferry__rt_task *t = list;

		list = t->next;
		t->next = NULL;
		if (a->max_task_retries < 0 || t->attempt < (uint32_t)a->max_task_retries) {
			t->attempt++;
			*keep_tail = t;
			keep_tail = &t->next;
		} else {
			*fail_tail = t;
			fail_tail = &t->next;
			a->ninflight++;
		}
	}
	a->inflight_tail = fail_tail;
	if (!keep)
		return;
	*keep_tail = a->queue;
	if (!a->queue)
		a->queue_tail = keep_tail;
	a->queue = keep;
}

/* The worker is gone and why is known (or waited for long enough). */
static void worker_died(struct ferry__rt_actor *a)
{
	char what[sizeof(a->why) + 64], hex[FERRY_ID_HEX_MAX];

	if (!a->why[0])
		snprintf(a->why, sizeof(a->why), "worker on node %.12s died",
			 node_hex(a, hex, sizeof(hex)));
	snprintf(what, sizeof(what), "the actor's %s", a->why);
	if (a->owned && a->max_task_retries != 0)
		requeue_retries(a);
	fail_inflight(a, -EPIPE, what);
	a->creating = a->killing = false;
	give_back(a);
	if (!a->owned)
		return;
	restart_or_die(a, -ESRCH, a->node_lost ? FERRY_GCS_EXIT_NODE_DIED : FERRY_GCS_EXIT_ERROR,
		       a->why);
}

static void revoke_due(struct ferry__loop_timer *timer, int status)
{
	struct ferry__rt_actor *a = timer->data;

	if (status == 0)
		worker_died(a);
}

/* ---- named handles: find the worker through the GCS ---- */

struct resolved {
	struct ferry__rt_actor *a;	   /* who asked */
	int status;			   /* the lookup's */
	struct ferry_gcs_actor_info *info; /* the record (ferry_gcs_free) */
};

/* The worker's endpoint as its node recorded it in the GCS workers table (runtime/dial.h), for
 * an actor on another node. A blocking list on the loop thread, once per resolve of a named
 * handle: not on any call's path. 0 or -ENOENT (no such worker, or no TCP endpoint). */
static int recorded_endpoint(const struct ferry__rt_actor *a, struct ferry__rt_endpoint *ep)
{
	struct ferry_gcs_worker_info *all = NULL;
	int n = ferry__rt.gcs ? ferry_gcs_worker_list(ferry__rt.gcs, &all) : -ENOENT, ret = -ENOENT;
	struct ferry__node_addr addr;

	for (int i = 0; i < n && ret < 0; i++) {
		const char *t = all[i].address;

		if (!ferry_worker_id_eq(&all[i].id, &a->worker) || !t ||
		    ferry__node_addr_parse(t, strlen(t), &addr) < 0 || !addr.rt_port)
			continue;
		memset(ep, 0, sizeof(*ep));
		snprintf(ep->path, sizeof(ep->path), "%s", addr.shm_path);
		snprintf(ep->ip, sizeof(ep->ip), "%s", addr.ip);
		snprintf(ep->host, sizeof(ep->host), "%s", addr.host);
		ep->port = addr.rt_port;
		ret = 0;
	}
	ferry_gcs_free(all);
	return ret;
}

static void connect_alive(struct ferry__rt_actor *a)
{
	char rt_path[sizeof(ferry__rt.store_socket) + 4], path[sizeof(rt_path) + 64];
	struct ferry__rt_endpoint ep;
	bool elsewhere = memcmp(a->node.bytes, ferry__rt.node.bytes, sizeof(a->node.bytes)) != 0;

	snprintf(rt_path, sizeof(rt_path), "%s.rt", ferry__rt.store_socket);
	if ((elsewhere || ferry__rt_force_tcp()) && recorded_endpoint(a, &ep) == 0) {
		if (open_endpoint(a, &ep) < 0)
			return;
	} else if (ferry__worker_listen_path(rt_path, &a->worker, path, sizeof(path)) < 0 ||
		   open_worker(a, path, 0) < 0) {
		return; /* its state stays: the next resolve tries again */
	}
	a->state = FERRY_GCS_ACTOR_ALIVE;
	a->resolve_tries = 0;
	pump(a);
}

static void resolve(struct ferry__rt_actor *a);

static void on_resolved(void *arg, int status)
{
	struct resolved *r = arg;
	struct ferry__rt_actor *a = r->a;
	struct ferry_gcs_actor_info *i = r->info;
	char text[sizeof(a->why)];

	if (status < 0 || stopping) {
		ferry_gcs_free(i);
		ferry__free(r);
		return;
	}
	a->resolving = false;
	sweep_soon(a);
	if (r->status == 0 && i->state == FERRY_GCS_ACTOR_DEAD) {
		snprintf(text, sizeof(text), "actor %s is dead: %s", a->cls,
			 i->death_message ? i->death_message : "(no reason recorded)");
		die(a, -ESRCH, FERRY_GCS_EXIT_NONE, text);
	} else if (r->status == 0 && i->state == FERRY_GCS_ACTOR_ALIVE &&
		   a->state != FERRY_GCS_ACTOR_DEAD && !ferry_worker_id_eq(&i->worker, &a->gone)) {
		a->worker = i->worker;
		a->node = i->node;
		connect_alive(a);
	}
	ferry_gcs_free(i);
	ferry__free(r);
	if (a->state != FERRY_GCS_ACTOR_DEAD && !a->conn)
		resolve(a);
}

static void gcs_resolved(void *arg, int status, void *result)
{
	struct resolved *r = arg;

	r->status = status;
	r->info = result;
	pthread_mutex_lock(&ferry__rt.lock);
	if (posts_closed || ferry__loop_post(ferry__rt.loop, on_resolved, r) < 0) {
		ferry_gcs_free(result);
		ferry__free(r);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
}

static void resolve_due(struct ferry__loop_timer *timer, int status)
{
	struct ferry__rt_actor *a = timer->data;
	struct resolved *r;

	if (status < 0 || stopping || a->state == FERRY_GCS_ACTOR_DEAD || a->resolving)
		return;
	r = ferry__calloc(1, sizeof(*r));
	if (r)
		r->a = a; /* on_resolved's actor: it was never set, and the answer crashed */
	if (!r || ferry_gcs_actor_get_async(ferry__rt.gcs, &a->id, gcs_resolved, r) < 0) {
		ferry__free(r);
		resolve(a);
		return;
	}
	a->resolving = true;
}

/* Ask the GCS where the actor is, soon; after RESOLVE_TRIES it is lost. */
static void resolve(struct ferry__rt_actor *a)
{
	char text[sizeof(a->why)];

	if (a->resolving || ferry__loop_timer_active(&a->resolve))
		return;
	if (++a->resolve_tries > RESOLVE_TRIES) {
		snprintf(text, sizeof(text),
			 "actor %s cannot be reached: the GCS has no live "
			 "worker for it",
			 a->cls);
		die(a, -ESRCH, FERRY_GCS_EXIT_NONE, text);
		return;
	}
	a->state = FERRY_GCS_ACTOR_RESTARTING;
	if (ferry__loop_timer_start(ferry__rt.loop, &a->resolve,
				    a->resolve_tries == 1 ? 0 : RESOLVE_MS, 0, resolve_due) < 0)
		die(a, -ESRCH, FERRY_GCS_EXIT_NONE, "shutting down");
}

/* ---- the worker's socket ---- */

static struct ferry__rt_task *inflight_take(struct ferry__rt_actor *a,
					    const struct ferry_task_id *id)
{
	return ferry__rt_task_take(&a->inflight, &a->inflight_tail, &a->ninflight, id);
}

static void on_reply(struct ferry__rt_actor *a, const void *payload)
{
	struct ferry_task_id id;
	struct ferry__wire_push_task_reply_view v = ferry__rt_push_reply_view(payload, &id);
	struct ferry__rt_task *t;

	if (a->creating && ferry_task_id_eq(&id, &a->ctor->id)) {
		on_created(a, v);
		return;
	}
	t = inflight_take(a, &id);
	if (!t) {
		FLOG_WARN(COMP, "actor %s's worker answered a call it was not given", a->cls);
		return;
	}
	(void)ferry__rt_task_reply(t, v); /* no retries of actor calls: never 1 */
	pump(a);
	let_go(a);
}

static void worker_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len)
{
	struct ferry__rt_actor *a = ferry__conn_data(conn);

	if (conn != a->conn || !ferry__rt_ring_on_socket(a->ring, conn, type))
		return;
	if (type == FERRY__WIRE_MSG_RING_SETUP_REPLY) {
		(void)ferry__rt_ring_setup_reply(&a->ring, payload, len);
	} else if (type == FERRY__WIRE_MSG_PUSH_TASK_REPLY) {
		on_reply(a, payload);
	} else if (type == FERRY__WIRE_MSG_ACTOR_KILL_REPLY && a->killing) {
		on_killed(a, a->owned ? "its owner" : "a named handle");
	} else if (type == FERRY__WIRE_MSG_ACTOR_KILL_REPLY && a->detached && a->owned) {
		a->kill_restart = false; /* another process killed our detached actor */
		on_killed(a, "a named handle");
	} else if (type == FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY) {
		struct ferry__wire_runtime_connect_reply_view v =
			ferry__wire_runtime_connect_reply_root_verified(payload);

		if (ferry__wire_runtime_connect_reply_status(v) < 0)
			ferry__conn_close(conn);
	} else {
		FLOG_WARN(COMP, "actor %s's worker sent an unexpected %s", a->cls,
			  ferry__wire_message_name(type));
	}
}

static void worker_on_close(struct ferry__conn *conn, int err)
{
	struct ferry__rt_actor *a = ferry__conn_data(conn);

	open_conns--;
	a->conns--;
	sweep_soon(a);
	if (conn != a->conn)
		return; /* closed on purpose (drop_conn) */
	ferry__rt_ring_close(a->ring);
	a->ring = NULL;
	if (a->killing && !a->owned) {
		on_killed(a, "a named handle"); /* a detached actor's worker exits after it */
		return;
	}
	a->conn = NULL;
	if (stopping) {
		fail_inflight(a, -ECANCELED, "the driver shut down");
		return;
	}
	FLOG_INFO(COMP, "actor %s: its worker's socket closed (%s)", a->cls, ferry_strerror(err));
	if (!a->owned) {
		fail_inflight(a, -EPIPE,
			      "the actor's worker closed the connection (it died, or "
			      "the actor ended)");
		a->gone = a->worker;
		a->resolve_tries = 0;
		let_go(a);
		if (a->state != FERRY_GCS_ACTOR_DEAD)
			resolve(a);
		return;
	}
	if (a->revoked ||
	    ferry__loop_timer_start(ferry__rt.loop, &a->revoke, REVOKE_WAIT_MS, 0, revoke_due) < 0)
		worker_died(a);
}

/* ---- calls ---- */

/* Push what can go: in order, while the head's arguments are ready. */
static void pump(struct ferry__rt_actor *a)
{
	char msg[300];
	int ret;

	if (a->state == FERRY_GCS_ACTOR_DEAD) {
		fail_queued(a);
		return;
	}
	if (!a->conn || a->creating || a->killing || a->state != FERRY_GCS_ACTOR_ALIVE)
		return;
	/* Calls go in the order made; with max_concurrency > 1 they may end in any order
	 * (on_reply takes each by its id). */
	while (a->queue && a->ninflight < PIPELINE) {
		struct ferry__rt_task *t = a->queue;

		pthread_mutex_lock(&ferry__rt.lock);
		ret = ferry__rt_task_args_ready(t, msg, sizeof(msg));
		set_blocked(a, ret == 0);
		pthread_mutex_unlock(&ferry__rt.lock);
		if (ret == 0)
			return;
		a->queue = t->next;
		if (!a->queue)
			a->queue_tail = &a->queue;
		t->next = NULL;
		if (ret < 0) {
			fail_call(a, t, ret, msg);
			continue;
		}
		ret = ferry__rt_task_build_as(t, &fb, FERRY__WIRE_MSG_ACTOR_CALL, &a->id);
		if (ret == 0)
			ret = send_built(a, FERRY__WIRE_MSG_ACTOR_CALL);
		if (ret < 0) {
			fail_call(a, t, ret, ferry_strerror(ret));
			continue;
		}
		*a->inflight_tail = t;
		a->inflight_tail = &t->next;
		a->ninflight++;
	}
}

void ferry__rt_actor_take_calls(void *arg, int status)
{
	struct ferry__rt_actor *a = arg;
	struct ferry__rt_task *list;

	pthread_mutex_lock(&ferry__rt.lock);
	list = a->incoming;
	a->incoming = NULL;
	a->incoming_tail = &a->incoming;
	a->incoming_posted = false;
	pthread_mutex_unlock(&ferry__rt.lock);
	if (status < 0) {
		fail_list(a, list, -ECANCELED, "the driver shut down");
		return;
	}
	if (list) {
		*a->queue_tail = list;
		while (list->next)
			list = list->next;
		a->queue_tail = &list->next;
	}
	pump(a);
	sweep_soon(a);
}

static void repump(void *arg, int status)
{
	(void)arg;
	pthread_mutex_lock(&ferry__rt.lock);
	repump_posted = false;
	pthread_mutex_unlock(&ferry__rt.lock);
	if (status < 0)
		return;
	for (struct ferry__rt_actor *a = actors; a; a = a->next)
		if (a->blocked && a->ctor_waits)
			create_when_ready(a);
		else if (a->blocked)
			pump(a);
}

void ferry__rt_actor_object_ready(void)
{
	if (!nblocked || repump_posted || !ferry__rt.loop || posts_closed)
		return;
	if (ferry__loop_post(ferry__rt.loop, repump, NULL) == 0)
		repump_posted = true;
}

/* ---- the API's work on the loop thread (actor_api.c posts it) ---- */

/* Loop thread: a new actor joins the list and starts. */
void ferry__rt_actor_start(void *arg, int status)
{
	struct ferry__rt_actor *a = arg;

	a->next = actors;
	actors = a;
	if (status < 0 || stopping) {
		die(a, -ECANCELED, FERRY_GCS_EXIT_OWNER_DIED, "the driver shut down");
		return;
	}
	if (a->owned)
		create_when_ready(a);
	else if (a->state == FERRY_GCS_ACTOR_ALIVE)
		connect_alive(a);
	if (!a->owned && !a->conn)
		resolve(a);
}

void ferry__rt_actor_do_kill(void *arg, int status)
{
	struct ferry__rt_actor_kill *k = arg;
	struct ferry__rt_actor *a = k->a;
	struct ferry__wire_actor_kill m = {0};
	bool restart = k->restart;

	ferry__free(k);
	if (status < 0 || a->state == FERRY_GCS_ACTOR_DEAD || a->killing)
		return;
	if (!a->conn) { /* no worker now (PENDING or RESTARTING): nothing runs to kill */
		if (!restart) {
			snprintf(a->why, sizeof(a->why), "actor %s was killed by its owner",
				 a->cls);
			die(a, -ESRCH, FERRY_GCS_EXIT_KILLED, a->why);
		}
		return;
	}
	memcpy(m.actor_id.bytes, a->id.bytes, sizeof(m.actor_id.bytes));
	a->kill_restart = restart;
	if (ferry__wire_actor_kill_build(&fb, &m) < 0 ||
	    send_built(a, FERRY__WIRE_MSG_ACTOR_KILL) < 0) {
		on_killed(a, a->owned ? "its owner" : "a named handle");
		return;
	}
	a->killing = true;
	/* Calls not pushed yet are behind the kill: with no restart they fail now. */
	if (!restart) {
		a->dead_status = -ESRCH;
		snprintf(a->why, sizeof(a->why), "actor %s was killed by its owner", a->cls);
		fail_queued(a);
	}
}

struct ferry__rt_actor *ferry__rt_actor_alloc(void)
{
	struct ferry__rt_actor *a = ferry__calloc(1, sizeof(*a));

	if (a)
		atomic_fetch_add(&records, 1);
	return a;
}

void ferry__rt_actor_free(struct ferry__rt_actor *a)
{
	ferry__rt_task_free(a->ctor);
	ferry__free(a);
	atomic_fetch_sub(&records, 1);
}

unsigned ferry__rt_actor_records(void)
{
	return atomic_load(&records);
}

/* A named handle dropped: once its calls are answered this process is done with the actor
 * (it lives on, its owner's): close this side, so the record and its socket go. */
static void let_go(struct ferry__rt_actor *a)
{
	bool calls;

	if (!a->released || a->owned || a->state == FERRY_GCS_ACTOR_DEAD || a->queue ||
	    a->inflight || a->killing)
		return;
	pthread_mutex_lock(&ferry__rt.lock);
	calls = a->incoming || a->incoming_posted;
	pthread_mutex_unlock(&ferry__rt.lock);
	if (calls)
		return;
	a->state = FERRY_GCS_ACTOR_DEAD;
	a->dead_status = -ESRCH;
	snprintf(a->why, sizeof(a->why), "actor %s: this process dropped its handle", a->cls);
	(void)ferry__loop_timer_stop(&a->revoke);
	(void)ferry__loop_timer_stop(&a->resolve);
	drop_conn(a);
	sweep_soon(a);
}

/* Nothing of the loop's names @a any more (see DESIGN). */
static bool reclaimable(struct ferry__rt_actor *a)
{
	bool calls;

	if (!a->released || a->state != FERRY_GCS_ACTOR_DEAD || a->conns || a->ring ||
	    a->resolving || a->request_id || a->queue || a->inflight ||
	    ferry__loop_timer_active(&a->revoke) || ferry__loop_timer_active(&a->resolve))
		return false;
	pthread_mutex_lock(&ferry__rt.lock);
	calls = a->incoming || a->incoming_posted;
	if (!calls)
		set_blocked(a, false);
	pthread_mutex_unlock(&ferry__rt.lock);
	return !calls;
}

static void sweep(struct ferry__postq *q, void *none, int status)
{
	struct ferry__rt_actor **pp = &actors, *a;

	(void)q;
	(void)none;
	if (status < 0 || stopping)
		return; /* fini frees them all */
	while ((a = *pp)) {
		if (reclaimable(a)) {
			*pp = a->next;
			ferry__rt_actor_free(a);
		} else {
			pp = &a->next;
		}
	}
}

void ferry__rt_actor_release(void *arg, int status)
{
	struct ferry__rt_actor *a = arg;

	if (status < 0)
		return; /* the loop is going: fini frees it */
	a->released = true;
	let_go(a);
	sweep_soon(a);
}

/* ---- life (lease.c calls these) ---- */

/* Loop thread, at shutdown: owned actors die with their owner; every socket closes. */
void ferry__rt_actor_stop(void)
{
	stopping = true;
	pthread_mutex_lock(&ferry__rt.lock);
	posts_closed = true;
	pthread_mutex_unlock(&ferry__rt.lock);
	for (struct ferry__rt_actor *a = actors; a; a = a->next) {
		ferry__rt_actor_take_calls(a, -ECANCELED);
		if (a->owned && a->detached && a->state == FERRY_GCS_ACTOR_ALIVE)
			leave(a);
		else if (a->state != FERRY_GCS_ACTOR_DEAD)
			die(a, -ECANCELED, FERRY_GCS_EXIT_OWNER_DIED, "its owner shut down");
	}
}

/* The connection to a node closed: a lease granted there cannot be given back, and the
 * reason its worker died is known (the node went: an actor placed there restarts elsewhere);
 * a request asked there is asked again (@ask_again) or fails. */
void ferry__rt_actor_conn_gone(const struct ferry__conn *conn, bool ask_again)
{
	for (struct ferry__rt_actor *a = actors; a; a = a->next) {
		char hex[FERRY_ID_HEX_MAX];

		if (!a->owned || a->lease_node != conn || a->state == FERRY_GCS_ACTOR_DEAD)
			continue;
		a->lease_node = NULL;
		if (a->request_id) {
			a->request_id = 0;
			if (ask_again && !stopping) {
				FLOG_INFO(COMP,
					  "actor %s: its lease request's node closed: asked again",
					  a->cls);
				ask_lease(a);
			} else {
				die(a, -ECONNRESET, FERRY_GCS_EXIT_NODE_DIED,
				    "the node its lease was asked of closed the connection");
			}
			continue;
		}
		if (!a->lease_id)
			continue;
		a->revoked = a->node_lost = true; /* nothing to give back to */
		if (!a->why[0])
			snprintf(a->why, sizeof(a->why), "node %s closed its connection (it died?)",
				 node_hex(a, hex, sizeof(hex)));
		if (!a->conn && ferry__loop_timer_active(&a->revoke)) {
			(void)ferry__loop_timer_stop(&a->revoke);
			worker_died(a);
		}
	}
}

/* The GCS says node @id died: an actor there (a cut-off host's sockets may stay open) has lost
 * its worker now; a named handle looks for the actor again. */
void ferry__rt_actor_node_dead(const struct ferry_node_id *id)
{
	struct ferry__conn *there = ferry__rt_nodes_find(id);

	for (struct ferry__rt_actor *a = actors; a; a = a->next) {
		char hex[FERRY_ID_HEX_MAX];
		/* ALIVE: a->node is its worker's; else (its constructor on its way) the node that
		 * granted its lease says, as a->node still names the last one. */
		bool on_it = a->state == FERRY_GCS_ACTOR_ALIVE
				     ? ferry_node_id_eq(&a->node, id)
				     : there && a->lease_node == there && a->lease_id;

		if (a->state == FERRY_GCS_ACTOR_DEAD || !on_it ||
		    (!a->conn && !ferry__loop_timer_active(&a->revoke)))
			continue;
		ferry_node_id_to_hex(id, hex, sizeof(hex));
		snprintf(a->why, sizeof(a->why), "node %s died", hex);
		if (a->owned) {
			a->revoked = a->node_lost = true; /* it took its lease with it */
			(void)ferry__loop_timer_stop(&a->revoke);
			drop_conn(a);
			worker_died(a);
		} else if (a->conn) {
			ferry__conn_close(a->conn); /* worker_on_close: resolve again */
		}
	}
}

/* Loop thread: the node's socket closed: a lease asked for will never come. */
void ferry__rt_actor_node_gone(void)
{
	for (struct ferry__rt_actor *a = actors; a; a = a->next)
		if (a->owned && a->request_id) {
			a->request_id = 0;
			die(a, -ECONNRESET, FERRY_GCS_EXIT_NODE_DIED,
			    "the node closed its owner's connection before a worker was leased");
		}
}

unsigned ferry__rt_actor_open_conns(void)
{
	return open_conns;
}

void ferry__rt_actor_init(void)
{
	actors = NULL;
	open_conns = 0;
	stopping = false;
	nblocked = 0;
	repump_posted = false;
	posts_closed = false;
	ferry__postq_init(&sweep_q, ferry__rt.loop, 0, sweep);
	if (!fb_ready)
		ferry__fb_builder_init(&fb);
	fb_ready = true;
}

/* After the loop is gone. */
void ferry__rt_actor_fini(void)
{
	while (actors) {
		struct ferry__rt_actor *a = actors;

		actors = a->next;
		ferry__rt_actor_free(a);
	}
	if (fb_ready)
		ferry__fb_builder_fini(&fb);
	fb_ready = false;
}
