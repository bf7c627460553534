/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's store hooks and its object directory: pulls for local misses, and the queue of
 * directory updates (seals, copies, moves, removals) sent to the GCS in batches from the loop.
 *
 * DESIGN (threads, lock order and stop: node.c)
 * - Store hooks: on_miss (a local client waits for an absent object) starts a pull that waits
 *   for the object until on_miss_end (nobody waits for it any more) unwants it; on_sealed
 *   of a primary copy queues "object_add + add_location", of a secondary (a pulled copy: the
 *   object manager runs with node_records_copies) "add_location"; on_removed queues
 *   remove_location. One queue, one batch out at a time, in the store's order: a copy's record never lands
 *   after its removal, and a copy the store never announced (deleted before the store read
 *   its seal notice) is neither added nor removed.
 * - The loop sends what has queued up (up to DIR_BATCH items) as one pipelined batch of async
 *   calls, and the next batch once all its replies are in: under load (many small pulls, each
 *   sealing a copy) one wake-up of the loop and of the GCS serves many updates,
 *   where one blocking call per update cost each pull ~60 us of the 2 cores' time. The
 *   order holds: requests to a shard apply in order, and an object's ops go to one shard.
 * - Pulled copies and removals are gathered for up to copy_batch_us (1 ms) after the oldest
 *   queued one before they go (a loop timer): back-to-back small pulls (one every 20-60 us)
 *   then share one request, one GCS pass and one publication per subscriber. A hook wakes the
 *   loop (one post at a time) only for an empty queue, a primary or a full batch. A copy only adds a source, so listing it 1 ms later costs nothing but a choice of
 *   source; a removal listed 1 ms too long costs a puller one failed attempt (it fails over).
 *   A primary (the object's first record: nothing can pull it before) goes at once, with what
 *   queued before it, and so does everything when ferry__node_sync() asks. A copy removed
 *   while its record still waits is taken back with its removal: neither goes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "node/node_int.h"
#include "transport/objmgr.h"

#define COMP "node"

static void dir_kick(struct ferry__node *node);

static void on_kick_post(void *arg, int status)
{
	struct ferry__node *node = arg;

	pthread_mutex_lock(&node->lock);
	node->kick_posted = false;
	pthread_mutex_unlock(&node->lock);
	if (status == 0)
		dir_kick(node);
}

/* Have the loop thread look at the queue (node->lock held): one post at a time. */
static void dir_wake(struct ferry__node *node)
{
	if (node->kick_posted || !node->loop_live)
		return;
	if (ferry__loop_post(node->loop, on_kick_post, node) == 0)
		node->kick_posted = true;
	else
		FLOG_WARN(COMP, "cannot wake the node's loop: directory updates wait");
}

/* ---- store hooks (the loop thread) ---- */

static void miss_done(void *arg, const struct ferry__objmgr_result *res)
{
	char hex[2 * FERRY_OBJECT_ID_SIZE + 1];

	(void)arg;
	if (res->status < 0) {
		ferry_object_id_to_hex(&res->id, hex, sizeof(hex));
		FLOG_INFO(COMP, "pull of %s for a local get failed: %s", hex,
			  ferry_strerror(-res->status));
	}
}

/* The pull waits for the object (it may not be listed anywhere yet, or its source may die)
 * for as long as the store's miss episode lasts: until on_miss_end. */
static void on_miss(void *arg, const struct ferry_object_id *id)
{
	struct ferry__node *node = arg;

	pthread_mutex_lock(&node->lock);
	if (node->om && !node->stopping)
		(void)ferry__objmgr_pull_until(node->om, id, 0, miss_done, node);
	pthread_mutex_unlock(&node->lock);
}

/* Nobody waits for the object any more: its pull must not go on looking for it. */
static void on_miss_end(void *arg, const struct ferry_object_id *id)
{
	struct ferry__node *node = arg;

	pthread_mutex_lock(&node->lock);
	if (node->om)
		ferry__objmgr_pull_unwant(node->om, id);
	pthread_mutex_unlock(&node->lock);
}

/*
 * A pulled copy removed before its record went: take the record back (node->lock held). The
 * directory never has to hear of a copy that came and went within one batch window (a puller
 * that reads an object once and drops it), which spares the GCS a pass and every location
 * cache a publication. Only while the queue is short, as it is unless the GCS is slow (the
 * thread takes DIR_BATCH at a time): the scan is linear. true: taken back.
 */
static bool take_back_copy(struct ferry__node *node, const struct ferry_object_id *id)
{
	struct dir_item *prev = NULL;

	if (node->queued > 2 * DIR_BATCH)
		return false;
	for (struct dir_item *it = node->queue; it; prev = it, it = it->next) {
		if (it->kind != DIR_COPY || !ferry_object_id_eq(&it->id, id))
			continue;
		if (prev)
			prev->next = it->next;
		else
			node->queue = it->next;
		if (node->queue_tail == it)
			node->queue_tail = prev;
		node->queued--;
		ferry__free(it);
		if (!node->queue) { /* nothing left to send: a sync waiting for it is done */
			node->flush = false;
			if (!node->dir_busy)
				pthread_cond_broadcast(&node->idle_cond);
		}
		return true;
	}
	return false;
}

static void enqueue(struct ferry__node *node, enum dir_kind kind, const struct ferry_object_id *id,
		    uint64_t size, uint32_t metadata_size, struct ferry_gcs_object_place place,
		    const struct ferry_worker_id *owner)
{
	struct dir_item *it = ferry__calloc(1, sizeof(*it));
	bool wake, on_loop;

	if (!it) {
		FLOG_WARN(COMP, "out of memory: a directory update is lost");
		return;
	}
	it->kind = kind;
	it->id = *id;
	it->size = size;
	it->metadata_size = metadata_size;
	it->place = place;
	if (owner)
		it->owner = *owner;
	it->queued_ns = ferry__now_ns();
	pthread_mutex_lock(&node->lock);
	if (kind == DIR_REMOVED && take_back_copy(node, id)) {
		pthread_mutex_unlock(&node->lock);
		ferry__free(it);
		return;
	}
	/* A non-empty queue is either out as a batch (its end looks again) or gathering copies
	 * until a loop timer; only a primary or a full batch cuts that short. So a pulled copy
	 * wakes nobody (see DESIGN). */
	wake = !node->queue || kind == DIR_SEALED || node->queued + 1 >= DIR_BATCH;
	if (node->queue_tail)
		node->queue_tail->next = it;
	else
		node->queue = it;
	node->queue_tail = it;
	node->queued++;
	node->queued_primaries += kind == DIR_SEALED;
	/* The store calls its hooks on the node's loop thread: the batch goes from here. */
	on_loop = node->loop_live && pthread_equal(pthread_self(), node->loop_thread);
	if (wake && !on_loop)
		dir_wake(node);
	pthread_mutex_unlock(&node->lock);
	if (wake && on_loop)
		dir_kick(node);
}

_Static_assert(FERRY__PLASMA_CHECK_MAX == FERRY_GCS_CHECK_MAX, "one content check limit");

static struct ferry_gcs_object_place gcs_place(const struct ferry__plasma_place *p)
{
	return (struct ferry_gcs_object_place){
		.offset = p->offset, .alloc = p->alloc, .check = p->check};
}

static void on_sealed(void *arg, const struct ferry_object_id *id, uint64_t data_size,
		      uint32_t metadata_size, bool primary, const struct ferry_worker_id *owner,
		      const struct ferry__plasma_place *place)
{
	/* The place lets a puller READ the bytes without asking first (RDMA): a large object's
	 * while its pin request is out, a small one's alone, checked by its hash. */
	enqueue(arg, primary ? DIR_SEALED : DIR_COPY, id, data_size, metadata_size,
		gcs_place(place), owner);
}

/* The directory's place for the copy would name memory it left: pullers reading ahead would
 * READ twice (objmgr_rdma.c). Not taken back with a removal, unlike a new copy: the copy was
 * listed before it moved. */
static void on_moved(void *arg, const struct ferry_object_id *id, uint64_t data_size,
		     uint32_t metadata_size, const struct ferry__plasma_place *place)
{
	enqueue(arg, DIR_MOVED, id, data_size, metadata_size, gcs_place(place), NULL);
}

static void on_removed(void *arg, const struct ferry_object_id *id)
{
	enqueue(arg, DIR_REMOVED, id, 0, 0, (struct ferry_gcs_object_place){0}, NULL);
}

/* ---- node threads ---- */

/* How many GCS ops @it takes: object_add + add_location for a primary, else one. */
static size_t dir_nops(const struct dir_item *it)
{
	return it->kind == DIR_SEALED ? 2 : 1;
}

/* The GCS ops for @it into @ops/@shards (dir_nops() of them). */
static size_t dir_ops(struct ferry__node *node, const struct dir_item *it,
		      struct ferry__gcs_op *ops, unsigned *shards)
{
	unsigned shard = ferry_gcs_object_shard(&it->id, ferry__gcs_client_nshards(node->gcs));
	size_t n = 0;

	if (it->kind == DIR_SEALED) {
		/* The owner its creator named in the store. None (a client connected without an
		 * owner, or a nil one): the node owns it, under a worker id equal to the node id
		 * (the GCS refuses a nil owner). An owner that added the object first keeps it
		 * (-EEXIST). The owner's node: this one, where the owner put it. */
		ops[n] = (struct ferry__gcs_op){.type = FERRY__GCS_OP_OBJ_ADD};
		ops[n].obj.id = it->id;
		ops[n].obj.owner_worker = it->owner;
		if (ferry_id_is_nil(it->owner.bytes, sizeof(it->owner.bytes)))
			memcpy(ops[n].obj.owner_worker.bytes, node->id.bytes,
			       sizeof(ops[n].obj.owner_worker.bytes));
		ops[n].obj.owner_node = node->id;
		ops[n].obj.size_bytes = it->size;
		ops[n].obj.metadata_bytes = it->metadata_size;
		shards[n++] = shard;
	}
	ops[n] = (struct ferry__gcs_op){.type = it->kind == DIR_REMOVED
							? FERRY__GCS_OP_OBJ_REMOVE_LOCATION
							: FERRY__GCS_OP_OBJ_ADD_LOCATION};
	ops[n].obj_location.id = it->id;
	ops[n].obj_location.node = node->id;
	ops[n].obj_location.size_bytes = it->kind == DIR_REMOVED ? 0 : it->size;
	ops[n].obj_location.metadata_bytes = it->kind == DIR_REMOVED ? 0 : it->metadata_size;
	ops[n].obj_location.place = it->place;
	shards[n++] = shard;
	return n;
}

/* The outcome of @it from its ops' statuses @st (as dir_ops() laid them out): 0 or -errno. */
static int dir_status(const struct dir_item *it, const int *st)
{
	if (it->kind == DIR_SEALED) {
		if (st[0] < 0 && st[0] != -EEXIST)
			return st[0];
		return st[1] < 0 ? st[1] : 0;
	}
	/* -ENOENT: the object left the directory (its owner freed it): nothing to list or
	 * unlist. */
	return st[0] < 0 && st[0] != -ENOENT ? st[0] : 0;
}

/* Every reply of the batch is in: the first error is kept for ferry__node_sync(), the next batch
 * goes if one is due. Loop thread. */
static void dir_finish(struct dir_batch *b)
{
	struct ferry__node *node = b->node;
	struct dir_item *it, *next;
	size_t n = 0;
	int first = 0, ret;

	for (it = b->items; it; it = next) {
		next = it->next;
		ret = dir_status(it, b->st + n);
		n += dir_nops(it);
		if (ret < 0) {
			FLOG_WARN(COMP, "directory update failed: %s", ferry_strerror(-ret));
			if (!first)
				first = ret;
		}
		ferry__free(it);
	}
	b->items = NULL;
	pthread_mutex_lock(&node->lock);
	if (first < 0 && !node->dir_error)
		node->dir_error = first;
	node->dir_busy--;
	if (!node->queue)
		pthread_cond_broadcast(&node->idle_cond);
	pthread_mutex_unlock(&node->lock);
	dir_kick(node);
}

static void dir_op_done(void *arg, int status, void *result)
{
	struct dir_slot *slot = arg;

	ferry_gcs_free(result);
	slot->b->st[slot->i] = status;
	if (--slot->b->left == 0)
		dir_finish(slot->b);
}

/*
 * Send @items (a detached run of the queue, at most DIR_BATCH) to the GCS, pipelined: requests
 * to one shard apply in order, and an object's ops all go to its shard, so the store's order
 * per object holds. The replies come back to dir_op_done(). Loop thread.
 */
static void dir_send(struct ferry__node *node, struct dir_item *items)
{
	struct dir_batch *b = node->batch;
	size_t n = 0;

	for (struct dir_item *it = items; it; it = it->next)
		n += dir_ops(node, it, b->ops + n, b->shards + n);
	b->items = items;
	b->left = n + 1;
	for (size_t i = 0; i < n; i++) {
		int ret = node->gcs_gone
				  ? -ECANCELED
				  : ferry__gcs_apply_async(node->gcs, b->shards[i], &b->ops[i],
							   dir_op_done, &b->slots[i]);

		if (ret < 0) { /* its callback never comes */
			b->st[i] = ret;
			b->left--;
		}
	}
	if (--b->left == 0)
		dir_finish(b);
}

/* The queue's head waits for company until its gathering window closes (see DESIGN): the
 * deadline in ns, or 0 when what queued goes now. Under node->lock. */
static uint64_t dir_gather_until(const struct ferry__node *node)
{
	uint64_t due;

	if (node->stopping || node->flush || node->queued_primaries || node->queued >= DIR_BATCH)
		return 0;
	due = node->queue->queued_ns + node->opts.copy_batch_us * 1000ull;
	return ferry__now_ns() >= due ? 0 : due;
}

static void on_gather_timer(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		dir_kick(t->data);
}

/* Send what has queued up (at most DIR_BATCH) unless a batch is out or the queue's head still
 * gathers copies. Loop thread. */
static void dir_kick(struct ferry__node *node)
{
	struct dir_item *items, *it;
	uint64_t due;
	size_t n = 1;

	pthread_mutex_lock(&node->lock);
	if (node->dir_busy || !node->queue || node->gcs_gone) { /* stop frees what is left */
		pthread_mutex_unlock(&node->lock);
		return;
	}
	due = dir_gather_until(node);
	if (due) {
		uint64_t ms = (due - ferry__now_ns() + 999999u) / 1000000u;

		pthread_mutex_unlock(&node->lock);
		(void)ferry__loop_timer_start(node->loop, &node->gather_timer, ms ? ms : 1, 0,
					      on_gather_timer);
		return;
	}
	items = node->queue;
	for (it = items;; it = it->next) {
		node->queued_primaries -= it->kind == DIR_SEALED;
		if (!it->next || n == DIR_BATCH)
			break;
		n++;
	}
	node->queue = it->next;
	it->next = NULL;
	if (!node->queue) {
		node->queue_tail = NULL;
		node->flush = false;
	}
	node->queued -= (unsigned)n;
	node->dir_busy++;
	pthread_mutex_unlock(&node->lock);
	dir_send(node, items);
}

int ferry__node_sync(struct ferry__node *node)
{
	int ret;

	/* Pulled copies whose seal notice the object manager holds back reach the store (and
	 * its on_sealed hook, which queues their records) first. Not under node->lock: that
	 * hook takes it. */
	if (node->om)
		(void)ferry__objmgr_flush_notices(node->om);
	pthread_mutex_lock(&node->lock);
	if (node->queue) { /* no gathering for these */
		node->flush = true;
		dir_wake(node);
	}
	while ((node->queue || node->dir_busy) && !node->stopping)
		pthread_cond_wait(&node->idle_cond, &node->lock);
	ret = node->dir_error;
	node->dir_error = 0;
	pthread_mutex_unlock(&node->lock);
	return ret;
}

/* The queue as it stands goes now, and stop waits for its replies (each within the client's
 * timeout): what the store announced before stop reaches the directory. */
void ferry__node_dir_drain(struct ferry__node *node)
{
	pthread_mutex_lock(&node->lock);
	node->stopping = true;
	pthread_cond_broadcast(&node->idle_cond); /* ferry__node_sync() returns */
	if (node->queue)
		dir_wake(node);
	while ((node->queue || node->dir_busy) && node->loop_live)
		pthread_cond_wait(&node->idle_cond, &node->lock);
	pthread_mutex_unlock(&node->lock);
}

void ferry__node_dir_hooks(struct ferry__node *node, struct ferry__plasma_server_opts *so)
{
	so->on_miss = on_miss;
	so->on_miss_end = on_miss_end;
	so->on_sealed = on_sealed;
	so->on_moved = on_moved;
	so->on_removed = on_removed;
	so->hook_arg = node;
}
