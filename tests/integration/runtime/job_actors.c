/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The actors' code for test_actors (a job library the workers load, and the test links it too:
 * same names in both). Counter(start[, marker path]): a count from @start; inc(n) adds and
 * returns it; pid() says which worker process hosts it; nap(ms) sleeps (a call in flight while
 * the test kills the worker); fail() returns an error; echo(bytes) returns its argument (a
 * compiled graph's values of any size, test_graph_rings). Its destructor writes
 * "<marker>.fini" so that the test sees it ran. Broken(): a constructor that fails. Gate():
 * meet(n) waits (up to 10 s) until n calls have come in since it was built, and returns how
 * many were inside at once at most (test_actor_options: calls of an actor with
 * max_concurrency run at once).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/runtime.h>

struct counter {
	int64_t n;
	char marker[256]; /* "" for none */
};

static void counter_free(void *state)
{
	struct counter *c = state;
	char path[300];
	int fd;

	if (c && c->marker[0]) {
		snprintf(path, sizeof(path), "%s.fini", c->marker);
		fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
		if (fd >= 0)
			close(fd);
	}
	free(c);
}

FERRY_ACTOR_CLASS(Counter, counter_free)
{
	struct counter *c;
	const void *p;
	size_t n;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(int64_t))
		return ferry_task_error(ctx, "Counter takes an int64 start");
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memcpy(&c->n, p, sizeof(c->n));
	if (ferry_task_arg(ctx, 1, &p, &n) == 0 && n < sizeof(c->marker))
		memcpy(c->marker, p, n);
	*state = c;
	return 0;
}

FERRY_ACTOR_METHOD(Counter, inc)
{
	struct counter *c = ferry_actor_state(ctx);
	const void *p;
	size_t n;
	int64_t by;

	if (!c || ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(by))
		return ferry_task_error(ctx, "inc takes an int64");
	memcpy(&by, p, sizeof(by));
	c->n += by;
	return ferry_task_return(ctx, 0, &c->n, sizeof(c->n));
}

FERRY_ACTOR_METHOD(Counter, pid)
{
	int64_t pid = getpid();

	return ferry_task_return(ctx, 0, &pid, sizeof(pid));
}

FERRY_ACTOR_METHOD(Counter, nap)
{
	const void *p;
	size_t n;
	int64_t ms;
	struct timespec ts;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(ms))
		return ferry_task_error(ctx, "nap takes an int64");
	memcpy(&ms, p, sizeof(ms));
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000;
	nanosleep(&ts, NULL);
	return ferry_task_return(ctx, 0, &ms, sizeof(ms));
}

FERRY_ACTOR_METHOD(Counter, fail)
{
	return ferry_task_error(ctx, "fail was called");
}

FERRY_ACTOR_METHOD(Counter, echo)
{
	const void *p;
	size_t n;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0)
		return ferry_task_error(ctx, "echo takes one argument");
	return ferry_task_return(ctx, 0, p, n);
}

FERRY_ACTOR_CLASS(Broken, NULL)
{
	(void)state;
	return ferry_task_error(ctx, "Broken cannot be built");
}

struct gate {
	atomic_int arrived; /* calls of meet so far */
	atomic_int inside;  /* running now */
	atomic_int peak;    /* most inside at once */
};

FERRY_ACTOR_CLASS(Gate, free)
{
	(void)ctx;
	*state = calloc(1, sizeof(struct gate));
	return *state ? 0 : -ENOMEM;
}

FERRY_ACTOR_METHOD(Gate, meet)
{
	struct gate *g = ferry_actor_state(ctx);
	struct timespec nap = {.tv_nsec = 1000000};
	int64_t want, peak;
	const void *p;
	size_t n;
	int in;

	if (!g || ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(want))
		return ferry_task_error(ctx, "meet takes an int64");
	memcpy(&want, p, sizeof(want));
	/* Inside and peak before arrived: whoever sees all arrived sees their peak. */
	in = atomic_fetch_add(&g->inside, 1) + 1;
	for (int seen = atomic_load(&g->peak); in > seen;)
		if (atomic_compare_exchange_weak(&g->peak, &seen, in))
			break;
	atomic_fetch_add(&g->arrived, 1);
	for (int i = 0; i < 10000 && atomic_load(&g->arrived) < want; i++)
		nanosleep(&nap, NULL);
	atomic_fetch_sub(&g->inside, 1);
	if (atomic_load(&g->arrived) < want)
		return ferry_task_error(ctx, "only %d of %lld calls came in 10 s",
					atomic_load(&g->arrived), (long long)want);
	peak = atomic_load(&g->peak);
	return ferry_task_return(ctx, 0, &peak, sizeof(peak));
}
