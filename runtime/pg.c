/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placement groups on the owner's side (include/ferry/runtime.h ferry_pg_*): the group's owner
 * places its bundles with a two-phase commit on the chosen nodes' runtime sockets (Ray's GCS
 * does this; in Ferry the owner does, as it does for its actors). The node's half is
 * node/rt_bundle.c; the messages are schema/runtime.fbs's Bundle*.
 *
 * DESIGN
 * - ferry_pg_create records the group PENDING in the GCS on the caller's thread, then posts it
 *   to the runtime's loop, where everything else happens: the nodes (the GCS's nodes table,
 *   and their load reports, listed again when older than NODES_FRESH_MS), a plan (a node per
 *   bundle by the strategy, from what each node reported free less what this owner placed
 *   there since, else from the totals alone: reports lag, the prepare decides), BundlePrepare to
 *   every chosen node, then BundleCommit to all, or BundleCancel to those prepared when one
 *   failed, and another try after a backoff from another node on (a node that was full moves
 *   to the back). A plan that cannot exist (STRICT_SPREAD over more bundles than nodes, a
 *   bundle larger than every node) leaves the group PENDING with one warning, retried every
 *   RETRY_MAX_MS (nodes may join).
 * - Once every commit is answered, the loop records CREATED with the bundles' nodes in the
 *   GCS (async); its callback, on the GCS client's thread, makes the group CREATED for
 *   ferry_pg_wait (ferry__rt.lock, ferry__rt.cond).
 * - ferry_pg_remove marks the group removed, posts its release (BundleReturn or BundleCancel
 *   to every node holding one of its bundles) and records REMOVED in the GCS.
 * - One socket per node, opened at need (dial_node: the node's store socket + ".rt"); the node
 *   releases whatever a socket prepared when it closes, so the groups die with their owner.
 *   A socket that closes fails the tries in flight there (they go again).
 * - Lifetimes: a group has a count under ferry__rt.lock: the user's handle, the loop's list,
 *   each GCS call in flight. Loop-only fields are touched on the loop thread only.
 * - Leases into a bundle on another node than the driver's own go over that node's socket here
 *   (lease.c asks, its grants come back through node_on_message).
 * - A node's socket that closes under a CREATED group (the node died or stopped) places the
 *   group again (reschedule).
 * - Not yet: actors in a bundle on another node (actor.c asks its own node, which answers
 *   -ENOENT), moving only a dead node's bundles, the GCS's nodes channel as the news of a
 *   death on another host, detached groups.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/conn.h"
#include "common/log.h"
#include "common/loop.h"
#include "runtime/rt.h"
#include "runtime/task.h"
#include "transport/objmgr.h"

#define COMP "runtime"
#define NODES_FRESH_MS 1000 /* the nodes table is listed again after this */
#define RETRY_MIN_MS 5	    /* backoff after a failed try, doubling ... */
#define RETRY_MAX_MS 1000   /* ... up to this; the infeasible are tried this often */
#define MAX_RES 16	    /* resources of one bundle (a LeaseRequest's most) */
#define NAME_MAX_BYTES 64   /* of a resource name, NUL included */
#define FRAME_MAX (1u << 20)

enum phase {
	PH_NEW = 0,	/* not planned yet (waiting for the nodes) */
	PH_PREPARE = 1, /* BundlePrepares out */
	PH_COMMIT = 2,	/* BundleCommits out */
	PH_PLACED = 3,	/* committed everywhere */
	PH_WAIT = 4,	/* a retry is due */
	PH_GONE = 5,	/* removed */
};

/* A node's runtime socket, dialled for bundles. */
struct ferry__rt_pg_node {
	struct ferry__rt_pg_node *next;	 /* all known */
	struct ferry_node_id id;	 /* the node */
	char path[108];			 /* its runtime socket */
	double cpu, gpu, mem;		 /* its totals (the GCS's nodes table) */
	double held_cpu, held_gpu;	 /* of them, what this owner's bundles hold or plan */
	double held_mem;		 /* ... and memory */
	bool reported;			 /* its load report was in the last listing */
	double free_cpu, free_gpu;	 /* reported: what it had free then */
	double free_mem;		 /* ... and memory */
	double planned_cpu, planned_gpu; /* what this owner placed there since */
	double planned_mem;		 /* ... and memory */
	bool alive;			 /* in the last listing */
	uint64_t full_ms;		 /* it answered -EAGAIN then: tried last for a while */
	struct ferry__conn *conn;	 /* NULL until dialled, and once closed */
};

struct pg_bundle {
	double cpu, gpu, mem;				  /* what it asks for */
	uint32_t nres;					  /* entries in res */
	struct ferry__wire_runtime_resource res[MAX_RES]; /* all of it, for BundlePrepare */
	char names[MAX_RES][NAME_MAX_BYTES];		  /* res[i].name's storage */
	struct ferry__rt_pg_node *node;			  /* planned or placed; NULL */
	bool prepared;					  /* the node said so */
	bool committed;					  /* the node said so */
	bool sent;					  /* a prepare went out, not refused */
};

struct ferry_pg {
	/* Under ferry__rt.lock. */
	unsigned refs;		       /* see DESIGN */
	enum ferry_gcs_pg_state state; /* PENDING, CREATED or REMOVED */
	/* Set at create, then read-only. */
	struct ferry_placement_group_id id; /* its ID */
	enum ferry_pg_strategy strategy;    /* how to place */
	uint32_t nbundles;		    /* entries in bundles */
	/* Loop thread. */
	struct ferry_pg *next;		/* the loop's list */
	uint64_t serial;		/* names its requests (request_id's high bits) */
	enum phase phase;		/* see the enum */
	uint32_t outstanding;		/* replies due in this phase */
	bool failed;			/* a reply of this phase failed */
	bool warned;			/* the infeasible warning was logged */
	unsigned attempt;		/* tries so far */
	struct ferry__loop_timer retry; /* PH_WAIT */
	struct pg_bundle bundles[];	/* nbundles */
};

static struct {
	struct ferry__rt_pg_node *nodes; /* every node seen */
	uint64_t nodes_ms;		 /* when listed; 0: never */
	bool listing;			 /* a listing in flight */
	struct ferry_pg *pgs;		 /* live groups (the loop's counts) */
	uint64_t next_serial;		 /* serials */
	unsigned open_conns;		 /* node sockets whose on_close has not come */
	bool stopping;			 /* shutdown began */
	struct ferry__fb_builder fb;	 /* requests are built here */
	bool fb_ready;			 /* fb initialised */
} pgs;

static void plan(struct ferry_pg *pg);
static void start(struct ferry_pg *pg);
static void try_again(struct ferry_pg *pg, bool infeasible);

/* ---- counts ---- */

static void pg_unref_locked(struct ferry_pg *pg)
{
	if (--pg->refs == 0)
		ferry__free(pg);
}

static void pg_unref(struct ferry_pg *pg)
{
	pthread_mutex_lock(&ferry__rt.lock);
	pg_unref_locked(pg);
	pthread_mutex_unlock(&ferry__rt.lock);
}

static void set_state(struct ferry_pg *pg, enum ferry_gcs_pg_state state)
{
	pthread_mutex_lock(&ferry__rt.lock);
	if (pg->state != FERRY_GCS_PG_REMOVED)
		pg->state = state;
	pthread_cond_broadcast(&ferry__rt.cond);
	pthread_mutex_unlock(&ferry__rt.lock);
}

/* ---- the nodes' sockets ---- */

static void node_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len);
static void node_on_close(struct ferry__conn *conn, int err);

static const struct ferry__conn_callbacks node_cb = {
	.on_message = node_on_message,
	.on_close = node_on_close,
};

/* The one place a node's runtime socket is reached (a socket on this host for now). */
static int dial_node(struct ferry__rt_pg_node *n)
{
	struct ferry__conn_opts o = {.cb = &node_cb, .max_message_bytes = FRAME_MAX, .data = n};
	int ret;

	if (n->conn)
		return 0;
	ret = ferry__conn_connect_unix(ferry__rt.loop, n->path, &o, &n->conn);
	if (ret < 0) {
		FLOG_WARN(COMP, "placement groups: node socket %s: %s", n->path,
			  ferry_strerror(ret));
		n->alive = false; /* until a listing of the nodes says otherwise */
		return ret;
	}
	pgs.open_conns++;
	ret = ferry__rt_send_connect(n->conn);
	if (ret < 0)
		ferry__conn_close(n->conn);
	return ret;
}

static int send_bundle(struct ferry_pg *pg, uint32_t i, uint16_t type)
{
	struct pg_bundle *b = &pg->bundles[i];
	uint64_t request_id = (pg->serial << 12) | i;
	struct ferry__wire_unique_id id;
	int ret;

	memcpy(id.bytes, pg->id.bytes, sizeof(id.bytes));
	if (!b->node || dial_node(b->node) < 0)
		return -ECONNREFUSED;
	if (type == FERRY__WIRE_MSG_BUNDLE_PREPARE) {
		struct ferry__wire_bundle_prepare m = {.request_id = request_id,
						       .pg_id = id,
						       .bundle_index = i,
						       .resources = b->res,
						       .resources_count = b->nres};
		ret = ferry__wire_bundle_prepare_build(&pgs.fb, &m);
	} else {
		/* The four share one layout (runtime.fbs): commit, cancel and return. */
		struct ferry__wire_bundle_commit m = {
			.request_id = request_id, .pg_id = id, .bundle_index = i};
		ret = ferry__wire_bundle_commit_build(&pgs.fb, &m);
	}
	if (ret >= 0)
		ret = ferry__conn_send(b->node->conn, type, ferry__fb_builder_data(&pgs.fb),
				       ferry__fb_builder_size(&pgs.fb));
	if (ret >= 0 && type == FERRY__WIRE_MSG_BUNDLE_PREPARE)
		b->sent = true;
	return ret < 0 ? ret : 0;
}

/* ---- releasing ---- */

/* Every bundle prepared or committed goes back (replies are not awaited). */
static void release_all(struct ferry_pg *pg)
{
	for (uint32_t i = 0; i < pg->nbundles; i++) {
		struct pg_bundle *b = &pg->bundles[i];

		/* Known prepared only: a cancel; else a return, which also ends a prepare or a
		 * commit still in flight (a socket's messages are handled in order). */
		if (b->node && b->sent && b->node->conn)
			(void)send_bundle(pg, i,
					  b->prepared && !b->committed && !pg->outstanding
						  ? FERRY__WIRE_MSG_BUNDLE_CANCEL
						  : FERRY__WIRE_MSG_BUNDLE_RETURN);
		if (b->node) {
			b->node->held_cpu -= b->cpu;
			b->node->held_gpu -= b->gpu;
			b->node->held_mem -= b->mem;
			b->node->planned_cpu -= b->node->planned_cpu >= b->cpu ? b->cpu : 0;
			b->node->planned_gpu -= b->node->planned_gpu >= b->gpu ? b->gpu : 0;
			b->node->planned_mem -= b->node->planned_mem >= b->mem ? b->mem : 0;
		}
		b->node = NULL;
		b->prepared = b->committed = b->sent = false;
	}
}

/* Out of the loop's list, and the list's count dropped (if it was there). */
static void unlist(struct ferry_pg *pg)
{
	struct ferry_pg **at = &pgs.pgs;

	while (*at && *at != pg)
		at = &(*at)->next;
	if (!*at)
		return;
	*at = pg->next;
	(void)ferry__loop_timer_stop(&pg->retry);
	pg_unref(pg);
}

/* ---- the GCS ---- */

static void created_recorded(void *arg, int status, void *result)
{
	struct ferry_pg *pg = arg;
	bool removed;

	(void)result;
	/* The bundles are held either way: tasks can use them (a removal meanwhile stays). */
	pthread_mutex_lock(&ferry__rt.lock);
	removed = pg->state == FERRY_GCS_PG_REMOVED; /* then the GCS refuses CREATED: no news */
	pthread_mutex_unlock(&ferry__rt.lock);
	if (status < 0 && !removed)
		FLOG_WARN(COMP, "placement group: its CREATED record: %s", ferry_strerror(status));
	set_state(pg, FERRY_GCS_PG_CREATED);
	pg_unref(pg);
}

static void rescheduling_recorded(void *arg, int status, void *result)
{
	(void)result;
	if (status < 0)
		FLOG_DEBUG(COMP, "placement group RESCHEDULING record: %s", ferry_strerror(status));
	pg_unref(arg);
}

static void record_created(struct ferry_pg *pg)
{
	struct ferry_node_id *nodes = ferry__calloc(pg->nbundles, sizeof(*nodes));
	int ret = -ENOMEM;

	if (nodes) {
		for (uint32_t i = 0; i < pg->nbundles; i++)
			nodes[i] = pg->bundles[i].node->id;
		pthread_mutex_lock(&ferry__rt.lock);
		pg->refs++;
		pthread_mutex_unlock(&ferry__rt.lock);
		ret = ferry_gcs_pg_update_async(ferry__rt.gcs, &pg->id, FERRY_GCS_PG_CREATED, nodes,
						pg->nbundles, created_recorded, pg);
		if (ret < 0)
			pg_unref(pg);
		ferry__free(nodes);
	}
	if (ret < 0) { /* the bundles are held all the same: tasks can use them */
		FLOG_WARN(COMP, "placement group: cannot record it CREATED: %s",
			  ferry_strerror(ret));
		set_state(pg, FERRY_GCS_PG_CREATED);
	}
}

/* ---- the two phases ---- */

static struct ferry_pg *pg_by_serial(uint64_t serial)
{
	for (struct ferry_pg *pg = pgs.pgs; pg; pg = pg->next)
		if (pg->serial == serial)
			return pg;
	return NULL;
}

/* Every reply of the phase came. */
static void phase_done(struct ferry_pg *pg)
{
	if (pg->phase == PH_GONE)
		return;
	if (pg->failed) {
		release_all(pg);
		try_again(pg, false);
		return;
	}
	if (pg->phase == PH_PREPARE) {
		pg->phase = PH_COMMIT;
		pg->outstanding = pg->nbundles;
		for (uint32_t i = 0; i < pg->nbundles; i++)
			if (send_bundle(pg, i, FERRY__WIRE_MSG_BUNDLE_COMMIT) < 0)
				pg->failed = true, pg->outstanding--;
		if (!pg->outstanding)
			phase_done(pg);
		return;
	}
	pg->phase = PH_PLACED;
	record_created(pg);
}

static void on_reply(const void *payload)
{
	struct ferry__wire_bundle_reply_view v = ferry__wire_bundle_reply_root_verified(payload);
	uint64_t request_id = ferry__wire_bundle_reply_request_id(v);
	int status = ferry__wire_bundle_reply_status(v);
	struct ferry_pg *pg = pg_by_serial(request_id >> 12);
	uint32_t i = request_id & 0xfff;
	const char *m = ferry__wire_bundle_reply_message(v);

	if (!pg || i >= pg->nbundles || !pg->outstanding ||
	    (pg->phase != PH_PREPARE && pg->phase != PH_COMMIT))
		return; /* a cancel's or a return's, or a try given up */
	pg->outstanding--;
	if (status < 0) {
		pg->failed = true;
		if (pg->phase == PH_PREPARE)
			pg->bundles[i].sent = false; /* nothing of it at the node */
		if (status == -EAGAIN && pg->bundles[i].node)
			pg->bundles[i].node->full_ms = ferry__loop_now_ms();
		else
			FLOG_DEBUG(COMP, "placement group bundle %u: %s", i,
				   m ? m : ferry_strerror(status));
	} else if (pg->phase == PH_PREPARE) {
		pg->bundles[i].prepared = true;
	} else {
		pg->bundles[i].committed = true;
	}
	if (!pg->outstanding)
		phase_done(pg);
}

static void node_on_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	(void)len;
	if (type == FERRY__WIRE_MSG_BUNDLE_REPLY) {
		on_reply(payload);
	} else if (type == FERRY__WIRE_MSG_LEASE_GRANT || type == FERRY__WIRE_MSG_LEASE_REVOKED ||
		   type == FERRY__WIRE_MSG_LEASE_BLOCKED) {
		ferry__rt_lease_node_message(ferry__conn_data(conn), type, payload);
	} else if (type == FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY) {
		struct ferry__wire_runtime_connect_reply_view v =
			ferry__wire_runtime_connect_reply_root_verified(payload);

		if (ferry__wire_runtime_connect_reply_status(v) < 0)
			ferry__conn_close(conn);
	}
}

/*
 * A node holding bundles of a CREATED group is gone: the group is placed again, whole (its
 * other bundles returned first; leases running in them keep their resources until they end),
 * RESCHEDULING in the GCS meanwhile. Ray moves only the lost bundles.
 */
static void reschedule(struct ferry_pg *pg, const struct ferry__rt_pg_node *gone)
{
	char hex[FERRY_ID_HEX_MAX];
	int ret;

	ferry_id_to_hex(pg->id.bytes, sizeof(pg->id.bytes), hex, sizeof(hex));
	FLOG_WARN(COMP, "placement group %s: the node of its socket %s is gone: placing it again",
		  hex, gone->path);
	release_all(pg);
	set_state(pg, FERRY_GCS_PG_RESCHEDULING);
	pthread_mutex_lock(&ferry__rt.lock);
	pg->refs++;
	pthread_mutex_unlock(&ferry__rt.lock);
	ret = ferry_gcs_pg_update_async(ferry__rt.gcs, &pg->id, FERRY_GCS_PG_RESCHEDULING, NULL, 0,
					rescheduling_recorded, pg);
	if (ret < 0)
		pg_unref(pg);
	pg->phase = PH_NEW;
	pg->attempt = 0;
	pg->warned = false;
	start(pg);
}

/* A node's socket closed: its tries in flight failed, its bundles are gone. */
static void node_on_close(struct ferry__conn *conn, int err)
{
	struct ferry__rt_pg_node *n = ferry__conn_data(conn);

	(void)err;
	ferry__rt_lease_conn_gone(conn); /* leases granted there hold no pointer to it */
	n->conn = NULL;
	pgs.open_conns--;
	if (pgs.stopping)
		return;
	/* Gone (it died or stopped) until a listing of the nodes says otherwise. */
	n->alive = false;
	pgs.nodes_ms = 0;
	for (struct ferry_pg *pg = pgs.pgs; pg; pg = pg->next) {
		bool touched = false;

		for (uint32_t i = 0; i < pg->nbundles; i++) {
			struct pg_bundle *b = &pg->bundles[i];

			if (b->node != n)
				continue;
			touched = true;
			b->prepared = b->committed = b->sent = false;
		}
		if (!touched || pg->phase == PH_GONE || pg->phase == PH_WAIT)
			continue;
		if (pg->phase == PH_PLACED) {
			reschedule(pg, n);
			continue;
		}
		pg->failed = true;
		pg->outstanding = 0;
		phase_done(pg);
	}
}

/* ---- planning ---- */

/* A plan first heeds the nodes' load reports (what they had free, less what this owner placed
 * since); when that finds no plan, the totals alone (reports lag: the prepare decides). */
static bool use_load;

static bool room(const struct ferry__rt_pg_node *n, const struct pg_bundle *b)
{
	if (!n->alive || n->cpu - n->held_cpu < b->cpu - 1e-9 ||
	    n->gpu - n->held_gpu < b->gpu - 1e-9 || n->mem - n->held_mem < b->mem - 1e-9)
		return false;
	return !use_load || !n->reported ||
	       (n->free_cpu - n->planned_cpu >= b->cpu - 1e-9 &&
		n->free_gpu - n->planned_gpu >= b->gpu - 1e-9 &&
		n->free_mem - n->planned_mem >= b->mem - 1e-9);
}

static void hold(struct pg_bundle *b, struct ferry__rt_pg_node *n)
{
	b->node = n;
	n->held_cpu += b->cpu;
	n->held_gpu += b->gpu;
	n->held_mem += b->mem;
	n->planned_cpu += b->cpu;
	n->planned_gpu += b->gpu;
	n->planned_mem += b->mem;
}

/* The alive nodes in the order this try considers them: from a start that moves with each
 * attempt, nodes that were full a moment ago last. */
static uint32_t order(struct ferry_pg *pg, struct ferry__rt_pg_node **out, uint32_t max)
{
	uint32_t n = 0, k = 0, start;
	struct ferry__rt_pg_node *all[256];
	uint64_t now = ferry__loop_now_ms();

	for (struct ferry__rt_pg_node *x = pgs.nodes; x && n < 256; x = x->next)
		if (x->alive)
			all[n++] = x;
	if (!n)
		return 0;
	start = pg->attempt % n;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < n && k < max; i++) {
			struct ferry__rt_pg_node *x = all[(start + i) % n];
			bool full = x->full_ms && now - x->full_ms < RETRY_MAX_MS;

			if (full == (pass == 1))
				out[k++] = x;
		}
	return k;
}

static bool used_by(const struct ferry_pg *pg, uint32_t upto, const struct ferry__rt_pg_node *x)
{
	for (uint32_t j = 0; j < upto; j++)
		if (pg->bundles[j].node == x)
			return true;
	return false;
}

/* Whether some alive node's totals could ever hold @b. */
static bool fits_somewhere(const struct pg_bundle *b, struct ferry__rt_pg_node *const *nodes,
			   uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		if (nodes[k]->cpu >= b->cpu && nodes[k]->gpu >= b->gpu && nodes[k]->mem >= b->mem)
			return true;
	return false;
}

/* Bundle by bundle: SPREAD takes the next node with room that the group does not use yet
 * (STRICT_SPREAD only such a node), else any with room; PACK the first with room. */
static bool choose_each(struct ferry_pg *pg, struct ferry__rt_pg_node *const *nodes, uint32_t n)
{
	bool strict = pg->strategy == FERRY_PG_STRICT_SPREAD;
	bool spread = strict || pg->strategy == FERRY_PG_SPREAD;
	uint32_t cursor = 0;

	for (uint32_t i = 0; i < pg->nbundles; i++) {
		struct ferry__rt_pg_node *pick = NULL;

		for (int pass = spread ? 0 : 1; pass < (strict ? 1 : 2) && !pick; pass++)
			for (uint32_t k = 0; k < n && !pick; k++) {
				struct ferry__rt_pg_node *x = nodes[(cursor + k) % n];

				if ((pass == 0 && used_by(pg, i, x)) || !room(x, &pg->bundles[i]))
					continue;
				pick = x;
				if (spread)
					cursor = (cursor + k + 1) % n;
			}
		if (!pick) {
			release_all(pg);
			return false;
		}
		hold(&pg->bundles[i], pick);
	}
	return true;
}

static bool choose_by(struct ferry_pg *pg, bool *infeasible);

/* A node per bundle by the strategy; false when this try finds none (*@infeasible: none can
 * exist on these nodes). */
static bool choose(struct ferry_pg *pg, bool *infeasible)
{
	bool ok;

	use_load = true;
	ok = choose_by(pg, infeasible);
	use_load = false;
	return ok || *infeasible ? ok : choose_by(pg, infeasible);
}

static bool choose_by(struct ferry_pg *pg, bool *infeasible)
{
	struct ferry__rt_pg_node *nodes[256];
	uint32_t n = order(pg, nodes, 256);

	*infeasible = !n || (pg->strategy == FERRY_PG_STRICT_SPREAD && pg->nbundles > n);
	for (uint32_t i = 0; i < pg->nbundles && !*infeasible; i++)
		*infeasible = !fits_somewhere(&pg->bundles[i], nodes, n);
	if (*infeasible)
		return false;
	if (pg->strategy == FERRY_PG_PACK || pg->strategy == FERRY_PG_STRICT_PACK) {
		/* All on the first node that holds them all. */
		for (uint32_t k = 0; k < n; k++) {
			uint32_t i = 0;

			for (; i < pg->nbundles && room(nodes[k], &pg->bundles[i]); i++)
				hold(&pg->bundles[i], nodes[k]);
			if (i == pg->nbundles)
				return true;
			release_all(pg);
		}
		if (pg->strategy == FERRY_PG_STRICT_PACK)
			return false;
	}
	return choose_each(pg, nodes, n);
}

static void retry_due(struct ferry__loop_timer *timer, int status)
{
	struct ferry_pg *pg = timer->data;

	if (status < 0 || pg->phase != PH_WAIT)
		return;
	pg->phase = PH_NEW;
	plan(pg);
}

static void try_again(struct ferry_pg *pg, bool infeasible)
{
	uint64_t ms = RETRY_MIN_MS << (pg->attempt < 8 ? pg->attempt : 8);

	pg->attempt++;
	pg->phase = PH_WAIT;
	if (infeasible || ms > RETRY_MAX_MS)
		ms = RETRY_MAX_MS;
	if (infeasible)
		pgs.nodes_ms = 0; /* nodes may have joined: list them again */
	pg->retry.data = pg;
	if (ferry__loop_timer_start(ferry__rt.loop, &pg->retry, ms, 0, retry_due) < 0)
		FLOG_ERROR(COMP, "placement group: cannot schedule another try");
}

static void plan(struct ferry_pg *pg)
{
	bool infeasible = false;
	char hex[FERRY_ID_HEX_MAX];

	if (pg->phase != PH_NEW || pgs.stopping)
		return;
	if (!choose(pg, &infeasible)) {
		if (!pg->warned) {
			ferry_id_to_hex(pg->id.bytes, sizeof(pg->id.bytes), hex, sizeof(hex));
			FLOG_WARN(COMP,
				  "placement group %s cannot be placed %s: it stays pending and "
				  "is tried again",
				  hex, infeasible ? "on the cluster's nodes (infeasible)" : "now");
			pg->warned = true;
		}
		try_again(pg, infeasible);
		return;
	}
	pg->phase = PH_PREPARE;
	pg->failed = false;
	pg->outstanding = pg->nbundles;
	for (uint32_t i = 0; i < pg->nbundles; i++)
		if (send_bundle(pg, i, FERRY__WIRE_MSG_BUNDLE_PREPARE) < 0)
			pg->failed = true, pg->outstanding--;
	if (!pg->outstanding)
		phase_done(pg);
}

/* ---- the nodes table ---- */

static struct ferry__rt_pg_node *node_find(const struct ferry_node_id *id)
{
	for (struct ferry__rt_pg_node *n = pgs.nodes; n; n = n->next)
		if (!memcmp(n->id.bytes, id->bytes, sizeof(id->bytes)))
			return n;
	return NULL;
}

/* One listed node: known from now on (alive or not). */
static void node_listed(const struct ferry_gcs_node_info *info)
{
	const char *text = info->address ? info->address : "";
	struct ferry__node_addr a;
	struct ferry__rt_pg_node *n = node_find(&info->id);

	if (!n) {
		if (ferry__node_addr_parse(text, strlen(text), &a) < 0 || !a.shm_path[0] ||
		    strlen(a.shm_path) + 4 > sizeof(n->path) || !(n = ferry__calloc(1, sizeof(*n))))
			return;
		n->id = info->id;
		snprintf(n->path, sizeof(n->path), "%s.rt", a.shm_path);
		n->next = pgs.nodes;
		pgs.nodes = n;
	}
	n->alive = info->state == FERRY_GCS_NODE_ALIVE;
	n->cpu = info->cpu;
	n->gpu = info->gpu;
	n->mem = info->memory_bytes;
}

struct listing {
	int status;			   /* the nodes' count or -errno */
	struct ferry_gcs_node_info *nodes; /* ferry_gcs_free */
	int nloads;			   /* the load reports' count or -errno */
	struct ferry_gcs_node_load *loads; /* ferry_gcs_free */
	int pending;			   /* answers due (atomic: either may come first) */
};

static double load_amount(const struct ferry_gcs_node_load *l, const char *name)
{
	for (uint32_t i = 0; i < l->nresources; i++)
		if (!strcmp(l->resources[i].name, name))
			return (double)l->resources[i].available / FERRY_GCS_RESOURCE_UNIT;
	return 0;
}

/* The last load reports: what each node had free (what this owner placed before is in it). */
static void loads_listed(const struct listing *l)
{
	for (struct ferry__rt_pg_node *n = pgs.nodes; n; n = n->next) {
		n->reported = false;
		n->planned_cpu = n->planned_gpu = n->planned_mem = 0;
	}
	for (int i = 0; i < l->nloads; i++) {
		struct ferry__rt_pg_node *n = node_find(&l->loads[i].id);

		if (!n)
			continue;
		n->reported = true;
		n->free_cpu = load_amount(&l->loads[i], "CPU");
		n->free_gpu = load_amount(&l->loads[i], "GPU");
		n->free_mem = load_amount(&l->loads[i], "memory");
	}
}

static void nodes_arrived(void *arg, int status)
{
	struct listing *l = arg;

	pgs.listing = false;
	if (status == 0 && l->status >= 0) {
		for (int i = 0; i < l->status; i++)
			node_listed(&l->nodes[i]);
		loads_listed(l);
		pgs.nodes_ms = ferry__loop_now_ms();
	} else {
		FLOG_WARN(COMP, "placement groups: cannot list the nodes: %s",
			  ferry_strerror(status < 0 ? status : l->status));
	}
	ferry_gcs_free(l->nodes);
	ferry_gcs_free(l->loads);
	ferry__free(l);
	for (struct ferry_pg *pg = pgs.pgs; pg; pg = pg->next)
		plan(pg);
}

/* The last of the two answers posts the listing to the loop. */
static void listed(struct listing *l)
{
	if (__atomic_sub_fetch(&l->pending, 1, __ATOMIC_ACQ_REL))
		return;
	if (ferry__loop_post(ferry__rt.loop, nodes_arrived, l) < 0) {
		ferry_gcs_free(l->nodes);
		ferry_gcs_free(l->loads);
		ferry__free(l);
	}
}

static void nodes_listed(void *arg, int status, void *result)
{
	struct listing *l = arg;

	l->status = status;
	l->nodes = result;
	listed(l);
}

static void loads_got(void *arg, int status, void *result)
{
	struct listing *l = arg;

	l->nloads = status < 0 ? 0 : status; /* no reports: the totals alone */
	l->loads = result;
	listed(l);
}

/* Plan @pg now, or once a fresh listing of the nodes is in. */
static void start(struct ferry_pg *pg)
{
	struct listing *l;

	if (pgs.nodes_ms && ferry__loop_now_ms() - pgs.nodes_ms < NODES_FRESH_MS) {
		plan(pg);
		return;
	}
	if (pgs.listing)
		return; /* nodes_arrived plans every group */
	l = ferry__calloc(1, sizeof(*l));
	if (!l) {
		try_again(pg, false);
		return;
	}
	l->pending = 2;
	if (ferry_gcs_node_load_list_async(ferry__rt.gcs, loads_got, l) < 0)
		l->pending--; /* no reports: the totals alone */
	if (ferry_gcs_node_list_async(ferry__rt.gcs, nodes_listed, l) < 0) {
		l->status = -ENOMEM;
		listed(l); /* nodes_arrived says so, and every group tries again */
	}
	pgs.listing = true;
}

/* ---- posts from the callers' threads ---- */

static void create_on_loop(void *arg, int status)
{
	struct ferry_pg *pg = arg;

	if (status < 0 || pgs.stopping) {
		pg_unref(pg); /* the loop's count: it never joined the list */
		return;
	}
	pg->serial = ++pgs.next_serial;
	pg->next = pgs.pgs;
	pgs.pgs = pg;
	start(pg);
}

static void remove_on_loop(void *arg, int status)
{
	struct ferry_pg *pg = arg;

	(void)status;
	if (pg->phase != PH_GONE) {
		pg->phase = PH_GONE;
		release_all(pg);
		unlist(pg);
	}
	pg_unref(pg); /* the post's */
}

/* ---- API ---- */

static int parse_bundle(const struct ferry_pg_bundle *in, struct pg_bundle *b)
{
	char copy[FERRY__RT_CUSTOM_MAX], *save = NULL;

	b->cpu = in->num_cpus, b->gpu = in->num_gpus, b->mem = in->memory_bytes;
	if (!(b->cpu >= 0) || !(b->gpu >= 0) || !(b->mem >= 0))
		return -EINVAL;
	if (b->cpu > 0)
		b->res[b->nres].name = "CPU", b->res[b->nres++].amount = b->cpu;
	if (b->gpu > 0)
		b->res[b->nres].name = "GPU", b->res[b->nres++].amount = b->gpu;
	if (b->mem > 0)
		b->res[b->nres].name = "memory", b->res[b->nres++].amount = b->mem;
	if (in->resources && strlen(in->resources) >= sizeof(copy))
		return -EINVAL;
	snprintf(copy, sizeof(copy), "%s", in->resources ? in->resources : "");
	for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(p, '='), *end = NULL;
		double amount = eq ? strtod(eq + 1, &end) : 0;

		if (!eq || eq == p || !end || *end || !(amount >= 0) || b->nres >= MAX_RES ||
		    (size_t)(eq - p) >= NAME_MAX_BYTES)
			return -EINVAL;
		*eq = 0;
		snprintf(b->names[b->nres], NAME_MAX_BYTES, "%s", p);
		b->res[b->nres].name = b->names[b->nres];
		b->res[b->nres++].amount = amount;
	}
	return b->nres ? 0 : -EINVAL;
}

static struct ferry_pg *pg_new(const struct ferry_pg_opts *o)
{
	struct ferry_pg *pg;

	if (!o || !o->bundles || !o->nbundles || o->nbundles > FERRY_PG_MAX_BUNDLES ||
	    (unsigned)o->strategy > FERRY_PG_STRICT_SPREAD)
		return NULL;
	pg = ferry__calloc(1, sizeof(*pg) + o->nbundles * sizeof(pg->bundles[0]));
	if (!pg)
		return NULL;
	pg->nbundles = o->nbundles;
	pg->strategy = o->strategy;
	pg->state = FERRY_GCS_PG_PENDING;
	pg->refs = 2; /* the handle and the loop's list */
	ferry_placement_group_id_random(&pg->id);
	for (uint32_t i = 0; i < o->nbundles; i++) {
		if (parse_bundle(&o->bundles[i], &pg->bundles[i]) < 0) {
			FLOG_ERROR(COMP,
				   "placement group bundle %u: asks for nothing, a negative "
				   "amount, or resources not \"name=amount,...\"",
				   i);
			ferry__free(pg);
			return NULL;
		}
	}
	return pg;
}

/* The GCS record: PENDING, with the bundles' demand. */
static int record_pending(const struct ferry_pg *pg, const struct ferry_pg_opts *o)
{
	struct ferry_gcs_bundle *gb = ferry__calloc(pg->nbundles, sizeof(*gb));
	struct ferry_gcs_resource *custom = ferry__calloc(pg->nbundles * MAX_RES, sizeof(*custom));
	struct ferry_gcs_pg_info info = {.id = pg->id, .job = ferry__rt.job, .name = o->name};
	static const enum ferry_gcs_pg_strategy strategies[] = {
		FERRY_GCS_PG_PACK, FERRY_GCS_PG_SPREAD, FERRY_GCS_PG_STRICT_PACK,
		FERRY_GCS_PG_STRICT_SPREAD};
	int ret = -ENOMEM;

	if (gb && custom) {
		for (uint32_t i = 0; i < pg->nbundles; i++) {
			const struct pg_bundle *b = &pg->bundles[i];
			struct ferry_gcs_resource *c = custom + i * MAX_RES;

			gb[i].cpu = b->cpu, gb[i].gpu = b->gpu, gb[i].memory_bytes = b->mem;
			gb[i].custom = c;
			for (uint32_t r = 0; r < b->nres; r++)
				if (b->res[r].name == b->names[r])
					c[gb[i].ncustom++] = (struct ferry_gcs_resource){
						b->names[r], b->res[r].amount};
			if (!gb[i].ncustom)
				gb[i].custom = NULL;
		}
		info.strategy = strategies[pg->strategy];
		info.nbundles = pg->nbundles;
		info.bundles = gb;
		ret = ferry_gcs_pg_create(ferry__rt.gcs, &info);
	}
	ferry__free(custom);
	ferry__free(gb);
	return ret < 0 ? ret : 0;
}

int ferry_pg_create(const struct ferry_pg_opts *opts, struct ferry_pg **out)
{
	struct ferry_pg *pg;
	int ret;

	if (!out)
		return -EINVAL;
	if (!ferry__rt.up || !ferry__rt.loop)
		return -ENOTCONN;
	if (ferry__rt.worker || !ferry__rt.gcs)
		return -EOPNOTSUPP;
	pg = pg_new(opts);
	if (!pg)
		return -EINVAL; /* logged; an allocation failure too (rare enough to share) */
	ret = record_pending(pg, opts);
	if (ret < 0) {
		FLOG_ERROR(COMP, "placement group: the GCS record: %s", ferry_strerror(ret));
		ferry__free(pg);
		return ret;
	}
	if (ferry__loop_post(ferry__rt.loop, create_on_loop, pg) < 0) {
		ferry__free(pg);
		return -ENOTCONN;
	}
	*out = pg;
	return 0;
}

int ferry_pg_wait(struct ferry_pg *pg, int64_t timeout_ms)
{
	struct timespec deadline;
	int ret = 0;

	if (!pg)
		return -EINVAL;
	if (timeout_ms >= 0)
		deadline = ferry__deadline_in_us((uint64_t)timeout_ms * 1000);
	pthread_mutex_lock(&ferry__rt.lock);
	while ((pg->state == FERRY_GCS_PG_PENDING || pg->state == FERRY_GCS_PG_RESCHEDULING) &&
	       ferry__rt.up && ret == 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&ferry__rt.cond, &ferry__rt.lock);
		else if (pthread_cond_timedwait(&ferry__rt.cond, &ferry__rt.lock, &deadline))
			ret = -ETIMEDOUT;
	}
	if (pg->state == FERRY_GCS_PG_CREATED)
		ret = 0;
	else if (pg->state == FERRY_GCS_PG_REMOVED || !ferry__rt.up)
		ret = -ECANCELED;
	pthread_mutex_unlock(&ferry__rt.lock);
	return ret;
}

int ferry_pg_remove(struct ferry_pg *pg)
{
	int ret = 0, posted = -ENOTCONN;

	if (!pg)
		return 0;
	pthread_mutex_lock(&ferry__rt.lock);
	pg->state = FERRY_GCS_PG_REMOVED;
	pthread_cond_broadcast(&ferry__rt.cond);
	pg->refs++; /* the post's */
	pthread_mutex_unlock(&ferry__rt.lock);
	if (ferry__rt.up && ferry__rt.loop)
		posted = ferry__loop_post(ferry__rt.loop, remove_on_loop, pg);
	if (posted < 0)
		pg_unref(pg);
	if (ferry__rt.up && ferry__rt.gcs) {
		ret = ferry_gcs_pg_update(ferry__rt.gcs, &pg->id, FERRY_GCS_PG_REMOVED, NULL, 0);
		ret = ret < 0 ? ret : 0;
	}
	pg_unref(pg); /* the handle's */
	return ret;
}

const struct ferry_placement_group_id *ferry_pg_id(const struct ferry_pg *pg)
{
	return pg ? &pg->id : NULL;
}

int ferry__rt_pg_key(const struct ferry_pg *pg, int32_t bundle, struct ferry__rt_class_key *key)
{
	if (bundle < -1 || bundle >= (int32_t)pg->nbundles) {
		FLOG_ERROR(COMP, "placement group bundle %d: the group has %u", bundle,
			   pg->nbundles);
		return -EINVAL;
	}
	memcpy(key->pg, pg->id.bytes, sizeof(key->pg));
	key->pg_bundle = bundle;
	return 0;
}

/* ---- leases into bundles (lease.c) ---- */

struct ferry__rt_pg_node *ferry__rt_pg_lease_node(const struct ferry__rt_class_key *key)
{
	const struct ferry_node_id *own = ferry__rt_sub_node_id();
	struct ferry__rt_pg_node *first = NULL;

	if (ferry_id_is_nil(key->pg, sizeof(key->pg)))
		return NULL;
	for (struct ferry_pg *pg = pgs.pgs; pg; pg = pg->next) {
		if (memcmp(pg->id.bytes, key->pg, sizeof(key->pg)) || pg->phase != PH_PLACED)
			continue;
		/* Any bundle (-1): one on the driver's own node first. */
		for (uint32_t i = 0; i < pg->nbundles; i++) {
			struct ferry__rt_pg_node *n = pg->bundles[i].node;

			if ((key->pg_bundle >= 0 && i != (uint32_t)key->pg_bundle) || !n)
				continue;
			if (!memcmp(n->id.bytes, own->bytes, sizeof(own->bytes)))
				return NULL;
			first = first ? first : n;
		}
		return first;
	}
	return NULL; /* not placed (or not this owner's): the driver's node answers -ENOENT */
}

struct ferry__conn *ferry__rt_pg_node_conn(struct ferry__rt_pg_node *n)
{
	return dial_node(n) < 0 ? NULL : n->conn;
}

void ferry__rt_pg_send_all(uint16_t type, const void *payload, size_t len)
{
	for (struct ferry__rt_pg_node *n = pgs.nodes; n; n = n->next)
		if (n->conn)
			(void)ferry__conn_send(n->conn, type, payload, len);
}

/* ---- life ---- */

void ferry__rt_pg_init(void)
{
	if (!pgs.fb_ready)
		ferry__fb_builder_init(&pgs.fb);
	pgs.fb_ready = true;
	pgs.nodes = NULL;
	pgs.nodes_ms = 0;
	pgs.listing = false;
	pgs.pgs = NULL;
	pgs.open_conns = 0;
	pgs.stopping = false;
}

/* Loop thread: the groups die with their owner (closing the sockets releases them). */
void ferry__rt_pg_stop(void)
{
	pgs.stopping = true;
	while (pgs.pgs) {
		struct ferry_pg *pg = pgs.pgs;

		pg->phase = PH_GONE;
		set_state(pg, FERRY_GCS_PG_REMOVED);
		unlist(pg);
	}
	for (struct ferry__rt_pg_node *n = pgs.nodes; n; n = n->next)
		if (n->conn)
			ferry__conn_close(n->conn);
}

unsigned ferry__rt_pg_open_conns(void)
{
	return pgs.open_conns;
}

void ferry__rt_pg_fini(void)
{
	while (pgs.nodes) {
		struct ferry__rt_pg_node *n = pgs.nodes;

		pgs.nodes = n->next;
		ferry__free(n);
	}
	while (pgs.pgs) { /* only if the loop ended before ferry__rt_pg_stop */
		struct ferry_pg *pg = pgs.pgs;

		pgs.pgs = pg->next;
		pg_unref(pg);
	}
	if (pgs.fb_ready)
		ferry__fb_builder_fini(&pgs.fb);
	pgs.fb_ready = false;
}
