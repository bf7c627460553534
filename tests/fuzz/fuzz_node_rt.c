/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the node's runtime-socket decoder (node/rt_wire.c): RuntimeConnect,
 * LeaseRequest, LeaseReturn, WorkerAssignReply, WorkerBlocked, LeaseDetach, the placement
 * groups' Bundle* payloads, ObjectsFree and an operator's queries (NodeInfo, Timeline,
 * PlasmaStats, PlasmaList) as any local process may send them, untrusted. The first byte picks
 * the message type (its value modulo NTYPES), the rest is the payload.
 * The decoder must return 0 or one of its documented errors, and what it accepts must hold to
 * the ranges the pool and the lease code rely on (strings terminated and short enough, IDs not
 * nil, resources named once with amounts > 0, statuses 0 or -errno).
 *
 * Built with FUZZ_NODE_RT_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_node_rt_replay DIR|FILE...        run each input
 *   fuzz_node_rt_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD node_rt-corpus)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fb.h"
#include "common/wire.h"
#include "node/rt_wire.h"

#include "fuzz_replay.h"

#define NTYPES 15
static const uint16_t types[NTYPES] = {
	FERRY__WIRE_MSG_RUNTIME_CONNECT, FERRY__WIRE_MSG_LEASE_REQUEST,
	FERRY__WIRE_MSG_LEASE_RETURN,	 FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY,
	FERRY__WIRE_MSG_WORKER_BLOCKED,	 FERRY__WIRE_MSG_LEASE_DETACH,
	FERRY__WIRE_MSG_BUNDLE_PREPARE,	 FERRY__WIRE_MSG_BUNDLE_COMMIT,
	FERRY__WIRE_MSG_BUNDLE_CANCEL,	 FERRY__WIRE_MSG_BUNDLE_RETURN,
	FERRY__WIRE_MSG_OBJECTS_FREE,	 FERRY__WIRE_MSG_NODE_INFO,
	FERRY__WIRE_MSG_TIMELINE,	 FERRY__WIRE_MSG_PLASMA_STATS,
	FERRY__WIRE_MSG_PLASMA_LIST,
};

static void check_string(const char *s, size_t max)
{
	if (s && strnlen(s, max) >= max)
		abort();
}

static void check_connect(const struct ferry__rt_connect *c)
{
	if (c->kind != FERRY__WIRE_PEER_KIND_DRIVER && c->kind != FERRY__WIRE_PEER_KIND_WORKER &&
	    c->kind != FERRY__WIRE_PEER_KIND_CLI)
		abort();
	if (ferry_id_is_nil(c->id.bytes, sizeof(c->id.bytes)))
		abort();
	if (c->secret_len > FERRY__RT_SECRET_BYTES || (!c->secret) != (!c->secret_len))
		abort();
	check_string(c->listen_path, FERRY__RT_PATH_MAX);
	if (c->kind == FERRY__WIRE_PEER_KIND_WORKER && (!c->listen_path || !*c->listen_path))
		abort();
}

/* Resources named once each, with amounts > 0 that fit. */
static void check_res(const struct ferry__res *res, uint32_t n)
{
	if (n > FERRY__RT_REQ_RES_MAX)
		abort();
	for (uint32_t i = 0; i < n; i++) {
		if (res[i].amount <= 0 || res[i].amount >= FERRY__RES_AMOUNT_MAX ||
		    !res[i].name[0] || strnlen(res[i].name, sizeof(res[i].name)) > 63)
			abort();
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(res[i].name, res[j].name))
				abort();
	}
}

static void check_lease(const struct ferry__rt_lease_request *q)
{
	if (ferry_id_is_nil(q->job.bytes, sizeof(q->job.bytes)))
		abort();
	check_string(q->code_path, FERRY__RT_CODE_PATH_MAX);
	if (q->code_hash_len > FERRY__RT_CODE_HASH_MAX)
		abort();
	if (!ferry_id_is_nil(q->pg.bytes, sizeof(q->pg.bytes)) &&
	    (q->bundle_index < -1 || q->bundle_index >= FERRY__RT_PG_BUNDLES_MAX))
		abort();
	check_res(q->res, q->nres);
	/* Placement (node/rt_sched.c trusts these). */
	if (q->strategy > FERRY__RT_STRATEGY_NODE_AFFINITY || q->ninputs > FERRY__RT_REQ_INPUTS_MAX)
		abort();
	if (q->strategy == FERRY__RT_STRATEGY_NODE_AFFINITY &&
	    ferry_id_is_nil(q->affinity.bytes, sizeof(q->affinity.bytes)))
		abort();
	for (uint32_t i = 0; i < q->ninputs; i++)
		if (!q->inputs[i].bytes ||
		    ferry_id_is_nil(q->inputs[i].node.bytes, sizeof(q->inputs[i].node.bytes)))
			abort();
}

/* A bundle message names a group and an index in range; a prepare reserves something. */
static void check_bundle(uint16_t type, const struct ferry__rt_bundle_msg *b)
{
	if (ferry_id_is_nil(b->pg.bytes, sizeof(b->pg.bytes)) ||
	    b->index >= FERRY__RT_PG_BUNDLES_MAX)
		abort();
	if ((type == FERRY__WIRE_MSG_BUNDLE_PREPARE) != (b->nres > 0))
		abort();
	check_res(b->res, b->nres);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ferry__rt_msg m;
	char why[160];
	uint32_t nonzero = 0; /* IDs read from an ObjectsFree that end in a nonzero byte */
	uint8_t *copy, kind;
	size_t len;
	int r;

	copy = fuzz_typed_payload(data, size, &kind, &len);
	if (!copy)
		return 0;
	r = ferry__rt_decode(types[kind % NTYPES], copy, len, &m, why, sizeof(why));
	if (r != 0 && r != -EPROTO && r != -EINVAL && r != -ENAMETOOLONG)
		abort();
	if (r < 0 && !why[0])
		abort(); /* every refusal says why */
	if (r == 0 && m.type == FERRY__WIRE_MSG_RUNTIME_CONNECT)
		check_connect(&m.connect);
	if (r == 0 && m.type == FERRY__WIRE_MSG_LEASE_REQUEST)
		check_lease(&m.lease);
	if (r == 0 && m.type >= FERRY__WIRE_MSG_BUNDLE_PREPARE &&
	    m.type <= FERRY__WIRE_MSG_BUNDLE_RETURN)
		check_bundle(m.type, &m.bundle);
	if (r == 0 && m.type == FERRY__WIRE_MSG_LEASE_DETACH &&
	    ferry_id_is_nil(m.detach.actor.bytes, sizeof(m.detach.actor.bytes)))
		abort();
	/* Every ID an ObjectsFree counts lies inside the payload (ASan sees a read past it). */
	for (uint32_t i = 0; r == 0 && m.type == FERRY__WIRE_MSG_OBJECTS_FREE && i < m.free.count;
	     i++)
		nonzero += ferry__wire_objects_free_object_ids_at(m.free.v, i).bytes[19] != 0;
	if (r == 0 && m.type == FERRY__WIRE_MSG_OBJECTS_FREE && nonzero > m.free.count)
		abort();
	if (r == 0 && m.type == FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY &&
	    (m.assign_reply.status > 0 || m.assign_reply.status < -4095))
		abort();
	free(copy);
	return 0;
}

#ifdef FUZZ_NODE_RT_REPLAY

/* ---- seeds ---- */

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
	static const uint8_t secret[32] = {1, 2, 3};
	struct ferry__wire_runtime_resource res[3] = {
		{.name = "CPU", .amount = 1.0},
		{.name = "GPU", .amount = 0.5},
		{.name = "tpu", .amount = 2.0},
	};
	struct ferry__wire_runtime_connect c = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						.kind = FERRY__WIRE_PEER_KIND_DRIVER,
						.pid = 42};
	struct ferry__wire_lease_request q = {.request_id = 7,
					      .code_path = "/jobs/lib.so",
					      .code_hash = secret,
					      .code_hash_count = 32,
					      .resources = res,
					      .resources_count = 3};
	struct ferry__wire_lease_input inputs[2] = {{.bytes = 4u << 20}, {.bytes = 1}};
	struct ferry__wire_worker_assign_reply a = {.status = -ENOENT,
						    .message = "cannot load lib.so"};
	int bad = 0;

	memset(c.id.bytes, 0x11, sizeof(c.id.bytes));
	memset(c.job.bytes, 0x22, sizeof(c.job.bytes));
	memset(q.job.bytes, 0x22, sizeof(q.job.bytes));
	memset(a.job.bytes, 0x22, sizeof(a.job.bytes));
	bad |= seed(dir, "seed-connect-driver", 0, &b, ferry__wire_runtime_connect_build(&b, &c));
	c.kind = FERRY__WIRE_PEER_KIND_WORKER;
	c.secret = secret;
	c.secret_count = sizeof(secret);
	c.listen_path = "/tmp/ferry-node.sock.rt.w42";
	bad |= seed(dir, "seed-connect-worker", 0, &b, ferry__wire_runtime_connect_build(&b, &c));
	bad |= seed(dir, "seed-lease-request", 1, &b, ferry__wire_lease_request_build(&b, &q));
	/* Placed by affinity, with the inputs' locations (runtime.fbs LeaseRequest). */
	q.placed = true;
	q.strategy = FERRY__WIRE_LEASE_STRATEGY_NODE_AFFINITY;
	memset(q.affinity_node.bytes, 0x33, sizeof(q.affinity_node.bytes));
	q.affinity_soft = true;
	memset(inputs[0].node_id.bytes, 0x33, sizeof(inputs[0].node_id.bytes));
	memset(inputs[1].node_id.bytes, 0x44, sizeof(inputs[1].node_id.bytes));
	q.inputs = inputs;
	q.inputs_count = 2;
	bad |= seed(dir, "seed-lease-request-placement", 1, &b,
		    ferry__wire_lease_request_build(&b, &q));
	q.strategy = FERRY__WIRE_LEASE_STRATEGY_SPREAD;
	q.placed = false;
	q.inputs = NULL;
	q.inputs_count = 0;
	res[2].amount = -1;
	bad |= seed(dir, "seed-lease-request-negative", 1, &b,
		    ferry__wire_lease_request_build(&b, &q));
	bad |= seed(dir, "seed-lease-return", 2, &b,
		    ferry__wire_lease_return_build(
			    &b, &(struct ferry__wire_lease_return){.lease_id = 3}));
	bad |= seed(dir, "seed-assign-reply", 3, &b, ferry__wire_worker_assign_reply_build(&b, &a));
	bad |= seed(dir, "seed-worker-blocked", 4, &b,
		    ferry__wire_worker_blocked_build(
			    &b, &(struct ferry__wire_worker_blocked){
					.blocked = true, .task_id = {{9, 1}}, .wait_id = 1}));
	bad |= seed(
		dir, "seed-lease-detach", 5, &b,
		ferry__wire_lease_detach_build(&b, &(struct ferry__wire_lease_detach){
							   .lease_id = 3, .actor_id = {{7, 7}}}));
	/* Placement groups: a lease into a bundle, the four bundle messages, a bad index. */
	res[2].amount = 2.0;
	memset(q.pg_id.bytes, 0x33, sizeof(q.pg_id.bytes));
	q.bundle_index = -1;
	bad |= seed(dir, "seed-lease-request-pg", 1, &b, ferry__wire_lease_request_build(&b, &q));
	{
		struct ferry__wire_bundle_prepare p = {.request_id = 1,
						       .pg_id = {{0x33, 1}},
						       .bundle_index = 2,
						       .resources = res,
						       .resources_count = 3};
		struct ferry__wire_bundle_commit bc = {
			.request_id = 2, .pg_id = {{0x33, 1}}, .bundle_index = 2};

		bad |= seed(dir, "seed-bundle-prepare", 6, &b,
			    ferry__wire_bundle_prepare_build(&b, &p));
		bad |= seed(dir, "seed-bundle-commit", 7, &b,
			    ferry__wire_bundle_commit_build(&b, &bc));
		bad |= seed(dir, "seed-bundle-cancel", 8, &b,
			    ferry__wire_bundle_cancel_build(
				    &b, &(struct ferry__wire_bundle_cancel){.request_id = 3,
									    .pg_id = {{0x33}},
									    .bundle_index = 0}));
		bad |= seed(dir, "seed-bundle-return", 9, &b,
			    ferry__wire_bundle_return_build(
				    &b, &(struct ferry__wire_bundle_return){.request_id = 4,
									    .pg_id = {{0x33}},
									    .bundle_index = 1}));
		p.bundle_index = 5000;
		bad |= seed(dir, "seed-bundle-prepare-bad-index", 6, &b,
			    ferry__wire_bundle_prepare_build(&b, &p));
	}
	{
		struct ferry_object_id ids[3] = {{{1}}, {{2}}, {{3}}};

		bad |= seed(dir, "seed-objects-free", 10, &b,
			    ferry__wire_objects_free_build(
				    &b, &(struct ferry__wire_objects_free){.object_ids = ids,
									   .object_ids_count = 3}));
	}
	/* An operator's tool (ferry status, list objects, timeline): a Cli peer and its queries. */
	c = (struct ferry__wire_runtime_connect){.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						 .kind = FERRY__WIRE_PEER_KIND_CLI,
						 .pid = 7};
	memset(c.id.bytes, 0x44, sizeof(c.id.bytes));
	bad |= seed(dir, "seed-connect-cli", 0, &b, ferry__wire_runtime_connect_build(&b, &c));
	bad |= seed(dir, "seed-node-info", 11, &b,
		    ferry__wire_node_info_build(&b, &(struct ferry__wire_node_info){.seq = 1}));
	bad |= seed(dir, "seed-timeline", 12, &b,
		    ferry__wire_timeline_build(
			    &b, &(struct ferry__wire_timeline){.seq = 2, .max_events = 100}));
	bad |= seed(
		dir, "seed-plasma-stats", 13, &b,
		ferry__wire_plasma_stats_build(&b, &(struct ferry__wire_plasma_stats){.seq = 3}));
	bad |= seed(dir, "seed-plasma-list", 14, &b,
		    ferry__wire_plasma_list_build(
			    &b, &(struct ferry__wire_plasma_list){.seq = 4, .max_objects = 1000}));
	ferry__fb_builder_fini(&b);
	return bad;
}

#endif
