/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's metrics endpoint (--metrics-port, issue 25): the transfer, runtime and scheduling
 * counters (common/metrics.h) and, read at each scrape on the node's loop, its store's rows and
 * its object manager's and workers' gauges.
 */
#include <errno.h>

#include "common/log.h"
#include "common/metrics_http.h"
#include "node/node_int.h"
#include "node/rt_int.h"
#include "transport/objmgr.h"

#define COMP "node"

static void collect(struct ferry__metric_buf *b, void *arg)
{
	struct ferry__node *node = arg;
	struct ferry__objmgr_stats st = {0};

	if (node->store)
		ferry__plasma_server_metrics(node->store, b);
	if (node->om)
		ferry__objmgr_get_stats(node->om, &st);
	ferry__metric_put(b, "ferry_transfer_pulls_in_flight", "gauge",
			  "Pulls into this store under way", (double)st.pulls_in_flight);
	ferry__metric_put(b, "ferry_transfer_bytes_in_flight", "gauge",
			  "Bytes of the pulls under way", (double)st.bytes_in_flight);
	ferry__metric_put(b, "ferry_transfer_served_total", "counter",
			  "Pull requests of other nodes answered", (double)st.requests_served);
	ferry__metric_put(b, "ferry_transfer_served_bytes_total", "counter",
			  "Bytes sent to other nodes", (double)st.bytes_served);
	if (node->rt) {
		ferry__metric_printf(b,
				     "# HELP ferry_runtime_workers Worker processes by state\n"
				     "# TYPE ferry_runtime_workers gauge\n"
				     "ferry_runtime_workers{state=\"idle\"} %u\n"
				     "ferry_runtime_workers{state=\"leased\"} %u\n"
				     "ferry_runtime_workers{state=\"starting\"} %u\n",
				     ferry__rt_pool_count(node->rt, W_IDLE),
				     ferry__rt_pool_count(node->rt, W_LEASED) +
					     ferry__rt_pool_count(node->rt, W_ASSIGNING),
				     ferry__rt_pool_count(node->rt, W_STARTING));
		ferry__metric_put(b, "ferry_runtime_lease_queue_length", "gauge",
				  "Lease requests waiting for resources or a worker",
				  (double)node->queue_length);
	}
}

static int start_on_loop(void *arg)
{
	struct ferry__node *node = arg;
	struct ferry__metrics_opts o = {
		.ip = node->ip,
		.port = node->opts.metrics_port,
		.groups = FERRY__MG_TRANSFER | FERRY__MG_RUNTIME | FERRY__MG_SCHED,
		.collect = collect,
		.arg = node,
	};

	return ferry__metrics_server_start(node->loop, &o, &node->metrics);
}

int ferry__node_metrics_start(struct ferry__node *node)
{
	if (!node->opts.metrics_port)
		return 0;
	return ferry__loop_call(node->loop, start_on_loop, node);
}

static int stop_on_loop(void *arg)
{
	struct ferry__node *node = arg;

	ferry__metrics_server_stop(node->metrics);
	node->metrics = NULL;
	return 0;
}

void ferry__node_metrics_stop(struct ferry__node *node)
{
	if (node->metrics && node->loop_started)
		(void)ferry__loop_call(node->loop, stop_on_loop, node);
}

uint16_t ferry__node_metrics_port(const struct ferry__node *node)
{
	return node->metrics ? ferry__metrics_server_port(node->metrics) : 0;
}

const char *ferry__node_ip(const struct ferry__node *node)
{
	return node->ip;
}
