/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The global scheduler's client: what a node's local scheduler calls for a task it cannot run
 * itself (no resources now, a queue over its threshold, most input bytes elsewhere). It asks a
 * ferry-sched instance where the task should go and gets a node (its ID and GCS address) back.
 *
 * DESIGN: the client lives on the caller's loop (the node's). It finds the ferry-sched
 * instances in the GCS KV (namespace FERRY__SCHED_KV_NS, key an instance ID, value its
 * "host:port") and talks to one of them, picked by a hash of this node's ID so that several
 * instances share the nodes. Requests made in one loop turn go out in one SchedPlace batch.
 * Every request is kept until its reply: when the connection closes, or no reply comes within
 * the reply deadline, the outstanding ones are sent again to the next instance (a late
 * duplicate reply is ignored: a request is answered once). With no instance reachable after a
 * bounded number of attempts, each waiting request's callback gets -EHOSTUNREACH and the node
 * keeps the task itself.
 *
 * Thread model: every function must be called on @loop's thread (or before the loop runs), and
 * every callback runs there.
 */
#ifndef FERRY_SCHED_CLIENT_H
#define FERRY_SCHED_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/id.h>

#include "node/resources.h" /* struct ferry__res: the names and fixed-point amounts */
#include "sched/policy.h"   /* enum ferry__sched_strategy */

/* The GCS KV namespace where ferry-sched instances register (key: ID, value: "host:port"). */
#define FERRY__SCHED_KV_NS "ferry:sched"
/* A group's scheduler instances register under this prefix + the group's name; its nodes put
 * their ID (hex, empty value) under FERRY__SCHED_MEMBER_KV_PREFIX + the name. */
#define FERRY__SCHED_GROUP_KV_PREFIX "ferry:sched:group:"
#define FERRY__SCHED_MEMBER_KV_PREFIX "ferry:sched:member:"
/* Largest batch one SchedPlace carries (the server refuses more); resources and inputs per
 * item as the policy weighs them. */
#define FERRY__SCHED_BATCH_MAX 4096
#define FERRY__SCHED_ITEM_RES_MAX FERRY__SCHED_DEMAND_MAX
#define FERRY__SCHED_ITEM_INPUTS_MAX FERRY__SCHED_INPUTS_MAX
/* Most hops an item crosses (node -> group -> global -> group); a group name's longest. */
#define FERRY__SCHED_HOPS_MAX 3
#define FERRY__SCHED_GROUP_NAME_MAX 63

struct ferry__loop;
struct ferry_gcs_client;
struct ferry__sched_client;

/* A task's input object as the caller knows it: a node that holds a copy, and its size. */
struct ferry__sched_place_input {
	struct ferry_node_id node; /* holder of a copy */
	uint64_t bytes;		   /* data + metadata */
};

/* One task to place. Every pointer is borrowed for the ferry__sched_client_place() call. */
struct ferry__sched_place_req {
	uint64_t id;		       /* the caller's; unique among its outstanding requests */
	const struct ferry__res *res;  /* what the task needs (distinct names, amounts > 0) */
	size_t nres;		       /* <= FERRY__SCHED_ITEM_RES_MAX */
	int strategy;		       /* enum ferry__sched_strategy */
	struct ferry_node_id affinity; /* NODE_AFFINITY's node */
	bool soft; /* NODE_AFFINITY: may go elsewhere when it cannot run there */
	const struct ferry__sched_place_input *inputs; /* where its inputs are */
	size_t ninputs;		/* only the first FERRY__SCHED_ITEM_INPUTS_MAX are sent */
	uint8_t hops;		/* a scheduler forwarding it: the hops so far + 1; a node: 0 */
	const char *from_group; /* a group sending it up: its name (<= 63 bytes); else NULL */
};

/*
 * The answer, exactly once per request placed (unless cancelled first): status 0 with @node and
 * @node_address (the node's address as registered in the GCS: "ip=A;tcp=P;..."), both valid
 * for the call only (the address is "" when the scheduler has not seen the node's record); or
 *   -ENOSPC	     no node could ever run it (keep it as infeasible, warn);
 *   -EHOSTDOWN	     hard NODE_AFFINITY to a node that is dead, unknown or too small;
 *   -EINVAL	     the scheduler found the request malformed (an unknown resource kind);
 *   -EAGAIN	     the scheduler knows no node yet (it has just started);
 *   -EHOSTUNREACH   no ferry-sched instance answered after the bounded retries;
 *   -ECANCELED	     ferry__sched_client_free() with the request still waiting.
 * @node and @node_address are NULL when status < 0.
 */
typedef void (*ferry__sched_place_fn)(void *arg, int status, const struct ferry_node_id *node,
				      const char *node_address);

/*
 * ferry__sched_client_new() - a client on @loop that finds instances through @gcs (a client
 * running on the same @loop; borrowed, must outlive this one), authenticates with @token
 * (copied) and speaks for node @self (copied; its hash picks the instance). Nothing is
 * connected until the first request. 0 and *@out, -EINVAL, -ENOMEM.
 */
int ferry__sched_client_new(struct ferry__loop *loop, struct ferry_gcs_client *gcs,
			    const void *token, size_t token_len, const struct ferry_node_id *self,
			    struct ferry__sched_client **out);

/*
 * ferry__sched_client_place() - ask where @req's task goes; @cb(@arg, ...) follows on the loop
 * thread, never from inside this call. Returns 0, or -EINVAL (a malformed request: too many
 * resources, a strategy out of range, an ID already outstanding, logged), -ENOMEM,
 * -ECANCELED (from a callback run by ferry__sched_client_free()); @cb is then never called.
 */
int ferry__sched_client_place(struct ferry__sched_client *c,
			      const struct ferry__sched_place_req *req, ferry__sched_place_fn cb,
			      void *arg);

/*
 * ferry__sched_client_cancel() - forget request @id: its callback is never called (a reply that
 * comes later is dropped). 0, or -ENOENT (not outstanding: answered or never placed).
 */
int ferry__sched_client_cancel(struct ferry__sched_client *c, uint64_t id);

/*
 * ferry__sched_client_free() - every waiting request's callback gets -ECANCELED (from inside
 * this call), the connection is closed. NULL is a no-op. Not from inside a callback.
 */
void ferry__sched_client_free(struct ferry__sched_client *c);

/* Timing (tests): a reply deadline, after which the outstanding requests go to another
 * instance; the pause between two rounds over every instance; the rounds before -EHOSTUNREACH.
 * Zeros keep the defaults (2000 ms, 200 ms, 3). */
void ferry__sched_client_set_timing(struct ferry__sched_client *c, unsigned reply_timeout_ms,
				    unsigned retry_pause_ms, unsigned rounds);

/*
 * ferry__sched_client_set_namespace() - find the instances under KV namespace @ns (copied, at
 * most 127 bytes) instead of FERRY__SCHED_KV_NS: a node of a group asks its group's scheduler
 * (FERRY__SCHED_GROUP_KV_PREFIX + name). Before the first request. 0 or -EINVAL.
 */
int ferry__sched_client_set_namespace(struct ferry__sched_client *c, const char *ns);

/* ferry__sched_client_hops() - inside a place callback with status 0: the schedulers the
 * request reached (1: the one asked placed it; 0: an instance that does not tell). */
unsigned ferry__sched_client_hops(const struct ferry__sched_client *c);

/* ferry__sched_group_name_ok() - a group name: 1..63 bytes of [A-Za-z0-9_.-] (it is part of
 * KV namespaces). */
bool ferry__sched_group_name_ok(const char *name);

/* ferry__sched_instance_parse() - an instance's KV value "host:port" ("[v6]:port" as
 * registered) into @host (NUL-terminated) and *@port. 0 or -EINVAL. */
int ferry__sched_instance_parse(const void *value, size_t size, char *host, size_t host_size,
				uint16_t *port);

/* Requests waiting for their reply (tests, stats). */
size_t ferry__sched_client_outstanding(const struct ferry__sched_client *c);

#endif
