/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pulls that wait for their object: a get on one node of an object that another node is about
 * to put (or whose only source just died) must wait until the object can be had, as a get on
 * one node does, instead of failing at the first look into the directory.
 *
 * DESIGN
 * - A waiting pull (ferry__objmgr_pull_until) whose attempt found nothing to pull (not listed,
 *   or every listed location failed) is parked in om->parked instead of ending. It is tried
 *   again when a location event for its object arrives (its first attempt made the location
 *   cache follow the object with a keyed subscription, and each attempt keeps that entry
 *   recent, objmgr_locs.c), and at the latest after a pause that doubles from MIN_BACKOFF_MS
 *   to MAX_BACKOFF_MS (an event lost to a resubscription, an entry evicted past the cache's
 *   bound, or a dead location the directory still lists, is so retried too); to BUSY_BACKOFF_MS
 *   only after -EBUSY (a source restoring the object from its spill says "ask again", and no
 *   event tells when it is done). A pull of one attempt (no wait) asks again after -EBUSY too,
 *   up to BUSY_MAX_TRIES times, and ends at its next other result. The source answers at
 *   once rather than holding the request until its restore ends, because an endpoint's
 *   replies go in request order: a held request would stall every later pull on that
 *   endpoint, of any object, behind a restore of up to a whole spill batch. One small
 *   request per 10 ms per waiting pull is the price.
 * - An event that arrives while an attempt is running sets p->woken: the attempt may have
 *   looked the object up just before it was listed, so the pull goes again at once.
 * - It ends at the first success, at a result no retry can change (own store full, stopping),
 *   at its deadline, or once nobody waits: ferry__objmgr_pull_unwant() (the node calls it when
 *   its store's miss episode ends) makes a parked pull try one last time and end with that.
 *   So a pull is never retried after every waiter has gone.
 * - The pull threads sleep on work_cond until the earliest due time (objmgr.c, pull_thread);
 *   everything here runs under om->lock.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/cond.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"
#define MIN_BACKOFF_MS 5
#define MAX_BACKOFF_MS 250
#define BUSY_BACKOFF_MS 10   /* -EBUSY: the source reads it back from its spill (soon there) */
#define BUSY_MAX_TRIES 3000u /* ... asked again this often (~30 s) by a pull of one attempt */

/* A result after which the object may still appear somewhere (or a source come back). */
static bool worth_waiting(int status)
{
	return status == -ENOENT || status == -ECONNRESET || status == -ETIMEDOUT ||
	       status == -EHOSTUNREACH || status == -ECONNREFUSED || status == -EBUSY ||
	       status == -EPROTO;
}

/* Forget what the last attempt carried over from the fast path: the next starts afresh. */
static void reset_attempt(struct ferry__objmgr_pull *p)
{
	p->fast_tried = false;
	p->fast_abort = false;
	p->fast_status = 0;
	p->ncached = 0;
	p->sizes = (struct ferry__objmgr_sizes){0};
}

bool ferry__objmgr_wait_park(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status)
{
	uint64_t now = ferry__objmgr_now_us();

	/* "Ask again" soon, even for a pull of one attempt: the source restores it from spill. */
	bool busy = status == -EBUSY && !p->wait_until_us && p->tries < BUSY_MAX_TRIES;

	p->last_status = status;
	if (om->stopping || !worth_waiting(status) ||
	    (!busy && (!p->wait_until_us || now >= p->wait_until_us)))
		return false;
	p->tries++;
	reset_attempt(p);
	if (p->woken) { /* listed while we looked: again at once */
		p->woken = false;
		ferry__objmgr_enqueue(om, p);
		return true;
	}
	p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : MIN_BACKOFF_MS;
	if (p->backoff_ms > (status == -EBUSY ? BUSY_BACKOFF_MS : MAX_BACKOFF_MS))
		p->backoff_ms = status == -EBUSY ? BUSY_BACKOFF_MS : MAX_BACKOFF_MS;
	p->due_us = now + (uint64_t)p->backoff_ms * 1000u;
	if (p->wait_until_us && p->due_us > p->wait_until_us)
		p->due_us = p->wait_until_us;
	p->parked = true;
	p->park_next = om->parked;
	om->parked = p;
	pthread_cond_signal(&om->work_cond); /* a sleeping thread may need an earlier wake-up */
	return true;
}

/* Out of om->parked and onto the run queue. */
static void unpark(struct ferry__objmgr *om, struct ferry__objmgr_pull *p)
{
	struct ferry__objmgr_pull **at = &om->parked;

	while (*at != p)
		at = &(*at)->park_next;
	*at = p->park_next;
	p->park_next = NULL;
	p->parked = false;
	ferry__objmgr_enqueue(om, p);
}

uint64_t ferry__objmgr_wait_due(struct ferry__objmgr *om, uint64_t now_us)
{
	struct ferry__objmgr_pull *p = om->parked, *next;
	uint64_t earliest = 0;

	for (; p; p = next) {
		next = p->park_next;
		if (p->due_us <= now_us)
			unpark(om, p);
		else if (!earliest || p->due_us < earliest)
			earliest = p->due_us;
	}
	return earliest;
}

void ferry__objmgr_wait_wake(struct ferry__objmgr *om, const struct ferry_object_id *id)
{
	struct ferry__objmgr_pull **slot;

	pthread_mutex_lock(&om->lock);
	slot = om->stopping ? NULL : ferry__hashmap_get(&om->pulls, id);
	if (slot && (*slot)->wait_until_us) {
		if ((*slot)->parked)
			unpark(om, *slot);
		else
			(*slot)->woken = true;
	}
	pthread_mutex_unlock(&om->lock);
}

struct ferry__objmgr_pull *ferry__objmgr_wait_take_all(struct ferry__objmgr *om)
{
	struct ferry__objmgr_pull *all = om->parked;

	om->parked = NULL;
	for (struct ferry__objmgr_pull *p = all; p; p = p->park_next)
		p->parked = false;
	return all;
}

void ferry__objmgr_pull_unwant(struct ferry__objmgr *om, const struct ferry_object_id *id)
{
	struct ferry__objmgr_pull **slot;

	pthread_mutex_lock(&om->lock);
	slot = om->stopping ? NULL : ferry__hashmap_get(&om->pulls, id);
	if (slot && (*slot)->wait_until_us) {
		(*slot)->wait_until_us = 0;
		if ((*slot)->parked)
			unpark(om, *slot); /* one last attempt, then it ends with its result */
	}
	pthread_mutex_unlock(&om->lock);
}

/* Sleep on work_cond until there is work, stopping, or the earliest parked pull is due (then
 * queued). With no pull parked, a thread that waited opts.thread_idle_ms for nothing may
 * leave (true): nothing is due that it would have to wake for. om->lock held. */
bool ferry__objmgr_wait_for_work(struct ferry__objmgr *om)
{
	uint64_t due, idle_until = ferry__objmgr_now_us() + om->opts.thread_idle_ms * 1000ull;

	while (!om->queue && !om->stopping) {
		uint64_t now = ferry__objmgr_now_us(), until_us;
		struct timespec until;

		due = ferry__objmgr_wait_due(om, now);
		if (om->queue)
			break;
		if (!due && now >= idle_until)
			return true;
		until_us = due ? due : idle_until;
		until = ferry__deadline_in_us(until_us > now ? until_us - now : 0);
		(void)pthread_cond_timedwait(&om->work_cond, &om->lock, &until);
		if (due)
			idle_until = ferry__objmgr_now_us() + om->opts.thread_idle_ms * 1000ull;
	}
	return false;
}

/* A waiting pull that ends without its object: say so (the get that wanted it will fail). */
void ferry__objmgr_wait_log_end(const struct ferry__objmgr_pull *p, int status)
{
	char hex[2 * FERRY_OBJECT_ID_SIZE + 1];

	if (status == 0 || status == -ECANCELED || !p->tries)
		return;
	ferry_object_id_to_hex(&p->id, hex, sizeof(hex));
	FLOG_WARN(COMP, "pull of %s gave up after %u attempts over %llu ms: %s", hex, p->tries + 1,
		  (unsigned long long)((ferry__objmgr_now_us() - p->start_us) / 1000),
		  status == -ENOENT ? "no node holds it (nothing put it yet, or every copy is gone)"
				    : ferry_strerror(status));
}

/* At stop, the pull threads gone: the waiting pulls between attempts end -ECANCELED. */
void ferry__objmgr_wait_cancel_all(struct ferry__objmgr *om)
{
	struct ferry__objmgr_pull *p, *next;

	pthread_mutex_lock(&om->lock);
	p = ferry__objmgr_wait_take_all(om);
	pthread_mutex_unlock(&om->lock);
	for (; p; p = next) {
		struct ferry__objmgr_result res = {.id = p->id, .status = -ECANCELED};

		next = p->park_next;
		ferry__objmgr_finish(om, p, &res);
	}
}
