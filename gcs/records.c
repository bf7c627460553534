/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GCS records: validation of every field a client can send, and copies of records into one
 * allocation each (so a record is freed with one ferry__free and copied without partial failure).
 */
#include <errno.h>
#include <float.h>
#include <stdalign.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/records.h"

/* ---- one-allocation copies: measure with base NULL, then copy into base ---- */

struct pack {
	uint8_t *base; /* destination, or NULL while measuring */
	size_t used;   /* bytes laid out so far */
};

static void *pack_alloc(struct pack *p, size_t size, size_t align)
{
	size_t off = FERRY_ALIGN_UP(p->used, align);

	p->used = off + size;
	return p->base && size ? p->base + off : NULL;
}

/* Empty strings are stored as NULL, so a record reads the same after a round trip. */
static const char *pack_str(struct pack *p, const char *s)
{
	size_t n;
	char *d;

	if (!s || !*s)
		return NULL;
	n = strlen(s) + 1;
	d = pack_alloc(p, n, 1);
	if (d)
		memcpy(d, s, n);
	return d;
}

static void pack_resources(struct pack *p, struct ferry__gcs_resources *dst,
			   const struct ferry__gcs_resources *src)
{
	struct ferry_gcs_resource *c =
		pack_alloc(p, src->ncustom * sizeof(*c), alignof(struct ferry_gcs_resource));

	for (uint32_t i = 0; i < src->ncustom; i++) {
		const char *name = pack_str(p, src->custom[i].name);

		if (c)
			c[i] = (struct ferry_gcs_resource){name, src->custom[i].amount};
	}
	if (dst) {
		*dst = *src;
		dst->custom = src->ncustom ? c : NULL;
	}
}

static void *pack_node(struct pack *p, const void *from)
{
	const struct ferry__gcs_node *src = from;
	struct ferry__gcs_node *n = pack_alloc(p, sizeof(*n), alignof(struct ferry__gcs_node));
	struct ferry__gcs_label *labels =
		pack_alloc(p, src->nlabels * sizeof(*labels), alignof(struct ferry__gcs_label));
	const char *address = pack_str(p, src->address);

	if (n)
		*n = *src;
	pack_resources(p, n ? &n->total : NULL, &src->total);
	for (uint32_t i = 0; i < src->nlabels; i++) {
		const char *key = pack_str(p, src->labels[i].key);
		const char *value = pack_str(p, src->labels[i].value);

		if (labels)
			labels[i] = (struct ferry__gcs_label){key, value};
	}
	if (n) {
		n->address = address;
		n->labels = src->nlabels ? labels : NULL;
	}
	return n;
}

static void *pack_job(struct pack *p, const void *from)
{
	const struct ferry__gcs_job *src = from;
	struct ferry__gcs_job *j = pack_alloc(p, sizeof(*j), alignof(struct ferry__gcs_job));
	const char *address = pack_str(p, src->driver_address);
	const char *entrypoint = pack_str(p, src->entrypoint);

	if (j) {
		*j = *src;
		j->driver_address = address;
		j->entrypoint = entrypoint;
	}
	return j;
}

static void *pack_worker(struct pack *p, const void *from)
{
	const struct ferry_gcs_worker_info *src = from;
	struct ferry_gcs_worker_info *w =
		pack_alloc(p, sizeof(*w), alignof(struct ferry_gcs_worker_info));
	const char *address = pack_str(p, src->address);
	const char *message = pack_str(p, src->exit_message);

	if (w) {
		*w = *src;
		w->address = address;
		w->exit_message = message;
	}
	return w;
}

static void *pack_actor(struct pack *p, const void *from)
{
	const struct ferry_gcs_actor_info *src = from;
	struct ferry_gcs_actor_info *a =
		pack_alloc(p, sizeof(*a), alignof(struct ferry_gcs_actor_info));
	const char *name = pack_str(p, src->name);
	const char *class_name = pack_str(p, src->class_name);
	const char *message = pack_str(p, src->death_message);

	if (a) {
		*a = *src;
		a->name = name;
		a->class_name = class_name;
		a->death_message = message;
	}
	return a;
}

/* A placement group to copy, with its bundles' nodes taken from @nodes, or nil if @clear. */
struct pg_src {
	const struct ferry__gcs_pg *pg;	   /* the group */
	const struct ferry_node_id *nodes; /* per bundle, or NULL to keep the group's */
	bool clear;			   /* all nodes nil (a new group) */
};

static void *pack_pg(struct pack *p, const void *from)
{
	const struct pg_src *from_src = from;
	const struct ferry__gcs_pg *src = from_src->pg;
	struct ferry__gcs_pg *g = pack_alloc(p, sizeof(*g), alignof(struct ferry__gcs_pg));
	struct ferry__gcs_bundle *b =
		pack_alloc(p, src->nbundles * sizeof(*b), alignof(struct ferry__gcs_bundle));
	const char *name = pack_str(p, src->name);

	for (uint32_t i = 0; i < src->nbundles; i++) {
		pack_resources(p, b ? &b[i].resources : NULL, &src->bundles[i].resources);
		if (!b)
			continue;
		if (from_src->clear)
			memset(&b[i].node, 0, sizeof(b[i].node));
		else
			b[i].node = from_src->nodes ? from_src->nodes[i] : src->bundles[i].node;
	}
	if (g) {
		*g = *src;
		g->name = name;
		g->bundles = b;
	}
	return g;
}

static void *pack_error(struct pack *p, const void *from)
{
	const struct ferry__gcs_error *src = from;
	struct ferry__gcs_error *e = pack_alloc(p, sizeof(*e), alignof(struct ferry__gcs_error));
	const char *type = pack_str(p, src->type);
	const char *message = pack_str(p, src->message);

	if (e) {
		*e = *src;
		e->type = type;
		e->message = message;
	}
	return e;
}

/* A copy of @src in one ferry__malloc'd block (freed with ferry__free), or NULL. */
static void *clone(void *(*pack)(struct pack *, const void *), const void *src)
{
	struct pack p = {NULL, 0};

	pack(&p, src);
	p.base = ferry__malloc(p.used);
	if (!p.base)
		return NULL;
	p.used = 0;
	return pack(&p, src);
}

/* ---- validation ---- */

static bool is_nil16(const void *id)
{
	return ferry_id_is_nil(id, FERRY_UNIQUE_ID_SIZE);
}

int ferry__gcs_text_check(const char *s, size_t max, bool required, const char *what)
{
	size_t n = s ? strnlen(s, max + 1) : 0;

	if (required && n == 0) {
		FLOG_WARN("gcs", "tables: %s is missing", what);
		return -EINVAL;
	}
	if (n > max) {
		FLOG_WARN("gcs", "tables: %s is longer than %zu bytes", what, max);
		return -EINVAL;
	}
	return 0;
}

bool ferry__gcs_amount_ok(double v)
{
	return v >= 0.0 && v <= DBL_MAX; /* false for NaN, infinities, negatives */
}

static int check_resources(const struct ferry__gcs_resources *r, const char *what)
{
	if (!ferry__gcs_amount_ok(r->cpu) || !ferry__gcs_amount_ok(r->gpu) ||
	    !ferry__gcs_amount_ok(r->memory_bytes) || r->ncustom > FERRY__GCS_MAX_CUSTOM ||
	    (r->ncustom && !r->custom)) {
		FLOG_WARN("gcs", "tables: %s: bad amount or more than %d custom resources", what,
			  FERRY__GCS_MAX_CUSTOM);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < r->ncustom; i++) {
		if (ferry__gcs_text_check(r->custom[i].name, FERRY__GCS_NAME_MAX, true,
					  "resource name") < 0)
			return -EINVAL;
		if (!ferry__gcs_amount_ok(r->custom[i].amount)) {
			FLOG_WARN("gcs", "tables: %s: bad amount of %s", what, r->custom[i].name);
			return -EINVAL;
		}
		for (uint32_t j = 0; j < i; j++) {
			if (strcmp(r->custom[i].name, r->custom[j].name) == 0) {
				FLOG_WARN("gcs", "tables: %s: resource %s twice", what,
					  r->custom[i].name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

int ferry__gcs_node_check(const struct ferry__gcs_node *n)
{
	if (is_nil16(n->id.bytes) || (n->transports & ~FERRY_GCS_TRANSPORT_ALL) ||
	    n->nlabels > FERRY__GCS_MAX_LABELS || (n->nlabels && !n->labels) ||
	    n->state < FERRY_GCS_NODE_ALIVE || n->state > FERRY_GCS_NODE_DEAD) {
		FLOG_WARN("gcs", "tables: node: nil ID, unknown transport or state, or too many "
				 "labels");
		return -EINVAL;
	}
	if (ferry__gcs_text_check(n->address, FERRY__GCS_ADDRESS_MAX, true, "node address") < 0 ||
	    check_resources(&n->total, "node") < 0)
		return -EINVAL;
	if (!ferry__gcs_amount_ok(n->avail_cpu) || !ferry__gcs_amount_ok(n->avail_gpu) ||
	    !ferry__gcs_amount_ok(n->avail_memory_bytes))
		return -EINVAL;
	for (uint32_t i = 0; i < n->nlabels; i++) {
		if (ferry__gcs_text_check(n->labels[i].key, FERRY__GCS_NAME_MAX, true,
					  "label key") < 0 ||
		    ferry__gcs_text_check(n->labels[i].value, FERRY__GCS_NAME_MAX, false,
					  "label value") < 0)
			return -EINVAL;
		for (uint32_t j = 0; j < i; j++) {
			if (strcmp(n->labels[i].key, n->labels[j].key) == 0) {
				FLOG_WARN("gcs", "tables: node label %s twice", n->labels[i].key);
				return -EINVAL;
			}
		}
	}
	return 0;
}

int ferry__gcs_job_check(const struct ferry__gcs_job *j)
{
	if (is_nil16(j->id.bytes) || j->state < FERRY_GCS_JOB_RUNNING ||
	    j->state > FERRY_GCS_JOB_FINISHED) {
		FLOG_WARN("gcs", "tables: job: nil ID or unknown state");
		return -EINVAL;
	}
	if (ferry__gcs_text_check(j->driver_address, FERRY__GCS_ADDRESS_MAX, false,
				  "driver address") < 0 ||
	    ferry__gcs_text_check(j->entrypoint, FERRY__GCS_TEXT_MAX, false, "entrypoint") < 0)
		return -EINVAL;
	return 0;
}

bool ferry__gcs_exit_ok(enum ferry_gcs_exit x)
{
	return x >= FERRY_GCS_EXIT_NONE && x <= FERRY_GCS_EXIT_OUT_OF_RESTARTS;
}

int ferry__gcs_worker_check(const struct ferry_gcs_worker_info *w)
{
	if (is_nil16(w->id.bytes) || w->state < FERRY_GCS_WORKER_ALIVE ||
	    w->state > FERRY_GCS_WORKER_DEAD || !ferry__gcs_exit_ok(w->exit_type)) {
		FLOG_WARN("gcs", "tables: worker: nil ID, unknown state or exit type");
		return -EINVAL;
	}
	if (ferry__gcs_text_check(w->address, FERRY__GCS_ADDRESS_MAX, false, "worker address") <
		    0 ||
	    ferry__gcs_text_check(w->exit_message, FERRY__GCS_TEXT_MAX, false, "exit message") < 0)
		return -EINVAL;
	return 0;
}

int ferry__gcs_actor_check(const struct ferry_gcs_actor_info *a)
{
	if (is_nil16(a->id.bytes) || a->state < FERRY_GCS_ACTOR_PENDING ||
	    a->state > FERRY_GCS_ACTOR_DEAD || !ferry__gcs_exit_ok(a->death_cause)) {
		FLOG_WARN("gcs", "tables: actor: nil ID, unknown state or death cause");
		return -EINVAL;
	}
	if (ferry__gcs_text_check(a->name, FERRY__GCS_NAME_MAX, false, "actor name") < 0 ||
	    ferry__gcs_text_check(a->class_name, FERRY__GCS_NAME_MAX, false, "actor class") < 0 ||
	    ferry__gcs_text_check(a->death_message, FERRY__GCS_TEXT_MAX, false, "death message") <
		    0)
		return -EINVAL;
	return 0;
}

int ferry__gcs_pg_check(const struct ferry__gcs_pg *g)
{
	if (is_nil16(g->id.bytes) || g->strategy < FERRY_GCS_PG_PACK ||
	    g->strategy > FERRY_GCS_PG_STRICT_SPREAD || g->state < FERRY_GCS_PG_PENDING ||
	    g->state > FERRY_GCS_PG_REMOVED || g->nbundles == 0 ||
	    g->nbundles > FERRY__GCS_MAX_BUNDLES || !g->bundles) {
		FLOG_WARN("gcs",
			  "tables: placement group: nil ID, unknown strategy or state, or "
			  "not 1..%d bundles",
			  FERRY__GCS_MAX_BUNDLES);
		return -EINVAL;
	}
	if (ferry__gcs_text_check(g->name, FERRY__GCS_NAME_MAX, false, "placement group name") < 0)
		return -EINVAL;
	for (uint32_t i = 0; i < g->nbundles; i++)
		if (check_resources(&g->bundles[i].resources, "bundle") < 0)
			return -EINVAL;
	return 0;
}

int ferry__gcs_load_check(const struct ferry_gcs_node_load *l)
{
	if (is_nil16(l->id.bytes) || l->nresources > FERRY_GCS_MAX_LOAD_RESOURCES ||
	    (l->nresources && !l->resources)) {
		FLOG_WARN("gcs", "tables: load report: nil node ID or more than %d resources",
			  FERRY_GCS_MAX_LOAD_RESOURCES);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < l->nresources; i++) {
		const struct ferry_gcs_resource_load *r = &l->resources[i];

		if (ferry__gcs_text_check(r->name, FERRY__GCS_NAME_MAX - 1, true, "resource name") <
		    0)
			return -EINVAL;
		if (r->total < 0 || r->available < 0) {
			FLOG_WARN("gcs", "tables: load report: %s is negative", r->name);
			return -EINVAL;
		}
		for (uint32_t j = 0; j < i; j++) {
			if (strcmp(r->name, l->resources[j].name) == 0) {
				FLOG_WARN("gcs", "tables: load report: resource %s twice", r->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

struct ferry__gcs_node *ferry__gcs_node_clone(const struct ferry__gcs_node *n)
{
	return clone(pack_node, n);
}

struct ferry__gcs_job *ferry__gcs_job_clone(const struct ferry__gcs_job *j)
{
	return clone(pack_job, j);
}

struct ferry_gcs_worker_info *ferry__gcs_worker_clone(const struct ferry_gcs_worker_info *w)
{
	return clone(pack_worker, w);
}

struct ferry_gcs_actor_info *ferry__gcs_actor_clone(const struct ferry_gcs_actor_info *a)
{
	return clone(pack_actor, a);
}

struct ferry__gcs_pg *ferry__gcs_pg_clone(const struct ferry__gcs_pg *g,
					  const struct ferry_node_id *nodes, bool clear_nodes)
{
	struct pg_src src = {g, nodes, clear_nodes};

	return clone(pack_pg, &src);
}

struct ferry__gcs_error *ferry__gcs_error_clone(const struct ferry__gcs_error *e)
{
	return clone(pack_error, e);
}
