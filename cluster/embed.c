/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A cluster inside one process (see embed.h): a GCS on a loop thread and nodes made of
 * a plasma store, a GCS client and an object manager, plus the put / pull / check / drop
 * helpers the transport benchmark and the cluster demo share.
 *
 * DESIGN
 * - The GCS runs ferry__gcs_server on its own io_uring loop thread; stop posts a loop stop and
 *   joins, then frees the server after the loop (its connections close with the loop).
 * - A node is ferry__node_start() (node/node.h): the store, the object manager, registration,
 *   heartbeats and directory updates, as in ferry-node. The helpers add a store client for puts,
 *   checks and drops, and wait for the node's directory updates (ferry__node_sync) so that a
 *   timed pull never races a location that is still on its way to the GCS.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/embed.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/util.h"
#include "gcs/server.h"
#include "node/node.h"

#define COMP "embed"
#define MiB (1ull << 20)
#define DIRECTORY_WAIT_MS 10000

struct ferry__embed_gcs {
	struct ferry__loop *loop;      /* the server's loop */
	struct ferry__gcs_server *srv; /* the server */
	pthread_t thread;	       /* runs the loop */
};

struct ferry__embed_node {
	struct ferry__node *node;	    /* store, object manager, registration, heartbeats */
	struct ferry_plasma_client *client; /* for puts, checks and drops */
	struct ferry_gcs_client *gcs;	    /* to see the directory as pullers will */
};

/* ---- GCS ---- */

static void *gcs_thread(void *arg)
{
	struct ferry__embed_gcs *g = arg;

	ferry__loop_thread_run(g->loop, "ferry-gcs", COMP);
	return NULL;
}

int ferry__embed_gcs_start(const char *host, uint16_t port, const void *token, size_t token_len,
			   struct ferry__embed_gcs **out)
{
	struct ferry__gcs_server_opts o = {0};
	struct ferry__embed_gcs *g = ferry__calloc(1, sizeof(*g));
	int ret;

	if (!g)
		return -ENOMEM;
	o.host = host;
	o.port = port;
	o.token = token;
	o.token_len = token_len;
	ret = ferry__loop_create(NULL, &g->loop);
	if (ret < 0)
		goto err_free;
	ret = ferry__gcs_server_create(g->loop, &o, &g->srv);
	if (ret < 0)
		goto err_destroy_loop;
	ret = -pthread_create(&g->thread, NULL, gcs_thread, g);
	if (ret < 0)
		goto err_destroy_loop;
	*out = g;
	return 0;
err_destroy_loop:
	ferry__loop_destroy(g->loop);
	ferry__gcs_server_destroy(g->srv);
err_free:
	ferry__free(g);
	FLOG_ERROR(COMP, "GCS on %s:%u: %s", host ? host : "127.0.0.1", port, ferry_strerror(ret));
	return ret;
}

uint16_t ferry__embed_gcs_port(const struct ferry__embed_gcs *g)
{
	return ferry__gcs_server_port(g->srv);
}

void ferry__embed_gcs_stop(struct ferry__embed_gcs *g)
{
	if (!g)
		return;
	ferry__loop_stop(g->loop);
	pthread_join(g->thread, NULL);
	ferry__loop_destroy(g->loop);
	ferry__gcs_server_destroy(g->srv);
	ferry__free(g);
}

/* ---- nodes ---- */

/* The embed's transport mask as the node's choice: RDMA alone is RDMA (no shm); TCP without SHM is TCP
 * with shm turned off; anything with SHM is TCP (shm with nodes on this host); 0 is auto. */
static void node_transport(unsigned transports, struct ferry__node_opts *no)
{
	if (transports == FERRY_GCS_TRANSPORT_RDMA) {
		/* Nodes of one process share a host: without this, shm would win over RDMA. */
		no->transport = FERRY__NODE_TRANSPORT_RDMA;
		no->no_shm = 1;
	} else if (transports) {
		no->transport = FERRY__NODE_TRANSPORT_TCP;
		no->no_shm = !(transports & FERRY_GCS_TRANSPORT_SHM);
	}
}

int ferry__embed_node_start(const struct ferry__embed_node_opts *opts,
			    struct ferry__embed_node **out)
{
	struct ferry_plasma_connect_opts co = {0};
	struct ferry_gcs_client_opts go = {0};
	struct ferry__node_opts no = {0};
	struct ferry__embed_node *n;
	int ret;

	if (!opts || !opts->gcs || !opts->token || !opts->token_len) {
		FLOG_ERROR(COMP, "node options need gcs and token");
		return -EINVAL;
	}
	n = ferry__calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	no.gcs_address = opts->gcs;
	no.token = opts->token;
	no.token_len = opts->token_len;
	no.memory_bytes = opts->memory_bytes ? opts->memory_bytes : 256 * MiB;
	no.ip = opts->ip;
	no.spin_us = opts->spin_us;
	no.objmgr_loop = (enum ferry__node_objmgr_loop)opts->objmgr_loop;
	no.socket_path = opts->socket_path;
	no.num_workers = opts->num_workers;
	node_transport(opts->transports, &no);
	ret = ferry__node_start(&no, &n->node);
	if (ret < 0) {
		FLOG_ERROR(COMP, "node %s: %s", opts->name ? opts->name : "", ferry_strerror(ret));
		goto err_free;
	}
	co.name = opts->name;
	co.flags = FERRY_PLASMA_CONNECT_POPULATE;
	go.addresses = &opts->gcs;
	go.naddresses = 1;
	go.token = opts->token;
	go.token_len = opts->token_len;
	ret = ferry_plasma_client_connect(ferry__node_socket(n->node), &co, &n->client);
	if (ret < 0) {
		FLOG_ERROR(COMP, "connect to the store of node %s: %s",
			   opts->name ? opts->name : "", ferry_strerror(ret));
		goto err_stop_node;
	}
	ret = ferry_gcs_client_connect(&go, &n->gcs);
	if (ret < 0) {
		FLOG_ERROR(COMP, "GCS %s: %s", opts->gcs, ferry_strerror(ret));
		goto err_disconnect;
	}
	*out = n;
	return 0;
err_disconnect:
	ferry_plasma_client_disconnect(n->client);
err_stop_node:
	ferry__node_stop(n->node);
err_free:
	ferry__free(n);
	return ret;
}

void ferry__embed_node_stop(struct ferry__embed_node *n)
{
	if (!n)
		return;
	ferry_gcs_client_destroy(n->gcs);
	ferry_plasma_client_disconnect(n->client);
	ferry__node_stop(n->node);
	ferry__free(n);
}

struct ferry__objmgr *ferry__embed_node_objmgr(struct ferry__embed_node *n)
{
	return ferry__node_objmgr(n->node);
}

struct ferry_plasma_client *ferry__embed_node_client(struct ferry__embed_node *n)
{
	return n->client;
}

const struct ferry_node_id *ferry__embed_node_id(const struct ferry__embed_node *n)
{
	return ferry__node_id(n->node);
}

const char *ferry__embed_node_address(const struct ferry__embed_node *n)
{
	return ferry__node_address(n->node);
}

/* ---- objects ---- */

/* Wait until the directory lists this node as a location of @id (@listed) or not (!@listed).
 * The store reports seals and removals to the node asynchronously (a seal needs no round trip),
 * so ferry__node_sync() alone may run before the update was even queued. */
static int wait_listed(struct ferry__embed_node *n, const struct ferry_object_id *id, bool listed)
{
	const struct ferry_node_id *me = ferry__node_id(n->node);
	uint64_t deadline = ferry__now_ms() + DIRECTORY_WAIT_MS;

	for (;;) {
		struct ferry_gcs_object_info info;
		bool found = false;
		int ret = ferry_gcs_object_lookup(n->gcs, id, &info);

		if (ret < 0 && ret != -ENOENT)
			return ret;
		for (uint32_t i = 0; ret == 0 && i < info.nlocations; i++)
			found |= !memcmp(&info.locations[i], me, sizeof(*me));
		if (ret == 0)
			ferry_gcs_free(info.locations);
		if (found == listed)
			return 0;
		if (ferry__now_ms() >= deadline) {
			FLOG_ERROR(COMP, "the directory did not %s this node in %d ms",
				   listed ? "list" : "drop", DIRECTORY_WAIT_MS);
			return -ETIMEDOUT;
		}
		usleep(500);
	}
}

int ferry__embed_put(struct ferry__embed_node *n, const struct ferry_object_id *id, uint64_t size)
{
	uint8_t *buf;
	void *data;
	int ret = ferry_plasma_client_create(n->client, id, size, NULL, 0, &data);

	if (ret == -EEXIST)
		return wait_listed(n, id, true);
	if (ret < 0)
		return ret;
	buf = data;
	for (uint64_t page = 0; page < size; page += 4096) {
		uint64_t end = size - page < 4096 ? size - page : 4096;

		for (uint64_t i = 0; i < end; i++)
			buf[page + i] = ferry__embed_pattern(id, page + i);
	}
	ret = ferry_plasma_client_seal(n->client, id);
	if (ret < 0) {
		(void)ferry_plasma_client_abort(n->client, id);
		return ret;
	}
	/* The node records a sealed primary in the directory; wait until it is there. */
	return wait_listed(n, id, true);
}

int ferry__embed_check(struct ferry__embed_node *n, const struct ferry_object_id *id, uint64_t size)
{
	struct ferry_plasma_view v;
	const uint8_t *b;
	int ret = ferry_plasma_client_get(n->client, id, 1, 0, &v);

	if (ret < 0)
		return ret;
	b = v.data;
	ret = v.data_size == size ? 0 : -EIO;
	for (uint64_t off = 0; ret == 0 && off < size; off += 4096)
		if (b[off] != ferry__embed_pattern(id, off))
			ret = -EIO;
	if (ret == 0 && size && b[size - 1] != ferry__embed_pattern(id, size - 1))
		ret = -EIO;
	ferry_plasma_client_release(n->client, &v);
	return ret;
}

int ferry__embed_drop(struct ferry__embed_node *n, const struct ferry_object_id *ids, size_t count)
{
	int ret = ferry_plasma_client_delete(n->client, ids, count, NULL);

	/* The node removes its location; wait for it, so that the next pull does not find this
	 * node listed (nor its late removal undo the next copy's record). */
	for (size_t i = 0; i < count && ret == 0; i++)
		ret = wait_listed(n, &ids[i], false);
	return ret;
}

/* ---- pulls ---- */

int ferry__embed_pull_all(struct ferry__embed_node *n, const struct ferry_object_id *ids,
			  size_t count, struct ferry__objmgr_result *results)
{
	return ferry__objmgr_pull_all(ferry__node_objmgr(n->node), ids, count, results);
}
