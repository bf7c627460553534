/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration tests of the GCS: the real ferry-gcs process (path in FERRY_GCS_BIN) and clients
 * over loopback TCP: KV, pub/sub between clients, a killed subscriber, a GCS restarted on its
 * WAL under live clients, node death, two shards, a wrong token and a malformed frame.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "tests/harness/ftest.h"
#include "tests/integration/gcs/gcs_procs.h"

/* ---- event collection ---- */

struct events {
	pthread_mutex_t lock; /* guards the rest */
	pthread_cond_t cond;  /* signalled on each event */
	unsigned deltas;      /* DELTA events */
	unsigned resyncs;     /* RESYNC markers */
	unsigned snapshots;   /* SNAPSHOT items */
	unsigned dead_nodes;  /* node records in state DEAD */
	uint64_t last_seq;    /* of the last delta */
	char last_value[64];  /* node address of the last node event */
};

static void events_init(struct events *e)
{
	memset(e, 0, sizeof(*e));
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
}

static void on_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct events *e = arg;
	struct ferry_gcs_node_info n;

	pthread_mutex_lock(&e->lock);
	if (ev->kind == FERRY_GCS_EVENT_DELTA) {
		e->deltas++;
		e->last_seq = ev->seq;
	} else if (ev->kind == FERRY_GCS_EVENT_RESYNC) {
		e->resyncs++;
	} else if (ev->kind == FERRY_GCS_EVENT_SNAPSHOT) {
		e->snapshots++;
	}
	if (ev->channel == FERRY_GCS_CH_NODES && ferry_gcs_event_node(ev, &n) == 0) {
		snprintf(e->last_value, sizeof(e->last_value), "%s", n.address ? n.address : "");
		if (n.state == FERRY_GCS_NODE_DEAD)
			e->dead_nodes++;
	}
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

/* Wait for *@counter >= @want (procs.h); its value. */
static unsigned events_wait(struct events *e, const unsigned *counter, unsigned want)
{
	return itest_counter_wait(&e->lock, &e->cond, counter, want);
}

static void node_register(struct ferry_gcs_client *c, struct ferry_node_id *id, const char *addr)
{
	struct ferry_gcs_node_info n = {0};

	ferry_node_id_random(id);
	n.id = *id;
	n.address = addr;
	n.cpu = 4;
	ftest_assert_int_ge(ferry_gcs_node_register(c, &n), 0);
}

/* ---- tests ---- */

FTEST(kv_roundtrip)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	void *v = NULL;
	size_t n = 0;

	ftest_assert_int_eq(ferry_gcs_kv_put(c, "ns", 2, "k", 1, "value", 5, false), 1);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, "ns", 2, "k", 1, "other", 5, false), 0);
	ftest_assert_ok(ferry_gcs_kv_get(c, "ns", 2, "k", 1, &v, &n));
	ftest_assert_uint_eq(n, 5);
	ftest_assert_mem_eq(v, "value", 5);
	ferry_gcs_free(v);
	ftest_assert_int_eq(ferry_gcs_kv_exists(c, "ns", 2, "k", 1), 1);
	ftest_assert_int_eq(ferry_gcs_kv_delete(c, "ns", 2, "k", 1), 1);
	ftest_assert_errno(ferry_gcs_kv_get(c, "ns", 2, "k", 1, &v, &n), -ENOENT);
	ftest_assert_int_eq(ferry_gcs_kv_exists(c, "ns", 2, "k", 1), 0);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(pubsub_between_clients)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *sub = client_for(&p, 1, TOKEN);
	struct ferry_gcs_client *pub = client_for(&p, 1, TOKEN);
	struct ferry_node_id first, second;
	struct events e;

	events_init(&e);
	node_register(pub, &first, "10.0.0.1:1");
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODES, NULL, 0, on_event, &e));
	/* The snapshot carries the node registered before the subscription. */
	ftest_assert_uint_ge(events_wait(&e, &e.snapshots, 1), 1);
	node_register(pub, &second, "10.0.0.2:1");
	ftest_assert_uint_ge(events_wait(&e, &e.deltas, 1), 1);
	pthread_mutex_lock(&e.lock);
	ftest_assert_str_eq(e.last_value, "10.0.0.2:1");
	pthread_mutex_unlock(&e.lock);
	ferry_gcs_client_destroy(pub);
	ferry_gcs_client_destroy(sub);
	gcs_stop(&p, SIGTERM);
}

FTEST(killed_subscriber_does_not_disturb)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client *pub, *sub;
	struct ferry_node_id id;
	struct events e;
	int status;
	pid_t child;

	child = fork();
	ftest_assert_int_ge(child, 0);
	if (child == 0) {
		struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
		struct events ce;

		events_init(&ce);
		ferry_gcs_subscribe(c, FERRY_GCS_CH_NODES, NULL, 0, on_event, &ce);
		pause(); /* killed below with its subscription live */
		_exit(0);
	}
	sub = client_for(&p, 1, TOKEN);
	pub = client_for(&p, 1, TOKEN);
	events_init(&e);
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODES, NULL, 0, on_event, &e));
	node_register(pub, &id, "10.0.0.3:1");
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	for (int i = 0; i < 20; i++)
		node_register(pub, &id, "10.0.0.4:1");
	ftest_assert_uint_ge(events_wait(&e, &e.deltas, 21), 21);
	ferry_gcs_client_destroy(pub);
	ferry_gcs_client_destroy(sub);
	gcs_stop(&p, SIGTERM);
}

FTEST(restart_on_wal_keeps_acknowledged_writes)
{
	char wal[512];
	const char *args[] = {"--wal", wal, NULL};
	struct gcs_proc p;
	struct ferry_gcs_client *c, *sub;
	struct ferry_node_id id;
	struct events e;
	char key[32];

	snprintf(wal, sizeof(wal), "%s/wal", ftest_tmpdir());
	p = gcs_start(0, args);
	c = client_for(&p, 1, TOKEN);
	sub = client_for(&p, 1, TOKEN);
	events_init(&e);
	ftest_assert_ok(ferry_gcs_subscribe(sub, FERRY_GCS_CH_NODES, NULL, 0, on_event, &e));
	ftest_assert_uint_ge(events_wait(&e, &e.resyncs, 1), 1);
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		ftest_assert_int_eq(
			ferry_gcs_kv_put(c, NULL, 0, key, strlen(key), key, strlen(key), true), 1);
	}
	/* A crash, not a clean stop: only what the log made durable survives. */
	gcs_stop(&p, SIGKILL);
	p = gcs_start(p.port, args);
	/* The clients reconnect on their own; every acknowledged write is there. */
	for (int i = 0; i < 200; i++) {
		void *v = NULL;
		size_t n = 0;

		snprintf(key, sizeof(key), "key-%d", i);
		ftest_assert_ok(ferry_gcs_kv_get(c, NULL, 0, key, strlen(key), &v, &n));
		ftest_assert_mem_eq(v, key, n);
		ferry_gcs_free(v);
	}
	/* The subscriber resubscribed: a new server epoch means a resync, then deltas flow. */
	ftest_assert_uint_ge(events_wait(&e, &e.resyncs, 2), 2);
	node_register(c, &id, "10.0.0.5:1");
	ftest_assert_uint_ge(events_wait(&e, &e.deltas, 1), 1);
	ferry_gcs_client_destroy(sub);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(node_death_detected)
{
	const char *args[] = {"--node-deadline-ms", "300", NULL};
	struct gcs_proc p = gcs_start(0, args);
	struct ferry_gcs_client *c = client_for(&p, 1, TOKEN);
	struct ferry_gcs_object_info info;
	struct ferry_object_id obj;
	struct ferry_worker_id owner;
	struct ferry_node_id node, other;
	struct events e;

	events_init(&e);
	ftest_assert_ok(ferry_gcs_subscribe(c, FERRY_GCS_CH_NODES, NULL, 0, on_event, &e));
	node_register(c, &node, "10.0.0.6:1");
	node_register(c, &other, "10.0.0.7:1");
	ferry_object_id_random(&obj);
	ferry_worker_id_random(&owner);
	ftest_assert_int_eq(ferry_gcs_object_add(c, &obj, &owner, &other, 64), 1);
	ftest_assert_int_eq(ferry_gcs_object_add_location(c, &obj, &node, 64), 1);
	/* "other" keeps heartbeating; "node" goes silent and must be declared dead. */
	for (int i = 0; i < 40 && events_wait(&e, &e.dead_nodes, 0) == 0; i++) {
		ftest_assert_int_ge(ferry_gcs_node_heartbeat(c, &other, 1, 0, 0), 0);
		usleep(50 * 1000);
	}
	ftest_assert_uint_eq(events_wait(&e, &e.dead_nodes, 1), 1);
	ftest_assert_ok(ferry_gcs_object_lookup(c, &obj, &info));
	ftest_assert_uint_eq(info.nlocations, 0); /* the copy on the dead node was dropped */
	ferry_gcs_free(info.locations);
	ftest_assert_errno(ferry_gcs_node_heartbeat(c, &node, 1, 0, 0), -ENOENT);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

FTEST(two_shards_route_objects)
{
	const char *a0[] = {"--shard", "0/2", NULL}, *a1[] = {"--shard", "1/2", NULL};
	struct gcs_proc p[2] = {gcs_start(0, a0), gcs_start(0, a1)};
	struct gcs_proc swapped[2] = {p[1], p[0]};
	struct ferry_gcs_client *c = client_for(p, 2, TOKEN);
	struct ferry_gcs_client *wrong = client_for(swapped, 2, TOKEN);
	struct ferry_object_id ids[16];
	struct ferry_worker_id owner;
	struct ferry_node_id node;
	unsigned per_shard[2] = {0};

	ferry_worker_id_random(&owner);
	ferry_node_id_random(&node);
	for (int i = 0; i < 16; i++) {
		struct ferry_gcs_object_info info;

		ferry_object_id_random(&ids[i]);
		per_shard[ferry_gcs_object_shard(&ids[i], 2)]++;
		ftest_assert_int_eq(ferry_gcs_object_add(c, &ids[i], &owner, &node, 8), 1);
		ftest_assert_ok(ferry_gcs_object_lookup(c, &ids[i], &info));
		ftest_assert_mem_eq(info.id.bytes, ids[i].bytes, sizeof(ids[i].bytes));
		ferry_gcs_free(info.locations);
		/* Routed to the other shard, the object is unknown: each lives on one shard. */
		ftest_assert_errno(ferry_gcs_object_lookup(wrong, &ids[i], &info), -ENOENT);
		/* and the other shard refuses to hold it */
		ftest_assert_errno(ferry_gcs_object_add(wrong, &ids[i], &owner, &node, 8), -EXDEV);
	}
	ftest_log("objects per shard: %u / %u", per_shard[0], per_shard[1]);
	ferry_gcs_client_destroy(wrong);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p[0], SIGTERM);
	gcs_stop(&p[1], SIGTERM);
}

FTEST(wrong_token_refused)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c = NULL;
	char addr[64];
	const char *list[1] = {addr};

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", p.port);
	o.addresses = list;
	o.naddresses = 1;
	o.token = "not-the-token";
	o.token_len = 13;
	o.timeout_ms = 5000;
	ftest_assert_errno(ferry_gcs_client_connect(&o, &c), -EACCES);
	ftest_assert_ptr_null(c);
	/* The server keeps serving. */
	c = client_for(&p, 1, TOKEN);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "a", 1, "b", 1, true), 1);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* Nothing listens at the address: the connect retries until its timeout and then says why
 * (refused), not just that time ran out. */
FTEST(nothing_listening_is_connection_refused_not_timed_out)
{
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c = NULL;
	const char *list[1] = {"127.0.0.1:1"};

	o.addresses = list;
	o.naddresses = 1;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.timeout_ms = 300;
	ftest_assert_errno(ferry_gcs_client_connect(&o, &c), -ECONNREFUSED);
	ftest_assert_ptr_null(c);
}

/* A host name that does not resolve (.invalid never does) fails the connect at once, saying
 * so in one line: not a line per retry for the whole timeout and then "timed out". */
FTEST(a_name_that_does_not_resolve_fails_at_once_in_one_line)
{
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c = NULL;
	const char *list[1] = {"no-such-host.invalid:6380"}, *log, *first;

	o.addresses = list;
	o.naddresses = 1;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.timeout_ms = 60000; /* the test's own timeout ends first if the connect waits for it */
	ftest_log_capture_start();
	ftest_assert_errno(ferry_gcs_client_connect(&o, &c), -EHOSTUNREACH);
	ftest_log_capture_stop();
	ftest_assert_ptr_null(c);
	log = ftest_log_captured();
	first = strstr(log, "cannot resolve 'no-such-host.invalid'");
	ftest_assert_ptr_notnull(first);
	ftest_assert_ptr_null(strstr(first + 1, "cannot resolve"));
}

/* Read until EOF (the server closed us); fails the test after 10 s. */
static void expect_closed(int fd)
{
	struct timeval tv = {10, 0};
	char buf[4096];
	ssize_t n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		;
	ftest_assert_int_le(n, 0);
	ftest_assert_true(n == 0 || errno == ECONNRESET);
}

FTEST(malformed_request_closes_only_that_connection)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry__wire_gcs_request req = {0};
	struct ferry__fb_builder b = {0};
	static const uint8_t junk[] = {0xee, 1, 2, 3, 4, 5};
	struct ferry_gcs_client *c;
	int fd = raw_connect(p.port);

	raw_send_handshake(fd);
	/* A well-formed frame whose GCS record is garbage (unknown op type). */
	req.seq = 1;
	req.op = junk;
	req.op_count = sizeof(junk);
	ftest_assert_ok(ferry__wire_gcs_request_build(&b, &req));
	raw_send(fd, FERRY__WIRE_MSG_GCS_REQUEST, ferry__fb_builder_data(&b),
		 ferry__fb_builder_size(&b));
	ferry__fb_builder_fini(&b);
	expect_closed(fd);
	close(fd);
	/* Garbage instead of a frame header. */
	fd = raw_connect(p.port);
	ftest_assert_int_eq(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	expect_closed(fd);
	close(fd);
	c = client_for(&p, 1, TOKEN);
	ftest_assert_int_eq(ferry_gcs_kv_put(c, NULL, 0, "a", 1, "b", 1, true), 1);
	ferry_gcs_client_destroy(c);
	gcs_stop(&p, SIGTERM);
}

/* Every allocation of a client's life failing in turn (connect, a write, reads, lists, destroy):
 * each call fails cleanly or succeeds, nothing leaks (the harness counts), nothing crashes. */
FTEST(client_allocation_failures)
{
	struct gcs_proc p = gcs_start(0, NULL);
	struct ferry_gcs_client_opts o = {0};
	char addr[64];
	const char *list[1] = {addr};
	int completed = 0;

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", p.port);
	o.addresses = list;
	o.naddresses = 1;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.timeout_ms = 2000;
	o.reconnect_ms = 10;
	for (long n = 0; n < 200 && !completed; n++) {
		struct ferry_gcs_client *c = NULL;
		struct ferry_gcs_bytes one = {"k", 1}, *keys;
		struct ferry_gcs_node_info *nodes;
		void *v = NULL;
		size_t size;
		int ret;

		ferry__alloc_fail_after(n);
		ret = ferry_gcs_client_connect(&o, &c);
		if (ret == 0) {
			ret = ferry_gcs_kv_put(c, NULL, 0, "k", 1, "v", 1, true);
			if (ret >= 0 && ferry_gcs_kv_get(c, NULL, 0, "k", 1, &v, &size) == 0)
				ferry_gcs_free(v);
			if (ret >= 0 && ferry_gcs_kv_keys(c, NULL, 0, "k", 1, &keys) >= 0)
				ferry_gcs_free(keys);
			if (ret >= 0 && ferry_gcs_kv_multi_get(c, NULL, 0, &one, 1, &keys) >= 0)
				ferry_gcs_free(keys);
			if (ret >= 0 && ferry_gcs_node_list(c, &nodes) >= 0)
				ferry_gcs_free(nodes);
			ferry_gcs_client_destroy(c);
		}
		completed =
			ferry__alloc_fail_pending(); /* the whole path ran without reaching it */
		ferry__alloc_fail_after(-1);
	}
	ftest_assert_true(completed);
	gcs_stop(&p, SIGTERM);
}
