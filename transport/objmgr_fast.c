/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The loop's fast path for a pull whose location is cached: ferry__objmgr_pull() posts the probe
 * (TCP, or RDMA: objmgr_rdma.c) straight to the loop and, when the reply holds the whole
 * object, the loop thread admits, creates the copy in the client's chunk, copies, seals and
 * calls the waiters back. A location on this host is read on the loop from the other store's
 * shared index (through a client already connected there) and copied once. No pull thread:
 * two thread wake-ups per pull instead of four.
 *
 * DESIGN
 * - Taken only where a pull thread would start with exactly this probe: the object is not
 *   local, its locations are cached, every one's address is known (a pull thread would wait for
 *   a missing node record), the first location a pull thread would try (order_locations()'s
 *   order, self skipped) is reached over TCP, RDMA or shm. Over RDMA, the directory's sizes
 *   (data + metadata) choose: an object that fits a reply (64 KiB) is READ one-sided when its
 *   place has a content check and the endpoint is up (objmgr_rdma.c), else probed here; a larger
 *   one (under 4 MiB, one QP) is run by the loop with a pull thread creating its copy
 *   meanwhile (objmgr_rdma.c, "a large object's pull"), ending in ferry__objmgr_fast_filled().
 *   Not with the test-only sealed hook, nor when this object manager records copies itself (a
 *   blocking GCS call): inside a node, the node records them from its store's on_sealed hook.
 * - The loop never blocks on the store or on admission. Admission that would wait, a create the
 *   chunk cannot take (too large, chunk full) or that fails, a seal that fails (its abort is a
 *   store round trip), a probe that failed, an object larger than the probe's inline bytes:
 *   the pull goes to a pull thread, which continues from that point (p->fast_*): with the TCP
 *   probe's reply (no second probe), or with the attempt's error for the location tried (not
 *   tried again), over the cached locations as read here. So results, failover, deadlines and
 *   error codes are the pull thread's own. An RDMA probe answered with a pin (metadata made
 *   the object larger than a reply) sends PullDone at once and leaves the location to be tried
 *   afresh (FERRY__OBJMGR_FAST_RETRY), as do the errors after which pull_from() goes to TCP.
 *   Over shm, what would block (connecting to the other store, an object that store must
 *   help with: spilled or busy) is left to a pull thread the same way.
 * - The store's seal notice goes after the waiters are called back, and is held back in the
 *   plasma client for up to opts.notice_hold_ms, 1 ms (a loop timer flushes it; so does any
 *   other request of the client, which keeps the store's view in order): each notice wakes the
 *   store thread, which on 2 cores then runs in the loop's place. That cost a back-to-back
 *   small RDMA pull in the soft-RoCE VM half its time (~500 -> ~250 us), and 10-15 us here.
 *   The store lists the copy (and the node records it in the directory) up to 1 ms later;
 *   local readers see it at once (the index is sealed first). When someone waits in the store
 *   for a seal, the notice goes at once. ferry__objmgr_flush_notices() is the barrier.
 * - Stopping: the loop ends the pull with -ECANCELED (the pull threads may have left);
 *   ferry__objmgr_stop() waits for om->fast_pulls to reach 0 before it stops the loop.
 * - The waiters' callbacks run on the loop thread here (objmgr.h: they must not block).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"

void ferry__objmgr_probe_free(struct ferry__objmgr_fetch *f)
{
	if (!f)
		return;
	ferry__free(f->metadata);
	ferry__free(f->first);
	ferry__free(f);
}

/*
 * The location a pull thread would try first, in try_locations()'s order (same-host ones first,
 * self skipped): its address and node, or -1 when there is none or a record is missing (the
 * pull thread would wait for it). om->lock held.
 */
static int first_location(struct ferry__objmgr *om, const struct ferry__objmgr_pull *p,
			  struct ferry__node_addr *out, struct ferry_node_id *node)
{
	struct ferry__node_addr addrs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	int have[FERRY__OBJMGR_CACHED_LOCATIONS] = {0};
	const struct ferry__node_addr *a;

	for (uint32_t i = 0; i < p->ncached; i++) {
		if (!(a = ferry__hashmap_get(&om->nodes, &p->cached[i])))
			return -1;
		addrs[i] = *a;
		locs[i] = p->cached[i];
	}
	ferry__objmgr_same_host_first(om, locs, p->ncached, addrs, have);
	for (uint32_t i = 0; i < p->ncached; i++) {
		if (!ferry_node_id_eq(&locs[i], &om->opts.node_id)) {
			*out = addrs[i];
			*node = locs[i];
			return 0;
		}
	}
	return -1;
}

static void fast_end(struct ferry__objmgr *om)
{
	pthread_mutex_lock(&om->lock);
	if (--om->fast_pulls == 0)
		pthread_cond_broadcast(&om->fast_cond);
	pthread_mutex_unlock(&om->lock);
}

/*
 * The whole object came with the probe (@data: @data_size bytes, @metadata): admit, create in
 * the chunk, copy, seal in the index. 0 done (*bytes set; *notice: seal_begin's 1 or 2, the
 * store's seal notice, of generation *gen, is still to be sent, after the waiters are called
 * back); 1: a pull thread
 * must go on; < 0 the attempt's error (p->fast_abort when the copy was created and must be
 * aborted).
 */
static int complete(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, const uint8_t *data,
		    uint64_t data_size, const uint8_t *metadata, uint32_t metadata_size,
		    uint64_t *bytes, int *notice, uint32_t *gen)
{
	uint64_t total = data_size + metadata_size;
	void *dst;
	int ret = ferry__objmgr_try_admit(om, total);

	if (ret == -EAGAIN)
		return 1;
	if (ret < 0)
		return ret;
	ret = ferry__plasma_client_create_small(om->store, &p->id, data_size, metadata,
						metadata_size, FERRY_PLASMA_CREATE_SECONDARY,
						&p->sizes.owner, &dst);
	if (ret < 0) {
		/* Through the store, or the same error: the pull thread's create_ex decides. */
		ferry__objmgr_unadmit(om, total);
		return 1;
	}
	if (data_size)
		memcpy(dst, data, data_size);
	ret = ferry__plasma_client_seal_begin(om->store, &p->id, gen);
	ferry__objmgr_unadmit(om, total);
	if (ret < 0) {
		p->fast_abort = true;
		return ret;
	}
	*notice = ret;
	*bytes = total;
	return 0;
}

/*
 * To a pull thread: @how > 0 goes on from TCP probe @f, or with no probe (RDMA) tries the
 * location afresh; else the attempt's error @how. Stopping: end it.
 */
static void hand_over(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
		      struct ferry__objmgr_fetch *f, int how)
{
	struct ferry__objmgr_result res = {.id = p->id, .status = -ECANCELED};

	pthread_mutex_lock(&om->lock);
	om->stats.fast_handovers++;
	if (!om->stopping) {
		p->fast_tried = true;
		p->fast_status = how <= 0 ? how : f ? 0 : FERRY__OBJMGR_FAST_RETRY;
		p->fast_probe = how > 0 ? f : NULL;
		ferry__objmgr_enqueue(om, p);
		pthread_mutex_unlock(&om->lock);
		if (how <= 0)
			ferry__objmgr_probe_free(f);
		return;
	}
	pthread_mutex_unlock(&om->lock);
	/* A pull thread would say -ECANCELED now too. The abort is a store round trip on the
	 * loop, but only for a failed seal during stop. */
	if (p->fast_abort)
		(void)ferry_plasma_client_abort(om->store, &p->id);
	ferry__objmgr_probe_free(f);
	ferry__objmgr_finish(om, p, &res);
}

static void flush_notices(struct ferry__loop_timer *t, int status)
{
	struct ferry__objmgr *om = t->data;

	/* At loop destroy too: the store must still hear of the copies. The socket full: the
	 * store reads once this pass of the loop is over; try again then. */
	if (ferry__plasma_client_flush(om->store, false) == -EAGAIN && status == 0)
		(void)ferry__loop_timer_start(om->loop, &om->notices, om->opts.notice_hold_ms, 0,
					      flush_notices);
}

/* A pass of the loop, waited for. */
struct loop_barrier {
	struct ferry__objmgr *om;	/* owner */
	struct ferry__objmgr_handoff h; /* the wait */
};

static void barrier_run(void *arg, int status)
{
	struct loop_barrier *b = arg;

	ferry__objmgr_handoff_done(b->om, &b->h, status);
}

int ferry__objmgr_flush_notices(struct ferry__objmgr *om)
{
	struct loop_barrier b = {.om = om};

	/* A fast pull's waiters are called back before its notice is handed to the client, on
	 * the loop right after: one loop pass first, so that the notice of every pull the caller
	 * has seen end is in the client when it flushes. */
	if (om->loop_started)
		ferry__objmgr_handoff_run(om, &b, sizeof(b), offsetof(struct loop_barrier, h), 1,
					  barrier_run);
	return ferry__plasma_client_flush(om->store, true);
}

/* @p's copy of @bytes is sealed in the index (seal_begin's @notice and @gen): call the waiters
 * back, then the store's bookkeeping (p is gone then), held back unless someone waits in the
 * store (2). */
static void fast_succeeded(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, uint64_t bytes,
			   int notice, uint32_t gen)
{
	struct ferry__objmgr_result res = {
		.id = p->id,
		.source = p->fast_node,
		.transport = p->fast_transport,
		.attempts = 1,
		.bytes = bytes,
	};

	pthread_mutex_lock(&om->lock);
	om->stats.pulls_fast++;
	pthread_mutex_unlock(&om->lock);
	ferry__objmgr_finish(om, p, &res);
	if (notice && ferry__plasma_client_seal_end(om->store, &res.id, gen, notice == 1) == 1)
		(void)ferry__loop_timer_start(om->loop, &om->notices, om->opts.notice_hold_ms, 0,
					      flush_notices);
}

/* A probe of @p ended with @status (0: the object in @data/@metadata; > 0: a pull thread goes
 * on; < 0: the attempt's error): finish on the loop or hand over. @f: the TCP probe (taken),
 * or NULL. */
static void fast_end_pull(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
			  struct ferry__objmgr_fetch *f, int status, const uint8_t *data,
			  uint64_t data_size, const uint8_t *metadata, uint32_t metadata_size)
{
	uint64_t bytes = 0;
	uint32_t gen = 0;
	int notice = 0, ret = status;

	if (ret == 0)
		ret = complete(om, p, data, data_size, metadata, metadata_size, &bytes, &notice,
			       &gen);
	if (ret != 0) {
		hand_over(om, p, f, ret);
	} else {
		ferry__objmgr_probe_free(f);
		fast_succeeded(om, p, bytes, notice, gen);
	}
	fast_end(om);
}

void ferry__objmgr_fast_filled(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status,
			       bool created, uint64_t bytes)
{
	uint32_t gen = 0;
	int notice = 0, ret = status;

	if (ret == 0) {
		ret = ferry__plasma_client_seal_begin(om->store, &p->id, &gen);
		notice = ret > 0 ? ret : 0;
		ret = ret > 0 ? 0 : ret;
	}
	if (ret != 0) {
		p->fast_abort = created;
		hand_over(om, p, NULL, ret);
	} else {
		fast_succeeded(om, p, bytes, notice, gen);
	}
	fast_end(om);
}

/* The TCP probe is done (on the loop; at loop destroy, from the destroying thread). */
static void fast_done(struct ferry__objmgr_fetch *f)
{
	int status = f->h.status;

	if (status == 0 && f->first_size != f->data_size)
		status = 1; /* more than came inline: a pull thread reads the rest */
	fast_end_pull(f->om, f->owner, f, status, f->first, f->data_size, f->metadata,
		      f->metadata_size);
}

void ferry__objmgr_fast_probed(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status,
			       const uint8_t *data, uint64_t data_size, const uint8_t *metadata,
			       uint32_t metadata_size)
{
	fast_end_pull(om, p, NULL, status, data, data_size, metadata, metadata_size);
}

/* A same-host pull on the loop: the other store's shared index, one copy into ours. */
struct shm_fast {
	struct ferry__objmgr *om;	      /* owner */
	struct ferry__objmgr_pull *p;	      /* the pull */
	char path[FERRY__NODE_ADDR_PATH_MAX]; /* the other store's socket */
	uint64_t run;			      /* its node's run id */
};

static void shm_fast_run(void *arg, int status)
{
	struct shm_fast *s = arg;
	struct ferry_plasma_view v;
	int slot, ret = status < 0 ? status : 0;

	if (ret == 0)
		ret = ferry__shm_view_nowait(&s->om->shm, s->path, s->run, &s->p->id, &slot, &v);
	if (ret == 0) {
		fast_end_pull(s->om, s->p, NULL, 0, v.data, v.data_size, v.metadata,
			      v.metadata_size);
		ferry__shm_view_done(&s->om->shm, slot, &v);
	} else {
		/* Not connected yet or the store must help (-EAGAIN): a pull thread does it. */
		fast_end_pull(s->om, s->p, NULL, ret == -EAGAIN ? FERRY__OBJMGR_FAST_RETRY : ret,
			      NULL, 0, NULL, 0);
	}
	ferry__free(s);
}

bool ferry__objmgr_fast_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p)
{
	struct ferry__objmgr_fetch *f;
	struct ferry_node_id node;
	struct ferry__node_addr a;
	unsigned t;

	if (!om->opts.gcs || !om->opts.node_records_copies || ferry__objmgr_sealed_hook ||
	    ferry_plasma_client_contains(om->store, &p->id) == 1)
		return false;
	p->ncached = ferry__objmgr_locs_get(om, &p->id, p->cached, &p->sizes, p->cached_place);
	if (first_location(om, p, &a, &node) < 0)
		return false;
	p->fast_node = node;
	for (uint32_t i = 0; i < p->ncached; i++)
		if (ferry_node_id_eq(&p->cached[i], &node))
			p->fast_place = p->cached_place[i];
	if (ferry__objmgr_place_hook)
		ferry__objmgr_place_hook(&p->id, &p->fast_place);
	t = ferry__objmgr_transport_for(om, &a);
	if (t == FERRY_GCS_TRANSPORT_SHM) {
		struct shm_fast *s = ferry__calloc(1, sizeof(*s));

		if (!s)
			return false;
		s->om = om;
		s->p = p;
		snprintf(s->path, sizeof(s->path), "%s", a.shm_path);
		s->run = a.run;
		p->fast_transport = FERRY_GCS_TRANSPORT_SHM;
		if (ferry__loop_post(om->loop, shm_fast_run, s) < 0) {
			ferry__free(s);
			return false;
		}
		om->fast_pulls++;
		return true;
	}
	/* RDMA: the directory's sizes choose a probe whose reply carries the object, or a large
	 * pull the loop runs while a pull thread creates the copy (not known: a pull thread). */
	if (t == FERRY_GCS_TRANSPORT_RDMA && a.rdma_port && p->sizes.data > 0) {
		p->fast_transport = FERRY_GCS_TRANSPORT_RDMA;
		if (p->sizes.data + p->sizes.metadata <= FERRY__OBJMGR_RDMA_INLINE_MAX
			    ? !ferry__objmgr_rdma_fast_start(om, p, &a)
			    : !ferry__objmgr_rdma_big_start(om, p, &a))
			return false;
		om->fast_pulls++;
		return true;
	}
	if (t != FERRY_GCS_TRANSPORT_TCP || !a.tcp_port)
		return false;
	f = ferry__calloc(1, sizeof(*f));
	if (!f)
		return false;
	f->id = p->id;
	snprintf(f->ip, sizeof(f->ip), "%s", a.ip);
	f->port = a.tcp_port;
	f->on_done = fast_done;
	f->owner = p;
	p->fast_transport = FERRY_GCS_TRANSPORT_TCP;
	if (ferry__objmgr_fetch_start_async(om, f) < 0) {
		ferry__free(f);
		return false;
	}
	om->fast_pulls++;
	return true;
}
