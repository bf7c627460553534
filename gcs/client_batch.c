/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS client's batch object lookup: the locations, sizes and owners of many objects, one
 * GcsObjectLookupBatch per shard that holds some of them, all sent at once; the replies are
 * gathered on the loop thread and handed over as one allocation.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"
#include "gcs/client_int.h"
#include "gcs/values.h"

#define COMP "gcs-client"
/* As the server's limit (gcs/server_read.c): what one reply describes in a few MiB. */
#define BATCH_MAX 16384

struct batch;

/* The IDs of one shard: order[first .. first + count) index the caller's array. */
struct part {
	struct batch *b; /* owner */
	uint32_t first;	 /* into order */
	uint32_t count;	 /* IDs */
};

struct batch {
	atomic_uint left;		     /* parts not answered yet */
	ferry_gcs_done_fn cb;		     /* the user's callback */
	void *arg;			     /* for cb */
	size_t n;			     /* IDs asked */
	uint32_t *order;		     /* entry indices grouped by shard */
	int *status;			     /* per entry */
	struct ferry_gcs_object_info *infos; /* per entry; locations their own allocations */
	unsigned nparts;		     /* length of parts */
	struct part parts[];		     /* one per shard with IDs */
};

static void batch_free(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		ferry__free(b->infos[i].locations);
	ferry__free(b->order);
	ferry__free(b->status);
	ferry__free(b->infos);
	ferry__free(b);
}

/* The public result: header, infos, places, statuses, locations in one allocation. */
static struct ferry_gcs_object_batch *batch_pack(const struct batch *b)
{
	struct ferry_gcs_object_batch *out;
	struct ferry_gcs_object_place *places;
	struct ferry_node_id *locs;
	size_t nloc = 0;

	for (size_t i = 0; i < b->n; i++)
		nloc += b->infos[i].nlocations;
	out = ferry__malloc(sizeof(*out) + b->n * (sizeof(*out->infos) + sizeof(*out->status)) +
			    nloc * (sizeof(*places) + sizeof(*locs)));
	if (!out)
		return NULL;
	out->n = b->n;
	out->infos = (struct ferry_gcs_object_info *)(out + 1);
	places = (struct ferry_gcs_object_place *)(out->infos + b->n);
	out->status = (int *)(places + nloc);
	locs = (struct ferry_node_id *)(out->status + b->n);
	for (size_t i = 0; i < b->n; i++) {
		const struct ferry_gcs_object_info *in = &b->infos[i];
		uint32_t k = in->nlocations;

		out->status[i] = b->status[i];
		out->infos[i] = *in;
		out->infos[i].locations = k ? locs : NULL;
		out->infos[i].places = k ? places : NULL;
		if (k) {
			memcpy(locs, in->locations, k * sizeof(*locs));
			memcpy(places, in->places, k * sizeof(*places));
		}
		locs += k;
		places += k;
	}
	return out;
}

static void batch_finish(struct batch *b)
{
	struct ferry_gcs_object_batch *out;
	int found = 0, err = 0;

	for (size_t i = 0; i < b->n; i++) {
		found += b->status[i] == 0;
		if (b->status[i] < 0 && b->status[i] != -ENOENT && !err)
			err = b->status[i];
	}
	/* Nothing answered at all: the error alone, as a single lookup would. */
	if (!found && err) {
		b->cb(b->arg, err, NULL);
	} else if (!(out = batch_pack(b))) {
		b->cb(b->arg, -ENOMEM, NULL);
	} else {
		b->cb(b->arg, found, out);
	}
	batch_free(b);
}

/* A GcsValueList with, per ID of @p in order, the object's record or found false (unknown). */
static int part_decode(struct part *p, const void *value, size_t size)
{
	struct ferry__gcs_values vl;
	struct batch *b = p->b;

	if (ferry__gcs_values_open(value, size, p->count, "batch lookup reply", &vl) < 0)
		return -EPROTO;
	if (vl.count != p->count) {
		FLOG_WARN(COMP, "batch lookup reply: %u records for %u IDs", vl.count, p->count);
		return -EPROTO;
	}
	for (uint32_t j = 0; j < p->count; j++) {
		struct ferry__gcs_value e = ferry__gcs_values_at(&vl, j);
		uint32_t idx = b->order[p->first + j];

		b->status[idx] =
			e.found ? ferry__gcs_decode_object(e.data.data, e.data.size, &b->infos[idx])
				: -ENOENT;
	}
	return 0;
}

static void part_done(struct part *p, int status)
{
	struct batch *b = p->b;

	for (uint32_t j = 0; status < 0 && j < p->count; j++) {
		uint32_t idx = b->order[p->first + j];

		if (b->status[idx] == 0) /* a decode that failed half-way: not found after all */
			ferry__free(b->infos[idx].locations);
		memset(&b->infos[idx], 0, sizeof(b->infos[idx]));
		b->status[idx] = status;
	}
	if (atomic_fetch_sub(&b->left, 1) == 1)
		batch_finish(b);
}

static void part_reply(void *arg, const struct ferry__gcs_reply *r)
{
	struct part *p = arg;
	int status = r->status;

	if (status >= 0)
		status = part_decode(p, r->value, r->size);
	if (status == -EPROTO)
		FLOG_WARN(COMP, "malformed batch lookup reply (%zu bytes)", r->size);
	part_done(p, status < 0 ? status : 0);
}

/* Group @ids by shard into b->order and the parts (filled in shard order). */
static struct batch *batch_new(struct ferry_gcs_client *c, const struct ferry_object_id *ids,
			       size_t n)
{
	uint32_t counts[64] = {0}, next[64];
	unsigned nparts = 0;
	struct batch *b;
	uint32_t pos = 0;

	for (size_t i = 0; i < n; i++)
		nparts += counts[ferry_gcs_object_shard(&ids[i], c->nshards)]++ == 0;
	b = ferry__calloc(1, sizeof(*b) + nparts * sizeof(*b->parts));
	if (!b)
		return NULL;
	b->n = n;
	b->order = ferry__calloc(n, sizeof(*b->order));
	b->status = ferry__calloc(n, sizeof(*b->status));
	b->infos = ferry__calloc(n, sizeof(*b->infos));
	if (!b->order || !b->status || !b->infos) {
		batch_free(b);
		return NULL;
	}
	for (unsigned s = 0; s < c->nshards; s++) {
		next[s] = pos;
		if (counts[s])
			b->parts[b->nparts++] = (struct part){b, pos, counts[s]};
		pos += counts[s];
	}
	for (size_t i = 0; i < n; i++)
		b->order[next[ferry_gcs_object_shard(&ids[i], c->nshards)]++] = (uint32_t)i;
	atomic_init(&b->left, b->nparts);
	return b;
}

/* The request of part @p (its IDs gathered from @ids), sent. */
static int part_send(struct ferry_gcs_client *c, struct part *p, const struct ferry_object_id *ids)
{
	struct ferry__wire_gcs_object_lookup_batch m = {0};
	struct ferry_object_id *mine = ferry__malloc(p->count * sizeof(*mine));
	struct ferry__fb_builder b = {0};
	void *payload = NULL;
	size_t len = 0;
	int ret = -ENOMEM;

	if (!mine)
		return ret;
	for (uint32_t j = 0; j < p->count; j++)
		mine[j] = ids[p->b->order[p->first + j]];
	m.seq = ferry__gcs_client_next_seq(c);
	m.object_ids = mine;
	m.object_ids_count = p->count;
	ret = ferry__wire_gcs_object_lookup_batch_build(&b, &m);
	if (ret == 0 && (payload = ferry__malloc(ferry__fb_builder_size(&b)))) {
		len = ferry__fb_builder_size(&b);
		memcpy(payload, ferry__fb_builder_data(&b), len);
	}
	ferry__fb_builder_fini(&b);
	ferry__free(mine);
	if (!payload)
		return ret < 0 ? ret : -ENOMEM;
	return ferry__gcs_client_send(
		c, ferry_gcs_object_shard(&ids[p->b->order[p->first]], c->nshards),
		FERRY__WIRE_MSG_GCS_OBJECT_LOOKUP_BATCH, payload, len, m.seq, NULL, part_reply, p);
}

int ferry_gcs_object_lookup_batch_async(struct ferry_gcs_client *c,
					const struct ferry_object_id *ids, size_t n,
					ferry_gcs_done_fn cb, void *arg)
{
	struct batch *b;
	unsigned nparts;

	if (!c || !ids || !cb || n == 0 || n > BATCH_MAX) {
		FLOG_ERROR(COMP, "a batch lookup takes 1..%d object IDs", BATCH_MAX);
		return -EINVAL;
	}
	b = batch_new(c, ids, n);
	if (!b)
		return -ENOMEM;
	b->cb = cb;
	b->arg = arg;
	/* The sender holds the batch too while it sends: the loop thread may answer (and finish)
	 * every part sent so far before the next is. */
	atomic_fetch_add(&b->left, 1);
	nparts = b->nparts;
	for (unsigned i = 0; i < nparts; i++) {
		int ret = part_send(c, &b->parts[i], ids);

		if (ret < 0 && i == 0) { /* nothing sent: the callback will never run */
			batch_free(b);
			return ret;
		}
		if (ret < 0) /* after the first: that part's IDs carry the error */
			part_done(&b->parts[i], ret);
	}
	if (atomic_fetch_sub(&b->left, 1) == 1)
		batch_finish(b);
	return 0;
}

int ferry_gcs_object_lookup_batch(struct ferry_gcs_client *c, const struct ferry_object_id *ids,
				  size_t n, struct ferry_gcs_object_batch **out)
{
	struct ferry__gcs_sync *w = out ? ferry__gcs_sync_new(c) : NULL;
	void *result;
	int ret;

	if (!out)
		return -EINVAL;
	ret = FERRY__GCS_WAIT(
		c, w, &result,
		ferry_gcs_object_lookup_batch_async(c, ids, n, ferry__gcs_sync_done, w));
	if (ret >= 0)
		*out = result;
	return ret;
}

int ferry__gcs_batch_reply_check(const void *value, size_t size, uint32_t count)
{
	struct batch *b = ferry__calloc(1, sizeof(*b) + sizeof(*b->parts));
	struct ferry_gcs_object_batch *out;
	int ret = -ENOMEM;

	if (!b || !count || count > BATCH_MAX) {
		ferry__free(b);
		return b ? -EINVAL : -ENOMEM;
	}
	b->n = count;
	b->order = ferry__calloc(count, sizeof(*b->order));
	b->status = ferry__calloc(count, sizeof(*b->status));
	b->infos = ferry__calloc(count, sizeof(*b->infos));
	if (b->order && b->status && b->infos) {
		for (uint32_t i = 0; i < count; i++)
			b->order[i] = i;
		b->parts[0] = (struct part){b, 0, count};
		b->nparts = 1;
		ret = part_decode(&b->parts[0], value, size);
		for (uint32_t i = 0; ret < 0 && i < count; i++) /* as part_done() undoes it */
			if (b->status[i] == 0)
				ferry__free(b->infos[i].locations);
		if (ret < 0)
			memset(b->infos, 0, count * sizeof(*b->infos));
		if (ret == 0 && (out = batch_pack(b)))
			ferry__free(out);
	}
	batch_free(b);
	return ret;
}
