/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A dynamic task graph: the sum of 1..N by a task tree that grows as it runs. One task gets the
 * whole range; each task splits its range in halves, submits a task for each half, passes
 * their refs on to an add task and waits for it (examples/dynamic_lib.c). The tree is deeper
 * than the node has workers at start: a worker waiting for its subtasks lends its CPU to the
 * node, which starts more workers (up to its maximum) rather than deadlock.
 *
 *     dynamic [./libdynamic_lib.so]      (or FERRY_CODE=./libdynamic_lib.so dynamic)
 *
 * With no argument and no FERRY_CODE, the library beside this program (where the build puts it).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "example.h"

#define N 4096u
#define LEAF 256u
#define WORKERS 2u

struct range {
	uint64_t lo, hi, leaf;
};

struct partial {
	uint64_t sum;
	uint32_t tasks;
	uint32_t depth;
};

int main(int argc, char **argv)
{
	char buf[4096];
	struct ferry_init_opts opts = {
		.code_path = example_code_path(argc, argv, "libdynamic_lib.so", buf, sizeof(buf)),
		.num_workers = WORKERS};
	struct range r = {1, N + 1, LEAF};
	struct ferry_arg a = {.data = &r, .len = sizeof(r)};
	uint64_t want = (uint64_t)N * (N + 1) / 2;
	struct partial p = {0};
	struct ferry_ref root;
	struct ferry_view v;
	int ret = ferry_init(&opts);

	if (ret < 0) {
		fprintf(stderr, "dynamic: ferry_init: %s\n", ferry_strerror(ret));
		return 1;
	}
	ret = ferry_submit("sum_range", &a, 1, NULL, &root);
	if (ret == 0) {
		ret = ferry_get(&root, 120000, &v);
		if (ret == 0 && v.len == sizeof(p))
			memcpy(&p, v.data, sizeof(p));
		if (ret < 0)
			fprintf(stderr, "dynamic: get: %s: %s\n", ferry_strerror(ret), v.error);
		ferry_release(&v);
		ferry_ref_drop(&root);
	} else {
		fprintf(stderr, "dynamic: submit: %s\n", ferry_strerror(ret));
	}
	ferry_shutdown();
	if (ret < 0)
		return 1;
	printf("sum of 1..%u = %llu (%u tasks, %u levels deep, %u workers at start)\n", N,
	       (unsigned long long)p.sum, p.tasks, p.depth, WORKERS);
	if (p.sum != want) {
		fprintf(stderr, "dynamic: wrong sum, want %llu\n", (unsigned long long)want);
		return 1;
	}
	return 0;
}
