/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arena allocator: two-level segregated fits (TLSF) over a byte range, 64-byte granular.
 * Allocation and free are O(1) apart from a hash map insert/remove. All metadata (block
 * descriptors, free lists, bitmaps) lives in the store's private heap, never in the arena, so a
 * client scribbling on object memory cannot corrupt it.
 *
 * Allocation is a good fit, not a best fit: the request is rounded up to the next of 16
 * classes per power of two, so the block found wastes less than 1/16; when no such class has
 * a block, the request's own class is searched linearly, so -ENOSPC means that no free block
 * is large enough.
 *
 * Thread model: not thread-safe; the store serialises access (single writer).
 */
#ifndef FERRY_PLASMA_ALLOCATOR_H
#define FERRY_PLASMA_ALLOCATOR_H

#include <stdint.h>

#define FERRY__PLASMA_ALLOC_UNIT 64u /* granularity and alignment, bytes */

struct ferry__plasma_allocator;

struct ferry__plasma_alloc_stats {
	uint64_t capacity_bytes;     /* size of the managed range */
	uint64_t allocated_bytes;    /* in allocated blocks */
	uint64_t allocated_blocks;   /* number of allocations */
	uint64_t free_bytes;	     /* capacity_bytes - allocated_bytes */
	uint64_t free_blocks;	     /* number of free blocks (after coalescing) */
	uint64_t largest_free_bytes; /* largest free block */
};

/*
 * ferry__plasma_allocator_create() - manage [@start, @start + @size) (offsets in the arena).
 * Both must be multiples of FERRY__PLASMA_ALLOC_UNIT and @size non-zero.
 * Returns 0, -EINVAL (logged) or -ENOMEM. *@out is written only on success.
 */
int ferry__plasma_allocator_create(uint64_t start, uint64_t size,
				   struct ferry__plasma_allocator **out);

/* ferry__plasma_allocator_destroy() - free the metadata. Accepts NULL. */
void ferry__plasma_allocator_destroy(struct ferry__plasma_allocator *a);

/*
 * ferry__plasma_allocator_alloc() - a block of at least @size bytes (rounded up to the unit);
 * its offset goes to *@offset. Returns 0, -EINVAL (@size 0), -E2BIG (larger than the whole
 * range), -ENOSPC (no free block large enough), or -ENOMEM (metadata could not grow; the
 * allocator is unchanged).
 */
int ferry__plasma_allocator_alloc(struct ferry__plasma_allocator *a, uint64_t size,
				  uint64_t *offset);

/* ferry__plasma_allocator_free() - give back the block at @offset. Coalesces with free
 * neighbours; never allocates. Returns 0, or -EINVAL (logged) if @offset is not the start of
 * an allocated block. */
int ferry__plasma_allocator_free(struct ferry__plasma_allocator *a, uint64_t offset);

/* ferry__plasma_allocator_block_size() - the size in bytes of the allocated block at @offset
 * into *@size. Returns 0 or -EINVAL. */
int ferry__plasma_allocator_block_size(const struct ferry__plasma_allocator *a, uint64_t offset,
				       uint64_t *size);

/* ferry__plasma_allocator_stats() - current figures. The largest free block costs a walk of
 * one free list (the highest non-empty class). */
void ferry__plasma_allocator_stats(const struct ferry__plasma_allocator *a,
				   struct ferry__plasma_alloc_stats *out);

/* ferry__plasma_allocator_check() - verify every internal invariant (for tests; O(blocks)):
 * blocks tile the range, no two free neighbours, free lists and bitmaps agree with the blocks,
 * figures add up. Returns 0 or -EUCLEAN (and logs the first violation). */
int ferry__plasma_allocator_check(const struct ferry__plasma_allocator *a);

#endif
