/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Global Control Store: the public vocabulary (channels, states, strategies) shared by the GCS
 * server, its client and anyone reading GCS data, the object directory's shard routing rule, and
 * the GCS client.
 *
 * Thread model: the vocabulary is constants and pure functions. A client runs its own loop
 * thread (one io_uring loop, one connection per GCS shard); its functions may be called from any
 * thread except that loop thread (so not from inside an event callback: they block on it), and
 * subscription callbacks run on the loop thread, one at a time, in delivery order.
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

/* Pub/sub channels. Keys: node, job, worker, actor and object IDs; errors and logs by job ID. */
enum ferry_gcs_channel {
	FERRY_GCS_CH_NODES = 0,
	FERRY_GCS_CH_JOBS = 1,
	FERRY_GCS_CH_WORKERS = 2,
	FERRY_GCS_CH_ACTORS = 3,
	FERRY_GCS_CH_OBJECT_LOCATIONS = 4,
	FERRY_GCS_CH_ERRORS = 5,
	FERRY_GCS_CH_LOGS = 6,
	FERRY_GCS_CH_COUNT = 7,
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
struct ferry_gcs_client_opts {
	const char *const *addresses; /* "host:port" of each shard, shard 0 first */
	size_t naddresses;	      /* shards, >= 1 */
	const void *token;	      /* cluster token (copied) */
	size_t token_len;	      /* its bytes, > 0 */
	unsigned timeout_ms;	      /* connect and blocking calls; 0 = 10 s */
	unsigned reconnect_ms;	      /* wait between reconnect attempts; 0 = 100 ms */
};

/*
 * ferry_gcs_client_connect() - start a client and wait until every shard accepted it. From then
 * on it reconnects on its own when a connection drops, resends the requests not answered yet,
 * and resubscribes (resuming from the last sequence number it delivered: the server replays the
 * missed messages or sends RESYNC + a snapshot). Returns 0 and *@out; -EINVAL (bad options,
 * logged), -EACCES (token refused), -ETIMEDOUT (a shard was not reachable in time), -ENOMEM.
 */
FERRY_API int ferry_gcs_client_connect(const struct ferry_gcs_client_opts *opts,
				       struct ferry_gcs_client **out);
/* ferry_gcs_client_destroy() - close every connection and stop the loop thread. Calls still
 * blocked in other threads must have returned. NULL is a no-op. */
FERRY_API void ferry_gcs_client_destroy(struct ferry_gcs_client *c);
/* ferry_gcs_free() - free memory the client returned (KV values, object locations). */
FERRY_API void ferry_gcs_free(void *p);

/*
 * Blocking calls. Each returns once the GCS answered (writes: once durable), or -ETIMEDOUT
 * after timeout_ms (a write may still be applied later), -ENOMEM, or the server's error.
 * Byte strings are borrowed for the call. Namespaces may be empty.
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

/* A node as registered (the node table lives on shard 0). */
struct ferry_gcs_node_info {
	struct ferry_node_id id;	 /* the node */
	const char *address;		 /* where its node manager listens (register: required) */
	double cpu;			 /* CPUs */
	double gpu;			 /* GPUs */
	double memory_bytes;		 /* memory */
	uint64_t store_capacity_bytes;	 /* plasma arena size */
	enum ferry_gcs_node_state state; /* events only: alive, draining, dead */
};

/* ferry_gcs_node_register() - add @node (alive). 1 added, 0 re-registered, -EEXIST (dead). */
FERRY_API int ferry_gcs_node_register(struct ferry_gcs_client *c,
				      const struct ferry_gcs_node_info *node);
/* ferry_gcs_node_heartbeat() - the node is alive; heartbeat at least every deadline / 10
 * (default 100 ms). 1, or -ENOENT (unknown or declared dead). */
FERRY_API int ferry_gcs_node_heartbeat(struct ferry_gcs_client *c, const struct ferry_node_id *id,
				       double avail_cpu, double avail_gpu,
				       double avail_memory_bytes);

/* An object directory entry. */
struct ferry_gcs_object_info {
	struct ferry_object_id id;	     /* the object */
	struct ferry_worker_id owner_worker; /* its owner */
	struct ferry_node_id owner_node;     /* the owner's node */
	uint64_t size_bytes;		     /* 0 = unknown */
	enum ferry_gcs_object_state state;   /* pending, available, lost */
	uint32_t nlocations;		     /* length of locations */
	struct ferry_node_id *locations;     /* copies; lookup: free with ferry_gcs_free */
};

/* Object directory calls, routed to shard ferry_gcs_object_shard(id, nshards).
 * object_add: 1, -EEXIST. add/remove_location: 1 changed, 0 nothing to do, -ENOENT.
 * object_lookup: 0 and *@out (free out->locations), -ENOENT. */
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

/* ---- subscriptions ---- */

enum ferry_gcs_event_kind {
	FERRY_GCS_EVENT_DELTA = 0,  /* a record changed (data empty: removed) */
	FERRY_GCS_EVENT_RESYNC = 1, /* forget what you hold for key (or all): a snapshot follows */
	FERRY_GCS_EVENT_SNAPSHOT = 2, /* one record of that snapshot */
};

/* One delivered message; every pointer is valid only during the callback. */
struct ferry_gcs_event {
	enum ferry_gcs_channel channel;	 /* where it was published */
	enum ferry_gcs_event_kind kind;	 /* delta, resync, snapshot */
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
 * its ID) to @fn(@arg, event) on the client's thread, starting with RESYNC + a snapshot of the
 * current state. Object-location subscriptions go to the object's shard (whole channel: every
 * shard); others to shard 0. Blocks until the server accepted it. 0, -EINVAL, -ENOSPC (the
 * server's subscription limit), -ENOMEM, -ETIMEDOUT. Subscriptions last as long as the client.
 */
FERRY_API int ferry_gcs_subscribe(struct ferry_gcs_client *c, enum ferry_gcs_channel channel,
				  const void *key, size_t key_size, ferry_gcs_event_fn fn,
				  void *arg);

/* Decoders for event data: 0, -EINVAL (another channel or a removal), -EPROTO (malformed).
 * node: out->address points into the event. object: out->locations (if any) must be freed with
 * ferry_gcs_free. */
FERRY_API int ferry_gcs_event_node(const struct ferry_gcs_event *ev,
				   struct ferry_gcs_node_info *out);
FERRY_API int ferry_gcs_event_object(const struct ferry_gcs_event *ev,
				     struct ferry_gcs_object_info *out);

#ifdef __cplusplus
}
#endif
#endif
