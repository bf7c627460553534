/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS tables: nodes, jobs, workers, actors (with their state machine), placement groups,
 * and two bounded logs: task events and errors.
 *
 * Records: callers describe a record with a struct whose strings and arrays they own (borrowed
 * for the call); the table keeps its own copy in one allocation. Records handed out are const and
 * stay valid until the next mutation of the same record (a change that touches strings makes a
 * new copy). Every mutation either fails before changing anything or completes without needing
 * memory, so a failed call (-ENOMEM included) leaves the tables as they were.
 *
 * Mutations that change a record return 1, "nothing to change" returns 0 (so a retried request is
 * harmless), errors are negative: -EINVAL (bad field or illegal transition, logged), -ENOENT,
 * -EEXIST, -ENOMEM.
 *
 * Thread model: not thread-safe; the GCS loop thread owns the tables.
 */
#ifndef FERRY_GCS_TABLES_H
#define FERRY_GCS_TABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>
#include <ferry/id.h>

#define FERRY__GCS_NAME_MAX 128	    /* names, label keys and values, classes */
#define FERRY__GCS_ADDRESS_MAX 256  /* "host:port" and the like */
#define FERRY__GCS_TEXT_MAX 65536   /* messages, entrypoints */
#define FERRY__GCS_MAX_CUSTOM 64    /* custom resources per node or bundle */
#define FERRY__GCS_MAX_LABELS 64    /* labels per node */
#define FERRY__GCS_MAX_BUNDLES 1024 /* bundles per placement group */

/*
 * Worker and actor records are the public structs of include/ferry/gcs.h (struct
 * ferry_gcs_worker_info, struct ferry_gcs_actor_info), and a custom resource is struct
 * ferry_gcs_resource: one declaration of their fields, so the table, the wire codec and the
 * client's lists cannot drift apart. In a record held by the tables, the strings point into the
 * table's own copy.
 */

/* Amounts of resources (totals of a node, or a bundle's demand). */
struct ferry__gcs_resources {
	double cpu;				 /* CPUs */
	double gpu;				 /* GPUs */
	double memory_bytes;			 /* memory */
	uint32_t ncustom;			 /* length of custom */
	const struct ferry_gcs_resource *custom; /* name -> amount */
};

struct ferry__gcs_label {
	const char *key;   /* not empty, unique per node */
	const char *value; /* may be NULL */
};

struct ferry__gcs_node {
	struct ferry_node_id id;	       /* the node */
	const char *address;		       /* where its node manager listens */
	struct ferry__gcs_resources total;     /* what it has */
	uint32_t nlabels;		       /* length of labels */
	const struct ferry__gcs_label *labels; /* key -> value */
	uint64_t store_capacity_bytes;	       /* plasma arena size */
	uint32_t transports;		       /* FERRY_GCS_TRANSPORT_* served */
	enum ferry_gcs_node_state state;       /* alive, draining, dead */
	uint64_t start_ms;		       /* registration time (caller's clock) */
	uint64_t end_ms;		       /* time of death, 0 while alive */
	uint64_t last_heartbeat_ms;	       /* time of the last heartbeat */
	double avail_cpu;		       /* from the last heartbeat */
	double avail_gpu;		       /* from the last heartbeat */
	double avail_memory_bytes;	       /* from the last heartbeat */
	uint32_t queue_length;		       /* tasks queued, from the last heartbeat */
};

struct ferry__gcs_heartbeat {
	struct ferry_node_id id;   /* the node */
	uint64_t time_ms;	   /* when (caller's clock) */
	double avail_cpu;	   /* CPUs free */
	double avail_gpu;	   /* GPUs free */
	double avail_memory_bytes; /* memory free */
	uint32_t queue_length;	   /* tasks queued */
};

struct ferry__gcs_job {
	struct ferry_job_id id;		  /* the job */
	enum ferry_gcs_job_state state;	  /* running, finished */
	struct ferry_node_id driver_node; /* node the driver runs on */
	uint32_t driver_pid;		  /* driver's process ID */
	const char *driver_address;	  /* where the driver listens, or NULL */
	const char *entrypoint;		  /* what was run, or NULL */
	uint64_t start_ms;		  /* submission time */
	uint64_t end_ms;		  /* finish time, 0 while running */
};

struct ferry__gcs_worker_exit {
	struct ferry_worker_id id;     /* the worker */
	uint64_t time_ms;	       /* when */
	enum ferry_gcs_exit exit_type; /* why */
	const char *message;	       /* details, or NULL */
};

/* A state change of an actor. */
struct ferry__gcs_actor_update {
	struct ferry_actor_id id;	  /* the actor */
	enum ferry_gcs_actor_state state; /* the new state */
	struct ferry_node_id node;	  /* ALIVE: where (not nil) */
	struct ferry_worker_id worker;	  /* ALIVE: which worker (not nil) */
	enum ferry_gcs_exit death_cause;  /* DEAD: why */
	const char *death_message;	  /* DEAD: details, or NULL */
};

struct ferry__gcs_bundle {
	struct ferry__gcs_resources resources; /* demand */
	struct ferry_node_id node;	       /* where it is placed, nil if not yet */
};

struct ferry__gcs_pg {
	struct ferry_placement_group_id id;	 /* the group */
	struct ferry_job_id job;		 /* job that created it */
	const char *name;			 /* or NULL */
	enum ferry_gcs_pg_strategy strategy;	 /* pack, spread, ... */
	enum ferry_gcs_pg_state state;		 /* see include/ferry/gcs.h */
	uint32_t nbundles;			 /* length of bundles, >= 1 */
	const struct ferry__gcs_bundle *bundles; /* what to reserve and where */
};

/* A state change of a placement group; CREATED carries every bundle's node. */
struct ferry__gcs_pg_update {
	struct ferry_placement_group_id id; /* the group */
	enum ferry_gcs_pg_state state;	    /* the new state */
	uint32_t nnodes;		    /* CREATED: = nbundles; else 0 */
	const struct ferry_node_id *nodes;  /* CREATED: node of each bundle */
};

#define FERRY__GCS_TASK_NAME_MAX 64 /* a task event's function name, bytes */

struct ferry__gcs_task_event {
	struct ferry_task_id task;		 /* the task */
	struct ferry_job_id job;		 /* its job */
	uint32_t attempt;			 /* 0 first run, then retries */
	enum ferry_gcs_task_state state;	 /* what happened */
	struct ferry_node_id node;		 /* where, or nil */
	struct ferry_worker_id worker;		 /* which worker, or nil */
	uint64_t time_ms;			 /* when */
	char name[FERRY__GCS_TASK_NAME_MAX + 1]; /* its function, "" if unknown */
};

struct ferry__gcs_error {
	struct ferry_job_id job; /* job it concerns, or nil */
	uint64_t time_ms;	 /* when */
	const char *type;	 /* short kind, e.g. "worker_died" */
	const char *message;	 /* details */
};

/* Kinds of records, for the generic restore/iteration functions. */
enum ferry__gcs_table {
	FERRY__GCS_T_NODES = 0,
	FERRY__GCS_T_JOBS = 1,
	FERRY__GCS_T_WORKERS = 2,
	FERRY__GCS_T_ACTORS = 3,
	FERRY__GCS_T_PGS = 4,
	FERRY__GCS_T_COUNT = 5,	       /* keyed tables; the logs below are separate */
	FERRY__GCS_T_LOADS = 16,       /* not a table: the server's node load reports (list only) */
	FERRY__GCS_T_TASK_EVENTS = 17, /* the task events log (list only, oldest first) */
};

/* Options; zeros are the defaults. */
struct ferry__gcs_tables_opts {
	size_t max_task_events; /* task events kept, oldest dropped first; 0 = 100000 */
	size_t max_errors;	/* errors kept; 0 = 10000 */
};

struct ferry__gcs_tables;

int ferry__gcs_tables_create(const struct ferry__gcs_tables_opts *opts,
			     struct ferry__gcs_tables **out);
void ferry__gcs_tables_destroy(struct ferry__gcs_tables *t);

/*
 * Nodes. register: a new node (state becomes ALIVE), or an alive node registering again (after
 * a GCS restart): its record is replaced (returns 0). A dead node cannot come back: -EEXIST.
 * heartbeat: updates the load fields; -ENOENT for an unknown or dead node.
 * set_state: ALIVE <-> DRAINING, either -> DEAD (terminal); 0 if already in @state.
 */
int ferry__gcs_node_register(struct ferry__gcs_tables *t, const struct ferry__gcs_node *n,
			     const struct ferry__gcs_node **out);
int ferry__gcs_node_heartbeat(struct ferry__gcs_tables *t, const struct ferry__gcs_heartbeat *hb,
			      const struct ferry__gcs_node **out);
int ferry__gcs_node_set_state(struct ferry__gcs_tables *t, const struct ferry_node_id *id,
			      enum ferry_gcs_node_state state, uint64_t time_ms,
			      const struct ferry__gcs_node **out);
const struct ferry__gcs_node *ferry__gcs_node_get(const struct ferry__gcs_tables *t,
						  const struct ferry_node_id *id);

/* Jobs. add: state becomes RUNNING; -EEXIST. finish: 1, or 0 if already finished. */
int ferry__gcs_job_add(struct ferry__gcs_tables *t, const struct ferry__gcs_job *j,
		       const struct ferry__gcs_job **out);
int ferry__gcs_job_finish(struct ferry__gcs_tables *t, const struct ferry_job_id *id,
			  uint64_t time_ms, const struct ferry__gcs_job **out);
const struct ferry__gcs_job *ferry__gcs_job_get(const struct ferry__gcs_tables *t,
						const struct ferry_job_id *id);

/* Workers. add: state becomes ALIVE; -EEXIST. dead: 1, or 0 if already dead. */
int ferry__gcs_worker_add(struct ferry__gcs_tables *t, const struct ferry_gcs_worker_info *w,
			  const struct ferry_gcs_worker_info **out);
int ferry__gcs_worker_dead(struct ferry__gcs_tables *t, const struct ferry__gcs_worker_exit *x,
			   const struct ferry_gcs_worker_info **out);
const struct ferry_gcs_worker_info *ferry__gcs_worker_get(const struct ferry__gcs_tables *t,
							  const struct ferry_worker_id *id);

/*
 * ferry__gcs_workers_on_node_died() - mark every alive worker on @node dead (exit NODE_DIED),
 * without allocating. Calls @fn for each (may be NULL). Returns how many.
 */
int ferry__gcs_workers_on_node_died(struct ferry__gcs_tables *t, const struct ferry_node_id *node,
				    uint64_t time_ms,
				    void (*fn)(void *arg, const struct ferry_gcs_worker_info *w),
				    void *arg);

/* Actors. register: @a->state must be PENDING (restarts 0); -EEXIST. transition: 1, 0 if
 * already in that state, -EINVAL for an illegal transition (logged). */
int ferry__gcs_actor_register(struct ferry__gcs_tables *t, const struct ferry_gcs_actor_info *a,
			      const struct ferry_gcs_actor_info **out);
int ferry__gcs_actor_transition(struct ferry__gcs_tables *t,
				const struct ferry__gcs_actor_update *u,
				const struct ferry_gcs_actor_info **out);
const struct ferry_gcs_actor_info *ferry__gcs_actor_get(const struct ferry__gcs_tables *t,
							const struct ferry_actor_id *id);

/* Placement groups. create: state becomes PENDING, bundle nodes nil; -EEXIST. set_state: 1,
 * 0 if already there (CREATED also compares the nodes), -EINVAL illegal. */
int ferry__gcs_pg_create(struct ferry__gcs_tables *t, const struct ferry__gcs_pg *pg,
			 const struct ferry__gcs_pg **out);
int ferry__gcs_pg_set_state(struct ferry__gcs_tables *t, const struct ferry__gcs_pg_update *u,
			    const struct ferry__gcs_pg **out);
const struct ferry__gcs_pg *ferry__gcs_pg_get(const struct ferry__gcs_tables *t,
					      const struct ferry_placement_group_id *id);

/* Bounded logs: append (dropping the oldest past the limit) and iterate oldest first. */
int ferry__gcs_task_event_add(struct ferry__gcs_tables *t, const struct ferry__gcs_task_event *e);
int ferry__gcs_error_add(struct ferry__gcs_tables *t, const struct ferry__gcs_error *e,
			 const struct ferry__gcs_error **out);
const struct ferry__gcs_task_event *ferry__gcs_task_event_at(const struct ferry__gcs_tables *t,
							     size_t index);
const struct ferry__gcs_error *ferry__gcs_error_at(const struct ferry__gcs_tables *t, size_t index);
/* Entries kept, and entries dropped since creation (or as restored). */
size_t ferry__gcs_task_events_count(const struct ferry__gcs_tables *t);
size_t ferry__gcs_errors_count(const struct ferry__gcs_tables *t);
void ferry__gcs_logs_dropped(const struct ferry__gcs_tables *t, uint64_t *task_events,
			     uint64_t *errors);
void ferry__gcs_logs_set_dropped(struct ferry__gcs_tables *t, uint64_t task_events,
				 uint64_t errors);

/*
 * Generic access to the keyed tables. restore: put @record (a struct ferry__gcs_node, _job, ...
 * as @table says) exactly as given, bypassing transition rules (snapshots); fields are still
 * validated. 1, -EEXIST, -EINVAL, -ENOMEM. count and next: iterate (start *@cursor at 0; NULL at
 * the end; no changes meanwhile).
 */
int ferry__gcs_tables_restore(struct ferry__gcs_tables *t, enum ferry__gcs_table table,
			      const void *record);
size_t ferry__gcs_tables_count(const struct ferry__gcs_tables *t, enum ferry__gcs_table table);
const void *ferry__gcs_tables_next(const struct ferry__gcs_tables *t, enum ferry__gcs_table table,
				   size_t *cursor);

#endif
