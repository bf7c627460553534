/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma server's request handlers (all but get and wait, which are in server_wait.c).
 * Each reads a verified payload through the generated accessors, calls the store core and
 * answers; the protocol is in server.c (DESIGN) and schema/plasma.fbs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/metrics.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/server_int.h"

#define LIST_MAX_OBJECTS 4096u /* per reply: ~0.5 MiB */

static const char comp[] = "plasma";

/* The chunk a client gets: what it asks for (0: the default), within [16 KiB, arena / 16]. */
static uint64_t chunk_size_for(const struct ferry__plasma_server *srv, uint64_t want)
{
	uint64_t arena = ferry__plasma_store_arena(srv->store)->size;

	if (!want)
		return srv->chunk_bytes;
	return FERRY_ALIGN_UP(FERRY_MAX(FERRY_MIN(want, arena / 16), 16ull << 10), 64u);
}

static void grant_chunk(struct ferry__plasma_pclient *c, uint64_t want)
{
	int r = ferry__plasma_store_chunk_grant(c->srv->store, c->slot,
						chunk_size_for(c->srv, want));

	if (r < 0)
		FLOG_DEBUG(comp, "server: no chunk for pid %d: %s", c->pid, ferry_strerror(r));
}

/* ---- connect ---- */

static void connect_reply(struct ferry__plasma_pclient *c, uint64_t seq)
{
	struct ferry__plasma_server *srv = c->srv;
	const struct ferry__plasma_arena *a = ferry__plasma_store_arena(srv->store);
	const struct ferry__plasma_arena *ctl = ferry__plasma_store_control(srv->store);
	struct ferry__plasma_client *slot = ferry__plasma_index_client(srv->ix, c->slot);
	struct ferry__wire_plasma_region regions[2] = {
		{FERRY__WIRE_PLASMA_REGION_KIND_ARENA, 0, a->size,
		 a->pages == FERRY_PLASMA_PAGES_HUGETLB ? a->page_size : 0},
		{FERRY__WIRE_PLASMA_REGION_KIND_INDEX, 1, ctl->size, 0},
	};
	struct ferry__wire_plasma_connect_reply m = {
		.seq = seq,
		.store_id = srv->id,
		.regions = regions,
		.regions_count = 2,
		.arena_size = a->size,
		.index_region = 1,
		.index_capacity = srv->ix->mask + 1,
		.index_entry_size = sizeof(struct ferry__plasma_entry),
		.layout_version = FERRY__PLASMA_LAYOUT_VERSION,
		.client_slot = c->slot,
		.client_slots_offset = srv->ix->hdr->clients_offset,
		.client_slot_size = (uint32_t)srv->ix->client_stride,
		.max_clients = srv->ix->max_clients,
		.chunk_offset = atomic_load(&slot->chunk) ? slot->chunk_offset : 0,
		.chunk_size = atomic_load(&slot->chunk) ? slot->chunk_size : 0,
	};
	int fds[2] = {a->fd, ctl->fd};
	int r = ferry__wire_plasma_connect_reply_build(&srv->fb, &m);

	if (r == 0 && c->conn)
		r = ferry__conn_send_fds(c->conn, FERRY__WIRE_MSG_PLASMA_CONNECT_REPLY,
					 ferry__fb_builder_data(&srv->fb),
					 ferry__fb_builder_size(&srv->fb), fds, 2);
	if (r < 0) {
		ferry__plasma_fail(c, "cannot send the connect reply");
		return;
	}
	c->replies++;
}

void ferry__plasma_on_connect(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_connect_view v =
		ferry__wire_plasma_connect_root_verified(payload);
	uint64_t seq = ferry__wire_plasma_connect_seq(v);
	uint32_t slot;
	int r;

	/* The pid the message claims is not believed: it could name any process, one that lives
	 * forever (the slot would never come back) or none in our pid namespace. */
	r = ferry__plasma_identify(c);
	if (r == 0)
		r = ferry__plasma_admit(c, &slot);
	if (r < 0) {
		struct ferry__wire_plasma_connect_reply m = {.seq = seq, .status = r};

		FLOG_WARN(comp, "server: refusing pid %d uid %u: %s", c->pid, c->uid,
			  ferry_strerror(r));
		ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_CONNECT_REPLY,
				   ferry__wire_plasma_connect_reply_build(&c->srv->fb, &m));
		return;
	}
	c->slot = slot;
	c->admitted = true;
	grant_chunk(c, ferry__wire_plasma_connect_want_chunk_size(v));
	FLOG_INFO(comp, "server: client pid %d uid %u (%s) connected in slot %u", c->pid, c->uid,
		  ferry__wire_plasma_connect_name(v) ? ferry__wire_plasma_connect_name(v) : "-",
		  slot);
	connect_reply(c, seq);
}

void ferry__plasma_on_disconnect(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_disconnect_view v =
		ferry__wire_plasma_disconnect_root_verified(payload);

	FLOG_INFO(comp, "server: client pid %d (slot %u) disconnects", c->pid, c->slot);
	ferry__plasma_client_leave(c, true);
	ferry__plasma_reply_status(c, ferry__wire_plasma_disconnect_seq(v), 0);
}

/* ---- create, seal, abort ---- */

void ferry__plasma_on_create(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_create_view v = ferry__wire_plasma_create_root_verified(payload);
	struct ferry__wire_plasma_create_reply m = {
		.seq = ferry__wire_plasma_create_seq(v),
		.object_id = ferry__wire_plasma_create_object_id(v),
		.data_size = ferry__wire_plasma_create_data_size(v),
		.metadata_size = ferry__wire_plasma_create_metadata_size(v),
	};
	uint8_t copy = ferry__wire_plasma_create_copy(v);
	unsigned flags =
		copy == FERRY__WIRE_PLASMA_COPY_KIND_SECONDARY ? 0 : FERRY__PLASMA_F_PRIMARY;
	struct ferry__wire_unique_id owner = ferry__wire_plasma_create_owner_id(v);
	struct ferry_worker_id owner_id;
	struct ferry__plasma_object o;

	/* Absent (an older client): nil, node-owned, as before owners were named. */
	memcpy(owner_id.bytes, owner.bytes, sizeof(owner_id.bytes));
	if (ferry__wire_plasma_create_no_evict(v))
		flags |= FERRY__PLASMA_CREATE_NO_EVICT;
	if (copy > FERRY__WIRE_PLASMA_COPY_KIND_SECONDARY)
		m.status = -EINVAL;
	else if (m.metadata_size > UINT32_MAX)
		m.status = -E2BIG;
	else
		m.status = ferry__plasma_store_object_create_owned(
			c->srv->store, c->slot, &m.object_id, m.data_size,
			(uint32_t)m.metadata_size, flags, &owner_id, &o);
	if (m.status == 0) {
		m.offset = o.offset;
		m.index_slot = o.index;
		m.index_gen = o.gen;
	}
	if (ferry__wire_plasma_create_chunk_size(v))
		grant_chunk(c, ferry__wire_plasma_create_chunk_size(v));
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_CREATE_REPLY,
			   ferry__wire_plasma_create_reply_build(&c->srv->fb, &m));
}

/* @gen: the generation the sender sealed, or NULL (an older sender: any incarnation). */
static int seal(struct ferry__plasma_pclient *c, const struct ferry_object_id *id,
		const uint32_t *gen)
{
	struct ferry__plasma_object o;
	int r = ferry__plasma_index_find(c->srv->ix, id, &o);

	if (r < 0)
		return r;
	/* A late notice: its object was deleted and the ID made again (maybe being written). */
	if (gen && o.gen != *gen)
		return -ENOENT;
	switch (o.state) {
	case FERRY__PLASMA_CREATING:
		r = ferry__plasma_index_seal(c->srv->ix, c->slot, &o);
		if (r < 0)
			return r;
		break;
	case FERRY__PLASMA_SEALED:
	case FERRY__PLASMA_EVICTING:
	case FERRY__PLASMA_SPILLED:
		break;
	default:
		return -ENOENT;
	}
	ferry__plasma_store_object_sealed(c->srv->store, &o);
	ferry__plasma_events_sealed(c->srv, &o, id);
	ferry__plasma_waits_sealed(c->srv, id);
	return 0;
}

void ferry__plasma_on_seal(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_seal_view v = ferry__wire_plasma_seal_root_verified(payload);
	struct ferry_object_id id = ferry__wire_plasma_seal_object_id(v);
	uint64_t seq = ferry__wire_plasma_seal_seq(v);
	uint32_t gen = ferry__wire_plasma_seal_index_gen(v);
	int r = seal(c, &id, ferry__wire_plasma_seal_gen_known(v) ? &gen : NULL);

	if (seq)
		ferry__plasma_reply_status(c, seq, r);
}

void ferry__plasma_on_abort(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_abort_view v = ferry__wire_plasma_abort_root_verified(payload);
	struct ferry_object_id id = ferry__wire_plasma_abort_object_id(v);
	struct ferry__plasma_object o;
	int r = ferry__plasma_index_find(c->srv->ix, &id, &o);

	if (r >= 0)
		r = ferry__plasma_store_object_abort(c->srv->store, c->slot, &o);
	/* Waits for it now wait for an absent object (a miss to report). */
	if (r == 0)
		ferry__plasma_waits_sealed(c->srv, &id);
	ferry__plasma_reply_status(c, ferry__wire_plasma_abort_seq(v), r);
}

/* ---- release ---- */

int ferry__plasma_unpin(struct ferry__plasma_pclient *c, const struct ferry_object_id *id,
			uint32_t n)
{
	struct ferry__plasma_store_pin *p = ferry__hashmap_get(&c->pins, id);
	bool collect = false;

	if (!p || p->count < n)
		return -ENOENT;
	for (uint32_t i = 0; i < n; i++)
		collect |= ferry__plasma_store_unpin(c->srv, p->index, p->gen) == 1;
	p->count -= n;
	if (!p->count)
		ferry__hashmap_remove(&c->pins, id, NULL);
	if (collect)
		ferry__plasma_store_collect(c->srv->store);
	return 0;
}

void ferry__plasma_on_release(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_release_view v =
		ferry__wire_plasma_release_root_verified(payload);
	struct ferry_object_id id = ferry__wire_plasma_release_object_id(v);
	uint32_t count = ferry__wire_plasma_release_count(v);
	uint64_t seq = ferry__wire_plasma_release_seq(v);
	int r = 0;

	if (ferry__wire_plasma_release_local(v))
		ferry__plasma_store_collect(c->srv->store);
	else
		r = ferry__plasma_unpin(c, &id, count ? count : 1);
	if (r < 0)
		FLOG_WARN(comp, "server: pid %d released pins the store does not hold for it",
			  c->pid);
	if (seq)
		ferry__plasma_reply_status(c, seq, r);
}

void ferry__plasma_unpin_all(struct ferry__plasma_pclient *c)
{
	struct ferry__plasma_store_pin *p;
	struct ferry_object_id *id;
	bool collect = false;
	size_t cursor = 0;

	if (!ferry__hashmap_count(&c->pins))
		return;
	while (ferry__hashmap_next(&c->pins, &cursor, (void **)&id, (void **)&p))
		for (uint32_t i = 0; i < p->count; i++)
			collect |= ferry__plasma_store_unpin(c->srv, p->index, p->gen) == 1;
	ferry__hashmap_fini(&c->pins);
	ferry__hashmap_init(&c->pins, sizeof(struct ferry_object_id),
			    sizeof(struct ferry__plasma_store_pin));
	if (collect)
		ferry__plasma_store_collect(c->srv->store);
}

/* ---- delete, contains, evict ---- */

void ferry__plasma_on_delete(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_delete_view v = ferry__wire_plasma_delete_root_verified(payload);
	uint32_t n = ferry__wire_plasma_delete_object_ids_count(v);
	struct ferry__wire_plasma_delete_reply m = {.seq = ferry__wire_plasma_delete_seq(v)};
	int32_t *statuses = ferry__calloc(FERRY_MAX(n, 1u), sizeof(*statuses));

	if (!statuses) {
		m.status = -ENOMEM;
	} else {
		for (uint32_t i = 0; i < n; i++) {
			struct ferry_object_id id = ferry__wire_plasma_delete_object_ids_at(v, i);
			int r = ferry__plasma_store_object_delete(c->srv->store, &id);

			statuses[i] = r > 0 ? 0 : r; /* deferred until the last pin goes */
		}
		m.statuses = statuses;
		m.statuses_count = n;
	}
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_DELETE_REPLY,
			   ferry__wire_plasma_delete_reply_build(&c->srv->fb, &m));
	ferry__free(statuses);
}

int ferry__plasma_server_delete_owned(struct ferry__plasma_server *srv,
				      const struct ferry_worker_id *owner)
{
	int deleted = 0;

	for (uint32_t i = 0; i <= srv->ix->mask; i++) {
		struct ferry__plasma_object o;
		struct ferry_worker_id who;
		struct ferry_object_id id;
		int state = ferry__plasma_index_read(srv->ix, i, &o);

		if (state != FERRY__PLASMA_SEALED && state != FERRY__PLASMA_SPILLED)
			continue;
		who = ferry__plasma_index_owner_id(srv->ix, i);
		if (memcmp(who.bytes, owner->bytes, sizeof(who.bytes)) != 0)
			continue;
		ferry__plasma_index_read_id(srv->ix, i, &id);
		if (ferry__plasma_store_object_delete(srv->store, &id) >= 0)
			deleted++;
	}
	return deleted;
}

int ferry__plasma_server_delete_if_owned(struct ferry__plasma_server *srv,
					 const struct ferry_object_id *id,
					 const struct ferry_worker_id *owner)
{
	struct ferry__plasma_object o;
	struct ferry_worker_id who;
	int state = ferry__plasma_index_find(srv->ix, id, &o);

	if (state < 0)
		return -ENOENT;
	if (state != FERRY__PLASMA_SEALED && state != FERRY__PLASMA_SPILLED)
		return -EBUSY;
	/* The loop thread is the store's only writer: the entry keeps its generation here. */
	who = ferry__plasma_index_owner_id(srv->ix, o.index);
	if (memcmp(who.bytes, owner->bytes, sizeof(who.bytes)) != 0)
		return -EPERM;
	return ferry__plasma_store_object_delete(srv->store, id);
}

static uint8_t wire_state(int state)
{
	switch (state) {
	case FERRY__PLASMA_CREATING:
		return FERRY__WIRE_PLASMA_OBJECT_STATE_CREATING;
	case FERRY__PLASMA_SEALED:
	case FERRY__PLASMA_EVICTING: /* for an instant: it stays, or it is gone */
		return FERRY__WIRE_PLASMA_OBJECT_STATE_SEALED;
	case FERRY__PLASMA_DELETING:
		return FERRY__WIRE_PLASMA_OBJECT_STATE_DELETING;
	case FERRY__PLASMA_SPILLED:
		return FERRY__WIRE_PLASMA_OBJECT_STATE_SPILLED;
	default:
		return FERRY__WIRE_PLASMA_OBJECT_STATE_ABSENT;
	}
}

void ferry__plasma_on_contains(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_contains_view v =
		ferry__wire_plasma_contains_root_verified(payload);
	struct ferry__wire_plasma_contains_reply m = {
		.seq = ferry__wire_plasma_contains_seq(v),
		.object_id = ferry__wire_plasma_contains_object_id(v),
	};
	struct ferry__plasma_object o;

	m.state = wire_state(ferry__plasma_index_find(c->srv->ix, &m.object_id, &o));
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_CONTAINS_REPLY,
			   ferry__wire_plasma_contains_reply_build(&c->srv->fb, &m));
}

void ferry__plasma_on_evict(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_evict_view v = ferry__wire_plasma_evict_root_verified(payload);
	struct ferry__wire_plasma_evict_reply m = {.seq = ferry__wire_plasma_evict_seq(v)};
	uint64_t bytes = ferry__wire_plasma_evict_bytes(v), freed = 0, spilled = 0;
	int n = ferry__plasma_store_evict(c->srv->store, bytes, &freed), r = 0;

	/* Not enough secondaries: spill primaries for the rest. */
	if (freed < bytes)
		r = ferry__plasma_store_spill(c->srv->store, bytes - freed, &spilled);
	m.objects_evicted = (uint64_t)n + (r > 0 ? (uint64_t)r : 0);
	m.bytes_evicted = freed + spilled;
	m.status = r < 0 && !m.objects_evicted ? r : 0;
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_EVICT_REPLY,
			   ferry__wire_plasma_evict_reply_build(&c->srv->fb, &m));
}

/* ---- list ---- */

struct listed {
	struct ferry_object_id id; /* sort key */
	uint32_t index;		   /* entry slot */
};

static int by_id(const void *a, const void *b)
{
	return memcmp(((const struct listed *)a)->id.bytes, ((const struct listed *)b)->id.bytes,
		      FERRY_OBJECT_ID_SIZE);
}

static bool listable(int state, bool unsealed)
{
	return state == FERRY__PLASMA_SEALED || state == FERRY__PLASMA_SPILLED ||
	       state == FERRY__PLASMA_EVICTING ||
	       (unsealed && (state == FERRY__PLASMA_CREATING || state == FERRY__PLASMA_DELETING));
}

/* Restore the max-heap (by ID) below position @i of @h (@n entries). */
static void sift_down(struct listed *h, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t big = i, l = 2 * i + 1, r = l + 1;
		struct listed t;

		if (l < n && by_id(&h[l], &h[big]) > 0)
			big = l;
		if (r < n && by_id(&h[r], &h[big]) > 0)
			big = r;
		if (big == i)
			return;
		t = h[i];
		h[i] = h[big];
		h[big] = t;
		i = big;
	}
}

static void sift_up(struct listed *h, uint32_t i)
{
	while (i && by_id(&h[(i - 1) / 2], &h[i]) < 0) {
		struct listed t = h[i];

		h[i] = h[(i - 1) / 2];
		h[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
}

/*
 * The first @max entries after @after in ID order into *@out (allocated), and whether more
 * follow. One pass over the index keeping the @max smallest IDs in a max-heap: memory is
 * bounded by the page, not by the number of objects. Returns the count or -ENOMEM.
 */
static int64_t collect_listed(struct ferry__plasma_server *srv, const struct ferry_object_id *after,
			      bool unsealed, uint32_t max, struct listed **out, bool *more)
{
	struct listed *h = ferry__calloc(max + 1, sizeof(*h)), c;
	struct ferry__plasma_object o;
	uint32_t n = 0;

	if (!h)
		return -ENOMEM;
	*more = false;
	for (uint32_t i = 0; i <= srv->ix->mask; i++) {
		if (!listable(ferry__plasma_index_read(srv->ix, i, &o), unsealed))
			continue;
		ferry__plasma_index_read_id(srv->ix, i, &c.id);
		c.index = i;
		if (memcmp(c.id.bytes, after->bytes, sizeof(after->bytes)) <= 0)
			continue;
		if (n < max) {
			h[n] = c;
			sift_up(h, n++);
			continue;
		}
		*more = true;
		if (by_id(&c, &h[0]) < 0) {
			h[0] = c;
			sift_down(h, n, 0);
		}
	}
	qsort(h, n, sizeof(*h), by_id);
	*out = h;
	return n;
}

static void fill_info(struct ferry__plasma_server *srv, const struct listed *l,
		      struct ferry__wire_plasma_object_info *info)
{
	struct ferry__plasma_object o;
	int state = ferry__plasma_index_read(srv->ix, l->index, &o);
	struct ferry_worker_id owner;

	*info = (struct ferry__wire_plasma_object_info){
		.object_id = l->id,
		.state = wire_state(state),
		.copy = (o.flags & FERRY__PLASMA_F_PRIMARY)
				? FERRY__WIRE_PLASMA_COPY_KIND_PRIMARY
				: FERRY__WIRE_PLASMA_COPY_KIND_SECONDARY,
		.offset = state == FERRY__PLASMA_SPILLED ? 0 : o.offset,
		.data_size = o.data_size,
		.metadata_size = o.metadata_size,
		.pin_count = (uint32_t)ferry__plasma_index_pin_count(srv->ix, l->index) +
			     (srv->held[l->index].gen == o.gen ? srv->held[l->index].count : 0),
		.owner_slot = state == FERRY__PLASMA_CREATING ? o.owner : -1,
		.lru_stamp = atomic_load(&srv->ix->ext[l->index].lru_stamp),
	};
	owner = ferry__plasma_index_owner_id(srv->ix, l->index);
	memcpy(info->owner_id.bytes, owner.bytes, sizeof(info->owner_id.bytes));
}

int ferry__plasma_server_list_reply(struct ferry__plasma_server *srv, struct ferry__fb_builder *fb,
				    const void *payload)
{
	struct ferry__wire_plasma_list_view v = ferry__wire_plasma_list_root_verified(payload);
	struct ferry__wire_plasma_list_reply m = {.seq = ferry__wire_plasma_list_seq(v)};
	struct ferry_object_id after = ferry__wire_plasma_list_after(v);
	uint32_t max = ferry__wire_plasma_list_max_objects(v);
	struct ferry__wire_plasma_object_info *infos = NULL;
	struct listed *l = NULL;
	bool more;
	int64_t n;
	int ret;

	max = max ? FERRY_MIN(max, LIST_MAX_OBJECTS) : LIST_MAX_OBJECTS;
	n = collect_listed(srv, &after, ferry__wire_plasma_list_include_unsealed(v), max, &l,
			   &more);
	if (n >= 0)
		infos = ferry__calloc((uint64_t)n + 1, sizeof(*infos));
	if (!infos) {
		m.status = -ENOMEM;
	} else {
		m.objects_count = (uint64_t)n;
		m.more = more;
		for (size_t i = 0; i < m.objects_count; i++)
			fill_info(srv, &l[i], &infos[i]);
		m.objects = infos;
	}
	ret = ferry__wire_plasma_list_reply_build(fb, &m);
	ferry__free(infos);
	ferry__free(l);
	return ret;
}

void ferry__plasma_on_list(struct ferry__plasma_pclient *c, const void *payload)
{
	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_LIST_REPLY,
			   ferry__plasma_server_list_reply(c->srv, &c->srv->fb, payload));
}

/* ---- stats ---- */

/* Counts by state and kind, from the table (O(table)). */
static void count_objects(struct ferry__plasma_server *srv,
			  struct ferry__wire_plasma_stats_reply *m)
{
	for (uint32_t i = 0; i <= srv->ix->mask; i++) {
		struct ferry__plasma_object o;
		int state = ferry__plasma_index_read(srv->ix, i, &o);

		if (state < FERRY__PLASMA_CREATING)
			continue;
		m->sealed_objects +=
			state == FERRY__PLASMA_SEALED || state == FERRY__PLASMA_SPILLED;
		m->creating_objects += state == FERRY__PLASMA_CREATING;
		m->pinned_objects += ferry__plasma_index_pinned(srv->ix, i);
		m->primary_objects += (o.flags & FERRY__PLASMA_F_PRIMARY) != 0;
		m->secondary_objects += (o.flags & FERRY__PLASMA_F_PRIMARY) == 0;
	}
}

int ferry__plasma_server_stats_reply(struct ferry__plasma_server *srv, struct ferry__fb_builder *fb,
				     uint64_t seq)
{
	struct ferry_plasma_stats st;
	struct ferry__wire_plasma_stats_reply m = {.seq = seq};

	ferry__plasma_store_stats(srv->store, &st);
	count_objects(srv, &m);
	m.capacity_bytes = st.capacity_bytes;
	m.used_bytes = st.allocated_bytes;
	m.free_bytes = st.free_bytes;
	m.largest_free_block = st.largest_free_bytes;
	m.free_blocks = st.free_blocks;
	m.fragmentation =
		st.free_bytes ? 1.0 - (double)st.largest_free_bytes / (double)st.free_bytes : 0.0;
	m.objects = st.objects;
	m.evicted_objects = st.evicted_objects;
	m.evicted_bytes = st.evicted_bytes;
	m.spilled_objects = st.spilled_objects;
	m.spilled_bytes = st.spilled_bytes;
	m.restored_objects = st.restored_objects;
	m.restored_bytes = st.restored_bytes;
	m.clients = (uint32_t)st.clients;
	m.index_capacity = (uint32_t)st.table_slots;
	m.hugepage_size = st.pages == FERRY_PLASMA_PAGES_HUGETLB ? st.page_size_bytes : 0;
	m.max_objects = st.max_objects;
	m.index_slots_used = st.table_slots_used;
	m.chunks = st.chunks;
	m.chunk_bytes = st.chunk_bytes;
	m.deferred_deletes = st.deferred_deletes;
	m.page_size = st.page_size_bytes;
	m.pages = st.pages;
	m.spilled_total_objects = st.spilled_total_objects;
	m.spilled_total_bytes = st.spilled_total_bytes;
	m.spill_files = st.spill_files;
	m.spill_disk_bytes = st.spill_disk_bytes;
	return ferry__wire_plasma_stats_reply_build(fb, &m);
}

void ferry__plasma_server_metrics(struct ferry__plasma_server *srv, struct ferry__metric_buf *b)
{
	struct ferry_plasma_stats st;

	ferry__plasma_store_stats(srv->store, &st);
	ferry__metric_put(b, "ferry_store_capacity_bytes", "gauge", "The store's arena",
			  (double)st.capacity_bytes);
	ferry__metric_put(b, "ferry_store_used_bytes", "gauge", "Bytes allocated in the arena",
			  (double)st.allocated_bytes);
	ferry__metric_put(b, "ferry_store_objects", "gauge", "Objects held (sealed, spilled, made)",
			  (double)st.objects);
	ferry__metric_put(b, "ferry_store_clients", "gauge", "Clients connected",
			  (double)st.clients);
	ferry__metric_put(b, "ferry_store_evictions_total", "counter",
			  "Secondary copies evicted for room", (double)st.evicted_objects);
	ferry__metric_put(b, "ferry_store_evicted_bytes_total", "counter",
			  "Bytes of the evicted copies", (double)st.evicted_bytes);
	ferry__metric_put(b, "ferry_store_spilled_bytes", "gauge",
			  "Bytes of primary copies on disk now", (double)st.spilled_bytes);
	ferry__metric_put(b, "ferry_store_spilled_bytes_total", "counter",
			  "Bytes written to disk by spilling", (double)st.spilled_total_bytes);
	ferry__metric_put(b, "ferry_store_restored_bytes_total", "counter",
			  "Bytes read back from disk", (double)st.restored_bytes);
}

void ferry__plasma_on_stats(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_stats_view v = ferry__wire_plasma_stats_root_verified(payload);

	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_STATS_REPLY,
			   ferry__plasma_server_stats_reply(c->srv, &c->srv->fb,
							    ferry__wire_plasma_stats_seq(v)));
}
