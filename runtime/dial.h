/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One way for the runtime to reach a runtime endpoint (a node's runtime socket, a worker's, an
 * owner's): its Unix socket when the endpoint is on this host, TCP with the cluster token's
 * Handshake when it is on another (its boot id differs) or FERRY_RT_TRANSPORT=tcp says so.
 *
 * Thread model: ferry__rt_dial_setup() before the runtime's loop runs (ferry_init, a worker's
 * start); the rest on any thread, the connection's calls on its loop's.
 */
#ifndef FERRY_RUNTIME_DIAL_H
#define FERRY_RUNTIME_DIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/conn.h"

/* Where an endpoint listens. Zeros: not known. */
struct ferry__rt_endpoint {
	char path[108]; /* its Unix socket on its host, "" none */
	char ip[48];	/* its TCP address, "" none */
	uint16_t port;	/* its TCP port, 0 none */
	char host[40];	/* its host's boot id, "" unknown (taken as this host's) */
};

/*
 * ferry__rt_dial_setup() - the cluster token a TCP dial presents (copied; @len <= 256) and this
 * host's boot id (unreadable: logged, and every endpoint counts as this host's). 0 or -EINVAL.
 */
int ferry__rt_dial_setup(const void *token, size_t len);

/* True when FERRY_RT_TRANSPORT=tcp: TCP even to an endpoint on this host (tests, benches). */
bool ferry__rt_force_tcp(void);

/* True when ferry__rt_dial() would take TCP to @ep. */
bool ferry__rt_dial_tcp(const struct ferry__rt_endpoint *ep);

/*
 * ferry__rt_node_endpoint() - a node's runtime endpoint from its advertised address (the GCS
 * nodes table's text: ip=, rt=, shm=, host=): its store socket's path + ".rt", ip:rt. 0 or
 * -EINVAL (malformed, or neither a store socket nor an rt= port).
 */
int ferry__rt_node_endpoint(const char *node_address, struct ferry__rt_endpoint *out);

/*
 * ferry__rt_dial() - start connecting to @ep with @opts (its handshake is set here on TCP).
 * Returns 0 (Unix) or 1 (TCP) and *@out as ferry__conn_connect_*() do, or -EHOSTUNREACH (on
 * another host and no TCP port known: logged), -EINVAL, or their errors.
 */
int ferry__rt_dial(struct ferry__loop *loop, const struct ferry__rt_endpoint *ep,
		   const struct ferry__conn_opts *opts, struct ferry__conn **out);

/*
 * ferry__rt_dial_node() - connect to a node's runtime endpoint given its advertised address
 * (ferry__rt_node_endpoint(), then ferry__rt_dial()): for an owner that leases from a node of
 * another host (spillback). Returns as ferry__rt_dial().
 */
int ferry__rt_dial_node(struct ferry__loop *loop, const char *node_address,
			const struct ferry__conn_opts *opts, struct ferry__conn **out);

#endif
