/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The peer and step bookkeeping shared by the object manager's TCP and RDMA pull engines. The
 * DESIGN is at the top of objmgr_peer.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/objmgr_peer.h"

#define COMP "objmgr"

void ferry__objmgr_peer_set_init(struct ferry__objmgr_peer_set *set,
				 const struct ferry__objmgr_peer_ops *ops, struct ferry__loop *loop,
				 unsigned timeout_ms)
{
	set->ops = ops;
	set->loop = loop;
	set->timeout_ms = timeout_ms;
	set->list = NULL;
}

struct ferry__objmgr_peer *ferry__objmgr_peer_find(struct ferry__objmgr_peer_set *set,
						   const char *key)
{
	for (struct ferry__objmgr_peer *peer = set->list; peer; peer = peer->next)
		if (!strcmp(peer->key, key))
			return peer;
	return NULL;
}

int ferry__objmgr_peer_get(struct ferry__objmgr_peer_set *set, const char *key, const char *ip,
			   uint16_t port, struct ferry__objmgr_peer **out)
{
	const struct ferry__objmgr_peer_ops *ops = set->ops;
	struct ferry__objmgr_peer *peer = ferry__objmgr_peer_find(set, key);
	char *mem;
	int ret;

	if (peer) {
		*out = peer;
		return 0;
	}
	mem = ferry__calloc(1, ops->peer_size);
	if (!mem)
		return -ENOMEM;
	peer = (struct ferry__objmgr_peer *)(void *)(mem + ops->peer_offset);
	peer->set = set;
	snprintf(peer->key, sizeof(peer->key), "%s", key);
	ret = ops->connect(peer, ip, port);
	if (ret < 0) {
		ferry__free(mem);
		return ret;
	}
	peer->next = set->list;
	set->list = peer;
	*out = peer;
	return 0;
}

static void step_go(struct ferry__objmgr_step *s)
{
	const struct ferry__objmgr_peer_ops *ops = s->peer->set->ops;
	int ret;

	s->started = true;
	ret = ops->go(s);
	if (ret < 0)
		ops->fail(s, ret);
}

void ferry__objmgr_peer_connected(struct ferry__objmgr_peer *peer, int status)
{
	const struct ferry__objmgr_peer_ops *ops = peer->set->ops;
	struct ferry__objmgr_step *s, *next;

	if (status < 0) {
		FLOG_INFO(COMP, "cannot connect %sto %s: %s", ops->over, peer->key,
			  ferry_strerror(-status));
		ferry__objmgr_peer_drop(peer,
					status == -ETIMEDOUT ? -ETIMEDOUT : ops->connect_error);
		return;
	}
	peer->up = true;
	for (s = peer->steps; s; s = next) {
		next = s->next;
		if (!s->started)
			step_go(s);
	}
}

void ferry__objmgr_peer_closed(struct ferry__objmgr_peer *peer, int reason)
{
	FLOG_INFO(COMP, "%sendpoint to %s closed: %s", peer->set->ops->name, peer->key,
		  ferry_strerror(-reason));
	ferry__objmgr_peer_drop(peer, reason == -ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET);
}

void ferry__objmgr_peer_drop(struct ferry__objmgr_peer *peer, int reason)
{
	struct ferry__objmgr_peer_set *set = peer->set;
	const struct ferry__objmgr_peer_ops *ops = set->ops;
	struct ferry__objmgr_step *s;

	for (struct ferry__objmgr_peer **pp = &set->list; *pp; pp = &(*pp)->next) {
		if (*pp == peer) {
			*pp = peer->next;
			break;
		}
	}
	while ((s = peer->steps)) {
		ops->fail(s, reason);
		if (peer->steps == s) /* its engine callback finishes it: no longer on the peer */
			ferry__objmgr_step_detach(s);
	}
	ops->close(peer);
	ferry__free((char *)peer - ops->peer_offset);
}

void ferry__objmgr_peer_drop_all(struct ferry__objmgr_peer_set *set, int reason)
{
	while (set->list)
		ferry__objmgr_peer_drop(set->list, reason);
}

static void step_timeout(struct ferry__loop_timer *t, int status)
{
	struct ferry__objmgr_step *s = FERRY_CONTAINER_OF(t, struct ferry__objmgr_step, deadline);
	struct ferry__objmgr_peer_set *set = t->data;

	if (status < 0)
		return;
	FLOG_WARN(COMP, "%spull from %s:%u timed out", set->ops->name, s->ip, s->port);
	/* @s may be gone after either (handed back) */
	if (s->peer)
		ferry__objmgr_peer_drop(s->peer, -ETIMEDOUT);
	else
		set->ops->fail(s, -ETIMEDOUT);
	if (set->ops->kick)
		set->ops->kick(set);
}

void ferry__objmgr_step_attach(struct ferry__objmgr_step *s, struct ferry__objmgr_peer *peer,
			       const char *ip, uint16_t port)
{
	struct ferry__objmgr_peer_set *set = peer->set;

	s->ip = ip;
	s->port = port;
	s->peer = peer;
	s->next = peer->steps;
	peer->steps = s;
	s->deadline.data = set;
	(void)ferry__loop_timer_start(set->loop, &s->deadline, set->timeout_ms, 0, step_timeout);
	if (peer->up)
		step_go(s);
}

void ferry__objmgr_step_detach(struct ferry__objmgr_step *s)
{
	struct ferry__objmgr_peer *peer = s->peer;

	if (!peer)
		return;
	for (struct ferry__objmgr_step **pp = &peer->steps; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	if (peer->set->ops->detach)
		peer->set->ops->detach(s);
	s->peer = NULL;
}

void ferry__objmgr_step_end(struct ferry__objmgr_step *s)
{
	(void)ferry__loop_timer_stop(&s->deadline);
	ferry__objmgr_step_detach(s);
}
