/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GCS server and client in one process (the server on its own loop thread): calls through
 * the client; a long pipelined burst whose replies span several send chunks, with large
 * (unpacked) replies between small (packed) ones, comes back complete and in order; a malformed
 * multi-get closes only that connection; every allocation failure of server creation unwinds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/wire.h"
#include "ftest.h"
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

static void start(struct running *r)
{
	struct ferry__gcs_server_opts o = {0};

	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	ftest_assert_ok(ferry__loop_create(NULL, &r->loop));
	ftest_assert_ok(ferry__gcs_server_create(r->loop, &o, &r->srv));
	ftest_assert_ok(pthread_create(&r->thread, NULL, run_loop, r->loop));
}

static void stop(struct running *r)
{
	ferry__loop_stop(r->loop);
	pthread_join(r->thread, NULL);
	ferry__loop_destroy(r->loop);
	ferry__gcs_server_destroy(r->srv);
}

static struct ferry_gcs_client *connect_client(struct running *r)
{
	char addr[64];
	const char *list[1] = {addr};
	struct ferry_gcs_client_opts o = {0};
	struct ferry_gcs_client *c;

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ferry__gcs_server_port(r->srv));
	o.addresses = list;
	o.naddresses = 1;
	o.token = TOKEN;
	o.token_len = strlen(TOKEN);
	o.timeout_ms = 5000;
	ftest_assert_ok(ferry_gcs_client_connect(&o, &c));
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
	for (size_t done = 0; done < w->out_size;) {
		ssize_t n = write(w->fd, w->out + done, w->out_size - done);

		ftest_assert_int_gt(n, 0);
		done += (size_t)n;
	}
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
