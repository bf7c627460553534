/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared-memory regions for the object store: the arena that holds object bytes and the small
 * control region that holds the object index. A region is one memfd (or, where memfd is not
 * available, an unlinked /dev/shm file), pre-faulted at creation, on hugepages where the system
 * offers them. The creator passes the fd to clients (SCM_RIGHTS), which attach it.
 *
 * Thread model: create/attach/destroy are thread-safe on distinct arenas. Creation may run
 * short-lived helper threads to pre-fault in parallel; they are joined before it returns.
 */
#ifndef FERRY_PLASMA_ARENA_H
#define FERRY_PLASMA_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/plasma.h>

/* Creation flags (struct ferry__plasma_arena_opts.flags). */
#define FERRY__ARENA_NO_PREFAULT 0x1u /* leave pages to be faulted on first touch */
#define FERRY__ARENA_SHM_FILE 0x2u    /* use an unlinked /dev/shm file even if memfd works */

/* Attach flags. */
#define FERRY__ARENA_POPULATE 0x1u /* map every page table entry now (MAP_POPULATE) */

struct ferry__plasma_arena_opts {
	uint64_t size_bytes;		       /* 0: ferry_plasma_default_memory_bytes() */
	enum ferry_plasma_hugepages hugepages; /* page policy; AUTO when zeroed */
	unsigned flags;			       /* FERRY__ARENA_* creation flags */
	const char *name;		       /* memfd name; NULL: "ferry-plasma" */
};

struct ferry__plasma_arena {
	uint8_t *base;	    /* start of the mapping; NULL when not mapped */
	uint64_t size;	    /* bytes mapped: the request rounded up to page_size */
	int fd;		    /* backing fd, owned; -1 after attach (caller keeps its fd) */
	uint32_t page_size; /* 4096 or the hugetlb page size */
	enum ferry_plasma_pages pages; /* what the region got */
	bool size_sealed; /* memfd sealed against grow/shrink (clients cannot SIGBUS us) */
	bool shm_file;	  /* backed by an unlinked /dev/shm file, not a memfd */
};

/*
 * ferry__plasma_arena_create() - create, size, seal and map a region; pre-fault it unless
 * FERRY__ARENA_NO_PREFAULT. Hugepages per @opts->hugepages: AUTO tries explicit hugetlb, then
 * transparent hugepages if /sys/kernel/mm/transparent_hugepage/shmem_enabled allows them, then
 * base pages, logging what it got and why. @opts may be NULL (all defaults).
 * Returns 0 and fills @out, or -EINVAL (size beyond the address space), -ENOMEM (no memory for
 * the region or its pre-fault, or REQUIRE and no hugetlb pages), -ENOSPC (/dev/shm full), or
 * another -errno from the system. @out is written only on success.
 */
int ferry__plasma_arena_create(const struct ferry__plasma_arena_opts *opts,
			       struct ferry__plasma_arena *out);

/*
 * ferry__plasma_arena_attach() - map @size bytes of the region behind @fd (received from the
 * creator). @fd is borrowed: the mapping stays valid after the caller closes it. @flags:
 * FERRY__ARENA_POPULATE to build the page tables now instead of on first touch.
 * Returns 0, -EINVAL (size 0, or the file is smaller than @size: logged), or -errno from
 * fstat/mmap. @out is written only on success.
 */
int ferry__plasma_arena_attach(int fd, uint64_t size, unsigned flags,
			       struct ferry__plasma_arena *out);

/* ferry__plasma_arena_destroy() - unmap and close what the arena owns. Accepts NULL or an arena
 * that was zeroed / already destroyed. */
void ferry__plasma_arena_destroy(struct ferry__plasma_arena *a);

/* ferry__plasma_default_hugepage_size() - the system's default hugetlb page size (2 MiB when it
 * cannot be read). */
uint64_t ferry__plasma_default_hugepage_size(void);

#endif
