/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decoding the runtime socket's messages from untrusted bytes (rt_wire.h): the frame is verified
 * (ferry__wire_verify), then every field the node uses is range-checked here, once, so that the
 * pool and the lease code can trust what they are given.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/wire.h"
#include "node/rt_wire.h"

static int fail(char *why, size_t size, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *why, size_t size, int err, const char *fmt, ...)
{
	va_list ap;

	if (why && size) {
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return err;
}

/* A string field: absent (NULL), or @len bytes without a NUL inside, shorter than @max. */
static int check_string(const char *s, uint32_t len, size_t max, const char *what, char *why,
			size_t size)
{
	if (!s)
		return 0;
	if (memchr(s, '\0', len))
		return fail(why, size, -EINVAL, "%s holds a NUL byte", what);
	if (len >= max)
		return fail(why, size, -ENAMETOOLONG, "%s is %u bytes, at most %zu", what, len,
			    max - 1);
	return 0;
}

static int decode_connect(const void *payload, struct ferry__rt_connect *c, char *why, size_t size)
{
	struct ferry__wire_runtime_connect_view v =
		ferry__wire_runtime_connect_root_verified(payload);
	struct ferry__wire_unique_id id = ferry__wire_runtime_connect_id(v);
	struct ferry__wire_unique_id job = ferry__wire_runtime_connect_job(v);
	int r;

	memset(c, 0, sizeof(*c));
	c->protocol_version = ferry__wire_runtime_connect_protocol_version(v);
	c->kind = ferry__wire_runtime_connect_kind(v);
	memcpy(c->id.bytes, id.bytes, sizeof(c->id.bytes));
	memcpy(c->job.bytes, job.bytes, sizeof(c->job.bytes));
	c->pid = ferry__wire_runtime_connect_pid(v);
	c->secret = ferry__wire_runtime_connect_secret_data(v);
	c->secret_len = ferry__wire_runtime_connect_secret_count(v);
	c->listen_path = ferry__wire_runtime_connect_listen_path(v);
	c->listen_port = ferry__wire_runtime_connect_listen_port(v);
	if (c->kind != FERRY__WIRE_PEER_KIND_DRIVER && c->kind != FERRY__WIRE_PEER_KIND_WORKER &&
	    c->kind != FERRY__WIRE_PEER_KIND_CLI)
		return fail(why, size, -EINVAL, "peer kind %u is not Driver, Worker or Cli",
			    c->kind);
	if (ferry_id_is_nil(c->id.bytes, sizeof(c->id.bytes)))
		return fail(why, size, -EINVAL, "no id");
	if (c->secret_len > FERRY__RT_SECRET_BYTES)
		return fail(why, size, -EINVAL, "a secret of %zu bytes", c->secret_len);
	if (!c->secret_len)
		c->secret = NULL;
	r = check_string(c->listen_path, ferry__wire_runtime_connect_listen_path_len(v),
			 FERRY__RT_PATH_MAX, "listen_path", why, size);
	if (r < 0)
		return r;
	if (c->kind == FERRY__WIRE_PEER_KIND_DRIVER &&
	    ferry_id_is_nil(c->job.bytes, sizeof(c->job.bytes)))
		return fail(why, size, -EINVAL, "a driver without a job");
	if (c->kind == FERRY__WIRE_PEER_KIND_WORKER && (!c->listen_path || !*c->listen_path))
		return fail(why, size, -EINVAL, "a worker without a listen_path");
	return 0;
}

/* One RuntimeResource into @out: a good name, a finite amount > 0 that fits. */
static int decode_resource(struct ferry__wire_runtime_resource_view rv, struct ferry__res *out,
			   char *why, size_t size)
{
	const char *name = ferry__wire_runtime_resource_name(rv);
	uint32_t len = ferry__wire_runtime_resource_name_len(rv);
	double amount = ferry__wire_runtime_resource_amount(rv);
	double scaled;

	if (!name || !len || len > FERRY__RES_NAME_MAX)
		return fail(why, size, -EINVAL, "a resource name of %u bytes", len);
	/* The rule of node/resources.h: names are A-Z a-z 0-9 _ . : - */
	for (uint32_t i = 0; i < len; i++)
		if (!name[i] || (!isalnum((unsigned char)name[i]) && !strchr("_.:-", name[i])))
			return fail(why, size, -EINVAL, "a resource name with byte 0x%02x",
				    (unsigned char)name[i]);
	scaled = amount * FERRY_GCS_RESOURCE_UNIT;
	if (!isfinite(amount) || amount < 0 || scaled >= (double)FERRY__RES_AMOUNT_MAX)
		return fail(why, size, -EINVAL, "resource %s: amount %g", name, amount);
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->amount = (int64_t)(scaled + 0.5); /* >= 0: rounds to nearest, without libm */
	return 0;
}

static int decode_resources(struct ferry__wire_lease_request_view v,
			    struct ferry__rt_lease_request *q, char *why, size_t size)
{
	uint32_t n = ferry__wire_lease_request_resources_count(v);

	if (n > FERRY__RT_REQ_RES_MAX)
		return fail(why, size, -EINVAL, "%u resources, at most %d", n,
			    FERRY__RT_REQ_RES_MAX);
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__res *r = &q->res[q->nres];
		int ret =
			decode_resource(ferry__wire_lease_request_resources_at(v, i), r, why, size);

		if (ret < 0)
			return ret;
		for (uint32_t j = 0; j < q->nres; j++)
			if (!strcmp(q->res[j].name, r->name))
				return fail(why, size, -EINVAL, "resource %s named twice", r->name);
		if (r->amount > 0) /* zero asks for nothing: dropped */
			q->nres++;
	}
	return 0;
}

/* The group's bundle a LeaseRequest names: none (nil), or an index >= -1. */
static int decode_lease_pg(struct ferry__wire_lease_request_view v,
			   struct ferry__rt_lease_request *q, char *why, size_t size)
{
	struct ferry__wire_unique_id pg = ferry__wire_lease_request_pg_id(v);

	memcpy(q->pg.bytes, pg.bytes, sizeof(q->pg.bytes));
	q->bundle_index = ferry__wire_lease_request_bundle_index(v);
	if (ferry_id_is_nil(q->pg.bytes, sizeof(q->pg.bytes))) {
		q->bundle_index = 0;
		return 0;
	}
	if (q->bundle_index < -1 || q->bundle_index >= FERRY__RT_PG_BUNDLES_MAX)
		return fail(why, size, -EINVAL, "bundle index %d", q->bundle_index);
	return 0;
}

/* The placement fields (node/rt_sched.c reads them). */
static int decode_placement(struct ferry__wire_lease_request_view v,
			    struct ferry__rt_lease_request *q, char *why, size_t size)
{
	struct ferry__wire_unique_id aff = ferry__wire_lease_request_affinity_node(v);
	uint32_t n = ferry__wire_lease_request_inputs_count(v);

	q->placed = ferry__wire_lease_request_placed(v);
	q->strategy = ferry__wire_lease_request_strategy(v);
	q->affinity_soft = ferry__wire_lease_request_affinity_soft(v);
	memcpy(q->affinity.bytes, aff.bytes, sizeof(q->affinity.bytes));
	q->ninputs = 0;
	if (q->strategy > FERRY__RT_STRATEGY_NODE_AFFINITY)
		return fail(why, size, -EINVAL, "strategy %u", q->strategy);
	if (q->strategy == FERRY__RT_STRATEGY_NODE_AFFINITY &&
	    ferry_id_is_nil(q->affinity.bytes, sizeof(q->affinity.bytes)))
		return fail(why, size, -EINVAL, "NODE_AFFINITY to no node");
	if (n > FERRY__RT_REQ_INPUTS_MAX)
		return fail(why, size, -EINVAL, "%u inputs (at most %u)", n,
			    FERRY__RT_REQ_INPUTS_MAX);
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_lease_input_view in = ferry__wire_lease_request_inputs_at(v, i);
		struct ferry__wire_unique_id id = ferry__wire_lease_input_node_id(in);
		struct ferry__rt_input *o = &q->inputs[q->ninputs];

		memcpy(o->node.bytes, id.bytes, sizeof(o->node.bytes));
		o->bytes = ferry__wire_lease_input_bytes(in);
		if (ferry_id_is_nil(o->node.bytes, sizeof(o->node.bytes)))
			return fail(why, size, -EINVAL, "input %u on no node", i);
		q->ninputs += o->bytes > 0;
	}
	return 0;
}

static int decode_lease(const void *payload, struct ferry__rt_lease_request *q, char *why,
			size_t size)
{
	struct ferry__wire_lease_request_view v = ferry__wire_lease_request_root_verified(payload);
	struct ferry__wire_unique_id job = ferry__wire_lease_request_job(v);
	int r;

	q->request_id = ferry__wire_lease_request_request_id(v);
	memcpy(q->job.bytes, job.bytes, sizeof(q->job.bytes));
	q->code_path = ferry__wire_lease_request_code_path(v);
	q->code_hash = ferry__wire_lease_request_code_hash_data(v);
	q->code_hash_len = ferry__wire_lease_request_code_hash_count(v);
	q->nres = 0;
	if (ferry_id_is_nil(q->job.bytes, sizeof(q->job.bytes)))
		return fail(why, size, -EINVAL, "no job");
	r = check_string(q->code_path, ferry__wire_lease_request_code_path_len(v),
			 FERRY__RT_CODE_PATH_MAX, "code_path", why, size);
	if (r < 0)
		return r;
	if (q->code_path && !*q->code_path)
		q->code_path = NULL;
	if (q->code_hash_len > FERRY__RT_CODE_HASH_MAX)
		return fail(why, size, -EINVAL, "a code hash of %zu bytes", q->code_hash_len);
	if (!q->code_hash_len)
		q->code_hash = NULL;
	r = decode_lease_pg(v, q, why, size);
	if (r == 0)
		r = decode_resources(v, q, why, size);
	return r < 0 ? r : decode_placement(v, q, why, size);
}

/* The fields every Bundle* message has (the four tables share their layout). */
#define DECODE_BUNDLE_REF(kind, payload, b)                                                        \
	do {                                                                                       \
		struct ferry__wire_##kind##_view v_ = ferry__wire_##kind##_root_verified(payload); \
		struct ferry__wire_unique_id pg_ = ferry__wire_##kind##_pg_id(v_);                 \
		(b)->request_id = ferry__wire_##kind##_request_id(v_);                             \
		memcpy((b)->pg.bytes, pg_.bytes, sizeof((b)->pg.bytes));                           \
		(b)->index = ferry__wire_##kind##_bundle_index(v_);                                \
	} while (0)

static int decode_bundle(uint16_t type, const void *payload, struct ferry__rt_bundle_msg *b,
			 char *why, size_t size)
{
	memset(b, 0, sizeof(*b));
	if (type == FERRY__WIRE_MSG_BUNDLE_PREPARE)
		DECODE_BUNDLE_REF(bundle_prepare, payload, b);
	else if (type == FERRY__WIRE_MSG_BUNDLE_COMMIT)
		DECODE_BUNDLE_REF(bundle_commit, payload, b);
	else if (type == FERRY__WIRE_MSG_BUNDLE_CANCEL)
		DECODE_BUNDLE_REF(bundle_cancel, payload, b);
	else
		DECODE_BUNDLE_REF(bundle_return, payload, b);
	if (ferry_id_is_nil(b->pg.bytes, sizeof(b->pg.bytes)))
		return fail(why, size, -EINVAL, "a bundle of no placement group");
	if (b->index >= FERRY__RT_PG_BUNDLES_MAX)
		return fail(why, size, -EINVAL, "bundle index %u", b->index);
	if (type != FERRY__WIRE_MSG_BUNDLE_PREPARE)
		return 0;
	struct ferry__wire_bundle_prepare_view v =
		ferry__wire_bundle_prepare_root_verified(payload);
	uint32_t n = ferry__wire_bundle_prepare_resources_count(v);

	if (n > FERRY__RT_REQ_RES_MAX)
		return fail(why, size, -EINVAL, "%u resources, at most %d", n,
			    FERRY__RT_REQ_RES_MAX);
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__res *r = &b->res[b->nres];
		int ret = decode_resource(ferry__wire_bundle_prepare_resources_at(v, i), r, why,
					  size);

		if (ret < 0)
			return ret;
		for (uint32_t j = 0; j < b->nres; j++)
			if (!strcmp(b->res[j].name, r->name))
				return fail(why, size, -EINVAL, "resource %s named twice", r->name);
		if (r->amount > 0)
			b->nres++;
	}
	if (!b->nres)
		return fail(why, size, -EINVAL, "a bundle that reserves nothing");
	return 0;
}

static int decode_assign_reply(const void *payload, struct ferry__rt_assign_reply *a, char *why,
			       size_t size)
{
	struct ferry__wire_worker_assign_reply_view v =
		ferry__wire_worker_assign_reply_root_verified(payload);
	struct ferry__wire_unique_id job = ferry__wire_worker_assign_reply_job(v);
	const char *msg = ferry__wire_worker_assign_reply_message(v);
	uint32_t len = ferry__wire_worker_assign_reply_message_len(v);

	memcpy(a->job.bytes, job.bytes, sizeof(a->job.bytes));
	a->status = ferry__wire_worker_assign_reply_status(v);
	a->message = msg;
	if (a->status > 0 || a->status < -4095)
		return fail(why, size, -EINVAL, "status %d is not 0 or -errno", a->status);
	/* A message is for people: one with a NUL in it is cut there, not refused. */
	if (msg && memchr(msg, '\0', len) == msg)
		a->message = NULL;
	return 0;
}

static int decode_detach(const void *payload, struct ferry__rt_detach *d, char *why, size_t size)
{
	struct ferry__wire_lease_detach_view v = ferry__wire_lease_detach_root_verified(payload);
	struct ferry__wire_unique_id id = ferry__wire_lease_detach_actor_id(v);

	d->lease_id = ferry__wire_lease_detach_lease_id(v);
	memcpy(d->actor.bytes, id.bytes, sizeof(d->actor.bytes));
	if (ferry_id_is_nil(d->actor.bytes, sizeof(d->actor.bytes)))
		return fail(why, size, -EINVAL, "LeaseDetach with no actor_id");
	return 0;
}

int ferry__rt_decode(uint16_t type, const void *payload, size_t len, struct ferry__rt_msg *out,
		     char *why, size_t why_size)
{
	if (why && why_size)
		why[0] = '\0';
	switch (type) {
	case FERRY__WIRE_MSG_RUNTIME_CONNECT:
	case FERRY__WIRE_MSG_LEASE_REQUEST:
	case FERRY__WIRE_MSG_LEASE_RETURN:
	case FERRY__WIRE_MSG_LEASE_DETACH:
	case FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY:
	case FERRY__WIRE_MSG_WORKER_BLOCKED:
	case FERRY__WIRE_MSG_BUNDLE_PREPARE:
	case FERRY__WIRE_MSG_BUNDLE_COMMIT:
	case FERRY__WIRE_MSG_BUNDLE_CANCEL:
	case FERRY__WIRE_MSG_BUNDLE_RETURN:
	case FERRY__WIRE_MSG_OBJECTS_FREE:
	case FERRY__WIRE_MSG_NODE_INFO:
	case FERRY__WIRE_MSG_TIMELINE:
	case FERRY__WIRE_MSG_PLASMA_STATS:
	case FERRY__WIRE_MSG_PLASMA_LIST:
		break;
	default:
		return fail(why, why_size, -EPROTO, "%s (type %u) is not a message for the node",
			    ferry__wire_message_name(type), type);
	}
	if (!payload || ferry__wire_verify(type, payload, len) < 0)
		return fail(why, why_size, -EPROTO, "a malformed %s",
			    ferry__wire_message_name(type));
	out->type = type;
	switch (type) {
	case FERRY__WIRE_MSG_RUNTIME_CONNECT:
		return decode_connect(payload, &out->connect, why, why_size);
	case FERRY__WIRE_MSG_LEASE_REQUEST:
		return decode_lease(payload, &out->lease, why, why_size);
	case FERRY__WIRE_MSG_LEASE_RETURN: {
		struct ferry__wire_lease_return_view v =
			ferry__wire_lease_return_root_verified(payload);

		out->ret.lease_id = ferry__wire_lease_return_lease_id(v);
		out->ret.busy = ferry__wire_lease_return_busy(v);
		out->ret.tasks = ferry__wire_lease_return_tasks(v);
		out->ret.busy_us = ferry__wire_lease_return_busy_us(v);
		return 0;
	}
	case FERRY__WIRE_MSG_WORKER_BLOCKED: {
		struct ferry__wire_worker_blocked_view v =
			ferry__wire_worker_blocked_root_verified(payload);
		struct ferry__wire_unique_id task = ferry__wire_worker_blocked_task_id(v);

		out->blocked.blocked = ferry__wire_worker_blocked_blocked(v);
		out->blocked.wait_id = ferry__wire_worker_blocked_wait_id(v);
		memcpy(out->blocked.task.bytes, task.bytes, sizeof(task.bytes));
		return 0;
	}
	case FERRY__WIRE_MSG_LEASE_DETACH:
		return decode_detach(payload, &out->detach, why, why_size);
	case FERRY__WIRE_MSG_BUNDLE_PREPARE:
	case FERRY__WIRE_MSG_BUNDLE_COMMIT:
	case FERRY__WIRE_MSG_BUNDLE_CANCEL:
	case FERRY__WIRE_MSG_BUNDLE_RETURN:
		return decode_bundle(type, payload, &out->bundle, why, why_size);
	case FERRY__WIRE_MSG_OBJECTS_FREE:
		out->free.v = ferry__wire_objects_free_root_verified(payload);
		out->free.count = ferry__wire_objects_free_object_ids_count(out->free.v);
		return 0;
	case FERRY__WIRE_MSG_NODE_INFO:
		out->query.seq =
			ferry__wire_node_info_seq(ferry__wire_node_info_root_verified(payload));
		out->query.payload = payload;
		return 0;
	case FERRY__WIRE_MSG_TIMELINE: {
		struct ferry__wire_timeline_view v = ferry__wire_timeline_root_verified(payload);

		out->query.seq = ferry__wire_timeline_seq(v);
		out->query.max = ferry__wire_timeline_max_events(v);
		out->query.payload = payload;
		return 0;
	}
	case FERRY__WIRE_MSG_PLASMA_STATS:
		out->query.seq = ferry__wire_plasma_stats_seq(
			ferry__wire_plasma_stats_root_verified(payload));
		out->query.payload = payload;
		return 0;
	case FERRY__WIRE_MSG_PLASMA_LIST:
		/* The store's list reads its fields itself (its bounds are its own). */
		out->query.seq =
			ferry__wire_plasma_list_seq(ferry__wire_plasma_list_root_verified(payload));
		out->query.payload = payload;
		return 0;
	default:
		return decode_assign_reply(payload, &out->assign_reply, why, why_size);
	}
}
