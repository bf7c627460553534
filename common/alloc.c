/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation wrappers: the replaceable allocator, live counts and the countdown fault injector. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

static void *libc_malloc(void *arg, size_t size)
{
	(void)arg;
	return malloc(size);
}

static void *libc_realloc(void *arg, void *ptr, size_t size)
{
	(void)arg;
	return realloc(ptr, size);
}

static void libc_free(void *arg, void *ptr)
{
	(void)arg;
	free(ptr);
}

static struct ferry_allocator allocator = {libc_malloc, libc_realloc, libc_free, NULL};
static atomic_long live_allocations;
/* -1: disarmed. n >= 0: the allocation after n more succeed fails. */
static atomic_long fail_countdown = -1;

void ferry_set_allocator(const struct ferry_allocator *a)
{
	if (a && a->malloc && a->realloc && a->free)
		allocator = *a;
	else
		allocator = (struct ferry_allocator){libc_malloc, libc_realloc, libc_free, NULL};
}

void ferry__alloc_fail_after(long n)
{
	atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

int ferry__alloc_fail_pending(void)
{
	return atomic_load(&fail_countdown) >= 0;
}

long ferry__alloc_live(void)
{
	return atomic_load_explicit(&live_allocations, memory_order_relaxed);
}

/* True when this allocation must fail. The fast path (disarmed) is one relaxed load. */
static int should_fail(void)
{
	long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);

	while (n >= 0) {
		long next = n == 0 ? -1 : n - 1;

		if (atomic_compare_exchange_weak(&fail_countdown, &n, next))
			return n == 0;
	}
	return 0;
}

void *ferry__malloc(size_t size)
{
	void *p;

	if (should_fail())
		return NULL;
	p = allocator.malloc(allocator.arg, size ? size : 1);
	if (p)
		atomic_fetch_add_explicit(&live_allocations, 1, memory_order_relaxed);
	return p;
}

void *ferry__calloc(size_t count, size_t size)
{
	size_t total;
	void *p;

	if (__builtin_mul_overflow(count, size, &total))
		return NULL;
	p = ferry__malloc(total);
	if (p)
		memset(p, 0, total);
	return p;
}

void *ferry__realloc(void *ptr, size_t size)
{
	void *p;

	if (!ptr)
		return ferry__malloc(size);
	if (size == 0) {
		ferry__free(ptr);
		return NULL;
	}
	if (should_fail())
		return NULL;
	p = allocator.realloc(allocator.arg, ptr, size);
	return p;
}

void ferry__free(void *ptr)
{
	if (!ptr)
		return;
	atomic_fetch_sub_explicit(&live_allocations, 1, memory_order_relaxed);
	allocator.free(allocator.arg, ptr);
}

char *ferry__strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = ferry__malloc(n);

	if (p)
		memcpy(p, s, n);
	return p;
}
