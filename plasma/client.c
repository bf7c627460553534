/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma client (include/ferry/plasma.h): connect and map the store's memory; create,
 * seal, get and release through the shared index where possible, and through the store's
 * socket where not. Threads and the socket: client_int.h (DESIGN).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/client_arena.h"
#include "plasma/client_int.h"

static const char comp[] = "plasma";

/* ---- connect ---- */

/* Map the regions the connect reply lists (fds in @fds, by position). */
static int map_regions(struct ferry_plasma_client *c,
		       struct ferry__wire_plasma_connect_reply_view v, const int *fds,
		       unsigned nfds, unsigned attach_flags)
{
	struct ferry__plasma_arena *maps[2] = {&c->arena, &c->control};
	uint32_t n = ferry__wire_plasma_connect_reply_regions_count(v);
	int r;

	for (uint32_t i = 0; i < n; i++) {
		struct ferry__wire_plasma_region_view rv =
			ferry__wire_plasma_connect_reply_regions_at(v, i);
		uint8_t kind = ferry__wire_plasma_region_kind(rv);
		uint8_t at = ferry__wire_plasma_region_fd_index(rv);

		if (kind > FERRY__WIRE_PLASMA_REGION_KIND_INDEX || at >= nfds || maps[kind]->base)
			return -EPROTO;
		r = ferry__plasma_arena_attach(fds[at], ferry__wire_plasma_region_size(rv),
					       kind == FERRY__WIRE_PLASMA_REGION_KIND_ARENA
						       ? attach_flags
						       : FERRY__ARENA_POPULATE,
					       maps[kind]);
		if (r < 0)
			return r;
	}
	if (!c->arena.base || !c->control.base)
		return -EPROTO;
	return ferry__plasma_index_open(&c->ix, c->control.base, c->control.size, c->arena.base,
					c->arena.size);
}

static int adopt_reply(struct ferry_plasma_client *c, const uint8_t *reply, const int *fds,
		       unsigned nfds, unsigned flags)
{
	struct ferry__wire_plasma_connect_reply_view v =
		ferry__wire_plasma_connect_reply_root_verified(reply);
	int r = ferry__wire_plasma_connect_reply_status(v);

	if (r < 0) {
		FLOG_ERROR(comp, "client: the store refused us: %s", ferry_strerror(r));
		return r;
	}
	if (ferry__wire_plasma_connect_reply_layout_version(v) != FERRY__PLASMA_LAYOUT_VERSION) {
		FLOG_ERROR(comp, "client: store layout version %u, this library knows %u",
			   ferry__wire_plasma_connect_reply_layout_version(v),
			   FERRY__PLASMA_LAYOUT_VERSION);
		return -EPROTO;
	}
	r = map_regions(c, v, fds, nfds,
			(flags & FERRY_PLASMA_CONNECT_POPULATE) ? FERRY__ARENA_POPULATE : 0);
	if (r < 0)
		return r;
	c->slot = ferry__wire_plasma_connect_reply_client_slot(v);
	if (c->slot >= c->ix.max_clients)
		return -EPROTO;
	c->chunk_bytes = ferry__wire_plasma_connect_reply_chunk_size(v);
	/* Larger objects would leave most of a chunk unused when they do not fit. */
	c->local_max = c->chunk_bytes / 4;
	return 0;
}

static int client_init(struct ferry_plasma_client *c)
{
	c->fd = -1;
	ferry__hashmap_init(&c->creating, sizeof(struct ferry_object_id),
			    sizeof(struct ferry__plasma_object));
	ferry__frame_parser_init(&c->parser, 0);
	if (pthread_mutex_init(&c->lock, NULL))
		return -ENOMEM;
	if (pthread_mutex_init(&c->send_lock, NULL))
		goto err_lock;
	if (pthread_mutex_init(&c->io_lock, NULL))
		goto err_send_lock;
	if (pthread_cond_init(&c->io_cond, NULL))
		goto err_io_lock;
	if (pthread_mutex_init(&c->chunk_lock, NULL))
		goto err_io_cond;
	return 0;

err_io_cond:
	pthread_cond_destroy(&c->io_cond);
err_io_lock:
	pthread_mutex_destroy(&c->io_lock);
err_send_lock:
	pthread_mutex_destroy(&c->send_lock);
err_lock:
	pthread_mutex_destroy(&c->lock);
	return -ENOMEM;
}

static void client_free(struct ferry_plasma_client *c)
{
	ferry__plasma_arena_destroy(&c->control);
	ferry__plasma_arena_destroy(&c->arena);
	if (c->fd >= 0)
		close(c->fd);
	ferry__free(c->socket_path);
	ferry__pc_io_fini(c);
	ferry__hashmap_fini(&c->creating);
	pthread_mutex_destroy(&c->chunk_lock);
	pthread_cond_destroy(&c->io_cond);
	pthread_mutex_destroy(&c->io_lock);
	pthread_mutex_destroy(&c->send_lock);
	pthread_mutex_destroy(&c->lock);
	ferry__free(c);
}

int ferry_plasma_client_connect(const char *socket_path,
				const struct ferry_plasma_connect_opts *opts,
				struct ferry_plasma_client **out)
{
	struct ferry_plasma_connect_opts o = opts ? *opts : (struct ferry_plasma_connect_opts){0};
	struct ferry_plasma_client *c;
	uint8_t *reply = NULL;
	unsigned nfds = 0;
	size_t len;
	int fds[2], r;

	if (!socket_path || !out)
		return -EINVAL;
	c = ferry__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	r = client_init(c);
	if (r < 0) {
		ferry__free(c);
		return r;
	}
	c->owner = o.owner;
	c->socket_path = ferry__strdup(socket_path);
	r = c->socket_path ? ferry__pc_socket(socket_path, o.wait_ms) : -ENOMEM;
	c->fd = r;
	if (r >= 0)
		r = ferry__pc_hello(c, o.name ? o.name : "client", o.chunk_bytes, &reply, &len, fds,
				    &nfds);
	if (r >= 0)
		r = adopt_reply(c, reply, fds, nfds, o.flags);
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]); /* the mappings stay */
	ferry__free(reply);
	if (r < 0) {
		client_free(c);
		return r;
	}
	*out = c;
	return 0;
}

void ferry_plasma_client_disconnect(struct ferry_plasma_client *c)
{
	struct ferry__wire_plasma_disconnect m = {0};
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;

	if (!c)
		return;
	/* Wait for the store's answer: it must be done with our slot before we unmap. */
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_STATUS_REPLY);
	if (ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_DISCONNECT, &b,
			     ferry__wire_plasma_disconnect_build(&b, &m)) == 0)
		ferry__free(p.buf);
	client_free(c);
}

/* ---- create, seal, abort ---- */

/* Remember @o as being created by us (lock held). */
static int track(struct ferry_plasma_client *c, const struct ferry_object_id *id,
		 const struct ferry__plasma_object *o)
{
	struct ferry__plasma_object *slot;
	int r = ferry__hashmap_put(&c->creating, id, (void **)&slot);

	if (r >= 0)
		*slot = *o;
	return r < 0 ? r : 0;
}

static int notify_abort(struct ferry_plasma_client *c, const struct ferry_object_id *id)
{
	struct ferry__wire_plasma_abort m = {.object_id = *id};
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	int r;

	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_STATUS_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_ABORT, &b,
			     ferry__wire_plasma_abort_build(&b, &m));
	if (r < 0)
		return r;
	r = ferry__wire_plasma_status_reply_status(
		ferry__wire_plasma_status_reply_root_verified(p.buf));
	ferry__free(p.buf);
	return r;
}

/* Create in our chunk (@index_flags: FERRY__PLASMA_F_PRIMARY or 0), owned by @owner. Returns
 * 0, -ENOBUFS (no room: ask the store), or another -errno. */
static int create_local(struct ferry_plasma_client *c, const struct ferry_object_id *id,
			uint64_t data_size, uint32_t metadata_size, unsigned index_flags,
			const struct ferry_worker_id *owner, struct ferry__plasma_object *o)
{
	int r;

	pthread_mutex_lock(&c->lock);
	r = ferry__plasma_index_create_owned(&c->ix, c->slot, id, data_size, metadata_size,
					     index_flags, owner, o);
	if (r == 0 && track(c, id, o) < 0) {
		pthread_mutex_unlock(&c->lock);
		notify_abort(c, id);
		return -ENOMEM;
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

static int create_remote(struct ferry_plasma_client *c, const struct ferry_object_id *id,
			 uint64_t data_size, uint32_t metadata_size, unsigned flags, bool refill,
			 const struct ferry_worker_id *owner, struct ferry__plasma_object *o)
{
	struct ferry__wire_plasma_create m = {
		.object_id = *id,
		.data_size = data_size,
		.metadata_size = metadata_size,
		.copy = (flags & FERRY_PLASMA_CREATE_SECONDARY)
				? FERRY__WIRE_PLASMA_COPY_KIND_SECONDARY
				: FERRY__WIRE_PLASMA_COPY_KIND_PRIMARY,
		.no_evict = (flags & FERRY_PLASMA_CREATE_NO_EVICT) != 0,
		.chunk_size = refill ? c->chunk_bytes : 0,
	};
	struct ferry__wire_plasma_create_reply_view v;
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	int r;

	memcpy(m.owner_id.bytes, owner->bytes, sizeof(m.owner_id.bytes));
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_CREATE_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_CREATE, &b,
			     ferry__wire_plasma_create_build(&b, &m));
	if (r < 0)
		return r;
	v = ferry__wire_plasma_create_reply_root_verified(p.buf);
	r = ferry__wire_plasma_create_reply_status(v);
	*o = (struct ferry__plasma_object){
		.offset = ferry__wire_plasma_create_reply_offset(v),
		.data_size = data_size,
		.metadata_size = metadata_size,
		.index = ferry__wire_plasma_create_reply_index_slot(v),
		.gen = ferry__wire_plasma_create_reply_index_gen(v),
		.owner = (uint16_t)c->slot,
		.flags = m.copy == FERRY__WIRE_PLASMA_COPY_KIND_PRIMARY ? FERRY__PLASMA_F_PRIMARY
									: 0,
	};
	ferry__free(p.buf);
	if (r == 0 &&
	    (o->offset > c->arena.size || data_size + metadata_size > c->arena.size - o->offset))
		r = -EPROTO;
	if (r < 0)
		return r;
	o->data = c->arena.base + o->offset;
	pthread_mutex_lock(&c->lock);
	r = track(c, id, o);
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		notify_abort(c, id);
	return r;
}

int ferry_plasma_client_create_owned(struct ferry_plasma_client *c,
				     const struct ferry_object_id *id, uint64_t data_size,
				     const void *metadata, uint32_t metadata_size, unsigned flags,
				     const struct ferry_worker_id *owner, void **data)
{
	uint64_t total = data_size + metadata_size;
	struct ferry__plasma_object o;
	int r;

	if (!c || !id || !data)
		return -EINVAL;
	if (!owner)
		owner = &c->owner;
	if (total < data_size || total > c->arena.size)
		return -E2BIG;
	/*
	 * Small objects, primaries and secondary copies alike, go to our chunk: no round trip.
	 * A secondary made there is evictable once the store learns of its seal (seal() always
	 * tells it). NO_EVICT only matters when the store must make room, which a chunk create
	 * never does.
	 */
	if (total <= c->local_max) {
		/*
		 * The store retires our current chunk when it grants the next one. A local create
		 * in another thread of ours at that moment could reserve space in the old chunk
		 * before its live count shows it, and the store would free the chunk under it. So
		 * local creates and the refill after a full chunk take turns (chunk_lock); a
		 * refill is one round trip per chunk.
		 */
		pthread_mutex_lock(&c->chunk_lock);
		r = create_local(c, id, data_size, metadata_size,
				 (flags & FERRY_PLASMA_CREATE_SECONDARY) ? 0
									 : FERRY__PLASMA_F_PRIMARY,
				 owner, &o);
		if (r == -ENOBUFS)
			r = create_remote(c, id, data_size, metadata_size, flags, true, owner, &o);
		pthread_mutex_unlock(&c->chunk_lock);
		goto out;
	}
	r = create_remote(c, id, data_size, metadata_size, flags, false, owner, &o);
out:
	if (r < 0)
		return r;
	if (metadata)
		memcpy(o.data + data_size, metadata, metadata_size);
	*data = o.data;
	return 0;
}

int ferry__plasma_client_create_small(struct ferry_plasma_client *c,
				      const struct ferry_object_id *id, uint64_t data_size,
				      const void *metadata, uint32_t metadata_size, unsigned flags,
				      const struct ferry_worker_id *owner, void **data)
{
	uint64_t total = data_size + metadata_size;
	struct ferry__plasma_object o;
	int r;

	if (!c || !id || !data)
		return -EINVAL;
	if (total < data_size || total > c->local_max)
		return -ENOBUFS;
	/* Never wait for another thread's refill (see create_ex): the caller must not block. */
	if (pthread_mutex_trylock(&c->chunk_lock) != 0)
		return -ENOBUFS;
	r = create_local(c, id, data_size, metadata_size,
			 (flags & FERRY_PLASMA_CREATE_SECONDARY) ? 0 : FERRY__PLASMA_F_PRIMARY,
			 owner ? owner : &c->owner, &o);
	pthread_mutex_unlock(&c->chunk_lock);
	if (r < 0)
		return r;
	if (metadata)
		memcpy(o.data + data_size, metadata, metadata_size);
	*data = o.data;
	return 0;
}

int ferry_plasma_client_create(struct ferry_plasma_client *c, const struct ferry_object_id *id,
			       uint64_t data_size, const void *metadata, uint32_t metadata_size,
			       void **data)
{
	return ferry_plasma_client_create_owned(c, id, data_size, metadata, metadata_size, 0, NULL,
						data);
}

int ferry_plasma_client_create_ex(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				  uint64_t data_size, const void *metadata, uint32_t metadata_size,
				  unsigned flags, void **data)
{
	return ferry_plasma_client_create_owned(c, id, data_size, metadata, metadata_size, flags,
						NULL, data);
}

/* A notice to the store (seq 0: no reply) that entry generation @gen of @id is sealed. */
static int notice_seal(struct ferry_plasma_client *c, const struct ferry_object_id *id,
		       uint32_t gen, bool later)
{
	struct ferry__wire_plasma_seal m = {.object_id = *id, .gen_known = true, .index_gen = gen};
	struct ferry__fb_builder b = {0};
	int built = ferry__wire_plasma_seal_build(&b, &m);

	if (later || c->later_nonblock)
		return ferry__pc_send_later(c, FERRY__WIRE_MSG_PLASMA_SEAL, &b, built, !later);
	return ferry__pc_finish(c, NULL, FERRY__WIRE_MSG_PLASMA_SEAL, &b, built);
}

static int notice_release(struct ferry_plasma_client *c, const struct ferry_object_id *id,
			  bool local)
{
	struct ferry__wire_plasma_release m = {.object_id = *id, .count = 1, .local = local};
	struct ferry__fb_builder b = {0};

	return ferry__pc_finish(c, NULL, FERRY__WIRE_MSG_PLASMA_RELEASE, &b,
				ferry__wire_plasma_release_build(&b, &m));
}

/* Why @id cannot be sealed or aborted by us: it is not ours, not there, or sealed. */
static int not_ours(struct ferry_plasma_client *c, const struct ferry_object_id *id)
{
	struct ferry__plasma_object o;
	int state = ferry__plasma_index_find(&c->ix, id, &o);

	if (state < 0)
		return -ENOENT;
	if (o.owner != c->slot)
		return -EPERM;
	return state == FERRY__PLASMA_SEALED || state == FERRY__PLASMA_SPILLED ? -EALREADY
									       : -ENOENT;
}

int ferry__plasma_client_seal_begin(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				    uint32_t *gen)
{
	struct ferry__plasma_object *o;
	bool secondary;
	int r;

	if (!c || !id || !gen)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	o = ferry__hashmap_get(&c->creating, id);
	if (!o) {
		pthread_mutex_unlock(&c->lock);
		return not_ours(c, id);
	}
	secondary = !(o->flags & FERRY__PLASMA_F_PRIMARY);
	*gen = o->gen;
	r = ferry__plasma_index_seal(&c->ix, c->slot, o);
	ferry__hashmap_remove(&c->creating, id, NULL);
	pthread_mutex_unlock(&c->lock);
	/*
	 * A get or wait parked in the store (2): it must be told now. A hook or subscriber
	 * listens (1), or a secondary copy (always told of: one made in our chunk is evictable
	 * only once the store lists it, and the store cannot tell which of its creates are done
	 * otherwise): told, maybe a little later. No reply is awaited either way.
	 */
	if (r < 0)
		return r;
	return r == 2 ? 2 : r == 1 || secondary;
}

int ferry__plasma_client_seal_end(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				  uint32_t gen, bool later)
{
	return notice_seal(c, id, gen, later);
}

int ferry__plasma_client_flush(struct ferry_plasma_client *c, bool wait)
{
	struct ferry_plasma_stats st;
	int r;

	if (!c)
		return -EINVAL;
	r = ferry__pc_flush(c, !wait);
	/* Any reply comes after the store handled every frame before its request. */
	if (r == 0 && wait)
		r = ferry_plasma_client_stats(c, &st);
	return r;
}

void ferry__plasma_client_notices_nonblocking(struct ferry_plasma_client *c)
{
	pthread_mutex_lock(&c->send_lock);
	c->later_nonblock = true;
	pthread_mutex_unlock(&c->send_lock);
}

int ferry_plasma_client_seal(struct ferry_plasma_client *c, const struct ferry_object_id *id)
{
	uint32_t gen;
	int r = ferry__plasma_client_seal_begin(c, id, &gen);

	if (r > 0) /* a one-way notice, not a round trip */
		(void)ferry__plasma_client_seal_end(c, id, gen, false);
	return r < 0 ? r : 0;
}

int ferry_plasma_client_abort(struct ferry_plasma_client *c, const struct ferry_object_id *id)
{
	if (!c || !id)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	ferry__hashmap_remove(&c->creating, id, NULL);
	pthread_mutex_unlock(&c->lock);
	return notify_abort(c, id);
}

int ferry_plasma_client_put_owned(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				  const void *data, uint64_t size, const void *metadata,
				  uint32_t metadata_size, unsigned flags,
				  const struct ferry_worker_id *owner)
{
	void *buf;
	int r;

	if (size && !data)
		return -EINVAL;
	r = ferry_plasma_client_create_owned(c, id, size, metadata, metadata_size, flags, owner,
					     &buf);
	if (r < 0)
		return r;
	if (size)
		memcpy(buf, data, size);
	return ferry_plasma_client_seal(c, id);
}

int ferry_plasma_client_put(struct ferry_plasma_client *c, const struct ferry_object_id *id,
			    const void *data, uint64_t size, const void *metadata,
			    uint32_t metadata_size)
{
	return ferry_plasma_client_put_owned(c, id, data, size, metadata, metadata_size, 0, NULL);
}

/* ---- get, release, contains ---- */

static void view_fill(struct ferry_plasma_client *c, struct ferry_plasma_view *v, uint64_t offset,
		      uint64_t data_size, uint32_t metadata_size, uint32_t index, uint32_t gen,
		      uint32_t how)
{
	const uint8_t *data = c->arena.base + offset;

	*v = (struct ferry_plasma_view){
		.data = data,
		.data_size = data_size,
		.metadata = data + data_size,
		.metadata_size = metadata_size,
		.id = v->id,
		.handle_index = index,
		.handle_gen = gen,
		.handle_flags = how,
	};
}

/* Pin what is sealed here, in shared memory. Returns how many views still need the store. */
static size_t get_local(struct ferry_plasma_client *c, const struct ferry_object_id *ids, size_t n,
			int64_t timeout_ms, struct ferry_plasma_view *views)
{
	size_t missing = 0;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++) {
		struct ferry__plasma_object o;
		int r = ferry__plasma_index_get(&c->ix, c->slot, &ids[i], &o);

		views[i] = (struct ferry_plasma_view){.id = ids[i], .status = r};
		if (r == 0) {
			view_fill(c, &views[i], o.offset, o.data_size, o.metadata_size, o.index,
				  o.gen, FERRY__PC_VIEW_LOCAL);
		} else if (timeout_ms == 0 && (r == -ENOENT || r == -EINPROGRESS)) {
			views[i].status = -ETIMEDOUT; /* not there, and no waiting */
		} else if (r != -EPROTO) {
			missing++; /* spilled, busy, or our pin records are full: the store helps */
		}
	}
	pthread_mutex_unlock(&c->lock);
	return missing;
}

/* Fill the views the store answered for (@ask: their positions in @views). */
static int take_store_views(struct ferry_plasma_client *c, const uint8_t *reply, const size_t *ask,
			    size_t nask, struct ferry_plasma_view *views)
{
	struct ferry__wire_plasma_get_reply_view v =
		ferry__wire_plasma_get_reply_root_verified(reply);
	int r = ferry__wire_plasma_get_reply_status(v);

	if (r < 0)
		return r;
	if (ferry__wire_plasma_get_reply_objects_count(v) != nask)
		return -EPROTO;
	for (size_t k = 0; k < nask; k++) {
		struct ferry__wire_plasma_object_view ov =
			ferry__wire_plasma_get_reply_objects_at(v, (uint32_t)k);
		struct ferry_plasma_view *view = &views[ask[k]];
		uint64_t off = ferry__wire_plasma_object_offset(ov);
		uint64_t size = ferry__wire_plasma_object_data_size(ov);
		uint64_t meta = ferry__wire_plasma_object_metadata_size(ov);

		view->status = ferry__wire_plasma_object_status(ov);
		if (view->status < 0)
			continue;
		if (meta > UINT32_MAX || off > c->arena.size || size > c->arena.size - off ||
		    meta > c->arena.size - off - size)
			return -EPROTO;
		view_fill(c, view, off, size, (uint32_t)meta,
			  ferry__wire_plasma_object_index_slot(ov),
			  ferry__wire_plasma_object_index_gen(ov), FERRY__PC_VIEW_STORE);
	}
	return 0;
}

static int get_remote(struct ferry_plasma_client *c, size_t missing, int64_t timeout_ms,
		      struct ferry_plasma_view *views, size_t n)
{
	struct ferry__wire_plasma_get m = {.timeout_ms = timeout_ms};
	struct ferry_object_id *ids = ferry__calloc(missing, sizeof(*ids));
	size_t *ask = ferry__calloc(missing, sizeof(*ask)), k = 0;
	struct ferry__fb_builder b = {0};
	struct ferry__pc_pending p;
	int r = -ENOMEM;

	if (!ids || !ask)
		goto out_free;
	for (size_t i = 0; i < n; i++) {
		if (views[i].handle_flags || views[i].status == -ETIMEDOUT ||
		    views[i].status == -EPROTO)
			continue;
		ids[k] = views[i].id;
		ask[k++] = i;
	}
	m.object_ids = ids;
	m.object_ids_count = k;
	m.seq = ferry__pc_begin(c, &p, FERRY__WIRE_MSG_PLASMA_GET_REPLY);
	r = ferry__pc_finish(c, &p, FERRY__WIRE_MSG_PLASMA_GET, &b,
			     ferry__wire_plasma_get_build(&b, &m));
	if (r == 0) {
		r = take_store_views(c, p.buf, ask, k, views);
		ferry__free(p.buf);
	}
out_free:
	ferry__free(ask);
	ferry__free(ids);
	return r;
}

int ferry__plasma_client_get_nowait(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				    struct ferry_plasma_view *view)
{
	if (!c || !id || !view)
		return -EINVAL;
	if (get_local(c, id, 1, 0, view))
		return -EAGAIN;
	if (view->status == -ETIMEDOUT)
		return -ENOENT;
	return view->status;
}

int ferry_plasma_client_get(struct ferry_plasma_client *c, const struct ferry_object_id *ids,
			    size_t n, int64_t timeout_ms, struct ferry_plasma_view *views)
{
	size_t missing;
	int r;

	if (!c || (n && (!ids || !views)))
		return -EINVAL;
	missing = get_local(c, ids, n, timeout_ms, views);
	if (missing) {
		r = get_remote(c, missing, timeout_ms, views, n);
		if (r < 0) {
			/* No view may stay valid: give back what we took. */
			for (size_t i = 0; i < n; i++)
				ferry_plasma_client_release(c, &views[i]);
			for (size_t i = 0; i < n; i++)
				views[i].status = r;
			return r;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (views[i].status)
			return -ETIMEDOUT;
	return 0;
}

int ferry_plasma_client_release(struct ferry_plasma_client *c, struct ferry_plasma_view *view)
{
	struct ferry__plasma_object o;
	uint32_t how;
	int r = 0;

	if (!c || !view || view->status || !view->handle_flags)
		return -ENOENT;
	how = view->handle_flags;
	o = (struct ferry__plasma_object){.index = view->handle_index, .gen = view->handle_gen};
	view->data = NULL;
	view->metadata = NULL;
	view->handle_flags = 0;
	if (how == FERRY__PC_VIEW_STORE)
		return notice_release(c, &view->id, false);
	pthread_mutex_lock(&c->lock);
	r = ferry__plasma_index_release(&c->ix, c->slot, &o);
	pthread_mutex_unlock(&c->lock);
	/* We emptied the pins of a deleted object: the store may free it now. */
	if (r == 1)
		notice_release(c, &view->id, true);
	return r < 0 ? r : 0;
}

int ferry_plasma_client_contains(struct ferry_plasma_client *c, const struct ferry_object_id *id)
{
	if (!c || !id)
		return -EINVAL;
	return ferry__plasma_index_contains(&c->ix, id);
}

void ferry__plasma_client_arena(const struct ferry_plasma_client *c, void **base, uint64_t *size)
{
	*base = c->arena.base;
	*size = c->arena.size;
}

int ferry__plasma_client_view_place(const struct ferry_plasma_client *c,
				    const struct ferry_plasma_view *view, uint64_t *offset,
				    uint64_t *alloc)
{
	if (!c || !view || view->status || !view->handle_flags || view->handle_index > c->ix.mask)
		return -EINVAL;
	/* The view's pin keeps the entry sealed where it is: neither field can change under us
	 * (the pin's acquire made the writer's stores visible). */
	*offset = (uint64_t)((const uint8_t *)view->data - c->arena.base);
	*alloc = ferry__plasma_index_alloc(&c->ix, view->handle_index);
	return 0;
}

int ferry__plasma_client_view_owner(const struct ferry_plasma_client *c,
				    const struct ferry_plasma_view *view,
				    struct ferry_worker_id *owner)
{
	if (!c || !view || view->status || !view->handle_flags || view->handle_index > c->ix.mask)
		return -EINVAL;
	/* Fixed with the entry's generation, which the view's pin holds. */
	*owner = ferry__plasma_index_owner_id(&c->ix, view->handle_index);
	return 0;
}
