/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GcsRecords of a node's liveness: the heartbeat and the load report (schema/gcs.fbs
 * GcsHeartbeat, GcsNodeLoad). Both are requests only: the server answers them from memory
 * (gcs/server_load.c) and never logs them. gcs/ops_fb.c routes these two types here.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "gcs/ops_fb.h"

/* ---- encoding ---- */

static void fill_heartbeat(const struct ferry__gcs_heartbeat *hb,
			   struct ferry__wire_gcs_heartbeat *m)
{
	TO_WIRE_ID(m->id, hb->id);
	m->time_ms = hb->time_ms;
	m->avail_cpu = hb->avail_cpu;
	m->avail_gpu = hb->avail_gpu;
	m->avail_memory_bytes = hb->avail_memory_bytes;
	m->queue_length = hb->queue_length;
}

/* @l's resources as wire tables in *@res (NULL when it has none; the caller frees it). */
static int fill_load(const struct ferry_gcs_node_load *l, struct ferry__wire_gcs_node_load *m,
		     struct ferry__wire_gcs_resource_load **res)
{
	TO_WIRE_ID(m->id, l->id);
	m->version = l->version;
	m->queue_length = l->queue_length;
	m->mean_task_us = l->mean_task_us;
	m->workers_idle = l->workers_idle;
	m->workers_leased = l->workers_leased;
	m->workers_starting = l->workers_starting;
	if (!l->nresources)
		return 0;
	*res = ferry__calloc(l->nresources, sizeof(**res));
	if (!*res)
		return -ENOMEM;
	for (uint32_t i = 0; i < l->nresources; i++)
		(*res)[i] = (struct ferry__wire_gcs_resource_load){
			ferry__gcs_fb_text(l->resources[i].name), l->resources[i].total,
			l->resources[i].available};
	m->resources = *res;
	m->resources_count = l->nresources;
	return 0;
}

void ferry__gcs_op_encode_beat_fb(const struct ferry__gcs_op *op,
				  struct ferry__wire_gcs_record *rec, struct ferry__gcs_writer *w)
{
	struct ferry__wire_gcs_heartbeat hb = {0};
	struct ferry__wire_gcs_node_load load = {0};
	struct ferry__wire_gcs_resource_load *res = NULL;

	if (op->type == FERRY__GCS_OP_NODE_HEARTBEAT) {
		fill_heartbeat(&op->heartbeat, &hb);
		rec->heartbeat = &hb;
	} else if (fill_load(&op->load, &load, &res) < 0) {
		w->err = w->err ? w->err : -ENOMEM;
	} else {
		rec->load = &load;
	}
	if (!w->err)
		ferry__gcs_record_build(rec, w);
	ferry__free(res);
}

/* ---- decoding ---- */

static int get_heartbeat(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_heartbeat *hb)
{
	struct ferry__wire_gcs_heartbeat_view v;

	if (!ferry__wire_gcs_record_has_heartbeat(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_heartbeat(rv);
	FROM_WIRE_ID(hb->id, ferry__wire_gcs_heartbeat_id(v));
	hb->time_ms = ferry__wire_gcs_heartbeat_time_ms(v);
	hb->avail_cpu = ferry__wire_gcs_heartbeat_avail_cpu(v);
	hb->avail_gpu = ferry__wire_gcs_heartbeat_avail_gpu(v);
	hb->avail_memory_bytes = ferry__wire_gcs_heartbeat_avail_memory_bytes(v);
	hb->queue_length = ferry__wire_gcs_heartbeat_queue_length(v);
	return 0;
}

/* One resource; a negative amount is refused here, so every decoded amount is >= 0. */
static int get_resource(struct ferry__wire_gcs_resource_load_view v,
			struct ferry_gcs_resource_load *r)
{
	r->total = ferry__wire_gcs_resource_load_total(v);
	r->available = ferry__wire_gcs_resource_load_available(v);
	if (r->total < 0 || r->available < 0)
		return -EPROTO;
	return ferry__gcs_fb_text_get(ferry__wire_gcs_resource_load_name(v),
				      ferry__wire_gcs_resource_load_name_len(v),
				      FERRY__GCS_NAME_MAX, &r->name);
}

static int get_load(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry_gcs_node_load *l = &op->load;
	struct ferry__wire_gcs_node_load_view v;
	struct ferry_gcs_resource_load *res;
	int ret = 0;

	if (!ferry__wire_gcs_record_has_load(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_load(rv);
	FROM_WIRE_ID(l->id, ferry__wire_gcs_node_load_id(v));
	l->version = ferry__wire_gcs_node_load_version(v);
	l->queue_length = ferry__wire_gcs_node_load_queue_length(v);
	l->mean_task_us = ferry__wire_gcs_node_load_mean_task_us(v);
	l->workers_idle = ferry__wire_gcs_node_load_workers_idle(v);
	l->workers_leased = ferry__wire_gcs_node_load_workers_leased(v);
	l->workers_starting = ferry__wire_gcs_node_load_workers_starting(v);
	l->nresources = ferry__wire_gcs_node_load_resources_count(v);
	if (!l->nresources)
		return 0;
	if (l->nresources > FERRY_GCS_MAX_LOAD_RESOURCES)
		return -EPROTO;
	res = ferry__gcs_op_array(op, l->nresources, sizeof(*res));
	if (!res)
		return -ENOMEM;
	for (uint32_t i = 0; i < l->nresources && ret == 0; i++)
		ret = get_resource(ferry__wire_gcs_node_load_resources_at(v, i), &res[i]);
	l->resources = res;
	return ret;
}

int ferry__gcs_op_decode_beat_fb(struct ferry__wire_gcs_record_view v, struct ferry__gcs_op *op)
{
	if (op->type == FERRY__GCS_OP_NODE_HEARTBEAT)
		return get_heartbeat(v, &op->heartbeat);
	return get_load(v, op);
}
