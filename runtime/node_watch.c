/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A driver follows node deaths (issue 24, fault tolerance) on the GCS's NODE_DEATHS channel. A
 * node whose heartbeats stopped (a host that died or was cut off) may never close its sockets,
 * so without this its tasks would wait for TCP: at the event, what the driver has there ends at
 * once (lease.c, ferry__rt_lease_node_dead): its leased workers' sockets and its runtime socket
 * close, their tasks retry elsewhere, requests placed there are asked again of our node.
 * Workers do not subscribe: one subscription per worker would load the GCS, and their nested
 * tasks still learn of the death when the dead node's sockets close.
 * The GCS client calls on_event on its own thread; the work is posted to the runtime's loop.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/loop.h"
#include "runtime/rt.h"
#include "runtime/task.h"

#define COMP "runtime"

/* Whether events still go to the loop: on_event (the GCS client's thread) and stop (the one
 * calling ferry_shutdown, before the loop goes) meet under the lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool watching;

static void on_dead(void *arg, int status)
{
	struct ferry_node_id *id = arg;

	if (status == 0)
		ferry__rt_lease_node_dead(id);
	ferry__free(id);
}

static void on_event(void *arg, const struct ferry_gcs_event *ev)
{
	struct ferry_gcs_node_info info;
	struct ferry_node_id *id;

	(void)arg;
	if (ferry_gcs_event_node(ev, &info) < 0 || info.state != FERRY_GCS_NODE_DEAD)
		return;
	id = ferry__malloc(sizeof(*id));
	if (!id) { /* its sockets' close still tells us, later */
		FLOG_WARN(COMP, "a node's death: %s", ferry_strerror(-ENOMEM));
		return;
	}
	*id = info.id;
	pthread_mutex_lock(&lock);
	if (!watching || ferry__loop_post(ferry__rt.loop, on_dead, id) < 0)
		ferry__free(id);
	pthread_mutex_unlock(&lock);
}

int ferry__rt_node_watch_start(void)
{
	int ret;

	if (!ferry__rt.gcs || ferry__rt.worker)
		return 0;
	pthread_mutex_lock(&lock); /* from the first event on */
	watching = true;
	pthread_mutex_unlock(&lock);
	ret = ferry_gcs_subscribe(ferry__rt.gcs, FERRY_GCS_CH_NODE_DEATHS, NULL, 0, on_event, NULL);
	if (ret < 0) {
		pthread_mutex_lock(&lock);
		watching = false;
		pthread_mutex_unlock(&lock);
		FLOG_WARN(COMP,
			  "cannot follow node deaths (a dead node's tasks wait for its "
			  "sockets to close): %s",
			  ferry_strerror(ret));
		return ret;
	}
	return 0;
}

/* Before the loop goes: on_event posts no more. No unsubscribe: the subscription ends with the
 * client at detach (init.c), and a call here would wait for a GCS that may be gone. */
void ferry__rt_node_watch_stop(void)
{
	pthread_mutex_lock(&lock);
	watching = false;
	pthread_mutex_unlock(&lock);
}
