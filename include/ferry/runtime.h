/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The task runtime: functions that run as tasks in worker processes, found by a registered
 * name. This header grows with the runtime (tasks, actors, object refs, graphs); today it holds
 * the function registry that every other part names its code through.
 *
 * Code by name. A task names its function by a string, never by a pointer, because it runs in
 * another process (a worker on this host or another). Every process that may run a function
 * registers it under the same name: the driver and the job's shared library both define it
 * with FERRY_FUNCTION(), which registers it when the code is loaded (before main, or when a
 * worker loads the job's library). Calling a name that a worker has not registered fails with
 * an error naming the function and the node, never a crash.
 *
 * Thread model: ferry_register_function() may be called from any thread at any time (library
 * constructors run it while other threads work); registration cannot be undone, so a loaded
 * library's code must stay loaded.
 */
#ifndef FERRY_RUNTIME_H
#define FERRY_RUNTIME_H

#include <ferry/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A name: 1 to FERRY_FUNCTION_NAME_MAX bytes of letters, digits and "_.:-/" ("Counter.inc",
 * "models/predict"). */
#define FERRY_FUNCTION_NAME_MAX 127

/* The running task, handed to its function; its accessors arrive with tasks. */
struct ferry_task_ctx;

/* A task function: returns 0, or -errno (its returns then hold the error). */
typedef int (*ferry_task_fn)(struct ferry_task_ctx *ctx);

/*
 * ferry_register_function() - register @fn under @name in this process.
 * Registering the same name with the same function again is a no-op. Returns 0; -EINVAL for a
 * bad name or a NULL @fn; -EEXIST if @name is registered to another function (the first stays,
 * and ferry_init() will refuse to start: two functions of one name is a build mistake that
 * would run different code in different processes); -ENOMEM. Each error is logged.
 */
FERRY_API int ferry_register_function(const char *name, ferry_task_fn fn);

/*
 * FERRY_FUNCTION(name) { body } - define a task function and register it as "name" when this
 * code is loaded. The body sees `struct ferry_task_ctx *ctx` and returns 0 or -errno:
 *
 *     FERRY_FUNCTION(add)
 *     {
 *             ...
 *             return 0;
 *     }
 *
 * The C function itself is static (ferry__fn_add): it is called through the runtime by name.
 */
#define FERRY_FUNCTION(name)                                                  \
	static int ferry__fn_##name(struct ferry_task_ctx *ctx);              \
	__attribute__((constructor)) static void ferry__register_##name(void) \
	{                                                                     \
		(void)ferry_register_function(#name, ferry__fn_##name);       \
	}                                                                     \
	static int ferry__fn_##name(struct ferry_task_ctx *ctx)

#ifdef __cplusplus
}
#endif

#endif
