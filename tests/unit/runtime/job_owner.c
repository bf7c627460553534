/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A job's code for the owner's tests (test_submit.c), loaded by the real ferry-worker: add
 * sums two int64s, fail reports an error, twice doubles an int64 (to chain tasks through
 * refs), kill_once is SIGKILLed on its first try (the marker file named by its argument tells
 * a retry apart) and always_killed on every try.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ferry/runtime.h>

static int int64_arg(struct ferry_task_ctx *ctx, size_t i, int64_t *out)
{
	const void *p;
	size_t n;

	if (ferry_task_arg(ctx, i, &p, &n) < 0 || n != sizeof(*out))
		return -EINVAL;
	memcpy(out, p, sizeof(*out));
	return 0;
}

FERRY_FUNCTION(add)
{
	int64_t a, b, sum;

	if (int64_arg(ctx, 0, &a) < 0 || int64_arg(ctx, 1, &b) < 0)
		return ferry_task_error(ctx, "add takes two int64 arguments");
	sum = a + b;
	return ferry_task_return(ctx, 0, &sum, sizeof(sum));
}

FERRY_FUNCTION(twice)
{
	int64_t a;

	if (int64_arg(ctx, 0, &a) < 0)
		return ferry_task_error(ctx, "twice takes one int64 argument");
	a *= 2;
	return ferry_task_return(ctx, 0, &a, sizeof(a));
}

FERRY_FUNCTION(fail)
{
	ferry_task_error(ctx, "bad input %d", 7);
	return -EINVAL;
}

/* The marker file @arg 0 (a path): absent, it is made and the worker dies. */
FERRY_FUNCTION(kill_once)
{
	char path[256];
	const void *p;
	size_t n;
	int fd;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n == 0 || n >= sizeof(path))
		return ferry_task_error(ctx, "kill_once takes a path");
	memcpy(path, p, n);
	path[n] = 0;
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		raise(SIGKILL);
	}
	return ferry_task_return(ctx, 0, "survived", 8);
}

FERRY_FUNCTION(always_killed)
{
	(void)ctx;
	raise(SIGKILL);
	return 0;
}
