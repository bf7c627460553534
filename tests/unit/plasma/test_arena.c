/* SPDX-License-Identifier: Apache-2.0 */
/* Arena: create, attach at another address, pre-faulting, size sealing, the /dev/shm fallback,
 * hugepage policy and its fallback, and bad input. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "plasma/arena.h"
#include "ftest.h"

#define MIB (1ull << 20)

/* Pages of [base, base + size) resident in memory, counted with mincore(2). */
static uint64_t resident_pages(const uint8_t *base, uint64_t size)
{
	uint64_t pages = size / 4096, n = 0;
	unsigned char *vec = malloc(pages);

	if (!vec || mincore((void *)(uintptr_t)base, size, vec) < 0)
		FTEST__FAIL("mincore failed");
	for (uint64_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	return n;
}

static void read_text(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;

	buf[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

FTEST(create_prefaults_every_page)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 8 * MIB,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_OFF};
	struct ferry__plasma_arena a;

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_uint_eq(a.size, 8 * MIB);
	ftest_assert_uint_eq(a.page_size, 4096);
	ftest_assert_int_eq(a.pages, FERRY_PLASMA_PAGES_BASE);
	ftest_assert_uint_eq(resident_pages(a.base, a.size), a.size / 4096);
	ferry__plasma_arena_destroy(&a);
}

/* A size beyond the host's memory (a typo: 1T for 1G) is refused before a page is touched,
 * instead of pre-faulting until the OOM killer ends the process. */
FTEST(a_store_larger_than_the_host_is_refused)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = (uint64_t)1 << 45,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_OFF};
	struct ferry__plasma_arena a;

	ftest_assert_errno(ferry__plasma_arena_create(&o, &a), -ENOMEM);
}

FTEST(no_prefault_leaves_pages_unfaulted)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 8 * MIB,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_OFF,
					     .flags = FERRY__ARENA_NO_PREFAULT};
	struct ferry__plasma_arena a;

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_uint_eq(resident_pages(a.base, a.size), 0);
	a.base[12345] = 1;
	ftest_assert_uint_eq(resident_pages(a.base, a.size), 1);
	ferry__plasma_arena_destroy(&a);
}

FTEST(size_rounds_up_to_pages)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 10000,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_OFF};
	struct ferry__plasma_arena a;

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_uint_eq(a.size, 12288);
	ferry__plasma_arena_destroy(&a);
}

FTEST(attach_maps_the_same_memory_elsewhere)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 4 * MIB};
	struct ferry__plasma_arena a, b;

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_ok(ferry__plasma_arena_attach(a.fd, a.size, FERRY__ARENA_POPULATE, &b));
	ftest_assert_true(a.base != b.base);
	ftest_assert_int_eq(b.fd, -1);
	ftest_assert_true(b.size_sealed);
	for (uint64_t i = 0; i < a.size; i += 4096)
		a.base[i] = (uint8_t)(i >> 12);
	for (uint64_t i = 0; i < a.size; i += 4096)
		ftest_assert_uint_eq(b.base[i], (uint8_t)(i >> 12));
	b.base[a.size - 1] = 0x5a;
	ftest_assert_uint_eq(a.base[a.size - 1], 0x5a);
	ferry__plasma_arena_destroy(&b);
	ferry__plasma_arena_destroy(&a);
}

FTEST(attach_rejects_bad_input)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = MIB, .flags = FERRY__ARENA_NO_PREFAULT};
	struct ferry__plasma_arena a, b = {.fd = -7};

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_errno(ferry__plasma_arena_attach(a.fd, 2 * MIB, 0, &b), -EINVAL);
	ftest_assert_errno(ferry__plasma_arena_attach(a.fd, 0, 0, &b), -EINVAL);
	ftest_assert_errno(ferry__plasma_arena_attach(-1, MIB, 0, &b), -EINVAL);
	ftest_assert_errno(ferry__plasma_arena_attach(1000, MIB, 0, &b), -EBADF);
	ftest_assert_int_eq(b.fd, -7); /* untouched on failure */
	ferry__plasma_arena_destroy(&a);
}

/* A client that could shrink the memfd would make the store fault on its next access. */
FTEST(memfd_size_is_sealed)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = MIB, .flags = FERRY__ARENA_NO_PREFAULT};
	struct ferry__plasma_arena a;

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_true(a.size_sealed);
	ftest_assert_false(a.shm_file);
	ftest_assert_int_eq(ftruncate(a.fd, 4096), -1);
	ftest_assert_int_eq(errno, EPERM);
	ftest_assert_int_eq(ftruncate(a.fd, 8 * MIB), -1);
	ferry__plasma_arena_destroy(&a);
}

static int count_ferry_shm_files(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += strncmp(de->d_name, "ferry-plasma-", 13) == 0;
	if (d)
		closedir(d);
	return n;
}

FTEST(shm_file_fallback_leaves_nothing_behind)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 2 * MIB, .flags = FERRY__ARENA_SHM_FILE};
	struct ferry__plasma_arena a, b;
	int before = count_ferry_shm_files();

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_true(a.shm_file);
	ftest_assert_int_ne(a.pages, FERRY_PLASMA_PAGES_HUGETLB);
	ftest_assert_int_eq(count_ferry_shm_files(), before); /* unlinked at once */
	ftest_assert_uint_eq(resident_pages(a.base, a.size), a.size / 4096);
	ftest_assert_ok(ferry__plasma_arena_attach(a.fd, a.size, 0, &b));
	a.base[100] = 42;
	ftest_assert_uint_eq(b.base[100], 42);
	ferry__plasma_arena_destroy(&b);
	ferry__plasma_arena_destroy(&a);
}

FTEST(shm_file_cannot_require_hugepages)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = MIB,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_REQUIRE,
					     .flags = FERRY__ARENA_SHM_FILE};
	struct ferry__plasma_arena a;

	ftest_assert_errno(ferry__plasma_arena_create(&o, &a), -EINVAL);
}

static long hugepages_free(void)
{
	char text[8192];
	const char *line;
	long n = 0;

	read_text("/proc/meminfo", text, sizeof(text));
	line = strstr(text, "HugePages_Free:");
	if (line)
		sscanf(line, "HugePages_Free: %ld", &n);
	return n;
}

/* REQUIRE gets explicit hugetlb pages or fails cleanly; which one depends on the machine, and
 * the test checks that the outcome matches what the machine offers. */
FTEST(require_hugepages_succeeds_or_fails_cleanly)
{
	uint64_t huge = ferry__plasma_default_hugepage_size();
	struct ferry__plasma_arena_opts o = {.size_bytes = huge + 1,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_REQUIRE};
	struct ferry__plasma_arena a;
	long avail = hugepages_free();
	int r = ferry__plasma_arena_create(&o, &a);

	ftest_log("%ld free hugetlb pages of %llu KiB: create -> %d", avail,
		  (unsigned long long)(huge >> 10), r);
	if (avail < 2) {
		ftest_assert_errno(r, -ENOMEM);
		return;
	}
	ftest_assert_ok(r);
	ftest_assert_int_eq(a.pages, FERRY_PLASMA_PAGES_HUGETLB);
	ftest_assert_uint_eq(a.size, 2 * huge);
	ftest_assert_uint_eq(a.page_size, huge);
	ferry__plasma_arena_destroy(&a);
}

/* AUTO falls back to THP (when shmem_enabled allows it) or base pages, and says which. */
FTEST(auto_hugepages_fall_back)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 4 * MIB};
	struct ferry__plasma_arena a;
	char mode[256];
	bool thp_allowed;

	read_text("/sys/kernel/mm/transparent_hugepage/shmem_enabled", mode, sizeof(mode));
	thp_allowed = mode[0] && !strstr(mode, "[never]") && !strstr(mode, "[deny]");
	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_log("pages %d, THP for shmem: %s", (int)a.pages, mode);
	if (hugepages_free() < 2)
		ftest_assert_int_eq(a.pages,
				    thp_allowed ? FERRY_PLASMA_PAGES_THP : FERRY_PLASMA_PAGES_BASE);
	else
		ftest_assert_int_eq(a.pages, FERRY_PLASMA_PAGES_HUGETLB);
	ftest_assert_uint_eq(resident_pages(a.base, a.size), a.size / 4096);
	ferry__plasma_arena_destroy(&a);
}

FTEST(hugepages_off_uses_base_pages)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 4 * MIB,
					     .hugepages = FERRY_PLASMA_HUGEPAGES_OFF,
					     .flags = FERRY__ARENA_NO_PREFAULT};
	struct ferry__plasma_arena a;

	ftest_assert_ok(ferry__plasma_arena_create(&o, &a));
	ftest_assert_int_eq(a.pages, FERRY_PLASMA_PAGES_BASE);
	ferry__plasma_arena_destroy(&a);
}

FTEST(absurd_size_is_rejected)
{
	struct ferry__plasma_arena_opts o = {.size_bytes = 1ull << 50};
	struct ferry__plasma_arena a;

	ftest_assert_errno(ferry__plasma_arena_create(&o, &a), -EINVAL);
}

FTEST(default_size_is_30_percent_capped)
{
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t d = ferry_plasma_default_memory_bytes();

	ftest_log("RAM %llu MiB, default arena %llu MiB", (unsigned long long)(ram >> 20),
		  (unsigned long long)(d >> 20));
	ftest_assert_uint_ge(d, 64 * MIB);
	ftest_assert_uint_le(d, FERRY_PLASMA_DEFAULT_MEMORY_CAP);
	ftest_assert_uint_le(d, ram / 10 * 3 > 64 * MIB ? ram / 10 * 3 : 64 * MIB);
	ftest_assert_uint_eq(d % (2 * MIB), 0);
}

FTEST(destroy_accepts_null_and_zeroed)
{
	struct ferry__plasma_arena a = {0};

	/* Make sure fd 0 is open, so that closing it by mistake would show. */
	if (fcntl(0, F_GETFD) < 0)
		ftest_assert_int_eq(open("/dev/null", O_RDONLY), 0);
	ferry__plasma_arena_destroy(NULL);
	ferry__plasma_arena_destroy(&a);
	ftest_assert_int_ge(fcntl(0, F_GETFD), 0);
}
