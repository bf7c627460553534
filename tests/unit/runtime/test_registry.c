/* SPDX-License-Identifier: Apache-2.0 */
/* The function registry: FERRY_FUNCTION registers at load, names are checked, a name given to
 * two functions is refused and remembered, lookups by a name that is not NUL-terminated (as it
 * comes from a message), registration from many threads, and allocation failure. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <ferry/runtime.h>

#include "common/alloc.h"
#include "ftest.h"
#include "runtime/registry.h"

FERRY_FUNCTION(loaded_before_main)
{
	(void)ctx;
	return 7;
}

static int fn_a(struct ferry_task_ctx *ctx)
{
	(void)ctx;
	return 1;
}

static int fn_b(struct ferry_task_ctx *ctx)
{
	(void)ctx;
	return 2;
}

FTEST(function_macro_registers_when_the_code_loads)
{
	ferry_task_fn fn = ferry__registry_find("loaded_before_main", strlen("loaded_before_main"));

	ftest_assert_true(fn != NULL);
	ftest_assert_int_eq(fn(NULL), 7);
	ftest_assert_int_eq(ferry__registry_check(), 0);
}

FTEST(same_function_again_is_a_no_op)
{
	ftest_assert_int_eq(ferry_register_function("models/predict", fn_a), 0);
	ftest_assert_int_eq(ferry_register_function("models/predict", fn_a), 0);
	ftest_assert_true(ferry__registry_find("models/predict", 14) == fn_a);
	ftest_assert_int_eq(ferry__registry_check(), 0);
}

/* Two functions of one name would run different code in different processes: the first stays,
 * the second is refused, and the check that ferry_init runs fails from then on. */
FTEST(a_name_taken_by_another_function_is_refused_and_remembered)
{
	ftest_assert_int_eq(ferry_register_function("Counter.inc", fn_a), 0);
	ftest_assert_errno(ferry_register_function("Counter.inc", fn_b), -EEXIST);
	ftest_assert_true(ferry__registry_find("Counter.inc", 11) == fn_a);
	ftest_assert_errno(ferry__registry_check(), -EEXIST);
}

FTEST(bad_names_and_null_functions_are_refused)
{
	char longest[FERRY_FUNCTION_NAME_MAX + 2];
	size_t before = ferry__registry_count();

	memset(longest, 'x', sizeof(longest));
	longest[FERRY_FUNCTION_NAME_MAX + 1] = 0; /* one byte too long */
	ftest_assert_errno(ferry_register_function(longest, fn_a), -EINVAL);
	longest[FERRY_FUNCTION_NAME_MAX] = 0; /* the longest allowed */
	ftest_assert_int_eq(ferry_register_function(longest, fn_a), 0);
	ftest_assert_errno(ferry_register_function("", fn_a), -EINVAL);
	ftest_assert_errno(ferry_register_function(NULL, fn_a), -EINVAL);
	ftest_assert_errno(ferry_register_function("has space", fn_a), -EINVAL);
	ftest_assert_errno(ferry_register_function("semi;colon", fn_a), -EINVAL);
	ftest_assert_errno(ferry_register_function("ok_name", NULL), -EINVAL);
	ftest_assert_uint_eq(ferry__registry_count(), before + 1);
	ftest_assert_int_eq(ferry__registry_check(), 0);
}

/* A name from a message: exactly len bytes, no terminator, maybe an embedded NUL. */
FTEST(lookup_by_length_not_by_terminator)
{
	const char wire[] = {'a', 'd', 'd', 'X', 'Y'};
	const char nul[] = {'a', 'd', 'd', 0, 'x'};

	ftest_assert_int_eq(ferry_register_function("add", fn_a), 0);
	ftest_assert_true(ferry__registry_find(wire, 3) == fn_a);
	ftest_assert_true(ferry__registry_find(wire, 4) == NULL);
	ftest_assert_true(ferry__registry_find(nul, sizeof(nul)) == NULL);
	ftest_assert_true(ferry__registry_find(wire, 0) == NULL);
	ftest_assert_true(ferry__registry_find(NULL, 3) == NULL);
	ftest_assert_true(ferry__registry_find("nope", 4) == NULL);
}

#define THREADS 4
#define PER_THREAD 300

static void *register_many(void *arg)
{
	long t = (long)arg;
	char name[32];

	for (int i = 0; i < PER_THREAD; i++) {
		snprintf(name, sizeof(name), "t%ld.f%d", t, i);
		if (ferry_register_function(name, (i & 1) ? fn_a : fn_b) != 0)
			return (void *)1;
	}
	return NULL;
}

/* Library constructors may register while other threads look names up. */
FTEST(registration_from_many_threads)
{
	size_t before = ferry__registry_count();
	pthread_t th[THREADS];
	void *res;

	for (long t = 0; t < THREADS; t++)
		ftest_assert_int_eq(pthread_create(&th[t], NULL, register_many, (void *)t), 0);
	for (int t = 0; t < THREADS; t++) {
		ftest_assert_int_eq(pthread_join(th[t], &res), 0);
		ftest_assert_true(res == NULL);
	}
	ftest_assert_uint_eq(ferry__registry_count(), before + THREADS * PER_THREAD);
	ftest_assert_true(ferry__registry_find("t3.f299", 7) == fn_a);
	ftest_assert_true(ferry__registry_find("t0.f0", 5) == fn_b);
}

FTEST(allocation_failure_leaves_the_registry_as_it_was)
{
	size_t before;
	char name[32];
	int ret = 0, i;

	/* Fill until the map must grow, with the growth's allocation failing. */
	for (i = 0; i < 4096 && ret == 0; i++) {
		snprintf(name, sizeof(name), "grow%d", i);
		before = ferry__registry_count();
		ferry__alloc_fail_after(0);
		ret = ferry_register_function(name, fn_a);
		ferry__alloc_fail_after(-1);
	}
	ftest_assert_errno(ret, -ENOMEM);
	ftest_assert_uint_eq(ferry__registry_count(), before);
	ftest_assert_true(ferry__registry_find(name, strlen(name)) == NULL);
	ftest_assert_int_eq(ferry_register_function(name, fn_a), 0);
	ftest_assert_true(ferry__registry_find(name, strlen(name)) == fn_a);
}
