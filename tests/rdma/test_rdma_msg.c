/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine control messages: many messages both ways at once, in order and byte-exact, far
 * more than the receive buffers posted (credit flow control, queueing, credit-only returns);
 * the smallest receive depth; size limits; a queueing allocation failure.
 */
#include <errno.h>

#include "common/alloc.h"
#include "rdma_util.h"

#define ARENA_SIZE (1u << 20)

struct flood {
	struct rt_pair *p; /* the pair */
	int to_server;	   /* messages the client sends */
	int to_client;	   /* messages the server sends */
};

static bool flood_done(void *arg)
{
	struct flood *f = arg;

	return f->p->server.messages >= f->to_server && f->p->client.messages >= f->to_client;
}

static void pair_init(struct rt_pair *p, struct rt_arena *sa, struct rt_arena *ca,
		      uint32_t recv_depth, int busy_poll)
{
	struct ferry__rdma_ctx_opts o;

	memset(p, 0, sizeof(*p));
	rt_arena_init(sa, ARENA_SIZE);
	rt_arena_init(ca, ARENA_SIZE);
	rt_opts(&o, sa);
	o.recv_depth = recv_depth;
	p->sctx = rt_ctx(&o);
	rt_opts(&o, ca);
	o.recv_depth = recv_depth;
	o.busy_poll = busy_poll;
	p->cctx = rt_ctx(&o);
	rt_pair_connect(p);
}

/* Send @count sequenced messages of varying sizes up to @max on @ep, starting at @seq. */
static void send_many(struct ferry__rdma_ep *ep, int count, size_t max)
{
	static unsigned char buf[4096];

	for (int i = 0; i < count; i++) {
		size_t len = rt_msg_build(buf, (uint32_t)i, (size_t)(i * 7919) % (max + 1));

		ftest_assert_ok(ferry__rdma_send(ep, buf, len));
	}
}

static void flood(uint32_t recv_depth, int to_server, int to_client, int busy_poll)
{
	struct rt_arena sa, ca;
	struct rt_pair p;
	struct flood f = {&p, to_server, to_client};
	struct ferry__rdma_ctx *both[2];

	pair_init(&p, &sa, &ca, recv_depth, busy_poll);
	both[0] = p.sctx;
	both[1] = p.cctx;
	/* Everything is handed over before either side polls: most of it queues. */
	send_many(p.cep, to_server, ferry__rdma_ep_max_msg(p.cep));
	send_many(p.server.ep, to_client, ferry__rdma_ep_max_msg(p.server.ep));
	rt_pump(both, 2, flood_done, &f, "every message delivered");
	ftest_assert_int_eq(p.server.messages, to_server);
	ftest_assert_int_eq(p.client.messages, to_client);
	ftest_assert_int_eq(p.server.msg_errors, 0);
	ftest_assert_int_eq(p.client.msg_errors, 0);
	ftest_assert_int_eq(p.server.closes + p.client.closes, 0);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}

FTEST(many_messages_both_ways_in_order)
{
	flood(0, 3000, 3000, 0);
}

FTEST(one_way_flood_returns_credits_without_data)
{
	/* The server never sends data: only credit-only messages keep the client going. */
	flood(0, 5000, 0, 0);
}

FTEST(smallest_receive_depth_both_ways)
{
	flood(4, 1000, 1000, 0);
}

FTEST(busy_poll_client)
{
	flood(8, 1000, 1000, 1);
}

FTEST(zero_length_and_full_size_messages)
{
	struct rt_arena sa, ca;
	struct rt_pair p;
	struct ferry__rdma_ctx *both[2];
	static unsigned char big[4097];

	pair_init(&p, &sa, &ca, 0, 0);
	both[0] = p.sctx;
	both[1] = p.cctx;
	ftest_assert_uint_eq(ferry__rdma_ep_max_msg(p.cep), 4096);
	ftest_assert_errno(ferry__rdma_send(p.cep, big, sizeof(big)), -EMSGSIZE);
	ftest_assert_errno(ferry__rdma_send(p.cep, NULL, 1), -EINVAL);
	ftest_assert_errno(ferry__rdma_send(NULL, big, 1), -ENOTCONN);
	/* Zero bytes is a message too (the receiver counts it, then flags the short one). */
	ftest_assert_ok(ferry__rdma_send(p.cep, NULL, 0));
	rt_pump(both, 2, rt_int_set, &p.server.messages, "the empty message");
	ftest_assert_uint_eq(p.server.last_len, 0);
	p.server.msg_errors = 0;
	rt_msg_build(big, 0, 4096);
	p.server.next_seq = 0;
	ftest_assert_ok(ferry__rdma_send(p.cep, big, 4096));
	rt_pump(both, 2, rt_at_least, &(struct rt_count){&p.server.messages, 2}, "the full one");
	ftest_assert_uint_eq(p.server.last_len, 4096);
	ftest_assert_int_eq(p.server.msg_errors, 0);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}

FTEST(queueing_allocation_failure)
{
	struct rt_arena sa, ca;
	struct rt_pair p;
	struct flood f = {&p, 0, 0};
	struct ferry__rdma_ctx *both[2];
	unsigned char buf[64];
	uint32_t seq = 0;
	int err;

	pair_init(&p, &sa, &ca, 8, 0);
	both[0] = p.sctx;
	both[1] = p.cctx;
	/* Credits run out after a few sends; from then on each send is queued (allocates). */
	for (;;) {
		ferry__alloc_fail_after(0);
		err = ferry__rdma_send(p.cep, buf, rt_msg_build(buf, seq, sizeof(buf)));
		if (err)
			break;
		ftest_assert_true(ferry__alloc_fail_pending()); /* sent without allocating */
		seq++;
	}
	ferry__alloc_fail_after(-1);
	ftest_assert_errno(err, -ENOMEM);
	ftest_assert_int_gt(seq, 0);
	/* The refused message was not sent: the stream continues with the same number. */
	for (int i = 0; i < 20; i++, seq++)
		ftest_assert_ok(ferry__rdma_send(p.cep, buf, rt_msg_build(buf, seq, sizeof(buf))));
	f.to_server = (int)seq;
	rt_pump(both, 2, flood_done, &f, "every message delivered");
	ftest_assert_int_eq(p.server.msg_errors, 0);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}

/* A callback that destroys its own endpoint: the engine must not touch it afterwards. */
static void destroy_on_message(struct ferry__rdma_ep *ep, const void *buf, size_t len, void *arg)
{
	struct rt_side *s = arg;

	(void)buf;
	(void)len;
	s->messages++;
	ferry__rdma_ep_destroy(ep);
	s->ep = NULL;
}

FTEST(endpoint_destroyed_from_its_message_callback)
{
	struct rt_arena sa, ca;
	struct rt_pair p;
	struct ferry__rdma_ctx *both[2];
	static const struct ferry__rdma_ep_cbs cbs = {
		.on_connect = rt_on_connect,
		.on_message = destroy_on_message,
		.on_close = rt_on_close,
	};

	memset(&p, 0, sizeof(p));
	pair_init(&p, &sa, &ca, 0, 0);
	both[0] = p.sctx;
	both[1] = p.cctx;
	ferry__rdma_listener_destroy(p.listener);
	p.listener = NULL;
	ftest_assert_ok(ferry__rdma_listen(p.sctx, rt_ip(), 0, &cbs, &p.server, &p.listener));
	ferry__rdma_ep_destroy(p.cep);
	ferry__rdma_ep_destroy(p.server.ep);
	p.cep = NULL;
	rt_pair_connect(&p);
	send_many(p.cep, 50, 100);
	rt_pump(both, 2, rt_int_set, &p.client.closes, "the client sees the server go");
	ftest_assert_int_eq(p.server.messages, 1);
	ftest_assert_ptr_null(p.server.ep);
	ftest_assert_int_eq(p.server.closes, 0);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}
