/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node load report record (FERRY__GCS_OP_NODE_LOAD, gcs/ops.c) and its check
 * (gcs/records.c): a round trip keeps every field, every prefix and a trailing byte are
 * malformed, counts and amounts past the limits are refused, and the check names bad reports.
 */
#include <errno.h>
#include <string.h>

#include "ftest.h"
#include "gcs/ops.h"
#include "gcs/records.h"

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
	struct ferry__gcs_op op;

	/* 1 type + 16 id + 8 version + 4 queue + 8 mean + 4 count, then per resource a text
	 * (u32 length + bytes + NUL) and two u64 amounts. */
	ftest_assert_uint_eq(b.size, 41 + (4 + 4 + 16) + (4 + 7 + 16) + (4 + 4 + 16));
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

FTEST(malformed_load_records_are_rejected)
{
	struct ferry_gcs_node_load l = sample();
	struct ferry__gcs_buf b = encode(&l);
	struct ferry__gcs_op op;
	size_t count_at = 1 + 16 + 8 + 4 + 8;

	for (size_t len = 0; len < b.size; len++)
		ftest_assert_errno(ferry__gcs_op_decode(b.data, len, &op), -EPROTO);
	ftest_assert_ptr_notnull(ferry__gcs_buf_grow(&b, 1));
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &op), -EPROTO);
	b.size--;
	/* More resources than a report may carry. */
	b.data[count_at] = FERRY_GCS_MAX_LOAD_RESOURCES + 1;
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &op), -EPROTO);
	b.data[count_at] = 3;
	/* An amount of 2^63 or more would read back negative. */
	b.data[count_at + 4 + 4 + 4 + 7] = 0x80; /* last byte of CPU's total */
	ftest_assert_errno(ferry__gcs_op_decode(b.data, b.size, &op), -EPROTO);
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
