/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma client's requests that always go to the store: wait, delete, evict, list and
 * stats (include/ferry/plasma.h). Each is one request and one reply on the shared socket.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/util.h"
#include "plasma/client_int.h"

#define LIST_PAGE 4096u

int ferry_plasma_client_wait(struct ferry_plasma_client *c, const struct ferry_object_id *ids,
			     size_t n, size_t num_ready, int64_t timeout_ms, bool *ready)
{
	struct ferry__wire_plasma_wait m = {
		.object_ids = ids,
		.object_ids_count = n,
		.num_ready = (uint32_t)FERRY_MIN(num_ready, (size_t)UINT32_MAX),
		.timeout_ms = timeout_ms,
	};
	struct ferry__wire_plasma_wait_reply_view v;
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	uint32_t got;
	int r;

	if (!c || (n && !ids) || n > UINT32_MAX)
		return -EINVAL;
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_WAIT_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_WAIT, &b,
			     ferry__wire_plasma_wait_build(&b, &m));
	if (r < 0)
		return r;
	v = ferry__wire_plasma_wait_reply_root_verified(p.buf);
	r = ferry__wire_plasma_wait_reply_status(v);
	got = ferry__wire_plasma_wait_reply_ready_count(v);
	if (ready) {
		for (size_t i = 0; i < n; i++)
			ready[i] = false;
		/* The ready IDs come in request order: one pass matches them. */
		for (size_t i = 0, k = 0; i < n && k < got; i++) {
			struct ferry_object_id id =
				ferry__wire_plasma_wait_reply_ready_at(v, (uint32_t)k);

			if (ferry_object_id_eq(&id, &ids[i])) {
				ready[i] = true;
				k++;
			}
		}
	}
	ferry__free(p.buf);
	return r < 0 ? r : (int)FERRY_MIN(got, (uint32_t)INT32_MAX);
}

int ferry_plasma_client_delete(struct ferry_plasma_client *c, const struct ferry_object_id *ids,
			       size_t n, int *statuses)
{
	struct ferry__wire_plasma_delete m = {.object_ids = ids, .object_ids_count = n};
	struct ferry__wire_plasma_delete_reply_view v;
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	int r, first = 0;

	if (!c || (n && !ids) || n > UINT32_MAX)
		return -EINVAL;
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_DELETE_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_DELETE, &b,
			     ferry__wire_plasma_delete_build(&b, &m));
	if (r < 0)
		return r;
	v = ferry__wire_plasma_delete_reply_root_verified(p.buf);
	r = ferry__wire_plasma_delete_reply_status(v);
	if (r == 0 && ferry__wire_plasma_delete_reply_statuses_count(v) != n)
		r = -EPROTO;
	for (size_t i = 0; r == 0 && i < n; i++) {
		int s = ferry__wire_plasma_delete_reply_statuses_at(v, (uint32_t)i);

		if (statuses)
			statuses[i] = s;
		if (s < 0 && !first)
			first = s;
	}
	ferry__free(p.buf);
	return r < 0 ? r : first;
}

int ferry_plasma_client_evict(struct ferry_plasma_client *c, uint64_t bytes, uint64_t *freed)
{
	struct ferry__wire_plasma_evict m = {.bytes = bytes};
	struct ferry__wire_plasma_evict_reply_view v;
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	int r;

	if (!c)
		return -EINVAL;
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_EVICT_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_EVICT, &b,
			     ferry__wire_plasma_evict_build(&b, &m));
	if (r < 0)
		return r;
	v = ferry__wire_plasma_evict_reply_root_verified(p.buf);
	r = ferry__wire_plasma_evict_reply_status(v);
	if (freed)
		*freed = ferry__wire_plasma_evict_reply_bytes_evicted(v);
	if (r == 0)
		r = (int)FERRY_MIN(ferry__wire_plasma_evict_reply_objects_evicted(v),
				   (uint64_t)INT32_MAX);
	ferry__free(p.buf);
	return r;
}

/* ---- list ---- */

static enum ferry_plasma_object_state public_state(uint8_t wire)
{
	switch (wire) {
	case FERRY__WIRE_PLASMA_OBJECT_STATE_CREATING:
		return FERRY_PLASMA_OBJECT_CREATING;
	case FERRY__WIRE_PLASMA_OBJECT_STATE_DELETING:
		return FERRY_PLASMA_OBJECT_DELETING;
	case FERRY__WIRE_PLASMA_OBJECT_STATE_SPILLED:
		return FERRY_PLASMA_OBJECT_SPILLED;
	default:
		return FERRY_PLASMA_OBJECT_SEALED;
	}
}

/* Append one reply's objects to *@out. Returns 1 if more follow, 0 at the end, or -errno. */
static int list_page(struct ferry__wire_plasma_list_reply_view v,
		     struct ferry_plasma_object_info **out, size_t *count, size_t *cap,
		     struct ferry_object_id *after)
{
	uint32_t n = ferry__wire_plasma_list_reply_objects_count(v);
	int r = ferry__wire_plasma_list_reply_status(v);

	if (r < 0)
		return r;
	if (*count + n > *cap) {
		size_t cap2 = FERRY_MAX(*cap * 2, *count + n);
		struct ferry_plasma_object_info *grown = ferry__realloc(*out, cap2 * sizeof(**out));

		if (!grown)
			return -ENOMEM;
		*out = grown;
		*cap = cap2;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_plasma_object_info_view iv =
			ferry__wire_plasma_list_reply_objects_at(v, i);
		struct ferry__wire_unique_id owner;

		(*out)[(*count)++] = (struct ferry_plasma_object_info){
			.id = ferry__wire_plasma_object_info_object_id(iv),
			.state = public_state(ferry__wire_plasma_object_info_state(iv)),
			.primary = ferry__wire_plasma_object_info_copy(iv) ==
				   FERRY__WIRE_PLASMA_COPY_KIND_PRIMARY,
			.data_size = ferry__wire_plasma_object_info_data_size(iv),
			.metadata_size = ferry__wire_plasma_object_info_metadata_size(iv),
			.pin_count = ferry__wire_plasma_object_info_pin_count(iv),
			.lru_stamp = (uint32_t)ferry__wire_plasma_object_info_lru_stamp(iv),
		};
		owner = ferry__wire_plasma_object_info_owner_id(iv);
		memcpy((*out)[*count - 1].owner.bytes, owner.bytes, sizeof(owner.bytes));
		*after = (*out)[*count - 1].id;
	}
	return ferry__wire_plasma_list_reply_more(v) && n ? 1 : 0;
}

int ferry_plasma_client_list(struct ferry_plasma_client *c, bool unsealed,
			     struct ferry_plasma_object_info **objects, size_t *count)
{
	struct ferry_plasma_object_info *out = NULL;
	struct ferry_object_id after = {{0}};
	size_t n = 0, cap = 0;
	int r;

	if (!c || !objects || !count)
		return -EINVAL;
	do {
		struct ferry__wire_plasma_list m = {
			.max_objects = LIST_PAGE, .after = after, .include_unsealed = unsealed};
		struct ferry__fb_builder b = {0};
		struct ferry__pc_pending p;

		m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_LIST_REPLY);
		r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_LIST, &b,
				     ferry__wire_plasma_list_build(&b, &m));
		if (r < 0)
			break;
		r = list_page(ferry__wire_plasma_list_reply_root_verified(p.buf), &out, &n, &cap,
			      &after);
		ferry__free(p.buf);
	} while (r == 1);
	if (r < 0) {
		ferry__free(out);
		return r;
	}
	*objects = out;
	*count = n;
	return 0;
}

void ferry_plasma_list_free(struct ferry_plasma_object_info *objects)
{
	ferry__free(objects);
}

/* ---- stats ---- */

static void stats_from(struct ferry__wire_plasma_stats_reply_view v, struct ferry_plasma_stats *s)
{
	*s = (struct ferry_plasma_stats){
		.capacity_bytes = ferry__wire_plasma_stats_reply_capacity_bytes(v),
		.allocated_bytes = ferry__wire_plasma_stats_reply_used_bytes(v),
		.free_bytes = ferry__wire_plasma_stats_reply_free_bytes(v),
		.largest_free_bytes = ferry__wire_plasma_stats_reply_largest_free_block(v),
		.free_blocks = ferry__wire_plasma_stats_reply_free_blocks(v),
		.objects = ferry__wire_plasma_stats_reply_objects(v),
		.max_objects = ferry__wire_plasma_stats_reply_max_objects(v),
		.table_slots_used = ferry__wire_plasma_stats_reply_index_slots_used(v),
		.table_slots = ferry__wire_plasma_stats_reply_index_capacity(v),
		.clients = ferry__wire_plasma_stats_reply_clients(v),
		.chunks = ferry__wire_plasma_stats_reply_chunks(v),
		.chunk_bytes = ferry__wire_plasma_stats_reply_chunk_bytes(v),
		.deferred_deletes = ferry__wire_plasma_stats_reply_deferred_deletes(v),
		.evicted_objects = ferry__wire_plasma_stats_reply_evicted_objects(v),
		.evicted_bytes = ferry__wire_plasma_stats_reply_evicted_bytes(v),
		.spilled_objects = ferry__wire_plasma_stats_reply_spilled_objects(v),
		.spilled_bytes = ferry__wire_plasma_stats_reply_spilled_bytes(v),
		.spilled_total_objects = ferry__wire_plasma_stats_reply_spilled_total_objects(v),
		.spilled_total_bytes = ferry__wire_plasma_stats_reply_spilled_total_bytes(v),
		.restored_objects = ferry__wire_plasma_stats_reply_restored_objects(v),
		.restored_bytes = ferry__wire_plasma_stats_reply_restored_bytes(v),
		.spill_files = ferry__wire_plasma_stats_reply_spill_files(v),
		.spill_disk_bytes = ferry__wire_plasma_stats_reply_spill_disk_bytes(v),
		.page_size_bytes = ferry__wire_plasma_stats_reply_page_size(v),
		.pages = ferry__wire_plasma_stats_reply_pages(v),
	};
}

int ferry_plasma_client_stats(struct ferry_plasma_client *c, struct ferry_plasma_stats *out)
{
	struct ferry__wire_plasma_stats m = {0};
	struct ferry__wire_plasma_stats_reply_view v;
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	int r;

	if (!c || !out)
		return -EINVAL;
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_STATS_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_STATS, &b,
			     ferry__wire_plasma_stats_build(&b, &m));
	if (r < 0)
		return r;
	v = ferry__wire_plasma_stats_reply_root_verified(p.buf);
	r = ferry__wire_plasma_stats_reply_status(v);
	if (r == 0)
		stats_from(v, out);
	ferry__free(p.buf);
	return r;
}
