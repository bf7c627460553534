/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Global Control Store: the public vocabulary (channels, states, strategies) shared by the GCS
 * server, its client and anyone reading GCS data, the object directory's shard routing rule, and
 * the GCS client.
 *
 * Thread model: the vocabulary is constants and pure functions. A client runs its own loop
 * thread (one io_uring loop, one connection per GCS shard). Its blocking functions may be called
 * from any thread except that loop thread (there, and so inside any callback of the client, they
 * return -EDEADLK at once instead of waiting for themselves); its _async functions from any
 * thread, the loop thread included. Completion callbacks (ferry_gcs_done_fn) and subscription
 * callbacks run on the loop thread, one at a time.
 */
#ifndef FERRY_GCS_H
#define FERRY_GCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/common.h>
#include <ferry/id.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A placement group's ID: 16 random bytes, like the other unique IDs. */
struct ferry_placement_group_id {
	uint8_t bytes[FERRY_UNIQUE_ID_SIZE];
};
FERRY__ID_FUNCS(placement_group)

/* Pub/sub channels. Keys: node, job, worker, actor and object IDs; errors and logs by job ID;
 * node load by node ID. NODES carries membership (registration, drain, death) to everyone who
 * subscribes; NODE_LOAD carries each node's load reports, for schedulers, not for nodes.
 * NODE_DEATHS (key: node ID) carries only the nodes' changes to DRAINING or DEAD, as NODES
 * records (ferry_gcs_event_node decodes them): what every node follows, where NODES is for the
 * few that want every join (the CLI, a scheduler). Its snapshot is empty: a node learns the
 * state of a peer it uses from a keyed NODES subscription (snapshot, then its changes). */
enum ferry_gcs_channel {
	FERRY_GCS_CH_NODES = 0,
	FERRY_GCS_CH_JOBS = 1,
	FERRY_GCS_CH_WORKERS = 2,
	FERRY_GCS_CH_ACTORS = 3,
	FERRY_GCS_CH_OBJECT_LOCATIONS = 4,
	FERRY_GCS_CH_ERRORS = 5,
	FERRY_GCS_CH_LOGS = 6,
	FERRY_GCS_CH_NODE_LOAD = 7,
	FERRY_GCS_CH_NODE_DEATHS = 8,
	FERRY_GCS_CH_COUNT = 9,
};

enum ferry_gcs_node_state {
	FERRY_GCS_NODE_ALIVE = 1,
	FERRY_GCS_NODE_DRAINING = 2, /* alive, takes no new work */
	FERRY_GCS_NODE_DEAD = 3,     /* terminal: a node ID never comes back */
};

/* Transports a node serves (bit mask). */
#define FERRY_GCS_TRANSPORT_TCP (1u << 0)
#define FERRY_GCS_TRANSPORT_RDMA (1u << 1)
#define FERRY_GCS_TRANSPORT_SHM (1u << 2)
#define FERRY_GCS_TRANSPORT_ALL 7u

enum ferry_gcs_job_state {
	FERRY_GCS_JOB_RUNNING = 1,
	FERRY_GCS_JOB_FINISHED = 2,
};

enum ferry_gcs_worker_state {
	FERRY_GCS_WORKER_ALIVE = 1,
	FERRY_GCS_WORKER_DEAD = 2,
};

/* Why a worker ended, or why an actor died. */
enum ferry_gcs_exit {
	FERRY_GCS_EXIT_NONE = 0,
	FERRY_GCS_EXIT_NORMAL = 1,	    /* asked to exit */
	FERRY_GCS_EXIT_ERROR = 2,	    /* crashed or raised in its constructor */
	FERRY_GCS_EXIT_NODE_DIED = 3,	    /* its node died */
	FERRY_GCS_EXIT_OWNER_DIED = 4,	    /* its owner died */
	FERRY_GCS_EXIT_KILLED = 5,	    /* killed by request */
	FERRY_GCS_EXIT_OUT_OF_RESTARTS = 6, /* actor: died with no restart left */
};

/*
 * Actor states. Legal transitions: PENDING -> ALIVE; ALIVE -> RESTARTING (only while
 * num_restarts < max_restarts, or max_restarts < 0 = unlimited); RESTARTING -> ALIVE;
 * PENDING, ALIVE, RESTARTING -> DEAD. DEAD is terminal.
 */
enum ferry_gcs_actor_state {
	FERRY_GCS_ACTOR_PENDING = 1,
	FERRY_GCS_ACTOR_ALIVE = 2,
	FERRY_GCS_ACTOR_RESTARTING = 3,
	FERRY_GCS_ACTOR_DEAD = 4,
};

enum ferry_gcs_pg_strategy {
	FERRY_GCS_PG_PACK = 1,		/* as few nodes as possible */
	FERRY_GCS_PG_SPREAD = 2,	/* as many nodes as possible */
	FERRY_GCS_PG_STRICT_PACK = 3,	/* one node or fail */
	FERRY_GCS_PG_STRICT_SPREAD = 4, /* one node per bundle or fail */
};

/*
 * Placement group states. Legal: PENDING -> CREATED (every bundle placed); CREATED ->
 * RESCHEDULING (a bundle's node died); RESCHEDULING -> CREATED; any but REMOVED -> REMOVED.
 */
enum ferry_gcs_pg_state {
	FERRY_GCS_PG_PENDING = 1,
	FERRY_GCS_PG_CREATED = 2,
	FERRY_GCS_PG_RESCHEDULING = 3,
	FERRY_GCS_PG_REMOVED = 4,
};

enum ferry_gcs_object_state {
	FERRY_GCS_OBJECT_PENDING = 1,	/* registered by its owner, no copy sealed yet */
	FERRY_GCS_OBJECT_AVAILABLE = 2, /* at least one location or a spilled copy */
	FERRY_GCS_OBJECT_LOST = 3,	/* every copy gone, or its owner died */
};

enum ferry_gcs_task_state {
	FERRY_GCS_TASK_SUBMITTED = 1,
	FERRY_GCS_TASK_SCHEDULED = 2,
	FERRY_GCS_TASK_RUNNING = 3,
	FERRY_GCS_TASK_FINISHED = 4,
	FERRY_GCS_TASK_FAILED = 5,
};

/*
 * ferry_gcs_object_shard() - the object directory shard that holds @id when the directory is
 * split over @nshards GCS shards: ferry_id_hash(id) % nshards. This is the routing rule every
 * client uses; it is stable across processes, hosts and releases. @nshards 0 counts as 1.
 */
static inline uint32_t ferry_gcs_object_shard(const struct ferry_object_id *id, uint32_t nshards)
{
	return nshards <= 1 ? 0 : (uint32_t)(ferry_object_id_hash(id) % nshards);
}

/* ---- client ---- */

struct ferry_gcs_client;

/* Client options; zeros are defaults except addresses and token. */
/* What a GCS client is: its handshake says so, and the GCS names it so in its logs ("a wrong
 * cluster token from a Cli"). The values are the wire's PeerKind (schema/common.fbs). */
enum ferry_gcs_client_kind {
	FERRY_GCS_CLIENT_DRIVER = 0,	/* a driver, or any program (the default) */
	FERRY_GCS_CLIENT_WORKER = 1,	/* a worker process */
	FERRY_GCS_CLIENT_NODE = 2,	/* a node daemon */
	FERRY_GCS_CLIENT_CLI = 6,	/* the ferry command and other operator tools */
	FERRY_GCS_CLIENT_SCHEDULER = 7, /* a scheduler (ferry-sched) */
};

struct ferry_gcs_client_opts {
	const char *const *addresses;	 /* "host:port" of each shard, shard 0 first */
	size_t naddresses;		 /* shards, >= 1 */
	const void *token;		 /* cluster token (copied) */
	size_t token_len;		 /* its bytes, > 0 */
	unsigned timeout_ms;		 /* connect and blocking calls; 0 = 10 s */
	unsigned reconnect_ms;		 /* wait between reconnect attempts; 0 = 100 ms */
	enum ferry_gcs_client_kind kind; /* what this client is; 0: a driver */
};

/*
 * ferry_gcs_client_connect() - start a client and wait until every shard accepted it. From then
 * on it reconnects on its own when a connection drops, resends the requests not answered yet,
 * and resubscribes (resuming from the last sequence number it delivered: the server replays the
 * missed messages or sends RESYNC + a snapshot). Returns 0 and *@out; -EINVAL (bad options,
 * logged), -EHOSTUNREACH at once (a shard's host name does not resolve; logged), -EACCES (token
 * refused), -EUSERS (a shard holds as many clients as it may: ferry-gcs
 * --max-clients; logged), -ETIMEDOUT (a shard was not reachable in time),
 * -ECONNREFUSED / -EHOSTUNREACH / -ENETUNREACH (the same, every attempt until the timeout was
 * refused or had no route: nothing listens there), -EPROTO (a shard's reply is not a Ferry
 * frame, or a GCS of another protocol version refused us), -ENOMEM. A server that took the
 * connection and then sent something that is not a Ferry frame, or nothing, is logged as
 * "not a Ferry GCS".
 */
FERRY_API int ferry_gcs_client_connect(const struct ferry_gcs_client_opts *opts,
				       struct ferry_gcs_client **out);
/* ferry_gcs_client_destroy() - close every connection and stop the loop thread. Every async
 * call still waiting completes with -ECANCELED, from inside this call on the calling thread.
 * Calls still blocked in other threads must have returned. NULL is a no-op. */
FERRY_API void ferry_gcs_client_destroy(struct ferry_gcs_client *c);
/* ferry_gcs_free() - free memory the client returned (KV values, object locations). */
FERRY_API void ferry_gcs_free(void *p);

/*
 * Asynchronous calls. Every blocking call below has an _async form taking the same inputs (not
 * the output pointers) plus @cb and @arg, and returning 0 or a negative errno at once:
 * - On 0, @cb(@arg, status, result) is called exactly once, on the client's loop thread: with
 *   the answer, -ETIMEDOUT at the deadline (timeout_ms after the call, CLOCK_MONOTONIC),
 *   -ECANCELED from ferry_gcs_client_destroy() (then on the destroying thread), or the error
 *   of a shard that refused the client's token. Never from inside the _async call itself, but
 *   for one case: a call fanned out to several shards (subscribe and unsubscribe of a whole
 *   object-location channel, batch lookups) that ran out of memory or met destroy half-way.
 * - On an error return (-EINVAL, -ENOMEM, -ECANCELED once destroy began) @cb is never called.
 * - status is what the blocking form returns; result is NULL on errors and for calls without
 *   output. Where there is one, result is a single allocation the callback takes over and
 *   frees with ferry_gcs_free(): kv_get: the value (status: its size in bytes); kv_multi_get,
 *   kv_keys: the struct ferry_gcs_bytes array; *_list: the array (status: its length);
 *   actor_get, pg_get: the record; object_lookup: a struct ferry_gcs_object_info whose
 *   locations and places lie in the same allocation; object_lookup_batch: the batch.
 * - Inputs are borrowed for the _async call only (copied into the request).
 * - The callback may make further _async calls; it must not block (a blocking call there
 *   returns -EDEADLK) and must not destroy the client.
 * The blocking forms are these calls plus a wait.
 */
typedef void (*ferry_gcs_done_fn)(void *arg, int status, void *result);

/*
 * Blocking calls. Each returns once the GCS answered (writes: once durable), or -ETIMEDOUT
 * after timeout_ms (a write may still be applied later), -ENOMEM, or the server's error.
 * A write may also fail with -ENOBUFS: the GCS's write-ahead log is too far behind the disk
 * (nothing was applied; retry later), and -E2BIG: a record or a reply over the GCS's limits.
 * A write resent by the client after a reconnect or a GCS restart is applied once: the server
 * answers the resend with the first result. Byte strings are borrowed for the call.
 * Namespaces may be empty.
 *
 * kv_put: 1 added, 0 existed (replaced when @overwrite). kv_get: 0 and *@value (ferry_gcs_free)
 * / *@size, or -ENOENT. kv_delete: 1 removed, 0 absent. kv_exists: 1 or 0.
 */
FERRY_API int ferry_gcs_kv_put(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			       const void *key, size_t key_size, const void *value,
			       size_t value_size, bool overwrite);
FERRY_API int ferry_gcs_kv_get(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			       const void *key, size_t key_size, void **value, size_t *size);
FERRY_API int ferry_gcs_kv_delete(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				  const void *key, size_t key_size);
FERRY_API int ferry_gcs_kv_exists(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				  const void *key, size_t key_size);
FERRY_API int ferry_gcs_kv_put_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				     const void *key, size_t key_size, const void *value,
				     size_t value_size, bool overwrite, ferry_gcs_done_fn cb,
				     void *arg);
FERRY_API int ferry_gcs_kv_get_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				     const void *key, size_t key_size, ferry_gcs_done_fn cb,
				     void *arg);
FERRY_API int ferry_gcs_kv_delete_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
					const void *key, size_t key_size, ferry_gcs_done_fn cb,
					void *arg);
FERRY_API int ferry_gcs_kv_exists_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
					const void *key, size_t key_size, ferry_gcs_done_fn cb,
					void *arg);

/* A byte string (a KV key or value). */
struct ferry_gcs_bytes {
	const void *data; /* NULL: absent (multi-get) */
	size_t size;	  /* bytes */
};

/*
 * ferry_gcs_kv_multi_get() - look up @n (1..4096) keys of @ns in one round trip. Returns how
 * many were found and sets *@values to @n entries in the order of @keys, data NULL for a missing
 * key; entries and data are one allocation: ferry_gcs_free(*@values).
 * ferry_gcs_kv_keys() - the keys of @ns starting with @prefix (empty: all), in byte order. Returns
 * the count and *@keys, one allocation (ferry_gcs_free), or -E2BIG when they do not fit a reply.
 * ferry_gcs_kv_delete_prefix() - remove every key of @ns starting with @prefix (empty: the whole
 * namespace). Returns how many were removed.
 */
FERRY_API int ferry_gcs_kv_multi_get(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				     const struct ferry_gcs_bytes *keys, size_t n,
				     struct ferry_gcs_bytes **values);
FERRY_API int ferry_gcs_kv_keys(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				const void *prefix, size_t prefix_size,
				struct ferry_gcs_bytes **keys);
FERRY_API int ferry_gcs_kv_delete_prefix(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
					 const void *prefix, size_t prefix_size);

/* A node as registered (the node table lives on shard 0). */
struct ferry_gcs_node_info {
	struct ferry_node_id id;	 /* the node */
	const char *address;		 /* where its node manager listens (register: required) */
	double cpu;			 /* CPUs */
	double gpu;			 /* GPUs */
	double memory_bytes;		 /* memory */
	uint64_t store_capacity_bytes;	 /* plasma arena size */
	enum ferry_gcs_node_state state; /* events and lists: alive, draining, dead */
};

/* ferry_gcs_node_register() - add @node (alive). 1 added, 0 re-registered, -EEXIST (dead). */
FERRY_API int ferry_gcs_node_register(struct ferry_gcs_client *c,
				      const struct ferry_gcs_node_info *node);
/*
 * ferry_gcs_node_heartbeat() - the node is alive; heartbeat at least every deadline / 10
 * (default 100 ms). A heartbeat only refreshes the node's liveness in the GCS's memory: nothing
 * is written to the log and nothing is published (load goes with ferry_gcs_node_report_load;
 * the avail_* arguments are ignored and kept for source compatibility). 1 alive, 0 alive but
 * the GCS holds no load report of the node (a restarted GCS: send one), -ENOENT (unknown or
 * declared dead).
 */
FERRY_API int ferry_gcs_node_heartbeat(struct ferry_gcs_client *c, const struct ferry_node_id *id,
				       double avail_cpu, double avail_gpu,
				       double avail_memory_bytes);

/* The cluster's size as a heartbeat's reply tells it (ferry_gcs_node_beat_async). */
struct ferry_gcs_beat_info {
	uint32_t alive_nodes;	     /* nodes registered and not dead */
	uint64_t membership_version; /* grows with every membership change (join, drain, death)
					within one GCS run; starts again after a GCS restart */
};

/*
 * ferry_gcs_node_beat_async() - a heartbeat (as ferry_gcs_node_heartbeat: 1, 0, -ENOENT) whose
 * callback's result is a struct ferry_gcs_beat_info (the callback frees it with
 * ferry_gcs_free), or NULL when the server sent none: how a node learns the cluster's size
 * for its beat interval without following every join. 0, or -errno (then @cb never runs).
 */
FERRY_API int ferry_gcs_node_beat_async(struct ferry_gcs_client *c, const struct ferry_node_id *id,
					ferry_gcs_done_fn cb, void *arg);

/* Resource amounts in load reports are fixed point: this many to one unit (one CPU, one byte). */
#define FERRY_GCS_RESOURCE_UNIT 10000
/* Resources per load report, the standard four included. */
#define FERRY_GCS_MAX_LOAD_RESOURCES 68

/* One resource of a node's load report. */
struct ferry_gcs_resource_load {
	const char *name;  /* "CPU", "GPU", "memory", "object_store_memory", or a custom name */
	int64_t total;	   /* what the node has, in 1/FERRY_GCS_RESOURCE_UNIT, >= 0 */
	int64_t available; /* what is free now, same unit, >= 0 */
};

/* A node's load: the latest report, kept in the GCS's memory (never logged). */
struct ferry_gcs_node_load {
	struct ferry_node_id id;			 /* the node */
	uint64_t version;				 /* grows with every report of the node */
	uint32_t queue_length;				 /* tasks waiting for resources */
	uint64_t mean_task_us;				 /* mean task run time; 0: none yet */
	uint32_t nresources;				 /* 0..FERRY_GCS_MAX_LOAD_RESOURCES */
	const struct ferry_gcs_resource_load *resources; /* names unique, 1..127 bytes */
	uint32_t workers_idle;				 /* worker processes free */
	uint32_t workers_leased;   /* leased to an owner (or being assigned) */
	uint32_t workers_starting; /* started, not connected yet */
};

/*
 * ferry_gcs_node_report_load() - replace the node's load in the GCS (counts as a heartbeat too)
 * and publish it on FERRY_GCS_CH_NODE_LOAD (key: the node ID) to that channel's subscribers
 * only. Not durable: a restarted GCS knows no load until the node reports again (its heartbeat
 * returns 0 to ask). Send one when something changed, at most once per heartbeat interval.
 * 1 taken, 0 ignored (its version is not newer than the one held), -EINVAL (bad report,
 * logged), -ENOENT (unknown or dead node).
 * ferry_gcs_node_load_list() - the latest load report of every live node that sent one: the
 * count and *@loads, one allocation with the arrays and names (ferry_gcs_free).
 * ferry_gcs_event_node_load() - decode a FERRY_GCS_CH_NODE_LOAD event (a subscriber gets a
 * snapshot of every node's latest load, then each new report; a removal when a node dies):
 * 0 and *@out, whose resources (with their names) are one allocation to ferry_gcs_free;
 * -EINVAL (another channel or a removal), -EPROTO.
 */
FERRY_API int ferry_gcs_node_report_load(struct ferry_gcs_client *c,
					 const struct ferry_gcs_node_load *load);
FERRY_API int ferry_gcs_node_load_list(struct ferry_gcs_client *c,
				       struct ferry_gcs_node_load **loads);
/*
 * A step of a task, for operators (`ferry list tasks`). The GCS keeps the last ones in memory
 * (a ring: the oldest dropped first), never in its WAL, and publishes nothing: like a load
 * report, not a record. The runtime sends its tasks' steps in batches (runtime/task_events.c).
 * ferry_gcs_task_event_add_async(): 1 kept, -EINVAL (a nil task, an unknown state, a name
 * over 64 bytes). ferry_gcs_task_event_list(): the newest 20,000 it keeps, oldest first: the
 * count and *@events, one allocation (ferry_gcs_free).
 */
struct ferry_gcs_task_event {
	struct ferry_task_id task;	 /* the task (not nil) */
	struct ferry_job_id job;	 /* its job */
	uint32_t attempt;		 /* 0 the first run, then each retry */
	enum ferry_gcs_task_state state; /* the step */
	struct ferry_node_id node;	 /* where it was sent or ran, or nil */
	struct ferry_worker_id worker;	 /* which worker ran it, or nil */
	uint64_t time_ms;		 /* when (wall clock, ms since the epoch) */
	char name[65];			 /* its function, NUL-terminated; "" unknown */
};
FERRY_API int ferry_gcs_task_event_add_async(struct ferry_gcs_client *c,
					     const struct ferry_gcs_task_event *e,
					     ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_task_event_list(struct ferry_gcs_client *c,
					struct ferry_gcs_task_event **events);
FERRY_API int ferry_gcs_task_event_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb,
					      void *arg);

struct ferry_gcs_event;
FERRY_API int ferry_gcs_event_node_load(const struct ferry_gcs_event *ev,
					struct ferry_gcs_node_load *out);

/*
 * ferry_gcs_node_list() - every node the GCS knows (dead ones included), with state and address.
 * Returns the count and *@nodes, one allocation with the address strings (ferry_gcs_free).
 * ferry_gcs_node_drain() - the node takes no new work (ALIVE -> DRAINING): 1 changed, 0 already
 * draining, -ENOENT unknown, -EINVAL dead. ferry_gcs_node_unregister() - the node leaves for
 * good: declared DEAD now (its workers die, its object copies are dropped on every shard that
 * follows shard 0), 1, 0 already dead, -ENOENT.
 */
FERRY_API int ferry_gcs_node_list(struct ferry_gcs_client *c, struct ferry_gcs_node_info **nodes);
FERRY_API int ferry_gcs_node_drain(struct ferry_gcs_client *c, const struct ferry_node_id *id);
FERRY_API int ferry_gcs_node_unregister(struct ferry_gcs_client *c, const struct ferry_node_id *id);

/* A job. add: id, driver_node, driver_pid, entrypoint, start_ms are used (state is RUNNING). */
struct ferry_gcs_job_info {
	struct ferry_job_id id;		  /* the job */
	enum ferry_gcs_job_state state;	  /* running, finished */
	struct ferry_node_id driver_node; /* node the driver runs on */
	uint32_t driver_pid;		  /* driver's process ID */
	const char *entrypoint;		  /* what was run, or NULL */
	uint64_t start_ms;		  /* submission time (caller's clock) */
	uint64_t end_ms;		  /* finish time, 0 while running */
};

/* Jobs (shard 0). add: 1, -EEXIST. finish: 1, 0 already finished, -ENOENT. list: the count and
 * *@jobs, one allocation with the strings (ferry_gcs_free). */
FERRY_API int ferry_gcs_job_add(struct ferry_gcs_client *c, const struct ferry_gcs_job_info *job);
FERRY_API int ferry_gcs_job_finish(struct ferry_gcs_client *c, const struct ferry_job_id *id);
FERRY_API int ferry_gcs_job_list(struct ferry_gcs_client *c, struct ferry_gcs_job_info **jobs);

/* A worker. add: every field but state, exit_type, exit_message, end_ms is used. */
struct ferry_gcs_worker_info {
	struct ferry_worker_id id;	   /* the worker */
	struct ferry_node_id node;	   /* where it runs */
	struct ferry_job_id job;	   /* job it serves (nil: a pooled worker) */
	uint32_t pid;			   /* its process ID */
	const char *address;		   /* where it listens, or NULL */
	enum ferry_gcs_worker_state state; /* alive, dead */
	enum ferry_gcs_exit exit_type;	   /* why it ended */
	const char *exit_message;	   /* details, or NULL */
	uint64_t start_ms;		   /* registration time */
	uint64_t end_ms;		   /* death time, 0 while alive */
};

/* Workers (shard 0). add: 1, -EEXIST. dead: 1, 0 already dead, -ENOENT (the objects it owns are
 * marked lost). list: count and *@workers, one allocation (ferry_gcs_free). */
FERRY_API int ferry_gcs_worker_add(struct ferry_gcs_client *c,
				   const struct ferry_gcs_worker_info *worker);
FERRY_API int ferry_gcs_worker_dead(struct ferry_gcs_client *c, const struct ferry_worker_id *id,
				    enum ferry_gcs_exit exit_type, const char *message);
FERRY_API int ferry_gcs_worker_list(struct ferry_gcs_client *c,
				    struct ferry_gcs_worker_info **workers);

/* An actor. register: id, job, owner, name, class_name, max_restarts are used (PENDING). */
struct ferry_gcs_actor_info {
	struct ferry_actor_id id;	  /* the actor */
	struct ferry_job_id job;	  /* job that created it */
	struct ferry_worker_id owner;	  /* worker or driver that created it */
	const char *name;		  /* registered name, or NULL */
	const char *class_name;		  /* its class */
	enum ferry_gcs_actor_state state; /* see enum ferry_gcs_actor_state */
	struct ferry_node_id node;	  /* where it runs (alive), else nil */
	struct ferry_worker_id worker;	  /* the worker hosting it (alive), else nil */
	uint32_t num_restarts;		  /* restarts so far */
	int32_t max_restarts;		  /* restarts allowed, < 0 = unlimited */
	enum ferry_gcs_exit death_cause;  /* why it died */
	const char *death_message;	  /* details, or NULL */
};

/*
 * Actors (shard 0). register: 1, -EEXIST. update: move to @state (the legal transitions are
 * listed at enum ferry_gcs_actor_state; others -EINVAL): ALIVE needs @node and @worker, DEAD
 * takes @cause and @message (NULL ok); 1 changed, 0 already there, -ENOENT. get: 0 and *@out,
 * one allocation (ferry_gcs_free), -ENOENT. list: count and *@actors (ferry_gcs_free).
 */
FERRY_API int ferry_gcs_actor_register(struct ferry_gcs_client *c,
				       const struct ferry_gcs_actor_info *actor);
FERRY_API int ferry_gcs_actor_update(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
				     enum ferry_gcs_actor_state state,
				     const struct ferry_node_id *node,
				     const struct ferry_worker_id *worker,
				     enum ferry_gcs_exit cause, const char *message);
FERRY_API int ferry_gcs_actor_get(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
				  struct ferry_gcs_actor_info **out);
FERRY_API int ferry_gcs_actor_list(struct ferry_gcs_client *c,
				   struct ferry_gcs_actor_info **actors);

/* A custom resource: an amount of something the scheduler counts by name ("tpu", "ssd"). */
struct ferry_gcs_resource {
	const char *name; /* 1..127 bytes, unique within its set */
	double amount;	  /* >= 0, finite */
};

/* A placement group's bundle: what it reserves and where it is placed (nil until the group is
 * CREATED). The custom resources come last so that initialisers written before they existed
 * ({cpu, gpu, memory_bytes, node}) still mean the same. */
struct ferry_gcs_bundle {
	double cpu;				 /* CPUs */
	double gpu;				 /* GPUs */
	double memory_bytes;			 /* memory */
	struct ferry_node_id node;		 /* its node, or nil */
	uint32_t ncustom;			 /* length of custom, 0..64 */
	const struct ferry_gcs_resource *custom; /* custom resources, NULL when ncustom is 0 */
};

/* A placement group. create: id, job, name, strategy, nbundles, bundles (demand, custom resources
 * included) are used; get and list return each bundle's custom resources in the same allocation. */
struct ferry_gcs_pg_info {
	struct ferry_placement_group_id id;	/* the group */
	struct ferry_job_id job;		/* job that created it */
	const char *name;			/* or NULL */
	enum ferry_gcs_pg_strategy strategy;	/* pack, spread, ... */
	enum ferry_gcs_pg_state state;		/* see enum ferry_gcs_pg_state */
	uint32_t nbundles;			/* length of bundles, 1..1024 */
	const struct ferry_gcs_bundle *bundles; /* the bundles */
};

/*
 * Placement groups (shard 0). create: PENDING, 1, -EEXIST, -EINVAL. update: move to @state (the
 * legal transitions are listed at enum ferry_gcs_pg_state; others -EINVAL); CREATED needs
 * @nnodes == nbundles @nodes, the node of each bundle; 1 changed, 0 already there, -ENOENT. get:
 * 0 and *@out, list: count and *@pgs; each one allocation with its bundles and strings
 * (ferry_gcs_free).
 */
FERRY_API int ferry_gcs_pg_create(struct ferry_gcs_client *c, const struct ferry_gcs_pg_info *pg);
FERRY_API int ferry_gcs_pg_update(struct ferry_gcs_client *c,
				  const struct ferry_placement_group_id *id,
				  enum ferry_gcs_pg_state state, const struct ferry_node_id *nodes,
				  uint32_t nnodes);
FERRY_API int ferry_gcs_pg_get(struct ferry_gcs_client *c,
			       const struct ferry_placement_group_id *id,
			       struct ferry_gcs_pg_info **out);
FERRY_API int ferry_gcs_pg_list(struct ferry_gcs_client *c, struct ferry_gcs_pg_info **pgs);

/* Where one copy lies in its node's store, as that store described it when it listed the copy:
 * a hint for one-sided reads, which confirm it before the bytes count (by the source's reply,
 * or for a small object by its content check). All 0: unknown. */
struct ferry_gcs_object_place {
	uint64_t offset; /* the data's offset in the store's arena */
	uint64_t alloc;	 /* the store's id of that allocation (never reused); 0: unknown */
	uint64_t check;	 /* ferry__hash_content() of data + metadata, for objects of at most
			  * FERRY_GCS_CHECK_MAX bytes; 0: none */
};

/* The largest object (data + metadata) whose place carries a content check. */
#define FERRY_GCS_CHECK_MAX (64u << 10)

/*
 * An object directory entry. places[i] says where the copy on locations[i] lies (0/0 where
 * unknown, e.g. recorded by an older node); NULL when there are no locations. Lookups and event
 * decoders return both arrays in one allocation, locations first and places right after it, so
 * freeing locations frees places too (never free places itself).
 */
struct ferry_gcs_object_info {
	struct ferry_object_id id;	       /* the object */
	struct ferry_worker_id owner_worker;   /* its owner */
	struct ferry_node_id owner_node;       /* the owner's node */
	uint64_t size_bytes;		       /* data bytes, 0 = unknown */
	uint32_t metadata_bytes;	       /* metadata bytes (meaningful when size_bytes is
						* known; 0 when it was recorded without) */
	enum ferry_gcs_object_state state;     /* pending, available, lost */
	uint32_t nlocations;		       /* length of locations and of places */
	struct ferry_node_id *locations;       /* copies; lookup: free with ferry_gcs_free */
	struct ferry_gcs_object_place *places; /* where each copy lies (see above) */
};

/* Object directory calls, routed to shard ferry_gcs_object_shard(id, nshards). Only shard 0
 * tracks nodes; when it declares a node dead, every shard drops that node's copies (shards > 0
 * follow shard 0's node deaths: ferry-gcs --shard I/N --shard0 HOST:PORT).
 * object_add: 1, -EEXIST. add/remove_location: 1 changed, 0 nothing to do, -ENOENT.
 * object_lookup: 0 and *@out (free out->locations, which frees out->places too), -ENOENT.
 * add_location records no place (unknown); the node daemon reports places itself. */
FERRY_API int ferry_gcs_object_add(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				   const struct ferry_worker_id *owner_worker,
				   const struct ferry_node_id *owner_node, uint64_t size_bytes);
FERRY_API int ferry_gcs_object_add_location(struct ferry_gcs_client *c,
					    const struct ferry_object_id *id,
					    const struct ferry_node_id *node, uint64_t size_bytes);
FERRY_API int ferry_gcs_object_remove_location(struct ferry_gcs_client *c,
					       const struct ferry_object_id *id,
					       const struct ferry_node_id *node);
FERRY_API int ferry_gcs_object_lookup(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				      struct ferry_gcs_object_info *out);

/*
 * ferry_gcs_object_lookup_batch() - what ferry_gcs_object_lookup() tells, for @n (1..16384)
 * objects at once: one request per shard holding some of them, all in flight together under one
 * deadline. Returns how many were found and *@out, one allocation (ferry_gcs_free(*@out) frees
 * everything in it); or an error when no shard answered. A shard that failed marks its entries
 * with its error and the others still count.
 */
struct ferry_gcs_object_batch {
	size_t n;			     /* entries: one per ID asked, in the caller's order */
	int *status;			     /* per entry: 0 found, -ENOENT unknown, or the error
					      * of its shard (-ETIMEDOUT, ...) */
	struct ferry_gcs_object_info *infos; /* per entry, valid where status is 0; locations
					      * and places point into this allocation */
};
FERRY_API int ferry_gcs_object_lookup_batch(struct ferry_gcs_client *c,
					    const struct ferry_object_id *ids, size_t n,
					    struct ferry_gcs_object_batch **out);

/* The async forms of the calls above (see "Asynchronous calls" for cb, status and result). */
FERRY_API int ferry_gcs_kv_multi_get_async(struct ferry_gcs_client *c, const void *ns,
					   size_t ns_size, const struct ferry_gcs_bytes *keys,
					   size_t n, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_kv_keys_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				      const void *prefix, size_t prefix_size, ferry_gcs_done_fn cb,
				      void *arg);
FERRY_API int ferry_gcs_kv_delete_prefix_async(struct ferry_gcs_client *c, const void *ns,
					       size_t ns_size, const void *prefix,
					       size_t prefix_size, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_node_register_async(struct ferry_gcs_client *c,
					    const struct ferry_gcs_node_info *node,
					    ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_node_heartbeat_async(struct ferry_gcs_client *c,
					     const struct ferry_node_id *id, double avail_cpu,
					     double avail_gpu, double avail_memory_bytes,
					     ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_node_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb,
					void *arg);
FERRY_API int ferry_gcs_node_report_load_async(struct ferry_gcs_client *c,
					       const struct ferry_gcs_node_load *load,
					       ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_node_load_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb,
					     void *arg);
FERRY_API int ferry_gcs_node_drain_async(struct ferry_gcs_client *c, const struct ferry_node_id *id,
					 ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_node_unregister_async(struct ferry_gcs_client *c,
					      const struct ferry_node_id *id, ferry_gcs_done_fn cb,
					      void *arg);
FERRY_API int ferry_gcs_job_add_async(struct ferry_gcs_client *c,
				      const struct ferry_gcs_job_info *job, ferry_gcs_done_fn cb,
				      void *arg);
FERRY_API int ferry_gcs_job_finish_async(struct ferry_gcs_client *c, const struct ferry_job_id *id,
					 ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_job_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_worker_add_async(struct ferry_gcs_client *c,
					 const struct ferry_gcs_worker_info *worker,
					 ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_worker_dead_async(struct ferry_gcs_client *c,
					  const struct ferry_worker_id *id,
					  enum ferry_gcs_exit exit_type, const char *message,
					  ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_worker_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb,
					  void *arg);
FERRY_API int ferry_gcs_actor_register_async(struct ferry_gcs_client *c,
					     const struct ferry_gcs_actor_info *actor,
					     ferry_gcs_done_fn cb, void *arg);
FERRY_API int
ferry_gcs_actor_update_async(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
			     enum ferry_gcs_actor_state state, const struct ferry_node_id *node,
			     const struct ferry_worker_id *worker, enum ferry_gcs_exit cause,
			     const char *message, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_actor_get_async(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
					ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_actor_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb,
					 void *arg);
FERRY_API int ferry_gcs_pg_create_async(struct ferry_gcs_client *c,
					const struct ferry_gcs_pg_info *pg, ferry_gcs_done_fn cb,
					void *arg);
FERRY_API int ferry_gcs_pg_update_async(struct ferry_gcs_client *c,
					const struct ferry_placement_group_id *id,
					enum ferry_gcs_pg_state state,
					const struct ferry_node_id *nodes, uint32_t nnodes,
					ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_pg_get_async(struct ferry_gcs_client *c,
				     const struct ferry_placement_group_id *id,
				     ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_pg_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_object_add_async(struct ferry_gcs_client *c,
					 const struct ferry_object_id *id,
					 const struct ferry_worker_id *owner_worker,
					 const struct ferry_node_id *owner_node,
					 uint64_t size_bytes, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_object_add_location_async(struct ferry_gcs_client *c,
						  const struct ferry_object_id *id,
						  const struct ferry_node_id *node,
						  uint64_t size_bytes, ferry_gcs_done_fn cb,
						  void *arg);
FERRY_API int ferry_gcs_object_remove_location_async(struct ferry_gcs_client *c,
						     const struct ferry_object_id *id,
						     const struct ferry_node_id *node,
						     ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_object_lookup_async(struct ferry_gcs_client *c,
					    const struct ferry_object_id *id, ferry_gcs_done_fn cb,
					    void *arg);
FERRY_API int ferry_gcs_object_lookup_batch_async(struct ferry_gcs_client *c,
						  const struct ferry_object_id *ids, size_t n,
						  ferry_gcs_done_fn cb, void *arg);

/* ---- subscriptions ---- */

enum ferry_gcs_event_kind {
	FERRY_GCS_EVENT_DELTA = 0,  /* a record changed (data empty: removed) */
	FERRY_GCS_EVENT_RESYNC = 1, /* forget what you hold for key (or all): a snapshot follows */
	FERRY_GCS_EVENT_SNAPSHOT = 2, /* one record of that snapshot */
	/* The snapshot of the scope the RESYNC named (the same key, or none) is complete: after it
	 * come only changes. No data. An empty snapshot (a key with no record yet) is RESYNC then
	 * SNAPSHOT_END, so a keyed subscription answers a lookup too. Callbacks should ignore
	 * kinds they do not know. */
	FERRY_GCS_EVENT_SNAPSHOT_END = 3,
};

/* One delivered message; every pointer is valid only during the callback. */
struct ferry_gcs_event {
	enum ferry_gcs_channel channel;	 /* where it was published */
	enum ferry_gcs_event_kind kind;	 /* delta, resync, snapshot, snapshot end */
	const uint8_t *key;		 /* the record's ID (16 bytes, objects 20), or NULL */
	size_t key_size;		 /* 0: whole channel (resync) */
	uint64_t seq;			 /* channel sequence number of the server incarnation */
	const void *data;		 /* the record, GCS record encoding */
	size_t size;			 /* its bytes; 0: removed */
	struct ferry_gcs_client *client; /* who delivers it */
};

typedef void (*ferry_gcs_event_fn)(void *arg, const struct ferry_gcs_event *ev);

/*
 * ferry_gcs_subscribe() - deliver every change on @channel (@key NULL) or of one record (@key:
 * its ID) to @fn(@arg, event) on the client's thread, starting with RESYNC, a snapshot of the
 * current state and SNAPSHOT_END. Object-location subscriptions go to the object's shard (whole
 * channel: every shard, each with its own RESYNC ... SNAPSHOT_END); others to shard 0. Blocks
 * until the server accepted it. 0, -EINVAL, -ENOSPC (the server's subscription limit),
 * -ENOMEM, -ETIMEDOUT. A subscription lasts until it is
 * unsubscribed or the client is destroyed (a refused or timed-out one is forgotten).
 */
FERRY_API int ferry_gcs_subscribe(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
				  const void *key, size_t key_size, ferry_gcs_event_fn fn,
				  void *arg);

/*
 * ferry_gcs_unsubscribe() - end every subscription of this client to exactly the scope
 * (@channel, @key) (@key NULL: the whole-channel ones, not the keyed ones). From the moment the
 * request reaches the loop thread no event is delivered to them and no reconnect renews them;
 * the server then stops queueing for the scope. 0, -ENOENT (no such subscription), -EINVAL,
 * -ENOMEM, -ETIMEDOUT. Safe from inside an event callback in its _async form.
 */
FERRY_API int ferry_gcs_unsubscribe(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
				    const void *key, size_t key_size);
/* The async forms: subscribe's @fn(@fn_arg, event) gets the events, @cb(@arg, ...) the answer. */
FERRY_API int ferry_gcs_subscribe_async(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
					const void *key, size_t key_size, ferry_gcs_event_fn fn,
					void *fn_arg, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_unsubscribe_async(struct ferry_gcs_client *c,
					  enum ferry_gcs_channel channel, const void *key,
					  size_t key_size, ferry_gcs_done_fn cb, void *arg);

/* ---- errors and logs: streams keyed by job ---- */

/*
 * ferry_gcs_error_report() - record an error of job @job (@type, @message: NUL-terminated text,
 * at most 64 KiB each) in the GCS's bounded error table, with the current time, and publish it
 * on FERRY_GCS_CH_ERRORS. Durable like every table write. 0, -EINVAL, or the server's error.
 */
FERRY_API int ferry_gcs_error_report(struct ferry_gcs_client *c, const struct ferry_job_id *job,
				     const char *type, const char *message);

/*
 * ferry_gcs_log_publish() - publish @size bytes (at most 64 KiB) as one line of job @job's log
 * on FERRY_GCS_CH_LOGS. Like Redis PUBLISH: delivered to the subscribers of that moment, never
 * stored (no table, no WAL: a subscriber that reconnects gets no snapshot of old lines, and a
 * resend after a reconnect may deliver a line twice). 0, -EINVAL, -E2BIG, or the server's error.
 */
FERRY_API int ferry_gcs_log_publish(struct ferry_gcs_client *c, const struct ferry_job_id *job,
				    const void *data, size_t size);
FERRY_API int ferry_gcs_error_report_async(struct ferry_gcs_client *c,
					   const struct ferry_job_id *job, const char *type,
					   const char *message, ferry_gcs_done_fn cb, void *arg);
FERRY_API int ferry_gcs_log_publish_async(struct ferry_gcs_client *c,
					  const struct ferry_job_id *job, const void *data,
					  size_t size, ferry_gcs_done_fn cb, void *arg);

/* An error record, as ferry_gcs_event_error() decodes it. */
struct ferry_gcs_error_info {
	struct ferry_job_id job; /* whose */
	uint64_t time_ms;	 /* when (wall clock, ms since the epoch) */
	const char *type;	 /* kind; points into the event */
	const char *message;	 /* text; points into the event */
};

/* A log line, as ferry_gcs_event_log() decodes it. */
struct ferry_gcs_log_info {
	struct ferry_job_id job; /* whose */
	const void *data;	 /* the bytes; point into the event */
	size_t size;		 /* their count */
};

/* Decoders for event data: 0, -EINVAL (another channel or a removal), -EPROTO (malformed).
 * node: out->address points into the event. object: out->locations (if any) must be freed with
 * ferry_gcs_free (out->places, in the same allocation, goes with it). error, log: pointers
 * into the event. */
FERRY_API int ferry_gcs_event_error(const struct ferry_gcs_event *ev,
				    struct ferry_gcs_error_info *out);
FERRY_API int ferry_gcs_event_log(const struct ferry_gcs_event *ev, struct ferry_gcs_log_info *out);
FERRY_API int ferry_gcs_event_node(const struct ferry_gcs_event *ev,
				   struct ferry_gcs_node_info *out);
FERRY_API int ferry_gcs_event_object(const struct ferry_gcs_event *ev,
				     struct ferry_gcs_object_info *out);

#ifdef __cplusplus
}
#endif
#endif
