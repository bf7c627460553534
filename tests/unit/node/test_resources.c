/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A node's resources (node/resources.c): fixed-point amounts and their parser, the --resources
 * list with each way it can be wrong, and CPU / memory detection from cgroup v2 and v1 files and
 * /proc/meminfo laid out under a test directory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "node/resources.h"
#include "tests/harness/ftest.h"

#define U FERRY_GCS_RESOURCE_UNIT

/* @text into @root/@rel, its parents made. */
static void put_file(const char *root, const char *rel, const char *text)
{
	char path[512], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (slash = strchr(path + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0700);
		*slash = '/';
	}
	f = fopen(path, "w");
	ftest_assert_ptr_notnull(f);
	fputs(text, f);
	fclose(f);
}

/* A fresh root under the test's directory. */
static const char *new_root(const char *name)
{
	static char root[512];

	snprintf(root, sizeof(root), "%s/%s", ftest_tmpdir(), name);
	mkdir(root, 0700);
	return root;
}

FTEST(amounts_are_fixed_point)
{
	int64_t v = -1;

	ftest_assert_ok(ferry__res_parse_amount("2", "t", &v));
	ftest_assert_int_eq(v, 2 * U);
	ftest_assert_ok(ferry__res_parse_amount("0.5", "t", &v));
	ftest_assert_int_eq(v, U / 2);
	ftest_assert_ok(ferry__res_parse_amount("1.0001", "t", &v));
	ftest_assert_int_eq(v, U + 1);
	ftest_assert_ok(ferry__res_parse_amount(".25", "t", &v));
	ftest_assert_int_eq(v, U / 4);
	ftest_assert_ok(ferry__res_parse_amount("0", "t", &v));
	ftest_assert_int_eq(v, 0);
	/* Ten times 0.1 is exactly 1: no float drift. */
	ftest_assert_ok(ferry__res_parse_amount("0.1", "t", &v));
	ftest_assert_int_eq(10 * v, U);
	ftest_assert_errno(ferry__res_parse_amount("-1", "t", &v), -EINVAL);
	ftest_assert_errno(ferry__res_parse_amount("1.00001", "t", &v), -EINVAL);
	ftest_assert_errno(ferry__res_parse_amount("", "t", &v), -EINVAL);
	ftest_assert_errno(ferry__res_parse_amount(".", "t", &v), -EINVAL);
	ftest_assert_errno(ferry__res_parse_amount("1e3", "t", &v), -EINVAL);
	ftest_assert_errno(ferry__res_parse_amount("nan", "t", &v), -EINVAL);
	ftest_assert_errno(ferry__res_parse_amount("99999999999999999999", "t", &v), -EINVAL);
}

FTEST(custom_resources_list)
{
	struct ferry__res_set set = {0};
	char text[2048];
	size_t len = 0;

	ftest_assert_ok(ferry__res_parse_custom("tpu=4,ssd=0.5,zone:a=1", &set));
	ftest_assert_uint_eq(set.count, 3);
	ftest_assert_int_eq(ferry__res_set_get(&set, "tpu"), 4 * U);
	ftest_assert_int_eq(ferry__res_set_get(&set, "ssd"), U / 2);
	ftest_assert_int_eq(ferry__res_set_get(&set, "zone:a"), U);
	ftest_assert_int_eq(ferry__res_set_get(&set, "gpu"), -1);

	/* Each error leaves the set as it was. */
	ftest_assert_errno(ferry__res_parse_custom("x=1,tpu=2", &set), -EINVAL); /* duplicate */
	ftest_assert_errno(ferry__res_parse_custom("a=1,a=2", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("bad name=1", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("=1", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("noamount", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("neg=-1", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("CPU=2", &set), -EINVAL); /* own flag */
	ftest_assert_errno(ferry__res_parse_custom("memory=2", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("a=1,", &set), -EINVAL);
	ftest_assert_errno(ferry__res_parse_custom("", &set), -EINVAL);
	ftest_assert_uint_eq(set.count, 3);

	/* At most 64 custom resources: 61 more fit, 62 do not. */
	for (int i = 0; i < 62; i++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%sr%d=1", i ? "," : "", i);
	ftest_assert_errno(ferry__res_parse_custom(text, &set), -EINVAL);
	*strrchr(text, ',') = '\0';
	ftest_assert_ok(ferry__res_parse_custom(text, &set));
	ftest_assert_uint_eq(set.count, 64);
}

FTEST(cpus_from_cgroup_v2)
{
	const char *root = new_root("v2");

	put_file(root, "proc/self/cgroup", "0::/job.slice\n");
	put_file(root, "sys/fs/cgroup/job.slice/cpu.max", "150000 100000\n");
	ftest_assert_int_eq(ferry__res_cpus(root, 8), 15 * U / 10);
	/* The affinity mask wins when it is smaller. */
	ftest_assert_int_eq(ferry__res_cpus(root, 1), U);
	/* A quota that is not a whole number of ten-thousandths is rounded up. */
	put_file(root, "sys/fs/cgroup/job.slice/cpu.max", "1 300000\n");
	ftest_assert_int_eq(ferry__res_cpus(root, 8), 1);
	put_file(root, "sys/fs/cgroup/job.slice/cpu.max", "max 100000\n");
	ftest_assert_int_eq(ferry__res_cpus(root, 8), 8 * U);
}

FTEST(cpus_from_the_cgroup_root_in_a_container)
{
	const char *root = new_root("ns");

	/* Our cgroup's directory is not there (a cgroup namespace): the mount root's file is. */
	put_file(root, "proc/self/cgroup", "0::/elsewhere\n");
	put_file(root, "sys/fs/cgroup/cpu.max", "200000 100000\n");
	ftest_assert_int_eq(ferry__res_cpus(root, 16), 2 * U);
}

FTEST(cpus_from_cgroup_v1)
{
	const char *root = new_root("v1");

	put_file(root, "proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n");
	put_file(root, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
	put_file(root, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
	ftest_assert_int_eq(ferry__res_cpus(root, 4), 25 * U / 10);
	put_file(root, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
	ftest_assert_int_eq(ferry__res_cpus(root, 4), 4 * U);
	/* Nothing known at all: one CPU. */
	ftest_assert_int_eq(ferry__res_cpus(new_root("empty"), 0), U);
}

FTEST(memory_is_the_smaller_of_ram_and_the_cgroup_limit)
{
	const char *root = new_root("mem");

	put_file(root, "proc/meminfo", "MemTotal:        8000000 kB\nMemFree: 1 kB\n");
	ftest_assert_uint_eq(ferry__res_memory_bytes(root), 8000000ull * 1024);
	put_file(root, "proc/self/cgroup", "0::/\n");
	put_file(root, "sys/fs/cgroup/memory.max", "1073741824\n");
	ftest_assert_uint_eq(ferry__res_memory_bytes(root), 1ull << 30);
	put_file(root, "sys/fs/cgroup/memory.max", "max\n");
	ftest_assert_uint_eq(ferry__res_memory_bytes(root), 8000000ull * 1024);
}

FTEST(node_totals)
{
	const char *root = new_root("totals");
	struct ferry__res_opts o = {0};
	struct ferry__res_set set;

	put_file(root, "proc/meminfo", "MemTotal: 4194304 kB\n"); /* 4 GiB */
	o.root = root;
	o.affinity_cpus = 6;
	o.store_bytes = 1ull << 30;
	o.num_gpus = "2";
	o.custom = "tpu=0.5";
	ftest_assert_ok(ferry__res_node_totals(&o, &set));
	ftest_assert_uint_eq(set.count, 5);
	ftest_assert_str_eq(set.items[0].name, "CPU");
	ftest_assert_int_eq(set.items[0].amount, 6 * U);
	ftest_assert_int_eq(ferry__res_set_get(&set, "GPU"), 2 * U);
	ftest_assert_int_eq(ferry__res_set_get(&set, "memory"), (int64_t)(3ull << 30) * U);
	ftest_assert_int_eq(ferry__res_set_get(&set, "object_store_memory"),
			    (int64_t)(1ull << 30) * U);
	ftest_assert_int_eq(ferry__res_set_get(&set, "tpu"), U / 2);
	o.num_cpus = "0.25"; /* the flag overrides detection */
	ftest_assert_ok(ferry__res_node_totals(&o, &set));
	ftest_assert_int_eq(ferry__res_set_get(&set, "CPU"), U / 4);
	o.num_cpus = "-2";
	ftest_assert_errno(ferry__res_node_totals(&o, &set), -EINVAL);
}

FTEST(amounts_format_without_trailing_zeros)
{
	char buf[32];

	ferry__res_format_amount(2 * U, buf, sizeof(buf));
	ftest_assert_str_eq(buf, "2");
	ferry__res_format_amount(U / 2, buf, sizeof(buf));
	ftest_assert_str_eq(buf, "0.5");
	ferry__res_format_amount(U + 1, buf, sizeof(buf));
	ftest_assert_str_eq(buf, "1.0001");
}
