/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Global Control Store: the public vocabulary (channels, states, strategies) shared by the GCS
 * server, its client and anyone reading GCS data, plus the object directory's shard routing rule.
 * The client API comes in a later issue.
 *
 * Thread model: everything here is a constant or a pure function; thread-safe.
 */
#ifndef FERRY_GCS_H
#define FERRY_GCS_H

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

#ifdef __cplusplus
}
#endif
#endif
