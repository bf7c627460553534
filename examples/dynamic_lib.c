/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's code for examples/dynamic.c: a recursive reduction whose tasks submit tasks.
 * sum_range splits its range in halves down to a leaf size; each half is a task, and their
 * results go, by ref, to an add task, whose result the splitting task waits for and returns.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <ferry/runtime.h>

/* A range to sum, lo..hi - 1, split until it is at most leaf long. */
struct range {
	uint64_t lo, hi, leaf;
};

/* What every task returns: the sum, and the size of the tree that made it. */
struct partial {
	uint64_t sum;	/* of the range */
	uint32_t tasks; /* tasks that ran for it, this one included */
	uint32_t depth; /* levels of sum_range below and including this one */
};

static int get_partial(struct ferry_ref *ref, struct partial *out)
{
	struct ferry_view v;
	int ret = ferry_get(ref, -1, &v); /* the worker lends its CPU while it waits */

	if (ret == 0 && v.len != sizeof(*out))
		ret = -EBADMSG;
	if (ret == 0)
		memcpy(out, v.data, sizeof(*out));
	ferry_release(&v);
	return ret;
}

FERRY_FUNCTION(sum_range)
{
	struct ferry_ref halves[2], total;
	struct partial p = {0};
	struct range r, sub[2];
	const void *arg;
	size_t len;
	int ret;

	if (ferry_task_arg(ctx, 0, &arg, &len) < 0 || len != sizeof(r))
		return ferry_task_error(ctx, "sum_range takes a struct range");
	memcpy(&r, arg, sizeof(r));
	if (r.hi - r.lo <= r.leaf || r.leaf == 0) {
		for (uint64_t i = r.lo; i < r.hi; i++)
			p.sum += i;
		p.tasks = p.depth = 1;
		return ferry_task_return(ctx, 0, &p, sizeof(p));
	}
	sub[0] = (struct range){r.lo, r.lo + (r.hi - r.lo) / 2, r.leaf};
	sub[1] = (struct range){sub[0].hi, r.hi, r.leaf};
	for (int i = 0; i < 2; i++) {
		struct ferry_arg a = {.data = &sub[i], .len = sizeof(sub[i])};

		ret = ferry_submit("sum_range", &a, 1, NULL, &halves[i]);
		if (ret < 0)
			return ferry_task_error(ctx, "submit: %s", ferry_strerror(ret));
	}
	/* The halves' refs pass on to add: it runs once both are ready. */
	ret = ferry_submit("add", (struct ferry_arg[]){{.ref = &halves[0]}, {.ref = &halves[1]}}, 2,
			   NULL, &total);
	ferry_ref_drop(&halves[0]);
	ferry_ref_drop(&halves[1]);
	if (ret < 0)
		return ferry_task_error(ctx, "submit: %s", ferry_strerror(ret));
	ret = get_partial(&total, &p);
	ferry_ref_drop(&total);
	if (ret < 0)
		return ferry_task_error(ctx, "its subtasks: %s", ferry_strerror(ret));
	p.tasks++; /* this one */
	p.depth++;
	return ferry_task_return(ctx, 0, &p, sizeof(p));
}

/* add(a, b): two partials into one (the add task counts itself). */
FERRY_FUNCTION(add)
{
	struct partial a, b, out;
	const void *pa, *pb;
	size_t la, lb;

	if (ferry_task_arg(ctx, 0, &pa, &la) < 0 || ferry_task_arg(ctx, 1, &pb, &lb) < 0 ||
	    la != sizeof(a) || lb != sizeof(b))
		return ferry_task_error(ctx, "add takes two partials");
	memcpy(&a, pa, sizeof(a));
	memcpy(&b, pb, sizeof(b));
	out.sum = a.sum + b.sum;
	out.tasks = a.tasks + b.tasks + 1;
	out.depth = a.depth > b.depth ? a.depth : b.depth;
	return ferry_task_return(ctx, 0, &out, sizeof(out));
}
