/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DESIGN
 * - One mutex, two intrusive FIFOs: `todo` (submitted, not started) and `done` (finished, not
 *   yet handed to the loop). The helper moves a job from one to the other and, when `done`
 *   was empty, posts one drain to the loop, which runs every finished job's done callback: a
 *   burst of jobs costs one wake of the loop.
 * - A post refused for memory is retried on the helper after a millisecond: a job's done
 *   must not be lost. (A refusal because the loop is being destroyed cannot happen: the
 *   offload is destroyed before its loop, by contract.)
 * - Destroy runs after the loop's thread stopped and before the loop is destroyed. It ends
 *   the jobs itself; a drain it finds posted still runs later (the loop's destroy runs it with
 *   -ECANCELED), so the memory is left to that drain, which finds nothing to deliver.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/offload.h"

struct ferry__offload {
	struct ferry__loop *loop;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;			      /* todo gained a job, or stop */
	struct ferry__offload_job *todo, **todo_tail; /* under lock */
	struct ferry__offload_job *done, **done_tail; /* under lock */
	bool drain_posted;			      /* under lock: a drain is on the loop */
	bool stop;				      /* under lock */
	bool dead;				      /* destroyed: the posted drain frees it */
};

/* The finished jobs; @drained: by the posted drain, which is then no longer out. */
static struct ferry__offload_job *take_done(struct ferry__offload *off, bool drained)
{
	struct ferry__offload_job *list;

	pthread_mutex_lock(&off->lock);
	list = off->done;
	off->done = NULL;
	off->done_tail = &off->done;
	if (drained)
		off->drain_posted = false;
	pthread_mutex_unlock(&off->lock);
	return list;
}

static void run_done(struct ferry__offload_job *list, int cancel)
{
	while (list) {
		struct ferry__offload_job *job = list;

		list = job->next;
		job->next = NULL;
		job->done(job, cancel < 0 ? cancel : job->status);
	}
}

static void free_offload(struct ferry__offload *off)
{
	pthread_cond_destroy(&off->cond);
	pthread_mutex_destroy(&off->lock);
	ferry__free(off);
}

/* Loop thread (or the loop's destroy, with -ECANCELED). */
static void drain(void *arg, int status)
{
	struct ferry__offload *off = arg;
	bool dead;

	pthread_mutex_lock(&off->lock);
	dead = off->dead;
	pthread_mutex_unlock(&off->lock);
	if (dead) /* its jobs were ended by destroy, which left the memory to this drain */
		free_offload(off);
	else
		run_done(take_done(off, true), status);
}

static void post_drain(struct ferry__offload *off)
{
	for (;;) {
		int ret = ferry__loop_post(off->loop, drain, off);

		if (ret != -ENOMEM) {
			if (ret <
			    0) /* the loop is going (against the contract): destroy ends them */
				FLOG_ERROR("common", "offload: the loop refused results: %s",
					   ferry_strerror(ret));
			return;
		}
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
}

static void *helper_main(void *arg)
{
	struct ferry__offload *off = arg;

	pthread_mutex_lock(&off->lock);
	for (;;) {
		struct ferry__offload_job *job = off->todo;
		bool post;

		if (!job) {
			if (off->stop)
				break;
			pthread_cond_wait(&off->cond, &off->lock);
			continue;
		}
		off->todo = job->next;
		if (!off->todo)
			off->todo_tail = &off->todo;
		pthread_mutex_unlock(&off->lock);

		job->status = job->work(job);

		pthread_mutex_lock(&off->lock);
		job->next = NULL;
		*off->done_tail = job;
		off->done_tail = &job->next;
		post = !off->drain_posted;
		off->drain_posted = true;
		if (post) {
			pthread_mutex_unlock(&off->lock);
			post_drain(off);
			pthread_mutex_lock(&off->lock);
		}
	}
	pthread_mutex_unlock(&off->lock);
	return NULL;
}

int ferry__offload_create(struct ferry__loop *loop, const char *name, struct ferry__offload **out)
{
	struct ferry__offload *off = ferry__calloc(1, sizeof(*off));
	int ret;

	if (!off)
		return -ENOMEM;
	off->loop = loop;
	off->todo_tail = &off->todo;
	off->done_tail = &off->done;
	pthread_mutex_init(&off->lock, NULL);
	pthread_cond_init(&off->cond, NULL);
	ret = pthread_create(&off->thread, NULL, helper_main, off);
	if (ret) {
		FLOG_ERROR("common", "offload: cannot start the %s thread: %s", name,
			   ferry_strerror(-ret));
		pthread_cond_destroy(&off->cond);
		pthread_mutex_destroy(&off->lock);
		ferry__free(off);
		return -ret;
	}
	pthread_setname_np(off->thread, name);
	*out = off;
	return 0;
}

void ferry__offload_submit(struct ferry__offload *off, struct ferry__offload_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&off->lock);
	*off->todo_tail = job;
	off->todo_tail = &job->next;
	pthread_cond_signal(&off->cond);
	pthread_mutex_unlock(&off->lock);
}

void ferry__offload_destroy(struct ferry__offload *off)
{
	struct ferry__offload_job *todo;
	bool posted;

	if (!off)
		return;
	pthread_mutex_lock(&off->lock);
	off->stop = true;
	todo = off->todo; /* not started: never will be */
	off->todo = NULL;
	off->todo_tail = &off->todo;
	pthread_cond_signal(&off->cond);
	pthread_mutex_unlock(&off->lock);
	pthread_join(off->thread, NULL);
	pthread_mutex_lock(&off->lock);
	posted = off->drain_posted;
	off->dead = posted;
	pthread_mutex_unlock(&off->lock);
	run_done(take_done(off, false), -ECANCELED);
	run_done(todo, -ECANCELED);
	if (!posted)
		free_offload(off);
}
