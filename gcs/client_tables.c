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

#define COMP "gcs-client"
#define MULTI_GET_MAX 4096

/* ---- KV ---- */

static int kv_request(struct ferry_gcs_client *c, const void *ns, size_t ns_size, const void *key,
		      size_t key_size, uint8_t op, struct ferry__gcs_result *res)
{
	struct ferry__wire_gcs_kv_get m = {0};
	struct ferry__fb_builder b = {0};

	m.seq = ferry__gcs_client_next_seq(c);
	m.ns = ns;
	m.ns_count = ns ? ns_size : 0;
	m.key = key ? key : (const void *)""; /* required, may be empty */
	m.key_count = key ? key_size : 0;
	m.op = op;
	return ferry__gcs_client_call_built(c, 0, FERRY__WIRE_MSG_GCS_KV_GET, &b,
					    ferry__wire_gcs_kv_get_build(&b, &m), m.seq, NULL, res);
}

/* Unpack @n byte strings (each preceded by a found byte when @flags) into one allocation. */
static int unpack_bytes(const void *data, size_t size, size_t n, bool flags,
			struct ferry_gcs_bytes **out)
{
	struct ferry__gcs_reader r = {data, size, 0};
	struct ferry_gcs_bytes *v = ferry__calloc(1, (n ? n : 1) * sizeof(*v) + size);
	uint8_t *pos;
	int found = 0;

	if (!v)
		return -ENOMEM;
	pos = (uint8_t *)(v + (n ? n : 1));
	for (size_t i = 0; i < n && !r.err; i++) {
		bool present = flags ? ferry__gcs_get_u8(&r) != 0 : true;
		struct ferry__gcs_slice s = ferry__gcs_get_bytes(&r, size);

		if (!present || r.err)
			continue;
		memcpy(pos, s.data, s.size);
		v[i] = (struct ferry_gcs_bytes){pos, s.size};
		pos += s.size;
		found++;
	}
	if (r.err || r.left) {
		ferry__free(v);
		FLOG_WARN(COMP, "malformed multi-record reply (%zu bytes)", size);
		return -EPROTO;
	}
	*out = v;
	return found;
}

int ferry_gcs_kv_multi_get(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			   const struct ferry_gcs_bytes *keys, size_t n,
			   struct ferry_gcs_bytes **values)
{
	struct ferry__gcs_buf list = {0};
	struct ferry__gcs_writer w = {&list, 0};
	struct ferry__gcs_result res;
	int ret;

	if (!c || !keys || !values || n == 0 || n > MULTI_GET_MAX) {
		FLOG_ERROR(COMP, "multi-get takes 1..%d keys", MULTI_GET_MAX);
		return -EINVAL;
	}
	ferry__gcs_put_u32(&w, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		ferry__gcs_put_bytes(&w, keys[i].data, keys[i].size);
	ret = w.err ? w.err : kv_request(c, ns, ns_size, list.data, list.size, 3, &res);
	ferry__gcs_buf_fini(&list);
	if (w.err)
		return w.err;
	if (ret >= 0)
		ret = unpack_bytes(res.value, res.size, n, true, values);
	ferry__free(res.value);
	return ret;
}

int ferry_gcs_kv_keys(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
		      const void *prefix, size_t prefix_size, struct ferry_gcs_bytes **keys)
{
	struct ferry__gcs_result res;
	int ret;

	if (!c || !keys || (prefix_size && !prefix))
		return -EINVAL;
	ret = kv_request(c, ns, ns_size, prefix, prefix_size, 2, &res);
	if (ret >= 0 && res.size >= 4)
		ret = unpack_bytes((const uint8_t *)res.value + 4, res.size - 4,
				   ferry__gcs_load_u32(res.value), false, keys);
	else if (ret >= 0)
		ret = -EPROTO;
	ferry__free(res.value);
	return ret;
}

int ferry_gcs_kv_delete_prefix(struct ferry_gcs_client *c, const void *ns, size_t ns_size,
			       const void *prefix, size_t prefix_size)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_KV_DELETE_PREFIX};

	if (prefix_size && !prefix)
		return -EINVAL;
	op.kv.ns = (struct ferry__gcs_slice){ns, ns_size};
	op.kv.key = (struct ferry__gcs_slice){prefix, prefix_size};
	return ferry__gcs_client_apply(c, 0, &op);
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

/* One pass over packed records: counts (@out NULL) or fills. Count, or -EPROTO / -ENOMEM. */
static int walk_records(const void *data, size_t size, enum ferry__gcs_op_type want, fill_fn fill,
			size_t elem_size, uint8_t *out, char **pos, size_t *bytes)
{
	struct ferry__gcs_reader r = {data, size, 0};
	int n = 0;

	while (r.left && !r.err) {
		struct ferry__gcs_slice rec = ferry__gcs_get_bytes(&r, size);
		struct ferry__gcs_op op;
		int ret;

		if (r.err)
			break;
		ret = ferry__gcs_op_decode(rec.data, rec.size, &op);
		if (ret < 0)
			return ret;
		if (op.type == want)
			fill(&op, out ? out + (size_t)n * elem_size : NULL, pos, bytes);
		n += op.type == want;
		ferry__gcs_op_release(&op);
		if (op.type != want)
			return -EPROTO;
	}
	return r.err ? -EPROTO : n;
}

/* Decode a list reply into one allocation: @n elements then their strings. */
static int unpack_list(const void *data, size_t size, enum ferry__gcs_op_type want, fill_fn fill,
		       size_t elem_size, void **out)
{
	size_t bytes = 0;
	char *pos = NULL;
	uint8_t *mem;
	int n = walk_records(data, size, want, fill, elem_size, NULL, &pos, &bytes);

	if (n < 0)
		return n;
	mem = ferry__calloc(1, (size_t)n * elem_size + bytes + 1);
	if (!mem)
		return -ENOMEM;
	pos = (char *)mem + (size_t)n * elem_size;
	bytes = 0;
	n = walk_records(data, size, want, fill, elem_size, mem, &pos, &bytes);
	if (n < 0) {
		ferry__free(mem);
		return n;
	}
	*out = mem;
	return n;
}

static int table_read(struct ferry_gcs_client *c, enum ferry__gcs_table table, const void *id,
		      bool list, struct ferry__gcs_result *res)
{
	struct ferry__wire_gcs_table_get m = {0};
	struct ferry__fb_builder b = {0};

	m.seq = ferry__gcs_client_next_seq(c);
	m.table = (uint8_t)table;
	if (id)
		memcpy(m.id.bytes, id, sizeof(m.id.bytes));
	m.list = list;
	return ferry__gcs_client_call_built(c, 0, FERRY__WIRE_MSG_GCS_TABLE_GET, &b,
					    ferry__wire_gcs_table_get_build(&b, &m), m.seq, NULL,
					    res);
}

static int list_table(struct ferry_gcs_client *c, enum ferry__gcs_table table,
		      enum ferry__gcs_op_type want, fill_fn fill, size_t elem_size, void **out)
{
	struct ferry__gcs_result res;
	int ret;

	if (!c || !out)
		return -EINVAL;
	ret = table_read(c, table, NULL, true, &res);
	if (ret >= 0)
		ret = unpack_list(res.value, res.size, want, fill, elem_size, out);
	ferry__free(res.value);
	return ret;
}

/* One record of @table by ID, as a one-element list allocation. 0, -ENOENT, ... */
static int get_one(struct ferry_gcs_client *c, enum ferry__gcs_table table, const void *id,
		   enum ferry__gcs_op_type want, fill_fn fill, size_t elem_size, void **out)
{
	struct ferry__gcs_buf packed = {0};
	struct ferry__gcs_writer w = {&packed, 0};
	struct ferry__gcs_result res;
	int ret = table_read(c, table, id, false, &res);

	if (ret >= 0) {
		ferry__gcs_put_bytes(&w, res.value, res.size);
		ret = w.err ? w.err
			    : unpack_list(packed.data, packed.size, want, fill, elem_size, out);
		if (ret == 1)
			ret = 0;
		else if (ret >= 0) {
			ferry__free(*out);
			ret = -EPROTO;
		}
	}
	ferry__gcs_buf_fini(&packed);
	ferry__free(res.value);
	return ret;
}

/* ---- nodes ---- */

int ferry_gcs_node_list(struct ferry_gcs_client *c, struct ferry_gcs_node_info **nodes)
{
	return list_table(c, FERRY__GCS_T_NODES, FERRY__GCS_OP_RESTORE_NODE, fill_node,
			  sizeof(**nodes), (void **)nodes);
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

int ferry_gcs_node_load_list(struct ferry_gcs_client *c, struct ferry_gcs_node_load **loads)
{
	return list_table(c, FERRY__GCS_T_LOADS, FERRY__GCS_OP_NODE_LOAD, fill_load,
			  sizeof(**loads), (void **)loads);
}

int ferry_gcs_event_node_load(const struct ferry_gcs_event *ev, struct ferry_gcs_node_load *out)
{
	struct ferry__gcs_buf packed = {0};
	struct ferry__gcs_writer w = {&packed, 0};
	struct ferry_gcs_node_load *one = NULL;
	int ret;

	if (!ev || !out || ev->channel != FERRY_GCS_CH_NODE_LOAD || !ev->size)
		return -EINVAL;
	ferry__gcs_put_bytes(&w, ev->data, ev->size);
	ret = w.err ? w.err
		    : unpack_list(packed.data, packed.size, FERRY__GCS_OP_NODE_LOAD, fill_load,
				  sizeof(*one), (void **)&one);
	ferry__gcs_buf_fini(&packed);
	if (ret < 0)
		return ret;
	if (ret != 1) {
		ferry__free(one);
		return -EPROTO;
	}
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

static int node_state(struct ferry_gcs_client *c, const struct ferry_node_id *id,
		      enum ferry_gcs_node_state state)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_NODE_STATE};

	if (!id)
		return -EINVAL;
	op.node_state.id = *id;
	op.node_state.state = state;
	op.node_state.time_ms = ferry__wall_ms();
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_node_drain(struct ferry_gcs_client *c, const struct ferry_node_id *id)
{
	return node_state(c, id, FERRY_GCS_NODE_DRAINING);
}

int ferry_gcs_node_unregister(struct ferry_gcs_client *c, const struct ferry_node_id *id)
{
	return node_state(c, id, FERRY_GCS_NODE_DEAD);
}

/* ---- jobs and workers ---- */

int ferry_gcs_job_add(struct ferry_gcs_client *c, const struct ferry_gcs_job_info *job)
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
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_job_finish(struct ferry_gcs_client *c, const struct ferry_job_id *id)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_JOB_FINISH};

	if (!id)
		return -EINVAL;
	op.job_finish.id = *id;
	op.job_finish.time_ms = ferry__wall_ms();
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_job_list(struct ferry_gcs_client *c, struct ferry_gcs_job_info **jobs)
{
	return list_table(c, FERRY__GCS_T_JOBS, FERRY__GCS_OP_RESTORE_JOB, fill_job, sizeof(**jobs),
			  (void **)jobs);
}

int ferry_gcs_worker_add(struct ferry_gcs_client *c, const struct ferry_gcs_worker_info *worker)
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
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_worker_dead(struct ferry_gcs_client *c, const struct ferry_worker_id *id,
			  enum ferry_gcs_exit exit_type, const char *message)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_WORKER_DEAD};

	if (!id)
		return -EINVAL;
	op.worker_exit.id = *id;
	op.worker_exit.time_ms = ferry__wall_ms();
	op.worker_exit.exit_type = exit_type;
	op.worker_exit.message = message;
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_worker_list(struct ferry_gcs_client *c, struct ferry_gcs_worker_info **workers)
{
	return list_table(c, FERRY__GCS_T_WORKERS, FERRY__GCS_OP_RESTORE_WORKER, fill_worker,
			  sizeof(**workers), (void **)workers);
}

/* ---- actors ---- */

int ferry_gcs_actor_register(struct ferry_gcs_client *c, const struct ferry_gcs_actor_info *actor)
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
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_actor_update(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
			   enum ferry_gcs_actor_state state, const struct ferry_node_id *node,
			   const struct ferry_worker_id *worker, enum ferry_gcs_exit cause,
			   const char *message)
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
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_actor_get(struct ferry_gcs_client *c, const struct ferry_actor_id *id,
			struct ferry_gcs_actor_info **out)
{
	if (!c || !id || !out)
		return -EINVAL;
	return get_one(c, FERRY__GCS_T_ACTORS, id->bytes, FERRY__GCS_OP_RESTORE_ACTOR, fill_actor,
		       sizeof(**out), (void **)out);
}

int ferry_gcs_actor_list(struct ferry_gcs_client *c, struct ferry_gcs_actor_info **actors)
{
	return list_table(c, FERRY__GCS_T_ACTORS, FERRY__GCS_OP_RESTORE_ACTOR, fill_actor,
			  sizeof(**actors), (void **)actors);
}

/* ---- placement groups ---- */

int ferry_gcs_pg_create(struct ferry_gcs_client *c, const struct ferry_gcs_pg_info *pg)
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
	ret = ferry__gcs_client_apply(c, 0, &op);
	ferry__free(bundles);
	return ret;
}

int ferry_gcs_pg_update(struct ferry_gcs_client *c, const struct ferry_placement_group_id *id,
			enum ferry_gcs_pg_state state, const struct ferry_node_id *nodes,
			uint32_t nnodes)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_PG_UPDATE};

	if (!id || (nnodes && !nodes))
		return -EINVAL;
	op.pg_update.id = *id;
	op.pg_update.state = state;
	op.pg_update.nnodes = nnodes;
	op.pg_update.nodes = nodes;
	return ferry__gcs_client_apply(c, 0, &op);
}

int ferry_gcs_pg_get(struct ferry_gcs_client *c, const struct ferry_placement_group_id *id,
		     struct ferry_gcs_pg_info **out)
{
	if (!c || !id || !out)
		return -EINVAL;
	return get_one(c, FERRY__GCS_T_PGS, id->bytes, FERRY__GCS_OP_RESTORE_PG, fill_pg,
		       sizeof(**out), (void **)out);
}

int ferry_gcs_pg_list(struct ferry_gcs_client *c, struct ferry_gcs_pg_info **pgs)
{
	return list_table(c, FERRY__GCS_T_PGS, FERRY__GCS_OP_RESTORE_PG, fill_pg, sizeof(**pgs),
			  (void **)pgs);
}
