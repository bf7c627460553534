/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager: its threads, the pull queue with dedup, the node table, and one pull's
 * course from the directory lookup to the sealed copy.
 *
 * DESIGN
 * - Threads. One io_uring loop thread owns every socket, through one TCP engine context
 *   (transport/tcp.h). In a node that is the node's loop (opts.loop: the store and the GCS
 *   client run on it too; setup and shutdown are posted to it, and pulls are served from the
 *   store with ferry__plasma_server_get_on_loop), elsewhere an own one (ferry-om-loop). It
 *   serves the listener whose endpoints answer other nodes' PullRequests
 *   (objmgr_serve.c) and the endpoints this node pulls over (objmgr_tcp.c). A few pull threads (a pool: objmgr_pool.c; none while no pull
 *   is queued or parked for thread_idle_ms) run each pull's course in blocking style: the
 *   object's locations (its keyed subscription's snapshot, objmgr_locs.c) and add_location (the
 *   GCS client API blocks), plasma create/seal in the own store, the
 *   shm copy (a memcpy of up to the object's size), and, for TCP, handing a fetch to the loop
 *   and sleeping until it is done. So the loop never blocks on the GCS, the store or a large
 *   copy, and serving stays responsive while pulls wait (the fast path below copies at most a
 *   probe's 64 KiB there, and its create, seal notice and callbacks never wait for the store).
 * - Fast path (objmgr_fast.c). A pull whose location is cached and reached over TCP starts on
 *   the loop, from ferry__objmgr_pull(): a small object ends there; anything else continues on a
 *   pull thread from where the loop left it (p->fast_*).
 * - Dedup. om->pulls maps an object to its pull in progress; a second caller joins its waiter
 *   list. Callbacks run on the pull thread (the loop for a fast-path pull) after the pull left
 *   the map.
 * - Admission. A pull reserves the object's bytes before creating it; while others are in
 *   flight and the sum would pass max_in_flight, it waits (admit_cond). One pull alone is always
 *   admitted (the store says -ENOSPC if it cannot hold it).
 * - Waiting pulls (objmgr_wait.c). A pull started with ferry__objmgr_pull_until() that found
 *   nothing to pull is parked between attempts instead of ending; the pull threads sleep until
 *   the earliest one is due, and a location event for its object queues it at once.
 * - Node table (objmgr_nodes.c). A pull looks up the peers it needs (a keyed subscription per
 *   new peer: its snapshot, then its changes) and waits for their records briefly
 *   (nodes_cond); no node follows the whole membership. A known node id whose address comes
 *   back with a new run id is a restarted node (logged); the shm clients are keyed by store
 *   path and run id, so a predecessor's client is never reused.
 * - Lock order: om->lock, then a shm peer lock (never the other way); the fast path's start
 *   also takes the location cache's and the loop's post lock under it (both leaves). Nothing
 *   blocking is done under om->lock.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/util.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"

uint64_t ferry__objmgr_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- hand-offs to the loop ---- */

static struct ferry__objmgr_handoff *handoff_at(void *steps, size_t stride, size_t offset,
						unsigned i)
{
	return (struct ferry__objmgr_handoff *)(void *)((char *)steps + i * stride + offset);
}

unsigned ferry__objmgr_handoff_start(struct ferry__objmgr *om, void *steps, size_t stride,
				     size_t offset, unsigned n,
				     void (*start)(void *step, int status))
{
	unsigned posted = 0;
	int ret;

	pthread_mutex_lock(&om->lock);
	ret = om->stopping ? -ECANCELED : 0;
	pthread_mutex_unlock(&om->lock);
	for (unsigned i = 0; i < n; i++) {
		struct ferry__objmgr_handoff *h = handoff_at(steps, stride, offset, i);

		h->status = ret;
		h->done = false;
		pthread_cond_init(&h->cond, NULL);
		if (ret == 0 && ferry__loop_post(om->loop, start, (char *)steps + i * stride) == 0)
			posted = i + 1;
		else
			h->status = ret = ret < 0 ? ret : -ECANCELED;
	}
	return posted;
}

void ferry__objmgr_handoff_wait(struct ferry__objmgr *om, void *steps, size_t stride, size_t offset,
				unsigned n, unsigned posted)
{
	pthread_mutex_lock(&om->lock);
	for (unsigned i = 0; i < posted; i++) {
		struct ferry__objmgr_handoff *h = handoff_at(steps, stride, offset, i);

		while (!h->done)
			pthread_cond_wait(&h->cond, &om->lock);
	}
	pthread_mutex_unlock(&om->lock);
	for (unsigned i = 0; i < n; i++)
		pthread_cond_destroy(&handoff_at(steps, stride, offset, i)->cond);
}

void ferry__objmgr_handoff_run(struct ferry__objmgr *om, void *steps, size_t stride, size_t offset,
			       unsigned n, void (*start)(void *step, int status))
{
	unsigned posted = ferry__objmgr_handoff_start(om, steps, stride, offset, n, start);

	ferry__objmgr_handoff_wait(om, steps, stride, offset, n, posted);
}

void ferry__objmgr_handoff_done(struct ferry__objmgr *om, struct ferry__objmgr_handoff *h,
				int status)
{
	pthread_mutex_lock(&om->lock);
	h->status = status;
	h->done = true;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&om->lock);
}

/* ---- admission ---- */

/* @bytes more would pass the limit (one pull alone always fits). om->lock held. */
static bool over_limit(const struct ferry__objmgr *om, uint64_t bytes)
{
	return om->stats.bytes_in_flight && om->stats.bytes_in_flight + bytes > om->max_in_flight;
}

int ferry__objmgr_admit(struct ferry__objmgr *om, uint64_t bytes)
{
	int ret;

	pthread_mutex_lock(&om->lock);
	while (over_limit(om, bytes) && !om->stopping)
		pthread_cond_wait(&om->admit_cond, &om->lock);
	ret = om->stopping ? -ECANCELED : 0;
	if (ret == 0) /* nothing is reserved for a caller that is told no */
		om->stats.bytes_in_flight += bytes;
	pthread_mutex_unlock(&om->lock);
	return ret;
}

void ferry__objmgr_unadmit(struct ferry__objmgr *om, uint64_t bytes)
{
	pthread_mutex_lock(&om->lock);
	om->stats.bytes_in_flight -= bytes;
	pthread_cond_broadcast(&om->admit_cond);
	pthread_mutex_unlock(&om->lock);
}

int ferry__objmgr_try_admit(struct ferry__objmgr *om, uint64_t bytes)
{
	int ret = 0;

	pthread_mutex_lock(&om->lock);
	if (om->stopping)
		ret = -ECANCELED;
	else if (over_limit(om, bytes))
		ret = -EAGAIN;
	else
		om->stats.bytes_in_flight += bytes;
	pthread_mutex_unlock(&om->lock);
	return ret;
}

static int admit(void *arg, uint64_t bytes)
{
	return ferry__objmgr_admit(arg, bytes);
}

static void unadmit(void *arg, uint64_t bytes)
{
	ferry__objmgr_unadmit(arg, bytes);
}

/* ---- one pull ---- */

#define SPLIT_MIN_BYTES (16u << 20) /* a rest this large is split over several sources */
#define MAX_SOURCES 4		    /* sources of one pull at once */

/* One stream fetch of [begin, end) of @id (@size bytes) from @src into @dst. */
static void fetch_init(struct ferry__objmgr_fetch *f, const struct ferry__node_addr *src,
		       const struct ferry_object_id *id, uint8_t *dst, uint64_t begin, uint64_t end,
		       uint64_t size)
{
	memset(f, 0, sizeof(*f));
	f->id = *id;
	snprintf(f->ip, sizeof(f->ip), "%s", src->ip);
	f->port = src->tcp_port;
	f->dst = dst;
	f->next = begin;
	f->end = end;
	f->object_size = size;
}

/*
 * The rest of the object, [from, size), in parts from @a and up to MAX_SOURCES - 1 @helpers
 * at once (when it is large). A helper's part that fails is fetched again from @a; @a's own
 * failure ends the pull (the caller tries the next location).
 */
static int fetch_rest(struct ferry__objmgr *om, const struct ferry__node_addr *a,
		      const struct ferry__node_addr *helpers, unsigned nhelpers,
		      const struct ferry_object_id *id, uint8_t *dst, uint64_t from, uint64_t size)
{
	struct ferry__objmgr_fetch parts[MAX_SOURCES];
	unsigned n = 1, i;
	uint64_t step;

	if (size - from >= SPLIT_MIN_BYTES)
		n += nhelpers < MAX_SOURCES - 1 ? nhelpers : MAX_SOURCES - 1;
	step = ((size - from) / n + 65535) & ~(uint64_t)65535; /* 64 KiB-aligned parts */
	for (i = 0; i < n && from + i * step < size; i++) {
		uint64_t end = from + (i + 1) * step;

		end = i + 1 == n || end > size ? size : end;
		fetch_init(&parts[i], i ? &helpers[i - 1] : a, id, dst, from + i * step, end, size);
	}
	n = i;
	ferry__objmgr_fetch_run_many(om, parts, n);
	if (parts[0].h.status < 0)
		return parts[0].h.status;
	for (i = 1; i < n; i++) {
		struct ferry__objmgr_fetch again;

		if (parts[i].h.status == 0)
			continue;
		FLOG_INFO(COMP, "part from %s failed (%s): fetching it from %s", parts[i].ip,
			  ferry_strerror(-parts[i].h.status), a->ip);
		fetch_init(&again, a, id, dst, parts[i].next, parts[i].end, size);
		ferry__objmgr_fetch_run_many(om, &again, 1);
		if (again.h.status < 0)
			return again.h.status;
	}
	return 0;
}

/* The data phase over TCP after probe @f succeeded: create, fetch the rest, seal (abort on any
 * failure). */
static int pull_tcp_rest(struct ferry__objmgr *om, const struct ferry__node_addr *a,
			 const struct ferry__node_addr *helpers, unsigned nhelpers,
			 const struct ferry_object_id *id, const struct ferry__objmgr_fetch *f,
			 const struct ferry_worker_id *owner, uint64_t *bytes)
{
	uint64_t total = f->data_size + f->metadata_size;
	void *dst;
	int ret;

	ret = admit(om, total);
	if (ret < 0)
		return ret;
	ret = ferry_plasma_client_create_owned(om->store, id, f->data_size, f->metadata,
					       f->metadata_size, FERRY_PLASMA_CREATE_SECONDARY,
					       owner, &dst);
	if (ret < 0)
		goto out_unadmit;
	if (f->first_size)
		memcpy(dst, f->first, f->first_size);
	if (f->first_size < f->data_size)
		ret = fetch_rest(om, a, helpers, nhelpers, id, dst, f->first_size, f->data_size);
	ret = ret == 0 ? ferry_plasma_client_seal(om->store, id) : ret;
	if (ret < 0)
		(void)ferry_plasma_client_abort(om->store, id);
	else
		*bytes = total;
out_unadmit:
	unadmit(om, total);
	return ret;
}

/* The data phase over TCP: probe, then the rest. */
static int pull_tcp(struct ferry__objmgr *om, const struct ferry__node_addr *a,
		    const struct ferry__node_addr *helpers, unsigned nhelpers,
		    const struct ferry_object_id *id, const struct ferry_worker_id *owner,
		    uint64_t *bytes)
{
	struct ferry__objmgr_fetch f;
	int ret;

	memset(&f, 0, sizeof(f));
	f.id = *id;
	snprintf(f.ip, sizeof(f.ip), "%s", a->ip);
	f.port = a->tcp_port;
	ferry__objmgr_fetch_run_many(om, &f, 1);
	ret = f.h.status;
	if (ret == 0)
		ret = pull_tcp_rest(om, a, helpers, nhelpers, id, &f, owner, bytes);
	ferry__free(f.metadata);
	ferry__free(f.first);
	return ret;
}

int ferry__objmgr_pull_tcp_probed(struct ferry__objmgr *om, const struct ferry__node_addr *a,
				  const struct ferry__node_addr *helpers, unsigned nhelpers,
				  const struct ferry_object_id *id, struct ferry__objmgr_fetch *f,
				  const struct ferry_worker_id *owner, uint64_t *bytes)
{
	int ret = pull_tcp_rest(om, a, helpers, nhelpers, id, f, owner, bytes);

	ferry__objmgr_probe_free(f);
	return ret;
}

/* One location: the best transport both sides have (TCP may take parts from @helpers). */
unsigned ferry__objmgr_transport_for(const struct ferry__objmgr *om,
				     const struct ferry__node_addr *a)
{
	unsigned both = om->opts.transports & ferry__node_addr_transports(a);

	if ((both & FERRY_GCS_TRANSPORT_SHM) && !strcmp(a->host, om->host))
		return FERRY_GCS_TRANSPORT_SHM;
	if (both & FERRY_GCS_TRANSPORT_RDMA)
		return FERRY_GCS_TRANSPORT_RDMA;
	return both & FERRY_GCS_TRANSPORT_TCP;
}

static int pull_from(struct ferry__objmgr *om, const struct ferry__node_addr *a,
		     const struct ferry__node_addr *helpers, unsigned nhelpers,
		     const struct ferry__objmgr_pull *p, struct ferry__objmgr_result *res)
{
	const struct ferry_object_id *id = &p->id;
	unsigned both = om->opts.transports & ferry__node_addr_transports(a);
	unsigned t = ferry__objmgr_transport_for(om, a);

	if (t == FERRY_GCS_TRANSPORT_SHM) {
		res->transport = FERRY_GCS_TRANSPORT_SHM;
		return ferry__shm_pull(&om->shm, a->shm_path, a->run, om->store, id, admit, unadmit,
				       om, &res->bytes);
	}
	if (t == FERRY_GCS_TRANSPORT_RDMA) {
		int ret;

		res->transport = FERRY_GCS_TRANSPORT_RDMA;
		ret = ferry__objmgr_rdma_pull(om, a, id, &p->sizes, &res->bytes);
		/* What TCP carries and RDMA does not (metadata over a message), or no RDMA path
		 * to the node: the same node over TCP. Other errors end this location. */
		if (!(ret == -EMSGSIZE || ret == -EHOSTUNREACH) ||
		    !(both & FERRY_GCS_TRANSPORT_TCP))
			return ret == -EMSGSIZE ? -E2BIG : ret;
		FLOG_INFO(COMP, "RDMA pull from %s failed (%s): trying TCP", a->ip,
			  ferry_strerror(-ret));
		t = FERRY_GCS_TRANSPORT_TCP;
	}
	if (t == FERRY_GCS_TRANSPORT_TCP) {
		res->transport = FERRY_GCS_TRANSPORT_TCP;
		return pull_tcp(om, a, helpers, nhelpers, id, &p->sizes.owner, &res->bytes);
	}
	return -EHOSTUNREACH;
}

/* TCP sources after @first that may serve parts: into @out (MAX_SOURCES - 1 at most). */
static unsigned collect_helpers(struct ferry__objmgr *om, const struct ferry_gcs_object_info *info,
				const struct ferry__node_addr *addrs, const int *have,
				uint32_t first, struct ferry__node_addr *out)
{
	unsigned n = 0;

	if (!(om->opts.transports & FERRY_GCS_TRANSPORT_TCP))
		return 0;
	for (uint32_t i = first + 1; i < info->nlocations && n < MAX_SOURCES - 1; i++)
		if (have[i] == 0 && addrs[i].tcp_port &&
		    !ferry_node_id_eq(&info->locations[i], &om->opts.node_id))
			out[n++] = addrs[i];
	return n;
}

/* Same-host locations first, so shm is tried before the network. */
void ferry__objmgr_same_host_first(const struct ferry__objmgr *om, struct ferry_node_id *locs,
				   uint32_t n, struct ferry__node_addr *addrs, int *have)
{
	for (uint32_t i = 0, j = 0; i < n; i++) {
		if (have[i] == 0 && !strcmp(addrs[i].host, om->host)) {
			struct ferry_node_id t = locs[i];
			struct ferry__node_addr ta = addrs[i];
			int th = have[i];

			locs[i] = locs[j], addrs[i] = addrs[j], have[i] = have[j];
			locs[j] = t, addrs[j] = ta, have[j] = th;
			j++;
		}
	}
}

static void order_locations(struct ferry__objmgr *om, struct ferry_node_id *locs, uint32_t n,
			    struct ferry__node_addr *addrs, int *have)
{
	ferry__objmgr_want_peers(om, locs, n);
	for (uint32_t i = 0; i < n; i++)
		have[i] = ferry__objmgr_node_address(om, &locs[i], &addrs[i]);
	ferry__objmgr_same_host_first(om, locs, n, addrs, have);
}

/*
 * The location the loop's fast path tried (objmgr_fast.c): what pull_from() would have
 * returned, going on from its TCP probe's reply when it had one, or pull_from() itself when
 * the fast path left the location untried (FERRY__OBJMGR_FAST_RETRY). Once: a second time it
 * is tried like any other location (the directory cannot list it again, drop_tried()
 * removes it).
 */
static int fast_continue(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
			 const struct ferry__node_addr *a, const struct ferry__node_addr *helpers,
			 unsigned nhelpers, struct ferry__objmgr_result *res)
{
	struct ferry__objmgr_fetch *f = p->fast_probe;

	p->fast_tried = false;
	p->fast_probe = NULL;
	if (p->fast_status == FERRY__OBJMGR_FAST_RETRY)
		return pull_from(om, a, helpers, nhelpers, p, res);
	res->transport = p->fast_transport;
	if (!f)
		return p->fast_status;
	return ferry__objmgr_pull_tcp_probed(om, a, helpers, nhelpers, &p->id, f, &p->sizes.owner,
					     &res->bytes);
}

/* An attempt's result after which trying another location cannot help: done, or the own store
 * cannot take the object, or stopping. */
static bool location_final(int r)
{
	return r == 0 || r == -ENOSPC || r == -E2BIG || r == -ENOMEM || r == -ECANCELED;
}

/* Try each location until one works (later ones may help with parts of a large object). A
 * full own store ends it: no other source helps. */
static int try_locations(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
			 struct ferry_gcs_object_info *info, struct ferry__objmgr_result *res)
{
	struct ferry__node_addr *addrs = ferry__calloc(info->nlocations, sizeof(*addrs));
	int *have = ferry__calloc(info->nlocations, sizeof(*have));
	struct ferry__node_addr helpers[MAX_SOURCES - 1];
	unsigned nhelpers;
	int ret = -ENOENT, r;

	if (!addrs || !have) {
		ferry__free(addrs);
		ferry__free(have);
		return -ENOMEM;
	}
	order_locations(om, info->locations, info->nlocations, addrs, have);
	for (uint32_t i = 0; i < info->nlocations; i++) {
		if (ferry_node_id_eq(&info->locations[i], &om->opts.node_id) || have[i] < 0)
			continue;
		res->attempts++;
		res->source = info->locations[i];
		nhelpers = collect_helpers(om, info, addrs, have, i, helpers);
		if (p->fast_tried && ferry_node_id_eq(&info->locations[i], &p->fast_node))
			r = fast_continue(om, p, &addrs[i], helpers, nhelpers, res);
		else
			r = pull_from(om, &addrs[i], helpers, nhelpers, p, res);
		if (location_final(r)) {
			ret = r;
			break;
		}
		/* A waiting pull's retries say it once (objmgr_wait.c logs how it ended). */
		if (!p->tries)
			FLOG_INFO(COMP, "pull from %s failed: %s%s", addrs[i].ip,
				  ferry_strerror(-r),
				  i + 1 < info->nlocations ? ", trying the next location" : "");
		/* Keep the most telling error: a dead peer or deadline over "not there". */
		if (r != -ENOENT && r != -EEXIST)
			ret = r == -ECONNREFUSED || r == -EHOSTUNREACH || r == -EPROTO ? -ECONNRESET
										       : r;
		else if (r == -EEXIST && ret == -ENOENT)
			ret = -EEXIST;
	}
	ferry__free(addrs);
	ferry__free(have);
	return ret;
}

/* A result after which no other location can help the pull: also -EEXIST (the object
 * appeared in the own store meanwhile). */
static bool pull_final(int r)
{
	return location_final(r) || r == -EEXIST;
}

/* Drop from @info's locations those in @tried[0..@ntried), and their places with them (the
 * two arrays stay parallel). */
static void drop_tried(struct ferry_gcs_object_info *info, const struct ferry_node_id *tried,
		       uint32_t ntried)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < info->nlocations; i++) {
		bool seen = false;

		for (uint32_t j = 0; j < ntried && !seen; j++)
			seen = ferry_node_id_eq(&info->locations[i], &tried[j]);
		if (seen)
			continue;
		info->locations[kept] = info->locations[i];
		if (info->places)
			info->places[kept] = info->places[i];
		kept++;
	}
	info->nlocations = kept;
}

/*
 * Find the object's locations and pull from them: the location cache's, which its keyed
 * subscription's snapshot fills (no lookup, objmgr_locs.c); when the cache cannot answer or
 * all of its locations failed, the directory's, minus those already tried. A stale entry costs
 * one failed attempt and a look-up, and the result is what the directory alone would have
 * given, except that a dead cached location's -ECONNRESET / -ETIMEDOUT wins over a later
 * "not there".
 */
static int pull_located(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
			struct ferry__objmgr_result *res)
{
	const struct ferry_object_id *id = &p->id;
	struct ferry_node_id cached[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry_gcs_object_info info = {.id = *id};
	uint32_t ncached;
	int ret = -ENOENT, r, known = -EAGAIN;

	if (p->fast_tried) { /* go on with what the fast path read */
		ncached = p->ncached;
		memcpy(cached, p->cached, ncached * sizeof(cached[0]));
	} else {
		ferry__objmgr_locs_follow(om, id); /* its snapshot answers, its events follow */
		known = ferry__objmgr_locs_await(om, id, cached, &p->sizes);
		ncached = known > 0 ? (uint32_t)known : 0;
	}
	if (known == 0) /* listed nowhere yet: its put comes as an event (objmgr_wait.c) */
		return -ENOENT;
	if (ncached) {
		info.locations = cached;
		info.nlocations = ncached;
		ret = try_locations(om, p, &info, res);
		if (pull_final(ret))
			return ret;
	}
	r = ferry_gcs_object_lookup(om->opts.gcs, id, &info);
	if (r < 0)
		return ncached ? ret : r == -ETIMEDOUT ? r : -ENOENT;
	if (info.size_bytes) {
		p->sizes = (struct ferry__objmgr_sizes){info.size_bytes, info.metadata_bytes,
							info.owner_worker};
		if (ferry__objmgr_sizes_hook)
			ferry__objmgr_sizes_hook(id, &p->sizes);
	}
	p->sizes.owner = info.owner_worker; /* the copy keeps it */
	drop_tried(&info, cached, ncached);
	if (info.nlocations || !ncached) {
		r = try_locations(om, p, &info, res);
		ret = ncached && r == -ENOENT ? ret : r;
	}
	ferry_gcs_free(info.locations);
	return ret;
}

static int pull_once(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
		     struct ferry__objmgr_result *res)
{
	const struct ferry_object_id *id = &p->id;
	int ret;

	if (ferry_plasma_client_contains(om->store, id) == 1) {
		res->source = om->opts.node_id;
		return 0;
	}
	if (!om->opts.gcs)
		return -ENOENT;
	ret = pull_located(om, p, res);
	/* Someone else (a local put, a concurrent path) made it meanwhile: fine if sealed. */
	if (ret == -EEXIST)
		ret = ferry_plasma_client_contains(om->store, id) == 1 ? 0 : -EBUSY;
	return ret;
}

void (*ferry__objmgr_sealed_hook)(struct ferry__objmgr *om, const struct ferry_object_id *id);
void (*ferry__objmgr_sizes_hook)(const struct ferry_object_id *id,
				 struct ferry__objmgr_sizes *sizes);
void (*ferry__objmgr_place_hook)(const struct ferry_object_id *id,
				 struct ferry_gcs_object_place *place);

/*
 * Record a pulled copy without a node (tests, tools): before the waiters hear, so that a
 * caller's later look-up finds it. Inside a node (opts.node_records_copies) the node does it
 * from the store's on_sealed hook instead, on its directory thread, in the order the store saw
 * the seal and the removal: a record made here, beside the store's event stream, could land
 * after the removal of a copy deleted or evicted meanwhile (or one whose delete the store read
 * before the seal notice, which then reports neither) and stay listed for good.
 */
static void record_copy(struct ferry__objmgr *om, const struct ferry__objmgr_result *res)
{
	int r;

	if (res->status < 0 || !res->transport || !om->opts.gcs || om->opts.node_records_copies)
		return;
	r = ferry_gcs_object_add_location(om->opts.gcs, &res->id, &om->opts.node_id, 0);
	if (r < 0)
		FLOG_WARN(COMP, "recording a pulled copy failed: %s", ferry_strerror(-r));
}

/* The ring is allocated at the first pull that ends, under om->lock: a store nobody pulls into
 * holds none. Without memory the pull is not recorded (the timeline says dropped). */
static void record_event(struct ferry__objmgr *om, const struct ferry__objmgr_result *res)
{
	struct ferry__objmgr_event *e;
	struct timespec now;

	if (!om->timeline)
		om->timeline = ferry__calloc(FERRY__OBJMGR_TIMELINE, sizeof(*om->timeline));
	if (!om->timeline)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	e = &om->timeline[om->timeline_ended++ % FERRY__OBJMGR_TIMELINE];
	e->id = res->id;
	e->source = res->source;
	e->transport = res->transport;
	e->status = res->status;
	e->bytes = res->status == 0 ? res->bytes : 0;
	e->micros = res->micros;
	e->start_us = (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u - res->micros;
}

size_t ferry__objmgr_timeline(struct ferry__objmgr *om, struct ferry__objmgr_event *out, size_t max,
			      uint64_t *dropped)
{
	uint64_t first, kept;
	size_t n;

	pthread_mutex_lock(&om->lock);
	kept = om->timeline ? FERRY_MIN(om->timeline_ended, (uint64_t)FERRY__OBJMGR_TIMELINE) : 0;
	n = (size_t)FERRY_MIN(kept, (uint64_t)max);
	first = om->timeline_ended - n;
	for (size_t i = 0; i < n; i++)
		out[i] = om->timeline[(first + i) % FERRY__OBJMGR_TIMELINE];
	if (dropped)
		*dropped = om->timeline_ended - kept;
	pthread_mutex_unlock(&om->lock);
	return n;
}

/* The pull's rows of the metrics (common/metrics.h): per transport, failures by reason. */
static void count_pull(const struct ferry__objmgr_result *res)
{
	ferry__metric_observe_us(FERRY__MH_pull_seconds, res->micros);
	if (res->status == 0) {
		if (res->transport == FERRY_GCS_TRANSPORT_TCP) {
			ferry__metric_add(FERRY__MC_pulls_tcp, 1);
			ferry__metric_add(FERRY__MC_pull_bytes_tcp, res->bytes);
		} else if (res->transport == FERRY_GCS_TRANSPORT_RDMA) {
			ferry__metric_add(FERRY__MC_pulls_rdma, 1);
			ferry__metric_add(FERRY__MC_pull_bytes_rdma, res->bytes);
		} else if (res->transport == FERRY_GCS_TRANSPORT_SHM) {
			ferry__metric_add(FERRY__MC_pulls_shm, 1);
			ferry__metric_add(FERRY__MC_pull_bytes_shm, res->bytes);
		}
		return;
	}
	switch (res->status) {
	case -ENOENT:
		ferry__metric_add(FERRY__MC_pull_fail_missing, 1);
		break;
	case -ETIMEDOUT:
		ferry__metric_add(FERRY__MC_pull_fail_timeout, 1);
		break;
	case -ENOSPC:
	case -ENOMEM:
		ferry__metric_add(FERRY__MC_pull_fail_space, 1);
		break;
	case -ECANCELED:
		ferry__metric_add(FERRY__MC_pull_fail_canceled, 1);
		break;
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EPIPE:
	case -EHOSTUNREACH:
	case -EPROTO:
	case -EIO:
		ferry__metric_add(FERRY__MC_pull_fail_peer, 1);
		break;
	default:
		ferry__metric_add(FERRY__MC_pull_fail_other, 1);
	}
}

void ferry__objmgr_finish(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
			  struct ferry__objmgr_result *res)
{
	struct ferry__objmgr_waiter *w;

	res->micros = ferry__objmgr_now_us() - p->start_us;
	count_pull(res);
	pthread_mutex_lock(&om->lock);
	(void)ferry__hashmap_remove(&om->pulls, &p->id, NULL);
	record_event(om, res);
	if (res->status == 0) {
		om->stats.pulls_ok++;
		om->stats.bytes_pulled += res->bytes;
	} else {
		om->stats.pulls_failed++;
	}
	pthread_mutex_unlock(&om->lock);
	while ((w = p->waiters)) {
		p->waiters = w->next;
		w->cb(w->arg, res);
		ferry__free(w);
	}
	ferry__free(p);
}

void ferry__objmgr_enqueue(struct ferry__objmgr *om, struct ferry__objmgr_pull *p)
{
	p->next = NULL;
	if (om->queue_tail)
		om->queue_tail->next = p;
	else
		om->queue = p;
	om->queue_tail = p;
	om->nqueued++;
	pthread_cond_signal(&om->work_cond);
	ferry__objmgr_pool_grow(om);
}

/* After an attempt of @p that failed with @status: parked for another (true), or it ends. */
static bool park(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status)
{
	bool parked;

	pthread_mutex_lock(&om->lock);
	parked = ferry__objmgr_wait_park(om, p, status);
	pthread_mutex_unlock(&om->lock);
	return parked;
}

/* Take the queue's head, or leave (stopping with nothing queued, or idle: objmgr_pool.c). The
 * thread counts as free (om->nidle) while it waits. NULL: leave. */
static struct ferry__objmgr_pull *take_work(struct ferry__objmgr_puller *self, bool was_busy)
{
	struct ferry__objmgr *om = self->om;
	struct ferry__objmgr_pull *p;

	pthread_mutex_lock(&om->lock);
	om->nidle += was_busy;
	p = ferry__objmgr_wait_for_work(om) ? NULL : om->queue;
	if (p) {
		om->queue = p->next;
		if (!om->queue)
			om->queue_tail = NULL;
		om->nqueued--;
	} else {
		om->nrunning--;
		self->state = FERRY__PULLER_EXITED; /* joined by the next start or by stop */
	}
	om->nidle--;
	pthread_mutex_unlock(&om->lock);
	return p;
}

void *ferry__objmgr_pull_thread(void *arg)
{
	struct ferry__objmgr *om = ((struct ferry__objmgr_puller *)arg)->om;
	struct ferry__objmgr_pull *p;
	bool busy = false;

	pthread_setname_np(pthread_self(), "ferry-om-pull");
	for (;; busy = true) {
		struct ferry__objmgr_result res = {0};

		p = take_work(arg, busy);
		if (!p)
			return NULL;
		if (p->big) { /* the loop runs this pull: create its copy, nothing else */
			ferry__objmgr_rdma_big_create(om, p);
			continue;
		}
		res.id = p->id;
		/* The fast path created the copy and could not seal it: as pull_tcp would. */
		if (p->fast_abort)
			(void)ferry_plasma_client_abort(om->store, &p->id);
		/* Read without the lock (a pull in flight when stop comes ends at its own pace). */
		res.status = __atomic_load_n(&om->stopping, __ATOMIC_ACQUIRE)
				     ? -ECANCELED
				     : pull_once(om, p, &res);
		ferry__objmgr_probe_free(p->fast_probe); /* its location was not reached */
		p->fast_probe = NULL;
		if (res.status < 0 && park(om, p, res.status))
			continue;
		ferry__objmgr_wait_log_end(p, res.status);
		if (res.status < 0)
			res.bytes = 0;
		if (res.status == 0 && res.transport && ferry__objmgr_sealed_hook)
			ferry__objmgr_sealed_hook(om, &res.id);
		record_copy(om, &res);
		ferry__objmgr_finish(om, p, &res);
	}
}

/* A pull of @id, waiting for the object until @wait_until_us (0: one attempt), joining one
 * under way (and extending its wait). */
static int pull_start(struct ferry__objmgr *om, const struct ferry_object_id *id,
		      uint64_t wait_until_us, ferry__objmgr_pull_cb cb, void *arg)
{
	struct ferry__objmgr_waiter *w = ferry__calloc(1, sizeof(*w));
	struct ferry__objmgr_pull *p = NULL, **slot;
	int ret;

	if (!w)
		return -ENOMEM;
	w->cb = cb;
	w->arg = arg;
	pthread_mutex_lock(&om->lock);
	if (om->stopping) {
		ret = -ECANCELED;
		goto err_unlock;
	}
	ret = ferry__hashmap_put(&om->pulls, id, (void **)&slot);
	if (ret < 0)
		goto err_unlock;
	if (ret == 0) { /* under way: join it */
		w->next = (*slot)->waiters;
		(*slot)->waiters = w;
		if (wait_until_us > (*slot)->wait_until_us)
			(*slot)->wait_until_us = wait_until_us;
		om->stats.pulls_joined++;
		pthread_mutex_unlock(&om->lock);
		return 0;
	}
	p = ferry__calloc(1, sizeof(*p));
	if (!p) {
		(void)ferry__hashmap_remove(&om->pulls, id, NULL);
		ret = -ENOMEM;
		goto err_unlock;
	}
	p->id = *id;
	p->waiters = w;
	p->start_us = ferry__objmgr_now_us();
	p->wait_until_us = wait_until_us;
	*slot = p;
	om->stats.pulls_started++;
	if (!ferry__objmgr_fast_start(om, p))
		ferry__objmgr_enqueue(om, p);
	pthread_mutex_unlock(&om->lock);
	return 0;

err_unlock:
	pthread_mutex_unlock(&om->lock);
	ferry__free(w);
	return ret;
}

int ferry__objmgr_pull(struct ferry__objmgr *om, const struct ferry_object_id *id,
		       ferry__objmgr_pull_cb cb, void *arg)
{
	return pull_start(om, id, 0, cb, arg);
}

int ferry__objmgr_pull_until(struct ferry__objmgr *om, const struct ferry_object_id *id,
			     uint32_t wait_ms, ferry__objmgr_pull_cb cb, void *arg)
{
	uint64_t until = wait_ms ? ferry__objmgr_now_us() + (uint64_t)wait_ms * 1000u : UINT64_MAX;

	return pull_start(om, id, until, cb, arg);
}

/* Pulls waited for together (ferry__objmgr_pull_all). */
struct pull_wait {
	pthread_mutex_t lock;		      /* guards remaining */
	pthread_cond_t done;		      /* signalled at zero */
	atomic_size_t remaining;	      /* pulls not ended (changed under lock; read
					       * unlocked by the busy poll) */
	struct ferry__objmgr_result *results; /* one per pull */
};

struct pull_slot {
	struct pull_wait *w; /* shared state */
	size_t index;	     /* into w->results */
};

static void on_pulled(void *arg, const struct ferry__objmgr_result *res)
{
	struct pull_slot *s = arg;
	struct pull_wait *w = s->w;

	pthread_mutex_lock(&w->lock);
	w->results[s->index] = *res;
	if (--w->remaining == 0)
		pthread_cond_signal(&w->done);
	pthread_mutex_unlock(&w->lock);
}

/*
 * With a busy-poll window (opts.spin_us), poll *@pending, yielding the CPU to runnable threads,
 * until it is 0 or the window has passed: the waiting side of the loop's spin (a waiter woken by
 * a futex costs a wake-up per pull). While the loops spinning for the pull leave a CPU for it
 * (ferry__spin_waiter_enter, loop.h), always; when they do not, as the measured choice says
 * (ferry__spin_crowded_pick: a wake-up against the loops' slowdown). Returns the crowded choice
 * to report (0 slept, 1 spun), or -1 when there was none to make.
 */
static int spin_until_zero(const struct ferry__objmgr *om, const atomic_size_t *pending)
{
	bool counted;
	uint64_t end;

	if (!om->opts.spin_us || !atomic_load_explicit(pending, memory_order_acquire))
		return -1;
	counted = ferry__spin_waiter_enter();
	if (!counted && !ferry__spin_crowded_pick())
		return 0;
	end = ferry__now_ns() + (uint64_t)om->opts.spin_us * 1000u;
	while (atomic_load_explicit(pending, memory_order_acquire) && ferry__now_ns() < end &&
	       !(counted && ferry__spin_crowded()))
		sched_yield();
	if (counted)
		ferry__spin_leave();
	return counted ? -1 : 1;
}

/*
 * Does this wait say what a crowded waiter's choice costs (ferry__spin_crowded_report)? The
 * choice is a wake-up against the loops' slowdown, a few microseconds either way, so only a
 * wait made of small transfers shows it: every result moved bytes (none was local or failed)
 * and none took more than one inline round trip. A 64 MiB pull's wait (milliseconds, swinging
 * with the copy) would only blur the figure the 8 B pulls of the same process are chosen by.
 */
static bool measures_hand_off(const struct ferry__objmgr_result *results, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (results[i].status || !results[i].transport ||
		    results[i].bytes > FERRY__OBJMGR_INLINE_BYTES)
			return false;
	return count > 0;
}

int ferry__objmgr_pull_all(struct ferry__objmgr *om, const struct ferry_object_id *ids,
			   size_t count, struct ferry__objmgr_result *results)
{
	struct pull_wait w = {.lock = PTHREAD_MUTEX_INITIALIZER,
			      .done = PTHREAD_COND_INITIALIZER,
			      .results = results};
	struct pull_slot *slots = ferry__calloc(count ? count : 1, sizeof(*slots));
	uint64_t start = ferry__now_ns();
	int first = 0, crowded;

	if (!slots)
		return -ENOMEM;
	atomic_init(&w.remaining, count);
	for (size_t i = 0; i < count; i++) {
		int ret;

		slots[i] = (struct pull_slot){.w = &w, .index = i};
		ret = ferry__objmgr_pull(om, &ids[i], on_pulled, &slots[i]);
		if (ret < 0) {
			/* No callback for this one: account for it here. */
			memset(&results[i], 0, sizeof(results[i]));
			results[i].id = ids[i];
			results[i].status = ret;
			pthread_mutex_lock(&w.lock);
			w.remaining--;
			pthread_mutex_unlock(&w.lock);
		}
	}
	crowded = spin_until_zero(om, &w.remaining);
	pthread_mutex_lock(&w.lock);
	while (w.remaining)
		pthread_cond_wait(&w.done, &w.lock);
	pthread_mutex_unlock(&w.lock);
	if (crowded >= 0 && measures_hand_off(results, count))
		ferry__spin_crowded_report(crowded, ferry__now_ns() - start);
	ferry__free(slots);
	for (size_t i = 0; i < count && !first; i++)
		first = results[i].status;
	return first;
}

int ferry__objmgr_pull_wait(struct ferry__objmgr *om, const struct ferry_object_id *id,
			    struct ferry__objmgr_result *res)
{
	struct ferry__objmgr_result r;
	int ret = ferry__objmgr_pull_all(om, id, 1, &r);

	if (res)
		*res = r;
	return ret;
}

int ferry__objmgr_publish(struct ferry__objmgr *om, const struct ferry_object_id *id)
{
	struct ferry_plasma_view v;
	struct ferry_worker_id owner;
	uint64_t size;
	int ret;

	if (!om->opts.gcs)
		return -EINVAL;
	ret = ferry_plasma_client_get(om->store, id, 1, 0, &v);
	if (ret < 0)
		return ret == -ETIMEDOUT ? -ENOENT : ret;
	size = v.data_size;
	ret = ferry__plasma_client_view_owner(om->store, &v, &owner);
	(void)ferry_plasma_client_release(om->store, &v);
	if (ret < 0)
		return ret;
	/* The owner its creator named. The GCS refuses a nil owner: a node-owned object names a
	 * worker id equal to the node's. */
	if (ferry_id_is_nil(owner.bytes, sizeof(owner.bytes)))
		memcpy(owner.bytes, om->opts.node_id.bytes, sizeof(owner.bytes));
	ret = ferry_gcs_object_add(om->opts.gcs, id, &owner, &om->opts.node_id, size);
	if (ret < 0 && ret != -EEXIST)
		return ret;
	ret = ferry_gcs_object_add_location(om->opts.gcs, id, &om->opts.node_id, size);
	return ret < 0 ? ret : 0;
}
