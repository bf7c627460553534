/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ObjectsFree from an owner on another node (runtime/free.c): it dropped its last reference to
 * objects of which this node may hold a copy, the primary its task made here or one pulled, and
 * this node deletes them from its store, as Ray's owners free every copy. Only the sender's own
 * objects go: the store names each object's owner, and the peer's ID is the one its
 * RuntimeConnect proved (its secret or the cluster token). Loop thread only.
 */
#include <errno.h>

#include "common/log.h"
#include "node/node_int.h"
#include "node/rt_int.h"
#include "plasma/server.h"

#define COMP "node"

void ferry__rt_objects_free(struct rt_peer *p, const struct ferry__rt_msg *m)
{
	uint32_t deleted = 0, others = 0;

	if (!p->rt->node->store)
		return;
	for (uint32_t i = 0; i < m->free.count; i++) {
		struct ferry_object_id id = ferry__wire_objects_free_object_ids_at(m->free.v, i);
		int r = ferry__plasma_server_delete_if_owned(p->rt->node->store, &id, &p->id);

		deleted += r >= 0;
		others += r == -EPERM;
	}
	/* Another owner's object named: a confused peer, not one to trust with the rest. */
	if (others)
		FLOG_WARN(COMP, "runtime: pid %d asked to free %u objects it does not own", p->pid,
			  others);
	FLOG_DEBUG(COMP, "runtime: %u of %u objects freed by their owner", deleted, m->free.count);
}
