/* SPDX-License-Identifier: Apache-2.0 */
/* GCS mutation records: encoding and bounds-checked decoding (format in ops.h). */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "gcs/ops.h"

/* ---- encoding ---- */

#define PUT_ID(w, id) ferry__gcs_put_raw((w), (id).bytes, sizeof((id).bytes))

static void put_heartbeat(struct ferry__gcs_writer *w, const struct ferry__gcs_heartbeat *hb)
{
	PUT_ID(w, hb->id);
	ferry__gcs_put_u64(w, hb->time_ms);
	ferry__gcs_put_f64(w, hb->avail_cpu);
	ferry__gcs_put_f64(w, hb->avail_gpu);
	ferry__gcs_put_f64(w, hb->avail_memory_bytes);
	ferry__gcs_put_u32(w, hb->queue_length);
}

static void put_load(struct ferry__gcs_writer *w, const struct ferry_gcs_node_load *l)
{
	PUT_ID(w, l->id);
	ferry__gcs_put_u64(w, l->version);
	ferry__gcs_put_u32(w, l->queue_length);
	ferry__gcs_put_u64(w, l->mean_task_us);
	ferry__gcs_put_u32(w, l->nresources);
	for (uint32_t i = 0; i < l->nresources; i++) {
		ferry__gcs_put_str(w, l->resources[i].name);
		ferry__gcs_put_u64(w, (uint64_t)l->resources[i].total);
		ferry__gcs_put_u64(w, (uint64_t)l->resources[i].available);
	}
}

void ferry__gcs_op_encode(const struct ferry__gcs_op *op, struct ferry__gcs_writer *w)
{
	if (ferry__gcs_op_is_fb(op->type)) {
		ferry__gcs_op_encode_fb(op, w);
		return;
	}
	ferry__gcs_put_u8(w, (uint8_t)op->type);
	switch (op->type) {
	case FERRY__GCS_OP_NODE_HEARTBEAT:
		put_heartbeat(w, &op->heartbeat);
		break;
	case FERRY__GCS_OP_NODE_LOAD:
		put_load(w, &op->load);
		break;
	default:
		w->err = w->err ? w->err : -EINVAL;
		break;
	}
}

/* ---- decoding ---- */

#define GET_ID(r, id) ferry__gcs_get_raw((r), (id).bytes, sizeof((id).bytes))
#define TEXT(r) ferry__gcs_get_str((r), FERRY__GCS_TEXT_MAX)

static uint32_t get_count(struct ferry__gcs_reader *r, uint32_t max)
{
	uint32_t n = ferry__gcs_get_u32(r);

	if (n > max) {
		r->err = r->err ? r->err : -EPROTO;
		return 0;
	}
	return r->err ? 0 : n;
}

/* An array of @count elements owned by @op. Every element takes at least one byte of input, so
 * a malformed count cannot make this allocate more than the record is long. */
static void *op_array(struct ferry__gcs_op *op, struct ferry__gcs_reader *r, size_t count,
		      size_t elem)
{
	struct ferry__gcs_op_block *b;

	if (r->err || count == 0)
		return NULL;
	if (count > r->left) {
		r->err = -EPROTO;
		return NULL;
	}
	b = ferry__malloc(sizeof(*b) + count * elem);
	if (!b) {
		r->err = -ENOMEM;
		return NULL;
	}
	memset(b->data, 0, count * elem);
	b->next = op->owned;
	op->owned = b;
	return b->data;
}

/* IDs are byte arrays (alignment 1): an array of them can be used in place. */
static const void *id_array(struct ferry__gcs_reader *r, uint32_t count, size_t size)
{
	const void *p = r->p;

	if (r->err || count == 0)
		return NULL;
	if (r->left / size < count) {
		r->err = -EPROTO;
		return NULL;
	}
	r->p += count * size;
	r->left -= count * size;
	return p;
}

static void get_resources(struct ferry__gcs_reader *r, struct ferry__gcs_op *op,
			  struct ferry__gcs_resources *res)
{
	struct ferry_gcs_resource *c;

	res->cpu = ferry__gcs_get_f64(r);
	res->gpu = ferry__gcs_get_f64(r);
	res->memory_bytes = ferry__gcs_get_f64(r);
	res->ncustom = get_count(r, FERRY__GCS_MAX_CUSTOM);
	c = op_array(op, r, res->ncustom, sizeof(*c));
	for (uint32_t i = 0; i < res->ncustom && !r->err; i++) {
		c[i].name = TEXT(r);
		c[i].amount = ferry__gcs_get_f64(r);
	}
	res->custom = c;
}

/* Node records as written before they became GcsRecords (ops_fb.c): read from older logs. */
static void get_node(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	struct ferry__gcs_node *n = &op->node;
	struct ferry__gcs_label *labels;

	GET_ID(r, n->id);
	n->address = TEXT(r);
	get_resources(r, op, &n->total);
	n->nlabels = get_count(r, FERRY__GCS_MAX_LABELS);
	labels = op_array(op, r, n->nlabels, sizeof(*labels));
	for (uint32_t i = 0; i < n->nlabels && !r->err; i++) {
		labels[i].key = TEXT(r);
		labels[i].value = TEXT(r);
	}
	n->labels = labels;
	n->store_capacity_bytes = ferry__gcs_get_u64(r);
	n->transports = ferry__gcs_get_u32(r);
	n->state = (enum ferry_gcs_node_state)ferry__gcs_get_u8(r);
	n->start_ms = ferry__gcs_get_u64(r);
	n->end_ms = ferry__gcs_get_u64(r);
	n->last_heartbeat_ms = ferry__gcs_get_u64(r);
	n->avail_cpu = ferry__gcs_get_f64(r);
	n->avail_gpu = ferry__gcs_get_f64(r);
	n->avail_memory_bytes = ferry__gcs_get_f64(r);
	n->queue_length = ferry__gcs_get_u32(r);
}

static void get_heartbeat(struct ferry__gcs_reader *r, struct ferry__gcs_heartbeat *hb)
{
	GET_ID(r, hb->id);
	hb->time_ms = ferry__gcs_get_u64(r);
	hb->avail_cpu = ferry__gcs_get_f64(r);
	hb->avail_gpu = ferry__gcs_get_f64(r);
	hb->avail_memory_bytes = ferry__gcs_get_f64(r);
	hb->queue_length = ferry__gcs_get_u32(r);
}

/* A fixed-point amount: below 2^63, so it reads back as a non-negative int64_t. */
static int64_t get_amount(struct ferry__gcs_reader *r)
{
	uint64_t v = ferry__gcs_get_u64(r);

	if (v > INT64_MAX) {
		r->err = r->err ? r->err : -EPROTO;
		return 0;
	}
	return (int64_t)v;
}

static void get_load(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	struct ferry_gcs_node_load *l = &op->load;
	struct ferry_gcs_resource_load *res;

	GET_ID(r, l->id);
	l->version = ferry__gcs_get_u64(r);
	l->queue_length = ferry__gcs_get_u32(r);
	l->mean_task_us = ferry__gcs_get_u64(r);
	l->nresources = get_count(r, FERRY_GCS_MAX_LOAD_RESOURCES);
	res = op_array(op, r, l->nresources, sizeof(*res));
	for (uint32_t i = 0; i < l->nresources && !r->err; i++) {
		res[i].name = ferry__gcs_get_str(r, FERRY__GCS_NAME_MAX);
		res[i].total = get_amount(r);
		res[i].available = get_amount(r);
	}
	l->resources = res;
}

/* Job records as written before they became GcsRecords (ops_fb.c): read from older logs. */
static void get_job(struct ferry__gcs_reader *r, struct ferry__gcs_job *j)
{
	GET_ID(r, j->id);
	j->state = (enum ferry_gcs_job_state)ferry__gcs_get_u8(r);
	GET_ID(r, j->driver_node);
	j->driver_pid = ferry__gcs_get_u32(r);
	j->driver_address = TEXT(r);
	j->entrypoint = TEXT(r);
	j->start_ms = ferry__gcs_get_u64(r);
	j->end_ms = ferry__gcs_get_u64(r);
}

/* Worker records as written before they became GcsRecords (ops_fb.c): read from older logs. */
static void get_worker(struct ferry__gcs_reader *r, struct ferry_gcs_worker_info *k)
{
	GET_ID(r, k->id);
	GET_ID(r, k->node);
	GET_ID(r, k->job);
	k->pid = ferry__gcs_get_u32(r);
	k->address = TEXT(r);
	k->state = (enum ferry_gcs_worker_state)ferry__gcs_get_u8(r);
	k->exit_type = (enum ferry_gcs_exit)ferry__gcs_get_u8(r);
	k->exit_message = TEXT(r);
	k->start_ms = ferry__gcs_get_u64(r);
	k->end_ms = ferry__gcs_get_u64(r);
}

/* Actor records as written before they became GcsRecords (ops_fb.c): read from older logs. */
static void get_actor(struct ferry__gcs_reader *r, struct ferry_gcs_actor_info *a)
{
	GET_ID(r, a->id);
	GET_ID(r, a->job);
	GET_ID(r, a->owner);
	a->name = TEXT(r);
	a->class_name = TEXT(r);
	a->state = (enum ferry_gcs_actor_state)ferry__gcs_get_u8(r);
	GET_ID(r, a->node);
	GET_ID(r, a->worker);
	a->num_restarts = ferry__gcs_get_u32(r);
	a->max_restarts = (int32_t)ferry__gcs_get_u32(r);
	a->death_cause = (enum ferry_gcs_exit)ferry__gcs_get_u8(r);
	a->death_message = TEXT(r);
}

static void get_actor_update(struct ferry__gcs_reader *r, struct ferry__gcs_actor_update *u)
{
	GET_ID(r, u->id);
	u->state = (enum ferry_gcs_actor_state)ferry__gcs_get_u8(r);
	GET_ID(r, u->node);
	GET_ID(r, u->worker);
	u->death_cause = (enum ferry_gcs_exit)ferry__gcs_get_u8(r);
	u->death_message = TEXT(r);
}

static void get_pg(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	struct ferry__gcs_pg *g = &op->pg;
	struct ferry__gcs_bundle *b;

	GET_ID(r, g->id);
	GET_ID(r, g->job);
	g->name = TEXT(r);
	g->strategy = (enum ferry_gcs_pg_strategy)ferry__gcs_get_u8(r);
	g->state = (enum ferry_gcs_pg_state)ferry__gcs_get_u8(r);
	g->nbundles = get_count(r, FERRY__GCS_MAX_BUNDLES);
	b = op_array(op, r, g->nbundles, sizeof(*b));
	for (uint32_t i = 0; i < g->nbundles && !r->err; i++) {
		get_resources(r, op, &b[i].resources);
		GET_ID(r, b[i].node);
	}
	g->bundles = b;
}

static void get_pg_update(struct ferry__gcs_reader *r, struct ferry__gcs_pg_update *u)
{
	GET_ID(r, u->id);
	u->state = (enum ferry_gcs_pg_state)ferry__gcs_get_u8(r);
	u->nnodes = get_count(r, FERRY__GCS_MAX_BUNDLES);
	u->nodes = id_array(r, u->nnodes, sizeof(struct ferry_node_id));
}

/* Task events and errors as written before they became GcsRecords (ops_fb.c). */
static void get_task_event(struct ferry__gcs_reader *r, struct ferry__gcs_task_event *e)
{
	GET_ID(r, e->task);
	GET_ID(r, e->job);
	e->attempt = ferry__gcs_get_u32(r);
	e->state = (enum ferry_gcs_task_state)ferry__gcs_get_u8(r);
	GET_ID(r, e->node);
	GET_ID(r, e->worker);
	e->time_ms = ferry__gcs_get_u64(r);
}

static void get_error(struct ferry__gcs_reader *r, struct ferry__gcs_error *e)
{
	GET_ID(r, e->job);
	e->time_ms = ferry__gcs_get_u64(r);
	e->type = TEXT(r);
	e->message = TEXT(r);
}

/* A field added at the end of a record after the first release: absent (0) in records that
 * older logs, snapshots and peers wrote, whose body ends before it. */
static uint32_t get_trailing_u32(struct ferry__gcs_reader *r)
{
	return r->left ? ferry__gcs_get_u32(r) : 0;
}

/* A place as written before it had a check (offset, alloc): what older logs, snapshots and
 * peers hold. Places always end their record, so the bytes left tell the two layouts apart. */
#define PLACE_BYTES_NO_CHECK 16

/* A place, with its check unless @no_check (then 0: none). */
static void get_place(struct ferry__gcs_reader *r, struct ferry_gcs_object_place *p, bool no_check)
{
	p->offset = ferry__gcs_get_u64(r);
	p->alloc = ferry__gcs_get_u64(r);
	p->check = no_check ? 0 : ferry__gcs_get_u64(r);
}

/* The places after an object record's metadata_bytes, if any (NULL: none known). Present, they
 * must all be there, in one layout: exactly nlocations places without checks, else with them
 * (a short block or bytes after it: -EPROTO). */
static void get_places(struct ferry__gcs_reader *r, struct ferry__gcs_op *op,
		       struct ferry__objdir_info *o)
{
	struct ferry_gcs_object_place *p;
	bool no_check;

	if (r->err || !r->left || !o->nlocations)
		return; /* bytes left with no locations: trailing bytes, rejected by the caller */
	no_check = r->left == (size_t)o->nlocations * PLACE_BYTES_NO_CHECK;
	p = op_array(op, r, o->nlocations, sizeof(*p));
	for (uint32_t i = 0; i < o->nlocations && !r->err; i++)
		get_place(r, &p[i], no_check);
	o->places = p;
}

static void get_obj(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	struct ferry__objdir_info *o = &op->obj;

	GET_ID(r, o->id);
	GET_ID(r, o->owner_worker);
	GET_ID(r, o->owner_node);
	o->size_bytes = ferry__gcs_get_u64(r);
	o->state = (enum ferry_gcs_object_state)ferry__gcs_get_u8(r);
	o->owner_dead = ferry__gcs_get_u8(r) != 0;
	o->spill_url = ferry__gcs_get_str(r, FERRY__OBJDIR_MAX_URL);
	o->nlocations = get_count(r, FERRY__OBJDIR_MAX_LOCATIONS);
	o->locations = id_array(r, o->nlocations, sizeof(struct ferry_node_id));
	o->metadata_bytes = get_trailing_u32(r);
	get_places(r, op, o);
}

/* KV records as written before they became GcsRecords (ops_fb.c): read from older logs. */
static void get_kv(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	op->kv.ns = ferry__gcs_get_bytes(r, UINT32_MAX);
	op->kv.key = ferry__gcs_get_bytes(r, UINT32_MAX);
	if (op->type != FERRY__GCS_OP_KV_PUT)
		return;
	op->kv.value = ferry__gcs_get_bytes(r, UINT32_MAX);
	op->kv.overwrite = ferry__gcs_get_u8(r) != 0;
}

static void get_small(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_NODE_STATE:
		GET_ID(r, op->node_state.id);
		op->node_state.state = (enum ferry_gcs_node_state)ferry__gcs_get_u8(r);
		op->node_state.time_ms = ferry__gcs_get_u64(r);
		break;
	case FERRY__GCS_OP_JOB_FINISH:
		GET_ID(r, op->job_finish.id);
		op->job_finish.time_ms = ferry__gcs_get_u64(r);
		break;
	case FERRY__GCS_OP_WORKER_DEAD:
		GET_ID(r, op->worker_exit.id);
		op->worker_exit.time_ms = ferry__gcs_get_u64(r);
		op->worker_exit.exit_type = (enum ferry_gcs_exit)ferry__gcs_get_u8(r);
		op->worker_exit.message = TEXT(r);
		break;
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
		GET_ID(r, op->obj_location.id);
		GET_ID(r, op->obj_location.node);
		op->obj_location.size_bytes = ferry__gcs_get_u64(r);
		op->obj_location.metadata_bytes = get_trailing_u32(r);
		if (op->type == FERRY__GCS_OP_OBJ_ADD_LOCATION && r->left)
			get_place(r, &op->obj_location.place, /* short: -EPROTO */
				  r->left == PLACE_BYTES_NO_CHECK);
		break;
	case FERRY__GCS_OP_OBJ_SPILLED:
		GET_ID(r, op->obj_spilled.id);
		op->obj_spilled.url = ferry__gcs_get_str(r, FERRY__OBJDIR_MAX_URL);
		break;
	case FERRY__GCS_OP_OBJ_REMOVE:
		GET_ID(r, op->obj_id);
		break;
	case FERRY__GCS_OP_OBJ_OWNER_DIED:
		GET_ID(r, op->owner);
		break;
	case FERRY__GCS_OP_OBJ_NODE_DIED:
		GET_ID(r, op->node_id);
		break;
	case FERRY__GCS_OP_REQUEST_DONE:
		ferry__gcs_get_raw(r, op->request_done.client, sizeof(op->request_done.client));
		op->request_done.seq = ferry__gcs_get_u64(r);
		op->request_done.status = (int32_t)ferry__gcs_get_u32(r);
		break;
	case FERRY__GCS_OP_RESTORE_DROPPED:
		op->dropped.task_events = ferry__gcs_get_u64(r);
		op->dropped.errors = ferry__gcs_get_u64(r);
		break;
	default:
		r->err = -EPROTO;
		break;
	}
}

static void get_body(struct ferry__gcs_reader *r, struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_NODE_REGISTER:
	case FERRY__GCS_OP_RESTORE_NODE:
		get_node(r, op);
		break;
	case FERRY__GCS_OP_NODE_HEARTBEAT:
		get_heartbeat(r, &op->heartbeat);
		break;
	case FERRY__GCS_OP_NODE_LOAD:
		get_load(r, op);
		break;
	case FERRY__GCS_OP_JOB_ADD:
	case FERRY__GCS_OP_RESTORE_JOB:
		get_job(r, &op->job);
		break;
	case FERRY__GCS_OP_WORKER_ADD:
	case FERRY__GCS_OP_RESTORE_WORKER:
		get_worker(r, &op->worker);
		break;
	case FERRY__GCS_OP_ACTOR_REGISTER:
	case FERRY__GCS_OP_RESTORE_ACTOR:
		get_actor(r, &op->actor);
		break;
	case FERRY__GCS_OP_ACTOR_UPDATE:
		get_actor_update(r, &op->actor_update);
		break;
	case FERRY__GCS_OP_PG_CREATE:
	case FERRY__GCS_OP_RESTORE_PG:
		get_pg(r, op);
		break;
	case FERRY__GCS_OP_PG_UPDATE:
		get_pg_update(r, &op->pg_update);
		break;
	case FERRY__GCS_OP_TASK_EVENT:
		get_task_event(r, &op->task_event);
		break;
	case FERRY__GCS_OP_ERROR:
		get_error(r, &op->error);
		break;
	case FERRY__GCS_OP_LOG: /* as written before GcsRecord */
		GET_ID(r, op->log.job);
		op->log.data = ferry__gcs_get_bytes(r, FERRY__GCS_TEXT_MAX);
		break;
	case FERRY__GCS_OP_KV_PUT:
	case FERRY__GCS_OP_KV_DELETE:
	case FERRY__GCS_OP_KV_DELETE_PREFIX:
		get_kv(r, op);
		break;
	case FERRY__GCS_OP_OBJ_ADD:
	case FERRY__GCS_OP_RESTORE_OBJ:
		get_obj(r, op);
		break;
	default:
		get_small(r, op);
		break;
	}
}

int ferry__gcs_op_decode(const void *data, size_t size, struct ferry__gcs_op *op)
{
	struct ferry__gcs_reader r = {data, size, 0};

	if (size && !*(const uint8_t *)data)
		return ferry__gcs_op_decode_fb(data, size, op);
	memset(op, 0, sizeof(*op));
	op->type = (enum ferry__gcs_op_type)ferry__gcs_get_u8(&r);
	get_body(&r, op);
	if (!r.err && r.left)
		r.err = -EPROTO;
	if (r.err) {
		if (r.err == -EPROTO)
			FLOG_WARN("gcs", "ops: malformed record (type %d, %zu bytes)",
				  (int)op->type, size);
		ferry__gcs_op_release(op);
		return r.err;
	}
	return 0;
}

void ferry__gcs_op_release(struct ferry__gcs_op *op)
{
	struct ferry__gcs_op_block *b, *next;

	for (b = op->owned; b; b = next) {
		next = b->next;
		ferry__free(b);
	}
	op->owned = NULL;
}
