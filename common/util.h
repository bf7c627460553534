/* SPDX-License-Identifier: Apache-2.0 */
/* Small internal helpers shared by every subsystem: array sizes, alignment, clocks. */
#ifndef FERRY_COMMON_UTIL_H
#define FERRY_COMMON_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define FERRY_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define FERRY_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define FERRY_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FERRY_MAX(a, b) ((a) > (b) ? (a) : (b))
#define FERRY_CONTAINER_OF(ptr, type, member) \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define FERRY_LIKELY(x) __builtin_expect(!!(x), 1)
#define FERRY_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Monotonic clock in nanoseconds / milliseconds. */
static inline uint64_t ferry__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ferry__now_ms(void)
{
	return ferry__now_ns() / 1000000u;
}

/*
 * ferry__parse_u32() - a command-line count: decimal, 0..@max, nothing after it and no sign
 * (strtoul would take "-1" as ULONG_MAX). 0 and *@out, or -EINVAL.
 */
static inline int ferry__parse_u32(const char *s, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* Wall clock in milliseconds since the epoch: for timestamps kept in records, not for timing. */
static inline uint64_t ferry__wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * ferry__run_dir_default() - the run directory `ferry start` uses and a driver's "auto" reads:
 * $FERRY_RUN_DIR, else /tmp/ferry-$UID, or inside a Slurm job /tmp/ferry-$UID-job$SLURM_JOB_ID
 * (common/config.c).
 */
void ferry__run_dir_default(char *buf, size_t size);

#endif
