/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A helper thread beside a loop, for work that must not stall the loop's sockets: hashing a
 * file, writing a large buffer to disk. Jobs run one at a time, in the order given, on the
 * helper; each job's done callback then runs on the loop thread with the work's result.
 *
 * Jobs are the caller's memory (embedded in its own state): submitting cannot fail, and done
 * runs exactly once per submitted job: on the loop, or with -ECANCELED from
 * ferry__offload_destroy() for jobs not delivered by then.
 */
#ifndef FERRY_COMMON_OFFLOAD_H
#define FERRY_COMMON_OFFLOAD_H

#include "common/loop.h"

struct ferry__offload;

struct ferry__offload_job {
	int (*work)(struct ferry__offload_job *job);		  /* helper thread: 0 or -errno */
	void (*done)(struct ferry__offload_job *job, int status); /* loop: work's result */
	struct ferry__offload_job *next;			  /* private */
	int status;						  /* private */
};

/* ferry__offload_create() - start the helper thread (named @name, at most 15 characters) whose
 * results go to @loop. 0, -ENOMEM, -errno of pthread_create. */
int ferry__offload_create(struct ferry__loop *loop, const char *name, struct ferry__offload **out);

/* ferry__offload_submit() - run @job->work on the helper after the jobs before it, then
 * @job->done on the loop. Any thread. @job stays untouched by the caller until done. */
void ferry__offload_submit(struct ferry__offload *off, struct ferry__offload_job *job);

/*
 * ferry__offload_destroy() - let the running job finish, join the helper, and call done with
 * -ECANCELED (on this thread) for every job not delivered to the loop yet. Call it when the
 * loop no longer runs (its thread joined) and before ferry__loop_destroy(): the helper posts
 * to the loop until it is joined. NULL is a no-op.
 */
void ferry__offload_destroy(struct ferry__offload *off);

#endif
