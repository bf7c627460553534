/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A post-queue: any thread hands items to a loop's thread, which takes them all at once in one
 * callback; a burst of pushes costs one wake of the loop, and a push never fails for memory.
 * Items are the caller's structs, linked through a pointer field of their own (@link_offset).
 *
 * Thread model: ferry__postq_push() and ferry__postq_kick() from any thread; the callback runs
 * on the loop thread; ferry__postq_take() on the loop thread, or on any one thread once the
 * loop no longer runs.
 */
#ifndef FERRY_COMMON_POSTQ_H
#define FERRY_COMMON_POSTQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/loop.h"

struct ferry__postq;

/*
 * The loop's callback: @list is what was pushed since the last take, oldest first (NULL after
 * a kick that found none); each item's link field points to the next, the last to NULL. The
 * callee owns the items. @status is 0, or -ECANCELED from ferry__loop_destroy() (the loop is
 * going: end the items without the loop).
 */
typedef void (*ferry__postq_fn)(struct ferry__postq *q, void *list, int status);

struct ferry__postq {
	void *data; /* the caller's; the queue never touches it */
	/* Private. */
	struct ferry__loop *loop;     /* whose thread takes */
	ferry__postq_fn fn;	      /* runs there */
	size_t link_offset;	      /* of each item's next pointer */
	_Atomic(void *) head;	      /* pushed, newest first (a Treiber stack) */
	atomic_bool posted;	      /* the drain is on the loop's queue */
	struct ferry__loop_post post; /* that drain */
};

/* ferry__postq_init() - an empty queue whose items go to @fn on @loop's thread. Cannot fail. */
void ferry__postq_init(struct ferry__postq *q, struct ferry__loop *loop, size_t link_offset,
		       ferry__postq_fn fn);

/*
 * ferry__postq_push() - append @item (its link field is overwritten) and have the loop take it
 * soon. Returns 0, or -ECANCELED when the loop's destroy has begun: the item is queued all the
 * same, and only ferry__postq_take() can hand it back then.
 */
int ferry__postq_push(struct ferry__postq *q, void *item);

/* ferry__postq_kick() - have @fn run soon even if nothing is pushed (a "look again" wake,
 * coalesced with pushes). 0 or -ECANCELED as for push. */
int ferry__postq_kick(struct ferry__postq *q);

/* ferry__postq_take() - what is queued, oldest first (see ferry__postq_fn), or NULL. A drain
 * already posted still runs, and then finds what came after. */
void *ferry__postq_take(struct ferry__postq *q);

/* ferry__postq_posted() - a drain is on the loop's queue: @q's memory must stay valid until
 * the loop runs it (or its destroy does). For owners freeing @q once the loop stopped. */
bool ferry__postq_posted(struct ferry__postq *q);

#endif
