/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared-memory regions: memfd (or unlinked /dev/shm file) creation, the hugepage policy,
 * parallel pre-faulting, and attaching a region received from the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "plasma/arena.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older libc headers lack the name */
#endif

#define MIN_DEFAULT_BYTES (64ull << 20)
#define DEFAULT_ROUND_BYTES (2ull << 20)
#define PREFAULT_SLICE_MIN (64ull << 20) /* below this a helper thread costs more than it saves */
#define PREFAULT_THREADS_MAX 8

static const char comp[] = "plasma";

static uint64_t base_page_size(void)
{
	long page = sysconf(_SC_PAGESIZE);

	return page > 0 ? (uint64_t)page : 4096;
}

/* Read a small text file into @buf (NUL-terminated). Returns its length or -errno. */
static int read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	int err;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	err = errno;
	close(fd);
	if (n < 0)
		return -err;
	buf[n] = '\0';
	return (int)n;
}

/* The cgroup v2 memory limit of this process, or UINT64_MAX when there is none. */
static uint64_t cgroup_memory_limit(void)
{
	char text[1024], path[1200], value[64];
	unsigned long long limit;
	char *rel, *end;

	if (read_small("/proc/self/cgroup", text, sizeof(text)) < 0)
		return UINT64_MAX;
	rel = strstr(text, "0::");
	if (!rel)
		return UINT64_MAX;
	rel += 3;
	end = strchr(rel, '\n');
	if (end)
		*end = '\0';
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", rel);
	if (read_small(path, value, sizeof(value)) <= 0 || strncmp(value, "max", 3) == 0)
		return UINT64_MAX;
	limit = strtoull(value, NULL, 10);
	return limit ? limit : UINT64_MAX;
}

/* The memory this process may have: RAM, or the cgroup's limit if lower (4 GiB if unknown). */
static uint64_t host_memory_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES);
	uint64_t ram = pages > 0 ? (uint64_t)pages * base_page_size() : (4ull << 30);

	return FERRY_MIN(ram, cgroup_memory_limit());
}

uint64_t ferry_plasma_default_memory_bytes(void)
{
	uint64_t ram = host_memory_bytes();
	uint64_t bytes;

	bytes = ram / 10 * 3;
	bytes = FERRY_MIN(bytes, FERRY_PLASMA_DEFAULT_MEMORY_CAP);
	bytes &= ~(DEFAULT_ROUND_BYTES - 1);
	return FERRY_MAX(bytes, MIN_DEFAULT_BYTES);
}

uint64_t ferry__plasma_default_hugepage_size(void)
{
	char text[4096];
	const char *line;
	unsigned long long kib;

	if (read_small("/proc/meminfo", text, sizeof(text)) < 0)
		return 2ull << 20;
	line = strstr(text, "Hugepagesize:");
	if (!line || sscanf(line, "Hugepagesize: %llu kB", &kib) != 1 || kib == 0)
		return 2ull << 20;
	return (uint64_t)kib << 10;
}

/* The bracketed word of /sys/kernel/mm/transparent_hugepage/shmem_enabled, or "" if unknown. */
static void thp_shmem_mode(char *mode, size_t size)
{
	char text[256];
	char *open_bracket, *close_bracket;

	mode[0] = '\0';
	if (read_small("/sys/kernel/mm/transparent_hugepage/shmem_enabled", text, sizeof(text)) < 0)
		return;
	open_bracket = strchr(text, '[');
	close_bracket = open_bracket ? strchr(open_bracket, ']') : NULL;
	if (!close_bracket)
		return;
	*close_bracket = '\0';
	snprintf(mode, size, "%s", open_bracket + 1);
}

static int open_shm_file(int *fd_out)
{
	char path[] = "/dev/shm/ferry-plasma-XXXXXX";
	int fd = mkostemp(path, O_CLOEXEC);

	if (fd < 0)
		return -errno;
	/* Unlinked at once: nothing stale is left behind, however the store ends. */
	unlink(path);
	*fd_out = fd;
	return 0;
}

/* Size @fd, seal its size when it is a memfd, and map it. On failure nothing is mapped. */
static int size_seal_map(int fd, uint64_t size, struct ferry__plasma_arena *a)
{
	void *p;

	if (ftruncate(fd, (off_t)size) < 0)
		return -errno;
	/* A client that shrank the file would make the store SIGBUS on its next access. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
		a->size_sealed = true;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	a->base = p;
	a->size = size;
	a->fd = fd;
	return 0;
}

static int map_hugetlb(const char *name, uint64_t size, struct ferry__plasma_arena *a)
{
	uint64_t huge = ferry__plasma_default_hugepage_size();
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
	int r;

	if (fd < 0)
		return -errno;
	/* With no hugetlb pages reserved, mmap (not memfd_create or ftruncate) fails: ENOMEM. */
	r = size_seal_map(fd, FERRY_ALIGN_UP(size, huge), a);
	if (r < 0) {
		close(fd);
		a->size_sealed = false;
		return r;
	}
	a->page_size = (uint32_t)huge;
	a->pages = FERRY_PLASMA_PAGES_HUGETLB;
	return 0;
}

static int map_base(const char *name, unsigned flags, uint64_t size, struct ferry__plasma_arena *a)
{
	int fd = -1, r;

	if (!(flags & FERRY__ARENA_SHM_FILE)) {
		fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0)
			FLOG_WARN(comp, "memfd_create: %s; falling back to a /dev/shm file",
				  ferry_strerror(errno));
	}
	if (fd < 0) {
		r = open_shm_file(&fd);
		if (r < 0) {
			FLOG_ERROR(comp, "cannot create shared memory in /dev/shm: %s",
				   ferry_strerror(r));
			return r;
		}
		a->shm_file = true;
	}
	r = size_seal_map(fd, FERRY_ALIGN_UP(size, base_page_size()), a);
	if (r < 0) {
		close(fd);
		return r;
	}
	if (!a->size_sealed)
		FLOG_WARN(comp, "arena size cannot be sealed: a client that truncates it crashes "
				"the store");
	a->page_size = (uint32_t)base_page_size();
	a->pages = FERRY_PLASMA_PAGES_BASE;
	return 0;
}

/* Ask for transparent hugepages when the kernel allows them on shared memory. */
static void request_thp(struct ferry__plasma_arena *a, char *why, size_t why_size)
{
	char mode[32];

	thp_shmem_mode(mode, sizeof(mode));
	if (!mode[0] || !strcmp(mode, "never") || !strcmp(mode, "deny")) {
		snprintf(why, why_size, "THP for shmem is '%s'", mode[0] ? mode : "unavailable");
		return;
	}
	if (madvise(a->base, a->size, MADV_HUGEPAGE) < 0) {
		snprintf(why, why_size, "madvise(MADV_HUGEPAGE): %s", ferry_strerror(errno));
		return;
	}
	snprintf(why, why_size, "THP for shmem is '%s'", mode);
	a->pages = FERRY_PLASMA_PAGES_THP;
}

struct prefault_slice {
	uint8_t *start;	  /* first byte, page aligned */
	uint64_t len;	  /* bytes */
	uint64_t page;	  /* page size, for the touch fallback */
	int err;	  /* 0 or -errno */
	pthread_t thread; /* helper running this slice */
	bool threaded;	  /* thread was started */
};

static int populate(uint8_t *start, uint64_t len, uint64_t page)
{
	if (madvise(start, len, MADV_POPULATE_WRITE) == 0)
		return 0;
	/* EFAULT: populating would have raised SIGBUS (no memory behind the file). */
	if (errno == EFAULT || errno == ENOMEM)
		return -ENOMEM;
	if (errno != EINVAL)
		return -errno;
	/* Kernels before 5.14: write one byte per page (fresh memory is zero, so write zero). */
	for (uint64_t off = 0; off < len; off += page)
		((volatile uint8_t *)start)[off] = 0;
	return 0;
}

static void *prefault_thread(void *arg)
{
	struct prefault_slice *s = arg;

	pthread_setname_np(pthread_self(), "ferry-prefault");
	s->err = populate(s->start, s->len, s->page);
	return NULL;
}

/* Fault in every page from several threads: first touch of shared memory is bound by the
 * kernel zeroing pages, which scales with cores. */
static int prefault(struct ferry__plasma_arena *a)
{
	struct prefault_slice slices[PREFAULT_THREADS_MAX];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t n = FERRY_MIN((uint64_t)FERRY_MAX(cpus, 1), PREFAULT_THREADS_MAX);
	uint64_t per, off = 0;
	int err = 0;

	n = FERRY_MAX(FERRY_MIN(n, a->size / PREFAULT_SLICE_MIN), 1);
	per = FERRY_ALIGN_UP(a->size / n, (uint64_t)a->page_size);
	for (uint64_t i = 0; i < n; i++) {
		struct prefault_slice *s = &slices[i];

		*s = (struct prefault_slice){
			a->base + off, FERRY_MIN(per, a->size - off), a->page_size, 0, 0, false};
		off += s->len;
		if (i > 0 && s->len)
			s->threaded = pthread_create(&s->thread, NULL, prefault_thread, s) == 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		struct prefault_slice *s = &slices[i];

		if (s->threaded)
			pthread_join(s->thread, NULL);
		else if (s->len)
			s->err = populate(s->start, s->len, s->page);
		if (s->err && !err)
			err = s->err;
	}
	return err;
}

static const char *pages_name(enum ferry_plasma_pages pages)
{
	switch (pages) {
	case FERRY_PLASMA_PAGES_HUGETLB:
		return "hugetlb";
	case FERRY_PLASMA_PAGES_THP:
		return "THP";
	default:
		return "base";
	}
}

/* Map hugetlb pages if asked and possible, else base pages (with THP if allowed). */
static int map_region(const struct ferry__plasma_arena_opts *o, const char *name, uint64_t size,
		      struct ferry__plasma_arena *a, char *why, size_t why_size)
{
	int r;

	snprintf(why, why_size, "hugepages off");
	if (o->hugepages != FERRY_PLASMA_HUGEPAGES_OFF && !(o->flags & FERRY__ARENA_SHM_FILE)) {
		r = map_hugetlb(name, size, a);
		if (r == 0) {
			snprintf(why, why_size, "explicit");
			return 0;
		}
		if (o->hugepages == FERRY_PLASMA_HUGEPAGES_REQUIRE) {
			FLOG_ERROR(comp,
				   "hugetlb pages required but unavailable (%s): reserve "
				   "them with vm.nr_hugepages",
				   ferry_strerror(r));
			return -ENOMEM;
		}
		snprintf(why, why_size, "no hugetlb pages (%s)", ferry_strerror(r));
	} else if (o->hugepages == FERRY_PLASMA_HUGEPAGES_REQUIRE) {
		FLOG_ERROR(comp, "hugetlb pages required but a /dev/shm file was asked for");
		return -EINVAL;
	}
	r = map_base(name, o->flags, size, a);
	if (r < 0)
		return r;
	if (o->hugepages == FERRY_PLASMA_HUGEPAGES_AUTO) {
		size_t used = strlen(why);

		snprintf(why + used, why_size - used, "; ");
		request_thp(a, why + used + 2, why_size - used - 2);
	}
	return 0;
}

int ferry__plasma_arena_create(const struct ferry__plasma_arena_opts *opts,
			       struct ferry__plasma_arena *out)
{
	struct ferry__plasma_arena_opts o = opts ? *opts : (struct ferry__plasma_arena_opts){0};
	struct ferry__plasma_arena a = {.fd = -1};
	const char *name = o.name ? o.name : "ferry-plasma";
	uint64_t size = o.size_bytes ? o.size_bytes : ferry_plasma_default_memory_bytes();
	uint64_t t0 = ferry__now_ns(), ns;
	char why[160];
	int r;

	if (size > ((uint64_t)1 << 46)) {
		FLOG_ERROR(comp, "arena of %" PRIu64 " bytes is beyond the 64 TiB limit", size);
		return -EINVAL;
	}
	/* Pre-faulting more than the host has would not fail: the kernel's OOM killer would end
	 * this process (or another one) part way. A typo like 1T for 1G must be refused here. */
	if (!(o.flags & FERRY__ARENA_NO_PREFAULT) && size > host_memory_bytes()) {
		FLOG_ERROR(comp,
			   "a store of %.1f GiB is more than this host's memory (%.1f GiB, or its "
			   "cgroup's limit): give a smaller size",
			   (double)size / (1 << 30), (double)host_memory_bytes() / (1 << 30));
		return -ENOMEM;
	}
	r = map_region(&o, name, size, &a, why, sizeof(why));
	if (r < 0)
		return r;
	if (!(o.flags & FERRY__ARENA_NO_PREFAULT)) {
		/* On tmpfs, reserve the space first: -ENOSPC now rather than SIGBUS later. */
		if (a.shm_file && fallocate(a.fd, 0, 0, (off_t)a.size) < 0)
			r = -errno;
		if (r == 0)
			r = prefault(&a);
		if (r < 0) {
			FLOG_ERROR(comp, "cannot pre-fault %" PRIu64 " MiB of shared memory: %s",
				   a.size >> 20, ferry_strerror(r));
			ferry__plasma_arena_destroy(&a);
			return r;
		}
	}
	ns = ferry__now_ns() - t0;
	FLOG_INFO(comp, "%s: %" PRIu64 " KiB %s, %s pages (%s), %s %.3f s", name, a.size >> 10,
		  a.shm_file ? "/dev/shm file" : "memfd", pages_name(a.pages), why,
		  (o.flags & FERRY__ARENA_NO_PREFAULT) ? "mapped in" : "pre-faulted in",
		  (double)ns / 1e9);
	*out = a;
	return 0;
}

int ferry__plasma_arena_attach(int fd, uint64_t size, unsigned flags,
			       struct ferry__plasma_arena *out)
{
	struct ferry__plasma_arena a = {.fd = -1};
	struct statfs fs;
	struct stat st;
	int seals;
	void *p;

	if (fd < 0 || size == 0) {
		FLOG_ERROR(comp, "attach: bad region (fd %d, %" PRIu64 " bytes)", fd, size);
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0)
		return -errno;
	if ((uint64_t)st.st_size < size) {
		FLOG_ERROR(comp, "attach: region holds %lld bytes, %" PRIu64 " expected",
			   (long long)st.st_size, size);
		return -EINVAL;
	}
	a.page_size = (uint32_t)base_page_size();
	if (fs.f_type == HUGETLBFS_MAGIC) {
		a.page_size = (uint32_t)st.st_blksize;
		a.pages = FERRY_PLASMA_PAGES_HUGETLB;
	}
	a.size = FERRY_ALIGN_UP(size, (uint64_t)a.page_size);
	p = mmap(NULL, a.size, PROT_READ | PROT_WRITE,
		 MAP_SHARED | ((flags & FERRY__ARENA_POPULATE) ? MAP_POPULATE : 0), fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		FLOG_ERROR(comp, "attach: mmap of %" PRIu64 " bytes: %s", a.size,
			   ferry_strerror(err));
		return err;
	}
	a.base = p;
	seals = fcntl(fd, F_GET_SEALS);
	a.size_sealed = seals > 0 && (seals & F_SEAL_SHRINK);
	*out = a;
	return 0;
}

void ferry__plasma_arena_destroy(struct ferry__plasma_arena *a)
{
	/* Only a mapped arena owns an fd: a zeroed struct (fd 0) must not close stdin. */
	if (!a || !a->base)
		return;
	munmap(a->base, a->size);
	if (a->fd >= 0)
		close(a->fd);
	a->base = NULL;
	a->size = 0;
	a->fd = -1;
}
