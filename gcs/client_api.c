/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's public calls: each async form builds its message on the caller's thread
 * and sends it with ferry__gcs_client_send(); its reply is decoded into the user's result on the
 * loop thread. Each blocking form is its async form plus a wait. Also subscriptions, the batch
 * object lookup, the delivery of published batches and the event decoders.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "gcs/client_int.h"
#include "gcs/records.h"

#define COMP "gcs-client"

/* A copy of what @b holds (the request's payload), or NULL. */
static void *take_payload(struct ferry__fb_builder *b, int ret, size_t *len)
{
	void *p = NULL;

	if (ret == 0 && (p = ferry__malloc(ferry__fb_builder_size(b)))) {
		*len = ferry__fb_builder_size(b);
		memcpy(p, ferry__fb_builder_data(b), *len);
	}
	ferry__fb_builder_fini(b);
	return p;
}

/* The GcsRequest carrying mutation @op, as a call to @shard (payload malloc'd). 0 or -errno. */
static int build_apply(struct ferry_gcs_client *c, unsigned shard, const struct ferry__gcs_op *op,
		       struct ferry__gcs_call *call)
{
	struct ferry__gcs_buf rec = {0};
	struct ferry__gcs_writer w = {&rec, 0};
	struct ferry__wire_gcs_request m = {0};
	struct ferry__fb_builder b = {0};
	int ret;

	ferry__gcs_op_encode(op, &w);
	if (w.err) {
		ferry__gcs_buf_fini(&rec);
		return w.err;
	}
	m.seq = ferry__gcs_client_next_seq(c);
	m.op = rec.data;
	m.op_count = rec.size;
	m.client = c->id;
	ret = ferry__wire_gcs_request_build(&b, &m);
	ferry__gcs_buf_fini(&rec);
	call->shard = shard;
	call->type = FERRY__WIRE_MSG_GCS_REQUEST;
	call->seq = m.seq;
	call->payload = take_payload(&b, ret, &call->len);
	return call->payload ? 0 : ret < 0 ? ret : -ENOMEM;
}

int ferry__gcs_client_apply(struct ferry_gcs_client *c, unsigned shard,
			    const struct ferry__gcs_op *op)
{
	struct ferry__gcs_call call = {0};
	struct ferry__gcs_result res;
	int ret;

	if (!c || shard >= c->nshards)
		return -EINVAL;
	ret = build_apply(c, shard, op, &call);
	if (ret < 0)
		return ret;
	ret = ferry__gcs_client_call(c, shard, call.type, call.payload, call.len, call.seq, NULL,
				     &res);
	ferry__free(res.value);
	return ret;
}

/* ---- async calls ---- */

static void acall_reply(void *arg, const struct ferry__gcs_reply *r)
{
	struct ferry__gcs_acall *a = arg;
	void *result = NULL;
	int status = r->status;

	if (status >= 0 && a->decode)
		status = a->decode(r, a, &result);
	a->cb(a->arg, status, result);
	ferry__free(a);
}

/* Send @payload (taken) for @tmpl's caller; the callback runs through acall_reply(). */
static int acall_send(struct ferry_gcs_client *c, unsigned shard, uint16_t type, void *payload,
		      size_t len, uint64_t seq, struct ferry__gcs_csub *sub,
		      const struct ferry__gcs_acall *tmpl)
{
	struct ferry__gcs_acall *a = ferry__malloc(sizeof(*a));

	if (!a) {
		ferry__free(payload);
		ferry__free(sub);
		return -ENOMEM;
	}
	*a = *tmpl;
	int ret = ferry__gcs_client_send(c, shard, type, payload, len, seq, sub, acall_reply, a);

	if (ret < 0)
		ferry__free(a);
	return ret;
}

int ferry__gcs_async_built(struct ferry_gcs_client *c, unsigned shard, uint16_t type,
			   struct ferry__fb_builder *b, int built, uint64_t seq,
			   const struct ferry__gcs_acall *a)
{
	size_t len = 0;
	void *p = take_payload(b, built, &len);

	if (!p)
		return built < 0 ? built : -ENOMEM;
	return acall_send(c, shard, type, p, len, seq, NULL, a);
}

int ferry__gcs_apply_async(struct ferry_gcs_client *c, unsigned shard,
			   const struct ferry__gcs_op *op, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg};
	struct ferry__gcs_call call = {0};
	int ret;

	if (!c || !cb || shard >= c->nshards)
		return -EINVAL;
	ret = build_apply(c, shard, op, &call);
	if (ret < 0)
		return ret;
	return acall_send(c, shard, call.type, call.payload, call.len, call.seq, NULL, &a);
}

int ferry__gcs_client_apply_many(struct ferry_gcs_client *c, const unsigned *shards,
				 const struct ferry__gcs_op *ops, size_t n, int *statuses)
{
	struct ferry__gcs_call *calls;

	if (!c || (n && (!shards || !ops || !statuses)))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (shards[i] >= c->nshards)
			return -EINVAL;
	if (!n)
		return 0;
	calls = ferry__calloc(n, sizeof(*calls));
	if (!calls) { /* short of memory: one at a time */
		for (size_t i = 0; i < n; i++)
			statuses[i] = ferry__gcs_client_apply(c, shards[i], &ops[i]);
		return 0;
	}
	/* Ops that cannot be encoded keep their error (no payload: not sent); the rest go
	 * together, in order. */
	for (size_t i = 0; i < n; i++)
		calls[i].status = build_apply(c, shards[i], &ops[i], &calls[i]);
	ferry__gcs_client_call_many(c, calls, n);
	for (size_t i = 0; i < n; i++)
		statuses[i] = calls[i].status;
	ferry__free(calls);
	return 0;
}

/* ---- KV ---- */

int ferry_gcs_kv_put_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			   const void *key, size_t key_size, const void *value, size_t value_size,
			   bool overwrite, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_PUT};

	op.kv.ns = (struct ferry__gcs_slice){ns, ns_size};
	op.kv.key = (struct ferry__gcs_slice){key, key_size};
	op.kv.value = (struct ferry__gcs_slice){value, value_size};
	op.kv.overwrite = overwrite;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_kv_put(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		     size_t key_size, const void *value, size_t value_size, bool overwrite)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_kv_put_async(c, ns, ns_size, key, key_size, value,
						      value_size, overwrite, ferry__gcs_sync_done,
						      w));
}

int ferry_gcs_kv_delete_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			      const void *key, size_t key_size, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_DELETE};

	op.kv.ns = (struct ferry__gcs_slice){ns, ns_size};
	op.kv.key = (struct ferry__gcs_slice){key, key_size};
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_kv_delete(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
			size_t key_size)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_kv_delete_async(c, ns, ns_size, key, key_size, ferry__gcs_sync_done, w));
}

static int kv_read(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		   size_t key_size, uint8_t kind, const struct ferry__gcs_acall *a)
{
	struct ferry__wire_gcs_kv_get m = {0};
	struct ferry__fb_builder b = {0};

	if (!c || !key || !key_size || !a->cb)
		return -EINVAL;
	m.seq = ferry__gcs_client_next_seq(c);
	m.ns = ns;
	m.ns_count = ns ? ns_size : 0;
	m.key = key;
	m.key_count = key_size;
	m.op = kind;
	return ferry__gcs_async_built(c, 0, FERRY__WIRE_MSG_GCS_KV_GET, &b,
				      ferry__wire_gcs_kv_get_build(&b, &m), m.seq, a);
}

/* The value as its own allocation (an empty one still a valid pointer); the status its size. */
static int decode_value(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
			void **result)
{
	void *v = ferry__malloc(r->size ? r->size : 1);

	(void)a;
	if (!v)
		return -ENOMEM;
	if (r->size > INT32_MAX) {
		ferry__free(v);
		return -E2BIG;
	}
	memcpy(v, r->value, r->size);
	*result = v;
	return (int)r->size;
}

int ferry_gcs_kv_get_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			   const void *key, size_t key_size, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg, .decode = decode_value};

	return kv_read(c, ns, ns_size, key, key_size, 0, &a);
}

int ferry_gcs_kv_get(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		     size_t key_size, void **value, size_t *size)
{
	struct ferry__gcs_sync *w = value && size ? ferry__gcs_sync_new(c) : NULL;
	void *result;
	int ret;

	if (!value || !size)
		return -EINVAL;
	ret = FERRY__GCS_WAIT(
		c, w, &result,
		ferry_gcs_kv_get_async(c, ns, ns_size, key, key_size, ferry__gcs_sync_done, w));
	if (ret < 0)
		return ret;
	*value = result;
	*size = (size_t)ret;
	return 0;
}

int ferry_gcs_kv_exists_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			      const void *key, size_t key_size, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg};

	return kv_read(c, ns, ns_size, key, key_size, 1, &a);
}

int ferry_gcs_kv_exists(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
			size_t key_size)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_kv_exists_async(c, ns, ns_size, key, key_size, ferry__gcs_sync_done, w));
}

/* ---- nodes ---- */

int ferry_gcs_node_register_async(struct ferry_gcs_client *c,
				  const struct ferry_gcs_node_info *node, ferry_gcs_done_fn cb,
				  void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_REGISTER};

	if (!node)
		return -EINVAL;
	op.node.id = node->id;
	op.node.address = node->address;
	op.node.total.cpu = node->cpu;
	op.node.total.gpu = node->gpu;
	op.node.total.memory_bytes = node->memory_bytes;
	op.node.store_capacity_bytes = node->store_capacity_bytes;
	op.node.transports = FERRY_GCS_TRANSPORT_TCP;
	op.node.state = FERRY_GCS_NODE_ALIVE;
	op.node.start_ms = ferry__wall_ms();
	op.node.last_heartbeat_ms = op.node.start_ms;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_node_register(struct ferry_gcs_client *c, const struct ferry_gcs_node_info *node)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_node_register_async(c, node, ferry__gcs_sync_done, w));
}

int ferry_gcs_node_heartbeat_async(struct ferry_gcs_client *c, const struct ferry_node_id *id,
				   double avail_cpu, double avail_gpu, double avail_memory_bytes,
				   ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_HEARTBEAT};

	if (!id)
		return -EINVAL;
	op.heartbeat.id = *id;
	op.heartbeat.time_ms = ferry__wall_ms();
	op.heartbeat.avail_cpu = avail_cpu;
	op.heartbeat.avail_gpu = avail_gpu;
	op.heartbeat.avail_memory_bytes = avail_memory_bytes;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

/* The acall decoder of a beat: the GcsBeatInfo value, verified, copied out. A reply without
 * one (an older server) gives no result, which the contract allows. */
static int decode_beat(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
		       void **result)
{
	struct ferry__wire_gcs_beat_info_view v;
	struct ferry_gcs_beat_info *info;

	(void)a;
	if (!r->size)
		return r->status;
	if (ferry__wire_gcs_beat_info_root(r->value, r->size, &v) < 0)
		return -EPROTO;
	info = ferry__malloc(sizeof(*info));
	if (!info)
		return -ENOMEM;
	info->alive_nodes = ferry__wire_gcs_beat_info_alive_nodes(v);
	info->membership_version = ferry__wire_gcs_beat_info_membership_version(v);
	*result = info;
	return r->status;
}

int ferry_gcs_node_beat_async(struct ferry_gcs_client *c, const struct ferry_node_id *id,
			      ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg, .decode = decode_beat};
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_HEARTBEAT};
	struct ferry__gcs_call call = {0};
	int ret;

	if (!c || !id || !cb)
		return -EINVAL;
	op.heartbeat.id = *id;
	op.heartbeat.time_ms = ferry__wall_ms();
	ret = build_apply(c, 0, &op, &call);
	if (ret < 0)
		return ret;
	return acall_send(c, 0, call.type, call.payload, call.len, call.seq, NULL, &a);
}

int ferry_gcs_node_heartbeat(struct ferry_gcs_client *c, const struct ferry_node_id *id,
			     double avail_cpu, double avail_gpu, double avail_memory_bytes)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_node_heartbeat_async(c, id, avail_cpu, avail_gpu,
							      avail_memory_bytes,
							      ferry__gcs_sync_done, w));
}

int ferry_gcs_node_report_load_async(struct ferry_gcs_client *c,
				     const struct ferry_gcs_node_load *load, ferry_gcs_done_fn cb,
				     void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_LOAD};

	if (!c || !load || ferry__gcs_load_check(load) < 0)
		return -EINVAL;
	op.load = *load;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_node_report_load(struct ferry_gcs_client *c, const struct ferry_gcs_node_load *load)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_node_report_load_async(c, load, ferry__gcs_sync_done, w));
}

int ferry_gcs_task_event_add_async(struct ferry_gcs_client *c, const struct ferry_gcs_task_event *e,
				   ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_TASK_EVENT};
	size_t len = e ? strnlen(e->name, sizeof(e->name)) : 0;

	if (!c || !e || len > FERRY__GCS_TASK_NAME_MAX || e->state < FERRY_GCS_TASK_SUBMITTED ||
	    e->state > FERRY_GCS_TASK_FAILED)
		return -EINVAL;
	op.task_event.task = e->task;
	op.task_event.job = e->job;
	op.task_event.attempt = e->attempt;
	op.task_event.state = e->state;
	op.task_event.node = e->node;
	op.task_event.worker = e->worker;
	op.task_event.time_ms = e->time_ms;
	memcpy(op.task_event.name, e->name, len);
	op.task_event.name[len] = '\0';
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

/* ---- objects ---- */

static unsigned object_shard(const struct ferry_gcs_client *c, const struct ferry_object_id *id)
{
	return ferry_gcs_object_shard(id, c->nshards);
}

int ferry_gcs_object_add_async(struct ferry_gcs_client *c, const struct ferry_object_id *id,
			       const struct ferry_worker_id *owner_worker,
			       const struct ferry_node_id *owner_node, uint64_t size_bytes,
			       ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_OBJ_ADD};

	if (!c || !id || !owner_worker || !owner_node)
		return -EINVAL;
	op.obj.id = *id;
	op.obj.owner_worker = *owner_worker;
	op.obj.owner_node = *owner_node;
	op.obj.size_bytes = size_bytes;
	return ferry__gcs_apply_async(c, object_shard(c, id), &op, cb, arg);
}

int ferry_gcs_object_add(struct ferry_gcs_client *c, const struct ferry_object_id *id,
			 const struct ferry_worker_id *owner_worker,
			 const struct ferry_node_id *owner_node, uint64_t size_bytes)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_object_add_async(c, id, owner_worker, owner_node,
							  size_bytes, ferry__gcs_sync_done, w));
}

static int object_location(struct ferry_gcs_client *c, enum ferry__gcs_op_type type,
			   const struct ferry_object_id *id, const struct ferry_node_id *node,
			   uint64_t size_bytes, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = type};

	if (!c || !id || !node)
		return -EINVAL;
	op.obj_location.id = *id;
	op.obj_location.node = *node;
	op.obj_location.size_bytes = size_bytes;
	return ferry__gcs_apply_async(c, object_shard(c, id), &op, cb, arg);
}

int ferry_gcs_object_add_location_async(struct ferry_gcs_client *c,
					const struct ferry_object_id *id,
					const struct ferry_node_id *node, uint64_t size_bytes,
					ferry_gcs_done_fn cb, void *arg)
{
	return object_location(c, FERRY__GCS_OP_OBJ_ADD_LOCATION, id, node, size_bytes, cb, arg);
}

int ferry_gcs_object_remove_location_async(struct ferry_gcs_client *c,
					   const struct ferry_object_id *id,
					   const struct ferry_node_id *node, ferry_gcs_done_fn cb,
					   void *arg)
{
	return object_location(c, FERRY__GCS_OP_OBJ_REMOVE_LOCATION, id, node, 0, cb, arg);
}

int ferry_gcs_object_add_location(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				  const struct ferry_node_id *node, uint64_t size_bytes)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_object_add_location_async(c, id, node, size_bytes,
								   ferry__gcs_sync_done, w));
}

int ferry_gcs_object_remove_location(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				     const struct ferry_node_id *node)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_object_remove_location_async(c, id, node, ferry__gcs_sync_done, w));
}

int ferry__gcs_decode_object(const void *data, size_t size, struct ferry_gcs_object_info *out)
{
	struct ferry__gcs_op op;
	int ret = ferry__gcs_op_decode(data, size, &op);
	uint32_t n;

	if (ret < 0)
		return ret;
	if (op.type != FERRY__GCS_OP_RESTORE_OBJ) {
		ferry__gcs_op_release(&op);
		return -EPROTO;
	}
	memset(out, 0, sizeof(*out));
	out->id = op.obj.id;
	out->owner_worker = op.obj.owner_worker;
	out->owner_node = op.obj.owner_node;
	out->size_bytes = op.obj.size_bytes;
	out->metadata_bytes = op.obj.metadata_bytes;
	out->state = op.obj.state;
	n = op.obj.nlocations;
	if (n) {
		/* The places follow the IDs, whose size keeps them aligned. */
		_Static_assert(
			sizeof(struct ferry_node_id) % _Alignof(struct ferry_gcs_object_place) == 0,
			"places after the IDs are aligned");
		out->locations = ferry__calloc(n, sizeof(*out->locations) + sizeof(*out->places));
		if (!out->locations) {
			ferry__gcs_op_release(&op);
			return -ENOMEM;
		}
		out->places = (struct ferry_gcs_object_place *)(out->locations + n);
		memcpy(out->locations, op.obj.locations, n * sizeof(*out->locations));
		if (op.obj.places) /* else unknown: the zeros of calloc */
			memcpy(out->places, op.obj.places, n * sizeof(*out->places));
		out->nlocations = n;
	}
	ferry__gcs_op_release(&op);
	return 0;
}

/* The entry as one allocation: the info, then its locations and places. */
static int decode_object_one(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
			     void **result)
{
	struct ferry_gcs_object_info info, *out;
	size_t each = sizeof(*info.locations) + sizeof(*info.places);
	int ret = ferry__gcs_decode_object(r->value, r->size, &info);

	(void)a;
	if (ret < 0)
		return ret;
	out = ferry__malloc(sizeof(*out) + info.nlocations * each);
	if (!out) {
		ferry__free(info.locations);
		return -ENOMEM;
	}
	*out = info;
	if (info.nlocations) {
		out->locations = (struct ferry_node_id *)(out + 1);
		out->places = (struct ferry_gcs_object_place *)(out->locations + info.nlocations);
		memcpy(out->locations, info.locations, info.nlocations * each);
	}
	ferry__free(info.locations);
	*result = out;
	return 0;
}

int ferry_gcs_object_lookup_async(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				  ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg, .decode = decode_object_one};
	struct ferry__wire_gcs_object_lookup m = {0};
	struct ferry__fb_builder b = {0};

	if (!c || !id || !cb)
		return -EINVAL;
	m.seq = ferry__gcs_client_next_seq(c);
	m.object_id = *id;
	return ferry__gcs_async_built(c, object_shard(c, id), FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP, &b,
				      ferry__wire_gcs_object_lookup_build(&b, &m), m.seq, &a);
}

int ferry_gcs_object_lookup(struct ferry_gcs_client *c, const struct ferry_object_id *id,
			    struct ferry_gcs_object_info *out)
{
	struct ferry__gcs_sync *w = out ? ferry__gcs_sync_new(c) : NULL;
	struct ferry_gcs_object_info *info;
	size_t each;
	int ret;

	if (!out)
		return -EINVAL;
	ret = FERRY__GCS_WAIT(c, w, (void **)&info,
			      ferry_gcs_object_lookup_async(c, id, ferry__gcs_sync_done, w));
	if (ret < 0)
		return ret;
	/* The blocking form's locations are their own allocation (see the header). */
	*out = *info;
	each = sizeof(*info->locations) + sizeof(*info->places);
	if (info->nlocations) {
		out->locations = ferry__malloc(info->nlocations * each);
		if (!out->locations) {
			ferry__free(info);
			return -ENOMEM;
		}
		out->places = (struct ferry_gcs_object_place *)(out->locations + info->nlocations);
		memcpy(out->locations, info->locations, info->nlocations * each);
	}
	ferry__free(info);
	return 0;
}

/* ---- event decoders ---- */

/* Decode @ev's record, which must be a @type record on @channel, into @op. */
static int event_op(const struct ferry_gcs_event *ev, enum ferry_gcs_channel channel,
		    enum ferry__gcs_op_type type, struct ferry__gcs_op *op)
{
	int ret;

	if (!ev || ev->channel != channel || !ev->size)
		return -EINVAL;
	ret = ferry__gcs_op_decode(ev->data, ev->size, op);
	if (ret < 0)
		return ret;
	if (op->type != type) {
		ferry__gcs_op_release(op);
		return -EPROTO;
	}
	return 0;
}

int ferry_gcs_event_node(const struct ferry_gcs_event *ev, struct ferry_gcs_node_info *out)
{
	struct ferry__gcs_op op;
	int ret;

	if (!out)
		return -EINVAL;
	ret = event_op(ev,
		       ev && ev->channel == FERRY_GCS_CH_NODE_DEATHS ? FERRY_GCS_CH_NODE_DEATHS
								     : FERRY_GCS_CH_NODES,
		       FERRY__GCS_OP_RESTORE_NODE, &op);
	if (ret < 0)
		return ret;
	memset(out, 0, sizeof(*out));
	out->id = op.node.id;
	out->address = op.node.address; /* borrowed from ev->data */
	out->cpu = op.node.total.cpu;
	out->gpu = op.node.total.gpu;
	out->memory_bytes = op.node.total.memory_bytes;
	out->store_capacity_bytes = op.node.store_capacity_bytes;
	out->state = op.node.state;
	ferry__gcs_op_release(&op);
	return 0;
}

int ferry_gcs_event_object(const struct ferry_gcs_event *ev, struct ferry_gcs_object_info *out)
{
	if (!ev || !out || ev->channel != FERRY_GCS_CH_OBJECT_LOCATIONS || !ev->size)
		return -EINVAL;
	return ferry__gcs_decode_object(ev->data, ev->size, out);
}

/* ---- errors and logs ---- */

int ferry_gcs_error_report_async(struct ferry_gcs_client *c, const struct ferry_job_id *job,
				 const char *type, const char *message, ferry_gcs_done_fn cb,
				 void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_ERROR};

	if (!c || !job || !type || !message || strlen(type) > FERRY__GCS_TEXT_MAX ||
	    strlen(message) > FERRY__GCS_TEXT_MAX)
		return -EINVAL;
	op.error.job = *job;
	op.error.time_ms = ferry__wall_ms();
	op.error.type = type;
	op.error.message = message;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_error_report(struct ferry_gcs_client *c, const struct ferry_job_id *job,
			   const char *type, const char *message)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_error_report_async(c, job, type, message, ferry__gcs_sync_done, w));
}

int ferry_gcs_log_publish_async(struct ferry_gcs_client *c, const struct ferry_job_id *job,
				const void *data, size_t size, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_LOG};

	if (!c || !job || (!data && size))
		return -EINVAL;
	if (size > FERRY__GCS_TEXT_MAX)
		return -E2BIG;
	op.log.job = *job;
	op.log.data.data = data;
	op.log.data.size = size;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_log_publish(struct ferry_gcs_client *c, const struct ferry_job_id *job,
			  const void *data, size_t size)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_log_publish_async(c, job, data, size, ferry__gcs_sync_done, w));
}

int ferry_gcs_event_error(const struct ferry_gcs_event *ev, struct ferry_gcs_error_info *out)
{
	struct ferry__gcs_op op;
	int ret;

	if (!out)
		return -EINVAL;
	ret = event_op(ev, FERRY_GCS_CH_ERRORS, FERRY__GCS_OP_ERROR, &op);
	if (ret < 0)
		return ret;
	out->job = op.error.job;
	out->time_ms = op.error.time_ms;
	out->type = op.error.type ? op.error.type : ""; /* text borrows from ev->data */
	out->message = op.error.message ? op.error.message : "";
	ferry__gcs_op_release(&op);
	return 0;
}

int ferry_gcs_event_log(const struct ferry_gcs_event *ev, struct ferry_gcs_log_info *out)
{
	struct ferry__gcs_op op;
	int ret;

	if (!out)
		return -EINVAL;
	ret = event_op(ev, FERRY_GCS_CH_LOGS, FERRY__GCS_OP_LOG, &op);
	if (ret < 0)
		return ret;
	out->job = op.log.job;
	out->data = op.log.data.data;
	out->size = op.log.data.size;
	ferry__gcs_op_release(&op);
	return 0;
}
