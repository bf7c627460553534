/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched's body: the global scheduler. It follows the GCS's membership (nodes channel) and
 * load reports (node-load channel) into a placement level (sched/policy.h), one child per node,
 * and answers SchedPlace batches from nodes' local schedulers (sched/client.h) on a TCP port
 * that takes the cluster token. Each instance registers itself in the GCS KV
 * (FERRY__SCHED_KV_NS, key its ID in hex, value "host:port") and removes itself on a clean stop.
 *
 * The tree (issue 24): with opts.group, the instance is a group's scheduler. It registers under
 * FERRY__SCHED_GROUP_KV_PREFIX + the name, takes as its nodes those listed under
 * FERRY__SCHED_MEMBER_KV_PREFIX + the name (following only their load reports, key by key),
 * places a node's task on one of them when one can run it now, else forwards it up to the
 * global level (sched/client.h, hops 1, from_group its name), and every report period sends
 * its summary (SchedGroupLoad) to every global instance (sched/uplink.h). A global instance
 * takes each group as one child (its summed load; its members map to it for locality) in
 * place of the group's nodes, and a task it places on a group goes down to that group's
 * scheduler (hops 2), never back to the group that sent it up. A level that cannot get an
 * answer from the other one answers with its own best choice, or the error.
 *
 * Thread model: everything runs on the loop given at create.
 */
#ifndef FERRY_SCHED_SERVER_H
#define FERRY_SCHED_SERVER_H

#include <stddef.h>
#include <stdint.h>

struct ferry__loop;
struct ferry__sched_server;

/* Options; zeros are defaults except gcs_address and the token. */
struct ferry__sched_server_opts {
	const char *host;	 /* address to listen on; NULL: "0.0.0.0" */
	uint16_t port;		 /* 0: any free port (ferry__sched_server_port) */
	const char *advertise;	 /* host registered in the KV; NULL: @host, or when that is a
				     wildcard, the address this host reaches the GCS through */
	const char *gcs_address; /* "host:port" of the GCS (shard 0) */
	const void *token;	 /* the cluster token (copied) */
	size_t token_len;	 /* its bytes */
	size_t max_queued_bytes; /* a client's unsent replies before its requests wait; 0: 4 MiB */
	unsigned stall_timeout_ms; /* a client over that for this long is cut off; 0: 10 s */
	const char *group;    /* NULL: the global level; else this group's scheduler (1..63 bytes
			      of [A-Za-z0-9_.-]): see the tree below */
	unsigned max_clients; /* connections past their handshake at once; one more is refused
				 (-EUSERS); 0: what the open-file limit leaves room for
				 (ferry__conn_server_fd_room) */
};

/*
 * ferry__sched_server_create() - listen, connect to the GCS and subscribe (in the background:
 * until the GCS's snapshots arrive, requests are answered -EAGAIN). 0 and *@out, -EINVAL,
 * -ENOMEM, -EADDRINUSE, ...
 */
int ferry__sched_server_create(struct ferry__loop *loop, const struct ferry__sched_server_opts *o,
			       struct ferry__sched_server **out);
uint16_t ferry__sched_server_port(const struct ferry__sched_server *s);
/* The instance's ID in hex (its KV key). */
const char *ferry__sched_server_id(const struct ferry__sched_server *s);

/*
 * ferry__sched_server_stop() - leave the KV (a clean exit), then @done(@arg) on the loop thread
 * (also when the GCS does not answer within its timeout). Call once; then destroy.
 */
void ferry__sched_server_stop(struct ferry__sched_server *s, void (*done)(void *arg), void *arg);

/* ferry__sched_server_destroy() - after the loop stopped. NULL is a no-op. */
void ferry__sched_server_destroy(struct ferry__sched_server *s);

#endif
