/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation wrappers: live counts, the countdown injector, overflow, replaceable allocator. */
#include <stdint.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "ftest.h"

FTEST(live_count_tracks_malloc_and_free)
{
	long before = ferry__alloc_live();
	void *a = ferry__malloc(10), *b = ferry__calloc(3, 7);

	ftest_assert_ptr_notnull(a);
	ftest_assert_ptr_notnull(b);
	ftest_assert_int_eq(ferry__alloc_live(), before + 2);
	b = ferry__realloc(b, 1000);
	ftest_assert_ptr_notnull(b);
	ftest_assert_int_eq(ferry__alloc_live(), before + 2);
	ferry__free(a);
	ferry__free(b);
	ferry__free(NULL);
	ftest_assert_int_eq(ferry__alloc_live(), before);
}

FTEST(countdown_fails_exactly_the_nth)
{
	void *p[4];

	ferry__alloc_fail_after(2);
	p[0] = ferry__malloc(8);
	p[1] = ferry__malloc(8);
	ftest_assert_true(ferry__alloc_fail_pending());
	p[2] = ferry__malloc(8);
	p[3] = ferry__malloc(8);
	ftest_assert_ptr_notnull(p[0]);
	ftest_assert_ptr_notnull(p[1]);
	ftest_assert_ptr_null(p[2]);
	ftest_assert_ptr_notnull(p[3]); /* fires once, then disarmed */
	ftest_assert_false(ferry__alloc_fail_pending());
	for (int i = 0; i < 4; i++)
		ferry__free(p[i]);
}

FTEST(realloc_failure_keeps_old_block)
{
	char *p = ferry__malloc(4), *q;

	ftest_assert_ptr_notnull(p);
	ferry__alloc_fail_after(0);
	q = ferry__realloc(p, 4096);
	ftest_assert_ptr_null(q);
	ferry__free(p);
}

FTEST(calloc_overflow_returns_null)
{
	ftest_assert_ptr_null(ferry__calloc(SIZE_MAX / 2, 3));
}

static long custom_calls;

static void *counting_malloc(void *arg, size_t size)
{
	(void)arg;
	custom_calls++;
	return malloc(size);
}

static void *counting_realloc(void *arg, void *ptr, size_t size)
{
	(void)arg;
	custom_calls++;
	return realloc(ptr, size);
}

static void counting_free(void *arg, void *ptr)
{
	(void)arg;
	custom_calls++;
	free(ptr);
}

FTEST(replaceable_allocator_is_used)
{
	struct ferry_allocator a = {counting_malloc, counting_realloc, counting_free, NULL};
	char *s;

	ferry_set_allocator(&a);
	s = ferry__strdup("ferry");
	ftest_assert_str_eq(s, "ferry");
	ferry__free(s);
	ferry_set_allocator(NULL);
	ftest_assert_int_eq(custom_calls, 2);
}
