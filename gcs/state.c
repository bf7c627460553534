/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS state: applying ops (with their cascades and change reports), logging them through the
 * WAL, replaying them, and canonical snapshots. See the DESIGN block in state.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "gcs/dedup.h"
#include "gcs/state.h"

struct ferry__gcs_state {
	struct ferry__gcs_state_opts opts;  /* callbacks, limits (wal_dir not kept) */
	struct ferry__gcs_tables *tables;   /* nodes, jobs, workers, actors, groups, logs */
	struct ferry__kv *kv;		    /* namespaced KV */
	struct ferry__objdir *objdir;	    /* object directory */
	struct ferry__wal *wal;		    /* NULL: in memory only */
	struct ferry__gcs_dedup dedup;	    /* results of recent client requests */
	uint64_t last_lsn;		    /* without a WAL: ops applied */
	bool quiet;			    /* replaying: no change reports */
	enum ferry__gcs_op_type current_op; /* the op being applied (for cascade reports) */
};

/* ---- applying ---- */

static void report(struct ferry__gcs_state *s, enum ferry_gcs_channel channel, const void *key,
		   size_t key_size, const void *record)
{
	struct ferry__gcs_change c = {channel, s->current_op, key, key_size, record};

	if (!s->quiet && s->opts.changed)
		s->opts.changed(s->opts.arg, &c);
}

static void on_object_changed(void *arg, const struct ferry__objdir_entry *e, bool removed)
{
	report(arg, FERRY_GCS_CH_OBJECT_LOCATIONS, e->id.bytes, sizeof(e->id.bytes),
	       removed ? NULL : e);
}

static void on_worker_died(void *arg, const struct ferry_gcs_worker_info *w)
{
	report(arg, FERRY_GCS_CH_WORKERS, w->id.bytes, sizeof(w->id.bytes), w);
}

/* Report @rec (whose struct starts with its 16-byte ID) when @ret says it changed. */
static int reported(struct ferry__gcs_state *s, int ret, int min, enum ferry_gcs_channel channel,
		    const void *rec)
{
	if (ret >= min && rec)
		report(s, channel, rec, FERRY_UNIQUE_ID_SIZE, rec);
	return ret;
}

static int apply_node(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	const struct ferry__gcs_node *n = NULL;
	int ret;

	switch (op->type) {
	case FERRY__GCS_OP_NODE_REGISTER:
		ret = ferry__gcs_node_register(s->tables, &op->node, &n);
		return reported(s, ret, 0, FERRY_GCS_CH_NODES, n);
	case FERRY__GCS_OP_NODE_HEARTBEAT:
		ret = ferry__gcs_node_heartbeat(s->tables, &op->heartbeat, &n);
		return reported(s, ret, 1, FERRY_GCS_CH_NODES, n);
	default:
		ret = ferry__gcs_node_set_state(s->tables, &op->node_state.id, op->node_state.state,
						op->node_state.time_ms, &n);
		reported(s, ret, 1, FERRY_GCS_CH_NODES, n);
		if (ret == 1 && op->node_state.state == FERRY_GCS_NODE_DEAD) {
			/* Neither cascade needs memory, so the op cannot half-apply. */
			ferry__gcs_workers_on_node_died(s->tables, &op->node_state.id,
							op->node_state.time_ms, on_worker_died, s);
			ferry__objdir_node_died(s->objdir, &op->node_state.id);
		}
		return ret;
	}
}

static int apply_job_worker(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	const struct ferry_gcs_worker_info *w = NULL;
	const struct ferry__gcs_job *j = NULL;
	int ret;

	switch (op->type) {
	case FERRY__GCS_OP_JOB_ADD:
		ret = ferry__gcs_job_add(s->tables, &op->job, &j);
		return reported(s, ret, 1, FERRY_GCS_CH_JOBS, j);
	case FERRY__GCS_OP_JOB_FINISH:
		ret = ferry__gcs_job_finish(s->tables, &op->job_finish.id, op->job_finish.time_ms,
					    &j);
		return reported(s, ret, 1, FERRY_GCS_CH_JOBS, j);
	case FERRY__GCS_OP_WORKER_ADD:
		ret = ferry__gcs_worker_add(s->tables, &op->worker, &w);
		return reported(s, ret, 1, FERRY_GCS_CH_WORKERS, w);
	default:
		ret = ferry__gcs_worker_dead(s->tables, &op->worker_exit, &w);
		reported(s, ret, 1, FERRY_GCS_CH_WORKERS, w);
		if (ret == 1)
			ferry__objdir_owner_died(s->objdir, &op->worker_exit.id);
		return ret;
	}
}

static int apply_record(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	const struct ferry_gcs_actor_info *a = NULL;
	const struct ferry__gcs_error *e = NULL;
	int ret;

	switch (op->type) {
	case FERRY__GCS_OP_ACTOR_REGISTER:
		ret = ferry__gcs_actor_register(s->tables, &op->actor, &a);
		return reported(s, ret, 1, FERRY_GCS_CH_ACTORS, a);
	case FERRY__GCS_OP_ACTOR_UPDATE:
		ret = ferry__gcs_actor_transition(s->tables, &op->actor_update, &a);
		return reported(s, ret, 1, FERRY_GCS_CH_ACTORS, a);
	case FERRY__GCS_OP_PG_CREATE:
		return ferry__gcs_pg_create(s->tables, &op->pg, NULL);
	case FERRY__GCS_OP_PG_UPDATE:
		return ferry__gcs_pg_set_state(s->tables, &op->pg_update, NULL);
	case FERRY__GCS_OP_TASK_EVENT:
		return ferry__gcs_task_event_add(s->tables, &op->task_event);
	default:
		ret = ferry__gcs_error_add(s->tables, &op->error, &e);
		if (ret >= 0)
			report(s, FERRY_GCS_CH_ERRORS, op->error.job.bytes,
			       sizeof(op->error.job.bytes), e);
		return ret;
	}
}

static int apply_kv(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_KV_PUT:
		return ferry__kv_put(s->kv, op->kv.ns, op->kv.key, op->kv.value, op->kv.overwrite);
	case FERRY__GCS_OP_KV_DELETE:
		return ferry__kv_delete(s->kv, op->kv.ns, op->kv.key);
	default:
		return ferry__kv_delete_prefix(s->kv, op->kv.ns, op->kv.key);
	}
}

static int apply_objdir(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_OBJ_ADD:
		return ferry__objdir_add(s->objdir, &op->obj);
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
		return ferry__objdir_add_location(
			s->objdir, &op->obj_location.id, &op->obj_location.node,
			op->obj_location.size_bytes, op->obj_location.metadata_bytes,
			&op->obj_location.place);
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
		return ferry__objdir_remove_location(s->objdir, &op->obj_location.id,
						     &op->obj_location.node);
	case FERRY__GCS_OP_OBJ_SPILLED:
		return ferry__objdir_set_spilled(s->objdir, &op->obj_spilled.id,
						 op->obj_spilled.url);
	case FERRY__GCS_OP_OBJ_REMOVE:
		return ferry__objdir_remove(s->objdir, &op->obj_id);
	case FERRY__GCS_OP_OBJ_NODE_DIED:
		return ferry__objdir_node_died(s->objdir, &op->node_id);
	default:
		return ferry__objdir_owner_died(s->objdir, &op->owner);
	}
}

static int apply_restore(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_RESTORE_NODE:
		return ferry__gcs_tables_restore(s->tables, FERRY__GCS_T_NODES, &op->node);
	case FERRY__GCS_OP_RESTORE_JOB:
		return ferry__gcs_tables_restore(s->tables, FERRY__GCS_T_JOBS, &op->job);
	case FERRY__GCS_OP_RESTORE_WORKER:
		return ferry__gcs_tables_restore(s->tables, FERRY__GCS_T_WORKERS, &op->worker);
	case FERRY__GCS_OP_RESTORE_ACTOR:
		return ferry__gcs_tables_restore(s->tables, FERRY__GCS_T_ACTORS, &op->actor);
	case FERRY__GCS_OP_RESTORE_PG:
		return ferry__gcs_tables_restore(s->tables, FERRY__GCS_T_PGS, &op->pg);
	case FERRY__GCS_OP_RESTORE_OBJ:
		return ferry__objdir_restore(s->objdir, &op->obj);
	case FERRY__GCS_OP_RESTORE_DROPPED:
		ferry__gcs_logs_set_dropped(s->tables, op->dropped.task_events, op->dropped.errors);
		return 0;
	default:
		FLOG_WARN("gcs", "state: unknown op %d", (int)op->type);
		return -EINVAL;
	}
}

/* Apply @op to memory: a result >= 0, or an error with nothing changed. */
static int execute(struct ferry__gcs_state *s, const struct ferry__gcs_op *op)
{
	s->current_op = op->type;
	switch (op->type) {
	case FERRY__GCS_OP_NODE_REGISTER:
	case FERRY__GCS_OP_NODE_HEARTBEAT:
	case FERRY__GCS_OP_NODE_STATE:
		return apply_node(s, op);
	case FERRY__GCS_OP_JOB_ADD:
	case FERRY__GCS_OP_JOB_FINISH:
	case FERRY__GCS_OP_WORKER_ADD:
	case FERRY__GCS_OP_WORKER_DEAD:
		return apply_job_worker(s, op);
	case FERRY__GCS_OP_ACTOR_REGISTER:
	case FERRY__GCS_OP_ACTOR_UPDATE:
	case FERRY__GCS_OP_PG_CREATE:
	case FERRY__GCS_OP_PG_UPDATE:
	case FERRY__GCS_OP_TASK_EVENT:
	case FERRY__GCS_OP_ERROR:
		return apply_record(s, op);
	case FERRY__GCS_OP_KV_PUT:
	case FERRY__GCS_OP_KV_DELETE:
	case FERRY__GCS_OP_KV_DELETE_PREFIX:
		return apply_kv(s, op);
	case FERRY__GCS_OP_OBJ_ADD:
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
	case FERRY__GCS_OP_OBJ_SPILLED:
	case FERRY__GCS_OP_OBJ_REMOVE:
	case FERRY__GCS_OP_OBJ_OWNER_DIED:
	case FERRY__GCS_OP_OBJ_NODE_DIED:
		return apply_objdir(s, op);
	case FERRY__GCS_OP_REQUEST_DONE:
		return ferry__gcs_dedup_remember(&s->dedup, op->request_done.client,
						 op->request_done.seq, op->request_done.status);
	case FERRY__GCS_OP_LOG:
		return -EINVAL; /* the server publishes log lines; they never reach the state */
	default:
		return apply_restore(s, op);
	}
}

int ferry__gcs_state_apply(struct ferry__gcs_state *s, const struct ferry__gcs_op *op,
			   uint64_t *lsn)
{
	struct ferry__gcs_writer w = {NULL, 0};
	size_t base;
	int ret;

	if (op->type >= FERRY__GCS_OP_RESTORE_NODE) {
		FLOG_WARN("gcs", "state: restore op %d outside a snapshot", (int)op->type);
		return -EINVAL;
	}
	if (!s->wal) {
		ret = execute(s, op);
		if (ret >= 0 && lsn)
			*lsn = s->last_lsn + 1;
		s->last_lsn += ret >= 0;
		return ret;
	}
	/* Encode first: once the op is applied, committing its record cannot fail. */
	ret = ferry__wal_begin(s->wal, &w.buf);
	if (ret < 0)
		return ret;
	base = w.buf->size;
	ferry__gcs_op_encode(op, &w);
	ret = w.err;
	if (ret == 0 && w.buf->size - base > ferry__wal_max_record_bytes(s->wal))
		ret = -E2BIG;
	if (ret == 0)
		ret = execute(s, op);
	if (ret < 0) {
		ferry__wal_cancel(s->wal);
		return ret;
	}
	ferry__wal_commit(s->wal, lsn);
	return ret;
}

static bool client_id_zero(const uint8_t *client)
{
	for (size_t i = 0; i < FERRY__GCS_CLIENT_ID_SIZE; i++)
		if (client[i])
			return false;
	return true;
}

int ferry__gcs_state_apply_request(struct ferry__gcs_state *s, const uint8_t *client, uint64_t seq,
				   const struct ferry__gcs_op *op, uint64_t *lsn)
{
	struct ferry__gcs_op done = {.type = FERRY__GCS_OP_REQUEST_DONE};
	uint64_t done_lsn = 0;
	int32_t status;
	int ret;

	if (!client || client_id_zero(client))
		return ferry__gcs_state_apply(s, op, lsn);
	if (ferry__gcs_dedup_find(&s->dedup, client, seq, &status)) {
		/* Applied before: answer once everything applied so far is durable. */
		if (lsn)
			*lsn = ferry__gcs_state_last_lsn(s);
		return status;
	}
	ret = ferry__gcs_state_apply(s, op, lsn);
	if (ret < 0)
		return ret; /* nothing changed: a resend may apply it */
	memcpy(done.request_done.client, client, sizeof(done.request_done.client));
	done.request_done.seq = seq;
	done.request_done.status = ret;
	/* Logged after the op, so whenever the record survives a crash the op does too; the reply
	 * waits for it. Failing to remember (no memory) only loses the deduplication. */
	if (ferry__gcs_state_apply(s, &done, &done_lsn) >= 0 && lsn)
		*lsn = done_lsn;
	return ret;
}

/* ---- replay ---- */

static int replay_record(void *arg, uint64_t lsn, bool from_snapshot, const void *payload,
			 size_t size)
{
	struct ferry__gcs_state *s = arg;
	struct ferry__gcs_op op;
	int ret = ferry__gcs_op_decode(payload, size, &op);

	if (ret == 0) {
		ret = execute(s, &op);
		ferry__gcs_op_release(&op);
	}
	if (ret >= 0 || ret == -ENOMEM)
		return ret < 0 ? ret : 0;
	/* Only ops that succeeded were logged: failing now means the log is not ours. */
	FLOG_ERROR("gcs", "state: %s record %llu (%zu bytes) does not apply: %s",
		   from_snapshot ? "snapshot" : "log", (unsigned long long)lsn, size,
		   ferry_strerror(ret));
	return -EIO;
}

/* ---- canonical records (snapshots and dumps) ---- */

typedef int (*emit_fn)(void *ctx, const struct ferry__gcs_op *op);

static int cmp_id16(const void *a, const void *b)
{
	return memcmp(*(const void *const *)a, *(const void *const *)b, FERRY_UNIQUE_ID_SIZE);
}

static int cmp_id20(const void *a, const void *b)
{
	return memcmp(*(const void *const *)a, *(const void *const *)b, FERRY_OBJECT_ID_SIZE);
}

static int cmp_loc_node(const void *a, const void *b)
{
	const struct ferry__objdir_loc *x = *(const struct ferry__objdir_loc *const *)a;
	const struct ferry__objdir_loc *y = *(const struct ferry__objdir_loc *const *)b;

	return memcmp(&x->node, &y->node, sizeof(x->node));
}

void ferry__gcs_restore_op(struct ferry__gcs_op *op, enum ferry__gcs_table table, const void *rec)
{
	static const enum ferry__gcs_op_type types[FERRY__GCS_T_COUNT] = {
		FERRY__GCS_OP_RESTORE_NODE, FERRY__GCS_OP_RESTORE_JOB, FERRY__GCS_OP_RESTORE_WORKER,
		FERRY__GCS_OP_RESTORE_ACTOR, FERRY__GCS_OP_RESTORE_PG};

	op->type = types[table];
	switch (table) {
	case FERRY__GCS_T_NODES:
		op->node = *(const struct ferry__gcs_node *)rec;
		break;
	case FERRY__GCS_T_JOBS:
		op->job = *(const struct ferry__gcs_job *)rec;
		break;
	case FERRY__GCS_T_WORKERS:
		op->worker = *(const struct ferry_gcs_worker_info *)rec;
		break;
	case FERRY__GCS_T_ACTORS:
		op->actor = *(const struct ferry_gcs_actor_info *)rec;
		break;
	default:
		op->pg = *(const struct ferry__gcs_pg *)rec;
		break;
	}
}

/* The records of @table sorted by ID: one RESTORE op each. */
static int emit_table(struct ferry__gcs_state *s, enum ferry__gcs_table table, emit_fn emit,
		      void *ctx)
{
	size_t n = ferry__gcs_tables_count(s->tables, table), cursor = 0, i = 0;
	const void **recs = ferry__calloc(n ? n : 1, sizeof(*recs));
	struct ferry__gcs_op op = {0};
	int ret = 0;

	if (!recs)
		return -ENOMEM;
	while (i < n && (recs[i] = ferry__gcs_tables_next(s->tables, table, &cursor)))
		i++;
	qsort(recs, n, sizeof(*recs), cmp_id16);
	for (i = 0; i < n && ret == 0; i++) {
		ferry__gcs_restore_op(&op, table, recs[i]);
		ret = emit(ctx, &op);
	}
	ferry__free(recs);
	return ret;
}

static int emit_logs(struct ferry__gcs_state *s, emit_fn emit, void *ctx)
{
	struct ferry__gcs_op op = {0};
	int ret = 0;

	op.type = FERRY__GCS_OP_TASK_EVENT;
	for (size_t i = 0; ret == 0 && i < ferry__gcs_task_events_count(s->tables); i++) {
		op.task_event = *ferry__gcs_task_event_at(s->tables, i);
		ret = emit(ctx, &op);
	}
	op.type = FERRY__GCS_OP_ERROR;
	for (size_t i = 0; ret == 0 && i < ferry__gcs_errors_count(s->tables); i++) {
		op.error = *ferry__gcs_error_at(s->tables, i);
		ret = emit(ctx, &op);
	}
	if (ret < 0)
		return ret;
	/* After the entries: restoring them counts evictions that this then overrides. */
	op.type = FERRY__GCS_OP_RESTORE_DROPPED;
	ferry__gcs_logs_dropped(s->tables, &op.dropped.task_events, &op.dropped.errors);
	return emit(ctx, &op);
}

struct kv_emit {
	emit_fn emit; /* where records go */
	void *ctx;    /* for emit */
};

static int emit_kv_entry(void *arg, struct ferry__gcs_slice ns, struct ferry__gcs_slice key,
			 struct ferry__gcs_slice value)
{
	struct kv_emit *k = arg;
	struct ferry__gcs_op op = {0};

	op.type = FERRY__GCS_OP_KV_PUT;
	op.kv.ns = ns;
	op.kv.key = key;
	op.kv.value = value;
	op.kv.overwrite = true;
	return k->emit(k->ctx, &op);
}

/* One RESTORE_OBJ for @e, its locations sorted (their order carries no meaning), each place
 * kept with its location. */
int ferry__gcs_object_op(const struct ferry__objdir_entry *e, struct ferry__gcs_buf *scratch,
			 struct ferry__gcs_op *op)
{
	struct ferry_gcs_object_place *places;
	const struct ferry__objdir_loc **sorted;
	struct ferry_node_id *locs;
	size_t n = e->nlocations ? e->nlocations : 1;
	uint8_t *base;

	/* One block (allocated, so aligned for anything): places, IDs, then the pointers qsort
	 * orders; places (24 bytes) and IDs (16) are multiples of a pointer's alignment, so every
	 * part starts aligned. */
	_Static_assert(sizeof(struct ferry_node_id) % _Alignof(void *) == 0 &&
			       sizeof(*places) % _Alignof(void *) == 0,
		       "each part of the block starts aligned");
	scratch->size = 0;
	base = ferry__gcs_buf_grow(scratch,
				   n * (sizeof(*places) + sizeof(*locs) + sizeof(*sorted)));
	if (!base)
		return -ENOMEM;
	places = (struct ferry_gcs_object_place *)base;
	locs = (struct ferry_node_id *)(base + n * sizeof(*places));
	sorted = (const struct ferry__objdir_loc **)(base + n * (sizeof(*places) + sizeof(*locs)));
	n = 0;
	for (const struct ferry__objdir_loc *l = e->locations; l; l = l->obj_next)
		sorted[n++] = l;
	qsort(sorted, n, sizeof(*sorted), cmp_loc_node);
	for (size_t i = 0; i < n; i++) {
		locs[i] = sorted[i]->node;
		places[i] = sorted[i]->place;
	}
	memset(op, 0, sizeof(*op));
	op->type = FERRY__GCS_OP_RESTORE_OBJ;
	op->obj.id = e->id;
	op->obj.owner_worker = e->owner_worker;
	op->obj.owner_node = e->owner_node;
	op->obj.size_bytes = e->size_bytes;
	op->obj.metadata_bytes = e->metadata_bytes;
	op->obj.state = e->state;
	op->obj.owner_dead = e->owner_dead;
	op->obj.spill_url = e->spill_url;
	op->obj.nlocations = (uint32_t)n;
	op->obj.locations = locs;
	op->obj.places = places;
	return 0;
}

static int emit_object(const struct ferry__objdir_entry *e, struct ferry__gcs_buf *scratch,
		       emit_fn emit, void *ctx)
{
	struct ferry__gcs_op op;
	int ret = ferry__gcs_object_op(e, scratch, &op);

	return ret < 0 ? ret : emit(ctx, &op);
}

static int emit_objdir(struct ferry__gcs_state *s, emit_fn emit, void *ctx)
{
	size_t n = ferry__objdir_count(s->objdir), cursor = 0, i = 0;
	const struct ferry__objdir_entry **ents = ferry__calloc(n ? n : 1, sizeof(*ents));
	struct ferry__gcs_buf scratch = {0};
	int ret = 0;

	if (!ents)
		return -ENOMEM;
	while (i < n && (ents[i] = ferry__objdir_next(s->objdir, &cursor)))
		i++;
	qsort(ents, n, sizeof(*ents), cmp_id20);
	for (i = 0; i < n && ret == 0; i++)
		ret = emit_object(ents[i], &scratch, emit, ctx);
	ferry__gcs_buf_fini(&scratch);
	ferry__free(ents);
	return ret;
}

/* Remembered request results, oldest first (replaying them rebuilds the same FIFO). */
static int emit_dedup(struct ferry__gcs_state *s, emit_fn emit, void *ctx)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_REQUEST_DONE};
	struct ferry__gcs_dedup_key k;
	size_t cursor = 0;
	int ret = 0;

	while (ret == 0 && ferry__gcs_dedup_next(&s->dedup, &cursor, &k, &op.request_done.status)) {
		memcpy(op.request_done.client, k.client, sizeof(k.client));
		op.request_done.seq = k.seq;
		ret = emit(ctx, &op);
	}
	return ret;
}

/* Every record of the state, in the canonical order. */
static int emit_all(struct ferry__gcs_state *s, emit_fn emit, void *ctx)
{
	struct kv_emit k = {emit, ctx};
	int ret = 0;

	for (int t = 0; t < FERRY__GCS_T_COUNT && ret == 0; t++)
		ret = emit_table(s, (enum ferry__gcs_table)t, emit, ctx);
	if (ret == 0)
		ret = emit_logs(s, emit, ctx);
	if (ret == 0)
		ret = ferry__kv_scan(s->kv, (struct ferry__gcs_slice){NULL, 0}, true,
				     (struct ferry__gcs_slice){NULL, 0}, emit_kv_entry, &k);
	if (ret >= 0)
		ret = emit_objdir(s, emit, ctx);
	if (ret >= 0)
		ret = emit_dedup(s, emit, ctx);
	return ret < 0 ? ret : 0;
}

static int emit_to_buf(void *ctx, const struct ferry__gcs_op *op)
{
	struct ferry__gcs_writer w = {ctx, 0};
	size_t mark = w.buf->size;

	ferry__gcs_put_u32(&w, 0);
	ferry__gcs_op_encode(op, &w);
	if (w.err)
		return w.err;
	ferry__gcs_store_u32(w.buf->data + mark, (uint32_t)(w.buf->size - mark - 4));
	return 0;
}

static int emit_to_snapshot(void *ctx, const struct ferry__gcs_op *op)
{
	struct ferry__gcs_writer w = {NULL, 0};
	int ret = ferry__wal_snapshot_begin(ctx, &w.buf);

	if (ret < 0)
		return ret;
	ferry__gcs_op_encode(op, &w);
	return w.err ? w.err : ferry__wal_snapshot_commit(ctx);
}

int ferry__gcs_state_dump(struct ferry__gcs_state *s, struct ferry__gcs_buf *out)
{
	return emit_all(s, emit_to_buf, out);
}

int ferry__gcs_state_snapshot(struct ferry__gcs_state *s)
{
	uint64_t lsn;
	int ret;

	if (!s->wal)
		return -EOPNOTSUPP;
	ret = ferry__wal_snapshot_start(s->wal, &lsn);
	if (ret < 0)
		return ret;
	ret = emit_all(s, emit_to_snapshot, s->wal);
	if (ret < 0) {
		ferry__wal_snapshot_cancel(s->wal);
		return ret;
	}
	return ferry__wal_snapshot_write(s->wal);
}

int ferry__gcs_state_maybe_snapshot(struct ferry__gcs_state *s)
{
	struct ferry__wal_stats st;
	int ret;

	if (!s->wal || ferry__wal_snapshot_busy(s->wal))
		return 0;
	ferry__wal_get_stats(s->wal, &st);
	if (st.log_bytes < s->opts.snapshot_log_bytes)
		return 0;
	ret = ferry__gcs_state_snapshot(s);
	return ret < 0 ? ret : 1;
}

/* ---- life cycle and access ---- */

static int open_parts(struct ferry__gcs_state *s)
{
	struct ferry__objdir_opts od = {s->opts.objdir_shard_index, s->opts.objdir_shard_count,
					on_object_changed, s};
	int ret = ferry__gcs_tables_create(&s->opts.tables, &s->tables);

	if (ret < 0)
		return ret;
	ret = ferry__kv_create(&s->opts.kv, &s->kv);
	if (ret < 0)
		goto err_destroy_tables;
	ret = ferry__objdir_create(&od, &s->objdir);
	if (ret < 0)
		goto err_destroy_kv;
	ferry__gcs_dedup_init(&s->dedup, 0);
	return 0;

err_destroy_kv:
	ferry__kv_destroy(s->kv);
err_destroy_tables:
	ferry__gcs_tables_destroy(s->tables);
	return ret;
}

static void close_parts(struct ferry__gcs_state *s)
{
	ferry__gcs_dedup_fini(&s->dedup);
	ferry__objdir_destroy(s->objdir);
	ferry__kv_destroy(s->kv);
	ferry__gcs_tables_destroy(s->tables);
}

int ferry__gcs_state_open(const struct ferry__gcs_state_opts *opts, struct ferry__gcs_state **out)
{
	struct ferry__gcs_state *s = ferry__calloc(1, sizeof(*s));
	struct ferry__wal_opts wo = {0};
	int ret;

	if (!s)
		return -ENOMEM;
	if (opts)
		s->opts = *opts;
	s->opts.wal_dir = NULL;
	if (!s->opts.snapshot_log_bytes)
		s->opts.snapshot_log_bytes = 64u << 20;
	ret = open_parts(s);
	if (ret < 0)
		goto err_free;
	if (opts && opts->wal_dir) {
		wo.dir = opts->wal_dir;
		wo.max_buffered_bytes = opts->wal_max_buffered_bytes;
		wo.durable = opts->durable;
		wo.snapshot_done = opts->snapshot_done;
		wo.arg = opts->arg;
		s->quiet = true;
		ret = ferry__wal_open(&wo, replay_record, s, &s->wal);
		s->quiet = false;
		if (ret < 0)
			goto err_close_parts;
	}
	*out = s;
	return 0;

err_close_parts:
	close_parts(s);
err_free:
	ferry__free(s);
	return ret;
}

void ferry__gcs_state_close(struct ferry__gcs_state *s)
{
	if (!s)
		return;
	ferry__wal_close(s->wal);
	close_parts(s);
	ferry__free(s);
}

uint64_t ferry__gcs_state_last_lsn(const struct ferry__gcs_state *s)
{
	return s->wal ? ferry__wal_last_lsn(s->wal) : s->last_lsn;
}

uint64_t ferry__gcs_state_durable_lsn(const struct ferry__gcs_state *s)
{
	return s->wal ? ferry__wal_durable_lsn(s->wal) : s->last_lsn;
}

int ferry__gcs_state_flush(struct ferry__gcs_state *s)
{
	return s->wal ? ferry__wal_submit(s->wal) : 0;
}

int ferry__gcs_state_process(struct ferry__gcs_state *s)
{
	return s->wal ? ferry__wal_process(s->wal) : 0;
}

int ferry__gcs_state_wait(struct ferry__gcs_state *s)
{
	return s->wal ? ferry__wal_wait(s->wal) : 0;
}

int ferry__gcs_state_event_fd(const struct ferry__gcs_state *s)
{
	return s->wal ? ferry__wal_event_fd(s->wal) : -1;
}

struct ferry__gcs_tables *ferry__gcs_state_tables(const struct ferry__gcs_state *s)
{
	return s->tables;
}

struct ferry__kv *ferry__gcs_state_kv(const struct ferry__gcs_state *s)
{
	return s->kv;
}

struct ferry__objdir *ferry__gcs_state_objdir(const struct ferry__gcs_state *s)
{
	return s->objdir;
}

struct ferry__wal *ferry__gcs_state_wal(const struct ferry__gcs_state *s)
{
	return s->wal;
}
