/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal allocation wrappers. Every heap allocation in Ferry goes through these so that
 * (1) the user's allocator is honoured, (2) live allocations are counted (tests assert that
 * every path frees what it took), and (3) tests can fail the Nth allocation from now and walk
 * every -ENOMEM path through the real API (SQLite's countdown, style.md).
 *
 * Thread model: thread-safe; counters are relaxed atomics.
 */
#ifndef FERRY_COMMON_ALLOC_H
#define FERRY_COMMON_ALLOC_H

#include <stddef.h>

#include <ferry/common.h>

void *ferry__malloc(size_t size);
void *ferry__calloc(size_t count, size_t size); /* -> NULL on overflow too */
void *ferry__realloc(void *ptr, size_t size);	/* size 0 frees and returns NULL */
void ferry__free(void *ptr);
char *ferry__strdup(const char *s);

/*
 * ferry__alloc_fail_after() - make the allocation @n allocations from now fail (0 = the very
 * next one), once. A negative @n disarms. Counts every thread's allocations.
 */
void ferry__alloc_fail_after(long n);
/* ferry__alloc_fail_pending() - true while an armed failure has not fired yet. */
int ferry__alloc_fail_pending(void);
/* ferry__alloc_live() - allocations not yet freed, process-wide. */
long ferry__alloc_live(void);

#endif
