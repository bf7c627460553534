/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine READs: byte-exact at 0 B to 64 MiB with chunk sizes and depths varied, unaligned
 * offsets, many reads at once and reads submitted from callbacks, ranges outside the local or
 * the remote region, destroy with reads in flight, deadlines (a dropped completion), injected
 * completion errors and allocation failure.
 */
#include <errno.h>

#include "common/alloc.h"
#include "rdma_util.h"

#define SMALL_ARENA (4u << 20)
#define GUARD 16
#define GUARD_BYTE 0xa5

struct rd {
	int calls;  /* callbacks */
	int status; /* the last one's status */
};

static void rd_cb(void *arg, int status)
{
	struct rd *r = arg;

	r->calls++;
	r->status = status;
}

struct fixture {
	struct rt_arena sa, ca;		 /* server and client arenas */
	struct rt_pair p;		 /* connected pair */
	uint64_t saddr;			 /* server region address */
	uint32_t rkey;			 /* server region key */
	struct ferry__rdma_ctx *both[2]; /* for rt_pump */
};

static void fixture_init(struct fixture *f, size_t arena, const struct ferry__rdma_ctx_opts *copts)
{
	struct ferry__rdma_ctx_opts o;

	rt_require_device(); /* before the arenas are filled */
	memset(f, 0, sizeof(*f));
	rt_arena_init(&f->sa, arena);
	rt_arena_init(&f->ca, arena);
	rt_fill(f->sa.base, arena, 0, 1);
	rt_opts(&o, &f->sa);
	f->p.sctx = rt_ctx(&o);
	rt_opts(&o, &f->ca);
	if (copts) {
		o.max_reads = copts->max_reads;
		o.op_timeout_ms = copts->op_timeout_ms;
		o.busy_poll = copts->busy_poll;
	}
	f->p.cctx = rt_ctx(&o);
	rt_pair_connect(&f->p);
	ferry__rdma_ctx_region(f->p.sctx, &f->saddr, &f->rkey);
	f->both[0] = f->p.sctx;
	f->both[1] = f->p.cctx;
}

static void fixture_fini(struct fixture *f)
{
	rt_pair_fini(&f->p);
	rt_arena_fini(&f->sa);
	rt_arena_fini(&f->ca);
}

/* READ [soff, +len) of the server arena to coff in the client's and check every byte, and
 * that the bytes around the destination were not touched. */
static uint64_t read_check(struct fixture *f, size_t soff, size_t coff, size_t len, size_t chunk,
			   unsigned depth)
{
	unsigned char *dst = f->ca.base + coff;
	struct rd r = {0};
	uint64_t start, elapsed_ns;

	memset(dst - GUARD, GUARD_BYTE, len + 2 * GUARD);
	start = ferry__now_ns();
	ftest_assert_ok(ferry__rdma_read(f->p.cep, dst, f->saddr + soff, f->rkey, len, chunk, depth,
					 rd_cb, &r));
	ftest_assert_int_eq(r.calls, 0); /* never from inside the call */
	rt_pump(f->both, 2, rt_int_set, &r.calls, "the READ");
	elapsed_ns = ferry__now_ns() - start;
	if (r.status)
		FTEST__FAIL("READ of %zu bytes (chunk %zu, depth %u): %s", len, chunk, depth,
			    ferry_strerror(r.status));
	ftest_assert_int_eq(r.calls, 1);
	ftest_assert_mem_eq(dst, f->sa.base + soff, len);
	for (size_t i = 0; i < GUARD; i++) {
		ftest_assert_uint_eq(dst[-1 - (long)i], GUARD_BYTE);
		ftest_assert_uint_eq(dst[len + i], GUARD_BYTE);
	}
	return elapsed_ns;
}

FTEST(small_reads_every_chunking_and_depth)
{
	static const size_t sizes[] = {0, 1, 4096, 4097, 100000};
	static const size_t chunks[] = {1, 4096, 65536, 0};
	static const unsigned depths[] = {1, 4, 16};
	struct fixture f;
	int n = 0;

	fixture_init(&f, SMALL_ARENA, NULL);
	for (size_t s = 0; s < FERRY_ARRAY_SIZE(sizes); s++)
		for (size_t c = 0; c < FERRY_ARRAY_SIZE(chunks); c++)
			for (size_t d = 0; d < FERRY_ARRAY_SIZE(depths); d++) {
				if (chunks[c] == 1 && sizes[s] > 4097)
					continue; /* 100000 one-byte READs: slow under emulation */
				read_check(&f, 5 + 131 * n, GUARD + 3 + 17 * n, sizes[s], chunks[c],
					   depths[d]);
				n++;
			}
	ftest_log("%d reads byte-exact", n);
	fixture_fini(&f);
}

FTEST(one_mebibyte_reads)
{
	static const size_t chunks[] = {4096, 65536, 1u << 20, 0};
	static const unsigned depths[] = {1, 3, 32, 0};
	struct fixture f;

	fixture_init(&f, SMALL_ARENA, NULL);
	for (size_t c = 0; c < FERRY_ARRAY_SIZE(chunks); c++)
		for (size_t d = 0; d < FERRY_ARRAY_SIZE(depths); d++)
			read_check(&f, 4096 * c + d, (1u << 20) + 7 * d + c, 1u << 20, chunks[c],
				   depths[d]);
	/* The whole region, both ends included. */
	read_check(&f, 0, 0 + GUARD, 1u << 20, 0, 0);
	read_check(&f, SMALL_ARENA - (1u << 20), SMALL_ARENA - (1u << 20) - GUARD, 1u << 20, 65536,
		   8);
	fixture_fini(&f);
}

FTEST(sixty_four_mebibyte_reads)
{
	const size_t len = 64u << 20;
	struct fixture f;

	uint64_t a, b;

	fixture_init(&f, len + 2 * 4096, NULL);
	a = read_check(&f, 0, 4096, len, 1u << 20, 8);
	b = read_check(&f, 4096 + 1, 4096 - 1, len, 256u << 10, 16);
	/* For the record only: figures belong to bench/. */
	ftest_log("64 MiB: %.1f MB/s (1 MiB chunks x 8), %.1f MB/s (256 KiB x 16)", len / (a / 1e3),
		  len / (b / 1e3));
	fixture_fini(&f);
}

/* Many reads submitted together share the endpoint's budget; each completes once. */
static void many_reads(int busy_poll)
{
	struct ferry__rdma_ctx_opts o = {.max_reads = 8, .busy_poll = busy_poll};
	enum { N = 200 };
	static struct rd r[N];
	struct fixture f;
	size_t off[N], len[N], at = GUARD;
	int done = 0;

	fixture_init(&f, SMALL_ARENA, &o);
	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		len[i] = 1 + (size_t)(i * 7919) % 20000;
		off[i] = (size_t)(i * 104729) % (SMALL_ARENA - 20000);
		memset(f.ca.base + at, 0, len[i]);
		ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base + at, f.saddr + off[i], f.rkey,
						 len[i], 4096, 2, rd_cb, &r[i]));
		at += len[i];
	}
	while (done < N) {
		struct rt_count c = {&r[done].calls, 1};

		rt_pump(f.both, 2, rt_at_least, &c, "all reads");
		done++;
	}
	at = GUARD;
	for (int i = 0; i < N; i++) {
		ftest_assert_int_eq(r[i].calls, 1);
		ftest_assert_int_eq(r[i].status, 0);
		ftest_assert_mem_eq(f.ca.base + at, f.sa.base + off[i], len[i]);
		at += len[i];
	}
	fixture_fini(&f);
}

FTEST(many_reads_at_once)
{
	many_reads(0);
}

FTEST(many_reads_at_once_busy_poll)
{
	many_reads(1);
}

/* Each completion submits the next READ from inside its callback. */
struct chain {
	struct fixture *f; /* where */
	int left;	   /* reads still to submit */
	int done;	   /* completed */
	int errors;	   /* non-zero statuses or refused submissions */
};

static void chain_cb(void *arg, int status)
{
	struct chain *c = arg;

	c->done++;
	c->errors += status != 0;
	if (c->left-- > 0 &&
	    ferry__rdma_read(c->f->p.cep, c->f->ca.base + 64 * c->left, c->f->saddr + c->left,
			     c->f->rkey, 64, 0, 0, chain_cb, c))
		c->errors++;
}

FTEST(reads_submitted_from_callbacks)
{
	struct fixture f;
	struct chain c = {&f, 100, 0, 0};

	fixture_init(&f, SMALL_ARENA, NULL);
	chain_cb(&c, 0);
	c.done = 0;
	rt_pump(f.both, 2, rt_at_least, &(struct rt_count){&c.done, 100}, "the chain");
	ftest_assert_int_eq(c.errors, 0);
	for (int i = 0; i < 100; i++)
		ftest_assert_mem_eq(f.ca.base + 64 * i, f.sa.base + i, 64);
	fixture_fini(&f);
}

FTEST(read_outside_the_local_region_is_refused)
{
	struct fixture f;
	struct rd r = {0};
	struct ferry__rdma_ep *ep;

	fixture_init(&f, SMALL_ARENA, NULL);
	ep = f.p.cep;
	ftest_assert_errno(ferry__rdma_read(ep, f.ca.base - 1, f.saddr, f.rkey, 1, 0, 0, rd_cb, &r),
			   -EINVAL);
	ftest_assert_errno(ferry__rdma_read(ep, f.ca.base + SMALL_ARENA - 10, f.saddr, f.rkey, 11,
					    0, 0, rd_cb, &r),
			   -EINVAL);
	ftest_assert_errno(
		ferry__rdma_read(ep, f.ca.base + 1, f.saddr, f.rkey, SIZE_MAX, 0, 0, rd_cb, &r),
		-EINVAL);
	ftest_assert_errno(ferry__rdma_read(ep, f.sa.base, f.saddr, f.rkey, 1, 0, 0, rd_cb, &r),
			   -EINVAL); /* the server's region is not the client's */
	ftest_assert_errno(ferry__rdma_read(ep, f.ca.base, UINT64_MAX, f.rkey, 2, 0, 0, rd_cb, &r),
			   -EINVAL);
	ftest_assert_errno(ferry__rdma_read(ep, f.ca.base, f.saddr, f.rkey, 1, 0, 0, NULL, &r),
			   -EINVAL);
	ftest_assert_errno(ferry__rdma_read(NULL, f.ca.base, f.saddr, f.rkey, 1, 0, 0, rd_cb, &r),
			   -EINVAL);
	ftest_assert_int_ge(ferry__rdma_progress(f.p.cctx), 0);
	ftest_assert_int_eq(r.calls, 0);
	read_check(&f, 0, GUARD, 4096, 0, 0); /* the endpoint is unharmed */
	fixture_fini(&f);
}

static bool both_closed(void *arg)
{
	struct rt_pair *p = arg;

	return p->client.closes && p->server.closes;
}

/* A READ the peer's device refuses (range or key): -EFAULT, the endpoint is torn down on both
 * sides, other reads complete once; the listener keeps serving. */
static void remote_refusal(uint64_t delta, uint32_t bad_rkey_xor)
{
	struct fixture f;
	struct rd bad = {0}, good = {0};

	fixture_init(&f, SMALL_ARENA, NULL);
	ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base, f.saddr + delta, f.rkey ^ bad_rkey_xor,
					 4096, 0, 0, rd_cb, &bad));
	ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base + 8192, f.saddr, f.rkey, 1u << 20, 4096,
					 4, rd_cb, &good));
	rt_pump(f.both, 2, both_closed, &f.p, "both sides closed");
	ftest_assert_int_eq(bad.calls, 1);
	ftest_assert_errno(bad.status, -EFAULT);
	ftest_assert_int_eq(good.calls, 1);
	ftest_assert_true(good.status == 0 || good.status == -ECONNRESET);
	ftest_assert_errno(f.p.client.close_reason, -EFAULT);
	ftest_assert_int_eq(f.p.client.closes, 1);
	ftest_assert_int_eq(f.p.server.closes, 1);
	ftest_log("server side closed with %s", ferry_strerror(f.p.server.close_reason));
	ftest_assert_errno(
		ferry__rdma_read(f.p.cep, f.ca.base, f.saddr, f.rkey, 1, 0, 0, rd_cb, &bad),
		-ENOTCONN);
	ferry__rdma_ep_destroy(f.p.cep);
	ferry__rdma_ep_destroy(f.p.server.ep);
	rt_pair_connect(&f.p);
	read_check(&f, 0, GUARD, 4096, 0, 0);
	fixture_fini(&f);
}

FTEST(read_past_the_remote_region_fails_with_efault)
{
	remote_refusal(SMALL_ARENA - 100, 0);
}

FTEST(read_with_a_wrong_rkey_fails_with_efault)
{
	remote_refusal(0, 0x5a5a00);
}

FTEST(destroy_with_reads_in_flight_cancels_each_once)
{
	enum { N = 8 };
	struct fixture f;
	struct rd r[N] = {{0}};

	fixture_init(&f, SMALL_ARENA, NULL);
	for (int i = 0; i < N; i++)
		ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base + ((size_t)i << 19), f.saddr,
						 f.rkey, 1u << 19, 65536, 2, rd_cb, &r[i]));
	ftest_assert_ok(ferry__rdma_progress(f.p.cctx));
	ferry__rdma_ep_destroy(f.p.cep);
	for (int i = 0; i < N; i++) {
		ftest_assert_int_eq(r[i].calls, 1);
		ftest_assert_errno(r[i].status, -ECANCELED);
	}
	ftest_assert_int_eq(f.p.client.closes, 0);
	f.p.cep = NULL;
	rt_pump(f.both, 2, rt_int_set, &f.p.server.closes, "the server sees it");
	for (int i = 0; i < N; i++)
		ftest_assert_int_eq(r[i].calls, 1);
	fixture_fini(&f);
}

FTEST(context_destroy_cancels_reads_too)
{
	struct fixture f;
	struct rd r = {0};

	fixture_init(&f, SMALL_ARENA, NULL);
	ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base, f.saddr, f.rkey, 1u << 20, 4096, 1,
					 rd_cb, &r));
	ferry__rdma_ctx_destroy(f.p.cctx);
	ftest_assert_int_eq(r.calls, 1);
	ftest_assert_errno(r.status, -ECANCELED);
	f.p.cctx = NULL;
	f.p.cep = NULL;
	fixture_fini(&f);
}

FTEST(dropped_completion_ends_by_the_deadline)
{
	struct ferry__rdma_ctx_opts o = {.op_timeout_ms = 1000};
	struct fixture f;
	struct rd r = {0}, later = {0};

	fixture_init(&f, SMALL_ARENA, &o);
	ferry__rdma_inject_fault(f.p.cctx, FERRY__RDMA_FAULT_DROP_READ, 0);
	ftest_assert_ok(
		ferry__rdma_read(f.p.cep, f.ca.base, f.saddr, f.rkey, 4096, 0, 0, rd_cb, &r));
	ftest_assert_int_ge(ferry__rdma_ctx_timeout_ms(f.p.cctx), 0); /* a deadline is due */
	rt_pump(f.both, 2, rt_int_set, &r.calls, "the deadline");
	ftest_assert_errno(r.status, -ETIMEDOUT);
	/* Submitted after the deadline passed: refused, the endpoint is closed. */
	ftest_assert_errno(
		ferry__rdma_read(f.p.cep, f.ca.base, f.saddr, f.rkey, 1, 0, 0, rd_cb, &later),
		-ENOTCONN);
	rt_pump(f.both, 2, both_closed, &f.p, "both sides closed");
	ftest_assert_errno(f.p.client.close_reason, -ETIMEDOUT);
	ftest_assert_int_eq(r.calls, 1);
	fixture_fini(&f);
}

FTEST(failed_completion_resets_the_endpoint)
{
	struct fixture f;
	struct rd r = {0}, other = {0};

	fixture_init(&f, SMALL_ARENA, NULL);
	read_check(&f, 0, GUARD, 4096, 0, 0);
	ferry__rdma_inject_fault(f.p.cctx, FERRY__RDMA_FAULT_FAIL_READ, 2);
	ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base, f.saddr, f.rkey, 1u << 20, 4096, 1,
					 rd_cb, &r));
	ftest_assert_ok(ferry__rdma_read(f.p.cep, f.ca.base + (1u << 20), f.saddr, f.rkey, 1u << 20,
					 4096, 1, rd_cb, &other));
	rt_pump(f.both, 2, both_closed, &f.p, "both sides closed");
	ftest_assert_errno(r.status, -EIO);
	ftest_assert_errno(other.status, -ECONNRESET);
	ftest_assert_errno(f.p.client.close_reason, -EIO);
	ftest_assert_int_eq(r.calls + other.calls, 2);
	fixture_fini(&f);
}

FTEST(read_allocation_failure_calls_nothing)
{
	struct fixture f;
	struct rd r = {0};

	fixture_init(&f, SMALL_ARENA, NULL);
	ferry__alloc_fail_after(0);
	ftest_assert_errno(
		ferry__rdma_read(f.p.cep, f.ca.base, f.saddr, f.rkey, 1, 0, 0, rd_cb, &r), -ENOMEM);
	ftest_assert_ok(ferry__rdma_progress(f.p.cctx));
	ftest_assert_int_eq(r.calls, 0);
	read_check(&f, 0, GUARD, 4096, 0, 0);
	fixture_fini(&f);
}
