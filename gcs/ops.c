/* SPDX-License-Identifier: Apache-2.0 */
/* GCS mutation records: the entry points, and the two request-only records still in the
 * hand-written format (NODE_HEARTBEAT, NODE_LOAD); the rest are GcsRecords (ops_fb*.c). */
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

int ferry__gcs_op_decode(const void *data, size_t size, struct ferry__gcs_op *op)
{
	struct ferry__gcs_reader r = {data, size, 0};

	if (size && !*(const uint8_t *)data)
		return ferry__gcs_op_decode_fb(data, size, op);
	memset(op, 0, sizeof(*op));
	op->type = (enum ferry__gcs_op_type)ferry__gcs_get_u8(&r);
	if (op->type == FERRY__GCS_OP_NODE_HEARTBEAT)
		get_heartbeat(&r, &op->heartbeat);
	else if (op->type == FERRY__GCS_OP_NODE_LOAD)
		get_load(&r, op);
	else
		r.err = -EPROTO; /* not a GcsRecord: the first release's format, no longer read */
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
