/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration tests of the object manager's fast path (transport/objmgr_fast.c): a pull whose
 * location is cached starts on the loop; a small object ends there, everything else is handed
 * to a pull thread that goes on from the same point. Each test checks, through the stats, that
 * the path it means was taken, so a fast path that silently stopped applying fails here.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness/ftest.h"
#include "tests/integration/transport/transport_util.h"
#include "transport/objmgr_int.h"

struct waiter {
	pthread_mutex_t lock;		 /* done, res */
	pthread_cond_t cond;		 /* done */
	bool done;			 /* the callback came */
	struct ferry__objmgr_result res; /* its result */
};

static void on_pulled(void *arg, const struct ferry__objmgr_result *res)
{
	struct waiter *w = arg;

	pthread_mutex_lock(&w->lock);
	w->res = *res;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static void waiter_wait(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	while (!w->done)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/* A small object with a cached location: done on the loop, one request, recorded as usual
 * (the store's seal notice, sent after the waiters are called back, still reaches the node). */
static void small_pulls_end_on_the_loop(uint32_t spin_us)
{
	struct tt_cluster t = (tt_node_spin_us = spin_us, tt_cluster_start(2, 64, true, 0));
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct tt_pulled pl;
	struct ferry_object_id id;

	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), c);
	for (uint64_t size = 0; size <= 4096; size = size ? size * 8 : 8) {
		ferry_object_id_random(&id);
		tt_put(ferry__node_socket(a), &id, size, 3);
		pl = tt_pull_cached(c, a, b, &id);
		ftest_assert_uint_eq(pl.res.transport, FERRY_GCS_TRANSPORT_TCP);
		ftest_assert_true(ferry_node_id_eq(&pl.res.source, ferry__node_id(a)));
		ftest_assert_uint_eq(pl.res.bytes, size + 3);
		ftest_assert_uint_eq(pl.b1.pulls_fast, pl.b0.pulls_fast + 1);
		ftest_assert_uint_eq(pl.b1.fast_handovers, pl.b0.fast_handovers);
		ftest_assert_uint_eq(pl.b1.bytes_in_flight, 0);
		ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 1);
		tt_check(ferry__node_socket(b), &id, size, 3);
		tt_wait_location(c, &id, 2); /* the node recorded the copy */
	}
	tt_cluster_stop(&t);
	tt_node_spin_us = 0;
}

FTEST(fast_small_pull_ends_on_the_loop)
{
	small_pulls_end_on_the_loop(0);
}

/* The same with busy-polling object managers (--spin-us): same results, same accounting, and
 * the pull waiter's spin ends at the result. */
FTEST(fast_small_pull_with_busy_poll)
{
	small_pulls_end_on_the_loop(2000);
}

/* Only this CPU for the process and the threads it starts from now on: with the nodes' loops
 * spinning, a pull's waiter finds no CPU left and waits crowded (ferry__spin_crowded_pick). */
static void run_on_one_cpu(void)
{
	cpu_set_t all, one;

	ftest_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	CPU_ZERO(&one);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &all)) {
			CPU_SET(cpu, &one);
			break;
		}
	ftest_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	ftest_assert_uint_eq(ferry__spin_cpus(), 1); /* read here first, as the loops will */
}

/* The crowded waiter's figures, which choose between sleeping and spinning for the next
 * pulls, are fed by small pulls' waits only: 1 MiB pulls waited crowded leave them as they
 * were, 8 B ones move them. Fails if every wait reports (the 1 MiB waits move a figure). */
FTEST(crowded_waits_are_measured_by_small_pulls_only)
{
	struct tt_cluster t;
	struct ferry__node *a, *b;
	struct ferry_gcs_client *c;
	struct ferry_object_id id;
	uint64_t slept, spun;

	run_on_one_cpu();
	tt_node_spin_us = 200000; /* long windows: the loops spin through the test's waits too */
	t = tt_cluster_start(2, 64, true, 0);
	tt_node_spin_us = 0;
	a = t.node[0], b = t.node[1];
	c = tt_cluster_client(&t);
	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), c); /* a small pull: reports */
	for (uint64_t size = 1u << 20, round = 0; round < 2; round++, size = 8) {
		bool moved = false;

		slept = ferry__spin_crowded_avg(false), spun = ferry__spin_crowded_avg(true);
		/* 20 large pulls; small ones until one waited crowded (should a loop have slept
		 * through a pull, its waiter had the CPU to itself), 500 at most. */
		for (int i = 0; i < (size > 8 ? 20 : 500) && !(size == 8 && moved); i++) {
			ferry_object_id_random(&id);
			tt_put(ferry__node_socket(a), &id, size, 5);
			ftest_assert_uint_eq(tt_pull_cached(c, a, b, &id).res.transport,
					     FERRY_GCS_TRANSPORT_TCP);
			moved = ferry__spin_crowded_avg(false) != slept ||
				ferry__spin_crowded_avg(true) != spun;
		}
		ftest_assert_int_eq(moved, size == 8);
	}
	tt_cluster_stop(&t);
}

/* In a node (whose store has hooks, so every seal is reported) the loop's copy's seal notice
 * is held back (here for up to 10 s, the most): the copy is readable on the node at once, the store
 * and so the directory hear of it only at the flush that ferry__node_sync() makes. Fails if
 * the notice goes at once (listed within 300 ms) or the sync does not flush it. With the
 * default hold (1 ms) the copy is listed without a sync: fast_small_pull_ends_on_the_loop. */
FTEST(fast_copy_seal_notice_held_back_until_flushed)
{
	struct tt_cluster t = (tt_node_notice_hold_ms = 10000, tt_cluster_start(2, 64, true, 0));
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry_object_id id;
	struct tt_pulled pl;

	tt_node_notice_hold_ms = 0;
	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), c);
	ftest_assert_ok(ferry__node_sync(b)); /* the warm-up's copy is out of the way */
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 64, 3);
	pl = tt_pull_cached(c, a, b, &id);
	ftest_assert_uint_eq(pl.b1.pulls_fast, pl.b0.pulls_fast + 1);
	tt_check(ferry__node_socket(b), &id, 64, 3);
	ftest_assert_int_eq(tt_listed(c, &id, ferry__node_id(b), 0, 300), 0);
	ftest_assert_ok(ferry__node_sync(b));
	ftest_assert_int_eq(tt_listed(c, &id, ferry__node_id(b), 0, 0), 1);
	tt_cluster_stop(&t);
}

/* Two nodes on this host with shm: a cached same-host location is read from the other store's
 * shared index and copied once, on the loop (its client there connected by the first pull);
 * an object larger than the client's chunk (1 MiB) goes to a pull thread, still over shm. */
FTEST(fast_same_host_pull_over_shm)
{
	struct tt_cluster t = tt_cluster_start(2, 64, false, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct tt_pulled pl;
	struct ferry_object_id id;
	const uint64_t sizes[] = {0, 8, 4096, 2u << 20};

	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), c);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		bool small = sizes[k] < (1u << 20);

		ferry_object_id_random(&id);
		tt_put(ferry__node_socket(a), &id, sizes[k], 11);
		pl = tt_pull_cached(c, a, b, &id);
		ftest_assert_uint_eq(pl.res.transport, FERRY_GCS_TRANSPORT_SHM);
		ftest_assert_true(ferry_node_id_eq(&pl.res.source, ferry__node_id(a)));
		ftest_assert_uint_eq(pl.res.bytes, sizes[k] + 3);
		ftest_assert_uint_eq(pl.b1.pulls_fast, pl.b0.pulls_fast + small);
		ftest_assert_uint_eq(pl.b1.fast_handovers, pl.b0.fast_handovers + !small);
		ftest_assert_uint_eq(pl.b1.bytes_in_flight, 0);
		tt_check(ferry__node_socket(b), &id, sizes[k], 11);
		tt_wait_location(c, &id, 2); /* the node recorded the copy */
	}
	tt_cluster_stop(&t);
}

/* The first cached location is gone: the pull thread goes on with the next one and does not
 * try the dead one again. */
FTEST(fast_dead_peer_goes_to_the_next_location)
{
	struct tt_cluster t = tt_cluster_start(3, 64, true, 0);
	struct ferry__node *n[2] = {t.node[0], t.node[1]}, *b = t.node[2];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS], dead;
	struct ferry__objmgr_stats sb0, sb1;
	struct ferry__objmgr_result res;
	struct ferry_object_id id;
	int first;

	/* b learns a peer's address when it first pulls from it, and the fast path needs every
	 * cached location's: one pull from each. */
	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(n[0]), c);
	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(n[1]), c);
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(n[0]), &id, 8, 4);
	tt_put(ferry__node_socket(n[1]), &id, 8, 4);
	tt_wait_location(c, &id, 2);
	tt_wait_cached(ferry__node_objmgr(b), &id, 2, locs);
	first = ferry_node_id_eq(&locs[0], ferry__node_id(n[0])) ? 0 : 1;
	dead = locs[0];
	ftest_assert_true(ferry_node_id_eq(&dead, ferry__node_id(n[first])));
	/* Stopped, its records still listed: the fast path tries it first. */
	tt_cluster_stop_node(&t, n[first]);
	ftest_assert_uint_eq(ferry__objmgr_locs_get(ferry__node_objmgr(b), &id, locs, NULL, NULL),
			     2);
	sb0 = tt_stats(b);
	ftest_assert_ok(ferry__objmgr_pull_wait(ferry__node_objmgr(b), &id, &res));
	sb1 = tt_stats(b);
	ftest_assert_true(ferry_node_id_eq(&res.source, ferry__node_id(n[!first])));
	ftest_assert_uint_eq(res.attempts, 2); /* the dead one once, then the other */
	ftest_assert_uint_eq(sb1.fast_handovers, sb0.fast_handovers + 1);
	ftest_assert_uint_eq(sb1.pulls_fast, sb0.pulls_fast);
	tt_check(ferry__node_socket(b), &id, 8, 4);
	tt_cluster_stop(&t);
}

/* Admission would wait: the loop does not, a pull thread does, with the probe's reply (no
 * second request). */
FTEST(fast_admission_full_goes_to_a_pull_thread)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct ferry__objmgr *om = ferry__node_objmgr(b);
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct waiter w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	struct ferry__objmgr_stats sa0, sb0, sa1, sb1;
	struct ferry_object_id id;
	uint64_t held;
	bool done;

	tt_warm_cache(om, ferry__node_socket(a), c);
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 8, 5);
	tt_wait_location(c, &id, 1);
	tt_wait_cached(om, &id, 1, locs);
	sa0 = tt_stats(a), sb0 = tt_stats(b);
	/* Another pull holds the whole limit. */
	pthread_mutex_lock(&om->lock);
	held = om->max_in_flight;
	om->stats.bytes_in_flight += held;
	pthread_mutex_unlock(&om->lock);
	ftest_assert_ok(ferry__objmgr_pull(om, &id, on_pulled, &w));
	for (int i = 0; i < 2000 && tt_stats(b).fast_handovers == sb0.fast_handovers; i++)
		usleep(5 * 1000);
	usleep(100 * 1000);
	pthread_mutex_lock(&w.lock);
	done = w.done;
	pthread_mutex_unlock(&w.lock);
	ftest_assert_false(done); /* waiting for admission on a pull thread */
	ferry__objmgr_unadmit(om, held);
	waiter_wait(&w);
	ftest_assert_ok(w.res.status);
	sa1 = tt_stats(a), sb1 = tt_stats(b);
	ftest_assert_uint_eq(sb1.fast_handovers, sb0.fast_handovers + 1);
	ftest_assert_uint_eq(sb1.pulls_fast, sb0.pulls_fast);
	ftest_assert_uint_eq(sb1.bytes_in_flight, 0);
	ftest_assert_uint_eq(sa1.requests_served, sa0.requests_served + 1);
	ftest_assert_uint_eq(w.res.attempts, 1);
	tt_check(ferry__node_socket(b), &id, 8, 5);
	tt_cluster_stop(&t);
}

/* Larger than the probe's inline bytes: the pull thread streams the rest and sends no second
 * probe (2 requests: the probe and one stream). */
FTEST(fast_large_object_is_probed_once)
{
	struct tt_cluster t = tt_cluster_start(2, 64, true, 0);
	struct ferry__node *a = t.node[0], *b = t.node[1];
	struct ferry_gcs_client *c = tt_cluster_client(&t);
	struct tt_pulled pl;
	struct ferry_object_id id;

	tt_warm_cache(ferry__node_objmgr(b), ferry__node_socket(a), c);
	ferry_object_id_random(&id);
	tt_put(ferry__node_socket(a), &id, 1u << 20, 6);
	pl = tt_pull_cached(c, a, b, &id);
	ftest_assert_uint_eq(pl.a1.requests_served, pl.a0.requests_served + 2);
	ftest_assert_uint_eq(pl.b1.fast_handovers, pl.b0.fast_handovers + 1);
	ftest_assert_uint_eq(pl.res.attempts, 1);
	ftest_assert_uint_eq(pl.res.bytes, (1u << 20) + 3);
	tt_check(ferry__node_socket(b), &id, 1u << 20, 6);
	tt_cluster_stop(&t);
}

/* A fast-path probe to a stalled peer when the node stops: the pull ends with -ECANCELED
 * before stop returns. */
FTEST(fast_pull_cancelled_at_stop)
{
	struct tt_proc gcs = tt_gcs_start();
	struct tt_proc a = tt_node_proc_start(gcs.port, "64M", "a");
	struct ferry__node *b = tt_node_start(gcs.port, 64, true, 0);
	struct ferry_gcs_client *c = tt_gcs_client(gcs.port);
	struct ferry_node_id locs[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct waiter w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	struct ferry__objmgr_stats sb0;
	struct ferry_object_id id;

	tt_warm_cache(ferry__node_objmgr(b), a.socket, c);
	ferry_object_id_random(&id);
	tt_put(a.socket, &id, 8, 7);
	tt_wait_location(c, &id, 1);
	tt_wait_cached(ferry__node_objmgr(b), &id, 1, locs);
	sb0 = tt_stats(b);
	tt_proc_signal(&a, SIGSTOP);
	ftest_assert_ok(ferry__objmgr_pull(ferry__node_objmgr(b), &id, on_pulled, &w));
	usleep(100 * 1000);
	/* Still on the loop, waiting for the stalled peer. */
	ftest_assert_uint_eq(tt_stats(b).fast_handovers, sb0.fast_handovers);
	pthread_mutex_lock(&ferry__node_objmgr(b)->lock);
	ftest_assert_uint_eq(ferry__node_objmgr(b)->fast_pulls, 1);
	pthread_mutex_unlock(&ferry__node_objmgr(b)->lock);
	ferry__node_stop(b);
	pthread_mutex_lock(&w.lock);
	ftest_assert_true(w.done);
	pthread_mutex_unlock(&w.lock);
	ftest_assert_errno(w.res.status, -ECANCELED);
	tt_proc_signal(&a, SIGKILL);
	ferry_gcs_client_destroy(c);
	tt_proc_signal(&gcs, SIGTERM);
}
