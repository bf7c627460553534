/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma store server: lifecycle, the Unix socket, clients coming and going, request
 * dispatch and the periodic tick.
 *
 * DESIGN
 * Threads: one for the requests. The loop thread (started by ferry__plasma_server_start(), the
 * thread that calls ferry__plasma_server_run(), or on a given loop the one that runs it: the
 * node's) runs every callback and every store call.
 * Clients in other processes meanwhile get, release, create small objects and seal through
 * shared memory.
 *
 * Protocol (schema/plasma.fbs): a client connects, sends PlasmaConnect, and gets
 * PlasmaConnectReply with the arena and index fds (SCM_RIGHTS), its client slot and an arena
 * chunk. From then on the socket carries only what must block or change the store's layout:
 * creates too large for the chunk (or that refill it), aborts, gets and waits for objects not
 * sealed yet (answered when they are, or at their timeout), deletes, evictions, listings and
 * figures, and notices (seq 0, no reply) of seals and releases made in shared memory. There is
 * no handshake frame: the socket's file permissions are the access control, the kernel says who
 * connected (server_peers.c: the pid in PlasmaConnect is not believed), and the layout version
 * in the reply guards against a mismatched client. Requests on one connection are
 * answered in order, except gets and waits, which are answered when satisfied. A connection
 * may instead send PlasmaSubscribe as its first and only request: it then only receives
 * PlasmaNotify batches (server_events.c). Requests are dispatched through one table by type.
 * PlasmaConnect stands in for a handshake, so its limits are the store's: until it (or
 * PlasmaSubscribe) came, frames are capped at what one needs, the connection is closed past a
 * deadline (checked by the tick), and past max_connecting such connections the oldest is closed.
 *
 * Failure: a malformed frame or message (the connection layer verifies every payload) or a
 * request that breaks the protocol (before PlasmaConnect, a reply type, another subsystem's
 * message) is logged and closes that connection; the store keeps serving the others. When a
 * connection closes for any reason, the store gives back the pins it held for the client,
 * drops its waits, and reclaims its slot: its pins in shared memory are cleared, the objects it
 * was creating are aborted and its chunk retired (ferry__plasma_store_client_retire()). The slot
 * is given to a newcomer only once the client said goodbye (PlasmaDisconnect) or its process is
 * gone (or a zombie): a live process whose connection closed may still write to its slot.
 * Reclaim needs the index's writer lock; if a live client holds it too long, it is retried on
 * the next tick, as is the check for the process (server_peers.c, which also caps the slots
 * one uid may hold).
 *
 * Tick (every tick_ms): free deferred deletes (a client whose release emptied a deleted
 * object's pins may not have told us), spill past the threshold (in the background: the
 * store's spill thread waits for the disk and hands the batch back through a loop post),
 * finish parked slots, re-check pending waits if any seal happened since the last look (a
 * safety net: sealers notify), flush held-back subscriber batches, end quiet miss episodes.
 *
 * Threads besides the loop's: the store's background spill thread (plasma/store.h), which
 * only posts to the loop; destroy stops it before the loop goes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/server_int.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#else
#define UNDER_VALGRIND() 0
#endif
#define VALGRIND_TICK_MS 5u

#define DEFAULT_TICK_MS 100u
#define DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define DEFAULT_MAX_CONNECTING 64u
#define DEFAULT_CHUNK_BYTES (1ull << 20)
#define MIN_CHUNK_BYTES (16ull << 10)

static const char comp[] = "plasma";

/* ---- replies ---- */

int ferry__plasma_send(struct ferry__plasma_pclient *c, uint16_t type, int built)
{
	struct ferry__fb_builder *fb = &c->srv->fb;
	int r = built;

	if (r == 0 && c->conn)
		r = ferry__conn_send(c->conn, type, ferry__fb_builder_data(fb),
				     ferry__fb_builder_size(fb));
	if (r < 0) {
		FLOG_ERROR(comp, "server: cannot send %s to pid %d: %s",
			   ferry__wire_message_name(type), c->pid, ferry_strerror(r));
		c->closing = true;
		if (c->conn)
			ferry__conn_close(c->conn);
		return r;
	}
	c->replies++;
	return 0;
}

void ferry__plasma_reply_status(struct ferry__plasma_pclient *c, uint64_t seq, int status)
{
	struct ferry__wire_plasma_status_reply m = {.seq = seq, .status = status};

	ferry__plasma_send(c, FERRY__WIRE_MSG_PLASMA_STATUS_REPLY,
			   ferry__wire_plasma_status_reply_build(&c->srv->fb, &m));
}

void ferry__plasma_fail(struct ferry__plasma_pclient *c, const char *why)
{
	FLOG_ERROR(comp, "server: client %s (pid %d): %s; closing the connection",
		   c->conn ? ferry__conn_peer(c->conn) : "(test)", c->pid, why);
	c->closing = true;
	if (c->conn)
		ferry__conn_close(c->conn);
}

/* ---- dispatch ---- */

typedef void (*handler_fn)(struct ferry__plasma_pclient *c, const void *payload);

enum when {
	AFTER_CONNECT = 0, /* only once the client has a slot */
	FIRST,		   /* only before: PlasmaConnect */
	ANYTIME,	   /* the handler checks (PlasmaSubscribe answers on any connection) */
};

/* Every request the store takes, by message type (schema/messages.fbs, plasma: 32-127). */
#define FIRST_TYPE FERRY__WIRE_MSG_PLASMA_CONNECT
#define AT(type) [FERRY__WIRE_MSG_##type - FIRST_TYPE]
static const struct handler {
	handler_fn fn;	/* NULL: a type the store does not take */
	enum when when; /* when it may come */
} handlers[] = {
	AT(PLASMA_CONNECT) = {ferry__plasma_on_connect, FIRST},
	AT(PLASMA_DISCONNECT) = {ferry__plasma_on_disconnect, AFTER_CONNECT},
	AT(PLASMA_CREATE) = {ferry__plasma_on_create, AFTER_CONNECT},
	AT(PLASMA_SEAL) = {ferry__plasma_on_seal, AFTER_CONNECT},
	AT(PLASMA_ABORT) = {ferry__plasma_on_abort, AFTER_CONNECT},
	AT(PLASMA_RELEASE) = {ferry__plasma_on_release, AFTER_CONNECT},
	AT(PLASMA_DELETE) = {ferry__plasma_on_delete, AFTER_CONNECT},
	AT(PLASMA_CONTAINS) = {ferry__plasma_on_contains, AFTER_CONNECT},
	AT(PLASMA_GET) = {ferry__plasma_on_get, AFTER_CONNECT},
	AT(PLASMA_WAIT) = {ferry__plasma_on_wait, AFTER_CONNECT},
	AT(PLASMA_SUBSCRIBE) = {ferry__plasma_on_subscribe, ANYTIME},
	AT(PLASMA_EVICT) = {ferry__plasma_on_evict, AFTER_CONNECT},
	AT(PLASMA_LIST) = {ferry__plasma_on_list, AFTER_CONNECT},
	AT(PLASMA_STATS) = {ferry__plasma_on_stats, AFTER_CONNECT},
};
#undef AT

void ferry__plasma_handle(struct ferry__plasma_pclient *c, uint16_t type, const void *payload,
			  size_t len)
{
	unsigned k = (unsigned)type - FIRST_TYPE;
	const struct handler *h = k < FERRY_ARRAY_SIZE(handlers) ? &handlers[k] : NULL;
	bool connected = c->slot != FERRY__PLASMA_NO_SLOT;
	char why[96];

	(void)len;
	if (c->closing)
		return;
	if (!h || !h->fn) {
		snprintf(why, sizeof(why), "%s (type %u) is not a plasma request",
			 ferry__wire_message_name(type), type);
		ferry__plasma_fail(c, why);
	} else if (c->sub) {
		ferry__plasma_fail(c, "a subscriber connection sent a request");
	} else if (h->when != ANYTIME && connected != (h->when == AFTER_CONNECT)) {
		snprintf(why, sizeof(why), "%s %s PlasmaConnect", ferry__wire_message_name(type),
			 connected ? "after" : "before");
		ferry__plasma_fail(c, why);
	} else {
		h->fn(c, payload);
		/* Past its "handshake": frames may now be as large as the connection allows. */
		if (!connected && c->conn && !c->closing &&
		    (c->slot != FERRY__PLASMA_NO_SLOT || c->sub))
			ferry__conn_set_frame_max(c->conn, 0);
	}
}

/* ---- clients ---- */

struct ferry__plasma_pclient *ferry__plasma_client_new(struct ferry__plasma_server *srv,
						       struct ferry__conn *conn)
{
	struct ferry__plasma_pclient *c = ferry__calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->srv = srv;
	c->conn = conn;
	c->slot = FERRY__PLASMA_NO_SLOT;
	c->pidfd = -1;
	ferry__hashmap_init(&c->pins, sizeof(struct ferry_object_id),
			    sizeof(struct ferry__plasma_store_pin));
	c->next = srv->clients;
	if (srv->clients)
		srv->clients->prev = c;
	srv->clients = c;
	return c;
}

void ferry__plasma_client_leave(struct ferry__plasma_pclient *c, bool clean)
{
	struct ferry__plasma_server *srv = c->srv;

	ferry__plasma_waits_cancel(c);
	ferry__plasma_unpin_all(c);
	if (c->slot == FERRY__PLASMA_NO_SLOT)
		return;
	/* Seals whose notice it did not send (it died in between) are reported now, before
	 * its sealed objects pass to the store's slot. */
	ferry__plasma_events_client_gone(srv, c->slot);
	ferry__plasma_slot_release(c, clean || !c->conn);
	c->slot = FERRY__PLASMA_NO_SLOT;
	/* Objects it was creating are gone: waits for them may now wait for absent objects. */
	if (srv->waits)
		ferry__plasma_waits_recheck(srv);
}

void ferry__plasma_client_free(struct ferry__plasma_pclient *c)
{
	struct ferry__plasma_server *srv = c->srv;

	ferry__plasma_sub_free(c);
	ferry__plasma_client_leave(c, false);
	ferry__hashmap_fini(&c->pins);
	if (c->pidfd >= 0)
		close(c->pidfd);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ferry__free(c);
}

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	ferry__plasma_handle(ferry__conn_data(conn), type, payload, len);
}

static void on_close(struct ferry__conn *conn, int err)
{
	struct ferry__plasma_pclient *c = ferry__conn_data(conn);

	/* A connection closed by on_accept because its client state could not be allocated
	 * never got a client: nothing to clean up. */
	if (!c)
		return;
	if (c->slot != FERRY__PLASMA_NO_SLOT)
		FLOG_INFO(comp, "server: client pid %d (slot %u) gone: %s", c->pid, c->slot,
			  err ? ferry_strerror(err) : "closed");
	ferry__plasma_client_free(c);
}

static const struct ferry__conn_callbacks client_callbacks = {
	.on_message = on_message,
	.on_close = on_close,
};

/* Not past PlasmaConnect (or PlasmaSubscribe) yet, and not being closed. */
static bool connecting(const struct ferry__plasma_pclient *c)
{
	return c->conn && !c->closing && !c->admitted && !c->sub;
}

/* Close a connection that never sent PlasmaConnect: warned, rate-limited (a flood logs a few
 * lines and a count, not one error each). */
static void drop_connecting(struct ferry__plasma_pclient *c, const char *why)
{
	FLOG_PEER_WARN(comp, ferry__conn_peer(c->conn), "server: %s; closing it", why);
	c->closing = true;
	ferry__conn_close(c->conn);
}

/*
 * Like the handshakes of conn_server.c: at the cap, the oldest connection that has not sent
 * PlasmaConnect is closed. Refusing the newest would let idle connections lock real clients
 * out until their deadline; a real client sends PlasmaConnect at once.
 */
static void make_room(struct ferry__plasma_server *srv)
{
	struct ferry__plasma_pclient *oldest = NULL;
	uint32_t n = 0;

	for (struct ferry__plasma_pclient *c = srv->clients; c; c = c->next) {
		if (connecting(c)) {
			n++;
			oldest = c; /* the list is newest first */
		}
	}
	if (n >= srv->max_connecting && oldest)
		drop_connecting(oldest, "too many connections without PlasmaConnect; the oldest");
}

/* Connections that did not send PlasmaConnect in time are closed (from the tick). */
static void close_late(struct ferry__plasma_server *srv)
{
	uint64_t now = ferry__loop_now_ms();

	for (struct ferry__plasma_pclient *c = srv->clients; c; c = c->next) {
		if (connecting(c) && now - c->accepted_ms >= srv->connect_timeout_ms)
			drop_connecting(c, "a connection sent no PlasmaConnect in time");
	}
}

static void on_accept(struct ferry__conn_server *server, struct ferry__conn *conn,
		      const void *handshake, size_t len)
{
	struct ferry__plasma_server *srv = ferry__conn_server_data(server);
	struct ferry__plasma_pclient *c;

	(void)handshake;
	(void)len;
	make_room(srv);
	c = ferry__plasma_client_new(srv, conn);
	if (!c) {
		FLOG_ERROR(comp, "server: no memory for a new client");
		ferry__conn_close(conn);
		return;
	}
	ferry__conn_set_callbacks(conn, &client_callbacks, c);
	/* Until PlasmaConnect, a frame may only be as large as one needs. */
	ferry__conn_set_frame_max(conn, FERRY__PLASMA_CONNECT_MAX_BYTES);
	c->accepted_ms = ferry__loop_now_ms();
}

/* ---- tick ---- */

static void on_tick(struct ferry__loop_timer *timer, int status)
{
	struct ferry__plasma_server *srv = timer->data;
	uint64_t seals;

	if (status < 0)
		return;
	/* Valgrind runs one thread at a time and does not let go while a thread sleeps in
	 * io_uring_enter: yield, or the threads of this process (an embedding application's,
	 * a client's in the same process) would wait for us forever. */
	if (UNDER_VALGRIND())
		sched_yield();
	ferry__plasma_store_tick(srv->store);
	ferry__plasma_parked_sweep(srv);
	close_late(srv);
	seals = atomic_load_explicit(&srv->ix->hdr->seal_seq, memory_order_relaxed);
	if (srv->waits && seals != srv->waits_seal_seq) {
		srv->waits_seal_seq = seals;
		ferry__plasma_waits_recheck(srv);
	}
	ferry__plasma_events_tick(srv);
}

/* ---- lifecycle ---- */

static int check_opts(const struct ferry__plasma_server_opts *o)
{
	if (o->socket_path && (!o->socket_path[0] || strlen(o->socket_path) >= 108)) {
		FLOG_ERROR(comp, "server: socket path \"%s\" is empty or longer than 107 bytes",
			   o->socket_path);
		return -EINVAL;
	}
	if (o->spill_threshold_pct > 100) {
		FLOG_ERROR(comp, "server: spill threshold %u%% is over 100%%",
			   o->spill_threshold_pct);
		return -EINVAL;
	}
	return 0;
}

/* The store's background spill hands its batches back through the loop (any thread). */
static int post_to_loop(void *arg, void (*fn)(void *fn_arg, int status), void *fn_arg)
{
	struct ferry__plasma_server *srv = arg;

	return ferry__loop_post(srv->loop, fn, fn_arg);
}

/* Restored along with another one (store_spill.c): the same news as a restore asked for. */
static void on_restored(void *arg, uint32_t index, uint32_t gen)
{
	ferry__plasma_events_moved(arg, index, gen);
}

/* A background restore ended (store_spill.c): news of the new place, then the gets. */
static void on_restore_done(void *arg, uint32_t index, uint32_t gen, int status)
{
	if (status == 0)
		ferry__plasma_events_moved(arg, index, gen);
	ferry__plasma_waits_restored(arg, index, gen, status);
}

static int create_store(struct ferry__plasma_server *srv, const struct ferry__plasma_server_opts *o)
{
	struct ferry__plasma_store_opts so = {
		.on_removed = ferry__plasma_events_removed,
		.on_restored = on_restored,
		.on_restore_done = on_restore_done,
		.hook_arg = srv,
		.post = post_to_loop,
		.post_arg = srv,
		.memory_bytes = o->memory_bytes,
		.hugepages = o->hugepages,
		.max_objects = o->max_objects,
		.max_clients = o->max_clients,
		.flags = o->store_flags,
		.spill_dir = o->spill_dir,
		.spill_threshold_pct = o->spill_threshold_pct,
		.spill_max_bytes = o->spill_max_bytes,
	};
	uint64_t arena;
	int r = ferry__plasma_store_create(&so, &srv->store);

	if (r < 0)
		return r;
	srv->ix = ferry__plasma_store_index(srv->store);
	srv->held = ferry__calloc(srv->ix->mask + 1, sizeof(*srv->held));
	if (!srv->held) {
		ferry__plasma_store_destroy(srv->store);
		return -ENOMEM;
	}
	srv->own_uid = geteuid();
	srv->max_per_uid = o->max_clients_per_uid ? o->max_clients_per_uid
						  : FERRY_MAX((srv->ix->max_clients - 1) / 2, 1u);
	arena = ferry__plasma_store_arena(srv->store)->size;
	srv->chunk_bytes = o->chunk_bytes ? o->chunk_bytes : DEFAULT_CHUNK_BYTES;
	srv->chunk_bytes = FERRY_ALIGN_UP(
		FERRY_MAX(FERRY_MIN(srv->chunk_bytes, arena / 256), MIN_CHUNK_BYTES), 64u);
	return 0;
}

static int listen_socket(struct ferry__plasma_server *srv,
			 const struct ferry__plasma_server_opts *o)
{
	struct ferry__conn_server_opts so = {
		.conn = {.cb = &client_callbacks,
			 .frame_timeout_ms = o->frame_timeout_ms,
			 .stall_timeout_ms = o->stall_timeout_ms,
			 .max_queued_bytes = o->max_queued_bytes},
		.on_accept = on_accept,
		.data = srv,
		.server_kind = FERRY__WIRE_PEER_KIND_PLASMA_STORE,
		.server_id = srv->id,
		.flags = FERRY_CONN_SERVER_NO_HANDSHAKE,
	};
	int r;

	if (!srv->socket_path)
		return 0;
	r = ferry__conn_server_listen_unix(srv->loop, srv->socket_path, &so, &srv->listener);
	if (r < 0)
		FLOG_ERROR(comp, "server: cannot listen on %s: %s", srv->socket_path,
			   ferry_strerror(r));
	return r;
}

int ferry__plasma_server_create(const struct ferry__plasma_server_opts *opts,
				struct ferry__plasma_server **out)
{
	struct ferry__plasma_server *srv;
	int r = check_opts(opts);

	if (r < 0)
		return r;
	srv = ferry__calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	ferry_id_random(srv->id.bytes, sizeof(srv->id.bytes));
	srv->tick_ms = opts->tick_ms ? opts->tick_ms : DEFAULT_TICK_MS;
	srv->connect_timeout_ms =
		opts->connect_timeout_ms ? opts->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	srv->max_connecting = opts->max_connecting ? opts->max_connecting : DEFAULT_MAX_CONNECTING;
	if (UNDER_VALGRIND())
		srv->tick_ms = FERRY_MIN(srv->tick_ms, VALGRIND_TICK_MS); /* see on_tick() */
	r = -ENOMEM;
	if (opts->socket_path && !(srv->socket_path = ferry__strdup(opts->socket_path)))
		goto err_free_srv;
	r = create_store(srv, opts);
	if (r < 0)
		goto err_free_path;
	r = ferry__plasma_events_init(srv, opts);
	if (r < 0)
		goto err_fini_events;
	srv->own_loop = !opts->loop;
	srv->loop = opts->loop;
	r = srv->own_loop ? ferry__loop_create(NULL, &srv->loop) : 0;
	if (r < 0)
		goto err_fini_events;
	srv->tick.data = srv;
	r = ferry__loop_timer_start(srv->loop, &srv->tick, srv->tick_ms, srv->tick_ms, on_tick);
	if (r < 0)
		goto err_destroy_loop;
	r = listen_socket(srv, opts);
	if (r < 0)
		goto err_destroy_loop;
	if (srv->socket_path)
		FLOG_INFO(comp, "server: serving on %s", srv->socket_path);
	*out = srv;
	return 0;

err_destroy_loop:
	if (srv->own_loop)
		ferry__loop_destroy(srv->loop);
	else
		(void)ferry__loop_timer_stop(&srv->tick);
err_fini_events:
	ferry__plasma_events_fini(srv);
	ferry__free(srv->held);
	ferry__plasma_store_destroy(srv->store);
err_free_path:
	ferry__free(srv->socket_path);
err_free_srv:
	ferry__free(srv);
	return r;
}

static void *loop_thread(void *arg)
{
	struct ferry__plasma_server *srv = arg;

	ferry__loop_thread_run(srv->loop, "ferry-store", comp);
	return NULL;
}

int ferry__plasma_server_start(struct ferry__plasma_server *srv)
{
	int r;

	if (!srv->own_loop)
		return -EINVAL;
	r = pthread_create(&srv->thread, NULL, loop_thread, srv);
	if (r) {
		FLOG_ERROR(comp, "server: cannot start its thread: %s", ferry_strerror(-r));
		return -r;
	}
	srv->threaded = true;
	return 0;
}

int ferry__plasma_server_run(struct ferry__plasma_server *srv)
{
	return srv->own_loop ? ferry__loop_run(srv->loop) : -EINVAL;
}

void ferry__plasma_server_stop(struct ferry__plasma_server *srv)
{
	if (!srv->own_loop) {
		/* No background spill may post to the loop once it is gone. */
		ferry__plasma_store_quiesce(srv->store);
		return;
	}
	ferry__loop_stop(srv->loop);
	if (srv->threaded) {
		pthread_join(srv->thread, NULL);
		srv->threaded = false;
	}
}

void ferry__plasma_server_destroy(struct ferry__plasma_server *srv)
{
	if (!srv)
		return;
	ferry__plasma_server_stop(srv);
	/* No background spill may post to the loop once it is gone (its batch is taken back by
	 * the store's destroy). */
	ferry__plasma_store_quiesce(srv->store);
	/* Closes every connection: their on_close cleans each client up against the store. A
	 * given loop was destroyed by its owner already (ferry__plasma_server_create()). */
	if (srv->own_loop)
		ferry__loop_destroy(srv->loop);
	srv->loop = NULL; /* events of the clients freed below post nothing */
	while (srv->clients)
		ferry__plasma_client_free(srv->clients); /* clients without a connection */
	ferry__fb_builder_fini(&srv->fb);
	ferry__plasma_events_fini(srv);
	ferry__plasma_store_destroy(srv->store);
	ferry__free(srv->held);
	ferry__plasma_parked_fini(srv);
	ferry__free(srv->socket_path);
	ferry__free(srv);
}

struct ferry__plasma_store *ferry__plasma_server_store(struct ferry__plasma_server *srv)
{
	return srv->store;
}

struct ferry__loop *ferry__plasma_server_loop(struct ferry__plasma_server *srv)
{
	return srv->loop;
}
