/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The placement tests' probe (test_placement.c, test_node_death.c): the job's where(ms) task
 * (tests/unit/runtime/job_owner.c) sleeps @ms and returns the ID of the node that ran it.
 */
#ifndef FERRY_TESTS_INTEGRATION_RUNTIME_WHERE_H
#define FERRY_TESTS_INTEGRATION_RUNTIME_WHERE_H

#include <stdint.h>
#include <string.h>

#include <ferry/ferry.h>

#include "tests/harness/ftest.h"

/* Submit where(@ms) with @o; its ref. */
static inline struct ferry_ref where(int64_t ms, const struct ferry_task_opts *o)
{
	struct ferry_arg a = {.data = &ms, .len = sizeof(ms)};
	struct ferry_ref r;

	ftest_assert_ok(ferry_submit("where", &a, 1, o, &r));
	return r;
}

/* The node a where() ran on (it must have succeeded within @timeout_ms); @r is dropped. */
static inline struct ferry_node_id ran_on_within(struct ferry_ref *r, int64_t timeout_ms)
{
	struct ferry_node_id id;
	struct ferry_view v;
	int ret = ferry_get(r, timeout_ms, &v);

	if (ret < 0)
		ftest_log("where: %s: %s", ferry_strerror(ret), v.error);
	ftest_assert_ok(ret);
	ftest_assert_uint_eq(v.len, sizeof(id));
	memcpy(&id, v.data, sizeof(id));
	ferry_release(&v);
	ferry_ref_drop(r);
	return id;
}

#endif
