/* SPDX-License-Identifier: Apache-2.0 */
/* ferry-sched's messages to and from plain structs, with the caps of sched/proto.h. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"
#include "sched/proto.h"

#define COMP "sched"

int ferry__sched_place_count(const void *payload, size_t len)
{
	struct ferry__wire_sched_place_view v = ferry__wire_sched_place_root_verified(payload);
	uint32_t n = ferry__wire_sched_place_items_count(v);

	(void)len;
	return n > FERRY__SCHED_BATCH_MAX ? -EPROTO : (int)n;
}

/* A RuntimeResource amount (units, a double) in fixed point, or -1 when it is not a positive
 * number that fits. */
static int64_t fixed_amount(double units)
{
	double scaled = units * FERRY__SCHED_UNIT;

	if (!(scaled >= 1) || !isfinite(scaled) || scaled >= (double)FERRY__RES_AMOUNT_MAX)
		return -1;
	return (int64_t)(scaled + 0.5); /* positive: rounds to nearest */
}

static int decode_resources(struct ferry__wire_sched_place_item_view iv,
			    struct ferry__sched_item *out)
{
	uint32_t n = ferry__wire_sched_place_item_resources_count(iv);
	int ret = 0;

	if (n > FERRY__SCHED_ITEM_RES_MAX)
		return -EPROTO;
	out->nres = n;
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_runtime_resource_view r =
			ferry__wire_sched_place_item_resources_at(iv, i);
		const char *name = ferry__wire_runtime_resource_name(r);
		uint32_t name_len = ferry__wire_runtime_resource_name_len(r);

		if (!name || name_len == 0 || name_len > FERRY__RES_NAME_MAX ||
		    strlen(name) != name_len)
			return -EPROTO;
		out->res_name[i] = name;
		out->res_amount[i] = fixed_amount(ferry__wire_runtime_resource_amount(r));
		if (out->res_amount[i] < 0)
			ret = -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(out->res_name[j], name))
				ret = -EINVAL;
	}
	return ret;
}

int ferry__sched_place_item(const void *payload, uint32_t i, struct ferry__sched_item *out)
{
	struct ferry__wire_sched_place_view v = ferry__wire_sched_place_root_verified(payload);
	struct ferry__wire_sched_place_item_view iv = ferry__wire_sched_place_items_at(v, i);
	struct ferry__wire_unique_id id;
	uint32_t ninputs;
	int ret;

	if (i >= ferry__wire_sched_place_items_count(v) || !iv.tab.buf)
		return -EPROTO;
	memset(out, 0, offsetof(struct ferry__sched_item, inputs));
	out->request_id = ferry__wire_sched_place_item_request_id(iv);
	id = ferry__wire_sched_place_item_origin(iv);
	memcpy(out->origin.bytes, id.bytes, sizeof(out->origin.bytes));
	id = ferry__wire_sched_place_item_affinity(iv);
	memcpy(out->affinity.bytes, id.bytes, sizeof(out->affinity.bytes));
	out->strategy = ferry__wire_sched_place_item_strategy(iv);
	out->soft = ferry__wire_sched_place_item_soft(iv);
	ret = decode_resources(iv, out);
	if (ret == -EPROTO)
		return ret;
	out->hops = ferry__wire_sched_place_item_hops(iv);
	out->from_group = ferry__wire_sched_place_item_from_group(iv);
	if (!out->from_group)
		out->from_group = "";
	else if (ferry__wire_sched_place_item_from_group_len(iv) > FERRY__SCHED_GROUP_NAME_MAX ||
		 strlen(out->from_group) != ferry__wire_sched_place_item_from_group_len(iv))
		return -EPROTO;
	if (out->hops > FERRY__SCHED_HOPS_MAX)
		return -EPROTO;
	ninputs = ferry__wire_sched_place_item_inputs_count(iv);
	if (ninputs > FERRY__SCHED_ITEM_INPUTS_MAX)
		ninputs = FERRY__SCHED_ITEM_INPUTS_MAX;
	out->ninputs = ninputs;
	for (uint32_t k = 0; k < ninputs; k++) {
		struct ferry__wire_sched_input_view in =
			ferry__wire_sched_place_item_inputs_at(iv, k);

		id = ferry__wire_sched_input_node(in);
		memcpy(out->inputs[k].node.bytes, id.bytes, sizeof(id.bytes));
		out->inputs[k].bytes = ferry__wire_sched_input_bytes(in);
	}
	if (out->strategy > FERRY__SCHED_NODE_AFFINITY)
		ret = -EINVAL;
	return ret;
}

int ferry__sched_place_check(const void *payload, size_t len)
{
	struct ferry__sched_item *item;
	int n, ret = 0;

	if (ferry__wire_verify(FERRY__WIRE_MSG_SCHED_PLACE, payload, len) < 0)
		return -EPROTO;
	n = ferry__sched_place_count(payload, len);
	if (n < 0)
		return n;
	item = ferry__malloc(sizeof(*item));
	if (!item)
		return -ENOMEM;
	for (int i = 0; i < n && ret == 0; i++) {
		ret = ferry__sched_place_item(payload, (uint32_t)i, item);
		if (ret == -EINVAL)
			ret = 0;
	}
	ferry__free(item);
	return ret;
}

/* One request as a SchedPlaceItem: its resources into @res (room for RES_MAX), its inputs into
 * @inputs (room for INPUTS_MAX). */
static int item_fill(const struct ferry__sched_place_req *q, const struct ferry_node_id *origin,
		     uint64_t id, struct ferry__wire_sched_place_item *it,
		     struct ferry__wire_runtime_resource *res,
		     struct ferry__wire_sched_input *inputs)
{
	size_t ninputs = q->ninputs < FERRY__SCHED_ITEM_INPUTS_MAX ? q->ninputs
								   : FERRY__SCHED_ITEM_INPUTS_MAX;

	if (q->nres > FERRY__SCHED_ITEM_RES_MAX || (q->nres && !q->res) ||
	    (ninputs && !q->inputs) || q->strategy < 0 || q->strategy > FERRY__SCHED_NODE_AFFINITY)
		return -EINVAL;
	memset(it, 0, sizeof(*it));
	it->request_id = id;
	memcpy(it->origin.bytes, origin->bytes, sizeof(it->origin.bytes));
	for (size_t i = 0; i < q->nres; i++) {
		if (q->res[i].amount <= 0 || !q->res[i].name[0])
			return -EINVAL;
		res[i].name = q->res[i].name;
		res[i].amount = (double)q->res[i].amount / FERRY__SCHED_UNIT;
	}
	it->resources = res;
	it->resources_count = q->nres;
	it->strategy = (uint8_t)q->strategy;
	memcpy(it->affinity.bytes, q->affinity.bytes, sizeof(it->affinity.bytes));
	it->soft = q->soft;
	for (size_t i = 0; i < ninputs; i++) {
		memcpy(inputs[i].node.bytes, q->inputs[i].node.bytes, sizeof(inputs[i].node.bytes));
		inputs[i].bytes = q->inputs[i].bytes;
	}
	it->inputs = inputs;
	it->inputs_count = ninputs;
	if (q->hops > FERRY__SCHED_HOPS_MAX ||
	    (q->from_group && strlen(q->from_group) > FERRY__SCHED_GROUP_NAME_MAX))
		return -EINVAL;
	it->hops = q->hops;
	it->from_group = q->from_group && q->from_group[0] ? q->from_group : NULL;
	return 0;
}

int ferry__sched_place_build(struct ferry__fb_builder *b, const struct ferry_node_id *origin,
			     const struct ferry__sched_place_req *const *items, const uint64_t *ids,
			     size_t n)
{
	struct ferry__wire_sched_place m = {0};
	struct ferry__wire_sched_place_item *it;
	struct ferry__wire_runtime_resource *res;
	struct ferry__wire_sched_input *inputs;
	int ret = -ENOMEM;

	if (n > FERRY__SCHED_BATCH_MAX)
		return -EINVAL;
	it = ferry__calloc(n ? n : 1, sizeof(*it));
	res = ferry__calloc((n ? n : 1) * FERRY__SCHED_ITEM_RES_MAX, sizeof(*res));
	inputs = ferry__calloc((n ? n : 1) * FERRY__SCHED_ITEM_INPUTS_MAX, sizeof(*inputs));
	if (!it || !res || !inputs)
		goto out;
	for (size_t i = 0; i < n; i++) {
		ret = item_fill(items[i], origin, ids[i], &it[i],
				res + i * FERRY__SCHED_ITEM_RES_MAX,
				inputs + i * FERRY__SCHED_ITEM_INPUTS_MAX);
		if (ret < 0)
			goto out;
	}
	m.items = it;
	m.items_count = n;
	ret = ferry__wire_sched_place_build(b, &m);
	ret = ret < 0 ? ret : 0;
out:
	ferry__free(inputs);
	ferry__free(res);
	ferry__free(it);
	return ret;
}

int ferry__sched_reply_build(struct ferry__fb_builder *b, const struct ferry__sched_result *results,
			     size_t n)
{
	struct ferry__wire_sched_place_reply m = {0};
	struct ferry__wire_sched_place_result *r = ferry__calloc(n ? n : 1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		r[i].request_id = results[i].request_id;
		r[i].status = results[i].status;
		memcpy(r[i].node.bytes, results[i].node.bytes, sizeof(r[i].node.bytes));
		r[i].node_address = results[i].status == 0 ? results[i].node_address : NULL;
		r[i].hops = results[i].hops;
	}
	m.items = r;
	m.items_count = n;
	ret = ferry__wire_sched_place_reply_build(b, &m);
	ferry__free(r);
	return ret < 0 ? ret : 0;
}

int ferry__sched_reply_count(const void *payload, size_t len)
{
	struct ferry__wire_sched_place_reply_view v =
		ferry__wire_sched_place_reply_root_verified(payload);
	uint32_t n = ferry__wire_sched_place_reply_items_count(v);

	(void)len;
	return n > FERRY__SCHED_BATCH_MAX ? -EPROTO : (int)n;
}

int ferry__sched_reply_result(const void *payload, uint32_t i, struct ferry__sched_result *out)
{
	struct ferry__wire_sched_place_reply_view v =
		ferry__wire_sched_place_reply_root_verified(payload);
	struct ferry__wire_sched_place_result_view rv =
		ferry__wire_sched_place_reply_items_at(v, i);
	struct ferry__wire_unique_id id;
	const char *addr;

	if (i >= ferry__wire_sched_place_reply_items_count(v) || !rv.tab.buf)
		return -EPROTO;
	memset(out, 0, sizeof(*out));
	out->request_id = ferry__wire_sched_place_result_request_id(rv);
	out->status = ferry__wire_sched_place_result_status(rv);
	out->hops = ferry__wire_sched_place_result_hops(rv);
	if (out->status > 0 || out->status < -4095)
		return -EPROTO;
	if (out->status < 0)
		return 0;
	id = ferry__wire_sched_place_result_node(rv);
	memcpy(out->node.bytes, id.bytes, sizeof(out->node.bytes));
	addr = ferry__wire_sched_place_result_node_address(rv);
	if (!addr ||
	    ferry__wire_sched_place_result_node_address_len(rv) > FERRY__SCHED_ADDRESS_MAX ||
	    strlen(addr) != ferry__wire_sched_place_result_node_address_len(rv))
		return -EPROTO;
	out->node_address = addr;
	return 0;
}

/* ---- SchedGroupLoad ---- */

/* A name of 1..@max bytes with no NUL inside, or NULL. */
static bool name_ok(const char *name, uint32_t len, uint32_t max)
{
	return name && len > 0 && len <= max && strlen(name) == len;
}

int ferry__sched_group_read(const void *payload, size_t len, struct ferry__sched_group_report *out)
{
	struct ferry__wire_sched_group_load_view v =
		ferry__wire_sched_group_load_root_verified(payload);
	uint32_t n = ferry__wire_sched_group_load_resources_count(v);

	(void)len;
	memset(out, 0, sizeof(*out));
	out->group = ferry__wire_sched_group_load_group(v);
	if (!name_ok(out->group, ferry__wire_sched_group_load_group_len(v),
		     FERRY__SCHED_GROUP_NAME_MAX) ||
	    n > FERRY__SCHED_KINDS)
		return -EPROTO;
	out->version = ferry__wire_sched_group_load_version(v);
	out->queue_len = ferry__wire_sched_group_load_queue_length(v);
	out->mean_task_ns = ferry__wire_sched_group_load_mean_task_ns(v);
	out->nmembers = ferry__wire_sched_group_load_members_count(v);
	if (out->nmembers > FERRY__SCHED_GROUP_MEMBERS_MAX)
		return -EPROTO;
	out->nres = n;
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_sched_group_resource_view r =
			ferry__wire_sched_group_load_resources_at(v, i);

		out->res_name[i] = ferry__wire_sched_group_resource_name(r);
		if (!r.tab.buf ||
		    !name_ok(out->res_name[i], ferry__wire_sched_group_resource_name_len(r),
			     FERRY__RES_NAME_MAX))
			return -EPROTO;
		out->total[i] = ferry__wire_sched_group_resource_total(r);
		out->avail[i] = ferry__wire_sched_group_resource_available(r);
		out->total_max[i] = ferry__wire_sched_group_resource_total_max(r);
		out->avail_max[i] = ferry__wire_sched_group_resource_available_max(r);
		if (out->avail[i] < 0 || out->avail_max[i] < 0 || out->avail[i] > out->total[i] ||
		    out->avail_max[i] > out->total_max[i] || out->total_max[i] > out->total[i])
			return -EPROTO;
	}
	return 0;
}

int ferry__sched_group_member(const void *payload, uint32_t i, struct ferry_node_id *out)
{
	struct ferry__wire_sched_group_load_view v =
		ferry__wire_sched_group_load_root_verified(payload);
	struct ferry__wire_unique_id id;

	if (i >= ferry__wire_sched_group_load_members_count(v))
		return -EPROTO;
	id = ferry__wire_sched_group_load_members_at(v, i);
	memcpy(out->bytes, id.bytes, sizeof(out->bytes));
	return 0;
}

int ferry__sched_group_check(const void *payload, size_t len)
{
	struct ferry__sched_group_report *r;
	struct ferry_node_id id;
	int ret;

	if (ferry__wire_verify(FERRY__WIRE_MSG_SCHED_GROUP_LOAD, payload, len) < 0)
		return -EPROTO;
	r = ferry__malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	ret = ferry__sched_group_read(payload, len, r);
	for (uint32_t i = 0; ret == 0 && i < r->nmembers; i++)
		ret = ferry__sched_group_member(payload, i, &id);
	ferry__free(r);
	return ret;
}

int ferry__sched_group_build(struct ferry__fb_builder *b, const char *group,
			     const struct ferry__sched_load *load, const char *const *kind_name,
			     const struct ferry_node_id *members, size_t n)
{
	struct ferry__wire_sched_group_load m = {0};
	struct ferry__wire_sched_group_resource *res;
	struct ferry__wire_unique_id *ids;
	int ret = -ENOMEM;

	if (!group || !group[0] || strlen(group) > FERRY__SCHED_GROUP_NAME_MAX ||
	    n > FERRY__SCHED_GROUP_MEMBERS_MAX)
		return -EINVAL;
	res = ferry__calloc(FERRY__SCHED_KINDS, sizeof(*res));
	ids = ferry__calloc(n ? n : 1, sizeof(*ids));
	if (!res || !ids)
		goto out;
	for (uint32_t k = 0; k < FERRY__SCHED_KINDS; k++) {
		if (!kind_name[k] || load->total[k] <= 0)
			continue;
		res[m.resources_count].name = kind_name[k];
		res[m.resources_count].total = load->total[k];
		res[m.resources_count].available = load->avail[k];
		res[m.resources_count].total_max = load->total_max[k];
		res[m.resources_count].available_max = load->avail_max[k];
		m.resources_count++;
	}
	for (size_t i = 0; i < n; i++)
		memcpy(ids[i].bytes, members[i].bytes, sizeof(ids[i].bytes));
	m.group = group;
	m.version = load->version;
	m.resources = res;
	m.queue_length = load->queue_len;
	m.mean_task_ns = load->mean_task_ns;
	m.members = ids;
	m.members_count = n;
	ret = ferry__wire_sched_group_load_build(b, &m);
	ret = ret < 0 ? ret : 0;
out:
	ferry__free(ids);
	ferry__free(res);
	return ret;
}
