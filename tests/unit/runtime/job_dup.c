/* SPDX-License-Identifier: Apache-2.0 */
/* A job's code that registers one name to two functions (test_worker.c): the worker must refuse
 * the job with -EEXIST naming it. */
#include <ferry/runtime.h>

static int one(struct ferry_task_ctx *ctx)
{
	(void)ctx;
	return 0;
}

static int two(struct ferry_task_ctx *ctx)
{
	(void)ctx;
	return 1;
}

__attribute__((constructor)) static void register_twice(void)
{
	(void)ferry_register_function("twice", one);
	(void)ferry_register_function("twice", two);
}
