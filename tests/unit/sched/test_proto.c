/* SPDX-License-Identifier: Apache-2.0 */
/* ferry-sched's messages (sched/proto.c): round trips, and what the decoders refuse. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/wire.h"
#include "sched/proto.h"
#include "tests/harness/ftest.h"

static struct ferry__fb_builder B;

static const uint8_t *built(void)
{
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_SCHED_PLACE, ferry__fb_builder_data(&B),
					   ferry__fb_builder_size(&B)));
	return ferry__fb_builder_data(&B);
}

FTEST(place_round_trip)
{
	struct ferry__res res[2] = {{"CPU", 15000}, {"tpu", 20000}};
	struct ferry__sched_place_input in[2] = {{.bytes = 64u << 20}, {.bytes = 7}};
	struct ferry__sched_place_req q[2] = {
		{.res = res, .nres = 2, .inputs = in, .ninputs = 2},
		{.res = res, .nres = 1, .strategy = FERRY__SCHED_NODE_AFFINITY, .soft = true},
	};
	const struct ferry__sched_place_req *items[2] = {&q[0], &q[1]};
	uint64_t ids[2] = {41, 42};
	struct ferry__sched_item it;
	struct ferry_node_id origin;
	const uint8_t *p;

	memset(origin.bytes, 0x11, sizeof(origin.bytes));
	memset(in[1].node.bytes, 0x22, sizeof(in[1].node.bytes));
	memset(q[1].affinity.bytes, 0x33, sizeof(q[1].affinity.bytes));
	ftest_assert_ok(ferry__sched_place_build(&B, &origin, items, ids, 2));
	p = built();
	ftest_assert_int_eq(ferry__sched_place_count(p, ferry__fb_builder_size(&B)), 2);
	ftest_assert_ok(ferry__sched_place_item(p, 0, &it));
	ftest_assert_uint_eq(it.request_id, 41);
	ftest_assert_true(!memcmp(it.origin.bytes, origin.bytes, 16));
	ftest_assert_uint_eq(it.nres, 2);
	ftest_assert_str_eq(it.res_name[1], "tpu");
	ftest_assert_int_eq(it.res_amount[0], 15000);
	ftest_assert_int_eq(it.res_amount[1], 20000);
	ftest_assert_uint_eq(it.ninputs, 2);
	ftest_assert_uint_eq(it.inputs[0].bytes, 64u << 20);
	ftest_assert_true(!memcmp(it.inputs[1].node.bytes, in[1].node.bytes, 16));
	ftest_assert_ok(ferry__sched_place_item(p, 1, &it));
	ftest_assert_uint_eq(it.strategy, FERRY__SCHED_NODE_AFFINITY);
	ftest_assert_true(it.soft);
	ftest_assert_true(!memcmp(it.affinity.bytes, q[1].affinity.bytes, 16));
	ftest_assert_int_eq(ferry__sched_place_item(p, 2, &it), -EPROTO);
	ftest_assert_ok(ferry__sched_place_check(p, ferry__fb_builder_size(&B)));
	ferry__fb_builder_fini(&B);
}

FTEST(place_build_refuses_what_breaks_the_caps)
{
	struct ferry__res res[FERRY__SCHED_ITEM_RES_MAX + 1] = {{"CPU", 1}};
	struct ferry__sched_place_req q = {.res = res, .nres = FERRY__SCHED_ITEM_RES_MAX + 1};
	const struct ferry__sched_place_req *items[1] = {&q};
	uint64_t id = 1;
	struct ferry_node_id origin = {{0}};

	ftest_assert_int_eq(ferry__sched_place_build(&B, &origin, items, &id, 1), -EINVAL);
	q.nres = 1;
	q.strategy = 7;
	ftest_assert_int_eq(ferry__sched_place_build(&B, &origin, items, &id, 1), -EINVAL);
	q.strategy = 0;
	res[0].amount = 0;
	ftest_assert_int_eq(ferry__sched_place_build(&B, &origin, items, &id, 1), -EINVAL);
	ftest_assert_int_eq(
		ferry__sched_place_build(&B, &origin, items, &id, FERRY__SCHED_BATCH_MAX + 1),
		-EINVAL);
	ferry__fb_builder_fini(&B);
}

/* An item as a hostile sender may write it. */
static int decode_one(const struct ferry__wire_sched_place_item *raw)
{
	struct ferry__wire_sched_place m = {.items = raw, .items_count = 1};
	struct ferry__sched_item it;

	ftest_assert_int_ge(ferry__wire_sched_place_build(&B, &m), 0);
	return ferry__sched_place_item(built(), 0, &it);
}

FTEST(place_decoder_rejects)
{
	struct ferry__wire_runtime_resource r[FERRY__SCHED_ITEM_RES_MAX + 1];
	struct ferry__wire_sched_place_item raw = {.resources = r, .resources_count = 1};
	struct ferry__wire_sched_place_item *many;
	struct ferry__wire_sched_place m = {0};
	char longname[80];

	for (size_t i = 0; i < FERRY__SCHED_ITEM_RES_MAX + 1; i++)
		r[i] = (struct ferry__wire_runtime_resource){.name = "CPU", .amount = 1};
	ftest_assert_ok(decode_one(&raw));
	r[0].amount = -1; /* an amount that is not positive: this item refused */
	ftest_assert_int_eq(decode_one(&raw), -EINVAL);
	r[0].amount = 1e300;
	ftest_assert_int_eq(decode_one(&raw), -EINVAL);
	r[0].amount = 0.00001; /* below 1/10000 */
	ftest_assert_int_eq(decode_one(&raw), -EINVAL);
	r[0].amount = 1;
	raw.resources_count = 2; /* CPU twice */
	ftest_assert_int_eq(decode_one(&raw), -EINVAL);
	raw.resources_count = 1;
	raw.strategy = 3;
	ftest_assert_int_eq(decode_one(&raw), -EINVAL);
	raw.strategy = 0;
	/* Protocol breaches close the connection. */
	raw.resources_count = FERRY__SCHED_ITEM_RES_MAX + 1;
	ftest_assert_int_eq(decode_one(&raw), -EPROTO);
	raw.resources_count = 1;
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	r[0].name = longname;
	ftest_assert_int_eq(decode_one(&raw), -EPROTO);
	r[0].name = "";
	ftest_assert_int_eq(decode_one(&raw), -EPROTO);
	r[0].name = NULL;
	ftest_assert_int_eq(decode_one(&raw), -EPROTO);
	/* A batch over the cap. */
	many = calloc(FERRY__SCHED_BATCH_MAX + 1, sizeof(*many));
	ftest_assert_ptr_notnull(many);
	m.items = many;
	m.items_count = FERRY__SCHED_BATCH_MAX + 1;
	ftest_assert_int_ge(ferry__wire_sched_place_build(&B, &m), 0);
	ftest_assert_int_eq(ferry__sched_place_count(built(), ferry__fb_builder_size(&B)), -EPROTO);
	ftest_assert_int_eq(ferry__sched_place_check(built(), ferry__fb_builder_size(&B)), -EPROTO);
	free(many);
	ferry__fb_builder_fini(&B);
}

FTEST(reply_round_trip_and_rejects)
{
	struct ferry__sched_result r[2] = {
		{.request_id = 5, .status = 0, .node_address = "ip=10.0.0.1;tcp=7000"},
		{.request_id = 6, .status = -ENOSPC},
	};
	struct ferry__wire_sched_place_result raw = {.status = 0};
	struct ferry__wire_sched_place_reply m = {.items = &raw, .items_count = 1};
	struct ferry__sched_result out;
	const uint8_t *p;

	memset(r[0].node.bytes, 0x44, sizeof(r[0].node.bytes));
	ftest_assert_ok(ferry__sched_reply_build(&B, r, 2));
	p = ferry__fb_builder_data(&B);
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_SCHED_PLACE_REPLY, p,
					   ferry__fb_builder_size(&B)));
	ftest_assert_int_eq(ferry__sched_reply_count(p, ferry__fb_builder_size(&B)), 2);
	ftest_assert_ok(ferry__sched_reply_result(p, 0, &out));
	ftest_assert_uint_eq(out.request_id, 5);
	ftest_assert_str_eq(out.node_address, "ip=10.0.0.1;tcp=7000");
	ftest_assert_true(!memcmp(out.node.bytes, r[0].node.bytes, 16));
	ftest_assert_ok(ferry__sched_reply_result(p, 1, &out));
	ftest_assert_int_eq(out.status, -ENOSPC);
	ftest_assert_ptr_null(out.node_address);
	/* Status 0 without an address; a positive status. */
	ftest_assert_int_ge(ferry__wire_sched_place_reply_build(&B, &m), 0);
	ftest_assert_int_eq(ferry__sched_reply_result(ferry__fb_builder_data(&B), 0, &out),
			    -EPROTO);
	raw.status = 5;
	raw.node_address = "x";
	ftest_assert_int_ge(ferry__wire_sched_place_reply_build(&B, &m), 0);
	ftest_assert_int_eq(ferry__sched_reply_result(ferry__fb_builder_data(&B), 0, &out),
			    -EPROTO);
	ferry__fb_builder_fini(&B);
}

FTEST(build_survives_every_allocation_failure)
{
	struct ferry__res res[1] = {{"CPU", 10000}};
	struct ferry__sched_place_req q = {.res = res, .nres = 1};
	const struct ferry__sched_place_req *items[1] = {&q};
	struct ferry__sched_result r = {.request_id = 1, .node_address = "x"};
	struct ferry_node_id origin = {{0}};
	uint64_t id = 1;
	int ret = -ENOMEM;

	for (long n = 0; ret == -ENOMEM && n < 64; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry__sched_place_build(&B, &origin, items, &id, 1);
		ferry__fb_builder_fini(&B);
	}
	ferry__alloc_fail_after(-1);
	ftest_assert_ok(ret);
	ret = -ENOMEM;
	for (long n = 0; ret == -ENOMEM && n < 64; n++) {
		ferry__alloc_fail_after(n);
		ret = ferry__sched_reply_build(&B, &r, 1);
		ferry__fb_builder_fini(&B);
	}
	ferry__alloc_fail_after(-1);
	ftest_assert_ok(ret);
}

FTEST(tree_fields_and_group_load_round_trip)
{
	struct ferry__res res[1] = {{"CPU", 10000}};
	struct ferry__sched_place_req q[2] = {
		{.res = res, .nres = 1, .hops = 1, .from_group = "rack-1"},
		{.res = res, .nres = 1},
	};
	const struct ferry__sched_place_req *items[2] = {&q[0], &q[1]};
	uint64_t ids[2] = {1, 2};
	struct ferry__sched_result r = {.request_id = 1, .node_address = "a", .hops = 3};
	struct ferry__sched_load load = {.version = 9, .queue_len = 4, .mean_task_ns = 5};
	const char *names[FERRY__SCHED_KINDS] = {"CPU", NULL, NULL, NULL, "tpu"};
	struct ferry__sched_group_report g;
	struct ferry__sched_item it;
	struct ferry__sched_result out;
	struct ferry_node_id origin = {{0}}, members[3], m;
	const uint8_t *p;

	ftest_assert_ok(ferry__sched_place_build(&B, &origin, items, ids, 2));
	p = built();
	ftest_assert_ok(ferry__sched_place_item(p, 0, &it));
	ftest_assert_uint_eq(it.hops, 1);
	ftest_assert_str_eq(it.from_group, "rack-1");
	ftest_assert_ok(ferry__sched_place_item(p, 1, &it));
	ftest_assert_uint_eq(it.hops, 0);
	ftest_assert_str_eq(it.from_group, ""); /* absent, as an older sender's */
	/* Over the hop bound, or a group name over its cap: refused at build. */
	q[1].hops = FERRY__SCHED_HOPS_MAX + 1;
	ftest_assert_int_eq(ferry__sched_place_build(&B, &origin, items, ids, 2), -EINVAL);
	ftest_assert_ok(ferry__sched_reply_build(&B, &r, 1));
	ftest_assert_ok(ferry__sched_reply_result(ferry__fb_builder_data(&B), 0, &out));
	ftest_assert_uint_eq(out.hops, 3);

	load.total[0] = 80000, load.avail[0] = 30000, load.total_max[0] = 40000;
	load.avail_max[0] = 20000;
	load.total[4] = load.avail[4] = load.total_max[4] = load.avail_max[4] = 10000;
	for (int i = 0; i < 3; i++)
		memset(members[i].bytes, 0x50 + i, sizeof(members[i].bytes));
	ftest_assert_ok(ferry__sched_group_build(&B, "rack-1", &load, names, members, 3));
	p = ferry__fb_builder_data(&B);
	ftest_assert_ok(ferry__sched_group_check(p, ferry__fb_builder_size(&B)));
	ftest_assert_ok(ferry__sched_group_read(p, ferry__fb_builder_size(&B), &g));
	ftest_assert_str_eq(g.group, "rack-1");
	ftest_assert_uint_eq(g.version, 9);
	ftest_assert_uint_eq(g.nres, 2);
	ftest_assert_str_eq(g.res_name[1], "tpu");
	ftest_assert_int_eq(g.avail_max[0], 20000);
	ftest_assert_uint_eq(g.queue_len, 4);
	ftest_assert_uint_eq(g.nmembers, 3);
	ftest_assert_ok(ferry__sched_group_member(p, 2, &m));
	ftest_assert_true(!memcmp(m.bytes, members[2].bytes, 16));
	ftest_assert_int_eq(ferry__sched_group_member(p, 3, &m), -EPROTO);
	/* Free above total is a broken report; so is a name over its cap. */
	load.avail[0] = 90000;
	ftest_assert_ok(ferry__sched_group_build(&B, "rack-1", &load, names, members, 3));
	ftest_assert_int_eq(
		ferry__sched_group_check(ferry__fb_builder_data(&B), ferry__fb_builder_size(&B)),
		-EPROTO);
	ftest_assert_int_eq(
		ferry__sched_group_build(
			&B, "0123456789012345678901234567890123456789012345678901234567890123",
			&load, names, members, 3),
		-EINVAL);
	ferry__fb_builder_fini(&B);
}
