/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's table and multi-key calls: KV multi-get / keys / delete by prefix, node list,
 * drain and unregister, jobs, workers, actors and placement groups. Writes are GCS records (gcs/ops.h) sent with
 * ferry__gcs_client_apply(); lists come back as packed records (GcsTableGet with list) and are
 * returned as one allocation per call: the array, then the strings it points to.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "gcs/client_int.h"
#include "gcs/values.h"

#define COMP "gcs-client"
#define MULTI_GET_MAX 4096

/* ---- KV ---- */

static int kv_request(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		      size_t key_size, uint8_t op, const struct ferry__gcs_acall *a)
{
	struct ferry__wire_gcs_kv_get m = {0};
	struct ferry__fb_builder b = {0};

	m.seq = ferry__gcs_client_next_seq(c);
	m.ns = ns;
	m.ns_count = ns ? ns_size : 0;
	m.key = key ? key : (const void *)""; /* required, may be empty */
	m.key_count = key ? key_size : 0;
	m.op = op;
	return ferry__gcs_async_built(c, 0, FERRY__WIRE_MSG_GCS_KV_GET, &b,
				      ferry__wire_gcs_kv_get_build(&b, &m), m.seq, a);
}

/* Unpack a GcsValueList reply into one allocation: @want entries (SIZE_MAX: any number); with
 * @flags an entry may be not found (left empty), else every one must be there. Found count, or
 * -EPROTO (logged), -ENOMEM. */
static int unpack_bytes(const void *data, size_t size, size_t want, bool flags,
			struct ferry_gcs_bytes **out)
{
	struct ferry__gcs_values vl;
	struct ferry_gcs_bytes *v;
	uint8_t *pos;
	int found = 0;

	if (ferry__gcs_values_open(data, size, UINT32_MAX, "list reply", &vl) < 0)
		return -EPROTO;
	if (want != SIZE_MAX && vl.count != want) {
		FLOG_WARN(COMP, "list reply of %u entries for %zu keys", vl.count, want);
		return -EPROTO;
	}
	v = ferry__calloc(1, (vl.count ? vl.count : 1) * sizeof(*v) + size);
	if (!v)
		return -ENOMEM;
	pos = (uint8_t *)(v + (vl.count ? vl.count : 1));
	for (uint32_t i = 0; i < vl.count; i++) {
		struct ferry__gcs_value e = ferry__gcs_values_at(&vl, i);

		if (!e.found && !flags) {
			ferry__free(v);
			FLOG_WARN(COMP, "list reply: entry %u missing", i);
			return -EPROTO;
		}
		if (!e.found)
			continue;
		if (e.data.size)
			memcpy(pos, e.data.data, e.data.size);
		v[i] = (struct ferry_gcs_bytes){pos, e.data.size};
		pos += e.data.size;
		found++;
	}
	*out = v;
	return found;
}

static int decode_multi(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
			void **result)
{
	return unpack_bytes(r->value, r->size, a->n, true, (struct ferry_gcs_bytes **)result);
}

int ferry_gcs_kv_multi_get_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				 const struct ferry_gcs_bytes *keys, size_t n, ferry_gcs_done_fn cb,
				 void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg, .decode = decode_multi, .n = n};
	struct ferry__gcs_buf list = {0};
	struct ferry__gcs_value *v;
	int ret;

	if (!c || !keys || !cb || n == 0 || n > MULTI_GET_MAX) {
		FLOG_ERROR(COMP, "multi-get takes 1..%d keys", MULTI_GET_MAX);
		return -EINVAL;
	}
	v = ferry__calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = (struct ferry__gcs_value){{keys[i].data, keys[i].size}, true};
	ret = ferry__gcs_values_encode(v, n, &list);
	ferry__free(v);
	if (ret == 0)
		ret = kv_request(c, ns, ns_size, list.data, list.size, 3, &a);
	ferry__gcs_buf_fini(&list);
	return ret;
}

int ferry_gcs_kv_multi_get(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			   const struct ferry_gcs_bytes *keys, size_t n,
			   struct ferry_gcs_bytes **values)
{
	struct ferry__gcs_sync *w = values ? ferry__gcs_sync_new(c) : NULL;
	void *result;
	int ret;

	if (!values)
		return -EINVAL;
	ret = FERRY__GCS_WAIT(
		c, w, &result,
		ferry_gcs_kv_multi_get_async(c, ns, ns_size, keys, n, ferry__gcs_sync_done, w));
	if (ret >= 0)
		*values = result;
	return ret;
}

static int decode_keys(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
		       void **result)
{
	(void)a;
	return unpack_bytes(r->value, r->size, SIZE_MAX, false, (struct ferry_gcs_bytes **)result);
}

int ferry_gcs_kv_keys_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			    const void *prefix, size_t prefix_size, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {.cb = cb, .arg = arg, .decode = decode_keys};

	if (!c || !cb || (prefix_size && !prefix))
		return -EINVAL;
	return kv_request(c, ns, ns_size, prefix, prefix_size, 2, &a);
}

int ferry_gcs_kv_keys(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
		      const void *prefix, size_t prefix_size, struct ferry_gcs_bytes **keys)
{
	struct ferry__gcs_sync *w = keys ? ferry__gcs_sync_new(c) : NULL;
	void *result;
	int ret;

	if (!keys)
		return -EINVAL;
	ret = FERRY__GCS_WAIT(c, w, &result,
			      ferry_gcs_kv_keys_async(c, ns, ns_size, prefix, prefix_size,
						      ferry__gcs_sync_done, w));
	if (ret >= 0)
		*keys = result;
	return ret;
}

int ferry_gcs_kv_delete_prefix_async(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
				     const void *prefix, size_t prefix_size, ferry_gcs_done_fn cb,
				     void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_DELETE_PREFIX};

	if (prefix_size && !prefix)
		return -EINVAL;
	op.kv.ns = (struct ferry__gcs_slice){ns, ns_size};
	op.kv.key = (struct ferry__gcs_slice){prefix, prefix_size};
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_kv_delete_prefix(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			       const void *prefix, size_t prefix_size)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_kv_delete_prefix_async(c, ns, ns_size, prefix, prefix_size,
								ferry__gcs_sync_done, w));
}

/* ---- lists ---- */

/* Copies a string into the list's string area (or only counts it when *@pos is NULL). */
static const char *keep_str(const char *s, char **pos, size_t *bytes)
{
	size_t n = s ? strlen(s) + 1 : 0;
	char *p = *pos;

	*bytes += n;
	if (!s || !p)
		return NULL;
	memcpy(p, s, n);
	*pos = p + n;
	return p;
}

/* Reserves @size bytes of the list's extra area, 8-byte aligned (or only counts them: NULL). */
static void *keep_area(size_t size, char **pos, size_t *bytes)
{
	size_t pad = (8 - (*bytes & 7)) & 7;
	char *p = *pos;

	*bytes += pad + size;
	if (!p)
		return NULL;
	*pos = p + pad + size;
	return p + pad;
}

/* Copies a group's bundles, their custom resources and the resources' names into the list's
 * extra area (or only counts them). */
static const struct ferry_gcs_bundle *keep_bundles(const struct ferry__gcs_pg *g, char **pos,
						   size_t *bytes)
{
	struct ferry_gcs_bundle *b = keep_area(g->nbundles * sizeof(*b), pos, bytes);

	for (uint32_t i = 0; i < g->nbundles; i++) {
		const struct ferry__gcs_resources *r = &g->bundles[i].resources;
		struct ferry_gcs_resource *custom = NULL;

		if (r->ncustom)
			custom = keep_area(r->ncustom * sizeof(*custom), pos, bytes);
		for (uint32_t j = 0; j < r->ncustom; j++) {
			const char *name = keep_str(r->custom[j].name, pos, bytes);

			if (custom)
				custom[j] = (struct ferry_gcs_resource){name, r->custom[j].amount};
		}
		if (b)
			b[i] = (struct ferry_gcs_bundle){r->cpu,	  r->gpu,
							 r->memory_bytes, g->bundles[i].node,
							 r->ncustom,	  custom};
	}
	return b;
}

/* Fills @elem (NULL: only counts) from @op; adds the string bytes it needs to *@bytes. */
typedef void (*fill_fn)(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes);

static void fill_node(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	struct ferry_gcs_node_info *n = elem, tmp;
	const char *addr = keep_str(op->node.address, pos, bytes);

	if (!n)
		n = &tmp;
	memset(n, 0, sizeof(*n));
	n->id = op->node.id;
	n->address = addr;
	n->cpu = op->node.total.cpu;
	n->gpu = op->node.total.gpu;
	n->memory_bytes = op->node.total.memory_bytes;
	n->store_capacity_bytes = op->node.store_capacity_bytes;
	n->state = op->node.state;
}

static void fill_job(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	struct ferry_gcs_job_info *j = elem, tmp;
	const char *entry = keep_str(op->job.entrypoint, pos, bytes);

	if (!j)
		j = &tmp;
	*j = (struct ferry_gcs_job_info){op->job.id,	     op->job.state, op->job.driver_node,
					 op->job.driver_pid, entry,	    op->job.start_ms,
					 op->job.end_ms};
}

/* Worker and actor records are the public structs (see gcs/tables.h): a copy, with the strings
 * moved into the list's area. */
static void fill_worker(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	struct ferry_gcs_worker_info *w = elem, tmp;
	const char *addr = keep_str(op->worker.address, pos, bytes);
	const char *msg = keep_str(op->worker.exit_message, pos, bytes);

	if (!w)
		w = &tmp;
	*w = op->worker;
	w->address = addr;
	w->exit_message = msg;
}

static void fill_actor(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	struct ferry_gcs_actor_info *x = elem, tmp;
	const char *name = keep_str(op->actor.name, pos, bytes);
	const char *cls = keep_str(op->actor.class_name, pos, bytes);
	const char *msg = keep_str(op->actor.death_message, pos, bytes);

	if (!x)
		x = &tmp;
	*x = op->actor;
	x->name = name;
	x->class_name = cls;
	x->death_message = msg;
}

static void fill_pg(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	const struct ferry__gcs_pg *g = &op->pg;
	struct ferry_gcs_pg_info *x = elem, tmp;
	const struct ferry_gcs_bundle *b = keep_bundles(g, pos, bytes);
	const char *name = keep_str(g->name, pos, bytes);

	if (!x)
		x = &tmp;
	*x = (struct ferry_gcs_pg_info){g->id, g->job, name, g->strategy, g->state, g->nbundles, b};
}

/* One pass over @n records: counts (@out NULL) or fills. Count, or -EPROTO / -ENOMEM. */
static int walk_records(const struct ferry__gcs_slice *recs, size_t n, enum ferry__gcs_op_type want,
			fill_fn fill, size_t elem_size, uint8_t *out, char **pos, size_t *bytes)
{
	for (size_t i = 0; i < n; i++) {
		struct ferry__gcs_op op;
		int ret = ferry__gcs_op_decode(recs[i].data, recs[i].size, &op);

		if (ret < 0)
			return ret;
		if (op.type == want)
			fill(&op, out ? out + i * elem_size : NULL, pos, bytes);
		ferry__gcs_op_release(&op);
		if (op.type != want)
			return -EPROTO;
	}
	return (int)n;
}

/* Decode @n records into one allocation: @n elements then their strings. */
static int unpack_list(const struct ferry__gcs_slice *recs, size_t n, enum ferry__gcs_op_type want,
		       fill_fn fill, size_t elem_size, void **out)
{
	size_t bytes = 0;
	char *pos = NULL;
	uint8_t *mem;
	int ret = walk_records(recs, n, want, fill, elem_size, NULL, &pos, &bytes);

	if (ret < 0)
		return ret;
	mem = ferry__calloc(1, n * elem_size + bytes + 1);
	if (!mem)
		return -ENOMEM;
	pos = (char *)mem + n * elem_size;
	bytes = 0;
	ret = walk_records(recs, n, want, fill, elem_size, mem, &pos, &bytes);
	if (ret < 0) {
		ferry__free(mem);
		return ret;
	}
	*out = mem;
	return ret;
}

static int table_read(struct ferry_gcs_client *c, enum ferry__gcs_table table, const void *id,
		      bool list, const struct ferry__gcs_acall *a)
{
	struct ferry__wire_gcs_table_get m = {0};
	struct ferry__fb_builder b = {0};

	m.seq = ferry__gcs_client_next_seq(c);
	m.table = (uint8_t)table;
	if (id)
		memcpy(m.id.bytes, id, sizeof(m.id.bytes));
	m.list = list;
	return ferry__gcs_async_built(c, 0, FERRY__WIRE_MSG_GCS_TABLE_GET, &b,
				      ferry__wire_gcs_table_get_build(&b, &m), m.seq, a);
}

/* A GcsValueList of records: every entry there. */
static int decode_list(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
		       void **result)
{
	struct ferry__gcs_slice *recs;
	struct ferry__gcs_values vl;
	int ret;

	if (ferry__gcs_values_open(r->value, r->size, UINT32_MAX, "table list", &vl) < 0)
		return -EPROTO;
	recs = ferry__calloc(vl.count ? vl.count : 1, sizeof(*recs));
	if (!recs)
		return -ENOMEM;
	for (uint32_t i = 0; i < vl.count; i++) {
		struct ferry__gcs_value e = ferry__gcs_values_at(&vl, i);

		recs[i] = e.data;
		if (!e.found) {
			ferry__free(recs);
			FLOG_WARN(COMP, "table list: entry %u missing", i);
			return -EPROTO;
		}
	}
	ret = unpack_list(recs, vl.count, (enum ferry__gcs_op_type)a->want, (fill_fn)a->fill,
			  a->elem_size, result);
	ferry__free(recs);
	return ret;
}

/* One record: as a one-element list allocation. 0 or -EPROTO, -ENOMEM. */
static int decode_one(const struct ferry__gcs_reply *r, const struct ferry__gcs_acall *a,
		      void **result)
{
	struct ferry__gcs_slice rec = {r->value, r->size};
	int ret = unpack_list(&rec, 1, (enum ferry__gcs_op_type)a->want, (fill_fn)a->fill,
			      a->elem_size, result);

	return ret < 0 ? ret : 0;
}

static int list_async(struct ferry_gcs_client *c, enum ferry__gcs_table table,
		      enum ferry__gcs_op_type want, fill_fn fill, size_t elem_size,
		      ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {cb,       arg, decode_list, 0, want, (void (*)(void))fill,
				     elem_size};

	if (!c || !cb)
		return -EINVAL;
	return table_read(c, table, NULL, true, &a);
}

static void fill_task_event(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	const struct ferry__gcs_task_event *e = &op->task_event;
	struct ferry_gcs_task_event *x = elem;

	(void)pos;
	(void)bytes;
	if (!x)
		return;
	x->task = e->task;
	x->job = e->job;
	x->attempt = e->attempt;
	x->state = e->state;
	x->node = e->node;
	x->worker = e->worker;
	x->time_ms = e->time_ms;
	memcpy(x->name, e->name, sizeof(x->name));
}

/* A load report with its resources and their names moved into the list's area. */
static void fill_load(const struct ferry__gcs_op *op, void *elem, char **pos, size_t *bytes)
{
	const struct ferry_gcs_node_load *l = &op->load;
	struct ferry_gcs_node_load *x = elem, tmp;
	struct ferry_gcs_resource_load *res = NULL;

	if (l->nresources)
		res = keep_area(l->nresources * sizeof(*res), pos, bytes);
	for (uint32_t i = 0; i < l->nresources; i++) {
		const char *name = keep_str(l->resources[i].name, pos, bytes);

		if (res)
			res[i] = (struct ferry_gcs_resource_load){name, l->resources[i].total,
								  l->resources[i].available};
	}
	if (!x)
		x = &tmp;
	*x = *l;
	x->resources = res;
}

int ferry_gcs_event_node_load(const struct ferry_gcs_event *ev, struct ferry_gcs_node_load *out)
{
	struct ferry__gcs_slice rec;
	struct ferry_gcs_node_load *one = NULL;
	int ret;

	if (!ev || !out || ev->channel != FERRY_GCS_CH_NODE_LOAD || !ev->size)
		return -EINVAL;
	rec = (struct ferry__gcs_slice){ev->data, ev->size};
	ret = unpack_list(&rec, 1, FERRY__GCS_OP_NODE_LOAD, fill_load, sizeof(*one), (void **)&one);
	if (ret < 0)
		return ret;
	/* The caller frees out->resources: move the array to the front of the allocation. */
	*out = *one;
	if (one->nresources) {
		size_t n = one->nresources * sizeof(*one->resources);
		struct ferry_gcs_resource_load *res = (void *)one;

		memmove(res, one->resources, n);
		/* The names stay where they were, after the array: still inside the block. */
		out->resources = res;
	} else {
		ferry__free(one);
		out->resources = NULL;
	}
	return 0;
}

/* One record of @table by ID, as a one-element list allocation: 0, -ENOENT, ... */
static int get_one_async(struct ferry_gcs_client *c, enum ferry__gcs_table table, const void *id,
			 enum ferry__gcs_op_type want, fill_fn fill, size_t elem_size,
			 ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_acall a = {cb, arg, decode_one, 0, want, (void (*)(void))fill, elem_size};

	if (!c || !id || !cb)
		return -EINVAL;
	return table_read(c, table, id, false, &a);
}

/* A blocking list or get over its async form @ret (submitted with @w): the result into *@out. */
static int wait_out(struct ferry_gcs_client *c, struct ferry__gcs_sync *w, int ret, void *out)
{
	void *result;

	ret = ferry__gcs_sync_wait(c, w, ret, &result);
	if (ret >= 0)
		*(void **)out = result;
	return ret;
}

#define LIST_CALLS(name, table, want, fill, type)                                                  \
	int ferry_gcs_##name##_list_async(struct ferry_gcs_client *c, ferry_gcs_done_fn cb,        \
					  void *arg)                                               \
	{                                                                                          \
		return list_async(c, table, want, fill, sizeof(type), cb, arg);                    \
	}                                                                                          \
	int ferry_gcs_##name##_list(struct ferry_gcs_client *c, type **out)                        \
	{                                                                                          \
		struct ferry__gcs_sync *w = out ? ferry__gcs_sync_new(c) : NULL;                   \
                                                                                                   \
		if (!out)                                                                          \
			return -EINVAL;                                                            \
		return wait_out(c, w,                                                              \
				w ? ferry_gcs_##name##_list_async(c, ferry__gcs_sync_done, w) : 0, \
				out);                                                              \
	}

#define GET_CALLS(name, idtype, table, want, fill, type)                                         \
	int ferry_gcs_##name##_get_async(struct ferry_gcs_client *c, const idtype *id,           \
					 ferry_gcs_done_fn cb, void *arg)                        \
	{                                                                                        \
		return get_one_async(c, table, id ? id->bytes : NULL, want, fill, sizeof(type),  \
				     cb, arg);                                                   \
	}                                                                                        \
	int ferry_gcs_##name##_get(struct ferry_gcs_client *c, const idtype *id, type **out)     \
	{                                                                                        \
		struct ferry__gcs_sync *w = out ? ferry__gcs_sync_new(c) : NULL;                 \
                                                                                                 \
		if (!out)                                                                        \
			return -EINVAL;                                                          \
		return wait_out(c, w,                                                            \
				w ? ferry_gcs_##name##_get_async(c, id, ferry__gcs_sync_done, w) \
				  : 0,                                                           \
				out);                                                            \
	}

LIST_CALLS(node, FERRY__GCS_T_NODES, FERRY__GCS_OP_RESTORE_NODE, fill_node,
	   struct ferry_gcs_node_info)
LIST_CALLS(job, FERRY__GCS_T_JOBS, FERRY__GCS_OP_RESTORE_JOB, fill_job, struct ferry_gcs_job_info)
LIST_CALLS(worker, FERRY__GCS_T_WORKERS, FERRY__GCS_OP_RESTORE_WORKER, fill_worker,
	   struct ferry_gcs_worker_info)
LIST_CALLS(actor, FERRY__GCS_T_ACTORS, FERRY__GCS_OP_RESTORE_ACTOR, fill_actor,
	   struct ferry_gcs_actor_info)
LIST_CALLS(pg, FERRY__GCS_T_PGS, FERRY__GCS_OP_RESTORE_PG, fill_pg, struct ferry_gcs_pg_info)
LIST_CALLS(node_load, FERRY__GCS_T_LOADS, FERRY__GCS_OP_NODE_LOAD, fill_load,
	   struct ferry_gcs_node_load)
LIST_CALLS(task_event, FERRY__GCS_T_TASK_EVENTS, FERRY__GCS_OP_TASK_EVENT, fill_task_event,
	   struct ferry_gcs_task_event)
GET_CALLS(actor, struct ferry_actor_id, FERRY__GCS_T_ACTORS, FERRY__GCS_OP_RESTORE_ACTOR,
	  fill_actor, struct ferry_gcs_actor_info)
GET_CALLS(pg, struct ferry_placement_group_id, FERRY__GCS_T_PGS, FERRY__GCS_OP_RESTORE_PG, fill_pg,
	  struct ferry_gcs_pg_info)

/* ---- nodes ---- */

static int node_state(struct ferry_gcs_client *c, const struct ferry_node_id *id,
		      enum ferry_gcs_node_state state, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_STATE};

	if (!id)
		return -EINVAL;
	op.node_state.id = *id;
	op.node_state.state = state;
	op.node_state.time_ms = ferry__wall_ms();
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_node_drain_async(struct ferry_gcs_client *c, const struct ferry_node_id *id,
			       ferry_gcs_done_fn cb, void *arg)
{
	return node_state(c, id, FERRY_GCS_NODE_DRAINING, cb, arg);
}

int ferry_gcs_node_unregister_async(struct ferry_gcs_client *c, const struct ferry_node_id *id,
				    ferry_gcs_done_fn cb, void *arg)
{
	return node_state(c, id, FERRY_GCS_NODE_DEAD, cb, arg);
}

int ferry_gcs_node_drain(struct ferry_gcs_client *c, const struct ferry_node_id *id)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_node_drain_async(c, id, ferry__gcs_sync_done, w));
}

int ferry_gcs_node_unregister(struct ferry_gcs_client *c, const struct ferry_node_id *id)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_node_unregister_async(c, id, ferry__gcs_sync_done, w));
}

/* ---- jobs and workers ---- */

int ferry_gcs_job_add_async(struct ferry_gcs_client *c, const struct ferry_gcs_job_info *job,
			    ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_JOB_ADD};

	if (!job)
		return -EINVAL;
	op.job.id = job->id;
	op.job.state = FERRY_GCS_JOB_RUNNING;
	op.job.driver_node = job->driver_node;
	op.job.driver_pid = job->driver_pid;
	op.job.entrypoint = job->entrypoint;
	op.job.start_ms = job->start_ms ? job->start_ms : ferry__wall_ms();
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_job_add(struct ferry_gcs_client *c, const struct ferry_gcs_job_info *job)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_job_add_async(c, job, ferry__gcs_sync_done, w));
}

int ferry_gcs_job_finish_async(struct ferry_gcs_client *c, const struct ferry_job_id *id,
			       ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_JOB_FINISH};

	if (!id)
		return -EINVAL;
	op.job_finish.id = *id;
	op.job_finish.time_ms = ferry__wall_ms();
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_job_finish(struct ferry_gcs_client *c, const struct ferry_job_id *id)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_job_finish_async(c, id, ferry__gcs_sync_done, w));
}

int ferry_gcs_worker_add_async(struct ferry_gcs_client *c,
			       const struct ferry_gcs_worker_info *worker, ferry_gcs_done_fn cb,
			       void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_WORKER_ADD};

	if (!worker)
		return -EINVAL;
	op.worker.id = worker->id;
	op.worker.node = worker->node;
	op.worker.job = worker->job;
	op.worker.pid = worker->pid;
	op.worker.address = worker->address;
	op.worker.state = FERRY_GCS_WORKER_ALIVE;
	op.worker.start_ms = worker->start_ms ? worker->start_ms : ferry__wall_ms();
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_worker_add(struct ferry_gcs_client *c, const struct ferry_gcs_worker_info *worker)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_worker_add_async(c, worker, ferry__gcs_sync_done, w));
}

int ferry_gcs_worker_dead_async(struct ferry_gcs_client *c, const struct ferry_worker_id *id,
				enum ferry_gcs_exit exit_type, const char *message,
				ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_WORKER_DEAD};

	if (!id)
		return -EINVAL;
	op.worker_exit.id = *id;
	op.worker_exit.time_ms = ferry__wall_ms();
	op.worker_exit.exit_type = exit_type;
	op.worker_exit.message = message;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_worker_dead(struct ferry_gcs_client *c, const struct ferry_worker_id *id,
			  enum ferry_gcs_exit exit_type, const char *message)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_worker_dead_async(c, id, exit_type, message, ferry__gcs_sync_done, w));
}

/* ---- actors ---- */

int ferry_gcs_actor_register_async(struct ferry_gcs_client *c,
				   const struct ferry_gcs_actor_info *actor, ferry_gcs_done_fn cb,
				   void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_ACTOR_REGISTER};

	if (!actor)
		return -EINVAL;
	op.actor.id = actor->id;
	op.actor.job = actor->job;
	op.actor.owner = actor->owner;
	op.actor.name = actor->name;
	op.actor.class_name = actor->class_name;
	op.actor.state = FERRY_GCS_ACTOR_PENDING;
	op.actor.max_restarts = actor->max_restarts;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_actor_register(struct ferry_gcs_client *c, const struct ferry_gcs_actor_info *actor)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_actor_register_async(c, actor, ferry__gcs_sync_done, w));
}

int ferry_gcs_actor_update_async(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
				 enum ferry_gcs_actor_state state, const struct ferry_node_id *node,
				 const struct ferry_worker_id *worker, enum ferry_gcs_exit cause,
				 const char *message, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_ACTOR_UPDATE};

	if (!id)
		return -EINVAL;
	op.actor_update.id = *id;
	op.actor_update.state = state;
	if (node)
		op.actor_update.node = *node;
	if (worker)
		op.actor_update.worker = *worker;
	op.actor_update.death_cause = cause;
	op.actor_update.death_message = message;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_actor_update(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
			   enum ferry_gcs_actor_state state, const struct ferry_node_id *node,
			   const struct ferry_worker_id *worker, enum ferry_gcs_exit cause,
			   const char *message)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_actor_update_async(c, id, state, node, worker, cause,
							    message, ferry__gcs_sync_done, w));
}

/* ---- placement groups ---- */

int ferry_gcs_pg_create_async(struct ferry_gcs_client *c, const struct ferry_gcs_pg_info *pg,
			      ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_PG_CREATE};
	struct ferry__gcs_bundle *bundles;
	int ret;

	if (!pg || !pg->bundles || pg->nbundles == 0 || pg->nbundles > FERRY__GCS_MAX_BUNDLES)
		return -EINVAL;
	for (uint32_t i = 0; i < pg->nbundles; i++)
		if (pg->bundles[i].ncustom > FERRY__GCS_MAX_CUSTOM ||
		    (pg->bundles[i].ncustom && !pg->bundles[i].custom))
			return -EINVAL; /* names and amounts are checked by the server */
	bundles = ferry__calloc(pg->nbundles, sizeof(*bundles));
	if (!bundles)
		return -ENOMEM;
	for (uint32_t i = 0; i < pg->nbundles; i++)
		bundles[i].resources = (struct ferry__gcs_resources){
			pg->bundles[i].cpu, pg->bundles[i].gpu, pg->bundles[i].memory_bytes,
			pg->bundles[i].ncustom, pg->bundles[i].custom};
	op.pg.id = pg->id;
	op.pg.job = pg->job;
	op.pg.name = pg->name;
	op.pg.strategy = pg->strategy;
	op.pg.state = FERRY_GCS_PG_PENDING;
	op.pg.nbundles = pg->nbundles;
	op.pg.bundles = bundles;
	ret = ferry__gcs_apply_async(c, 0, &op, cb, arg); /* encoded here: bundles may go */
	ferry__free(bundles);
	return ret;
}

int ferry_gcs_pg_create(struct ferry_gcs_client *c, const struct ferry_gcs_pg_info *pg)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(c, w, NULL,
			       ferry_gcs_pg_create_async(c, pg, ferry__gcs_sync_done, w));
}

int ferry_gcs_pg_update_async(struct ferry_gcs_client *c, const struct ferry_placement_group_id *id,
			      enum ferry_gcs_pg_state state, const struct ferry_node_id *nodes,
			      uint32_t nnodes, ferry_gcs_done_fn cb, void *arg)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_PG_UPDATE};

	if (!id || (nnodes && !nodes))
		return -EINVAL;
	op.pg_update.id = *id;
	op.pg_update.state = state;
	op.pg_update.nnodes = nnodes;
	op.pg_update.nodes = nodes;
	return ferry__gcs_apply_async(c, 0, &op, cb, arg);
}

int ferry_gcs_pg_update(struct ferry_gcs_client *c, const struct ferry_placement_group_id *id,
			enum ferry_gcs_pg_state state, const struct ferry_node_id *nodes,
			uint32_t nnodes)
{
	struct ferry__gcs_sync *w = ferry__gcs_sync_new(c);

	return FERRY__GCS_WAIT(
		c, w, NULL,
		ferry_gcs_pg_update_async(c, id, state, nodes, nnodes, ferry__gcs_sync_done, w));
}
