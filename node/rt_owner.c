/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Owners that die: a driver killed (or a worker, whose tasks put objects) leaves objects in
 * this node's store, leases and perhaps workers still running its tasks. When the runtime
 * socket of a driver closes and its process is gone (a clean ferry_shutdown frees all of it
 * itself before it exits), the node deletes what it owned from the store, records it dead in
 * the GCS (whose directory then drops its objects) and ends the workers it had leased (their
 * tasks' results have nobody to go to: Ray ends them too). A dead worker's objects go when
 * the pool reaps it. The owner socket either left behind is removed. Loop thread only, like the rest of rt_*.c.
 */
#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <stdio.h>
#include <signal.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/log.h"
#include "node/node_int.h"
#include "node/rt_int.h"
#include "plasma/server.h"

#define COMP "node"

bool ferry__rt_peer_exited(const struct rt_peer *p, int wait_ms)
{
	struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};

	if (p->pidfd < 0) /* no pidfd to be had: the pid, which may have been reused */
		return p->pid > 0 && kill(p->pid, 0) < 0 && errno == ESRCH;
	/* A pidfd is readable once its process exited, zombie or reaped. */
	return poll(&pfd, 1, wait_ms) == 1 && (pfd.revents & POLLIN);
}

static void on_dead_recorded(void *arg, int status, void *result)
{
	(void)arg;
	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		FLOG_WARN(COMP, "runtime: a dead driver not recorded in the GCS: %s",
			  ferry_strerror(status));
}

/* The owner socket a killed owner left in this node's directory (runtime/owner.h's path:
 * "o-<owner hex>.sock" beside the runtime socket). */
static void unlink_owner_socket(struct ferry__node_rt *rt, const char *hex)
{
	char dir[sizeof(rt->path)], path[sizeof(rt->path) + 48];

	snprintf(dir, sizeof(dir), "%s", rt->path);
	snprintf(path, sizeof(path), "%s/o-%s.sock", dirname(dir), hex);
	(void)unlink(path);
}

void ferry__rt_owner_gone(struct ferry__node_rt *rt, const struct ferry_worker_id *id, bool driver)
{
	char hex[FERRY_ID_HEX_MAX];
	int n = rt->node->store ? ferry__plasma_server_delete_owned(rt->node->store, id) : 0;

	ferry_worker_id_to_hex(id, hex, sizeof(hex));
	unlink_owner_socket(rt, hex);
	if (n > 0 || driver)
		FLOG_INFO(COMP, "runtime: %s %s died: %d of its objects deleted from the store",
			  driver ? "driver" : "worker", hex, n);
	if (!driver || !rt->node->gcs)
		return;
	if (ferry_gcs_worker_dead_async(
		    rt->node->gcs, id, FERRY_GCS_EXIT_ERROR,
		    "the driver died (its process ended without ferry_shutdown)", on_dead_recorded,
		    NULL) < 0)
		FLOG_WARN(COMP, "runtime: driver %s's death not recorded in the GCS", hex);
}
