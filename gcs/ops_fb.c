/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS records as FlatBuffers (schema/gcs.fbs GcsRecord): the op families moved off the
 * hand-written format so far. A record is FERRY__GCS_RECORD_PREFIX zero bytes, then the
 * FlatBuffer; ops.c routes here by op type (encode) and by the leading zero byte (decode), and
 * keeps the hand-written decoder for the records of older logs.
 */
#include <errno.h>
#include <string.h>

#include "common/fb.h"
#include "common/log.h"
#include "schema/ferry_schema.h"
#include "gcs/ops.h"

bool ferry__gcs_op_is_fb(enum ferry__gcs_op_type type)
{
	switch (type) {
	case FERRY__GCS_OP_KV_PUT:
	case FERRY__GCS_OP_KV_DELETE:
	case FERRY__GCS_OP_KV_DELETE_PREFIX:
	case FERRY__GCS_OP_LOG:
		return true;
	default:
		return false;
	}
}

/* Append the prefix and @b's finished buffer to @w. */
static void put_built(struct ferry__gcs_writer *w, struct ferry__fb_builder *b)
{
	static const uint8_t prefix[FERRY__GCS_RECORD_PREFIX];

	ferry__gcs_put_raw(w, prefix, sizeof(prefix));
	ferry__gcs_put_raw(w, ferry__fb_builder_data(b), ferry__fb_builder_size(b));
}

void ferry__gcs_op_encode_fb(const struct ferry__gcs_op *op, struct ferry__gcs_writer *w)
{
	struct ferry__wire_gcs_record rec = {.version = FERRY__GCS_RECORD_VERSION,
					     .type = (uint8_t)op->type};
	struct ferry__wire_gcs_kv_op kv = {0};
	struct ferry__wire_gcs_log_op log = {0};
	struct ferry__fb_builder b;
	int ret;

	if (op->type == FERRY__GCS_OP_LOG) {
		memcpy(log.job.bytes, op->log.job.bytes, sizeof(log.job.bytes));
		log.data = op->log.data.data;
		log.data_count = op->log.data.size;
		rec.log = &log;
	} else {
		kv.ns = op->kv.ns.data;
		kv.ns_count = op->kv.ns.size;
		kv.key = op->kv.key.data;
		kv.key_count = op->kv.key.size;
		if (op->type == FERRY__GCS_OP_KV_PUT) {
			kv.value = op->kv.value.data;
			kv.value_count = op->kv.value.size;
			kv.overwrite = op->kv.overwrite;
		}
		rec.kv = &kv;
	}
	ferry__fb_builder_init(&b);
	ret = ferry__wire_gcs_record_build(&b, &rec);
	if (ret < 0 && !w->err)
		w->err = ret;
	else if (ret == 0)
		put_built(w, &b);
	ferry__fb_builder_fini(&b);
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

int ferry__gcs_op_decode_fb(const uint8_t *data, size_t size, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_record_view v;
	unsigned version;
	int ret;

	memset(op, 0, sizeof(*op));
	if (size < FERRY__GCS_RECORD_PREFIX ||
	    ferry__wire_gcs_record_root(data + FERRY__GCS_RECORD_PREFIX,
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
	if (!ferry__gcs_op_is_fb(op->type))
		ret = -EPROTO;
	else if (op->type == FERRY__GCS_OP_LOG)
		ret = get_log(v, op);
	else
		ret = get_kv(v, op);
	if (ret < 0) {
		FLOG_WARN("gcs", "ops: malformed record (type %d, %zu bytes)", (int)op->type, size);
		memset(op, 0, sizeof(*op));
	}
	return ret;
}
