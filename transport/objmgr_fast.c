/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The loop's fast path for a pull whose location is cached: ferry__objmgr_pull() posts the TCP
 * probe straight to the loop and, when the reply holds the whole object, the loop thread admits,
 * creates the copy in the client's chunk, copies, seals and calls the waiters back. No pull
 * thread: two thread wake-ups per pull instead of four.
 *
 * DESIGN
 * - Taken only where a pull thread would start with exactly this probe: the object is not
 *   local, its locations are cached, every one's address is known (a pull thread would wait for
 *   a missing node record), the first location a pull thread would try (order_locations()'s
 *   order, self skipped) is reached over TCP (no shm on the same host, no RDMA). Not with the
 *   test-only sealed hook, nor when this object manager records copies itself (a blocking GCS
 *   call): inside a node, the node records them from its store's on_sealed hook.
 * - The loop never blocks on the store or on admission. Admission that would wait, a create the
 *   chunk cannot take (too large, chunk full) or that fails, a seal that fails (its abort is a
 *   store round trip), a probe that failed, an object larger than the probe's inline bytes:
 *   the pull goes to a pull thread, which continues from that point (p->fast_*): with the
 *   probe's reply (no second probe), or with the attempt's error for the location tried (not
 *   tried again), over the cached locations as read here. So results, failover, deadlines and
 *   error codes are the pull thread's own.
 * - Stopping: the loop ends the pull with -ECANCELED (the pull threads may have left);
 *   ferry__objmgr_stop() waits for om->fast_pulls to reach 0 before it stops the loop.
 * - The waiters' callbacks run on the loop thread here (objmgr.h: they must not block).
 */
#include <errno.h>
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
 * The whole object came with the probe: admit, create in the chunk, copy, seal in the index.
 * 0 done (*bytes set; *notice: the store's seal notice, of generation *gen, is still to be sent,
 * after the waiters are called back); 1: a pull thread must go on from the probe; < 0 the
 * attempt's error (p->fast_abort when the copy was created and must be aborted).
 */
static int complete(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
		    const struct ferry__objmgr_fetch *f, uint64_t *bytes, bool *notice,
		    uint32_t *gen)
{
	uint64_t total = f->data_size + f->metadata_size;
	void *dst;
	int ret = ferry__objmgr_try_admit(om, total);

	if (ret == -EAGAIN)
		return 1;
	if (ret < 0)
		return ret;
	ret = ferry__plasma_client_create_small(om->store, &p->id, f->data_size, f->metadata,
						f->metadata_size, FERRY_PLASMA_CREATE_SECONDARY,
						&dst);
	if (ret < 0) {
		/* Through the store, or the same error: the pull thread's create_ex decides. */
		ferry__objmgr_unadmit(om, total);
		return 1;
	}
	if (f->first_size)
		memcpy(dst, f->first, f->first_size);
	ret = ferry__plasma_client_seal_begin(om->store, &p->id, gen);
	ferry__objmgr_unadmit(om, total);
	if (ret < 0) {
		p->fast_abort = true;
		return ret;
	}
	*notice = ret == 1;
	*bytes = total;
	return 0;
}

/* To a pull thread: @how > 0 with probe @f, else the attempt's error @how. Stopping: end it. */
static void hand_over(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
		      struct ferry__objmgr_fetch *f, int how)
{
	struct ferry__objmgr_result res = {.id = p->id, .status = -ECANCELED};

	pthread_mutex_lock(&om->lock);
	om->stats.fast_handovers++;
	if (!om->stopping) {
		p->fast_tried = true;
		p->fast_status = how > 0 ? 0 : how;
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

/* The probe is done (on the loop; at loop destroy, from the destroying thread). */
static void fast_done(struct ferry__objmgr_fetch *f)
{
	struct ferry__objmgr_pull *p = f->owner;
	struct ferry__objmgr *om = f->om;
	struct ferry__objmgr_result res = {
		.id = p->id,
		.source = p->fast_node,
		.transport = FERRY_GCS_TRANSPORT_TCP,
		.attempts = 1,
	};
	int ret = f->h.status;
	bool notice = false;
	uint32_t gen = 0;

	if (ret == 0)
		ret = f->first_size == f->data_size ? complete(om, p, f, &res.bytes, &notice, &gen)
						    : 1;
	if (ret != 0) {
		hand_over(om, p, f, ret);
	} else {
		ferry__objmgr_probe_free(f);
		pthread_mutex_lock(&om->lock);
		om->stats.pulls_fast++;
		pthread_mutex_unlock(&om->lock);
		ferry__objmgr_finish(om, p, &res);
		/* The store's bookkeeping after the waiters (p is gone: res.id names it). */
		if (notice)
			(void)ferry__plasma_client_seal_end(om->store, &res.id, gen);
	}
	fast_end(om);
}

bool ferry__objmgr_fast_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p)
{
	struct ferry__objmgr_fetch *f;
	struct ferry_node_id node;
	struct ferry__node_addr a;

	if (!om->opts.gcs || !om->opts.node_records_copies || ferry__objmgr_sealed_hook ||
	    !(om->opts.transports & FERRY_GCS_TRANSPORT_TCP) ||
	    ferry_plasma_client_contains(om->store, &p->id) == 1)
		return false;
	p->ncached = ferry__objmgr_locs_get(om, &p->id, p->cached);
	if (first_location(om, p, &a, &node) < 0 ||
	    ferry__objmgr_transport_for(om, &a) != FERRY_GCS_TRANSPORT_TCP || !a.tcp_port)
		return false;
	f = ferry__calloc(1, sizeof(*f));
	if (!f)
		return false;
	f->id = p->id;
	snprintf(f->ip, sizeof(f->ip), "%s", a.ip);
	f->port = a.tcp_port;
	f->on_done = fast_done;
	f->owner = p;
	p->fast_node = node;
	if (ferry__objmgr_fetch_start_async(om, f) < 0) {
		ferry__free(f);
		return false;
	}
	om->fast_pulls++;
	return true;
}
