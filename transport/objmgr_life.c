/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager's life cycle (options, create, stop, destroy) and its getters. The
 * DESIGN (threads, dedup, admission, lock order) is at the top of objmgr.c.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/cond.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/client_arena.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"

void ferry__objmgr_get_stats(struct ferry__objmgr *om, struct ferry__objmgr_stats *out)
{
	pthread_mutex_lock(&om->lock);
	*out = om->stats;
	out->pulls_in_flight = ferry__hashmap_count(&om->pulls);
	pthread_mutex_unlock(&om->lock);
	ferry__objmgr_locs_stats(om, out);
}

uint16_t ferry__objmgr_port(const struct ferry__objmgr *om)
{
	return om->port;
}

unsigned ferry__objmgr_transports(const struct ferry__objmgr *om)
{
	return om->opts.transports;
}

uint64_t ferry__objmgr_store_capacity(const struct ferry__objmgr *om)
{
	return om->store_capacity;
}

int ferry__objmgr_address(const struct ferry__objmgr *om, char *buf, size_t size)
{
	struct ferry__node_addr a;

	memset(&a, 0, sizeof(a));
	snprintf(a.ip, sizeof(a.ip), "%s", om->ip);
	snprintf(a.host, sizeof(a.host), "%s", om->host);
	a.run = om->run;
	if (om->opts.transports & FERRY_GCS_TRANSPORT_TCP)
		a.tcp_port = om->port;
	if (om->opts.transports & FERRY_GCS_TRANSPORT_RDMA)
		a.rdma_port = om->rdma_port;
	/* Always: it is also where a program on this host finds the node's store (a driver's
	 * "auto"), and the store serves shm pulls whether or not this node makes them (without
	 * SHM in its transports it only never pulls over shm: ferry-node --shm off). */
	snprintf(a.shm_path, sizeof(a.shm_path), "%s", om->store_socket);
	return ferry__node_addr_format(&a, buf, size);
}

/* ---- life cycle ---- */

static void *loop_main(void *arg)
{
	struct ferry__objmgr *om = arg;

	ferry__loop_thread_run(om->loop, "ferry-om-loop", COMP);
	return NULL;
}

static int check_opts(const struct ferry__objmgr_opts *o)
{
	if (!o || !o->store_socket || strlen(o->store_socket) >= FERRY__NODE_ADDR_PATH_MAX) {
		FLOG_ERROR(COMP, "a store socket path (< %d bytes) is required",
			   FERRY__NODE_ADDR_PATH_MAX);
		return -EINVAL;
	}
	if (!o->token || !o->token_len || o->token_len > 256) {
		FLOG_ERROR(COMP, "a cluster token of 1..256 bytes is required");
		return -EINVAL;
	}
	if (o->ip && strlen(o->ip) >= 48) {
		FLOG_ERROR(COMP, "bad listen address");
		return -EINVAL;
	}
	if (o->transports & ~(unsigned)FERRY_GCS_TRANSPORT_ALL) {
		FLOG_ERROR(COMP, "unknown transport bits 0x%x", o->transports);
		return -EINVAL;
	}
	if (o->spin_us > FERRY_LOOP_MAX_SPIN_US) {
		FLOG_ERROR(COMP, "busy poll window %u us: at most 1 s", o->spin_us);
		return -EINVAL;
	}
	if (o->notice_hold_ms > FERRY__OBJMGR_MAX_NOTICE_HOLD_MS) {
		FLOG_ERROR(COMP, "seal notices held %u ms: at most 10 s", o->notice_hold_ms);
		return -EINVAL;
	}
	return 0;
}

/* Copy and default the options; the pointers we keep point into @om. */
static void set_opts(struct ferry__objmgr *om, const struct ferry__objmgr_opts *o)
{
	om->opts = *o;
	memcpy(om->token, o->token, o->token_len);
	om->opts.token = om->token;
	snprintf(om->ip, sizeof(om->ip), "%s", o->ip ? o->ip : "127.0.0.1");
	om->opts.ip = om->ip;
	snprintf(om->store_socket, sizeof(om->store_socket), "%s", o->store_socket);
	om->opts.store_socket = om->store_socket;
	if (!om->opts.transports)
		om->opts.transports = FERRY_GCS_TRANSPORT_TCP | FERRY_GCS_TRANSPORT_SHM;
	if (!om->opts.rdma_chunk_bytes)
		om->opts.rdma_chunk_bytes = 256u << 10;
	if (!om->opts.rdma_depth)
		om->opts.rdma_depth = 8;
	if (!om->opts.rdma_qps)
		om->opts.rdma_qps = 2;
	if (om->opts.rdma_qps > 8)
		om->opts.rdma_qps = 8;
	if (!om->opts.chunk_bytes)
		om->opts.chunk_bytes = 1u << 20;
	if (!om->opts.notice_hold_ms)
		om->opts.notice_hold_ms = 1;
	if (om->opts.chunk_bytes > FERRY__OBJMGR_MAX_CHUNK)
		om->opts.chunk_bytes = FERRY__OBJMGR_MAX_CHUNK;
	if (!om->opts.timeout_ms)
		om->opts.timeout_ms = 30000;
	if (!om->opts.threads)
		om->opts.threads = 4;
	if (!om->opts.thread_idle_ms)
		om->opts.thread_idle_ms = 2000;
}

static int init_sync(struct ferry__objmgr *om)
{
	ferry__hashmap_init(&om->pulls, sizeof(struct ferry_object_id),
			    sizeof(struct ferry__objmgr_pull *));
	ferry__hashmap_init(&om->nodes, sizeof(struct ferry_node_id),
			    sizeof(struct ferry__node_addr));
	ferry__hashmap_init(&om->node_asks, sizeof(struct ferry_node_id), sizeof(uint8_t));
	ferry__shm_peers_init(&om->shm);
	pthread_mutex_init(&om->lock, NULL);
	ferry__cond_init_monotonic(&om->work_cond); /* timed waits: objmgr_wait.c */
	pthread_cond_init(&om->admit_cond, NULL);
	ferry__cond_init_monotonic(&om->nodes_cond); /* objmgr_nodes.c waits on it timed */
	pthread_cond_init(&om->fast_cond, NULL);
	om->notices.data = om;
	return 0;
}

static int connect_store(struct ferry__objmgr *om)
{
	struct ferry_plasma_connect_opts co = {.name = "objmgr",
					       .chunk_bytes = FERRY__OBJMGR_STORE_CHUNK};
	struct ferry_plasma_stats st;
	int ret;

	ret = ferry_plasma_client_connect(om->store_socket, &co, &om->store);
	if (ret < 0) {
		FLOG_ERROR(COMP, "cannot connect to the store at %s: %s", om->store_socket,
			   ferry_strerror(-ret));
		return ret;
	}
	/* In a node the store is served by our loop thread, which sends the seal notices: a
	 * blocking send there would wait for a read only that thread can do. */
	ferry__plasma_client_notices_nonblocking(om->store);
	ret = ferry_plasma_client_stats(om->store, &st);
	if (ret < 0)
		return ret;
	om->store_capacity = st.capacity_bytes;
	om->max_in_flight =
		om->opts.max_bytes_in_flight ? om->opts.max_bytes_in_flight : st.capacity_bytes / 2;
	return 0;
}

/* The loop's thread; the pull threads start as pulls queue (objmgr_pool.c). */
static int start_threads(struct ferry__objmgr *om)
{
	int ret = ferry__objmgr_pool_init(om);

	if (ret < 0)
		return ret;
	ret = -pthread_create(&om->loop_thread, NULL, loop_main, om);
	if (ret < 0)
		return ret;
	om->loop_started = true;
	return 0;
}

/*
 * The loop's poller while it spins (ferry__loop_set_poller): the RDMA completion queue and the
 * TCP control sockets being polled (tcp.c, "Polled receive"). Both arm their wake-ups when
 * @sleeping. On the loop thread; om->tcp goes NULL at shutdown, on the loop.
 */
static int spin_poll(void *arg, bool sleeping)
{
	struct ferry__objmgr *om = arg;
	int n = ferry__objmgr_rdma_spin_poll(om, sleeping), t = ferry__tcp_poll(om->tcp, sleeping);

	return (n > 0 ? n : 0) + t; /* a failed CQ is logged by the RDMA part */
}

/* RDMA where asked for; where it is optional and cannot be had here, without it (logged). */
static int start_rdma(struct ferry__objmgr *om)
{
	int ret;

	if (!(om->opts.transports & FERRY_GCS_TRANSPORT_RDMA))
		return 0;
	ret = ferry__objmgr_rdma_start(om);
	if (ret == 0)
		return 0;
	/* Stop it now (the loop has not run, so this thread may); it is freed with the rest in
	 * destroy, after the loop, which may still owe a cancelled poll its callback. */
	ferry__objmgr_rdma_shutdown(om);
	if (!(om->opts.optional & FERRY_GCS_TRANSPORT_RDMA)) {
		FLOG_ERROR(COMP, "RDMA on %s: %s", om->ip, ferry_strerror(-ret));
		return ret;
	}
	FLOG_WARN(COMP, "no RDMA on %s (%s): pulls use TCP/shm", om->ip, ferry_strerror(-ret));
	om->opts.transports &= ~(unsigned)FERRY_GCS_TRANSPORT_RDMA;
	return 0;
}

/* The loop side's setup: the TCP engine and its listener, RDMA, the spin poller. On the loop,
 * or before it runs. */
static int setup_loop_side(struct ferry__objmgr *om)
{
	int ret;

	ferry__objmgr_tcp_init(om);
	ret = ferry__objmgr_serve_start(om);
	if (ret == 0)
		ret = start_rdma(om);
	if (ret == 0 && om->opts.spin_us)
		ferry__loop_set_poller(om->loop, spin_poll, om);
	return ret;
}

/* setup_loop_side() as a ferry__loop_call() function. */
static int setup_loop_side_call(void *om)
{
	return setup_loop_side(om);
}

/*
 * An own loop is set up before its thread runs it. A given one runs already (the node's, with
 * the store and the GCS client on it): the setup is posted to it. Its spin window is the loop's
 * (the TCP engine's polled sockets and RDMA's armed CQ follow it), and waiters do not drive
 * it: a driver would run the store's and the GCS client's callbacks on its own thread.
 */
static int start_loop(struct ferry__objmgr *om)
{
	int ret;

	if (om->opts.loop) {
		om->loop = om->opts.loop;
		om->opts.spin_us = ferry__loop_spin_us(om->loop);
		om->loop_started = true; /* from here stop() shuts the loop side down on it */
		ret = ferry__objmgr_pool_init(om);
		return ret < 0 ? ret : ferry__loop_call(om->loop, setup_loop_side_call, om);
	}
	ret = ferry__loop_create(&(struct ferry__loop_opts){.spin_us = om->opts.spin_us},
				 &om->loop);
	if (ret < 0)
		return ret;
	om->own_loop = true;
	ret = setup_loop_side(om);
	if (ret < 0)
		return ret;
	return start_threads(om);
}

int ferry__objmgr_create(const struct ferry__objmgr_opts *opts, struct ferry__objmgr **out)
{
	struct ferry__objmgr *om;
	int ret = check_opts(opts);

	if (ret < 0)
		return ret;
	om = ferry__calloc(1, sizeof(*om));
	if (!om)
		return -ENOMEM;
	set_opts(om, opts);
	init_sync(om);
	ret = ferry__host_boot_id(om->host, sizeof(om->host));
	if (ret < 0)
		goto err_destroy;
	/* Peers tell this start from a predecessor at the same store path or port by it. */
	while (!om->run)
		if (getrandom(&om->run, sizeof(om->run), 0) != (ssize_t)sizeof(om->run))
			om->run = ferry__objmgr_now_us() ^ (uint64_t)getpid() << 40;
	ret = connect_store(om);
	if (ret < 0)
		goto err_destroy;
	ret = start_loop(om);
	if (ret < 0)
		goto err_destroy;
	ret = ferry__objmgr_nodes_start(om);
	if (ret < 0)
		goto err_destroy;
	*out = om;
	return 0;

err_destroy:
	/* destroy() undoes whatever was set up (every step leaves a NULL/false when it failed) */
	ferry__objmgr_destroy(om);
	return ret;
}

static void loop_shutdown(void *arg, int status)
{
	(void)status;
	ferry__objmgr_tcp_shutdown(arg);
	ferry__objmgr_rdma_shutdown(arg);
}

static int shared_loop_shutdown(void *arg)
{
	struct ferry__objmgr *om = arg;

	if (om->opts.spin_us)
		ferry__loop_set_poller(om->loop, NULL, NULL);
	loop_shutdown(om, 0);
	return 0;
}

void ferry__objmgr_stop(struct ferry__objmgr *om)
{
	if (!om || om->stopped)
		return;
	pthread_mutex_lock(&om->lock);
	__atomic_store_n(&om->stopping, true, __ATOMIC_RELEASE); /* also read unlocked */
	pthread_cond_broadcast(&om->work_cond);
	pthread_cond_broadcast(&om->admit_cond);
	pthread_cond_broadcast(&om->nodes_cond);
	pthread_mutex_unlock(&om->lock);
	/* Fetches under way end with -ECANCELED on the loop, which frees their pull threads. A
	 * shared loop goes on running: the shutdown is waited for, and the poller removed. */
	if (om->loop_started && !om->own_loop) {
		if (ferry__loop_call(om->loop, shared_loop_shutdown, om) < 0)
			FLOG_WARN(COMP, "cannot shut down on the loop");
	} else if (om->loop_started && ferry__loop_post(om->loop, loop_shutdown, om) < 0) {
		FLOG_WARN(COMP, "cannot post the shutdown");
	}
	ferry__objmgr_pool_stop(om);
	ferry__objmgr_wait_cancel_all(om);
	/* Pulls on the loop's fast path end there (-ECANCELED at the latest, the shutdown above
	 * failed their probes): before the loop stops, so that stop() leaves none behind. */
	pthread_mutex_lock(&om->lock);
	while (om->fast_pulls && om->loop_started)
		pthread_cond_wait(&om->fast_cond, &om->lock);
	pthread_mutex_unlock(&om->lock);
	if (om->loop_started && !om->own_loop) {
		om->loop_started = false; /* the loop and what is left on it are its owner's */
	} else if (om->loop_started) {
		ferry__loop_stop(om->loop);
		pthread_join(om->loop_thread, NULL);
		om->loop_started = false;
	}
	/* The fast path's seal notices still held back (its timer is on the stopped loop). */
	(void)ferry__plasma_client_flush(om->store, false);
	om->stopped = true;
}

void ferry__objmgr_destroy(struct ferry__objmgr *om)
{
	if (!om)
		return;
	ferry__objmgr_stop(om);
	/* Set up but never shut down on the loop (create failed, or the loop never ran): the
	 * loop is idle now, so this thread may end the engine, before the loop goes. A shared
	 * loop is gone already (its owner destroys it first) and stop() shut down on it. */
	if (om->own_loop) {
		if (om->tcp)
			ferry__objmgr_tcp_shutdown(om);
		ferry__objmgr_rdma_shutdown(om); /* idempotent */
		ferry__loop_destroy(om->loop);
	}
	ferry__objmgr_tcp_free(om);
	ferry__objmgr_rdma_free(om);
	ferry__objmgr_pool_free(om);
	ferry_plasma_client_disconnect(om->store);
	ferry__shm_peers_fini(&om->shm);
	ferry__hashmap_fini(&om->pulls);
	ferry__hashmap_fini(&om->nodes);
	ferry__hashmap_fini(&om->node_asks);
	ferry__objmgr_locs_fini(om);
	pthread_cond_destroy(&om->fast_cond);
	pthread_cond_destroy(&om->nodes_cond);
	pthread_cond_destroy(&om->admit_cond);
	pthread_cond_destroy(&om->work_cond);
	pthread_mutex_destroy(&om->lock);
	ferry__free(om->timeline);
	ferry__free(om);
}
