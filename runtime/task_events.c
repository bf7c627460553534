/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The steps of this process's tasks (submitted, sent to a worker, finished or failed), sent to
 * the GCS for operators: `ferry list tasks` (issue 25).
 *
 * DESIGN
 * - Cheap where tasks go fast: a step is a copy into a fixed buffer under a lock of its own,
 *   and at most `budget` steps a period are kept ($FERRY_TASK_EVENTS a second, default
 *   DEFAULT_BUDGET; 0 turns them off); past that a step costs one relaxed atomic add (counted
 *   as dropped) until the next flush. Ray's task events drop the same way. The budget bounds
 *   what one process asks of the GCS: one request a step, so 100 busy owners cost it at most
 *   50,000 small requests a second.
 * - Every PERIOD_MS the loop thread swaps the buffer out and sends each step (an in-memory GCS
 *   record, never in its WAL: gcs/server.c), without waiting for the replies: a GCS that is
 *   down loses those steps, nothing else.
 * - At shutdown the steps still held are sent before the loop stops (ferry__rt_tev_stop).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/util.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"
#define PERIOD_MS 1000u
#define DEFAULT_BUDGET 500u /* steps kept a period (and so GCS requests a period, at most) */
#define MAX_BUDGET 100000u

static pthread_mutex_t tev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry_gcs_task_event *held; /* BUDGET of them, allocated at the first step */
static uint32_t nheld;
static atomic_uint_fast64_t dropped;	 /* steps past the budget, since the start */
static atomic_bool full;		 /* the budget is spent (or stopped): skip the lock */
static bool stopped;			 /* after the last flush: nothing more is held */
static uint32_t budget = DEFAULT_BUDGET; /* set by ferry__rt_tev_start */
static struct ferry__loop_timer flush_timer;

void ferry__rt_tev_record(const struct ferry__rt_task *t, enum ferry_gcs_task_state state,
			  const struct ferry_node_id *node, const struct ferry_worker_id *worker)
{
	struct ferry_gcs_task_event *e;

	if (atomic_load_explicit(&full, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
		return;
	}
	pthread_mutex_lock(&tev_lock);
	if (!held && budget && !stopped)
		held = ferry__calloc(budget, sizeof(*held));
	if (!held || nheld == budget) {
		atomic_store_explicit(&full, true, memory_order_relaxed);
		pthread_mutex_unlock(&tev_lock);
		atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
		return;
	}
	e = &held[nheld++];
	memset(e, 0, sizeof(*e));
	e->task = t->id;
	e->job = ferry__rt.job;
	e->attempt = t->attempt;
	e->state = state;
	if (node)
		e->node = *node;
	if (worker)
		e->worker = *worker;
	e->time_ms = ferry__wall_ms();
	snprintf(e->name, sizeof(e->name), "%s", t->name);
	pthread_mutex_unlock(&tev_lock);
}

static void sent(void *arg, int status, void *result)
{
	(void)arg;
	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		FLOG_DEBUG(COMP, "a task event was not kept: %s", ferry_strerror(status));
}

/* Send what is held. Loop thread. */
static void flush(void)
{
	struct ferry_gcs_task_event *out;
	uint32_t n;

	pthread_mutex_lock(&tev_lock);
	out = held;
	n = nheld;
	held = NULL;
	nheld = 0;
	atomic_store_explicit(&full, stopped, memory_order_relaxed);
	pthread_mutex_unlock(&tev_lock);
	for (uint32_t i = 0; ferry__rt.gcs && i < n; i++)
		if (ferry_gcs_task_event_add_async(ferry__rt.gcs, &out[i], sent, NULL) < 0)
			break;
	ferry__free(out);
}

static void on_flush_timer(struct ferry__loop_timer *t, int status)
{
	(void)t;
	if (status == 0)
		flush();
}

int ferry__rt_tev_start(void *arg)
{
	const char *env = getenv("FERRY_TASK_EVENTS");
	uint32_t v;

	(void)arg;
	pthread_mutex_lock(&tev_lock);
	stopped = false;
	atomic_store_explicit(&full, false, memory_order_relaxed);
	pthread_mutex_unlock(&tev_lock);
	if (env && ferry__parse_u32(env, MAX_BUDGET, &v) == 0)
		budget = v;
	else if (env)
		FLOG_WARN(COMP, "FERRY_TASK_EVENTS=%.40s is not 0..%u: %u steps a second kept", env,
			  MAX_BUDGET, budget);
	return ferry__loop_timer_start(ferry__rt.loop, &flush_timer, PERIOD_MS, PERIOD_MS,
				       on_flush_timer);
}

int ferry__rt_tev_stop(void *arg)
{
	(void)arg;
	(void)ferry__loop_timer_stop(&flush_timer);
	pthread_mutex_lock(&tev_lock);
	stopped = true; /* the steps of tasks failed by the shutdown itself are not sent */
	pthread_mutex_unlock(&tev_lock);
	flush();
	return 0;
}

uint64_t ferry__rt_tev_dropped(void)
{
	return atomic_load_explicit(&dropped, memory_order_relaxed);
}
