/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's registration and heartbeats: its resources found and registered, then a beat
 * (a loop timer) that reports the load when it changed (see node.c's DESIGN).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/log.h"
#include "common/util.h"
#include "gcs/liveness.h"
#include "node/node_int.h"
#include "sched/client.h"
#include "transport/objmgr.h"

#define COMP "node"

void ferry__node_set_load(struct ferry__node *node, const struct ferry__res_set *avail,
			  uint32_t queue_length, uint64_t mean_task_us)
{
	pthread_mutex_lock(&node->lock);
	for (uint32_t i = 0; avail && i < avail->count; i++) {
		const struct ferry__res *r = &avail->items[i];

		if (ferry__res_set_get(&node->total, r->name) >= 0 &&
		    ferry__res_set_get(&node->avail, r->name) != r->amount) {
			ferry__res_set_put(&node->avail, r->name, r->amount);
			node->load_changed = true;
		}
	}
	if (node->queue_length != queue_length || node->mean_task_us != mean_task_us)
		node->load_changed = true;
	node->queue_length = queue_length;
	node->mean_task_us = mean_task_us;
	pthread_mutex_unlock(&node->lock);
}

void ferry__node_set_workers(struct ferry__node *node, uint32_t idle, uint32_t leased,
			     uint32_t starting)
{
	const uint32_t now[3] = {idle, leased, starting};

	pthread_mutex_lock(&node->lock);
	if (memcmp(node->workers, now, sizeof(now))) {
		memcpy(node->workers, now, sizeof(now));
		node->load_changed = true;
	}
	pthread_mutex_unlock(&node->lock);
}

static void beat_failed(int status)
{
	if (status < 0 && status != -ETIMEDOUT && status != -ECANCELED)
		FLOG_WARN(COMP, "heartbeat refused: %s", ferry_strerror(-status));
}

static void reregister(struct ferry__node *node);

static void on_load_reply(void *arg, int status, void *result)
{
	struct ferry__node *node = arg;

	ferry_gcs_free(result);
	if (status < 0) {
		pthread_mutex_lock(&node->lock);
		node->load_changed = true; /* try again with the next beat */
		pthread_mutex_unlock(&node->lock);
	}
	node->beat_busy = false;
	if (status == -ENOENT && !node->gcs_gone)
		reregister(node);
	else
		beat_failed(status);
}

/* The node's load into @load (its resources into @res), a new version. With node->lock held. */
static void fill_load(struct ferry__node *node, struct ferry_gcs_node_load *load,
		      struct ferry_gcs_resource_load res[FERRY__RES_MAX])
{
	for (uint32_t i = 0; i < node->total.count; i++)
		res[i] = (struct ferry_gcs_resource_load){
			node->total.items[i].name, node->total.items[i].amount,
			ferry__res_set_get(&node->avail, node->total.items[i].name)};
	*load = (struct ferry_gcs_node_load){0};
	load->id = node->id;
	load->version = ++node->load_version;
	load->queue_length = node->queue_length;
	load->mean_task_us = node->mean_task_us;
	load->workers_idle = node->workers[0];
	load->workers_leased = node->workers[1];
	load->workers_starting = node->workers[2];
	load->nresources = node->total.count;
	load->resources = res;
	node->load_changed = false;
}

/* Send the node's load (a heartbeat too). Called with node->lock held; drops it. Loop thread. */
static void report_load(struct ferry__node *node)
{
	struct ferry_gcs_resource_load res[FERRY__RES_MAX];
	struct ferry_gcs_node_load load;
	int ret;

	fill_load(node, &load, res);
	pthread_mutex_unlock(&node->lock);
	/* The message is built before the call returns: @load may live on this stack. */
	ret = ferry_gcs_node_report_load_async(node->gcs, &load, on_load_reply, node);
	if (ret < 0)
		on_load_reply(node, ret, NULL);
}

static void fill_info(struct ferry__node *node, struct ferry_gcs_node_info *info)
{
	info->id = node->id;
	info->address = node->address;
	info->cpu = (double)ferry__res_set_get(&node->total, "CPU") / FERRY_GCS_RESOURCE_UNIT;
	info->gpu = (double)ferry__res_set_get(&node->total, "GPU") / FERRY_GCS_RESOURCE_UNIT;
	info->memory_bytes =
		(double)(ferry__res_set_get(&node->total, "memory") / FERRY_GCS_RESOURCE_UNIT);
	info->store_capacity_bytes = ferry__objmgr_store_capacity(node->om);
}

/* The answer to registering again: the GCS knows us again (its load goes with the next beat),
 * or it had declared us dead, which is final: a node ID never comes back. Loop thread. */
static void on_reregister_reply(void *arg, int status, void *result)
{
	struct ferry__node *node = arg;

	ferry_gcs_free(result);
	node->reregistering = false;
	if (status >= 0) {
		FLOG_WARN(COMP, "the GCS did not know this node (restarted without a WAL?): "
				"registered again with the same ID and address");
		pthread_mutex_lock(&node->lock);
		node->load_changed = true;
		pthread_mutex_unlock(&node->lock);
	} else if (status == -EEXIST && !node->declared_dead) {
		node->declared_dead = true;
		FLOG_ERROR(COMP, "the GCS declared this node dead (node IDs never come back): "
				 "stopping; start a new node to rejoin");
		if (node->opts.on_declared_dead)
			node->opts.on_declared_dead(node->opts.dead_arg);
	} else if (status < 0) {
		beat_failed(status);
	}
}

/* A heartbeat got -ENOENT: an in-memory GCS that restarted forgot us (register again, same ID
 * and address), or the GCS declared us dead (the register says -EEXIST). Loop thread. */
static void reregister(struct ferry__node *node)
{
	struct ferry_gcs_node_info info = {0};
	int ret;

	if (node->reregistering || node->declared_dead)
		return;
	fill_info(node, &info);
	node->reregistering = true;
	ret = ferry_gcs_node_register_async(node->gcs, &info, on_reregister_reply, node);
	if (ret < 0)
		on_reregister_reply(node, ret, NULL);
}

static void on_heartbeat_reply(void *arg, int status, void *result)
{
	struct ferry__node *node = arg;
	struct ferry_gcs_beat_info *info = result;

	if (info)
		node->cluster_nodes = info->alive_nodes;
	ferry_gcs_free(result);
	if (status == -ENOENT && !node->gcs_gone) {
		node->beat_busy = false;
		reregister(node);
		return;
	}
	if (status == 0 && !node->gcs_gone) { /* the GCS holds no load of ours (it restarted) */
		pthread_mutex_lock(&node->lock);
		report_load(node);
		return;
	}
	beat_failed(status);
	node->beat_busy = false;
}

/* One beat: the load when it changed (or the GCS asked for it), else a bare heartbeat. A beat
 * whose reply has not come yet (a slow GCS) makes the next one wait: one message a beat at most,
 * as before. Loop thread. */
static void on_beat_timer(struct ferry__loop_timer *t, int status)
{
	struct ferry__node *node = t->data;
	uint64_t now = ferry__now_ms();
	int ret;

	if (status < 0 || node->beat_busy || node->gcs_gone || node->reregistering ||
	    node->declared_dead || now < node->next_beat_ms)
		return;
	pthread_mutex_lock(&node->lock);
	if (node->stopping) {
		pthread_mutex_unlock(&node->lock);
		return;
	}
	/* The timer ticks every heartbeat_ms; a large cluster beats less often, as the GCS
	 * expects (gcs/liveness.h), sized by the count the last beat's reply carried (the node
	 * follows no membership channel). Half a tick early counts, so a small cluster beats each
	 * tick. */
	node->next_beat_ms =
		now + ferry__gcs_beat_interval_ms(node->opts.heartbeat_ms, node->cluster_nodes) -
		node->opts.heartbeat_ms / 2;
	node->beat_busy = true;
	if (node->load_changed) {
		report_load(node);
		return;
	}
	pthread_mutex_unlock(&node->lock);
	ret = ferry_gcs_node_beat_async(node->gcs, &node->id, on_heartbeat_reply, node);
	if (ret < 0)
		on_heartbeat_reply(node, ret, NULL);
}

/* The totals (the store's capacity known by now); everything is free, no task queued yet. The
 * first report goes with the first beat; its version starts at the wall clock (us), so a node
 * restarted under the same ID still reports newer versions than before. */
static int find_resources(struct ferry__node *node)
{
	struct ferry__res_opts ro = {0};
	int ret;

	ro.num_cpus = node->opts.num_cpus;
	ro.num_gpus = node->opts.num_gpus;
	ro.custom = node->opts.resources;
	ro.store_bytes = ferry__objmgr_store_capacity(node->om);
	ret = ferry__res_node_totals(&ro, &node->total);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&node->lock);
	node->avail = node->total;
	node->load_changed = true;
	node->load_version = ferry__wall_ms() * 1000;
	pthread_mutex_unlock(&node->lock);
	return 0;
}

static void start_beats(void *arg, int status)
{
	struct ferry__node *node = arg;

	if (status == 0)
		(void)ferry__loop_timer_start(node->loop, &node->beat_timer,
					      node->opts.heartbeat_ms, node->opts.heartbeat_ms,
					      on_beat_timer);
}

/* --group: the group's scheduler finds its nodes under its member namespace (sched/server.h). */
static int join_group(struct ferry__node *node)
{
	char ns[128], hex[2 * sizeof(node->id.bytes) + 1];
	int ret;

	if (!node->opts.sched_group)
		return 0;
	snprintf(ns, sizeof(ns), "%s%s", FERRY__SCHED_MEMBER_KV_PREFIX, node->opts.sched_group);
	ferry_id_to_hex(node->id.bytes, sizeof(node->id.bytes), hex, sizeof(hex));
	ret = ferry_gcs_kv_put(node->gcs, ns, strlen(ns), hex, strlen(hex), "", 0, true);
	if (ret < 0)
		FLOG_ERROR(COMP, "joining scheduler group %s: %s", node->opts.sched_group,
			   ferry_strerror(-ret));
	return ret < 0 ? ret : 0;
}

int ferry__node_register(struct ferry__node *node)
{
	struct ferry_gcs_node_info info = {0};
	int ret;

	ret = find_resources(node);
	if (ret < 0)
		return ret;
	fill_info(node, &info);
	ret = ferry_gcs_node_register(node->gcs, &info);
	if (ret < 0) {
		FLOG_ERROR(COMP, "node registration failed: %s", ferry_strerror(-ret));
		return ret;
	}
	ferry__node_check_addresses(node->gcs, &node->id, node->address);
	ret = join_group(node);
	if (ret < 0)
		return ret;
	/* Its first load before it says ready: a scheduler that sees a node alive but without a
	 * load report places nothing there, and a driver started at once after `ferry start`
	 * would lease every worker it needs on the nodes that reported (a SPREAD burst then
	 * never reaches this one). A failure only leaves it to the first beat. */
	{
		struct ferry_gcs_resource_load res[FERRY__RES_MAX];
		struct ferry_gcs_node_load load;

		pthread_mutex_lock(&node->lock);
		fill_load(node, &load, res);
		pthread_mutex_unlock(&node->lock);
		ret = ferry_gcs_node_report_load(node->gcs, &load);
		if (ret < 0) {
			FLOG_WARN(COMP, "first load report failed: %s", ferry_strerror(-ret));
			pthread_mutex_lock(&node->lock);
			node->load_changed = true;
			pthread_mutex_unlock(&node->lock);
		}
	}
	return ferry__loop_post(node->loop, start_beats, node);
}
