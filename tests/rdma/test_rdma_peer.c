/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine across processes: a forked server process announces its region over a control
 * message, the client pulls from it; then the server is killed in the middle of a 64 MiB READ
 * and the client must see -ECONNRESET or -ETIMEDOUT by the deadline, never hang.
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_util.h"

#define REGION (64u << 20)

/* What the server tells each client. */
struct announce {
	uint64_t addr; /* region address */
	uint32_t rkey; /* region key */
	uint32_t size; /* region bytes */
};

static void server_on_connect(struct ferry__rdma_ep *ep, int status, void *arg)
{
	struct announce *a = arg;

	if (status == 0 && ferry__rdma_send(ep, a, sizeof(*a)) != 0)
		_exit(3);
}

static void server_on_close(struct ferry__rdma_ep *ep, int reason, void *arg)
{
	(void)reason;
	(void)arg;
	ferry__rdma_ep_destroy(ep);
}

static bool never(void *arg)
{
	(void)arg;
	return false;
}

/* The child: serve the patterned region until killed. Reports its port through @fd. */
static void serve(int fd)
{
	static const struct ferry__rdma_ep_cbs cbs = {
		.on_connect = server_on_connect,
		.on_close = server_on_close,
	};
	struct rt_arena a;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx;
	struct ferry__rdma_listener *l;
	struct announce an;
	uint16_t port;

	rt_arena_init(&a, REGION);
	rt_fill(a.base, REGION, 0, 9);
	rt_opts(&o, &a);
	if (ferry__rdma_ctx_create(&o, &ctx))
		_exit(2);
	ferry__rdma_ctx_region(ctx, &an.addr, &an.rkey);
	an.size = REGION;
	if (ferry__rdma_listen(ctx, rt_ip(), 0, &cbs, &an, &l))
		_exit(2);
	port = ferry__rdma_listener_port(l);
	if (write(fd, &port, sizeof(port)) != sizeof(port))
		_exit(2);
	close(fd);
	rt_pump(&ctx, 1, never, NULL, "killed by the parent");
	_exit(0);
}

struct client {
	struct rt_side side; /* connection events */
	struct announce an;  /* the server's region */
	int announced;	     /* got it */
	int read_calls;	     /* READ callbacks */
	int read_status;     /* the last one's status */
};

static void client_on_message(struct ferry__rdma_ep *ep, const void *buf, size_t len, void *arg)
{
	struct client *c = arg;

	(void)ep;
	if (len == sizeof(c->an)) {
		memcpy(&c->an, buf, len);
		c->announced++;
	}
}

static void client_on_connect(struct ferry__rdma_ep *ep, int status, void *arg)
{
	rt_on_connect(ep, status, &((struct client *)arg)->side);
}

static void client_on_close(struct ferry__rdma_ep *ep, int reason, void *arg)
{
	rt_on_close(ep, reason, &((struct client *)arg)->side);
}

static void client_read_cb(void *arg, int status)
{
	struct client *c = arg;

	c->read_calls++;
	c->read_status = status;
}

static bool read_done(void *arg)
{
	return ((struct client *)arg)->read_calls != 0;
}

static bool closed_and_read_done(void *arg)
{
	struct client *c = arg;

	return c->read_calls && c->side.closes;
}

static pid_t start_server(uint16_t *port)
{
	int fds[2];
	pid_t pid;

	rt_require_device();
	ftest_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		serve(fds[1]);
	}
	close(fds[1]);
	if (read(fds[0], port, sizeof(*port)) != sizeof(*port)) {
		int st = 0;

		waitpid(pid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 2)
			ftest_skip("the server process found no RDMA device at %s", rt_ip());
		FTEST__FAIL("server process ended early (status 0x%x)", st);
	}
	close(fds[0]);
	return pid;
}

static const struct ferry__rdma_ep_cbs client_cbs = {
	.on_connect = client_on_connect,
	.on_message = client_on_message,
	.on_close = client_on_close,
};

/* Connect to the server process and wait for its announcement. */
static struct ferry__rdma_ep *client_connect(struct ferry__rdma_ctx *ctx, uint16_t port,
					     struct client *c)
{
	struct ferry__rdma_ep *ep;

	ftest_assert_ok(ferry__rdma_connect(ctx, rt_ip(), port, 0, &client_cbs, c, &ep));
	rt_pump(&ctx, 1, rt_int_set, &c->side.connects, "connected");
	ftest_assert_int_eq(c->side.connect_status, 0);
	rt_pump(&ctx, 1, rt_int_set, &c->announced, "the server's region");
	ftest_assert_uint_eq(c->an.size, REGION);
	return ep;
}

FTEST(pull_from_another_process)
{
	struct rt_arena a;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx;
	struct ferry__rdma_ep *ep;
	struct client c = {0};
	uint16_t port;
	pid_t pid = start_server(&port);
	int st;

	rt_arena_init(&a, REGION);
	rt_opts(&o, &a);
	ctx = rt_ctx(&o);
	ep = client_connect(ctx, port, &c);
	/* 8 MiB from the middle: large enough to pipeline, small enough for emulation. */
	ftest_assert_ok(ferry__rdma_read(ep, a.base, c.an.addr + (16u << 20) + 1, c.an.rkey,
					 8u << 20, 256u << 10, 8, client_read_cb, &c));
	rt_pump(&ctx, 1, read_done, &c, "the READ");
	ftest_assert_int_eq(c.read_status, 0);
	for (size_t i = 0; i < (8u << 20); i++)
		if (a.base[i] != rt_pattern((16u << 20) + 1 + i, 9))
			FTEST__FAIL("byte %zu differs", i);
	ferry__rdma_ep_destroy(ep);
	ferry__rdma_ctx_destroy(ctx);
	rt_arena_fini(&a);
	kill(pid, SIGKILL);
	ftest_assert_int_eq(waitpid(pid, &st, 0), pid);
}

FTEST(peer_killed_mid_read)
{
	struct rt_arena a;
	struct ferry__rdma_ctx_opts o;
	struct ferry__rdma_ctx *ctx;
	struct ferry__rdma_ep *ep;
	struct client c = {0};
	uint16_t port;
	pid_t pid = start_server(&port);
	int st;

	rt_arena_init(&a, REGION);
	rt_opts(&o, &a);
	o.op_timeout_ms = 20000; /* the backstop if no disconnect ever arrives */
	ctx = rt_ctx(&o);
	ep = client_connect(ctx, port, &c);
	/* Small chunks, shallow: the whole region takes many round trips. */
	ftest_assert_ok(ferry__rdma_read(ep, a.base, c.an.addr, c.an.rkey, REGION, 65536, 2,
					 client_read_cb, &c));
	ftest_assert_ok(ferry__rdma_progress(ctx));
	ftest_assert_int_eq(kill(pid, SIGKILL), 0);
	ftest_assert_int_eq(waitpid(pid, &st, 0), pid);
	rt_pump(&ctx, 1, closed_and_read_done, &c, "the READ and the endpoint to fail");
	ftest_log("READ ended with %s, endpoint closed with %s", ferry_strerror(c.read_status),
		  ferry_strerror(c.side.close_reason));
	ftest_assert_int_eq(c.read_calls, 1);
	ftest_assert_true(c.read_status == -ECONNRESET || c.read_status == -ETIMEDOUT);
	ftest_assert_int_eq(c.side.closes, 1);
	ferry__rdma_ep_destroy(ep);
	ferry__rdma_ctx_destroy(ctx);
	rt_arena_fini(&a);
}
