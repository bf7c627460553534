/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A node's resources: the flag parsers (--num-cpus, --num-gpus, --resources) and detection of
 * CPUs and memory from the affinity mask, the cgroup (v2, else v1) and /proc/meminfo.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "node/resources.h"

#define COMP "node"
#define UNIT FERRY_GCS_RESOURCE_UNIT

static const char *const standard[] = {"CPU", "GPU", "memory", "object_store_memory"};

/* ---- parsing ---- */

int ferry__res_parse_amount(const char *s, const char *what, int64_t *out)
{
	int64_t whole = 0, frac = 0, scale = UNIT;
	const char *p = s;

	if (!s || !*s || *s == '-') {
		FLOG_ERROR(COMP, "%s: '%s' is not an amount >= 0", what, s ? s : "");
		return -EINVAL;
	}
	for (; isdigit((unsigned char)*p); p++) {
		whole = whole * 10 + (*p - '0');
		if (whole > FERRY__RES_AMOUNT_MAX / UNIT) {
			FLOG_ERROR(COMP, "%s: %s is too large", what, s);
			return -EINVAL;
		}
	}
	if (*p == '.') {
		for (p++; isdigit((unsigned char)*p); p++) {
			if (scale == 1) {
				FLOG_ERROR(COMP, "%s: %s is finer than 1/%d", what, s, UNIT);
				return -EINVAL;
			}
			scale /= 10;
			frac += (*p - '0') * scale;
		}
	}
	if (*p || p == s || (p == s + 1 && *s == '.')) {
		FLOG_ERROR(COMP, "%s: '%s' is not a number", what, s);
		return -EINVAL;
	}
	*out = whole * UNIT + frac;
	return 0;
}

static bool is_standard(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(standard) / sizeof(standard[0]); i++)
		if (strlen(standard[i]) == len && !memcmp(standard[i], name, len))
			return true;
	return false;
}

static bool name_ok(const char *name, size_t len)
{
	if (len == 0 || len > FERRY__RES_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)name[i]) && !strchr("_.:-", name[i]))
			return false;
	return true;
}

int64_t ferry__res_set_get(const struct ferry__res_set *set, const char *name)
{
	for (uint32_t i = 0; i < set->count; i++)
		if (!strcmp(set->items[i].name, name))
			return set->items[i].amount;
	return -1;
}

int ferry__res_set_put(struct ferry__res_set *set, const char *name, int64_t amount)
{
	uint32_t i;

	if (!name || !name_ok(name, strlen(name)) || amount < 0)
		return -EINVAL;
	for (i = 0; i < set->count && strcmp(set->items[i].name, name); i++)
		;
	if (i == set->count) {
		if (set->count == FERRY__RES_MAX)
			return -ENOSPC;
		snprintf(set->items[i].name, sizeof(set->items[i].name), "%s", name);
		set->count++;
	}
	set->items[i].amount = amount;
	return 0;
}

/* One "name=amount" of @s (ending at ',' or NUL) into @set. */
static int parse_one(const char *s, size_t len, struct ferry__res_set *set, unsigned *ncustom)
{
	const char *eq = memchr(s, '=', len);
	char name[FERRY__RES_NAME_MAX + 1], amount[64];
	size_t nlen = eq ? (size_t)(eq - s) : len;
	int64_t v;

	if (!eq || !name_ok(s, nlen)) {
		FLOG_ERROR(COMP,
			   "--resources: '%.*s' is not name=amount (a name is 1..%d of "
			   "A-Z a-z 0-9 _ . : -)",
			   (int)len, s, FERRY__RES_NAME_MAX);
		return -EINVAL;
	}
	if (is_standard(s, nlen)) {
		FLOG_ERROR(COMP,
			   "--resources: %.*s has its own flag (--num-cpus, --num-gpus, "
			   "--memory)",
			   (int)nlen, s);
		return -EINVAL;
	}
	memcpy(name, s, nlen);
	name[nlen] = '\0';
	if (ferry__res_set_get(set, name) >= 0) {
		FLOG_ERROR(COMP, "--resources: %s is given twice", name);
		return -EINVAL;
	}
	snprintf(amount, sizeof(amount), "%.*s", (int)(len - nlen - 1), eq + 1);
	if (ferry__res_parse_amount(amount, name, &v) < 0)
		return -EINVAL;
	if (++*ncustom > FERRY__RES_MAX_CUSTOM || ferry__res_set_put(set, name, v) < 0) {
		FLOG_ERROR(COMP, "--resources: more than %d custom resources",
			   FERRY__RES_MAX_CUSTOM);
		return -EINVAL;
	}
	return 0;
}

int ferry__res_parse_custom(const char *s, struct ferry__res_set *set)
{
	struct ferry__res_set tmp = *set;
	unsigned ncustom = 0;

	if (!s || !*s) {
		FLOG_ERROR(COMP, "--resources: empty (name=amount,...)");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < tmp.count; i++)
		ncustom += !is_standard(tmp.items[i].name, strlen(tmp.items[i].name));
	while (*s) {
		size_t len = strcspn(s, ",");

		if (parse_one(s, len, &tmp, &ncustom) < 0)
			return -EINVAL;
		s += len;
		if (*s == ',' && !*++s) {
			FLOG_ERROR(COMP, "--resources: a trailing comma");
			return -EINVAL;
		}
	}
	*set = tmp;
	return 0;
}

void ferry__res_format_amount(int64_t amount, char *buf, size_t size)
{
	int64_t frac = amount % UNIT;
	int n;

	if (!frac) {
		snprintf(buf, size, "%" PRId64, amount / UNIT);
		return;
	}
	n = snprintf(buf, size, "%" PRId64 ".%04" PRId64, amount / UNIT, frac);
	while (n > 0 && (size_t)n < size && buf[n - 1] == '0') /* 0.5000 -> 0.5 */
		buf[--n] = '\0';
}

/* ---- detection ---- */

/* The first line of @root/@path into @buf (no newline). 0 or -errno. */
static int read_line(const char *root, const char *path, char *buf, size_t size)
{
	char full[512];
	FILE *f;

	snprintf(full, sizeof(full), "%s%s", root, path);
	f = fopen(full, "re");
	if (!f)
		return -errno;
	if (!fgets(buf, (int)size, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* Our cgroup's path for @controller (v2: NULL) from proc/self/cgroup, into @out. */
static int cgroup_path(const char *root, const char *controller, char *out, size_t size)
{
	char full[512], line[512];
	int ret = -ENOENT;
	FILE *f;

	snprintf(full, sizeof(full), "%s/proc/self/cgroup", root);
	f = fopen(full, "re");
	if (!f)
		return -errno;
	while (ret < 0 && fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;

		if (!path)
			continue;
		*path++ = '\0';
		ctl++;
		path[strcspn(path, "\n")] = '\0';
		if (controller ? strstr(ctl, controller) != NULL : (*ctl == '\0' && line[0] == '0'))
			ret = snprintf(out, size, "%s", strcmp(path, "/") ? path : "") < (int)size
				      ? 0
				      : -ENAMETOOLONG;
	}
	fclose(f);
	return ret;
}

/* @file of our cgroup (@dir: "" for v2, "/cpu,cpuacct" style for v1): our own cgroup's, else
 * the mount root's (a container sees its own cgroup as the root). */
static int cgroup_read(const char *root, const char *controller, const char *dir, const char *file,
		       char *buf, size_t size)
{
	char cg[256] = "", path[512];

	(void)cgroup_path(root, controller, cg, sizeof(cg));
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s%s/%s", dir, cg, file);
	if (read_line(root, path, buf, size) == 0)
		return 0;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", dir, file);
	return read_line(root, path, buf, size);
}

/* quota/period CPUs rounded up to 1/UNIT, or -1 for no limit. */
static int64_t quota_cpus(long long quota, long long period)
{
	if (quota <= 0 || period <= 0)
		return -1;
	return (int64_t)((quota * UNIT + period - 1) / period);
}

static int64_t cgroup_cpus(const char *root)
{
	long long quota, period;
	char buf[128];

	if (cgroup_read(root, NULL, "", "cpu.max", buf, sizeof(buf)) == 0) {
		if (sscanf(buf, "%lld %lld", &quota, &period) == 2)
			return quota_cpus(quota, period);
		return -1; /* "max 100000" */
	}
	if (cgroup_read(root, "cpu", "/cpu,cpuacct", "cpu.cfs_quota_us", buf, sizeof(buf)) < 0 &&
	    cgroup_read(root, "cpu", "/cpu", "cpu.cfs_quota_us", buf, sizeof(buf)) < 0)
		return -1;
	quota = atoll(buf);
	if (cgroup_read(root, "cpu", "/cpu,cpuacct", "cpu.cfs_period_us", buf, sizeof(buf)) < 0 &&
	    cgroup_read(root, "cpu", "/cpu", "cpu.cfs_period_us", buf, sizeof(buf)) < 0)
		return -1;
	period = atoll(buf);
	return quota_cpus(quota, period);
}

int64_t ferry__res_cpus(const char *root, unsigned affinity_cpus)
{
	int64_t cpus = affinity_cpus ? (int64_t)affinity_cpus * UNIT : -1;
	int64_t quota = cgroup_cpus(root ? root : "");

	if (quota > 0 && (cpus < 0 || quota < cpus))
		cpus = quota;
	return cpus > 0 ? cpus : UNIT;
}

static uint64_t meminfo_total(const char *root)
{
	char full[512], line[256];
	unsigned long long kb = 0;
	FILE *f;

	snprintf(full, sizeof(full), "%s/proc/meminfo", root);
	f = fopen(full, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

uint64_t ferry__res_memory_bytes(const char *root)
{
	uint64_t total, limit = 0;
	char buf[128];

	root = root ? root : "";
	total = meminfo_total(root);
	if (cgroup_read(root, NULL, "", "memory.max", buf, sizeof(buf)) == 0 ||
	    cgroup_read(root, "memory", "/memory", "memory.limit_in_bytes", buf, sizeof(buf)) == 0)
		limit = strtoull(buf, NULL, 10); /* "max": 0, no limit */
	if (limit && (!total || limit < total))
		total = limit;
	return total;
}

static unsigned affinity_count(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 0;
	return (unsigned)CPU_COUNT(&set);
}

int ferry__res_node_totals(const struct ferry__res_opts *o, struct ferry__res_set *out)
{
	const char *root = o->root ? o->root : "";
	int64_t cpus, gpus = 0, mem;
	uint64_t bytes;

	memset(out, 0, sizeof(*out));
	if (o->num_cpus) {
		if (ferry__res_parse_amount(o->num_cpus, "--num-cpus", &cpus) < 0)
			return -EINVAL;
	} else {
		cpus = ferry__res_cpus(root,
				       o->affinity_cpus ? o->affinity_cpus : affinity_count());
	}
	if (o->num_gpus && ferry__res_parse_amount(o->num_gpus, "--num-gpus", &gpus) < 0)
		return -EINVAL;
	bytes = ferry__res_memory_bytes(root);
	bytes = bytes > o->store_bytes ? bytes - o->store_bytes : 0;
	mem = bytes > (uint64_t)(FERRY__RES_AMOUNT_MAX / UNIT) ? FERRY__RES_AMOUNT_MAX
							       : (int64_t)bytes * UNIT;
	ferry__res_set_put(out, "CPU", cpus);
	ferry__res_set_put(out, "GPU", gpus);
	ferry__res_set_put(out, "memory", mem);
	ferry__res_set_put(out, "object_store_memory",
			   o->store_bytes > (uint64_t)(FERRY__RES_AMOUNT_MAX / UNIT)
				   ? FERRY__RES_AMOUNT_MAX
				   : (int64_t)o->store_bytes * UNIT);
	if (o->custom && ferry__res_parse_custom(o->custom, out) < 0)
		return -EINVAL;
	return 0;
}
