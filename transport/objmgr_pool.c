/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager's pull threads as a pool that grows when pulls queue and shrinks when
 * they stop: an idle node runs no pull thread (issue 22: at most 4 threads when idle).
 *
 * DESIGN
 * - Slots: opts.threads of them, each NONE (never started, or joined), RUNNING, or EXITED (its
 *   thread left and waits to be joined). All state is under om->lock.
 * - Growth: ferry__objmgr_enqueue() calls grow(): while more pulls are queued than threads
 *   wait for work, and a slot is free, a thread starts (an EXITED slot's thread is joined
 *   first; it has left already, so the join does not wait). A thread counts as free (nidle)
 *   from its start until it takes a pull, and again once it is done with it.
 * - Shrinking: a thread that waited thread_idle_ms without work leaves, unless a pull is parked
 *   (objmgr_wait.c): a parked pull needs a thread to wake it when due, and the last thread
 *   sees it under the same lock, so one always stays for it.
 * - Stop: stopping is set; every started slot is joined. A thread started during stop (a pull
 *   queued by a late location event) is joined too: the loop runs until no slot is started.
 *   Queued pulls are taken by the threads, which end them -ECANCELED; if no thread runs while
 *   some are queued, stop starts one for them.
 */
#include <errno.h>
#include <pthread.h>

#include "common/alloc.h"
#include "common/log.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"

int ferry__objmgr_pool_init(struct ferry__objmgr *om)
{
	om->pullers = ferry__calloc(om->opts.threads, sizeof(*om->pullers));
	if (!om->pullers)
		return -ENOMEM;
	for (unsigned i = 0; i < om->opts.threads; i++)
		om->pullers[i].om = om;
	return 0;
}

/* Start a thread in a free slot (om->lock held). 0, -EAGAIN (no free slot) or -errno. */
static int start_one(struct ferry__objmgr *om)
{
	struct ferry__objmgr_puller *s = NULL;
	int ret;

	for (unsigned i = 0; i < om->opts.threads && !s; i++)
		if (om->pullers[i].state != FERRY__PULLER_RUNNING)
			s = &om->pullers[i];
	if (!s)
		return -EAGAIN;
	if (s->state == FERRY__PULLER_EXITED)
		pthread_join(s->thread, NULL); /* it has left: no wait, and no lock taken */
	s->state = FERRY__PULLER_NONE;
	ret = -pthread_create(&s->thread, NULL, ferry__objmgr_pull_thread, s);
	if (ret < 0)
		return ret;
	s->state = FERRY__PULLER_RUNNING;
	om->nrunning++;
	om->nidle++; /* counted free until it takes a pull: one thread per queued pull */
	return 0;
}

void ferry__objmgr_pool_grow(struct ferry__objmgr *om)
{
	/* Not while stopping: stop joins the slots without the lock, and starts what it needs. */
	while (!om->stopping && om->nqueued > om->nidle && om->nrunning < om->opts.threads) {
		int ret = start_one(om);

		if (ret < 0) {
			/* The running threads take the queue in turn; with none, a later queue
			 * or stop tries again. */
			if (ret != -EAGAIN)
				FLOG_WARN(COMP, "cannot start a pull thread: %s",
					  ferry_strerror(-ret));
			return;
		}
	}
}

/* A started slot (RUNNING or EXITED) to join, or NULL. om->lock held. */
static struct ferry__objmgr_puller *started_slot(struct ferry__objmgr *om)
{
	for (unsigned i = 0; i < om->opts.threads; i++)
		if (om->pullers[i].state != FERRY__PULLER_NONE)
			return &om->pullers[i];
	return NULL;
}

void ferry__objmgr_pool_stop(struct ferry__objmgr *om)
{
	struct ferry__objmgr_puller *s;

	if (!om->pullers)
		return;
	pthread_mutex_lock(&om->lock);
	for (;;) {
		if (om->queue && !om->nrunning)
			(void)start_one(om);
		s = started_slot(om);
		if (!s)
			break;
		pthread_mutex_unlock(&om->lock);
		pthread_join(s->thread, NULL);
		pthread_mutex_lock(&om->lock);
		s->state = FERRY__PULLER_NONE; /* it counted itself out as it left */
	}
	pthread_mutex_unlock(&om->lock);
}

void ferry__objmgr_pool_free(struct ferry__objmgr *om)
{
	ferry__free(om->pullers);
	om->pullers = NULL;
}
