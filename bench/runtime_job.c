/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job library of ferry-runtime-bench (runtime_bench.cc): the functions its rows submit and
 * the actor class its actor rows call,
 * loaded by the local cluster's workers as the job's code (ferry_init's code_path). Its
 * references to the runtime (ferry_register_function) resolve in the process that loads it.
 */
#include <stdint.h>
#include <string.h>

#include <ferry/runtime.h>

/* The empty task of `ray microbenchmark`'s task rows: no arguments, one empty return. */
FERRY_FUNCTION(noop)
{
	(void)ctx;
	return 0;
}

/* The actor of the 1_1_actor_calls rows: no state, one empty method (Ray's row calls an empty
 * method of an actor with no arguments). */
FERRY_ACTOR_CLASS(BenchActor, NULL)
{
	(void)ctx;
	*state = NULL;
	return 0;
}

FERRY_ACTOR_METHOD(BenchActor, noop)
{
	(void)ctx;
	return 0;
}

/* The compiled graph row's link: its int64 argument plus one. */
FERRY_ACTOR_METHOD(BenchActor, inc)
{
	const void *p;
	size_t len;
	int64_t x = 0;

	if (ferry_task_arg(ctx, 0, &p, &len) == 0 && len == sizeof(x))
		memcpy(&x, p, sizeof(x));
	x++;
	return ferry_task_return(ctx, 0, &x, sizeof(x));
}

/* n_n_actor_calls_with_arg's method: its one argument (a ref, resolved to its bytes before the
 * method runs) is read, as Ray's small_value_arg takes its ObjectRef. */
FERRY_ACTOR_METHOD(BenchActor, noop_arg)
{
	const void *data;
	size_t len;

	return ferry_task_arg(ctx, 0, &data, &len);
}
