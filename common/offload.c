/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DESIGN
 * - One mutex guards `todo` (submitted, not started), an intrusive FIFO the helper waits on.
 *   A finished job goes to the loop through a post-queue (postq.h), whose drain runs every
 *   finished job's done callback: a burst of jobs costs one wake of the loop, and handing a
 *   result over cannot fail for memory.
 * - Destroy runs after the loop's thread stopped and before the loop is destroyed. It ends
 *   the jobs itself; a drain it finds posted still runs later (the loop's destroy runs it with
 *   -ECANCELED), so the memory is left to that drain, which finds nothing to deliver.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/offload.h"
#include "common/postq.h"

struct ferry__offload {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;			      /* todo gained a job, or stop */
	struct ferry__offload_job *todo, **todo_tail; /* under lock */
	bool stop;				      /* under lock */
	atomic_bool dead;			      /* destroyed: the posted drain frees it */
	struct ferry__postq done;		      /* finished jobs, to the loop */
};

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
static void drain(struct ferry__postq *q, void *list, int status)
{
	struct ferry__offload *off = q->data;

	if (atomic_load(&off->dead)) /* its jobs were ended by destroy, which left it the memory */
		free_offload(off);
	else
		run_done(list, status);
}

static void *helper_main(void *arg)
{
	struct ferry__offload *off = arg;

	pthread_mutex_lock(&off->lock);
	for (;;) {
		struct ferry__offload_job *job = off->todo;
		int ret;

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
		ret = ferry__postq_push(&off->done, job);
		if (ret < 0) /* the loop is going (against the contract): destroy ends the job */
			FLOG_ERROR("common", "offload: the loop refused results: %s",
				   ferry_strerror(ret));
		pthread_mutex_lock(&off->lock);
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
	off->todo_tail = &off->todo;
	atomic_init(&off->dead, false);
	ferry__postq_init(&off->done, loop, offsetof(struct ferry__offload_job, next), drain);
	off->done.data = off;
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
	posted = ferry__postq_posted(&off->done);
	atomic_store(&off->dead, posted);
	run_done(ferry__postq_take(&off->done), -ECANCELED);
	run_done(todo, -ECANCELED);
	if (!posted)
		free_offload(off);
}
