/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Worker leases (Ray's direct task transport: the node only grants and reclaims). A LeaseRequest
 * waits in one FIFO queue until the node's available resources cover it and a worker is free:
 * an idle worker of the request's job, else an idle unassigned one (assigned with WorkerAssign
 * first; a worker serves one job for its life), else a new one if the pool is below its
 * maximum. The lease takes its resources from the node's available set and gives them back
 * when returned, when its worker dies (LeaseRevoked to the owner) or when its owner's
 * connection closes. See rt_srv.c's DESIGN.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/metrics.h"
#include "common/alloc.h"
#include "common/log.h"
#include "node/node_int.h"
#include "node/rt_code.h"
#include "node/rt_int.h"

#define COMP "node"

/* ---- requests ---- */

void ferry__rt_req_free(struct rt_req *req)
{
	if (req)
		req->rt->reqs--;
	/* An owner that left was cleared from its requests (their owner NULL) before it is freed;
	 * its count goes with it. */
	if (req && req->owner)
		req->owner->reqs--;
	ferry__free(req);
}

/* One allocation: the struct, then the resources, the hash and the path. */
struct rt_req *ferry__rt_req_new(struct rt_peer *p, const struct ferry__rt_lease_request *q)
{
	size_t path_len = q->code_path ? strlen(q->code_path) + 1 : 0;
	size_t res_bytes = q->nres * sizeof(struct ferry__res);
	struct rt_req *req =
		ferry__calloc(1, sizeof(*req) + res_bytes + q->code_hash_len + path_len);
	uint8_t *tail;

	if (!req)
		return NULL;
	tail = (uint8_t *)(req + 1);
	req->rt = p->rt;
	p->rt->reqs++;
	req->owner = p;
	p->reqs++;
	req->request_id = q->request_id;
	req->job = q->job;
	req->nres = q->nres;
	req->in_pg = !ferry_id_is_nil(q->pg.bytes, sizeof(q->pg.bytes));
	req->pg = q->pg;
	req->bundle_index = q->bundle_index;
	req->placed = q->placed;
	req->strategy = q->strategy;
	req->affinity = q->affinity;
	req->affinity_soft = q->affinity_soft;
	req->ninputs = q->ninputs;
	memcpy(req->inputs, q->inputs, q->ninputs * sizeof(q->inputs[0]));
	req->res = (struct ferry__res *)tail;
	memcpy(req->res, q->res, res_bytes);
	tail += res_bytes;
	if (q->code_hash_len) {
		req->code_hash = tail;
		req->code_hash_len = q->code_hash_len;
		memcpy(tail, q->code_hash, q->code_hash_len);
		tail += q->code_hash_len;
	}
	if (path_len) {
		req->code_path = (char *)tail;
		memcpy(tail, q->code_path, path_len);
	}
	return req;
}

static void enqueue_head(struct ferry__node_rt *rt, struct rt_req *req)
{
	req->next = rt->queue;
	rt->queue = req;
	if (!rt->queue_tail)
		rt->queue_tail = req;
	rt->queued++;
}

static void enqueue_tail(struct ferry__node_rt *rt, struct rt_req *req)
{
	req->next = NULL;
	if (rt->queue_tail)
		rt->queue_tail->next = req;
	else
		rt->queue = req;
	rt->queue_tail = req;
	rt->queued++;
}

/* Out of the queue: the request after @prev (NULL: the head). */
static struct rt_req *dequeue_after(struct ferry__node_rt *rt, struct rt_req *prev)
{
	struct rt_req *req = prev ? prev->next : rt->queue;

	if (prev)
		prev->next = req->next;
	else
		rt->queue = req->next;
	if (rt->queue_tail == req)
		rt->queue_tail = prev;
	rt->queued--;
	req->next = NULL;
	return req;
}

/* ---- resources ---- */

static bool fits(struct ferry__node_rt *rt, struct rt_req *req)
{
	if (req->in_pg)
		return ferry__rt_bundle_fits(rt, req);
	for (uint32_t i = 0; i < req->nres; i++)
		if (ferry__res_set_get(&rt->avail, req->res[i].name) < req->res[i].amount)
			return false;
	return true;
}

/* @sign -1 takes @req's resources, +1 gives them back. */
static void account(struct ferry__node_rt *rt, struct rt_req *req, int sign)
{
	if (req->bundle) { /* a placement group's: its bundle, not the node's free set */
		ferry__rt_bundle_account(req, sign);
		return;
	}
	for (uint32_t i = 0; i < req->nres; i++) {
		const struct ferry__res *r = &req->res[i];
		int64_t now = ferry__res_set_get(&rt->avail, r->name);

		(void)ferry__res_set_put(&rt->avail, r->name, now + sign * r->amount);
	}
}

/* The node's totals can never cover @q: the name of what is missing into @why. */
static bool never_fits(const struct ferry__node_rt *rt, const struct rt_req *q, char *why,
		       size_t size)
{
	char have[32], want[32];

	for (uint32_t i = 0; i < q->nres; i++) {
		int64_t total = ferry__res_set_get(&rt->node->total, q->res[i].name);

		if (total < q->res[i].amount) {
			ferry__res_format_amount(total < 0 ? 0 : total, have, sizeof(have));
			ferry__res_format_amount(q->res[i].amount, want, sizeof(want));
			snprintf(why, size, "the node has %s %s, the lease asks for %s", have,
				 q->res[i].name, want);
			return true;
		}
	}
	return false;
}

void ferry__rt_lease_report(struct ferry__node_rt *rt)
{
	uint32_t n[W_LEASED + 1] = {0};

	for (struct rt_worker *w = rt->workers; w; w = w->next)
		n[w->state] += !w->signal_sent;
	ferry__node_set_load(rt->node, &rt->avail, rt->queued + ferry__rt_code_parked(rt),
			     rt->mean_task_us);
	ferry__node_set_workers(rt->node, n[W_IDLE], n[W_LEASED] + n[W_ASSIGNING], n[W_STARTING]);
}

/* ---- granting ---- */

static void grant(struct rt_worker *w, struct rt_req *req)
{
	struct ferry__node_rt *rt = w->rt;

	w->state = W_LEASED;
	w->req = req;
	w->lease_owner = req->owner;
	w->lease_id = ++rt->next_lease_id;
	w->leased_us = ferry__rt_admin_now_us();
	ferry__metric_add(FERRY__MC_leases_granted, 1);
	ferry__rt_peer_send_grant(req->owner, req->request_id, 0, NULL, w);
}

/* The CPU a blocked lease lent out was given back already: after account(+1), take it off. */
static void unlend(struct rt_worker *w)
{
	int64_t cpu = ferry__res_set_get(&w->rt->avail, "CPU");

	if (w->cpu_lent > 0)
		(void)ferry__res_set_put(&w->rt->avail, "CPU", cpu - w->cpu_lent);
	w->cpu_lent = 0;
	w->blocked = false;
}

/* @w is free again: its request's resources back, idle from now. */
static void release(struct rt_worker *w)
{
	account(w->rt, w->req, +1);
	unlend(w);
	ferry__rt_req_free(w->req);
	w->req = NULL;
	if (w->lease_owner)
		w->last_owner = w->lease_owner->id;
	w->lease_owner = NULL;
	w->lease_id = 0;
	w->detached = false;
	w->state = W_IDLE;
	w->idle_ms = ferry__loop_now_ms();
}

/*
 * An idle worker: of @job (@assigned), or not assigned yet. Of those, the one whose last lease
 * @owner held (the owner kept its socket to it: runtime/lease.c parks it), else the one idle
 * for the shortest time: the others age towards the idle reaping.
 */
static struct rt_worker *find_idle(struct ferry__node_rt *rt, const struct ferry_job_id *job,
				   bool assigned, const struct rt_peer *owner)
{
	struct rt_worker *best = NULL;

	for (struct rt_worker *w = rt->workers; w; w = w->next) {
		if (w->state != W_IDLE || w->signal_sent || !w->peer || w->has_job != assigned)
			continue;
		if (assigned && memcmp(w->job.bytes, job->bytes, sizeof(job->bytes)))
			continue;
		if (owner && ferry_worker_id_eq(&w->last_owner, &owner->id))
			return w;
		if (!best || w->idle_ms > best->idle_ms)
			best = w;
	}
	return best;
}

/* No free worker for @req: start one, or end an idle worker of another job to make room.
 * Workers whose task waits do not count against max_workers (Ray's blocked workers do not
 * either): their CPU is lent, and the tasks they wait for, taken back from behind them by
 * their owners, need workers of their own or the node deadlocks once every worker waits. */
static void make_worker(struct ferry__node_rt *rt, const struct rt_req *req)
{
	uint32_t live = 0, starting = 0, ending = 0, waiting = 0;
	struct rt_worker *other = NULL;

	for (struct rt_worker *w = rt->workers; w; w = w->next) {
		ending += w->signal_sent != 0;
		if (w->signal_sent)
			continue;
		live++;
		waiting += w->state == W_LEASED && w->blocked;
		starting += w->state == W_STARTING;
		if (w->state == W_IDLE && w->has_job &&
		    memcmp(w->job.bytes, req->job.bytes, sizeof(req->job.bytes)))
			other = w;
	}
	if (starting >= rt->queued)
		return; /* enough on their way */
	if (live - waiting < rt->max_workers && live < FERRY__NODE_MAX_WORKERS)
		(void)ferry__rt_pool_spawn(rt);
	else if (other && !ending)
		ferry__rt_pool_signal(other, SIGTERM, FERRY_GCS_EXIT_NORMAL,
				      "idle, and another job needs its place");
}

/* Serve the request after @prev (NULL: the head): 0 if it left the queue, -EAGAIN if its
 * resources are not free, -EBUSY if no worker is (one is on its way). */
static int serve_one(struct ferry__node_rt *rt, struct rt_req *prev)
{
	struct rt_req *req = prev ? prev->next : rt->queue;
	struct rt_worker *w;

	if (!req->owner) {
		ferry__rt_req_free(dequeue_after(rt, prev));
		return 0;
	}
	if (!fits(rt, req))
		return -EAGAIN;
	w = find_idle(rt, &req->job, true, req->owner);
	if (w) {
		account(rt, dequeue_after(rt, prev), -1);
		grant(w, req);
		return 0;
	}
	w = find_idle(rt, &req->job, false, NULL);
	if (!w) {
		make_worker(rt, req);
		return -EBUSY;
	}
	account(rt, dequeue_after(rt, prev), -1);
	w->state = W_ASSIGNING;
	w->req = req;
	/* A failed send closes the worker's connection, which ends it: the request then goes
	 * back to the queue (ferry__rt_lease_worker_gone). */
	(void)ferry__rt_peer_send_assign(w->peer, req);
	return 0;
}

/*
 * FIFO for the node's free set: a request that waits for resources holds back every request
 * of the free set behind it. A request into a placement group's bundle takes nothing from the
 * free set, so it neither waits behind those nor holds them back (with bundles on the node,
 * the walk goes on past a waiting request to find them).
 */
void ferry__rt_lease_serve(struct ferry__node_rt *rt)
{
	struct rt_req *prev = NULL, *req;
	bool held = false; /* a request of the free set waits: those behind it too */
	int r;

	if (rt->serving || rt->stopping)
		return;
	rt->serving = true;
	while ((req = prev ? prev->next : rt->queue)) {
		if (held && !req->in_pg) {
			prev = req;
			continue;
		}
		r = serve_one(rt, prev);
		if (r == 0)
			continue;
		if (r == -EBUSY || !rt->nbundles)
			break;
		held = held || !req->in_pg;
		prev = req;
	}
	rt->serving = false;
	ferry__rt_lease_report(rt);
}

void ferry__rt_lease_fail_waiting(struct ferry__node_rt *rt, int status, const char *why)
{
	while (rt->queue) {
		struct rt_req *req = dequeue_after(rt, NULL);
		if (req->owner)
			ferry__rt_peer_send_grant(req->owner, req->request_id, status, why, NULL);
		ferry__rt_req_free(req);
	}
	ferry__rt_lease_report(rt);
}

/* ---- messages ---- */

void ferry__rt_lease_request(struct rt_peer *p, const struct ferry__rt_lease_request *q)
{
	struct ferry__node_rt *rt = p->rt;
	struct rt_req *req = NULL;
	char why[192];
	int status = 0;
	ferry__metric_add(FERRY__MC_lease_requests, 1);

	if (!rt->exe[0]) {
		status = -ENOENT;
		snprintf(why, sizeof(why), "this node has no ferry-worker executable to start");
	} else if (!ferry_id_is_nil(q->pg.bytes, sizeof(q->pg.bytes)) &&
		   (status = ferry__rt_bundle_check(rt, q, why, sizeof(why))) < 0) {
		/* a bundle that is not here, or too small: answered below */
	} else if (p->reqs >= RT_MAX_PEER_REQUESTS) {
		status = -ENOSPC;
		snprintf(why, sizeof(why),
			 "%u lease requests of this connection wait at this node, the most one "
			 "connection may have (of the node's %u)",
			 p->reqs, RT_MAX_QUEUED_REQUESTS);
	} else if (rt->reqs >= RT_MAX_QUEUED_REQUESTS + rt->nworkers) {
		/* Every request alive counts: queued, parked for code, and those the local
		 * scheduler holds (infeasible, or waiting for an answer), so that a flood of
		 * requests no node can run is bounded too. */
		status = -ENOSPC;
		snprintf(why, sizeof(why), "%u lease requests wait at this node, its most",
			 rt->reqs);
	} else if (!(req = ferry__rt_req_new(p, q))) {
		status = -ENOMEM;
		snprintf(why, sizeof(why), "no memory for the lease request");
	}
	if (status < 0) {
		/* Rate-limited: a peer past its share may send thousands more at once. */
		FLOG_PEER_WARN(COMP, p->conn ? ferry__conn_peer(p->conn) : "a runtime peer",
			       "runtime: lease request %llu of pid %d refused: %s",
			       (unsigned long long)q->request_id, p->pid, why);
		ferry__rt_peer_send_grant(p, q->request_id, status, why, NULL);
		return;
	}
	/* The local scheduler decides first: here, elsewhere ("retry at"), or later. A lease
	 * into a bundle was sent here by its group's owner, who knows the bundle is here. */
	if (req->in_pg || ferry__rt_sched_route(rt, req) == 0)
		ferry__rt_lease_admit(rt, req);
}

void ferry__rt_lease_admit(struct ferry__node_rt *rt, struct rt_req *req)
{
	char why[192];
	int status = 0;

	if (!req->owner || rt->stopping) {
		ferry__rt_req_free(req);
		return;
	}
	if (never_fits(rt, req, why, sizeof(why))) {
		status = -EINVAL;
	} else if ((status = ferry__rt_code_resolve(rt, req)) < 0) {
		status = -ENOMEM;
		snprintf(why, sizeof(why), "no memory for the lease request");
	}
	if (status < 0) {
		FLOG_WARN(COMP, "runtime: lease request %llu of pid %d refused: %s",
			  (unsigned long long)req->request_id, req->owner->pid, why);
		ferry__rt_peer_send_grant(req->owner, req->request_id, status, why, NULL);
		ferry__rt_req_free(req);
		return;
	}
	if (status == 1)
		return; /* parked until its code is fetched (rt_code.c) */
	enqueue_tail(rt, req);
	ferry__rt_lease_serve(rt);
}

void ferry__rt_lease_code_done(struct ferry__node_rt *rt, struct rt_req *req, int status,
			       const char *why)
{
	if (!req->owner || rt->stopping) {
		ferry__rt_req_free(req);
	} else if (status < 0) {
		FLOG_WARN(COMP, "runtime: lease request %llu of pid %d refused: %s",
			  (unsigned long long)req->request_id, req->owner->pid, why);
		ferry__rt_peer_send_grant(req->owner, req->request_id, status, why, NULL);
		ferry__rt_req_free(req);
	} else {
		enqueue_tail(rt, req);
	}
}

void ferry__rt_lease_detach(struct rt_peer *p, const struct ferry__rt_detach *d)
{
	for (struct rt_worker *w = p->rt->workers; w; w = w->next) {
		if (w->state == W_LEASED && w->lease_id == d->lease_id && w->lease_owner == p) {
			w->detached = true;
			w->detached_actor = d->actor;
			return;
		}
	}
	FLOG_DEBUG(COMP, "runtime: pid %d detached lease %llu, which it does not hold", p->pid,
		   (unsigned long long)d->lease_id);
}

/* A moving mean (weight 1/8 per lease) of the owners' reports: it follows a change of work
 * within a few leases without one odd lease swinging it. The figure is the owner's word; a
 * wrong one only misleads the scheduler's estimate of this node's wait. */
void ferry__rt_lease_task_times(struct ferry__node_rt *rt, uint32_t tasks, uint64_t busy_us)
{
	uint64_t mean;

	if (!tasks || busy_us / tasks > 3600ull * 1000 * 1000)
		return; /* nothing ran, or over an hour per task: not a figure to keep */
	ferry__metric_add(FERRY__MC_tasks_reported, tasks);
	mean = busy_us / tasks;
	rt->mean_task_us = rt->mean_task_us ? (7 * rt->mean_task_us + mean) / 8 : mean;
}

void ferry__rt_lease_return(struct rt_peer *p, uint64_t lease_id, bool busy, uint32_t tasks)
{
	struct ferry__node_rt *rt = p->rt;

	for (struct rt_worker *w = rt->workers; w; w = w->next) {
		if (w->state == W_LEASED && w->lease_id == lease_id && w->lease_owner == p) {
			ferry__rt_admin_lease_ended(rt, w, tasks, 0);
			release(w);
			/* Still running tasks nobody will read (a task that never returns must
			 * not keep the worker from the pool). */
			if (busy && !w->signal_sent)
				ferry__rt_pool_signal(w, SIGKILL, FERRY_GCS_EXIT_OWNER_DIED,
						      "its owner gave the lease back with tasks "
						      "running on it");
			ferry__rt_lease_serve(rt);
			return;
		}
	}
	/* Revoked meanwhile (its worker died), or never this peer's: nothing to give back. */
	FLOG_DEBUG(COMP, "runtime: pid %d returned lease %llu, which it does not hold", p->pid,
		   (unsigned long long)lease_id);
}

/* The worker could not take the job: the requester is told why, the worker is not used. */
static void assign_failed(struct rt_worker *w, const struct ferry__rt_assign_reply *a)
{
	struct rt_req *req = w->req;
	char why[512];

	snprintf(why, sizeof(why), "worker %d could not load the job's code %s: %s", (int)w->pid,
		 req->code_path ? ferry__rt_code_path(req) : "(none)",
		 a->message ? a->message : ferry_strerror(a->status));
	FLOG_WARN(COMP, "runtime: %s", why);
	account(w->rt, req, +1);
	w->req = NULL;
	w->state = W_IDLE;
	ferry__rt_pool_signal(w, SIGKILL, FERRY_GCS_EXIT_ERROR, "its WorkerAssign failed");
	/* A copy of the code that went bad is fetched again and the request waits for it. */
	if (req->owner && ferry__rt_code_retry(w->rt, req, a->status))
		return;
	if (req->owner)
		ferry__rt_peer_send_grant(req->owner, req->request_id, a->status, why, NULL);
	ferry__rt_req_free(req);
}

void ferry__rt_lease_assign_reply(struct rt_peer *p, const struct ferry__rt_assign_reply *a)
{
	struct rt_worker *w = p->worker;
	struct rt_req *req = w ? w->req : NULL;

	if (!w || w->state != W_ASSIGNING ||
	    memcmp(a->job.bytes, req->job.bytes, sizeof(a->job.bytes))) {
		ferry__rt_peer_close(p, "a WorkerAssignReply the node did not ask for");
		return;
	}
	if (a->status < 0) {
		assign_failed(w, a);
	} else {
		w->has_job = true;
		w->job = req->job;
		if (req->owner) {
			grant(w, req);
		} else {
			w->state = W_LEASED; /* release() expects a lease's state */
			release(w);
		}
	}
	ferry__rt_lease_serve(p->rt);
}

/* Detached actors' leases do not count: they outlive their owner on purpose. */
bool ferry__rt_lease_held(const struct rt_peer *p)
{
	for (struct rt_worker *w = p->rt->workers; w; w = w->next)
		if (w->state == W_LEASED && w->lease_owner == p && !w->detached)
			return true;
	return false;
}

void ferry__rt_lease_peer_gone(struct rt_peer *p)
{
	struct ferry__node_rt *rt = p->rt;
	struct rt_req **at = &rt->queue, *req;

	ferry__rt_code_peer_gone(rt, p);
	ferry__rt_sched_peer_gone(rt, p);
	for (struct rt_worker *w = rt->workers; w; w = w->next) {
		if (w->state == W_LEASED && w->lease_owner == p && w->detached) {
			/* A detached actor's: it stays, ownerless, until its worker exits (its
			 * request, freed then, must not count against the gone peer). */
			w->lease_owner = NULL;
			if (w->req && w->req->owner == p)
				w->req->owner = NULL;
		} else if (w->state == W_LEASED && w->lease_owner == p) {
			ferry__rt_admin_lease_ended(rt, w, 0, -ECONNRESET);
			release(w);
			/* Its owner died: what it runs has nobody to answer (rt_owner.c). */
			if (p->died && !w->signal_sent)
				ferry__rt_pool_signal(w, SIGKILL, FERRY_GCS_EXIT_OWNER_DIED,
						      "the owner of its lease died");
		} else if (w->state == W_ASSIGNING && w->req->owner == p)
			w->req->owner = NULL;
	}
	rt->queue_tail = NULL;
	while ((req = *at)) {
		if (req->owner == p) {
			*at = req->next;
			rt->queued--;
			ferry__rt_req_free(req);
		} else {
			rt->queue_tail = req;
			at = &req->next;
		}
	}
}

static void detached_dead(void *arg, int status, void *result)
{
	(void)arg;
	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		FLOG_WARN(COMP, "runtime: a detached actor's record: %s", ferry_strerror(status));
}

void ferry__rt_lease_worker_gone(struct rt_worker *w, int term_signal, int exit_status,
				 const char *message)
{
	struct ferry__node_rt *rt = w->rt;
	struct rt_req *req = w->req;
	char why[192];

	if (!req)
		return;
	w->req = NULL;
	account(rt, req, +1);
	unlend(w);
	if (w->state == W_LEASED)
		ferry__rt_admin_lease_ended(rt, w, 0, -EPIPE);
	if (w->state == W_LEASED && w->lease_owner) {
		snprintf(why, sizeof(why), "worker %d %s", (int)w->pid, message);
		ferry__rt_peer_send_revoked(w->lease_owner, w, -EPIPE, term_signal, exit_status,
					    why);
	} else if (w->state == W_LEASED && w->detached && rt->node->gcs) {
		/* Nobody restarts a detached actor whose owner left: it is DEAD (a kill made it
		 * so already: DEAD stays DEAD). */
		snprintf(why, sizeof(why), "its worker %d %s after its creator left", (int)w->pid,
			 message);
		(void)ferry_gcs_actor_update_async(rt->node->gcs, &w->detached_actor,
						   FERRY_GCS_ACTOR_DEAD, NULL, NULL,
						   FERRY_GCS_EXIT_ERROR, why, detached_dead, NULL);
	}
	w->detached = false;
	if (w->state == W_ASSIGNING && req->owner && !rt->stopping)
		enqueue_head(rt, req); /* it died before it took the job: another one will */
	else
		ferry__rt_req_free(req);
	w->lease_owner = NULL;
	w->state = W_IDLE;
}

/* The CPU @req asks for (0 if none). */
static int64_t req_cpu(const struct rt_req *req)
{
	for (uint32_t i = 0; i < req->nres; i++)
		if (!strcmp(req->res[i].name, "CPU"))
			return req->res[i].amount;
	return 0;
}

/*
 * A leased worker whose task waits for other tasks (ferry_get / ferry_wait) lends its lease's
 * CPU to the node until it stops waiting, so that those tasks find a worker (started up to
 * max_workers if none is idle) instead of deadlocking a node whose every worker waits. At
 * the end of the wait it takes back what is free; the rest stays lent (the node runs over its
 * CPUs a while, as Ray does) and is settled when the lease ends.
 */
void ferry__rt_lease_blocked(struct rt_peer *p, const struct ferry__rt_blocked *b)
{
	bool blocked = b->blocked;
	struct rt_worker *w = p->owner_of;
	struct ferry__node_rt *rt = p->rt;
	int64_t cpu, avail, take;

	if (!w) {
		ferry__rt_peer_close(p, "WorkerBlocked from a peer that is no worker's owner line");
		return;
	}
	if (w->state != W_LEASED || !w->req)
		return; /* between leases: nothing of it to lend */
	if (w->blocked == blocked) {
		/* Another task's wait while the last one is still counted: its CPU stays lent,
		 * its owner takes back what came behind that task. */
		if (blocked && b->wait_id && w->lease_owner)
			ferry__rt_peer_send_lease_blocked(w->lease_owner, w->lease_id, b);
		return;
	}
	cpu = req_cpu(w->req);
	avail = ferry__res_set_get(&rt->avail, "CPU");
	w->blocked = blocked;
	/* Its owner pushes there no more while the task waits, and takes back what it pushed
	 * behind the waiting task (runtime/lease.c). */
	if (w->lease_owner)
		ferry__rt_peer_send_lease_blocked(w->lease_owner, w->lease_id, b);
	if (cpu <= 0 || avail < 0)
		return; /* a lease of no CPU lends nothing */
	if (blocked) {
		(void)ferry__res_set_put(&rt->avail, "CPU", avail + cpu - w->cpu_lent);
		w->cpu_lent = cpu;
		ferry__rt_lease_serve(rt);
		return;
	}
	take = avail < w->cpu_lent ? avail : w->cpu_lent;
	(void)ferry__res_set_put(&rt->avail, "CPU", avail - take);
	w->cpu_lent -= take;
	ferry__rt_lease_report(rt);
}
