/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The post-queue (postq.h): a lock-free hand-off of items to a loop's thread.
 *
 * DESIGN
 * - Producers push onto a Treiber stack (one CAS); the loop swaps the whole stack out (one
 *   exchange) and reverses it into arrival order. There is no pop of single items, so no ABA.
 * - One drain at a time is on the loop's queue, in the queue's own ferry__loop_post (so a push
 *   never allocates and never fails for memory). `posted` says it is there: a push that
 *   finds the stack empty posts the drain unless `posted` was already set. The drain clears
 *   `posted` before it swaps the stack out, so an item pushed around that moment is either in
 *   its swap or finds `posted` clear and posts the next drain: none is left behind. Every
 *   access is sequentially consistent: the order of `posted` and the stack across threads is
 *   what this rests on, and a hand-off costs a wake anyway.
 * - A take outside the drain (a shutdown on the loop thread) leaves `posted` alone: the drain
 *   still on the loop's queue runs later and finds what came after, or nothing.
 */
#include <errno.h>

#include "common/postq.h"

static void **link_of(const struct ferry__postq *q, void *item)
{
	return (void **)((char *)item + q->link_offset);
}

void *ferry__postq_take(struct ferry__postq *q)
{
	void *item = atomic_exchange(&q->head, NULL);
	void *fifo = NULL;

	while (item) { /* newest first: reverse */
		void *next = *link_of(q, item);

		*link_of(q, item) = fifo;
		fifo = item;
		item = next;
	}
	return fifo;
}

static void drain(void *arg, int status)
{
	struct ferry__postq *q = arg;

	atomic_store(&q->posted, false);
	q->fn(q, ferry__postq_take(q), status);
}

void ferry__postq_init(struct ferry__postq *q, struct ferry__loop *loop, size_t link_offset,
		       ferry__postq_fn fn)
{
	q->loop = loop;
	q->fn = fn;
	q->link_offset = link_offset;
	atomic_init(&q->head, NULL);
	atomic_init(&q->posted, false);
	q->post = (struct ferry__loop_post){0};
}

int ferry__postq_kick(struct ferry__postq *q)
{
	int ret;

	if (atomic_exchange(&q->posted, true))
		return 0;
	ret = ferry__loop_post_embedded(q->loop, &q->post, drain, q);
	if (ret < 0)
		atomic_store(&q->posted, false);
	return ret;
}

int ferry__postq_push(struct ferry__postq *q, void *item)
{
	void *old = atomic_load(&q->head);

	do
		*link_of(q, item) = old;
	while (!atomic_compare_exchange_weak(&q->head, &old, item));
	/* Only the push that found it empty wakes: a non-empty stack has its drain coming. */
	return old ? 0 : ferry__postq_kick(q);
}

bool ferry__postq_posted(struct ferry__postq *q)
{
	return atomic_load(&q->posted);
}
