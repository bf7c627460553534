/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS records as FlatBuffers (schema/gcs.fbs GcsRecord): the record prefix, the build, the
 * version check and the tables of nodes, jobs, workers, actors, KV, logs, task events and
 * errors, and the entry points ferry__gcs_op_encode()/_decode()/_release(); gcs/ops_fb_obj.c
 * has placement groups, objects, dedup and dropped counts, gcs/ops_fb_beat.c heartbeats and
 * load reports. A record is FERRY__GCS_RECORD_PREFIX zero bytes, then the FlatBuffer.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/log.h"
#include "gcs/ops_fb.h"

/* Whether @type is an op kind this codec knows (every kind is a GcsRecord). */
static bool known_type(enum ferry__gcs_op_type type)
{
	switch (type) {
	case FERRY__GCS_OP_NODE_HEARTBEAT:
	case FERRY__GCS_OP_NODE_LOAD:
	case FERRY__GCS_OP_KV_PUT:
	case FERRY__GCS_OP_KV_DELETE:
	case FERRY__GCS_OP_KV_DELETE_PREFIX:
	case FERRY__GCS_OP_LOG:
	case FERRY__GCS_OP_NODE_REGISTER:
	case FERRY__GCS_OP_RESTORE_NODE:
	case FERRY__GCS_OP_NODE_STATE:
	case FERRY__GCS_OP_JOB_ADD:
	case FERRY__GCS_OP_RESTORE_JOB:
	case FERRY__GCS_OP_JOB_FINISH:
	case FERRY__GCS_OP_WORKER_ADD:
	case FERRY__GCS_OP_RESTORE_WORKER:
	case FERRY__GCS_OP_WORKER_DEAD:
	case FERRY__GCS_OP_ACTOR_REGISTER:
	case FERRY__GCS_OP_RESTORE_ACTOR:
	case FERRY__GCS_OP_ACTOR_UPDATE:
	case FERRY__GCS_OP_TASK_EVENT:
	case FERRY__GCS_OP_ERROR:
		return true;
	default:
		return ferry__gcs_op_is_obj_fb(type);
	}
}

static const uint8_t zero_prefix[FERRY__GCS_RECORD_PREFIX];

/* Append the prefix and @b's finished buffer to @w. */
static void put_built(struct ferry__gcs_writer *w, struct ferry__fb_builder *b)
{
	ferry__gcs_put_raw(w, zero_prefix, sizeof(zero_prefix));
	ferry__gcs_put_raw(w, ferry__fb_builder_data(b), ferry__fb_builder_size(b));
}

/* What encoding a node needs besides @op: its vectors of tables (freed by the caller). */
struct node_enc {
	struct ferry__wire_gcs_node node;
	struct ferry__wire_gcs_resources total;
	struct ferry__wire_gcs_resource_amount *custom;
	struct ferry__wire_gcs_label *labels;
};

static int fill_resources(const struct ferry__gcs_resources *r,
			  struct ferry__wire_gcs_resources *out,
			  struct ferry__wire_gcs_resource_amount **custom)
{
	*out = (struct ferry__wire_gcs_resources){
		.cpu = r->cpu, .gpu = r->gpu, .memory_bytes = r->memory_bytes};
	if (!r->ncustom)
		return 0;
	*custom = ferry__calloc(r->ncustom, sizeof(**custom));
	if (!*custom)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->ncustom; i++)
		(*custom)[i] = (struct ferry__wire_gcs_resource_amount){
			ferry__gcs_fb_text(r->custom[i].name), r->custom[i].amount};
	out->custom = *custom;
	out->custom_count = r->ncustom;
	return 0;
}

static int fill_node(const struct ferry__gcs_node *n, struct node_enc *e)
{
	struct ferry__wire_gcs_node *m = &e->node;

	memcpy(m->id.bytes, n->id.bytes, sizeof(m->id.bytes));
	m->address = ferry__gcs_fb_text(n->address);
	if (fill_resources(&n->total, &e->total, &e->custom) < 0)
		return -ENOMEM;
	m->total = &e->total;
	if (n->nlabels) {
		e->labels = ferry__calloc(n->nlabels, sizeof(*e->labels));
		if (!e->labels)
			return -ENOMEM;
		for (uint32_t i = 0; i < n->nlabels; i++)
			e->labels[i] = (struct ferry__wire_gcs_label){
				ferry__gcs_fb_text(n->labels[i].key),
				ferry__gcs_fb_text(n->labels[i].value)};
		m->labels = e->labels;
		m->labels_count = n->nlabels;
	}
	m->store_capacity_bytes = n->store_capacity_bytes;
	m->transports = n->transports;
	m->state = (uint8_t)n->state;
	m->start_ms = n->start_ms;
	m->end_ms = n->end_ms;
	m->last_heartbeat_ms = n->last_heartbeat_ms;
	m->avail_cpu = n->avail_cpu;
	m->avail_gpu = n->avail_gpu;
	m->avail_memory_bytes = n->avail_memory_bytes;
	m->queue_length = n->queue_length;
	return 0;
}

/* The tables without vectors of tables: everything but KV, LOG and nodes, built in @u. */
union small_enc {
	struct ferry__wire_gcs_node_state node_state;
	struct ferry__wire_gcs_job job;
	struct ferry__wire_gcs_job_finish job_finish;
	struct ferry__wire_gcs_worker worker;
	struct ferry__wire_gcs_worker_dead worker_dead;
	struct ferry__wire_gcs_actor actor;
	struct ferry__wire_gcs_actor_update actor_update;
	struct ferry__wire_gcs_task_event task_event;
	struct ferry__wire_gcs_error error;
};

static void fill_task_event(const struct ferry__gcs_task_event *e,
			    struct ferry__wire_gcs_task_event *m)
{
	TO_WIRE_ID(m->task, e->task);
	TO_WIRE_ID(m->job, e->job);
	m->attempt = e->attempt;
	m->state = (uint8_t)e->state;
	TO_WIRE_ID(m->node, e->node);
	TO_WIRE_ID(m->worker, e->worker);
	m->time_ms = e->time_ms;
	m->name = e->name[0] ? e->name : NULL;
}

static void fill_actor(const struct ferry_gcs_actor_info *a, struct ferry__wire_gcs_actor *m)
{
	TO_WIRE_ID(m->id, a->id);
	TO_WIRE_ID(m->job, a->job);
	TO_WIRE_ID(m->owner, a->owner);
	m->name = ferry__gcs_fb_text(a->name);
	m->class_name = ferry__gcs_fb_text(a->class_name);
	m->state = (uint8_t)a->state;
	TO_WIRE_ID(m->node, a->node);
	TO_WIRE_ID(m->worker, a->worker);
	m->num_restarts = a->num_restarts;
	m->max_restarts = a->max_restarts;
	m->death_cause = (uint8_t)a->death_cause;
	m->death_message = ferry__gcs_fb_text(a->death_message);
}

static void fill_actor_update(const struct ferry__gcs_actor_update *u,
			      struct ferry__wire_gcs_actor_update *m)
{
	TO_WIRE_ID(m->id, u->id);
	m->state = (uint8_t)u->state;
	TO_WIRE_ID(m->node, u->node);
	TO_WIRE_ID(m->worker, u->worker);
	m->death_cause = (uint8_t)u->death_cause;
	m->death_message = ferry__gcs_fb_text(u->death_message);
}

static void fill_worker(const struct ferry_gcs_worker_info *k, struct ferry__wire_gcs_worker *m)
{
	TO_WIRE_ID(m->id, k->id);
	TO_WIRE_ID(m->node, k->node);
	TO_WIRE_ID(m->job, k->job);
	m->pid = k->pid;
	m->address = ferry__gcs_fb_text(k->address);
	m->state = (uint8_t)k->state;
	m->exit_type = (uint8_t)k->exit_type;
	m->exit_message = ferry__gcs_fb_text(k->exit_message);
	m->start_ms = k->start_ms;
	m->end_ms = k->end_ms;
}

static void fill_small(const struct ferry__gcs_op *op, union small_enc *u,
		       struct ferry__wire_gcs_record *rec)
{
	memset(u, 0, sizeof(*u));
	switch (op->type) {
	case FERRY__GCS_OP_NODE_STATE:
		TO_WIRE_ID(u->node_state.id, op->node_state.id);
		u->node_state.state = (uint8_t)op->node_state.state;
		u->node_state.time_ms = op->node_state.time_ms;
		rec->node_state = &u->node_state;
		break;
	case FERRY__GCS_OP_JOB_FINISH:
		TO_WIRE_ID(u->job_finish.id, op->job_finish.id);
		u->job_finish.time_ms = op->job_finish.time_ms;
		rec->job_finish = &u->job_finish;
		break;
	case FERRY__GCS_OP_WORKER_ADD:
	case FERRY__GCS_OP_RESTORE_WORKER:
		fill_worker(&op->worker, &u->worker);
		rec->worker = &u->worker;
		break;
	case FERRY__GCS_OP_WORKER_DEAD:
		TO_WIRE_ID(u->worker_dead.id, op->worker_exit.id);
		u->worker_dead.time_ms = op->worker_exit.time_ms;
		u->worker_dead.exit_type = (uint8_t)op->worker_exit.exit_type;
		u->worker_dead.message = ferry__gcs_fb_text(op->worker_exit.message);
		rec->worker_dead = &u->worker_dead;
		break;
	case FERRY__GCS_OP_ACTOR_REGISTER:
	case FERRY__GCS_OP_RESTORE_ACTOR:
		fill_actor(&op->actor, &u->actor);
		rec->actor = &u->actor;
		break;
	case FERRY__GCS_OP_ACTOR_UPDATE:
		fill_actor_update(&op->actor_update, &u->actor_update);
		rec->actor_update = &u->actor_update;
		break;
	case FERRY__GCS_OP_TASK_EVENT:
		fill_task_event(&op->task_event, &u->task_event);
		rec->task_event = &u->task_event;
		break;
	case FERRY__GCS_OP_ERROR:
		TO_WIRE_ID(u->error.job, op->error.job);
		u->error.time_ms = op->error.time_ms;
		u->error.type = ferry__gcs_fb_text(op->error.type);
		u->error.message = ferry__gcs_fb_text(op->error.message);
		rec->error = &u->error;
		break;
	default: /* JOB_ADD, RESTORE_JOB */
		TO_WIRE_ID(u->job.id, op->job.id);
		u->job.state = (uint8_t)op->job.state;
		TO_WIRE_ID(u->job.driver_node, op->job.driver_node);
		u->job.driver_pid = op->job.driver_pid;
		u->job.driver_address = ferry__gcs_fb_text(op->job.driver_address);
		u->job.entrypoint = ferry__gcs_fb_text(op->job.entrypoint);
		u->job.start_ms = op->job.start_ms;
		u->job.end_ms = op->job.end_ms;
		rec->job = &u->job;
		break;
	}
}

static void fill_kv(const struct ferry__gcs_op *op, struct ferry__wire_gcs_kv_op *kv)
{
	kv->ns = op->kv.ns.data;
	kv->ns_count = op->kv.ns.size;
	kv->key = op->kv.key.data;
	kv->key_count = op->kv.key.size;
	if (op->type != FERRY__GCS_OP_KV_PUT)
		return;
	kv->value = op->kv.value.data;
	kv->value_count = op->kv.value.size;
	kv->overwrite = op->kv.overwrite;
}

/*
 * Build @rec into @w, after the prefix; the first error sticks in @w. Into an empty buffer (a
 * request, a reply value, a published item) the builder works in the buffer itself, so a
 * long-lived buffer makes encoding allocation-free; after other bytes (a WAL entry's header)
 * it builds aside and appends.
 */
void ferry__gcs_record_build(const struct ferry__wire_gcs_record *rec, struct ferry__gcs_writer *w)
{
	struct ferry__gcs_buf *out = w->buf;
	struct ferry__fb_builder b = {0};
	int ret;

	_Static_assert(FERRY__GCS_RECORD_PREFIX <= FERRY_FB_HEADROOM,
		       "the prefix fits the headroom");
	if (out->size) {
		ret = ferry__wire_gcs_record_build(&b, rec);
		if (ret == 0)
			put_built(w, &b);
		ferry__fb_builder_fini(&b);
	} else {
		b.buf = out->data;
		b.cap = out->capacity;
		ret = ferry__wire_gcs_record_build(&b, rec);
		out->data = b.buf; /* the builder may have grown it */
		out->capacity = b.cap;
		if (ret == 0) {
			/* the payload follows FERRY_FB_HEADROOM bytes: slide it behind the prefix */
			memmove(out->data + FERRY__GCS_RECORD_PREFIX, out->data + FERRY_FB_HEADROOM,
				b.size);
			memset(out->data, 0, FERRY__GCS_RECORD_PREFIX);
			out->size = FERRY__GCS_RECORD_PREFIX + b.size;
		}
	}
	if (ret < 0 && !w->err)
		w->err = ret;
}

void ferry__gcs_op_encode(const struct ferry__gcs_op *op, struct ferry__gcs_writer *w)
{
	struct ferry__wire_gcs_record rec = {.version = FERRY__GCS_RECORD_VERSION,
					     .type = (uint8_t)op->type};
	struct ferry__wire_gcs_kv_op kv = {0};
	struct ferry__wire_gcs_log_op log = {0};
	struct node_enc node = {0};
	union small_enc small;

	if (!known_type(op->type)) {
		w->err = w->err ? w->err : -EINVAL;
		return;
	}
	switch (op->type) {
	case FERRY__GCS_OP_NODE_HEARTBEAT:
	case FERRY__GCS_OP_NODE_LOAD:
		ferry__gcs_op_encode_beat_fb(op, &rec, w);
		return;
	case FERRY__GCS_OP_LOG:
		memcpy(log.job.bytes, op->log.job.bytes, sizeof(log.job.bytes));
		log.data = op->log.data.data;
		log.data_count = op->log.data.size;
		rec.log = &log;
		break;
	case FERRY__GCS_OP_NODE_REGISTER:
	case FERRY__GCS_OP_RESTORE_NODE:
		if (fill_node(&op->node, &node) < 0 && !w->err)
			w->err = -ENOMEM;
		rec.node = &node.node;
		break;
	case FERRY__GCS_OP_KV_PUT:
	case FERRY__GCS_OP_KV_DELETE:
	case FERRY__GCS_OP_KV_DELETE_PREFIX:
		fill_kv(op, &kv);
		rec.kv = &kv;
		break;
	default:
		if (ferry__gcs_op_is_obj_fb(op->type)) {
			ferry__gcs_op_encode_obj_fb(op, &rec, w);
			return;
		}
		fill_small(op, &small, &rec);
		break;
	}
	if (!w->err)
		ferry__gcs_record_build(&rec, w);
	ferry__free(node.custom);
	ferry__free(node.labels);
}

static struct ferry__gcs_slice slice(const uint8_t *data, uint32_t count)
{
	return (struct ferry__gcs_slice){data, count};
}

static int get_kv(struct ferry__wire_gcs_record_view v, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_kv_op_view kv;

	if (!ferry__wire_gcs_record_has_kv(v))
		return -EPROTO;
	kv = ferry__wire_gcs_record_kv(v);
	op->kv.ns = slice(ferry__wire_gcs_kv_op_ns_data(kv), ferry__wire_gcs_kv_op_ns_count(kv));
	op->kv.key = slice(ferry__wire_gcs_kv_op_key_data(kv), ferry__wire_gcs_kv_op_key_count(kv));
	if (op->type != FERRY__GCS_OP_KV_PUT)
		return 0;
	op->kv.value =
		slice(ferry__wire_gcs_kv_op_value_data(kv), ferry__wire_gcs_kv_op_value_count(kv));
	op->kv.overwrite = ferry__wire_gcs_kv_op_overwrite(kv);
	return 0;
}

static int get_log(struct ferry__wire_gcs_record_view v, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_log_op_view log;
	struct ferry__wire_unique_id job;

	if (!ferry__wire_gcs_record_has_log(v))
		return -EPROTO;
	log = ferry__wire_gcs_record_log(v);
	job = ferry__wire_gcs_log_op_job(log);
	memcpy(op->log.job.bytes, job.bytes, sizeof(op->log.job.bytes));
	op->log.data = slice(ferry__wire_gcs_log_op_data_data(log),
			     ferry__wire_gcs_log_op_data_count(log));
	return op->log.data.size > FERRY__GCS_TEXT_MAX ? -EPROTO : 0;
}

void *ferry__gcs_op_array(struct ferry__gcs_op *op, size_t count, size_t elem)
{
	struct ferry__gcs_op_block *b = ferry__malloc(sizeof(*b) + count * elem);

	if (!b)
		return NULL;
	memset(b->data, 0, count * elem);
	b->next = op->owned;
	op->owned = b;
	return b->data;
}

/* A NUL inside is refused because C text would end there. */
int ferry__gcs_fb_text_get(const char *s, uint32_t len, size_t max, const char **out)
{
	*out = NULL;
	if (!s || !len)
		return 0;
	if (len > max || strlen(s) != len)
		return -EPROTO;
	*out = s;
	return 0;
}

/* Text of at most FERRY__GCS_TEXT_MAX bytes. */
static int text(const char *s, uint32_t len, const char **out)
{
	return ferry__gcs_fb_text_get(s, len, FERRY__GCS_TEXT_MAX, out);
}

int ferry__gcs_fb_get_resources(struct ferry__wire_gcs_resources_view v, struct ferry__gcs_op *op,
				struct ferry__gcs_resources *r)
{
	struct ferry_gcs_resource *c;
	int ret = 0;

	r->cpu = ferry__wire_gcs_resources_cpu(v);
	r->gpu = ferry__wire_gcs_resources_gpu(v);
	r->memory_bytes = ferry__wire_gcs_resources_memory_bytes(v);
	r->ncustom = ferry__wire_gcs_resources_custom_count(v);
	if (!r->ncustom)
		return 0;
	if (r->ncustom > FERRY__GCS_MAX_CUSTOM)
		return -EPROTO;
	c = ferry__gcs_op_array(op, r->ncustom, sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->ncustom && ret == 0; i++) {
		struct ferry__wire_gcs_resource_amount_view a =
			ferry__wire_gcs_resources_custom_at(v, i);

		ret = text(ferry__wire_gcs_resource_amount_name(a),
			   ferry__wire_gcs_resource_amount_name_len(a), &c[i].name);
		c[i].amount = ferry__wire_gcs_resource_amount_amount(a);
	}
	r->custom = c;
	return ret;
}

static int get_labels(struct ferry__wire_gcs_node_view v, struct ferry__gcs_op *op)
{
	struct ferry__gcs_node *n = &op->node;
	struct ferry__gcs_label *labels;
	int ret = 0;

	n->nlabels = ferry__wire_gcs_node_labels_count(v);
	if (!n->nlabels)
		return 0;
	if (n->nlabels > FERRY__GCS_MAX_LABELS)
		return -EPROTO;
	labels = ferry__gcs_op_array(op, n->nlabels, sizeof(*labels));
	if (!labels)
		return -ENOMEM;
	for (uint32_t i = 0; i < n->nlabels && ret == 0; i++) {
		struct ferry__wire_gcs_label_view l = ferry__wire_gcs_node_labels_at(v, i);

		ret = text(ferry__wire_gcs_label_key(l), ferry__wire_gcs_label_key_len(l),
			   &labels[i].key);
		if (ret == 0)
			ret = text(ferry__wire_gcs_label_value(l),
				   ferry__wire_gcs_label_value_len(l), &labels[i].value);
	}
	n->labels = labels;
	return ret;
}

static int get_node(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__gcs_node *n = &op->node;
	struct ferry__wire_gcs_node_view v;
	struct ferry__wire_unique_id id;
	int ret;

	if (!ferry__wire_gcs_record_has_node(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_node(rv);
	id = ferry__wire_gcs_node_id(v);
	memcpy(n->id.bytes, id.bytes, sizeof(n->id.bytes));
	ret = text(ferry__wire_gcs_node_address(v), ferry__wire_gcs_node_address_len(v),
		   &n->address);
	if (ret == 0 && ferry__wire_gcs_node_has_total(v))
		ret = ferry__gcs_fb_get_resources(ferry__wire_gcs_node_total(v), op, &n->total);
	if (ret == 0)
		ret = get_labels(v, op);
	n->store_capacity_bytes = ferry__wire_gcs_node_store_capacity_bytes(v);
	n->transports = ferry__wire_gcs_node_transports(v);
	n->state = (enum ferry_gcs_node_state)ferry__wire_gcs_node_state(v);
	n->start_ms = ferry__wire_gcs_node_start_ms(v);
	n->end_ms = ferry__wire_gcs_node_end_ms(v);
	n->last_heartbeat_ms = ferry__wire_gcs_node_last_heartbeat_ms(v);
	n->avail_cpu = ferry__wire_gcs_node_avail_cpu(v);
	n->avail_gpu = ferry__wire_gcs_node_avail_gpu(v);
	n->avail_memory_bytes = ferry__wire_gcs_node_avail_memory_bytes(v);
	n->queue_length = ferry__wire_gcs_node_queue_length(v);
	return ret;
}

static int get_job(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_job *j)
{
	struct ferry__wire_gcs_job_view v;
	int ret;

	if (!ferry__wire_gcs_record_has_job(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_job(rv);
	FROM_WIRE_ID(j->id, ferry__wire_gcs_job_id(v));
	j->state = (enum ferry_gcs_job_state)ferry__wire_gcs_job_state(v);
	FROM_WIRE_ID(j->driver_node, ferry__wire_gcs_job_driver_node(v));
	j->driver_pid = ferry__wire_gcs_job_driver_pid(v);
	j->start_ms = ferry__wire_gcs_job_start_ms(v);
	j->end_ms = ferry__wire_gcs_job_end_ms(v);
	ret = text(ferry__wire_gcs_job_driver_address(v), ferry__wire_gcs_job_driver_address_len(v),
		   &j->driver_address);
	return ret < 0 ? ret
		       : text(ferry__wire_gcs_job_entrypoint(v),
			      ferry__wire_gcs_job_entrypoint_len(v), &j->entrypoint);
}

static int get_worker(struct ferry__wire_gcs_record_view rv, struct ferry_gcs_worker_info *k)
{
	struct ferry__wire_gcs_worker_view v;
	int ret;

	if (!ferry__wire_gcs_record_has_worker(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_worker(rv);
	FROM_WIRE_ID(k->id, ferry__wire_gcs_worker_id(v));
	FROM_WIRE_ID(k->node, ferry__wire_gcs_worker_node(v));
	FROM_WIRE_ID(k->job, ferry__wire_gcs_worker_job(v));
	k->pid = ferry__wire_gcs_worker_pid(v);
	k->state = (enum ferry_gcs_worker_state)ferry__wire_gcs_worker_state(v);
	k->exit_type = (enum ferry_gcs_exit)ferry__wire_gcs_worker_exit_type(v);
	k->start_ms = ferry__wire_gcs_worker_start_ms(v);
	k->end_ms = ferry__wire_gcs_worker_end_ms(v);
	ret = text(ferry__wire_gcs_worker_address(v), ferry__wire_gcs_worker_address_len(v),
		   &k->address);
	return ret < 0 ? ret
		       : text(ferry__wire_gcs_worker_exit_message(v),
			      ferry__wire_gcs_worker_exit_message_len(v), &k->exit_message);
}

static int get_worker_dead(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_worker_dead_view v;

	if (!ferry__wire_gcs_record_has_worker_dead(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_worker_dead(rv);
	FROM_WIRE_ID(op->worker_exit.id, ferry__wire_gcs_worker_dead_id(v));
	op->worker_exit.time_ms = ferry__wire_gcs_worker_dead_time_ms(v);
	op->worker_exit.exit_type = (enum ferry_gcs_exit)ferry__wire_gcs_worker_dead_exit_type(v);
	return text(ferry__wire_gcs_worker_dead_message(v),
		    ferry__wire_gcs_worker_dead_message_len(v), &op->worker_exit.message);
}

static int get_actor(struct ferry__wire_gcs_record_view rv, struct ferry_gcs_actor_info *a)
{
	struct ferry__wire_gcs_actor_view v;
	int ret;

	if (!ferry__wire_gcs_record_has_actor(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_actor(rv);
	FROM_WIRE_ID(a->id, ferry__wire_gcs_actor_id(v));
	FROM_WIRE_ID(a->job, ferry__wire_gcs_actor_job(v));
	FROM_WIRE_ID(a->owner, ferry__wire_gcs_actor_owner(v));
	a->state = (enum ferry_gcs_actor_state)ferry__wire_gcs_actor_state(v);
	FROM_WIRE_ID(a->node, ferry__wire_gcs_actor_node(v));
	FROM_WIRE_ID(a->worker, ferry__wire_gcs_actor_worker(v));
	a->num_restarts = ferry__wire_gcs_actor_num_restarts(v);
	a->max_restarts = ferry__wire_gcs_actor_max_restarts(v);
	a->death_cause = (enum ferry_gcs_exit)ferry__wire_gcs_actor_death_cause(v);
	ret = text(ferry__wire_gcs_actor_name(v), ferry__wire_gcs_actor_name_len(v), &a->name);
	if (ret == 0)
		ret = text(ferry__wire_gcs_actor_class_name(v),
			   ferry__wire_gcs_actor_class_name_len(v), &a->class_name);
	if (ret == 0)
		ret = text(ferry__wire_gcs_actor_death_message(v),
			   ferry__wire_gcs_actor_death_message_len(v), &a->death_message);
	return ret;
}

static int get_actor_update(struct ferry__wire_gcs_record_view rv,
			    struct ferry__gcs_actor_update *u)
{
	struct ferry__wire_gcs_actor_update_view v;

	if (!ferry__wire_gcs_record_has_actor_update(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_actor_update(rv);
	FROM_WIRE_ID(u->id, ferry__wire_gcs_actor_update_id(v));
	u->state = (enum ferry_gcs_actor_state)ferry__wire_gcs_actor_update_state(v);
	FROM_WIRE_ID(u->node, ferry__wire_gcs_actor_update_node(v));
	FROM_WIRE_ID(u->worker, ferry__wire_gcs_actor_update_worker(v));
	u->death_cause = (enum ferry_gcs_exit)ferry__wire_gcs_actor_update_death_cause(v);
	return text(ferry__wire_gcs_actor_update_death_message(v),
		    ferry__wire_gcs_actor_update_death_message_len(v), &u->death_message);
}

static int get_task_event(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_task_event *e)
{
	struct ferry__wire_gcs_task_event_view v;

	if (!ferry__wire_gcs_record_has_task_event(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_task_event(rv);
	FROM_WIRE_ID(e->task, ferry__wire_gcs_task_event_task(v));
	FROM_WIRE_ID(e->job, ferry__wire_gcs_task_event_job(v));
	e->attempt = ferry__wire_gcs_task_event_attempt(v);
	e->state = (enum ferry_gcs_task_state)ferry__wire_gcs_task_event_state(v);
	FROM_WIRE_ID(e->node, ferry__wire_gcs_task_event_node(v));
	FROM_WIRE_ID(e->worker, ferry__wire_gcs_task_event_worker(v));
	e->time_ms = ferry__wire_gcs_task_event_time_ms(v);
	e->name[0] = '\0';
	if (ferry__wire_gcs_task_event_name(v)) {
		uint32_t len = ferry__wire_gcs_task_event_name_len(v);
		const char *name = ferry__wire_gcs_task_event_name(v);

		if (len > FERRY__GCS_TASK_NAME_MAX || memchr(name, '\0', len))
			return -EINVAL;
		memcpy(e->name, name, len);
		e->name[len] = '\0';
	}
	return 0;
}

static int get_error(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_error *e)
{
	struct ferry__wire_gcs_error_view v;
	int ret;

	if (!ferry__wire_gcs_record_has_error(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_error(rv);
	FROM_WIRE_ID(e->job, ferry__wire_gcs_error_job(v));
	e->time_ms = ferry__wire_gcs_error_time_ms(v);
	ret = text(ferry__wire_gcs_error_type(v), ferry__wire_gcs_error_type_len(v), &e->type);
	return ret < 0 ? ret
		       : text(ferry__wire_gcs_error_message(v),
			      ferry__wire_gcs_error_message_len(v), &e->message);
}

/* The fixed-size tables (see fill_small()). */
static int get_small(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_NODE_STATE: {
		struct ferry__wire_gcs_node_state_view v;

		if (!ferry__wire_gcs_record_has_node_state(rv))
			return -EPROTO;
		v = ferry__wire_gcs_record_node_state(rv);
		FROM_WIRE_ID(op->node_state.id, ferry__wire_gcs_node_state_id(v));
		op->node_state.state =
			(enum ferry_gcs_node_state)ferry__wire_gcs_node_state_state(v);
		op->node_state.time_ms = ferry__wire_gcs_node_state_time_ms(v);
		return 0;
	}
	case FERRY__GCS_OP_JOB_FINISH: {
		struct ferry__wire_gcs_job_finish_view v;

		if (!ferry__wire_gcs_record_has_job_finish(rv))
			return -EPROTO;
		v = ferry__wire_gcs_record_job_finish(rv);
		FROM_WIRE_ID(op->job_finish.id, ferry__wire_gcs_job_finish_id(v));
		op->job_finish.time_ms = ferry__wire_gcs_job_finish_time_ms(v);
		return 0;
	}
	case FERRY__GCS_OP_WORKER_ADD:
	case FERRY__GCS_OP_RESTORE_WORKER:
		return get_worker(rv, &op->worker);
	case FERRY__GCS_OP_WORKER_DEAD:
		return get_worker_dead(rv, op);
	case FERRY__GCS_OP_ACTOR_REGISTER:
	case FERRY__GCS_OP_RESTORE_ACTOR:
		return get_actor(rv, &op->actor);
	case FERRY__GCS_OP_ACTOR_UPDATE:
		return get_actor_update(rv, &op->actor_update);
	case FERRY__GCS_OP_TASK_EVENT:
		return get_task_event(rv, &op->task_event);
	case FERRY__GCS_OP_ERROR:
		return get_error(rv, &op->error);
	default: /* JOB_ADD, RESTORE_JOB */
		return get_job(rv, &op->job);
	}
}

/* A record of the first, hand-written format starts with its nonzero op type: refused too. */
int ferry__gcs_op_decode(const void *data, size_t size, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_record_view v;
	unsigned version;
	int ret;

	memset(op, 0, sizeof(*op));
	if (size >= FERRY__GCS_RECORD_PREFIX && memcmp(data, zero_prefix, sizeof(zero_prefix))) {
		FLOG_WARN("gcs",
			  "ops: not a GcsRecord (%zu bytes, first byte %u): a hand-written "
			  "record of the first release?",
			  size, *(const uint8_t *)data);
		return -EPROTO;
	}
	if (size < FERRY__GCS_RECORD_PREFIX ||
	    ferry__wire_gcs_record_root((const uint8_t *)data + FERRY__GCS_RECORD_PREFIX,
					size - FERRY__GCS_RECORD_PREFIX, &v) < 0) {
		FLOG_WARN("gcs", "ops: malformed record (%zu bytes, not a GcsRecord)", size);
		return -EPROTO;
	}
	version = ferry__wire_gcs_record_version(v);
	if (version != FERRY__GCS_RECORD_VERSION) {
		FLOG_WARN("gcs", "ops: record version %u, this GCS reads version %d", version,
			  FERRY__GCS_RECORD_VERSION);
		return -EPROTO;
	}
	op->type = (enum ferry__gcs_op_type)ferry__wire_gcs_record_type(v);
	if (!known_type(op->type))
		ret = -EPROTO;
	else if (op->type == FERRY__GCS_OP_NODE_HEARTBEAT || op->type == FERRY__GCS_OP_NODE_LOAD)
		ret = ferry__gcs_op_decode_beat_fb(v, op);
	else if (op->type == FERRY__GCS_OP_LOG)
		ret = get_log(v, op);
	else if (op->type == FERRY__GCS_OP_NODE_REGISTER || op->type == FERRY__GCS_OP_RESTORE_NODE)
		ret = get_node(v, op);
	else if (op->type == FERRY__GCS_OP_KV_PUT || op->type == FERRY__GCS_OP_KV_DELETE ||
		 op->type == FERRY__GCS_OP_KV_DELETE_PREFIX)
		ret = get_kv(v, op);
	else if (ferry__gcs_op_is_obj_fb(op->type))
		ret = ferry__gcs_op_decode_obj_fb(v, op);
	else
		ret = get_small(v, op);
	if (ret < 0) {
		if (ret == -EPROTO)
			FLOG_WARN("gcs", "ops: malformed record (type %d, %zu bytes)",
				  (int)op->type, size);
		ferry__gcs_op_release(op);
		memset(op, 0, sizeof(*op));
	}
	return ret;
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
