/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server's multi-record reads: KV keys by prefix, KV multi-get and whole-table listings.
 * Each answers with one GcsReply whose value packs the records in the gcs/codec.h encoding
 * (see GcsKvGet and GcsTableGet in schema/gcs.fbs).
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "gcs/server_int.h"

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

static int add_key(void *arg, struct ferry__gcs_slice ns, struct ferry__gcs_slice key,
		   struct ferry__gcs_slice value)
{
	struct ferry__gcs_writer *w = arg;

	(void)ns;
	(void)value;
	ferry__gcs_put_bytes(w, key.data, key.size);
	return w->err;
}

void ferry__gcs_srv_kv_keys(struct ferry__gcs_sconn *c, uint64_t seq, struct ferry__gcs_slice ns,
			    struct ferry__gcs_slice prefix)
{
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__gcs_writer w = {&srv->out, 0};
	int ret;

	srv->out.size = 0;
	ferry__gcs_put_u32(&w, 0); /* the count, patched below */
	ret = ferry__kv_scan(ferry__gcs_state_kv(srv->state), ns, false, prefix, add_key, &w);
	if (ret >= 0 && !w.err)
		ferry__gcs_store_u32(srv->out.data, (uint32_t)ret);
	else
		ret = w.err ? w.err : ret;
	if (ret >= 0 && fits(srv, srv->out.size) < 0)
		ret = -E2BIG;
	ferry__gcs_srv_reply(c, seq, ret, srv->out.data, ret < 0 ? 0 : srv->out.size, 0);
}

/* Decode a multi-get's key list into @keys (ferry__malloc'd). Count, or -EPROTO / -ENOMEM. */
static int read_keys(struct ferry__gcs_slice list, struct ferry__gcs_slice **keys)
{
	struct ferry__gcs_reader r = {list.data, list.size, 0};
	uint32_t n = ferry__gcs_get_u32(&r);

	if (r.err || n > MULTI_GET_MAX || n > r.left / 4)
		return -EPROTO;
	*keys = ferry__calloc(n ? n : 1, sizeof(**keys));
	if (!*keys)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		(*keys)[i] = ferry__gcs_get_bytes(&r, FERRY__GCS_TEXT_MAX);
	if (r.err || r.left) {
		ferry__free(*keys);
		*keys = NULL; /* callers free *keys whatever the result */
		return -EPROTO;
	}
	return (int)n;
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
	struct ferry__gcs_writer w = {&srv->out, 0};
	struct ferry__gcs_slice *keys = NULL, *values = NULL;
	bool *found = NULL;
	int n = read_keys(list, &keys), ret = n;

	if (n == -EPROTO) {
		FLOG_WARN(COMP, "malformed multi-get key list from %s", ferry__conn_peer(c->conn));
		return -EPROTO;
	}
	if (n >= 0) {
		values = ferry__calloc((size_t)n + 1, sizeof(*values));
		found = ferry__calloc((size_t)n + 1, sizeof(*found));
		ret = values && found ? ferry__kv_multi_get(ferry__gcs_state_kv(srv->state), ns,
							    (size_t)n, keys, values, found)
				      : -ENOMEM;
	}
	srv->out.size = 0;
	for (int i = 0; ret >= 0 && i < n; i++) {
		ferry__gcs_put_u8(&w, found[i]);
		ferry__gcs_put_bytes(&w, values[i].data, values[i].size);
	}
	if (ret >= 0 && w.err)
		ret = w.err;
	if (ret >= 0 && fits(srv, srv->out.size) < 0)
		ret = -E2BIG;
	ferry__gcs_srv_reply(c, seq, ret, srv->out.data, ret < 0 ? 0 : srv->out.size, 0);
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
	struct ferry__gcs_server *srv = c->srv;
	struct ferry__gcs_tables *t = ferry__gcs_state_tables(srv->state);
	struct ferry__gcs_buf rec = {0};
	const void *r;
	size_t cursor = 0;
	int ret = 0, count = 0;

	srv->out.size = 0;
	while (ret == 0 && (r = ferry__gcs_tables_next(t, (enum ferry__gcs_table)table, &cursor))) {
		struct ferry__gcs_writer w = {&srv->out, 0};

		rec.size = 0;
		ret = ferry__gcs_srv_table_record(table, r, &rec);
		if (ret == 0)
			ferry__gcs_put_bytes(&w, rec.data, rec.size);
		ret = ret ? ret : w.err;
		count++;
	}
	ferry__gcs_buf_fini(&rec);
	ret = ret < 0 ? ret : count;
	if (ret >= 0 && fits(srv, srv->out.size) < 0)
		ret = -E2BIG;
	ferry__gcs_srv_reply(c, seq, ret, srv->out.data, ret < 0 ? 0 : srv->out.size, 0);
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
	struct ferry__gcs_writer w = {&srv->out, 0};
	struct ferry__gcs_buf rec = {0};
	int ret = 0, found = 0;

	srv->out.size = 0;
	if (n > LOOKUP_BATCH_MAX)
		ret = -E2BIG;
	for (uint32_t i = 0; ret == 0 && i < n; i++) {
		struct ferry_object_id id = ferry__wire_gcs_object_lookup_batch_object_ids_at(v, i);
		const void *e = ferry__objdir_get(dir, &id);

		rec.size = 0;
		if (e)
			ret = ferry__gcs_record_encode(FERRY_GCS_CH_OBJECT_LOCATIONS, e,
						       &srv->scratch, &rec);
		ferry__gcs_put_bytes(&w, rec.data, rec.size);
		ret = ret ? ret : w.err;
		found += e != NULL;
	}
	ferry__gcs_buf_fini(&rec);
	ret = ret < 0 ? ret : found;
	if (ret >= 0 && fits(srv, srv->out.size) < 0)
		ret = -E2BIG;
	ferry__gcs_srv_reply(c, ferry__wire_gcs_object_lookup_batch_seq(v), ret, srv->out.data,
			     ret < 0 ? 0 : srv->out.size, 0);
}
