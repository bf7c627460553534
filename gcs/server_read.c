/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server's multi-record reads: KV keys by prefix, KV multi-get and whole-table listings.
 * Each answers with one GcsReply whose value is a GcsValueList (gcs/values.h; see GcsKvGet,
 * GcsTableGet and GcsObjectLookupBatch in schema/gcs.fbs).
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "gcs/server_int.h"
#include "gcs/values.h"

#define COMP "gcs"
#define MULTI_GET_MAX 4096 /* keys in one multi-get */

/* A reply of @size value bytes fits the connection's message limit (with room for the rest). */
static int fits(const struct ferry__gcs_server *srv, size_t size)
{
	size_t max = srv->opts.max_message_bytes ? srv->opts.max_message_bytes : 4u << 20;

	if (size + 256 <= max)
		return 0;
	FLOG_WARN(COMP, "a reply of %zu bytes exceeds the %zu-byte message limit", size, max);
	return -E2BIG;
}

/* Entries gathered for a list reply; their data borrows from the state, or from recs. */
struct list {
	struct ferry__gcs_value *v; /* entries */
	size_t n, cap;		    /* used, allocated */
	struct ferry__gcs_buf recs; /* records encoded for this reply (table list, lookup batch) */
};

static int list_add(struct list *l, struct ferry__gcs_slice data, bool found)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct ferry__gcs_value *v = ferry__realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (struct ferry__gcs_value){data, found};
	return 0;
}

/* Add the record appended to l->recs from @start on as an entry. recs may still move, so the
 * entry keeps the record's offset in its data pointer until list_fix(). */
static int list_add_rec(struct list *l, size_t start)
{
	return list_add(
		l, (struct ferry__gcs_slice){(const void *)(uintptr_t)start, l->recs.size - start},
		true);
}

/* Turn the offsets list_add_rec() kept into pointers, now that recs no longer moves. */
static void list_fix(struct list *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].found)
			l->v[i].data.data = l->recs.data + (uintptr_t)l->v[i].data.data;
}

static void list_fini(struct list *l)
{
	ferry__free(l->v);
	ferry__gcs_buf_fini(&l->recs);
}

/* Reply @status with @l as the value (when @status >= 0). */
static void reply_list(struct ferry__gcs_sconn *c, uint64_t seq, int status, struct list *l)
{
	struct ferry__gcs_server *srv = c->srv;

	srv->out.size = 0;
	if (status >= 0)
		status = ferry__gcs_values_encode(l->v, l->n, &srv->out) < 0 ? -ENOMEM : status;
	if (status >= 0 && fits(srv, srv->out.size) < 0)
		status = -E2BIG;
	ferry__gcs_srv_reply(c, seq, status, srv->out.data, status < 0 ? 0 : srv->out.size, 0);
	list_fini(l);
}

static int add_key(void *arg, struct ferry__gcs_slice ns, struct ferry__gcs_slice key,
		   struct ferry__gcs_slice value)
{
	(void)ns;
	(void)value;
	return list_add(arg, key, true);
}

void ferry__gcs_srv_kv_keys(struct ferry__gcs_sconn *c, uint64_t seq, struct ferry__gcs_slice ns,
			    struct ferry__gcs_slice prefix)
{
	struct list l = {0};
	int ret =
		ferry__kv_scan(ferry__gcs_state_kv(c->srv->state), ns, false, prefix, add_key, &l);

	reply_list(c, seq, ret, &l);
}

/* Decode a multi-get's key list into @keys (ferry__malloc'd). Count, or -EPROTO / -ENOMEM. */
static int read_keys(struct ferry__gcs_slice list, struct ferry__gcs_slice **keys)
{
	struct ferry__gcs_values vl;

	*keys = NULL; /* callers free *keys whatever the result */
	if (ferry__gcs_values_open(list.data, list.size, MULTI_GET_MAX, "multi-get keys", &vl) < 0)
		return -EPROTO;
	*keys = ferry__calloc(vl.count ? vl.count : 1, sizeof(**keys));
	if (!*keys)
		return -ENOMEM;
	for (uint32_t i = 0; i < vl.count; i++) {
		(*keys)[i] = ferry__gcs_values_at(&vl, i).data;
		if ((*keys)[i].size > FERRY__GCS_TEXT_MAX)
			return -EPROTO;
	}
	return (int)vl.count;
}

int ferry__gcs_srv_key_list_check(struct ferry__gcs_slice list)
{
	struct ferry__gcs_slice *keys = NULL;
	int n = read_keys(list, &keys);

	ferry__free(keys);
	return n == -EPROTO ? n : 0;
}

/* Returns -EPROTO (the caller closes the connection) or 0. */
int ferry__gcs_srv_kv_multi_get(struct ferry__gcs_sconn *c, uint64_t seq,
				struct ferry__gcs_slice ns, struct ferry__gcs_slice list)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__gcs_slice *keys = NULL, *values = NULL;
	struct list l = {0};
	bool *found = NULL;
	int n = read_keys(list, &keys), ret = n;

	if (n == -EPROTO) {
		FLOG_WARN(COMP, "malformed multi-get key list from %s", ferry__conn_peer(c->conn));
		ferry__free(keys);
		return -EPROTO;
	}
	if (n >= 0) {
		values = ferry__calloc((size_t)n + 1, sizeof(*values));
		found = ferry__calloc((size_t)n + 1, sizeof(*found));
		ret = values && found ? ferry__kv_multi_get(ferry__gcs_state_kv(srv->state), ns,
							    (size_t)n, keys, values, found)
				      : -ENOMEM;
	}
	for (int i = 0; ret >= 0 && i < n; i++) {
		int err =
			list_add(&l, found[i] ? values[i] : (struct ferry__gcs_slice){0}, found[i]);

		ret = err < 0 ? err : ret;
	}
	reply_list(c, seq, ret, &l);
	ferry__free(found);
	ferry__free(values);
	ferry__free(keys);
	return 0;
}

int ferry__gcs_srv_table_record(int table, const void *rec, struct ferry__gcs_buf *out)
{
	struct ferry__gcs_op op = {0};
	struct ferry__gcs_writer w = {out, 0};

	ferry__gcs_restore_op(&op, (enum ferry__gcs_table)table, rec);
	ferry__gcs_op_encode(&op, &w);
	return w.err;
}

void ferry__gcs_srv_table_list(struct ferry__gcs_sconn *c, uint64_t seq, int table)
{
	struct ferry__gcs_tables *t = ferry__gcs_state_tables(c->srv->state);
	struct list l = {0};
	const void *r;
	size_t cursor = 0;
	int ret = 0, count = 0;

	while (ret == 0 && (r = ferry__gcs_tables_next(t, (enum ferry__gcs_table)table, &cursor))) {
		size_t start = l.recs.size;
		struct ferry__gcs_buf rec = {0};

		ret = ferry__gcs_srv_table_record(table, r, &rec);
		if (ret == 0) {
			struct ferry__gcs_writer w = {&l.recs, 0};

			ferry__gcs_put_raw(&w, rec.data, rec.size);
			ret = w.err ? w.err : list_add_rec(&l, start);
		}
		ferry__gcs_buf_fini(&rec);
		count++;
	}
	list_fix(&l);
	reply_list(c, seq, ret < 0 ? ret : count, &l);
}

/* The task events log, oldest first, at most the newest @max (0: all it keeps), each as a
 * TaskEvent record: `ferry list tasks` reads it. */
void ferry__gcs_srv_task_events(struct ferry__gcs_sconn *c, uint64_t seq, size_t max)
{
	struct ferry__gcs_tables *t = ferry__gcs_state_tables(c->srv->state);
	size_t n = ferry__gcs_task_events_count(t), first = max && max < n ? n - max : 0;
	struct list l = {0};
	int ret = 0, count = 0;

	for (size_t i = first; ret == 0 && i < n; i++) {
		struct ferry__gcs_op op = {.type = FERRY__GCS_OP_TASK_EVENT};
		size_t start = l.recs.size;
		struct ferry__gcs_writer w = {&l.recs, 0};

		op.task_event = *ferry__gcs_task_event_at(t, i);
		ferry__gcs_op_encode(&op, &w);
		ret = w.err ? w.err : list_add_rec(&l, start);
		count++;
	}
	list_fix(&l);
	reply_list(c, seq, ret < 0 ? ret : count, &l);
}

/* The IDs of one batch are at most what a reply can describe in a few MiB; more is a client's
 * bug, answered -E2BIG rather than a multi-MiB reply. */
#define LOOKUP_BATCH_MAX 16384

void ferry__gcs_srv_lookup_batch(struct ferry__gcs_sconn *c, const void *payload)
{
	struct ferry__wire_gcs_object_lookup_batch_view v =
		ferry__wire_gcs_object_lookup_batch_root_verified(payload);
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__objdir *dir = ferry__gcs_state_objdir(srv->state);
	uint32_t n = ferry__wire_gcs_object_lookup_batch_object_ids_count(v);
	struct ferry__gcs_buf rec = {0};
	struct list l = {0};
	int ret = 0, found = 0;

	if (n > LOOKUP_BATCH_MAX)
		ret = -E2BIG;
	for (uint32_t i = 0; ret == 0 && i < n; i++) {
		struct ferry_object_id id = ferry__wire_gcs_object_lookup_batch_object_ids_at(v, i);
		const void *e = ferry__objdir_get(dir, &id);
		size_t start = l.recs.size;

		if (!e) {
			ret = list_add(&l, (struct ferry__gcs_slice){0}, false);
			continue;
		}
		rec.size = 0;
		ret = ferry__gcs_record_encode(FERRY_GCS_CH_OBJECT_LOCATIONS, e, &srv->scratch,
					       &rec);
		if (ret == 0) {
			struct ferry__gcs_writer w = {&l.recs, 0};

			ferry__gcs_put_raw(&w, rec.data, rec.size);
			ret = w.err ? w.err : list_add_rec(&l, start);
		}
		found++;
	}
	ferry__gcs_buf_fini(&rec);
	list_fix(&l);
	reply_list(c, ferry__wire_gcs_object_lookup_batch_seq(v), ret < 0 ? ret : found, &l);
}
