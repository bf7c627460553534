/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine connections: connect/accept, disconnect seen by the peer, token and argument
 * checks, nobody listening, an unreachable peer, and every allocation failure on the way to a
 * context or an endpoint (both the connecting and the accepting side).
 */
#include <errno.h>

#include "common/alloc.h"
#include "rdma_util.h"

#define ARENA_SIZE (1u << 20)

static bool client_connected(void *arg)
{
	return ((struct rt_side *)arg)->connects != 0;
}

static bool side_closed(void *arg)
{
	return ((struct rt_side *)arg)->closes != 0;
}

FTEST(connect_accept_and_disconnect)
{
	struct rt_arena sa, ca;
	struct ferry__rdma_ctx_opts o;
	struct rt_pair p = {0};
	struct ferry__rdma_ctx *both[2];
	uint64_t addr;
	uint32_t rkey;

	rt_arena_init(&sa, ARENA_SIZE);
	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &sa);
	p.sctx = rt_ctx(&o);
	rt_opts(&o, &ca);
	p.cctx = rt_ctx(&o);
	ftest_log("device %s", ferry__rdma_ctx_device(p.sctx));
	ferry__rdma_ctx_region(p.sctx, &addr, &rkey);
	ftest_assert_uint_eq(addr, (uintptr_t)sa.base);
	rt_pair_connect(&p);
	ftest_assert_int_ne(ferry__rdma_listener_port(p.listener), 0);
	ftest_assert_int_eq(p.client.connects, 1);
	ftest_assert_int_eq(p.server.connects, 1);
	ftest_assert_uint_eq(ferry__rdma_ep_max_msg(p.cep), 4096);
	ftest_assert_uint_eq(ferry__rdma_ep_max_msg(p.server.ep), 4096);
	ftest_assert_ptr_eq(ferry__rdma_ep_arg(p.server.ep), &p.server);

	/* The client leaves: the server hears of it once, and nothing else fires. */
	ferry__rdma_ep_destroy(p.cep);
	p.cep = NULL;
	both[0] = p.sctx;
	both[1] = p.cctx;
	rt_pump(both, 2, side_closed, &p.server, "server sees the disconnect");
	ftest_assert_errno(p.server.close_reason, -ECONNRESET);
	ftest_assert_int_eq(p.server.closes, 1);
	ftest_assert_int_eq(p.client.closes, 0);
	ftest_assert_errno(ferry__rdma_send(p.server.ep, "x", 1), -ENOTCONN);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}

/* A client with the wrong token is refused with a log line; the listener keeps serving. */
static void refused_then_served(const void *bad_token, size_t bad_size, const void *token,
				size_t size)
{
	struct rt_arena sa, ca;
	struct ferry__rdma_ctx_opts o;
	struct rt_pair p = {0};
	struct rt_side bad = {0};
	struct ferry__rdma_ctx *bad_ctx, *all[2];
	struct ferry__rdma_ep *bad_ep;

	rt_arena_init(&sa, ARENA_SIZE);
	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &sa);
	o.token = token;
	o.token_size = size;
	p.sctx = rt_ctx(&o);
	rt_opts(&o, &ca);
	o.token = token;
	o.token_size = size;
	p.cctx = rt_ctx(&o);
	o.token = bad_token;
	o.token_size = bad_size;
	bad_ctx = rt_ctx(&o);
	ftest_assert_ok(ferry__rdma_listen(p.sctx, rt_ip(), 0, &rt_cbs, &p.server, &p.listener));

	ftest_assert_ok(ferry__rdma_connect(bad_ctx, rt_ip(), ferry__rdma_listener_port(p.listener),
					    0, &rt_cbs, &bad, &bad_ep));
	all[0] = p.sctx;
	all[1] = bad_ctx;
	rt_pump(all, 2, client_connected, &bad, "the refusal");
	ftest_assert_errno(bad.connect_status, -EACCES);
	ftest_assert_int_eq(bad.connects, 1);
	ftest_assert_int_eq(p.server.connects, 0);
	ferry__rdma_ep_destroy(bad_ep);

	rt_pair_connect(&p);
	ftest_assert_int_eq(p.server.connects, 1);
	ftest_assert_int_ge(ferry__rdma_progress(bad_ctx), 0);
	ftest_assert_int_eq(bad.connects, 1); /* nothing more for the refused one */
	ferry__rdma_ctx_destroy(bad_ctx);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}

FTEST(wrong_token_is_refused_and_listener_keeps_serving)
{
	refused_then_served("not-the-token", 13, RT_TOKEN, strlen(RT_TOKEN));
}

FTEST(long_tokens_compare_by_digest)
{
	char good[100], bad[100];

	memset(good, 'k', sizeof(good));
	memcpy(bad, good, sizeof(bad));
	bad[99] = 'j'; /* differs only past the 40 bytes that would fit verbatim */
	refused_then_served(bad, sizeof(bad), good, sizeof(good));
}

FTEST(empty_token_refuses_a_non_empty_one)
{
	refused_then_served(RT_TOKEN, strlen(RT_TOKEN), NULL, 0);
}

FTEST(connect_to_a_port_nobody_listens_on)
{
	struct rt_arena ca;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx;
	struct ferry__rdma_listener *l;
	struct ferry__rdma_ep *ep;
	struct rt_side s = {0}, unused = {0};
	uint16_t port;

	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &ca);
	ctx = rt_ctx(&o);
	/* A port that was just free: listen on an ephemeral one, then close it. */
	ftest_assert_ok(ferry__rdma_listen(ctx, rt_ip(), 0, &rt_cbs, &unused, &l));
	port = ferry__rdma_listener_port(l);
	ferry__rdma_listener_destroy(l);
	ftest_assert_ok(ferry__rdma_connect(ctx, rt_ip(), port, 5000, &rt_cbs, &s, &ep));
	rt_pump(&ctx, 1, client_connected, &s, "the connect result");
	ftest_log("connect to a closed port: %s", ferry_strerror(s.connect_status));
	ftest_assert_errno(s.connect_status, -ECONNREFUSED);
	ftest_assert_int_eq(s.closes, 0);
	ftest_assert_errno(ferry__rdma_send(ep, "x", 1), -ENOTCONN);
	ferry__rdma_ep_destroy(ep);
	ferry__rdma_ctx_destroy(ctx);
	rt_arena_fini(&ca);
}

FTEST(connect_to_an_absent_host_ends_by_its_deadline)
{
	struct rt_arena ca;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx;
	struct ferry__rdma_ep *ep;
	struct rt_side s = {0};
	int st;

	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &ca);
	ctx = rt_ctx(&o);
	/* On the test subnet, but no host answers ARP for it. */
	if (strcmp(rt_ip(), "10.77.0.1") != 0)
		ftest_skip("needs the soft-RoCE VM's subnet");
	ftest_assert_ok(ferry__rdma_connect(ctx, "10.77.0.99", 7471, 1500, &rt_cbs, &s, &ep));
	rt_pump(&ctx, 1, client_connected, &s, "the connect result");
	st = s.connect_status;
	ftest_log("connect to an absent host: %s", ferry_strerror(st));
	ftest_assert_true(st == -ETIMEDOUT || st == -EHOSTUNREACH || st == -ENETUNREACH);
	ferry__rdma_ep_destroy(ep);
	ferry__rdma_ctx_destroy(ctx);
	rt_arena_fini(&ca);
}

FTEST(bad_arguments_are_refused)
{
	struct rt_arena ca;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx, *none = NULL;
	struct ferry__rdma_listener *l = NULL;
	struct ferry__rdma_ep *ep = NULL;
	struct ferry__rdma_ep_cbs no_connect = {0};
	struct rt_side s = {0};

	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &ca);
	ctx = rt_ctx(&o);
	o.ip = "not-an-address";
	ftest_assert_errno(ferry__rdma_ctx_create(&o, &none), -EINVAL);
	o.ip = rt_ip();
	o.region_size = 0;
	ftest_assert_errno(ferry__rdma_ctx_create(&o, &none), -EINVAL);
	o.region_size = ca.size;
	o.recv_depth = 2;
	ftest_assert_errno(ferry__rdma_ctx_create(&o, &none), -EINVAL);
	o.recv_depth = 0;
	o.msg_size = 16;
	ftest_assert_errno(ferry__rdma_ctx_create(&o, &none), -EINVAL);
	o.msg_size = 0;
	o.ip = "192.0.2.1"; /* TEST-NET-1: routed through no RDMA device (if at all) */
	ftest_assert_errno(ferry__rdma_ctx_create(&o, &none), -ENODEV);
	ftest_assert_ptr_null(none);
	ftest_assert_errno(ferry__rdma_ctx_create(NULL, &none), -EINVAL);

	ftest_assert_errno(ferry__rdma_listen(ctx, "10.77.0.256", 0, &rt_cbs, &s, &l), -EINVAL);
	ftest_assert_errno(ferry__rdma_listen(ctx, rt_ip(), 0, &no_connect, &s, &l), -EINVAL);
	ftest_assert_errno(ferry__rdma_listen(ctx, "192.0.2.1", 0, &rt_cbs, &s, &l), -EINVAL);
	if (strcmp(rt_ip(), "10.77.0.1") == 0) /* the VM's other address is rxe1's */
		ftest_assert_errno(ferry__rdma_listen(ctx, "10.77.0.2", 0, &rt_cbs, &s, &l),
				   -ENODEV);
	ftest_assert_ptr_null(l);
	ftest_assert_errno(ferry__rdma_connect(ctx, "::g", 1, 0, &rt_cbs, &s, &ep), -EINVAL);
	ftest_assert_errno(ferry__rdma_connect(ctx, rt_ip(), 1, 0, NULL, &s, &ep), -EINVAL);
	ftest_assert_ptr_null(ep);
	ferry__rdma_ep_destroy(NULL);
	ferry__rdma_listener_destroy(NULL);
	ferry__rdma_ctx_destroy(NULL);
	ferry__rdma_ctx_destroy(ctx);
	rt_arena_fini(&ca);
}

FTEST(out_of_memory_creating_a_context)
{
	struct rt_arena ca;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx = NULL;
	long n;
	int err;

	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &ca);
	ferry__rdma_ctx_destroy(rt_ctx(&o)); /* skips here when there is no device */
	for (n = 0;; n++) {
		ferry__alloc_fail_after(n);
		err = ferry__rdma_ctx_create(&o, &ctx);
		if (err == 0) {
			ftest_assert_true(ferry__alloc_fail_pending()); /* none swallowed */
			break;
		}
		ftest_assert_errno(err, -ENOMEM);
	}
	ferry__alloc_fail_after(-1);
	ftest_assert_int_gt(n, 0);
	ftest_log("context creation survives a failure at each of its %ld allocations", n);
	ferry__rdma_ctx_destroy(ctx);
	rt_arena_fini(&ca);
}

/* Every allocation of connect() fails in turn, then every allocation of the accept path
 * (the listener refuses the connection and keeps serving). */
FTEST(out_of_memory_connecting_and_accepting)
{
	struct rt_arena sa, ca;
	struct ferry__rdma_ctx_opts o;
	struct rt_pair p = {0};
	struct ferry__rdma_ctx *both[2];
	long n, refused = 0;
	int err;

	rt_arena_init(&sa, ARENA_SIZE);
	rt_arena_init(&ca, ARENA_SIZE);
	rt_opts(&o, &sa);
	p.sctx = rt_ctx(&o);
	rt_opts(&o, &ca);
	p.cctx = rt_ctx(&o);
	both[0] = p.sctx;
	both[1] = p.cctx;
	ftest_assert_ok(ferry__rdma_listen(p.sctx, rt_ip(), 0, &rt_cbs, &p.server, &p.listener));
	for (n = 0;; n++) {
		ferry__alloc_fail_after(n);
		err = ferry__rdma_connect(p.cctx, rt_ip(), ferry__rdma_listener_port(p.listener), 0,
					  &rt_cbs, &p.client, &p.cep);
		if (err == 0) {
			ftest_assert_true(ferry__alloc_fail_pending());
			break;
		}
		ftest_assert_errno(err, -ENOMEM);
	}
	ferry__alloc_fail_after(-1);
	ftest_log("connect survives a failure at each of its %ld allocations", n);
	ferry__rdma_ep_destroy(p.cep);
	p.cep = NULL;
	for (n = 0;; n++) {
		memset(&p.client, 0, sizeof(p.client));
		ftest_assert_ok(ferry__rdma_connect(p.cctx, rt_ip(),
						    ferry__rdma_listener_port(p.listener), 0,
						    &rt_cbs, &p.client, &p.cep));
		/* The client allocates nothing more until it is connected: the next
		 * allocations are the accepting side's. */
		ferry__alloc_fail_after(n);
		rt_pump(both, 2, client_connected, &p.client, "the connect result");
		if (p.client.connect_status == 0)
			break;
		ftest_assert_errno(p.client.connect_status, -ECONNREFUSED);
		refused++;
		ferry__rdma_ep_destroy(p.cep);
		p.cep = NULL;
	}
	ferry__alloc_fail_after(-1);
	ftest_log("accept survives a failure at each of its %ld allocations", refused);
	ftest_assert_int_gt(refused, 0);
	rt_pump(both, 2, rt_pair_up, &p, "server side established");
	ftest_assert_int_eq(p.server.connects, 1);
	rt_pair_fini(&p);
	rt_arena_fini(&sa);
	rt_arena_fini(&ca);
}
