/* SPDX-License-Identifier: Apache-2.0 */
/* Tasks that submit tasks, through the public API on the local cluster ferry_init starts:
 * a chain of tasks each waiting for the next, deeper than the node's CPUs (a waiting worker
 * lends its CPU); refs a task makes passed on to its subtasks (one in the store, one in the
 * worker's memory store); ferry_wait inside a task; a ref a task returns, read by the driver.
 * The job is tests/unit/runtime/job_owner.c. Environment (meson.build): FERRY_WORKER_EXE,
 * FERRY_TEST_JOB. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "ftest.h"

static void init_job(uint32_t workers)
{
	ftest_runtime_init(NULL, workers);
}

/* Run @fn(@x) and return its int64. */
static int64_t call(const char *fn, int64_t x)
{
	struct ferry_arg a = {.data = &x, .len = sizeof(x)};
	struct ferry_ref r;
	struct ferry_view v;
	int64_t out;
	int ret;

	ftest_assert_ok(ferry_submit(fn, &a, 1, NULL, &r));
	ret = ferry_get(&r, 60000, &v);
	if (ret < 0)
		ftest_log("%s(%lld): %s: %s", fn, (long long)x, ferry_strerror(ret), v.error);
	ftest_assert_ok(ret);
	ftest_assert_uint_eq(v.len, sizeof(out));
	memcpy(&out, v.data, sizeof(out));
	ferry_release(&v);
	ferry_ref_drop(&r);
	return out;
}

/* Each level holds a lease (1 CPU) while it waits for the next: without lending, a node of C
 * CPUs would stop at level C. The node may start 4 x CPUs workers: C + 2 levels fit. */
FTEST(nest_deeper_than_the_cpus)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int64_t depth = (cpus > 0 ? cpus : 1) + 2;

	init_job(1);
	ftest_assert_int_eq(call("nest", depth), depth);
	ferry_shutdown();
}

FTEST(refs_made_in_a_task_pass_on_to_its_subtasks)
{
	init_job(2);
	ftest_assert_int_eq(call("relay", 7), 21);
	ftest_assert_int_eq(call("relay", -5), -15);
	ferry_shutdown();
}

FTEST(wait_inside_a_task)
{
	init_job(1);
	ftest_assert_int_eq(call("fan", 16), 240); /* sum of 2i, i < 16 */
	ferry_shutdown();
}

/* hand_out returns the ref of an object it put: the worker owns it, the driver reads it. */
FTEST(a_ref_a_task_returns_stays_valid)
{
	int64_t x = 42, got;
	struct ferry_arg a = {.data = &x, .len = sizeof(x)};
	struct ferry_ref r, inner;
	struct ferry_view v;

	init_job(1);
	ftest_assert_ok(ferry_submit("hand_out", &a, 1, NULL, &r));
	ftest_assert_ok(ferry_get(&r, 60000, &v));
	ftest_assert_uint_eq(v.len, sizeof(inner));
	memcpy(&inner, v.data, sizeof(inner));
	ferry_release(&v);
	ftest_assert_ok(ferry_get(&inner, 30000, &v));
	ftest_assert_uint_eq(v.len, sizeof(got));
	memcpy(&got, v.data, sizeof(got));
	ferry_release(&v);
	ftest_assert_int_eq(got, 42);
	ferry_ref_drop(&r);
	ferry_shutdown();
}

/* A task that waits for a task its owner submitted before it, which was held back for its own
 * argument and so pushed after it, to the same worker: the waiting task must not keep it from
 * running (nap(300) -> twice(its ref) held; await_ref(twice's ref) runs first and waits). */
FTEST(a_waiting_task_does_not_hold_back_the_task_it_waits_for)
{
	int64_t ms = 300, got = 0;
	struct ferry_ref c, b, a;

	init_job(1);
	ftest_assert_ok(ferry_submit("nap", &(struct ferry_arg){.data = &ms, .len = sizeof(ms)}, 1,
				     NULL, &c));
	ftest_assert_ok(ferry_submit("twice", &(struct ferry_arg){.ref = &c}, 1, NULL, &b));
	ftest_assert_ok(ferry_submit("await_ref", &(struct ferry_arg){.data = &b, .len = sizeof(b)},
				     1, NULL, &a));
	ftest_assert_ok(ftest_get_int64(&a, 20000, &got, NULL, 0));
	ftest_assert_int_eq(got, 600);
	ferry_ref_drop(&b);
	ferry_ref_drop(&c);
	ferry_shutdown();
}

/* The tasks pushed behind a task that waits go to another worker and run there once: each is
 * taken back by its owner and bounced by the waiting task's worker, never run by both (tally
 * appends a line per run). */
FTEST(the_tasks_behind_a_waiting_task_run_elsewhere_once)
{
	enum { BEHIND = 4 };
	int64_t ms = 300, got = 0;
	struct ferry_ref c, b, a, t[BEHIND];
	char path[256], lines[64] = {0};
	FILE *f;

	snprintf(path, sizeof(path), "%s/tally", ftest_tmpdir());
	init_job(1);
	ftest_assert_ok(ferry_submit("nap", &(struct ferry_arg){.data = &ms, .len = sizeof(ms)}, 1,
				     NULL, &c));
	ftest_assert_ok(ferry_submit("twice", &(struct ferry_arg){.ref = &c}, 1, NULL, &b));
	ftest_assert_ok(ferry_submit("await_ref", &(struct ferry_arg){.data = &b, .len = sizeof(b)},
				     1, NULL, &a));
	for (int64_t i = 0; i < BEHIND; i++) {
		struct ferry_arg args[2] = {{.data = path, .len = strlen(path)},
					    {.data = &i, .len = sizeof(i)}};

		ftest_assert_ok(ferry_submit("tally", args, 2, NULL, &t[i]));
	}
	for (int64_t i = 0; i < BEHIND; i++) {
		ftest_assert_ok(ftest_get_int64(&t[i], 20000, &got, NULL, 0));
		ftest_assert_int_eq(got, 2 * i);
	}
	ftest_assert_ok(ftest_get_int64(&a, 20000, &got, NULL, 0));
	ftest_assert_int_eq(got, 600);
	ferry_ref_drop(&b);
	ferry_ref_drop(&c);
	/* The waiting task's worker read what came behind it right after answering it, before
	 * its lease went back: a task it ran as well as the other worker counts twice. */
	ferry_shutdown();
	f = fopen(path, "r");
	ftest_assert_true(f != NULL);
	ftest_assert_uint_eq(fread(lines, 1, sizeof(lines) - 1, f), 4 * BEHIND);
	fclose(f);
}
