/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node daemon's body: compose the plasma store, the object manager and a GCS client;
 * register, heartbeat, keep the object directory in step with the store.
 *
 * DESIGN
 * - Threads: the node's loop thread (ferry-node-loop) runs the GCS client (connected on the
 *   loop, no thread of its own), the heartbeat (a loop timer: ferry_gcs_node_beat_async every
 *   heartbeat_ms, sized to the cluster by the alive count its reply carries, or instead a load
 *   report when the node's load changed or a restarted GCS asked for it; one message a beat,
 *   and none while the last one's reply is due; a beat answered -ENOENT registers the node
 *   again, same ID and address, unless the GCS declared it dead: then it stops) and the
 *   directory (async GCS calls, below), and the plasma store (plasma/server.h, on the loop it
 *   is given), whose hooks are plain calls on that thread. The object manager has its own loop
 *   (transport/objmgr.h) for now.
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
 * - Lock order: node->lock, then the object manager's lock (on_miss calls into it holding
 *   node->lock so that stop can clear node->om under the same lock).
 * - Stop: the queue drains (its replies awaited), then the object manager stops (its pulls
 *   end), the loop thread leaves and the stopping thread, the loop's owner now, destroys the
 *   GCS client (its subscription callbacks end), quiets the store's spill and destroys the loop
 *   (the store's connections close with it); then the object manager's memory and the store
 *   (its socket is unlinked and its memory unmapped).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "common/alloc.h"
#include "common/loop.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/client.h"
#include "gcs/liveness.h"
#include "node/node.h"
#include "node/resources.h"
#include "plasma/server.h"
#include "transport/objmgr.h"

#define COMP "node"

/* Directory items the thread sends at once, pipelined (see DESIGN). */
#define DIR_BATCH 64

enum dir_kind {
	DIR_SEALED = 1,	 /* a primary copy sealed: object_add + add_location */
	DIR_REMOVED = 2, /* a copy left: remove_location */
	DIR_COPY = 3,	 /* a secondary (pulled) copy sealed: add_location */
	DIR_MOVED = 4,	 /* a listed copy read back from spill: add_location (its new place) */
};

struct dir_item {
	enum dir_kind kind;		     /* what to tell the GCS */
	uint64_t queued_ns;		     /* when (CLOCK_MONOTONIC) */
	struct ferry_object_id id;	     /* the object */
	uint64_t size;			     /* its data bytes */
	uint32_t metadata_size;		     /* its metadata bytes */
	struct ferry_gcs_object_place place; /* where the store put it (sealed kinds) */
	struct ferry_worker_id owner;	     /* its owner (DIR_SEALED); nil: this node */
	struct dir_item *next;		     /* queue */
};

struct dir_batch;

struct ferry__node {
	struct ferry__node_opts opts;	       /* copied; strings point into this struct */
	uint8_t token[256];		       /* cluster token */
	char socket_path[108];		       /* the store's socket */
	char address[FERRY__NODE_ADDR_MAX];    /* advertised */
	char ip[FERRY__NET_IP_MAX];	       /* served on and advertised (node_addr.c) */
	struct ferry_node_id id;	       /* this node */
	struct ferry__plasma_server *store;    /* the embedded store */
	struct ferry_gcs_client *gcs;	       /* GCS client, on loop */
	struct ferry__objmgr *om;	       /* object manager; NULL before start / after stop */
	struct ferry__loop *loop;	       /* the node's loop: GCS client, beats, directory */
	pthread_t loop_thread;		       /* runs loop */
	bool loop_started;		       /* loop_thread was created */
	bool loop_live;			       /* posts allowed; under lock */
	bool kick_posted;		       /* a dir_kick is posted; under lock */
	bool gcs_gone;			       /* the client is destroyed (loop thread) */
	bool beat_busy;			       /* a beat awaits its reply (loop thread) */
	uint64_t next_beat_ms;		       /* monotonic: no beat before (loop thread) */
	struct ferry__loop_timer beat_timer;   /* every heartbeat_ms */
	struct ferry__loop_timer gather_timer; /* the gathered copies are due */
	pthread_mutex_t lock;		       /* below, and om for the hooks */
	pthread_cond_t idle_cond;	       /* sync's and stop's: queue drained */
	struct dir_item *queue;		       /* directory updates to make */
	struct dir_item *queue_tail;	       /* last */
	unsigned queued;		       /* items in the queue */
	unsigned queued_primaries;	       /* of those, DIR_SEALED */
	bool flush;			       /* ferry__node_sync: send what is queued now */
	unsigned dir_busy;		       /* a batch is out (0 or 1) */
	int dir_error;			       /* first error since the last sync */
	bool stopping;			       /* no new beats; the queue drains at once */
	struct dir_batch *batch;	       /* the batch out (loop thread) */
	struct ferry__res_set total;	       /* what the node has (node/resources.h) */
	struct ferry__res_set avail;	       /* what is free; under lock */
	uint32_t queue_length;		       /* tasks queued; under lock */
	uint64_t mean_task_us;		       /* mean task time; under lock */
	bool load_changed;		       /* a report is due; under lock */
	uint64_t load_version;		       /* of the last report; under lock */
	uint32_t cluster_nodes;		       /* alive, as the last beat reply said (loop) */
	bool reregistering;		       /* a register after -ENOENT is out (loop) */
	bool declared_dead;		       /* the GCS declared us dead: no more beats (loop) */
};

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

/* The GCS requests of the batch out (one at a time, allocated once at start). */
struct dir_slot {
	struct dir_batch *b; /* owner */
	unsigned i;	     /* the op's index */
};
struct dir_batch {
	struct ferry__node *node;		 /* owner */
	struct dir_item *items;			 /* the batch's items, detached */
	size_t left;				 /* replies still due, +1 while sending */
	struct ferry__gcs_op ops[2 * DIR_BATCH]; /* two for a primary, else one */
	unsigned shards[2 * DIR_BATCH];		 /* each op's shard */
	int st[2 * DIR_BATCH];			 /* each op's result */
	struct dir_slot slots[2 * DIR_BATCH];	 /* each op's callback argument */
};

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

void ferry__node_set_load(struct ferry__node *node, const struct ferry__res_set *avail,
			  uint32_t queue_length, uint64_t mean_task_us)
{
	pthread_mutex_lock(&node->lock);
	for (uint32_t i = 0; avail && i < avail->count; i++) {
		const struct ferry__res *r = &avail->items[i];

		if (ferry__res_set_get(&node->total, r->name) >= 0 &&
		    ferry__res_set_get(&node->avail, r->name) != r->amount) {
			ferry__res_set_put(&node->avail, r->name, r->amount);
			node->load_changed = true;
		}
	}
	if (node->queue_length != queue_length || node->mean_task_us != mean_task_us)
		node->load_changed = true;
	node->queue_length = queue_length;
	node->mean_task_us = mean_task_us;
	pthread_mutex_unlock(&node->lock);
}

static void beat_failed(int status)
{
	if (status < 0 && status != -ETIMEDOUT && status != -ECANCELED)
		FLOG_WARN(COMP, "heartbeat refused: %s", ferry_strerror(-status));
}

static void reregister(struct ferry__node *node);

static void on_load_reply(void *arg, int status, void *result)
{
	struct ferry__node *node = arg;

	ferry_gcs_free(result);
	if (status < 0) {
		pthread_mutex_lock(&node->lock);
		node->load_changed = true; /* try again with the next beat */
		pthread_mutex_unlock(&node->lock);
	}
	node->beat_busy = false;
	if (status == -ENOENT && !node->gcs_gone)
		reregister(node);
	else
		beat_failed(status);
}

/* Send the node's load (a heartbeat too). Called with node->lock held; drops it. Loop thread. */
static void report_load(struct ferry__node *node)
{
	struct ferry_gcs_resource_load res[FERRY__RES_MAX];
	struct ferry_gcs_node_load load = {0};
	int ret;

	for (uint32_t i = 0; i < node->total.count; i++)
		res[i] = (struct ferry_gcs_resource_load){
			node->total.items[i].name, node->total.items[i].amount,
			ferry__res_set_get(&node->avail, node->total.items[i].name)};
	load.id = node->id;
	load.version = ++node->load_version;
	load.queue_length = node->queue_length;
	load.mean_task_us = node->mean_task_us;
	load.nresources = node->total.count;
	load.resources = res;
	node->load_changed = false;
	pthread_mutex_unlock(&node->lock);
	/* The message is built before the call returns: @load may live on this stack. */
	ret = ferry_gcs_node_report_load_async(node->gcs, &load, on_load_reply, node);
	if (ret < 0)
		on_load_reply(node, ret, NULL);
}

static void fill_info(struct ferry__node *node, struct ferry_gcs_node_info *info)
{
	info->id = node->id;
	info->address = node->address;
	info->cpu = (double)ferry__res_set_get(&node->total, "CPU") / FERRY_GCS_RESOURCE_UNIT;
	info->gpu = (double)ferry__res_set_get(&node->total, "GPU") / FERRY_GCS_RESOURCE_UNIT;
	info->memory_bytes =
		(double)(ferry__res_set_get(&node->total, "memory") / FERRY_GCS_RESOURCE_UNIT);
	info->store_capacity_bytes = ferry__objmgr_store_capacity(node->om);
}

/* The answer to registering again: the GCS knows us again (its load goes with the next beat),
 * or it had declared us dead, which is final: a node ID never comes back. Loop thread. */
static void on_reregister_reply(void *arg, int status, void *result)
{
	struct ferry__node *node = arg;

	ferry_gcs_free(result);
	node->reregistering = false;
	if (status >= 0) {
		FLOG_WARN(COMP, "the GCS did not know this node (restarted without a WAL?): "
				"registered again with the same ID and address");
		pthread_mutex_lock(&node->lock);
		node->load_changed = true;
		pthread_mutex_unlock(&node->lock);
	} else if (status == -EEXIST && !node->declared_dead) {
		node->declared_dead = true;
		FLOG_ERROR(COMP, "the GCS declared this node dead (node IDs never come back): "
				 "stopping; start a new node to rejoin");
		if (node->opts.on_declared_dead)
			node->opts.on_declared_dead(node->opts.dead_arg);
	} else if (status < 0) {
		beat_failed(status);
	}
}

/* A heartbeat got -ENOENT: an in-memory GCS that restarted forgot us (register again, same ID
 * and address), or the GCS declared us dead (the register says -EEXIST). Loop thread. */
static void reregister(struct ferry__node *node)
{
	struct ferry_gcs_node_info info = {0};
	int ret;

	if (node->reregistering || node->declared_dead)
		return;
	fill_info(node, &info);
	node->reregistering = true;
	ret = ferry_gcs_node_register_async(node->gcs, &info, on_reregister_reply, node);
	if (ret < 0)
		on_reregister_reply(node, ret, NULL);
}

static void on_heartbeat_reply(void *arg, int status, void *result)
{
	struct ferry__node *node = arg;
	struct ferry_gcs_beat_info *info = result;

	if (info)
		node->cluster_nodes = info->alive_nodes;
	ferry_gcs_free(result);
	if (status == -ENOENT && !node->gcs_gone) {
		node->beat_busy = false;
		reregister(node);
		return;
	}
	if (status == 0 && !node->gcs_gone) { /* the GCS holds no load of ours (it restarted) */
		pthread_mutex_lock(&node->lock);
		report_load(node);
		return;
	}
	beat_failed(status);
	node->beat_busy = false;
}

/* One beat: the load when it changed (or the GCS asked for it), else a bare heartbeat. A beat
 * whose reply has not come yet (a slow GCS) makes the next one wait: one message a beat at most,
 * as before. Loop thread. */
static void on_beat_timer(struct ferry__loop_timer *t, int status)
{
	struct ferry__node *node = t->data;
	uint64_t now = ferry__now_ms();
	int ret;

	if (status < 0 || node->beat_busy || node->gcs_gone || node->reregistering ||
	    node->declared_dead || now < node->next_beat_ms)
		return;
	pthread_mutex_lock(&node->lock);
	if (node->stopping) {
		pthread_mutex_unlock(&node->lock);
		return;
	}
	/* The timer ticks every heartbeat_ms; a large cluster beats less often, as the GCS
	 * expects (gcs/liveness.h), sized by the count the last beat's reply carried (the node
	 * follows no membership channel). Half a tick early counts, so a small cluster beats each
	 * tick. */
	node->next_beat_ms =
		now + ferry__gcs_beat_interval_ms(node->opts.heartbeat_ms, node->cluster_nodes) -
		node->opts.heartbeat_ms / 2;
	node->beat_busy = true;
	if (node->load_changed) {
		report_load(node);
		return;
	}
	pthread_mutex_unlock(&node->lock);
	ret = ferry_gcs_node_beat_async(node->gcs, &node->id, on_heartbeat_reply, node);
	if (ret < 0)
		on_heartbeat_reply(node, ret, NULL);
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

/* ---- start / stop ---- */

/* The node id from @path (hex), or a new one written there; a new one if @path is NULL. */
static int load_node_id(const char *path, struct ferry_node_id *id)
{
	char hex[2 * FERRY_UNIQUE_ID_SIZE + 2];
	FILE *f;

	if (path && (f = fopen(path, "re"))) {
		size_t n = fread(hex, 1, sizeof(hex) - 1, f);

		fclose(f);
		hex[n] = '\0';
		if (n && hex[n - 1] == '\n')
			hex[n - 1] = '\0';
		if (ferry_node_id_from_hex(hex, id) == 0)
			return 0;
		FLOG_ERROR(COMP, "node id file %s does not hold a node id", path);
		return -EINVAL;
	}
	ferry_node_id_random(id);
	if (!path)
		return 0;
	ferry_node_id_to_hex(id, hex, sizeof(hex));
	f = fopen(path, "we");
	if (!f || fprintf(f, "%s\n", hex) < 0 || fclose(f) != 0) {
		FLOG_ERROR(COMP, "cannot write node id file %s", path);
		return -EIO;
	}
	return 0;
}

static int check_opts(const struct ferry__node_opts *o)
{
	if (!o || !o->gcs_address || !o->token || !o->token_len || o->token_len > 256) {
		FLOG_ERROR(COMP, "a GCS address and a token of 1..256 bytes are required");
		return -EINVAL;
	}
	if (o->socket_path && strlen(o->socket_path) >= 108) {
		FLOG_ERROR(COMP, "store socket path too long");
		return -EINVAL;
	}
	if (o->transport != FERRY__NODE_TRANSPORT_AUTO &&
	    o->transport != FERRY__NODE_TRANSPORT_TCP &&
	    o->transport != FERRY__NODE_TRANSPORT_RDMA) {
		FLOG_ERROR(COMP, "unknown transport %d", (int)o->transport);
		return -EINVAL;
	}
	if (o->copy_batch_us > FERRY__NODE_MAX_COPY_BATCH_US) {
		FLOG_ERROR(COMP, "copy record batching %u us: at most 1 s", o->copy_batch_us);
		return -EINVAL;
	}
	return 0;
}

static void set_opts(struct ferry__node *node, const struct ferry__node_opts *o)
{
	static atomic_uint counter;
	const char *tmp = getenv("TMPDIR");

	node->opts = *o;
	memcpy(node->token, o->token, o->token_len);
	node->opts.token = node->token;
	if (o->socket_path)
		snprintf(node->socket_path, sizeof(node->socket_path), "%s", o->socket_path);
	else
		snprintf(node->socket_path, sizeof(node->socket_path), "%s/ferry-node-%d-%u.sock",
			 tmp && *tmp && strlen(tmp) < 60 ? tmp : "/tmp", (int)getpid(),
			 atomic_fetch_add(&counter, 1));
	node->opts.socket_path = node->socket_path;
	if (!node->opts.heartbeat_ms)
		node->opts.heartbeat_ms = 100;
	if (!node->opts.copy_batch_us)
		node->opts.copy_batch_us = 1000;
}

static int start_store(struct ferry__node *node)
{
	struct ferry__plasma_server_opts so = {0};

	so.socket_path = node->socket_path;
	so.memory_bytes = node->opts.memory_bytes;
	so.spill_dir = node->opts.spill_dir;
	so.store_flags = node->opts.store_flags;
	so.on_miss = on_miss;
	so.on_miss_end = on_miss_end;
	so.on_sealed = on_sealed;
	so.on_moved = on_moved;
	so.on_removed = on_removed;
	so.hook_arg = node;
	/* Only pullers that READ from this store use the checks (objmgr_rdma.c): a node that
	 * cannot serve RDMA does not hash every small object it seals. */
	so.content_checks = node->opts.transport != FERRY__NODE_TRANSPORT_TCP;
	so.loop = node->loop;
	return ferry__plasma_server_create(&so, &node->store);
}

static void *loop_main(void *arg)
{
	struct ferry__node *node = arg;

	ferry__loop_thread_run(node->loop, "ferry-node-loop", COMP);
	return NULL;
}

/* The node's loop: the store and the GCS client attach to it before its thread starts. */
static int create_loop(struct ferry__node *node)
{
	node->beat_timer.data = node;
	node->gather_timer.data = node;
	return ferry__loop_create(NULL, &node->loop);
}

/*
 * The GCS client on the node's loop, and the loop's thread. The client connects in the
 * background; the node waits for shard 0 (a read of one KV key), as the address it serves on
 * is chosen from that connection's (node_addr.c): a refused token or an absent GCS fails the
 * start here, within the client's timeout.
 */
static int start_loop_and_gcs(struct ferry__node *node)
{
	struct ferry_gcs_client_opts go = {0};
	const char *addrs[1] = {node->opts.gcs_address};
	int ret;

	go.addresses = addrs;
	go.naddresses = 1;
	go.token = node->token;
	go.token_len = node->opts.token_len;
	ret = ferry__gcs_client_connect_on(node->loop, &go, &node->gcs);
	if (ret < 0)
		return ret;
	ret = -pthread_create(&node->loop_thread, NULL, loop_main, node);
	if (ret < 0)
		return ret;
	node->loop_started = true;
	pthread_mutex_lock(&node->lock);
	node->loop_live = true;
	pthread_mutex_unlock(&node->lock);
	ret = ferry_gcs_kv_exists(node->gcs, "ferry", 5, "node", 4);
	if (ret < 0)
		FLOG_ERROR(COMP, "GCS %s not reached: %s", node->opts.gcs_address,
			   ferry_strerror(-ret));
	return ret < 0 ? ret : 0;
}

static int start_objmgr(struct ferry__node *node)
{
	struct ferry__objmgr_opts oo = {0};
	struct ferry__objmgr *om;
	int ret;

	oo.store_socket = node->socket_path;
	oo.gcs = node->gcs;
	oo.node_id = node->id;
	oo.token = node->token;
	oo.token_len = node->opts.token_len;
	oo.ip = node->ip;
	oo.port = node->opts.port;
	oo.transports = FERRY_GCS_TRANSPORT_TCP | (node->opts.no_shm ? 0 : FERRY_GCS_TRANSPORT_SHM);
	/* auto: RDMA where this host has a device for the address (the object manager warns when
	 * one exists and does not serve it); on a host with no RDMA device at all, as most are,
	 * that is no news: said at info. rdma: a start without it fails. */
	if (node->opts.transport == FERRY__NODE_TRANSPORT_AUTO && !ferry__net_rdma_devices("/sys"))
		FLOG_INFO(COMP, "no RDMA device on this host: pulls use TCP/shm");
	else if (node->opts.transport != FERRY__NODE_TRANSPORT_TCP)
		oo.transports |= FERRY_GCS_TRANSPORT_RDMA;
	if (node->opts.transport == FERRY__NODE_TRANSPORT_AUTO)
		oo.optional = FERRY_GCS_TRANSPORT_RDMA;
	oo.timeout_ms = node->opts.pull_timeout_ms;
	oo.rdma_port = node->opts.rdma_port;
	oo.rdma_busy_poll = node->opts.rdma_busy_poll;
	oo.spin_us = node->opts.spin_us;
	oo.notice_hold_ms = node->opts.notice_hold_ms;
	oo.max_queued_bytes = node->opts.max_queued_bytes;
	oo.stall_timeout_ms = node->opts.stall_timeout_ms;
	oo.max_bytes_in_flight = node->opts.max_bytes_in_flight;
	oo.node_records_copies = true;
	ret = ferry__objmgr_create(&oo, &om);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&node->lock);
	node->om = om;
	pthread_mutex_unlock(&node->lock);
	ret = ferry__objmgr_address(om, node->address, sizeof(node->address));
	return ret < 0 ? ret : 0;
}

/* The totals (the store's capacity known by now); everything is free, no task queued yet. The
 * first report goes with the first beat; its version starts at the wall clock (us), so a node
 * restarted under the same ID still reports newer versions than before. */
static int find_resources(struct ferry__node *node)
{
	struct ferry__res_opts ro = {0};
	int ret;

	ro.num_cpus = node->opts.num_cpus;
	ro.num_gpus = node->opts.num_gpus;
	ro.custom = node->opts.resources;
	ro.store_bytes = ferry__objmgr_store_capacity(node->om);
	ret = ferry__res_node_totals(&ro, &node->total);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&node->lock);
	node->avail = node->total;
	node->load_changed = true;
	node->load_version = ferry__wall_ms() * 1000;
	pthread_mutex_unlock(&node->lock);
	return 0;
}

static void start_beats(void *arg, int status)
{
	struct ferry__node *node = arg;

	if (status == 0)
		(void)ferry__loop_timer_start(node->loop, &node->beat_timer,
					      node->opts.heartbeat_ms, node->opts.heartbeat_ms,
					      on_beat_timer);
}

static int register_node(struct ferry__node *node)
{
	struct ferry_gcs_node_info info = {0};
	int ret;

	ret = find_resources(node);
	if (ret < 0)
		return ret;
	fill_info(node, &info);
	ret = ferry_gcs_node_register(node->gcs, &info);
	if (ret < 0) {
		FLOG_ERROR(COMP, "node registration failed: %s", ferry_strerror(-ret));
		return ret;
	}
	ferry__node_check_addresses(node->gcs, &node->id, node->address);
	return ferry__loop_post(node->loop, start_beats, node);
}

int ferry__node_start(const struct ferry__node_opts *opts, struct ferry__node **out)
{
	struct ferry__node *node;
	int ret = check_opts(opts);

	if (ret < 0)
		return ret;
	node = ferry__calloc(1, sizeof(*node));
	if (!node)
		return -ENOMEM;
	set_opts(node, opts);
	pthread_mutex_init(&node->lock, NULL);
	pthread_cond_init(&node->idle_cond, NULL);
	node->batch = ferry__calloc(1, sizeof(*node->batch));
	if (!node->batch) {
		ferry__node_stop(node);
		return -ENOMEM;
	}
	node->batch->node = node;
	for (unsigned i = 0; i < 2 * DIR_BATCH; i++)
		node->batch->slots[i] = (struct dir_slot){node->batch, i};
	ret = load_node_id(opts->node_id_file, &node->id);
	if (ret == 0)
		ret = create_loop(node);
	if (ret == 0)
		ret = start_store(node);
	if (ret == 0)
		ret = start_loop_and_gcs(node);
	if (ret == 0)
		ret = ferry__node_choose_ip(node->gcs, &node->opts, node->ip, sizeof(node->ip));
	if (ret == 0)
		ret = start_objmgr(node);
	if (ret == 0)
		ret = register_node(node);
	if (ret < 0) {
		ferry__node_stop(node); /* undoes what started: each part is NULL/0 otherwise */
		return ret;
	}
	*out = node;
	return 0;
}

/* The queue as it stands goes now, and stop waits for its replies (each within the client's
 * timeout): what the store announced before stop reaches the directory. */
static void drain_directory(struct ferry__node *node)
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

/* The loop thread leaves; this thread then owns the loop and ends the client on it (its
 * requests' callbacks run here, with -ECANCELED), then the loop: the store's connections close
 * with it, each client cleaned up against the store, which is freed after. */
static void stop_loop(struct ferry__node *node)
{
	if (node->loop_started) {
		ferry__loop_stop(node->loop);
		pthread_join(node->loop_thread, NULL);
	}
	node->gcs_gone = true;
	(void)ferry__loop_timer_stop(&node->beat_timer);
	(void)ferry__loop_timer_stop(&node->gather_timer);
	ferry_gcs_client_destroy(node->gcs);
	if (node->store)
		ferry__plasma_server_stop(node->store); /* its spill posts no more */
	pthread_mutex_lock(&node->lock);
	node->loop_live = false; /* the hooks post no more */
	pthread_mutex_unlock(&node->lock);
	ferry__loop_destroy(node->loop);
}

void ferry__node_stop(struct ferry__node *node)
{
	struct ferry__objmgr *om;
	struct dir_item *it;

	if (!node)
		return;
	drain_directory(node);
	ferry__objmgr_stop(node->om);
	if (node->loop)
		stop_loop(node);
	pthread_mutex_lock(&node->lock);
	om = node->om;
	node->om = NULL;
	pthread_mutex_unlock(&node->lock);
	ferry__objmgr_destroy(om);
	ferry__plasma_server_destroy(node->store);
	while ((it = node->queue)) {
		node->queue = it->next;
		ferry__free(it);
	}
	ferry__free(node->batch);
	pthread_cond_destroy(&node->idle_cond);
	pthread_mutex_destroy(&node->lock);
	ferry__free(node);
}

const struct ferry_node_id *ferry__node_id(const struct ferry__node *node)
{
	return &node->id;
}

const char *ferry__node_address(const struct ferry__node *node)
{
	return node->address;
}

const char *ferry__node_socket(const struct ferry__node *node)
{
	return node->socket_path;
}

struct ferry__objmgr *ferry__node_objmgr(const struct ferry__node *node)
{
	return node->om;
}
