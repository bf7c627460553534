/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process's function registry (ferry_register_function): the runtime's side, where a worker
 * finds the code for a task's function name and ferry_init checks that no name was registered
 * twice. Thread-safe: every function here may be called from any thread.
 */
#ifndef FERRY_RUNTIME_REGISTRY_H
#define FERRY_RUNTIME_REGISTRY_H

#include <stddef.h>

#include <ferry/runtime.h>

/* ferry__registry_find() - the function registered as @name (@len bytes, not necessarily
 * NUL-terminated: a name straight from a message), or NULL. */
ferry_task_fn ferry__registry_find(const char *name, size_t len);

/* ferry__registry_count() - the functions registered so far. */
size_t ferry__registry_count(void);

/* ferry__registry_check() - 0, or -EEXIST when some name was registered to two functions
 * (logged again here, naming it, so that ferry_init's failure says why). */
int ferry__registry_check(void);

/* ferry__registry_conflict() - the first name registered to two functions into @out (@size
 * bytes, NUL-terminated; "" if none): for a worker's error that names it. */
void ferry__registry_conflict(char *out, size_t size);

/* ferry__registry_name_valid() - whether @name (@len bytes) is a valid function name. */
int ferry__registry_name_valid(const char *name, size_t len);

/* ferry__registry_reset() - forget every function (tests only: one process per test). */
void ferry__registry_reset(void);

#endif
