/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's code for examples/graph.c: a Counter actor class (constructed with its starting
 * value) whose methods a compiled graph chains. Values are int64 in the host's byte order.
 *   Counter.inc(d)        the counter's value plus d (a chain's first link: a.inc(2) = 12)
 *   Counter.inc(prev, d)  prev plus d (a link after another: a.inc(2).inc(4) = 16)
 *   Counter.combine(x, y) x + y
 *   Counter.calls()       how many calls this actor ran (its state)
 *   Counter.pid()         its worker's process ID (a test kills it)
 * An increment below zero is refused with an error, which fails that execution only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/runtime.h>

struct counter {
	int64_t value; /* the constructor's argument */
	int64_t calls; /* methods run */
};

static void counter_free(void *state)
{
	free(state);
}

static int arg_i64(struct ferry_task_ctx *ctx, size_t i, int64_t *out)
{
	const void *p;
	size_t len;
	int ret = ferry_task_arg(ctx, i, &p, &len);

	if (ret < 0)
		return ferry_task_error(ctx, "argument %zu is missing", i);
	if (len != sizeof(*out))
		return ferry_task_error(ctx, "argument %zu is %zu bytes, not an int64", i, len);
	memcpy(out, p, sizeof(*out));
	return 0;
}

static struct counter *counter(struct ferry_task_ctx *ctx)
{
	struct counter *c = ferry_actor_state(ctx);

	if (c)
		c->calls++;
	return c;
}

FERRY_ACTOR_CLASS(Counter, counter_free)
{
	struct counter *c = calloc(1, sizeof(*c));
	int ret;

	if (!c)
		return -ENOMEM;
	ret = arg_i64(ctx, 0, &c->value);
	if (ret < 0) {
		free(c);
		return ret;
	}
	*state = c;
	return 0;
}

FERRY_ACTOR_METHOD(Counter, inc)
{
	struct counter *c = counter(ctx);
	size_t n = ferry_task_num_args(ctx);
	int64_t from = 0, d = 0;
	int ret;

	if (!c || n < 1 || n > 2)
		return ferry_task_error(ctx, "inc takes (d) or (prev, d)");
	if (n == 1)
		from = c->value;
	else if ((ret = arg_i64(ctx, 0, &from)) < 0)
		return ret;
	ret = arg_i64(ctx, n - 1, &d);
	if (ret < 0)
		return ret;
	if (d < 0)
		return ferry_task_error(ctx, "inc by %" PRId64 ": a counter only goes up", d);
	from += d;
	return ferry_task_return(ctx, 0, &from, sizeof(from));
}

FERRY_ACTOR_METHOD(Counter, combine)
{
	int64_t x = 0, y = 0;
	int ret;

	if (!counter(ctx))
		return ferry_task_error(ctx, "not an actor's call");
	ret = arg_i64(ctx, 0, &x);
	if (ret == 0)
		ret = arg_i64(ctx, 1, &y);
	if (ret < 0)
		return ret;
	x += y;
	return ferry_task_return(ctx, 0, &x, sizeof(x));
}

FERRY_ACTOR_METHOD(Counter, calls)
{
	struct counter *c = ferry_actor_state(ctx);

	if (!c)
		return ferry_task_error(ctx, "not an actor's call");
	return ferry_task_return(ctx, 0, &c->calls, sizeof(c->calls));
}

FERRY_ACTOR_METHOD(Counter, pid)
{
	int64_t pid = getpid();

	return ferry_task_return(ctx, 0, &pid, sizeof(pid));
}
