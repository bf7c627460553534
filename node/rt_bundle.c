/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placement groups' bundles on a node: the node's half of the two-phase commit that a group's
 * owner coordinates (runtime/pg.c; messages in schema/runtime.fbs), and the reservations that
 * leases naming a bundle are granted from (rt_lease.c).
 *
 * DESIGN
 * - Everything runs on the node's loop, like the rest of the runtime socket (rt_srv.c).
 * - BundlePrepare takes the bundle's resources from the node's available set at once and holds
 *   them aside (struct rt_bundle); BundleCommit makes it the group's; BundleCancel and
 *   BundleReturn give back its free part now, and what its leases hold when they end (their
 *   requests forget the bundle). A prepared bundle not committed within RT_BUNDLE_PREPARE_MS is
 *   released by the tick: its coordinator died or gave up. Every bundle a connection prepared
 *   goes when that connection does: a group lives as long as its owner.
 * - A lease naming a bundle is granted from the bundle's free amounts only, never the node's.
 *   Lease requests waiting for a bundle that goes are refused with -ENOENT.
 * - Bounds: RT_MAX_BUNDLES per node (a prepare past it: -ENOSPC).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "node/node_int.h"
#include "node/rt_int.h"

#define COMP "node"

struct rt_bundle {
	struct rt_bundle *next;			      /* rt->bundles */
	struct ferry_placement_group_id pg;	      /* its group */
	uint32_t index;				      /* its index in the group */
	struct rt_peer *owner;			      /* the connection that prepared it */
	bool committed;				      /* BundleCommit came */
	uint64_t deadline_ms;			      /* prepared only: released after */
	uint32_t nres;				      /* entries in res */
	struct ferry__res res[FERRY__RT_REQ_RES_MAX]; /* reserved */
	int64_t free[FERRY__RT_REQ_RES_MAX];	      /* of res[i], not held by leases */
};

static bool same_pg(const struct ferry_placement_group_id *a,
		    const struct ferry_placement_group_id *b)
{
	return !memcmp(a->bytes, b->bytes, sizeof(a->bytes));
}

static struct rt_bundle *find(struct ferry__node_rt *rt, const struct ferry_placement_group_id *pg,
			      uint32_t index)
{
	for (struct rt_bundle *b = rt->bundles; b; b = b->next)
		if (b->index == index && same_pg(&b->pg, pg))
			return b;
	return NULL;
}

static void pg_hex(const struct ferry_placement_group_id *pg, char *out, size_t size)
{
	ferry_id_to_hex(pg->bytes, sizeof(pg->bytes), out, size);
}

/* ---- amounts ---- */

static int64_t bundle_get(const struct rt_bundle *b, const char *name, bool free)
{
	for (uint32_t i = 0; i < b->nres; i++)
		if (!strcmp(b->res[i].name, name))
			return free ? b->free[i] : b->res[i].amount;
	return -1;
}

static bool node_has(const struct ferry__node_rt *rt, const struct ferry__res *res, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (ferry__res_set_get(&rt->avail, res[i].name) < res[i].amount)
			return false;
	return true;
}

/* @sign -1 takes @b's reservation from the node's available set, +1 gives its free part back. */
static void node_account(struct ferry__node_rt *rt, const struct rt_bundle *b, int sign)
{
	for (uint32_t i = 0; i < b->nres; i++) {
		int64_t now = ferry__res_set_get(&rt->avail, b->res[i].name);
		int64_t amount = sign < 0 ? b->res[i].amount : b->free[i];

		(void)ferry__res_set_put(&rt->avail, b->res[i].name, now + sign * amount);
	}
}

/* ---- release ---- */

/* Requests queued for @b (or for any bundle of its group, none of which is left) are refused. */
static void refuse_waiting(struct ferry__node_rt *rt, const struct rt_bundle *b, bool group_left)
{
	struct rt_req **at = &rt->queue, *req;

	rt->queue_tail = NULL;
	while ((req = *at)) {
		bool gone = req->in_pg && same_pg(&req->pg, &b->pg) &&
			    (req->bundle_index == (int32_t)b->index ||
			     (req->bundle_index < 0 && !group_left));

		if (!gone) {
			if (req->bundle == b)
				req->bundle = NULL; /* picked again when it fits */
			rt->queue_tail = req;
			at = &req->next;
			continue;
		}
		*at = req->next;
		rt->queued--;
		if (req->owner)
			ferry__rt_peer_send_grant(req->owner, req->request_id, -ENOENT,
						  "its placement group bundle was removed", NULL);
		ferry__rt_req_free(req);
	}
}

static void release(struct ferry__node_rt *rt, struct rt_bundle *b, const char *why)
{
	struct rt_bundle **at = &rt->bundles;
	bool group_left = false;
	char hex[FERRY_ID_HEX_MAX];

	while (*at != b)
		at = &(*at)->next;
	*at = b->next;
	rt->nbundles--;
	node_account(rt, b, +1);
	/* Leases running in it give their part back to the node when they end. */
	for (struct rt_worker *w = rt->workers; w; w = w->next)
		if (w->req && w->req->bundle == b)
			w->req->bundle = NULL;
	for (struct rt_bundle *o = rt->bundles; o && !group_left; o = o->next)
		group_left = same_pg(&o->pg, &b->pg);
	refuse_waiting(rt, b, group_left);
	pg_hex(&b->pg, hex, sizeof(hex));
	FLOG_DEBUG(COMP, "runtime: bundle %u of placement group %s released: %s", b->index, hex,
		   why);
	ferry__free(b);
	ferry__rt_lease_serve(rt);
}

/* ---- messages ---- */

static int prepare(struct rt_peer *p, const struct ferry__rt_bundle_msg *m, char *why, size_t size)
{
	struct ferry__node_rt *rt = p->rt;
	struct rt_bundle *b;
	char have[32], want[32];

	if (find(rt, &m->pg, m->index)) {
		snprintf(why, size, "bundle %u is prepared here already", m->index);
		return -EEXIST;
	}
	if (rt->nbundles >= RT_MAX_BUNDLES) {
		snprintf(why, size, "the node holds %u bundles, its most", rt->nbundles);
		return -ENOSPC;
	}
	for (uint32_t i = 0; i < m->nres; i++) {
		int64_t total = ferry__res_set_get(&rt->node->total, m->res[i].name);

		if (total < m->res[i].amount) {
			ferry__res_format_amount(total < 0 ? 0 : total, have, sizeof(have));
			ferry__res_format_amount(m->res[i].amount, want, sizeof(want));
			snprintf(why, size, "the node has %s %s, the bundle asks for %s", have,
				 m->res[i].name, want);
			return -EINVAL;
		}
	}
	if (!node_has(rt, m->res, m->nres)) {
		snprintf(why, size, "the node has not that much free now");
		return -EAGAIN;
	}
	b = ferry__calloc(1, sizeof(*b));
	if (!b) {
		snprintf(why, size, "no memory for the bundle");
		return -ENOMEM;
	}
	b->pg = m->pg;
	b->index = m->index;
	b->owner = p;
	b->deadline_ms = ferry__loop_now_ms() + RT_BUNDLE_PREPARE_MS;
	b->nres = m->nres;
	memcpy(b->res, m->res, m->nres * sizeof(m->res[0]));
	for (uint32_t i = 0; i < b->nres; i++)
		b->free[i] = b->res[i].amount;
	node_account(rt, b, -1);
	b->next = rt->bundles;
	rt->bundles = b;
	rt->nbundles++;
	ferry__rt_lease_report(rt);
	return 0;
}

/* Commit, cancel or return: the bundle must be @p's (a connection may only end its own). */
static int settle(struct rt_peer *p, uint16_t type, const struct ferry__rt_bundle_msg *m, char *why,
		  size_t size)
{
	struct rt_bundle *b = find(p->rt, &m->pg, m->index);

	if (!b || b->owner != p) {
		snprintf(why, size,
			 "no bundle %u of that placement group is prepared here by this "
			 "connection",
			 m->index);
		return -ENOENT;
	}
	if (type == FERRY__WIRE_MSG_BUNDLE_COMMIT) {
		b->committed = true;
		ferry__rt_lease_serve(p->rt);
		return 0;
	}
	if (type == FERRY__WIRE_MSG_BUNDLE_CANCEL && b->committed) {
		snprintf(why, size, "bundle %u is committed: return it instead", m->index);
		return -EINVAL;
	}
	release(p->rt, b, type == FERRY__WIRE_MSG_BUNDLE_CANCEL ? "cancelled" : "returned");
	return 0;
}

void ferry__rt_bundle_message(struct rt_peer *p, uint16_t type,
			      const struct ferry__rt_bundle_msg *m)
{
	char why[192] = "", hex[FERRY_ID_HEX_MAX];
	int status;

	if (type == FERRY__WIRE_MSG_BUNDLE_PREPARE)
		status = prepare(p, m, why, sizeof(why));
	else
		status = settle(p, type, m, why, sizeof(why));
	if (status < 0 && status != -EAGAIN) {
		pg_hex(&m->pg, hex, sizeof(hex));
		FLOG_WARN(COMP, "runtime: %s of bundle %u of placement group %s from pid %d: %s",
			  ferry__wire_message_name(type), m->index, hex, p->pid, why);
	}
	ferry__rt_peer_send_bundle_reply(p, m->request_id, status, status < 0 ? why : NULL);
}

/* ---- leases ---- */

int ferry__rt_bundle_check(struct ferry__node_rt *rt, const struct ferry__rt_lease_request *q,
			   char *why, size_t size)
{
	char hex[FERRY_ID_HEX_MAX];
	bool any = false;

	for (struct rt_bundle *b = rt->bundles; b; b = b->next) {
		bool covers = true;

		if (!b->committed || !same_pg(&b->pg, &q->pg) ||
		    (q->bundle_index >= 0 && b->index != (uint32_t)q->bundle_index))
			continue;
		any = true;
		for (uint32_t i = 0; i < q->nres && covers; i++)
			covers = bundle_get(b, q->res[i].name, false) >= q->res[i].amount;
		if (covers)
			return 0;
	}
	pg_hex(&q->pg, hex, sizeof(hex));
	if (!any) {
		snprintf(why, size, "no bundle %d of placement group %s on this node",
			 q->bundle_index, hex);
		return -ENOENT;
	}
	snprintf(why, size, "the lease asks for more than bundle %d of placement group %s holds",
		 q->bundle_index, hex);
	return -EINVAL;
}

bool ferry__rt_bundle_fits(struct ferry__node_rt *rt, struct rt_req *req)
{
	for (struct rt_bundle *b = rt->bundles; b; b = b->next) {
		bool fits = true;

		if (!b->committed || !same_pg(&b->pg, &req->pg) ||
		    (req->bundle_index >= 0 && b->index != (uint32_t)req->bundle_index))
			continue;
		for (uint32_t i = 0; i < req->nres && fits; i++)
			fits = bundle_get(b, req->res[i].name, true) >= req->res[i].amount;
		if (fits) {
			req->bundle = b;
			return true;
		}
	}
	return false;
}

void ferry__rt_bundle_account(struct rt_req *req, int sign)
{
	struct rt_bundle *b = req->bundle;

	for (uint32_t i = 0; i < req->nres; i++)
		for (uint32_t j = 0; j < b->nres; j++)
			if (!strcmp(b->res[j].name, req->res[i].name))
				b->free[j] += sign * req->res[i].amount;
}

/* ---- ends ---- */

void ferry__rt_bundle_peer_gone(struct rt_peer *p)
{
	struct rt_bundle *b = p->rt->bundles, *next;

	for (; b; b = next) {
		next = b->next;
		if (b->owner == p)
			release(p->rt, b, "its owner's connection closed");
	}
}

void ferry__rt_bundle_tick(struct ferry__node_rt *rt, uint64_t now)
{
	struct rt_bundle *b = rt->bundles, *next;
	char hex[FERRY_ID_HEX_MAX];

	for (; b; b = next) {
		next = b->next;
		if (b->committed || now < b->deadline_ms)
			continue;
		pg_hex(&b->pg, hex, sizeof(hex));
		FLOG_WARN(COMP,
			  "runtime: bundle %u of placement group %s prepared by pid %d was not "
			  "committed within %u ms: released",
			  b->index, hex, b->owner->pid, RT_BUNDLE_PREPARE_MS);
		release(rt, b, "not committed in time");
	}
}

void ferry__rt_bundle_free_all(struct ferry__node_rt *rt)
{
	struct rt_bundle *b;

	while ((b = rt->bundles)) {
		rt->bundles = b->next;
		ferry__free(b);
	}
	rt->nbundles = 0;
}
