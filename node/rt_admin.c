/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What an operator sees of a node (issue 25: `ferry status`, `ferry list objects`, `ferry
 * memory`, `ferry timeline`): the answers to NodeInfo, Timeline, PlasmaStats and PlasmaList on
 * the runtime socket (Unix, or TCP behind the cluster token), from a Cli peer or any other.
 *
 * DESIGN
 * - Read only, and bounded: a PlasmaList reply is one page (the store caps it at 1,000 objects,
 *   the caller pages with `after`), a Timeline reply at most TIMELINE_MAX events. The store's
 *   own builders answer the store's messages, so both sockets say the same thing.
 * - The timeline is two rings: the object manager's pulls (FERRY__OBJMGR_TIMELINE, written on
 *   whichever thread ends a pull, under its lock) and this file's leases (LEASE_EVENTS, written
 *   and read on the loop only). A reply merges them by start time. Leases are the node's view
 *   of the work: a worker's lease from grant to its end, with the tasks its owner said it ran.
 * - Everything runs on the node's loop.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"
#include "node/node_int.h"
#include "node/rt_int.h"
#include "transport/objmgr.h"

#define COMP "node"
#define LEASE_EVENTS 1024u
#define TIMELINE_MAX 10000u

/* A lease that ended. */
struct rt_event {
	struct ferry_worker_id owner; /* who held it (nil: ownerless, a detached actor's) */
	struct ferry_job_id job;      /* whose code the worker ran */
	int pid;		      /* the worker */
	int status;	   /* 0 returned; -EPIPE its worker died; -ECONNRESET owner gone */
	uint32_t tasks;	   /* tasks run, as its owner said (0: not said) */
	uint64_t start_us; /* granted, wall clock */
	uint64_t micros;   /* how long it was held */
};

uint64_t ferry__rt_admin_now_us(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
}

void ferry__rt_admin_lease_ended(struct ferry__node_rt *rt, const struct rt_worker *w,
				 uint32_t tasks, int status)
{
	struct rt_event *e;
	uint64_t now = ferry__rt_admin_now_us();

	if (!rt->events)
		rt->events = ferry__calloc(LEASE_EVENTS, sizeof(*rt->events));
	if (!rt->events)
		return; /* out of memory: the timeline counts it as dropped */
	e = &rt->events[rt->nevents++ % LEASE_EVENTS];
	memset(e, 0, sizeof(*e));
	if (w->lease_owner)
		e->owner = w->lease_owner->id;
	e->job = w->job;
	e->pid = (int)w->pid;
	e->status = status;
	e->tasks = tasks;
	e->start_us = w->leased_us && w->leased_us <= now ? w->leased_us : now;
	e->micros = now - e->start_us;
}

void ferry__rt_admin_free(struct ferry__node_rt *rt)
{
	ferry__free(rt->events);
	rt->events = NULL;
}

static void send_node_info(struct rt_peer *p, uint64_t seq)
{
	struct ferry__node_rt *rt = p->rt;
	struct ferry__node *node = rt->node;
	struct ferry__wire_node_info_reply m = {.seq = seq};
	struct ferry__objmgr_stats st = {0};

	if (node->om)
		ferry__objmgr_get_stats(node->om, &st);
	m.pulls_in_flight = st.pulls_in_flight;
	m.bytes_in_flight = st.bytes_in_flight;
	m.pulls_ok = st.pulls_ok;
	m.pulls_failed = st.pulls_failed;
	m.bytes_pulled = st.bytes_pulled;
	m.requests_served = st.requests_served;
	m.bytes_served = st.bytes_served;
	m.workers_idle = ferry__rt_pool_count(rt, W_IDLE);
	m.workers_leased =
		ferry__rt_pool_count(rt, W_LEASED) + ferry__rt_pool_count(rt, W_ASSIGNING);
	m.workers_starting = ferry__rt_pool_count(rt, W_STARTING);
	m.queue_length = node->queue_length;
	m.uptime_ms = ferry__loop_now_ms() - rt->started_ms;
	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_NODE_INFO_REPLY,
					ferry__wire_node_info_reply_build(&rt->fb, &m));
}

static void job_hex(const struct ferry_job_id *job, char *buf, size_t size)
{
	ferry_id_to_hex(job->bytes, sizeof(job->bytes), buf, size);
}

/* The last @max events of both rings, oldest first (a merge of two sorted runs). */
static void send_timeline(struct rt_peer *p, uint64_t seq, uint32_t max)
{
	struct ferry__node_rt *rt = p->rt;
	struct ferry__wire_timeline_reply m = {.seq = seq};
	struct ferry__objmgr_event *pulls = NULL;
	struct ferry__wire_timeline_event *out = NULL;
	char(*names)[2 * sizeof(struct ferry_job_id) + 1] = NULL;
	uint64_t kept = FERRY_MIN(rt->nevents, (uint64_t)LEASE_EVENTS), first, pull_dropped = 0;
	size_t npulls = 0, nleases, i = 0, j = 0, n = 0;

	max = max && max < TIMELINE_MAX ? max : TIMELINE_MAX;
	nleases = rt->events ? (size_t)FERRY_MIN(kept, (uint64_t)max) : 0;
	first = rt->nevents - nleases;
	pulls = ferry__calloc(FERRY__OBJMGR_TIMELINE, sizeof(*pulls));
	out = ferry__calloc(max, sizeof(*out));
	names = ferry__calloc(nleases + 1, sizeof(*names));
	if (!pulls || !out || !names) {
		m.status = -ENOMEM;
		goto send;
	}
	if (p->rt->node->om)
		npulls = ferry__objmgr_timeline(p->rt->node->om, pulls, max, &pull_dropped);
	/* Oldest first; the newest max of the two together. */
	while (i < npulls || j < nleases) {
		const struct rt_event *le =
			j < nleases ? &rt->events[(first + j) % LEASE_EVENTS] : NULL;
		bool pull = !le || (i < npulls && pulls[i].start_us <= le->start_us);
		struct ferry__wire_timeline_event *e = &out[n % max];

		memset(e, 0, sizeof(*e));
		if (pull) {
			e->kind = FERRY__WIRE_TIMELINE_KIND_PULL;
			e->object_id = pulls[i].id;
			memcpy(e->peer.bytes, pulls[i].source.bytes, sizeof(e->peer.bytes));
			e->transport = pulls[i].transport;
			e->bytes = pulls[i].bytes;
			e->start_us = pulls[i].start_us;
			e->duration_us = pulls[i].micros;
			e->status = pulls[i].status;
			i++;
		} else if (le) {
			e->kind = FERRY__WIRE_TIMELINE_KIND_LEASE;
			memcpy(e->peer.bytes, le->owner.bytes, sizeof(e->peer.bytes));
			e->start_us = le->start_us;
			e->duration_us = le->micros;
			e->status = le->status;
			e->tasks = le->tasks;
			e->pid = le->pid;
			job_hex(&le->job, names[j], sizeof(names[j]));
			e->name = names[j];
			j++;
		}
		n++;
	}
	/* The ring of the merge kept the newest max; rotate them into order. */
	if (n > max) {
		size_t start = n % max;
		struct ferry__wire_timeline_event *sorted = ferry__calloc(max, sizeof(*sorted));

		if (!sorted) {
			m.status = -ENOMEM;
			goto send;
		}
		for (size_t k = 0; k < max; k++)
			sorted[k] = out[(start + k) % max];
		ferry__free(out);
		out = sorted;
	}
	m.events = out;
	m.events_count = FERRY_MIN(n, (size_t)max);
	m.dropped = pull_dropped + (rt->nevents - kept) + (n - m.events_count);
send:
	(void)ferry__rt_peer_send_built(p, FERRY__WIRE_MSG_TIMELINE_REPLY,
					ferry__wire_timeline_reply_build(&rt->fb, &m));
	ferry__free(names);
	ferry__free(out);
	ferry__free(pulls);
}

void ferry__rt_admin_query(struct rt_peer *p, const struct ferry__rt_msg *m)
{
	struct ferry__node *node = p->rt->node;

	switch (m->type) {
	case FERRY__WIRE_MSG_NODE_INFO:
		send_node_info(p, m->query.seq);
		break;
	case FERRY__WIRE_MSG_TIMELINE:
		send_timeline(p, m->query.seq, m->query.max);
		break;
	case FERRY__WIRE_MSG_PLASMA_STATS:
		(void)ferry__rt_peer_send_built(
			p, FERRY__WIRE_MSG_PLASMA_STATS_REPLY,
			ferry__plasma_server_stats_reply(node->store, &p->rt->fb, m->query.seq));
		break;
	case FERRY__WIRE_MSG_PLASMA_LIST:
		(void)ferry__rt_peer_send_built(
			p, FERRY__WIRE_MSG_PLASMA_LIST_REPLY,
			ferry__plasma_server_list_reply(node->store, &p->rt->fb, m->query.payload));
		break;
	default:
		ferry__rt_peer_close(p, "not a query");
	}
}
