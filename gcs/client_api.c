/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's public calls: each builds its message on the caller's thread and waits
 * through ferry__gcs_client_call(); subscriptions and the delivery of published batches; the
 * event decoders.
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

int ferry__gcs_client_call_built(struct ferry_gcs_client *c, unsigned shard, uint16_t type,
				 struct ferry__fb_builder *b, int built, uint64_t seq,
				 struct ferry__gcs_csub *sub, struct ferry__gcs_result *res)
{
	size_t len = 0;
	void *p = take_payload(b, built, &len);

	if (!p) {
		ferry__free(sub);
		memset(res, 0, sizeof(*res));
		return built < 0 ? built : -ENOMEM;
	}
	return ferry__gcs_client_call(c, shard, type, p, len, seq, sub, res);
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

int ferry_gcs_kv_put(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		     size_t key_size, const void *value, size_t value_size, bool overwrite)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_PUT};

	op.kv.ns = (struct ferry__gcs_slice){ns, ns_size};
	op.kv.key = (struct ferry__gcs_slice){key, key_size};
	op.kv.value = (struct ferry__gcs_slice){value, value_size};
	op.kv.overwrite = overwrite;
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_kv_delete(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
			size_t key_size)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_DELETE};

	op.kv.ns = (struct ferry__gcs_slice){ns, ns_size};
	op.kv.key = (struct ferry__gcs_slice){key, key_size};
	return ferry__gcs_client_apply(c, 0, &op);
}

static int kv_read(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		   size_t key_size, uint8_t kind, struct ferry__gcs_result *res)
{
	struct ferry__wire_gcs_kv_get m = {0};
	struct ferry__fb_builder b = {0};

	memset(res, 0, sizeof(*res));
	if (!c || !key || !key_size)
		return -EINVAL;
	m.seq = ferry__gcs_client_next_seq(c);
	m.ns = ns;
	m.ns_count = ns ? ns_size : 0;
	m.key = key;
	m.key_count = key_size;
	m.op = kind;
	return ferry__gcs_client_call_built(c, 0, FERRY__WIRE_MSG_GCS_KV_GET, &b,
					    ferry__wire_gcs_kv_get_build(&b, &m), m.seq, NULL, res);
}

int ferry_gcs_kv_get(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		     size_t key_size, void **value, size_t *size)
{
	struct ferry__gcs_result res;
	int ret = kv_read(c, ns, ns_size, key, key_size, 0, &res);

	if (ret < 0) {
		ferry__free(res.value);
		return ret;
	}
	if (!res.value) /* an empty value: still a valid pointer for the caller */
		res.value = ferry__malloc(1);
	if (!res.value)
		return -ENOMEM;
	*value = res.value;
	*size = res.size;
	return 0;
}

int ferry_gcs_kv_exists(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
			size_t key_size)
{
	struct ferry__gcs_result res;
	int ret = kv_read(c, ns, ns_size, key, key_size, 1, &res);

	ferry__free(res.value);
	return ret;
}

/* ---- nodes ---- */

int ferry_gcs_node_register(struct ferry_gcs_client *c, const struct ferry_gcs_node_info *node)
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
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_node_heartbeat(struct ferry_gcs_client *c, const struct ferry_node_id *id,
			     double avail_cpu, double avail_gpu, double avail_memory_bytes)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_HEARTBEAT};

	if (!id)
		return -EINVAL;
	op.heartbeat.id = *id;
	op.heartbeat.time_ms = ferry__wall_ms();
	op.heartbeat.avail_cpu = avail_cpu;
	op.heartbeat.avail_gpu = avail_gpu;
	op.heartbeat.avail_memory_bytes = avail_memory_bytes;
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_node_report_load(struct ferry_gcs_client *c, const struct ferry_gcs_node_load *load)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_LOAD};

	if (!c || !load || ferry__gcs_load_check(load) < 0)
		return -EINVAL;
	op.load = *load;
	return ferry__gcs_client_apply(c, 0, &op);
}

/* ---- objects ---- */

static unsigned object_shard(const struct ferry_gcs_client *c, const struct ferry_object_id *id)
{
	return ferry_gcs_object_shard(id, c->nshards);
}

int ferry_gcs_object_add(struct ferry_gcs_client *c, const struct ferry_object_id *id,
			 const struct ferry_worker_id *owner_worker,
			 const struct ferry_node_id *owner_node, uint64_t size_bytes)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_OBJ_ADD};

	if (!c || !id || !owner_worker || !owner_node)
		return -EINVAL;
	op.obj.id = *id;
	op.obj.owner_worker = *owner_worker;
	op.obj.owner_node = *owner_node;
	op.obj.size_bytes = size_bytes;
	return ferry__gcs_client_apply(c, object_shard(c, id), &op);
}

static int object_location(struct ferry_gcs_client *c, enum ferry__gcs_op_type type,
			   const struct ferry_object_id *id, const struct ferry_node_id *node,
			   uint64_t size_bytes)
{
	struct ferry__gcs_op op = {.type = type};

	if (!c || !id || !node)
		return -EINVAL;
	op.obj_location.id = *id;
	op.obj_location.node = *node;
	op.obj_location.size_bytes = size_bytes;
	return ferry__gcs_client_apply(c, object_shard(c, id), &op);
}

int ferry_gcs_object_add_location(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				  const struct ferry_node_id *node, uint64_t size_bytes)
{
	return object_location(c, FERRY__GCS_OP_OBJ_ADD_LOCATION, id, node, size_bytes);
}

int ferry_gcs_object_remove_location(struct ferry_gcs_client *c, const struct ferry_object_id *id,
				     const struct ferry_node_id *node)
{
	return object_location(c, FERRY__GCS_OP_OBJ_REMOVE_LOCATION, id, node, 0);
}

/* An object record (RESTORE_OBJ) into @out, locations and places copied into one allocation
 * (callers free locations: see struct ferry_gcs_object_info). */
static int decode_object(const void *data, size_t size, struct ferry_gcs_object_info *out)
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

int ferry_gcs_object_lookup(struct ferry_gcs_client *c, const struct ferry_object_id *id,
			    struct ferry_gcs_object_info *out)
{
	struct ferry__wire_gcs_object_lookup m = {0};
	struct ferry__fb_builder b = {0};
	struct ferry__gcs_result res;
	int ret;

	if (!c || !id || !out)
		return -EINVAL;
	m.seq = ferry__gcs_client_next_seq(c);
	m.object_id = *id;
	ret = ferry__gcs_client_call_built(
		c, object_shard(c, id), FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP, &b,
		ferry__wire_gcs_object_lookup_build(&b, &m), m.seq, NULL, &res);
	if (ret >= 0)
		ret = decode_object(res.value, res.size, out);
	ferry__free(res.value);
	return ret;
}

/* ---- subscriptions ---- */

static int subscribe_shard(struct ferry_gcs_client *c, unsigned shard, struct ferry__gcs_csub *sub)
{
	struct ferry__wire_gcs_subscribe m = {0};
	struct ferry__fb_builder b = {0};
	struct ferry__gcs_result res;
	int ret;

	m.seq = ferry__gcs_client_next_seq(c);
	m.channel = sub->channel;
	m.key = sub->key_size ? sub->key : NULL;
	m.key_count = sub->key_size;
	ret = ferry__gcs_client_call_built(c, shard, FERRY__WIRE_MSG_GCS_SUBSCRIBE, &b,
					   ferry__wire_gcs_subscribe_build(&b, &m), m.seq, sub,
					   &res);
	ferry__free(res.value);
	return ret;
}

int ferry_gcs_subscribe(struct ferry_gcs_client *c, enum ferry_gcs_channel channel, const void *key,
			size_t key_size, ferry_gcs_event_fn fn, void *arg)
{
	bool objects = channel == FERRY_GCS_CH_OBJECT_LOCATIONS;
	int ret = 0;

	if (!c || !fn || (unsigned)channel >= FERRY_GCS_CH_COUNT || key_size > 20 ||
	    (key_size && !key) || (objects && key_size && key_size != 20)) {
		FLOG_ERROR(COMP, "bad subscription (channel %d, %zu-byte key)", channel, key_size);
		return -EINVAL;
	}
	/* One subscription record per shard it lives on: each is resubscribed by its shard. */
	for (unsigned i = 0; i < c->nshards && ret == 0; i++) {
		struct ferry__gcs_csub *sub;

		if (objects && key_size &&
		    ferry_gcs_object_shard((const struct ferry_object_id *)key, c->nshards) != i)
			continue;
		if (!objects && i > 0)
			break;
		sub = ferry__calloc(1, sizeof(*sub));
		if (!sub)
			return -ENOMEM;
		sub->channel = (uint8_t)channel;
		sub->key_size = (uint8_t)key_size;
		if (key_size)
			memcpy(sub->key, key, key_size);
		sub->shard_mask = 1ull << i;
		sub->fn = fn;
		sub->arg = arg;
		ret = subscribe_shard(c, i, sub);
	}
	return ret < 0 ? ret : 0;
}

void ferry__gcs_client_sub_drop(struct ferry_gcs_client *c, struct ferry__gcs_csub *sub)
{
	for (struct ferry__gcs_csub **p = &c->subs; *p; p = &(*p)->next) {
		if (*p == sub) {
			*p = sub->next;
			ferry__free(sub);
			return;
		}
	}
}

void ferry__gcs_client_subs_free(struct ferry_gcs_client *c)
{
	struct ferry__gcs_csub *next;

	for (struct ferry__gcs_csub *s = c->subs; s; s = next) {
		next = s->next;
		ferry__free(s);
	}
	c->subs = NULL;
}

static bool sub_matches(const struct ferry__gcs_csub *sub, unsigned shard,
			const struct ferry_gcs_event *ev)
{
	if (sub->channel != ev->channel || !(sub->shard_mask & (1ull << shard)))
		return false;
	if (!sub->key_size || !ev->key_size)
		return true;
	return sub->key_size == ev->key_size && !memcmp(sub->key, ev->key, ev->key_size);
}

void ferry__gcs_client_deliver(struct shard *s, const void *payload)
{
	struct ferry__wire_gcs_publish_view v = ferry__wire_gcs_publish_root_verified(payload);
	uint32_t n = ferry__wire_gcs_publish_items_count(v);
	uint32_t nwm = ferry__wire_gcs_publish_watermarks_count(v);

	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_gcs_pub_item_view it = ferry__wire_gcs_publish_items_at(v, i);
		struct ferry_gcs_event ev = {0};

		ev.channel = ferry__wire_gcs_pub_item_channel(it);
		ev.kind = ferry__wire_gcs_pub_item_kind(it);
		ev.key = ferry__wire_gcs_pub_item_key_data(it);
		ev.key_size = ferry__wire_gcs_pub_item_key_count(it);
		ev.seq = ferry__wire_gcs_pub_item_seq(it);
		ev.data = ferry__wire_gcs_pub_item_data_data(it);
		ev.size = ferry__wire_gcs_pub_item_data_count(it);
		ev.client = s->client;
		for (struct ferry__gcs_csub *sub = s->client->subs; sub; sub = sub->next)
			if (sub_matches(sub, s->index, &ev))
				sub->fn(sub->arg, &ev);
	}
	s->epoch = ferry__wire_gcs_publish_epoch(v);
	for (uint32_t ch = 0; ch < nwm && ch < FERRY_GCS_CH_COUNT; ch++) {
		uint64_t wm = ferry__wire_gcs_publish_watermarks_at(v, ch);

		if (wm)
			s->watermarks[ch] = wm;
	}
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
	ret = event_op(ev, FERRY_GCS_CH_NODES, FERRY__GCS_OP_RESTORE_NODE, &op);
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
	return decode_object(ev->data, ev->size, out);
}

/* ---- errors and logs ---- */

int ferry_gcs_error_report(struct ferry_gcs_client *c, const struct ferry_job_id *job,
			   const char *type, const char *message)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_ERROR};

	if (!c || !job || !type || !message || strlen(type) > FERRY__GCS_TEXT_MAX ||
	    strlen(message) > FERRY__GCS_TEXT_MAX)
		return -EINVAL;
	op.error.job = *job;
	op.error.time_ms = ferry__wall_ms();
	op.error.type = type;
	op.error.message = message;
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_log_publish(struct ferry_gcs_client *c, const struct ferry_job_id *job,
			  const void *data, size_t size)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_LOG};

	if (!c || !job || (!data && size))
		return -EINVAL;
	if (size > FERRY__GCS_TEXT_MAX)
		return -E2BIG;
	op.log.job = *job;
	op.log.data.data = data;
	op.log.data.size = size;
	return ferry__gcs_client_apply(c, 0, &op);
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
