/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_until(): drive an io_uring loop (common/loop.h) until a condition holds, for tests of
 * anything built on the loop (framed connections, the TCP engine). The harness's per-test
 * timeout bounds the wait.
 */
#ifndef FERRY_TESTS_FTEST_LOOP_H
#define FERRY_TESTS_FTEST_LOOP_H

#include <stdbool.h>

#include "common/loop.h"
#include "common/util.h"
#include "ftest.h"

struct until {
	struct ferry__loop_timer timer; /* checks every ms */
	bool (*cond)(void *arg);	/* done? */
	void *arg;			/* its argument */
};

static inline void until_tick(struct ferry__loop_timer *t, int status)
{
	struct until *u = FERRY_CONTAINER_OF(t, struct until, timer);

	ftest_assert_int_eq(status, 0);
	if (u->cond(u->arg)) {
		ftest_assert_ok(ferry__loop_timer_stop(t));
		ferry__loop_stop(t->loop);
	}
}

/* Run until @cond holds, checked every millisecond. */
static inline void run_until(struct ferry__loop *loop, bool (*cond)(void *arg), void *arg)
{
	struct until u = {.cond = cond, .arg = arg};

	ftest_assert_ok(ferry__loop_timer_start(loop, &u.timer, 0, 1, until_tick));
	ftest_assert_ok(ferry__loop_run(loop));
	if (ferry__loop_timer_active(&u.timer))
		ftest_assert_ok(ferry__loop_timer_stop(&u.timer));
}

#endif
