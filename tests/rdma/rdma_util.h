/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the RDMA engine tests: the address to use (or a skip with the reason), arenas,
 * a poll(2) loop that drives one or more contexts until a condition holds, and endpoint
 * callbacks that record what happened so tests can assert it.
 */
#ifndef FERRY_TEST_RDMA_UTIL_H
#define FERRY_TEST_RDMA_UTIL_H

#include <infiniband/verbs.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/util.h"
#include "ftest.h"
#include "transport/rdma.h"

#define RT_TOKEN "ferry-rdma-test-token"
/* A hang guard for rt_pump(), far beyond any deadline the tests set: never a speed check. */
#define RT_PUMP_GUARD_MS 150000

/* The address the suite uses: $FERRY_RDMA_IP, else rxe0's address in tools/softroce-vm. */
static inline const char *rt_ip(void)
{
	const char *ip = getenv("FERRY_RDMA_IP");

	return ip && *ip ? ip : "10.77.0.1";
}

/* Skip unless a verbs device exists (the engine itself reports -ENODEV for the address). */
static inline void rt_require_device(void)
{
	int count = 0;
	struct ibv_device **list = ibv_get_device_list(&count);

	if (list)
		ibv_free_device_list(list);
	if (!list || count == 0)
		ftest_skip("no RDMA device (run the suite through tools/softroce-vm, or load "
			   "rdma_rxe on a kernel that has it)");
}

/* An arena: anonymous memory, as the store's would be; filled with a pattern by seed. */
struct rt_arena {
	unsigned char *base; /* mapping */
	size_t size;	     /* bytes */
};

static inline void rt_arena_init(struct rt_arena *a, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ftest_assert_true(p != MAP_FAILED);
	a->base = p;
	a->size = size;
}

static inline void rt_arena_fini(struct rt_arena *a)
{
	if (a->base)
		munmap(a->base, a->size);
	a->base = NULL;
}

/* Byte i of pattern @seed: varies in every bit position, so shifted copies differ. */
static inline unsigned char rt_pattern(size_t i, unsigned seed)
{
	uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + seed;

	return (unsigned char)(x >> 56 ^ x >> 23 ^ i);
}

static inline void rt_fill(unsigned char *p, size_t len, size_t first_index, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = rt_pattern(first_index + i, seed);
}

/* Options for a test context on rt_ip() over @a; the caller may adjust them. */
static inline void rt_opts(struct ferry__rdma_ctx_opts *o, struct rt_arena *a)
{
	memset(o, 0, sizeof(*o));
	o->ip = rt_ip();
	o->region = a->base;
	o->region_size = a->size;
	o->token = RT_TOKEN;
	o->token_size = strlen(RT_TOKEN);
}

/* Create a context or skip when no device routes to the address. */
static inline struct ferry__rdma_ctx *rt_ctx(const struct ferry__rdma_ctx_opts *o)
{
	struct ferry__rdma_ctx *ctx = NULL;
	int err;

	rt_require_device();
	err = ferry__rdma_ctx_create(o, &ctx);
	if (err == -ENODEV)
		ftest_skip("no RDMA device routes to %s (set FERRY_RDMA_IP, or run through "
			   "tools/softroce-vm)",
			   o->ip);
	ftest_assert_ok(err);
	return ctx;
}

typedef bool (*rt_cond_fn)(void *arg);

/* Drive @ctxs with poll(2) + progress until @cond(@arg) holds. */
static inline void rt_pump(struct ferry__rdma_ctx **ctxs, int n, rt_cond_fn cond, void *arg,
			   const char *what)
{
	uint64_t start = ferry__now_ms();
	struct pollfd pfd[8];

	ftest_assert_int_le(n, 4);
	while (!cond(arg)) {
		int timeout = 1000;

		for (int i = 0; i < n; i++) {
			int t = ferry__rdma_ctx_timeout_ms(ctxs[i]);

			ferry__rdma_ctx_fds(ctxs[i], &pfd[2 * i].fd, &pfd[2 * i + 1].fd);
			pfd[2 * i].events = pfd[2 * i + 1].events = POLLIN;
			if (t >= 0 && t < timeout)
				timeout = t;
		}
		ftest_assert_int_ge(poll(pfd, (nfds_t)(2 * n), timeout), 0);
		for (int i = 0; i < n; i++)
			ftest_assert_ok(ferry__rdma_progress(ctxs[i]));
		if (ferry__now_ms() - start > RT_PUMP_GUARD_MS)
			FTEST__FAIL("waited %d s for: %s", RT_PUMP_GUARD_MS / 1000, what);
	}
}

static inline bool rt_int_set(void *arg)
{
	return *(int *)arg != 0;
}

/* rt_pump() condition: *@value >= @target. */
struct rt_count {
	const int *value; /* watched counter */
	int target;	  /* to reach */
};

static inline bool rt_at_least(void *arg)
{
	const struct rt_count *c = arg;

	return *c->value >= c->target;
}

/* What one side saw. Endpoint callbacks below take a struct rt_side * as their arg. */
struct rt_side {
	struct ferry__rdma_ep *ep; /* the last endpoint connected (or accepted) */
	int connects;		   /* on_connect calls */
	int connect_status;	   /* the last one's status */
	int closes;		   /* on_close calls */
	int close_reason;	   /* the last one's reason */
	int messages;		   /* on_message calls */
	int msg_errors;		   /* messages out of order or with wrong bytes */
	uint32_t next_seq;	   /* expected sequence number of the next message */
	size_t last_len;	   /* length of the last message */
	unsigned char last[64];	   /* its first bytes */
};

static inline void rt_on_connect(struct ferry__rdma_ep *ep, int status, void *arg)
{
	struct rt_side *s = arg;

	s->connects++;
	s->connect_status = status;
	if (status == 0)
		s->ep = ep;
}

static inline void rt_on_close(struct ferry__rdma_ep *ep, int reason, void *arg)
{
	struct rt_side *s = arg;

	(void)ep;
	s->closes++;
	s->close_reason = reason;
}

/*
 * Sequenced messages: 4 bytes of sequence number, then pattern bytes seeded by it. The
 * receiver counts any message out of order or with a wrong byte as an error.
 */
static inline size_t rt_msg_build(unsigned char *buf, uint32_t seq, size_t len)
{
	if (len < 4)
		len = 4;
	memcpy(buf, &seq, 4);
	rt_fill(buf + 4, len - 4, 0, seq);
	return len;
}

static inline void rt_on_message(struct ferry__rdma_ep *ep, const void *buf, size_t len, void *arg)
{
	struct rt_side *s = arg;
	const unsigned char *p = buf;
	uint32_t seq;

	(void)ep;
	s->messages++;
	s->last_len = len;
	memcpy(s->last, buf, FERRY_MIN(len, sizeof(s->last)));
	if (len < 4) {
		s->msg_errors++;
		return;
	}
	memcpy(&seq, p, 4);
	if (seq != s->next_seq)
		s->msg_errors++;
	s->next_seq = seq + 1;
	for (size_t i = 4; i < len; i++)
		if (p[i] != rt_pattern(i - 4, seq)) {
			s->msg_errors++;
			break;
		}
}

static const struct ferry__rdma_ep_cbs rt_cbs = {
	.on_connect = rt_on_connect,
	.on_message = rt_on_message,
	.on_close = rt_on_close,
};

/* A connected pair on one context each: server (listener + accepted ep) and client. */
struct rt_pair {
	struct ferry__rdma_ctx *sctx;	       /* server context */
	struct ferry__rdma_ctx *cctx;	       /* client context */
	struct ferry__rdma_listener *listener; /* server listener */
	struct ferry__rdma_ep *cep;	       /* client endpoint */
	struct rt_side server;		       /* what the server saw */
	struct rt_side client;		       /* what the client saw */
};

static inline bool rt_pair_up(void *arg)
{
	struct rt_pair *p = arg;

	return p->client.connects && p->server.connects;
}

/* Listen on the server context and connect the client to it; both sides established. */
static inline void rt_pair_connect(struct rt_pair *p)
{
	struct ferry__rdma_ctx *both[2] = {p->sctx, p->cctx};

	memset(&p->server, 0, sizeof(p->server));
	memset(&p->client, 0, sizeof(p->client));
	if (!p->listener)
		ftest_assert_ok(
			ferry__rdma_listen(p->sctx, rt_ip(), 0, &rt_cbs, &p->server, &p->listener));
	ftest_assert_ok(ferry__rdma_connect(p->cctx, rt_ip(),
					    ferry__rdma_listener_port(p->listener), 0, &rt_cbs,
					    &p->client, &p->cep));
	rt_pump(both, 2, rt_pair_up, p, "connection established");
	ftest_assert_int_eq(p->client.connect_status, 0);
	ftest_assert_int_eq(p->server.connect_status, 0);
	ftest_assert_ptr_eq(p->client.ep, p->cep);
}

/* Destroy both endpoints, the listener and both contexts. */
static inline void rt_pair_fini(struct rt_pair *p)
{
	ferry__rdma_ep_destroy(p->cep);
	ferry__rdma_ep_destroy(p->server.ep);
	ferry__rdma_listener_destroy(p->listener);
	ferry__rdma_ctx_destroy(p->cctx);
	ferry__rdma_ctx_destroy(p->sctx);
	memset(p, 0, sizeof(*p));
}

#endif
