/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GcsRecords of placement groups, the object directory, request deduplication and the dropped
 * counts (schema/gcs.fbs GcsPlacementGroup ... GcsDropped): the half of the record codec whose
 * tables carry arrays of IDs, places and bundles. gcs/ops_fb.c routes these types here.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "gcs/ops_fb.h"

bool ferry__gcs_op_is_obj_fb(enum ferry__gcs_op_type type)
{
	switch (type) {
	case FERRY__GCS_OP_PG_CREATE:
	case FERRY__GCS_OP_RESTORE_PG:
	case FERRY__GCS_OP_PG_UPDATE:
	case FERRY__GCS_OP_OBJ_ADD:
	case FERRY__GCS_OP_RESTORE_OBJ:
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
	case FERRY__GCS_OP_OBJ_SPILLED:
	case FERRY__GCS_OP_OBJ_REMOVE:
	case FERRY__GCS_OP_OBJ_OWNER_DIED:
	case FERRY__GCS_OP_OBJ_NODE_DIED:
	case FERRY__GCS_OP_REQUEST_DONE:
	case FERRY__GCS_OP_RESTORE_DROPPED:
		return true;
	default:
		return false;
	}
}

/* ---- encoding ---- */

/* The tables and the arrays an op's encoding needs besides the op (freed by enc_fini()). */
struct obj_enc {
	union {
		struct ferry__wire_gcs_placement_group pg;
		struct ferry__wire_gcs_pg_update pg_update;
		struct ferry__wire_gcs_object object;
		struct ferry__wire_gcs_object_location location;
		struct ferry__wire_gcs_object_spilled spilled;
		struct ferry__wire_gcs_object_event event;
		struct ferry__wire_gcs_request_done done;
		struct ferry__wire_gcs_dropped dropped;
	} m;
	struct ferry__wire_gcs_bundle *bundles;
	struct ferry__wire_gcs_resources *res;
	struct ferry__wire_gcs_resource_amount *custom;
	struct ferry__wire_unique_id *ids;
	struct ferry__wire_gcs_object_place *places;
};

static void enc_fini(struct obj_enc *e)
{
	ferry__free(e->bundles);
	ferry__free(e->res);
	ferry__free(e->custom);
	ferry__free(e->ids);
	ferry__free(e->places);
}

/* @n node IDs as wire IDs, in e->ids (NULL when @n is 0). */
static int fill_ids(const struct ferry_node_id *nodes, uint32_t n, struct obj_enc *e)
{
	if (!n)
		return 0;
	e->ids = ferry__calloc(n, sizeof(*e->ids));
	if (!e->ids)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		TO_WIRE_ID(e->ids[i], nodes[i]);
	return 0;
}

/* Every bundle's resources, their custom amounts in one array. */
static int fill_bundles(const struct ferry__gcs_pg *g, struct obj_enc *e)
{
	uint32_t ncustom = 0, k = 0;

	for (uint32_t i = 0; i < g->nbundles; i++)
		ncustom += g->bundles[i].resources.ncustom;
	e->bundles = ferry__calloc(g->nbundles ? g->nbundles : 1, sizeof(*e->bundles));
	e->res = ferry__calloc(g->nbundles ? g->nbundles : 1, sizeof(*e->res));
	e->custom = ferry__calloc(ncustom ? ncustom : 1, sizeof(*e->custom));
	if (!e->bundles || !e->res || !e->custom)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->nbundles; i++) {
		const struct ferry__gcs_resources *r = &g->bundles[i].resources;

		e->res[i] = (struct ferry__wire_gcs_resources){
			.cpu = r->cpu, .gpu = r->gpu, .memory_bytes = r->memory_bytes};
		if (r->ncustom) {
			e->res[i].custom = &e->custom[k];
			e->res[i].custom_count = r->ncustom;
		}
		for (uint32_t j = 0; j < r->ncustom; j++)
			e->custom[k++] = (struct ferry__wire_gcs_resource_amount){
				ferry__gcs_fb_text(r->custom[j].name), r->custom[j].amount};
		e->bundles[i].resources = &e->res[i];
		TO_WIRE_ID(e->bundles[i].node, g->bundles[i].node);
	}
	e->m.pg.bundles = e->bundles;
	e->m.pg.bundles_count = g->nbundles;
	return 0;
}

static int fill_pg(const struct ferry__gcs_pg *g, struct obj_enc *e)
{
	TO_WIRE_ID(e->m.pg.id, g->id);
	TO_WIRE_ID(e->m.pg.job, g->job);
	e->m.pg.name = ferry__gcs_fb_text(g->name);
	e->m.pg.strategy = (uint8_t)g->strategy;
	e->m.pg.state = (uint8_t)g->state;
	return fill_bundles(g, e);
}

static bool place_known(const struct ferry_gcs_object_place *p)
{
	return p->offset || p->alloc;
}

/* The places of @o: written only when one is known (else every place reads as unknown). */
static int fill_places(const struct ferry__objdir_info *o, struct obj_enc *e)
{
	uint32_t i = 0;

	if (!o->places)
		return 0;
	while (i < o->nlocations && !place_known(&o->places[i]))
		i++;
	if (i == o->nlocations)
		return 0;
	e->places = ferry__calloc(o->nlocations, sizeof(*e->places));
	if (!e->places)
		return -ENOMEM;
	for (i = 0; i < o->nlocations; i++)
		e->places[i] = (struct ferry__wire_gcs_object_place){
			o->places[i].offset, o->places[i].alloc, o->places[i].check};
	e->m.object.places = e->places;
	e->m.object.places_count = o->nlocations;
	return 0;
}

static int fill_object(const struct ferry__objdir_info *o, struct obj_enc *e)
{
	struct ferry__wire_gcs_object *m = &e->m.object;

	m->id = o->id;
	TO_WIRE_ID(m->owner_worker, o->owner_worker);
	TO_WIRE_ID(m->owner_node, o->owner_node);
	m->size_bytes = o->size_bytes;
	m->metadata_bytes = o->metadata_bytes;
	m->state = (uint8_t)o->state;
	m->owner_dead = o->owner_dead;
	m->spill_url = ferry__gcs_fb_text(o->spill_url);
	if (fill_ids(o->locations, o->nlocations, e) < 0)
		return -ENOMEM;
	m->locations = e->ids;
	m->locations_count = o->nlocations;
	return fill_places(o, e);
}

/* The ops without arrays. */
static void fill_small(const struct ferry__gcs_op *op, struct obj_enc *e)
{
	switch (op->type) {
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
		e->m.location.id = op->obj_location.id;
		TO_WIRE_ID(e->m.location.node, op->obj_location.node);
		if (op->type == FERRY__GCS_OP_OBJ_REMOVE_LOCATION)
			break;
		e->m.location.size_bytes = op->obj_location.size_bytes;
		e->m.location.metadata_bytes = op->obj_location.metadata_bytes;
		e->m.location.place = (struct ferry__wire_gcs_object_place){
			op->obj_location.place.offset, op->obj_location.place.alloc,
			op->obj_location.place.check};
		break;
	case FERRY__GCS_OP_OBJ_SPILLED:
		e->m.spilled.id = op->obj_spilled.id;
		e->m.spilled.url = ferry__gcs_fb_text(op->obj_spilled.url);
		break;
	case FERRY__GCS_OP_OBJ_REMOVE:
		e->m.event.object = op->obj_id;
		break;
	case FERRY__GCS_OP_OBJ_OWNER_DIED:
		TO_WIRE_ID(e->m.event.worker, op->owner);
		break;
	case FERRY__GCS_OP_OBJ_NODE_DIED:
		TO_WIRE_ID(e->m.event.node, op->node_id);
		break;
	case FERRY__GCS_OP_REQUEST_DONE:
		memcpy(e->m.done.client.bytes, op->request_done.client,
		       sizeof(e->m.done.client.bytes));
		e->m.done.seq = op->request_done.seq;
		e->m.done.status = op->request_done.status;
		break;
	default: /* RESTORE_DROPPED */
		e->m.dropped.task_events = op->dropped.task_events;
		e->m.dropped.errors = op->dropped.errors;
		break;
	}
}

/* Point @rec at the table of @op's type in @e. */
static void attach(const struct ferry__gcs_op *op, struct obj_enc *e,
		   struct ferry__wire_gcs_record *rec)
{
	switch (op->type) {
	case FERRY__GCS_OP_PG_CREATE:
	case FERRY__GCS_OP_RESTORE_PG:
		rec->pg = &e->m.pg;
		break;
	case FERRY__GCS_OP_PG_UPDATE:
		rec->pg_update = &e->m.pg_update;
		break;
	case FERRY__GCS_OP_OBJ_ADD:
	case FERRY__GCS_OP_RESTORE_OBJ:
		rec->object = &e->m.object;
		break;
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
		rec->object_location = &e->m.location;
		break;
	case FERRY__GCS_OP_OBJ_SPILLED:
		rec->object_spilled = &e->m.spilled;
		break;
	case FERRY__GCS_OP_REQUEST_DONE:
		rec->request_done = &e->m.done;
		break;
	case FERRY__GCS_OP_RESTORE_DROPPED:
		rec->dropped = &e->m.dropped;
		break;
	default: /* OBJ_REMOVE, OBJ_OWNER_DIED, OBJ_NODE_DIED */
		rec->object_event = &e->m.event;
		break;
	}
}

void ferry__gcs_op_encode_obj_fb(const struct ferry__gcs_op *op, struct ferry__wire_gcs_record *rec,
				 struct ferry__gcs_writer *w)
{
	struct obj_enc e;
	int ret = 0;

	memset(&e, 0, sizeof(e));
	switch (op->type) {
	case FERRY__GCS_OP_PG_CREATE:
	case FERRY__GCS_OP_RESTORE_PG:
		ret = fill_pg(&op->pg, &e);
		break;
	case FERRY__GCS_OP_PG_UPDATE:
		TO_WIRE_ID(e.m.pg_update.id, op->pg_update.id);
		e.m.pg_update.state = (uint8_t)op->pg_update.state;
		ret = fill_ids(op->pg_update.nodes, op->pg_update.nnodes, &e);
		e.m.pg_update.nodes = e.ids;
		e.m.pg_update.nodes_count = e.ids ? op->pg_update.nnodes : 0;
		break;
	case FERRY__GCS_OP_OBJ_ADD:
	case FERRY__GCS_OP_RESTORE_OBJ:
		ret = fill_object(&op->obj, &e);
		break;
	default:
		fill_small(op, &e);
		break;
	}
	attach(op, &e, rec);
	if (ret < 0 && !w->err)
		w->err = ret;
	if (!w->err)
		ferry__gcs_record_build(rec, w);
	enc_fini(&e);
}

/* ---- decoding ---- */

static int get_pg(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__gcs_pg *g = &op->pg;
	struct ferry__wire_gcs_placement_group_view v;
	struct ferry__gcs_bundle *b;
	int ret;

	if (!ferry__wire_gcs_record_has_pg(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_pg(rv);
	FROM_WIRE_ID(g->id, ferry__wire_gcs_placement_group_id(v));
	FROM_WIRE_ID(g->job, ferry__wire_gcs_placement_group_job(v));
	g->strategy = (enum ferry_gcs_pg_strategy)ferry__wire_gcs_placement_group_strategy(v);
	g->state = (enum ferry_gcs_pg_state)ferry__wire_gcs_placement_group_state(v);
	ret = ferry__gcs_fb_text_get(ferry__wire_gcs_placement_group_name(v),
				     ferry__wire_gcs_placement_group_name_len(v),
				     FERRY__GCS_TEXT_MAX, &g->name);
	g->nbundles = ferry__wire_gcs_placement_group_bundles_count(v);
	if (ret < 0 || !g->nbundles)
		return ret;
	if (g->nbundles > FERRY__GCS_MAX_BUNDLES)
		return -EPROTO;
	b = ferry__gcs_op_array(op, g->nbundles, sizeof(*b));
	if (!b)
		return -ENOMEM;
	g->bundles = b;
	for (uint32_t i = 0; i < g->nbundles && ret == 0; i++) {
		struct ferry__wire_gcs_bundle_view bv =
			ferry__wire_gcs_placement_group_bundles_at(v, i);

		FROM_WIRE_ID(b[i].node, ferry__wire_gcs_bundle_node(bv));
		if (ferry__wire_gcs_bundle_has_resources(bv))
			ret = ferry__gcs_fb_get_resources(ferry__wire_gcs_bundle_resources(bv), op,
							  &b[i].resources);
	}
	return ret;
}

static int get_pg_update(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__gcs_pg_update *u = &op->pg_update;
	struct ferry__wire_gcs_pg_update_view v;
	struct ferry_node_id *nodes;

	if (!ferry__wire_gcs_record_has_pg_update(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_pg_update(rv);
	FROM_WIRE_ID(u->id, ferry__wire_gcs_pg_update_id(v));
	u->state = (enum ferry_gcs_pg_state)ferry__wire_gcs_pg_update_state(v);
	u->nnodes = ferry__wire_gcs_pg_update_nodes_count(v);
	if (!u->nnodes)
		return 0;
	if (u->nnodes > FERRY__GCS_MAX_BUNDLES)
		return -EPROTO;
	nodes = ferry__gcs_op_array(op, u->nnodes, sizeof(*nodes));
	if (!nodes)
		return -ENOMEM;
	for (uint32_t i = 0; i < u->nnodes; i++)
		FROM_WIRE_ID(nodes[i], ferry__wire_gcs_pg_update_nodes_at(v, i));
	u->nodes = nodes;
	return 0;
}

/* An object's copies and their places: places absent, or one per copy. */
static int get_locations(struct ferry__wire_gcs_object_view v, struct ferry__gcs_op *op)
{
	struct ferry__objdir_info *o = &op->obj;
	struct ferry_gcs_object_place *p;
	struct ferry_node_id *nodes;
	uint32_t nplaces = ferry__wire_gcs_object_places_count(v);

	o->nlocations = ferry__wire_gcs_object_locations_count(v);
	if (o->nlocations > FERRY__OBJDIR_MAX_LOCATIONS || (nplaces && nplaces != o->nlocations))
		return -EPROTO;
	if (!o->nlocations)
		return 0;
	nodes = ferry__gcs_op_array(op, o->nlocations, sizeof(*nodes));
	p = nplaces ? ferry__gcs_op_array(op, nplaces, sizeof(*p)) : NULL;
	if (!nodes || (nplaces && !p))
		return -ENOMEM;
	for (uint32_t i = 0; i < o->nlocations; i++)
		FROM_WIRE_ID(nodes[i], ferry__wire_gcs_object_locations_at(v, i));
	for (uint32_t i = 0; i < nplaces; i++) {
		struct ferry__wire_gcs_object_place w = ferry__wire_gcs_object_places_at(v, i);

		p[i] = (struct ferry_gcs_object_place){w.offset, w.alloc, w.check};
	}
	o->locations = nodes;
	o->places = p;
	return 0;
}

static int get_object(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__objdir_info *o = &op->obj;
	struct ferry__wire_gcs_object_view v;
	int ret;

	if (!ferry__wire_gcs_record_has_object(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_object(rv);
	o->id = ferry__wire_gcs_object_id(v);
	FROM_WIRE_ID(o->owner_worker, ferry__wire_gcs_object_owner_worker(v));
	FROM_WIRE_ID(o->owner_node, ferry__wire_gcs_object_owner_node(v));
	o->size_bytes = ferry__wire_gcs_object_size_bytes(v);
	o->metadata_bytes = ferry__wire_gcs_object_metadata_bytes(v);
	o->state = (enum ferry_gcs_object_state)ferry__wire_gcs_object_state(v);
	o->owner_dead = ferry__wire_gcs_object_owner_dead(v);
	ret = ferry__gcs_fb_text_get(ferry__wire_gcs_object_spill_url(v),
				     ferry__wire_gcs_object_spill_url_len(v), FERRY__OBJDIR_MAX_URL,
				     &o->spill_url);
	return ret < 0 ? ret : get_locations(v, op);
}

static int get_location(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_object_location_view v;
	struct ferry__wire_gcs_object_place p;

	if (!ferry__wire_gcs_record_has_object_location(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_object_location(rv);
	op->obj_location.id = ferry__wire_gcs_object_location_id(v);
	FROM_WIRE_ID(op->obj_location.node, ferry__wire_gcs_object_location_node(v));
	if (op->type == FERRY__GCS_OP_OBJ_REMOVE_LOCATION)
		return 0;
	op->obj_location.size_bytes = ferry__wire_gcs_object_location_size_bytes(v);
	op->obj_location.metadata_bytes = ferry__wire_gcs_object_location_metadata_bytes(v);
	p = ferry__wire_gcs_object_location_place(v);
	op->obj_location.place = (struct ferry_gcs_object_place){p.offset, p.alloc, p.check};
	return 0;
}

static int get_event(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	struct ferry__wire_gcs_object_event_view v;

	if (!ferry__wire_gcs_record_has_object_event(rv))
		return -EPROTO;
	v = ferry__wire_gcs_record_object_event(rv);
	if (op->type == FERRY__GCS_OP_OBJ_REMOVE)
		op->obj_id = ferry__wire_gcs_object_event_object(v);
	else if (op->type == FERRY__GCS_OP_OBJ_OWNER_DIED)
		FROM_WIRE_ID(op->owner, ferry__wire_gcs_object_event_worker(v));
	else
		FROM_WIRE_ID(op->node_id, ferry__wire_gcs_object_event_node(v));
	return 0;
}

static int get_small(struct ferry__wire_gcs_record_view rv, struct ferry__gcs_op *op)
{
	if (op->type == FERRY__GCS_OP_OBJ_SPILLED) {
		struct ferry__wire_gcs_object_spilled_view v;

		if (!ferry__wire_gcs_record_has_object_spilled(rv))
			return -EPROTO;
		v = ferry__wire_gcs_record_object_spilled(rv);
		op->obj_spilled.id = ferry__wire_gcs_object_spilled_id(v);
		return ferry__gcs_fb_text_get(ferry__wire_gcs_object_spilled_url(v),
					      ferry__wire_gcs_object_spilled_url_len(v),
					      FERRY__OBJDIR_MAX_URL, &op->obj_spilled.url);
	}
	if (op->type == FERRY__GCS_OP_REQUEST_DONE) {
		struct ferry__wire_gcs_request_done_view v;

		if (!ferry__wire_gcs_record_has_request_done(rv))
			return -EPROTO;
		v = ferry__wire_gcs_record_request_done(rv);
		memcpy(op->request_done.client, ferry__wire_gcs_request_done_client(v).bytes,
		       sizeof(op->request_done.client));
		op->request_done.seq = ferry__wire_gcs_request_done_seq(v);
		op->request_done.status = ferry__wire_gcs_request_done_status(v);
		return 0;
	}
	if (!ferry__wire_gcs_record_has_dropped(rv)) /* RESTORE_DROPPED */
		return -EPROTO;
	op->dropped.task_events =
		ferry__wire_gcs_dropped_task_events(ferry__wire_gcs_record_dropped(rv));
	op->dropped.errors = ferry__wire_gcs_dropped_errors(ferry__wire_gcs_record_dropped(rv));
	return 0;
}

int ferry__gcs_op_decode_obj_fb(struct ferry__wire_gcs_record_view v, struct ferry__gcs_op *op)
{
	switch (op->type) {
	case FERRY__GCS_OP_PG_CREATE:
	case FERRY__GCS_OP_RESTORE_PG:
		return get_pg(v, op);
	case FERRY__GCS_OP_PG_UPDATE:
		return get_pg_update(v, op);
	case FERRY__GCS_OP_OBJ_ADD:
	case FERRY__GCS_OP_RESTORE_OBJ:
		return get_object(v, op);
	case FERRY__GCS_OP_OBJ_ADD_LOCATION:
	case FERRY__GCS_OP_OBJ_REMOVE_LOCATION:
		return get_location(v, op);
	case FERRY__GCS_OP_OBJ_REMOVE:
	case FERRY__GCS_OP_OBJ_OWNER_DIED:
	case FERRY__GCS_OP_OBJ_NODE_DIED:
		return get_event(v, op);
	default: /* OBJ_SPILLED, REQUEST_DONE, RESTORE_DROPPED */
		return get_small(v, op);
	}
}
