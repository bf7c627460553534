/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's local scheduler (issue 24, "local first"): where a LeaseRequest runs. It runs here
 * when the node can, else it goes up to the global scheduler, whose answer becomes the owner's
 * "retry at" (LeaseGrant -EXDEV, runtime.fbs); the owner sends it there with `placed` set.
 *
 * DESIGN
 * - Everything runs on the node's loop thread (rt_lease.c calls in; GCS callbacks come back on
 *   the same loop).
 * - Bounded hops: a `placed` request is never forwarded (it queues here), and an unplaced one
 *   is forwarded at most once (up, then down to its node). Ray's spillback can bounce between
 *   nodes (ray#20050); this cannot.
 * - NODE_AFFINITY: hard goes to its node if the GCS has it alive, else fails with
 *   -EHOSTUNREACH naming it; soft goes there when alive and its last load report shows the
 *   resources free, else runs here. Both are placed: no further hop.
 * - DEFAULT runs here when no node holds clearly more of its input bytes (2x ours and >= 1
 *   MiB more) and its resources are free now, or soon (fewer than spill_queue requests wait
 *   and this node's tasks are short); SPREAD always asks up. Up with no scheduler registered
 *   or reachable: here if this node can ever run it, else infeasible.
 * - The scheduler's view of a node is its last load report: a request that went up because
 *   this node is busy, and that the scheduler places here, is asked up once more 250 ms later
 *   (after this node's next report); the second answer is final. It does not leave the node
 *   meanwhile, so no hop is added.
 * - Infeasible (no node can ever run it): the request waits in `infeasible` with a warning and
 *   an error record of its job in the GCS; while any waits the node follows the nodes channel,
 *   and a join sends them all up again, a second later (the new node's load must reach the
 *   scheduler first). Only the owner leaving ends them (it may cancel).
 * - Requests waiting for a GCS or scheduler answer are on `asks` (or `waiting` for the
 *   instance lookup); their owner may leave meanwhile (owner NULL: dropped when the answer
 *   comes, or at -ECANCELED when the client goes).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/log.h"
#include "node/node_int.h"
#include "node/rt_int.h"
#include "sched/client.h"

#define COMP "node"
/* Input bytes that make another node worth a trip: more than twice ours and this much more. */
#define LOCALITY_MIN_BYTES (1ull << 20)
/* Tasks this short wait in the local queue rather than go up (a scheduler's round trip
 * costs about as much). */
#define SHORT_TASK_US 1000u
/* The scheduler instances in the GCS are read again after this. */
#define SCHED_CHECK_MS 1000u
/* No instance answered: requests fall back at once for this long. */
#define SCHED_BACKOFF_MS 5000u
/* After a join, infeasible requests go up again this much later (the new node's first load
 * report comes with its first heartbeat, 100 ms by default). */
#define JOIN_SETTLE_MS 1000u
/* Placed here by a view older than this node's last lease: asked again this much later. */
#define RECHECK_MS 250u

struct rt_sched {
	struct ferry__node_rt *rt;	    /* owner */
	struct rt_req *infeasible;	    /* waiting for a node that can run them */
	uint32_t ninfeasible;		    /* in that list */
	struct ask *asks;		    /* requests waiting for a GCS or scheduler answer */
	struct ferry__sched_client *client; /* the scheduler above; made at the first need */
	uint64_t next_place_id;		    /* its request IDs */
	struct rt_req *waiting;		    /* for the instance lookup (up) */
	bool looking;			    /* ... which runs */
	uint32_t instances;		    /* ferry-sched instances registered */
	uint64_t checked_ms;		    /* ... as read then (0: never) */
	uint64_t unreachable_until_ms;	    /* none answered: up falls back until then */
	bool following;			    /* subscribed to the nodes channel (for joins) */
	struct ferry__loop_timer settle;    /* a join: JOIN_SETTLE_MS, then up again */
	struct rt_req *recheck; /* placed here while busy: asked again (here_or_recheck) */
	struct ferry__loop_timer recheck_timer; /* ... after RECHECK_MS */
	bool rechecking;			/* ... it runs */
	bool settling;				/* ... it runs */
	uint32_t spill_queue;			/* queued requests before new ones go up */
	/* Counters, logged at stop: each request takes one of these roads, once. */
	uint64_t here;		  /* queued here by the local decision */
	uint64_t placed_here;	  /* arrived placed (they never move again) */
	uint64_t forwarded;	  /* answered "retry at" */
	uint64_t affinity_failed; /* hard affinity to a node not alive */
	char sched_ns[128];	  /* where the scheduler above registers (a group's, or global) */
};

/* One GCS question about one request (NODE_AFFINITY: is the node alive, has it room). */
struct ask {
	struct rt_sched *s;		    /* owner */
	struct rt_req *req;		    /* owned until decided */
	struct ask *prev, *next;	    /* s->asks */
	char address[FERRY__NODE_ADDR_MAX]; /* the affinity node's, once known */
};

static void log_id(const struct ferry_node_id *id, char *hex, size_t size)
{
	(void)ferry_node_id_to_hex(id, hex, size);
}

/* ---- the local decision ---- */

static bool covers(const struct ferry__res_set *set, const struct rt_req *req)
{
	for (uint32_t i = 0; i < req->nres; i++)
		if (ferry__res_set_get(set, req->res[i].name) < req->res[i].amount)
			return false;
	return true;
}

/* Another node holds clearly more of the request's input bytes than this one. */
static bool inputs_elsewhere(const struct ferry__node_rt *rt, const struct rt_req *req)
{
	uint64_t ours = 0, best = 0;

	for (uint32_t i = 0; i < req->ninputs; i++) {
		uint64_t b = req->inputs[i].bytes;

		if (!memcmp(req->inputs[i].node.bytes, rt->node->id.bytes, sizeof(rt->node->id)))
			ours += b;
		else if (b > best)
			best = b;
	}
	return best > 2 * ours && best - ours >= LOCALITY_MIN_BYTES;
}

/*
 * Here when its resources are free now; or when they will be, soon: fewer than spill_queue
 * requests wait and this node's tasks are short (a wait in its queue costs less than a trip
 * up). Otherwise a node elsewhere may run it sooner, which only the scheduler above can tell.
 */
static bool runs_here(struct rt_sched *s, const struct rt_req *req)
{
	const struct ferry__node_rt *rt = s->rt;

	if (req->strategy != FERRY__RT_STRATEGY_DEFAULT || !covers(&rt->node->total, req) ||
	    inputs_elsewhere(rt, req))
		return false;
	if (!rt->queued && covers(&rt->avail, req))
		return true;
	return rt->queued < s->spill_queue && rt->mean_task_us && rt->mean_task_us <= SHORT_TASK_US;
}

/* ---- answers ---- */

static void retry_at(struct rt_sched *s, struct rt_req *req, const struct ferry_node_id *node,
		     const char *address, const char *why)
{
	char hex[40];

	log_id(node, hex, sizeof(hex));
	s->forwarded++;
	ferry__metric_add(FERRY__MC_sched_forwards, 1);
	FLOG_DEBUG(COMP, "runtime: lease request %llu of pid %d: retry at node %s (%s)",
		   (unsigned long long)req->request_id, req->owner->pid, hex, why);
	ferry__rt_peer_send_retry_at(req->owner, req->request_id, node, address, why);
	ferry__rt_req_free(req);
}

static void refuse(struct rt_req *req, int status, const char *why)
{
	FLOG_WARN(COMP, "runtime: lease request %llu of pid %d refused: %s",
		  (unsigned long long)req->request_id, req->owner->pid, why);
	ferry__rt_peer_send_grant(req->owner, req->request_id, status, why, NULL);
	ferry__rt_req_free(req);
}

static void here(struct rt_sched *s, struct rt_req *req)
{
	s->here++;
	ferry__rt_lease_admit(s->rt, req);
}

/* ---- infeasible requests ---- */

static void up(struct rt_sched *s, struct rt_req *req);
static void here(struct rt_sched *s, struct rt_req *req);
static void unfollow_if_idle(struct rt_sched *s);

/* A node joined a moment ago: the infeasible requests go up again, once its first load
 * report can have reached the scheduler. */
static void on_settled(struct ferry__loop_timer *timer, int status)
{
	struct rt_sched *s = timer->data;
	struct rt_req *list = s->infeasible;

	s->settling = false;
	if (status < 0 || s->rt->stopping || !list)
		return;
	FLOG_INFO(COMP, "runtime: a node joined: %u infeasible lease request%s asked again",
		  s->ninfeasible, s->ninfeasible == 1 ? "" : "s");
	s->infeasible = NULL;
	s->ninfeasible = 0;
	while (list) {
		struct rt_req *req = list;

		list = req->next;
		req->next = NULL;
		up(s, req);
	}
	unfollow_if_idle(s);
}

static void on_nodes_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct rt_sched *s = arg;
	struct ferry_gcs_node_info info;

	if (ev->kind != FERRY_GCS_EVENT_DELTA || ferry_gcs_event_node(ev, &info) < 0 ||
	    info.state != FERRY_GCS_NODE_ALIVE || !s->infeasible || s->settling)
		return;
	s->settling = ferry__loop_timer_start(s->rt->loop, &s->settle, JOIN_SETTLE_MS, 0,
					      on_settled) == 0;
}

static void followed(void *arg, int status, void *result)
{
	struct rt_sched *s = arg;

	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED) {
		FLOG_WARN(COMP, "runtime: cannot follow node joins for infeasible requests: %s",
			  ferry_strerror(status));
		s->following = false;
	}
}

static void error_recorded(void *arg, int status, void *result)
{
	(void)arg;
	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		FLOG_WARN(COMP, "runtime: an infeasible request's error record: %s",
			  ferry_strerror(status));
}

static void unfollowed(void *arg, int status, void *result)
{
	(void)arg;
	(void)status;
	ferry_gcs_free(result);
}

/* No infeasible request left: joins matter no more (nodes do not follow every join). */
static void unfollow_if_idle(struct rt_sched *s)
{
	struct ferry_gcs_client *gcs = s->rt->node->gcs;

	if (s->infeasible || !s->following || !gcs)
		return;
	s->following =
		ferry_gcs_unsubscribe_async(gcs, FERRY_GCS_CH_NODES, NULL, 0, unfollowed, NULL) < 0;
}

static void infeasible(struct rt_sched *s, struct rt_req *req, const char *why)
{
	struct ferry_gcs_client *gcs = s->rt->node->gcs;
	char text[400];

	snprintf(text, sizeof(text),
		 "lease request %llu of pid %d is infeasible: %s; it waits for a node that can "
		 "run it",
		 (unsigned long long)req->request_id, req->owner->pid, why);
	if (req->infeasible_reported) { /* asked again after a join: said once is enough */
		FLOG_DEBUG(COMP, "runtime: %s", text);
		gcs = NULL;
	} else {
		FLOG_WARN(COMP, "runtime: %s", text);
	}
	req->infeasible_reported = true;
	if (gcs)
		(void)ferry_gcs_error_report_async(gcs, &req->job, "infeasible", text,
						   error_recorded, NULL);
	req->next = s->infeasible;
	s->infeasible = req;
	s->ninfeasible++;
	gcs = s->rt->node->gcs;
	if (gcs && !s->following) {
		s->following = ferry_gcs_subscribe_async(gcs, FERRY_GCS_CH_NODES, NULL, 0,
							 on_nodes_event, s, followed, s) == 0;
	}
}

/* ---- up ---- */

/* Up cannot answer: here if this node can ever run it, else infeasible. */
static void fallback(struct rt_sched *s, struct rt_req *req, const char *why)
{
	char text[256];

	if (covers(&s->rt->node->total, req)) {
		FLOG_DEBUG(COMP, "runtime: lease request %llu of pid %d stays here: %s",
			   (unsigned long long)req->request_id, req->owner->pid, why);
		here(s, req);
		return;
	}
	snprintf(text, sizeof(text), "%s", why);
	for (uint32_t i = 0; i < req->nres; i++)
		if (ferry__res_set_get(&s->rt->node->total, req->res[i].name) <
		    req->res[i].amount) {
			snprintf(text, sizeof(text), "%s, and this node has too little %s", why,
				 req->res[i].name);
			break;
		}
	infeasible(s, req, text);
}

static void ask_link(struct rt_sched *s, struct ask *a)
{
	a->s = s;
	a->next = s->asks;
	if (s->asks)
		s->asks->prev = a;
	s->asks = a;
}

/* @a is answered: off the list, freed with its request unless taken (a->req NULL). */
static void ask_free(struct ask *a)
{
	if (a->prev)
		a->prev->next = a->next;
	else
		a->s->asks = a->next;
	if (a->next)
		a->next->prev = a->prev;
	ferry__rt_req_free(a->req);
	ferry__free(a);
}

/* The rechecks are due: each request goes up once more, and is then placed for good. */
static void on_recheck(struct ferry__loop_timer *timer, int status)
{
	struct rt_sched *s = timer->data;
	struct rt_req *list = s->recheck;

	s->rechecking = false;
	s->recheck = NULL;
	while (list) {
		struct rt_req *req = list;

		list = req->next;
		req->next = NULL;
		if (!req->owner || status < 0 || s->rt->stopping)
			ferry__rt_req_free(req);
		else
			up(s, req);
	}
}

/*
 * The scheduler placed @req on this node, which went up because it could not run it now:
 * the scheduler's view of this node is a load report that may predate the lease that took
 * its resources. Asked once more after RECHECK_MS (this node reports with each heartbeat), a
 * second "here" is final. It never leaves this node meanwhile: no hop is added.
 */
static void here_or_recheck(struct rt_sched *s, struct rt_req *req)
{
	if (req->rechecked || covers(&s->rt->avail, req)) {
		here(s, req);
		return;
	}
	req->rechecked = true;
	req->next = s->recheck;
	s->recheck = req;
	if (!s->rechecking)
		s->rechecking = ferry__loop_timer_start(s->rt->loop, &s->recheck_timer, RECHECK_MS,
							0, on_recheck) == 0;
	if (!s->rechecking)
		on_recheck(&s->recheck_timer, -ENOMEM);
}

static void on_placed(void *arg, int status, const struct ferry_node_id *node,
		      const char *node_address)
{
	struct ask *a = arg;
	struct rt_req *req = a->req;
	struct rt_sched *s = a->s;
	char why[160];

	if (!req->owner || status == -ECANCELED) {
		ask_free(a);
		return;
	}
	a->req = NULL;
	ask_free(a);
	if (status == 0 && !memcmp(node, &s->rt->node->id, sizeof(*node))) {
		here_or_recheck(s, req);
	} else if (status == 0) {
		retry_at(s, req, node, node_address, "placed by the scheduler");
	} else if (status == -ENOSPC) {
		infeasible(s, req, "the scheduler has no node that can run it");
	} else {
		if (status == -EHOSTUNREACH) /* spare the next requests its rounds of retries */
			s->unreachable_until_ms = ferry__loop_now_ms() + SCHED_BACKOFF_MS;
		snprintf(why, sizeof(why), "the scheduler: %s", ferry_strerror(status));
		fallback(s, req, why);
	}
}

/* Ask the scheduler (sched/client.h) where @req goes. */
static void place(struct rt_sched *s, struct rt_req *req)
{
	struct ferry__node *node = s->rt->node;
	struct ferry__sched_place_input in[FERRY__RT_REQ_INPUTS_MAX];
	struct ferry__sched_place_req pr = {.res = req->res,
					    .nres = req->nres,
					    .strategy = req->strategy,
					    .inputs = in,
					    .ninputs = req->ninputs};
	struct ask *a = NULL;
	int r = 0;

	if (!s->client)
		r = ferry__sched_client_new(s->rt->loop, node->gcs, node->token,
					    node->opts.token_len, &node->id, &s->client);
	if (r == 0 && node->opts.sched_group)
		r = ferry__sched_client_set_namespace(s->client, s->sched_ns);
	if (r == 0 && !(a = ferry__calloc(1, sizeof(*a))))
		r = -ENOMEM;
	if (r < 0) {
		fallback(s, req, "no scheduler client");
		return;
	}
	for (uint32_t i = 0; i < req->ninputs; i++) {
		in[i].node = req->inputs[i].node;
		in[i].bytes = req->inputs[i].bytes;
	}
	a->req = req;
	pr.id = ++s->next_place_id;
	ask_link(s, a);
	r = ferry__sched_client_place(s->client, &pr, on_placed, a);
	if (r < 0) {
		a->req = NULL;
		ask_free(a);
		fallback(s, req, "the scheduler client refused it");
	}
}

/* The instances registered in the GCS: none means no scheduler is configured, and nobody
 * waits for retries that cannot succeed. */
static void on_instances(void *arg, int status, void *result)
{
	struct rt_sched *s = arg;
	struct rt_req *list = s->waiting;

	ferry_gcs_free(result);
	s->looking = false;
	s->waiting = NULL;
	s->instances = status > 0 ? (uint32_t)status : 0;
	s->checked_ms = ferry__loop_now_ms();
	while (list) {
		struct rt_req *req = list;

		list = req->next;
		req->next = NULL;
		if (!req->owner || status == -ECANCELED)
			ferry__rt_req_free(req);
		else if (s->instances)
			place(s, req);
		else
			fallback(s, req, "no scheduler is registered");
	}
}

static void up(struct rt_sched *s, struct rt_req *req)
{
	uint64_t now = ferry__loop_now_ms();
	struct ferry_gcs_client *gcs = s->rt->node->gcs;

	if (!gcs || s->rt->stopping) {
		fallback(s, req, "no GCS to find a scheduler in");
	} else if (now < s->unreachable_until_ms) {
		fallback(s, req, "no scheduler answered lately");
	} else if (s->checked_ms && now - s->checked_ms < SCHED_CHECK_MS) {
		if (s->instances)
			place(s, req);
		else
			fallback(s, req, "no scheduler is registered");
	} else {
		req->next = s->waiting;
		s->waiting = req;
		if (!s->looking)
			s->looking = ferry_gcs_kv_keys_async(gcs, s->sched_ns, strlen(s->sched_ns),
							     "", 0, on_instances, s) == 0;
		if (!s->looking)
			on_instances(s, -ENOMEM, NULL);
	}
}

/* ---- NODE_AFFINITY ---- */

/* Soft affinity: the node's last load report, does it have the request's resources free? */
static bool has_room(const struct ferry_gcs_node_load *load, const struct rt_req *req)
{
	for (uint32_t r = 0; r < req->nres; r++) {
		int64_t avail = -1;

		for (uint32_t k = 0; k < load->nresources; k++)
			if (!strcmp(load->resources[k].name, req->res[r].name))
				avail = load->resources[k].available;
		if (avail < req->res[r].amount)
			return false;
	}
	return true;
}

static void on_loads(void *arg, int status, void *result)
{
	struct ask *a = arg;
	const struct ferry_gcs_node_load *loads = result;
	struct rt_req *req = a->req;
	struct rt_sched *s = a->s;
	bool room = false;

	for (int i = 0; status > 0 && i < status; i++)
		if (!memcmp(loads[i].id.bytes, req->affinity.bytes, sizeof(req->affinity)))
			room = has_room(&loads[i], req);
	ferry_gcs_free(result);
	if (req->owner && status != -ECANCELED) {
		a->req = NULL;
		if (room)
			retry_at(s, req, &req->affinity, a->address, "soft affinity, it has room");
		else
			here(s, req); /* full, or no report: here, as Ray's soft affinity does */
	}
	ask_free(a);
}

static void on_nodes(void *arg, int status, void *result)
{
	struct ask *a = arg;
	const struct ferry_gcs_node_info *nodes = result;
	struct rt_req *req = a->req;
	struct rt_sched *s = a->s;
	bool alive = false;
	char hex[40], why[160];

	for (int i = 0; status > 0 && i < status; i++)
		if (!memcmp(nodes[i].id.bytes, req->affinity.bytes, sizeof(req->affinity)) &&
		    nodes[i].state == FERRY_GCS_NODE_ALIVE) {
			alive = true;
			snprintf(a->address, sizeof(a->address), "%s", nodes[i].address);
		}
	ferry_gcs_free(result);
	if (!req->owner || status == -ECANCELED) {
		ask_free(a);
		return;
	}
	if (alive && req->affinity_soft &&
	    ferry_gcs_node_load_list_async(s->rt->node->gcs, on_loads, a) == 0)
		return;
	a->req = NULL;
	log_id(&req->affinity, hex, sizeof(hex));
	if (alive) {
		retry_at(s, req, &req->affinity, a->address, "hard affinity");
	} else if (req->affinity_soft) {
		here(s, req);
	} else {
		if (status < 0)
			snprintf(why, sizeof(why), "NODE_AFFINITY to node %s: the GCS: %s", hex,
				 ferry_strerror(status));
		else
			snprintf(why, sizeof(why), "NODE_AFFINITY to node %s, which is not alive",
				 hex);
		s->affinity_failed++;
		refuse(req, status < 0 ? status : -EHOSTUNREACH, why);
	}
	ask_free(a);
}

static void affinity(struct rt_sched *s, struct rt_req *req)
{
	struct ask *a = ferry__calloc(1, sizeof(*a));
	int r = -ENOMEM;

	if (a) {
		a->req = req;
		ask_link(s, a);
		r = s->rt->node->gcs ? ferry_gcs_node_list_async(s->rt->node->gcs, on_nodes, a)
				     : -ENOTCONN;
	}
	if (r == 0)
		return;
	if (a) {
		a->req = NULL;
		ask_free(a);
	}
	if (req->affinity_soft) {
		here(s, req);
		return;
	}
	refuse(req, -EHOSTUNREACH, "NODE_AFFINITY: the node cannot ask the GCS whether it lives");
}

/* ---- entry points ---- */

int ferry__rt_sched_route(struct ferry__node_rt *rt, struct rt_req *req)
{
	struct rt_sched *s = rt->sched;

	if (!s)
		return 0;
	if (req->placed) {
		s->placed_here++;
		return 0;
	}
	if (req->strategy == FERRY__RT_STRATEGY_NODE_AFFINITY) {
		if (!memcmp(req->affinity.bytes, rt->node->id.bytes, sizeof(req->affinity))) {
			s->here++;
			return 0;
		}
		affinity(s, req);
		return 1;
	}
	if (runs_here(s, req)) {
		FLOG_DEBUG(COMP,
			   "runtime: lease request %llu of pid %d runs here (%u queued, mean task "
			   "%llu us)",
			   (unsigned long long)req->request_id, req->owner->pid, rt->queued,
			   (unsigned long long)rt->mean_task_us);
		s->here++;
		return 0;
	}
	up(s, req);
	return 1;
}

void ferry__rt_sched_peer_gone(struct ferry__node_rt *rt, const struct rt_peer *p)
{
	struct rt_sched *s = rt->sched;
	struct rt_req **at;

	if (!s)
		return;
	at = &s->infeasible;
	while (*at) {
		struct rt_req *req = *at;

		if (req->owner == p) {
			*at = req->next;
			s->ninfeasible--;
			ferry__rt_req_free(req);
		} else {
			at = &req->next;
		}
	}
	unfollow_if_idle(s);
	/* Requests in a GCS or scheduler question: their answer finds no owner and drops them. */
	for (struct ask *a = s->asks; a; a = a->next)
		if (a->req && a->req->owner == p)
			a->req->owner = NULL;
	for (struct rt_req *req = s->waiting; req; req = req->next)
		if (req->owner == p)
			req->owner = NULL;
	for (struct rt_req *req = s->recheck; req; req = req->next)
		if (req->owner == p)
			req->owner = NULL;
}

/* Loop thread, at the node's stop: the scheduler's requests end (-ECANCELED frees them). */
void ferry__rt_sched_stop(struct ferry__node_rt *rt)
{
	struct rt_sched *s = rt->sched;

	if (!s)
		return;
	(void)ferry__loop_timer_stop(&s->settle);
	s->settling = false;
	(void)ferry__loop_timer_stop(&s->recheck_timer);
	s->rechecking = false;
	ferry__sched_client_free(s->client);
	s->client = NULL;
}

int ferry__rt_sched_init(struct ferry__node_rt *rt)
{
	struct rt_sched *s = ferry__calloc(1, sizeof(*s));
	int64_t cpus = ferry__res_set_get(&rt->node->total, "CPU");

	if (!s)
		return -ENOMEM;
	s->rt = rt;
	s->settle.data = s;
	s->recheck_timer.data = s;
	s->spill_queue = rt->node->opts.spill_queue;
	snprintf(s->sched_ns, sizeof(s->sched_ns), "%s%s",
		 rt->node->opts.sched_group ? FERRY__SCHED_GROUP_KV_PREFIX : FERRY__SCHED_KV_NS,
		 rt->node->opts.sched_group ? rt->node->opts.sched_group : "");
	if (!s->spill_queue)
		s->spill_queue = cpus > 0 ? (uint32_t)((cpus + FERRY_GCS_RESOURCE_UNIT - 1) /
						       FERRY_GCS_RESOURCE_UNIT)
					  : 1;
	rt->sched = s;
	return 0;
}

void ferry__rt_sched_fini(struct ferry__node_rt *rt)
{
	struct rt_sched *s = rt->sched;

	if (!s)
		return;
	FLOG_INFO(COMP,
		  "runtime: lease requests: %llu here, %llu placed here, %llu forwarded, %llu "
		  "hard affinity failed, %u infeasible left",
		  (unsigned long long)s->here, (unsigned long long)s->placed_here,
		  (unsigned long long)s->forwarded, (unsigned long long)s->affinity_failed,
		  s->ninfeasible);
	while (s->infeasible) {
		struct rt_req *req = s->infeasible;

		s->infeasible = req->next;
		ferry__rt_req_free(req);
	}
	while (s->recheck) {
		struct rt_req *req = s->recheck;

		s->recheck = req->next;
		ferry__rt_req_free(req);
	}
	ferry__free(s);
	rt->sched = NULL;
}
