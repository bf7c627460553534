/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server and client in one process (the server on its own loop thread): calls through
 * the client; a long pipelined burst whose replies span several send chunks, with large
 * (unpacked) replies between small (packed) ones, comes back complete and in order; lookups and
 * object events carry where each copy lies; a keyed snapshot ends with a marker, also when
 * empty; a malformed multi-get closes only that connection; clients past the limit are refused
 * with one log line; every allocation failure of server creation unwinds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/frame.h"
#include "common/wire.h"
#include "ftest.h"
#include "gcs/client.h"
#include "gcs/codec.h"
#include "gcs/ops.h"
#include "gcs/server.h"

#define TOKEN "unit-token"

struct running {
	struct ferry__loop *loop;      /* the server's loop */
	struct ferry__gcs_server *srv; /* the server */
	pthread_t thread;	       /* runs the loop */
};

static void *run_loop(void *arg)
{
	ferry__loop_run(arg);
	return NULL;
}

/* A server with at most @max_clients clients (0: its default). */
static void start_with(struct running *r, unsigned max_clients)
{
	struct ferry__gcs_server_opts o = {0};

	o.max_clients = max_clients;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	ftest_assert_ok(ferry__loop_create(NULL, &r->loop));
	ftest_assert_ok(ferry__gcs_server_create(r->loop, &o, &r->srv));
	ftest_assert_ok(pthread_create(&r->thread, NULL, run_loop, r->loop));
}

static void start(struct running *r)
{
	start_with(r, 0);
}

static void stop(struct running *r)
{
	ferry__loop_stop(r->loop);
	pthread_join(r->thread, NULL);
	ferry__loop_destroy(r->loop);
	ferry__gcs_server_destroy(r->srv);
}

static int try_connect(struct running *r, struct ferry_gcs_client **c)
{
	char addr[64];
	const char *list[1] = {addr};
	struct ferry_gcs_client_opts o = {0};

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ferry__gcs_server_port(r->srv));
	o.addresses = list;
	o.naddresses = 1;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.timeout_ms = 5000;
	return ferry_gcs_client_connect(&o, c);
}

static struct ferry_gcs_client *connect_client(struct running *r)
{
	struct ferry_gcs_client *c = NULL;

	ftest_assert_ok(try_connect(r, &c));
	return c;
}

FTEST(client_calls_in_process)
{
	struct running r;
	struct ferry_gcs_client *c;
	struct ferry_gcs_bytes keys[2] = {{"a", 1}, {"b", 1}}, *values;
	struct ferry_gcs_node_info n = {0}, *nodes;

	start(&r);
	c = connect_client(&r);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "a", 1, "x", 1, false), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "a", 1, "y", 1, false), 0);
	ftest_assert_int_eq(ferry_gcs_kv_multi_get(c, NULL, 0, keys, 2, &values), 1);
	ftest_assert_mem_eq(values[0].data, "x", 1);
	ftest_assert_ptr_null(values[1].data);
	ferry_gcs_free(values);
	ferry_node_id_random(&n.id);
	n.address = "127.0.0.1:1";
	ftest_assert_int_eq(ferry_gcs_node_register(c, &n), 1);
	ftest_assert_int_eq(ferry_gcs_node_list(c, &nodes), 1);
	ftest_assert_str_eq(nodes[0].address, "127.0.0.1:1");
	ftest_assert_int_eq(nodes[0].state, FERRY_GCS_NODE_ALIVE);
	ferry_gcs_free(nodes);
	ferry_gcs_client_destroy(c);
	stop(&r);
}

/* ---- object places ---- */

struct object_events {
	pthread_mutex_t lock;		    /* guards the rest */
	pthread_cond_t cond;		    /* signalled on each record */
	unsigned records;		    /* object records decoded */
	unsigned bad;			    /* records that did not decode */
	uint32_t nlocations;		    /* the last record's locations */
	struct ferry_gcs_object_place last; /* the last record's first place */
};

static void on_object(void *arg, const struct ferry_gcs_event *ev)
{
	struct object_events *e = arg;
	struct ferry_gcs_object_info info;

	if (ev->kind == FERRY_GCS_EVENT_RESYNC || !ev->size)
		return;
	pthread_mutex_lock(&e->lock);
	if (ferry_gcs_event_object(ev, &info) == 0) {
		e->nlocations = info.nlocations;
		if (info.nlocations)
			e->last = info.places[0];
		ferry_gcs_free(info.locations); /* the places with them */
		e->records++;
	} else {
		e->bad++;
	}
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Wait (at most 10 s: a hang, not a speed check) for the @want-th record; its first place. */
static struct ferry_gcs_object_place object_event(struct object_events *e, unsigned want)
{
	struct ferry_gcs_object_place last;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&e->lock);
	while (e->records < want && pthread_cond_timedwait(&e->cond, &e->lock, &ts) == 0)
		;
	ftest_assert_uint_eq(e->records, want);
	ftest_assert_uint_eq(e->bad, 0);
	last = e->last;
	pthread_mutex_unlock(&e->lock);
	return last;
}

/* As the node daemon lists a copy: OBJ_ADD_LOCATION with its place. */
static int add_location_at(struct ferry_gcs_client *c, const struct ferry_object_id *id,
			   const struct ferry_node_id *node, uint64_t offset, uint64_t alloc,
			   uint64_t check)
{
	struct ferry__gcs_op op = {.type = FERRY__GCS_OP_OBJ_ADD_LOCATION};

	op.obj_location.id = *id;
	op.obj_location.node = *node;
	op.obj_location.size_bytes = 64;
	op.obj_location.place = (struct ferry_gcs_object_place){offset, alloc, check};
	return ferry__gcs_client_apply(c, 0, &op);
}

/* The place of the copy on @node in @info (which must list it). */
static struct ferry_gcs_object_place place_in(const struct ferry_gcs_object_info *info,
					      const struct ferry_node_id *node)
{
	for (uint32_t i = 0; i < info->nlocations; i++)
		if (ferry_node_id_eq(&info->locations[i], node))
			return info->places[i];
	FTEST__FAIL("no copy on that node");
}

/* Places, checks included, reach readers both ways: a lookup returns them beside the locations,
 * and the object's subscribers get them in the snapshot and in a delta when a copy's place
 * changes, if only its check. The public add_location knows no place: all 0. */
FTEST(lookups_and_events_carry_places)
{
	struct object_events e = {
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, {0, 0, 0}};
	struct ferry_gcs_object_info info = {0};
	struct ferry_gcs_object_place p;
	struct ferry_worker_id owner;
	struct ferry_node_id n1, n2;
	struct ferry_object_id id;
	struct ferry_gcs_client *c;
	struct running r;

	ferry_object_id_random(&id);
	ferry_worker_id_random(&owner);
	ferry_node_id_random(&n1);
	ferry_node_id_random(&n2);
	start(&r);
	c = connect_client(&r);
	ftest_assert_int_eq(ferry_gcs_object_add(c, &id, &owner, &n1, 64), 1);
	ftest_assert_int_eq(ferry_gcs_object_add_location(c, &id, &n1, 64), 1);
	ftest_assert_ok(ferry_gcs_object_lookup(c, &id, &info));
	ftest_assert_uint_eq(info.nlocations, 1);
	ftest_assert_ptr_notnull(info.places);
	ftest_assert_uint_eq(info.places[0].alloc, 0);
	ftest_assert_uint_eq(info.places[0].offset, 0);
	ftest_assert_uint_eq(info.places[0].check, 0);
	ferry_gcs_free(info.locations);
	ftest_assert_ok(ferry_gcs_subscribe(c, FERRY_GCS_CH_OBJECT_LOCATIONS, id.bytes,
					    sizeof(id.bytes), on_object, &e));
	p = object_event(&e, 1); /* the snapshot */
	ftest_assert_uint_eq(p.alloc, 0);
	ftest_assert_int_eq(add_location_at(c, &id, &n1, 4096, 7, 0xc7), 1); /* the copy's place */
	p = object_event(&e, 2);
	ftest_assert_uint_eq(p.offset, 4096);
	ftest_assert_uint_eq(p.alloc, 7);
	ftest_assert_uint_eq(p.check, 0xc7);
	ftest_assert_int_eq(add_location_at(c, &id, &n1, 4096, 7, 0xc7), 0); /* nothing new */
	ftest_assert_int_eq(add_location_at(c, &id, &n1, 4096, 7, 0xc8), 1); /* a new check */
	p = object_event(&e, 3);
	ftest_assert_uint_eq(p.alloc, 7);
	ftest_assert_uint_eq(p.check, 0xc8);
	ftest_assert_int_eq(add_location_at(c, &id, &n2, 1 << 20, 8, 0), 1); /* no check */
	ftest_assert_ok(ferry_gcs_object_lookup(c, &id, &info));
	ftest_assert_uint_eq(info.nlocations, 2);
	p = place_in(&info, &n1);
	ftest_assert_uint_eq(p.offset, 4096);
	ftest_assert_uint_eq(p.alloc, 7);
	ftest_assert_uint_eq(p.check, 0xc8);
	p = place_in(&info, &n2);
	ftest_assert_uint_eq(p.offset, 1 << 20);
	ftest_assert_uint_eq(p.alloc, 8);
	ftest_assert_uint_eq(p.check, 0);
	ferry_gcs_free(info.locations);
	object_event(&e, 4); /* n2's copy; the unchanged n1 sent none */
	pthread_mutex_lock(&e.lock);
	ftest_assert_uint_eq(e.nlocations, 2);
	pthread_mutex_unlock(&e.lock);
	ferry_gcs_client_destroy(c);
	stop(&r);
}

/* ---- snapshot end ---- */

/* The kinds of the events one subscription got, in order. */
struct kinds {
	pthread_mutex_t lock; /* guards the rest */
	pthread_cond_t cond;  /* signalled on each event */
	char seen[16];	      /* 'R'esync, 'S'napshot item, 'E'nd, 'D'elta, '?' other */
	unsigned n;	      /* events */
	unsigned keyed;	      /* events that named the subscription's key */
};

static void on_kind(void *arg, const struct ferry_gcs_event *ev)
{
	static const char letters[] = "DRSE"; /* by enum ferry_gcs_event_kind */
	struct kinds *k = arg;

	pthread_mutex_lock(&k->lock);
	if (k->n < sizeof(k->seen) - 1)
		k->seen[k->n++] = (unsigned)ev->kind < 4 ? letters[ev->kind] : '?';
	k->keyed += ev->key_size == FERRY_OBJECT_ID_SIZE;
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
}

/* Wait (at most 10 s: a hang guard) for @want events; they must read @want. */
static void kinds_expect(struct kinds *k, const char *want)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&k->lock);
	while (k->n < strlen(want) && pthread_cond_timedwait(&k->cond, &k->lock, &ts) == 0)
		;
	ftest_assert_str_eq(k->seen, want);
	ftest_assert_uint_eq(k->keyed, k->n); /* every marker names the key */
	pthread_mutex_unlock(&k->lock);
}

/*
 * Issue 22: a keyed subscription is also the lookup. For a key with no record the subscriber
 * gets RESYNC then SNAPSHOT_END (an empty, complete snapshot), then the record's delta once it
 * appears; for a present key RESYNC, the record, SNAPSHOT_END.
 */
FTEST(keyed_snapshot_ends_with_a_marker)
{
	struct kinds missing = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0};
	struct kinds present = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0};
	struct ferry_worker_id owner;
	struct ferry_object_id a, b;
	struct ferry_node_id n1;
	struct ferry_gcs_client *c;
	struct running r;

	ferry_object_id_random(&a);
	ferry_object_id_random(&b);
	ferry_worker_id_random(&owner);
	ferry_node_id_random(&n1);
	start(&r);
	c = connect_client(&r);
	ftest_assert_int_eq(ferry_gcs_object_add(c, &b, &owner, &n1, 64), 1);
	ftest_assert_ok(ferry_gcs_subscribe(c, FERRY_GCS_CH_OBJECT_LOCATIONS, a.bytes,
					    sizeof(a.bytes), on_kind, &missing));
	ftest_assert_ok(ferry_gcs_subscribe(c, FERRY_GCS_CH_OBJECT_LOCATIONS, b.bytes,
					    sizeof(b.bytes), on_kind, &present));
	kinds_expect(&missing, "RE");
	kinds_expect(&present, "RSE");
	ftest_assert_int_eq(ferry_gcs_object_add(c, &a, &owner, &n1, 64), 1);
	kinds_expect(&missing, "RED");
	ferry_gcs_client_destroy(c);
	stop(&r);
	ftest_assert_str_eq(present.seen, "RSE"); /* and nothing for a's put */
}

/* ---- raw frames ---- */

struct raw {
	int fd;				   /* the socket */
	struct ferry__frame_parser parser; /* replies */
	struct ferry__fb_builder b;	   /* requests */
	uint8_t *out;			   /* frames to write */
	size_t out_size;		   /* their bytes */
};

static void raw_queue(struct raw *w, uint16_t type)
{
	const uint8_t *frame;
	size_t size;

	ftest_assert_ok(ferry__frame_finish(&w->b, type, &frame, &size));
	w->out = ferry__realloc(w->out, w->out_size + size);
	ftest_assert_ptr_notnull(w->out);
	memcpy(w->out + w->out_size, frame, size);
	w->out_size += size;
}

static void raw_flush(struct raw *w)
{
	ftest_write_all(w->fd, w->out, w->out_size);
	w->out_size = 0;
}

static void raw_open(struct raw *w, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct ferry__wire_handshake hs = {0};
	struct timeval tv = {10, 0};

	memset(w, 0, sizeof(*w));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	w->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ftest_assert_int_ge(w->fd, 0);
	ftest_assert_ok(connect(w->fd, (struct sockaddr *)&sa, sizeof(sa)));
	setsockopt(w->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ferry__frame_parser_init(&w->parser, 0);
	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = (const uint8_t *)TOKEN;
	hs.token_count = strlen(TOKEN);
	ftest_assert_ok(ferry__wire_handshake_build(&w->b, &hs));
	raw_queue(w, FERRY__WIRE_MSG_HANDSHAKE);
}

static void raw_close(struct raw *w)
{
	close(w->fd);
	ferry__frame_parser_fini(&w->parser);
	ferry__fb_builder_fini(&w->b);
	ferry__free(w->out);
}

/* The next frame, or 0 at EOF. */
static int raw_next(struct raw *w, struct ferry__frame *f)
{
	while (ferry__frame_parser_next(&w->parser, f) != 1) {
		uint8_t *space;
		size_t size;
		ssize_t n;

		ftest_assert_ok(ferry__frame_parser_space(&w->parser, &space, &size));
		n = read(w->fd, space, size);
		if (n <= 0)
			return 0;
		ferry__frame_parser_commit(&w->parser, (size_t)n);
	}
	return 1;
}

static void queue_get(struct raw *w, uint64_t seq, const char *key, uint8_t op)
{
	struct ferry__wire_gcs_kv_get m = {0};

	m.seq = seq;
	m.key = (const uint8_t *)key;
	m.key_count = strlen(key);
	m.op = op;
	ftest_assert_ok(ferry__wire_gcs_kv_get_build(&w->b, &m));
	raw_queue(w, FERRY__WIRE_MSG_GCS_KV_GET);
}

FTEST(pipelined_replies_complete_and_in_order)
{
	static char big[8192];
	struct running r;
	struct ferry_gcs_client *c;
	struct ferry__frame f;
	struct raw w;
	uint64_t want = 1;

	memset(big, 'b', sizeof(big));
	start(&r);
	c = connect_client(&r);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "small", 5, "s", 1, true), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "big", 3, big, sizeof(big), true), 1);
	raw_open(&w, ferry__gcs_server_port(r.srv));
	for (uint64_t seq = 1; seq <= 2000; seq++)
		queue_get(&w, seq, seq % 97 ? "small" : "big", 0);
	raw_flush(&w);
	while (want <= 2000 && raw_next(&w, &f)) {
		struct ferry__wire_gcs_reply_view v;

		if (f.type != FERRY__WIRE_MSG_GCS_REPLY)
			continue; /* the handshake reply */
		v = ferry__wire_gcs_reply_root_verified(f.payload);
		ftest_assert_uint_eq(ferry__wire_gcs_reply_seq(v), want);
		ftest_assert_uint_eq(ferry__wire_gcs_reply_value_count(v),
				     want % 97 ? 1 : sizeof(big));
		want++;
	}
	ftest_assert_uint_eq(want, 2001);
	raw_close(&w);
	ferry_gcs_client_destroy(c);
	stop(&r);
}

FTEST(malformed_multi_get_closes_only_that_connection)
{
	struct running r;
	struct ferry_gcs_client *c;
	struct ferry__frame f;
	struct raw w;

	start(&r);
	c = connect_client(&r);
	raw_open(&w, ferry__gcs_server_port(r.srv));
	queue_get(&w, 1, "\x05\x00\x00\x00zz", 3); /* 5 keys announced, 2 bytes follow */
	raw_flush(&w);
	while (raw_next(&w, &f))
		ftest_assert_uint_ne(f.type, FERRY__WIRE_MSG_GCS_REPLY);
	raw_close(&w);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "still", 5, "up", 2, true), 1);
	ferry_gcs_client_destroy(c);
	stop(&r);
}

FTEST(server_create_allocation_failures)
{
	struct ferry__gcs_server_opts o = {0};
	int ret = -ENOMEM;

	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	for (long n = 0; ret < 0; n++) {
		struct ferry__loop *loop;
		struct ferry__gcs_server *srv = NULL;

		ftest_assert_ok(ferry__loop_create(NULL, &loop));
		ferry__alloc_fail_after(n);
		ret = ferry__gcs_server_create(loop, &o, &srv);
		ferry__alloc_fail_after(-1);
		if (ret < 0)
			ftest_assert_errno(ret, -ENOMEM);
		ferry__loop_destroy(loop);
		ferry__gcs_server_destroy(srv);
	}
}

/*
 * The default client limit is what the open-file limit leaves room for. A server at its limit
 * refuses each newcomer (-EUSERS) with one log line per window, not one per refusal: a
 * reconnect storm must not flood the log.
 */
FTEST(clients_past_the_limit_are_refused_in_one_line)
{
	struct ferry_gcs_client *c, *extra = NULL;
	struct rlimit rl;
	struct running r;
	const char *at;
	int lines = 0;

	start(&r);
	ftest_assert_ok(getrlimit(RLIMIT_NOFILE, &rl));
	ftest_assert_uint_eq(ferry__gcs_server_max_clients(r.srv), ferry__conn_server_fd_room(0));
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= 1024)
		ftest_assert_uint_eq(ferry__conn_server_fd_room(0),
				     rl.rlim_cur - FERRY_CONN_SERVER_FD_RESERVE -
					     FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING);
	stop(&r);
	start_with(&r, 1);
	c = connect_client(&r);
	ftest_log_capture_start();
	for (int i = 0; i < 5; i++)
		ftest_assert_errno(try_connect(&r, &extra), -EUSERS);
	for (at = ftest_log_captured(); (at = strstr(at, "refusing new connections")); at++)
		lines++;
	ftest_log_capture_stop();
	ftest_assert_int_eq(lines, 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "k", 1, "v", 1, false), 1);
	ferry_gcs_client_destroy(c);
	stop(&r);
}
