/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Freeing an owner's objects on the other nodes (Ray's owners free every copy): when the last
 * count of an object in a store goes, its owner deletes its own node's copy at once
 * (objects.c), and this module tells the other nodes it has a connection to (nodes.c, and
 * pg.c for its placement groups: where its leases ran, so where its tasks made returns and
 * pulled arguments) in one ObjectsFree per node per loop pass; each deletes its copies,
 * primary or pulled (node/rt_free.c). Without it a task's return made on another node stayed
 * there as a primary nobody referenced, spilled when the store filled, until the disk filled
 * too (-ENOSPC). ferry_shutdown sends what the owner still holds the same way.
 *
 * DESIGN: any thread queues an ID under rt.lock (the drop that forgot the object holds it) and
 * posts one flush to the loop; the flush, on the loop thread, takes the queue and sends. A
 * node the owner has no connection to (none opened, or closed) is not told: its pulled copies
 * stay evictable secondaries; a primary there stays (spilled under pressure).
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/wire.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"
/* IDs per ObjectsFree: 20 bytes each, well under the node's 64 MiB frame cap. */
#define FREE_BATCH 65536

static struct ferry_object_id *queued; /* IDs to free, under rt.lock */
static size_t nqueued, queue_cap;      /* how many, room for */
static bool flush_posted;	       /* a flush is on its way to the loop */

static void send_batch(const struct ferry_object_id *ids, size_t n)
{
	struct ferry__fb_builder fb = {0};
	struct ferry__wire_objects_free m = {.object_ids = ids, .object_ids_count = n};

	if (ferry__wire_objects_free_build(&fb, &m) < 0) {
		FLOG_WARN(COMP, "%zu objects not freed on the other nodes: out of memory", n);
	} else {
		ferry__rt_nodes_send_all(FERRY__WIRE_MSG_OBJECTS_FREE, ferry__fb_builder_data(&fb),
					 ferry__fb_builder_size(&fb));
		/* Placement groups' nodes, on sockets of their own (a node on both hears twice:
		 * its second delete finds nothing). */
		ferry__rt_pg_send_all(FERRY__WIRE_MSG_OBJECTS_FREE, ferry__fb_builder_data(&fb),
				      ferry__fb_builder_size(&fb));
	}
	ferry__fb_builder_fini(&fb);
}

static void flush(void *arg, int status)
{
	struct ferry_object_id *ids;
	size_t n;

	(void)arg;
	pthread_mutex_lock(&ferry__rt.lock);
	ids = queued;
	n = nqueued;
	queued = NULL;
	nqueued = queue_cap = 0;
	flush_posted = false;
	pthread_mutex_unlock(&ferry__rt.lock);
	for (size_t i = 0; status == 0 && i < n; i += FREE_BATCH)
		send_batch(ids + i, n - i < FREE_BATCH ? n - i : FREE_BATCH);
	ferry__free(ids);
}

void ferry__rt_free_queue(const struct ferry_object_id *id)
{
	if (!ferry__rt.loop)
		return;
	if (nqueued == queue_cap) {
		size_t cap = queue_cap ? queue_cap * 2 : 64;
		struct ferry_object_id *more = ferry__realloc(queued, cap * sizeof(*more));

		if (!more) { /* its other nodes' copies stay, evictable or spilled */
			FLOG_WARN(COMP, "an object not freed on the other nodes: out of memory");
			return;
		}
		queued = more;
		queue_cap = cap;
	}
	queued[nqueued++] = *id;
	if (!flush_posted && ferry__loop_post(ferry__rt.loop, flush, NULL) == 0)
		flush_posted = true;
}

void ferry__rt_free_fini(void)
{
	ferry__free(queued);
	queued = NULL;
	nqueued = queue_cap = 0;
	flush_posted = false;
}
