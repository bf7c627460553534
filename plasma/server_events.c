/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the plasma server reports about objects: the embedding daemon's hooks (on_miss,
 * on_sealed, on_removed: plasma/server.h) and subscriber connections (PlasmaSubscribe,
 * PlasmaNotify).
 *
 * DESIGN
 * Everything here runs on the server's loop thread.
 *
 * Seals. A client seals in shared memory and tells the store only when the index's
 * seal_waiters count is non-zero. While anyone listens (a hook, or a subscriber), the server
 * holds one count of its own, so every sealer sends its PlasmaSeal notice right after the seal
 * (no reply awaited). Each seal is reported once: announced[entry] records the generation
 * reported. A client that dies between its seal and its notice is caught when its connection
 * closes (a scan for its sealed, unreported entries). A removal is reported only for an entry
 * whose seal was, so every listener sees sealed before removed for one object; when the first
 * subscriber arrives with no hook set, the objects already sealed are marked reported without
 * events, so that their removals reach it.
 *
 * Subscribers. Each subscriber connection has a bounded ring of events. Events are queued
 * there and sent in batches from a posted callback (one per loop pass), while the
 * connection's send queue is short; a subscriber that reads slowly fills its ring, and what
 * does not fit is dropped and counted (PlasmaNotify.missed). The store's memory per
 * subscriber is thus bounded by its ring plus SUB_QUEUE_LIMIT of queued bytes. Held-back
 * batches go out from the tick.
 *
 * Misses. A parked get or wait item for an absent object is counted in the missing map; the
 * first count of an episode calls on_miss. The episode ends when the object is sealed here or
 * when nobody has waited for it for miss_quiet_ms, and on_miss_end says so (the node's pull
 * waits for the object as long as the episode lasts).
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/server_int.h"

#define DEFAULT_SUB_EVENTS 4096u
#define MIN_SUB_EVENTS 16u
#define MAX_SUB_EVENTS 65536u
#define BATCH_EVENTS 1024u
#define SUB_QUEUE_LIMIT (256u << 10) /* bytes queued on a subscriber's socket */
#define DEFAULT_MISS_QUIET_MS 1000u
#define ALL_KINDS                                        \
	((1u << FERRY__WIRE_PLASMA_EVENT_KIND_SEALED) |  \
	 (1u << FERRY__WIRE_PLASMA_EVENT_KIND_DELETED) | \
	 (1u << FERRY__WIRE_PLASMA_EVENT_KIND_EVICTED))

static const char comp[] = "plasma";

/* ---- announcing seals ---- */

static bool sealed_state(int state)
{
	return state == FERRY__PLASMA_SEALED || state == FERRY__PLASMA_SPILLED ||
	       state == FERRY__PLASMA_EVICTING;
}

/* One more listener. The first makes every sealer notify; @mark_sealed: treat what is sealed
 * already as reported. Returns 0 or -ENOMEM. */
static int announce_on(struct ferry__plasma_server *srv, bool mark_sealed)
{
	uint32_t slots = srv->ix->mask + 1;

	if (srv->announce_refs++)
		return 0;
	if (!srv->announced && !(srv->announced = ferry__calloc(slots, sizeof(uint32_t)))) {
		srv->announce_refs--;
		return -ENOMEM;
	}
	atomic_fetch_add(&srv->ix->hdr->seal_waiters, 1);
	/* Count, then look (index.h): a seal we do not see here sends a notice. */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; mark_sealed && i < slots; i++) {
		struct ferry__plasma_object o;

		if (sealed_state(ferry__plasma_index_read(srv->ix, i, &o)))
			srv->announced[i] = o.gen;
	}
	return 0;
}

static void announce_off(struct ferry__plasma_server *srv)
{
	if (--srv->announce_refs == 0)
		atomic_fetch_sub(&srv->ix->hdr->seal_waiters, 1);
}

int ferry__plasma_events_init(struct ferry__plasma_server *srv,
			      const struct ferry__plasma_server_opts *o)
{
	srv->on_miss = o->on_miss;
	srv->on_miss_end = o->on_miss_end;
	srv->on_sealed = o->on_sealed;
	srv->on_removed = o->on_removed;
	srv->on_moved = o->on_moved;
	srv->hook_arg = o->hook_arg;
	srv->content_checks = o->content_checks;
	srv->miss_quiet_ms = o->miss_quiet_ms ? o->miss_quiet_ms : DEFAULT_MISS_QUIET_MS;
	ferry__hashmap_init(&srv->missing, sizeof(struct ferry_object_id),
			    sizeof(struct ferry__plasma_miss));
	if (o->on_miss || o->on_sealed || o->on_removed)
		return announce_on(srv, false); /* no client yet: nothing is sealed */
	return 0;
}

void ferry__plasma_events_fini(struct ferry__plasma_server *srv)
{
	ferry__hashmap_fini(&srv->missing);
	ferry__free(srv->subs);
	ferry__free(srv->announced);
	srv->subs = NULL;
	srv->announced = NULL;
}

static void flush_all(struct ferry__plasma_server *srv);

static void on_flush(void *arg, int status)
{
	struct ferry__plasma_server *srv = arg;

	srv->flush_posted = false;
	if (status == 0)
		flush_all(srv);
}

/* Queue an event for every subscriber that wants @kind. */
static void emit(struct ferry__plasma_server *srv, uint8_t kind, const struct ferry_object_id *id,
		 const struct ferry__plasma_object *o)
{
	struct ferry__wire_plasma_event ev = {
		.kind = kind,
		.object_id = *id,
		.data_size = o->data_size,
		.metadata_size = o->metadata_size,
		.primary = (o->flags & FERRY__PLASMA_F_PRIMARY) != 0,
	};

	for (uint32_t i = 0; i < srv->nsubs; i++) {
		struct ferry__plasma_sub *s = srv->subs[i]->sub;

		if (!(s->mask & (1u << kind)))
			continue;
		if (s->count == s->cap) {
			s->missed++;
			continue;
		}
		s->ring[(s->head + s->count++) % s->cap] = ev;
	}
	/* One batch per loop pass; if the post fails, the tick flushes. */
	if (srv->nsubs && !srv->flush_posted && srv->loop &&
	    ferry__loop_post(srv->loop, on_flush, srv) == 0)
		srv->flush_posted = true;
}

/*
 * Sealed, in-memory object @o's place. Its bytes are stable while we hash them: this thread is
 * the only one that frees arena memory, and sealed bytes never change.
 */
static void place_of(struct ferry__plasma_server *srv, const struct ferry__plasma_object *o,
		     struct ferry__plasma_place *place)
{
	const uint8_t *bytes = ferry__plasma_store_arena(srv->store)->base + o->offset;
	uint64_t total = o->data_size + o->metadata_size;

	place->offset = o->offset;
	place->alloc = ferry__plasma_index_alloc(srv->ix, o->index);
	place->check = srv->content_checks && total <= FERRY__PLASMA_CHECK_MAX
			       ? ferry__hash_content(bytes, total)
			       : 0;
}

void ferry__plasma_events_sealed(struct ferry__plasma_server *srv,
				 const struct ferry__plasma_object *o,
				 const struct ferry_object_id *id)
{
	/* the episode is over */
	if (ferry__hashmap_count(&srv->missing) &&
	    ferry__hashmap_remove(&srv->missing, id, NULL) == 0 && srv->on_miss_end)
		srv->on_miss_end(srv->hook_arg, id);
	if (!srv->announce_refs || srv->announced[o->index] == o->gen)
		return;
	srv->announced[o->index] = o->gen;
	if (srv->on_sealed) {
		struct ferry__plasma_place place = {0}; /* a spilled object's means nothing */
		struct ferry_worker_id owner = ferry__plasma_index_owner_id(srv->ix, o->index);

		if (o->state != FERRY__PLASMA_SPILLED)
			place_of(srv, o, &place);
		srv->on_sealed(srv->hook_arg, id, o->data_size, o->metadata_size,
			       (o->flags & FERRY__PLASMA_F_PRIMARY) != 0, &owner, &place);
	}
	emit(srv, FERRY__WIRE_PLASMA_EVENT_KIND_SEALED, id, o);
}

void ferry__plasma_events_moved(struct ferry__plasma_server *srv, uint32_t index, uint32_t gen)
{
	struct ferry__plasma_place place;
	struct ferry_object_id id;
	struct ferry__plasma_object o;

	/* Only a copy whose seal went out has a place someone may hold. */
	if (!srv->on_moved || !srv->announced || srv->announced[index] != gen ||
	    ferry__plasma_index_read(srv->ix, index, &o) != FERRY__PLASMA_SEALED || o.gen != gen)
		return;
	ferry__plasma_index_read_id(srv->ix, index, &id);
	place_of(srv, &o, &place);
	srv->on_moved(srv->hook_arg, &id, o.data_size, o.metadata_size, &place);
}

void ferry__plasma_events_removed(void *arg, uint32_t index, uint32_t gen, bool evicted)
{
	struct ferry__plasma_server *srv = arg;
	struct ferry_object_id id;
	struct ferry__plasma_object o;

	if (!srv->announced || srv->announced[index] != gen)
		return; /* its seal was never reported: neither is its removal */
	srv->announced[index] = 0;
	if (!srv->announce_refs)
		return;
	ferry__plasma_index_read(srv->ix, index, &o);
	ferry__plasma_index_read_id(srv->ix, index, &id);
	if (srv->on_removed)
		srv->on_removed(srv->hook_arg, &id);
	emit(srv,
	     evicted ? FERRY__WIRE_PLASMA_EVENT_KIND_EVICTED
		     : FERRY__WIRE_PLASMA_EVENT_KIND_DELETED,
	     &id, &o);
}

void ferry__plasma_events_client_gone(struct ferry__plasma_server *srv, uint32_t slot)
{
	if (!srv->announce_refs || slot == FERRY__PLASMA_NO_SLOT)
		return;
	for (uint32_t i = 0; i <= srv->ix->mask; i++) {
		struct ferry__plasma_object o;
		struct ferry_object_id id;

		if (!sealed_state(ferry__plasma_index_read(srv->ix, i, &o)) || o.owner != slot ||
		    srv->announced[i] == o.gen)
			continue;
		ferry__plasma_index_read_id(srv->ix, i, &id);
		ferry__plasma_events_sealed(srv, &o, &id);
	}
}

/* ---- misses ---- */

void ferry__plasma_miss_note(struct ferry__plasma_server *srv, struct ferry__plasma_wait_item *it)
{
	struct ferry__plasma_miss *m;
	int r;

	if (!srv->on_miss || it->miss_episode)
		return;
	r = ferry__hashmap_put(&srv->missing, &it->id, (void **)&m);
	if (r < 0) {
		FLOG_WARN(comp, "server: no memory to report a missing object");
		return;
	}
	if (r == 1) {
		if (++srv->miss_episodes == 0)
			srv->miss_episodes = 1; /* 0 means "not counted" */
		m->episode = srv->miss_episodes;
		m->waits = 0;
	}
	m->waits++;
	it->miss_episode = m->episode;
	if (r == 1)
		srv->on_miss(srv->hook_arg, &it->id);
}

void ferry__plasma_miss_done(struct ferry__plasma_server *srv, struct ferry__plasma_wait_item *it)
{
	struct ferry__plasma_miss *m;

	if (!it->miss_episode)
		return;
	m = ferry__hashmap_get(&srv->missing, &it->id);
	if (m && m->episode == it->miss_episode && m->waits && --m->waits == 0)
		m->idle_since = ferry__loop_now_ms();
	it->miss_episode = 0;
}

/* Forget one episode nobody waits for any more. Returns true if it did. */
static bool forget_quiet_miss(struct ferry__plasma_server *srv, uint64_t now)
{
	struct ferry__plasma_miss *m;
	struct ferry_object_id *id;
	size_t cursor = 0;

	while (ferry__hashmap_next(&srv->missing, &cursor, (void **)&id, (void **)&m)) {
		struct ferry_object_id gone;

		if (m->waits || now - m->idle_since < srv->miss_quiet_ms)
			continue;
		gone = *id; /* the key's memory goes with the entry */
		ferry__hashmap_remove(&srv->missing, &gone, NULL);
		if (srv->on_miss_end)
			srv->on_miss_end(srv->hook_arg, &gone);
		return true;
	}
	return false;
}

void ferry__plasma_events_tick(struct ferry__plasma_server *srv)
{
	uint64_t now = ferry__loop_now_ms();

	while (forget_quiet_miss(srv, now))
		;
	flush_all(srv);
}

/* ---- subscribers ---- */

/* Send @c's queued events while its socket keeps up. */
static void flush_one(struct ferry__plasma_pclient *c)
{
	struct ferry__plasma_sub *s = c->sub;

	while ((s->count || s->missed) && !c->closing &&
	       (!c->conn || ferry__conn_queued_bytes(c->conn) < SUB_QUEUE_LIMIT)) {
		uint32_t n = FERRY_MIN(FERRY_MIN(s->count, BATCH_EVENTS), s->cap - s->head);
		struct ferry__wire_plasma_notify m = {
			.seq = s->notify_seq + 1,
			.events = &s->ring[s->head],
			.events_count = n,
			.missed = s->missed,
		};

		if (ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_NOTIFY,
				       ferry__wire_plasma_notify_build(&c->srv->fb, &m)) < 0)
			return; /* closed: it goes with its connection */
		s->notify_seq++;
		s->head = (s->head + n) % s->cap;
		s->count -= n;
		s->missed = 0;
	}
}

static void flush_all(struct ferry__plasma_server *srv)
{
	for (uint32_t i = 0; i < srv->nsubs; i++)
		flush_one(srv->subs[i]);
}

static int sub_add(struct ferry__plasma_server *srv, struct ferry__plasma_pclient *c)
{
	if (srv->nsubs == srv->subs_cap) {
		uint32_t cap = FERRY_MAX(2 * srv->subs_cap, 4u);
		struct ferry__plasma_pclient **grown =
			ferry__realloc(srv->subs, cap * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		srv->subs = grown;
		srv->subs_cap = cap;
	}
	c->sub->index = srv->nsubs;
	srv->subs[srv->nsubs++] = c;
	return 0;
}

static int subscribe(struct ferry__plasma_pclient *c, uint32_t mask, uint32_t max_pending)
{
	struct ferry__plasma_server *srv = c->srv;
	struct ferry__plasma_sub *s = ferry__calloc(1, sizeof(*s));
	int r = -ENOMEM;

	if (!s)
		return r;
	s->cap = max_pending ? FERRY_MIN(FERRY_MAX(max_pending, MIN_SUB_EVENTS), MAX_SUB_EVENTS)
			     : DEFAULT_SUB_EVENTS;
	s->mask = mask ? mask : ALL_KINDS;
	s->ring = ferry__calloc(s->cap, sizeof(*s->ring));
	if (!s->ring)
		goto err_free_sub;
	c->sub = s;
	r = sub_add(srv, c);
	if (r < 0)
		goto err_unset;
	r = announce_on(srv, true);
	if (r < 0)
		goto err_remove;
	return 0;

err_remove:
	srv->nsubs--;
err_unset:
	c->sub = NULL;
	ferry__free(s->ring);
err_free_sub:
	ferry__free(s);
	return r;
}

void ferry__plasma_on_subscribe(struct ferry__plasma_pclient *c, const void *payload)
{
	struct ferry__wire_plasma_subscribe_view v =
		ferry__wire_plasma_subscribe_root_verified(payload);
	uint64_t seq = ferry__wire_plasma_subscribe_seq(v);
	int r = -EINVAL;

	if (c->slot != FERRY__PLASMA_NO_SLOT || c->sub)
		FLOG_WARN(comp, "server: pid %d subscribed on a client connection (or twice)",
			  c->pid);
	else
		r = subscribe(c, ferry__wire_plasma_subscribe_event_mask(v),
			      ferry__wire_plasma_subscribe_max_pending(v));
	if (r == 0)
		FLOG_DEBUG(comp, "server: subscriber %s (%u events buffered)",
			   c->conn ? ferry__conn_peer(c->conn) : "(test)", c->sub->cap);
	ferry__plasma_reply_status(c, seq, r);
}

void ferry__plasma_sub_free(struct ferry__plasma_pclient *c)
{
	struct ferry__plasma_server *srv = c->srv;
	struct ferry__plasma_sub *s = c->sub;

	if (!s)
		return;
	srv->subs[s->index] = srv->subs[--srv->nsubs];
	srv->subs[s->index]->sub->index = s->index;
	announce_off(srv);
	ferry__free(s->ring);
	ferry__free(s);
	c->sub = NULL;
}
