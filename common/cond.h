/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Timed condvar waits on CLOCK_MONOTONIC (every deadline on the monotonic clock): the
 * condvar's init and a deadline on the same clock, so a wall-clock step never moves a wait.
 */
#ifndef FERRY_COMMON_COND_H
#define FERRY_COMMON_COND_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* A condvar whose timed waits run on CLOCK_MONOTONIC: a wall-clock step never moves a deadline. */
static inline void ferry__cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &a);
	pthread_condattr_destroy(&a);
}

/* The CLOCK_MONOTONIC time @us from now, for such a condvar's timed wait. */
static inline struct timespec ferry__deadline_in_us(uint64_t us)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(us / 1000000u);
	ts.tv_nsec += (long)(us % 1000000u) * 1000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

#endif
