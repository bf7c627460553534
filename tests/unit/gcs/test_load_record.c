/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node load report record (FERRY__GCS_OP_NODE_LOAD, a GcsRecord: gcs/ops_fb_beat.c) and
 * its check (gcs/records.c): a round trip keeps every field, every prefix is malformed, counts
 * and amounts past the limits are refused, and the check names bad reports.
 */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "ftest.h"
#include "gcs/ops.h"
#include "gcs/records.h"
#include "schema/ferry_schema.h"

static const struct ferry_gcs_resource_load res[] = {
	{"CPU", 80000, 25000},
	{"memory", 10240000, 0},
	{"tpu", 5000, 5000},
};

static struct ferry_gcs_node_load sample(void)
{
	struct ferry_gcs_node_load l = {0};

	ferry_node_id_random(&l.id);
	l.version = 1234567;
	l.queue_length = 9;
	l.mean_task_us = 4200;
	l.nresources = 3;
	l.resources = res;
	return l;
}

static struct ferry__gcs_buf encode(const struct ferry_gcs_node_load *l)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_LOAD};
	struct ferry__gcs_buf b = {0};
	struct ferry__gcs_writer w = {&b, 0};

	op.load = *l;
	ferry__gcs_op_encode(&op, &w);
	ftest_assert_ok(w.err);
	return b;
}

FTEST(load_record_round_trip)
{
	struct ferry_gcs_node_load l = sample();
	struct ferry__gcs_buf b = encode(&l);
	struct ferry__wire_gcs_record_view v;
	struct ferry__gcs_op op;

	ftest_assert_mem_eq(b.data, "\0\0\0\0", FERRY__GCS_RECORD_PREFIX);
	ftest_assert_ok(ferry__wire_gcs_record_root(b.data + FERRY__GCS_RECORD_PREFIX,
						    b.size - FERRY__GCS_RECORD_PREFIX, &v));
	ftest_assert_uint_eq(ferry__wire_gcs_record_version(v), FERRY__GCS_RECORD_VERSION);
	ftest_assert_uint_eq(ferry__wire_gcs_record_type(v), FERRY__WIRE_GCS_OP_TYPE_NODE_LOAD);
	ftest_assert_true(ferry__wire_gcs_record_has_load(v));
	ftest_assert_ok(ferry__gcs_op_decode(b.data, b.size, &op));
	ftest_assert_int_eq(op.type, FERRY__GCS_OP_NODE_LOAD);
	ftest_assert_mem_eq(&op.load.id, &l.id, sizeof(l.id));
	ftest_assert_uint_eq(op.load.version, l.version);
	ftest_assert_uint_eq(op.load.queue_length, 9);
	ftest_assert_uint_eq(op.load.mean_task_us, 4200);
	ftest_assert_uint_eq(op.load.nresources, 3);
	for (int i = 0; i < 3; i++) {
		ftest_assert_str_eq(op.load.resources[i].name, res[i].name);
		ftest_assert_int_eq(op.load.resources[i].total, res[i].total);
		ftest_assert_int_eq(op.load.resources[i].available, res[i].available);
	}
	ftest_assert_ok(ferry__gcs_load_check(&op.load));
	ferry__gcs_op_release(&op);
	ferry__gcs_buf_fini(&b);
}

/* @rec as a record (prefix + FlatBuffer) in @b, decoded: its result. */
static int decode_built(const struct ferry__wire_gcs_record *rec, struct ferry__gcs_buf *b)
{
	static const uint8_t zero[FERRY__GCS_RECORD_PREFIX];
	struct ferry__fb_builder fb;
	struct ferry__gcs_writer w = {b, 0};
	struct ferry__gcs_op op;
	int ret;

	b->size = 0;
	ferry__fb_builder_init(&fb);
	ftest_assert_ok(ferry__wire_gcs_record_build(&fb, rec));
	ferry__gcs_put_raw(&w, zero, sizeof(zero));
	ferry__gcs_put_raw(&w, ferry__fb_builder_data(&fb), ferry__fb_builder_size(&fb));
	ferry__fb_builder_fini(&fb);
	ftest_assert_ok(w.err);
	ret = ferry__gcs_op_decode(b->data, b->size, &op);
	if (ret == 0)
		ferry__gcs_op_release(&op);
	return ret;
}

FTEST(malformed_load_records_are_rejected)
{
	static struct ferry__wire_gcs_resource_load many[FERRY_GCS_MAX_LOAD_RESOURCES + 1];
	struct ferry__wire_gcs_resource_load one = {"CPU", 1000, 1000};
	struct ferry__wire_gcs_node_load load = {
		.version = 1, .resources = &one, .resources_count = 1};
	struct ferry__wire_gcs_record rec = {.version = FERRY__GCS_RECORD_VERSION,
					     .type = FERRY__WIRE_GCS_OP_TYPE_NODE_LOAD,
					     .load = &load};
	struct ferry_gcs_node_load l = sample();
	struct ferry__gcs_buf b = encode(&l);
	struct ferry__gcs_op op;

	for (size_t len = 0; len < b.size; len++)
		ftest_assert_errno(ferry__gcs_op_decode(b.data, len, &op), -EPROTO);
	load.id.bytes[0] = 1;
	ftest_assert_ok(decode_built(&rec, &b));
	/* A negative amount would pass for a huge free capacity. */
	one.available = -1;
	ftest_assert_errno(decode_built(&rec, &b), -EPROTO);
	one.available = 0;
	/* More resources than a report may carry. */
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(many); i++)
		many[i] = (struct ferry__wire_gcs_resource_load){"r", 1, 1};
	load.resources = many;
	load.resources_count = FERRY_GCS_MAX_LOAD_RESOURCES + 1;
	ftest_assert_errno(decode_built(&rec, &b), -EPROTO);
	load.resources_count = FERRY_GCS_MAX_LOAD_RESOURCES;
	ftest_assert_ok(decode_built(&rec, &b));
	/* A load record without its table. */
	rec.load = NULL;
	ftest_assert_errno(decode_built(&rec, &b), -EPROTO);
	ferry__gcs_buf_fini(&b);
}

FTEST(load_check_names_bad_reports)
{
	struct ferry_gcs_resource_load bad[2] = {{"CPU", 1, 1}, {"CPU", 1, 1}};
	struct ferry_gcs_node_load l = sample();

	ftest_assert_ok(ferry__gcs_load_check(&l));
	l.resources = bad;
	l.nresources = 2; /* a name twice */
	ftest_assert_errno(ferry__gcs_load_check(&l), -EINVAL);
	bad[1].name = "";
	ftest_assert_errno(ferry__gcs_load_check(&l), -EINVAL);
	bad[1].name = "GPU";
	bad[1].available = -1;
	ftest_assert_errno(ferry__gcs_load_check(&l), -EINVAL);
	bad[1].available = 0;
	ftest_assert_ok(ferry__gcs_load_check(&l));
	l.nresources = FERRY_GCS_MAX_LOAD_RESOURCES + 1;
	ftest_assert_errno(ferry__gcs_load_check(&l), -EINVAL);
	l = sample();
	memset(&l.id, 0, sizeof(l.id));
	ftest_assert_errno(ferry__gcs_load_check(&l), -EINVAL);
}
