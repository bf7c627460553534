/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An actor on the caller's side, shared by actor.c (its life on the runtime's loop thread:
 * lease, sockets, calls, restarts) and actor_api.c (the public calls, on any thread, which post
 * their work to the loop). See actor.c's DESIGN.
 */
#ifndef FERRY_RUNTIME_ACTOR_H
#define FERRY_RUNTIME_ACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/runtime.h>

#include "common/loop.h"
#include "runtime/task.h"

struct ferry__rt_actor {
	struct ferry__rt_actor *next;	       /* every actor of this process */
	struct ferry_actor_id id;	       /* its ID */
	char cls[FERRY_FUNCTION_NAME_MAX + 1]; /* its class */
	bool owned;			       /* created here: we hold its lease */
	uint8_t state;			       /* enum ferry_gcs_actor_state, as we know it */
	bool gcs_alive;			       /* the GCS has it ALIVE (RESTARTING is legal) */
	int32_t max_restarts;		       /* < 0: unlimited */
	uint32_t max_concurrency;	       /* owned: > 1: calls run at once (ActorCreate) */
	bool detached;			       /* outlives its owner; any handle kills it */
	uint32_t restarts;		       /* so far */
	struct ferry__rt_task *ctor;	       /* owned: the constructor (class, arguments) */
	struct ferry__rt_class_key key;	       /* owned: its resources */
	int32_t max_task_retries;	       /* calls rerun after a death; < 0: no limit */
	uint64_t request_id;		       /* a LeaseRequest in flight, or 0 */
	struct ferry__conn *lease_node;	       /* where it was asked, then granted (NULL:
						* that connection closed) */
	bool request_placed;		       /* ... asked after a "retry at" */
	uint64_t lease_id;		       /* its lease, or 0 */
	bool revoked;			       /* the node took the lease back */
	bool node_lost;			       /* ... with its node: it died or closed */
	struct ferry_worker_id worker;	       /* its worker */
	struct ferry_node_id node;	       /* the worker's node */
	struct ferry__conn *conn;	       /* to the worker, NULL when none */
	struct ferry__rt_ring *ring;	       /* beside conn (runtime/ring.h), or NULL */
	struct ferry_worker_id gone;	       /* named handles: the worker whose socket closed */
	bool creating;			       /* ActorCreate sent, not answered */
	bool ctor_waits;		       /* a constructor argument is pending */
	unsigned busy_retries;		       /* leases whose worker still hosted an actor */
	bool killing;			       /* ActorKill sent, not answered */
	bool kill_restart;		       /* ... and restart after it */
	struct ferry__rt_task *queue;	       /* calls not pushed yet, in order */
	struct ferry__rt_task **queue_tail;    /* append here */
	struct ferry__rt_task *inflight;       /* pushed, not answered (oldest first) */
	struct ferry__rt_task **inflight_tail; /* append here */
	uint32_t ninflight;		       /* how many */
	struct ferry__loop_timer revoke;       /* REVOKE_WAIT_MS */
	struct ferry__loop_timer resolve;      /* named handles: RESOLVE_MS */
	unsigned resolve_tries;		       /* GCS lookups since the socket closed */
	bool resolving;			       /* a GCS lookup is in flight */
	unsigned conns;			       /* its sockets whose on_close has not come */
	bool released;			       /* its handle was dropped: freed once DEAD */
	int dead_status;		       /* DEAD: what calls fail with */
	char why[320];			       /* DEAD: why; else the worker's death */
	/* Under ferry__rt.lock: */
	struct ferry__rt_task *incoming;       /* calls made, not taken by the loop */
	struct ferry__rt_task **incoming_tail; /* append here */
	bool incoming_posted;		       /* a post to take them is on its way */
	bool blocked;			       /* its head call waits for an argument */
};

struct ferry_actor {
	struct ferry__rt_actor *a; /* shared by every handle of this process */
	bool owner;		   /* from ferry_actor_create: dropping it kills the actor */
};

/* A kill for the loop (ferry__rt_actor_do_kill frees it). */
struct ferry__rt_actor_kill {
	struct ferry__rt_actor *a; /* whom */
	bool restart;		   /* restart after it, if restarts are left */
};

/* Loop posts: a new actor joins the loop's list and starts (owned: leases a worker once its
 * constructor's arguments are ready; named: connects to its worker); the actor's incoming
 * calls go to its queue; a kill. With status < 0 (the loop going away) each ends cleanly. */
void ferry__rt_actor_start(void *arg, int status);
void ferry__rt_actor_take_calls(void *arg, int status);
void ferry__rt_actor_do_kill(void *arg, int status);
/* A new record (zeroed), counted; NULL on -ENOMEM. Free an actor that the loop never saw, or
 * every one at shutdown. */
struct ferry__rt_actor *ferry__rt_actor_alloc(void);
void ferry__rt_actor_free(struct ferry__rt_actor *a);
/* Loop post: the handle was dropped: the record goes once the actor is DEAD and nothing of
 * the loop's (socket, GCS lookup, lease request, timer, call) still names it. */
void ferry__rt_actor_release(void *arg, int status);

#endif
