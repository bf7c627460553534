/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The function registry: names to task functions, filled by FERRY_FUNCTION's constructors (and
 * by a worker's dlopen of the job's library), read when a worker runs a task. One map under a
 * mutex: registration happens a few hundred times per process, lookups once per task pushed to
 * a worker, uncontended (a worker runs one task at a time), so a lock-free table would buy
 * nothing measurable here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/hashmap.h"
#include "common/log.h"
#include "runtime/registry.h"

#define COMP "runtime"

/* A key: the name, zero-padded (names are short; one flat map, no allocation per name). */
struct reg_key {
	char name[FERRY_FUNCTION_NAME_MAX + 1];
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry__hashmap reg_map;
static int reg_ready;
static struct reg_key reg_conflict; /* the first name registered to two functions */

int ferry__registry_name_valid(const char *name, size_t len)
{
	if (!name || len == 0 || len > FERRY_FUNCTION_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_.:-/", c)) ||
		    c == 0)
			return 0;
	}
	return 1;
}

/* Called with reg_lock held. */
static void *map_slot(const struct reg_key *k, int *inserted)
{
	void *value = NULL;
	int ret;

	if (!reg_ready) {
		ferry__hashmap_init(&reg_map, sizeof(struct reg_key), sizeof(ferry_task_fn));
		reg_ready = 1;
	}
	ret = ferry__hashmap_put(&reg_map, k, &value);
	*inserted = ret;
	return ret < 0 ? NULL : value;
}

int ferry_register_function(const char *name, ferry_task_fn fn)
{
	size_t len = name ? strnlen(name, FERRY_FUNCTION_NAME_MAX + 1) : 0;
	struct reg_key k = {{0}};
	ferry_task_fn *slot;
	int inserted, ret = 0;

	if (!fn || !ferry__registry_name_valid(name, len)) {
		FLOG_ERROR(COMP, "cannot register function \"%.*s\": %s", (int)len,
			   name ? name : "", !fn ? "no function" : "bad name");
		return -EINVAL;
	}
	memcpy(k.name, name, len);
	pthread_mutex_lock(&reg_lock);
	slot = map_slot(&k, &inserted);
	if (!slot) {
		ret = -ENOMEM;
	} else if (inserted) {
		*slot = fn;
	} else if (*slot != fn) {
		if (!reg_conflict.name[0])
			reg_conflict = k;
		ret = -EEXIST;
	}
	pthread_mutex_unlock(&reg_lock);
	if (ret == -ENOMEM)
		FLOG_ERROR(COMP, "cannot register function \"%s\": out of memory", k.name);
	else if (ret == -EEXIST)
		FLOG_ERROR(COMP, "function \"%s\" is registered twice, to two different functions",
			   k.name);
	return ret;
}

ferry_task_fn ferry__registry_find(const char *name, size_t len)
{
	struct reg_key k = {{0}};
	ferry_task_fn fn = NULL, *slot;

	if (!ferry__registry_name_valid(name, len))
		return NULL;
	memcpy(k.name, name, len);
	pthread_mutex_lock(&reg_lock);
	slot = reg_ready ? ferry__hashmap_get(&reg_map, &k) : NULL;
	if (slot)
		fn = *slot;
	pthread_mutex_unlock(&reg_lock);
	return fn;
}

size_t ferry__registry_count(void)
{
	size_t n;

	pthread_mutex_lock(&reg_lock);
	n = reg_ready ? ferry__hashmap_count(&reg_map) : 0;
	pthread_mutex_unlock(&reg_lock);
	return n;
}

int ferry__registry_check(void)
{
	struct reg_key k;

	pthread_mutex_lock(&reg_lock);
	k = reg_conflict;
	pthread_mutex_unlock(&reg_lock);
	if (!k.name[0])
		return 0;
	FLOG_ERROR(COMP, "function \"%s\" is registered to two different functions: rename one",
		   k.name);
	return -EEXIST;
}

void ferry__registry_conflict(char *out, size_t size)
{
	if (!size)
		return;
	pthread_mutex_lock(&reg_lock);
	snprintf(out, size, "%s", reg_conflict.name);
	pthread_mutex_unlock(&reg_lock);
}

void ferry__registry_reset(void)
{
	pthread_mutex_lock(&reg_lock);
	if (reg_ready)
		ferry__hashmap_fini(&reg_map);
	reg_ready = 0;
	memset(&reg_conflict, 0, sizeof(reg_conflict));
	pthread_mutex_unlock(&reg_lock);
}
