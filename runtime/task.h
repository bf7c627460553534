/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A submitted task on the owner's side, between ferry_submit() (submit.c) and its reply on a
 * leased worker (lease.c): its arguments (inline copies, or refs it holds a count on), its
 * return ids, its class (the resources a lease is asked for) and its retries.
 */
#ifndef FERRY_RUNTIME_TASK_H
#define FERRY_RUNTIME_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/id.h>
#include <ferry/runtime.h>

#include "common/wire.h"

#define FERRY__RT_CUSTOM_MAX 128 /* bytes of ferry_task_opts.resources kept per class */

/* What a lease is asked for: tasks of equal keys share leases. Compared with memcmp. */
struct ferry__rt_class_key {
	double cpus;			  /* CPU */
	double gpus;			  /* GPU */
	double memory_bytes;		  /* memory */
	const char *custom;		  /* "name=amount,...", interned (submit.c): equal specs
					    * are one pointer; NULL: none */
	uint8_t pg[FERRY_UNIQUE_ID_SIZE]; /* a placement group's ID (pg.c), or zeros */
	int32_t pg_bundle;		  /* with pg: its bundle, -1 any; else 0 */
	/* Placement (issue 24): tasks that differ here take different leases. */
	uint8_t strategy;	       /* enum ferry_sched_strategy */
	uint8_t affinity_soft;	       /* NODE_AFFINITY: soft */
	struct ferry_node_id affinity; /* NODE_AFFINITY: the node */
	struct ferry_node_id locality; /* the node holding most of its input bytes
					    * (>= FERRY__RT_LOCALITY_MIN), or nil */
	uint64_t locality_bytes;       /* ... how many; 0 with a nil locality */
};
/* Inputs smaller than this do not pull a task to their node. */
#define FERRY__RT_LOCALITY_MIN (1ull << 20)

struct ferry__rt_arg {
	void *data;	      /* inline bytes (ferry__malloc'd copy), or NULL */
	size_t len;	      /* their size */
	bool is_ref;	      /* by ref: ref below */
	bool counted;	      /* we hold a count on ref (our own object) */
	struct ferry_ref ref; /* the object */
};

/* The owner keeps one per pending task: its name is allocated to fit (ferry__rt_task_new), not
 * FERRY_FUNCTION_NAME_MAX + 1 bytes, which were most of the record (bench row
 * bytes_per_pending_task, target <= 512 bytes). */
struct ferry__rt_task {
	struct ferry__rt_task *next;	/* link in whichever list holds it */
	struct ferry_task_id id;	/* hash(job, parent task, submit index) */
	uint32_t num_returns;		/* >= 1 */
	int32_t retries_left;		/* retries still allowed */
	bool retry_exceptions;		/* retry a -errno result too */
	uint32_t attempt;		/* 0, then +1 per retry */
	uint64_t pushed_us;		/* when last pushed (lease.c: task times) */
	uint32_t lineage_refs;		/* returns whose lineage it is (lineage.c) */
	bool rerun;			/* ... submitted again: their making is on */
	struct ferry__rt_class_key key; /* its class */
	size_t nargs;			/* arguments */
	struct ferry__rt_arg *args;	/* them */
	char name[];			/* the function, NUL-terminated */
};

/* task_events.c: step @state of @t for `ferry list tasks` (any thread; @node, @worker may be
 * NULL); the flush timer started and stopped on the loop (ferry__loop_call). */
void ferry__rt_tev_record(const struct ferry__rt_task *t, enum ferry_gcs_task_state state,
			  const struct ferry_node_id *node, const struct ferry_worker_id *worker);
int ferry__rt_tev_start(void *arg);
int ferry__rt_tev_stop(void *arg);
uint64_t ferry__rt_tev_dropped(void);

/* submit.c, loop thread: the task's end. Frees @t. */
void ferry__rt_task_fail(struct ferry__rt_task *t, int status, const char *message);
/* A verified PushTaskReply frame's view, and the ID of the task it answers into *@id. */
struct ferry__wire_push_task_reply_view ferry__rt_push_reply_view(const void *payload,
								  struct ferry_task_id *id);
/* A PushTaskReply for @t: fills its returns (or retries it: returns 1, @t kept). */
int ferry__rt_task_reply(struct ferry__rt_task *t, struct ferry__wire_push_task_reply_view r);
void ferry__rt_task_free(struct ferry__rt_task *t);
/* Loop thread: send @t on once its arguments are ready (a lineage rerun: lineage.c). */
void ferry__rt_task_route(struct ferry__rt_task *t);
/* ferry__rt_task_free() with ferry__rt.lock held. */
void ferry__rt_task_free_locked(struct ferry__rt_task *t);
struct ferry__rt_obj;
/* lineage.c. Lock held: @t's return @o is in a store; @t becomes its lineage if it can run
 * again (then kept while one such return is referenced). */
void ferry__rt_lineage_attach(struct ferry__rt_task *t, struct ferry__rt_obj *o);
/* Lock held: @t is freed, its returns lose their lineage. */
void ferry__rt_lineage_detach(struct ferry__rt_task *t);
/* Lock held: @o goes, and with it its hold on its task. */
void ferry__rt_lineage_drop(struct ferry__rt_obj *o);
/* Lock held, the runtime going: every task kept as lineage goes. */
void ferry__rt_lineage_clear(void);
/* Loop thread: node @id died; the returns whose only copy it held are made again. */
void ferry__rt_lineage_node_dead(const struct ferry_node_id *id);
/* Loop thread, at shutdown: tasks not yet at a worker end with -ECANCELED. */
void ferry__rt_submit_cancel(void);
/* The interned resource specs go (ferry_shutdown, once no task is left). */
void ferry__rt_intern_fini(void);
/* The error text of a task: "function NAME on node N: WHAT". */
void ferry__rt_task_error_text(const struct ferry__rt_task *t, const struct ferry_node_id *node,
			       const char *what, char *out, size_t size);
/* Build @t's PushTask (arguments in the memory store inlined) into @b. 0 or -errno. */
int ferry__rt_task_build(const struct ferry__rt_task *t, struct ferry__fb_builder *b);

/* The same as a PushTask (@type FERRY__WIRE_MSG_PUSH_TASK), or wrapped in an ActorCreate or
 * ActorCall of @actor (actor.c). */
int ferry__rt_task_build_as(const struct ferry__rt_task *t, struct ferry__fb_builder *b,
			    uint16_t type, const struct ferry_actor_id *actor);
/* ferry__rt_task_build_as() with the ActorCreate's options (0 and false for the others). */
int ferry__rt_task_build_actor(const struct ferry__rt_task *t, struct ferry__fb_builder *b,
			       uint16_t type, const struct ferry_actor_id *actor,
			       uint32_t max_concurrency, bool detached);
/* For actor.c: a task of @name with @args (not queued anywhere); its id and pending returns
 * (lock held; -ENOTCONN, -ENOMEM), undone for the first @n returns; whether its arguments are
 * ready (lock held: 1, 0 pending, < 0 failed with @msg). */
int ferry__rt_task_new(const char *name, const struct ferry_arg *args, size_t nargs,
		       const struct ferry_task_opts *opts, struct ferry__rt_task **out);
int ferry__rt_task_register(struct ferry__rt_task *t, struct ferry_ref *returns);
void ferry__rt_task_unregister(struct ferry__rt_task *t, struct ferry_ref *returns, uint32_t n);
int ferry__rt_task_args_ready(const struct ferry__rt_task *t, char *msg, size_t size);

/* Take task @id out of the list @head (in push order; @tail its end, @n its length): the task,
 * or NULL if it is not there. Lease and actor both keep the tasks a worker has not answered so. */
struct ferry__rt_task *ferry__rt_task_take(struct ferry__rt_task **head,
					   struct ferry__rt_task ***tail, uint32_t *n,
					   const struct ferry_task_id *id);

/* lease.c, loop thread: queue a task whose arguments are ready; take it to a worker. */
void ferry__rt_lease_enqueue(struct ferry__rt_task *t, bool front);
/* lease.c, loop thread, for actor.c: ask for a lease of @key's resources as a task class
 * does (its bundle's node, else ours, which places it; the answer goes to
 * ferry__rt_actor_grant, *@node the connection asked); after a "retry at", ask node @id (at
 * @address; NULL: our own node) with the request placed there; give one back to the @node
 * that granted it (@busy: calls in flight on it, the node ends its worker); a RuntimeConnect
 * on a worker's socket. */
struct ferry__conn;
int ferry__rt_lease_ask(const struct ferry__rt_class_key *key, struct ferry__conn **node,
			uint64_t *request_id);
int ferry__rt_lease_ask_at(const struct ferry__rt_class_key *key, const struct ferry_node_id *id,
			   const char *address, struct ferry__conn **node, uint64_t *request_id);
void ferry__rt_lease_give_back(struct ferry__conn *node, uint64_t lease_id, bool busy);
/* ... and tell @node that its lease @lease_id hosts detached actor @actor (LeaseDetach). */
int ferry__rt_lease_send_detach(struct ferry__conn *node, uint64_t lease_id,
				const struct ferry_actor_id *actor);
int ferry__rt_send_connect(struct ferry__conn *conn);

/* nodes.c: the owner's connections to other nodes' runtime sockets (loop thread). get: the
 * one to node @id (advertised as @address), opened with @cb if none (Unix on this host, TCP
 * with the token on another: runtime/dial.h): 1 (new: send RuntimeConnect), 0 (open already),
 * -EHOSTUNREACH (another host that advertises no runtime port), -EINVAL (a bad address), or
 * the connect's -errno. endpoint: where the node of @conn is (-ENOENT: not one of them).
 * forget: at its close (true if it was one of them). */
struct ferry__conn_callbacks;
struct ferry__rt_endpoint;
int ferry__rt_nodes_get(const struct ferry_node_id *id, const char *address,
			const struct ferry__conn_callbacks *cb, struct ferry__conn **out);
int ferry__rt_nodes_endpoint(const struct ferry__conn *conn, struct ferry__rt_endpoint *out);
bool ferry__rt_nodes_forget(struct ferry__conn *conn);
size_t ferry__rt_nodes_queued_bytes(void);
void ferry__rt_nodes_flush(void);
/* Queue the message @type (@payload, @len bytes) on every other node's connection. */
void ferry__rt_nodes_send_all(uint16_t type, const void *payload, size_t len);
void ferry__rt_nodes_close_all(void);
void ferry__rt_nodes_fini(void);
/* The connection to node @id's runtime socket, or NULL (nodes.c). */
struct ferry__conn *ferry__rt_nodes_find(const struct ferry_node_id *id);
/* Node @id is dead (the GCS said): ferry__rt_nodes_get refuses it with -EHOSTDOWN. */
void ferry__rt_nodes_mark_dead(const struct ferry_node_id *id);
bool ferry__rt_nodes_is_dead(const struct ferry_node_id *id);
/* Node @id died (the GCS says, node_watch.c): what is leased or asked there ends now. */
void ferry__rt_lease_node_dead(const struct ferry_node_id *id);

#endif
