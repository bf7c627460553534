/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's runtime-socket decoder (node/rt_wire.c): good messages decode to what was sent, and
 * every field the pool and the lease code trust is range-checked with a reason (nil IDs, bad
 * resource names and amounts, names given twice, over-long paths, statuses that are not -errno,
 * messages the node does not take).
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/fb.h"
#include "common/wire.h"
#include "node/rt_wire.h"
#include "tests/harness/ftest.h"

static struct ferry__fb_builder fb;
static struct ferry__rt_msg msg;
static char why[160];

static int decode(uint16_t type, int built)
{
	ftest_assert_ok(built);
	return ferry__rt_decode(type, ferry__fb_builder_data(&fb), ferry__fb_builder_size(&fb),
				&msg, why, sizeof(why));
}

static int lease(const struct ferry__wire_runtime_resource *res, size_t n, const char *path)
{
	struct ferry__wire_lease_request q = {
		.request_id = 11, .code_path = path, .resources = res, .resources_count = n};

	memset(q.job.bytes, 0x22, sizeof(q.job.bytes));
	return decode(FERRY__WIRE_MSG_LEASE_REQUEST, ferry__wire_lease_request_build(&fb, &q));
}

FTEST(lease_request_decodes)
{
	struct ferry__wire_runtime_resource res[3] = {{.name = "CPU", .amount = 1.5},
						      {.name = "GPU", .amount = 0},
						      {.name = "tpu", .amount = 2}};

	ftest_assert_ok(lease(res, 3, "/jobs/a.so"));
	ftest_assert_uint_eq(msg.lease.request_id, 11);
	ftest_assert_str_eq(msg.lease.code_path, "/jobs/a.so");
	ftest_assert_uint_eq(msg.lease.nres, 2); /* a zero amount asks for nothing */
	ftest_assert_str_eq(msg.lease.res[0].name, "CPU");
	ftest_assert_int_eq(msg.lease.res[0].amount, 3 * FERRY_GCS_RESOURCE_UNIT / 2);
	ftest_assert_str_eq(msg.lease.res[1].name, "tpu");
	ferry__fb_builder_fini(&fb);
}

FTEST(bad_lease_requests_are_refused_with_a_reason)
{
	struct ferry__wire_runtime_resource r = {.name = "CPU", .amount = -1};
	struct ferry__wire_runtime_resource twice[2] = {{.name = "CPU", .amount = 1},
							{.name = "CPU", .amount = 2}};
	struct ferry__wire_lease_request nojob = {.request_id = 1};
	char long_path[FERRY__RT_CODE_PATH_MAX + 8];

	ftest_assert_errno(lease(&r, 1, NULL), -EINVAL);
	ftest_assert_true(why[0]);
	r.amount = NAN;
	ftest_assert_errno(lease(&r, 1, NULL), -EINVAL);
	r.amount = 1e300;
	ftest_assert_errno(lease(&r, 1, NULL), -EINVAL);
	r.amount = 1;
	r.name = "bad name";
	ftest_assert_errno(lease(&r, 1, NULL), -EINVAL);
	r.name = "";
	ftest_assert_errno(lease(&r, 1, NULL), -EINVAL);
	ftest_assert_errno(lease(twice, 2, NULL), -EINVAL);
	ftest_assert_true(strstr(why, "twice") != NULL);
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = '\0';
	ftest_assert_errno(lease(NULL, 0, long_path), -ENAMETOOLONG);
	ftest_assert_errno(
		decode(FERRY__WIRE_MSG_LEASE_REQUEST, ferry__wire_lease_request_build(&fb, &nojob)),
		-EINVAL);
	ferry__fb_builder_fini(&fb);
}

static int placed_lease(struct ferry__wire_lease_request *q)
{
	memset(q->job.bytes, 0x22, sizeof(q->job.bytes));
	return decode(FERRY__WIRE_MSG_LEASE_REQUEST, ferry__wire_lease_request_build(&fb, q));
}

FTEST(lease_request_placement_decodes_and_is_checked)
{
	struct ferry__wire_lease_input in[FERRY__RT_REQ_INPUTS_MAX + 1] = {{.bytes = 5u << 20},
									   {.bytes = 0}};
	struct ferry__wire_lease_request q = {.request_id = 3,
					      .placed = true,
					      .strategy = FERRY__WIRE_LEASE_STRATEGY_NODE_AFFINITY,
					      .affinity_soft = true,
					      .inputs = in,
					      .inputs_count = 2};

	memset(q.affinity_node.bytes, 0x33, sizeof(q.affinity_node.bytes));
	for (size_t i = 0; i < FERRY__RT_REQ_INPUTS_MAX + 1; i++)
		memset(in[i].node_id.bytes, 0x40 + (int)i, sizeof(in[i].node_id.bytes));
	ftest_assert_ok(placed_lease(&q));
	ftest_assert_true(msg.lease.placed);
	ftest_assert_uint_eq(msg.lease.strategy, FERRY__RT_STRATEGY_NODE_AFFINITY);
	ftest_assert_true(msg.lease.affinity_soft);
	ftest_assert_uint_eq(msg.lease.affinity.bytes[0], 0x33);
	ftest_assert_uint_eq(msg.lease.ninputs, 1); /* zero bytes say nothing: dropped */
	ftest_assert_uint_eq(msg.lease.inputs[0].bytes, 5u << 20);
	ftest_assert_uint_eq(msg.lease.inputs[0].node.bytes[0], 0x40);
	/* An input on no node, too many inputs, affinity to no node, no such strategy. */
	memset(in[1].node_id.bytes, 0, sizeof(in[1].node_id.bytes));
	ftest_assert_errno(placed_lease(&q), -EINVAL);
	memset(in[1].node_id.bytes, 0x41, sizeof(in[1].node_id.bytes));
	q.inputs_count = FERRY__RT_REQ_INPUTS_MAX + 1;
	ftest_assert_errno(placed_lease(&q), -EINVAL);
	ftest_assert_true(strstr(why, "inputs") != NULL);
	q.inputs_count = 0;
	memset(q.affinity_node.bytes, 0, sizeof(q.affinity_node.bytes));
	ftest_assert_errno(placed_lease(&q), -EINVAL);
	ftest_assert_true(strstr(why, "NODE_AFFINITY") != NULL);
	q.strategy = 9;
	ftest_assert_errno(placed_lease(&q), -EINVAL);
	q.strategy = FERRY__WIRE_LEASE_STRATEGY_SPREAD;
	ftest_assert_ok(placed_lease(&q));
	ferry__fb_builder_fini(&fb);
}

FTEST(runtime_connect_checks)
{
	static const uint8_t secret[40] = {1};
	struct ferry__wire_runtime_connect c = {.protocol_version = 3,
						.kind = FERRY__WIRE_PEER_KIND_WORKER,
						.pid = 5,
						.secret = secret,
						.secret_count = 32,
						.listen_path = "/tmp/w.sock"};

	memset(c.id.bytes, 0x11, sizeof(c.id.bytes));
	ftest_assert_ok(decode(FERRY__WIRE_MSG_RUNTIME_CONNECT,
			       ferry__wire_runtime_connect_build(&fb, &c)));
	ftest_assert_uint_eq(msg.connect.secret_len, 32);
	ftest_assert_str_eq(msg.connect.listen_path, "/tmp/w.sock");
	c.secret_count = 40; /* longer than any secret the node gives */
	ftest_assert_errno(
		decode(FERRY__WIRE_MSG_RUNTIME_CONNECT, ferry__wire_runtime_connect_build(&fb, &c)),
		-EINVAL);
	c.secret_count = 32;
	c.listen_path = NULL; /* a worker must say where owners find it */
	ftest_assert_errno(
		decode(FERRY__WIRE_MSG_RUNTIME_CONNECT, ferry__wire_runtime_connect_build(&fb, &c)),
		-EINVAL);
	c.kind = FERRY__WIRE_PEER_KIND_DRIVER; /* a driver must name its job */
	ftest_assert_errno(
		decode(FERRY__WIRE_MSG_RUNTIME_CONNECT, ferry__wire_runtime_connect_build(&fb, &c)),
		-EINVAL);
	c.kind = FERRY__WIRE_PEER_KIND_GCS;
	ftest_assert_errno(
		decode(FERRY__WIRE_MSG_RUNTIME_CONNECT, ferry__wire_runtime_connect_build(&fb, &c)),
		-EINVAL);
	ferry__fb_builder_fini(&fb);
}

FTEST(other_messages_and_garbage)
{
	struct ferry__wire_worker_assign_reply a = {.status = 7};
	static const uint8_t junk[64] = {0xff, 0xff, 0xff, 0x7f};

	ftest_assert_errno(decode(FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY,
				  ferry__wire_worker_assign_reply_build(&fb, &a)),
			   -EINVAL);
	a.status = -ENOENT;
	ftest_assert_ok(decode(FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY,
			       ferry__wire_worker_assign_reply_build(&fb, &a)));
	ftest_assert_int_eq(msg.assign_reply.status, -ENOENT);
	/* A message the node never takes, and bytes that are no message. */
	ftest_assert_errno(ferry__rt_decode(FERRY__WIRE_MSG_LEASE_GRANT, junk, sizeof(junk), &msg,
					    why, sizeof(why)),
			   -EPROTO);
	ftest_assert_errno(ferry__rt_decode(FERRY__WIRE_MSG_LEASE_REQUEST, junk, sizeof(junk), &msg,
					    why, sizeof(why)),
			   -EPROTO);
	ftest_assert_errno(
		ferry__rt_decode(FERRY__WIRE_MSG_LEASE_REQUEST, NULL, 0, &msg, why, sizeof(why)),
		-EPROTO);
	ferry__fb_builder_fini(&fb);
}

FTEST(objects_free_decodes)
{
	struct ferry_object_id ids[2] = {{{1, 2}}, {{3}}};
	struct ferry__wire_objects_free m = {.object_ids = ids, .object_ids_count = 2};
	struct ferry_object_id second;
	static const uint8_t junk[64] = {0xff, 0xff, 0xff, 0x7f};

	ftest_assert_ok(
		decode(FERRY__WIRE_MSG_OBJECTS_FREE, ferry__wire_objects_free_build(&fb, &m)));
	ftest_assert_uint_eq(msg.free.count, 2);
	second = ferry__wire_objects_free_object_ids_at(msg.free.v, 1);
	ftest_assert_mem_eq(second.bytes, ids[1].bytes, sizeof(second.bytes));
	/* Bytes that are no ObjectsFree. */
	ftest_assert_errno(ferry__rt_decode(FERRY__WIRE_MSG_OBJECTS_FREE, junk, sizeof(junk), &msg,
					    why, sizeof(why)),
			   -EPROTO);
	ferry__fb_builder_fini(&fb);
}
