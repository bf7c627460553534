/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An owner's connections to other nodes' runtime sockets, for leases placed there (a
 * LeaseGrant "retry at", node/rt_sched.c): one per node, opened at the first placement there
 * and kept until it closes. Loop thread only (lease.c calls in).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/log.h"
#include "runtime/dial.h"
#include "runtime/rt.h"
#include "runtime/task.h"
#include "transport/objmgr.h"

#define COMP "runtime"
#define FRAME_MAX (64u << 20) /* runtime.fbs: the receiver's frame cap */

struct remote {
	struct remote *next;	      /* all of them */
	struct ferry_node_id id;      /* the node */
	struct ferry__conn *conn;     /* its runtime socket; the entry goes at its close */
	struct ferry__rt_endpoint ep; /* where (its workers listen on its ip) */
};

static struct remote *remotes;

/* Nodes the GCS said are dead, the latest DEAD_KEPT: a "retry at" one of them (from a node that
 * has not heard yet) is not dialled (a stopped host may still accept a connection). */
#define DEAD_KEPT 64
static struct ferry_node_id dead[DEAD_KEPT];
static unsigned ndead;

/* Connect to the runtime endpoint of the node advertised as @address (its GCS address
 * string): its Unix socket on this host, TCP with the token on another (runtime/dial.h). */
static int dial_node(const char *address, const struct ferry__conn_callbacks *cb,
		     struct ferry__rt_endpoint *ep, struct ferry__conn **out)
{
	struct ferry__conn_opts o = {.cb = cb, .max_message_bytes = FRAME_MAX};
	int ret;

	if (!address || ferry__rt_node_endpoint(address, ep) < 0)
		return -EINVAL;
	ret = ferry__rt_dial(ferry__rt.loop, ep, &o, out);
	return ret < 0 ? ret : 0;
}

int ferry__rt_nodes_get(const struct ferry_node_id *id, const char *address,
			const struct ferry__conn_callbacks *cb, struct ferry__conn **out)
{
	struct remote *r;
	int ret;

	for (r = remotes; r; r = r->next)
		if (!memcmp(&r->id, id, sizeof(*id)) && r->conn) {
			*out = r->conn;
			return 0;
		}
	if (ferry__rt_nodes_is_dead(id))
		return -EHOSTDOWN;
	r = ferry__calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	ret = dial_node(address, cb, &r->ep, &r->conn);
	if (ret < 0) {
		ferry__free(r);
		return ret;
	}
	r->id = *id;
	r->next = remotes;
	remotes = r;
	*out = r->conn;
	return 1;
}

int ferry__rt_nodes_endpoint(const struct ferry__conn *conn, struct ferry__rt_endpoint *out)
{
	for (struct remote *r = remotes; r; r = r->next)
		if (r->conn == conn) {
			*out = r->ep;
			return 0;
		}
	return -ENOENT;
}

bool ferry__rt_nodes_forget(struct ferry__conn *conn)
{
	for (struct remote **at = &remotes; *at; at = &(*at)->next) {
		struct remote *r = *at;

		if (r->conn == conn) {
			*at = r->next;
			ferry__free(r);
			return true;
		}
	}
	return false;
}

void ferry__rt_nodes_mark_dead(const struct ferry_node_id *id)
{
	if (!ferry__rt_nodes_is_dead(id))
		dead[ndead++ % DEAD_KEPT] = *id;
}

bool ferry__rt_nodes_is_dead(const struct ferry_node_id *id)
{
	for (unsigned i = 0; i < ndead && i < DEAD_KEPT; i++)
		if (!memcmp(&dead[i], id, sizeof(*id)))
			return true;
	return false;
}

struct ferry__conn *ferry__rt_nodes_find(const struct ferry_node_id *id)
{
	for (struct remote *r = remotes; r; r = r->next)
		if (!memcmp(&r->id, id, sizeof(*id)))
			return r->conn;
	return NULL;
}

size_t ferry__rt_nodes_queued_bytes(void)
{
	size_t n = 0;

	for (struct remote *r = remotes; r; r = r->next)
		n += ferry__conn_queued_bytes(r->conn);
	return n;
}

void ferry__rt_nodes_flush(void)
{
	for (struct remote *r = remotes; r; r = r->next)
		ferry__conn_flush(r->conn);
}

void ferry__rt_nodes_send_all(uint16_t type, const void *payload, size_t len)
{
	for (struct remote *r = remotes; r; r = r->next)
		(void)ferry__conn_send(r->conn, type, payload, len); /* a closing one: on_close */
}

void ferry__rt_nodes_close_all(void)
{
	/* on_close comes later and forgets each (ferry__rt_nodes_forget). */
	for (struct remote *r = remotes; r; r = r->next)
		ferry__conn_close(r->conn);
}

void ferry__rt_nodes_fini(void)
{
	while (remotes) { /* only if the loop ended before their on_close */
		struct remote *r = remotes;

		remotes = r->next;
		ferry__free(r);
	}
}
