/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's side of the runtime socket's messages (schema/runtime.fbs), decoded from untrusted
 * bytes into plain structs: RuntimeConnect, LeaseRequest, LeaseReturn, WorkerAssignReply, the
 * placement groups' Bundle* messages. Apart
 * from the server (rt_srv.c) so that the fuzz target (tests/fuzz/fuzz_node_rt.c) runs exactly
 * the decoder the node runs.
 *
 * Thread model: pure functions.
 */
#ifndef FERRY_NODE_RT_WIRE_H
#define FERRY_NODE_RT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/id.h>

#include "node/resources.h"

/* The caps of the runtime socket (runtime.fbs): RuntimeConnect, and the rest. */
#define FERRY__RT_CONNECT_MAX_BYTES (8u << 10)
#define FERRY__RT_FRAME_MAX_BYTES (1u << 20)
/* A worker's secret (FERRY_WORKER_SECRET: hex of this many bytes). */
#define FERRY__RT_SECRET_BYTES 32
/* A Unix socket path, NUL included (sun_path). */
#define FERRY__RT_PATH_MAX 108
/* A job's code path (a file on this host) and its content hash. */
#define FERRY__RT_CODE_PATH_MAX 4096
#define FERRY__RT_CODE_HASH_MAX 64
/* Resources one LeaseRequest may name. */
#define FERRY__RT_REQ_RES_MAX 16
/* Input locations one LeaseRequest may carry (more are a malformed request). */
#define FERRY__RT_REQ_INPUTS_MAX 16

/* LeaseRequest.strategy (runtime.fbs LeaseStrategy). */
enum ferry__rt_strategy {
	FERRY__RT_STRATEGY_DEFAULT = 0,
	FERRY__RT_STRATEGY_SPREAD = 1,
	FERRY__RT_STRATEGY_NODE_AFFINITY = 2,
};

/* bytes of a request's inputs in node's store. */
struct ferry__rt_input {
	struct ferry_node_id node; /* not nil */
	uint64_t bytes;		   /* > 0 */
};

/* RuntimeConnect. Pointers point into the payload (valid while it is). */
struct ferry__rt_connect {
	uint32_t protocol_version; /* must be FERRY_WIRE_PROTOCOL_VERSION (checked by the caller) */
	uint8_t kind;		   /* FERRY__WIRE_PEER_KIND_DRIVER, _WORKER or _CLI */
	struct ferry_worker_id id; /* the driver's or worker's ID (not nil) */
	const uint8_t *secret;	   /* workers: their secret; NULL: none */
	size_t secret_len;	   /* its bytes, <= FERRY__RT_SECRET_BYTES */
	int32_t pid;		   /* its pid as it says */
	struct ferry_job_id job;   /* drivers: their job (not nil) */
	const char *listen_path;   /* workers: the socket they serve (NUL-terminated); else NULL */
	uint16_t listen_port;	   /* workers: their TCP port on the node's ip, 0 none */
};

/* LeaseRequest. Amounts are in 1/FERRY_GCS_RESOURCE_UNIT, names unique, each > 0. */
struct ferry__rt_lease_request {
	uint64_t request_id;			      /* echoed in the LeaseGrant */
	struct ferry_job_id job;		      /* not nil */
	const char *code_path;			      /* NUL-terminated, 1..4095 bytes; or NULL */
	const uint8_t *code_hash;		      /* NULL: none */
	size_t code_hash_len;			      /* <= FERRY__RT_CODE_HASH_MAX */
	uint32_t nres;				      /* entries in res */
	struct ferry__res res[FERRY__RT_REQ_RES_MAX]; /* the resources asked for */
	struct ferry_placement_group_id pg;	      /* a placement group's bundle; nil: none */
	int32_t bundle_index;			      /* with pg: >= 0, or -1 (any) */
	bool placed;				      /* follows a placement: never forwarded */
	uint8_t strategy;			      /* enum ferry__rt_strategy */
	struct ferry_node_id affinity;		      /* NODE_AFFINITY: the node (not nil) */
	bool affinity_soft;			      /* ... elsewhere if dead or full */
	uint32_t ninputs;			      /* entries in inputs */
	struct ferry__rt_input inputs[FERRY__RT_REQ_INPUTS_MAX]; /* input bytes by node */
};

/* The most bundles of one group (the GCS's limit). */
#define FERRY__RT_PG_BUNDLES_MAX 1024

/* BundlePrepare / BundleCommit / BundleCancel / BundleReturn (nres 0 but for prepare). */
struct ferry__rt_bundle_msg {
	uint64_t request_id;			      /* echoed in the BundleReply */
	struct ferry_placement_group_id pg;	      /* the group (not nil) */
	uint32_t index;				      /* < FERRY__RT_PG_BUNDLES_MAX */
	uint32_t nres;				      /* prepare: entries in res, >= 1 */
	struct ferry__res res[FERRY__RT_REQ_RES_MAX]; /* prepare: what it reserves */
};

/* WorkerAssignReply. */
struct ferry__rt_assign_reply {
	struct ferry_job_id job; /* the job it was assigned */
	int32_t status;		 /* 0 or -errno (checked: 0 or -1..-4095) */
	const char *message;	 /* NUL-terminated, or NULL */
};

/* LeaseDetach. */
struct ferry__rt_detach {
	uint64_t lease_id;	     /* the owner's lease */
	struct ferry_actor_id actor; /* the detached actor it hosts (not nil) */
};

/* WorkerBlocked. */
struct ferry__rt_blocked {
	bool blocked;		   /* its task waits (true) or runs again */
	struct ferry_task_id task; /* the waiting PushTask, or nil */
	uint64_t wait_id;	   /* the worker's number of that wait, or 0 */
};

/* One decoded message of the runtime socket. */
struct ferry__rt_msg {
	uint16_t type; /* FERRY__WIRE_MSG_* */
	union {
		struct ferry__rt_connect connect;     /* RUNTIME_CONNECT */
		struct ferry__rt_lease_request lease; /* LEASE_REQUEST */
		struct {
			uint64_t lease_id; /* LEASE_RETURN */
			bool busy;	   /* its owner had tasks in flight on it */
			uint32_t tasks;	   /* tasks it ran */
			uint64_t busy_us;  /* ... for this long */
		} ret;
		struct ferry__rt_detach detach;		    /* LEASE_DETACH */
		struct ferry__rt_assign_reply assign_reply; /* WORKER_ASSIGN_REPLY */
		struct ferry__rt_blocked blocked;	    /* WORKER_BLOCKED */
		struct ferry__rt_bundle_msg bundle;	    /* BUNDLE_PREPARE .. _RETURN */
		struct {
			struct ferry__wire_objects_free_view v; /* OBJECTS_FREE: its IDs */
			uint32_t count;				/* how many */
		} free;
		struct {
			uint64_t seq;	     /* NODE_INFO, TIMELINE, PLASMA_STATS, PLASMA_LIST */
			uint32_t max;	     /* TIMELINE: max_events (0: all kept) */
			const void *payload; /* PLASMA_LIST: the request (verified) */
		} query;
	};
};

/*
 * ferry__rt_decode() - verify and decode one message of @type the node accepts on its runtime
 * socket. 0 and *@out; -EPROTO (not such a message, malformed, a message the node does not
 * take, a required field missing); -EINVAL (a field out of range: a nil ID, a bad resource
 * name or amount, a string holding a NUL, a status that is not -errno); -ENAMETOOLONG (a path
 * too long). @why (@why_size bytes) says what was wrong, for the caller's log line.
 */
int ferry__rt_decode(uint16_t type, const void *payload, size_t len, struct ferry__rt_msg *out,
		     char *why, size_t why_size);

#endif
