/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A job's code for the worker tests (test_worker.c): loaded by the real ferry-worker with
 * dlopen, as a job's library is. add needs its worker setup to have run; echo returns its
 * argument (copied: inline or through the store by size); fail reports an error; big writes N
 * bytes in place; crash dies; misuse checks that bad contexts and indexes are refused;
 * wait_foreign waits in ferry_wait (the worker tells its node so).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include <ferry/runtime.h>

static int setup_ran;

FERRY_WORKER_SETUP(job_setup)
{
	setup_ran++;
	return 0;
}

FERRY_FUNCTION(add)
{
	int64_t a, b, sum;
	const void *pa, *pb;
	size_t na, nb;

	if (setup_ran != 1)
		return ferry_task_error(ctx, "the worker setup ran %d times, not once", setup_ran);
	if (ferry_task_num_args(ctx) != 2 || ferry_task_arg(ctx, 0, &pa, &na) < 0 ||
	    ferry_task_arg(ctx, 1, &pb, &nb) < 0 || na != sizeof(a) || nb != sizeof(b))
		return ferry_task_error(ctx, "add takes two int64 arguments");
	memcpy(&a, pa, sizeof(a));
	memcpy(&b, pb, sizeof(b));
	sum = a + b;
	return ferry_task_return(ctx, 0, &sum, sizeof(sum));
}

FERRY_FUNCTION(echo)
{
	const void *p;
	size_t n;
	int ret = ferry_task_arg(ctx, 0, &p, &n);

	return ret < 0 ? ret : ferry_task_return(ctx, 0, p, n);
}

FERRY_FUNCTION(fail)
{
	ferry_task_error(ctx, "bad input %d", 7);
	return -EINVAL;
}

/* big(N): N bytes of (i * 31 + 7) & 0xff, written in place. */
FERRY_FUNCTION(big)
{
	uint64_t n;
	const void *p;
	size_t len;
	uint8_t *buf;
	int ret;

	if (ferry_task_arg(ctx, 0, &p, &len) < 0 || len != sizeof(n))
		return ferry_task_error(ctx, "big takes one uint64 argument");
	memcpy(&n, p, sizeof(n));
	ret = ferry_task_return_alloc(ctx, 0, n, (void **)&buf);
	if (ret < 0)
		return ret;
	for (uint64_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	return 0;
}

FERRY_FUNCTION(crash)
{
	(void)ctx;
	raise(SIGSEGV);
	return 0;
}

static struct ferry_task_ctx *kept;

/* Bad contexts and indexes: -EINVAL each, never a crash. A context kept past its task is bad
 * too: the next call of misuse tries the one the previous call kept. */
FERRY_FUNCTION(misuse)
{
	struct ferry_task_ctx *bogus = (struct ferry_task_ctx *)(uintptr_t)0x1000;
	const void *p;
	size_t n;
	void *buf;

	if (ferry_task_arg(ctx, 99, &p, &n) != -EINVAL ||
	    ferry_task_arg(NULL, 0, &p, &n) != -EINVAL ||
	    ferry_task_arg(bogus, 0, &p, &n) != -EINVAL)
		return ferry_task_error(ctx, "a bad argument index or context was accepted");
	if (ferry_task_return(ctx, 1, "x", 1) != -EINVAL ||
	    ferry_task_return_alloc(bogus, 0, 1, &buf) != -EINVAL ||
	    ferry_task_num_args(bogus) != 0 || ferry_task_num_returns(NULL) != 0 ||
	    ferry_task_error(bogus, "x") != -EINVAL)
		return ferry_task_error(ctx, "a bad return index or context was accepted");
	/* (The next task's context may take the same address: then it is not stale.) */
	if (kept && kept != ctx &&
	    (ferry_task_return(kept, 0, "x", 1) != -EINVAL || ferry_task_num_args(kept)))
		return ferry_task_error(ctx, "a context kept past its task was accepted");
	kept = ctx;
	if (ferry_task_return(ctx, 0, "ok", 2) != 0 ||
	    ferry_task_return(ctx, 0, "ok", 2) != -EEXIST)
		return ferry_task_error(ctx, "a return set twice was accepted");
	return 0;
}

/* wait_foreign(ms): ferry_wait up to @ms for an object of another owner that never comes (no
 * such owner): returns how many were ready (0). */
FERRY_FUNCTION(wait_foreign)
{
	struct ferry_ref ref;
	const void *p;
	size_t n;
	int64_t ms, count;
	int ready = 0;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(ms))
		return ferry_task_error(ctx, "wait_foreign takes an int64 of ms");
	memcpy(&ms, p, sizeof(ms));
	ferry_object_id_random(&ref.id);
	ferry_worker_id_random(&ref.owner);
	count = ferry_wait(&ref, 1, 1, ms, &ready);
	if (count < 0)
		return ferry_task_error(ctx, "ferry_wait: %d", (int)count);
	return ferry_task_return(ctx, 0, &count, sizeof(count));
}
