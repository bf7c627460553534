/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS mutations as values: every change to the tables, the KV store and the object directory is
 * a struct ferry__gcs_op, applied by gcs/state.c and, when durable, encoded into a WAL record.
 * Snapshots are sequences of ops too (the RESTORE_* kinds put records back exactly).
 *
 * Record encoding (the WAL payload, a GcsRequest's op, a lookup's reply value, a published
 * item's data): FERRY__GCS_RECORD_PREFIX zero bytes, then a schema/gcs.fbs GcsRecord whose
 * version is FERRY__GCS_RECORD_VERSION and whose type selects the one table it carries
 * (gcs/ops_fb.c, gcs/ops_fb_obj.c, gcs/ops_fb_beat.c). A decoder refuses another version, a
 * type without its table, counts over the limits of tables.h, objdir.h and ferry/gcs.h, and
 * text with a NUL inside (-EPROTO, logged). Fields added later are FlatBuffers fields: absent
 * ones read as 0.
 *
 * NODE_HEARTBEAT and NODE_LOAD are GcsRecords too, but travel as requests only: the server
 * answers them from memory and never logs them (gcs/server_load.c). A record in the first
 * release's hand-written format (a nonzero op-type byte, then little-endian fields) is refused;
 * the WAL's format version (gcs/wal.h) keeps an old log from reaching the decoder at all.
 *
 * Thread model: pure functions.
 */
#ifndef FERRY_GCS_OPS_H
#define FERRY_GCS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gcs/codec.h"
#include "gcs/objdir.h"
#include "gcs/tables.h"

enum ferry__gcs_op_type {
	FERRY__GCS_OP_NODE_REGISTER = 1,
	FERRY__GCS_OP_NODE_HEARTBEAT = 2,
	FERRY__GCS_OP_NODE_STATE = 3, /* DEAD cascades: workers on it, object locations */
	FERRY__GCS_OP_JOB_ADD = 4,
	FERRY__GCS_OP_JOB_FINISH = 5,
	FERRY__GCS_OP_WORKER_ADD = 6,
	FERRY__GCS_OP_WORKER_DEAD = 7, /* cascades: the objects it owns are lost */
	FERRY__GCS_OP_ACTOR_REGISTER = 8,
	FERRY__GCS_OP_ACTOR_UPDATE = 9,
	FERRY__GCS_OP_PG_CREATE = 10,
	FERRY__GCS_OP_PG_UPDATE = 11,
	FERRY__GCS_OP_TASK_EVENT = 12,
	FERRY__GCS_OP_ERROR = 13,
	FERRY__GCS_OP_KV_PUT = 14,
	FERRY__GCS_OP_KV_DELETE = 15,
	FERRY__GCS_OP_KV_DELETE_PREFIX = 16, /* kv.key is the prefix */
	FERRY__GCS_OP_OBJ_ADD = 17,
	FERRY__GCS_OP_OBJ_ADD_LOCATION = 18,
	FERRY__GCS_OP_OBJ_REMOVE_LOCATION = 19,
	FERRY__GCS_OP_OBJ_SPILLED = 20,
	FERRY__GCS_OP_OBJ_REMOVE = 21,
	FERRY__GCS_OP_OBJ_OWNER_DIED = 22, /* an owner that is not a registered worker (driver) */
	FERRY__GCS_OP_REQUEST_DONE = 23,   /* a client request's result, for deduplication */
	FERRY__GCS_OP_OBJ_NODE_DIED = 24, /* another shard declared node_id dead: drop its copies */
	FERRY__GCS_OP_LOG = 25,	      /* a log line for the logs channel: published, never stored */
	FERRY__GCS_OP_NODE_LOAD = 26, /* a node's load report: kept in memory, never logged */
	/* Snapshot records: put a record back exactly as it was. */
	FERRY__GCS_OP_RESTORE_NODE = 64,
	FERRY__GCS_OP_RESTORE_JOB = 65,
	FERRY__GCS_OP_RESTORE_WORKER = 66,
	FERRY__GCS_OP_RESTORE_ACTOR = 67,
	FERRY__GCS_OP_RESTORE_PG = 68,
	FERRY__GCS_OP_RESTORE_OBJ = 69,
	FERRY__GCS_OP_RESTORE_DROPPED = 70,
};

/* An allocation a decoded op owns (its arrays). */
struct ferry__gcs_op_block {
	struct ferry__gcs_op_block *next; /* next block */
	max_align_t data[];		  /* the array */
};

struct ferry__gcs_op {
	enum ferry__gcs_op_type type; /* selects the union member */
	union {
		struct ferry__gcs_node node;	       /* NODE_REGISTER, RESTORE_NODE */
		struct ferry__gcs_heartbeat heartbeat; /* NODE_HEARTBEAT */
		struct ferry_gcs_node_load load;       /* NODE_LOAD */
		struct {
			struct ferry_node_id id;	 /* the node */
			enum ferry_gcs_node_state state; /* new state */
			uint64_t time_ms;		 /* when */
		} node_state;				 /* NODE_STATE */
		struct ferry__gcs_job job;		 /* JOB_ADD, RESTORE_JOB */
		struct {
			struct ferry_job_id id;		     /* the job */
			uint64_t time_ms;		     /* when */
		} job_finish;				     /* JOB_FINISH */
		struct ferry_gcs_worker_info worker;	     /* WORKER_ADD, RESTORE_WORKER */
		struct ferry__gcs_worker_exit worker_exit;   /* WORKER_DEAD */
		struct ferry_gcs_actor_info actor;	     /* ACTOR_REGISTER, RESTORE_ACTOR */
		struct ferry__gcs_actor_update actor_update; /* ACTOR_UPDATE */
		struct ferry__gcs_pg pg;		     /* PG_CREATE, RESTORE_PG */
		struct ferry__gcs_pg_update pg_update;	     /* PG_UPDATE */
		struct ferry__gcs_task_event task_event;     /* TASK_EVENT */
		struct ferry__gcs_error error;		     /* ERROR */
		struct {
			struct ferry__gcs_slice ns;    /* namespace */
			struct ferry__gcs_slice key;   /* key, or prefix */
			struct ferry__gcs_slice value; /* PUT: the value */
			bool overwrite;		       /* PUT: replace an existing value */
		} kv;				       /* KV_* */
		struct ferry__objdir_info obj;	       /* OBJ_ADD, RESTORE_OBJ */
		struct {
			struct ferry_object_id id; /* the object */
			struct ferry_node_id node; /* the copy's node */
			uint64_t size_bytes;	   /* ADD: size, 0 = unknown */
			uint32_t metadata_bytes;   /* ADD: metadata size, with size_bytes */
			struct ferry_gcs_object_place place; /* ADD: where; all 0: unknown */
		} obj_location;				     /* OBJ_ADD/REMOVE_LOCATION */
		struct {
			struct ferry_object_id id; /* the object */
			const char *url;	   /* spilled copy, NULL = none */
		} obj_spilled;			   /* OBJ_SPILLED */
		struct ferry_object_id obj_id;	   /* OBJ_REMOVE */
		struct ferry_worker_id owner;	   /* OBJ_OWNER_DIED */
		struct ferry_node_id node_id;	   /* OBJ_NODE_DIED */
		struct {
			uint8_t client[16]; /* the client's random ID */
			uint64_t seq;	    /* its request seq */
			int32_t status;	    /* the result it got */
		} request_done;		    /* REQUEST_DONE (server-made only) */
		struct {
			struct ferry_job_id job;      /* whose (the channel key) */
			struct ferry__gcs_slice data; /* the line, opaque bytes */
		} log;				      /* LOG */
		struct {
			uint64_t task_events; /* task events dropped so far */
			uint64_t errors;      /* errors dropped so far */
		} dropped;		      /* RESTORE_DROPPED */
	};
	struct ferry__gcs_op_block *owned; /* decode: arrays it allocated; NULL otherwise */
};

/* Bytes before a GcsRecord FlatBuffer (all zero), and the record version it carries. */
#define FERRY__GCS_RECORD_PREFIX 4
#define FERRY__GCS_RECORD_VERSION 2

/* ferry__gcs_op_encode() - append @op's record to @w (errors stick in @w->err; an unknown
 * type: -EINVAL). The codec is gcs/ops_fb*.c. */
void ferry__gcs_op_encode(const struct ferry__gcs_op *op, struct ferry__gcs_writer *w);

/*
 * ferry__gcs_op_decode() - parse one record. Text, byte strings and ID arrays borrow from @data
 * (keep it alive while using @op); other arrays are allocated: ferry__gcs_op_release() frees
 * them. Returns 0, -EPROTO (malformed: unknown type, short, trailing bytes, counts over the
 * limits; logged), -ENOMEM. On error nothing needs releasing.
 */
int ferry__gcs_op_decode(const void *data, size_t size, struct ferry__gcs_op *op);
void ferry__gcs_op_release(struct ferry__gcs_op *op);

#endif
