/* SPDX-License-Identifier: Apache-2.0 */
/* The disk helper beside a loop (common/offload.h): jobs run in order off the loop, their done
 * callbacks on the loop with the work's result, and every job's done runs exactly once however
 * the loop and the helper end. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common/loop.h"
#include "common/offload.h"
#include "common/util.h"
#include "ftest.h"
#include "ftest_loop.h"

#define NJOBS 64

struct tjob {
	struct ferry__offload_job job;
	int index;
	pthread_t worked_on; /* the thread work ran on */
	pthread_t done_on;   /* the thread done ran on */
	int status;	     /* what done saw */
	atomic_int dones;    /* how many times done ran */
};

static struct tjob jobs[NJOBS];
static atomic_int worked;	/* jobs whose work ran, in order */
static atomic_int finished;	/* done callbacks */
static atomic_int order_broken; /* a work or done out of order */
static int next_done;		/* the index done expects next */
static atomic_bool hold;	/* work waits while set */
static atomic_int entered;	/* works started while held */

static int work(struct ferry__offload_job *job)
{
	struct tjob *t = FERRY_CONTAINER_OF(job, struct tjob, job);

	if (atomic_load(&hold))
		atomic_fetch_add(&entered, 1);
	while (atomic_load(&hold))
		usleep(100);
	t->worked_on = pthread_self();
	if (atomic_fetch_add(&worked, 1) != t->index)
		atomic_store(&order_broken, 1);
	return t->index % 3 == 0 ? -EIO : t->index;
}

static void done(struct ferry__offload_job *job, int status)
{
	struct tjob *t = FERRY_CONTAINER_OF(job, struct tjob, job);

	t->done_on = pthread_self();
	t->status = status;
	atomic_fetch_add(&t->dones, 1);
	if (status != -ECANCELED && t->index != next_done)
		atomic_store(&order_broken, 1);
	next_done = t->index + 1;
	atomic_fetch_add(&finished, 1);
}

static void reset(void)
{
	for (int i = 0; i < NJOBS; i++) {
		jobs[i] = (struct tjob){.index = i};
		jobs[i].job.work = work;
		jobs[i].job.done = done;
	}
	atomic_store(&worked, 0);
	atomic_store(&finished, 0);
	atomic_store(&order_broken, 0);
	next_done = 0;
}

static bool all_finished(void *arg)
{
	(void)arg;
	return atomic_load(&finished) == NJOBS;
}

static struct ferry__loop *new_loop(void)
{
	struct ferry__loop *loop = NULL;

	ftest_assert_ok(ferry__loop_create(NULL, &loop));
	return loop;
}

/* In order, on the helper; done on the loop's thread with work's result. */
FTEST(jobs_run_in_order_and_complete_on_the_loop)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__offload *off = NULL;

	reset();
	ftest_assert_ok(ferry__offload_create(loop, "test-disk", &off));
	for (int i = 0; i < NJOBS; i++)
		ferry__offload_submit(off, &jobs[i].job);
	run_until(loop, all_finished, NULL);
	ftest_assert_int_eq(atomic_load(&order_broken), 0);
	for (int i = 0; i < NJOBS; i++) {
		ftest_assert_int_eq(atomic_load(&jobs[i].dones), 1);
		ftest_assert_int_eq(jobs[i].status, i % 3 == 0 ? -EIO : i);
		ftest_assert_true(pthread_equal(jobs[i].done_on, pthread_self()));
		ftest_assert_false(pthread_equal(jobs[i].worked_on, pthread_self()));
	}
	ferry__offload_destroy(off);
	ferry__loop_destroy(loop);
}

/* The loop stops with results posted to it, one job running and more queued: destroy ends
 * each job once, with -ECANCELED, and the drain the loop's destroy runs later finds nothing
 * (ASan sees any use of the freed helper). */
FTEST(stop_cancels_each_job_once)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__offload *off = NULL;

	reset();
	ftest_assert_ok(ferry__offload_create(loop, "test-disk", &off));
	for (int i = 0; i < NJOBS / 2; i++)
		ferry__offload_submit(off, &jobs[i].job);
	while (atomic_load(&worked) < NJOBS / 2)
		usleep(100); /* finished, their drain posted to a loop that does not run */
	atomic_store(&hold, true);
	for (int i = NJOBS / 2; i < NJOBS; i++)
		ferry__offload_submit(off, &jobs[i].job);
	while (!atomic_load(&entered))
		usleep(100); /* job NJOBS/2 is held in its work */
	atomic_store(&hold, false);
	ferry__offload_destroy(off);
	ftest_assert_int_eq(atomic_load(&finished), NJOBS);
	for (int i = 0; i < NJOBS; i++) {
		ftest_assert_int_eq(atomic_load(&jobs[i].dones), 1);
		ftest_assert_int_eq(jobs[i].status, -ECANCELED);
	}
	ferry__loop_destroy(loop); /* runs the posted drain, which frees the helper */
	ftest_assert_int_eq(atomic_load(&finished), NJOBS);
}

/* A helper with nothing to do ends at once; NULL is a no-op. */
FTEST(destroy_idle_and_null)
{
	struct ferry__loop *loop = new_loop();
	struct ferry__offload *off = NULL;

	ftest_assert_ok(ferry__offload_create(loop, "test-disk", &off));
	ferry__offload_destroy(off);
	ferry__offload_destroy(NULL);
	ferry__loop_destroy(loop);
}
