/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a node has to offer: CPUs, GPUs, memory, object store memory and custom resources, found
 * from the cgroup, the affinity mask and /proc (or given by flags), as named fixed-point amounts.
 *
 * Amounts are integers in 1/FERRY_GCS_RESOURCE_UNIT of a unit (10000, as Ray counts), so adding
 * and taking away fractions never drifts the way a float would; memory is counted in bytes the
 * same way (room for 900 TB).
 *
 * Thread model: pure functions, except detection, which reads files.
 */
#ifndef FERRY_NODE_RESOURCES_H
#define FERRY_NODE_RESOURCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/gcs.h>

#define FERRY__RES_NAME_MAX 63			   /* bytes of a resource name */
#define FERRY__RES_MAX_CUSTOM 64		   /* custom resources per node (the GCS's limit) */
#define FERRY__RES_MAX (4 + FERRY__RES_MAX_CUSTOM) /* the four standard ones first */
/* The largest amount: a whole number of units that still fits after scaling. */
#define FERRY__RES_AMOUNT_MAX (INT64_MAX / 2)

struct ferry__res {
	char name[FERRY__RES_NAME_MAX + 1]; /* "CPU", "GPU", "memory", "object_store_memory", ... */
	int64_t amount;			    /* in 1/FERRY_GCS_RESOURCE_UNIT, >= 0 */
};

/* A set of named amounts; names are unique. */
struct ferry__res_set {
	uint32_t count;				 /* entries used */
	struct ferry__res items[FERRY__RES_MAX]; /* in insertion order */
};

/*
 * ferry__res_parse_amount() - "2", "0.5", "1.25": a non-negative decimal with at most four
 * digits after the point, into fixed point. 0 or -EINVAL (negative, not a number, finer than
 * 1/10000, too large), logged with @what.
 */
int ferry__res_parse_amount(const char *s, const char *what, int64_t *out);

/*
 * ferry__res_parse_custom() - "name=amount,..." (--resources) appended to @set. Names are 1..63
 * characters of [A-Za-z0-9_.:-], not one of the standard names (CPU, GPU, memory,
 * object_store_memory: they have their own flags). 0 or -EINVAL with a log line saying what is
 * wrong (bad name, bad or negative amount, duplicate, more than FERRY__RES_MAX_CUSTOM); on error
 * @set is as it was.
 */
int ferry__res_parse_custom(const char *s, struct ferry__res_set *set);

/* ferry__res_set_put() - add or replace @name. 0, -EINVAL (bad name or amount), -ENOSPC. */
int ferry__res_set_put(struct ferry__res_set *set, const char *name, int64_t amount);
/* ferry__res_set_get() - @name's amount, or -1 when absent. */
int64_t ferry__res_set_get(const struct ferry__res_set *set, const char *name);

/*
 * ferry__res_cpus() - the CPUs this process may use, in fixed point: the smaller of
 * @affinity_cpus (0: unknown) and the cgroup's quota (cgroup v2 cpu.max, or v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), the quota rounded up to 1/10000. @root prefixes every
 * path read ("" for the real system; tests pass a directory holding proc/self/cgroup and
 * sys/fs/cgroup/...). Never fails: with nothing known, 1 CPU.
 */
int64_t ferry__res_cpus(const char *root, unsigned affinity_cpus);
/* ferry__res_memory_bytes() - min(MemTotal, the cgroup's memory limit), 0 when unknown. */
uint64_t ferry__res_memory_bytes(const char *root);

/* What the node was told (flags); zeros mean detect / none. */
struct ferry__res_opts {
	const char *num_cpus;	/* --num-cpus, NULL: detect */
	const char *num_gpus;	/* --num-gpus, NULL: 0 */
	const char *custom;	/* --resources, NULL: none */
	uint64_t store_bytes;	/* the store's capacity */
	const char *root;	/* NULL: "" (tests: a fake /proc and /sys) */
	unsigned affinity_cpus; /* 0: sched_getaffinity() */
};

/*
 * ferry__res_node_totals() - the node's totals: CPU, GPU, memory (min(MemTotal, cgroup limit)
 * minus the store, at least 0), object_store_memory, then the custom ones. 0 or -EINVAL (a bad
 * flag, logged).
 */
int ferry__res_node_totals(const struct ferry__res_opts *o, struct ferry__res_set *out);

/* ferry__res_format() - "8 CPU, 0.5 GPU, tpu 2" style text of an amount. */
void ferry__res_format_amount(int64_t amount, char *buf, size_t size);

#endif
