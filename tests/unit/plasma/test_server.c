/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma server itself: embedded in the test process (start, serve, destroy: the socket is
 * removed and a connected client sees the store go), and its protocol rules, driven through a
 * client without a socket and through raw sockets sending what a broken client would: requests
 * before PlasmaConnect, messages of other subsystems, malformed frames. Each is refused and
 * closed while the store keeps serving a well-behaved client.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "client_test.h"
#include "common/frame.h"
#include "common/loop.h"
#include "plasma/server_int.h"
#include "plasma/spill.h"

#define MIB (1ull << 20)

static struct ferry__plasma_server *embedded(const char *path)
{
	struct ferry__plasma_server_opts o = {
		.socket_path = path,
		.memory_bytes = 16 * MIB,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT,
	};
	struct ferry__plasma_server *srv = NULL;

	ftest_assert_ok(ferry__plasma_server_start_new(&o, &srv));
	return srv;
}

FTEST(embedded_server_serves_and_cleans_up)
{
	char path[256];
	struct ferry__plasma_server *srv;
	struct ferry_plasma_client *c;
	struct ferry_object_id id = oid(1);
	struct stat st;
	void *d;

	snprintf(path, sizeof(path), "%s/s.sock", ftest_tmpdir());
	srv = embedded(path);
	ftest_assert_ok(ferry_plasma_client_connect(path, NULL, &c));
	client_put(c, 1, 5000);
	client_check(c, 1, 5000, 0);
	ferry__plasma_server_destroy(srv);
	ftest_assert_int_ne(stat(path, &st), 0); /* the socket is gone */
	/* The store is gone: requests fail, the mapping we hold stays readable. */
	ftest_assert_errno(ferry_plasma_client_create(c, &id, 10 * MIB, NULL, 0, &d), -ECONNRESET);
	ferry_plasma_client_disconnect(c);
}

struct on_loop {
	struct ferry__loop *loop; /* the caller's loop */
	pthread_t thread;	  /* runs it */
	atomic_uint seals;	  /* on_sealed calls */
	atomic_uint off_loop;	  /* ... of them not on thread */
};

static void *run_given_loop(void *arg)
{
	struct on_loop *l = arg;

	ftest_assert_ok(ferry__loop_run(l->loop));
	return NULL;
}

static void sealed_on_loop(void *arg, const struct ferry_object_id *id, uint64_t data_size,
			   uint32_t metadata_size, bool primary,
			   const struct ferry_worker_id *owner,
			   const struct ferry__plasma_place *place)
{
	struct on_loop *l = arg;

	(void)id, (void)data_size, (void)metadata_size, (void)primary, (void)owner, (void)place;
	atomic_fetch_add(&l->off_loop, !pthread_equal(pthread_self(), l->thread));
	atomic_fetch_add(&l->seals, 1);
}

/* On a loop it is given (the node's), the server has no thread: it serves while the caller
 * runs the loop, its hooks are calls on that loop's thread, and its end follows the caller's
 * loop (stop the thread, quiet the server, destroy the loop, then the server). */
FTEST(server_on_a_given_loop)
{
	struct ferry__plasma_server_opts o = {
		.memory_bytes = 16 * MIB,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT,
		.on_sealed = sealed_on_loop,
	};
	struct ferry__plasma_server *srv = NULL;
	struct ferry_plasma_client *c;
	struct on_loop l = {0};
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/s.sock", ftest_tmpdir());
	o.socket_path = path;
	o.hook_arg = &l;
	ftest_assert_ok(ferry__loop_create(NULL, &l.loop));
	o.loop = l.loop;
	ftest_assert_ok(ferry__plasma_server_create(&o, &srv));
	ftest_assert_errno(ferry__plasma_server_start(srv), -EINVAL);
	ftest_assert_errno(ferry__plasma_server_run(srv), -EINVAL);
	ftest_assert_int_eq(pthread_create(&l.thread, NULL, run_given_loop, &l), 0);
	ftest_assert_ok(ferry_plasma_client_connect(path, NULL, &c));
	client_put(c, 1, 5000);
	client_put(c, 2, 2 * MIB);
	client_check(c, 1, 5000, 0);
	client_check(c, 2, 2 * MIB, 0);
	/* A seal in shared memory reaches the store as a notice, a little later. */
	for (int i = 0; i < 5000 && atomic_load(&l.seals) < 2; i++)
		usleep(1000);
	ftest_assert_uint_eq(atomic_load(&l.seals), 2);
	ftest_assert_uint_eq(atomic_load(&l.off_loop), 0);
	ferry__loop_stop(l.loop);
	pthread_join(l.thread, NULL);
	ferry__plasma_server_stop(srv);
	ferry__loop_destroy(l.loop); /* the client's connection closes with it */
	ferry__plasma_server_destroy(srv);
	ftest_assert_int_ne(stat(path, &st), 0);
	ferry_plasma_client_disconnect(c);
}

FTEST(connect_waits_for_a_starting_store)
{
	char path[256];
	struct ferry_plasma_connect_opts co = {.wait_ms = 1};
	struct ferry_plasma_client *c;

	snprintf(path, sizeof(path), "%s/none.sock", ftest_tmpdir());
	ftest_assert_errno(ferry_plasma_client_connect(path, &co, &c), -ENOENT);
}

/* ---- protocol rules, without a socket ---- */

static void handle_built(struct ferry__plasma_pclient *c, struct ferry__fb_builder *b,
			 uint16_t type, int built)
{
	ftest_assert_ok(built);
	ftest_assert_ok(
		ferry__wire_verify(type, ferry__fb_builder_data(b), ferry__fb_builder_size(b)));
	ferry__plasma_handle(c, type, ferry__fb_builder_data(b), ferry__fb_builder_size(b));
}

FTEST(requests_before_connect_close_the_client)
{
	struct ferry__plasma_server_opts o = {.memory_bytes = 4 * MIB,
					      .store_flags = FERRY__PLASMA_STORE_NO_PREFAULT};
	struct ferry__plasma_server *srv;
	struct ferry__plasma_pclient *c;
	struct ferry__fb_builder b = {0};
	struct ferry__wire_plasma_stats stats = {.seq = 1};
	struct ferry__wire_plasma_connect conn = {.seq = 2, .pid = 1};

	ftest_assert_ok(ferry__plasma_server_create(&o, &srv));
	c = ferry__plasma_client_new(srv, NULL);
	ftest_assert_ptr_notnull(c);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_STATS,
		     ferry__wire_plasma_stats_build(&b, &stats));
	ftest_assert_true(c->closing);
	ftest_assert_uint_eq(c->replies, 0);
	/* Closed: nothing more is handled. */
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_CONNECT,
		     ferry__wire_plasma_connect_build(&b, &conn));
	ftest_assert_uint_eq(c->slot, FERRY__PLASMA_NO_SLOT);
	ferry__plasma_client_free(c);

	c = ferry__plasma_client_new(srv, NULL);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_CONNECT,
		     ferry__wire_plasma_connect_build(&b, &conn));
	ftest_assert_uint_ne(c->slot, FERRY__PLASMA_NO_SLOT);
	ftest_assert_uint_eq(c->replies, 1);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_CONNECT,
		     ferry__wire_plasma_connect_build(&b, &conn));
	ftest_assert_true(c->closing); /* twice */
	ferry__plasma_client_free(c);
	ferry__fb_builder_fini(&b);
	ferry__plasma_server_destroy(srv);
}

FTEST(other_messages_close_the_client)
{
	struct ferry__plasma_server_opts o = {.memory_bytes = 4 * MIB,
					      .store_flags = FERRY__PLASMA_STORE_NO_PREFAULT};
	struct ferry__plasma_server *srv;
	struct ferry__plasma_pclient *c;
	struct ferry__fb_builder b = {0};
	struct ferry__wire_plasma_status_reply reply = {.seq = 1};

	ftest_assert_ok(ferry__plasma_server_create(&o, &srv));
	c = ferry__plasma_client_new(srv, NULL);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_STATUS_REPLY,
		     ferry__wire_plasma_status_reply_build(&b, &reply));
	ftest_assert_true(c->closing);
	ferry__plasma_client_free(c);
	ferry__fb_builder_fini(&b);
	ferry__plasma_server_destroy(srv);
}

FTEST(subscribe_only_on_a_connection_of_its_own)
{
	struct ferry__plasma_server_opts o = {.memory_bytes = 4 * MIB,
					      .store_flags = FERRY__PLASMA_STORE_NO_PREFAULT};
	struct ferry__plasma_server *srv;
	struct ferry__plasma_pclient *c;
	struct ferry__fb_builder b = {0};
	struct ferry__wire_plasma_subscribe sub = {.seq = 1};
	struct ferry__wire_plasma_connect conn = {.seq = 2, .pid = 1};

	ftest_assert_ok(ferry__plasma_server_create(&o, &srv));
	/* On a client connection: refused (answered), the connection stays. */
	c = ferry__plasma_client_new(srv, NULL);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_CONNECT,
		     ferry__wire_plasma_connect_build(&b, &conn));
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_SUBSCRIBE,
		     ferry__wire_plasma_subscribe_build(&b, &sub));
	ftest_assert_false(c->closing);
	ftest_assert_ptr_null(c->sub);
	ftest_assert_uint_eq(c->replies, 2);
	ferry__plasma_client_free(c);
	/* A subscriber that then sends anything is closed. */
	c = ferry__plasma_client_new(srv, NULL);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_SUBSCRIBE,
		     ferry__wire_plasma_subscribe_build(&b, &sub));
	ftest_assert_ptr_notnull(c->sub);
	ftest_assert_uint_eq(srv->nsubs, 1);
	ftest_assert_uint_eq(atomic_load(&srv->ix->hdr->seal_waiters), 1);
	handle_built(c, &b, FERRY__WIRE_MSG_PLASMA_SUBSCRIBE,
		     ferry__wire_plasma_subscribe_build(&b, &sub));
	ftest_assert_true(c->closing);
	ferry__plasma_client_free(c);
	ftest_assert_uint_eq(srv->nsubs, 0);
	ftest_assert_uint_eq(atomic_load(&srv->ix->hdr->seal_waiters), 0);
	ferry__fb_builder_fini(&b);
	ferry__plasma_server_destroy(srv);
}

/* A background spill holds only its thread: the store answers meanwhile. */
FTEST(requests_are_answered_while_a_spill_is_written)
{
	char path[256], dir[256];
	struct ferry__plasma_server_opts o = {
		.socket_path = path,
		.memory_bytes = 16 * MIB,
		.max_objects = 1024,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT,
		.spill_dir = dir,
		.spill_threshold_pct = 10,
		.tick_ms = 5,
	};
	struct ferry__plasma_server *srv;
	struct ferry_plasma_client *c;
	int hold[2];
	char b;

	snprintf(path, sizeof(path), "%s/s.sock", ftest_tmpdir());
	snprintf(dir, sizeof(dir), "%s/spill", ftest_tmpdir());
	ftest_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hold), 0);
	ftest_assert_ok(ferry__plasma_server_create(&o, &srv));
	ferry__plasma_spill_inject_hold(
		ferry__plasma_store_spill_area(ferry__plasma_server_store(srv)), hold[1]);
	ftest_assert_ok(ferry__plasma_server_start(srv));
	ftest_assert_ok(ferry_plasma_client_connect(path, NULL, &c));
	for (uint32_t n = 0; n < 4; n++)
		client_put(c, n, MIB);		      /* 25%: past the threshold */
	ftest_assert_int_eq(read(hold[0], &b, 1), 1); /* the batch is being written */
	/* The store answers through the socket, and nothing is on disk yet. */
	ftest_assert_uint_eq(client_stats(c).spilled_objects, 0);
	client_check(c, 1, MIB, 0);
	ftest_assert_int_eq(write(hold[0], &b, 1), 1);
	while (client_stats(c).spilled_objects == 0)
		usleep(1000);
	for (uint32_t n = 0; n < 4; n++)
		client_check(c, n, MIB, 0);
	ferry_plasma_client_disconnect(c);
	ferry__plasma_server_destroy(srv);
	close(hold[0]);
	close(hold[1]);
}

/* ---- raw sockets ---- */

static int raw_connect(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ftest_assert_int_ge(fd, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ftest_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* The store closes @fd: a read sees EOF (or a reset) instead of a reply. */
static void expect_closed(int fd)
{
	char buf[256];
	ssize_t n;

	do
		n = read(fd, buf, sizeof(buf));
	while (n > 0);
	ftest_assert_int_le(n, 0);
	close(fd);
}

FTEST(malformed_requests_close_only_their_connection)
{
	static const uint8_t garbage[] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8};
	uint8_t frame[FERRY_FRAME_HEADER_SIZE + 16];
	struct test_store t;
	struct ferry_plasma_client *good;
	int fd;

	store_spawn(&t, (struct ferry__plasma_server_opts){.memory_bytes = 16 * MIB});
	good = client_connect(&t);
	client_put(good, 1, 100);
	/* Not a frame at all. */
	fd = raw_connect(t.path);
	ftest_assert_int_eq(write(fd, garbage, sizeof(garbage)), sizeof(garbage));
	expect_closed(fd);
	/* A PlasmaCreate frame whose payload is not a FlatBuffer. */
	fd = raw_connect(t.path);
	ferry__frame_header_encode(frame, FERRY__WIRE_MSG_PLASMA_CREATE, 16);
	memset(frame + FERRY_FRAME_HEADER_SIZE, 0xff, 16);
	ftest_assert_int_eq(write(fd, frame, sizeof(frame)), sizeof(frame));
	expect_closed(fd);
	/* A peer that dies in the middle of a frame. */
	fd = raw_connect(t.path);
	ftest_assert_int_eq(write(fd, frame, 5), 5);
	close(fd);
	/* The store still serves the well-behaved client. */
	client_check(good, 1, 100, 0);
	client_put(good, 2, 2 * MIB);
	client_check(good, 2, 2 * MIB, 0);
	ferry_plasma_client_disconnect(good);
	store_stop(&t);
}

/* The loop-side get (ferry__plasma_server_get_on_loop), run on the given loop's thread. */
struct loop_get {
	struct ferry__plasma_server *srv; /* the server on the loop */
	struct ferry_plasma_client *c;	  /* an in-process client of it */
	uint32_t objects;		  /* objects 0..objects-1 were put, MIB each */
	atomic_bool done;		  /* the checks ran */
	uint32_t spilled;		  /* the spilled one asked for */
};

static void loop_get_again(void *arg, int status);

static void get_and_check(struct loop_get *g, uint32_t n)
{
	struct ferry_object_id id = oid(n);
	struct ferry_plasma_view v;

	ftest_assert_ok(ferry__plasma_server_get_on_loop(g->srv, g->c, &id, &v));
	ftest_assert_uint_eq(v.data_size, MIB);
	ftest_assert_true(pattern_intact(v.data, MIB, n));
	ftest_assert_ok(ferry_plasma_client_release(g->c, &v));
}

static void loop_get_checks(void *arg, int status)
{
	struct loop_get *g = arg;
	struct ferry__plasma_object o;
	struct ferry_object_id id;
	uint32_t spilled = UINT32_MAX, kept = UINT32_MAX;

	ftest_assert_ok(status);
	for (uint32_t n = 0; n < g->objects; n++) {
		id = oid(n);
		int state = ferry__plasma_index_find(g->srv->ix, &id, &o);

		if (state == FERRY__PLASMA_SPILLED && spilled == UINT32_MAX)
			spilled = n;
		else if (state == FERRY__PLASMA_SEALED)
			kept = n;
	}
	ftest_assert_uint_ne(spilled, UINT32_MAX);
	ftest_assert_uint_ne(kept, UINT32_MAX);
	get_and_check(g, kept); /* in memory: pinned at once */
	/* Spilled: read back on the disk helper; ask again until it is published. */
	id = oid(spilled);
	ftest_assert_errno(
		ferry__plasma_server_get_on_loop(g->srv, g->c, &id, &(struct ferry_plasma_view){0}),
		-EBUSY);
	g->spilled = spilled;
	ftest_assert_ok(ferry__loop_post(g->srv->loop, loop_get_again, g));
}

/* Again on a later pass of the loop, until the restore is published. */
static void loop_get_again(void *arg, int status)
{
	struct loop_get *g = arg;
	struct ferry__plasma_object o;
	struct ferry_object_id id = oid(g->spilled);
	struct ferry_plasma_view v;
	int r;

	ftest_assert_ok(status);
	r = ferry__plasma_server_get_on_loop(g->srv, g->c, &id, &v);
	if (r == -EBUSY) {
		ftest_assert_ok(ferry__loop_post(g->srv->loop, loop_get_again, g));
		return;
	}
	ftest_assert_ok(r);
	ftest_assert_true(pattern_intact(v.data, MIB, g->spilled));
	ftest_assert_ok(ferry_plasma_client_release(g->c, &v));
	ftest_assert_int_eq(ferry__plasma_index_find(g->srv->ix, &id, &o), FERRY__PLASMA_SEALED);
	id = oid(999); /* never made */
	ftest_assert_errno(
		ferry__plasma_server_get_on_loop(g->srv, g->c, &id, &(struct ferry_plasma_view){0}),
		-ENOENT);
	id = oid(998); /* created by the test thread, not sealed */
	ftest_assert_errno(
		ferry__plasma_server_get_on_loop(g->srv, g->c, &id, &(struct ferry_plasma_view){0}),
		-ENOENT);
	atomic_store(&g->done, true);
}

/* A client in the server's own process, whose caller runs on the server's loop (the node's
 * object manager), gets objects without a request to the server: in memory, spilled (-EBUSY
 * while the disk helper reads it back, then the object), absent or not sealed (-ENOENT), and never waits for a reply the loop it blocks
 * would have to send. */
FTEST(get_on_loop_answers_without_a_round_trip)
{
	struct ferry__plasma_server_opts o = {
		.memory_bytes = 8 * MIB,
		.store_flags = FERRY__PLASMA_STORE_NO_PREFAULT,
		.spill_dir = ftest_tmpdir(),
	};
	struct ferry_object_id busy = oid(998);
	struct loop_get g = {.objects = 24};
	struct on_loop l = {0};
	char path[256];
	void *d;

	snprintf(path, sizeof(path), "%s/s.sock", ftest_tmpdir());
	o.socket_path = path;
	ftest_assert_ok(ferry__loop_create(NULL, &l.loop));
	o.loop = l.loop;
	ftest_assert_ok(ferry__plasma_server_create(&o, &g.srv));
	ftest_assert_int_eq(pthread_create(&l.thread, NULL, run_given_loop, &l), 0);
	ftest_assert_ok(ferry_plasma_client_connect(path, NULL, &g.c));
	for (uint32_t n = 0; n < g.objects; n++) /* three times the memory: some spill */
		client_put(g.c, n, MIB);
	ftest_assert_ok(ferry_plasma_client_create(g.c, &busy, 100, NULL, 0, &d));
	ftest_assert_ok(ferry__loop_post(l.loop, loop_get_checks, &g));
	for (int i = 0; i < 10000 && !atomic_load(&g.done); i++)
		usleep(1000);
	ftest_assert_true(atomic_load(&g.done));
	ftest_assert_errno(
		ferry__plasma_server_get_on_loop(NULL, g.c, &busy, &(struct ferry_plasma_view){0}),
		-EINVAL);
	ferry__loop_stop(l.loop);
	pthread_join(l.thread, NULL);
	ferry__plasma_server_stop(g.srv);
	ferry__loop_destroy(l.loop);
	ferry__plasma_server_destroy(g.srv);
	ferry_plasma_client_disconnect(g.c);
}
