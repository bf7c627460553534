/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for ferry-sched's decoders (sched/proto.c): SchedPlace as any holder of the
 * cluster token may send it to ferry-sched, and SchedPlaceReply as a node's client reads it.
 * The first byte picks which (2: SchedGroupLoad as a global instance reads a group's report;
 * other even: SchedPlace; odd: the reply), the rest is the payload.
 * Whatever is accepted must hold to the caps the server and client rely on (batch size,
 * resources and inputs per item, names terminated and short, amounts in range, statuses 0 or
 * -errno, addresses of a result terminated).
 *
 * Built with FUZZ_SCHED_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_sched_replay DIR|FILE...        run each input
 *   fuzz_sched_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD sched-corpus)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fb.h"
#include "common/wire.h"
#include "sched/proto.h"

#include "fuzz_replay.h"

static void check_item(const struct ferry__sched_item *it, int r)
{
	if (it->nres > FERRY__SCHED_ITEM_RES_MAX || it->ninputs > FERRY__SCHED_ITEM_INPUTS_MAX)
		abort();
	for (uint32_t i = 0; i < it->nres; i++) {
		size_t n = strnlen(it->res_name[i], FERRY__RES_NAME_MAX + 1);

		if (n == 0 || n > FERRY__RES_NAME_MAX)
			abort();
		if (r == 0 &&
		    (it->res_amount[i] <= 0 || it->res_amount[i] >= FERRY__RES_AMOUNT_MAX))
			abort();
		for (uint32_t j = 0; r == 0 && j < i; j++)
			if (!strcmp(it->res_name[i], it->res_name[j]))
				abort();
	}
	if (r == 0 && it->strategy > FERRY__SCHED_NODE_AFFINITY)
		abort();
	if (it->hops > FERRY__SCHED_HOPS_MAX || !it->from_group ||
	    strnlen(it->from_group, FERRY__SCHED_GROUP_NAME_MAX + 1) > FERRY__SCHED_GROUP_NAME_MAX)
		abort();
}

static void group(const uint8_t *p, size_t len)
{
	static struct ferry__sched_group_report g;
	struct ferry_node_id id;
	int r;

	if (ferry__wire_verify(FERRY__WIRE_MSG_SCHED_GROUP_LOAD, p, len) < 0)
		return;
	r = ferry__sched_group_read(p, len, &g);
	if (r != 0 && r != -EPROTO)
		abort();
	if (r == 0) {
		size_t n = strnlen(g.group, FERRY__SCHED_GROUP_NAME_MAX + 1);

		if (n == 0 || n > FERRY__SCHED_GROUP_NAME_MAX || g.nres > FERRY__SCHED_KINDS ||
		    g.nmembers > FERRY__SCHED_GROUP_MEMBERS_MAX)
			abort();
		for (uint32_t i = 0; i < g.nres; i++)
			if (!g.res_name[i] || g.avail[i] < 0 || g.avail[i] > g.total[i] ||
			    g.avail_max[i] > g.total_max[i] ||
			    strnlen(g.res_name[i], FERRY__RES_NAME_MAX + 1) > FERRY__RES_NAME_MAX)
				abort();
		for (uint32_t i = 0; i < g.nmembers; i++)
			if (ferry__sched_group_member(p, i, &id) != 0)
				abort();
	}
	r = ferry__sched_group_check(p, len);
	if (r != 0 && r != -EPROTO && r != -ENOMEM)
		abort();
}

static void place(const uint8_t *p, size_t len)
{
	static struct ferry__sched_item it;
	int n, r;

	if (ferry__wire_verify(FERRY__WIRE_MSG_SCHED_PLACE, p, len) < 0)
		return;
	n = ferry__sched_place_count(p, len);
	if (n < -EPROTO || n > FERRY__SCHED_BATCH_MAX)
		abort();
	for (int i = 0; i < n; i++) {
		r = ferry__sched_place_item(p, (uint32_t)i, &it);
		if (r != 0 && r != -EINVAL && r != -EPROTO)
			abort();
		if (r == -EPROTO)
			break;
		check_item(&it, r);
	}
	r = ferry__sched_place_check(p, len);
	if (r != 0 && r != -EPROTO && r != -ENOMEM)
		abort();
}

static void reply(const uint8_t *p, size_t len)
{
	struct ferry__sched_result res;
	int n, r;

	if (ferry__wire_verify(FERRY__WIRE_MSG_SCHED_PLACE_REPLY, p, len) < 0)
		return;
	n = ferry__sched_reply_count(p, len);
	if (n < -EPROTO || n > FERRY__SCHED_BATCH_MAX)
		abort();
	for (int i = 0; i < n; i++) {
		r = ferry__sched_reply_result(p, (uint32_t)i, &res);
		if (r != 0 && r != -EPROTO)
			abort();
		if (r < 0)
			break;
		if (res.status > 0 || res.status < -4095)
			abort();
		if (res.status == 0 &&
		    (!res.node_address || strnlen(res.node_address, FERRY__SCHED_ADDRESS_MAX + 1) >
						  FERRY__SCHED_ADDRESS_MAX))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy, kind;
	size_t len;

	copy = fuzz_typed_payload(data, size, &kind, &len);
	if (!copy)
		return 0;
	if (kind == 2)
		group(copy, len);
	else if (kind % 2 == 0)
		place(copy, len);
	else
		reply(copy, len);
	free(copy);
	return 0;
}

#ifdef FUZZ_SCHED_REPLAY

static int seed(const char *dir, const char *name, uint8_t kind, struct ferry__fb_builder *b,
		int built)
{
	if (built < 0) {
		fprintf(stderr, "%s: build failed\n", name);
		return 1;
	}
	return fuzz_write_seed(dir, name, &kind, 1, ferry__fb_builder_data(b),
			       ferry__fb_builder_size(b));
}

int fuzz_make_corpus(const char *dir)
{
	struct ferry__fb_builder b = {0};
	struct ferry__res res[3] = {{"CPU", 10000}, {"GPU", 5000}, {"tpu", 20000}};
	struct ferry__sched_place_input in[2] = {{.bytes = 64u << 20}, {.bytes = 1000}};
	struct ferry__sched_place_req q[3] = {
		{.res = res, .nres = 3, .inputs = in, .ninputs = 2},
		{.res = res, .nres = 1, .strategy = FERRY__SCHED_SPREAD},
		{.res = res + 1, .nres = 1, .strategy = FERRY__SCHED_NODE_AFFINITY, .soft = true},
	};
	const struct ferry__sched_place_req *items[3] = {&q[0], &q[1], &q[2]};
	uint64_t ids[3] = {1, 2, 3};
	struct ferry__sched_result r[3] = {
		{.request_id = 1, .status = 0, .node_address = "ip=10.0.0.1;tcp=7000"},
		{.request_id = 2, .status = -ENOSPC},
		{.request_id = 3, .status = -EHOSTDOWN},
	};
	struct ferry_node_id origin;
	struct ferry__wire_runtime_resource bad_res[2] = {{.name = "CPU", .amount = -1},
							  {.name = "CPU", .amount = 1}};
	struct ferry__wire_sched_place_item bad_item = {
		.resources = bad_res, .resources_count = 2, .strategy = 9};
	struct ferry__wire_sched_place bad = {.items = &bad_item, .items_count = 1};
	struct ferry__sched_load gl = {.version = 7, .queue_len = 3, .mean_task_ns = 1000000};
	const char *names[FERRY__SCHED_KINDS] = {"CPU", "GPU", NULL, NULL, "tpu"};
	struct ferry_node_id members[2];
	int fail = 0;

	gl.total[0] = 80000, gl.avail[0] = 30000, gl.total_max[0] = 40000, gl.avail_max[0] = 20000;
	gl.total[4] = 10000, gl.avail[4] = 10000, gl.total_max[4] = 10000, gl.avail_max[4] = 10000;
	memset(members[0].bytes, 0x44, sizeof(members[0].bytes));
	memset(members[1].bytes, 0x55, sizeof(members[1].bytes));
	q[0].hops = 1;
	q[0].from_group = "rack-1";
	memset(origin.bytes, 0x11, sizeof(origin.bytes));
	memset(in[0].node.bytes, 0x22, sizeof(in[0].node.bytes));
	memset(q[2].affinity.bytes, 0x33, sizeof(q[2].affinity.bytes));
	fail |= seed(dir, "seed-place-3", 0, &b,
		     ferry__sched_place_build(&b, &origin, items, ids, 3));
	fail |= seed(dir, "seed-place-0", 0, &b,
		     ferry__sched_place_build(&b, &origin, items, ids, 0));
	fail |= seed(dir, "seed-place-refused", 0, &b, ferry__wire_sched_place_build(&b, &bad));
	fail |= seed(dir, "seed-reply-3", 1, &b, ferry__sched_reply_build(&b, r, 3));
	fail |= seed(dir, "seed-group-load", 2, &b,
		     ferry__sched_group_build(&b, "rack-1", &gl, names, members, 2));
	ferry__fb_builder_fini(&b);
	return fail;
}

int fuzz_replay_check(void)
{
	return 0;
}

#endif
