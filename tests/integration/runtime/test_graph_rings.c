/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A compiled graph's hops on the same-host rings (runtime/ring.h), through the public API on
 * real worker processes that load job_actors.c: a.echo(input) then b.echo(a's result), so each
 * value crosses driver -> a, a -> b and b -> driver. Values of every size, pipelined a window
 * at a time: those that fit a ring's slot take the rings, larger ones the sockets, and every
 * execution comes back whole. The driver's inputs go through the rings unless FERRY_RING
 * turns them off (meson runs this file both ways, and with the spin off).
 * Environment (meson.build): FERRY_WORKER_EXE, FERRY_TEST_JOB (job_actors.c's library).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "runtime/ring.h"
#include "tests/harness/ftest.h"

#define GET_MS 30000

static struct ferry_actor *counter(void)
{
	int64_t start = 0;
	struct ferry_arg arg = {.data = &start, .len = sizeof(start)};
	struct ferry_actor_opts o = {.num_cpus = 0.5};
	struct ferry_actor *a = NULL;

	ftest_assert_ok(ferry_actor_create("Counter", &arg, 1, &o, &a));
	return a;
}

static struct ferry_graph *echo_graph(struct ferry_actor *a, struct ferry_actor *b)
{
	struct ferry_graph *g;

	ftest_assert_ok(ferry_graph_create(&g));
	ftest_assert_int_eq(ferry_graph_bind(g, a, "Counter.echo",
					     (struct ferry_graph_arg[]){FERRY_GRAPH_INPUT(0)}, 1),
			    0);
	ftest_assert_int_eq(ferry_graph_bind(g, b, "Counter.echo",
					     (struct ferry_graph_arg[]){FERRY_GRAPH_NODE(0)}, 1),
			    1);
	ftest_assert_ok(ferry_graph_compile(g, GET_MS));
	return g;
}

/* A local cluster with two Counters and the echo graph over them; the ring counters at the start. */
struct echo {
	struct ferry_actor *a, *b;
	struct ferry_graph *g;
	uint64_t ring0, sock0;
};

static void echo_start(struct echo *e)
{
	ftest_runtime_init(NULL, 2);
	e->a = counter();
	e->b = counter();
	e->g = echo_graph(e->a, e->b);
	ferry__rt_ring_counts(&e->ring0, &e->sock0);
}

static void echo_stop(struct echo *e)
{
	ferry_graph_destroy(e->g);
	ferry_actor_drop(e->a);
	ferry_actor_drop(e->b);
	ferry_shutdown();
}

/* Execution @seq's input: @size bytes that name it. */
static void fill(uint8_t *buf, size_t size, uint64_t seq)
{
	for (size_t i = 0; i < size; i++)
		buf[i] = (uint8_t)(seq * 131 + i * 7);
}

/* Sizes around a slot's payload (a GraphData's fields take part of it), and far beyond. */
enum { BIG = 3 * FERRY__RING_SLOT_BYTES, MIB = 1 << 20 };
static const size_t sizes[] = {8, 0,	900, 8,	     960, 990, 8,   1016, 1024,
			       8, 4096, 8,   100000, 8,	  8,   BIG, 8,	  MIB};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

FTEST(values_of_every_size_come_back_whole_and_in_order)
{
	enum { ROUNDS = 4 };
	static uint8_t in[1 << 20], want[1 << 20];
	uint64_t exec[FERRY_GRAPH_MAX_INFLIGHT], ring1, sock1, seq = 0, large = 0;
	struct echo e;

	echo_start(&e);
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < FERRY_GRAPH_MAX_INFLIGHT; i++, seq++) {
			size_t size = sizes[seq % NSIZES];
			struct ferry_graph_arg arg = FERRY_GRAPH_CONST(in, size);

			/* The input is sent (or copied) by the time execute returns. */
			fill(in, size, seq);
			ftest_assert_ok(ferry_graph_execute(e.g, &arg, 1, &exec[i]));
			ftest_assert_uint_eq(exec[i], seq);
			large += size >= FERRY__RING_SLOT_BYTES - FERRY__RING_SLOT_HEADER;
		}
		for (int i = 0; i < FERRY_GRAPH_MAX_INFLIGHT; i++) {
			size_t size = sizes[exec[i] % NSIZES];
			struct ferry_graph_result r;

			ftest_assert_ok(ferry_graph_get(e.g, exec[i], GET_MS, &r));
			ftest_assert_uint_eq(r.len, size);
			fill(want, size, exec[i]);
			if (size)
				ftest_assert_mem_eq(r.data, want, size);
			ferry_graph_result_release(&r);
		}
	}
	ferry__rt_ring_counts(&ring1, &sock1);
	ftest_log("driver's messages through rings: %llu, on sockets beside rings: %llu",
		  (unsigned long long)(ring1 - e.ring0), (unsigned long long)(sock1 - e.sock0));
	if (!ferry__rt_ring_enabled()) {
		ftest_assert_uint_eq(ring1 - e.ring0, 0);
	} else {
		/* The first input (8 bytes, nothing before it) took the ring; every large one the
		 * socket (small ones behind a large one not yet taken follow it there). */
		ftest_assert_uint_ge(ring1 - e.ring0, 1);
		ftest_assert_uint_ge(sock1 - e.sock0, large);
	}
	echo_stop(&e);
}

/* One execution at a time, as a latency-bound caller runs it: the caller's own wait on the
 * rings (spin, then the eventfd) takes each result. */
FTEST(one_execution_at_a_time_many_times)
{
	enum { N = 2000 };
	uint64_t ring1, sock1;
	struct echo e;

	echo_start(&e);
	for (uint64_t i = 0; i < N; i++) {
		struct ferry_graph_arg arg = FERRY_GRAPH_CONST(&i, sizeof(i));
		struct ferry_graph_result r;
		uint64_t exec;

		ftest_assert_ok(ferry_graph_execute(e.g, &arg, 1, &exec));
		ftest_assert_ok(ferry_graph_get(e.g, exec, GET_MS, &r));
		ftest_assert_uint_eq(r.len, sizeof(i));
		ftest_assert_mem_eq(r.data, &i, sizeof(i));
		ferry_graph_result_release(&r);
		if (i % 500 == 499)
			usleep(2000); /* past the workers' spin: they sleep, a ring write wakes them */
	}
	/* Each execution's one input: on the ring (the worker took everything before it). */
	ferry__rt_ring_counts(&ring1, &sock1);
	ftest_assert_uint_eq(ring1 - e.ring0, ferry__rt_ring_enabled() ? N : 0);
	ftest_assert_uint_eq(sock1 - e.sock0, 0);
	echo_stop(&e);
}
