/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver's side of the runtime inside one process (include/ferry/runtime.h): the state that
 * ferry_init() sets up and the modules share: the owner table (objects.c), completions
 * (completion.c), task submission and leases (submit.c, lease.c), actors (actor.c).
 *
 * DESIGN
 * - One runtime per process (struct ferry__rt, a global). Its pieces: a store client (owner =
 *   the driver's worker id), a GCS client, the local cluster when ferry_init started one, and
 *   one loop thread (ferry__loop) that serves the node's runtime socket and every leased
 *   worker's socket. Calls from user threads never touch a connection: they queue work under
 *   rt.lock and post to the loop.
 * - rt.lock guards the owner table, the completion queue and the submit queue; rt.cond is
 *   broadcast whenever an object becomes ready (ferry_get and ferry_wait sleep on it). Lock
 *   order: rt.lock, then nothing else (the store and GCS clients are called without it, except
 *   ferry_plasma_client_delete from a drop, which takes only the store client's own lock).
 * - Owner table: object id -> struct ferry__rt_obj (count, state, inline bytes, callbacks).
 *   Small task returns live in it (the in-process memory store); a view of one pins it
 *   (pins), so that the last drop while viewed frees the bytes at the last release.
 */
#ifndef FERRY_RUNTIME_RT_H
#define FERRY_RUNTIME_RT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/id.h>
#include <ferry/plasma.h>
#include <ferry/runtime.h>

#include "common/hashmap.h"

struct ferry__cluster;
struct ferry__loop;
struct ferry__rt_task;
struct ferry__rt_sub;

enum ferry__rt_state {
	FERRY__RT_PENDING = 0,	/* its task has not answered yet */
	FERRY__RT_INLINE = 1,	/* bytes in the memory store (data, len) */
	FERRY__RT_IN_STORE = 2, /* sealed in the node's store */
	FERRY__RT_ERROR = 3,	/* status < 0, message in error */
};

/* A callback of ferry_on_ready(), queued on its object, then on the due list. */
struct ferry__rt_cb {
	struct ferry__rt_cb *next; /* list link */
	ferry_ready_fn fn;	   /* the caller's */
	void *arg;		   /* its argument */
	struct ferry_ref ref;	   /* the ref it was given (no count held) */
	int status;		   /* set when due */
};

/* An object this process owns. */
struct ferry__rt_obj {
	struct ferry_object_id id; /* its id */
	int64_t refs;		   /* counts handed out and not dropped */
	uint32_t pins;		   /* views of the inline bytes not released */
	uint8_t state;		   /* enum ferry__rt_state */
	int status;		   /* FERRY__RT_ERROR: the -errno */
	char *error;		   /* FERRY__RT_ERROR: the message (ferry__malloc'd) or NULL */
	void *data;		   /* FERRY__RT_INLINE: the bytes (ferry__malloc'd) */
	size_t len;		   /* their size */
	struct ferry__rt_cb *cbs;  /* ferry_on_ready callbacks waiting for it */
	struct ferry_object_id *contained; /* ferry_put_refs: objects it holds a count on */
	size_t ncontained;		   /* how many */
	struct ferry_node_id node;	   /* FERRY__RT_IN_STORE: whose store holds it */
	uint64_t store_bytes;		   /* ... its size there (the scheduler's locality) */
	struct ferry__rt_task *lineage;	   /* IN_STORE return: its task, to make it again */
};

/* A worker process as an owner (its tasks submit, put and get): who it is to its node. Set by
 * ferry__rt_init_worker; the pointers stay valid until ferry_shutdown. */
struct ferry__rt_worker_info {
	struct ferry_worker_id id; /* the worker's (owner of what its tasks make) */
	struct ferry_job_id job;   /* the job it was assigned */
	struct ferry_node_id node; /* its node */
	const char *store_socket;  /* the node's store (its runtime socket: + ".rt") */
	const char *code_path;	   /* the job's library */
	const uint8_t *code_hash;  /* its SHA-256 (32 bytes) */
	const uint8_t *secret;	   /* the node's secret for this worker */
	size_t secret_len;	   /* its bytes */
	const char *listen_path;   /* the worker's socket (names it to the node) */
};

struct ferry__rt {
	pthread_mutex_t lock;		   /* see DESIGN */
	pthread_cond_t cond;		   /* an object became ready (CLOCK_MONOTONIC) */
	bool up;			   /* between ferry_init and ferry_shutdown */
	struct ferry__cluster *cluster;	   /* the local cluster, or NULL */
	struct ferry_gcs_client *gcs;	   /* the cluster's GCS */
	struct ferry_plasma_client *store; /* the node's store, owner = self */
	struct ferry__loop *loop;	   /* the runtime's loop */
	pthread_t loop_thread;		   /* runs it */
	struct ferry_worker_id self;	   /* the driver's id (owner of what it makes) */
	struct ferry_job_id job;	   /* the job ferry_init registered */
	struct ferry_task_id root_task;	   /* the driver's "task": parent of puts and submits */
	struct ferry_node_id node;	   /* the node on this host (nil if not known) */
	uint32_t put_seq;		   /* puts so far (under lock) */
	uint32_t submit_seq;		   /* submits so far (under lock) */
	uint64_t inline_max;		   /* ferry_init_opts.inline_max or 100 KiB */
	char store_socket[108];		   /* the node's store socket */
	char node_address[256];		   /* its advertised address, "" unknown (runtime/dial.h) */
	char code_path[4096];		   /* the job's library, "" for none */
	uint8_t code_hash[32];		   /* its SHA-256 */
	struct ferry__hashmap objects;	   /* object id -> struct ferry__rt_obj * */
	int completion_fd;		   /* eventfd: readable while callbacks are due */
	struct ferry__rt_cb *due;	   /* callbacks due, oldest first */
	struct ferry__rt_cb **due_tail;	   /* where the next one goes */
	struct ferry__rt_sub *sub;	   /* the loop thread's submit state (submit.c) */
	const struct ferry__rt_worker_info *worker; /* in a worker process; NULL in a driver */
};

extern struct ferry__rt ferry__rt;

/* objects.c: the owner table. Called with ferry__rt.lock held unless said otherwise. */
struct ferry__rt_obj *ferry__rt_obj_find(const struct ferry_object_id *id);
/* A new entry (count 1, @state); NULL on -ENOMEM. */
struct ferry__rt_obj *ferry__rt_obj_add(const struct ferry_object_id *id, uint8_t state);
/* Make a pending object ready: takes @data (ferry__malloc'd) for INLINE, @error (copied) for
 * ERROR; wakes waiters and queues its callbacks. An object nobody holds any more is freed. */
void ferry__rt_obj_ready(struct ferry__rt_obj *o, uint8_t state, void *data, size_t len, int status,
			 const char *error);
/* Drop one count (and free the object when none is left). Lock held; may call the store. */
void ferry__rt_obj_unref(struct ferry__rt_obj *o);
/* Free every entry (shutdown; the store's copies are deleted). */
void ferry__rt_objects_clear(void);
/* Shutdown, before the loop stops: the other nodes are told to free every object in a store. */
void ferry__rt_objects_free_held(void);
/* Lock held: wake every thread waiting for an object (`up` was cleared). */
void ferry__rt_objects_wake_all(void);
bool ferry__rt_is_self(const struct ferry_worker_id *owner);

/* free.c: tell the other nodes this process's object @id is free (lock held; any thread). */
void ferry__rt_free_queue(const struct ferry_object_id *id);
/* Lock held, the loop gone: drop what was queued and never sent. */
void ferry__rt_free_fini(void);

/* code.c: store the job's library (@path, SHA-256 @hash) in the GCS unless it holds that hash
 * already. 0; -EFBIG (too large for the GCS), -EBADMSG (it changed meanwhile), the file's or
 * the GCS's -errno; each logged. */
int ferry__rt_code_upload(struct ferry_gcs_client *gcs, const char *path, const uint8_t hash[32]);

/* completion.c */
int ferry__rt_completion_init(void);
void ferry__rt_completion_fini(void);
/* Queue @o's callbacks as due with @status (lock held). */
void ferry__rt_completion_fire(struct ferry__rt_obj *o, int status);

/* submit.c / lease.c: the loop thread's side. */
/* Before the loop runs: ferry_submit's hand-off to ferry__rt.loop. */
void ferry__rt_submit_init(void);
int ferry__rt_sub_init(void);
/* On the loop thread, through ferry__loop_call at shutdown: return leases, close sockets, fail
 * tasks still queued with -ECANCELED. */
int ferry__rt_sub_stop(void *arg);
/* Loop thread: close the node's socket once the lease returns are written (@arg NULL: 1 while
 * they are not; else close now), and count sockets still open. */
int ferry__rt_sub_close_node(void *arg);
int ferry__rt_sub_open_conns(void *arg);
void ferry__rt_sub_fini(void);
/* Loop thread (ferry__loop_call): connect to the node's runtime socket now, so that the node
 * knows this driver from the start and frees what it owns if it dies. 0 or -errno (logged). */
int ferry__rt_sub_connect(void *arg);
/* Loop thread: tell the node over the owner line that this worker's task waits (or not);
 * a PushTask's wait names @task and its number @wait_id (else NULL and 0). */
int ferry__rt_sub_send_blocked(bool blocked, const struct ferry_task_id *task, uint64_t wait_id);

/* init.c: the runtime of a worker process (worker_assign.c calls it once its job loaded):
 * an owner on its node's store and runtime socket, without a GCS client. 0 or -errno;
 * ferry_shutdown() ends it. */
int ferry__rt_init_worker(const struct ferry__rt_worker_info *info);

/* worker_owner.c: a get or wait inside a running task is about to sleep (lock held): tell the
 * node, so that its CPU serves the tasks it waits for. Returns whether it counted (pass that
 * to ferry__rt_unblock when the wait ends). */
bool ferry__rt_block(void);
void ferry__rt_unblock(bool counted);
void ferry__rt_block_reset(void);
/* Called with the lock held when an object became ready: tasks waiting for it may go. */
void ferry__rt_sub_object_ready(void);
/* The node this driver's node socket answered for (nil before). */
const struct ferry_node_id *ferry__rt_sub_node_id(void);
/* A lease with nothing to do goes back to its node after this (lease.c). */
#define FERRY__RT_LEASE_IDLE_MS 10
/* Leases opened on a new socket to their worker, and on a parked one (lease.c: park) since
 * the process started (tests, diagnostics). Any thread. */
void ferry__rt_lease_counts(uint64_t *dialled, uint64_t *reused);
/* Follow node deaths (a driver), and stop before the loop goes (node_watch.c). */
int ferry__rt_node_watch_start(void);
void ferry__rt_node_watch_stop(void);

/*
 * actor.c, on the loop thread unless said: its state (init with submit.c's, fini after the
 * loop is gone); a LeaseGrant for one of its requests (true: it was an actor's, handled); a
 * LeaseRevoked of a lease no task class holds (@why: the worker's death); shutdown (owned
 * actors die, sockets close); the node's socket closed; sockets not closed yet; an object
 * became ready (lock held, any thread: a call waiting for it may go).
 */
struct ferry__wire_unique_id;
void ferry__rt_actor_init(void);
void ferry__rt_actor_fini(void);
struct ferry__conn;
bool ferry__rt_actor_grant(struct ferry__conn *node, const void *payload);
/* lease.c: a granted worker's endpoint: @path on the node's host, @port on the node's ip. */
struct ferry__rt_endpoint;
void ferry__rt_worker_endpoint(const char *path, uint16_t port, struct ferry__rt_endpoint *out);
/* The same for a worker of the node at @node (one a lease was placed on). */
void ferry__rt_worker_endpoint_at(const struct ferry__rt_endpoint *node, const char *path,
				  uint16_t port, struct ferry__rt_endpoint *out);
void ferry__rt_actor_revoked(struct ferry__conn *node, uint64_t lease_id, const char *why);
void ferry__rt_actor_stop(void);
void ferry__rt_actor_node_gone(void);
/* Node connection @conn closed (@ask_again: a request asked there is asked anew, else it
 * fails); node @id died (the GCS says): its actors restart elsewhere (issue 24). */
void ferry__rt_actor_conn_gone(const struct ferry__conn *conn, bool ask_again);
void ferry__rt_actor_node_dead(const struct ferry_node_id *id);
unsigned ferry__rt_actor_open_conns(void);
void ferry__rt_actor_object_ready(void);
/* Actor records allocated and not yet freed (any thread; tests). */
unsigned ferry__rt_actor_records(void);

/* pg.c (placement groups), beside submit.c's state: init, shutdown on the loop (the nodes'
 * sockets close, which releases the bundles), sockets not closed yet, fini after the loop;
 * a task's class key for group @pg's bundle @bundle (-EINVAL: a bad index, logged). */
struct ferry__rt_class_key;
void ferry__rt_pg_init(void);
void ferry__rt_pg_stop(void);
unsigned ferry__rt_pg_open_conns(void);
void ferry__rt_pg_fini(void);
int ferry__rt_pg_key(const struct ferry_pg *pg, int32_t bundle, struct ferry__rt_class_key *key);
/* Loop thread. The node a class's leases come from when it is not the driver's own: the node of
 * its group's bundle (NULL: the driver's own node, or no such group placed here: that node
 * answers); that node's runtime socket, dialled at need (NULL: it cannot be reached). Lease
 * messages from such a node go to lease.c with the node named. */
struct ferry__rt_pg_node;
struct ferry__conn;
struct ferry__rt_pg_node *ferry__rt_pg_lease_node(const struct ferry__rt_class_key *key);
struct ferry__conn *ferry__rt_pg_node_conn(struct ferry__rt_pg_node *n);
/* Loop thread: queue message @type on every group node's socket this owner opened. */
void ferry__rt_pg_send_all(uint16_t type, const void *payload, size_t len);
/* @conn (a node's runtime socket) is closing: no lease or request refers to it after this. */
struct ferry__conn;
void ferry__rt_lease_conn_gone(const struct ferry__conn *conn);
void ferry__rt_lease_node_message(struct ferry__rt_pg_node *via, uint16_t type,
				  const void *payload);

#endif
