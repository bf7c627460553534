/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS tables: keyed storage of records, the node/actor/placement group state machines, and the
 * two bounded logs (task events, errors). Field checks and record copies are in records.c.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/records.h"
#include "gcs/tables.h"

/* A ring of fixed-size items that keeps the newest @max, growing its array up to that. */
struct ring {
	uint8_t *items;	  /* cap * elem bytes */
	size_t elem;	  /* bytes per item */
	size_t cap;	  /* items allocated */
	size_t head;	  /* index of the oldest item */
	size_t count;	  /* items held */
	size_t max;	  /* items kept at most */
	uint64_t dropped; /* items evicted since creation */
};

struct ferry__gcs_tables {
	struct ferry__hashmap maps[FERRY__GCS_T_COUNT]; /* 16-byte ID -> record (one allocation) */
	struct ring task_events;			/* struct ferry__gcs_task_event */
	struct ring errors; /* struct ferry__gcs_error * (each one allocation) */
};

/* ---- keyed storage ---- */

int ferry__gcs_tables_create(const struct ferry__gcs_tables_opts *opts,
			     struct ferry__gcs_tables **out)
{
	struct ferry__gcs_tables *t = ferry__calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (int i = 0; i < FERRY__GCS_T_COUNT; i++)
		ferry__hashmap_init(&t->maps[i], FERRY_UNIQUE_ID_SIZE, sizeof(void *));
	t->task_events.elem = sizeof(struct ferry__gcs_task_event);
	t->task_events.max = opts && opts->max_task_events ? opts->max_task_events : 100000;
	t->errors.elem = sizeof(struct ferry__gcs_error *);
	t->errors.max = opts && opts->max_errors ? opts->max_errors : 10000;
	*out = t;
	return 0;
}

static void *ring_at(const struct ring *r, size_t i)
{
	return r->items + ((r->head + i) % r->cap) * r->elem;
}

void ferry__gcs_tables_destroy(struct ferry__gcs_tables *t)
{
	if (!t)
		return;
	for (int i = 0; i < FERRY__GCS_T_COUNT; i++) {
		size_t cursor = 0;
		void *key, *value;

		while (ferry__hashmap_next(&t->maps[i], &cursor, &key, &value))
			ferry__free(*(void **)value);
		ferry__hashmap_fini(&t->maps[i]);
	}
	for (size_t i = 0; i < t->errors.count; i++)
		ferry__free(*(void **)ring_at(&t->errors, i));
	ferry__free(t->errors.items);
	ferry__free(t->task_events.items);
	ferry__free(t);
}

static void *get(const struct ferry__gcs_tables *t, enum ferry__gcs_table table, const void *id)
{
	void **slot = ferry__hashmap_get(&t->maps[table], id);

	return slot ? *slot : NULL;
}

/* Enter @rec (a fresh copy, or NULL if copying failed) under @id, which must be absent.
 * Takes ownership of @rec: freed on failure. */
static int insert(struct ferry__gcs_tables *t, enum ferry__gcs_table table, const void *id,
		  void *rec, const void **out)
{
	void **slot;
	int ret;

	if (!rec)
		return -ENOMEM;
	ret = ferry__hashmap_put(&t->maps[table], id, (void **)&slot);
	if (ret < 0) {
		ferry__free(rec);
		return ret;
	}
	*slot = rec;
	if (out)
		*out = rec;
	return 1;
}

/* Swap the record under @id (which must exist) for @rec (or fail with -ENOMEM if NULL). */
static int replace(struct ferry__gcs_tables *t, enum ferry__gcs_table table, const void *id,
		   void *rec, const void **out)
{
	void **slot;

	if (!rec)
		return -ENOMEM;
	slot = ferry__hashmap_get(&t->maps[table], id);
	ferry__free(*slot);
	*slot = rec;
	if (out)
		*out = rec;
	return 0;
}

static bool is_nil16(const void *id)
{
	return ferry_id_is_nil(id, FERRY_UNIQUE_ID_SIZE);
}

static void log_id(const char *what, const void *id, const char *why)
{
	char hex[FERRY_ID_HEX_MAX];

	ferry_id_to_hex(id, FERRY_UNIQUE_ID_SIZE, hex, sizeof(hex));
	FLOG_WARN("gcs", "tables: %s %s: %s", what, hex, why);
}

/* ---- nodes ---- */

int ferry__gcs_node_register(struct ferry__gcs_tables *t, const struct ferry__gcs_node *n,
			     const struct ferry__gcs_node **out)
{
	const struct ferry__gcs_node *old = get(t, FERRY__GCS_T_NODES, n->id.bytes);
	struct ferry__gcs_node copy = *n;
	int ret;

	copy.state = old ? old->state : FERRY_GCS_NODE_ALIVE;
	copy.end_ms = 0;
	copy.last_heartbeat_ms = n->start_ms;
	copy.avail_cpu = n->total.cpu;
	copy.avail_gpu = n->total.gpu;
	copy.avail_memory_bytes = n->total.memory_bytes;
	copy.queue_length = 0;
	ret = ferry__gcs_node_check(&copy);
	if (ret < 0)
		return ret;
	if (old && old->state == FERRY_GCS_NODE_DEAD) {
		log_id("node", n->id.bytes, "registers again after its death");
		return -EEXIST;
	}
	if (old)
		return replace(t, FERRY__GCS_T_NODES, n->id.bytes, ferry__gcs_node_clone(&copy),
			       (const void **)out);
	return insert(t, FERRY__GCS_T_NODES, n->id.bytes, ferry__gcs_node_clone(&copy),
		      (const void **)out);
}

int ferry__gcs_node_heartbeat(struct ferry__gcs_tables *t, const struct ferry__gcs_heartbeat *hb,
			      const struct ferry__gcs_node **out)
{
	struct ferry__gcs_node *n = get(t, FERRY__GCS_T_NODES, hb->id.bytes);

	if (!n || n->state == FERRY_GCS_NODE_DEAD)
		return -ENOENT;
	if (!ferry__gcs_amount_ok(hb->avail_cpu) || !ferry__gcs_amount_ok(hb->avail_gpu) ||
	    !ferry__gcs_amount_ok(hb->avail_memory_bytes)) {
		log_id("node", hb->id.bytes, "heartbeat with a bad amount");
		return -EINVAL;
	}
	n->last_heartbeat_ms = hb->time_ms;
	n->avail_cpu = hb->avail_cpu;
	n->avail_gpu = hb->avail_gpu;
	n->avail_memory_bytes = hb->avail_memory_bytes;
	n->queue_length = hb->queue_length;
	if (out)
		*out = n;
	return 1;
}

int ferry__gcs_node_set_state(struct ferry__gcs_tables *t, const struct ferry_node_id *id,
			      enum ferry_gcs_node_state state, uint64_t time_ms,
			      const struct ferry__gcs_node **out)
{
	struct ferry__gcs_node *n = get(t, FERRY__GCS_T_NODES, id->bytes);

	if (!n)
		return -ENOENT;
	if (out)
		*out = n;
	if (state < FERRY_GCS_NODE_ALIVE || state > FERRY_GCS_NODE_DEAD) {
		log_id("node", id->bytes, "unknown state");
		return -EINVAL;
	}
	if (n->state == state)
		return 0;
	if (n->state == FERRY_GCS_NODE_DEAD) {
		log_id("node", id->bytes, "is dead for good");
		return -EINVAL;
	}
	n->state = state;
	if (state == FERRY_GCS_NODE_DEAD)
		n->end_ms = time_ms;
	return 1;
}

const struct ferry__gcs_node *ferry__gcs_node_get(const struct ferry__gcs_tables *t,
						  const struct ferry_node_id *id)
{
	return get(t, FERRY__GCS_T_NODES, id->bytes);
}

/* ---- jobs ---- */

int ferry__gcs_job_add(struct ferry__gcs_tables *t, const struct ferry__gcs_job *j,
		       const struct ferry__gcs_job **out)
{
	struct ferry__gcs_job copy = *j;
	int ret;

	copy.state = FERRY_GCS_JOB_RUNNING;
	copy.end_ms = 0;
	ret = ferry__gcs_job_check(&copy);
	if (ret < 0)
		return ret;
	if (get(t, FERRY__GCS_T_JOBS, j->id.bytes))
		return -EEXIST;
	return insert(t, FERRY__GCS_T_JOBS, j->id.bytes, ferry__gcs_job_clone(&copy),
		      (const void **)out);
}

int ferry__gcs_job_finish(struct ferry__gcs_tables *t, const struct ferry_job_id *id,
			  uint64_t time_ms, const struct ferry__gcs_job **out)
{
	struct ferry__gcs_job *j = get(t, FERRY__GCS_T_JOBS, id->bytes);

	if (!j)
		return -ENOENT;
	if (out)
		*out = j;
	if (j->state == FERRY_GCS_JOB_FINISHED)
		return 0;
	j->state = FERRY_GCS_JOB_FINISHED;
	j->end_ms = time_ms;
	return 1;
}

const struct ferry__gcs_job *ferry__gcs_job_get(const struct ferry__gcs_tables *t,
						const struct ferry_job_id *id)
{
	return get(t, FERRY__GCS_T_JOBS, id->bytes);
}

/* ---- workers ---- */

int ferry__gcs_worker_add(struct ferry__gcs_tables *t, const struct ferry_gcs_worker_info *w,
			  const struct ferry_gcs_worker_info **out)
{
	struct ferry_gcs_worker_info copy = *w;
	int ret;

	copy.state = FERRY_GCS_WORKER_ALIVE;
	copy.exit_type = FERRY_GCS_EXIT_NONE;
	copy.exit_message = NULL;
	copy.end_ms = 0;
	ret = ferry__gcs_worker_check(&copy);
	if (ret < 0)
		return ret;
	if (get(t, FERRY__GCS_T_WORKERS, w->id.bytes))
		return -EEXIST;
	return insert(t, FERRY__GCS_T_WORKERS, w->id.bytes, ferry__gcs_worker_clone(&copy),
		      (const void **)out);
}

int ferry__gcs_worker_dead(struct ferry__gcs_tables *t, const struct ferry__gcs_worker_exit *x,
			   const struct ferry_gcs_worker_info **out)
{
	const struct ferry_gcs_worker_info *w = get(t, FERRY__GCS_T_WORKERS, x->id.bytes);
	struct ferry_gcs_worker_info copy;
	int ret;

	if (!w)
		return -ENOENT;
	if (out)
		*out = w;
	if (w->state == FERRY_GCS_WORKER_DEAD)
		return 0;
	copy = *w;
	copy.state = FERRY_GCS_WORKER_DEAD;
	copy.exit_type = x->exit_type;
	copy.exit_message = x->message;
	copy.end_ms = x->time_ms;
	ret = ferry__gcs_worker_check(&copy);
	if (ret < 0)
		return ret;
	ret = replace(t, FERRY__GCS_T_WORKERS, x->id.bytes, ferry__gcs_worker_clone(&copy),
		      (const void **)out);
	return ret < 0 ? ret : 1;
}

int ferry__gcs_workers_on_node_died(struct ferry__gcs_tables *t, const struct ferry_node_id *node,
				    uint64_t time_ms,
				    void (*fn)(void *arg, const struct ferry_gcs_worker_info *w),
				    void *arg)
{
	size_t cursor = 0;
	void *key, *value;
	int n = 0;

	while (ferry__hashmap_next(&t->maps[FERRY__GCS_T_WORKERS], &cursor, &key, &value)) {
		struct ferry_gcs_worker_info *w = *(struct ferry_gcs_worker_info **)value;

		if (w->state != FERRY_GCS_WORKER_ALIVE || !ferry_node_id_eq(&w->node, node))
			continue;
		/* In place: an alive worker has no exit message, so nothing needs memory. */
		w->state = FERRY_GCS_WORKER_DEAD;
		w->exit_type = FERRY_GCS_EXIT_NODE_DIED;
		w->end_ms = time_ms;
		if (fn)
			fn(arg, w);
		n++;
	}
	return n;
}

const struct ferry_gcs_worker_info *ferry__gcs_worker_get(const struct ferry__gcs_tables *t,
							  const struct ferry_worker_id *id)
{
	return get(t, FERRY__GCS_T_WORKERS, id->bytes);
}

/* ---- actors ---- */

int ferry__gcs_actor_register(struct ferry__gcs_tables *t, const struct ferry_gcs_actor_info *a,
			      const struct ferry_gcs_actor_info **out)
{
	struct ferry_gcs_actor_info copy = *a;
	int ret = ferry__gcs_actor_check(a);

	if (ret < 0)
		return ret;
	if (a->state != FERRY_GCS_ACTOR_PENDING) {
		log_id("actor", a->id.bytes, "must register as pending");
		return -EINVAL;
	}
	if (get(t, FERRY__GCS_T_ACTORS, a->id.bytes))
		return -EEXIST;
	copy.num_restarts = 0;
	memset(&copy.node, 0, sizeof(copy.node));
	memset(&copy.worker, 0, sizeof(copy.worker));
	copy.death_cause = FERRY_GCS_EXIT_NONE;
	copy.death_message = NULL;
	return insert(t, FERRY__GCS_T_ACTORS, a->id.bytes, ferry__gcs_actor_clone(&copy),
		      (const void **)out);
}

static bool actor_legal(enum ferry_gcs_actor_state from, enum ferry_gcs_actor_state to)
{
	switch (to) {
	case FERRY_GCS_ACTOR_ALIVE:
		return from == FERRY_GCS_ACTOR_PENDING || from == FERRY_GCS_ACTOR_RESTARTING;
	case FERRY_GCS_ACTOR_RESTARTING:
		return from == FERRY_GCS_ACTOR_ALIVE;
	case FERRY_GCS_ACTOR_DEAD:
		return from != FERRY_GCS_ACTOR_DEAD;
	default:
		return false; /* nothing goes back to pending */
	}
}

/* Fill @copy for the move to @u->state; -EINVAL when @u lacks what the new state needs. */
static int actor_apply(struct ferry_gcs_actor_info *copy, const struct ferry__gcs_actor_update *u)
{
	memset(&copy->node, 0, sizeof(copy->node));
	memset(&copy->worker, 0, sizeof(copy->worker));
	copy->state = u->state;
	switch (u->state) {
	case FERRY_GCS_ACTOR_ALIVE:
		if (is_nil16(u->node.bytes) || is_nil16(u->worker.bytes)) {
			log_id("actor", u->id.bytes, "alive without a node and a worker");
			return -EINVAL;
		}
		copy->node = u->node;
		copy->worker = u->worker;
		return 0;
	case FERRY_GCS_ACTOR_RESTARTING:
		if (copy->max_restarts >= 0 && copy->num_restarts >= (uint32_t)copy->max_restarts) {
			log_id("actor", u->id.bytes, "has no restart left");
			return -EINVAL;
		}
		copy->num_restarts++;
		return 0;
	default:
		if (!ferry__gcs_exit_ok(u->death_cause) ||
		    ferry__gcs_text_check(u->death_message, FERRY__GCS_TEXT_MAX, false,
					  "death message") < 0)
			return -EINVAL;
		copy->death_cause = u->death_cause;
		copy->death_message = u->death_message;
		return 0;
	}
}

int ferry__gcs_actor_transition(struct ferry__gcs_tables *t,
				const struct ferry__gcs_actor_update *u,
				const struct ferry_gcs_actor_info **out)
{
	const struct ferry_gcs_actor_info *a = get(t, FERRY__GCS_T_ACTORS, u->id.bytes);
	struct ferry_gcs_actor_info copy;
	int ret;

	if (!a)
		return -ENOENT;
	if (out)
		*out = a;
	if (u->state < FERRY_GCS_ACTOR_PENDING || u->state > FERRY_GCS_ACTOR_DEAD) {
		log_id("actor", u->id.bytes, "unknown state");
		return -EINVAL;
	}
	if (u->state == a->state)
		return 0;
	if (!actor_legal(a->state, u->state)) {
		FLOG_WARN("gcs", "tables: actor: illegal transition %d -> %d", (int)a->state,
			  (int)u->state);
		return -EINVAL;
	}
	copy = *a;
	ret = actor_apply(&copy, u);
	if (ret < 0)
		return ret;
	ret = replace(t, FERRY__GCS_T_ACTORS, u->id.bytes, ferry__gcs_actor_clone(&copy),
		      (const void **)out);
	return ret < 0 ? ret : 1;
}

const struct ferry_gcs_actor_info *ferry__gcs_actor_get(const struct ferry__gcs_tables *t,
							const struct ferry_actor_id *id)
{
	return get(t, FERRY__GCS_T_ACTORS, id->bytes);
}

/* ---- placement groups ---- */

int ferry__gcs_pg_create(struct ferry__gcs_tables *t, const struct ferry__gcs_pg *pg,
			 const struct ferry__gcs_pg **out)
{
	struct ferry__gcs_pg copy = *pg;
	int ret;

	copy.state = FERRY_GCS_PG_PENDING;
	ret = ferry__gcs_pg_check(&copy);
	if (ret < 0)
		return ret;
	if (get(t, FERRY__GCS_T_PGS, pg->id.bytes))
		return -EEXIST;
	return insert(t, FERRY__GCS_T_PGS, pg->id.bytes, ferry__gcs_pg_clone(&copy, NULL, true),
		      (const void **)out);
}

static bool pg_legal(enum ferry_gcs_pg_state from, enum ferry_gcs_pg_state to)
{
	switch (to) {
	case FERRY_GCS_PG_CREATED:
		return from == FERRY_GCS_PG_PENDING || from == FERRY_GCS_PG_RESCHEDULING;
	case FERRY_GCS_PG_RESCHEDULING:
		return from == FERRY_GCS_PG_CREATED;
	case FERRY_GCS_PG_REMOVED:
		return from != FERRY_GCS_PG_REMOVED;
	default:
		return false;
	}
}

/* CREATED needs a node for every bundle. */
static int pg_check_nodes(const struct ferry__gcs_pg *g, const struct ferry__gcs_pg_update *u)
{
	if (u->nnodes != g->nbundles || !u->nodes) {
		log_id("placement group", u->id.bytes, "created without one node per bundle");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < u->nnodes; i++) {
		if (is_nil16(u->nodes[i].bytes)) {
			log_id("placement group", u->id.bytes, "a bundle placed on a nil node");
			return -EINVAL;
		}
	}
	return 0;
}

static bool pg_same_nodes(const struct ferry__gcs_pg *g, const struct ferry__gcs_pg_update *u)
{
	for (uint32_t i = 0; i < g->nbundles; i++)
		if (!ferry_node_id_eq(&g->bundles[i].node, &u->nodes[i]))
			return false;
	return true;
}

int ferry__gcs_pg_set_state(struct ferry__gcs_tables *t, const struct ferry__gcs_pg_update *u,
			    const struct ferry__gcs_pg **out)
{
	struct ferry__gcs_pg *g = get(t, FERRY__GCS_T_PGS, u->id.bytes);
	bool created = u->state == FERRY_GCS_PG_CREATED;
	struct ferry__gcs_pg copy;
	int ret;

	if (!g)
		return -ENOENT;
	if (out)
		*out = g;
	if (u->state < FERRY_GCS_PG_PENDING || u->state > FERRY_GCS_PG_REMOVED) {
		log_id("placement group", u->id.bytes, "unknown state");
		return -EINVAL;
	}
	if (created && pg_check_nodes(g, u) < 0)
		return -EINVAL;
	if (u->state == g->state) {
		if (created && !pg_same_nodes(g, u)) {
			log_id("placement group", u->id.bytes, "created again elsewhere");
			return -EINVAL;
		}
		return 0;
	}
	if (!pg_legal(g->state, u->state)) {
		FLOG_WARN("gcs", "tables: placement group: illegal transition %d -> %d",
			  (int)g->state, (int)u->state);
		return -EINVAL;
	}
	if (!created) {
		g->state = u->state;
		return 1;
	}
	copy = *g;
	copy.state = u->state;
	ret = replace(t, FERRY__GCS_T_PGS, u->id.bytes, ferry__gcs_pg_clone(&copy, u->nodes, false),
		      (const void **)out);
	return ret < 0 ? ret : 1;
}

const struct ferry__gcs_pg *ferry__gcs_pg_get(const struct ferry__gcs_tables *t,
					      const struct ferry_placement_group_id *id)
{
	return get(t, FERRY__GCS_T_PGS, id->bytes);
}

/* ---- bounded logs ---- */

static int ring_grow(struct ring *r)
{
	size_t cap = FERRY_MIN(FERRY_MAX(r->cap * 2, (size_t)16), r->max);
	uint8_t *items = ferry__calloc(cap, r->elem);

	if (!items)
		return -ENOMEM;
	for (size_t i = 0; i < r->count; i++)
		memcpy(items + i * r->elem, ring_at(r, i), r->elem);
	ferry__free(r->items);
	r->items = items;
	r->cap = cap;
	r->head = 0;
	return 0;
}

/* Append @item; when full, the oldest is copied to @evicted (if not NULL) and returns 1. */
static int ring_push(struct ring *r, const void *item, void *evicted)
{
	int ret;

	if (r->count == r->max) {
		void *oldest = ring_at(r, 0);

		if (evicted)
			memcpy(evicted, oldest, r->elem);
		memcpy(oldest, item, r->elem);
		r->head = (r->head + 1) % r->cap;
		r->dropped++;
		return 1;
	}
	if (r->count == r->cap) {
		ret = ring_grow(r);
		if (ret < 0)
			return ret;
	}
	memcpy(ring_at(r, r->count), item, r->elem);
	r->count++;
	return 0;
}

int ferry__gcs_task_event_add(struct ferry__gcs_tables *t, const struct ferry__gcs_task_event *e)
{
	int ret;

	if (is_nil16(e->task.bytes) || e->state < FERRY_GCS_TASK_SUBMITTED ||
	    e->state > FERRY_GCS_TASK_FAILED) {
		FLOG_WARN("gcs", "tables: task event: nil task or unknown state");
		return -EINVAL;
	}
	ret = ring_push(&t->task_events, e, NULL);
	return ret < 0 ? ret : 1;
}

int ferry__gcs_error_add(struct ferry__gcs_tables *t, const struct ferry__gcs_error *e,
			 const struct ferry__gcs_error **out)
{
	struct ferry__gcs_error *copy, *evicted = NULL;
	int ret;

	if (ferry__gcs_text_check(e->type, FERRY__GCS_NAME_MAX, true, "error type") < 0 ||
	    ferry__gcs_text_check(e->message, FERRY__GCS_TEXT_MAX, false, "error message") < 0)
		return -EINVAL;
	copy = ferry__gcs_error_clone(e);
	if (!copy)
		return -ENOMEM;
	ret = ring_push(&t->errors, &copy, &evicted);
	if (ret < 0) {
		ferry__free(copy);
		return ret;
	}
	ferry__free(evicted);
	if (out)
		*out = copy;
	return 1;
}

const struct ferry__gcs_task_event *ferry__gcs_task_event_at(const struct ferry__gcs_tables *t,
							     size_t index)
{
	return index < t->task_events.count ? ring_at(&t->task_events, index) : NULL;
}

const struct ferry__gcs_error *ferry__gcs_error_at(const struct ferry__gcs_tables *t, size_t index)
{
	return index < t->errors.count ? *(struct ferry__gcs_error **)ring_at(&t->errors, index)
				       : NULL;
}

size_t ferry__gcs_task_events_count(const struct ferry__gcs_tables *t)
{
	return t->task_events.count;
}

size_t ferry__gcs_errors_count(const struct ferry__gcs_tables *t)
{
	return t->errors.count;
}

void ferry__gcs_logs_dropped(const struct ferry__gcs_tables *t, uint64_t *task_events,
			     uint64_t *errors)
{
	*task_events = t->task_events.dropped;
	*errors = t->errors.dropped;
}

void ferry__gcs_logs_set_dropped(struct ferry__gcs_tables *t, uint64_t task_events, uint64_t errors)
{
	t->task_events.dropped = task_events;
	t->errors.dropped = errors;
}

/* ---- generic access ---- */

int ferry__gcs_tables_restore(struct ferry__gcs_tables *t, enum ferry__gcs_table table,
			      const void *record)
{
	void *rec;
	int ret;

	switch (table) {
	case FERRY__GCS_T_NODES:
		ret = ferry__gcs_node_check(record);
		rec = ret < 0 ? NULL : ferry__gcs_node_clone(record);
		break;
	case FERRY__GCS_T_JOBS:
		ret = ferry__gcs_job_check(record);
		rec = ret < 0 ? NULL : ferry__gcs_job_clone(record);
		break;
	case FERRY__GCS_T_WORKERS:
		ret = ferry__gcs_worker_check(record);
		rec = ret < 0 ? NULL : ferry__gcs_worker_clone(record);
		break;
	case FERRY__GCS_T_ACTORS:
		ret = ferry__gcs_actor_check(record);
		rec = ret < 0 ? NULL : ferry__gcs_actor_clone(record);
		break;
	case FERRY__GCS_T_PGS:
		ret = ferry__gcs_pg_check(record);
		rec = ret < 0 ? NULL : ferry__gcs_pg_clone(record, NULL, false);
		break;
	default:
		return -EINVAL;
	}
	if (ret < 0)
		return ret;
	/* Every record struct starts with its 16-byte ID. */
	if (get(t, table, record)) {
		ferry__free(rec);
		return -EEXIST;
	}
	return insert(t, table, record, rec, NULL);
}

size_t ferry__gcs_tables_count(const struct ferry__gcs_tables *t, enum ferry__gcs_table table)
{
	return ferry__hashmap_count(&t->maps[table]);
}

const void *ferry__gcs_tables_next(const struct ferry__gcs_tables *t, enum ferry__gcs_table table,
				   size_t *cursor)
{
	void *key, *value;

	if (!ferry__hashmap_next(&t->maps[table], cursor, &key, &value))
		return NULL;
	return *(void **)value;
}
