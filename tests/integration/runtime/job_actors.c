/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The actors' code for test_actors (a job library the workers load, and the test links it too:
 * same names in both). Counter(start[, marker path]): a count from @start; inc(n) adds and
 * returns it; pid() says which worker process hosts it; nap(ms) sleeps (a call in flight while
 * the test kills the worker); fail() returns an error. Its destructor writes "<marker>.fini" so
 * that the test sees it ran. Broken(): a constructor that fails.
 */
#include <errno.h>
#include <fcntl.h>
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

FERRY_ACTOR_CLASS(Broken, NULL)
{
	(void)state;
	return ferry_task_error(ctx, "Broken cannot be built");
}
