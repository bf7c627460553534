/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plasma, the node's zero-copy shared-memory object store: the value types shared by the store
 * and its clients. The store server and the client API (connect, create, seal, get, release,
 * delete, evict, list, stats) are built on top of these.
 *
 * Thread model: the functions here are thread-safe.
 */
#ifndef FERRY_PLASMA_H
#define FERRY_PLASMA_H

#include <stdint.h>

#include <ferry/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every object's data starts on this boundary inside the arena (a cache line: no false
 * sharing between objects, and aligned for any vector load). */
#define FERRY_PLASMA_ALIGNMENT 64

/*
 * Upper bound of the default arena size. The default is 30% of the memory this process may use
 * (physical RAM or the cgroup limit, whichever is lower), capped here: the arena is pre-faulted
 * at start, and populating fresh shared pages runs at ~1-2.5 GB/s per machine, so 64 GiB
 * already takes tens of seconds. Larger stores are a deliberate choice (FERRY_PLASMA_MEMORY).
 */
#define FERRY_PLASMA_DEFAULT_MEMORY_CAP (64ull << 30)

/* Hugepage policy for the arena. */
enum ferry_plasma_hugepages {
	FERRY_PLASMA_HUGEPAGES_AUTO = 0,    /* explicit hugetlb, else THP, else 4 KiB; logged */
	FERRY_PLASMA_HUGEPAGES_OFF = 1,	    /* base pages only */
	FERRY_PLASMA_HUGEPAGES_REQUIRE = 2, /* explicit hugetlb pages or fail with -ENOMEM */
};

/* What the arena actually got. */
enum ferry_plasma_pages {
	FERRY_PLASMA_PAGES_BASE = 0,	/* 4 KiB pages */
	FERRY_PLASMA_PAGES_THP = 1,	/* transparent hugepages requested (the kernel decides) */
	FERRY_PLASMA_PAGES_HUGETLB = 2, /* explicit hugetlb pages (size in page_size_bytes) */
};

/* Store figures. Fragmentation: free_bytes spread over free_blocks, the largest of which is
 * largest_free_bytes (the biggest object that can be created without eviction). */
struct ferry_plasma_stats {
	uint64_t capacity_bytes;     /* arena size */
	uint64_t allocated_bytes;    /* held by objects and client chunks, 64-byte granular */
	uint64_t free_bytes;	     /* capacity_bytes - allocated_bytes */
	uint64_t largest_free_bytes; /* largest free block */
	uint64_t free_blocks;	     /* number of free blocks */
	uint64_t objects;	     /* entries being created, sealed or awaiting deletion */
	uint64_t max_objects;	     /* object limit */
	uint64_t table_slots_used;   /* index slots not free (objects + tombstones) */
	uint64_t table_slots;	     /* index slots */
	uint64_t clients;	     /* client slots in use (the store itself included) */
	uint64_t chunks;	     /* arena chunks granted to clients for local creates */
	uint64_t chunk_bytes;	     /* bytes in those chunks */
	uint64_t deferred_deletes;   /* deleted while pinned, freed at the last release */
	uint64_t evicted_objects;    /* secondary copies evicted since start */
	uint64_t evicted_bytes;	     /* their data + metadata bytes */
	uint32_t page_size_bytes;    /* arena page size (4096, or the hugetlb page size) */
	uint32_t pages;		     /* enum ferry_plasma_pages */
};

/*
 * ferry_plasma_default_memory_bytes() - the arena size used when none is configured: 30% of
 * min(physical RAM, cgroup memory limit), rounded down to 2 MiB, at most
 * FERRY_PLASMA_DEFAULT_MEMORY_CAP and at least 64 MiB.
 */
FERRY_API uint64_t ferry_plasma_default_memory_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
