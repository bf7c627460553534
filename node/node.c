/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node daemon's body: compose the plasma store, the object manager and a GCS client, and
 * start and stop them. The directory updates and the store hooks are in node_dir.c, the
 * heartbeats and the registration in node_gcs.c; node_int.h holds the state they share.
 *
 * DESIGN
 * - Threads: the node's loop thread (ferry-node-loop) runs the GCS client (connected on the
 *   loop, no thread of its own), the heartbeat (a loop timer: ferry_gcs_node_beat_async every
 *   heartbeat_ms, sized to the cluster by the alive count its reply carries, or instead a load
 *   report when the node's load changed or a restarted GCS asked for it; one message a beat,
 *   and none while the last one's reply is due; a beat answered -ENOENT registers the node
 *   again, same ID and address, unless the GCS declared it dead: then it stops) and the
 *   directory (async GCS calls, below), and the plasma store (plasma/server.h, on the loop it
 *   is given), whose hooks are plain calls on that thread, and the object manager (its
 *   listener, endpoints, RDMA engine and fast path; transport/objmgr.h, opts.loop): one
 *   io_uring ring for every socket of the node. It answers peers' pulls from the store on
 *   that thread without a round trip to it (ferry__plasma_server_get_on_loop). Its pull
 *   threads (a pool that leaves when idle) and the store's spill writer are the only others.
 *   The runtime socket, the worker processes and their leases (rt_srv.c, rt_pool.c,
 *   rt_lease.c) run on the same loop; see rt_srv.c's DESIGN.
 * - Lock order: node->lock, then the object manager's lock (on_miss calls into it holding
 *   node->lock so that stop can clear node->om under the same lock).
 * - Stop: the workers are ended and reaped (their deaths recorded in the GCS) and the runtime
 *   socket closes, the queue drains (its replies awaited), then the object manager stops (its pulls
 *   end, its sockets close on the loop), the loop thread leaves and the stopping thread, the loop's owner now, destroys the
 *   GCS client (its subscription callbacks end), quiets the store's spill and destroys the loop
 *   (the store's connections close with it); then the object manager's memory and the store
 *   (its socket is unlinked and its memory unmapped).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/gcs.h>
#include <ferry/plasma.h>

#include "common/alloc.h"
#include "common/loop.h"
#include "common/log.h"
#include "common/util.h"
#include "gcs/client.h"
#include "gcs/liveness.h"
#include "node/node.h"
#include "node/node_int.h"
#include "node/resources.h"
#include "plasma/server.h"
#include "transport/objmgr.h"

#define COMP "node"

/* ---- start / stop ---- */

/* The node id from @path (hex), or a new one written there; a new one if @path is NULL. */
static int load_node_id(const char *path, struct ferry_node_id *id)
{
	char hex[2 * FERRY_UNIQUE_ID_SIZE + 2];
	FILE *f;

	if (path && (f = fopen(path, "re"))) {
		size_t n = fread(hex, 1, sizeof(hex) - 1, f);

		fclose(f);
		hex[n] = '\0';
		if (n && hex[n - 1] == '\n')
			hex[n - 1] = '\0';
		if (ferry_node_id_from_hex(hex, id) == 0)
			return 0;
		FLOG_ERROR(COMP, "node id file %s does not hold a node id", path);
		return -EINVAL;
	}
	ferry_node_id_random(id);
	if (!path)
		return 0;
	ferry_node_id_to_hex(id, hex, sizeof(hex));
	f = fopen(path, "we");
	if (!f || fprintf(f, "%s\n", hex) < 0 || fclose(f) != 0) {
		FLOG_ERROR(COMP, "cannot write node id file %s", path);
		return -EIO;
	}
	return 0;
}

static int check_opts(const struct ferry__node_opts *o)
{
	if (!o || !o->gcs_address || !o->token || !o->token_len || o->token_len > 256) {
		FLOG_ERROR(COMP, "a GCS address and a token of 1..256 bytes are required");
		return -EINVAL;
	}
	if (o->socket_path && strlen(o->socket_path) >= 108) {
		FLOG_ERROR(COMP, "store socket path too long");
		return -EINVAL;
	}
	if (o->transport != FERRY__NODE_TRANSPORT_AUTO &&
	    o->transport != FERRY__NODE_TRANSPORT_TCP &&
	    o->transport != FERRY__NODE_TRANSPORT_RDMA) {
		FLOG_ERROR(COMP, "unknown transport %d", (int)o->transport);
		return -EINVAL;
	}
	if (o->copy_batch_us > FERRY__NODE_MAX_COPY_BATCH_US) {
		FLOG_ERROR(COMP, "copy record batching %u us: at most 1 s", o->copy_batch_us);
		return -EINVAL;
	}
	return ferry__node_check_ip(o->ip);
}

static void set_opts(struct ferry__node *node, const struct ferry__node_opts *o)
{
	static atomic_uint counter;
	const char *tmp = getenv("TMPDIR");

	node->opts = *o;
	memcpy(node->token, o->token, o->token_len);
	node->opts.token = node->token;
	if (o->socket_path)
		snprintf(node->socket_path, sizeof(node->socket_path), "%s", o->socket_path);
	else
		snprintf(node->socket_path, sizeof(node->socket_path), "%s/ferry-node-%d-%u.sock",
			 tmp && *tmp && strlen(tmp) < 60 ? tmp : "/tmp", (int)getpid(),
			 atomic_fetch_add(&counter, 1));
	node->opts.socket_path = node->socket_path;
	if (!node->opts.heartbeat_ms)
		node->opts.heartbeat_ms = 100;
	if (!node->opts.copy_batch_us)
		node->opts.copy_batch_us = 1000;
}

static int start_store(struct ferry__node *node)
{
	struct ferry__plasma_server_opts so = {0};

	so.socket_path = node->socket_path;
	so.memory_bytes = node->opts.memory_bytes;
	so.spill_dir = node->opts.spill_dir;
	so.store_flags = node->opts.store_flags;
	ferry__node_dir_hooks(node, &so);
	/* Only pullers that READ from this store use the checks (objmgr_rdma.c): a node that
	 * cannot serve RDMA does not hash every small object it seals. */
	so.content_checks = node->opts.transport != FERRY__NODE_TRANSPORT_TCP;
	so.loop = node->loop;
	return ferry__plasma_server_create(&so, &node->store);
}

static void *loop_main(void *arg)
{
	struct ferry__node *node = arg;

	ferry__loop_thread_run(node->loop, "ferry-node-loop", COMP);
	return NULL;
}

/* The node's loop: the store and the GCS client attach to it before its thread starts, the
 * object manager once it runs. */
static int create_loop(struct ferry__node *node)
{
	node->beat_timer.data = node;
	node->gather_timer.data = node;
	/* The object manager's too: its spin window (the TCP control sockets and the RDMA CQ
	 * are polled while the loop spins) is the loop's. */
	return ferry__loop_create(&(struct ferry__loop_opts){.spin_us = node->opts.spin_us},
				  &node->loop);
}

/*
 * The GCS client on the node's loop, and the loop's thread. The client connects in the
 * background; the node waits for shard 0 (a read of one KV key), as the address it serves on
 * is chosen from that connection's (node_addr.c): a refused token or an absent GCS fails the
 * start here, within the client's timeout.
 */
static int start_loop_and_gcs(struct ferry__node *node)
{
	struct ferry_gcs_client_opts go = {0};
	const char *addrs[1] = {node->opts.gcs_address};
	int ret;

	go.addresses = addrs;
	go.naddresses = 1;
	go.token = node->token;
	go.token_len = node->opts.token_len;
	go.kind = FERRY_GCS_CLIENT_NODE;
	ret = ferry__gcs_client_connect_on(node->loop, &go, &node->gcs);
	if (ret < 0)
		return ret;
	ret = -pthread_create(&node->loop_thread, NULL, loop_main, node);
	if (ret < 0)
		return ret;
	node->loop_started = true;
	pthread_mutex_lock(&node->lock);
	node->loop_live = true;
	pthread_mutex_unlock(&node->lock);
	ret = ferry_gcs_kv_exists(node->gcs, "ferry", 5, "node", 4);
	ret = ferry__gcs_client_unreached_why(node->gcs, ret); /* refused: not "timed out" */
	if (ret < 0)
		FLOG_ERROR(COMP, "GCS %s not reached: %s%s", node->opts.gcs_address,
			   ferry_strerror(ret),
			   ret == -ECONNREFUSED ? " (nothing listens there: is ferry-gcs running, "
						  "on that port?)"
						: "");
	return ret < 0 ? ret : 0;
}

static int start_objmgr(struct ferry__node *node)
{
	struct ferry__objmgr_opts oo = {0};
	struct ferry__objmgr *om;
	int ret;

	oo.store_socket = node->socket_path;
	oo.gcs = node->gcs;
	oo.node_id = node->id;
	oo.token = node->token;
	oo.token_len = node->opts.token_len;
	oo.ip = node->ip;
	oo.port = node->opts.port;
	oo.transports = FERRY_GCS_TRANSPORT_TCP | (node->opts.no_shm ? 0 : FERRY_GCS_TRANSPORT_SHM);
	/* auto: RDMA where this host has a device for the address (the object manager warns when
	 * one exists and does not serve it); on a host with no RDMA device at all, as most are,
	 * that is no news: said at info. rdma: a start without it fails. */
	if (node->opts.transport == FERRY__NODE_TRANSPORT_AUTO && !ferry__net_rdma_devices("/sys"))
		FLOG_INFO(COMP, "no RDMA device on this host: pulls use TCP/shm");
	else if (node->opts.transport != FERRY__NODE_TRANSPORT_TCP)
		oo.transports |= FERRY_GCS_TRANSPORT_RDMA;
	if (node->opts.transport == FERRY__NODE_TRANSPORT_AUTO)
		oo.optional = FERRY_GCS_TRANSPORT_RDMA;
	oo.timeout_ms = node->opts.pull_timeout_ms;
	oo.rdma_port = node->opts.rdma_port;
	oo.rdma_busy_poll = node->opts.rdma_busy_poll;
	oo.spin_us = node->opts.spin_us;
	/* Where the object manager serves, measured both ways (bench/results-2026-11-27.md): on
	 * the host's 2 CPUs an 8 B TCP pull's p50 is ~30% lower with it on the node's one loop
	 * (24 us against 31-36: no hop between two threads per pull), but in the soft-RoCE VM an
	 * 8 B RDMA pull's is 2.5-5x lower with a loop of its own (194-293 us against 549-1183,
	 * TCP there alike), the way RDMA stacks give completions a progress thread of their own.
	 * auto follows that: its own loop when the node serves RDMA, else the node's. */
	if (node->opts.objmgr_loop == FERRY__NODE_OBJMGR_LOOP_NODE ||
	    (node->opts.objmgr_loop == FERRY__NODE_OBJMGR_LOOP_AUTO &&
	     !(oo.transports & FERRY_GCS_TRANSPORT_RDMA))) {
		oo.loop = node->loop; /* one loop for the node's sockets */
		oo.store_server = node->store;
	} else {
		ferry__loop_spin_give_way(node->loop); /* the pulls' CPUs come first */
	}
	oo.notice_hold_ms = node->opts.notice_hold_ms;
	oo.max_queued_bytes = node->opts.max_queued_bytes;
	oo.stall_timeout_ms = node->opts.stall_timeout_ms;
	oo.max_bytes_in_flight = node->opts.max_bytes_in_flight;
	oo.node_records_copies = true;
	ret = ferry__objmgr_create(&oo, &om);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&node->lock);
	node->om = om;
	pthread_mutex_unlock(&node->lock);
	ret = ferry__objmgr_address(om, node->address, sizeof(node->address));
	return ret < 0 ? ret : 0;
}

int ferry__node_start(const struct ferry__node_opts *opts, struct ferry__node **out)
{
	struct ferry__node *node;
	int ret = check_opts(opts);

	if (ret < 0)
		return ret;
	node = ferry__calloc(1, sizeof(*node));
	if (!node)
		return -ENOMEM;
	set_opts(node, opts);
	pthread_mutex_init(&node->lock, NULL);
	pthread_cond_init(&node->idle_cond, NULL);
	node->batch = ferry__calloc(1, sizeof(*node->batch));
	if (!node->batch) {
		ferry__node_stop(node);
		return -ENOMEM;
	}
	node->batch->node = node;
	for (unsigned i = 0; i < 2 * DIR_BATCH; i++)
		node->batch->slots[i] = (struct dir_slot){node->batch, i};
	ret = load_node_id(opts->node_id_file, &node->id);
	if (ret == 0)
		ret = create_loop(node);
	if (ret == 0)
		ret = start_store(node);
	if (ret == 0)
		ret = start_loop_and_gcs(node);
	if (ret == 0)
		ret = ferry__node_choose_ip(node->gcs, &node->opts, node->ip, sizeof(node->ip));
	if (ret == 0)
		ret = start_objmgr(node);
	if (ret == 0)
		ret = ferry__node_rt_listen_tcp(node);
	if (ret == 0)
		ret = ferry__node_register(node);
	if (ret == 0)
		ret = ferry__node_rt_start(node);
	if (ret == 0)
		ret = ferry__node_metrics_start(node);
	if (ret < 0) {
		ferry__node_stop(node); /* undoes what started: each part is NULL/0 otherwise */
		return ret;
	}
	*out = node;
	return 0;
}

/* The loop thread leaves; this thread then owns the loop and ends the client on it (its
 * requests' callbacks run here, with -ECANCELED), then the loop: the store's connections close
 * with it, each client cleaned up against the store, which is freed after. */
static void stop_loop(struct ferry__node *node)
{
	if (node->loop_started) {
		ferry__loop_stop(node->loop);
		pthread_join(node->loop_thread, NULL);
	}
	node->gcs_gone = true;
	(void)ferry__loop_timer_stop(&node->beat_timer);
	(void)ferry__loop_timer_stop(&node->gather_timer);
	ferry_gcs_client_destroy(node->gcs);
	if (node->store)
		ferry__plasma_server_stop(node->store); /* its spill posts no more */
	pthread_mutex_lock(&node->lock);
	node->loop_live = false; /* the hooks post no more */
	pthread_mutex_unlock(&node->lock);
	ferry__node_rt_loop_gone(node); /* its disk helper posts no more */
	ferry__loop_destroy(node->loop);
}

void ferry__node_stop(struct ferry__node *node)
{
	struct ferry__objmgr *om;
	struct dir_item *it;

	if (!node)
		return;
	ferry__node_metrics_stop(node);
	ferry__node_rt_shutdown(node); /* its workers' deaths still reach the GCS */
	ferry__node_dir_drain(node);
	ferry__objmgr_stop(node->om);
	if (node->loop)
		stop_loop(node);
	pthread_mutex_lock(&node->lock);
	om = node->om;
	node->om = NULL;
	pthread_mutex_unlock(&node->lock);
	ferry__objmgr_destroy(om);
	ferry__node_rt_free(node);
	ferry__plasma_server_destroy(node->store);
	while ((it = node->queue)) {
		node->queue = it->next;
		ferry__free(it);
	}
	ferry__free(node->batch);
	pthread_cond_destroy(&node->idle_cond);
	pthread_mutex_destroy(&node->lock);
	ferry__free(node);
}

const struct ferry_node_id *ferry__node_id(const struct ferry__node *node)
{
	return &node->id;
}

const char *ferry__node_address(const struct ferry__node *node)
{
	return node->address;
}

const char *ferry__node_socket(const struct ferry__node *node)
{
	return node->socket_path;
}

struct ferry__objmgr *ferry__node_objmgr(const struct ferry__node *node)
{
	return node->om;
}
